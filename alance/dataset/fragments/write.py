"""Streaming fragment writer: record batches in, data files out, fragment metadata returned.

Each data file is uploaded while it is produced: row groups are encoded one at a time and their
bytes handed to the store's streaming writer, so memory is bounded by one row group plus the
store's upload buffer, whatever the size of the input. Blob columns (2.x files) stream their
large values the same way into sidecar files beside the data file (:class:`_Sidecars`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.fragments.file_cuts import FlushedBytes
from alance.dataset.versions.bases import WriteTarget
from alance.errors import CommitOutcomeUnknownError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.encode import encode_dictionary_values
from alance.format.legacy.writer import LegacyFileWriter
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceSchema
from alance.format.v2.blob import blob_version, sidecar_path
from alance.format.v2.blob_values import (
    blob_bytes_per_row,
    is_v1_arrow_field,
    v2_arrow_field,
    v2_values_of_binary,
)
from alance.format.v2.encode_blob import SidecarChunk
from alance.format.v2.writer import V2FileWriter
from alance.io.plans import decode_pool
from alance.io.store import DatasetStore, ObjectWriter

#: Names of the legacy (v0.1/v0.2 files) data storage version users may give.
LEGACY_NAMES = {"legacy": "0.1", "0.1": "0.1", "0.2": "0.1"}
#: Names of the 2.x data storage versions alance writes; ``stable`` is 2.2 as in pylance 14.
V2_NAMES = {"2.0": "2.0", "2.1": "2.1", "2.2": "2.2", "stable": "2.2"}
#: The data storage version of new datasets when none is asked for.
DEFAULT_STORAGE_VERSION = "2.2"


#: Row groups encoded per call of the file writer at most (fewer for wide rows: see
#: ``inputs.REGROUP_MAX_BYTES``, which bounds the writer's working memory). Each call costs
#: per-column set-up and gives 2.x files their own pages: 256 groups wrote 2M narrow rows
#: of 2.1 in 0.18-0.20 s instead of 0.29-0.37 s with 64.
GROUPS_PER_CHUNK = 256
#: Batches up to this size are encoded on the event loop (well under a millisecond); bigger
#: ones in a worker thread, so the loop stays responsive. A thread hop costs more than
#: encoding a small append.
INLINE_ENCODE_BYTES = 64 * 1024
#: Blob bytes handed to the file writer per call (more rows than that are split).
BLOB_BYTES_PER_CALL = 16 * 1024 * 1024


@dataclass(frozen=True)
class WriteParams:
    """Limits that shape data files."""

    max_rows_per_file: int = 1024 * 1024
    max_rows_per_group: int = 1024
    max_bytes_per_file: int = 90 * 1024**3
    #: Rows per batch pylance would write at a time where this matters: the batch boundaries
    #: at which ``max_bytes_per_file`` may end a 2.x file (see :mod:`.file_cuts`).
    batch_rows: int | None = None

    @property
    def rows_per_chunk(self) -> int:
        """Rows handed to the file writer per call: whole row groups, a bounded number."""
        return self.max_rows_per_group * GROUPS_PER_CHUNK

    def __post_init__(self) -> None:
        for name in ("max_rows_per_file", "max_rows_per_group", "max_bytes_per_file"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be at least 1")


def storage_version_for(requested: str | None) -> str:
    """The manifest ``data_format.version`` for a user's ``data_storage_version`` argument
    (``None``: the default, 2.2)."""
    if requested is None:
        return DEFAULT_STORAGE_VERSION
    key = requested.strip().lower() if isinstance(requested, str) else requested
    if key in LEGACY_NAMES:
        return LEGACY_NAMES[key]
    if key in V2_NAMES:
        return V2_NAMES[key]
    if key == "next":
        raise UnsupportedFeatureError(
            f"data_storage_version={requested!r}: alance writes legacy (0.1/0.2), 2.0, 2.1 "
            "and 2.2 data files")
    raise InvalidInputError(f"unknown data_storage_version {requested!r}; use 'legacy', "
                            "'2.0', '2.1', '2.2' or 'stable'")


def file_version_of(storage_version: str) -> tuple[int, int] | None:
    """The 2.x file version written for a dataset's data storage version (None: legacy);
    raises UnsupportedFeatureError for versions alance cannot write."""
    if storage_version in ("0.1", "0.2", "legacy"):
        return None
    if storage_version in ("2.0", "2.1", "2.2"):
        major, minor = storage_version.split(".")
        return int(major), int(minor)
    raise UnsupportedFeatureError(
        f"alance cannot write data files of data storage version {storage_version} "
        "(it writes legacy, 2.0, 2.1 and 2.2 files)")


def random_file_name() -> str:
    """A data file name as upstream makes them: 24 random bits in binary, then 26 hex digits."""
    raw = uuid.uuid4().bytes
    return "".join(f"{b:08b}" for b in raw[:3]) + raw[3:].hex()


def refuse_blob_columns(schema: LanceSchema, storage_version: str = "0.1") -> None:
    """Raise UnsupportedFeatureError if ``schema`` has a blob column that files of
    ``storage_version`` cannot hold: alance writes blob v1 columns to 2.0 / 2.1 files and
    blob v2 columns to 2.2 files (the 2.x writer checks which), none to legacy files."""
    if file_version_of(storage_version) is not None:
        return
    for f in schema.walk():
        if blob_version(f) is not None:
            raise UnsupportedFeatureError(
                f"column {f.name!r} is a blob column; legacy (v0.1/v0.2) data files cannot "
                "hold blob columns (use data storage version 2.0 or later)")


def blob_chunk_bytes(schema: LanceSchema) -> int | None:
    """How many bytes of input batches to combine at most before writing (None: no bound;
    schemas with blob columns: BLOB_BYTES_PER_CALL)."""
    return BLOB_BYTES_PER_CALL if any(blob_version(f) for f in schema.fields) else None


def blob_v2_inputs(arrow_schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch],
                   storage_version: str,
                   ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    """Blob v1 input fields (binary with ``lance-encoding:blob``) as the blob v2 columns
    that 2.2+ datasets store, as pylance converts them: the schema and the batches (other
    versions: unchanged)."""
    version = file_version_of(storage_version)
    convert = [i for i, f in enumerate(arrow_schema) if is_v1_arrow_field(f)]
    if version is None or version < (2, 2) or not convert:
        return arrow_schema, batches
    target = pa.schema([v2_arrow_field(f) if i in convert else f
                        for i, f in enumerate(arrow_schema)], metadata=arrow_schema.metadata)

    async def converted() -> AsyncIterator[pa.RecordBatch]:
        async for batch in batches:
            cols = [v2_values_of_binary(c) if i in convert else c
                    for i, c in enumerate(batch.columns)]
            yield pa.RecordBatch.from_arrays(cols, schema=target)

    return target, converted()


def _blob_pieces(schema: LanceSchema, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
    """``batch`` cut into slices of at most BLOB_BYTES_PER_CALL bytes of blob values (a
    slice holds at least one row); the batch itself when it has no blob column."""
    per_row = blob_bytes_per_row(schema, batch)
    if per_row is None or int(per_row.sum()) <= BLOB_BYTES_PER_CALL:
        return [batch]
    pieces = []
    csum = np.cumsum(per_row)
    lo = 0
    while lo < batch.num_rows:
        base = int(csum[lo - 1]) if lo else 0
        hi = int(np.searchsorted(csum, base + BLOB_BYTES_PER_CALL, side="right"))
        hi = max(hi, lo + 1)
        pieces.append(batch.slice(lo, hi - lo))
        lo = hi
    return pieces


class _Sidecars:
    """The sidecar files of one data file, written as the file writer hands out their
    bytes: a sidecar is open from its first chunk until its last."""

    def __init__(self, store: DatasetStore, data_path: str) -> None:
        self._store = store
        self._data_path = data_path
        self._open: dict[int, ObjectWriter] = {}
        #: Every sidecar path started (deleted with the data file on failure).
        self.paths: list[str] = []

    async def write(self, chunks: Sequence[SidecarChunk]) -> None:
        """Append every chunk to its sidecar; complete the sidecars marked done."""
        for chunk in chunks:
            out = self._open.get(chunk.blob_id)
            if out is None:
                path = sidecar_path(self._data_path, chunk.blob_id)
                self.paths.append(path)
                out = await self._store.open_writer(path).__aenter__()
                self._open[chunk.blob_id] = out
            data = chunk.data
            if len(data):
                await out.write(data if isinstance(data, memoryview) else data.data)
            if chunk.done:
                del self._open[chunk.blob_id]
                await out.__aexit__(None, None, None)

    async def abort(self) -> None:
        """Abandon the sidecars still open (after a failure; nothing is open otherwise)."""
        opened, self._open = self._open, {}
        for out in opened.values():
            with contextlib.suppress(Exception):
                await out.__aexit__(RuntimeError, RuntimeError("write failed"), None)


async def write_fragments(store: DatasetStore, schema: LanceSchema,
                          batches: AsyncIterator[pa.RecordBatch], params: WriteParams,
                          dictionaries: dict[int, pa.Array] | None = None,
                          storage_version: str = "0.1",
                          events: FileEvents | None = None,
                          targets: Sequence[WriteTarget] = (),
                          ) -> list[table_pb2.DataFragment]:
    """Write ``batches`` into new data files, one fragment each (fragment ids left at 0).

    ``storage_version`` (the dataset's ``data_format.version``) picks the file writer:
    legacy v0.2 files for ``"0.1"``, else 2.0 / 2.1 / 2.2 files. Blob columns (2.x only)
    are written in pieces of at most BLOB_BYTES_PER_CALL bytes; their sidecar files
    (2.2) stream to ``data/<file stem>/`` as the file writer hands their bytes out.

    ``batches`` are encoded a batch at a time, as row groups of ``max_rows_per_group`` rows
    (feed batches of many groups: per-call overhead is per batch). ``dictionaries`` (field
    id -> values) seeds dictionary columns and is updated in place: values first seen in this
    write are appended, so keys written earlier stay valid and one dictionary serves every
    file. On any error, the files this call wrote are deleted before the error propagates.
    ``events`` (optional) hears of each data file as it is opened and as its fragment is done.
    ``targets``: base paths the data files go to, in turn (default: the dataset's ``data/``;
    see :mod:`alance.dataset.versions.bases`).
    """
    if targets and blob_chunk_bytes(schema) is not None:
        raise UnsupportedFeatureError("blob columns cannot be written to other base paths")
    refuse_blob_columns(schema, storage_version)
    dictionaries = dictionaries if dictionaries is not None else {}
    fragments: list[table_pb2.DataFragment] = []
    written: list[tuple[DatasetStore, str]] = []
    field_ids = schema.field_ids()
    file_version = file_version_of(storage_version)
    # Made first: it refuses unwritable types before any IO (and writes the first file).
    ready = V2FileWriter(schema, file_version) if file_version is not None else None
    try:
        pending: pa.RecordBatch | None = None
        while True:
            if pending is None:
                pending = await anext(batches, None)
            if pending is None:
                break
            name = f"{random_file_name()}.lance"
            target = targets[len(fragments) % len(targets)] if targets else WriteTarget(store)
            path = target.path(name)
            written.append((target.store, path))
            if events is not None:
                await events.opened(name)
            encoder: LegacyFileWriter | V2FileWriter
            if file_version is None:
                encoder = LegacyFileWriter(schema, dictionaries=dictionaries)
            elif ready is not None:
                encoder, ready = ready, None
            else:
                encoder = V2FileWriter(schema, file_version)
            rows = 0
            flushed = FlushedBytes(params.max_bytes_per_file, params.batch_rows)
            sidecars = _Sidecars(store, path)
            try:
                async with target.store.open_writer(path) as out:
                    while pending is not None:
                        room = params.max_rows_per_file - rows
                        if not isinstance(encoder, LegacyFileWriter):
                            room = min(room, flushed.take(pending.slice(0, room)))
                        chunk, pending = (pending, None) if pending.num_rows <= room else (
                            pending.slice(0, room), pending.slice(room))
                        parts: Sequence[bytes | memoryview]
                        if isinstance(encoder, LegacyFileWriter):
                            parts = encoder.write_batches_parts(chunk, params.max_rows_per_group)
                            for part in parts:
                                await out.write(part)
                        else:
                            for piece in _blob_pieces(schema, chunk):
                                bufs = (encoder.write_batch(piece)
                                        if piece.nbytes <= INLINE_ENCODE_BYTES else
                                        await asyncio.to_thread(encoder.write_batch, piece,
                                                                decode_pool()))
                                for buf in bufs:
                                    await out.write(buf)
                                await sidecars.write(encoder.take_sidecar_chunks())
                        rows += chunk.num_rows
                        if rows >= params.max_rows_per_file or flushed.full or (
                                isinstance(encoder, LegacyFileWriter)
                                and out.bytes_written >= params.max_bytes_per_file):
                            break
                        if pending is None:
                            pending = await anext(batches, None)
                    await out.write(encoder.finish())
                    if isinstance(encoder, V2FileWriter):
                        await sidecars.write(encoder.take_sidecar_chunks())
                    size = out.bytes_written
            finally:
                written.extend((store, p) for p in sidecars.paths)
                await sidecars.abort()
            frag = table_pb2.DataFragment(physical_rows=rows)
            if isinstance(encoder, LegacyFileWriter):
                dictionaries.update(encoder.dictionaries)
                added = frag.files.add(path=name, fields=field_ids, file_major_version=0,
                                       file_minor_version=2, file_size_bytes=size)
            else:
                leaf_ids = encoder.leaf_field_ids
                added = frag.files.add(path=name, fields=leaf_ids,
                                       column_indices=list(range(len(leaf_ids))),
                                       file_major_version=encoder.version[0],
                                       file_minor_version=encoder.version[1],
                                       file_size_bytes=size)
            if target.base_id is not None:
                added.base_id = target.base_id
            fragments.append(frag)
            if events is not None:
                await events.finished(frag)
    except BaseException:
        for where, path in written:
            await where.delete(path)
        raise
    return fragments


class FileEvents(Protocol):
    """What :func:`write_fragments` reports about each data file it writes."""

    async def opened(self, name: str) -> None:
        """A new data file (``name`` under ``data/``) is about to be written."""

    async def finished(self, fragment: table_pb2.DataFragment) -> None:
        """The file is complete: its fragment (id unassigned)."""


class _Removable(Protocol):
    async def remove_all(self, store: DatasetStore) -> None: ...


@contextlib.asynccontextmanager
async def removed_on_failure(store: DatasetStore, fragments: list[table_pb2.DataFragment],
                             written: _Removable | None = None,
                             targets: Sequence[WriteTarget] = ()) -> AsyncIterator[None]:
    """Delete the data files (and other ``written`` files) of an operation if it fails.

    Not when the commit's outcome is unknown (:class:`CommitOutcomeUnknownError`): the new
    version may exist and reference them.
    """
    try:
        yield
    except CommitOutcomeUnknownError:
        raise
    except BaseException:
        if written is not None:
            await written.remove_all(store)
        await delete_fragment_files(store, fragments, targets)
        raise


async def delete_fragment_files(store: DatasetStore,
                                fragments: list[table_pb2.DataFragment],
                                targets: Sequence[WriteTarget] = ()) -> None:
    """Delete the data files (and their blob sidecar files) of fragments that were written
    but will not be committed (``targets``: the base paths some of them went to)."""
    by_base = {t.base_id: t for t in targets}
    for frag in fragments:
        for f in frag.files:
            if f.HasField("base_id"):
                target = by_base.get(int(f.base_id))
                if target is not None:
                    await target.store.delete(target.path(f.path))
                continue
            path = f"{DATA_DIR}/{f.path}"
            await store.delete(path)
            if path.endswith(".lance"):
                for meta in await store.list(path[: -len(".lance")]):
                    await store.delete(meta.path)


def dictionary_prelude(schema: LanceSchema, dictionaries: dict[int, pa.Array],
                       ) -> tuple[LanceSchema, bytes]:
    """The manifest prelude holding dictionary values, and the schema pointing into it.

    v0.1/v0.2 datasets keep one dictionary per dictionary column, at the start of the
    manifest file; ``Field.dictionary`` gives its (offset, number of values).
    """
    schema = copy.deepcopy(schema)
    parts: list[bytes] = []
    position = 0
    for f in schema.walk():
        values = dictionaries.get(f.id)
        if values is None:
            continue
        data, offset = encode_dictionary_values(values, position)
        parts.append(data)
        position += len(data)
        f.dictionary = (offset, len(values))
    return schema, b"".join(parts)
