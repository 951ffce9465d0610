"""Spark integration: the ``alance`` data source and pipeline helpers.

Call :func:`register` once per Spark session::

    import alance.spark
    alance.spark.register(spark)
    df = spark.read.format("alance").load("s3://bucket/events.lance")
    df.write.format("alance").mode("append").save("s3://bucket/events.lance")

Needs ``pip install alance[spark]`` (PySpark 4.1 or newer). See docs/spark.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alance.spark.datasource import AlanceDataSource, AlanceDataSourcePushdown

__all__ = ["AlanceDataSource", "AlanceDataSourcePushdown", "activate", "default_parallelism",
           "read", "register", "save", "source_class"]

#: Spark keeps pushed filters from Python data sources off unless this is on.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any, pushdown: bool | None = None) -> bool:
    """Register ``format("alance")`` with the session ``spark``; returns whether Spark's
    filters are pushed into alance by default.

    ``pushdown=None`` (the default) runs a probe (:mod:`alance.spark.probe`, about a second):
    push-down is on by default only if this Spark keeps each scan's pushed filters to that
    scan. Spark 4.1-4.3 do not (a later query on the same DataFrame, or a self-join, would
    read the filtered rows), so there it stays off; the ``filter`` option and
    :func:`read` give alance-side filtering that is always correct. ``True``/``False``
    decide without the probe (``True`` on Spark 4.1-4.3 gives wrong results in the cases
    above). The ``pushdown`` option overrides the default per read.
    """
    if pushdown is None:
        from alance.spark.probe import pushdown_is_scoped

        activate(spark)
        pushdown = pushdown_is_scoped(spark)
    spark.dataSource.register(source_class(pushdown, default_parallelism(spark)))
    # Needed by readers that take filters (the `pushdown` option); harmless otherwise.
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    activate(spark)
    return pushdown


def default_parallelism(spark: Any) -> int | None:
    """Spark's default parallelism (cores of the executors registered so far, at least 2 on
    a cluster), or None where it is not available (Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        return None


def source_class(pushdown: bool, partitions: int | None) -> type[AlanceDataSource]:
    """The data source class :func:`register` registers: push-down on or off by default,
    reads aiming for ``partitions`` partitions unless the ``partitions`` option says.

    Spark ships the class to its Python workers by value (cloudpickle) when it is not the
    module's own, so a subclass made here carries ``default_partitions`` with it.
    """
    base = AlanceDataSourcePushdown if pushdown else AlanceDataSource
    if not partitions:
        return base
    return type(base.__name__, (base,), {"__module__": base.__module__,
                                         "__qualname__": base.__qualname__,
                                         "__doc__": base.__doc__,
                                         "default_partitions": int(partitions)})


def read(spark: Any, uri: str, columns: Sequence[str] | None = None,
         filter: str | None = None, **options: Any) -> Any:
    """``spark.read.format("alance")`` with a projection and a filter alance applies.

    ``columns``: the columns to read (Spark 4.1-4.3 do not tell Python data sources which
    columns a query uses, so ``select`` alone reads every column). ``filter``: a SQL predicate
    (alance's SQL, as in ``LanceDataset.to_table(filter=...)``) evaluated while scanning,
    reading the filter's columns first and the others only for matching rows. Both are part
    of the returned DataFrame (every query on it sees only those rows and columns), which is
    what makes them safe where Spark's own push-down is not. ``options``: any other option
    (``partitions`` defaults to Spark's default parallelism now).
    """
    reader = spark.read.format("alance")
    if "partitions" not in {k.lower() for k in options}:
        parallelism = default_parallelism(spark)
        if parallelism:
            reader = reader.option("partitions", parallelism)
    if columns is not None:
        reader = reader.option("columns", ",".join(columns))
    if filter is not None:
        reader = reader.option("filter", filter)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(uri))


def save(df: Any, uri: str, mode: str = "errorifexists", **options: Any) -> None:
    """``df.write.format("alance")`` with any of Spark's save modes.

    Spark passes Python data sources only ``append`` and ``overwrite`` (its default
    ``errorifexists`` and ``ignore`` fail with ``UNSUPPORTED_DATA_SOURCE_SAVE_MODE`` before
    alance is called), so the other modes travel in the ``save_mode`` option under Spark's
    ``append``: ``errorifexists``/``error`` (the default here, as in Spark) fails if the
    dataset exists, ``ignore`` leaves an existing dataset alone.
    """
    mode = mode.lower()
    writer = df.write.format("alance")
    for key, value in options.items():
        writer = writer.option(key, value)
    if mode == "overwrite":
        writer.mode("overwrite").save(str(uri))
    else:
        writer.mode("append").option("save_mode", mode).save(str(uri))


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling thread.

    Spark looks Python data sources up in the *active* session, which is per JVM thread: a job
    started from a new Python thread fails with ``DATA_SOURCE_NOT_FOUND`` for ``alance``
    unless the thread calls this (or :func:`register`) first. A no-op for Spark Connect.
    """
    jvm = getattr(spark, "_jvm", None)
    jsession = getattr(spark, "_jsparkSession", None)
    if jvm is None or jsession is None:
        return
    for name in ("org.apache.spark.sql.classic.SparkSession", "org.apache.spark.sql.SparkSession"):
        try:
            getattr(jvm, name).setActiveSession(jsession)
            return
        except Exception:
            continue
