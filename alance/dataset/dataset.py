"""The async dataset API: open, write, inspect versions, scan, take."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.commit.registry import HandlerSpec, commit_handler_for
from alance.dataset.commit import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.delete import delete_rows
from alance.dataset.dml import DEFAULT_CONFLICT_RETRIES, DeleteResult, UpdateResult
from alance.dataset.inputs import record_batch_stream, regroup
from alance.dataset.merge_insert import MergeInsertBuilder
from alance.dataset.read import ReadContext
from alance.dataset.scan import Scanner
from alance.dataset.snapshot import Snapshot, load_snapshot, load_snapshot_at
from alance.dataset.take import take_rows
from alance.dataset.update import update_rows
from alance.dataset.write import (
    WriteParams,
    delete_fragment_files,
    dictionary_prelude,
    removed_on_failure,
    storage_version_for,
    write_fragments,
)
from alance.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.feature_flags import check_writer_flags
from alance.format.manifest import ManifestNamingScheme
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore
from alance.io.uri import open_store
from alance.transaction.operations import new_append, new_overwrite

WriteMode = Literal["create", "append", "overwrite"]


def _handler_for(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None,
                 handler: HandlerSpec) -> CommitHandler:
    """The commit handler: ``handler`` if given (object or dotted name), else by URI scheme."""
    return commit_handler_for(uri, storage_options, handler)


class LanceDataset:
    """One version of a Lance dataset, opened for reading (and as the base of new commits).

    Instances are cheap, immutable views: writing returns a new instance for the new version.
    Create them with :func:`open_dataset` or :func:`write_dataset`.
    """

    def __init__(self, store: DatasetStore, handler: CommitHandler, snapshot: Snapshot) -> None:
        self._store = store
        self._handler = handler
        self._snapshot = snapshot
        self._ctx = ReadContext(store, snapshot)

    def __repr__(self) -> str:
        return f"LanceDataset({self.uri!r}, version={self.version})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles the loaded version itself (manifest included), so unpickling costs no IO;
        # the store pickles as the URI and storage options that rebuild it.
        return (LanceDataset, (self._store, self._handler, self._snapshot))

    # -- metadata ----------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The URI the dataset was opened with."""
        return self._store.uri

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._snapshot.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self._snapshot.schema.to_arrow_with_extensions()

    @property
    def lance_schema(self) -> LanceSchema:
        """The Lance schema (field ids, logical types) of this version."""
        return self._snapshot.schema

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The raw manifest message of this version."""
        return self._snapshot.manifest

    @property
    def data_storage_version(self) -> str:
        """The data file format version of the dataset (``"0.1"`` means v0.1/v0.2 files)."""
        return self._snapshot.data_storage_version

    @property
    def max_field_id(self) -> int:
        """The highest field id of the schema."""
        return self._snapshot.schema.max_field_id()

    def get_fragments(self) -> list[table_pb2.DataFragment]:
        """The fragments of this version (protobuf ``DataFragment`` messages)."""
        return self._snapshot.fragments

    async def latest_version(self) -> int:
        """The newest committed version number of the dataset."""
        return (await self._handler.latest(self._store)).version

    async def versions(self) -> list[dict[str, Any]]:
        """Every version: ``{"version", "timestamp", "metadata"}``, oldest first."""
        locations = await self._handler.list_versions(self._store)
        sem = asyncio.Semaphore(8)

        async def describe(loc: Any) -> dict[str, Any]:
            async with sem:
                snap = await load_snapshot_at(self._store, loc)
            ts = snap.manifest.timestamp
            when = dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9)
            return {"version": snap.version, "timestamp": when,
                    "metadata": dict(snap.manifest.table_metadata)}

        return list(await asyncio.gather(*(describe(loc) for loc in locations)))

    async def checkout_version(self, version: int) -> LanceDataset:
        """This dataset at another version."""
        snap = await load_snapshot(self._store, self._handler, version)
        return LanceDataset(self._store, self._handler, snap)

    # -- reading -----------------------------------------------------------------------------
    def scanner(self, columns: Sequence[str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None,
                batch_size: int | None = None, with_row_id: bool = False,
                with_row_address: bool = False, fragments: Sequence[Any] | None = None,
                ) -> Scanner:
        """A scan of this version with projection, filter, limit/offset and system columns."""
        return Scanner(self._ctx, columns=columns, filter=filter, limit=limit, offset=offset,
                       batch_size=batch_size, with_row_id=with_row_id,
                       with_row_address=with_row_address, fragments=fragments)

    def scan(self, columns: Sequence[str] | None = None, filter: str | pc.Expression | None = None,
             limit: int | None = None, offset: int | None = None, batch_size: int | None = None,
             with_row_id: bool = False, with_row_address: bool = False,
             ) -> AsyncIterator[pa.RecordBatch]:
        """Stream the rows as record batches (``async for batch in ds.scan(...)``)."""
        return self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                            with_row_address).to_batches()

    to_batches = scan

    async def to_table(self, columns: Sequence[str] | None = None,
                       filter: str | pc.Expression | None = None, limit: int | None = None,
                       offset: int | None = None, batch_size: int | None = None,
                       with_row_id: bool = False, with_row_address: bool = False) -> pa.Table:
        """Read the rows into one table."""
        return await self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                                  with_row_address).to_table()

    async def head(self, num_rows: int, columns: Sequence[str] | None = None) -> pa.Table:
        """The first ``num_rows`` rows."""
        return await self.to_table(columns=columns, limit=num_rows)

    async def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter`` if given), without reading data when possible."""
        return await self.scanner(filter=filter).count_rows()

    async def take(self, indices: Sequence[int] | Any, columns: Sequence[str] | None = None,
                   ) -> pa.Table:
        """Rows by position in the dataset (0 .. count_rows-1), in the order given."""
        return await take_rows(self._ctx, indices, columns)

    # -- changing rows -----------------------------------------------------------------------
    async def delete(self, predicate: str | pc.Expression, *,
                     conflict_retries: int = DEFAULT_CONFLICT_RETRIES) -> DeleteResult:
        """Delete the rows matching ``predicate`` (SQL text or a pyarrow expression).

        Commits a new version (also when nothing matches, as pylance does) and returns it with
        the number of rows deleted. Planned on this version; concurrent commits are rebased
        over or, when they changed the same rows, the delete is planned again on the newest
        version up to ``conflict_retries`` times.
        """
        snap, count, _ = await delete_rows(self._store, self._handler, self._snapshot,
                                           predicate, conflict_retries=conflict_retries)
        return DeleteResult(LanceDataset(self._store, self._handler, snap), count)

    async def update(self, updates: Mapping[str, Any],
                     where: str | pc.Expression | None = None, *,
                     conflict_retries: int = DEFAULT_CONFLICT_RETRIES) -> UpdateResult:
        """Set columns of the rows matching ``where`` (all rows if ``None``).

        ``updates`` maps column names to SQL expressions over the old row (``"v + 1"``,
        ``"'text'"``) or to plain Python values. Old rows are deleted and rewritten in new
        fragments (Lance's rewrite-rows mode). Returns the new version and the row count.
        """
        snap, count, _ = await update_rows(self._store, self._handler, self._snapshot, updates,
                                           where, conflict_retries=conflict_retries)
        return UpdateResult(LanceDataset(self._store, self._handler, snap), count)

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Start a merge insert (upsert) keyed on ``on`` (default: the primary key).

        Configure it with ``when_matched_update_all``, ``when_not_matched_insert_all`` and
        ``when_not_matched_by_source_delete``, then ``await builder.execute(source)``.
        """
        return MergeInsertBuilder(self._store, self._handler, self._snapshot, on,
                                  lambda snap: LanceDataset(self._store, self._handler, snap))


async def open_dataset(uri: str | os.PathLike[str], version: int | None = None, *,
                       storage_options: Mapping[str, Any] | None = None,
                       commit_handler: HandlerSpec = None) -> LanceDataset:
    """Open a dataset at its latest version, or at ``version`` (time travel).

    ``commit_handler``: how versions are resolved and committed; by default chosen by the URI
    scheme (``s3+ddb://`` commits through DynamoDB), else a handler object or the dotted name
    of one (see :mod:`alance.commit.registry`).
    Raises :class:`~alance.errors.DatasetNotFoundError` when nothing was ever committed there.
    """
    store = open_store(uri, storage_options)
    handler = _handler_for(uri, storage_options, commit_handler)
    snap = await load_snapshot(store, handler, version)
    return LanceDataset(store, handler, snap)


async def write_dataset(
    data: Any,
    uri: str | os.PathLike[str],
    schema: pa.Schema | None = None,
    mode: WriteMode = "create",
    *,
    max_rows_per_file: int = 1024 * 1024,
    max_rows_per_group: int = 1024,
    max_bytes_per_file: int = 90 * 1024**3,
    data_storage_version: str | None = None,
    enable_v2_manifest_paths: bool = True,
    storage_options: Mapping[str, Any] | None = None,
    commit_handler: HandlerSpec = None,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> LanceDataset:
    """Write ``data`` as a new dataset, or append to / overwrite an existing one.

    ``data``: a ``pa.Table``, ``RecordBatch``, ``RecordBatchReader``, pandas DataFrame, or a
    sync or async iterable of record batches (streamed: memory stays bounded by one file's
    buffers). ``mode``: ``"create"`` (fails if the dataset exists), ``"append"`` (creates it if
    missing; the schema must match) or ``"overwrite"``. ``commit_handler``: as for
    :func:`open_dataset`.
    """
    if mode not in ("create", "append", "overwrite"):
        raise InvalidInputError(f"mode must be create, append or overwrite, not {mode!r}")
    params = WriteParams(max_rows_per_file, max_rows_per_group, max_bytes_per_file)
    store = open_store(uri, storage_options)
    handler = _handler_for(uri, storage_options, commit_handler)
    try:
        base: Snapshot | None = await load_snapshot(store, handler)
    except DatasetNotFoundError:
        base = None
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
    if base is not None and mode == "create":
        raise AlreadyExistsError(f"a dataset already exists at {store.uri}; use mode='append' "
                                 "or mode='overwrite'")
    arrow_schema, batches = await record_batch_stream(data, schema)

    if base is not None and mode == "append":
        if base.data_storage_version not in ("0.1", "0.2", "legacy"):
            raise UnsupportedFeatureError(
                f"appending to a dataset with data storage version {base.data_storage_version}"
                " is not supported yet")
        lance_schema = base.schema
        lance_schema.check_compatible(arrow_schema)
        target = lance_schema.to_arrow()
        storage_version = base.data_storage_version
    else:
        storage_version = storage_version_for(data_storage_version)
        lance_schema = LanceSchema.from_arrow(arrow_schema)
        target = arrow_schema

    async def conformed() -> AsyncIterator[pa.RecordBatch]:
        async for batch in regroup(batches, params.rows_per_chunk):
            if not batch.schema.equals(target):
                batch = batch.cast(target)
            yield batch

    appending = base is not None and mode == "append"
    seed = dict(ReadContext(store, base).dictionaries) if appending and base else {}
    dictionaries = dict(seed)
    fragments = await write_fragments(store, lance_schema, conformed(), params, dictionaries)
    prelude = None
    read_version = base.version if base is not None else 0
    if appending:
        grown = [f.name for f in lance_schema.walk()
                 if f.id in seed and len(dictionaries[f.id]) != len(seed[f.id])]
        if grown:
            await delete_fragment_files(store, fragments)
            raise UnrepresentableValueError(
                f"columns {grown}: values missing from the dataset's dictionary; a v0.2 "
                "dataset keeps one dictionary per column, fixed when it was written")
        txn = new_append(read_version, fragments)
    else:
        lance_schema, prelude = dictionary_prelude(lance_schema, dictionaries)
        txn = new_overwrite(read_version, fragments, lance_schema)
    scheme = ManifestNamingScheme.V2 if enable_v2_manifest_paths else ManifestNamingScheme.V1
    async with removed_on_failure(store, fragments):
        snap = await commit_transaction(store, handler, base, txn,
                                        data_storage_version=storage_version,
                                        naming_scheme=scheme, max_retries=max_retries,
                                        prelude=prelude,
                                        must_create=base is None and mode == "create")
    return LanceDataset(store, handler, snap)
