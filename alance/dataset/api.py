"""The async dataset API: open, write, inspect versions, scan, take."""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.commit.registry import HandlerSpec, commit_handler_for
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.dml.delete import delete_rows
from alance.dataset.dml.merge_insert import MergeInsertBuilder
from alance.dataset.dml.results import (
    DEFAULT_CONFLICT_RETRIES,
    DEFAULT_RETRY_TIMEOUT,
    DeleteResult,
    UpdateResult,
    retry_seconds,
)
from alance.dataset.dml.update import update_rows
from alance.dataset.evolution import new_columns as evolution
from alance.dataset.evolution.config import (
    MetadataUpdate,
    check_changes,
    check_keys,
    commit_metadata_update,
    config_of,
    field_changes,
    schema_metadata_of,
    table_metadata_of,
    warn_deprecated,
)
from alance.dataset.fragments.inputs import appended_layout, record_batch_stream, regroup
from alance.dataset.fragments.json_columns import as_jsonb, text_view
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.session import Session, bind_session, session_of
from alance.dataset.fragments.write import (
    WriteParams,
    blob_chunk_bytes,
    blob_v2_inputs,
    delete_fragment_files,
    dictionary_prelude,
    file_version_of,
    removed_on_failure,
    storage_version_for,
    write_fragments,
)
from alance.dataset.maintenance.compaction import CompactionOptions, CompactionResult, compact_files
from alance.dataset.maintenance.indices import IndexMethods
from alance.dataset.maintenance.restore import restore_version
from alance.dataset.maintenance.stats import DatasetOptimizer, LanceStats
from alance.dataset.query.blobs import DEFAULT_BUFFER_SIZE as DEFAULT_BLOB_BUFFER_SIZE
from alance.dataset.query.blobs import BlobFile, take_blobs
from alance.dataset.query.changes import ChangeFeed
from alance.dataset.query.options import scan_options
from alance.dataset.query.row_ids import ROW_ID, uses_stable_row_ids
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.dataset.query.take import read_positions, take_rows
from alance.dataset.query.take_batch import TakeBatcher
from alance.dataset.query.take_rows import take_rows_by_id
from alance.dataset.versions.auto_cleanup import auto_cleanup_config
from alance.dataset.versions.bases import DatasetBasePath, registered, resolve_targets, target_of
from alance.dataset.versions.cleanup import CleanupStats, cleanup_old_versions
from alance.dataset.versions.snapshot import (
    Snapshot,
    load_latest,
    load_snapshot,
    load_snapshot_at,
)
from alance.dataset.versions.tags import Tags, resolve_version
from alance.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    NotFoundError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.feature_flags import check_writer_flags
from alance.format.manifest import ManifestNamingScheme
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore
from alance.io.uri import open_store, renew_memory_store
from alance.transaction.operations import new_append, new_overwrite, new_update_bases

if TYPE_CHECKING:
    from alance.dataset.fragment import LanceFragment

WriteMode = Literal["create", "append", "overwrite"]


def _handler_for(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None,
                 handler: HandlerSpec) -> CommitHandler:
    """The commit handler: ``handler`` if given (object or dotted name), else by URI scheme."""
    return commit_handler_for(uri, storage_options, handler)


def _destination(uri: Any, storage_options: Mapping[str, Any] | None,
                 handler: HandlerSpec) -> tuple[DatasetStore, CommitHandler]:
    """Store and commit handler to write to: a URI's, or (as pylance's ``write_dataset``
    takes a dataset as its ``uri``) an alance dataset's own unless others are given."""
    target = getattr(uri, "_async", uri)  # an alance.sync.LanceDataset wraps the async one
    if isinstance(target, LanceDataset):
        store = (target._store if storage_options is None
                 else open_store(target.uri, storage_options))
        return store, (target._handler if handler is None
                       else _handler_for(target.uri, storage_options, handler))
    return open_store(uri, storage_options), _handler_for(uri, storage_options, handler)


