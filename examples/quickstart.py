"""Async quick start: create, append, time-travel, scan, filter and take."""

from __future__ import annotations

import asyncio
import sys
import tempfile

import pyarrow as pa

import alance


async def main(uri: str) -> None:
    table = pa.table({
        "id": pa.array(range(1000), pa.int64()),
        "b": pa.array([i % 50 for i in range(1000)], pa.int32()),
        "s": [f"{'x' if i % 2 else 'y'}{i:05d}" for i in range(1000)],
    })
    ds = await alance.write_dataset(table, uri)
    ds = await alance.write_dataset(table, uri, mode="append")
    print(f"version {ds.version}: {await ds.count_rows()} rows, schema {ds.schema.names}")
    for v in await ds.versions():
        print(f"  version {v['version']} at {v['timestamp']:%Y-%m-%d %H:%M:%S}")

    old = await alance.open_dataset(uri, version=1)
    print(f"version 1 has {await old.count_rows()} rows")

    hits = await ds.to_table(columns=["id", "s"], filter="b < 10 AND s LIKE 'x%'", limit=5,
                             offset=2, with_row_id=True, with_row_address=True)
    print(hits.to_pandas() if hasattr(hits, "to_pandas") else hits)

    rows = 0
    async for batch in ds.scan(columns=["id"], batch_size=256):
        rows += batch.num_rows
    print(f"scanned {rows} rows in batches of at most 256")
    print((await ds.take([0, 5, 1999])).to_pydict())


if __name__ == "__main__":
    target = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/quickstart.lance"
    asyncio.run(main(target))
