"""An async service's view: point reads from one event loop, alance vs pylance in a thread pool.

    python benchmarks/service.py [--rows 400000] [--formats 2.0,2.1,2.2] [--concurrency 32]
                                 [--requests 1500] [--k 10] [--s3] [--latency-ms 20]

pylance writes a dataset of ``--rows`` rows (int64 ``id``, a ~35-character string ``s``,
``fixed_size_list<float32, 32>`` ``vec``) in each data storage version of ``--formats``, on
local disk (and with ``--s3`` also on a local SeaweedFS server, read through
:mod:`benchmarks.latency_proxy` adding ``--latency-ms`` per request). Both engines read the same
bytes. Per dataset and engine:

* **one at a time**: median latency of ``take(k random rows)``, of a 1-row filter
  (``id = N``), of a ``limit 10`` scan, of ``count_rows()`` and of ``open``;
* **concurrent**: ``--concurrency`` clients on one event loop, each issuing takes of ``k``
  random rows back to back until ``--requests`` are done. alance is awaited natively; pylance
  runs in a ``ThreadPoolExecutor`` of ``--concurrency`` threads via ``run_in_executor`` (how an
  async service uses it). Reported: requests/s, p50 and p99 latency;
* **event-loop lag**: a heartbeat coroutine sleeps 5 ms in a loop during the concurrent phase
  and records how late each wake-up is (p99 and max). Any call that holds the loop shows up
  here.

Results are compared between the engines before anything is timed (a benchmark must never
time a wrong answer). Figures on a shared machine move by tens of percent: compare the ratios
printed side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402

COLUMNS = ["id", "s", "vec"]
HEARTBEAT = 0.005


def make_table(rows: int, seed: int = 3) -> pa.Table:
    """id (int64), s (~35 characters), vec (fixed_size_list<float32, 32>)."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    width = 35
    digits = rng.integers(0, 10, (rows, width), dtype=np.uint8) + ord("0")
    digits[:, :5] = np.frombuffer(b"user-", dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), rows,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(digits.tobytes())])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32)
    return pa.table({"id": ids, "s": strings, "vec": vec})


