"""Blocking twins of the dataset handle and what it hands out: scans, tags, the change feed,
merge-insert builders, statistics, SQL queries.

The one place where the blocking API *means* something different from the async one is the
dataset handle: as in pylance, a call that commits (``delete``, ``update``, ``insert``,
``merge_insert(...).execute``, ``add_columns``, ``merge``, ``drop_columns``, ``alter_columns``,
``restore``, ``compact_files``, config and metadata updates, ``add_bases``) *moves this
object* to the version it committed, whereas the async :class:`alance.LanceDataset` is an
immutable view of one version whose calls return the new version. The ``returns=`` functions
below (``_moves`` ...) are that difference, and all of it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa

from alance import _loop
from alance.commit.lock import LockCommitHandler
from alance.commit.registry import HandlerSpec
from alance.dataset import api as _api
from alance.dataset.dml.merge_insert import MergeInsertBuilder as _AsyncMergeInsertBuilder
from alance.dataset.evolution.config import MetadataUpdate, warn_deprecated
from alance.dataset.fragments.read import live_rows
from alance.dataset.fragments.session import Session
from alance.dataset.maintenance import stats as _stats
from alance.dataset.query import blobs as _blobs
from alance.dataset.query import sql as _sql
from alance.dataset.query.changes import ChangeFeed as _AsyncChangeFeed
from alance.dataset.query.full_text import FullTextScanner as _AsyncFullTextScanner
from alance.dataset.query.ranked import RankedSearch as _RankedSearch
from alance.dataset.query.scan import Scanner as _AsyncScanner
from alance.dataset.query.vector_search import NearestScanner as _AsyncNearestScanner
from alance.dataset.versions.tags import Tags as _AsyncTags
from alance.errors import InvalidInputError
from alance.sync.schema import LanceSchema
from alance.sync.twin import (
    Twin,
    blocking,
    blocking_function,
    forwarding,
    iterating,
    returning_self,
)

_A = _api.LanceDataset
D = TypeVar("D")

__all__ = ["ChangeFeed", "DatasetOptimizer", "FullTextScanner", "LanceDataset", "LanceStats",
           "MergeInsertBuilder", "NearestScanner", "Scanner", "ShardedBatchIterator", "SqlQuery",
           "SqlQueryBuilder", "Tags", "dataset", "manifest_needs_migration", "new_dataset",
           "new_in_result", "open_dataset", "write_dataset"]


# -- scans ---------------------------------------------------------------------------------------

class _ScanTwin(Twin):
    """What the blocking scanners share: their schemas, and Arrow readers, C streams and
    pandas over the scan."""

    @property
    def output_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields."""
        return self._async.output_schema

    @property
    def projected_schema(self) -> pa.Schema:
        """The schema of the batches this scan yields (pylance's name)."""
        return self._async.projected_schema

    @property
    def dataset_schema(self) -> pa.Schema:
        """The schema of the dataset version scanned."""
        return self._async.dataset_schema

    def to_reader(self) -> pa.RecordBatchReader:
        """The result as a :class:`pyarrow.RecordBatchReader`: batches are read as the
        consumer pulls them (memory stays bounded by a few batches)."""
        return pa.RecordBatchReader.from_batches(self._async.output_schema,
                                                 _loop.iterate(self._async.to_batches()))

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The result as an Arrow C stream (the PyCapsule interface): DuckDB, Polars, pandas
        and pyarrow read a scanner directly, streaming."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_pandas(self, **options: Any) -> Any:
        """The whole result as a pandas DataFrame (``options`` go to ``Table.to_pandas``)."""
        return _loop.run(self._async.to_table()).to_pandas(**options)


class Scanner(_ScanTwin, of=_AsyncScanner):
    """Blocking twin of :class:`alance.Scanner`."""

    @property
    def stats(self) -> Any:
        """Counters of what page statistics let the scan skip (see :meth:`explain`)."""
        return self._async.stats

    to_batches = iterating(_AsyncScanner.to_batches)
    to_table = blocking(_AsyncScanner.to_table)
    count_rows = blocking(_AsyncScanner.count_rows)
    explain = forwarding(_AsyncScanner.explain)
    explain_plan = forwarding(_AsyncScanner.explain_plan)
    analyze_plan = blocking(_AsyncScanner.analyze_plan)
    write_source = forwarding(_AsyncScanner.write_source)