class LanceDataset(IndexMethods):
    """One version of a Lance dataset, opened for reading (and as the base of new commits).

    Instances are cheap, immutable views: writing returns a new instance for the new version.
    Create them with :func:`open_dataset` or :func:`write_dataset`.
    """

    #: Scanner arguments every scan uses unless given (see :meth:`with_default_scan_options`).
    _scan_defaults: dict[str, Any] = {}  # noqa: RUF012 - replaced per object, never mutated
    #: (the snapshot's Lance schema, its Arrow form for users), set on first use.
    _arrow_schema: tuple[Any, pa.Schema] | None = None

    def __init__(self, store: DatasetStore, handler: CommitHandler, snapshot: Snapshot) -> None:
        self._store = store
        self._handler = handler
        self._snapshot = snapshot
        self._ctx = ReadContext(store, snapshot, user_view=True)
        ctx = self._ctx
        # The session counts the loaded manifest while a handle on it lives.
        session, key = session_of(store), ("manifest", id(snapshot))
        if session.keep(key, snapshot.location.size or snapshot.manifest.ByteSize()):
            weakref.finalize(snapshot, session.forget, [key])
        self._takes = TakeBatcher(lambda positions, columns: read_positions(ctx, positions,
                                                                            columns))

    def __repr__(self) -> str:
        return f"LanceDataset({self.uri!r}, version={self.version})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickles the loaded version itself (manifest included), so unpickling costs no IO;
        # the store pickles as the URI and storage options that rebuild it.
        return (LanceDataset, (self._store, self._handler, self._snapshot))

    # -- metadata ---------------------------------------------------------------------------------
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
        """The Arrow schema of this version (with ``_rowid`` / ``_rowaddr`` when the default
        scan options ask for them, as scans then return them)."""
        # JSON columns as scans return them (arrow.json text), as pylance shows them. Every
        # query asks for it: the conversion is remembered for this version's schema object.
        lance_schema = self._snapshot.schema
        cached = self._arrow_schema
        if cached is None or cached[0] is not lance_schema:
            cached = (lance_schema, text_view(lance_schema).to_arrow_with_extensions())
            self._arrow_schema = cached
        schema = cached[1]
        if self._scan_defaults.get("with_row_id"):
            schema = schema.append(pa.field(ROW_ID, pa.uint64()))
        if self._scan_defaults.get("with_row_address"):
            schema = schema.append(pa.field(ROW_ADDRESS, pa.uint64()))
        return schema

    def session(self) -> Session:
        """The caches this handle shares with the others of its open (pylance's
        ``session()``): ``size_bytes()`` is what they hold."""
        return session_of(self._store)

    def base_paths(self) -> dict[int, DatasetBasePath]:
        """The extra roots this version's files may live under, by id (see
        :mod:`alance.dataset.versions.bases`)."""
        return {int(b.id): DatasetBasePath.from_proto(b)
                for b in self._snapshot.manifest.base_paths}

    def with_default_scan_options(self, options: Mapping[str, Any] | None) -> LanceDataset:
        """This version with scanner arguments every scan of it uses unless it passes its own
        (pylance's ``default_scan_options``)."""
        given = dict(options or {})
        known = set(inspect.signature(self.scanner).parameters) - {"options"}
        for name, value in given.items():
            if name not in known:
                scan_options({name: value})  # raises for arguments no scan takes
        copy = LanceDataset(self._store, self._handler, self._snapshot)
        copy._scan_defaults = given
        return copy

    @property
    def lance_schema(self) -> LanceSchema:
        """The Lance schema (field ids, logical types) of this version."""
        return self._snapshot.schema

    # -- what the handle is made of (for tools built on alance: the CLI, engines) ---------------
    @property
    def store(self) -> DatasetStore:
        """The dataset's object store (alance's IO layer: ranged reads, listing, puts)."""
        return self._store

    @property
    def commit_handler(self) -> CommitHandler:
        """The commit handler this dataset commits through."""
        return self._handler

    @property
    def snapshot(self) -> Snapshot:
        """This version as loaded: its manifest file, schema and fragments."""
        return self._snapshot

    @property
    def default_scan_options(self) -> dict[str, Any]:
        """The scanner arguments this handle applies by default (see
        :meth:`with_default_scan_options`)."""
        return dict(self._scan_defaults)

    @property
    def read_context(self) -> ReadContext:
        """The reading state of this version (opened files, caches) that scans share."""
        return self._ctx

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
        """The highest field id in use: in the schema or in any data file (as pylance's)."""
        return evolution.manifest_max_field_id(self._snapshot.manifest)

    def fragment_protos(self) -> list[table_pb2.DataFragment]:
        """The fragments of this version as protobuf ``DataFragment`` messages."""
        return self._snapshot.fragments

    def get_fragments(self, filter: str | pc.Expression | None = None) -> list[LanceFragment]:
        """The fragments of this version as :class:`~alance.dataset.fragment.LanceFragment`
        objects (as pylance; ``filter`` is not supported and must be ``None``)."""
        from alance.dataset.fragment import LanceFragment
        if filter is not None:
            raise UnsupportedFeatureError("get_fragments(filter=...) is not supported")
        return [LanceFragment(self, fragment=f) for f in self._snapshot.fragments]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment with this id, or ``None`` (as pylance)."""
        from alance.dataset.fragment import LanceFragment
        for f in self._snapshot.fragments:
            if f.id == fragment_id:
                return LanceFragment(self, fragment=f)
        return None

    async def latest_version(self) -> int:
        """The newest committed version number of the dataset."""
        return (await self._handler.latest(self._store)).version

    @staticmethod
    async def commit(base_uri: Any, operation: Any, read_version: int | None = None,
                     *args: Any, **kwargs: Any) -> LanceDataset:
        """Commit a hand-built ``LanceOperation`` or ``Transaction`` (see
        :func:`alance.dataset.manual_commit.commit`); returns the new version."""
        from alance.dataset.manual_commit import commit
        return await commit(base_uri, operation, read_version, *args, **kwargs)

    @staticmethod
    async def commit_batch(dest: Any, transactions: Sequence[Any], *args: Any,
                           **kwargs: Any) -> Any:
        """Commit several Append transactions as one version (see
        :func:`alance.dataset.manual_commit.commit_batch`)."""
        from alance.dataset.manual_commit import commit_batch
        return await commit_batch(dest, transactions, *args, **kwargs)

    async def read_transaction(self, version: int) -> Any:
        """The transaction that created ``version`` (a
        :class:`~alance.dataset.commit.operations.Transaction`), or ``None`` if it has none."""
        from alance.dataset.commit.loop import committed_transaction
        from alance.dataset.commit.operations import from_wire
        txn = await committed_transaction(self._store, self._handler, version)
        return None if txn is None else from_wire(txn)

    async def get_transactions(self, recent_transactions: int = 10) -> list[Any]:
        """The transactions of the newest ``recent_transactions`` versions up to this one,
        newest first (``None`` for a version without a readable transaction)."""
        first = max(1, self.version - recent_transactions + 1)
        return list(await asyncio.gather(*(self.read_transaction(v)
                                           for v in range(self.version, first - 1, -1))))

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

    async def checkout_version(self, version: int | str) -> LanceDataset:
        """This dataset at another version (a number or a tag name)."""
        number = await resolve_version(self._store, self._handler, version)
        snap = await load_snapshot(self._store, self._handler, number)
        return LanceDataset(self._store, self._handler, snap)

    # -- reading ----------------------------------------------------------------------------------
    def write_source(self) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
        """The schema (with the table's metadata) and batches a writer takes when this version
        is passed as data (e.g. ``write_dataset(ds, other_uri)``)."""
        scanner = self.scanner()
        return (scanner.output_schema.with_metadata(self.schema.metadata or {}),
                scanner.to_batches())

    def scanner(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None,
                batch_size: int | None = None, with_row_id: bool = False,
                with_row_address: bool = False, fragments: Sequence[Any] | None = None,
                **options: Any) -> Scanner:
        """A scan of this version with projection, filter, limit/offset and system columns.

        ``options``: pylance's other scanner arguments by keyword (``batch_readahead``,
        ``use_stats``, ``strict_batch_size``, tuning hints; see
        :mod:`alance.dataset.query.options`); ``nearest={"column", "q", "k", "metric"}`` (with
        ``prefilter``) returns the rows nearest to a vector (see
        :mod:`alance.dataset.query.vector_search`); ``full_text_query="words"`` (or
        ``{"query", "columns"}``) the rows matching text, BM25-ranked (see
        :mod:`alance.dataset.query.full_text`)."""
        if self._scan_defaults:
            given = {"columns": columns, "filter": filter, "limit": limit, "offset": offset,
                     "batch_size": batch_size, "fragments": fragments}
            merged = {k: v for k, v in self._scan_defaults.items()
                      if k not in options and given.get(k) is None}
            columns = merged.pop("columns", columns)
            filter = merged.pop("filter", filter)
            limit = merged.pop("limit", limit)
            offset = merged.pop("offset", offset)
            batch_size = merged.pop("batch_size", batch_size)
            fragments = merged.pop("fragments", fragments)
            with_row_id = with_row_id or bool(merged.pop("with_row_id", False))
            with_row_address = with_row_address or bool(merged.pop("with_row_address", False))
            options = {**merged, **options}
        full_text = options.pop("full_text_query", None)
        if full_text is not None:
            if options.get("nearest") is not None:
                raise UnsupportedFeatureError("nearest and full_text_query together (hybrid "
                                              "search) are not supported")
            from alance.dataset.query.full_text import FullTextScanner
            prefilter = bool(options.pop("prefilter", False))
            autoprojection_off = bool(options.pop("disable_scoring_autoprojection", False))
            fast_search = bool(options.pop("fast_search", False))
            return FullTextScanner(  # type: ignore[return-value]
                self, full_text, columns, filter, limit, offset, batch_size, with_row_id,
                with_row_address, fragments, prefilter, autoprojection_off, fast_search,
                options)
        nearest = options.pop("nearest", None)
        if nearest is not None:
            from alance.dataset.query.vector_search import NearestScanner
            prefilter = bool(options.pop("prefilter", False))
            autoprojection_off = bool(options.pop("disable_scoring_autoprojection", False))
            if options.pop("fast_search", False) and isinstance(nearest, Mapping):
                # pylance takes fast_search as a scanner argument (as for full-text search)
                nearest = {**nearest, "fast_search": True}
            return NearestScanner(  # type: ignore[return-value]
                self, nearest, columns, filter, limit, offset, batch_size, with_row_id,
                with_row_address, fragments, prefilter, autoprojection_off, options)
        return Scanner(self._ctx, columns=columns, filter=filter, limit=limit, offset=offset,
                       batch_size=batch_size, with_row_id=with_row_id,
                       with_row_address=with_row_address, fragments=fragments,
                       **scan_options(options))

    def scan(self, columns: Sequence[str] | Mapping[str, str] | None = None,
             filter: str | pc.Expression | None = None,
             limit: int | None = None, offset: int | None = None, batch_size: int | None = None,
             with_row_id: bool = False, with_row_address: bool = False, **options: Any,
             ) -> AsyncIterator[pa.RecordBatch]:
        """Stream the rows as record batches (``async for batch in ds.scan(...)``)."""
        return self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                            with_row_address, **options).to_batches()

    to_batches = scan

    async def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                       filter: str | pc.Expression | None = None, limit: int | None = None,
                       offset: int | None = None, batch_size: int | None = None,
                       with_row_id: bool = False, with_row_address: bool = False,
                       **options: Any) -> pa.Table:
        """Read the rows into one table (``options`` as for :meth:`scanner`)."""
        return await self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                                  with_row_address, **options).to_table()

    async def head(self, num_rows: int, columns: Sequence[str] | Mapping[str, str] | None = None,
                   ) -> pa.Table:
        """The first ``num_rows`` rows."""
        return await self.to_table(columns=columns, limit=num_rows)

    async def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter`` if given), without reading data when possible."""
        return await self.scanner(filter=filter).count_rows()

    async def take(self, indices: Sequence[int] | Any,
                   columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by position in the dataset (0 .. count_rows-1), in the order given.

        Takes issued concurrently on this dataset object share reads (see
        :mod:`alance.dataset.query.take_batch`); each gets exactly its own rows."""
        return await take_rows(self._ctx, indices, columns, self._takes)

    def sql(self, query: str) -> Any:
        """A SQL query over this version, run by DuckDB (see :mod:`alance.dataset.query.sql`):
        ``ds.sql("SELECT ... FROM dataset").build()``."""
        from alance.dataset.query.sql import SqlQueryBuilder
        return SqlQueryBuilder(self, query)

    async def validate(self) -> None:
        """Check this version against its files: every data and deletion file is read and
        checked against the manifest (see :mod:`alance.dataset.maintenance.validate`); raises
        :class:`~alance.errors.CorruptFileError` at the first inconsistency."""
        from alance.dataset.maintenance.validate import validate_version
        await validate_version(ReadContext(self._store, self._snapshot))

    async def sample(self, num_rows: int,
                     columns: Sequence[str] | Mapping[str, str] | None = None,
                     randomize_order: bool = True, *, seed: int | None = None) -> pa.Table:
        """``num_rows`` distinct rows drawn at random (in random order, or in dataset order
        with ``randomize_order=False``). ``seed`` makes the draw repeatable."""
        total = await self.count_rows()
        if isinstance(num_rows, bool) or not isinstance(num_rows, int) or not (
                0 <= num_rows <= total):
            raise InvalidInputError(f"sample: num_rows must be between 0 and {total} (the "
                                    f"rows in version {self.version}), got {num_rows!r}")
        picked = np.random.default_rng(seed).choice(total, num_rows, replace=False)
        if not randomize_order:
            picked.sort()
        return await self.take(picked, columns)

    # -- stable row ids and the change data feed (alance.dataset.query.row_ids / .changes) --------
    @property
    def has_stable_row_ids(self) -> bool:
        """Whether rows keep their ``_rowid`` across updates and compaction."""
        return uses_stable_row_ids(self.manifest)

    async def take_rows(self, row_ids: Sequence[int] | Any,
                        columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by ``_rowid`` (stable ids; row addresses without them), in the order given.

        ``columns`` may include system columns (``_rowid``, ``_rowaddr``,
        ``_row_created_at_version``, ``_row_last_updated_at_version``). An id naming no live
        row raises :class:`~alance.errors.InvalidInputError`.
        """
        return await take_rows_by_id(self._ctx, row_ids, columns)

    # -- blob columns (alance.dataset.query.blobs) ------------------------------------------------
    async def take_blobs(self, column: str, indices: Sequence[int] | Any = None,
                         ids: Sequence[int] | Any = None, addresses: Sequence[int] | Any = None,
                         *, buffer_size: int = DEFAULT_BLOB_BUFFER_SIZE,
                         ) -> list[BlobFile | None]:
        """Lazy file-like :class:`~alance.dataset.query.blobs.BlobFile` objects for the blobs of
        the selected rows of blob column ``column`` (``None`` where the blob is null), in
        the order given. Select rows by exactly one of ``indices`` (positions), ``ids``
        (``_rowid``) or ``addresses`` (``_rowaddr``). Scans return blob columns as their
        descriptors, as pylance does."""
        return await take_blobs(self._ctx, column, indices=indices, ids=ids,
                                addresses=addresses, buffer_size=buffer_size)
    # -- end of blob columns -----------------------------------------------------------------------

    async def changes(self, begin_version: int, end_version: int | None = None, *,
                      columns: Sequence[str] | None = None, include_deleted: bool = True,
                      batch_size: int | None = None) -> ChangeFeed:
        """Rows inserted, updated and deleted after ``begin_version`` up to ``end_version``
        (default: this version; ``begin_version=0``: from the start); see
        :mod:`alance.dataset.query.changes`. Needs stable row ids.

        ``async for batch in await ds.changes(3)`` streams; ``await feed.to_table()``.
        """
        end = self if end_version is None else await self.checkout_version(end_version)
        begin = None if begin_version == 0 else await self.checkout_version(begin_version)
        return ChangeFeed(begin._ctx if begin is not None else None, end._ctx, columns,
                          include_deleted=include_deleted, batch_size=batch_size)
    # -- end of stable row ids ---------------------------------------------------------------------

    # -- changing rows ----------------------------------------------------------------------------
    async def delete(self, predicate: str | pc.Expression, *,
                     conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                     retry_timeout: dt.timedelta | float | None = DEFAULT_RETRY_TIMEOUT,
                     ) -> DeleteResult:
        """Delete the rows matching ``predicate`` (SQL text or a pyarrow expression).

        Commits a new version (also when nothing matches, as pylance does) and returns it with
        the number of rows deleted. Planned on this version; concurrent commits are rebased
        over or, when they changed the same rows, the delete is planned again on the newest
        version up to ``conflict_retries`` times, within ``retry_timeout`` (default 30 s).
        """
        snap, count, _ = await delete_rows(self._store, self._handler, self._snapshot,
                                           predicate, conflict_retries=conflict_retries,
                                           retry_timeout=retry_seconds(retry_timeout))
        return DeleteResult(LanceDataset(self._store, self._handler, snap), count)

    async def update(self, updates: Mapping[str, Any],
                     where: str | pc.Expression | None = None, *,
                     conflict_retries: int = DEFAULT_CONFLICT_RETRIES,
                     retry_timeout: dt.timedelta | float | None = DEFAULT_RETRY_TIMEOUT,
                     ) -> UpdateResult:
        """Set columns of the rows matching ``where`` (all rows if ``None``).

        ``updates`` maps column names to SQL expressions over the old row (``"v + 1"``,
        ``"'text'"``) or to plain Python values. Old rows are deleted and rewritten in new
        fragments (Lance's rewrite-rows mode). Returns the new version and the row count.
        Conflicts are retried as :meth:`delete` retries them.
        """
        snap, count, _ = await update_rows(self._store, self._handler, self._snapshot, updates,
                                           where, conflict_retries=conflict_retries,
                                           retry_timeout=retry_seconds(retry_timeout))
        return UpdateResult(LanceDataset(self._store, self._handler, snap), count)

    # -- schema evolution (alance.dataset.evolution.new_columns) ----------------------------------
    async def add_columns(self, transforms: Any, read_columns: Sequence[str] | None = None,
                          batch_size: int | None = None, *, concurrency: int = 4,
                          progress: Any = None,
                          reader_schema: pa.Schema | None = None) -> LanceDataset:
        """Add columns computed for every row; returns the new version.

        ``transforms``: ``{name: SQL expression}``; a function (sync or async) from a batch of
        ``read_columns`` to the new columns, run on up to ``concurrency`` fragments at once
        (``progress`` is called with an
        :class:`~alance.dataset.evolution.backfill.Progress` after each
        batch); a table/reader of values in row order; or ``pa.Field``/``pa.Schema`` for
        all-null columns. Existing data files are not rewritten.
        """
        snap = await evolution.add_columns(self._store, self._handler, self._snapshot,
                                           transforms, read_columns, batch_size,
                                           concurrency=concurrency, progress=progress,
                                           reader_schema=reader_schema)
        return LanceDataset(self._store, self._handler, snap)

    async def merge(self, data: Any, left_on: str, right_on: str | None = None,
                    schema: pa.Schema | None = None, *, concurrency: int = 4) -> LanceDataset:
        """Add the columns of ``data`` joined on ``left_on`` = ``right_on`` (left join);
        ``data`` as :func:`write_dataset` takes it (``schema``: cast it to that schema)."""
        snap = await evolution.merge_columns(self._store, self._handler, self._snapshot, data,
                                             left_on, right_on, concurrency=concurrency,
                                             schema=schema)
        return LanceDataset(self._store, self._handler, snap)

    async def drop_columns(self, columns: Sequence[str]) -> LanceDataset:
        """Remove columns (metadata only; dotted paths reach struct fields)."""
        snap = await evolution.drop_columns(self._store, self._handler, self._snapshot, columns)
        return LanceDataset(self._store, self._handler, snap)

    async def alter_columns(self, *alterations: Mapping[str, Any]) -> LanceDataset:
        """Rename, change nullability or type: ``{"path", "name"?, "nullable"?,
        "data_type"?}`` each. A type change rewrites that column only."""
        snap = await evolution.alter_columns(self._store, self._handler, self._snapshot,
                                             alterations)
        return LanceDataset(self._store, self._handler, snap)

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Start a merge insert (upsert) keyed on ``on`` (default: the primary key).

        Configure it with ``when_matched_update_all``, ``when_not_matched_insert_all`` and
        ``when_not_matched_by_source_delete``, then ``await builder.execute(source)``.
        """
        return MergeInsertBuilder(self._store, self._handler, self._snapshot, on,
                                  lambda snap: LanceDataset(self._store, self._handler, snap))

    async def insert(self, data: Any, *, mode: WriteMode = "append",
                     compact_after: int | None = None, **kwargs: Any) -> LanceDataset:
        """Write ``data`` to this dataset (pylance's ``insert``): ``mode="append"`` (the
        default) or ``"overwrite"``; ``kwargs`` as for :func:`write_dataset` (``schema=``...).
        Uses this dataset's store, commit handler and caches; returns the new version.

        Auto-compaction (opt in): with ``compact_after=N``, or when the dataset's config holds
        ``alance.auto_compact.small_fragments = N``, an insert that leaves ``N`` or more small
        fragments (fewer than 1,048,576 rows, compaction's target) compacts and returns the
        compacted version. A service appending small batches keeps scans fast that way. The
        compaction is *tiered*: it merges the newest small fragments with older ones only
        while an older one holds at most 4 times the rows of those after it, so a 10-row
        insert never rewrites a large fragment (sizes grow geometrically, each row is
        rewritten a logarithmic number of times). :meth:`compact_files` merges every small
        fragment, as pylance's does.
        """
        written = await write_dataset(data, self, mode=mode, **kwargs)
        limit = compact_after
        if limit is None:
            configured = written.config().get(AUTO_COMPACT_KEY)
            limit = int(configured) if configured and configured.isdigit() else None
        if limit is not None and limit > 0:
            small = sum(1 for f in written._snapshot.fragments
                        if int(f.physical_rows) < SMALL_FRAGMENT_ROWS)
            if small >= max(limit, 2):
                options = CompactionOptions.from_config(dict(written.manifest.config))
                snap, _ = await compact_files(written._store, written._handler,
                                              written._snapshot, options, tiered=True)
                return written if snap is None else LanceDataset(written._store,
                                                                 written._handler, snap)
        return written

    async def checkout_latest(self) -> LanceDataset:
        """This dataset at its newest version (this object if it is the newest), reusing the
        store client and the caches: how a long-running service picks up other writers'
        commits."""
        newest = await self.latest_version()
        if newest == self.version:
            return self
        return await self.checkout_version(newest)


    # -- config and metadata (alance.dataset.evolution.config) -----------------------------------
    def config(self) -> dict[str, str]:
        """The dataset config: the manifest's ``config`` map (e.g. ``lance.auto_cleanup.*``)."""
        return config_of(self._snapshot)

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata of this version."""
        return table_metadata_of(self._snapshot)

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema metadata of this version (values as text)."""
        return schema_metadata_of(self._snapshot)

    async def add_bases(self, new_bases: Sequence[DatasetBasePath],
                        transaction_properties: Mapping[str, str] | None = None,
                        ) -> LanceDataset:
        """Register more base paths (roots data files may be written to with
        ``target_bases``); returns the new version (this one if ``new_bases`` is empty). A
        name or path already registered is an :class:`~alance.errors.InvalidInputError`."""
        bases = list(new_bases)
        if not bases:
            return self
        for base in bases:
            if not isinstance(base, DatasetBasePath):
                raise InvalidInputError(f"add_bases takes DatasetBasePath objects, not "
                                        f"{type(base).__name__}")
        txn = new_update_bases(self.version, [b.to_proto(b.id or 0) for b in bases])
        txn.transaction_properties.update(transaction_properties or {})
        snap = await commit_transaction(self._store, self._handler, self._snapshot, txn,
                                        data_storage_version=self.data_storage_version)
        return LanceDataset(self._store, self._handler, snap)

    async def _commit_maps(self, **changes: Any) -> LanceDataset:
        snap = await commit_metadata_update(self._store, self._handler, self._snapshot,
                                            **changes)
        return LanceDataset(self._store, self._handler, snap)

    async def update_config(self, values: Mapping[str, str | None], *,
                            replace: bool = False) -> MetadataUpdate:
        """Set (a str) or remove (``None``) config keys; with ``replace`` the values become the
        whole config. Commits an UpdateConfig; returns the new version and its config."""
        new = await self._commit_maps(config=check_changes(values), replace=replace)
        return MetadataUpdate(new, new.config())

    async def delete_config_keys(self, keys: Sequence[str]) -> LanceDataset:
        """Remove config keys (missing ones are ignored); returns the new version."""
        return await self._commit_maps(config=dict.fromkeys(check_keys(keys)))

    async def update_metadata(self, values: Mapping[str, str | None], *,
                              replace: bool = False) -> MetadataUpdate:
        """As :meth:`update_config`, for the table metadata."""
        new = await self._commit_maps(table_metadata=check_changes(values), replace=replace)
        return MetadataUpdate(new, new.metadata)

    async def update_schema_metadata(self, values: Mapping[str, str | None], *,
                                     replace: bool = False) -> MetadataUpdate:
        """As :meth:`update_config`, for the schema metadata."""
        new = await self._commit_maps(schema_metadata=check_changes(values), replace=replace)
        return MetadataUpdate(new, new.schema_metadata)

    async def update_field_metadata(self, field_updates: Mapping[Any, Mapping[str, str | None]],
                                    *, replace: bool = False) -> LanceDataset:
        """Change the metadata of fields named by path (``"a"``, ``"s.x"``; backticks quote a
        name holding dots) or id: ``{field: {key: str or None}}``, all in one commit; with
        ``replace`` each field's map is replaced. Returns the new version."""
        changes = field_changes(self._snapshot.schema, field_updates)
        return await self._commit_maps(field_metadata=changes, replace=replace)

    async def replace_schema_metadata(self, new_metadata: Mapping[str, str]) -> LanceDataset:
        """Deprecated (as in pylance): ``update_schema_metadata(new_metadata, replace=True)``."""
        warn_deprecated("replace_schema_metadata", "update_schema_metadata(..., replace=True)")
        return (await self.update_schema_metadata(new_metadata, replace=True)).dataset

    async def replace_field_metadata(self, field_name: str | int,
                                     new_metadata: Mapping[str, str]) -> LanceDataset:
        """Deprecated (as in pylance): ``update_field_metadata({field: ...}, replace=True)``."""
        warn_deprecated("replace_field_metadata", "update_field_metadata(..., replace=True)")
        return await self.update_field_metadata({field_name: new_metadata}, replace=True)
    # -- end of config and metadata ----------------------------------------------------------------

    # -- version management (compaction, cleanup, restore, tags) ----------------------------------
    @property
    def stats(self) -> LanceStats:
        """Statistics of this version (pylance's ``ds.stats``: ``await
        ds.stats.dataset_stats()``, ``await ds.stats.data_stats()``)."""
        return LanceStats(self._ctx)

    @property
    def optimize(self) -> DatasetOptimizer:
        """pylance's ``ds.optimize`` namespace (``await ds.optimize.compact_files(...)``)."""
        return DatasetOptimizer(self)

    @property
    def tags(self) -> Tags:
        """The dataset's tags: ``await ds.tags.create("v1", 1)``, ``list``, ``delete``..."""
        return Tags(self._store, self._handler)

    async def restore(self, version: int | str | None = None) -> LanceDataset:
        """Commit ``version`` (default: the version this object reads) as the newest version."""
        snap = await restore_version(self._store, self._handler,
                                     self.version if version is None else version)
        return LanceDataset(self._store, self._handler, snap)

    async def compact_files(self, *, target_rows_per_fragment: int | None = None,
                            max_rows_per_group: int | None = None,
                            max_bytes_per_file: int | None = None,
                            materialize_deletions: bool | None = None,
                            materialize_deletions_threshold: float | None = None,
                            num_threads: int | None = None, batch_size: int | None = None,
                            progress: Any = None) -> CompactionResult:
        """Merge small fragments and drop deleted rows (pylance's ``optimize.compact_files``).

        Unset options come from the ``lance.compaction.*`` config, then the defaults.
        ``progress(rows_done, rows_total)`` is called as rows are rewritten. Returns the
        metrics and the new version (no commit when there is nothing to compact).
        """
        options = CompactionOptions.from_config(
            dict(self.manifest.config), target_rows_per_fragment=target_rows_per_fragment,
            max_rows_per_group=max_rows_per_group, max_bytes_per_file=max_bytes_per_file,
            materialize_deletions=materialize_deletions,
            materialize_deletions_threshold=materialize_deletions_threshold,
            num_threads=num_threads, batch_size=batch_size)
        snap, metrics = await compact_files(self._store, self._handler, self._snapshot,
                                            options, progress=progress)
        new = self if snap is None else LanceDataset(self._store, self._handler, snap)
        return CompactionResult(new, metrics)

    async def cleanup_old_versions(self, older_than: dt.timedelta | None = None,
                                   retain_versions: int | None = None, *,
                                   delete_unverified: bool = False,
                                   error_if_tagged_old_versions: bool = True,
                                   dry_run: bool = False,
                                   progress: Callable[[int, int], Any] | None = None,
                                   ) -> CleanupStats:
        """Delete old versions and the files only they reference (see
        :mod:`alance.dataset.versions.cleanup`); ``older_than`` defaults to two weeks.
        ``progress(files_deleted, files_total)`` is called as files are deleted."""
        return await cleanup_old_versions(
            self._store, self._handler, self._snapshot, older_than, retain_versions,
            delete_unverified=delete_unverified,
            error_if_tagged_old_versions=error_if_tagged_old_versions, dry_run=dry_run,
            progress=progress)
    # -- end of version management -----------------------------------------------------------------


#: Dataset config key of the opt-in auto-compaction of :meth:`LanceDataset.insert`.
AUTO_COMPACT_KEY = "alance.auto_compact.small_fragments"
#: Fragments with fewer rows than this count as small (compaction's default target).
SMALL_FRAGMENT_ROWS = 1024 * 1024


async def open_dataset(uri: str | os.PathLike[str], version: int | str | None = None, *,
                       storage_options: Mapping[str, Any] | None = None,
                       commit_handler: HandlerSpec = None,
                       asof: dt.datetime | str | None = None,
                       session: Session | None = None) -> LanceDataset:
    """Open a dataset at its latest version, or at ``version`` (time travel: a number or a
    tag name), or at the newest version committed at or before ``asof`` (a datetime or an
    ISO 8601 string; naive times are local, as pylance takes them).

    ``commit_handler``: how versions are resolved and committed; by default chosen by the URI
    scheme (``s3+ddb://`` commits through DynamoDB), else a handler object or the dotted name
    of one (see :mod:`alance.commit.registry`).
    ``session``: the caches to share with other opens (see :meth:`LanceDataset.session`);
    by default the handles of this open get a session of their own.
    Raises :class:`~alance.errors.DatasetNotFoundError` when nothing was ever committed there.
    """
    store = open_store(uri, storage_options)
    if session is not None:
        bind_session(store, session)
    handler = _handler_for(uri, storage_options, commit_handler)
    snap = await load_snapshot(store, handler, await resolve_version(store, handler, version))
    opened = LanceDataset(store, handler, snap)
    if asof is None or version is not None:
        return opened
    return await opened.checkout_version(await _version_asof(opened, asof))


async def _version_asof(dataset: LanceDataset, asof: dt.datetime | str) -> int:
    """The newest version committed at or before ``asof``."""
    if isinstance(asof, str):
        try:
            asof = dt.datetime.fromisoformat(asof)
        except ValueError as exc:
            raise InvalidInputError(f"asof is not an ISO 8601 time: {asof!r}") from exc
    if not isinstance(asof, dt.datetime):
        raise InvalidInputError(f"asof must be a datetime or an ISO 8601 string, not {asof!r}")
    limit = asof.astimezone()  # naive: local time; aware: converted
    found = [v["version"] for v in await dataset.versions()
             if v["timestamp"].astimezone() <= limit]
    if not found:
        raise NotFoundError(f"{dataset.uri}: no version was committed at or before {asof}")
    return int(max(found))


async def write_dataset(
    data_obj: Any,
    uri: str | os.PathLike[str] | LanceDataset,
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
    enable_stable_row_ids: bool = False,
    auto_cleanup_options: Mapping[str, int] | None = None,
    commit_message: str | None = None,
    transaction_properties: Mapping[str, str] | None = None,
    progress: Any = None,
    initial_bases: Sequence[DatasetBasePath] | None = None,
    target_bases: Sequence[str] | None = None,
) -> LanceDataset:
    """Write ``data`` as a new dataset, or append to / overwrite an existing one.

    ``progress``: pylance's ``FragmentWriteProgress`` hooks (``begin``/``complete`` per
    data file), or a callable ``progress(rows_written, rows_total)`` called after each batch
    is written (``rows_total`` is the input's row count when it has one, e.g. a table, else
    ``None``). ``transaction_properties`` are stored with the commit's transaction, and
    ``commit_message`` among them (as pylance: see :meth:`LanceDataset.read_transaction`).

    ``auto_cleanup_options`` (pylance's ``{"interval": n, "older_than_seconds": s}``): when
    this write creates the dataset, every ``n``-th commit afterwards removes versions older
    than ``s`` seconds (stored in the dataset's config, so pylance's commits do it too).

    ``data_obj``: a ``pa.Table``, ``RecordBatch``, ``RecordBatchReader``, pyarrow or Lance
    dataset, dict of columns, list of rows, pandas or polars DataFrame, or a sync or async
    iterable of record batches (readers, datasets and iterables are streamed: memory stays
    bounded by one file's buffers); see :mod:`alance.dataset.fragments.inputs`. ``schema``: cast the
    data to it (without loss). ``uri``: a URI, or a dataset (its store and commit handler).
    ``mode``: ``"create"`` (fails if the dataset exists), ``"append"`` (creates it if
    missing; columns are matched by name, nullable ones may be missing) or ``"overwrite"``.
    ``commit_handler``: as for :func:`open_dataset`. ``data_storage_version``: the data
    file format of a new dataset: ``"2.2"`` (the default, also ``"stable"``), ``"2.1"``,
    ``"2.0"`` (no maps, no null structs), or ``"legacy"`` / ``"0.1"`` / ``"0.2"`` (v0.2
    files, which refuse values they cannot hold, e.g. nulls in fixed-width columns);
    appends always write the dataset's own version, and overwrites keep it unless one is
    given. ``enable_stable_row_ids``: give rows ids that survive updates and compaction,
    and track row versions (only when the dataset is created; asking for them on an
    existing dataset without them is :class:`~alance.errors.InvalidInputError`).
    ``initial_bases`` (create only): extra roots to register; ``target_bases``: the bases
    (names or paths) new data files go to, in turn (see :mod:`alance.dataset.versions.bases`).
    """
    if mode not in ("create", "append", "overwrite"):
        raise InvalidInputError(f"mode must be create, append or overwrite, not {mode!r}")
    data = data_obj
    params = WriteParams(max_rows_per_file, max_rows_per_group, max_bytes_per_file)
    store, handler = _destination(uri, storage_options, commit_handler)  # uri: or a dataset
    checked_at = time.monotonic()  # when the newest version was looked up (see the commit)
    try:
        base: Snapshot | None = await load_latest(
            store, handler, uri._snapshot if isinstance(uri, LanceDataset) else None)
    except DatasetNotFoundError:
        base = None
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
        if enable_stable_row_ids and not uses_stable_row_ids(base.manifest):
            raise InvalidInputError(
                f"{store.uri} was created without stable row ids; they can only be enabled "
                "when a dataset is created")
    if base is not None and mode == "create":
        # A memory:// name starts a new dataset, as pylance's per-call memory stores do.
        fresh = None if isinstance(uri, LanceDataset) else renew_memory_store(store)
        if fresh is None:
            raise AlreadyExistsError(f"a dataset already exists at {store.uri}; use "
                                     "mode='append' or mode='overwrite'")
        store, base = fresh, None
    if initial_bases and mode != "create":
        raise InvalidInputError(f"Cannot register new bases in {mode.capitalize()} mode. Only "
                                "CREATE mode can register new bases (or add_bases)")
    known_bases = list(base.manifest.base_paths) if base is not None else []
    new_bases = registered(initial_bases or (), known_bases)
    options = store.reopen_args[1] if store.reopen_args else None
    targets = [target_of(b, options)
               for b in resolve_targets(list(target_bases or ()), known_bases + new_bases)]
    arrow_schema, batches = await record_batch_stream(data, schema)
    arrow_schema, batches = await as_jsonb(arrow_schema, batches)  # JSON text -> JSONB
    # Blob v1 input fields become blob v2 columns in 2.2+ datasets (alance.dataset.fragments.write).
    arrow_schema, batches = blob_v2_inputs(arrow_schema, batches, (
        base.data_storage_version if base is not None and (
            mode == "append" or data_storage_version is None)
        else storage_version_for(data_storage_version)))

    if base is not None and mode == "append":
        file_version_of(base.data_storage_version)  # refuses versions alance cannot write
        # Columns in any order, nullable ones may be left out (as pylance): see inputs.
        lance_schema, batches = appended_layout(
            base.schema, arrow_schema, batches,
            legacy=file_version_of(base.data_storage_version) is None)
        target = lance_schema.to_arrow()
        storage_version = base.data_storage_version
    elif base is not None and data_storage_version is None:
        # Overwriting keeps the dataset's data storage version unless one is given.
        storage_version = base.data_storage_version
        file_version_of(storage_version)
        lance_schema = LanceSchema.from_arrow(arrow_schema)
        target = arrow_schema
    else:
        storage_version = storage_version_for(data_storage_version)
        lance_schema = LanceSchema.from_arrow(arrow_schema)
        target = arrow_schema

    hooks = progress if hasattr(progress, "begin") else None
    report_rows = progress if progress is not None and hooks is None else None
    total_rows = getattr(data_obj, "num_rows", None)
    total_rows = total_rows if isinstance(total_rows, int) else None

    async def conformed() -> AsyncIterator[pa.RecordBatch]:
        rows = 0
        async for batch in regroup(batches, params.rows_per_chunk,
                                   blob_chunk_bytes(lance_schema), params.max_rows_per_group):
            if not batch.schema.equals(target):
                batch = batch.cast(target)
            yield batch
            rows += batch.num_rows
            if report_rows is not None:
                report_rows(rows, total_rows)

    appending = base is not None and mode == "append"
    seed = dict(ReadContext(store, base).dictionaries) if appending and base else {}
    dictionaries = dict(seed)
    from alance.dataset.fragments.progress import ProgressEvents
    events = ProgressEvents(hooks, 0, lance_schema.field_ids()) if hooks else None
    fragments = await write_fragments(store, lance_schema, conformed(), params, dictionaries,
                                      storage_version, events, targets)
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
        cleanup = (auto_cleanup_config(**_cleanup_args(auto_cleanup_options))
                   if auto_cleanup_options is not None and base is None else None)
        txn = new_overwrite(read_version, fragments, lance_schema, cleanup)
        txn.overwrite.initial_bases.extend(new_bases)
    txn.transaction_properties.update(transaction_properties or {})
    if commit_message is not None:
        from alance.dataset.commit.operations import LANCE_COMMIT_MESSAGE_KEY
        txn.transaction_properties[LANCE_COMMIT_MESSAGE_KEY] = commit_message
    scheme = ManifestNamingScheme.V2 if enable_v2_manifest_paths else ManifestNamingScheme.V1
    async with removed_on_failure(store, fragments, targets=targets):
        snap = await commit_transaction(store, handler, base, txn,
                                        data_storage_version=storage_version,
                                        naming_scheme=scheme, max_retries=max_retries,
                                        prelude=prelude,
                                        must_create=base is None and mode == "create",
                                        stable_row_ids=enable_stable_row_ids,
                                        base_checked_at=checked_at)
    return LanceDataset(store, handler, snap)


def _cleanup_args(options: Mapping[str, int]) -> dict[str, int]:
    """``interval`` and ``older_than_seconds`` of pylance's ``AutoCleanupConfig``."""
    try:
        return {"interval": options["interval"],
                "older_than_seconds": options["older_than_seconds"]}
    except (KeyError, TypeError) as exc:
        raise InvalidInputError("auto_cleanup_options needs 'interval' and "
                                f"'older_than_seconds': {options!r}") from exc
