"""The alance Spark pipeline, end to end (``make demo``).

1. generate a few million synthetic click events with Spark and write them as Parquet;
2. clean and enrich them with Spark SQL;
3. write the result to an alance dataset (one Spark job, one new version);
4. append a second day of events (one more version);
5. read the dataset back with Spark, and with async alance (in this process);
6. cross-check rows and totals with pylance, and print a report.

Run::

    python examples/spark_pipeline.py                      # local temp dir, 3M + 1M events
    python examples/spark_pipeline.py --rows 500000        # quicker
    python examples/spark_pipeline.py --uri s3://bucket/events.lance \\
        --storage-option aws_region=eu-west-1

Needs Java 17 and ``pip install alance[spark]``.
"""

from __future__ import annotations

import argparse
import asyncio
import decimal
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow.compute as pc

import alance

STAGES: list[tuple[str, float, str]] = []


@contextmanager
def stage(name: str) -> Iterator[list[str]]:
    """Time a stage; what the block appends to the yielded list is its report line."""
    note: list[str] = []
    print(f"\n== {name}", flush=True)
    start = time.perf_counter()
    yield note
    STAGES.append((name, time.perf_counter() - start, " ".join(note)))
    print(f"   done in {STAGES[-1][1]:.1f} s {STAGES[-1][2]}", flush=True)


