"""DML, alance vs pylance: delete 1%, update 1%, merge_insert 10% new + 10% matched.

    python benchmarks/dml.py [--rows 2000000] [--repeat 3]

pylance writes one table (v0.2 / "legacy" data files). For every run each engine gets its own
fresh copy of that directory, so both start from identical bytes; the time measured is the
operation alone (opening the dataset excluded). After the runs, the two engines' resulting
tables are checked to be equal, so no wrong answer is ever timed.
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
    """id (int64, the key), v (float64), k (int32) and a 16-character string."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    chars = rng.integers(ord("a"), ord("z") + 1, (rows, 16), dtype=np.uint8)
    offsets = np.arange(0, (rows + 1) * 16, 16, dtype=np.int32)
    strings = pa.Array.from_buffers(pa.string(), rows,
                                    [None, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes())])
    return pa.table({"id": ids, "v": rng.random(rows),
                     "k": rng.integers(0, 1000, rows, dtype=np.int32), "s": strings})


def merge_source(table: pa.Table, rows: int, seed: int = 11) -> pa.Table:
    """10% of the rows matched (new values) and 10% new keys."""
    rng = np.random.default_rng(seed)
    tenth = rows // 10
    matched = np.sort(rng.choice(rows, tenth, replace=False)).astype(np.int64)
    new = np.arange(rows, rows + tenth, dtype=np.int64)
    keys = np.concatenate([matched, new])
    src = make_table(len(keys), seed=seed)
    return src.set_column(0, "id", pa.array(keys))


def sorted_rows(t: pa.Table) -> pa.Table:
    return t.sort_by("id").combine_chunks()


def run_pylance(uri: str, op: str, src: pa.Table) -> float:
    ds = lance.dataset(uri)
    start = time.perf_counter()
    if op == "delete 1%":
        ds.delete("id % 100 = 7")
    elif op == "update 1%":
        ds.update({"v": "v + 1"}, where="id % 100 = 3")
    else:
        ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            src)
    return time.perf_counter() - start


async def run_alance(uri: str, op: str, src: pa.Table) -> float:
    ds = await alance.open_dataset(uri)
    start = time.perf_counter()
    if op == "delete 1%":
        await ds.delete("id % 100 = 7")
    elif op == "update 1%":
        await ds.update({"v": "v + 1"}, where="id % 100 = 3")
    else:
        await (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
               .execute(src))
    return time.perf_counter() - start


def best(repeat: int, fn: Callable[[int], float]) -> float:
    times = []
    for i in range(repeat):
        gc.collect()
        times.append(fn(i))
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="alance-dml-"))
    loop = asyncio.new_event_loop()
    try:
        table = make_table(args.rows)
        base = str(root / "base.lance")
        lance.write_dataset(table, base, data_storage_version="legacy")
        src = merge_source(table, args.rows)
        print(f"{args.rows:,} rows, {len(lance.dataset(base).get_fragments())} fragments; "
              f"merge source {src.num_rows:,} rows; best of {args.repeat}\n")
        print(f"{'operation':<22}{'pylance s':>11}{'alance s':>11}{'alance/pylance':>16}")
        for op in ("delete 1%", "update 1%", "merge_insert 10%+10%"):
            def fresh(tag: str, i: int, op: str = op) -> str:
                uri = str(root / f"{tag}-{op.split()[0]}-{i}.lance")
                shutil.copytree(base, uri)
                return uri

            def py(i: int, op: str = op) -> float:
                return run_pylance(fresh("py", i), op, src)

            def al(i: int, op: str = op) -> float:
                return loop.run_until_complete(run_alance(fresh("al", i), op, src))

            t_py = best(args.repeat, py)
            t_al = best(args.repeat, al)
            a = sorted_rows(lance.dataset(str(root / f"py-{op.split()[0]}-0.lance")).to_table())
            b = sorted_rows(lance.dataset(str(root / f"al-{op.split()[0]}-0.lance")).to_table())
            if not a.equals(b):
                raise SystemExit(f"{op}: alance and pylance results differ")
            print(f"{op:<22}{t_py:>11.3f}{t_al:>11.3f}{t_al / t_py:>16.2f}")
    finally:
        loop.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
