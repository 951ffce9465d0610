"""The ``alance`` Spark data source (Spark 4 Python Data Source API).

Reading (``spark.read.format("alance").load(uri)``): the version is fixed when Spark asks for
the schema, so every task reads the same version. One input partition per fragment, fragments
of more than ``rows_per_partition`` rows cut into row ranges. Spark does not tell Python
sources which columns a query uses, so column pruning is explicit: the ``columns`` option (or
a user schema naming a subset of the columns) limits what is read. Filter push-down is opt-in
(``option("pushdown", "true")``, see :class:`FilteringReader` for the Spark bug that makes
it unsafe by default): pushed filters (see :mod:`alance.spark.filters`) are evaluated while
scanning, reading the filter's columns first and the other columns only for matching rows.

Writing (``df.write.format("alance").mode("append"|"overwrite").save(uri)``): the write is
planned where Spark creates the writer; each task streams its Arrow batches into fragments and
returns their metadata; ``commit`` publishes all of them as one version (one Append or
Overwrite transaction, retried over concurrent commits); ``abort`` deletes what the tasks
reported.

Change data feed: ``option("changes_from", a)`` (with ``changes_to`` and ``include_deleted``)
reads the changes after version ``a`` instead of the rows (see :mod:`alance.spark.changes`).

Options (case-insensitive): ``version`` (read an older version), ``columns`` (comma-separated
projection; may name the system columns ``_rowid``, ``_rowaddr``, ``_row_created_at_version``,
``_row_last_updated_at_version``, read as bigint), ``pushdown`` (``true``: evaluate Spark's
filters in alance), ``rows_per_partition`` (default 1Mi), ``batch_size``,
``max_rows_per_file``, ``max_rows_per_group``, ``commit_handler``, ``data_storage_version``,
``changes_from``, ``changes_to``, ``include_deleted``; every other option is a storage option
(``aws_endpoint``, ``aws_region``, ``allow_http``, ...).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceWriter,
    Filter,
    InputPartition,
    WriterCommitMessage,
)

from alance import _loop, sync
from alance.dataset import api as _async
from alance.dataset.distributed.read import ReadTask, plan_read, scan_task
from alance.dataset.distributed.write import UncommittedFragments
from alance.dataset.query.row_ids import SYSTEM_COLUMNS
from alance.errors import InvalidInputError, SchemaMismatchError
from alance.spark.changes import ChangesReader, change_feed, change_schema
from alance.spark.filters import Converted, combine, convert_filter
from alance.spark.types import spark_arrow_schema, spark_field, spark_schema, to_spark_batch

#: Options the data source itself understands; all others are storage options.
OWN_OPTIONS = frozenset({"path", "version", "columns", "pushdown", "rows_per_partition",
                         "batch_size", "max_rows_per_file", "max_rows_per_group", "commit_handler",
                         "data_storage_version", "changes_from", "changes_to",
                         "include_deleted"})
DEFAULT_ROWS_PER_PARTITION = 1024 * 1024
#: Rows per Arrow batch handed to Spark: large batches keep per-batch costs small.
DEFAULT_BATCH_SIZE = 64 * 1024


def _int_option(options: Mapping[str, Any], name: str, default: int | None) -> int | None:
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInputError(f"option {name!r} must be an integer, got {value!r}") from None
    if number < (0 if name in ("version", "changes_from", "changes_to") else 1):
        raise InvalidInputError(f"option {name!r} must be positive, got {value!r}")
    return number


def _bool_option(options: Mapping[str, Any], name: str, default: bool) -> bool:
    value = str(options.get(name, default)).strip().lower()
    if value not in ("true", "false"):
        raise InvalidInputError(f"option {name!r} must be true or false, not {value!r}")
    return value == "true"


def _read_field(arrow: pa.Schema, name: str) -> pa.Field:
    """The Arrow field a read yields for ``name`` (a column or a system column)."""
    if name in SYSTEM_COLUMNS and name not in arrow.names:
        return pa.field(name, pa.uint64(), True)
    return arrow.field(name)


def storage_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that are meant for the object store."""
    return {k: v for k, v in options.items() if k.lower() not in OWN_OPTIONS}


