"""Blocking facade over alance's async API, name for name.

Every call runs the one async implementation on alance's background event loop (see
:mod:`alance._loop`) and waits for it. Safe from any thread, from code already running an event
loop (e.g. Jupyter), and in processes forked after use (Spark's Python workers)::

    from alance import sync as al
    ds = al.open_dataset("/data/events.lance")
    table = ds.to_table(columns=["id"], filter="id > 10")
"""

from __future__ import annotations

import builtins
import dataclasses
import datetime as dt
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from alance import _loop
from alance._proto import table_pb2
from alance.commit.lock import LockCommitHandler
from alance.commit.registry import HandlerSpec
from alance.dataset import blobs as _blobs
from alance.dataset import dataset as _async
from alance.dataset import distributed as _distributed
from alance.dataset import distributed_compaction as _distributed_compaction
from alance.dataset import distributed_dml as _distributed_dml
from alance.dataset import stats as _stats
from alance.dataset.changes import ChangeFeed as _AsyncChangeFeed
from alance.dataset.cleanup import CleanupStats
from alance.dataset.compaction import CompactionResult
from alance.dataset.config import AutoCleanupConfig, MetadataUpdate, warn_deprecated
from alance.dataset.dml import DeleteResult, MergeInsertResult, UpdateResult
from alance.dataset.merge_insert import MergeInsertBuilder as _AsyncMergeInsertBuilder
from alance.dataset.read import live_rows
from alance.dataset.scan import Scanner as _AsyncScanner
from alance.dataset.tags import Tag
from alance.dataset.tags import Tags as _AsyncTags
from alance.errors import InvalidInputError
from alance.index.api import SyncIndexMethods  # [alance.index hook]

T = TypeVar("T")


_iterate = _loop.iterate


class Scanner:
    """Blocking twin of :class:`alance.Scanner`."""

    def __init__(self, scanner: _AsyncScanner) -> None:
        self._async = scanner

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

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Iterate over the result's record batches."""
        return _iterate(self._async.to_batches())

    def to_table(self) -> pa.Table:
        """The whole result as one table."""
        return _loop.run(self._async.to_table())

    def to_reader(self) -> pa.RecordBatchReader:
        """The result as a :class:`pyarrow.RecordBatchReader`: batches are read as the
        consumer pulls them (memory stays bounded by a few batches)."""
        return pa.RecordBatchReader.from_batches(self.output_schema, self.to_batches())

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The result as an Arrow C stream (the PyCapsule interface): DuckDB, Polars, pandas
        and pyarrow read a scanner directly, streaming."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_pandas(self, **options: Any) -> Any:
        """The whole result as a pandas DataFrame (``options`` go to ``Table.to_pandas``)."""
        return self.to_table().to_pandas(**options)

    @property
    def stats(self) -> Any:
        """Counters of what page statistics let the scan skip (see :meth:`explain`)."""
        return self._async.stats

    def explain(self) -> str:
        """What the scan reads and what page statistics let it skip."""
        return self._async.explain()

    def explain_plan(self, verbose: bool = False) -> str:
        """The scan's plan as text (see :meth:`alance.Scanner.explain_plan`)."""
        return self._async.explain_plan(verbose)

    def analyze_plan(self) -> str:
        """Run the scan and describe what it read (see :meth:`alance.Scanner.analyze_plan`)."""
        return _loop.run(self._async.analyze_plan())

    def count_rows(self) -> int:
        """Number of result rows."""
        return _loop.run(self._async.count_rows())


