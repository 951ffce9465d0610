"""A Spark driver for tests/test_spark_cluster.py, run as its own process against a standalone
cluster: ``python cluster_driver.py MASTER SCENARIO URI MARKER_DIR [OPTIONS_JSON]``
(``OPTIONS_JSON``: storage options for the data source). Prints one JSON line
``RESULT {...}``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import SparkSession

import alance.spark


def slow_rows(marker_dir: str):
    """A mapInArrow function: marks that a task writes, then passes batches on slowly."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        Path(marker_dir, "started").touch()
        for batch in batches:
            time.sleep(0.05)
            yield batch
    return fn


def straggler(marker_dir: str, timeout: float = 600.0):
    """A mapInArrow function: every attempt marks ``attempt-{partition}-{attempt}``; the first
    attempt of partition 0 passes one batch on, then holds back until a second attempt of
    partition 0 has passed all its batches (or ``timeout``), so Spark speculates."""
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        ctx = TaskContext.get()
        assert ctx is not None
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        Path(marker_dir, f"attempt-{part}-{attempt}").touch()
        copy_done = Path(marker_dir, "copy-done")
        for i, batch in enumerate(batches):
            if part == 0 and attempt == 0 and i == 1:
                deadline = time.monotonic() + timeout
                while not copy_done.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
            yield batch
        if part == 0 and attempt > 0:
            copy_done.touch()
    return fn


def fail_on(value: int):
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if value in batch.column(0).to_pylist():
                raise RuntimeError("task failed mid-write")
            yield batch
    return fn


def _append_ids(spark: SparkSession, uri: str, rows: int, fn, per_file: int) -> None:
    """Append ids 0..rows-1 in 4 partitions, each passed through ``fn`` by its task."""
    df = spark.range(0, rows, numPartitions=4).mapInArrow(fn, "id long")
    df.write.format("alance").mode("append").option("max_rows_per_file", per_file).save(uri)


def main() -> None:
    master, scenario, uri, marker_dir = sys.argv[1:5]
    opts: dict[str, str] = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    builder = (SparkSession.builder.master(master).appName(f"alance-cluster-{scenario}")
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "1g")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
               .config("spark.task.maxFailures", "4"))
    if scenario == "speculate":
        # copy a task as soon as half the tasks are done and it runs a little longer
        builder = (builder.config("spark.speculation", "true")
                   .config("spark.speculation.interval", "100ms")
                   .config("spark.speculation.quantile", "0.5")
                   .config("spark.speculation.multiplier", "1.1")
                   .config("spark.speculation.minTaskRuntime", "500ms"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    alance.spark.register(spark, pushdown=False)
    result: dict[str, object] = {}
    try:
        if scenario == "write_read":
            df = spark.range(0, 200_000, numPartitions=4).selectExpr(
                "id", "id % 7 AS k", "concat('u', id) AS name")
            df.write.format("alance").mode("append").save(uri)
            back = spark.read.format("alance").load(uri)
            result["agg"] = list(back.selectExpr("count(*)", "sum(id)", "sum(k)").first())
            result["filtered"] = alance.spark.read(spark, uri, columns=["id"],
                                                   filter="k = 3").count()
        elif scenario == "kill":
            _append_ids(spark, uri, 120_000, slow_rows(marker_dir), 5000)
            result["done"] = True
        elif scenario == "speculate":
            _append_ids(spark, uri, 80_000, straggler(marker_dir), 1000)
            result["done"] = True
        elif scenario == "s3":
            df = spark.range(0, 60_000, numPartitions=4).selectExpr(
                "id", "id % 13 AS k", "concat('s3-', id) AS name",
                "CAST(id AS DOUBLE) / 8 AS x")
            df.write.format("alance").mode("append").options(**opts).save(uri)
            back = spark.read.format("alance").options(**opts).load(uri)
            result["count"] = back.count()
            result["missing"] = df.exceptAll(back).count()
            result["extra"] = back.exceptAll(df).count()
            result["filtered"] = alance.spark.read(spark, uri, columns=["id", "name"],
                                                   filter="k = 5", **opts).count()
        elif scenario == "fail":
            df = spark.range(0, 40_000, numPartitions=4).mapInArrow(fail_on(35_000), "id long")
            try:
                df.write.format("alance").mode("append").option("max_rows_per_file", 1000) \
                    .save(uri)
                result["failed"] = False
            except Exception as exc:
                result["failed"] = "task failed mid-write" in str(exc)
    finally:
        spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
