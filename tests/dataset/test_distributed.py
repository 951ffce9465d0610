"""Distributed writes and reads without Spark: plan once, many writers, one commit."""

from __future__ import annotations

import asyncio
import os
import pickle
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import alance
from alance.dataset.distributed.read import (
    ReadTask,
    plan_read,
    plan_read_groups,
    scan_task,
    scan_tasks,
)
from alance.dataset.distributed.write import UncommittedFragments, plan_write
from alance.errors import (
    AlreadyExistsError,
    InvalidInputError,
    JobFinishedError,
    SchemaMismatchError,
    UnrepresentableValueError,
)


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": (ids * 2).astype(np.int32),
                     "s": pa.array([f"r{i}" for i in ids])})


def data_files(uri: str) -> set[str]:
    root = Path(uri) / "data"
    return set(os.listdir(root)) if root.exists() else set()


async def test_many_writers_one_append(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 100), local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append", max_rows_per_file=300)
    plan = pickle.loads(pickle.dumps(plan))  # travels to tasks
    parts = await asyncio.gather(*(plan.write(rows(1000 * (i + 1), 500)) for i in range(4)))
    parts = [pickle.loads(pickle.dumps(p)) for p in parts]  # travel back as commit messages
    assert all(len(p.fragments) == 2 and p.num_rows == 500 for p in parts)
    # nothing visible before the commit
    assert (await alance.open_dataset(local_uri)).version == 1
    new = await plan.commit([*parts, None])
    assert isinstance(new, alance.LanceDataset) and new.version == 2
    ds = await alance.open_dataset(local_uri)
    assert ds.version == 2 and len(ds.get_fragments()) == 9
    got = (await ds.to_table()).sort_by("id")
    expected = pa.concat_tables([rows(0, 100)] + [rows(1000 * (i + 1), 500) for i in range(4)])
    assert got.equals(expected)
    assert lance.dataset(local_uri).to_table().sort_by("id").equals(expected)
    assert lance.dataset(local_uri).version == 2


async def test_create_and_overwrite(local_uri: str) -> None:
    plan = await plan_write(local_uri, rows(0, 1).schema, "create")
    part = await plan.write(rows(0, 50))
    await plan.commit([part])
    assert (await alance.open_dataset(local_uri)).version == 1
    with pytest.raises(AlreadyExistsError):
        await plan_write(local_uri, rows(0, 1).schema, "create")
    wider = rows(0, 10).append_column("extra", pa.array([1.5] * 10))
    plan = await plan_write(local_uri, wider.schema, "overwrite")
    await plan.commit([await plan.write(wider)])
    table = lance.dataset(local_uri).to_table()
    assert table.equals(wider)


async def test_append_to_missing_dataset_creates_it_and_races_merge(local_uri: str) -> None:
    # Two jobs both planned before the dataset existed: both land, neither overwrites.
    schema = rows(0, 1).schema
    a = await plan_write(local_uri, schema, "append")
    b = await plan_write(local_uri, schema, "append")
    part_a, part_b = await a.write(rows(0, 10)), await b.write(rows(10, 10))
    await a.commit([part_a])
    await b.commit([part_b])
    table = (await (await alance.open_dataset(local_uri)).to_table()).sort_by("id")
    assert table.equals(rows(0, 20))


