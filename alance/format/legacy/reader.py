"""Reading v0.1/v0.2 Lance data files through sans-IO plans (see :mod:`.plan`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from alance._proto import file_pb2, table_pb2
from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.decode import Spans, read_dictionary_values, read_field
from alance.format.legacy.layout import (
    FOOTER_SIZE,
    Footer,
    PageTable,
    block_length,
    parse_footer,
    parse_metadata,
)
from alance.format.legacy.plan import Plan, coalesced, gather, read_tail
from alance.format.schema import LanceField, LanceSchema

T = TypeVar("T")

DEFAULT_TAIL_SIZE = 64 * 1024


@dataclass
class LegacyFile:
    """What :func:`open_file` learns from a file's tail: enough to plan any read."""

    file_size: int
    footer: Footer
    metadata: file_pb2.Metadata
    page_table: PageTable
    schema: LanceSchema | None = None  # the embedded (self-describing) schema, if read
    tail: bytes = b""  # the last bytes of the file, kept to answer small reads
    tail_start: int = 0
    batch_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))

    @property
    def num_batches(self) -> int:
        """Row groups in the file."""
        return len(self.batch_offsets) - 1

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return int(self.batch_offsets[-1])

    @property
    def version(self) -> tuple[int, int]:
        """(major, minor) from the footer: (0, 1) or (0, 2)."""
        return self.footer.major_version, self.footer.minor_version


def _read_bytes(start: int, end: int, have: bytes, have_start: int) -> Plan[bytes]:
    """Bytes ``start..end``, reusing what ``have`` (starting at ``have_start``) covers."""
    if start >= have_start and end <= have_start + len(have):
        return have[start - have_start: end - have_start]
    if end <= have_start or start >= have_start + len(have):
        (data,) = yield [(start, end)]
        return bytes(data)
    (head,) = yield [(start, have_start)]
    return bytes(head) + have[: end - have_start]


def _parse_manifest_schema(buf: bytes) -> LanceSchema:
    n = block_length(buf, 0)
    if 4 + n > len(buf):
        raise CorruptFileError("embedded manifest is truncated")
    manifest = table_pb2.Manifest()
    try:
        manifest.ParseFromString(buf[4: 4 + n])
    except DecodeError as exc:
        raise CorruptFileError(f"cannot decode embedded manifest: {exc}") from exc
    return _schema_from_protos(manifest.fields, dict(manifest.schema_metadata),
                               "embedded manifest")


def _schema_from_protos(protos: Sequence[file_pb2.Field], metadata: dict[str, bytes],
                        what: str) -> LanceSchema:
    """A schema stored inside the file; any inconsistency means the file is corrupt."""
    try:
        schema = LanceSchema.from_protos(protos, metadata)
        for f in schema.walk():
            f.data_type  # noqa: B018  (every type of a legacy file is known: else corrupt)
    except (InvalidInputError, UnsupportedFeatureError) as exc:
        raise CorruptFileError(f"bad schema in {what}: {exc}") from exc
    return schema


def open_file(file_size: int, field_ids: Sequence[int] | None = None, *,
              tail_size: int = DEFAULT_TAIL_SIZE, tail: bytes | None = None) -> Plan[LegacyFile]:
    """Plan reading the footer, metadata and page table of a legacy file.

    ``field_ids`` are the ids the file holds (``DataFile.fields`` of the manifest); the page
    table covers ``min(field_ids)..max(field_ids)``. Without them the embedded manifest is read
    and its schema used (``LegacyFile.schema``). ``tail`` may pass bytes already fetched from
    the end of the file. Usually one step (the tail); more when the metadata, embedded
    manifest or page table start before it.
    """
    plan = _open_file(file_size, field_ids, tail_size, tail)
    return coalesced(plan, file_size=file_size)


