"""alance vs pylance, side by side on the same synthetic table.

    python benchmarks/compare_pylance.py [--rows 2000000] [--repeat 3] [--profile auto]
                                         [--format legacy|2.0|2.1|2.2]

``--format`` is the data storage version of the dataset pylance writes and both engines read
(default ``legacy``, i.e. v0.2 files; ``2.2`` is what pylance writes by default).

Each operation is timed as the best of ``--repeat`` runs, for pylance, alance's async API (one
event loop kept for all runs) and the blocking facade ``alance.sync``. Both engines write the
same table into fresh temporary directories; every read runs against the dataset pylance wrote,
so both read identical bytes. Before any number is reported, the results of the two engines are
checked to be equal (a benchmark must never time a wrong answer).

``--profile OP`` (or ``auto``: alance's slowest operation relative to pylance) runs that
operation once more under cProfile and prints the top functions by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import alance
from alance import sync as al

STR_LEN = 19
VEC_DIM = 16


def make_table(rows: int, seed: int = 42) -> pa.Table:
    """int64, float64, int32, a 19-character string and fixed_size_list<float32, 16>."""
    rng = np.random.default_rng(seed)
    i64 = np.arange(rows, dtype=np.int64)
    f64 = rng.random(rows)
    i32 = rng.integers(0, rows, rows, dtype=np.int32)
    # "k" + 18 decimal digits of a random number, built as one uint8 matrix (no Python loop)
    num = rng.integers(0, 10**18, rows, dtype=np.int64)
    chars = np.empty((rows, STR_LEN), dtype=np.uint8)
    chars[:, 0] = ord("k")
    for k in range(STR_LEN - 1):
        chars[:, STR_LEN - 1 - k] = (num // 10**k) % 10 + ord("0")
    offsets = np.arange(0, (rows + 1) * STR_LEN, STR_LEN, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), rows,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])
    vec = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(rows * VEC_DIM, dtype=np.float32)), VEC_DIM)
    return pa.table({"i64": i64, "f64": f64, "i32": i32, "str": strings, "vec": vec})


@dataclass
class Op:
    """One benchmarked operation: how each engine runs it."""

    name: str
    pylance: Callable[[], Any]
    alance_async: Callable[[], Coroutine[Any, Any, Any]]
    alance_sync: Callable[[], Any]
    check: Callable[[Any, Any], None] | None = None


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """Smallest wall time of ``repeat`` calls, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def same_table(theirs: pa.Table, ours: pa.Table) -> None:
    """Equal schema (names and types) and equal values, chunking ignored."""
    assert theirs.schema.names == ours.schema.names, (theirs.schema, ours.schema)
    assert [f.type for f in theirs.schema] == [f.type for f in ours.schema], \
        (theirs.schema, ours.schema)
    assert theirs.num_rows == ours.num_rows, (theirs.num_rows, ours.num_rows)
    assert theirs.cast(ours.schema).equals(ours), "alance and pylance returned different rows"


def build_ops(table: pa.Table, base: Path, loop: asyncio.AbstractEventLoop, seed: int,
              fmt: str = "legacy") -> list[Op]:
    rows = table.num_rows
    counter = iter(range(10**9))

    def fresh(kind: str) -> str:
        path = base / f"{kind}-{next(counter)}.lance"
        return str(path)

    def py_write() -> str:
        uri = fresh("pylance")
        lance.write_dataset(table, uri, data_storage_version=fmt)  # type: ignore[arg-type]
        return uri

    write_kw = alance_write_options(fmt, base)

    async def al_write() -> str:
        uri = fresh("alance")
        await alance.write_dataset(table, uri, **(write_kw or {}))
        return uri

    def sync_write() -> str:
        uri = fresh("alance-sync")
        al.write_dataset(table, uri, **(write_kw or {}))
        return uri

    def check_write(theirs_uri: str, ours_uri: str) -> None:
        # each engine reads what the other wrote, and both equal the input
        same_table(table, lance.dataset(ours_uri).to_table())
        same_table(table, al.open_dataset(theirs_uri).to_table())
        same_table(table, al.open_dataset(ours_uri).to_table())

    # the read-side datasets: one pylance-written dataset, opened once per engine
    source = py_write()
    py_ds = lance.dataset(source)
    al_ds = loop.run_until_complete(alance.open_dataset(source))
    sync_ds = al.open_dataset(source)
    indices = np.sort(np.random.default_rng(seed).choice(rows, size=min(1000, rows),
                                                         replace=False))
    selective, half = "i32 < 1000", f"i32 < {rows // 2}"

    ops = [
        *([Op("write", py_write, al_write, sync_write, check_write)]
          if write_kw is not None else []),
        Op("open", lambda: lance.dataset(source),
           lambda: alance.open_dataset(source), lambda: al.open_dataset(source),
           lambda a, b: None),
        Op("full scan", lambda: py_ds.to_table(), lambda: al_ds.to_table(),
           lambda: sync_ds.to_table()),
        Op("2-column scan", lambda: py_ds.to_table(columns=["i64", "f64"]),
           lambda: al_ds.to_table(columns=["i64", "f64"]),
           lambda: sync_ds.to_table(columns=["i64", "f64"])),
        Op(f"filter {selective}", lambda: py_ds.to_table(filter=selective),
           lambda: al_ds.to_table(filter=selective),
           lambda: sync_ds.to_table(filter=selective)),
        Op(f"filter {half}", lambda: py_ds.to_table(filter=half),
           lambda: al_ds.to_table(filter=half), lambda: sync_ds.to_table(filter=half)),
        Op("take 1000 random", lambda: py_ds.take(indices), lambda: al_ds.take(indices),
           lambda: sync_ds.take(indices)),
        Op("count_rows(i32 < 1000)", lambda: py_ds.count_rows(filter=selective),
           lambda: al_ds.count_rows(filter=selective),
           lambda: sync_ds.count_rows(filter=selective),
           lambda a, b: _equal(a, b)),
    ]
    return ops


