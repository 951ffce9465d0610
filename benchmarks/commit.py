"""Commit latency and throughput: conditional put vs DynamoDB, alance vs pylance.

    python benchmarks/commit.py [--writers 1 4 16] [--total 32] [--latency-ms 0]
                                [--engines alance pylance] [--handlers put ddb]

Setup: the ``moto_server`` command in a child process serves S3 and DynamoDB on one loopback
port; with ``--latency-ms`` every request goes through :mod:`benchmarks.latency_proxy` (another
child process) and waits that long first, like a remote endpoint. Each configuration gets a
fresh dataset (a 10-row legacy v0.2 dataset, then appends of 10 rows, the first one untimed to
leave out one-off setup such as client creation); all use one DynamoDB table in Lance's layout.

``writers`` append concurrently, ``total / writers`` appends each (at least one): alance writers
are tasks on one event loop, pylance writers are threads (pylance releases the GIL while it
works). An append is timed end to end (a small data file, the transaction file and the commit,
including rebasing over concurrent commits); the table shows commits/s over the wall time and
the median and 95th percentile append latency. Appends that give up (too many conflicts) are
counted as failed.

moto is a slow server (several ms of CPU per request, on the same two cores as the writers):
absolute numbers are moto's; the comparisons between rows are the point.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402
from benchmarks.latency_proxy import ProxyProcess  # noqa: E402
from tests.dynamodb_rig import DdbTarget, create_table  # noqa: E402
from tests.s3_servers import MotoServer, make_target  # noqa: E402


@dataclass
class Result:
    """One configuration's measurements."""

    engine: str
    handler: str
    writers: int
    latencies: list[float]
    failed: int
    wall: float
    #: Requests the timed appends made (through the proxy), by kind; ``None``: not counted.
    kinds: dict[str, int] | None = None

    def row(self) -> list[str]:
        lat = sorted(self.latencies)
        p50 = statistics.median(lat) * 1000 if lat else float("nan")
        p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))] * 1000 if lat else float("nan")
        per = ""
        if self.kinds is not None and lat:
            per = f"{sum(self.kinds.values()) / len(lat):.1f}"
        return [self.engine, self.handler, str(self.writers), str(len(lat)), str(self.failed),
                f"{self.wall:.2f}", f"{len(lat) / self.wall:.1f}", f"{p50:.0f}", f"{p95:.0f}",
                per]

    def breakdown(self) -> str:
        """Requests per commit by kind."""
        if not self.kinds or not self.latencies:
            return ""
        n = len(self.latencies)
        return ", ".join(f"{k} {v / n:.2f}" for k, v in sorted(self.kinds.items()))


def batch(start: int) -> pa.Table:
    """10 rows with ids from ``start``."""
    return pa.table({"id": pa.array(range(start, start + 10), pa.int64()),
                     "v": pa.array([float(i) for i in range(10)])})


def uri_for(target: DdbTarget, handler: str, name: str) -> str:
    return target.uri(name) if handler == "ddb" else target.s3_uri(name)


async def run_alance(uri: str, options: dict[str, str], writers: int, each: int,
                     mark: Callable[[], None]) -> Result:
    latencies: list[float] = []
    failed = 0

    # One untimed append first: the first use of a store or table costs setup (clients,
    # the DynamoDB table check) that is not what this measures.
    await alance.write_dataset(batch(999_000_000), uri, mode="append", storage_options=options)
    mark()

    async def writer(w: int) -> None:
        nonlocal failed
        for k in range(each):
            started = time.perf_counter()
            try:
                await alance.write_dataset(batch(1_000_000 * (w + 1) + 10 * k), uri,
                                           mode="append", storage_options=options,
                                           max_retries=200)
            except alance.CommitConflictError:
                failed += 1
                continue
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return Result("alance", "", writers, latencies, failed, time.perf_counter() - started)