def _uri(options: Mapping[str, Any]) -> str:
    uri = options.get("path")
    if not uri:
        raise InvalidInputError("no dataset URI: use .load(uri) / .save(uri) or "
                                ".option('path', uri)")
    return str(uri)


class AlanceDataSource(DataSource):
    """``format("alance")``: read and write Lance datasets with alance."""

    @classmethod
    def name(cls) -> str:
        return "alance"

    def _dataset(self) -> _async.LanceDataset:
        # Opened once and kept: the data source object is pickled to where Spark plans the
        # read, so schema and read see the same version (the manifest travels with it).
        ds = getattr(self, "_opened", None)
        if ds is None:
            version = _int_option(self.options, "version", None)
            if self._changes_from() is not None:
                version = _int_option(self.options, "changes_to", version)
            ds = _loop.run(_async.open_dataset(_uri(self.options), version,
                                               storage_options=storage_options(self.options)))
            self._opened = ds
        return ds

    def _changes_from(self) -> int | None:
        return _int_option(self.options, "changes_from", None)

    def _begin(self) -> _async.LanceDataset | None:
        """The begin version of a change feed read (None: from the start)."""
        begin = self._changes_from()
        if not begin:
            return None
        ds = getattr(self, "_opened_begin", None)
        if ds is None:
            ds = _loop.run(self._dataset().checkout_version(begin))
            self._opened_begin = ds
        return ds

    def _columns(self) -> list[str]:
        names = self._dataset().schema.names
        text = self.options.get("columns")
        if not text:
            return list(names)
        wanted = [c.strip() for c in str(text).split(",") if c.strip()]
        missing = [c for c in wanted if c not in names and c not in SYSTEM_COLUMNS]
        if missing:
            raise InvalidInputError(f"columns {missing} are not in the dataset ({names})")
        return wanted

    def _change_columns(self) -> list[str] | None:
        return self._columns() if self.options.get("columns") else None

    def schema(self) -> T.StructType:
        """The dataset's columns (or the ``columns`` option's) as Spark types; for a change
        feed read, the feed's columns."""
        if self._changes_from() is not None:
            return change_schema(change_feed(self._begin(), self._dataset(),
                                             self._change_columns(), True, None))
        arrow = self._dataset().lance_schema.to_arrow()
        return spark_schema(pa.schema([_read_field(arrow, n) for n in self._columns()]))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        """A reader of ``schema``'s columns (a user schema may name a subset of columns)."""
        ds = self._dataset()
        if self._changes_from() is not None:
            return ChangesReader(self._begin(), ds, schema, self._change_columns(),
                                 _bool_option(self.options, "include_deleted", True),
                                 _int_option(self.options, "batch_size", DEFAULT_BATCH_SIZE))
        arrow = ds.lance_schema.to_arrow()
        for f in schema.fields:
            if f.name not in arrow.names and f.name not in SYSTEM_COLUMNS:
                raise SchemaMismatchError(f"column {f.name!r} is not in the dataset "
                                          f"({arrow.names})")
            mine = spark_field(_read_field(arrow, f.name))
            if mine.dataType != f.dataType or (mine.nullable and not f.nullable):
                raise SchemaMismatchError(
                    f"column {f.name!r} reads as {mine.dataType.simpleString()}"
                    f"{'' if mine.nullable else ' NOT NULL'}; the schema given says "
                    f"{f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}")
        pushdown = _bool_option(self.options, "pushdown", False)
        cls = FilteringReader if pushdown else AlanceReader
        rows = _int_option(self.options, "rows_per_partition", DEFAULT_ROWS_PER_PARTITION)
        return cls(ds, schema, rows or DEFAULT_ROWS_PER_PARTITION,
                   _int_option(self.options, "batch_size", DEFAULT_BATCH_SIZE))

    def writer(self, schema: T.StructType, overwrite: bool) -> DataSourceWriter:
        """Plans the write (reads the latest version) and returns the task-side writer."""
        arrow = spark_arrow_schema(schema)
        kwargs: dict[str, Any] = {}
        for name in ("max_rows_per_file", "max_rows_per_group"):
            value = _int_option(self.options, name, None)
            if value is not None:
                kwargs[name] = value
        plan = sync.plan_write(
            _uri(self.options), arrow, "overwrite" if overwrite else "append",
            storage_options=storage_options(self.options),
            commit_handler=self.options.get("commit_handler"),
            data_storage_version=self.options.get("data_storage_version"), **kwargs)
        return AlanceWriter(plan)


