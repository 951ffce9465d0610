"""BatchedInserter: concurrent inserts share commits, each caller's rows stay its own, and
what pylance reads afterwards is exactly what was inserted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance


def _rows(start: int, n: int = 3) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "name": [f"row {i}" for i in range(start, start + n)]})


async def _dataset(tmp_path: Path) -> alance.LanceDataset:
    return await alance.write_dataset(_rows(0, 10), str(tmp_path / "ds"))


async def test_concurrent_inserts_share_commits_and_keep_every_row(tmp_path: Path) -> None:
    ds = await _dataset(tmp_path)
    inserter = alance.BatchedInserter(ds)
    versions = await asyncio.gather(*(inserter.insert(_rows(100 + 10 * i)) for i in range(40)))
    # Every caller got a version that holds its rows; they share far fewer commits than 40.
    distinct = {v.version for v in versions}
    assert len(distinct) < 40
    for i, version in enumerate(versions):
        got = await version.to_table(filter=f"id >= {100 + 10 * i} AND id < {103 + 10 * i}")
        assert sorted(got.column("id").to_pylist()) == [100 + 10 * i + k for k in range(3)]
    newest = inserter.dataset
    assert newest.version == max(distinct)
    want = sorted(list(range(10)) + [100 + 10 * i + k for i in range(40) for k in range(3)])
    assert sorted((await newest.to_table()).column("id").to_pylist()) == want
    theirs = lance.dataset(str(tmp_path / "ds"))
    assert sorted(theirs.to_table().column("id").to_pylist()) == want
    assert theirs.version == newest.version


async def test_one_callers_bad_rows_fail_that_caller_only(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    ds = await alance.write_dataset(pa.table({"id": [1]}, schema=schema), str(tmp_path / "ds"))
    inserter = alance.BatchedInserter(ds)
    good = [pa.table({"id": [10 + i]}, schema=schema) for i in range(5)]
    # Same Arrow schema as the good ones, but a null the dataset's column does not allow.
    bad = pa.table({"id": [None, 98]}, schema=schema)
    results = await asyncio.gather(*(inserter.insert(t) for t in [*good[:2], bad, *good[2:]]),
                                   return_exceptions=True)
    assert isinstance(results[2], alance.InvalidInputError), results[2]
    assert all(isinstance(r, alance.LanceDataset) for i, r in enumerate(results) if i != 2), \
        results
    ids = sorted((await inserter.dataset.to_table()).column("id").to_pylist())
    assert ids == [1, 10, 11, 12, 13, 14]


async def test_inserts_of_different_schemas_go_to_different_commits(tmp_path: Path) -> None:
    ds = await _dataset(tmp_path)
    inserter = alance.BatchedInserter(ds)
    only_ids = pa.table({"id": pa.array([500], pa.int64())})  # 'name' is nullable: left out
    results = await asyncio.gather(inserter.insert(_rows(200)), inserter.insert(only_ids),
                                   inserter.insert(_rows(300)))
    assert all(isinstance(r, alance.LanceDataset) for r in results)
    table = await inserter.dataset.to_table(filter="id >= 200")
    assert sorted(table.column("id").to_pylist()) == [200, 201, 202, 300, 301, 302, 500]
    assert table.filter(pa.compute.equal(table["id"], 500))["name"].to_pylist() == [None]


async def test_a_cancelled_waiting_insert_writes_nothing(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ds = await _dataset(tmp_path)
    inserter = alance.BatchedInserter(ds)
    # Hold the first commit until the second insert is cancelled: a local commit never has
    # to wait for its store, so without this it would be over before the second arrived.
    committing, release = asyncio.Event(), asyncio.Event()
    real_commit = alance.ConditionalPutCommitHandler.commit

    async def held(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        committing.set()
        await release.wait()
        return await real_commit(self, *args, **kwargs)

    monkeypatch.setattr(alance.ConditionalPutCommitHandler, "commit", held)
    first = asyncio.ensure_future(inserter.insert(_rows(100)))
    await committing.wait()  # the first is committing
    second = asyncio.ensure_future(inserter.insert(_rows(200)))
    await asyncio.sleep(0)
    assert not second.done()  # waiting for the first commit
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    release.set()
    await first
    ids = (await (await inserter.dataset.checkout_latest()).to_table()).column("id").to_pylist()
    assert sorted(ids) == [*range(10), 100, 101, 102]


async def test_auto_compaction_and_bad_arguments(tmp_path: Path) -> None:
    ds = await _dataset(tmp_path)
    inserter = alance.BatchedInserter(ds, compact_after=4)
    for i in range(12):
        await inserter.insert(_rows(1000 + 10 * i, 1))
    assert len(inserter.dataset.get_fragments()) < 6
    assert await inserter.dataset.count_rows() == 22
    with pytest.raises(alance.InvalidInputError):
        alance.BatchedInserter(ds, max_batch_rows=0)
    with pytest.raises(alance.InvalidInputError):
        alance.BatchedInserter("not a dataset")  # type: ignore[arg-type]
    with pytest.raises(alance.InvalidInputError):
        await inserter.insert(pa.table({"unknown": [1]}))


def test_blocking_inserts_from_threads_share_commits(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from alance import sync as al

    ds = al.write_dataset(_rows(0, 10), str(tmp_path / "ds"))
    inserter = al.BatchedInserter(ds)
    with ThreadPoolExecutor(16) as pool:
        versions = list(pool.map(lambda i: inserter.insert(_rows(100 + 10 * i)), range(48)))
    assert all(isinstance(v, al.LanceDataset) for v in versions)
    assert len({v.version for v in versions}) < 48
    assert isinstance(inserter.dataset, al.LanceDataset)
    want = sorted(list(range(10)) + [100 + 10 * i + k for i in range(48) for k in range(3)])
    assert sorted(inserter.dataset.to_table().column("id").to_pylist()) == want
