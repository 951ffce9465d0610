"""The ``alance`` Spark data source on a real local Spark (``local[2]``).

Needs Java 17 and PySpark (the ``spark`` extra). A missing Java fails these tests with a
message saying so: they are part of the suite, not optional.
"""

from __future__ import annotations

import collections
import datetime as dt
import decimal
import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import alance
import alance.sync as al
from alance.errors import SchemaMismatchError

try:
    from pyspark.sql import SparkSession
    from pyspark.sql.utils import AnalysisException
except ImportError as exc:  # part of the test extra: an error, not a skip
    raise ImportError("the Spark tests need PySpark: pip install -e '.[test]' (or '.[spark]')"
                      ) from exc

import alance.spark

pytestmark = pytest.mark.slow


def _java_missing() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return None
    if shutil.which("java"):
        return None
    return ("the Spark tests need Java 17 (a JRE on PATH or JAVA_HOME), e.g. "
            "`apt-get install openjdk-17-jre-headless`")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for every Spark test (starting one takes ~7 s)."""
    problem = _java_missing()
    if problem:
        pytest.fail(problem, pytrace=False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (SparkSession.builder.master("local[2]").appName("alance-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.host", "127.0.0.1")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    alance.spark.register(session)
    yield session
    session.stop()


def data_files(uri: str) -> set[str]:
    root = Path(uri) / "data"
    return set(os.listdir(root)) if root.exists() else set()


def test_write_1m_rows_one_version_read_by_pylance_and_alance(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "events.lance")
    first = spark.range(0, 10, numPartitions=1).selectExpr(
        "id", "cast(id % 7 as int) as k", "concat('user-', id) as name", "id * 0.25D as score")
    first.write.format("alance").mode("append").save(uri)
    assert al.open_dataset(uri).version == 1
    df = spark.range(10, 1_000_010, numPartitions=4).selectExpr(
        "id", "cast(id % 7 as int) as k", "concat('user-', id) as name", "id * 0.25D as score")
    df.write.format("alance").mode("append").save(uri)
    ds = al.open_dataset(uri)
    assert ds.version == 2  # ONE new version for the whole job
    assert len(ds.versions()) == 2
    assert len(ds.get_fragments()) == 1 + 4
    mine = ds.to_table().sort_by("id")
    theirs = lance.dataset(uri).to_table().sort_by("id")
    assert theirs.equals(mine)
    assert mine.num_rows == 1_000_010
    assert mine["id"].to_numpy().tolist() == list(range(1_000_010))
    assert mine["name"][123_456].as_py() == "user-123456"
    # and Spark reads back the same rows
    back = spark.read.format("alance").load(uri)
    agg = back.selectExpr("count(*)", "sum(id)", "sum(k)", "sum(length(name))").first()
    ids = np.arange(1_000_010)
    lengths = sum(len(f"user-{i}") for i in ids)
    assert tuple(agg) == (1_000_010, int(ids.sum()), int((ids % 7).sum()), lengths)


def test_failing_task_leaves_table_and_files_unchanged(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    spark.range(0, 10, numPartitions=1).write.format("alance").mode("append").save(uri)
    before = data_files(uri)

    def explode_late(batches):
        for batch in batches:
            if 35_000 in batch.column(0).to_pylist():
                raise RuntimeError("task failed mid-write")
            yield batch

    df = spark.range(0, 40_000, numPartitions=4).mapInArrow(explode_late, "id long")
    # small batches, so the failing task has written files before it fails
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        with pytest.raises(Exception, match="task failed mid-write"):
            df.write.format("alance").mode("append").option("max_rows_per_file", 1000) \
                .option("max_rows_per_group", 10).save(uri)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    ds = al.open_dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 10
    referenced = {f.path for frag in ds.fragment_protos() for f in frag.files}
    assert referenced == before
    assert data_files(uri) == before  # files of finished and failed tasks deleted
    assert not [p for p in (Path(uri) / "_alance_staging").rglob("*") if p.is_file()]


def test_two_jobs_append_at_once(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    spark.range(0, 1).write.format("alance").mode("append").save(uri)
    errors: list[BaseException] = []

    def job(start: int) -> None:
        try:
            alance.spark.activate(spark)  # Spark resolves data sources per thread
            spark.range(start, start + 20_000, numPartitions=2).write.format("alance") \
                .mode("append").save(uri)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=job, args=(s,)) for s in (100_000, 200_000)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, [str(e)[:3000] for e in errors]
    ds = al.open_dataset(uri)
    assert ds.version == 3
    ids = ds.to_table(columns=["id"])["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 40_001
    assert set(ids) == {0} | set(range(100_000, 120_000)) | set(range(200_000, 220_000))


def test_overwrite_and_options(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    spark.range(0, 100).write.format("alance").mode("append").save(uri)
    pinned = spark.read.format("alance").load(uri)  # the version is fixed here
    spark.range(5, 8).selectExpr("id", "id * 2 as twice").write.format("alance") \
        .mode("overwrite").save(uri)
    assert pinned.count() == 100 and pinned.columns == ["id"]
    ds = al.open_dataset(uri)
    assert ds.version == 2 and ds.schema.names == ["id", "twice"]
    old = spark.read.format("alance").option("version", 1).load(uri)
    assert old.count() == 100 and old.columns == ["id"]
    got = spark.read.format("alance").load(uri).orderBy("id").collect()
    assert [tuple(r) for r in got] == [(5, 10), (6, 12), (7, 14)]
    with pytest.raises(Exception, match=r"SchemaMismatch|not in the dataset"):
        spark.range(0, 3).selectExpr("id as other").write.format("alance") \
            .mode("append").save(uri)
    with pytest.raises(AnalysisException):
        spark.read.format("alance").load(str(tmp_path / "missing.lance")).count()


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> str:
    """50k rows in 5 fragments: a small key, a filter column and two wide payload columns."""
    uri = str(tmp_path_factory.mktemp("wide") / "wide.lance")
    n = 50_000
    ids = np.arange(n, dtype=np.int64)
    table = pa.table({
        "id": ids,
        "kind": pa.array(np.array(["click", "view", "buy", "scroll"])[ids % 4]),
        "amount": pa.array((ids % 1000).astype(np.int32)),
        "payload": pa.array([f"{i:08d}" * 40 for i in range(n)]),
        "blob": pa.array([bytes([i % 256]) * 200 for i in range(n)], pa.binary()),
        "ratio": pa.array(ids / 3.0),
    })
    al.write_dataset(table, uri, max_rows_per_file=10_000)
    return uri


def test_projection_and_filter_read(spark, wide: str) -> None:
    ids = np.arange(50_000)
    expected = [(int(i), int(i % 1000)) for i in ids
                if i % 4 == 2 and i % 1000 >= 990 and i < 40_000]
    plain = spark.read.format("alance").load(wide)
    # 5 fragments packed into Spark's default parallelism (local[2]), or as asked
    assert plain.rdd.getNumPartitions() == 2
    five = spark.read.format("alance").option("partitions", 5).load(wide)
    assert five.rdd.getNumPartitions() == 5 and five.count() == 50_000
    q = plain.where("kind = 'buy' AND amount >= 990 AND id < 40000").select("id", "amount")
    assert sorted(tuple(r) for r in q.collect()) == expected
    # push-down on: the filters Spark hands over are evaluated by alance
    df = spark.read.format("alance").option("pushdown", "true").load(wide)
    q = df.where("kind = 'buy' AND amount >= 990 AND id < 40000").select("id", "amount")
    rows = sorted(tuple(r) for r in q.collect())
    assert rows == expected and rows
    # filters Spark cannot hand over, or alance leaves to Spark, still give right answers
    q2 = df.where("(amount < 3 OR amount > 998) AND ratio > 10000.0 "
                  "AND payload LIKE '%00049%'")
    assert q2.count() == sum(1 for i in ids if (i % 1000 < 3 or i % 1000 > 998)
                             and i / 3.0 > 10000.0 and "00049" in f"{i:08d}" * 40)
    in_list = df.where("id IN (1, 5, 49999) AND NOT (kind <=> 'view')").select("id")
    assert sorted(r.id for r in in_list.collect()) == [49999]
    nulls = df.where("kind IS NULL OR amount IS NULL")
    assert nulls.count() == 0
    starts = df.where("kind LIKE 'scr%' AND payload LIKE '%00049999'")
    assert [r.id for r in starts.collect()] == [49999]  # 49999 % 4 == 3: a scroll
    # explicit projection: the columns option, or a user schema naming a subset
    narrow = spark.read.format("alance").option("columns", "id, kind").load(wide)
    assert narrow.columns == ["id", "kind"] and narrow.where("kind = 'view'").count() == 12_500
    typed = spark.read.format("alance").schema("amount int, id long").load(wide)
    assert typed.columns == ["amount", "id"] and typed.where("id = 1234").first() == (234, 1234)
    with pytest.raises(Exception, match="reads as bigint"):
        spark.read.format("alance").schema("id int").load(wide).count()
    # large fragments are split into row ranges
    split = spark.read.format("alance").option("rows_per_partition", 4000).load(wide)
    assert split.rdd.getNumPartitions() == 15 and split.count() == 50_000


def test_reusing_a_dataframe_after_a_filtered_query(spark, wide: str) -> None:
    # Without push-down (the default) every query on one DataFrame sees all rows.
    df = spark.read.format("alance").load(wide)
    assert df.where("id = 7").count() == 1
    assert df.count() == 50_000
    # With it, Spark 4.3 reuses the filtered plan for a later query without filters
    # (see FilteringReader); when this starts failing, Spark fixed it: flip the default.
    pushed = spark.read.format("alance").option("pushdown", "true").load(wide)
    assert pushed.where("id = 7").count() == 1
    assert pushed.count() == 1  # Spark's bug, documented in docs/spark.md
    assert spark.read.format("alance").option("pushdown", "true").load(wide).count() == 50_000


def test_pushdown_and_pruning_read_fewer_bytes(wide: str) -> None:
    """Run the reader in this process under a byte-counting backend."""
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

    from alance.spark.datasource import AlanceDataSource

    fetched: list[int] = []

    class Counting:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        async def get_ranges(self, key, ranges, coalesce):
            out = await self.inner.get_ranges(key, ranges, coalesce)
            fetched.append(sum(len(b) for b in out))
            return out

        async def get(self, key):
            out = await self.inner.get(key)
            fetched.append(len(out))
            return out

    def read(options: dict, filters=()) -> tuple[int, int]:
        source = AlanceDataSource({"path": wide, "wrap_backend": Counting, **options})
        reader = source.reader(source.schema())
        left = list(reader.pushFilters(list(filters))) if filters else []
        fetched.clear()
        rows = sum(b.num_rows for p in reader.partitions() for b in reader.read(p))
        return rows, sum(fetched), len(left)

    full_rows, full_bytes, _ = read({})
    assert full_rows == 50_000 and full_bytes > 5_000_000  # payload and blob dominate
    rows, pruned, _ = read({"columns": "id,kind,amount"})
    assert rows == 50_000 and pruned < full_bytes / 20
    flt = [EqualTo(("kind",), "buy"), GreaterThanOrEqual(("amount",), 995),
           LessThan(("ratio",), 1e9)]  # the float filter stays with Spark
    rows, filtered, left = read({"pushdown": "true"}, flt)
    assert left == 1 and rows == sum(1 for i in range(50_000)
                                     if i % 4 == 2 and i % 1000 >= 995)
    # payload/blob are fetched only for the few matching rows' pages
    assert filtered < full_bytes / 4, (filtered, full_bytes)


def _all_types_table() -> pa.Table:
    n = 6
    ts = [dt.datetime(2024, 1, 1, 12, 30, i, 123456 * (i % 2)) for i in range(n)]
    return pa.table({
        "b": pa.array([i % 2 == 0 for i in range(n)]),
        "i8": pa.array(range(n), pa.int8()), "i16": pa.array(range(n), pa.int16()),
        "i32": pa.array(range(n), pa.int32()), "i64": pa.array(range(n), pa.int64()),
        "u8": pa.array([255 - i for i in range(n)], pa.uint8()),
        "u16": pa.array([65535 - i for i in range(n)], pa.uint16()),
        "u32": pa.array([2**32 - 1 - i for i in range(n)], pa.uint32()),
        "u64": pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()),
        "f16": pa.array(np.arange(n, dtype=np.float16) / 4),
        "f32": pa.array(np.arange(n, dtype=np.float32) / 3),
        "f64": pa.array(np.arange(n) / 7.0),
        "dec": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(12, 2)),
        "s": pa.array([f"é{i}" for i in range(n)]),
        "ls": pa.array([f"large{i}" for i in range(n)], pa.large_string()),
        "bin": pa.array([bytes([i]) * 3 for i in range(n)], pa.binary()),
        "fsb": pa.array([bytes([i]) * 4 for i in range(n)], pa.binary(4)),
        "d32": pa.array([dt.date(2020, 1, 1 + i) for i in range(n)], pa.date32()),
        "ts_tz": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "ts_ms": pa.array(ts, pa.timestamp("ms")),
        "dur": pa.array([dt.timedelta(seconds=i, microseconds=7) for i in range(n)],
                        pa.duration("us")),
        "lst": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64())),
        "vec": pa.array([[float(i)] * 3 for i in range(n)], pa.list_(pa.float32(), 3)),
        "st": pa.array([{"x": i, "y": f"y{i}"} for i in range(n)],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
    })


def test_every_supported_type_round_trips(spark, tmp_path: Path) -> None:
    source = str(tmp_path / "types.lance")
    table = _all_types_table()
    al.write_dataset(table, source)
    df = spark.read.format("alance").load(source)
    kinds = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    assert kinds == {
        "b": "boolean", "i8": "tinyint", "i16": "smallint", "i32": "int", "i64": "bigint",
        "u8": "smallint", "u16": "int", "u32": "bigint", "u64": "decimal(20,0)",
        "f16": "float", "f32": "float", "f64": "double", "dec": "decimal(12,2)",
        "s": "string", "ls": "string", "bin": "binary", "fsb": "binary", "d32": "date",
        "ts_tz": "timestamp", "ts_ms": "timestamp_ntz", "dur": "interval day to second",
        "lst": "array<bigint>", "vec": "array<float>", "st": "struct<x:int,y:string>"}
    row = df.where("i64 = 5").first()
    assert row.u64 == decimal.Decimal(2**64 - 6) and row.s == "é5" and row.vec == [5.0] * 3
    assert row.ts_tz == dt.datetime(2024, 1, 1, 12, 30, 5, 123456)
    # Spark writes what it read into a new dataset, and appends it back to the source,
    # whose column types it must respect (uint64 <- decimal(20,0), fixed-size list <- array)
    copy = str(tmp_path / "copy.lance")
    df.write.format("alance").mode("append").save(copy)
    df.write.format("alance").mode("append").save(source)
    doubled = al.open_dataset(source).to_table()
    assert doubled.schema == al.open_dataset(source).schema
    assert doubled.slice(6).equals(table) and doubled.slice(0, 6).equals(table)
    copied = al.open_dataset(copy).to_table()
    for name in table.column_names:
        assert copied[name].to_pylist() == table[name].to_pylist() or name in (
            "ts_tz", "ts_ms", "f16"), name
    assert copied["f16"].to_pylist() == [float(x) for x in table["f16"].to_pylist()]
    assert lance.dataset(copy).to_table().equals(copied)


def test_unsupported_types_are_refused_clearly(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "t.lance")
    al.write_dataset(pa.table({"id": [1], "big": pa.array([1], pa.decimal256(50, 0))}), uri)
    with pytest.raises(Exception, match="precision"):
        spark.read.format("alance").load(uri)
    ok = spark.read.format("alance").option("columns", "id").load(uri)
    assert ok.collect() == [(1,)]


def test_direct_api_errors() -> None:
    from alance.spark.datasource import AlanceDataSource

    with pytest.raises(alance.InvalidInputError, match="no dataset URI"):
        AlanceDataSource({}).schema()
    with pytest.raises(alance.InvalidInputError, match="integer"):
        AlanceDataSource({"path": "x", "versionAsOf": "one"}).schema()
    with pytest.raises(alance.NotFoundError, match="tag 'one'"):  # a version may be a tag
        AlanceDataSource({"path": "x", "version": "one"}).schema()
    assert SchemaMismatchError is not None


def _task_in_worker(uri: str, i: int) -> tuple[int, int, int, int, int]:
    """One small Spark task using the blocking facade; reports the worker's resources."""
    import os
    import threading

    import alance.sync as al_worker

    ds = al_worker.open_dataset(uri)
    total = ds.count_rows("id >= 5")
    rows = ds.take([i % 10]).num_rows
    if i % 20 == 0:
        ds.to_table(columns=["id"])
    fds = len(os.listdir("/proc/self/fd"))
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return os.getpid(), threading.active_count(), fds, rss_pages * os.sysconf("SC_PAGE_SIZE"), \
        total + rows