def run_pylance(uri: str, options: dict[str, str], writers: int, each: int,
                mark: Callable[[], None]) -> Result:
    latencies: list[float] = []
    failed = 0
    lock = threading.Lock()

    def writer(w: int) -> None:
        nonlocal failed
        for k in range(each):
            started = time.perf_counter()
            try:
                lance.write_dataset(batch(1_000_000 * (w + 1) + 10 * k), uri, mode="append",
                                    storage_options=options)
            except Exception:  # pylance's "too many concurrent writers" and the like
                with lock:
                    failed += 1
                continue
            with lock:
                latencies.append(time.perf_counter() - started)

    lance.write_dataset(batch(999_000_000), uri, mode="append", storage_options=options)
    mark()
    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return Result("pylance", "", writers, latencies, failed, time.perf_counter() - started)


def bench(target: DdbTarget, engine: str, handler: str, writers: int, total: int,
          name: str, proxy: Any = None) -> Result:
    uri, options = uri_for(target, handler, name), target.storage_options
    lance.write_dataset(batch(0), uri, storage_options=options, data_storage_version="legacy")
    each = max(1, total // writers)

    def mark() -> None:  # the timed appends start: count their requests only
        if proxy is not None:
            proxy.reset()

    if engine == "alance":
        result = asyncio.run(run_alance(uri, options, writers, each, mark))
    else:
        result = run_pylance(uri, options, writers, each, mark)
    if proxy is not None:
        result.kinds = proxy.reset()["kinds"]
    result.handler = handler
    check = lance.dataset(uri, storage_options=options)
    expected = 2 + len(result.latencies)  # the create, the warm-up and the timed appends
    if check.version != expected or check.count_rows() != 10 * expected:
        raise AssertionError(f"{engine}/{handler}/{writers}: version {check.version}, "
                             f"{check.count_rows()} rows; expected {expected} versions")
    return result


def print_table(results: list[Result], latency_ms: float) -> None:
    head = ["engine", "commit", "writers", "commits", "failed", "wall s", "commits/s",
            "p50 ms", "p95 ms", "req/commit"]
    rows = [head] + [r.row() for r in results]
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    print(f"\nmoto, injected latency {latency_ms:g} ms per request")
    for i, r in enumerate(rows):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    counted = [r for r in results if r.kinds]
    if counted:
        print("\nrequests per commit by kind")
        for r in counted:
            print(f"  {r.engine:8} {r.handler:4} {r.writers:3}: {r.breakdown()}")


def main() -> None:
    """Command line entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--writers", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--total", type=int, default=32, help="appends per configuration")
    p.add_argument("--latency-ms", type=float, default=0.0)
    p.add_argument("--engines", nargs="+", default=["alance", "pylance"])
    p.add_argument("--handlers", nargs="+", default=["put", "ddb"])
    p.add_argument("--count-requests", action="store_true",
                   help="route requests through the proxy (even with no latency) and count "
                        "them per commit, by kind")
    args = p.parse_args()

    moto = MotoServer(mode="subprocess").start()
    proxy: Any = None
    try:
        s3 = moto.target()
        endpoint = moto.endpoint
        if args.latency_ms > 0 or args.count_requests:
            proxy = ProxyProcess(moto.endpoint.removeprefix("http://"), args.latency_ms)
            endpoint = proxy.endpoint
        table = create_table(moto.endpoint)
        target = DdbTarget(make_target("moto", endpoint, s3.bucket), table, endpoint)
        results = []
        for handler in args.handlers:
            for writers in args.writers:
                for engine in args.engines:
                    name = f"{engine}-{handler}-{writers}"
                    results.append(bench(target, engine, handler, writers, args.total, name,
                                         proxy))
                    print(" ".join(results[-1].row()), flush=True)
        print_table(results, args.latency_ms)
    finally:
        if proxy is not None:
            proxy.close()
        moto.stop()


if __name__ == "__main__":
    main()
