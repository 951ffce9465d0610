"""Spark: the same DataFrame written and read with native Parquet and with format("alance").

    python benchmarks/spark_write.py                 # 2M rows, local[2]
    python benchmarks/spark_write.py --rows 500000 --repeat 3
    python benchmarks/spark_write.py --cluster       # standalone master + worker

The DataFrame is generated once and cached, so only writing and reading are timed. Reads are
forced through every column with Spark's ``noop`` sink (a count would let Parquet skip the
data). Python workers are started by a warm-up round before timing (alance runs in them,
Parquet does not need them). Best of ``--repeat`` runs, in wall time and in CPU time (every
process of this run: driver, its JVM, Python workers, and with ``--cluster`` the master,
worker and executors; on a machine shared with other jobs CPU time is the steadier figure).
``floor read`` reads the same rows, already in Spark's Arrow types, from memory-mapped Arrow
files through a trivial Python data source: what Spark's Python data source path costs by
itself. Target: alance at most Parquet's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds (user + system, with reaped children) of the processes under ``roots``."""
    children: dict[int, list[int]] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        cpu[int(entry)] = sum(int(x) for x in fields[11:15]) / _TICK
    total, todo, seen = 0.0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += cpu.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


def best_of(repeat: int, fn: Callable[[int], None], roots: list[int],
            ) -> tuple[float, float]:
    """The fastest of ``repeat`` runs of ``fn(run_number)``: (wall seconds, CPU seconds),
    each the minimum over the runs."""
    times, cpus = [], []
    for i in range(repeat):
        cpu = tree_cpu(roots)
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
        cpus.append(tree_cpu(roots) - cpu)
    return min(times), min(cpus)


