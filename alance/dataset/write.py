"""Streaming fragment writer: record batches in, data files out, fragment metadata returned.

Each data file is uploaded while it is produced: row groups are encoded one at a time and their
bytes handed to the store's streaming writer, so memory is bounded by one row group plus the
store's upload buffer, whatever the size of the input.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from alance._proto import table_pb2
from alance.errors import CommitOutcomeUnknownError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.encode import encode_dictionary_values
from alance.format.legacy.writer import LegacyFileWriter
from alance.format.manifest import DATA_DIR
from alance.format.schema import LanceSchema
from alance.format.v2.blob import blob_version
from alance.format.v2.writer import V2FileWriter
from alance.io.store import DatasetStore

#: Names of the legacy (v0.1/v0.2 files) data storage version users may give.
LEGACY_NAMES = {"legacy": "0.1", "0.1": "0.1", "0.2": "0.1"}
#: Names of the 2.x data storage versions alance writes; ``stable`` is 2.2 as in pylance 14.
V2_NAMES = {"2.0": "2.0", "2.1": "2.1", "2.2": "2.2", "stable": "2.2"}
#: The data storage version of new datasets when none is asked for.
DEFAULT_STORAGE_VERSION = "2.2"


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


def refuse_blob_columns(schema: LanceSchema) -> None:
    """Raise UnsupportedFeatureError if ``schema`` has a blob column: alance reads blob
    columns (descriptors, ``take_blobs``) but does not write their out-of-line bytes."""
    for f in schema.walk():
        if blob_version(f) is not None:
            raise UnsupportedFeatureError(
                f"column {f.name!r} is a blob column; alance does not write blob columns "
                "yet (it reads them: scans return descriptors, take_blobs the bytes)")


async def write_fragments(store: DatasetStore, schema: LanceSchema,
                          batches: AsyncIterator[pa.RecordBatch], params: WriteParams,
                          dictionaries: dict[int, pa.Array] | None = None,
                          storage_version: str = "0.1",
                          ) -> list[table_pb2.DataFragment]:
    """Write ``batches`` into new data files, one fragment each (fragment ids left at 0).

    ``storage_version`` (the dataset's ``data_format.version``) picks the file writer:
    legacy v0.2 files for ``"0.1"``, else 2.0 / 2.1 / 2.2 files.

    ``batches`` are encoded a batch at a time, as row groups of ``max_rows_per_group`` rows
    (feed batches of many groups: per-call overhead is per batch). ``dictionaries`` (field
    id -> values) seeds dictionary columns and is updated in place: values first seen in this
    write are appended, so keys written earlier stay valid and one dictionary serves every
    file. On any error, the files this call wrote are deleted before the error propagates.
    """
    refuse_blob_columns(schema)
    dictionaries = dictionaries if dictionaries is not None else {}
    fragments: list[table_pb2.DataFragment] = []
    written: list[str] = []
    field_ids = schema.field_ids()
    file_version = file_version_of(storage_version)
    if file_version is not None:
        V2FileWriter(schema, file_version)  # refuses unwritable types before any IO
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
            encoder = (LegacyFileWriter(schema, dictionaries=dictionaries)
                       if file_version is None else V2FileWriter(schema, file_version))
            rows = 0
            async with store.open_writer(path) as out:
                while pending is not None:
                    room = params.max_rows_per_file - rows
                    chunk, pending = (pending, None) if pending.num_rows <= room else (
                        pending.slice(0, room), pending.slice(room))
                    parts: Sequence[bytes | memoryview]
                    if isinstance(encoder, LegacyFileWriter):
                        parts = encoder.write_batches_parts(chunk, params.max_rows_per_group)
                    else:
                        parts = await asyncio.to_thread(encoder.write_batch, chunk)
                    for part in parts:
                        await out.write(part)
                    rows += chunk.num_rows
                    if rows >= params.max_rows_per_file or (
                            out.bytes_written >= params.max_bytes_per_file):
                        break
                    if pending is None:
                        pending = await anext(batches, None)
                await out.write(encoder.finish())
                size = out.bytes_written
            frag = table_pb2.DataFragment(physical_rows=rows)
            if isinstance(encoder, LegacyFileWriter):
                dictionaries.update(encoder.dictionaries)
                frag.files.add(path=name, fields=field_ids, file_major_version=0,
                               file_minor_version=2, file_size_bytes=size)
            else:
                leaf_ids = encoder.leaf_field_ids
                frag.files.add(path=name, fields=leaf_ids,
                               column_indices=list(range(len(leaf_ids))),
                               file_major_version=encoder.version[0],
                               file_minor_version=encoder.version[1], file_size_bytes=size)
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
