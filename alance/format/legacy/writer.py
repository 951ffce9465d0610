"""Streaming writer of v0.1/v0.2 Lance data files (pure: returns bytes, does no IO)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import metadata as _pkg_metadata

import numpy as np
import pyarrow as pa

from alance._proto import file_pb2, table_pb2
from alance.errors import InvalidInputError, SchemaMismatchError
from alance.format.legacy.encode import (
    ByteSink,
    DictionaryState,
    check_type,
    encode_column,
    encode_dictionary_values,
)
from alance.format.legacy.layout import MAJOR_VERSION, PageTable, encode_block, encode_footer
from alance.format.legacy.stats import (
    GroupStats,
    StatisticsCollector,
    StatsRow,
    compute_stats,
    group_stats,
)
from alance.format.schema import LanceField, LanceSchema


@functools.cache
def _default_writer_version() -> tuple[str, str]:
    try:
        return "alance", _pkg_metadata.version("alance")
    except _pkg_metadata.PackageNotFoundError:
        return "alance", "0.0.0"


def _untyped(protos: list[file_pb2.Field]) -> list[file_pb2.Field]:
    """Field protos with ``type`` left unset, as upstream writers leave it in data files."""
    for p in protos:
        p.ClearField("type")
    return protos


class LegacyFileWriter:
    """Writes one v0.2 (or v0.1) data file: one row group per :meth:`write_batch` call, or
    many per :meth:`write_batches` call.

    The writer keeps no data: :meth:`write_batch` returns the bytes to append for the row
    group, :meth:`finish` the tail (page table, statistics, dictionaries, the self-describing
    manifest, metadata and footer). The caller writes them in order, starting at offset 0.

    Values v0.2 cannot hold faithfully (nulls in fixed-width, struct or list columns, empty
    strings in nullable string columns...) raise
    :class:`~alance.errors.UnrepresentableValueError` and leave the writer unchanged.
    """

    def __init__(self, schema: LanceSchema, *, minor_version: int = 2, statistics: bool = True,
                 writer_version: tuple[str, str] | None = None,
                 self_describing: bool = True,
                 dictionaries: Mapping[int, pa.Array] | None = None):
        """Prepare a writer for ``schema`` (field ids as in the dataset manifest).

        ``dictionaries`` seeds the values of dictionary columns (field id -> values), e.g.
        the dataset's existing dictionary: keys are written against it and new values are
        appended (see :attr:`dictionaries`), so keys written before stay valid.
        """
        if minor_version not in (1, 2):
            raise InvalidInputError("legacy files have minor version 1 or 2")
        if not schema.fields:
            raise InvalidInputError("cannot write a data file without columns")
        for f in schema.fields:
            check_type(f, f.data_type, f.name)  # refuses types v0.2 cannot store
        self._schema = schema.clone()
        self._minor = minor_version
        self._writer_version = writer_version or _default_writer_version()
        self._self_describing = self_describing
        self._stats = StatisticsCollector.for_schema(self._schema) if statistics else None
        self._dicts = DictionaryState(dict(dictionaries or {}))
        ids = self._schema.field_ids()
        self._min_id, self._max_id = min(ids), max(ids)
        self._pages: list[np.ndarray] = []  # page table columns, per write call
        self._batch_offsets: list[np.ndarray] = []  # first row of each group, per write call
        self._position = 0
        self._num_rows = 0
        self._finished = False

    # -- state ---------------------------------------------------------------------------------
    @property
    def bytes_written(self) -> int:
        """Total bytes returned so far (the file size once finished)."""
        return self._position

    @property
    def num_rows(self) -> int:
        """Rows written so far."""
        return self._num_rows

    @property
    def num_batches(self) -> int:
        """Row groups written so far."""
        return sum(p.shape[1] for p in self._pages)

    @property
    def schema(self) -> LanceSchema:
        """The file schema; after :meth:`finish`, dictionary fields carry ``(offset, length)``
        of their values inside this data file."""
        return self._schema

    @property
    def dictionaries(self) -> dict[int, pa.Array]:
        """Dictionary values per dictionary field id (the dataset manifest needs a copy).

        Upstream readers of v0.1/v0.2 datasets decode every fragment with the single
        dictionary stored in the manifest, so the manifest must get these values."""
        return dict(self._dicts.values)

    # -- writing -------------------------------------------------------------------------------
    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> bytes:
        """Encode one row group and return its bytes (empty batches write nothing)."""
        return self.write_batches(batch, max(1, batch.num_rows))

    def write_batches(self, batch: pa.RecordBatch | pa.Table, rows_per_group: int) -> bytes:
        """Encode ``batch`` as row groups of ``rows_per_group`` rows and return their bytes.

        The last group may be shorter. Work is vectorised over the groups, and within the
        returned bytes the pages of each column are contiguous (column by column), so
        reading a few columns of many groups needs few ranges. With one group the bytes are
        the same as :meth:`write_batch`. Empty batches write nothing.
        """
        sink = self._encode(batch, rows_per_group)
        return sink.getvalue() if sink is not None else b""

    def write_batches_parts(self, batch: pa.RecordBatch | pa.Table, rows_per_group: int,
                            ) -> list[memoryview]:
        """:meth:`write_batches`, but the bytes come as consecutive byte views (no join).

        Saves a copy when the consumer gathers its own buffers. Views may share memory with
        ``batch`` (Arrow data is immutable); ``len()`` of each view is its size in bytes.
        """
        sink = self._encode(batch, rows_per_group)
        return sink.getparts() if sink is not None else []

    def _encode(self, batch: pa.RecordBatch | pa.Table, rows_per_group: int,
                ) -> ByteSink | None:
        if self._finished:
            raise InvalidInputError("writer already finished")
        if rows_per_group < 1:
            raise InvalidInputError("rows_per_group must be at least 1")
        if isinstance(batch, pa.Table):
            batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else \
                pa.RecordBatch.from_pylist([], schema=batch.schema)
        n = batch.num_rows
        if n == 0:
            return None
        names = batch.schema.names
        if sorted(names) != sorted(self._schema.names):
            raise SchemaMismatchError(
                f"batch columns {names} do not match the file's {self._schema.names}")
        columns: list[tuple[LanceField, pa.Array]] = []
        for lf in self._schema.fields:
            if lf.name not in names:
                raise SchemaMismatchError(f"batch has no column {lf.name!r}")
            arr = batch.column(lf.name)
            check_type(lf, arr.type, lf.name)
            columns.append((lf, arr))
        bounds = np.append(np.arange(0, n, rows_per_group, dtype=np.int64), np.int64(n))

        sink = ByteSink(self._position)
        pages: dict[int, np.ndarray] = {}
        new_dicts: dict[int, pa.Array] = {}
        stats: dict[int, GroupStats | StatsRow] = {}
        wanted = self._stats.wanted() if self._stats else set()

        def hook(f: LanceField, arr: pa.Array, bounds: np.ndarray) -> None:
            if f.id in wanted:  # (for one group, Arrow's kernels beat vectorising)
                stats[f.id] = (compute_stats(f, arr) if len(bounds) == 2
                               else group_stats(f, arr, bounds))

        for lf, arr in columns:
            encode_column(lf, arr, bounds, sink, pages, self._dicts, new_dicts, path=lf.name,
                          stats=hook if wanted else None)
        # Everything checked: commit.
        entries = np.zeros((self._max_id - self._min_id + 1, len(bounds) - 1, 2), dtype="<i8")
        for fid, rows in pages.items():
            entries[fid - self._min_id] = rows
        self._dicts.values.update(new_dicts)
        if self._stats:
            self._stats.add(stats)
        self._pages.append(entries)
        self._batch_offsets.append(bounds[:-1] + self._num_rows)
        self._num_rows += n
        self._position = sink.position
        return sink

    def finish(self) -> bytes:
        """Return the file tail; the file is complete once these bytes are appended.

        A file without row groups gets no embedded manifest (it would sit at position 0,
        which means "none"); readers then need the field ids.
        """
        if self._finished:
            raise InvalidInputError("writer already finished")
        self._finished = True
        sink = ByteSink(self._position)
        nf = self._max_id - self._min_id + 1
        entries = (np.concatenate(self._pages, axis=1) if self._pages
                   else np.zeros((nf, 0, 2), dtype="<i8"))
        nb = entries.shape[1]
        meta = file_pb2.Metadata(page_table_position=sink.position)
        sink.write(PageTable(entries, self._min_id).encode())
        if self._stats is not None:
            stats_meta = self._stats.write(sink)
            if stats_meta is not None:
                meta.statistics.CopyFrom(stats_meta)
        for f in self._schema.walk():
            values = self._dicts.values.get(f.id)
            if values is not None:
                data, offset = encode_dictionary_values(values, sink.position)
                sink.write(data)
                f.dictionary = (offset, len(values))
        # Position 0 means "no manifest", so a file without rows cannot describe itself.
        if self._self_describing and sink.position > 0:
            manifest = table_pb2.Manifest(version=1)
            manifest.fields.extend(_untyped(self._schema.to_protos()))
            for k, v in self._schema.metadata.items():
                manifest.schema_metadata[k] = v
            manifest.writer_version.library, manifest.writer_version.version = (
                self._writer_version)
            manifest.data_format.file_format = "lance"
            manifest.data_format.version = "0.1"
            meta.manifest_position = sink.position
            sink.write(encode_block(manifest.SerializeToString()))
        if nb:
            meta.batch_offsets.extend([*np.concatenate(self._batch_offsets).tolist(),
                                       self._num_rows])
        metadata_pos = sink.position
        sink.write(encode_block(meta.SerializeToString()))
        sink.write(encode_footer(metadata_pos, MAJOR_VERSION, self._minor))
        self._position = sink.position
        return sink.getvalue()


__all__ = ["LegacyFileWriter"]