class LanceDataset(SyncIndexMethods):  # [alance.index hook] (alance.index.api)
    """Blocking twin of :class:`alance.LanceDataset`, with pylance's object semantics.

    As in pylance, calls that commit a new version (``insert``, ``delete``, ``update``,
    ``merge_insert`` ``execute``, ``add_columns``, ``merge``, ``drop_columns``,
    ``alter_columns``, ``restore``,
    ``compact_files``) move this object to that version; ``checkout_version`` returns another
    object. (The async :class:`alance.LanceDataset` is an immutable view of one version:
    its calls return the new version instead.)
    """

    def __init__(self, dataset: _async.LanceDataset) -> None:
        self._async = dataset

    def _moved_to(self, dataset: _async.LanceDataset) -> LanceDataset:
        """Point this object at ``dataset`` (the version a call just committed)."""
        if self._async._scan_defaults and not dataset._scan_defaults:
            dataset = dataset.with_default_scan_options(self._async._scan_defaults)
        self._async = dataset
        return self

    def __repr__(self) -> str:
        return repr(self._async)

    def __reduce__(self) -> tuple[Any, ...]:
        return (LanceDataset, (self._async,))

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

    def with_default_scan_options(self, options: Mapping[str, Any] | None) -> LanceDataset:
        """This version with default scanner arguments (see
        :meth:`alance.LanceDataset.with_default_scan_options`)."""
        return LanceDataset(self._async.with_default_scan_options(options))

    def base_paths(self) -> dict[int, DatasetBasePath]:
        """The extra roots this version's files may live under, by id."""
        return self._async.base_paths()

    def add_bases(self, new_bases: Sequence[DatasetBasePath],
                  transaction_properties: Mapping[str, str] | None = None) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.add_bases` (moves to the new version; returns
        this object)."""
        return self._moved_to(_loop.run(self._async.add_bases(new_bases,
                                                              transaction_properties)))

    @property
    def _ds(self) -> LanceDataset:
        """pylance code reaches its native dataset as ``ds._ds`` (``ds._ds.base_paths()``);
        here that is the dataset itself."""
        return self

    @property
    def manifest(self) -> table_pb2.Manifest:
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

    def fragment_protos(self) -> list[table_pb2.DataFragment]:
        """The fragments of this version as protobuf ``DataFragment`` messages."""
        return self._async.fragment_protos()

    def get_fragments(self, filter: str | pc.Expression | None = None) -> list[LanceFragment]:
        """The fragments of this version as :class:`LanceFragment` objects."""
        return [LanceFragment(f) for f in self._async.get_fragments(filter)]

    def get_fragment(self, fragment_id: int) -> LanceFragment | None:
        """The fragment with this id, or ``None``."""
        found = self._async.get_fragment(fragment_id)
        return None if found is None else LanceFragment(found)

    @staticmethod
    def drop(base_uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
             ignore_not_found: bool | None = None) -> None:
        """Delete the dataset at ``base_uri`` and everything under it (see
        :func:`alance.dataset.drop.drop_dataset`)."""
        from alance.dataset.drop import drop_dataset
        _loop.run(drop_dataset(base_uri, storage_options, ignore_not_found))

    @staticmethod
    def commit(base_uri: Any, operation: Any, read_version: int | None = None,
               *args: Any, **kwargs: Any) -> LanceDataset:
        """Commit a hand-built ``LanceOperation`` or ``Transaction`` (pylance's
        ``LanceDataset.commit``; see :func:`alance.dataset.manual_commit.commit`)."""
        return _manual_commit(base_uri, operation, read_version, *args, **kwargs)

    @staticmethod
    def commit_batch(dest: Any, transactions: Sequence[Any], *args: Any,
                     **kwargs: Any) -> Any:
        """Commit several Append transactions as one version (pylance's ``commit_batch``)."""
        return _manual_commit_batch(dest, transactions, *args, **kwargs)

    @property
    def latest_version(self) -> int:
        """The newest committed version number (read from the store on each access, as in
        pylance)."""
        return _loop.run(self._async.latest_version())

    def read_transaction(self, version: int) -> Any:
        """Blocking :meth:`alance.LanceDataset.read_transaction`."""
        return _loop.run(self._async.read_transaction(version))

    def get_transactions(self, recent_transactions: int = 10) -> list[Any]:
        """Blocking :meth:`alance.LanceDataset.get_transactions`."""
        return _loop.run(self._async.get_transactions(recent_transactions))

    def versions(self) -> list[dict[str, Any]]:
        """Every version with its timestamp, oldest first."""
        return _loop.run(self._async.versions())

    def checkout_version(self, version: int | str) -> LanceDataset:
        """This dataset at another version (a number or a tag name)."""
        return LanceDataset(_loop.run(self._async.checkout_version(version)))

    def scanner(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                filter: str | pc.Expression | None = None, limit: int | None = None,
                offset: int | None = None, batch_size: int | None = None,
                with_row_id: bool = False, with_row_address: bool = False,
                fragments: Sequence[Any] | None = None, **options: Any) -> Scanner:
        """A configured scan (see :meth:`alance.LanceDataset.scanner`)."""
        return Scanner(self._async.scanner(columns, filter, limit, offset, batch_size,
                                           with_row_id, with_row_address, fragments,
                                           **options))

    def scan(self, columns: Sequence[str] | Mapping[str, str] | None = None,
             filter: str | pc.Expression | None = None, limit: int | None = None,
             offset: int | None = None, batch_size: int | None = None,
             with_row_id: bool = False, with_row_address: bool = False, **options: Any,
             ) -> Iterator[pa.RecordBatch]:
        """Iterate over the rows as record batches."""
        return self.scanner(columns, filter, limit, offset, batch_size, with_row_id,
                            with_row_address, **options).to_batches()

    to_batches = scan

    def to_reader(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                  filter: str | pc.Expression | None = None, **options: Any,
                  ) -> pa.RecordBatchReader:
        """The rows as a streaming :class:`pyarrow.RecordBatchReader` (scanner options as for
        :meth:`scanner`)."""
        return self.scanner(columns, filter, **options).to_reader()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """Every row as an Arrow C stream (the PyCapsule interface), read as it is consumed:
        ``duckdb.sql("select ... from ds")``, ``polars.from_arrow(ds)`` and
        ``pyarrow.RecordBatchReader.from_stream(ds)`` take the dataset directly."""
        return self.scanner().__arrow_c_stream__(requested_schema)

    def to_pandas(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                  filter: str | pc.Expression | None = None, **options: Any) -> Any:
        """The rows as a pandas DataFrame (scanner options as for :meth:`scanner`)."""
        return self.to_table(columns, filter, **options).to_pandas()

    def to_table(self, columns: Sequence[str] | Mapping[str, str] | None = None,
                 filter: str | pc.Expression | None = None, limit: int | None = None,
                 offset: int | None = None, batch_size: int | None = None,
                 with_row_id: bool = False, with_row_address: bool = False,
                 **options: Any) -> pa.Table:
        """Read the rows into one table."""
        return _loop.run(self._async.to_table(columns, filter, limit, offset, batch_size,
                                              with_row_id, with_row_address, **options))

    def head(self, num_rows: int, columns: Sequence[str] | Mapping[str, str] | None = None,
             ) -> pa.Table:
        """The first ``num_rows`` rows."""
        return _loop.run(self._async.head(num_rows, columns))

    def count_rows(self, filter: str | pc.Expression | None = None) -> int:
        """Number of rows (matching ``filter`` if given)."""
        return _loop.run(self._async.count_rows(filter))

    def __len__(self) -> int:
        """Rows in this version (``len(ds)``, as in pylance; from the manifest, no IO)."""
        return sum(live_rows(f) for f in self._async.manifest.fragments)

    def take(self, indices: Sequence[int] | Any,
             columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by position in the dataset, in the order given."""
        return _loop.run(self._async.take(indices, columns))

    def sql(self, query: str) -> SqlQueryBuilder:
        """A SQL query over this version, run by DuckDB (see :mod:`alance.dataset.sql`)."""
        return SqlQueryBuilder(self._async.sql(query))

    def validate(self) -> None:
        """Blocking :meth:`alance.LanceDataset.validate`."""
        _loop.run(self._async.validate())

    def sample(self, num_rows: int, columns: Sequence[str] | Mapping[str, str] | None = None,
               randomize_order: bool = True, **kwargs: Any) -> pa.Table:
        """Blocking :meth:`alance.LanceDataset.sample`."""
        return _loop.run(self._async.sample(num_rows, columns, randomize_order, **kwargs))

    # -- stable row ids and the change data feed ----------------------------------------------
    @property
    def has_stable_row_ids(self) -> bool:
        """Whether rows keep their ``_rowid`` across updates and compaction."""
        return self._async.has_stable_row_ids

    def take_rows(self, row_ids: Sequence[int] | Any,
                  columns: Sequence[str] | Mapping[str, str] | None = None) -> pa.Table:
        """Rows by ``_rowid``, in the order given (see :meth:`alance.LanceDataset.take_rows`)."""
        return _loop.run(self._async.take_rows(row_ids, columns))

    #: pylance's spelling (``ds._take_rows(row_ids)``), kept for code written against it.
    _take_rows = take_rows

    def changes(self, begin_version: int, end_version: int | None = None,
                **kwargs: Any) -> ChangeFeed:
        """Blocking :meth:`alance.LanceDataset.changes`: iterate it, or ``.to_table()``."""
        return ChangeFeed(_loop.run(self._async.changes(begin_version, end_version, **kwargs)))
    # -- end of stable row ids -----------------------------------------------------------------

    # -- blob columns ---------------------------------------------------------------------------
    def take_blobs(self, column: str, indices: Sequence[int] | Any = None,
                   ids: Sequence[int] | Any = None, addresses: Sequence[int] | Any = None,
                   **kwargs: Any) -> list[_blobs.BlockingBlobFile | None]:
        """Blocking :meth:`alance.LanceDataset.take_blobs`: standard binary file objects."""
        found = _loop.run(self._async.take_blobs(column, indices, ids, addresses, **kwargs))
        return _blobs.blocking(found, _loop.run)
    # -- end of blob columns ----------------------------------------------------------------------

    def delete(self, predicate: str | pc.Expression, **kwargs: Any) -> DeleteResult:
        """Blocking :meth:`alance.LanceDataset.delete` (``result.dataset`` is blocking too)."""
        return _moved(self, _loop.run(self._async.delete(predicate, **kwargs)))

    def update(self, updates: Mapping[str, Any], where: str | pc.Expression | None = None,
               **kwargs: Any) -> UpdateResult:
        """Blocking :meth:`alance.LanceDataset.update`."""
        return _moved(self, _loop.run(self._async.update(updates, where, **kwargs)))

    def add_columns(self, transforms: Any, read_columns: Sequence[str] | None = None,
                    batch_size: int | None = None, **kwargs: Any) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.add_columns` (moves to the new version)."""
        return self._moved_to(_loop.run(self._async.add_columns(transforms, read_columns,
                                                                batch_size, **kwargs)))

    def merge(self, data: Any, left_on: str, right_on: str | None = None,
              schema: pa.Schema | None = None, **kwargs: Any) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.merge` (moves to the new version)."""
        return self._moved_to(_loop.run(self._async.merge(data, left_on, right_on, schema,
                                                          **kwargs)))

    def drop_columns(self, columns: Sequence[str]) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.drop_columns` (moves to the new version)."""
        return self._moved_to(_loop.run(self._async.drop_columns(columns)))

    def alter_columns(self, *alterations: Mapping[str, Any]) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.alter_columns` (moves to the new version)."""
        return self._moved_to(_loop.run(self._async.alter_columns(*alterations)))

    def merge_insert(self, on: str | Sequence[str] | None = None) -> MergeInsertBuilder:
        """Blocking :meth:`alance.LanceDataset.merge_insert`."""
        return MergeInsertBuilder(self._async.merge_insert(on), self)

    def insert(self, data: Any, *, mode: _async.WriteMode = "append",
               **kwargs: Any) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.insert` (moves to the new version, as
        pylance's ``insert``)."""
        return self._moved_to(_loop.run(self._async.insert(data, mode=mode, **kwargs)))

    # -- config and metadata ---------------------------------------------------------------
    def config(self) -> dict[str, str]:
        """The dataset config (the manifest's ``config`` map)."""
        return self._async.config()

    @property
    def metadata(self) -> dict[str, str]:
        """The table metadata of this version."""
        return self._async.metadata

    @property
    def schema_metadata(self) -> dict[str, str]:
        """The schema metadata of this version."""
        return self._async.schema_metadata

    def _metadata_moved(self, result: MetadataUpdate) -> dict[str, str]:
        self._moved_to(result.dataset)
        return result.values

    def update_config(self, values: Mapping[str, str | None], *,
                      replace: bool = False) -> dict[str, str]:
        """Blocking :meth:`alance.LanceDataset.update_config` (moves to the new version);
        returns the new config."""
        return self._metadata_moved(_loop.run(self._async.update_config(values,
                                                                        replace=replace)))

    def delete_config_keys(self, keys: Sequence[str]) -> None:
        """Blocking :meth:`alance.LanceDataset.delete_config_keys` (moves to the new version)."""
        self._moved_to(_loop.run(self._async.delete_config_keys(keys)))

    def update_metadata(self, values: Mapping[str, str | None], *,
                        replace: bool = False) -> dict[str, str]:
        """Blocking :meth:`alance.LanceDataset.update_metadata`; returns the table metadata."""
        return self._metadata_moved(_loop.run(self._async.update_metadata(values,
                                                                          replace=replace)))

    def update_schema_metadata(self, values: Mapping[str, str | None], *,
                               replace: bool = False) -> dict[str, str]:
        """Blocking :meth:`alance.LanceDataset.update_schema_metadata`; returns the schema
        metadata."""
        return self._metadata_moved(_loop.run(self._async.update_schema_metadata(
            values, replace=replace)))

    def update_field_metadata(self, field_updates: Mapping[Any, Mapping[str, str | None]], *,
                              replace: bool = False) -> None:
        """Blocking :meth:`alance.LanceDataset.update_field_metadata` (moves to the new
        version)."""
        self._moved_to(_loop.run(self._async.update_field_metadata(field_updates,
                                                                   replace=replace)))

    def replace_schema_metadata(self, new_metadata: Mapping[str, str]) -> None:
        """Deprecated (as in pylance): ``update_schema_metadata(new_metadata, replace=True)``."""
        warn_deprecated("replace_schema_metadata", "update_schema_metadata(..., replace=True)")
        self.update_schema_metadata(new_metadata, replace=True)

    def replace_field_metadata(self, field_name: str | int,
                               new_metadata: Mapping[str, str]) -> None:
        """Deprecated (as in pylance): ``update_field_metadata({field: ...}, replace=True)``."""
        warn_deprecated("replace_field_metadata", "update_field_metadata(..., replace=True)")
        self.update_field_metadata({field_name: new_metadata}, replace=True)
    # -- end of config and metadata ----------------------------------------------------------

    # -- version management (compaction, cleanup, restore, tags) -----------------------------
    @property
    def stats(self) -> LanceStats:
        """Blocking twin of :attr:`alance.LanceDataset.stats`."""
        return LanceStats(self._async.stats)

    @property
    def optimize(self) -> DatasetOptimizer:
        """pylance's ``ds.optimize`` namespace (``compact_files`` moves this object to the
        compacted version)."""
        return DatasetOptimizer(self)

    @property
    def tags(self) -> Tags:
        """Blocking twin of :attr:`alance.LanceDataset.tags`."""
        return Tags(self._async.tags)

    def restore(self, version: int | str | None = None) -> LanceDataset:
        """Blocking :meth:`alance.LanceDataset.restore` (moves to the restored version)."""
        return self._moved_to(_loop.run(self._async.restore(version)))

    def compact_files(self, **kwargs: Any) -> CompactionResult:
        """Blocking :meth:`alance.LanceDataset.compact_files` (moves to the compacted
        version; ``result.dataset`` is this object)."""
        result = _loop.run(self._async.compact_files(**kwargs))
        return dataclasses.replace(result, dataset=self._moved_to(result.dataset))

    def cleanup_old_versions(self, older_than: dt.timedelta | None = None,
                             retain_versions: int | None = None, **kwargs: Any) -> CleanupStats:
        """Blocking :meth:`alance.LanceDataset.cleanup_old_versions`."""
        return _loop.run(self._async.cleanup_old_versions(older_than, retain_versions,
                                                          **kwargs))
    # -- end of version management -----------------------------------------------------------