def _open_file(file_size: int, field_ids: Sequence[int] | None, tail_size: int,
               tail: bytes | None) -> Plan[LegacyFile]:
    tail = yield from read_tail(file_size, FOOTER_SIZE, tail_size, tail)
    tail_start = file_size - len(tail)
    footer = parse_footer(tail)
    meta_pos = footer.metadata_position
    if meta_pos > file_size - FOOTER_SIZE - 4:
        raise CorruptFileError("metadata position points past the end of the file")
    if meta_pos < tail_start:
        head = yield from _read_bytes(meta_pos, tail_start, tail, tail_start)
        tail, tail_start = head + tail, meta_pos
    meta = parse_metadata(tail, meta_pos - tail_start)
    if meta_pos + 4 + block_length(tail, meta_pos - tail_start) > file_size - FOOTER_SIZE:
        raise CorruptFileError("metadata block overlaps the footer")
    offsets = np.asarray(meta.batch_offsets, dtype=np.int64)
    if len(offsets) == 0:
        offsets = np.zeros(1, np.int64)
    if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise CorruptFileError("batch offsets are not increasing from 0")
    schema = None
    if field_ids is None:
        mpos = meta.manifest_position
        if mpos == 0:
            raise InvalidInputError("file has no embedded schema: pass the field ids it holds")
        if not 0 < mpos < meta_pos:
            raise CorruptFileError("manifest position out of range")
        block = yield from _read_bytes(mpos, meta_pos, tail, tail_start)
        schema = _parse_manifest_schema(block)
        field_ids = schema.field_ids()
        if not field_ids:
            raise CorruptFileError("embedded manifest has no fields")
    elif 0 < meta.manifest_position < meta_pos:
        # The file's own schema, to check the dataset's types against (a damaged embedded
        # manifest is not needed to read the file: then there is nothing to check against).
        block = yield from _read_bytes(meta.manifest_position, meta_pos, tail, tail_start)
        try:
            schema = _parse_manifest_schema(block)
        except CorruptFileError:
            schema = None
    if not field_ids:
        raise InvalidInputError("a data file holds at least one field")
    lo, hi = min(field_ids), max(field_ids)
    nb = len(offsets) - 1
    pt_pos = meta.page_table_position
    pt_end = pt_pos + PageTable.byte_size(lo, hi, nb)
    if pt_end > meta_pos:
        raise CorruptFileError("page table runs past the metadata block")
    raw = yield from _read_bytes(pt_pos, pt_end, tail, tail_start)
    table = PageTable.decode(raw, lo, hi, nb)
    return LegacyFile(file_size, footer, meta, table, schema, tail, tail_start, offsets)


def _project(schema: LanceSchema, projection: LanceSchema | Sequence[int] | None,
             ) -> LanceSchema:
    if projection is None:
        return schema
    if isinstance(projection, LanceSchema):
        return projection
    wanted = set(projection)

    def keep(f: LanceField) -> LanceField | None:
        if f.id in wanted:
            return f
        kids = [k for k in (keep(c) for c in f.children) if k is not None]
        if kids and f.logical_type == "struct":
            return replace(f, children=kids)
        return None

    return LanceSchema([k for k in (keep(f) for f in schema.fields) if k is not None],
                       dict(schema.metadata))


