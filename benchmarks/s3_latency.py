"""alance vs pylance on S3 with a fixed per-request latency: full scan and a 1000-row take.

    python benchmarks/s3_latency.py [--rows 2000000] [--latency-ms 20] [--repeat 3]
                                    [--server seaweedfs|moto] [--take 1000] [--format 2.1]
                                    [--alance-option coalesce_bytes=1048576 ...]

Setup: a local S3 server in a child process (SeaweedFS ``weed mini`` by default, or the
``moto_server`` command) and, in front of it, :mod:`benchmarks.latency_proxy` in another child
process, which holds every HTTP request for ``--latency-ms`` (and every new connection for the
same time, one handshake round trip) and counts requests and bytes. pylance writes a legacy
(v0.2; ``--format`` for 2.x) dataset of ``--rows`` rows (~107 bytes a row: ~214 MB by default)
straight to the server;
then both engines read it *through the proxy*, each run on a freshly opened dataset (no warm
metadata caches).

Reported per engine and operation: wall time (median of ``--repeat``, after one untimed run
whose time is shown apart: an engine's first read in a process also grows its memory pool),
the CPU time of the benchmark's process over it (the server and the proxy run in processes of
their own on the same machine and use CPU too), HTTP requests, bytes received (response
headers included), connections opened and the most requests that waited for a first response
byte at once (the concurrency a client really achieves); then the ratios alance / pylance.
Results of the two engines are compared before anything is reported.

The single-stream bandwidth is one GET of the largest data file through the proxy. The scan's
"ideal" time is ``bytes / bandwidth + 3 round trips`` (list + manifest, file footers, data);
the issue's target is a scan within 2x of it, and alance at least as fast as pylance.

moto is a weak server for this: it copies the whole object for every range GET (tens of ms on
a 100 MB object, serialised by its GIL) and closes the connection after every response, so
SeaweedFS is the default.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import numpy as np
import obstore
import pyarrow as pa
from obstore.store import S3Store

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from alance import sync as al  # noqa: E402
from benchmarks.compare_pylance import make_table  # noqa: E402
from benchmarks.latency_proxy import ProxyProcess  # noqa: E402
from tests.s3_servers import MotoServer, S3Target, SeaweedServer  # noqa: E402

BUCKET = "bench"


def start_server(kind: str, tmp: str) -> tuple[Any, S3Target]:
    """A local S3 server in a child process, with bucket ``bench``."""
    if kind == "moto":
        moto = MotoServer(mode="subprocess").start()
        return moto, moto.target(BUCKET)
    weed = SeaweedServer(Path(tmp) / "weed").start((BUCKET,))
    return weed, weed.target(BUCKET)


def via(target: S3Target, endpoint: str) -> dict[str, str]:
    """The target's storage options, pointed at another endpoint (the proxy)."""
    return {**target.storage_options, "aws_endpoint": endpoint}


def measure_bandwidth(target: S3Target, proxy: ProxyProcess, key: str, latency: float,
                      ) -> tuple[float, int]:
    """Bytes per second of one GET of ``key`` through the proxy (best of 3), and its size."""
    store = S3Store(BUCKET, endpoint=proxy.endpoint, region=target.region,
                    access_key_id=target.access_key_id,
                    secret_access_key=target.secret_access_key,
                    client_options={"allow_http": True})
    best = float("inf")
    size = 0
    for _ in range(3):
        start = time.perf_counter()
        size = len(obstore.get(store, key).bytes())
        best = min(best, time.perf_counter() - start)
    # The proxy added one request round trip (the connection is reused after the first run).
    return size / max(best - latency, 1e-6), size


def run(proxy: ProxyProcess, repeat: int, opener: Callable[[], Any],
        op: Callable[[Any], Any],
        ) -> tuple[float, dict[str, Any], Any, dict[str, Any], float, float]:
    """Median wall time of ``op`` on a freshly opened dataset, with proxy counters; the time
    of a first, untimed run (an engine's first read in the process also pays for growing its
    memory pool and starting its threads: reported apart); and the median CPU time of this
    process over ``op`` (all its threads: the engine's own and its HTTP client's)."""
    times: list[float] = []
    cpus: list[float] = []
    stats: dict[str, Any] = {}
    open_stats: dict[str, Any] = {}
    result = None
    ds = opener()
    start = time.perf_counter()
    op(ds)
    first = time.perf_counter() - start
    for _ in range(repeat):
        proxy.reset()
        ds = opener()
        open_stats = proxy.reset()
        start, cpu = time.perf_counter(), time.process_time()
        result = op(ds)
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
        stats = proxy.reset()
    return statistics.median(times), stats, result, open_stats, first, statistics.median(cpus)