class FragmentPartition(InputPartition):
    """One read task: a fragment's physical row range."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


@dataclass
class AlanceReader(DataSourceReader):
    """Reads one version; pickled to every read task. Spark evaluates every filter."""

    dataset: _async.LanceDataset
    schema: T.StructType
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    batch_size: int | None = None
    pushed: list[Filter] = field(default_factory=list)

    def _filter(self) -> Converted | None:
        arrow = self.dataset.lance_schema.to_arrow()
        converted = [convert_filter(f, arrow) for f in self.pushed]
        return combine([c for c in converted if c is not None])

    def partitions(self) -> list[InputPartition]:
        """One partition per fragment (or per row range of a large fragment)."""
        tasks = plan_read(self.dataset.fragment_protos(), self.rows_per_partition)
        return [FragmentPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows as Arrow batches in exactly the declared Spark schema."""
        if not isinstance(partition, FragmentPartition):
            return  # an empty dataset: Spark reads one placeholder partition
        target = spark_arrow_schema(self.schema)
        flt = self._filter()
        stream = scan_task(self.dataset, partition.task, columns=list(self.schema.names),
                           filter=flt.expression if flt else None,
                           filter_columns=flt.columns if flt else (),
                           batch_size=self.batch_size)
        try:
            while True:
                batch = _loop.run(_next(stream))
                if batch is None:
                    return
                if batch.num_rows:
                    yield to_spark_batch(batch, target)
        finally:
            _loop.run(stream.aclose())  # type: ignore[attr-defined]


@dataclass
class FilteringReader(AlanceReader):
    """An :class:`AlanceReader` that takes Spark's pushed filters (``pushdown`` option).

    Caveat (Spark 4.1-4.3): Spark keeps the read plan of a DataFrame's last query that pushed
    filters and reuses it for a later query on the *same DataFrame object* that has no
    filters, which then sees only the earlier query's rows. With push-down on, build a new
    DataFrame (``spark.read...load()``) per query.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep the filters that convert exactly (see :mod:`alance.spark.filters`)."""
        arrow = self.dataset.lance_schema.to_arrow()
        for f in filters:
            if convert_filter(f, arrow) is not None:
                self.pushed.append(f)
            else:
                yield f


async def _next(stream: Any) -> pa.RecordBatch | None:
    return await anext(stream, None)


@dataclass
class FragmentsMessage(WriterCommitMessage):
    """A write task's commit message: the fragments it wrote (uncommitted)."""

    part: UncommittedFragments


@dataclass
class AlanceWriter(DataSourceArrowWriter):
    """Task side: rows into fragments. Driver side: one commit, or cleanup."""

    plan: sync.DistributedWrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stream this task's batches into new fragments; report them (nothing committed)."""
        return FragmentsMessage(self.plan.write(iterator))

    def _parts(self, messages: list[WriterCommitMessage | None]) -> list[UncommittedFragments]:
        return [m.part for m in messages if isinstance(m, FragmentsMessage)]

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish every task's fragments as one new version."""
        self.plan.commit(self._parts(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files of the tasks that finished before the job failed."""
        self.plan.abort(self._parts(messages))