def alance_write_options(fmt: str, base: Path) -> dict[str, Any] | None:
    """Keyword arguments making alance write files of ``fmt`` (as pylance does), or None when
    this alance cannot (then the write comparison is skipped, with a note)."""
    kw: dict[str, Any] = {"data_storage_version": fmt}
    probe = pa.table({"x": pa.array([1, 2], pa.int64()), "s": pa.array(["a", ""])})
    try:
        al.write_dataset(probe, str(base / "probe.lance"), **kw)
        if al.open_dataset(str(base / "probe.lance")).to_table().equals(probe):
            return kw
    except (TypeError, alance.AlanceError) as exc:
        if fmt == "legacy":
            return {}  # an older alance: legacy files are its only (default) format
        print(f"note: alance cannot write {fmt} files here ({exc}); write not compared",
              file=sys.stderr)
        return None
    finally:
        shutil.rmtree(base / "probe.lance", ignore_errors=True)
    return {} if fmt == "legacy" else None


def _equal(a: Any, b: Any) -> None:
    assert a == b, (a, b)


def run(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    table = make_table(args.rows, args.seed)
    print(f"table: {args.rows:,} rows, {table.nbytes / 2**20:.0f} MiB in memory "
          f"(built in {time.perf_counter() - t0:.1f}s); best of {args.repeat} runs; "
          f"pylance {lance.__version__}, alance {alance.__version__}; "
          f"files: {args.format}", flush=True)
    loop = asyncio.new_event_loop()
    base = Path(tempfile.mkdtemp(prefix="alance-bench-"))
    results: list[tuple[str, float, float, float]] = []
    try:
        ops = build_ops(table, base, loop, args.seed, args.format)
        wanted = set(args.only.split(",")) if args.only else None
        for op in ops:
            if wanted and op.name not in wanted:
                continue
            py_t, py_res = best_of(args.repeat, op.pylance)
            def run_async(op: Op = op) -> Any:
                return loop.run_until_complete(op.alance_async())

            as_t, as_res = best_of(args.repeat, run_async)
            sy_t, sy_res = best_of(args.repeat, op.alance_sync)
            check = op.check or same_table
            check(py_res, as_res)
            check(py_res, sy_res)
            results.append((op.name, py_t, as_t, sy_t))
            print(f"  {op.name}: done", file=sys.stderr, flush=True)
        print_table(results)
        target = args.profile
        if target == "auto" and results:
            target = max(results, key=lambda r: r[2] / r[1])[0]
        if target and target != "none":
            (op,) = [o for o in ops if o.name == target]
            profile(op, loop, args.profile_lines)
    finally:
        loop.close()
        shutil.rmtree(base, ignore_errors=True)


def print_table(results: list[tuple[str, float, float, float]]) -> None:
    head = (f"{'operation':<26} {'pylance s':>10} {'alance s':>10} {'ratio':>7} "
            f"{'alance.sync s':>14} {'ratio':>7}")
    print()
    print(head)
    print("-" * len(head))
    for name, py_t, as_t, sy_t in results:
        print(f"{name:<26} {py_t:>10.4f} {as_t:>10.4f} {as_t / py_t:>7.2f} "
              f"{sy_t:>14.4f} {sy_t / py_t:>7.2f}")
    print("ratio = alance / pylance (< 1: alance faster)")


def profile(op: Op, loop: asyncio.AbstractEventLoop, lines: int) -> None:
    """Profile one run of ``op`` with alance's async API and print the hotspots."""
    prof = cProfile.Profile()
    prof.enable()
    loop.run_until_complete(op.alance_async())
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(lines)
    stats.sort_stats("tottime").print_stats(lines)
    print(f"\ncProfile of alance (async) '{op.name}':")
    print(out.getvalue())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows in the table")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (best kept)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--only", default="", help="comma-separated operation names to run")
    parser.add_argument("--profile", default="none",
                        help="operation to profile with cProfile, 'auto' (slowest relative to "
                             "pylance) or 'none'")
    parser.add_argument("--profile-lines", type=int, default=25)
    parser.add_argument("--format", default="legacy", choices=["legacy", "2.0", "2.1", "2.2"],
                        help="data storage version of the dataset pylance writes")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.repeat < 1:
        parser.error("--rows and --repeat must be at least 1")
    run(args)


if __name__ == "__main__":
    main()