class Heartbeat:
    """Measures how late a 5 ms sleep wakes up on the running loop (event-loop lag)."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(HEARTBEAT)
            self.lags.append(max(0.0, loop.time() - t0 - HEARTBEAT))

    def __enter__(self) -> Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def one_at_a_time(fn: Callable[[], Awaitable[Any]], n: int) -> float:
    """Median latency of ``n`` awaited calls, one after another (after 3 warm-up calls)."""
    for _ in range(3):
        await fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def concurrent(make_call: Callable[[np.ndarray], Awaitable[Any]], indices: list[np.ndarray],
                     clients: int) -> dict[str, float]:
    """``clients`` coroutines issue the calls back to back; throughput, latencies, loop lag."""
    queue = iter(indices)
    latencies: list[float] = []

    async def client() -> None:
        for idx in queue:
            t0 = time.perf_counter()
            await make_call(idx)
            latencies.append(time.perf_counter() - t0)

    with Heartbeat() as beat:
        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - t0
    return {"rps": len(indices) / wall, "p50": pct(latencies, 0.5), "p99": pct(latencies, 0.99),
            "lag_p99": pct(beat.lags, 0.99), "lag_max": max(beat.lags, default=0.0)}


def same(theirs: pa.Table, ours: pa.Table, what: str) -> None:
    """Equal values (schema types compared as pylance returns them)."""
    if not theirs.equals(ours.cast(theirs.schema)):
        raise SystemExit(f"{what}: alance and pylance disagree; not reporting timings")


async def bench_dataset(name: str, uri: str, options: dict[str, str] | None, rows: int,
                        args: argparse.Namespace, pool: ThreadPoolExecutor) -> None:
    loop = asyncio.get_running_loop()
    rng = np.random.default_rng(11)
    py = lance.dataset(uri, storage_options=options)
    al = await alance.open_dataset(uri, storage_options=options)

    def pick() -> np.ndarray:
        return np.sort(rng.choice(rows, args.k, replace=False))

    # correctness first
    for _ in range(5):
        idx = pick()
        same(py.take(idx, columns=COLUMNS), await al.take(idx, columns=COLUMNS), f"{name} take")
    key = int(rng.integers(rows))
    same(py.to_table(columns=COLUMNS, filter=f"id = {key}"),
         await al.to_table(columns=COLUMNS, filter=f"id = {key}"), f"{name} filter")
    if py.count_rows() != await al.count_rows():
        raise SystemExit(f"{name}: count_rows differs")

    n = args.serial
    ops: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]]]] = [
        (f"take {args.k}",
         lambda: loop.run_in_executor(pool, lambda: py.take(pick(), columns=COLUMNS)),
         lambda: al.take(pick(), columns=COLUMNS)),
        ("filter id = N",
         lambda: loop.run_in_executor(
             pool, lambda: py.to_table(columns=COLUMNS,
                                       filter=f"id = {int(rng.integers(rows))}")),
         lambda: al.to_table(columns=COLUMNS, filter=f"id = {int(rng.integers(rows))}")),
        ("limit 10",
         lambda: loop.run_in_executor(pool, lambda: py.to_table(columns=COLUMNS, limit=10)),
         lambda: al.to_table(columns=COLUMNS, limit=10)),
        ("count_rows",
         lambda: loop.run_in_executor(pool, py.count_rows),
         lambda: al.count_rows()),
        ("open",
         lambda: loop.run_in_executor(pool, lambda: lance.dataset(uri, storage_options=options)),
         lambda: alance.open_dataset(uri, storage_options=options)),
    ]
    print(f"\n{name}: one at a time (median of {n}, ms)")
    print(f"  {'operation':<16} {'pylance':>9} {'alance':>9} {'ratio':>7}")
    for op, py_fn, al_fn in ops:
        tp = await one_at_a_time(py_fn, n)
        ta = await one_at_a_time(al_fn, n)
        print(f"  {op:<16} {tp * 1e3:>9.2f} {ta * 1e3:>9.2f} {ta / tp:>7.2f}", flush=True)

    if args.gc_freeze:
        # What a service does once started: objects alive now (modules, datasets, caches)
        # leave the collector's view, so full collections do not stall the loop scanning them.
        gc.collect()
        gc.freeze()
    work = [pick() for _ in range(args.requests)]
    print(f"{name}: {args.concurrency} concurrent clients, {args.requests} takes of {args.k}")
    res_py = await concurrent(
        lambda idx: loop.run_in_executor(pool, lambda: py.take(idx, columns=COLUMNS)),
        work, args.concurrency)
    res_al = await concurrent(lambda idx: al.take(idx, columns=COLUMNS), work, args.concurrency)
    print(f"  {'engine':<22} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'lag p99':>8} "
          f"{'lag max':>8}")
    for engine, r in (("pylance (32 threads)", res_py), ("alance (event loop)", res_al)):
        print(f"  {engine:<22} {r['rps']:>8.0f} {r['p50'] * 1e3:>8.2f} {r['p99'] * 1e3:>8.2f} "
              f"{r['lag_p99'] * 1e3:>8.2f} {r['lag_max'] * 1e3:>8.2f}")
    print(f"  alance / pylance throughput: {res_al['rps'] / res_py['rps']:.2f}", flush=True)


async def run(args: argparse.Namespace) -> None:
    table = make_table(args.rows)
    pool = ThreadPoolExecutor(args.concurrency)
    with tempfile.TemporaryDirectory(prefix="alance-service-") as tmp:
        targets: list[tuple[str, str, dict[str, str] | None]] = []
        for fmt in args.formats.split(","):
            uri = str(Path(tmp) / f"local-{fmt}.lance")
            lance.write_dataset(table, uri, data_storage_version=fmt)
            targets.append((f"local {fmt}", uri, None))
        if not args.s3:
            for name, uri, opts in targets:
                await bench_dataset(name, uri, opts, args.rows, args, pool)
            return
        from benchmarks.latency_proxy import ProxyProcess
        from tests.s3_servers import SeaweedServer

        weed = SeaweedServer(Path(tmp) / "weed").start(("bench",))
        try:
            target = weed.target("bench")
            s3_targets = []
            for fmt in args.formats.split(","):
                uri = target.uri(f"svc-{fmt}.lance")
                lance.write_dataset(table, uri, data_storage_version=fmt,
                                    storage_options=target.storage_options)
                s3_targets.append((fmt, uri))
            upstream = target.endpoint.removeprefix("http://")
            with ProxyProcess(upstream, args.latency_ms) as proxy:
                opts = {**target.storage_options, "aws_endpoint": proxy.endpoint}
                for name, uri, o in targets:
                    await bench_dataset(name, uri, o, args.rows, args, pool)
                for fmt, uri in s3_targets:
                    await bench_dataset(f"S3 +{args.latency_ms:g} ms {fmt}", uri, opts,
                                        args.rows, args, pool)
        finally:
            weed.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--formats", default="2.0,2.1,2.2")
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--requests", type=int, default=3000)
    p.add_argument("--serial", type=int, default=50, help="calls per one-at-a-time figure")
    p.add_argument("--k", type=int, default=10, help="rows per take")
    p.add_argument("--s3", action="store_true", help="also over SeaweedFS via the latency proxy")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--no-gc-freeze", dest="gc_freeze", action="store_false",
                   help="leave every object to the collector (full collections then stall "
                        "the event loop for tens of milliseconds)")
    args = p.parse_args()
    print(f"pylance {lance.__version__}; {args.rows:,} rows; columns {COLUMNS}")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
