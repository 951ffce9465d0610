"""Single-writer append latency on local disk, alance vs pylance, by manifest size.

    python benchmarks/append_latency.py [--fragments 1 600] [--appends 40] [--format 2.2]

For each starting size, a dataset with that many fragments (one row each, written by pylance
in one call with ``max_rows_per_file=1``) is copied once per engine; then ``--appends``
appends of 10 rows are timed one after another, each from the dataset's URI as a fresh
writer would (``write_dataset(..., mode="append")``: open the newest version, write the data
file, the transaction file and the manifest). alance is timed three ways: async from the URI,
async from the dataset handle the previous append returned (the manifest is not read again),
and through the blocking facade from the URI. The engines take turns append by append, so a
busy machine slows them alike. The table shows the median and 90th percentile wall time and
the median process CPU time of an append.

Requests per commit (both engines, over S3) are counted by ``benchmarks/commit.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import alance
from alance import sync as al


def batch(start: int, rows: int = 10) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                     "v": pa.array([float(i) for i in range(rows)])})


def make_base(path: str, fragments: int, fmt: str) -> None:
    lance.write_dataset(batch(0, fragments), path, max_rows_per_file=1,
                        data_storage_version=fmt)


def pylance_append(uri: str, k: int) -> None:
    lance.write_dataset(batch(10_000_000 + 10 * k), uri, mode="append")


class AlanceWriter:
    """Appends through alance on one event loop, from the URI or from the last handle."""

    def __init__(self, runner: asyncio.Runner, uri: str, chained: bool) -> None:
        self.runner, self.uri, self.chained = runner, uri, chained
        self.target: Any = (runner.run(alance.open_dataset(uri)) if chained else uri)

    def __call__(self, uri: str, k: int) -> None:
        ds = self.runner.run(alance.write_dataset(batch(10_000_000 + 10 * k), self.target,
                                                  mode="append"))
        if self.chained:
            self.target = ds


def sync_append(uri: str, k: int) -> None:
    al.write_dataset(batch(10_000_000 + 10 * k), uri, mode="append")


def ms(values: list[float], q: float) -> str:
    values = sorted(values)
    if q == 0.5:
        return f"{statistics.median(values) * 1000:.2f}"
    return f"{values[min(len(values) - 1, int(q * len(values)))] * 1000:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fragments", type=int, nargs="+", default=[1, 600])
    p.add_argument("--appends", type=int, default=40)
    p.add_argument("--format", default="2.2")
    args = p.parse_args()
    rows = [["fragments", "engine", "p50 ms", "p90 ms", "cpu ms"]]
    with tempfile.TemporaryDirectory() as tmp, asyncio.Runner() as runner:
        for n in args.fragments:
            base = f"{tmp}/base-{n}"
            make_base(base, n, args.format)
            names = ["pylance", "alance async uri", "alance async handle", "alance sync uri"]
            uris = {name: f"{tmp}/{name.replace(' ', '-')}-{n}" for name in names}
            for uri in uris.values():
                shutil.copytree(base, uri)
            engines: dict[str, Callable[[str, int], None]] = {
                "pylance": pylance_append,
                "alance async uri": AlanceWriter(runner, uris["alance async uri"], False),
                "alance async handle": AlanceWriter(runner, uris["alance async handle"], True),
                "alance sync uri": sync_append,
            }
            walls: dict[str, list[float]] = {name: [] for name in names}
            cpus: dict[str, list[float]] = {name: [] for name in names}
            for k in range(args.appends):  # engines take turns: load swings hit them alike
                for name in names:
                    t0, c0 = time.perf_counter(), time.process_time()
                    engines[name](uris[name], k)
                    walls[name].append(time.perf_counter() - t0)
                    cpus[name].append(time.process_time() - c0)
            for name in names:
                rows.append([str(n), name, ms(walls[name], 0.5), ms(walls[name], 0.9),
                             ms(cpus[name], 0.5)])
                check = lance.dataset(uris[name])
                assert check.count_rows() == n + 10 * args.appends, name
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print("cpu ms: median process CPU time per append (all threads; pylance's Rust threads "
          "included)")
    for i, r in enumerate(rows):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
