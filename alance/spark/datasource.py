"""The ``alance`` Spark data source (Spark 4 Python Data Source API).

Reading (``spark.read.format("alance").load(uri)``): the version is fixed when Spark asks for
the schema, so every task reads the same version. One input partition per fragment, fragments
of more than ``rows_per_partition`` rows cut into row ranges. Spark does not tell Python
sources which columns a query uses, so column pruning is explicit: the ``columns`` option (or
a user schema naming a subset of the columns) limits what is read. The ``filter`` option (SQL)
and pushed filters (see :mod:`alance.spark.filters`) are evaluated while scanning, reading the
filter's columns first and the other columns only for matching rows.

Writing (``df.write.format("alance").mode("append"|"overwrite").save(uri)``): the write is
planned where Spark creates the writer; each task streams its Arrow batches into fragments and
returns their metadata; ``commit`` publishes all of them as one version (one Append or
Overwrite transaction, retried over concurrent commits); ``abort`` deletes what the tasks
reported.

Change data feed: ``option("changes_from", a)`` (with ``changes_to`` and ``include_deleted``)
reads the changes after version ``a`` instead of the rows (see :mod:`alance.spark.changes`).

Options: see :mod:`alance.spark.options` and docs/spark.md (time travel ``version``,
``versionAsOf``, ``tag``, ``timestampAsOf``; ``columns``; ``filter``; ``pushdown``;
``save_mode``; ``mergeSchema``; ...); every other option is a storage option. Spark 4.1-4.3's
push-down is unsound for Python sources (see :class:`FilteringReader`), so it is on by default
only where :func:`alance.spark.register`'s probe shows Spark keeps pushed filters per scan.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
    WriterCommitMessage,
)

import alance
from alance import _loop, sync
from alance.dataset import api as _async
from alance.dataset.distributed.read import ReadTask, plan_read_groups, scan_tasks
from alance.dataset.distributed.write import UncommittedFragments
from alance.dataset.query.row_ids import SYSTEM_COLUMNS
from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnsupportedFeatureError,
)
from alance.filter import compile_filter_and_columns
from alance.io.plans import set_offloading
from alance.spark.changes import ChangesReader, change_feed, change_schema
from alance.spark.filters import Converted, combine, convert_filter
from alance.spark.options import (
    OWN_OPTIONS,
    SourceOptions,
    bool_option,
    int_option,
    save_mode,
    split_options,
    version_choice,
)
from alance.spark.types import spark_arrow_schema, spark_field, spark_schema, to_spark_batch

DEFAULT_ROWS_PER_PARTITION = 1024 * 1024
#: Rows per Arrow batch handed to Spark: large batches keep per-batch costs small.
DEFAULT_BATCH_SIZE = 64 * 1024


def _read_field(arrow: pa.Schema, name: str) -> pa.Field:
    """The Arrow field a read yields for ``name`` (a column or a system column)."""
    if name in SYSTEM_COLUMNS and name not in arrow.names:
        return pa.field(name, pa.uint64(), True)
    return arrow.field(name)


def storage_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The options that are meant for the object store."""
    return split_options(options).storage


@contextlib.contextmanager
def _named_options() -> Iterator[None]:
    """Say which options alance knows when the store refuses an unknown one."""
    try:
        yield
    except InvalidInputError as exc:
        if "storage option" not in str(exc):
            raise
        raise InvalidInputError(f"{exc}; alance's own options are {sorted(OWN_OPTIONS)}, "
                                "every other option is passed to the object store") from exc


#: Why ``CREATE TABLE ... USING alance`` is refused.
CATALOG_TABLES = (
    "catalog tables (CREATE TABLE ... USING alance) are not supported: Spark 4.1-4.3 hand a "
    "Python data source the table's LOCATION and OPTIONS only when the table is created, "
    "never when it is read or written (reads, INSERT and CTAS get no path). Use a temporary "
    "view: CREATE TEMPORARY VIEW t USING alance OPTIONS (path '...'), "
    "or spark.read.format('alance').load(path).createOrReplaceTempView('t'); write with "
    "df.write.format('alance').mode('append').save(path)")