class LanceStats:
    """Blocking twin of :class:`alance.dataset.stats.LanceStats`."""

    def __init__(self, stats: _stats.LanceStats) -> None:
        self._async = stats

    def dataset_stats(self, max_rows_per_group: int = 1024) -> _stats.DatasetStats:
        """Deleted rows, fragments, and fragments smaller than one row group."""
        return _loop.run(self._async.dataset_stats(max_rows_per_group))

    def data_stats(self) -> _stats.DataStatistics:
        """Bytes on disk of every field."""
        return _loop.run(self._async.data_stats())

    def index_stats(self, index_name: str) -> dict[str, Any]:  # [alance.index hook]
        """Statistics of one index (see :func:`alance.index.api.index_stats`)."""
        return dict(_loop.run(self._async.index_stats(index_name)))


class DatasetOptimizer:
    """Blocking twin of :class:`alance.dataset.stats.DatasetOptimizer`."""

    def __init__(self, dataset: LanceDataset) -> None:
        self._dataset = dataset

    def compact_files(self, **options: Any) -> CompactionResult:
        """:meth:`LanceDataset.compact_files` (moves the dataset to the compacted version)."""
        return self._dataset.compact_files(**options)

    def enable_auto_cleanup(self, auto_cleanup_config: Mapping[str, int]) -> None:
        """Turn on automatic cleanup (moves the dataset to the new version)."""
        ds = self._dataset
        ds._moved_to(_loop.run(_stats.DatasetOptimizer(ds._async).enable_auto_cleanup(
            auto_cleanup_config)))

    def disable_auto_cleanup(self) -> None:
        """Turn automatic cleanup off (moves the dataset to the new version)."""
        ds = self._dataset
        ds._moved_to(_loop.run(_stats.DatasetOptimizer(ds._async).disable_auto_cleanup()))


