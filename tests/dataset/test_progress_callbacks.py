"""``progress`` callbacks of writes and cleanup: what they report matches what was done."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

import alance


async def test_write_progress_rows(tmp_path: Path) -> None:
    table = pa.table({"id": range(10_000)})
    seen: list[tuple[int, int | None]] = []
    await alance.write_dataset(table, str(tmp_path / "a"), max_rows_per_file=3000,
                               max_rows_per_group=20,
                               progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (10_000, 10_000)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and len(seen) > 1

    streamed: list[tuple[int, int | None]] = []

    def batches():  # a stream: no total known in advance
        for start in range(0, 5000, 1000):
            yield pa.record_batch({"id": pa.array(range(start, start + 1000), pa.int64())})

    await alance.write_dataset(batches(), str(tmp_path / "a"), mode="append",
                               schema=table.schema,
                               progress=lambda done, total: streamed.append((done, total)))
    assert streamed[-1] == (5000, None)


async def test_cleanup_progress_counts_files(tmp_path: Path) -> None:
    uri = str(tmp_path / "c")
    ds = await alance.write_dataset(pa.table({"id": range(10)}), uri)
    for _ in range(3):
        ds = await alance.write_dataset(pa.table({"id": range(10)}), uri, mode="overwrite")
    seen: list[tuple[int, int]] = []
    stats = await ds.cleanup_old_versions(older_than=dt.timedelta(0),
                                          progress=lambda d, t: seen.append((d, t)))
    total = len(stats.removed_paths)
    assert total > 3 and seen[0] == (0, total) and seen[-1] == (total, total)
    assert len(seen) == total + 1


def _rows(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids, "v": ids})


def _rising_to(seen: list[tuple[int, int | None]], total: int) -> None:
    """Reports never go back and end at ``total`` of ``total``."""
    assert seen and seen[-1] == (total, total), seen
    done = [d for d, _ in seen]
    assert done == sorted(done) and {t for _, t in seen} == {total}


async def test_distributed_write_progress(tmp_path: Path) -> None:
    from alance.dataset.distributed.write import plan_write

    uri = str(tmp_path / "w")
    plan = await plan_write(uri, _rows(0, 1).schema, "create", max_rows_per_file=300)
    seen: list[tuple[int, int | None]] = []
    part = await plan.write(_rows(0, 1000), progress=lambda d, t: seen.append((d, t)))
    _rising_to(seen, 1000)
    streamed: list[tuple[int, int | None]] = []
    batches = iter(_rows(1000, 500).to_batches(max_chunksize=100))
    other = await plan.write(batches, progress=lambda d, t: streamed.append((d, t)))
    assert streamed[-1] == (500, None)  # a stream: no total known in advance
    ds = await plan.commit([part, other])
    assert await ds.count_rows() == 1500


async def test_distributed_dml_and_compaction_progress(tmp_path: Path) -> None:
    from alance.dataset.distributed.compaction import plan_distributed_compaction
    from alance.dataset.distributed.dml import plan_delete, plan_update

    uri = str(tmp_path / "d")
    for i in range(4):
        await alance.write_dataset(_rows(300 * i, 300), uri, mode="create" if i == 0 else "append")
    delete = await plan_delete(uri, "id % 10 = 0")
    seen: list[tuple[int, int | None]] = []
    parts = [await delete.run(g, progress=lambda d, t: seen.append((d, t)))
             for g in delete.tasks(3)]
    assert seen == [(0, 900), (300, 900), (600, 900), (900, 900), (0, 300), (300, 300)]
    assert (await delete.commit(parts)).num_deleted_rows == 120

    update = await plan_update(uri, {"v": "v * 2"}, "id < 450")
    seen = []
    parts = [await update.run(update.tasks(4)[0], progress=lambda d, t: seen.append((d, t)))]
    _rising_to(seen, 1200)
    assert len(seen) == 5  # the start, then each of the 4 fragments
    result = await update.commit(parts)
    assert result.num_rows_updated == 450 - 45

    compaction = await plan_distributed_compaction(uri)
    seen = []
    parts = [await compaction.run(i, progress=lambda d, t: seen.append((d, t)))
             for i in compaction.tasks()]
    assert seen[0][0] == 0 and seen[-1][0] == seen[-1][1] and len(seen) > 1
    assert (await compaction.commit(parts)).version > result.dataset.version


def test_distributed_progress_through_the_blocking_facade(tmp_path: Path) -> None:
    from alance import sync as al

    uri = str(tmp_path / "s")
    al.write_dataset(_rows(0, 600), uri, max_rows_per_file=200)
    plan = al.plan_delete(uri, "id < 100")
    seen: list[tuple[int, int]] = []
    parts = [plan.run(g, progress=lambda d, t: seen.append((d, t))) for g in plan.tasks(3)]
    assert seen == [(0, 600), (200, 600), (400, 600), (600, 600)]
    assert plan.commit(parts).num_deleted_rows == 100
