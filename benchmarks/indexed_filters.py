"""Bytes read by index-narrowed filtered scans, alance vs pylance, on the same data and index.

    python benchmarks/indexed_filters.py [--rows 1000000] [--fragments 10]

pylance writes ``--rows`` rows (int64 ``id``, int32 ``v`` with 10,000 distinct values, a
string ``cat`` of 50 values, ~60-byte string ``payload``) and builds a BTREE index on ``v``
and a BITMAP index on ``cat``. For each filter, on a freshly opened dataset (cold index
cache), both engines' results are compared, then the bytes each read: pylance's from
``analyze_plan`` (its scan node plus its index node), alance's from its IO counter (data and
index files).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import alance  # noqa: E402
from alance.io.store import counting_io  # noqa: E402

FILTERS = ["v = 4242", "v < 20", "v IN (1, 500, 9000)", "cat = 'c7'", "cat = 'c7' AND v < 3000"]
_UNITS = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9}


def _pylance_bytes(plan: str) -> float:
    total = 0.0
    for number, unit in re.findall(r"bytes_read=([\d.]+)\s*([KMG]?B?)", plan):
        total += float(number) * _UNITS[unit.strip()]
    return total


async def _alance(uri: str, sql: str) -> tuple[pa.Table, int]:
    ds = await alance.open_dataset(uri)
    with counting_io() as io:
        table = await ds.to_table(filter=sql)
    return table, io.bytes_read


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--fragments", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = args.rows
    table = pa.table({
        "id": pa.array(np.arange(n)),
        "v": pa.array(rng.integers(0, 10_000, n).astype(np.int32)),
        "cat": pa.array([f"c{i}" for i in rng.integers(0, 50, n)]),
        "payload": pa.array([f"{i:060d}" for i in range(n)]),
    })
    with tempfile.TemporaryDirectory() as tmp:
        uri = str(Path(tmp) / "ds")
        ds = lance.write_dataset(table, uri, max_rows_per_file=n // args.fragments)
        ds.create_scalar_index("v", "BTREE")
        ds.create_scalar_index("cat", "BITMAP")
        print(f"{'filter':28} {'rows':>7} {'pylance bytes':>14} {'alance bytes':>13} {'ratio':>6}")
        for sql in FILTERS:
            plan = lance.dataset(uri).scanner(filter=sql).analyze_plan()
            theirs = lance.dataset(uri).to_table(filter=sql)
            ours, got = asyncio.run(_alance(uri, sql))
            assert ours.equals(theirs), sql
            want = _pylance_bytes(plan)
            print(f"{sql:28} {ours.num_rows:>7} {want:>14,.0f} {got:>13,} "
                  f"{got / want if want else float('nan'):>6.2f}")


if __name__ == "__main__":
    main()