async def test_concurrent_commits_are_rebased(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    plans = [await plan_write(local_uri, rows(0, 1).schema, "append") for _ in range(3)]
    parts = [await p.write(rows(100 * (i + 1), 10)) for i, p in enumerate(plans)]
    await asyncio.gather(*(p.commit([part]) for p, part in zip(plans, parts, strict=True)))
    ds = await alance.open_dataset(local_uri)
    assert ds.version == 4
    ids = (await ds.to_table(columns=["id"]))["id"].to_pylist()
    assert len(ids) == len(set(ids)) == 40


async def test_concurrent_overwrite_refuses_append_and_cleans_up(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append")
    part = await plan.write(rows(100, 10))
    before = data_files(local_uri)
    await alance.write_dataset(rows(500, 5), local_uri, mode="overwrite")
    with pytest.raises(alance.CommitConflictError):
        await plan.commit([part])
    # the append's files are gone, the overwrite's stay
    assert not {f.files[0].path for f in part.fragment_protos()} & data_files(local_uri)
    assert len(data_files(local_uri)) == len(before)
    assert (await (await alance.open_dataset(local_uri)).to_table()).equals(rows(500, 5))


async def test_abort_deletes_reported_files(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    before = data_files(local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append")
    parts = [await plan.write(rows(100 * i, 10)) for i in range(1, 4)]
    assert len(data_files(local_uri)) == len(before) + 3
    await plan.abort([*parts, None])
    assert data_files(local_uri) == before
    assert (await alance.open_dataset(local_uri)).version == 1


async def test_failed_task_leaves_nothing(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    before = data_files(local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append", max_rows_per_file=100)

    def batches():
        yield rows(1000, 250).to_batches()[0]
        raise RuntimeError("task died mid-write")

    with pytest.raises(RuntimeError, match="mid-write"):
        await plan.write(batches())
    assert data_files(local_uri) == before


async def test_values_are_conformed_by_name_and_checked(local_uri: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), False), pa.field("small", pa.uint32())])
    await alance.write_dataset(pa.table({"id": [1], "small": pa.array([1], pa.uint32())},
                                        schema=schema), local_uri)
    # Spark-like input: other order, wider types, upper-case name, nullable id
    spark_like = pa.table({"SMALL": pa.array([7, 8], pa.int64()), "id": [2, 3]})
    plan = await plan_write(local_uri, spark_like.schema, "append")
    await plan.commit([await plan.write(spark_like)])
    got = (await (await alance.open_dataset(local_uri)).to_table()).sort_by("id")
    assert got.schema == schema and got["small"].to_pylist() == [1, 7, 8]
    before = data_files(local_uri)
    plan = await plan_write(local_uri, spark_like.schema, "append")
    with pytest.raises(UnrepresentableValueError, match="small"):
        await plan.write(pa.table({"small": pa.array([-1], pa.int64()), "id": [4]}))
    with pytest.raises(UnrepresentableValueError, match="not nullable"):
        await plan.write(pa.table({"small": pa.array([1], pa.int64()),
                                   "id": pa.array([None], pa.int64())}))
    assert data_files(local_uri) == before
    with pytest.raises(SchemaMismatchError):
        await plan_write(local_uri, pa.schema([("id", pa.int64())]), "append")


async def test_commit_refuses_foreign_or_duplicate_results(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append")
    other = await plan_write(local_uri, rows(0, 1).schema, "append")
    part = await plan.write(rows(100, 10))
    with pytest.raises(InvalidInputError, match="twice"):
        await plan.commit([part, part])
    with pytest.raises(InvalidInputError, match="handed to the commit"):
        await other.commit([part])
    with pytest.raises(InvalidInputError):
        await plan.commit(["junk"])  # type: ignore[list-item]
    assert (await alance.open_dataset(local_uri)).version == 1


async def test_empty_task_and_bad_mode(local_uri: str) -> None:
    plan = await plan_write(local_uri, rows(0, 1).schema, "append")
    empty = await plan.write(iter([]))
    assert empty == UncommittedFragments(plan.job_id)
    await plan.commit([empty, await plan.write(rows(0, 3))])
    assert await (await alance.open_dataset(local_uri)).count_rows() == 3
    with pytest.raises(InvalidInputError):
        await plan_write(local_uri, rows(0, 1).schema, "upsert")
    with pytest.raises(alance.UnsupportedFeatureError):
        await plan_write(local_uri, pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))]))


def test_plan_read_splits_large_fragments() -> None:
    from alance._proto import table_pb2

    frags = [table_pb2.DataFragment(id=i, physical_rows=n) for i, n in
             enumerate([10, 25, 0])]
    tasks = plan_read(frags, 10)
    assert tasks == [ReadTask(0, 0, 10), ReadTask(1, 0, 8), ReadTask(1, 8, 16),
                     ReadTask(1, 16, 25), ReadTask(2, 0, 0)]
    with pytest.raises(InvalidInputError):
        plan_read(frags, 0)


