"""A Spark driver for tests/test_spark_cluster.py, run as its own process against a standalone
cluster: ``python cluster_driver.py MASTER SCENARIO URI MARKER_DIR``. Prints one JSON
line ``RESULT {...}``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
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


def fail_on(value: int):
    def fn(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if value in batch.column(0).to_pylist():
                raise RuntimeError("task failed mid-write")
            yield batch
    return fn


def main() -> None:
    master, scenario, uri, marker_dir = sys.argv[1:5]
    spark = (SparkSession.builder.master(master).appName(f"alance-cluster-{scenario}")
             .config("spark.ui.enabled", "false").config("spark.executor.memory", "1g")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "2000")
             .config("spark.task.maxFailures", "4").getOrCreate())
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
            df = spark.range(0, 120_000, numPartitions=4).mapInArrow(slow_rows(marker_dir),
                                                                    "id long")
            df.write.format("alance").mode("append").option("max_rows_per_file", 5000) \
                .save(uri)
            result["done"] = True
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