class Tags:
    """Blocking twin of :class:`alance.dataset.tags.Tags`."""

    def __init__(self, tags: _AsyncTags) -> None:
        self._async = tags

    def list(self) -> dict[str, Tag]:
        """Every tag by name."""
        return _loop.run(self._async.list())

    def list_ordered(self, order: str | None = "desc") -> builtins.list[tuple[str, Tag]]:
        """Tags sorted by version."""
        return _loop.run(self._async.list_ordered(order))

    def get(self, name: str) -> Tag:
        """One tag."""
        return _loop.run(self._async.get(name))

    def get_version(self, name: str) -> int:
        """The version a tag names."""
        return _loop.run(self._async.get_version(name))

    def create(self, name: str, version: int | str) -> Tag:
        """Name a version."""
        return _loop.run(self._async.create(name, version))

    def update(self, name: str, version: int | str) -> Tag:
        """Point a tag at another version."""
        return _loop.run(self._async.update(name, version))

    def delete(self, name: str) -> None:
        """Remove a tag."""
        _loop.run(self._async.delete(name))


R = TypeVar("R", DeleteResult, UpdateResult, MergeInsertResult)


def _wrapped(result: R) -> R:
    """``result`` with its dataset as a new blocking object (distributed commits)."""
    return dataclasses.replace(result, dataset=LanceDataset(result.dataset))


