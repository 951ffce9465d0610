"""Micro-benchmark of the v0.1/v0.2 codec alone (no IO layer, no dataset layer).

Encodes a 2M-row table (int64, float64, int32, 19-char string, fixed_size_list<float32,16>)
in row groups of 1024 rows, fed in chunks, then decodes it: full scan, 2-column scan and a
take of 1000 random rows, each in 8192-row reads like the dataset scanner does.

    .venv/bin/python benchmarks/legacy_codec.py [rows]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from alance.format.legacy import LegacyFileReader, LegacyFileWriter, fetch_from, open_file, run_plan
from alance.format.schema import LanceSchema

GROUP = 1024
CHUNK = 64 * GROUP
READ = 8 * GROUP


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(0)
    return pa.table({
        "i64": pa.array(np.arange(n, dtype=np.int64)),
        "f64": pa.array(rng.random(n)),
        "i32": pa.array(rng.integers(0, 1 << 20, n).astype(np.int32)),
        "s": pa.array([f"{i:019d}" for i in range(n)]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 16, dtype=np.float32)),
                                               16),
    })


def _best(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    """Print seconds per operation."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
    table = _table(n)
    schema = LanceSchema.from_arrow(table.schema)
    batch = table.combine_chunks().to_batches()[0]

    def write_chunks() -> list[memoryview]:
        w = LegacyFileWriter(schema)
        parts = [p for s in range(0, n, CHUNK)
                 for p in w.write_batches_parts(batch.slice(s, CHUNK), GROUP)]
        return [*parts, memoryview(w.finish())]

    def write_groups() -> list[bytes]:
        w = LegacyFileWriter(schema)
        parts = [w.write_batch(batch.slice(s, GROUP)) for s in range(0, n, GROUP)]
        return [*parts, w.finish()]

    t_chunks, parts = _best(write_chunks)
    t_groups, old_parts = _best(write_groups, 1)
    print(f"encode (64-group chunks) {t_chunks:.3f}s   encode (1 group per call) "
          f"{t_groups:.3f}s")
    data, old = b"".join(parts), b"".join(old_parts)
    for label, blob in (("chunked layout", data), ("per-group layout", old)):
        fetch = fetch_from(blob)
        reader = LegacyFileReader(run_plan(open_file(len(blob)), fetch))

        def scan(proj: list[int] | None, reader: LegacyFileReader = reader,
                 fetch: Callable[..., Any] = fetch) -> int:
            rows = 0
            for s in range(0, n, READ):
                rows += run_plan(reader.read_range(s, min(n, s + READ), proj), fetch).num_rows
            return rows

        idx = np.random.default_rng(1).choice(n, 1000, replace=False)
        t_scan, _ = _best(lambda: scan(None))
        t_scan2, _ = _best(lambda: scan([0, 1]))
        t_take, _ = _best(lambda: run_plan(reader.take(idx), fetch))  # noqa: B023
        print(f"{label}: scan {t_scan:.3f}s  scan2 {t_scan2:.3f}s  take {t_take:.4f}s")


if __name__ == "__main__":
    main()
