"""The same API, blocking: for scripts, threads and Spark executors."""

from __future__ import annotations

import sys
import tempfile

import pyarrow as pa

from alance import sync as al


def main(uri: str) -> None:
    table = pa.table({"id": pa.array(range(100), pa.int64()), "s": [f"v{i}" for i in range(100)]})
    ds = al.write_dataset(table, uri)
    ds = al.write_dataset(table, uri, mode="append")
    print(ds.version, ds.count_rows(), ds.count_rows(filter="id >= 90"))
    print(ds.to_table(filter="id < 3").to_pydict())
    print(ds.take([1, 2, 199]).to_pydict())
    for batch in ds.scan(columns=["id"], batch_size=64):
        print("batch of", batch.num_rows)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp() + "/sync.lance")