def test_200_tasks_in_reused_workers_do_not_leak(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "small.lance")
    al.write_dataset(pa.table({"id": np.arange(100, dtype=np.int64)}), uri)
    results = spark.sparkContext.parallelize(range(200), 200) \
        .map(lambda i: _task_in_worker(uri, i)).collect()
    assert all(r[4] == 96 for r in results)
    by_pid: dict[int, list[tuple[int, int, int]]] = {}
    for pid, threads, fds, rss, _ in results:
        by_pid.setdefault(pid, []).append((threads, fds, rss))
    busiest = max(by_pid.values(), key=len)
    assert len(busiest) >= 50, {p: len(v) for p, v in by_pid.items()}  # workers were reused
    for seen in by_pid.values():
        if len(seen) < 20:
            continue
        warm = seen[10:]  # after the first tasks: loop thread, store pools started
        threads = [t for t, _, _ in warm]
        fds = [f for _, f, _ in warm]
        assert max(threads) == min(threads), threads
        assert max(fds) - min(fds) <= 2, fds
        assert warm[-1][2] - warm[0][2] < 40 * 1024 * 1024, (warm[0][2], warm[-1][2])


@pytest.mark.parametrize("version", ["legacy", None])  # None: the default, 2.2
def test_pipeline_helpers_write_then_commit_and_delete(spark, tmp_path: Path,
                                                       version: str | None) -> None:
    from alance.spark import pipeline

    uri = str(tmp_path / "p.lance")
    df = spark.range(0, 30_000, numPartitions=3).selectExpr("id", "id % 10 as bucket")
    plan, results = pipeline.write_fragments(df, uri, data_storage_version=version)
    assert len(results) == 3 and sum(r.num_rows for r in results) == 30_000
    with pytest.raises(alance.DatasetNotFoundError):
        al.open_dataset(uri)  # nothing visible before the driver commits
    ds = pipeline.commit_fragments(plan, results)
    assert ds.version == 1 and ds.count_rows() == 30_000
    assert ds.data_storage_version == ("0.1" if version == "legacy" else "2.2")
    result = pipeline.delete_where(spark, uri, "bucket = 3 OR id < 100")
    assert result.num_deleted_rows == 3000 + 90 and result.dataset.version == 2
    ids = lance.dataset(uri).to_table()["id"].to_numpy()
    assert len(ids) == 30_000 - 3090 and not np.any(ids % 10 == 3) and ids.min() == 100
    updated = pipeline.update_where(spark, uri, {"bucket": "bucket + 100"}, "id >= 29000")
    assert updated.num_rows_updated == 900 and updated.dataset.version == 3
    table = lance.dataset(uri).to_table()
    assert table.num_rows == 30_000 - 3090
    assert sorted(table.filter(pc.field("bucket") >= 100)["id"].to_pylist()) == \
        [i for i in range(29_000, 30_000) if i % 10 != 3]
    again = pipeline.write_dataframe(df.limit(5), uri)
    assert again.version == 4 and again.count_rows() == 30_000 - 3090 + 5
    before = again.to_table().sort_by("id")
    compacted = pipeline.compact(spark, uri, target_rows_per_fragment=100_000)
    assert compacted is not None and len(compacted.get_fragments()) == 1
    assert compacted.to_table().sort_by("id").equals(before)
    assert lance.dataset(uri).to_table().sort_by("id").equals(before)