def test_plan_read_groups_packs_small_fragments_for_the_parallelism() -> None:
    from alance._proto import table_pb2

    frags = [table_pb2.DataFragment(id=i, physical_rows=n) for i, n in
             enumerate([250, 250, 250, 250])]
    assert plan_read_groups(frags, 1000) == [[ReadTask(i, 0, 250)] for i in range(4)]
    assert plan_read_groups(frags, 1000, 2) == [[ReadTask(0, 0, 250), ReadTask(1, 0, 250)],
                                                [ReadTask(2, 0, 250), ReadTask(3, 0, 250)]]
    # rows_per_task still caps a group; a large fragment is cut for the parallelism
    assert plan_read_groups(frags, 300, 1) == [[ReadTask(i, 0, 250)] for i in range(4)]
    assert plan_read_groups(frags, 500, 1) == [[ReadTask(0, 0, 250), ReadTask(1, 0, 250)],
                                               [ReadTask(2, 0, 250), ReadTask(3, 0, 250)]]
    big = [table_pb2.DataFragment(id=0, physical_rows=900),
           table_pb2.DataFragment(id=1, physical_rows=100)]
    assert plan_read_groups(big, 10_000, 2) == [[ReadTask(0, 0, 450)],
                                                [ReadTask(0, 450, 900), ReadTask(1, 0, 100)]]
    groups = plan_read_groups(frags + big[1:], 10_000, 3)
    assert [t for g in groups for t in g] == plan_read(frags + big[1:], 10_000)
    assert len(groups) == 3


async def test_range_scans_cover_the_dataset_once(local_uri: str) -> None:
    # legacy files: deletes on 2.x datasets are not supported yet
    await alance.write_dataset(rows(0, 5000), local_uri, max_rows_per_file=2000,
                               max_rows_per_group=300, data_storage_version="legacy")
    ds = (await alance.open_dataset(local_uri)).delete("id % 7 = 0")
    ds = (await ds).dataset
    tasks = plan_read(ds.fragment_protos(), 700)
    assert len(tasks) == 3 + 3 + 2
    flt = (pc.field("v") > 1000) & pc.field("s").is_valid()
    parts = []
    for task in tasks:
        async for batch in scan_task(ds, task, columns=["id"], filter=flt,
                                     filter_columns=["v", "s"], batch_size=100):
            assert batch.schema.names == ["id"] and batch.num_rows <= 100
            parts.append(batch)
    got = sorted(pa.Table.from_batches(parts)["id"].to_pylist())
    assert got == [i for i in range(5000) if i % 7 and i * 2 > 1000]
    with pytest.raises(InvalidInputError):
        scan_task(ds, ReadTask(99, 0, 1))
    # the same tasks packed into groups, each group one scan, in the order of its tasks
    groups = plan_read_groups(ds.fragment_protos(), 10_000, 3)
    assert len(groups) == 3 and sum(len(g) for g in groups) == 5
    ordered = []
    for group in groups:
        async for batch in scan_tasks(ds, group, columns=["id"], filter=flt,
                                      filter_columns=["v", "s"], batch_size=100):
            ordered += batch["id"].to_pylist()
    assert ordered == [i for i in range(5000) if i % 7 and i * 2 > 1000]


def staging(uri: str) -> list[str]:
    root = Path(uri) / "_alance_staging"
    return [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()] if root.exists() \
        else []


