"""The change data feed through the ``alance`` Spark data source.

``spark.read.format("alance").option("changes_from", a).load(uri)`` reads the rows inserted,
updated and deleted after version ``a`` up to ``changes_to`` (default: the ``version`` option,
else the latest version), as :meth:`alance.LanceDataset.changes` returns them: the columns (all,
or the ``columns`` option's), ``_rowid``, ``_row_created_at_version``,
``_row_last_updated_at_version`` (bigint) and ``_change_type`` (``insert``, ``update`` or
``delete``). ``include_deleted=false`` leaves deleted rows out. Needs a dataset with stable
row ids. One input partition per fragment of the end version (its inserts and updates) and,
for deleted rows, one per fragment of the begin version
(:mod:`alance.dataset.distributed.changes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.datasource import DataSourceReader, InputPartition

from alance import _loop
from alance.dataset import api as _async
from alance.dataset.distributed.changes import ChangeTask, plan_change_tasks, scan_change_task
from alance.dataset.query.changes import ChangeFeed
from alance.errors import SchemaMismatchError
from alance.spark.types import spark_arrow_schema, spark_field, to_spark_batch


def change_feed(begin: _async.LanceDataset | None, end: _async.LanceDataset,
                columns: list[str] | None, include_deleted: bool,
                batch_size: int | None) -> ChangeFeed:
    """The feed between two opened versions (no IO: both are loaded already)."""
    return ChangeFeed(begin.read_context if begin is not None else None, end.read_context, columns,
                      include_deleted=include_deleted, batch_size=batch_size)


def change_schema(feed: ChangeFeed) -> T.StructType:
    """The Spark schema of a change feed (system columns as bigint)."""
    return T.StructType([spark_field(f) for f in feed.schema])


class ChangePartition(InputPartition):
    """One read task of the change feed: an end fragment's upserts or a begin fragment's
    deletes."""

    def __init__(self, task: ChangeTask) -> None:
        super().__init__(task)
        self.task = task


@dataclass
class ChangesReader(DataSourceReader):
    """Reads the changes between two versions; pickled to every read task."""

    begin: _async.LanceDataset | None
    end: _async.LanceDataset
    schema: T.StructType
    columns: list[str] | None = None
    include_deleted: bool = True
    batch_size: int | None = None

    def __post_init__(self) -> None:
        full = change_schema(self._feed())
        known = {f.name: f for f in full.fields}
        for f in self.schema.fields:
            mine = known.get(f.name)
            if mine is None or mine.dataType != f.dataType:
                raise SchemaMismatchError(
                    f"column {f.name!r} of the schema given is not in the change feed as "
                    f"{f.dataType.simpleString()} (the feed has {full.simpleString()})")

    def _feed(self) -> ChangeFeed:
        return change_feed(self.begin, self.end, self.columns, self.include_deleted,
                           self.batch_size)

    def partitions(self) -> list[InputPartition]:
        """One partition per change task (see :mod:`alance.dataset.distributed.changes`)."""
        return [ChangePartition(t) for t in plan_change_tasks(self._feed())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's changes as Arrow batches in exactly the declared Spark schema."""
        if not isinstance(partition, ChangePartition):
            return  # no changes: Spark reads one placeholder partition
        target = spark_arrow_schema(self.schema)
        stream = scan_change_task(self._feed(), partition.task)
        try:
            while True:
                batch = _loop.run(_next(stream))
                if batch is None:
                    return
                if batch.num_rows:
                    yield to_spark_batch(batch.select(target.names), target)
        finally:
            _loop.run(stream.aclose())  # type: ignore[attr-defined]


async def _next(stream: object) -> pa.RecordBatch | None:
    return await anext(stream, None)  # type: ignore[call-overload]
