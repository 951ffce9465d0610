"""Vector search through one pylance-built IVF_PQ index: alance vs pylance.

Writes ``--rows`` random vectors of ``--dim`` dimensions with pylance, builds an IVF_PQ index
with pylance, then for ``--queries`` queries reports recall@10 (against an exhaustive search)
and the median latency of each engine, and the time of ``--concurrency`` queries run at once
(alance: one event loop, ``asyncio.gather``; pylance: a thread pool of that size).

    .venv/bin/python benchmarks/vector_search.py [--rows 100000 --dim 32 --nprobes 8]
                                                 [--s3 --latency-ms 20]

With ``--s3`` the dataset and index live on a local S3 server (SeaweedFS) and both engines read
them through :mod:`benchmarks.latency_proxy`, which holds every request for ``--latency-ms``;
the proxy's request and byte counts are printed per engine (queries after the first, which
opens the index).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402


@contextlib.contextmanager
def location(s3: bool, latency_ms: float, tmp: str,
             ) -> Iterator[tuple[str, dict[str, str], dict[str, str], Any]]:
    """Where the dataset goes: ``(uri, write options, read options, proxy or None)``."""
    if not s3:
        yield f"{tmp}/vectors", {}, {}, None
        return
    from benchmarks.latency_proxy import ProxyProcess
    from benchmarks.s3_latency import start_server, via

    server, target = start_server("seaweedfs", tmp)
    try:
        upstream = target.endpoint.removeprefix("http://")
        with ProxyProcess(upstream, latency_ms) as proxy:
            yield (target.uri("vectors.lance"), target.storage_options,
                   via(target, proxy.endpoint), proxy)
    finally:
        server.stop()


def main() -> None:
    """Run the comparison and print a table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--sub-vectors", type=int, default=8)
    parser.add_argument("--nprobes", type=int, default=8)
    parser.add_argument("--refine-factor", type=int, default=None)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--s3", action="store_true", help="on S3 behind a latency proxy")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    # Clustered data, so that IVF partitions mean something.
    centers = rng.normal(size=(200, args.dim)).astype(np.float32) * 3
    data = (centers[rng.integers(0, 200, args.rows)]
            + rng.normal(size=(args.rows, args.dim)).astype(np.float32))
    queries = (centers[rng.integers(0, 200, args.queries)]
               + rng.normal(size=(args.queries, args.dim)).astype(np.float32))
    table = pa.table({"id": np.arange(args.rows),
                      "vec": pa.FixedSizeListArray.from_arrays(pa.array(data.reshape(-1)),
                                                               args.dim)})
    counts: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            location(args.s3, args.latency_ms, tmp) as (uri, wopts, ropts, proxy):
        ds = lance.write_dataset(table, uri, max_rows_per_file=25_000, storage_options=wopts)
        ds.create_index("vec", "IVF_PQ", num_partitions=args.partitions,
                        num_sub_vectors=args.sub_vectors)
        theirs = lance.dataset(uri, storage_options=ropts)

        def count(engine: str) -> None:
            if proxy is not None:
                counts[engine] = proxy.reset()
        nearest = {"column": "vec", "k": 10, "nprobes": args.nprobes}
        if args.refine_factor:
            nearest["refine_factor"] = args.refine_factor
        truth = []
        for q in queries:
            d = ((data - q) ** 2).sum(axis=1)
            truth.append(set(np.argsort(d, kind="stable")[:10].tolist()))

        def pylance_query(q: np.ndarray) -> list[int]:
            return theirs.to_table(nearest={**nearest, "q": q}, columns=["id"])[
                "id"].to_pylist()

        async def run_alance() -> dict[str, float]:
            ours = await alance.open_dataset(uri, storage_options=ropts)

            async def one(q: np.ndarray) -> list[int]:
                return (await ours.to_table(nearest={**nearest, "q": q}, columns=["id"]))[
                    "id"].to_pylist()

            await one(queries[0])  # open the index once (both engines cache it)
            lat, hits, mine = [], 0, []
            if proxy is not None:
                proxy.reset()
            for q, want in zip(queries, truth, strict=True):
                t0 = time.perf_counter()
                got = await one(q)
                lat.append(time.perf_counter() - t0)
                hits += len(want & set(got))
                mine.append(got)
            count("alance")
            same = sum(got == pylance_query(q) for q, got in zip(queries, mine, strict=True))
            batch = queries[: args.concurrency]
            t0 = time.perf_counter()
            await asyncio.gather(*(one(q) for q in batch))
            conc = time.perf_counter() - t0
            return {"recall": hits / (10 * len(queries)), "p50": statistics.median(lat),
                    "conc": conc, "same": same / len(queries)}

        ours_stats = asyncio.run(run_alance())
        pylance_query(queries[0])
        lat, hits = [], 0
        if proxy is not None:
            proxy.reset()
        for q, want in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            got = pylance_query(q)
            lat.append(time.perf_counter() - t0)
            hits += len(want & set(got))
        count("pylance")
        with ThreadPoolExecutor(args.concurrency) as pool:
            batch = queries[: args.concurrency]
            t0 = time.perf_counter()
            list(pool.map(pylance_query, batch))
            conc = time.perf_counter() - t0
        their_stats = {"recall": hits / (10 * len(queries)), "p50": statistics.median(lat),
                       "conc": conc}
    where = f"S3 (SeaweedFS) with {args.latency_ms:g} ms a request" if args.s3 else "local disk"
    print(f"{args.rows} x {args.dim} vectors, IVF_PQ {args.partitions} partitions, "
          f"{args.sub_vectors} sub-vectors, nprobes={args.nprobes}, "
          f"refine_factor={args.refine_factor}, {args.queries} queries, {where}")
    print(f"{'':10} {'recall@10':>10} {'p50 ms':>8} {f'{args.concurrency} at once ms':>16}")
    for name, s in (("alance", ours_stats), ("pylance", their_stats)):
        print(f"{name:10} {s['recall']:10.3f} {s['p50'] * 1e3:8.2f} {s['conc'] * 1e3:16.1f}")
    print(f"queries with the same top-10 ids in both engines: {ours_stats['same']:.0%}")
    for name, st in counts.items():
        print(f"{name}: {st['requests']} requests, {st['bytes_down'] / 2**20:.1f} MiB for "
              f"{args.queries} sequential queries after the first")


if __name__ == "__main__":
    main()
