"""Point reads on a big dataset, alance vs pylance: take by position and by stable row id.

    python benchmarks/point_reads.py [--rows 10000000] [--fragments 100]
                                     [--formats 2.0,2.1,2.2] [--repeat 5]

pylance writes ``--rows`` rows (int64 ``id``, ~35-character string ``s``,
``fixed_size_list<float32, 32>`` ``vec``) in ``--fragments`` fragments with stable row ids, once
per data storage version. Per version and engine, on a dataset opened once (warm metadata, as
a service would have it): median wall time of open, count_rows, take of 10 and 1000 random
positions, take_rows of 10 and 1000 random row ids; and for alance the bytes and ranges read
from data files per take. Results are compared before timing.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402
from alance.io import backends  # noqa: E402
from benchmarks.service import COLUMNS, make_table  # noqa: E402


class Counter:
    """Counts data-file ranges and bytes alance's backends are asked for (read on a thread,
    or at once from the page cache)."""

    def __init__(self) -> None:
        self.ranges = self.bytes = 0
        self.inside = False
        self._orig = backends.ObstoreBackend.get_ranges
        counter = self

        async def counted(self: Any, key: str, ranges: Any, coalesce: int) -> Any:
            if "/data/" in key:
                counter.ranges += len(ranges)
                counter.bytes += sum(e - s for s, e in ranges)
            counter.inside = True  # (its own cached read is not counted twice)
            try:
                return await counter._orig(self, key, ranges, coalesce)
            finally:
                counter.inside = False

        backends.ObstoreBackend.get_ranges = counted  # type: ignore[method-assign]
        cached = backends.ObstoreBackend.read_cached

        def counted_cached(self: Any, key: str, ranges: Any) -> Any:
            got = cached(self, key, ranges)
            if got is not None and "/data/" in key and not counter.inside:
                counter.ranges += len(ranges)
                counter.bytes += sum(e - s for s, e in ranges)
            return got

        backends.ObstoreBackend.read_cached = counted_cached  # type: ignore[method-assign]
        local = backends.ObstoreBackend.read_local

        async def counted_local(self: Any, key: str, starts: Any, ends: Any, **kw: Any) -> Any:
            # (local files: ranges, or coalesced pieces, read straight into their place)
            if "/data/" in key:
                counter.ranges += len(starts)
                counter.bytes += sum(ends) - sum(starts)
            return await local(self, key, starts, ends, **kw)

        backends.ObstoreBackend.read_local = counted_local  # type: ignore[method-assign]

    def reset(self) -> tuple[int, int]:
        out = (self.ranges, self.bytes)
        self.ranges = self.bytes = 0
        return out


def median_ms(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


async def amedian_ms(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    await fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


async def bench(uri: str, rows: int, repeat: int, counter: Counter) -> None:
    py = lance.dataset(uri)
    al = await alance.open_dataset(uri)
    rng = np.random.default_rng(5)
    ids = py.to_table(columns=[], with_row_id=True)["_rowid"].to_numpy()
    picks = {k: np.sort(rng.choice(rows, k, replace=False)) for k in (10, 1000)}
    id_picks = {k: np.sort(rng.choice(ids, k, replace=False)) for k in (10, 1000)}
    for k in (10, 1000):
        if not py.take(picks[k], columns=COLUMNS).equals(
                (await al.take(picks[k], columns=COLUMNS)).cast(py.schema)):
            raise SystemExit("take: engines disagree")
        theirs = py._take_rows(id_picks[k], columns=COLUMNS)
        ours = await al.take_rows(id_picks[k], columns=COLUMNS)
        if not theirs.equals(ours.cast(theirs.schema)):
            raise SystemExit("take_rows: engines disagree")
    ops: list[tuple[str, Callable[[], Any], Callable[[], Awaitable[Any]]]] = [
        ("open", lambda: lance.dataset(uri), lambda: alance.open_dataset(uri)),
        ("count_rows", py.count_rows, al.count_rows),
    ]
    for k in (10, 1000):
        ops.append((f"take {k}", lambda k=k: py.take(picks[k], columns=COLUMNS),
                    lambda k=k: al.take(picks[k], columns=COLUMNS)))
        ops.append((f"take_rows {k} by id",
                     lambda k=k: py._take_rows(id_picks[k], columns=COLUMNS),
                     lambda k=k: al.take_rows(id_picks[k], columns=COLUMNS)))
    print(f"  {'operation':<22} {'pylance ms':>10} {'alance ms':>10} {'ratio':>6} "
          f"{'ranges':>7} {'KiB read':>9}")
    for name, py_fn, al_fn in ops:
        tp = median_ms(py_fn, repeat)
        counter.reset()
        ta = await amedian_ms(al_fn, repeat)
        n_ranges, n_bytes = counter.reset()
        calls = repeat + 1
        print(f"  {name:<22} {tp:>10.2f} {ta:>10.2f} {ta / tp:>6.2f} "
              f"{n_ranges / calls:>7.0f} {n_bytes / calls / 1024:>9.0f}", flush=True)


async def run(args: argparse.Namespace) -> None:
    counter = Counter()
    with tempfile.TemporaryDirectory(prefix="alance-points-") as tmp:
        per_file = -(-args.rows // args.fragments)
        for fmt in args.formats.split(","):
            uri = str(Path(tmp) / f"{fmt}.lance")
            t0 = time.perf_counter()
            step = 1_000_000
            for start in range(0, args.rows, step):
                part = make_table(min(step, args.rows - start), seed=start)
                part = part.set_column(0, "id", pa.array(np.arange(start, start + len(part))))
                lance.write_dataset(part, uri, mode="append" if start else "create",
                                    data_storage_version=fmt, max_rows_per_file=per_file,
                                    enable_stable_row_ids=True)
            frags = len(lance.dataset(uri).get_fragments())
            print(f"\n{fmt}: {args.rows:,} rows, {frags} fragments "
                  f"(written in {time.perf_counter() - t0:.0f} s)")
            await bench(uri, args.rows, args.repeat, counter)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--fragments", type=int, default=100)
    p.add_argument("--formats", default="2.0,2.1,2.2")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