class _RankedTwin(_ScanTwin):
    """What the blocking ranked searches share."""

    to_batches = iterating(_RankedSearch.to_batches)
    to_table = blocking(_RankedSearch.to_table)
    count_rows = blocking(_RankedSearch.count_rows)
    explain = forwarding(_RankedSearch.explain)
    analyze_plan = blocking(_RankedSearch.analyze_plan)
    write_source = forwarding(_RankedSearch.write_source)

    def explain_plan(self, verbose: bool = False) -> str:
        """The search as text, in the shape of pylance's plan."""
        return str(self._async.explain_plan(verbose))


class NearestScanner(_RankedTwin, of=_AsyncNearestScanner):
    """Blocking twin of a nearest-neighbour search (``scanner(nearest=...)``)."""


class FullTextScanner(_RankedTwin, of=_AsyncFullTextScanner):
    """Blocking twin of a full-text search (``scanner(full_text_query=...)``)."""


# -- how the pylance-style handle moves ----------------------------------------------------------

def _moves(ds: LanceDataset, result: Any) -> LanceDataset:
    """``returns=`` of calls committing a new version: this object moves there."""
    return ds._moved_to(result)


def _moves_none(ds: LanceDataset, result: Any) -> None:
    """As :func:`_moves`, returning ``None`` as pylance does."""
    ds._moved_to(result.dataset if isinstance(result, MetadataUpdate) else result)


def _moves_values(ds: LanceDataset, result: MetadataUpdate) -> dict[str, str]:
    """Config and metadata updates: move, and return the map the new version holds."""
    ds._moved_to(result.dataset)
    return result.values


def _moves_result(ds: LanceDataset, result: D) -> D:
    """DML and compaction results: move; ``result.dataset`` is this object."""
    moved: Any = result
    out: D = dataclasses.replace(moved, dataset=ds._moved_to(moved.dataset))
    return out


def new_dataset(owner: Any, result: _api.LanceDataset) -> LanceDataset:
    """``returns=`` of calls giving another version (or committed by a job with no handle to
    move): a new blocking handle."""
    return LanceDataset(result)


def new_in_result(owner: Any, result: D) -> D:
    """Results of distributed commits: ``result.dataset`` as a new blocking handle."""
    named: Any = result
    out: D = dataclasses.replace(named, dataset=LanceDataset(named.dataset))
    return out


def _as_dataset(result: _api.LanceDataset) -> LanceDataset:
    return LanceDataset(result)


def _bulk_result(result: D) -> D:
    """``commit_batch``'s result with its dataset as a blocking handle."""
    return new_in_result(None, result)


def _blob_files(owner: Any, result: Any) -> list[_blobs.BlockingBlobFile | None]:
    return _blobs.blocking(result, _loop.run)


# -- the dataset handle --------------------------------------------------------------------------

