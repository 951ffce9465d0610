"""Vector search through one pylance-built IVF_PQ index: alance vs pylance.

Writes ``--rows`` random vectors of ``--dim`` dimensions with pylance, builds an IVF_PQ index
with pylance, then for ``--queries`` queries reports recall@10 (against an exhaustive search)
and the median latency of each engine, and the time of ``--concurrency`` queries run at once
(alance: one event loop, ``asyncio.gather``; pylance: a thread pool of that size).

    .venv/bin/python benchmarks/vector_search.py [--rows 100000 --dim 32 --nprobes 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import lance
import numpy as np
import pyarrow as pa

import alance


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
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"{tmp}/vectors"
        ds = lance.write_dataset(table, uri, max_rows_per_file=25_000)
        ds.create_index("vec", "IVF_PQ", num_partitions=args.partitions,
                        num_sub_vectors=args.sub_vectors)
        theirs = lance.dataset(uri)
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
            ours = await alance.open_dataset(uri)

            async def one(q: np.ndarray) -> list[int]:
                return (await ours.to_table(nearest={**nearest, "q": q}, columns=["id"]))[
                    "id"].to_pylist()

            await one(queries[0])  # open the index once (both engines cache it)
            lat, hits, same = [], 0, 0
            for q, want in zip(queries, truth, strict=True):
                t0 = time.perf_counter()
                got = await one(q)
                lat.append(time.perf_counter() - t0)
                hits += len(want & set(got))
                same += got == pylance_query(q)
            batch = queries[: args.concurrency]
            t0 = time.perf_counter()
            await asyncio.gather(*(one(q) for q in batch))
            conc = time.perf_counter() - t0
            return {"recall": hits / (10 * len(queries)), "p50": statistics.median(lat),
                    "conc": conc, "same": same / len(queries)}

        ours_stats = asyncio.run(run_alance())
        pylance_query(queries[0])
        lat, hits = [], 0
        for q, want in zip(queries, truth, strict=True):
            t0 = time.perf_counter()
            got = pylance_query(q)
            lat.append(time.perf_counter() - t0)
            hits += len(want & set(got))
        with ThreadPoolExecutor(args.concurrency) as pool:
            batch = queries[: args.concurrency]
            t0 = time.perf_counter()
            list(pool.map(pylance_query, batch))
            conc = time.perf_counter() - t0
        their_stats = {"recall": hits / (10 * len(queries)), "p50": statistics.median(lat),
                       "conc": conc}
    print(f"{args.rows} x {args.dim} vectors, IVF_PQ {args.partitions} partitions, "
          f"{args.sub_vectors} sub-vectors, nprobes={args.nprobes}, "
          f"refine_factor={args.refine_factor}, {args.queries} queries")
    print(f"{'':10} {'recall@10':>10} {'p50 ms':>8} {f'{args.concurrency} at once ms':>16}")
    for name, s in (("alance", ours_stats), ("pylance", their_stats)):
        print(f"{name:10} {s['recall']:10.3f} {s['p50'] * 1e3:8.2f} {s['conc'] * 1e3:16.1f}")
    print(f"queries with the same top-10 ids in both engines: {ours_stats['same']:.0%}")


if __name__ == "__main__":
    main()
