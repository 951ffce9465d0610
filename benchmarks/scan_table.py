"""Scan and filter throughput, alance vs pylance, as one table: formats x operations.

    python benchmarks/scan_table.py [--rows 10000000] [--formats 2.0,2.1,2.2,legacy]
                                    [--repeat 3] [--only "full scan,..."] [--reader-processes]

pylance writes ``--rows`` rows of (int64 ``id``, float64 ``x``, a ~30-character string ``s``,
``fixed_size_list<float32, 32>`` ``vec``, int32 ``category`` in 0..999) once per data storage
version; both engines read that dataset. Each cell is the median of ``--repeat`` runs of alance's
async API divided by pylance's (below 1: alance faster); results are compared first. Also
printed: the pylance and alance times in seconds, and alance's peak-RSS growth is not measured
here (see ``s3_write_rss.py``).

By default both engines are timed in the process that wrote the dataset, pylance's repeats
right after its write (its allocator then holds memory it can reuse). ``--reader-processes``
also times each engine in a fresh process of its own that only opens the dataset and reads it,
as a service reading tables that a writer job made does (one warm-up run per operation, then
the repeats), and prints that table too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
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


def make_table(rows: int, seed: int = 9) -> pa.Table:
    """The issue's table: id, x, s (~30 characters), vec (32 x float32), category."""
    rng = np.random.default_rng(seed)
    width = 30
    chars = rng.integers(ord("a"), ord("z") + 1, (rows, width), dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * width, width, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), rows,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])
    vec = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(rows * 32, dtype=np.float32)), 32)
    return pa.table({"id": np.arange(rows, dtype=np.int64), "x": rng.random(rows),
                     "s": strings, "vec": vec,
                     "category": rng.integers(0, 1000, rows, dtype=np.int32)})


def operations(rows: int) -> dict[str, dict[str, Any]]:
    """Name -> to_table keyword arguments."""
    return {
        "full scan": {},
        "project 2 columns": {"columns": ["id", "x"]},
        "filter on id, 50%": {"filter": f"id < {rows // 2}"},
        "filter on id, 0.1%": {"filter": f"id < {rows // 1000}"},
        "filter on category, 50%": {"filter": "category < 500"},
        "filter on category, 0.1%": {"filter": "category = 7"},
    }


def median(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def amedian(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def run(args: argparse.Namespace) -> None:
    table = make_table(args.rows)
    ops = operations(args.rows)
    if args.only:
        ops = {k: v for k, v in ops.items() if k in args.only.split(",")}
    formats = args.formats.split(",")
    cells: dict[tuple[str, str], tuple[float, float]] = {}
    apart: dict[tuple[str, str], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="alance-scans-") as tmp:
        for fmt in formats:
            uri = str(Path(tmp) / f"{fmt}.lance")
            lance.write_dataset(table, uri, data_storage_version=fmt)
            py = lance.dataset(uri)
            al = await alance.open_dataset(uri)
            for name, kw in ops.items():
                theirs = py.to_table(**kw)
                ours = await al.to_table(**kw)
                if not theirs.equals(ours.cast(theirs.schema)):
                    raise SystemExit(f"{fmt} {name}: alance and pylance disagree")
                del theirs, ours
                tp = median(lambda kw=kw, py=py: py.to_table(**kw), args.repeat)
                ta = await amedian(lambda kw=kw, al=al: al.to_table(**kw), args.repeat)
                cells[(fmt, name)] = (tp, ta)
                print(f"  {fmt:<7} {name:<26} pylance {tp:7.3f} s  alance {ta:7.3f} s  "
                      f"{ta / tp:5.2f}", flush=True)
            if args.reader_processes:
                theirs_t = _in_reader_process("pylance", uri, args)
                ours_t = _in_reader_process("alance", uri, args)
                for name in ops:
                    apart[(fmt, name)] = (theirs_t[name], ours_t[name])
                    print(f"  {fmt:<7} {name:<26} reader processes: pylance "
                          f"{theirs_t[name]:7.3f} s  alance {ours_t[name]:7.3f} s  "
                          f"{ours_t[name] / theirs_t[name]:5.2f}", flush=True)
    _print_table(f"alance / pylance, {args.rows:,} rows, median of {args.repeat} "
                 "(below 1: faster)", cells, formats, ops)
    if args.reader_processes:
        _print_table("the same, each engine timed in a fresh process that only reads",
                     apart, formats, ops)


def _print_table(title: str, cells: dict[tuple[str, str], tuple[float, float]],
                 formats: list[str], ops: dict[str, dict[str, Any]]) -> None:
    print(f"\n{title}")
    print(f"{'operation':<26}" + "".join(f"{f:>8}" for f in formats))
    for name in ops:
        print(f"{name:<26}" + "".join(f"{cells[(f, name)][1] / cells[(f, name)][0]:>8.2f}"
                                      for f in formats))


def _in_reader_process(engine: str, uri: str, args: argparse.Namespace) -> dict[str, float]:
    """Operation -> median seconds of ``engine`` reading ``uri`` in a child process."""
    cmd = [sys.executable, __file__, "--child", engine, uri, "--rows", str(args.rows),
           "--repeat", str(args.repeat), "--only", args.only]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


async def _child(engine: str, uri: str, args: argparse.Namespace) -> None:
    """Time every operation on ``uri`` with ``engine`` alone; print the medians as JSON."""
    ops = operations(args.rows)
    if args.only:
        ops = {k: v for k, v in ops.items() if k in args.only.split(",")}
    times: dict[str, float] = {}
    if engine == "pylance":
        py = lance.dataset(uri)
        for name, kw in ops.items():
            py.to_table(**kw)  # (warm-up: metadata and caches, as a service's first read)
            times[name] = median(lambda kw=kw: py.to_table(**kw), args.repeat)
    else:
        al = await alance.open_dataset(uri)
        for name, kw in ops.items():
            await al.to_table(**kw)
            times[name] = await amedian(lambda kw=kw: al.to_table(**kw), args.repeat)
    print(json.dumps(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--formats", default="2.0,2.1,2.2,legacy")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--only", default="")
    p.add_argument("--reader-processes", action="store_true",
                   help="also time each engine in a fresh process that only reads")
    p.add_argument("--child", nargs=2, metavar=("ENGINE", "URI"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        asyncio.run(_child(args.child[0], args.child[1], args))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