def floor_source() -> type:
    """A Python data source that serves Arrow record batches from memory-mapped Arrow IPC
    files (no decoding, no casts): the cost of Spark's Python data source path by itself,
    the floor for any Python source."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, files: list[list[str]]) -> None:
            self.files = files

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(group) for group in self.files]

        def read(self, partition: InputPartition):  # type: ignore[no-untyped-def]
            import pyarrow as pa

            for path in partition.value:
                with pa.memory_map(path) as source:
                    reader = pa.ipc.open_file(source)
                    for i in range(reader.num_record_batches):
                        yield reader.get_batch(i)

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrowfloor"

        def schema(self) -> str:
            return str(self.options["schema"])

        def reader(self, schema):  # type: ignore[no-untyped-def]
            return FloorReader(json.loads(self.options["files"]))

    return FloorSource


def write_floor_files(uri: str, directory: str, parallelism: int) -> list[list[str]]:
    """The dataset at ``uri`` as Arrow IPC files (one per fragment, 64Ki-row batches) in
    Spark's Arrow types, the fragments in ``parallelism`` groups of consecutive ones."""
    import pyarrow as pa

    import alance.sync as al
    from alance.spark.types import spark_arrow_schema, spark_schema

    ds = al.open_dataset(uri)
    # every column nullable, as the floor source's declared schema (DDL) says
    target = pa.schema([f.with_nullable(True)
                        for f in spark_arrow_schema(spark_schema(ds.schema))])
    os.makedirs(directory, exist_ok=True)
    frags = ds.get_fragments()
    files: list[list[str]] = [[] for _ in range(min(parallelism, len(frags)))]
    for i, frag in enumerate(frags):
        path = f"{directory}/{i}.arrow"
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, target) as writer:
            for batch in frag.to_table().cast(target).to_batches(max_chunksize=64 * 1024):
                writer.write_batch(batch)
        files[i * len(files) // len(frags)].append(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--cluster", action="store_true",
                        help="run on a standalone cluster (1 master, 1 worker) started here")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import alance.spark
    from alance.spark.standalone import LocalCluster

    cluster = LocalCluster(workers=1, cores=args.cores).start() if args.cluster else None
    master = cluster.url if cluster else f"local[{args.cores}]"
    spark = (SparkSession.builder.master(master).config("spark.executor.memory", "2g")
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "2g")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    alance.spark.register(spark, pushdown=False)
    work = tempfile.mkdtemp(prefix="alance-spark-bench-")
    try:
        df = spark.range(0, args.rows, 1, args.partitions).selectExpr(
            "id", "pmod(hash(id), 100000) AS user_id",
            "TIMESTAMP '2026-01-01' + make_interval(0, 0, 0, 0, 0, 0, id % 86400) AS ts",
            "concat('/page/', pmod(hash(id, 1), 500)) AS page",
            "rand(7) * 100 AS amount", "id % 3 = 0 AS flag", "id % 100 AS bucket",
            "concat('note-', id % 977) AS note").cache()
        df.count()
        # warm-up: start Python workers and JIT both paths
        df.limit(1000).write.mode("overwrite").parquet(f"{work}/warm.parquet")
        df.limit(1000).write.format("alance").mode("overwrite").save(f"{work}/warm.lance")
        spark.read.format("alance").load(f"{work}/warm.lance").write.format("noop") \
            .mode("overwrite").save()

        roots = [os.getpid()] + ([p.pid for p in cluster.procs] if cluster else [])

        def timed(fn: Callable[[int], None]) -> tuple[float, float]:
            return best_of(args.repeat, fn, roots)

        results: dict[str, tuple[float, float]] = {}
        results["parquet write"] = timed(lambda i: df.write.mode("overwrite")
                                         .parquet(f"{work}/t{i}.parquet"))
        results["alance write"] = timed(lambda i: df.write.format("alance")
                                        .mode("overwrite").save(f"{work}/t{i}.lance"))
        def noop(frame) -> None:
            frame.write.format("noop").mode("overwrite").save()

        def pq(i: int):
            return spark.read.parquet(f"{work}/t{i}.parquet")

        def al(i: int, **kw):
            return alance.spark.read(spark, f"{work}/t{i}.lance", **kw)

        spark.dataSource.register(floor_source())
        floor_files = write_floor_files(f"{work}/t0.lance", f"{work}/floor",
                                        spark.sparkContext.defaultParallelism)
        floor_schema = ", ".join(f"{f.name} {f.dataType.simpleString()}"
                                 for f in al(0).schema.fields)
        results["parquet read"] = timed(lambda i: noop(pq(i)))
        results["alance read"] = timed(lambda i: noop(al(i)))
        results["floor read"] = timed(lambda i: noop(
            spark.read.format("arrowfloor").option("schema", floor_schema)
            .option("files", json.dumps(floor_files)).load()))
        results["parquet select"] = timed(lambda i: noop(pq(i).select(
            "id", "amount")))
        results["alance select"] = timed(lambda i: noop(al(i).select(
            "id", "amount")))
        results["alance columns"] = timed(lambda i: noop(al(
            i, columns=["id", "amount"])))
        results["parquet filter"] = timed(lambda i: noop(pq(i).where(
            "bucket = 7")))
        results["alance filter"] = timed(lambda i: noop(al(i).where(
            "bucket = 7")))
        results["alance filteropt"] = timed(lambda i: noop(al(
            i, filter="bucket = 7")))
        check = spark.read.format("alance").load(f"{work}/t0.lance").count()
        assert check == args.rows, check
        assert al(0, filter="bucket = 7").count() == pq(0).where("bucket = 7").count()
        print(f"\n{args.rows:,} rows x 8 columns, {args.partitions} partitions, {master}, "
              f"best of {args.repeat}")
        for name, (seconds, cpu) in results.items():
            print(f"  {name:<17} {seconds:7.2f} s  {args.rows / seconds / 1e6:6.2f} M rows/s  "
                  f"CPU {cpu:6.2f} s")
        print("\n  | | Parquet | alance | alance / Parquet | Parquet CPU | alance CPU | "
              "alance / Parquet CPU |\n  | --- | --- | --- | --- | --- | --- | --- |")
        rows = [("write", "write", "write"), ("full read", "read", "read"),
                ("select 2 of 8 (plain select)", "select", "select"),
                ("select 2 of 8 (columns option)", "select", "columns"),
                ("1% filter (Spark WHERE)", "filter", "filter"),
                ("1% filter (filter option)", "filter", "filteropt")]
        for label, p, a in rows:
            (pt, pc), (at, ac) = results[f"parquet {p}"], results[f"alance {a}"]
            print(f"  | {label} | {pt:.2f} s | {at:.2f} s | {at / pt:.2f}x | {pc:.2f} s | "
                  f"{ac:.2f} s | {ac / pc:.2f}x |")
        (pt, pc), (ft, fc) = results["parquet read"], results["floor read"]
        print(f"  | full read, Arrow from memory (Python source floor) | {pt:.2f} s | "
              f"{ft:.2f} s | {ft / pt:.2f}x | {pc:.2f} s | {fc:.2f} s | {fc / pc:.2f}x |")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