def _moved(target: LanceDataset, result: R) -> R:
    """``result`` with its dataset being ``target``, moved to the version it committed."""
    return dataclasses.replace(result, dataset=target._moved_to(result.dataset))


class ChangeFeed:
    """Blocking twin of :class:`alance.dataset.changes.ChangeFeed`."""

    def __init__(self, feed: _AsyncChangeFeed) -> None:
        self._async = feed

    @property
    def schema(self) -> pa.Schema:
        """Schema of every batch."""
        return self._async.schema

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """Iterate over the changes as record batches."""
        return _iterate(self._async.to_batches())

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self.to_batches()

    def to_table(self) -> pa.Table:
        """All changes in one table."""
        return _loop.run(self._async.to_table())


class MergeInsertBuilder:
    """Blocking twin of :class:`alance.dataset.merge_insert.MergeInsertBuilder`."""

    def __init__(self, builder: _AsyncMergeInsertBuilder,
                 target: LanceDataset | None = None) -> None:
        self._async = builder
        self._target = target

    def when_matched_update_all(self, condition: str | None = None) -> MergeInsertBuilder:
        """Update matched rows (where ``condition`` holds)."""
        self._async.when_matched_update_all(condition)
        return self

    def when_not_matched_insert_all(self) -> MergeInsertBuilder:
        """Insert unmatched source rows."""
        self._async.when_not_matched_insert_all()
        return self

    def when_not_matched_by_source_delete(self, expr: str | None = None) -> MergeInsertBuilder:
        """Delete table rows no source row matches (where ``expr`` holds)."""
        self._async.when_not_matched_by_source_delete(expr)
        return self

    def when_matched_fail(self) -> MergeInsertBuilder:
        """See :meth:`alance.dataset.merge_insert.MergeInsertBuilder.when_matched_fail`."""
        self._async.when_matched_fail()
        return self

    def retry_timeout(self, timeout: dt.timedelta | float) -> MergeInsertBuilder:
        """See :meth:`alance.dataset.merge_insert.MergeInsertBuilder.retry_timeout`."""
        self._async.retry_timeout(timeout)
        return self

    def explain_plan(self, schema: pa.Schema | None = None, verbose: bool = False) -> str:
        """See :meth:`alance.dataset.merge_insert.MergeInsertBuilder.explain_plan`."""
        return self._async.explain_plan(schema, verbose)

    def analyze_plan(self, data: Any, *, schema: pa.Schema | None = None) -> str:
        """See :meth:`alance.dataset.merge_insert.MergeInsertBuilder.analyze_plan`."""
        return _loop.run(self._async.analyze_plan(data, schema=schema))

    def conflict_retries(self, retries: int) -> MergeInsertBuilder:
        """How many times to plan again after a retryable conflict."""
        self._async.conflict_retries(retries)
        return self

    def execute(self, data: Any, *, schema: pa.Schema | None = None) -> MergeInsertResult:
        """Run and commit the merge; the dataset it was built from moves to the new version
        (as in pylance). Returns the counts (``result["num_inserted_rows"]`` ...)."""
        result = _loop.run(self._async.execute(data, schema=schema))
        target = self._target if self._target is not None else LanceDataset(result.dataset)
        return _moved(target, result)

    def execute_uncommitted(self, data: Any, *, schema: pa.Schema | None = None,
                            ) -> tuple[Transaction, dict[str, int]]:
        """Write the merge without committing: a :class:`Transaction` for
        ``LanceDataset.commit`` and the counts (as pylance)."""
        txn, stats = _loop.run(self._async.execute_uncommitted(data, schema=schema))
        return from_wire(txn), stats


