"""JSON column reads, alance vs pylance: JSONB in the file, ``arrow.json`` text out.

    python benchmarks/json_read.py [--rows 200000] [--repeat 5] [--format 2.1]
                                   [--documents events|mixed]

pylance writes ``--rows`` documents once; both engines read the column back as text, which is
compared first. ``events`` (the default): objects of five keys, an integer, a string, a
double, an array of 0-3 strings and a nested object of an integer, a boolean and a null.
``mixed``: objects of 1-8 keys drawn at random from 12, each value of a random type (integer,
short string, double, null, boolean, array of 0-2 integers), so that nearly every document
has a shape of its own (alance's worst case: its shape kernel finds nothing to share).
Printed: the median wall and CPU seconds of each engine and the ratio (alance / pylance, below
1: alance faster), and the same for a take of 1000 random rows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
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


def make_mixed_table(rows: int, seed: int = 1) -> pa.Table:
    """``rows`` JSON documents of random keys and value types, with an id column."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    choices: list[object] = [1, 2.5, None, True, "s", "text", [1, 2], []]
    docs = [json.dumps({k: rng.choice(choices) for k in rng.sample(keys, rng.randint(1, 8))})
            for _ in range(rows)]
    return pa.table({"id": np.arange(rows), "doc": pa.array(docs, pa.json_(pa.utf8()))})


def make_table(rows: int, seed: int = 1) -> pa.Table:
    """``rows`` JSON documents of a typical event shape, with an id column."""
    rng = np.random.default_rng(seed)
    scores = rng.random(rows) * 100
    big = rng.integers(0, 1 << 40, rows)
    tags = ["a", "bb", "ccc"]
    docs = [json.dumps({"id": i, "name": f"user_{i}", "score": float(scores[i]),
                        "tags": tags[: i % 4],
                        "nested": {"x": int(big[i]), "ok": bool(i % 2), "n": None}})
            for i in range(rows)]
    return pa.table({"id": np.arange(rows), "doc": pa.array(docs, pa.json_(pa.utf8()))})


def _texts(table: pa.Table) -> list[Any]:
    column = table.column("doc").combine_chunks()
    storage = column.storage if isinstance(column, pa.ExtensionArray) else column
    return storage.cast(pa.utf8()).to_pylist()


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    walls, cpus = [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--format", default="2.1")
    parser.add_argument("--documents", choices=("events", "mixed"), default="events")
    args = parser.parse_args()
    table = (make_table if args.documents == "events" else make_mixed_table)(args.rows)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/docs.lance"
        lance.write_dataset(table, path, data_storage_version=args.format)
        theirs = lance.dataset(path)
        loop = asyncio.new_event_loop()
        ours = loop.run_until_complete(alance.open_dataset(path))

        def run(coro: Callable[[], Awaitable[pa.Table]]) -> Callable[[], pa.Table]:
            return lambda: loop.run_until_complete(coro())

        rng = np.random.default_rng(3)
        idx = np.sort(rng.choice(args.rows, 1000, replace=False)).tolist()
        ops = {
            "read column": (run(lambda: ours.to_table(columns=["doc"])),
                            lambda: theirs.to_table(columns=["doc"])),
            "take 1000": (run(lambda: ours.take(idx, columns=["doc"])),
                          lambda: theirs.take(idx, columns=["doc"])),
        }
        print(f"{args.rows} {args.documents} documents, format {args.format}, "
              f"median of {args.repeat}")
        print(f"{'op':<12} {'pylance s':>10} {'cpu':>6} {'alance s':>9} {'cpu':>6} {'ratio':>6}")
        for name, (mine, other) in ops.items():
            if _texts(mine()) != _texts(other()):
                raise SystemExit(f"{name}: alance and pylance differ")
            (pw, pc), (aw, ac) = _time(other, args.repeat), _time(mine, args.repeat)
            print(f"{name:<12} {pw:>10.3f} {pc:>6.3f} {aw:>9.3f} {ac:>6.3f} {aw / pw:>6.2f}")
        loop.close()


if __name__ == "__main__":
    main()
