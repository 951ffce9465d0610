"""The example pipeline: stream events into a Lance dataset, append, read back, check with pylance.

Runs on an embedded local default (a temporary directory) with no servers:

    python examples/pipeline.py [DATASET_URI]

1. An async producer yields batches of synthetic events; they are written as a stream (memory
   stays bounded by one data file's buffers).
2. Two more batches of events are appended concurrently by two tasks; the commit loop rebases
   whichever loses the race.
3. The dataset is read back: a filtered, projected scan, a count, a take, time travel.
4. If pylance is installed, it opens the same dataset and must see identical rows.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import AsyncIterator

import numpy as np
import pyarrow as pa

import alance

SCHEMA = pa.schema([
    pa.field("event_id", pa.int64(), False),
    pa.field("user", pa.string(), False),
    pa.field("kind", pa.string(), False),
    pa.field("amount", pa.float64(), False),
    pa.field("ts", pa.timestamp("us", "UTC"), False),
])
KINDS = np.array(["click", "view", "purchase", "refund"])


def make_batch(start: int, rows: int, seed: int) -> pa.RecordBatch:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.RecordBatch.from_arrays([
        pa.array(ids),
        pa.array([f"user{u:04d}" for u in rng.integers(0, 500, rows)]),
        pa.array(KINDS[rng.integers(0, len(KINDS), rows)]),
        pa.array(rng.random(rows) * 100),
        pa.array(1_700_000_000_000_000 + ids * 1_000_000, pa.timestamp("us", "UTC")),
    ], schema=SCHEMA)


async def events(start: int, batches: int, rows: int) -> AsyncIterator[pa.RecordBatch]:
    for i in range(batches):
        await asyncio.sleep(0)  # stands in for waiting on a queue or a socket
        yield make_batch(start + i * rows, rows, seed=start + i)


async def main(uri: str) -> int:
    t0 = time.perf_counter()
    ds = await alance.write_dataset(events(0, 20, 5_000), uri, max_rows_per_file=40_000)
    print(f"created {uri}: version {ds.version}, {await ds.count_rows()} rows, "
          f"{len(ds.get_fragments())} fragments")

    await asyncio.gather(
        alance.write_dataset(events(100_000, 4, 5_000), uri, mode="append"),
        alance.write_dataset(events(200_000, 4, 5_000), uri, mode="append"),
    )
    ds = await alance.open_dataset(uri)
    total = await ds.count_rows()
    print(f"after two concurrent appends: version {ds.version}, {total} rows")

    purchases = await ds.to_table(columns=["event_id", "user", "amount"],
                                  filter="kind = 'purchase' AND amount > 90")
    print(f"big purchases: {purchases.num_rows} rows, e.g. {purchases.slice(0, 3).to_pylist()}")
    sample = await ds.take([0, total // 2, total - 1], columns=["event_id", "kind"])
    print(f"take: {sample.to_pylist()}")
    first = await alance.open_dataset(uri, version=1)
    print(f"time travel: version 1 has {await first.count_rows()} rows")

    try:
        import lance
    except ImportError:
        print("pylance not installed; skipping the cross-check")
    else:
        theirs = lance.dataset(uri).to_table().sort_by("event_id")
        ours = (await ds.to_table()).sort_by("event_id")
        same = theirs.equals(ours)
        print(f"pylance {lance.__version__} reads identical rows: {same}")
        if not same:
            return 1
    print(f"done in {time.perf_counter() - t0:.2f}s")
    return 0


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/events.lance"
    sys.exit(asyncio.run(main(target)))
