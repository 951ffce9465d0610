"""2.x file writes, alance vs pylance: file size and write time on the same table.

    python benchmarks/v2_write.py [--rows 2000000] [--repeat 3] [--format 2.2]
                                  [--columns seq,rnd,...]

The table (``--columns`` picks some): ``seq`` int64 0, 1, 2...; ``rnd`` int64 over the full
64-bit range; ``small`` int64 in [0, 1000); ``f64`` float64 in [0, 1); ``ts`` timestamps (us)
a second apart with jitter; ``s_low`` strings of 10 distinct values; ``s_high`` 19-character
strings of random digits (distinct); ``s_null`` low-cardinality strings, 20 % null.

Both engines write the whole table into fresh directories (best of ``--repeat`` wall times,
and CPU times of all the threads of the process);
before a figure is printed, each engine reads what the other wrote and both must equal the
input. Then the bytes of every column (sum of its page buffers in the data files) are listed
with the encoding each engine chose.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from alance import sync as al
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.v2.container import open_file

COLUMNS = ("seq", "rnd", "small", "f64", "ts", "s_low", "s_high", "s_null")


def make_table(rows: int, columns: tuple[str, ...] = COLUMNS, seed: int = 7) -> pa.Table:
    """The benchmark table (see the module docstring)."""
    rng = np.random.default_rng(seed)
    words = np.array([f"category-{i}" for i in range(10)])
    digits = rng.integers(0, 10, (rows, 18), dtype=np.uint8) + ord("0")
    chars = np.concatenate([np.full((rows, 1), ord("k"), np.uint8), digits], axis=1)
    offsets = np.arange(0, (rows + 1) * 19, 19, dtype=np.int32)
    make = {
        "seq": lambda: pa.array(np.arange(rows, dtype=np.int64)),
        "rnd": lambda: pa.array(rng.integers(-(2**63), 2**63 - 1, rows, dtype=np.int64)),
        "small": lambda: pa.array(rng.integers(0, 1000, rows, dtype=np.int64)),
        "f64": lambda: pa.array(rng.random(rows)),
        "ts": lambda: pa.array(1_700_000_000_000_000 + np.arange(rows, dtype=np.int64)
                               * 1_000_000 + rng.integers(0, 1000, rows), pa.timestamp("us")),
        "s_low": lambda: pa.array(words[rng.integers(0, 10, rows)]),
        "s_high": lambda: pa.Array.from_buffers(
            pa.string(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())]),
        "s_null": lambda: pa.array(words[rng.integers(0, 10, rows)],
                                   mask=rng.random(rows) < 0.2),
    }
    return pa.table({c: make[c]() for c in columns})


def best_of(repeat: int, fn: Callable[[], str]) -> tuple[float, float, str]:
    """Smallest wall time and smallest CPU time (all threads of the process) of ``repeat``
    calls, and the last result."""
    best, best_cpu, result = float("inf"), float("inf"), ""
    for _ in range(repeat):
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, result


def column_bytes(uri: str) -> tuple[int, list[int], list[set[str]]]:
    """Total data file bytes, bytes per column and the encodings of its pages."""
    files = sorted(Path(uri, "data").glob("*.lance"))
    total, per_col, kinds = 0, list[int](), list[set[str]]()
    for path in files:
        data = path.read_bytes()
        total += len(data)
        f = run_plan(open_file(len(data)), fetch_from(data))
        for c in range(f.num_columns):
            if c >= len(per_col):
                per_col.append(0)
                kinds.append(set())
            for page in f.column(c).pages:
                per_col[c] += sum(size for _, size in page.buffers)
                kinds[c].add(_kind(page.encoding))
    return total, per_col, kinds


def _kind(layout: object) -> str:
    which = layout.WhichOneof("layout")  # type: ignore[attr-defined]
    sub = getattr(layout, which)
    name = which.replace("_layout", "")
    if hasattr(sub, "value_compression"):
        enc = sub.value_compression
        name += ":" + enc.WhichOneof("compression")
        if enc.WhichOneof("compression") == "general":
            name += "(" + enc.general.values.WhichOneof("compression") + ")"
        if which == "mini_block_layout" and sub.HasField("dictionary"):
            name += "+dict"
    return name


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--format", default="2.2", choices=["2.1", "2.2"])
    parser.add_argument("--columns", default=",".join(COLUMNS))
    args = parser.parse_args(argv)
    columns = tuple(args.columns.split(","))
    table = make_table(args.rows, columns)
    base = Path(tempfile.mkdtemp(prefix="alance-v2write-"))
    counter = iter(range(10**6))
    try:
        def py_write() -> str:
            uri = str(base / f"py-{next(counter)}")
            lance.write_dataset(table, uri, data_storage_version=args.format)
            return uri

        def al_write() -> str:
            uri = str(base / f"al-{next(counter)}")
            al.write_dataset(table, uri, data_storage_version=args.format)
            return uri

        py_time, py_cpu, py_uri = best_of(args.repeat, py_write)
        al_time, al_cpu, al_uri = best_of(args.repeat, al_write)
        assert lance.dataset(al_uri).to_table().equals(table), "pylance misreads alance's file"
        assert al.open_dataset(py_uri).to_table().equals(table), "alance misreads pylance's"
        assert al.open_dataset(al_uri).to_table().equals(table), "alance misreads its own file"
        py_total, py_cols, py_kinds = column_bytes(py_uri)
        al_total, al_cols, al_kinds = column_bytes(al_uri)
        print(f"{args.rows:,} rows, file version {args.format}, best of {args.repeat}; "
              f"pylance {lance.__version__}")
        print(f"{'':8} {'pylance':>10} {'alance':>10}")
        print(f"{'write s':8} {py_time:10.3f} {al_time:10.3f}")
        print(f"{'cpu s':8} {py_cpu:10.3f} {al_cpu:10.3f}")
        print(f"{'size MB':8} {py_total / 1e6:10.2f} {al_total / 1e6:10.2f}")
        print("per column (MB, encodings):")
        for i, name in enumerate(columns):
            print(f"  {name:8} {py_cols[i] / 1e6:8.2f} {al_cols[i] / 1e6:8.2f}   "
                  f"pylance {','.join(sorted(py_kinds[i]))}; "
                  f"alance {','.join(sorted(al_kinds[i]))}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