class LegacyFileReader:
    """Plans reads of an opened legacy file for a schema (ids and types of the dataset).

    ``dictionaries`` maps dictionary field ids to their values (in datasets they are stored in
    the manifest file; :meth:`read_dictionaries` loads those stored in this file).
    """

    def __init__(self, file: LegacyFile, schema: LanceSchema | None = None, *,
                 dictionaries: Mapping[int, pa.Array] | None = None):
        """Bind an opened file to the schema used to interpret it."""
        schema = schema if schema is not None else file.schema
        if schema is None:
            raise InvalidInputError("no schema: pass one or open the file without field ids")
        self.file = file
        self.schema = schema
        self.dictionaries: dict[int, pa.Array] = dict(dictionaries or {})

    @property
    def num_rows(self) -> int:
        """Rows in the file."""
        return self.file.num_rows

    @property
    def num_batches(self) -> int:
        """Row groups in the file."""
        return self.file.num_batches

    def _wrap(self, plan: Plan[T]) -> Plan[T]:
        return coalesced(plan, file_size=self.file.file_size)

    def _plan(self, schema: LanceSchema, spans: Spans, gap: int = 0,
              ) -> Plan[pa.RecordBatch]:
        pages = self.file.page_table.field_pages
        arrays = yield from gather([read_field(f, pages, spans, self.dictionaries, gap)
                                    for f in schema.fields])
        return pa.RecordBatch.from_arrays(arrays, schema=schema.to_arrow())

    def read_batch(self, batch: int, projection: LanceSchema | Sequence[int] | None = None,
                   ) -> Plan[pa.RecordBatch]:
        """Plan reading one whole row group."""
        if not 0 <= batch < self.num_batches:
            raise InvalidInputError(f"row group {batch} out of range 0..{self.num_batches}")
        schema = _project(self.schema, projection)
        off = self.file.batch_offsets
        spans = Spans.whole(batch, int(off[batch + 1] - off[batch]))
        return self._wrap(self._plan(schema, spans))

    def take(self, rows: Sequence[int] | np.ndarray,
             projection: LanceSchema | Sequence[int] | None = None,
             gap: int = 0) -> Plan[pa.RecordBatch]:
        """Plan reading the given rows (file row offsets, in the order given). Many byte
        ranges at most ``gap`` bytes apart are read as one (a dense take: the caller knows
        how far apart ranges its store reads through anyway)."""
        schema = _project(self.schema, projection)
        idx = np.asarray(rows, dtype=np.int64).ravel()
        if len(idx) and (idx.min() < 0 or idx.max() >= self.num_rows):
            raise InvalidInputError(f"row offsets out of range 0..{self.num_rows}")
        return self._wrap(self._take_plan(schema, idx, gap))

    def read_range(self, start: int, stop: int,
                   projection: LanceSchema | Sequence[int] | None = None) -> Plan[pa.RecordBatch]:
        """Plan reading rows ``start..stop`` of the file (may span row groups).

        However many row groups the range covers, each column is read as one array, all its
        pages in the same steps.
        """
        if not 0 <= start <= stop <= self.num_rows:
            raise InvalidInputError(f"rows {start}..{stop} out of range 0..{self.num_rows}")
        schema = _project(self.schema, projection)
        off = self.file.batch_offsets
        first = int(np.searchsorted(off, start, side="right")) - 1
        last = int(np.searchsorted(off, stop, side="left"))
        groups = np.arange(max(first, 0), min(last, self.num_batches), dtype=np.int64)
        base = off[groups]
        spans = Spans.of(groups, np.maximum(start - base, 0),
                         np.minimum(stop, off[groups + 1]) - base)
        return self._wrap(self._plan(schema, spans))

    def _take_plan(self, schema: LanceSchema, rows: np.ndarray, gap: int = 0,
                   ) -> Plan[pa.RecordBatch]:
        ordered = len(rows) < 2 or bool((rows[1:] > rows[:-1]).all())
        uniq, inverse = (rows, None) if ordered else np.unique(rows, return_inverse=True)
        off = self.file.batch_offsets
        groups = np.searchsorted(off, uniq, side="right") - 1
        result = yield from self._plan(schema, Spans.from_indices(groups, uniq - off[groups]),
                                       gap)
        if inverse is not None:
            result = result.take(pa.array(inverse.ravel()))
        return result

    def read_dictionaries(self) -> Plan[dict[int, pa.Array]]:
        """Plan loading the dictionary values stored in this file for the reader's schema."""
        plans: list[Plan[pa.Array]] = []
        ids: list[int] = []
        for f in self.schema.walk():
            t = f.data_type
            if pa.types.is_dictionary(t):
                if f.dictionary is None:
                    raise CorruptFileError(f"dictionary column {f.name!r} has no dictionary")
                offset, length = f.dictionary
                plans.append(read_dictionary_values(t.value_type, offset, length))
                ids.append(f.id)
        values: list[pa.Array] = yield from self._wrap(gather(plans))
        result = dict(zip(ids, values, strict=True))
        self.dictionaries.update(result)
        return result

    def read_page_stats(self, field_ids: Sequence[int]) -> Plan[pa.RecordBatch | None]:
        """Plan reading the page statistics of the given data fields (None if there are none).

        The result has one struct column per field that has statistics, named by the field
        id, with ``null_count``, ``min_value`` and ``max_value``; one row per row group.
        """
        return self._wrap(self._stats_plan(list(field_ids)))

    def _stats_plan(self, field_ids: list[int]) -> Plan[pa.RecordBatch | None]:
        meta = self.file.metadata
        if not meta.HasField("statistics") or not meta.statistics.fields:
            return None
        stats = meta.statistics
        schema = _schema_from_protos(stats.schema, {}, "statistics schema")
        wanted = {str(i) for i in field_ids}
        fields = [f for f in schema.fields if f.name in wanted]
        if not fields:
            return None
        hi = max(stats.fields)
        pos = stats.page_table_position
        raw = yield from _read_bytes(pos, pos + PageTable.byte_size(0, hi, 1),
                                     self.file.tail, self.file.tail_start)
        table = PageTable.decode(raw, 0, hi, 1)
        sub = LanceSchema(fields)
        spans = Spans.whole(0, self.num_batches)
        arrays = yield from gather([read_field(f, table.field_pages, spans, {})
                                    for f in sub.fields])
        return pa.RecordBatch.from_arrays(arrays, schema=sub.to_arrow())


__all__ = ["DEFAULT_TAIL_SIZE", "LegacyFile", "LegacyFileReader",
           "open_file"]