def spark_session(cores: int) -> Any:
    """A local Spark session bound to 127.0.0.1 whose workers run this interpreter."""
    if not (shutil.which("java") or os.environ.get("JAVA_HOME")):
        sys.exit("Spark needs Java 17: install a JRE (e.g. openjdk-17-jre-headless) or set "
                 "JAVA_HOME")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import alance.spark

    spark = (SparkSession.builder.master(f"local[{cores}]").appName("alance-pipeline")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
             .config("spark.sql.session.timeZone", "UTC")
             .config("spark.driver.memory", "2g")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    alance.spark.register(spark)
    return spark


EVENTS_SQL = """
SELECT
  id AS event_id,
  CAST(pmod(hash(id, 1), {users}) AS BIGINT) AS user_id,
  TIMESTAMP '{day} 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, pmod(hash(id, 2), 86400)) AS ts,
  element_at(array('/', '/search', '/product', '/cart', '/checkout', '/help'),
             CAST(pmod(hash(id, 3), 6) + 1 AS INT)) AS page,
  element_at(array('direct', 'google', 'newsletter', 'partner'),
             CAST(pmod(hash(id, 4), 4) + 1 AS INT)) AS referrer,
  element_at(array('DE', 'FR', 'US', 'JP', 'BR', 'IN', 'GB'),
             CAST(pmod(hash(id, 5), 7) + 1 AS INT)) AS country,
  element_at(array('desktop', 'mobile', 'tablet', 'bot'),
             CAST(pmod(hash(id, 6), 20) / 6 + 1 AS INT)) AS device,
  CAST(pmod(hash(id, 7), 30000) AS INT) AS duration_ms
FROM range({start}, {end}, 1, {partitions})
"""

TRANSFORM_SQL = """
SELECT
  event_id, user_id, ts,
  to_date(ts) AS event_date,
  CAST(hour(ts) AS INT) AS hour,
  page, referrer, country, device, duration_ms,
  page = '/checkout' AS is_purchase,
  CASE WHEN page = '/checkout'
       THEN CAST(round(5 + pmod(hash(event_id, 8), 19500) / 100.0, 2) AS DECIMAL(10, 2))
       ELSE CAST(0 AS DECIMAL(10, 2)) END AS revenue
FROM raw_events
WHERE device <> 'bot' AND duration_ms >= 50
"""


def make_raw(spark: Any, path: str, day: str, start: int, rows: int, partitions: int) -> None:
    """Synthetic click events for one day, written as Parquet."""
    sql = EVENTS_SQL.format(users=max(1, rows // 20), day=day, start=start, end=start + rows,
                            partitions=partitions)
    spark.sql(sql).write.mode("overwrite").parquet(path)


def transformed(spark: Any, path: str) -> Any:
    """Bots and bounces dropped, dates and revenue derived (Spark SQL)."""
    spark.read.parquet(path).createOrReplaceTempView("raw_events")
    return spark.sql(TRANSFORM_SQL)


async def read_with_alance(uri: str, storage_options: dict[str, str],
                           progress: Callable[[int], None]) -> dict[str, Any]:
    """Open the dataset with async alance: versions, fragments, a streamed aggregate."""
    ds = await alance.open_dataset(uri, storage_options=storage_options)
    versions = await ds.versions()
    rows = await ds.count_rows()
    revenue = decimal.Decimal(0)
    purchases = 0
    seen = 0
    async for batch in ds.scan(columns=["revenue", "is_purchase"], batch_size=256 * 1024):
        revenue += pc.sum(batch.column("revenue")).as_py() or 0  # exact: decimal sums
        purchases += pc.sum(batch.column("is_purchase")).as_py() or 0
        seen += batch.num_rows
        progress(seen)
    return {"version": ds.version, "versions": len(versions), "rows": rows,
            "fragments": len(ds.get_fragments()), "purchases": purchases,
            "revenue": revenue}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=3_000_000,
                        help="events on day one (day two gets a third as many)")
    parser.add_argument("--uri", help="dataset URI (default: a new local temp dir)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--keep", action="store_true", help="keep the local temp dir")
    args = parser.parse_args()
    options = dict(o.split("=", 1) for o in args.storage_option)
    workdir = tempfile.mkdtemp(prefix="alance-pipeline-")
    uri = args.uri or os.path.join(workdir, "events.lance")
    partitions = max(2, args.cores * 2)
    day2_rows = max(1, args.rows // 3)
    try:
        with stage("start Spark") as note:
            spark = spark_session(args.cores)
            note.append(f"(Spark {spark.version}, local[{args.cores}])")
        with stage("generate raw click events as Parquet") as note:
            make_raw(spark, os.path.join(workdir, "raw1"), "2026-11-01", 0, args.rows,
                     partitions)
            make_raw(spark, os.path.join(workdir, "raw2"), "2026-11-02", args.rows, day2_rows,
                     partitions)
            note.append(f"({args.rows:,} + {day2_rows:,} events)")
        with stage("transform with Spark SQL and write to alance (overwrite)") as note:
            day1 = transformed(spark, os.path.join(workdir, "raw1"))
            writer = day1.write.format("alance").mode("overwrite")
            for k, v in options.items():
                writer = writer.option(k, v)
            writer.save(uri)
            note.append(f"-> {uri}")
        with stage("append day two") as note:
            writer = transformed(spark, os.path.join(workdir, "raw2")).write.format("alance")
            for k, v in options.items():
                writer = writer.option(k, v)
            writer.mode("append").save(uri)
        with stage("read back with Spark") as note:
            reader = spark.read.format("alance")
            for k, v in options.items():
                reader = reader.option(k, v)
            events = reader.load(uri)
            events.createOrReplaceTempView("events")
            daily = spark.sql("""
                SELECT event_date, count(*) AS events, sum(CAST(is_purchase AS INT)) AS buys,
                       sum(revenue) AS revenue, count(DISTINCT user_id) AS users
                FROM events GROUP BY event_date ORDER BY event_date""").collect()
            for r in daily:
                print(f"   {r.event_date}: {r.events:,} events, {r.users:,} users, "
                      f"{r.buys:,} purchases, revenue {r.revenue:,}")
            spark_rows = sum(r.events for r in daily)
            spark_revenue = sum(r.revenue for r in daily)
            spark_buys = sum(r.buys for r in daily)
            note.append(f"({spark_rows:,} rows)")
        with stage("read with async alance") as note:
            def progress(n: int) -> None:
                print(f"\r   scanned {n:,} rows", end="", flush=True)

            stats = asyncio.run(read_with_alance(uri, options, progress))
            print()
            note.append(f"(version {stats['version']}, {stats['fragments']} fragments)")
        with stage("cross-check with pylance") as note:
            import lance

            lds = lance.dataset(uri, storage_options=options or None)
            lance_rows = lds.count_rows()
            lance_buys = lds.count_rows(filter="is_purchase")
            note.append(f"(pylance {lance.__version__}: version {lds.version})")
        checks = {
            "rows: Spark == alance == pylance":
                spark_rows == stats["rows"] == lance_rows,
            "purchases: Spark == alance == pylance":
                spark_buys == stats["purchases"] == lance_buys,
            "revenue: Spark == alance": spark_revenue == stats["revenue"],
            "two versions (one per Spark job)": stats["version"] == 2 == lds.version,
        }
        print("\n== report")
        print(f"   dataset    {uri}")
        print(f"   rows       {stats['rows']:,}")
        print(f"   versions   {stats['versions']}")
        print(f"   fragments  {stats['fragments']}")
        for name, seconds, _ in STAGES:
            print(f"   {seconds:7.1f} s  {name}")
        for name, ok in checks.items():
            print(f"   [{'ok' if ok else 'FAILED'}] {name}")
        spark.stop()
        if not all(checks.values()):
            sys.exit(1)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"   kept {workdir}")


if __name__ == "__main__":
    main()