async def test_unreported_attempts_are_cleaned_up(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    before = data_files(local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append", max_rows_per_file=5)
    assert staging(local_uri) == [f"{plan.job_id}/open"]
    kept = await plan.write(rows(100, 10))
    await plan.write(rows(100, 10))  # a speculative duplicate whose result Spark dropped
    assert len(data_files(local_uri)) == len(before) + 4
    await plan.commit([kept])
    after = data_files(local_uri)
    assert after == before | {f.files[0].path for f in kept.fragment_protos()}
    assert staging(local_uri) == []
    ids = (await (await alance.open_dataset(local_uri)).to_table())["id"].to_pylist()
    assert sorted(ids) == list(range(10)) + list(range(100, 110))


async def test_abort_finds_unreported_files_and_stops_late_tasks(local_uri: str) -> None:
    await alance.write_dataset(rows(0, 10), local_uri)
    before = data_files(local_uri)
    plan = await plan_write(local_uri, rows(0, 1).schema, "append")
    await plan.write(rows(100, 10))  # finished, but its message was lost with its executor
    await plan.abort([None, None])
    assert data_files(local_uri) == before and staging(local_uri) == []
    with pytest.raises(JobFinishedError):  # an attempt still running after the abort
        await plan.write(rows(200, 10))
    assert data_files(local_uri) == before and staging(local_uri) == []
    assert (await alance.open_dataset(local_uri)).version == 1


STORAGE_VERSIONS = pytest.mark.parametrize("version", ["legacy", None])  # None: 2.2


@STORAGE_VERSIONS
async def test_distributed_dml_one_commit(local_uri: str, version: str | None) -> None:
    from alance.dataset.distributed.dml import plan_delete

    await alance.write_dataset(rows(0, 5000), local_uri, max_rows_per_file=1000,
                               data_storage_version=version)
    plan = await plan_delete(local_uri, "id % 3 = 0 OR id >= 4000")
    plan = pickle.loads(pickle.dumps(plan))
    groups = plan.tasks(2)
    assert groups == [[0, 1], [2, 3], [4]]
    parts = [pickle.loads(pickle.dumps(await plan.run(g))) for g in groups]
    assert parts[2].removed == (4,) and not parts[2].updated  # fragment 4 wholly deleted
    result = await plan.commit(parts)
    expected = [i for i in range(5000) if i % 3 and i < 4000]
    assert result.num_deleted_rows == 5000 - len(expected) and result.dataset.version == 2
    ds = lance.dataset(local_uri)
    assert ds.version == 2 and sorted(ds.to_table()["id"].to_pylist()) == expected
    got = await (await alance.open_dataset(local_uri)).to_table(columns=["id"])
    assert sorted(got["id"].to_pylist()) == expected
    assert len(ds.get_fragments()) == 4


@STORAGE_VERSIONS
async def test_distributed_dml_merges_with_concurrent_delete_and_aborts(
        local_uri: str, version: str | None) -> None:
    from alance.dataset.distributed.dml import plan_delete

    await alance.write_dataset(rows(0, 100), local_uri, data_storage_version=version)
    plan = await plan_delete(local_uri, "id < 10")
    parts = [await plan.run(g) for g in plan.tasks()]
    await (await alance.open_dataset(local_uri)).delete("id >= 90")  # someone else, meanwhile
    await plan.commit(parts)
    ids = sorted((await (await alance.open_dataset(local_uri)).to_table())["id"].to_pylist())
    assert ids == list(range(10, 90))
    # abort removes the deletion files a job wrote
    plan = await plan_delete(local_uri, "id < 20")
    parts = [await plan.run(g) for g in plan.tasks()]
    deletions = set(os.listdir(Path(local_uri) / "_deletions"))
    await plan.abort(parts)
    assert len(set(os.listdir(Path(local_uri) / "_deletions"))) == len(deletions) - 1
    with pytest.raises(InvalidInputError):
        await plan.run([42])
    with pytest.raises(InvalidInputError):
        await plan_delete(local_uri, "no_such_column = 1")


def test_blocking_twins_from_threads(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import alance.sync as al

    uri = str(tmp_path / "ds.lance")
    plan = pickle.loads(pickle.dumps(al.plan_write(uri, rows(0, 1).schema, "create")))
    with ThreadPoolExecutor(4) as pool:
        parts = list(pool.map(lambda i: plan.write(rows(100 * i, 100)), range(4)))
    ds = plan.commit(parts)
    assert isinstance(ds, al.LanceDataset) and ds.version == 1 and ds.count_rows() == 400
    assert ds.data_storage_version == "2.2"
    deleter = pickle.loads(pickle.dumps(al.plan_delete(uri, "id >= 200")))
    result = deleter.commit([deleter.run(g) for g in deleter.tasks()])
    assert result.num_deleted_rows == 200 and result.dataset.count_rows() == 200
    aborted = al.plan_write(uri, rows(0, 1).schema)
    aborted.abort([aborted.write(rows(0, 5))])
    assert al.open_dataset(uri).version == 2


@STORAGE_VERSIONS
async def test_distributed_update_one_commit(local_uri: str, version: str | None) -> None:
    from alance.dataset.distributed.dml import plan_update

    await alance.write_dataset(rows(0, 3000), local_uri, max_rows_per_file=1000,
                               data_storage_version=version)
    plan = pickle.loads(pickle.dumps(await plan_update(local_uri, {"v": "v + 1", "s": "'x'"},
                                                       "id % 2 = 0 AND id < 2500")))
    parts = [pickle.loads(pickle.dumps(await plan.run(g))) for g in plan.tasks()]
    assert [p.num_updated_rows for p in parts] == [500, 500, 250]
    result = await plan.commit(parts)
    assert result.num_rows_updated == 1250 and result.dataset.version == 2
    got = lance.dataset(local_uri).to_table().sort_by("id")
    assert got.num_rows == 3000
    changed = [i for i in range(3000) if i % 2 == 0 and i < 2500]
    assert [got["v"][i].as_py() for i in changed[:3]] == [1, 5, 9]
    assert set(got.filter(pc.field("s") == "x")["id"].to_pylist()) == set(changed)
    assert got.filter(pc.field("id") == 1)["v"].to_pylist() == [2]
    mine = (await result.dataset.to_table()).sort_by("id")
    assert mine.equals(got)
    # abort removes new fragments and deletion files
    before = data_files(local_uri)
    plan = await plan_update(local_uri, {"v": 0})
    parts = [await plan.run(g) for g in plan.tasks()]
    assert len(data_files(local_uri)) > len(before)
    await plan.abort(parts)
    assert data_files(local_uri) == before
    with pytest.raises(InvalidInputError):
        await plan_update(local_uri, {"nope": 1})


@STORAGE_VERSIONS
async def test_distributed_compaction_one_rewrite(local_uri: str, version: str | None) -> None:
    from alance.dataset.distributed.compaction import plan_distributed_compaction
    from alance.dataset.maintenance.compaction_plan import CompactionOptions

    for i in range(6):
        await alance.write_dataset(rows(100 * i, 100), local_uri, data_storage_version=version,
                                   mode="create" if i == 0 else "append")
    expected = (await (await alance.open_dataset(local_uri)).to_table()).sort_by("id")
    plan = await plan_distributed_compaction(
        local_uri, CompactionOptions(target_rows_per_fragment=250))
    plan = pickle.loads(pickle.dumps(plan))
    assert plan.tasks()
    parts = [pickle.loads(pickle.dumps(await plan.run(i))) for i in plan.tasks()]
    with pytest.raises(InvalidInputError, match="missing"):
        await plan.commit(parts[:-1])
    ds = await plan.commit(parts)
    assert ds.version == 8  # reserve fragment ids, then one rewrite
    assert len(ds.get_fragments()) < 6
    assert (await ds.to_table()).sort_by("id").equals(expected)
    assert lance.dataset(local_uri).to_table().sort_by("id").equals(expected)
    # abort deletes the new files
    for i in range(2):
        await alance.write_dataset(rows(1000 + 10 * i, 10), local_uri, mode="append")
    before = data_files(local_uri)
    plan = await plan_distributed_compaction(local_uri)
    parts = [await plan.run(i) for i in plan.tasks()]
    assert len(data_files(local_uri)) > len(before)
    await plan.abort(parts)
    assert data_files(local_uri) == before


# -- failed distributed delete/update/compaction jobs leave nothing behind --------------------
def dataset_files(uri: str) -> set[str]:
    """Every file of the dataset apart from manifests and transaction files."""
    root = Path(uri)
    skip = ("_versions", "_transactions")
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in skip}


async def _break_last_fragment(uri: str) -> str:
    """Remove the data file of the last fragment (the task that reads it fails); its path."""
    ds = await alance.open_dataset(uri)
    path = f"data/{ds.fragment_protos()[-1].files[0].path}"
    os.remove(Path(uri) / path)
    return path


async def _plan_job(kind: str, uri: str):
    from alance.dataset.distributed.compaction import plan_distributed_compaction
    from alance.dataset.distributed.dml import plan_delete, plan_update
    from alance.dataset.maintenance.compaction_plan import CompactionOptions

    if kind == "delete":
        plan = await plan_delete(uri, "id % 3 = 0")
        return plan, plan.tasks()
    if kind == "update":
        plan = await plan_update(uri, {"v": "v + 1"}, "id % 3 = 0")
        return plan, plan.tasks()
    plan = await plan_distributed_compaction(uri, CompactionOptions(target_rows_per_fragment=500))
    return plan, plan.tasks()


async def _small_fragments(uri: str, version: str | None) -> None:
    for i in range(4):  # 4 fragments of 300 rows: compaction makes two groups of two
        await alance.write_dataset(rows(300 * i, 300), uri, data_storage_version=version,
                                   mode="create" if i == 0 else "append")


@STORAGE_VERSIONS
@pytest.mark.parametrize("kind", ["delete", "update", "compact"])
async def test_failed_job_leaves_no_files(local_uri: str, version: str | None, kind: str) -> None:
    await _small_fragments(local_uri, version)
    before = dataset_files(local_uri)
    plan, tasks = await _plan_job(kind, local_uri)
    assert len(tasks) >= 2
    broken = before - {await _break_last_fragment(local_uri)}
    for t in tasks[:-1]:
        await plan.run(t)  # finished, but their messages get lost with the job
    assert len(dataset_files(local_uri) - broken) > 2  # staging marker, files and records
    with pytest.raises(alance.NotFoundError):
        await plan.run(tasks[-1])  # the task reading the missing file fails mid-job
    await plan.abort([])  # the engine reports the job failed: nothing handed in
    assert dataset_files(local_uri) == broken  # finished tasks' files and records gone
    assert lance.dataset(local_uri).version == 4
    # a task still running after the job ended fails and removes what it wrote
    with pytest.raises(JobFinishedError):
        await plan.run(tasks[0])
    assert dataset_files(local_uri) == broken


@STORAGE_VERSIONS
@pytest.mark.parametrize("kind", ["delete", "update", "compact"])
async def test_commit_removes_dropped_attempts(local_uri: str, version: str | None,
                                               kind: str) -> None:
    await _small_fragments(local_uri, version)
    before = dataset_files(local_uri)
    plan, tasks = await _plan_job(kind, local_uri)
    parts = [await plan.run(t) for t in tasks]
    await plan.run(tasks[0])  # a speculative duplicate whose result the engine dropped
    result = await plan.commit(parts)
    ds = result if isinstance(result, alance.LanceDataset) else result.dataset
    assert ds.version == (6 if kind == "compact" else 5)  # compaction reserves ids first
    from alance.dataset.distributed.staging import referenced_files

    # the old files and those the new version references remain; no staging records
    assert dataset_files(local_uri) == before | referenced_files(ds.fragment_protos())
    assert lance.dataset(local_uri).to_table().sort_by("id").equals(
        (await ds.to_table()).sort_by("id"))


# -- the change data feed as tasks -------------------------------------------------------------
async def _history(uri: str) -> alance.LanceDataset:
    """Inserts, updates, deletes and appends on a table with stable row ids (2.2 files)."""
    ds = await alance.write_dataset(rows(0, 40), uri, enable_stable_row_ids=True,
                                    max_rows_per_file=15)                              # v1
    ds = await alance.write_dataset(rows(100, 20), uri, mode="append")                 # v2
    ds = (await ds.update({"s": "'u3'"}, where="id % 7 = 0")).dataset                  # v3
    ds = (await ds.delete("id < 16 OR id = 105")).dataset                              # v4
    ds = await alance.write_dataset(rows(200, 5), uri, mode="append")                  # v5
    ds = (await ds.update({"v": "v + 1"}, where="id >= 110 OR id = 30")).dataset       # v6
    return ds


def _change_rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


async def test_change_feed_tasks_cover_the_feed_for_every_pair(local_uri: str) -> None:
    from alance.dataset.distributed.changes import (
        ChangeTask,
        plan_change_tasks,
        scan_change_task,
    )

    ds = await _history(local_uri)
    assert ds.data_storage_version == "2.2" and ds.version == 6
    kinds_seen = set()
    for a in range(0, ds.version + 1):
        for b in range(max(a, 1), ds.version + 1):
            for cols in (None, ["s"]):
                feed = await ds.changes(a, b, columns=cols, batch_size=7)
                tasks = plan_change_tasks(pickle.loads(pickle.dumps(feed)))
                expected = await feed.to_table()
                batches = [batch for task in tasks
                           async for batch in scan_change_task(feed, task)]
                got = pa.Table.from_batches(batches, schema=feed.schema)
                assert got.schema == expected.schema
                assert _change_rows(got) == _change_rows(expected), (a, b, cols)
                assert len(tasks) == (0 if a == b else len(feed.end_ctx.snapshot.fragments) + (
                    len(feed.begin_ctx.snapshot.fragments) if a else 0))
                kinds_seen |= set(expected["_change_type"].to_pylist())
    assert kinds_seen == {"insert", "update", "delete"}
    feed = await ds.changes(1)
    for bad in (ChangeTask("upserts", 999), ChangeTask("deletes", 999), ChangeTask("x", 0)):
        with pytest.raises(InvalidInputError):
            [b async for b in scan_change_task(feed, bad)]


async def test_distributed_write_keeps_blob_sidecars(tmp_path) -> None:
    big = os.urandom(4 * 1024 * 1024 + 1)  # stored in a sidecar file of its own
    schema = pa.schema([pa.field("id", pa.int64()), lance.blob_field("b")])
    uri = str(tmp_path / "blobs.lance")

    def part(first: int) -> pa.Table:
        return pa.Table.from_arrays([pa.array([first, first + 1], pa.int64()),
                                     lance.blob_array([b"small", big])], schema=schema)

    plan = await plan_write(uri, schema, "create")
    parts = [await plan.write(part(0)), await plan.write(part(10))]
    await plan.commit(parts)
    theirs = lance.dataset(uri)
    assert theirs.count_rows() == 4
    got = theirs.take_blobs("b", indices=[0, 1, 2, 3])
    assert [b.readall() for b in got] == [b"small", big, b"small", big]


async def test_scans_are_the_same_with_decoding_kept_on_the_event_loop(local_uri: str) -> None:
    from alance.io.plans import offloading, set_offloading

    n = 200_000
    table = pa.table({"id": pa.array(range(n), pa.int64()),
                      "s": pa.array([f"v{i % 50}" for i in range(n)]),
                      "v": pa.array([i * 2 for i in range(n)], pa.int64())})
    await alance.write_dataset(table, local_uri, max_rows_per_file=80_000)
    ds = await alance.open_dataset(local_uri)
    groups = plan_read_groups(ds.fragment_protos(), 1 << 20, 2)

    async def scan(**kw: object) -> pa.Table:
        parts = []
        for group in groups:
            async for batch in scan_tasks(ds, group, **kw):  # type: ignore[arg-type]
                parts.append(batch)
        return pa.Table.from_batches(parts)

    assert offloading()
    full, filtered = await scan(), await scan(columns=["id", "s"], filter=pc.field("v") > 1000,
                                              filter_columns=["v"])
    set_offloading(False)
    try:
        assert not offloading()
        assert (await scan()).equals(full) and full.num_rows == n
        assert (await scan(columns=["id", "s"], filter=pc.field("v") > 1000,
                           filter_columns=["v"])).equals(filtered)
    finally:
        set_offloading(True)
    assert filtered.num_rows == n - 501
