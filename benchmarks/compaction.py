"""Compaction of many small fragments with deletions, alance vs pylance ``compact_files``.

    python benchmarks/compaction.py [--fragments 100] [--rows-per-fragment 10000] [--repeat 3]

pylance writes the table as ``--fragments`` small fragments (v0.2 / "legacy" data files) and
deletes about 5% of the rows (every 20th id) plus 40% of every tenth fragment (those are
materialised alone). Each run gives each engine its own fresh copy of that directory; the time
measured is the compaction call alone (opening the dataset excluded), as wall time and as the
process's CPU time (all threads; less sensitive to a busy machine). After the runs, both
results are checked to hold the same rows in the same order and the same fragment layout.
"""

from __future__ import annotations

import argparse
import asyncio
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

import alance


def make_table(rows: int, seed: int = 7) -> pa.Table:
    """id (int64), v (float64), k (int32) and a 16-character string."""
    rng = np.random.default_rng(seed)
    chars = rng.integers(ord("a"), ord("z") + 1, (rows, 16), dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * 16, 16, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), rows,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])
    return pa.table({"id": np.arange(rows, dtype=np.int64), "v": rng.random(rows),
                     "k": rng.integers(0, 1000, rows, dtype=np.int32), "s": strings})


def build(uri: str, fragments: int, per_fragment: int) -> None:
    rows = fragments * per_fragment
    lance.write_dataset(make_table(rows), uri, max_rows_per_file=per_fragment,
                        data_storage_version="legacy")
    ds = lance.dataset(uri)
    ds.delete("id % 20 = 7")
    heavy = " or ".join(f"(id >= {f * per_fragment} and id < {f * per_fragment} + "
                        f"{per_fragment * 2 // 5})" for f in range(0, fragments, 10))
    ds.delete(heavy)


Timing = tuple[float, float]  # wall seconds, CPU seconds of the process (all threads)


def run_pylance(uri: str) -> Timing:
    ds = lance.dataset(uri)
    start, cpu = time.perf_counter(), time.process_time()
    ds.optimize.compact_files()
    return time.perf_counter() - start, time.process_time() - cpu


async def run_alance(uri: str) -> Timing:
    ds = await alance.open_dataset(uri)
    start, cpu = time.perf_counter(), time.process_time()
    await ds.compact_files()
    return time.perf_counter() - start, time.process_time() - cpu


def best(repeat: int, fn: Callable[[int], Timing]) -> Timing:
    """Best wall time and best CPU time over ``repeat`` runs."""
    times = []
    for i in range(repeat):
        gc.collect()
        times.append(fn(i))
    return min(t[0] for t in times), min(t[1] for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fragments", type=int, default=100)
    parser.add_argument("--rows-per-fragment", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="alance-compact-"))
    loop = asyncio.new_event_loop()
    try:
        base = str(root / "base.lance")
        build(base, args.fragments, args.rows_per_fragment)
        pl = lance.dataset(base)
        print(f"{args.fragments} fragments x {args.rows_per_fragment:,} rows, "
              f"{pl.count_rows():,} live rows; best of {args.repeat}\n")

        def fresh(tag: str, i: int) -> str:
            uri = str(root / f"{tag}-{i}.lance")
            shutil.copytree(base, uri)
            return uri

        t_py = best(args.repeat, lambda i: run_pylance(fresh("py", i)))
        t_al = best(args.repeat, lambda i: loop.run_until_complete(run_alance(fresh("al", i))))
        a, b = lance.dataset(str(root / "py-0.lance")), lance.dataset(str(root / "al-0.lance"))
        layout = [f.count_rows() for f in a.get_fragments()]
        if layout != [f.count_rows() for f in b.get_fragments()]:
            raise SystemExit("alance and pylance fragment layouts differ")
        if not a.to_table().equals(b.to_table()):
            raise SystemExit("alance and pylance compacted rows differ")
        print(f"{'compact_files':<16}{'pylance s':>11}{'alance s':>11}{'alance/pylance':>16}")
        for name, i in (("wall time", 0), ("CPU time", 1)):
            print(f"{name:<16}{t_py[i]:>11.3f}{t_al[i]:>11.3f}{t_al[i] / t_py[i]:>16.2f}")
        print(f"\nresult: {len(layout)} fragments {layout[:4]}{'...' if len(layout) > 4 else ''}")
    finally:
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