def open_dataset(uri: str | os.PathLike[str], version: int | str | None = None, *,
                 storage_options: Mapping[str, Any] | None = None,
                 commit_handler: HandlerSpec = None,
                 asof: dt.datetime | str | None = None) -> LanceDataset:
    """Blocking :func:`alance.open_dataset`."""
    return LanceDataset(_loop.run(_async.open_dataset(
        uri, version, storage_options=storage_options, commit_handler=commit_handler,
        asof=asof)))


#: ``lance.dataset`` arguments that tune pylance's caches and IO block size; alance sizes its
#: own (see the README), so these are accepted and have no effect.
_TUNING_ONLY = ("block_size", "index_cache_size", "metadata_cache_size_bytes", "session",
                "read_params")


def dataset(uri: str | os.PathLike[str], version: int | str | None = None,
            asof: dt.datetime | str | None = None, *,
            commit_lock: Any = None, storage_options: Mapping[str, Any] | None = None,
            commit_handler: HandlerSpec = None,
            default_scan_options: Mapping[str, Any] | None = None,
            **kwargs: Any) -> LanceDataset:
    """pylance's ``lance.dataset``: :func:`open_dataset` with pylance's arguments.

    ``commit_lock(version)``: a context manager held around each commit (as pylance's);
    ``asof``: the newest version committed at or before that time. Cache-tuning arguments
    (``block_size``, ``index_cache_size``, ...) are accepted and have no effect.
    """
    unknown = sorted(k for k, v in kwargs.items() if k not in _TUNING_ONLY and v is not None)
    if unknown:
        raise InvalidInputError(f"unknown arguments to dataset(): {unknown}")
    if commit_lock is not None:
        if commit_handler is not None:
            raise InvalidInputError("pass commit_lock or commit_handler, not both")
        commit_handler = LockCommitHandler(commit_lock)
    opened = open_dataset(uri, version, storage_options=storage_options,
                          commit_handler=commit_handler, asof=asof)
    if default_scan_options:
        opened._async = opened._async.with_default_scan_options(default_scan_options)
    return opened


def write_dataset(data_obj: Any, uri: str | os.PathLike[str] | LanceDataset,
                  schema: pa.Schema | None = None,
                  mode: _async.WriteMode = "create", *, commit_lock: Any = None,
                  **kwargs: Any) -> LanceDataset:
    """Blocking :func:`alance.write_dataset` (same keyword arguments, pylance's parameter
    name ``data_obj`` for the data, and pylance's ``commit_lock``: a context manager factory
    held around the commit)."""
    data = data_obj
    if commit_lock is not None:
        if kwargs.get("commit_handler") is not None:
            raise InvalidInputError("pass commit_lock or commit_handler, not both")
        kwargs["commit_handler"] = LockCommitHandler(commit_lock)
    target = uri._async if isinstance(uri, LanceDataset) else uri  # pylance takes a dataset
    return LanceDataset(_loop.run(_async.write_dataset(data, target, schema, mode, **kwargs)))


# -- distributed writes and deletes (alance.dataset.distributed*) ------------------------------
class DistributedWrite:
    """Blocking twin of :class:`alance.DistributedWrite` (picklable: ship it to tasks)."""

    def __init__(self, plan: _distributed.DistributedWrite) -> None:
        self._async = plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (DistributedWrite, (self._async,))

    @property
    def job_id(self) -> str:
        """The id of this planned write."""
        return self._async.job_id

    def write(self, data: Any, schema: pa.Schema | None = None,
              ) -> _distributed.UncommittedFragments:
        """Write a task's rows into new, uncommitted fragments."""
        return _loop.run(self._async.write(data, schema))

    def commit(self, parts: Iterable[_distributed.UncommittedFragments | None],
               **kwargs: Any) -> LanceDataset:
        """Publish every task's fragments as one new version."""
        return LanceDataset(_loop.run(self._async.commit(parts, **kwargs)))

    def abort(self, parts: Iterable[_distributed.UncommittedFragments | None]) -> None:
        """Delete the files of the write's tasks."""
        _loop.run(self._async.abort(parts))


def plan_write(uri: str | os.PathLike[str], schema: pa.Schema, mode: str = "append",
               **kwargs: Any) -> DistributedWrite:
    """Blocking :func:`alance.plan_write`."""
    return DistributedWrite(_loop.run(_distributed.plan_write(uri, schema, mode, **kwargs)))


