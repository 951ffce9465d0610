"""Spark integration: the ``alance`` data source and pipeline helpers.

Call :func:`register` once per Spark session::

    import alance.spark
    alance.spark.register(spark)
    df = spark.read.format("alance").load("s3://bucket/events.lance")
    df.write.format("alance").mode("append").save("s3://bucket/events.lance")

Needs ``pip install alance[spark]`` (PySpark 4.1 or newer). See docs/spark.md.
"""

from __future__ import annotations

from typing import Any

from alance.spark.datasource import AlanceDataSource

__all__ = ["AlanceDataSource", "activate", "register"]

#: Spark keeps pushed filters from Python data sources off unless this is on.
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any) -> None:
    """Register ``format("alance")`` with the session ``spark`` (and turn on filter push-down
    for Python data sources, which Spark leaves off by default)."""
    spark.dataSource.register(AlanceDataSource)
    spark.conf.set(FILTER_PUSHDOWN_CONF, "true")
    activate(spark)


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
