"""Selective filters (page pruning) and add_columns: alance vs pylance on 2M rows.

    python benchmarks/evolution.py [--rows 2000000] [--repeat 3] [--dir /tmp/alance-bench]

Data: ``sorted`` (int64, 0..n-1), ``random`` (int64, uniform), ``payload`` (float64), written
once per data storage version by pylance (legacy v0.2 files carry page statistics; 2.2 files
carry none), so both engines read the same files.

* Filters selecting 0.1% of the rows: a range on ``sorted`` and ``random < bound``. Reported:
  the best wall time of ``--repeat`` runs and the bytes read. Bytes are the process's
  ``rchar`` (bytes returned by read system calls, /proc/self/io), which counts both engines'
  local-file reads the same way; for alance the bytes fetched at its store are shown too.
* ``add_columns({"c": "sorted * 2 + random"})`` on a fresh copy of each dataset, once per
  engine (a commit each; best of ``--repeat`` copies).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402
from alance.io.store import DatasetStore  # noqa: E402

STORE_BYTES = [0]


def _count_store_reads() -> None:
    original = DatasetStore.get_ranges

    async def counting(self: DatasetStore, path: str, ranges: list[tuple[int, int]]) -> Any:
        out = await original(self, path, ranges)
        if path.startswith("data/"):
            STORE_BYTES[0] += sum(len(b) for b in out)
        return out

    DatasetStore.get_ranges = counting  # type: ignore[method-assign,assignment]


def rchar() -> int:
    """Bytes this process has received from read system calls so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def measure(fn: Callable[[], Any], repeat: int) -> tuple[float, int, int, Any]:
    """Best wall time, bytes read (rchar) and store bytes of the best run, and its result."""
    best = (float("inf"), 0, 0, None)
    for _ in range(repeat):
        STORE_BYTES[0] = 0
        before = rchar()
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
        if elapsed < best[0]:
            best = (elapsed, rchar() - before, STORE_BYTES[0], result)
    return best


def make_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    return pa.table({"sorted": np.arange(rows, dtype=np.int64),
                     "random": rng.integers(0, 1 << 40, rows),
                     "payload": rng.random(rows)})


def run(rows: int, repeat: int, root: Path) -> None:
    _count_store_reads()
    table = make_table(rows)
    width = rows // 1000
    lo = rows // 2
    filters = {"sorted 0.1%": f"sorted >= {lo} AND sorted < {lo + width}",
               "random 0.1%": f"random < {(1 << 40) // 1000}"}
    print(f"{rows:,} rows; best of {repeat}; MB = 10^6 bytes\n")
    print(f"{'storage':8} {'filter':12} {'engine':8} {'rows':>6} {'ms':>8} "
          f"{'MB read':>9} {'MB store':>9}")
    datasets = {}
    for storage in ("legacy", "2.2"):
        uri = root / f"bench_{storage}.lance"
        shutil.rmtree(uri, ignore_errors=True)
        lance.write_dataset(table, str(uri), data_storage_version=storage)
        datasets[storage] = uri
        theirs = lance.dataset(str(uri))
        for label, sql in filters.items():
            async def scan_alance(sql: str = sql, uri: Path = uri) -> pa.Table:
                ds = await alance.open_dataset(str(uri))
                return await ds.to_table(filter=sql)

            def scan_pylance(sql: str = sql, ds: Any = theirs) -> pa.Table:
                return ds.to_table(filter=sql)

            t_a, b_a, s_a, res_a = measure(lambda: asyncio.run(scan_alance()), repeat)
            t_p, b_p, _, res_p = measure(scan_pylance, repeat)
            assert res_a.num_rows == res_p.num_rows, (storage, label)
            for engine, t, b, s, n in (("alance", t_a, b_a, s_a, res_a.num_rows),
                                       ("pylance", t_p, b_p, None, res_p.num_rows)):
                store = f"{s / 1e6:9.2f}" if s is not None else f"{'-':>9}"
                print(f"{storage:8} {label:12} {engine:8} {n:6d} {t * 1e3:8.1f} "
                      f"{b / 1e6:9.2f} {store}")
    print()
    print(f"{'storage':8} {'add_columns c = sorted * 2 + random':38} {'ms':>8}")
    for storage, uri in datasets.items():
        def fresh(tag: str, uri: Path = uri) -> str:
            copy = root / f"copy_{tag}.lance"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(uri, copy)
            return str(copy)

        async def add_alance(path: str) -> None:
            ds = await alance.open_dataset(path)
            await ds.add_columns({"c": "sorted * 2 + random"})

        times = {"alance": float("inf"), "pylance": float("inf")}
        for _ in range(repeat):
            path = fresh("a")
            start = time.perf_counter()
            asyncio.run(add_alance(path))
            times["alance"] = min(times["alance"], time.perf_counter() - start)
            path = fresh("p")
            start = time.perf_counter()
            lance.dataset(path).add_columns({"c": "sorted * 2 + random"})
            times["pylance"] = min(times["pylance"], time.perf_counter() - start)
        check_a = lance.dataset(str(root / "copy_a.lance")).to_table(columns=["c"])
        check_p = lance.dataset(str(root / "copy_p.lance")).to_table(columns=["c"])
        assert check_a.equals(check_p)
        for engine, t in times.items():
            print(f"{storage:8} {engine:38} {t * 1e3:8.1f}")


def main() -> None:
    """Parse arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/alance-bench-evolution"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    run(args.rows, args.repeat, args.dir)


if __name__ == "__main__":
    main()
