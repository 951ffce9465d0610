"""Does the running Spark keep pushed filters per scan? (A check run by
:func:`alance.spark.register`.)

Spark 4.1-4.3 store the read plan a Python data source makes while taking pushed filters on
the relation, not on the scan: every later scan of the same DataFrame reuses it, so a query
without pushable filters (or the other side of a self-join) reads the filtered rows. This
module's tiny in-memory source takes every ``x = literal`` filter; :func:`pushdown_is_scoped`
runs the queries that go wrong under that behaviour and reports whether they came out right.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import types as T
from pyspark.sql.datasource import DataSource, DataSourceReader, EqualTo, Filter

#: Rows of the probe source: x = 0 .. ROWS-1.
ROWS = 4


class ProbeSource(DataSource):
    """``format("alance_pushdown_probe")``: ROWS rows, filters ``x = n`` itself."""

    @classmethod
    def name(cls) -> str:
        """The probe's format name."""
        return "alance_pushdown_probe"

    def schema(self) -> T.StructType:
        """One bigint column ``x``."""
        return T.StructType([T.StructField("x", T.LongType())])

    def reader(self, schema: T.StructType) -> DataSourceReader:
        """A reader that takes ``x = n`` filters."""
        return ProbeReader()


class ProbeReader(DataSourceReader):
    """Yields the rows, keeping only those that match the filters it took."""

    def __init__(self) -> None:
        self.wanted: list[int] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take ``x = n``; leave the rest to Spark."""
        for f in filters:
            if isinstance(f, EqualTo) and f.attribute == ("x",) and isinstance(f.value, int):
                self.wanted.append(f.value)
            else:
                yield f

    def read(self, partition: Any) -> Iterator[tuple[int]]:
        """The rows that pass the filters taken."""
        for x in range(ROWS):
            if all(x == w for w in self.wanted):
                yield (x,)


def pushdown_is_scoped(spark: Any) -> bool:
    """Run the probe: ``True`` when Spark keeps each scan's pushed filters to that scan."""
    spark.dataSource.register(ProbeSource)
    conf = "spark.sql.python.filterPushdown.enabled"
    before = spark.conf.get(conf, "false")
    spark.conf.set(conf, "true")
    try:
        df = spark.read.format(ProbeSource.name()).load()
        filtered = df.where("x = 1").count()
        unfiltered = df.count()
        joined = df.alias("a").join(df.where("x = 2").alias("b"), "x", "left").count()
    finally:
        spark.conf.set(conf, before)
    return (filtered, unfiltered, joined) == (1, ROWS, ROWS)
