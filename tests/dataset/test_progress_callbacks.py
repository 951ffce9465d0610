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
                               max_rows_per_group=100,
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
