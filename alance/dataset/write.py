"""Streaming fragment writer: record batches in, data files out, fragment metadata returned.

Each data file is uploaded while it is produced: row groups are encoded one at a time and their
bytes handed to the store's streaming writer, so memory is bounded by one row group plus the
store's upload buffer, whatever the size of the input.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from alance._proto import table_pb2
from alance.errors import CommitOutcomeUnknownError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.encode import encode_dictionary_values
from alance.format.legacy.writer import LegacyFileWriter
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore

#: Data storage versions this writer produces, by the names users may give.
LEGACY_NAMES = {None: "0.1", "legacy": "0.1", "0.1": "0.1", "0.2": "0.1"}


#: Row groups encoded per call of the file writer (bounds the writer's working memory).
GROUPS_PER_CHUNK = 64


@dataclass(frozen=True)
class WriteParams:
    """Limits that shape data files."""

    max_rows_per_file: int = 1024 * 1024
    max_rows_per_group: int = 1024
    max_bytes_per_file: int = 90 * 1024**3

    @property
    def rows_per_chunk(self) -> int:
        """Rows handed to the file writer per call: whole row groups, a bounded number."""
        return self.max_rows_per_group * GROUPS_PER_CHUNK

    def __post_init__(self) -> None:
        for name in ("max_rows_per_file", "max_rows_per_group", "max_bytes_per_file"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name} must be at least 1")


def storage_version_for(requested: str | None) -> str:
    """The manifest ``data_format.version`` for a user's ``data_storage_version`` argument."""
    try:
        return LEGACY_NAMES[requested]
    except KeyError:
        raise UnsupportedFeatureError(
            f"data_storage_version={requested!r}: alance writes only the legacy (v0.2) file "
            "format so far") from None


def random_file_name() -> str:
    """A data file name as upstream makes them: 24 random bits in binary, then 26 hex digits."""
    raw = uuid.uuid4().bytes
    return "".join(f"{b:08b}" for b in raw[:3]) + raw[3:].hex()


async def write_fragments(store: DatasetStore, schema: LanceSchema,
                          batches: AsyncIterator[pa.RecordBatch], params: WriteParams,
                          dictionaries: dict[int, pa.Array] | None = None,
                          ) -> list[table_pb2.DataFragment]:
    """Write ``batches`` into new data files, one fragment each (fragment ids left at 0).

    ``batches`` are encoded a batch at a time, as row groups of ``max_rows_per_group`` rows
    (feed batches of many groups: per-call overhead is per batch). ``dictionaries`` (field
    id -> values) seeds dictionary columns and is updated in place: values first seen in this
    write are appended, so keys written earlier stay valid and one dictionary serves every
    file. On any error, the files this call wrote are deleted before the error propagates.
    """
    dictionaries = dictionaries if dictionaries is not None else {}
    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    field_ids = schema.field_ids()
    try:
        pending: pa.RecordBatch | None = None
        while True:
            if pending is None:
                pending = await anext(batches, None)
            if pending is None:
                break
            name = f"{random_file_name()}.lance"
            path = f"{DATA_DIR}/{name}"
            written.append(path)
            encoder = LegacyFileWriter(schema, dictionaries=dictionaries)
            rows = 0
            async with store.open_writer(path) as out:
                while pending is not None:
                    room = params.max_rows_per_file - rows
                    chunk, pending = (pending, None) if pending.num_rows <= room else (
                        pending.slice(0, room), pending.slice(room))
                    for part in encoder.write_batches_parts(chunk, params.max_rows_per_group):
                        await out.write(part)
                    rows += chunk.num_rows
                    if rows >= params.max_rows_per_file or (
                            out.bytes_written >= params.max_bytes_per_file):
                        break
                    if pending is None:
                        pending = await anext(batches, None)
                await out.write(encoder.finish())
                size = out.bytes_written
            dictionaries.update(encoder.dictionaries)
            frag = table_pb2.DataFragment(physical_rows=rows)
            frag.files.add(path=name, fields=field_ids, file_major_version=0,
                           file_minor_version=2, file_size_bytes=size)
            fragments.append(frag)
    except BaseException:
        for path in written:
            await store.delete(path)
        raise
    return fragments


class _Removable(Protocol):
    async def remove_all(self, store: DatasetStore) -> None: ...


@contextlib.asynccontextmanager
async def removed_on_failure(store: DatasetStore, fragments: list[table_pb2.DataFragment],
                             written: _Removable | None = None) -> AsyncIterator[None]:
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
        await delete_fragment_files(store, fragments)
        raise


async def delete_fragment_files(store: DatasetStore,
                                fragments: list[table_pb2.DataFragment]) -> None:
    """Delete the data files of fragments that were written but will not be committed."""
    for frag in fragments:
        for f in frag.files:
            await store.delete(f"{DATA_DIR}/{f.path}")


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
