"""Fuzz the 2.x file reader with mutated copies of real pylance-written files.

    python benchmarks/fuzz_v2.py [--cases 3000] [--versions 2.0,2.1,2.2] [--timeout 10]
                                 [--seed 1] [--rows 600]

pylance writes one data file per file version from a table that covers many types and
encodings. Each case mutates one of them (bit flips, random bytes, truncation, corrupted
footer / offset-table / column-metadata numbers, zeroed or shuffled ranges) and reads the
result through alance's pure read plans (open, full read, take of a few rows).

Every case must end with data or a typed :class:`alance.errors.AlanceError`. Any other
exception, a crash of the worker process or a case running past ``--timeout`` seconds is a
failure: the script prints each distinct failure (with a reproducer seed) and exits 1.
Cases run in a worker process with a memory cap, so absurd sizes show up as typed errors
(or failures) instead of swapping the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import random
import resource
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MEMORY_LIMIT = 3 * 1024**3  # bytes of address space a worker may use


def make_table(rows: int, seed: int = 5) -> Any:
    """A table touching many 2.x encodings: ints (bit-packed), floats, strings (FSST,
    dictionary), nulls, lists, structs, fixed-size lists, constants and long values."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 1_000_000, rows)
    nulls = rng.random(rows) < 0.2
    small = rng.integers(0, 5, rows)
    words = [f"w{v}_{'z' * (v % 11)}" for v in range(300)]
    return pa.table({
        "i64": pa.array(ints),
        "i32n": pa.array(ints.astype(np.int32), mask=nulls),
        "u8": pa.array(small.astype(np.uint8)),
        "f64": pa.array(rng.standard_normal(rows)),
        "f16": pa.array(rng.random(rows).astype(np.float16)),
        "b": pa.array(rng.random(rows) < 0.3),
        "s": pa.array([words[v % 300] for v in ints.tolist()]),
        "s_low": pa.array([["", "a", "bb"][v % 3] if v < 4 else None for v in small.tolist()]),
        "lb": pa.array([bytes([v % 256]) * (v % 7) for v in ints.tolist()], pa.large_binary()),
        "const": pa.array(np.full(rows, 7, np.int32)),
        "ts": pa.array(ints * 1000, pa.timestamp("us")),
        "vec": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(rows * 4).astype(np.float32)), 4),
        "wide": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(rows * 80).astype(np.float32)), 80),
        "li": pa.array([None if k else list(range(v % 4)) for v, k in
                        zip(ints.tolist(), nulls.tolist(), strict=True)], pa.list_(pa.int64())),
        "st": pa.StructArray.from_arrays(
            [pa.array(small.astype(np.int16)), pa.array([f"y{v}" for v in small.tolist()])],
            names=["x", "y"]),
        "long": pa.array([f"{v}" * 3000 if v % 50 == 0 else "s" for v in ints.tolist()]),
    })


def write_files(rows: int, versions: list[str], root: Path) -> dict[str, tuple[bytes, Any]]:
    """The data file pylance writes for each version, and the table's Lance schema."""
    import lance

    from alance.format.schema import LanceSchema

    table = make_table(rows)
    schema = LanceSchema.from_arrow(table.schema)
    out = {}
    for v in versions:
        uri = root / f"v{v}"
        lance.write_dataset(table, str(uri), data_storage_version=v)  # type: ignore[arg-type]
        data = next((uri / "data").glob("*.lance")).read_bytes()
        out[v] = (data, schema)
    return out


# -- mutations ---------------------------------------------------------------------------------


def _metadata_start(data: bytes) -> int:
    """Where the column metadata starts (the footer's first number), clamped to the file."""
    if len(data) < 40:
        return 0
    return min(struct.unpack_from("<Q", data, len(data) - 40)[0], len(data))