class DistributedDelete:
    """Blocking twin of :class:`alance.DistributedDelete` (picklable)."""

    def __init__(self, plan: _distributed_dml.DistributedDelete) -> None:
        self._async = plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (DistributedDelete, (self._async,))

    def tasks(self, fragments_per_task: int = 1) -> list[list[int]]:
        """Fragment ids in groups, one group per task."""
        return self._async.tasks(fragments_per_task)

    def run(self, fragment_ids: Iterable[int]) -> _distributed_dml.DeletionPart:
        """Write the deletion files of these fragments (uncommitted)."""
        return _loop.run(self._async.run(fragment_ids))

    def commit(self, parts: Iterable[_distributed_dml.DeletionPart | None],
               **kwargs: Any) -> DeleteResult:
        """Commit every task's deletions as one Delete."""
        return _wrapped(_loop.run(self._async.commit(parts, **kwargs)))

    def abort(self, parts: Iterable[_distributed_dml.DeletionPart | None]) -> None:
        """Delete the deletion files of the tasks."""
        _loop.run(self._async.abort(parts))


def plan_delete(uri: str | os.PathLike[str], predicate: str, **kwargs: Any,
                ) -> DistributedDelete:
    """Blocking :func:`alance.plan_delete`."""
    return DistributedDelete(_loop.run(_distributed_dml.plan_delete(uri, predicate,
                                                                       **kwargs)))


class DistributedUpdate:
    """Blocking twin of :class:`alance.DistributedUpdate` (picklable)."""

    def __init__(self, plan: _distributed_dml.DistributedUpdate) -> None:
        self._async = plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (DistributedUpdate, (self._async,))

    def tasks(self, fragments_per_task: int = 1) -> list[list[int]]:
        """Fragment ids in groups, one group per task."""
        return self._async.tasks(fragments_per_task)

    def run(self, fragment_ids: Iterable[int]) -> _distributed_dml.UpdatePart:
        """Rewrite the matching rows of these fragments (uncommitted)."""
        return _loop.run(self._async.run(fragment_ids))

    def commit(self, parts: Iterable[_distributed_dml.UpdatePart | None],
               **kwargs: Any) -> UpdateResult:
        """Commit every task's rewrite as one Update."""
        return _wrapped(_loop.run(self._async.commit(parts, **kwargs)))

    def abort(self, parts: Iterable[_distributed_dml.UpdatePart | None]) -> None:
        """Delete what the tasks wrote."""
        _loop.run(self._async.abort(parts))


def plan_update(uri: str | os.PathLike[str], updates: Mapping[str, Any],
                where: str | None = None, **kwargs: Any) -> DistributedUpdate:
    """Blocking :func:`alance.plan_update`."""
    return DistributedUpdate(_loop.run(_distributed_dml.plan_update(uri, updates, where,
                                                                    **kwargs)))


class DistributedCompaction:
    """Blocking twin of :class:`alance.DistributedCompaction` (picklable)."""

    def __init__(self, plan: _distributed_compaction.DistributedCompaction) -> None:
        self._async = plan

    def __reduce__(self) -> tuple[Any, ...]:
        return (DistributedCompaction, (self._async,))

    def tasks(self) -> list[int]:
        """Task indexes, one per group of fragments to rewrite."""
        return self._async.tasks()

    def run(self, index: int) -> _distributed_compaction.CompactionPart:
        """Rewrite one group (uncommitted)."""
        return _loop.run(self._async.run(index))

    def commit(self, parts: Iterable[_distributed_compaction.CompactionPart | None],
               **kwargs: Any) -> LanceDataset:
        """Commit every group's rewrite as one Rewrite."""
        return LanceDataset(_loop.run(self._async.commit(parts, **kwargs)))

    def abort(self, parts: Iterable[_distributed_compaction.CompactionPart | None]) -> None:
        """Delete what the tasks wrote."""
        _loop.run(self._async.abort(parts))


def plan_distributed_compaction(uri: str | os.PathLike[str], options: Any = None,
                                **kwargs: Any) -> DistributedCompaction:
    """Blocking :func:`alance.plan_distributed_compaction`."""
    return DistributedCompaction(_loop.run(
        _distributed_compaction.plan_distributed_compaction(uri, options, **kwargs)))


__all__ = ["AutoCleanupConfig", "ChangeFeed", "DistributedCompaction", "DistributedDelete",
           "DistributedUpdate", "DistributedWrite",
           "LanceDataset", "MergeInsertBuilder", "Scanner", "Tags", "open_dataset", "plan_delete",
           "plan_distributed_compaction", "plan_update", "plan_write", "write_dataset"]


# The fragment and manual-commit API (alance.sync_fragment imports this module: import last).
from alance.dataset.fragment_meta import (  # noqa: E402
    DataFile,
    DeletionFile,
    FragmentMetadata,
    RowIdMeta,
)
from alance.dataset.lance_operation import (  # noqa: E402
    LANCE_COMMIT_MESSAGE_KEY,
    LanceOperation,
    Transaction,
    from_wire,
)
from alance.dataset.progress import (  # noqa: E402
    FileSystemFragmentWriteProgress,
    FragmentWriteProgress,
    NoopFragmentWriteProgress,
)
from alance.sync_fragment import (  # noqa: E402
    BulkCommitResult,
    FragmentSession,
    LanceFragment,
    format_fragment,
    write_fragments,
)
from alance.sync_fragment import commit as _manual_commit  # noqa: E402
from alance.sync_fragment import commit_batch as _manual_commit_batch  # noqa: E402

