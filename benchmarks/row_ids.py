"""Row id index build and ``take_rows`` of 1000 random ids: alance vs pylance.

A dataset with stable row ids, ``--rows`` rows in ``--fragments`` fragments (pylance writes
it), then an update of ~1% of the rows spread over the table (so the updated rows' ids live in
a new fragment, tombstoned in the old ones). Measured on a freshly opened dataset:

* index build: alance's :func:`alance.dataset.query.row_ids.row_id_index`; pylance has no separate
  call, so its first ``_take_rows`` (index build + take) is reported next to ours;
* take: 1000 random live row ids, column ``id``, after the index exists (median of 5).

Usage: ``.venv/bin/python benchmarks/row_ids.py [--rows 10000000] [--fragments 100]``
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

import alance
from alance.dataset.query.row_ids import row_id_index


def build(path: str, rows: int, fragments: int) -> None:
    per = rows // fragments
    table = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)),
                      "x": pa.array(np.arange(rows, dtype=np.float64))})
    lance.write_dataset(table, path, enable_stable_row_ids=True, max_rows_per_file=per,
                        data_storage_version="legacy")
    lance.dataset(path).update({"x": "x + 1"}, where="id % 97 = 0")


async def alance_side(path: str, ids: np.ndarray) -> dict[str, float]:
    ds = await alance.open_dataset(path)
    t0 = time.perf_counter()
    index = await row_id_index(ds._ctx)
    build_s = time.perf_counter() - t0
    first = time.perf_counter()
    got = await ds.take_rows(ids[0], columns=["id"])
    first_s = time.perf_counter() - first + build_s
    times = []
    for sample in ids[1:]:
        t0 = time.perf_counter()
        got = await ds.take_rows(sample, columns=["id"])
        times.append(time.perf_counter() - t0)
    assert got.num_rows == len(ids[-1])
    return {"index_build": build_s, "first_take": first_s, "take": statistics.median(times),
            "index_rows": len(index), "index_runs": index.num_runs}


def pylance_side(path: str, ids: np.ndarray) -> dict[str, float]:
    ds = lance.dataset(path)
    t0 = time.perf_counter()
    ds._take_rows(ids[0].tolist(), columns=["id"])
    first_s = time.perf_counter() - t0
    times = []
    for sample in ids[1:]:
        t0 = time.perf_counter()
        got = ds._take_rows(sample.tolist(), columns=["id"])
        times.append(time.perf_counter() - t0)
    assert got.num_rows == len(ids[-1])
    return {"first_take": first_s, "take": statistics.median(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--fragments", type=int, default=100)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="alance-rowids-"))
    path = str(root / "bench.lance")
    try:
        t0 = time.perf_counter()
        build(path, args.rows, args.fragments)
        print(f"dataset: {args.rows} rows, {args.fragments} fragments + update of ~1% "
              f"(built by pylance in {time.perf_counter() - t0:.1f} s)")
        live = lance.dataset(path).to_table(columns=["_rowid"])["_rowid"].to_numpy()
        rng = np.random.default_rng(0)
        ids = np.stack([rng.choice(live, 1000, replace=False) for _ in range(6)])
        mine = asyncio.run(alance_side(path, ids))
        theirs = pylance_side(path, ids)
        # both return the same rows
        a = asyncio.run(_check(path, ids[0]))
        b = lance.dataset(path)._take_rows(ids[0].tolist(), columns=["id"])
        assert a.equals(b)
        print(f"alance  index build            {mine['index_build'] * 1000:8.1f} ms "
              f"({mine['index_rows']} live rows in {mine['index_runs']} runs)")
        print(f"alance  first take (with build) {mine['first_take'] * 1000:8.1f} ms")
        print(f"pylance first take (with build) {theirs['first_take'] * 1000:8.1f} ms")
        print(f"alance  take_rows 1000 ids      {mine['take'] * 1000:8.1f} ms (median of 5)")
        print(f"pylance _take_rows 1000 ids     {theirs['take'] * 1000:8.1f} ms (median of 5)")
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


async def _check(path: str, ids: np.ndarray) -> pa.Table:
    ds = await alance.open_dataset(path)
    return await ds.take_rows(ids, columns=["id"])


if __name__ == "__main__":
    main()