class AlanceDataSource(DataSource):
    """``format("alance")``: read and write Lance datasets with alance.

    :func:`alance.spark.register` registers this class, or :class:`AlanceDataSourcePushdown`
    when the running Spark keeps pushed filters per scan (see ``pushdown`` in docs/spark.md).
    """

    #: Whether Spark's filters are pushed into alance unless the ``pushdown`` option says.
    pushdown_default = False
    #: How many partitions a read aims for unless the ``partitions`` option says (None: one
    #: per fragment). :func:`alance.spark.register` sets Spark's default parallelism.
    default_partitions: int | None = None

    @classmethod
    def name(cls) -> str:
        """The format name, ``alance``."""
        return "alance"

    @property
    def _opts(self) -> SourceOptions:
        opts = getattr(self, "_split", None)
        if opts is None:
            opts = split_options(self.options)
            self._split = opts
        return opts

    def _dataset(self) -> _async.LanceDataset:
        # Opened once and kept: the data source object is pickled to where Spark plans the
        # read, so schema and read see the same version (the manifest travels with it).
        ds = getattr(self, "_opened", None)
        if ds is None:
            own = self._opts.own
            choice = version_choice(own)
            version = choice.version
            if self._changes_from() is not None:
                version = int_option(own, "changes_to", version)  # type: ignore[arg-type]
            with _named_options():
                ds = _loop.run(alance.open_dataset(self._opts.uri, version,
                                                   storage_options=self._opts.storage,
                                                   asof=choice.asof))
            self._opened = ds
        return ds

    def _changes_from(self) -> int | None:
        return int_option(self._opts.own, "changes_from", None)

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
        text = self._opts.own.get("columns")
        if not text:
            return list(names)
        wanted = [c.strip() for c in str(text).split(",") if c.strip()]
        missing = [c for c in wanted if c not in names and c not in SYSTEM_COLUMNS]
        if missing:
            raise InvalidInputError(f"columns {missing} are not in the dataset ({names})")
        return wanted

    def _change_columns(self) -> list[str] | None:
        return self._columns() if self._opts.own.get("columns") else None

    def schema(self) -> T.StructType:
        """The dataset's columns (or the ``columns`` option's) as Spark types; for a change
        feed read, the feed's columns."""
        if "provider" in self._opts.table:
            raise UnsupportedFeatureError(CATALOG_TABLES)
        if self._changes_from() is not None:
            return change_schema(change_feed(self._begin(), self._dataset(),
                                             self._change_columns(), True, None))
        arrow = self._dataset().lance_schema.to_arrow()
        return spark_schema(pa.schema([_read_field(arrow, n) for n in self._columns()]))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        """A reader of ``schema``'s columns (a user schema may name a subset of columns)."""
        own = self._opts.own
        ds = self._dataset()
        if self._changes_from() is not None:
            return ChangesReader(self._begin(), ds, schema, self._change_columns(),
                                 bool_option(own, "include_deleted", True),
                                 int_option(own, "batch_size", DEFAULT_BATCH_SIZE))
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
        pushdown = bool_option(own, "pushdown", self.pushdown_default)
        cls = FilteringReader if pushdown else AlanceReader
        rows = int_option(own, "rows_per_partition", DEFAULT_ROWS_PER_PARTITION)
        where = own.get("filter")
        return cls(ds, schema, rows or DEFAULT_ROWS_PER_PARTITION,
                   int_option(own, "batch_size", DEFAULT_BATCH_SIZE),
                   where=str(where) if where else None,
                   parallelism=int_option(own, "partitions", self.default_partitions))

    def writer(self, schema: T.StructType, overwrite: bool) -> DataSourceWriter:
        """Plans the write (reads the latest version) and returns the task-side writer.

        ``save_mode`` (with Spark's ``mode("append")``): ``errorifexists``/``error`` fails if
        the dataset exists (checked here, and again atomically by the commit, which only
        creates), ``ignore`` writes nothing if it exists (the job's rows are computed and
        dropped). ``mergeSchema``: an append first adds the data's new columns (nullable,
        null in the existing rows) in a commit of its own.
        """
        own = self._opts.own
        mode = save_mode(own, overwrite)
        arrow = spark_arrow_schema(schema)
        kwargs: dict[str, Any] = {}
        for name in ("max_rows_per_file", "max_rows_per_group"):
            value = int_option(own, name, None)
            if value is not None:
                kwargs[name] = value
        uri = self._opts.uri
        if mode in ("errorifexists", "ignore") and _exists(uri, self._opts.storage):
            if mode == "errorifexists":
                raise AlreadyExistsError(f"a dataset already exists at {uri} (save mode "
                                         "errorifexists); use mode('append') or "
                                         "mode('overwrite'), or save_mode 'ignore'")
            return IgnoringWriter()
        if mode == "append" and bool_option(own, "mergeschema", False):
            _merge_schema(uri, self._opts.storage, arrow)
        with _named_options():
            plan = sync.plan_write(
                uri, arrow, "create" if mode in ("errorifexists", "ignore") else mode,
                storage_options=self._opts.storage, commit_handler=own.get("commit_handler"),
                data_storage_version=own.get("data_storage_version"), **kwargs)
        return AlanceWriter(plan, ignore_existing=mode == "ignore")

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming sink: one commit per micro-batch, exactly once per batch id (see
        :class:`alance.spark.stream.AlanceStreamWriter`)."""
        from alance.spark.stream import AlanceStreamWriter, stream_id

        if overwrite:
            raise InvalidInputError("the alance streaming sink appends; use "
                                    "outputMode('append')")
        own = self._opts.own
        with _named_options():
            return AlanceStreamWriter.start(
                self._opts.uri, spark_arrow_schema(schema), self._opts.storage,
                stream_id(own), data_storage_version=own.get("data_storage_version"),
                max_rows_per_file=int_option(own, "max_rows_per_file", None),
                max_rows_per_group=int_option(own, "max_rows_per_group", None))


class AlanceDataSourcePushdown(AlanceDataSource):
    """:class:`AlanceDataSource` with Spark's filter push-down on by default (registered by
    :func:`alance.spark.register` when the running Spark keeps pushed filters per scan)."""

    pushdown_default = True


def _exists(uri: str, storage: Mapping[str, Any]) -> bool:
    with _named_options():
        try:
            _loop.run(alance.open_dataset(uri, storage_options=storage))
        except DatasetNotFoundError:
            return False
    return True


def _merge_schema(uri: str, storage: Mapping[str, Any], arrow: pa.Schema,
                  attempts: int = 3) -> None:
    """Add the columns of ``arrow`` the dataset lacks (nullable, all null)."""
    for attempt in range(attempts):
        try:
            ds = sync.open_dataset(uri, storage_options=storage)
        except DatasetNotFoundError:
            return  # the append creates it with every column
        have = {n.lower() for n in ds.schema.names}
        new = [f.with_nullable(True) for f in arrow if f.name.lower() not in have]
        if not new:
            return
        try:
            ds.add_columns(pa.schema(new))
            return
        except AlanceError:
            if attempt == attempts - 1:
                raise  # e.g. another writer keeps adding the same columns


class FragmentPartition(InputPartition):
    """One read task: physical row ranges of fragments, read one after the other."""

    def __init__(self, tasks: list[ReadTask]) -> None:
        super().__init__(tasks)
        self.tasks = tasks


@dataclass
class AlanceReader(DataSourceReader):
    """Reads one version; pickled to every read task. Spark evaluates every filter of the
    query; ``where`` (the ``filter`` option, SQL) is part of what this DataFrame is."""

    dataset: _async.LanceDataset
    schema: T.StructType
    rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION
    batch_size: int | None = None
    pushed: list[Filter] = field(default_factory=list)
    where: str | None = None
    #: Partitions to aim for (fragments packed, large ones cut); None: one per fragment.
    parallelism: int | None = None

    def _filter(self) -> Converted | None:
        arrow = self.dataset.lance_schema.to_arrow()
        converted = [c for c in (convert_filter(f, arrow) for f in self.pushed)
                     if c is not None]
        if self.where:
            expr, cols = compile_filter_and_columns(self.where, arrow)
            converted.append(Converted(expr, frozenset(c for c in cols if c in arrow.names)))
        return combine(converted)

    def partitions(self) -> list[InputPartition]:
        """About ``parallelism`` partitions of consecutive fragments (cut into row ranges
        where a fragment is larger than a partition); one per fragment without it. No
        partition holds more than ``rows_per_partition`` rows."""
        if self.where:  # a bad filter fails here, on the driver, not in every task
            self._filter()
        groups = plan_read_groups(self.dataset.fragment_protos(), self.rows_per_partition,
                                  self.parallelism)
        return [FragmentPartition(g) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows as Arrow batches in exactly the declared Spark schema."""
        if not isinstance(partition, FragmentPartition):
            return  # an empty dataset: Spark reads one placeholder partition
        if TaskContext.get() is not None:
            # In a Spark worker (one task per core) decoding on more threads of the worker
            # adds no parallelism, only hand-offs: keep it on the event loop's thread.
            set_offloading(False)
        target = spark_arrow_schema(self.schema)
        flt = self._filter()
        stream = scan_tasks(self.dataset, partition.tasks, columns=list(self.schema.names),
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

    Unsafe on Spark 4.1-4.3: Spark keeps the read plan of the last scan that pushed filters
    on the DataFrame's relation (not on the scan) and reuses it for every later scan of that
    relation: a query without pushable filters on the same DataFrame, or the other side of a
    self-join, then reads the filtered rows. :func:`alance.spark.register` therefore turns
    this reader on by default only where a probe shows Spark keeps pushed filters per scan.
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
    #: save mode ``ignore``: a dataset created by someone else meanwhile wins, silently.
    ignore_existing: bool = False

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Stream this task's batches into new fragments; report them (nothing committed)."""
        return FragmentsMessage(self.plan.write(iterator))

    def _parts(self, messages: list[WriterCommitMessage | None]) -> list[UncommittedFragments]:
        return [m.part for m in messages if isinstance(m, FragmentsMessage)]

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Publish every task's fragments as one new version."""
        try:
            self.plan.commit(self._parts(messages))
        except AlreadyExistsError:
            if not self.ignore_existing:
                raise  # errorifexists: created by another writer since the check

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Delete the files of the tasks that finished before the job failed."""
        self.plan.abort(self._parts(messages))


@dataclass
class IgnoringWriter(DataSourceArrowWriter):
    """Save mode ``ignore`` on an existing dataset: tasks drop their rows, nothing changes."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        """Consume and drop the rows."""
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to publish."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to delete."""