def fmt_bytes(n: float) -> str:
    """Human-readable size."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    raise AssertionError


def main() -> None:
    """Run the benchmark and print the tables."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--take", type=int, default=1000, help="rows to take at random")
    p.add_argument("--server", choices=("seaweedfs", "moto"), default="seaweedfs")
    p.add_argument("--format", default="legacy",
                   help="data storage version pylance writes: legacy, 2.0, 2.1, 2.2")
    p.add_argument("--alance-option", action="append", default=[], metavar="KEY=VALUE",
                   help="extra storage option for alance only, e.g. coalesce_bytes=1048576")
    args = p.parse_args()
    latency = args.latency_ms / 1000

    with tempfile.TemporaryDirectory(prefix="alance-s3lat-") as tmp:
        server, target = start_server(args.server, tmp)
        try:
            table = make_table(args.rows)
            uri = target.uri("bench.lance")
            start = time.perf_counter()
            lance.write_dataset(table, uri, data_storage_version=args.format,
                                storage_options=target.storage_options)
            print(f"server {args.server}; pylance wrote {args.rows:,} rows "
                  f"({fmt_bytes(table.nbytes)} in Arrow) in {time.perf_counter() - start:.1f}s")
            client = target.client()
            objects = client.list_objects_v2(Bucket=BUCKET, Prefix="bench.lance/data/")
            files = sorted(objects["Contents"], key=lambda o: -o["Size"])
            data_bytes = sum(o["Size"] for o in files)
            print(f"{len(files)} data files, {fmt_bytes(data_bytes)}")

            upstream = target.endpoint.removeprefix("http://")
            with ProxyProcess(upstream, args.latency_ms) as proxy:
                bandwidth, big = measure_bandwidth(target, proxy, files[0]["Key"], latency)
                print(f"single-stream GET through the proxy: {fmt_bytes(big)} at "
                      f"{bandwidth / 2**20:.0f} MB/s; latency {args.latency_ms:g} ms/request")
                report(args, proxy, target, uri, table, bandwidth, latency)
        finally:
            server.stop()


def report(args: argparse.Namespace, proxy: ProxyProcess, target: S3Target, uri: str,
           table: pa.Table, bandwidth: float, latency: float) -> None:
    """Time both engines through the proxy and print the comparison."""
    if args.alance_option:
        print(f"alance storage options: {', '.join(args.alance_option)}")
    options = via(target, proxy.endpoint)
    alance_options = {**options, **dict(o.split("=", 1) for o in args.alance_option)}
    idx = np.random.default_rng(7).choice(table.num_rows, args.take, replace=False)
    engines: dict[str, Callable[[], Any]] = {
        "pylance": lambda: lance.dataset(uri, storage_options=options),
        "alance": lambda: al.open_dataset(uri, storage_options=alance_options),
    }
    ops: dict[str, Callable[[Any], Any]] = {
        "scan": lambda ds: ds.to_table(),
        "project 2": lambda ds: ds.to_table(columns=list(table.column_names[:2])),
        f"take {args.take}": lambda ds: ds.take(idx),
    }
    results: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    cpu_times: dict[tuple[str, str], float] = {}
    firsts: dict[tuple[str, str], float] = {}
    answers: dict[tuple[str, str], pa.Table] = {}
    opens: dict[str, dict[str, Any]] = {}
    for op_name, op in ops.items():
        for engine, opener in engines.items():
            wall, stats, result, open_stats, first, cpu = run(proxy, args.repeat, opener, op)
            results[(engine, op_name)] = (wall, stats)
            cpu_times[(engine, op_name)] = cpu
            firsts[(engine, op_name)] = first
            answers[(engine, op_name)] = result
            opens[engine] = open_stats
        if not answers[("alance", op_name)].equals(answers[("pylance", op_name)]):
            raise SystemExit(f"{op_name}: alance and pylance disagree; not reporting timings")
    assert answers[("alance", "scan")].num_rows == table.num_rows

    head = (f"{'operation':<11} {'engine':<8} {'wall s':>8} {'cpu s':>7} {'requests':>9} "
            f"{'bytes':>10} "
            f"{'conns':>6} {'max in flight':>14} {'first run s':>12}")
    print()
    print(head)
    print("-" * len(head))
    for engine, st in opens.items():
        print(f"{'open':<11} {engine:<8} {'':>8} {'':>7} {st['requests']:>9} "
              f"{fmt_bytes(st['bytes_down']):>10} {st['connections']:>6} "
              f"{st['max_waiting']:>14}")
    for (engine, op_name), (wall, st) in results.items():
        print(f"{op_name:<11} {engine:<8} {wall:>8.3f} {cpu_times[(engine, op_name)]:>7.3f} "
              f"{st['requests']:>9} "
              f"{fmt_bytes(st['bytes_down']):>10} {st['connections']:>6} "
              f"{st['max_waiting']:>14} {firsts[(engine, op_name)]:>12.3f}")
    print()
    print(f"{'alance / pylance':<20} {'wall':>7} {'requests':>9} {'bytes':>7}")
    for op_name in ops:
        (wa, sa), (wp, sp) = results[("alance", op_name)], results[("pylance", op_name)]
        print(f"{op_name:<20} {wa / wp:>7.2f} {sa['requests'] / max(sp['requests'], 1):>9.2f} "
              f"{sa['bytes_down'] / max(sp['bytes_down'], 1):>7.2f}")
    print()
    for engine in engines:
        wall, st = results[(engine, "scan")]
        ideal = st["bytes_down"] / bandwidth + 3 * latency
        print(f"{engine} scan: {wall:.3f}s vs ideal {ideal:.3f}s (bytes / bandwidth + 3 round "
              f"trips) = {wall / ideal:.2f}x")


if __name__ == "__main__":
    main()