def mutate(data: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random mutation of ``data`` and its name."""
    buf = bytearray(data)
    n = len(buf)
    meta = _metadata_start(data)
    kind = rng.choice(["bitflip", "bytes", "truncate", "footer", "table", "meta_varint",
                       "zero_range", "swap_ranges", "page_bytes"])
    if kind == "bitflip":
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(n)
            buf[pos] ^= 1 << rng.randrange(8)
    elif kind == "bytes":
        for _ in range(rng.randint(1, 16)):
            pos = rng.randrange(meta, n) if rng.random() < 0.7 else rng.randrange(n)
            buf[pos] = rng.randrange(256)
    elif kind == "truncate":
        cut = rng.randrange(n) if rng.random() < 0.5 else n - rng.randrange(1, min(n, 4096))
        buf = buf[:cut]
    elif kind == "footer":
        # One of the footer's numbers: positions, counts or version.
        offset = rng.choice([0, 8, 16, 24, 28, 32, 34])
        width = 8 if offset < 24 else 4 if offset < 32 else 2
        value = rng.choice([0, 1, n, n * 2, 2**31, 2**(8 * width) - 1, rng.randrange(n)])
        struct.pack_into({8: "<Q", 4: "<I", 2: "<H"}[width], buf, n - 40 + offset,
                         value % 2**(8 * width))
    elif kind == "table":
        # An entry of the column-metadata or global-buffer offset tables.
        cmo, gbo = struct.unpack_from("<QQ", data, n - 32)
        start = rng.choice([cmo, gbo])
        pos = start + 8 * rng.randrange(8)
        if pos + 8 <= n - 40:
            value = rng.choice([0, n, 2**40, rng.randrange(n), struct.unpack_from(
                "<Q", data, pos)[0] + rng.choice([-8, -1, 1, 8, 4096])])
            struct.pack_into("<Q", buf, pos, value % 2**64)
    elif kind == "meta_varint":
        # Protobuf numbers in the column metadata: page buffer offsets, sizes, row counts.
        for _ in range(rng.randint(1, 3)):
            if meta < n - 40:
                pos = rng.randrange(meta, n - 40)
                buf[pos] = rng.choice([0x00, 0x7F, 0xFF, 0x80, buf[pos] ^ 0x40,
                                       (buf[pos] + 1) & 0xFF])
    elif kind == "zero_range":
        start = rng.randrange(n)
        size = min(rng.randint(1, 512), n - start)
        buf[start: start + size] = bytes(size)
    elif kind == "swap_ranges":
        a, b, size = rng.randrange(n), rng.randrange(n), rng.randint(1, 256)
        size = min(size, n - a, n - b)
        buf[a: a + size], buf[b: b + size] = data[b: b + size], data[a: a + size]
    else:  # page_bytes: scramble inside the data pages only
        if meta > 0:
            for _ in range(rng.randint(1, 32)):
                buf[rng.randrange(meta)] = rng.randrange(256)
    return bytes(buf), kind


# -- the worker --------------------------------------------------------------------------------


def read_all(data: bytes, schema: Any) -> int:
    """Open ``data`` and read it fully and by a take; returns the rows read."""
    from alance.format.legacy.plan import fetch_from, run_plan
    from alance.format.v2.container import open_file
    from alance.format.v2.reader import V2FileReader

    fetch = fetch_from(data)
    file = run_plan(open_file(len(data)), fetch)
    reader = V2FileReader(file, schema)
    batch = run_plan(reader.read_range(0, file.num_rows), fetch)
    if file.num_rows:
        rows = sorted({0, file.num_rows // 2, file.num_rows - 1})
        run_plan(reader.take(rows), fetch)
    return int(batch.num_rows)


def _worker(conn: Any, files: dict[str, tuple[bytes, Any]]) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    from alance.errors import AlanceError

    while True:
        msg = conn.recv()
        if msg is None:
            return
        version, seed = msg
        data, schema = files[version]
        mutated, kind = mutate(data, random.Random(seed))
        try:
            read_all(mutated, schema)
            conn.send(("ok", kind, ""))
        except AlanceError as exc:
            conn.send(("typed", kind, type(exc).__name__))
        except BaseException as exc:  # anything else is what the fuzzer looks for
            conn.send(("bug", kind, "".join(traceback.format_exception(exc))[-3000:]))


class Worker:
    """A worker process that can be replaced after a crash or a hang."""

    def __init__(self, files: dict[str, tuple[bytes, Any]]) -> None:
        self.files = files
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # pylance's threads make forking unsafe
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, self.files), daemon=True)
        self.proc.start()

    def run(self, version: str, seed: int, timeout: float) -> tuple[str, str, str]:
        self.conn.send((version, seed))
        if not self.conn.poll(timeout):
            self.proc.kill()
            self.proc.join()
            self._start()
            return ("hang", "?", f"no answer within {timeout}s")
        try:
            result: tuple[str, str, str] = self.conn.recv()
            return result
        except EOFError:
            code = self.proc.exitcode
            self.proc.join()
            self._start()
            return ("crash", "?", f"worker died (exit code {code})")

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--cases", type=int, default=3000, help="cases per file version")
    parser.add_argument("--versions", default="2.0,2.1,2.2")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rows", type=int, default=600)
    args = parser.parse_args(argv)
    versions = args.versions.split(",")
    with tempfile.TemporaryDirectory(prefix="alance-fuzz-") as tmp:
        files = write_files(args.rows, versions, Path(tmp))
    for v, (data, schema) in files.items():
        read_all(data, schema)  # the intact files must read
        print(f"{v}: {len(data)} bytes", flush=True)
    worker = Worker(files)
    outcomes: Counter[tuple[str, str]] = Counter()
    failures: dict[str, tuple[str, int, str]] = {}
    t0 = time.perf_counter()
    try:
        for v in versions:
            for i in range(args.cases):
                seed = args.seed * 1_000_003 + i
                status, kind, detail = worker.run(v, seed, args.timeout)
                outcomes[(status, kind)] += 1
                if status in ("bug", "crash", "hang"):
                    key = detail.strip().splitlines()[-1] if detail.strip() else status
                    failures.setdefault(key, (v, seed, detail))
            done = sum(outcomes.values())
            print(f"{v}: {args.cases} cases ({done / (time.perf_counter() - t0):.0f}/s)",
                  flush=True)
    finally:
        worker.close()
    by_status: Counter[str] = Counter()
    for (status, _), count in outcomes.items():
        by_status[status] += count
    print("outcomes:", dict(by_status))
    print("by mutation:", {f"{s}/{k}": c for (s, k), c in sorted(outcomes.items())})
    for key, (v, seed, detail) in failures.items():
        print(f"\nFAILURE ({key}) version {v} seed {seed}:\n{detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