def _dataset_files(uri: str) -> set[str]:
    root = Path(uri)
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in ("_versions", "_transactions")}


def _settled(uri: str, expected: set[str]) -> set[str]:
    """The dataset's files once tasks Spark is still cancelling have finished (<= 10 s)."""
    deadline = time.monotonic() + 10
    while (files := _dataset_files(uri)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return files


def test_failed_pipeline_jobs_leave_no_files(spark, tmp_path: Path) -> None:
    """A delete, update or compaction job with a failing task: the files of the tasks that
    finished are deleted too, the table stays at its version (default 2.2 files)."""
    from alance.spark import pipeline

    uri = str(tmp_path / "f.lance")
    for i in range(4):  # four small fragments: compaction plans two groups
        ids = np.arange(300 * i, 300 * (i + 1), dtype=np.int64)
        al.write_dataset(pa.table({"id": ids, "k": ids % 10}), uri, mode="append")
    ds = al.open_dataset(uri)
    assert ds.data_storage_version == "2.2" and len(ds.get_fragments()) == 4
    broken = f"data/{ds.fragment_protos()[-1].files[0].path}"
    os.remove(Path(uri) / broken)  # the task that reads the last fragment fails
    files = _dataset_files(uri)
    jobs = [lambda: pipeline.delete_where(spark, uri, "k = 3"),
            lambda: pipeline.update_where(spark, uri, {"k": "k + 100"}, "k < 5"),
            lambda: pipeline.compact(spark, uri, target_rows_per_fragment=500)]
    for job in jobs:
        with pytest.raises(Exception, match=r"not found|NotFound|No such file"):
            job()
        assert _settled(uri, files) == files
        assert al.open_dataset(uri).version == 4


def _change_history(uri: str) -> al.LanceDataset:
    """Inserts, updates, deletes and appends on a table with stable row ids (2.2 files)."""
    def rows(start: int, n: int) -> pa.Table:
        ids = np.arange(start, start + n, dtype=np.int64)
        return pa.table({"id": ids, "name": pa.array([f"n{i}" for i in ids])})

    ds = al.write_dataset(rows(0, 300), uri, enable_stable_row_ids=True,
                          max_rows_per_file=100)                                  # v1
    ds = al.write_dataset(rows(1000, 50), uri, mode="append")                    # v2
    ds = ds.update({"name": "'u3'"}, where="id % 7 = 0").dataset                 # v3
    ds = ds.delete("id < 30 OR id = 1005").dataset                               # v4
    ds = al.write_dataset(rows(2000, 20), uri, mode="append")                    # v5
    return ds


def _rows_of(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def test_change_feed_through_spark(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "cdf.lance")
    ds = _change_history(uri)
    df = spark.read.format("alance").option("changes_from", 2).option("changes_to", 4).load(uri)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"), ("name", "string"), ("_rowid", "bigint"),
        ("_row_created_at_version", "bigint"), ("_row_last_updated_at_version", "bigint"),
        ("_change_type", "string")]
    # one partition per fragment of version 4 (upserts) and of version 2 (deletes)
    frags = len(ds.checkout_version(4).get_fragments()) + len(
        ds.checkout_version(2).get_fragments())
    assert df.rdd.getNumPartitions() == frags
    expected = ds.changes(2, 4).to_table()
    got = [tuple(r) for r in df.collect()]
    assert sorted(got) == _rows_of(expected)
    assert {r[-1] for r in got} == {"update", "delete"} and len(got) == expected.num_rows
    # from the start to the latest version, a projection, without deletes
    df = spark.read.format("alance").option("changes_from", 1).option("columns", "name") \
        .option("include_deleted", "false").load(uri)
    assert df.columns == ["name", "_rowid", "_row_created_at_version",
                          "_row_last_updated_at_version", "_change_type"]
    expected = ds.changes(1, columns=["name"], include_deleted=False).to_table()
    got = [tuple(r) for r in df.collect()]
    assert sorted(got) == _rows_of(expected)
    # inserts: v2's rows but 1005, v5's; updates: v1's multiples of 7 not deleted
    assert collections.Counter(r[-1] for r in got) == {"insert": 49 + 20, "update": 43 - 5}
    # system columns in a plain read: as alance and pylance read them
    system = ["id", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
    plain = spark.read.format("alance").option("columns", ", ".join(system)).load(uri)
    assert [f.dataType.simpleString() for f in plain.schema.fields] == ["bigint"] * 4
    got = sorted(tuple(r) for r in plain.collect())
    assert got == _rows_of(ds.to_table(columns=system))
    assert got == _rows_of(lance.dataset(uri).to_table(columns=system))
    assert len(got) == 300 + 50 + 20 - 31 and {r[3] for r in got} == {1, 2, 3, 5}
    with pytest.raises(Exception, match=r"stable row ids|enable_stable_row_ids"):
        al.write_dataset(pa.table({"id": [1]}), str(tmp_path / "plain.lance"))
        spark.read.format("alance").option("changes_from", 0).load(
            str(tmp_path / "plain.lance")).count()


def test_change_feed_reader_in_process(tmp_path: Path) -> None:
    """The change reader without Spark: a user schema naming a subset, and bad options."""
    from pyspark.sql import types as T

    from alance.spark.datasource import AlanceDataSource

    uri = str(tmp_path / "cdf.lance")
    ds = _change_history(uri)
    source = AlanceDataSource({"path": uri, "changes_from": "3", "batch_size": "16"})
    wanted = T.StructType([T.StructField("_change_type", T.StringType()),
                           T.StructField("id", T.LongType())])
    reader = source.reader(wanted)
    batches = [b for p in reader.partitions() for b in reader.read(p)]
    assert all(b.schema.names == ["_change_type", "id"] and b.num_rows <= 16 for b in batches)
    got = sorted(tuple(r.values()) for b in batches for r in b.to_pylist())
    expected = ds.changes(3).to_table()
    assert got == sorted(zip(expected["_change_type"].to_pylist(),
                             expected["id"].to_pylist(), strict=True))
    with pytest.raises(SchemaMismatchError):
        source.reader(T.StructType([T.StructField("id", T.IntegerType())]))
    with pytest.raises(alance.InvalidInputError, match="true or false"):
        AlanceDataSource({"path": uri, "changes_from": "1", "include_deleted": "maybe"}
                         ).reader(wanted)
    with pytest.raises(alance.InvalidInputError, match="after end"):
        AlanceDataSource({"path": uri, "changes_from": "4", "changes_to": "2"}).schema()


def test_s3_round_trip_with_storage_options(spark, moto_target) -> None:
    uri = moto_target.uri("spark/events.lance")
    opts = moto_target.storage_options
    df = spark.range(0, 20_000, numPartitions=2).selectExpr("id", "concat('e', id) AS name")
    df.write.format("alance").mode("append").options(**opts).save(uri)
    df.write.format("alance").mode("append").options(**opts).save(uri)
    back = spark.read.format("alance").options(**opts).load(uri)
    assert back.count() == 40_000 and back.selectExpr("sum(id)").first()[0] == 2 * 19_999 * 10_000
    ds = al.open_dataset(uri, storage_options=opts)
    assert ds.version == 2 and len(ds.get_fragments()) == 4
    assert lance.dataset(uri, storage_options=opts).count_rows() == 40_000


def test_nulls_round_trip(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "nulls.lance")
    df = spark.range(0, 1000, numPartitions=2).selectExpr(
        "id",
        "CASE WHEN id % 3 = 0 THEN NULL ELSE id * 2 END AS maybe_long",
        "CASE WHEN id % 4 = 0 THEN NULL ELSE id / 7.0D END AS maybe_double",
        "CASE WHEN id % 5 = 0 THEN NULL ELSE concat('s', id) END AS maybe_string",
        "CASE WHEN id % 6 = 0 THEN NULL ELSE named_struct('a', id, 'b', "
        "CASE WHEN id % 4 = 1 THEN NULL ELSE 'x' END) END AS maybe_struct",
        "CASE WHEN id % 7 = 0 THEN NULL ELSE array(id, NULL) END AS maybe_list")
    df.write.format("alance").mode("append").save(uri)
    def rows(frame) -> list[dict]:
        return sorted((r.asDict(recursive=True) for r in frame.collect()), key=lambda r: r["id"])

    expected = rows(df)
    assert sum(r["maybe_long"] is None for r in expected) == 334
    assert lance.dataset(uri).to_table().sort_by("id").to_pylist() == expected
    assert al.open_dataset(uri).to_table().sort_by("id").to_pylist() == expected
    assert rows(spark.read.format("alance").load(uri)) == expected


def test_registered_class_carries_the_default_partitions_by_value() -> None:
    from pyspark import cloudpickle

    from alance.spark import AlanceDataSource, AlanceDataSourcePushdown, source_class

    assert source_class(True, None) is AlanceDataSourcePushdown
    assert source_class(False, 0) is AlanceDataSource
    cls = source_class(False, 3)
    # Spark's Python workers get the class by value: the default travels with it
    back = cloudpickle.loads(cloudpickle.dumps(cls))
    assert back.default_partitions == 3 and back.name() == "alance"
    assert issubclass(back, AlanceDataSource) and not back.pushdown_default
    assert source_class(True, 5).pushdown_default is True


def test_register_probe_keeps_spark_pushdown_off_where_it_is_unsound(spark) -> None:
    from alance.spark.probe import pushdown_is_scoped

    # Spark 4.3 keeps a pushed read plan per relation: the probe sees it and register()
    # leaves Spark's push-down off by default (the filter option is the safe path).
    assert pushdown_is_scoped(spark) is False
    assert alance.spark.register(spark) is False


def test_default_reads_are_right_when_dataframes_are_reused_cached_and_self_joined(
        spark, wide: str) -> None:
    df = spark.read.format("alance").load(wide)
    assert df.where("id = 7").count() == 1
    assert df.count() == 50_000
    assert df.where("kind = 'buy'").count() == 12_500
    assert df.where("amount = 5").count() == 50
    assert df.count() == 50_000
    joined = df.alias("a").join(df.where("id < 10").alias("b"), "id", "left")
    assert joined.count() == 50_000
    assert joined.where("b.kind IS NOT NULL").count() == 10
    cached = df.where("amount < 10").cache()
    try:
        assert cached.count() == 500 and cached.where("id < 1000").count() == 10
        assert df.count() == 50_000
    finally:
        cached.unpersist()
    # the filter option: alance filters, and every query on that DataFrame sees those rows
    few = alance.spark.read(spark, wide, columns=["id", "amount"], filter="amount >= 995")
    assert few.columns == ["id", "amount"]
    assert few.count() == 250 and few.where("id < 10000").count() == 50
    assert few.alias("a").join(few.alias("b"), "id").count() == 250
    assert df.count() == 50_000
    with pytest.raises(Exception, match=r"InvalidInput|column|nope"):
        alance.spark.read(spark, wide, filter="nope > 1").count()


def test_save_modes(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "modes.lance")
    df = spark.range(0, 100, numPartitions=2)
    with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("alance").save(uri)  # Spark's own check, before alance is called
    alance.spark.save(df, uri)  # errorifexists on a missing dataset: created
    assert al.open_dataset(uri).version == 1
    before = _dataset_files(uri)
    with pytest.raises(Exception, match="already exists"):
        alance.spark.save(df, uri, mode="error")
    alance.spark.save(spark.range(500, 600), uri, mode="ignore")
    ds = al.open_dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 100 and _dataset_files(uri) == before
    alance.spark.save(spark.range(500, 510), str(tmp_path / "new.lance"), mode="ignore")
    assert al.open_dataset(str(tmp_path / "new.lance")).count_rows() == 10
    alance.spark.save(spark.range(0, 5), uri, mode="append")
    alance.spark.save(spark.range(0, 3), uri, mode="overwrite")
    ds = al.open_dataset(uri)
    assert ds.version == 3 and sorted(ds.to_table()["id"].to_pylist()) == [0, 1, 2]
    with pytest.raises(Exception, match="save_mode"):
        df.write.format("alance").mode("append").option("save_mode", "sometimes").save(uri)


def test_errorifexists_commit_refuses_a_dataset_created_meanwhile(tmp_path: Path) -> None:
    """The race window of errorifexists is closed by the commit, which only creates."""
    from pyspark.sql import types as T

    from alance.spark.datasource import AlanceDataSource

    uri = str(tmp_path / "race.lance")
    schema = T.StructType([T.StructField("id", T.LongType())])
    writer = AlanceDataSource({"path": uri, "save_mode": "errorifexists"}).writer(schema, False)
    msg = writer.write(iter([pa.record_batch({"id": pa.array([1, 2], pa.int64())})]))
    al.write_dataset(pa.table({"id": pa.array([9], pa.int64())}), uri)  # someone else
    with pytest.raises(alance.AlreadyExistsError):
        writer.commit([msg])
    assert al.open_dataset(uri).to_table()["id"].to_pylist() == [9]
    ignoring = AlanceDataSource({"path": str(tmp_path / "race2.lance"),
                                 "save_mode": "ignore"}).writer(schema, False)
    msg = ignoring.write(iter([pa.record_batch({"id": pa.array([1], pa.int64())})]))
    al.write_dataset(pa.table({"id": pa.array([7], pa.int64())}), str(tmp_path / "race2.lance"))
    ignoring.commit([msg])  # ignore: the other dataset wins, silently
    assert al.open_dataset(str(tmp_path / "race2.lance")).to_table()["id"].to_pylist() == [7]


def test_options_tables_and_views(spark, tmp_path: Path) -> None:
    from alance.spark.options import split_options

    uri = str(tmp_path / "t.lance")
    spark.range(0, 10).write.format("alance").mode("append").save(uri)
    # what Spark hands over for CREATE TABLE ... OPTIONS (...) COMMENT ... TBLPROPERTIES (...)
    opts = split_options({"aws_region": "x", "location": f"file:{uri}", "option.aws_region": "x",
                          "comment": "hi", "owner": "me", "k": "v", "path": f"file:{uri}",
                          "provider": "alance", "option.versionasof": "1"})
    assert opts.storage == {"aws_region": "x"} and opts.own["versionasof"] == "1"
    assert opts.uri == uri and opts.table["k"] == "v" and "owner" in opts.table
    plain = split_options({"path": uri, "versionasof": "2", "aws_region": "y"})
    assert plain.storage == {"aws_region": "y"} and plain.own["versionasof"] == "2"
    # Spark passes no options when a catalog table is read: refused at CREATE, clearly
    with pytest.raises(AnalysisException, match="catalog tables"):
        spark.sql(f"CREATE TABLE alance_t USING alance LOCATION '{uri}'")
    with pytest.raises(AnalysisException, match="versionasoff"):
        spark.read.format("alance").option("versionAsOff", 1).load(uri).count()
    # temporary views: SQL reads and INSERT INTO
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW alance_v USING alance OPTIONS (path '{uri}')")
    assert spark.sql("SELECT count(*), sum(id) FROM alance_v").first() == (10, 45)
    spark.sql("INSERT INTO alance_v SELECT id + 100 FROM range(5)")
    ds = al.open_dataset(uri)
    assert ds.version == 2 and ds.count_rows() == 15
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW alance_v USING alance OPTIONS (path '{uri}')")
    assert spark.sql("SELECT count(*) FROM alance_v").first()[0] == 15
    spark.read.format("alance").load(uri).createOrReplaceTempView("alance_v2")
    assert spark.sql("SELECT max(id) FROM alance_v2").first()[0] == 104
    spark.catalog.dropTempView("alance_v")
    spark.catalog.dropTempView("alance_v2")


def test_time_travel_options(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "tt.lance")
    spark.range(0, 10).write.format("alance").mode("append").save(uri)       # v1
    time.sleep(0.05)
    between = al.open_dataset(uri).versions()[-1]["timestamp"]
    time.sleep(0.05)
    spark.range(10, 30).write.format("alance").mode("append").save(uri)      # v2
    al.open_dataset(uri).tags.create("first", 1)

    def count(**options: str) -> int:
        reader = spark.read.format("alance")
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load(uri).count()

    assert count() == 30
    assert count(version="1") == count(versionAsOf="1") == count(tag="first") == 10
    assert count(version="first") == 10
    assert count(timestampAsOf=between.isoformat()) == 10
    assert count(timestampAsOf="2999-01-01 00:00:00") == 30
    with pytest.raises(Exception, match="at most one"):
        count(version="1", tag="first")
    with pytest.raises(Exception, match="timestampAsOf"):
        count(timestampAsOf="yesterday")


def test_merge_schema_on_append(spark, tmp_path: Path) -> None:
    uri = str(tmp_path / "m.lance")
    spark.range(0, 4).write.format("alance").mode("append").save(uri)
    wider = spark.range(10, 12).selectExpr("id", "concat('n', id) AS name", "id * 2 AS twice")
    with pytest.raises(Exception, match="not in the dataset"):
        wider.write.format("alance").mode("append").save(uri)
    wider.write.format("alance").mode("append").option("mergeSchema", "true").save(uri)
    ds = al.open_dataset(uri)
    assert ds.schema.names == ["id", "name", "twice"] and ds.version == 3
    rows = sorted(ds.to_table().to_pylist(), key=lambda r: r["id"])
    assert rows[0] == {"id": 0, "name": None, "twice": None}
    assert rows[-1] == {"id": 11, "name": "n11", "twice": 22}
    assert lance.dataset(uri).to_table().num_rows == 6
    # mergeSchema with nothing new is a plain append
    spark.range(20, 21).selectExpr("id", "'x' AS name", "1L AS twice").write.format("alance") \
        .mode("append").option("mergeSchema", "true").save(uri)
    assert al.open_dataset(uri).version == 4


def test_streaming_sink_commits_each_batch_once(spark, tmp_path: Path) -> None:
    from alance.spark.stream import BATCH_KEY, last_committed_batch

    source = str(tmp_path / "in")
    for i in range(3):
        spark.range(i * 100, i * 100 + 100, numPartitions=2).write.mode("append") \
            .parquet(source)
    uri, checkpoint = str(tmp_path / "s.lance"), str(tmp_path / "ck")

    def run() -> None:
        q = (spark.readStream.schema("id long").option("maxFilesPerTrigger", 2).parquet(source)
             .writeStream.format("alance").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start(uri))
        q.awaitTermination(180)
        assert q.exception() is None

    run()
    ds = al.open_dataset(uri)
    ids = ds.to_table()["id"].to_pylist()
    assert sorted(ids) == list(range(300))
    assert last_committed_batch(ds, checkpoint) == 2
    assert ds.version == 1 + 3  # the empty dataset, then one version per micro-batch
    # Spark replays a batch whose commit it did not record: drop its entry from the log
    for name in ("2", ".2.crc"):
        (Path(checkpoint) / "commits" / name).unlink(missing_ok=True)
    run()
    ds = al.open_dataset(uri)
    assert ds.version == 4 and sorted(ds.to_table()["id"].to_pylist()) == list(range(300))
    # new input: a new batch id, committed
    spark.range(1000, 1010).write.mode("append").parquet(source)
    run()
    ds = al.open_dataset(uri)
    assert ds.count_rows() == 310 and ds.read_transaction(ds.version).transaction_properties[
        BATCH_KEY] == "3"
