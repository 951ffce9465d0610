"""Peak memory of alance writing a large generated stream to S3 with default settings.

    python benchmarks/s3_write_rss.py [--gb 5] [--sizes 0.5,2] [--server seaweedfs|moto]

The S3 server runs in a child process (SeaweedFS ``weed mini`` by default, keeping objects on
disk; or the ``moto_server`` command, which keeps them in its own memory), and each write runs in
a fresh child interpreter, so the peak RSS reported (``ru_maxrss`` of that child) is alance's
alone: the generated batches, the encoder and the upload buffers. The child first reports its
RSS after imports (the baseline every Python process with pyarrow pays) and then writes
``--gb`` GB as a stream of ~8 MB record batches (four 8-byte columns), with alance's default
write settings, checks the row count of the committed dataset, and reports its peak RSS.

``--sizes`` runs smaller sizes first to show how the peak scales with the input (it should not).
The issue's target: below 1 GB for 5 GB of input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.s3_servers import MotoServer, SeaweedServer  # noqa: E402

BUCKET = "rss"

WRITER = textwrap.dedent("""
    import asyncio, json, resource, sys, time
    import numpy as np, pyarrow as pa
    import alance

    uri, total_bytes, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    ROWS = 262_144                      # rows per generated batch: 8 MiB of four 8-byte columns
    batches = max(1, total_bytes // (ROWS * 32))
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64()), ("c", pa.int64()),
                        ("d", pa.float64())])

    def rss_mb():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    base = rss_mb()

    async def stream():
        for i in range(batches):
            a = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
            yield pa.RecordBatch.from_arrays(
                [pa.array(a), pa.array(a * 0.5), pa.array(a ^ 0x5555), pa.array(a * 0.25)],
                schema=schema)

    async def main():
        start = time.perf_counter()
        ds = await alance.write_dataset(stream(), uri, storage_options=options)
        took = time.perf_counter() - start
        rows = await ds.count_rows()
        assert rows == batches * ROWS, (rows, batches * ROWS)
        files = sum(len(f.data_files()) for f in ds.get_fragments())
        size = sum(f.file_size_bytes or 0 for frag in ds.get_fragments()
                   for f in frag.data_files())
        return took, rows, files, size

    took, rows, files, size = asyncio.run(main())
    print(json.dumps({"baseline_mb": base, "peak_mb": rss_mb(), "seconds": took, "rows": rows,
                      "files": files, "bytes": size}))
""")


def run_writer(uri: str, gb: float, options: dict[str, str]) -> dict[str, float]:
    """Write ``gb`` GB in a fresh interpreter; its JSON report."""
    out = subprocess.run([sys.executable, "-c", WRITER, uri, str(int(gb * 2**30)),
                          json.dumps(options)],
                         capture_output=True, text=True, cwd=ROOT, timeout=3600)
    if out.returncode != 0:
        raise SystemExit(f"writer failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Run the writes and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gb", type=float, default=5.0, help="size of the largest write")
    p.add_argument("--sizes", default="0.5,2", help="smaller sizes to run first (GB, commas)")
    p.add_argument("--server", choices=("seaweedfs", "moto"), default="seaweedfs")
    args = p.parse_args()
    sizes = [float(s) for s in args.sizes.split(",") if s] + [args.gb]

    with tempfile.TemporaryDirectory(prefix="alance-rss-") as tmp:
        server = (MotoServer(mode="subprocess").start() if args.server == "moto"
                  else SeaweedServer(Path(tmp) / "weed").start((BUCKET,)))
        try:
            target = server.target(BUCKET)  # moto creates the bucket here
            head = (f"{'input GB':>8} {'files':>6} {'written':>9} {'seconds':>8} {'MB/s':>6} "
                    f"{'RSS after imports':>18} {'peak RSS':>9}")
            print(f"server {args.server}; alance default write settings")
            print(head)
            print("-" * len(head))
            for gb in sizes:
                r = run_writer(target.uri(f"w{gb:g}.lance"), gb, target.storage_options)
                print(f"{gb:>8g} {r['files']:>6} {r['bytes'] / 2**30:>7.2f}GB "
                      f"{r['seconds']:>8.1f} {r['bytes'] / 2**20 / r['seconds']:>6.0f} "
                      f"{r['baseline_mb']:>15.0f} MB {r['peak_mb']:>6.0f} MB", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