class LanceDataset(Twin, of=_A):
    """Blocking twin of :class:`alance.LanceDataset`, with pylance's object semantics (calls
    that commit move this object to the new version; ``checkout_version`` returns another
    object). Every method is derived from the async one: see :mod:`alance.sync.twin`."""

    def __init__(self, dataset: _api.LanceDataset) -> None:
        self._async = dataset

    def _moved_to(self, dataset: _api.LanceDataset) -> LanceDataset:
        """Point this object at ``dataset`` (the version a call just committed)."""
        defaults = self._async.default_scan_options
        if defaults and not dataset.default_scan_options:
            dataset = dataset.with_default_scan_options(defaults)
        self._async = dataset
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceDataset, (self._async,))

    # -- what this version is (no IO) ------------------------------------------------------------
    @property
    def uri(self) -> str:
        """The URI the dataset was opened with."""
        return self._async.uri

    @property
    def version(self) -> int:
        """The version this object reads."""
        return self._async.version

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of this version."""
        return self._async.schema

    @property
    def lance_schema(self) -> LanceSchema:
        """The Lance schema of this version (pylance's view: ``fields()``, ``field(name)``,
        ``to_pyarrow()``; alance's own attributes also answer)."""
        return LanceSchema(self._async.lance_schema)

    @property
    def store(self) -> Any:
        """The dataset's object store (see :attr:`alance.LanceDataset.store`)."""
        return self._async.store

    @property
    def commit_handler(self) -> Any:
        """The commit handler this dataset commits through."""
        return self._async.commit_handler

    @property
    def snapshot(self) -> Any:
        """This version as loaded: its manifest file, schema and fragments."""
        return self._async.snapshot

    @property
    def default_scan_options(self) -> dict[str, Any]:
        """The scanner arguments this handle applies by default."""
        return self._async.default_scan_options

    @property
    def read_context(self) -> Any:
        """The reading state of this version that scans share."""
        return self._async.read_context

    @property
    def manifest(self) -> Any:
        """The raw manifest message of this version."""
        return self._async.manifest

    @property
    def data_storage_version(self) -> str:
        """The data file format version of the dataset."""
        return self._async.data_storage_version

    @property
    def max_field_id(self) -> int:
        """The highest field id in use: in the schema or in any data file (as pylance's)."""
        return self._async.max_field_id

    @property
    def has_stable_row_ids(self) -> bool:
        """Whether rows keep their ``_rowid`` across updates and compaction."""
        return self._async.has_stable_row_ids

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata of this version."""
        return self._async.metadata

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema metadata of this version."""
        return self._async.schema_metadata

    @property
    def _ds(self) -> LanceDataset:
        """pylance code reaches its native dataset as ``ds._ds`` (``ds._ds.base_paths()``);
        here that is the dataset itself."""
        return self

    def __len__(self) -> int:
        """Rows in this version (``len(ds)``, as in pylance; from the manifest, no IO)."""
        return sum(live_rows(f) for f in self._async.manifest.fragments)

    with_default_scan_options = forwarding(_A.with_default_scan_options,
                                           returns=new_dataset)
    base_paths = forwarding(_A.base_paths)
    fragment_protos = forwarding(_A.fragment_protos)
    get_fragments = forwarding(_A.get_fragments)
    get_fragment = forwarding(_A.get_fragment)
    session = forwarding(_A.session)
    config = forwarding(_A.config)
    write_source = forwarding(_A.write_source)

    # -- versions --------------------------------------------------------------------------------
    @property
    def latest_version(self) -> int:
        """The newest committed version number (read from the store on each access, as in
        pylance; a method in the async API)."""
        return _loop.run(self._async.latest_version())

    commit = staticmethod(blocking_function(_A.commit, returns=_as_dataset))
    commit_batch = staticmethod(blocking_function(_A.commit_batch, returns=_bulk_result))
    read_transaction = blocking(_A.read_transaction)
    get_transactions = blocking(_A.get_transactions)
    versions = blocking(_A.versions)
    checkout_version = blocking(_A.checkout_version, returns=new_dataset)
    checkout_latest = blocking(_A.checkout_latest, returns=_moves_none)

    # -- reading ---------------------------------------------------------------------------------
    scanner = forwarding(_A.scanner)
    scan = iterating(_A.scan)
    to_batches = iterating(_A.to_batches)
    to_table = blocking(_A.to_table)
    head = blocking(_A.head)
    count_rows = blocking(_A.count_rows)
    take = blocking(_A.take)
    take_rows = blocking(_A.take_rows)
    #: pylance's spelling (``ds._take_rows(row_ids)``), kept for code written against it.
    _take_rows = take_rows
    sample = blocking(_A.sample)
    validate = blocking(_A.validate)
    sql = forwarding(_A.sql)
    changes = blocking(_A.changes)
    take_blobs = blocking(_A.take_blobs, returns=_blob_files)

    def to_reader(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                  filter: Any = None, **options: Any) -> pa.RecordBatchReader:
        """The rows as a streaming :class:`pyarrow.RecordBatchReader` (scanner options as for
        :meth:`scanner`)."""
        return Scanner(self._async.scanner(columns, filter, **options)).to_reader()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Every row as an Arrow C stream (the PyCapsule interface), read as it is consumed:
        ``duckdb.sql("select ... from ds")``, ``polars.from_arrow(ds)`` and
        ``pyarrow.RecordBatchReader.from_stream(ds)`` take the dataset directly."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_pandas(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                  filter: Any = None, **options: Any) -> Any:
        """The rows as a pandas DataFrame (scanner options as for :meth:`scanner`)."""
        return self.to_table(columns, filter, **options).to_pandas()

    # -- changing rows and columns (each moves this object) -------------------------------------
    insert = blocking(_A.insert, returns=_moves)
    delete = blocking(_A.delete, returns=_moves_result)
    update = blocking(_A.update, returns=_moves_result)
    add_columns = blocking(_A.add_columns, returns=_moves)
    merge = blocking(_A.merge, returns=_moves)
    drop_columns = blocking(_A.drop_columns, returns=_moves)
    alter_columns = blocking(_A.alter_columns, returns=_moves)
    add_bases = blocking(_A.add_bases, returns=_moves)

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Blocking :meth:`alance.LanceDataset.merge_insert`: ``execute`` moves this object
        to the version it commits."""
        return MergeInsertBuilder(self._async.merge_insert(on), self)

    # -- config and metadata (each moves this object) -------------------------------------------
    update_config = blocking(_A.update_config, returns=_moves_values)
    delete_config_keys = blocking(_A.delete_config_keys, returns=_moves_none)
    update_metadata = blocking(_A.update_metadata, returns=_moves_values)
    update_schema_metadata = blocking(_A.update_schema_metadata, returns=_moves_values)
    update_field_metadata = blocking(_A.update_field_metadata, returns=_moves_none)

    # Deprecated (as in pylance): the warning is raised here, in the caller's thread, so that
    # it points at the caller's line.
    def replace_schema_metadata(self, new_metadata: Mapping[str, str]) -> None:
        """Deprecated (as in pylance): ``update_schema_metadata(new_metadata, replace=True)``."""
        warn_deprecated("replace_schema_metadata", "update_schema_metadata(..., replace=True)")
        self.update_schema_metadata(new_metadata, replace=True)

    def replace_field_metadata(self, field_name: str | int,
                               new_metadata: Mapping[str, str]) -> None:
        """Deprecated (as in pylance): ``update_field_metadata({field: ...}, replace=True)``."""
        warn_deprecated("replace_field_metadata", "update_field_metadata(..., replace=True)")
        self.update_field_metadata({field_name: new_metadata}, replace=True)

    # -- version management ----------------------------------------------------------------------
    @property
    def stats(self) -> LanceStats:
        """Blocking twin of :attr:`alance.LanceDataset.stats`."""
        return LanceStats(self._async.stats)

    @property
    def optimize(self) -> DatasetOptimizer:
        """pylance's ``ds.optimize`` namespace (its calls move this object)."""
        return DatasetOptimizer(self)

    @property
    def tags(self) -> Tags:
        """Blocking twin of :attr:`alance.LanceDataset.tags`."""
        return Tags(self._async.tags)

    restore = blocking(_A.restore, returns=_moves)

    # -- indices ---------------------------------------------------------------------------------
    @property
    def has_index(self) -> bool:
        """Whether the dataset has any index."""
        return self._async.has_index

    describe_indices = forwarding(_A.describe_indices)
    list_indices = forwarding(_A.list_indices)
    index_statistics = blocking(_A.index_statistics)
    create_scalar_index = blocking(_A.create_scalar_index, returns=_moves)
    create_index = blocking(_A.create_index, returns=_moves)
    drop_index = blocking(_A.drop_index, returns=_moves)
    optimize_indices = blocking(_A.optimize_indices, returns=_moves)
    compact_files = blocking(_A.compact_files, returns=_moves_result)
    cleanup_old_versions = blocking(_A.cleanup_old_versions)

    @staticmethod
    def drop(base_uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
             ignore_not_found: bool | None = None) -> None:
        """Delete the dataset at ``base_uri`` and everything under it (see
        :func:`alance.dataset.drop.drop_dataset`)."""
        from alance.dataset.drop import drop_dataset
        _loop.run(drop_dataset(base_uri, storage_options, ignore_not_found))


# -- what the handle hands out -------------------------------------------------------------------

class LanceStats(Twin, of=_stats.LanceStats):
    """Blocking twin of :class:`alance.dataset.maintenance.stats.LanceStats`."""

    dataset_stats = blocking(_stats.LanceStats.dataset_stats)
    index_stats = blocking(_stats.LanceStats.index_stats)
    data_stats = blocking(_stats.LanceStats.data_stats)


class DatasetOptimizer(Twin):
    """Blocking twin of :class:`alance.dataset.maintenance.stats.DatasetOptimizer` (pylance's
    ``ds.optimize``); its calls move the dataset to the version they commit."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._dataset = dataset
        self._async = _stats.DatasetOptimizer(dataset._async)

    def _moves(self, result: Any) -> Any:
        new = getattr(result, "dataset", result)
        self._dataset._moved_to(new)
        self._async = _stats.DatasetOptimizer(new)
        if not hasattr(result, "__dataclass_fields__"):
            return None
        kept: Any = result
        return dataclasses.replace(kept, dataset=self._dataset)

    compact_files = blocking(_stats.DatasetOptimizer.compact_files,
                             returns=lambda self, r: self._moves(r))
    optimize_indices = blocking(_stats.DatasetOptimizer.optimize_indices,
                                returns=lambda self, r: self._moves(r))
    enable_auto_cleanup = blocking(_stats.DatasetOptimizer.enable_auto_cleanup,
                                   returns=lambda self, r: self._moves(r))
    disable_auto_cleanup = blocking(_stats.DatasetOptimizer.disable_auto_cleanup,
                                    returns=lambda self, r: self._moves(r))


class Tags(Twin, of=_AsyncTags):
    """Blocking twin of :class:`alance.dataset.versions.tags.Tags`."""

    list = blocking(_AsyncTags.list)
    list_ordered = blocking(_AsyncTags.list_ordered)
    get = blocking(_AsyncTags.get)
    get_version = blocking(_AsyncTags.get_version)
    create = blocking(_AsyncTags.create)
    update = blocking(_AsyncTags.update)
    delete = blocking(_AsyncTags.delete)


class ChangeFeed(Twin, of=_AsyncChangeFeed):
    """Blocking twin of :class:`alance.dataset.query.changes.ChangeFeed`: iterate it, or
    ``.to_table()``."""

    @property
    def schema(self) -> pa.Schema:
        """Schema of every batch."""
        return self._async.schema

    @property
    def begin_version(self) -> int:
        """The version the changes start after."""
        return self._async.begin_version

    @property
    def end_version(self) -> int:
        """The last version whose changes are included."""
        return self._async.end_version

    to_batches = iterating(_AsyncChangeFeed.to_batches)
    to_table = blocking(_AsyncChangeFeed.to_table)
    deleted_row_ids = blocking(_AsyncChangeFeed.deleted_row_ids)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.to_batches()


_M = _AsyncMergeInsertBuilder


def _executed(builder: MergeInsertBuilder, result: Any) -> Any:
    """The dataset the builder came from moves to the version the merge committed."""
    target = builder._target if builder._target is not None else LanceDataset(result.dataset)
    return _moves_result(target, result)


def _uncommitted(builder: MergeInsertBuilder, result: Any) -> Any:
    from alance.dataset.commit.operations import from_wire
    txn, counts = result
    return from_wire(txn), counts


class MergeInsertBuilder(Twin, of=_M):
    """Blocking twin of :class:`alance.dataset.dml.merge_insert.MergeInsertBuilder`; ``execute``
    moves the dataset it was built from to the new version (as in pylance) and returns the
    counts (``result["num_inserted_rows"]`` ...)."""

    def __init__(self, builder: _AsyncMergeInsertBuilder,
                 target: LanceDataset | None = None) -> None:
        self._async = builder
        self._target = target

    def _adopted(self) -> None:
        self._target = None

    when_matched_update_all = forwarding(_M.when_matched_update_all, returns=returning_self)
    when_not_matched_insert_all = forwarding(_M.when_not_matched_insert_all,
                                             returns=returning_self)
    when_not_matched_by_source_delete = forwarding(_M.when_not_matched_by_source_delete,
                                                   returns=returning_self)
    when_matched_fail = forwarding(_M.when_matched_fail, returns=returning_self)
    retry_timeout = forwarding(_M.retry_timeout, returns=returning_self)
    conflict_retries = forwarding(_M.conflict_retries, returns=returning_self)
    use_index = forwarding(_M.use_index, returns=returning_self)
    explain_plan = forwarding(_M.explain_plan)
    analyze_plan = blocking(_M.analyze_plan)
    execute = blocking(_M.execute, returns=_executed)
    execute_uncommitted = blocking(_M.execute_uncommitted, returns=_uncommitted)


class SqlQuery(Twin, of=_sql.SqlQuery):
    """Blocking twin of :class:`alance.dataset.query.sql.SqlQuery`."""

    to_batch_records = blocking(_sql.SqlQuery.to_batch_records)
    to_stream_reader = forwarding(_sql.SqlQuery.to_stream_reader)


class SqlQueryBuilder(Twin, of=_sql.SqlQueryBuilder):
    """Blocking twin of :class:`alance.dataset.query.sql.SqlQueryBuilder`."""

    table_name = forwarding(_sql.SqlQueryBuilder.table_name, returns=returning_self)
    build = forwarding(_sql.SqlQueryBuilder.build)


# -- opening and writing -------------------------------------------------------------------------

open_dataset = blocking_function(_api.open_dataset, returns=LanceDataset)

#: ``lance.dataset`` arguments that tune pylance's IO block size and index cache entries;
#: alance sizes its own (see the README), so these are accepted and have no effect.
_TUNING_ONLY = ("block_size", "index_cache_size", "read_params")


def dataset(uri: str | os.PathLike[str], version: int | str | None = None,
            asof: dt.datetime | str | None = None, *,
            commit_lock: Any = None, storage_options: Mapping[str, Any] | None = None,
            commit_handler: HandlerSpec = None,
            default_scan_options: Mapping[str, Any] | None = None,
            metadata_cache_size_bytes: int | None = None,
            index_cache_size_bytes: int | None = None, session: Session | None = None,
            **kwargs: Any) -> LanceDataset:
    """pylance's ``lance.dataset``: :func:`open_dataset` with pylance's arguments.

    ``commit_lock(version)``: a context manager held around each commit (as pylance's);
    ``asof``: the newest version committed at or before that time. ``session`` shares the
    caches of another open; else the cache sizes make the session of this one (see
    :class:`~alance.Session`). Other tuning arguments (``block_size``, ``index_cache_size``,
    ``read_params``) are accepted and have no effect.
    """
    if session is None and (metadata_cache_size_bytes is not None
                            or index_cache_size_bytes is not None):
        session = Session(index_cache_size_bytes=index_cache_size_bytes,
                          metadata_cache_size_bytes=metadata_cache_size_bytes)
    unknown = sorted(k for k, v in kwargs.items() if k not in _TUNING_ONLY and v is not None)
    if unknown:
        raise InvalidInputError(f"unknown arguments to dataset(): {unknown}")
    if commit_lock is not None:
        if commit_handler is not None:
            raise InvalidInputError("pass commit_lock or commit_handler, not both")
        commit_handler = LockCommitHandler(commit_lock)
    opened = open_dataset(uri, version, storage_options=storage_options,
                          commit_handler=commit_handler, asof=asof, session=session)
    if default_scan_options:
        opened._async = opened._async.with_default_scan_options(default_scan_options)
    return opened


def write_dataset(data_obj: Any, uri: str | os.PathLike[str] | LanceDataset,
                  schema: pa.Schema | None = None,
                  mode: _api.WriteMode = "create", *, commit_lock: Any = None,
                  **kwargs: Any) -> LanceDataset:
    """Blocking :func:`alance.write_dataset` (same keyword arguments, pylance's parameter
    name ``data_obj`` for the data, and pylance's ``commit_lock``: a context manager factory
    held around the commit)."""
    if commit_lock is not None:
        if kwargs.get("commit_handler") is not None:
            raise InvalidInputError("pass commit_lock or commit_handler, not both")
        kwargs["commit_handler"] = LockCommitHandler(commit_lock)
    target = uri._async if isinstance(uri, LanceDataset) else uri  # pylance takes a dataset
    return LanceDataset(_loop.run(_api.write_dataset(data_obj, target, schema, mode, **kwargs)))


def manifest_needs_migration(dataset: LanceDataset) -> bool:
    """Whether the dataset's manifest lacks fields newer writers fill in (pylance's
    ``lance.lance.manifest_needs_migration``); the next commit adds them."""
    from alance.format.manifest import needs_migration
    snap = dataset._async.snapshot
    section = snap.manifest_file.index_section
    return needs_migration(snap.manifest, section.indices if section is not None else ())


class ShardedBatchIterator:
    """Blocking iterator over one worker's share of a dataset (pylance's
    ``ShardedBatchIterator``; see :mod:`alance.dataset.sharding`)."""

    def __init__(self, data: str | os.PathLike[str] | LanceDataset, rank: int,
                 world_size: int, *, columns: Sequence[str] | Mapping[str, str] | None = None,
                 batch_size: int = 10 * 1024, granularity: str = "fragment",
                 batch_readahead: int = 8, with_row_id: bool = False) -> None:
        self._dataset = data if isinstance(data, LanceDataset) else open_dataset(data)
        self._args = (rank, world_size)
        self._options: dict[str, Any] = dict(columns=columns, batch_size=batch_size,
                                             granularity=granularity, with_row_id=with_row_id)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        from alance.dataset.sharding import sharded_batches
        return _loop.iterate(sharded_batches(self._dataset._async, *self._args,
                                             **self._options))
