"""The streaming writer's memory is bounded by its buffers, not by the size of the input."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, resource, sys
    import numpy as np, pyarrow as pa
    import alance

    ROWS, BATCHES = 250_000, {batches}   # 8 MB per batch
    schema = pa.schema([("a", pa.int64()), ("b", pa.float64()), ("c", pa.int64()),
                        ("d", pa.float64())])

    async def stream():
        for i in range(BATCHES):
            col = np.full(ROWS, i, dtype=np.int64)
            yield pa.RecordBatch.from_arrays(
                [pa.array(col), pa.array(col * 0.5), pa.array(col), pa.array(col * 2.0)],
                schema=schema)

    async def main():
        ds = await alance.write_dataset(stream(), sys.argv[1], max_rows_per_file=2_000_000)
        assert await ds.count_rows() == ROWS * BATCHES

    asyncio.run(main())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
""")


def peak_mb(tmp_path: Path, batches: int) -> int:
    script = tmp_path / "w.py"
    script.write_text(SCRIPT.format(batches=batches))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / f"d{batches}.lance")],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_peak_memory_does_not_grow_with_input(tmp_path: Path) -> None:
    small = peak_mb(tmp_path, 4)     # 32 MB of input
    large = peak_mb(tmp_path, 64)    # 512 MB of input
    # Buffering the input would add ~480 MB; allow generous slack for allocator noise.
    assert large - small < 120, (small, large)