__all__ += ["LANCE_COMMIT_MESSAGE_KEY", "BulkCommitResult", "DataFile", "DeletionFile",
            "FileSystemFragmentWriteProgress",
            "FragmentMetadata", "FragmentSession", "FragmentWriteProgress", "LanceFragment",
            "format_fragment",
            "NoopFragmentWriteProgress",
            "LanceOperation", "RowIdMeta", "Transaction", "write_fragments"]

from alance import sync_file as file  # noqa: E402
from alance.sync_file import (  # noqa: E402
    LanceFileReader,
    LanceFileSession,
    LanceFileWriter,
)

__all__ += ["LanceFileReader", "LanceFileSession", "LanceFileWriter", "file"]


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
        return _iterate(sharded_batches(self._dataset._async, *self._args, **self._options))


__all__ += ["ShardedBatchIterator"]


def manifest_needs_migration(dataset: LanceDataset) -> bool:
    """Whether the dataset's manifest lacks fields newer writers fill in (pylance's
    ``lance.lance.manifest_needs_migration``); the next commit adds them."""
    from alance.format.manifest import needs_migration
    snap = dataset._async._snapshot
    section = snap.manifest_file.index_section
    return needs_migration(snap.manifest, section.indices if section is not None else ())


__all__ += ["manifest_needs_migration"]

from alance.dataset.bases import DatasetBasePath  # noqa: E402

__all__ += ["DatasetBasePath"]

from alance import sync_schema as schema  # noqa: E402
from alance.sync_schema import LanceField, LanceSchema  # noqa: E402

__all__ += ["LanceField", "LanceSchema", "schema"]

from alance import vector  # noqa: E402

__all__ += ["vector"]


class _CompactionTask:
    """Blocking twin of :class:`alance.dataset.compaction_tasks.CompactionTask`."""

    def __init__(self, task: Any) -> None:
        self._async = task

    @property
    def read_version(self) -> int:
        """The version the task was planned on."""
        return int(self._async.read_version)

    @property
    def fragments(self) -> list[FragmentMetadata]:
        """The fragments the task rewrites."""
        return list(self._async.fragments)

    def execute(self, dataset: Any = None) -> Any:
        """Rewrite the task's fragments (nothing committed); a picklable RewriteResult."""
        return _loop.run(self._async.execute(dataset))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CompactionTask) and self._async == other._async

    def __hash__(self) -> int:
        return hash(self._async.index)

    def __repr__(self) -> str:
        return repr(self._async)


class _CompactionPlan:
    """Blocking twin of :class:`alance.dataset.compaction_tasks.CompactionPlan`."""

    def __init__(self, plan: Any) -> None:
        self._async = plan
        self.read_version = int(plan.read_version)
        self.tasks = [_CompactionTask(t) for t in plan.tasks]

    def num_tasks(self) -> int:
        """How many tasks there are."""
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _CompactionPlan) and self._async == other._async

    def __hash__(self) -> int:
        return hash(self.read_version)

    def __repr__(self) -> str:
        return repr(self._async)


class Compaction:
    """Blocking twin of :class:`alance.dataset.compaction_tasks.Compaction` (pylance's
    ``lance.optimize.Compaction``)."""

    @staticmethod
    def plan(dataset: LanceDataset, options: Mapping[str, Any] | None = None) -> Any:
        """Plan a compaction of ``dataset`` (tasks can be pickled and run anywhere)."""
        from alance.dataset.compaction_tasks import Compaction as _Compaction
        return _CompactionPlan(_loop.run(_Compaction.plan(dataset._async, options)))

    @staticmethod
    def commit(dataset: LanceDataset, rewrites: Iterable[Any]) -> Any:
        """Commit task results as one compaction; ``dataset`` moves to the new version.
        Returns the metrics."""
        from alance.dataset.compaction_tasks import Compaction as _Compaction
        new, metrics = _loop.run(_Compaction.commit(dataset._async, rewrites))
        dataset._moved_to(new)
        return metrics


from alance.dataset.compaction_tasks import RewriteResult  # noqa: E402

CompactionPlan = _CompactionPlan
CompactionTask = _CompactionTask
__all__ += ["Compaction", "CompactionPlan", "CompactionTask", "RewriteResult"]

from alance.dataset.batch_udf import BatchUDF, batch_udf  # noqa: E402

__all__ += ["BatchUDF", "batch_udf"]


class SqlQuery:
    """Blocking twin of :class:`alance.dataset.sql.SqlQuery`."""

    def __init__(self, query: Any) -> None:
        self._async = query

    def to_batch_records(self) -> list[pa.RecordBatch]:
        """Every result batch."""
        return _loop.run(self._async.to_batch_records())

    def to_stream_reader(self) -> pa.RecordBatchReader:
        """The results as a streaming reader."""
        return self._async.to_stream_reader()


class SqlQueryBuilder:
    """Blocking twin of :class:`alance.dataset.sql.SqlQueryBuilder`."""

    def __init__(self, builder: Any) -> None:
        self._async = builder

    def table_name(self, name: str) -> SqlQueryBuilder:
        """The name the query uses for the dataset (default ``dataset``)."""
        self._async.table_name(name)
        return self

    def build(self) -> SqlQuery:
        """The query, ready to run."""
        return SqlQuery(self._async.build())
