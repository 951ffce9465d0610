"""Point reads: takes and short scans fetch only the bytes of the rows they return.

Covers three changes, with pylance as the oracle for every result:

* Lance 2.0 pages read row by row (``alance.format.v2.v20_rows``): a take of ``k`` rows (and a
  range read that covers part of a page) fetches the selected rows' values, validity bytes,
  fixed-size-list items and binary offsets/bytes, not whole pages.
* ``limit`` without a filter caps chunk sizes and schedules chunks only while rows are needed.
* Local range reads try ``preadv(RWF_NOWAIT)`` on the event loop and fall back to a reader
  thread; a file shorter than its metadata says is a typed error on either path.

Bytes are counted at two levels: the ranges the format layer asks the store for
(``DatasetStore.get_ranges``) and the ranges the backend actually reads after coalescing
(``ObstoreBackend.get_ranges``).
"""

from __future__ import annotations

import decimal
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
import alance.io.local_reads as local_reads
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.schema import LanceSchema
from alance.format.v2 import v20_rows
from alance.format.v2.container import open_file
from alance.format.v2.reader import V2FileReader
from alance.io.backends import ObstoreBackend
from alance.io.store import DEFAULT_COALESCE_BYTES, DatasetStore

MIXED_ROWS = 50_000
BIG_ROWS = 200_000


# -- recording reads ------------------------------------------------------------------------
@dataclass
class Reads:
    """Reads of data files: per store call the ranges asked for, and the ranges fetched."""

    requested: list[list[tuple[int, int]]] = field(default_factory=list)
    fetched: list[tuple[int, int]] = field(default_factory=list)
    inside_get: bool = False

    def clear(self) -> None:
        self.requested.clear()
        self.fetched.clear()

    @property
    def fetched_bytes(self) -> int:
        assert self.fetched, "no data file reads recorded (not through ObstoreBackend?)"
        return sum(e - s for s, e in self.fetched)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reads]:
    seen = Reads()
    store_get = DatasetStore.get_ranges
    backend_get = ObstoreBackend.get_ranges

    async def asked(self: DatasetStore, path: str, ranges: list[tuple[int, int]]):
        if path.startswith("data/"):
            seen.requested.append(list(ranges))
        return await store_get(self, path, ranges)

    async def fetched(self: ObstoreBackend, key: str, ranges, coalesce: int):
        if "/data/" in key:
            seen.fetched.extend(ranges)
        seen.inside_get = True  # (its own cached read is not counted again)
        try:
            return await backend_get(self, key, ranges, coalesce)
        finally:
            seen.inside_get = False

    store_many = DatasetStore.get_ranges_many
    backend_cached = ObstoreBackend.read_cached

    async def asked_many(self: DatasetStore, requests):
        # (ranges it passes on to get_ranges are recorded there)
        for path, ranges in requests:
            if path.startswith("data/") and isinstance(self.backend, ObstoreBackend) and \
                    not self.joins_ranges and \
                    backend_cached(self.backend, self._key(path), self._pieces(ranges)):
                seen.requested.append(list(ranges))
        return await store_many(self, requests)

    def cached(self: ObstoreBackend, key: str, ranges):
        got = backend_cached(self, key, ranges)
        if got is not None and "/data/" in key and not seen.inside_get:
            seen.fetched.extend(ranges)
        return got

    store_joined = DatasetStore.get_ranges_joined
    backend_local = ObstoreBackend.read_local

    async def asked_joined(self: DatasetStore, path: str, starts, ends):
        if path.startswith("data/"):
            seen.requested.append(list(zip(starts, ends, strict=True)))
        return await store_joined(self, path, starts, ends)

    async def fetched_local(self: ObstoreBackend, key: str, starts, ends, **kw):
        # (local files: ranges, or coalesced pieces, read straight into their place)
        if "/data/" in key:
            seen.fetched.extend(zip(starts, ends, strict=True))
        return await backend_local(self, key, starts, ends, **kw)

    monkeypatch.setattr(DatasetStore, "get_ranges_joined", asked_joined)
    monkeypatch.setattr(ObstoreBackend, "read_local", fetched_local)
    monkeypatch.setattr(DatasetStore, "get_ranges", asked)
    monkeypatch.setattr(DatasetStore, "get_ranges_many", asked_many)
    monkeypatch.setattr(ObstoreBackend, "get_ranges", fetched)
    monkeypatch.setattr(ObstoreBackend, "read_cached", cached)
    yield seen


def data_bytes(uri: str) -> int:
    return sum(p.stat().st_size for p in (Path(uri) / "data").iterdir())


def data_file(uri: str) -> Path:
    (path,) = (Path(uri) / "data").glob("*.lance")
    return path


# -- tables ---------------------------------------------------------------------------------
def _mixed_table(n: int, seed: int = 0) -> pa.Table:
    """Every kind of 2.0 leaf page: flat, nullable flat, binary with nulls and empties, large
    binary, fixed-size lists (plain, null rows, null items), bitmaps, dictionaries, all-null
    pages, lists and structs (whose items are read by row too)."""
    rng = np.random.default_rng(seed)
    lens = rng.integers(0, 4, n)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    n_items = int(offsets[-1])
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "i32": pa.array(rng.integers(-1000, 1000, n).astype(np.int32), mask=rng.random(n) < 0.2),
        "s": pa.array([None if i % 7 == 3 else "" if i % 11 == 5 else f"s{i}-" + "x" * (i % 13)
                       for i in range(n)], pa.string()),
        "ls": pa.array([None if i % 9 == 1 else f"large-{i}" * (i % 3) for i in range(n)],
                       pa.large_string()),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)),
                                                 8),
        "vec_null_rows": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 8, dtype=np.float32)), 8, mask=pa.array(rng.random(n) < 0.1)),
        "vec_null_items": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 4, dtype=np.float32), mask=rng.random(n * 4) < 0.1), 4),
        "bin": pa.array([None if i % 13 == 0 else bytes([i % 256]) * (i % 5) for i in range(n)],
                        pa.binary()),
        "flag": pa.array(rng.random(n) < 0.5, mask=rng.random(n) < 0.1),
        "u8": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
        "f16": pa.array(rng.random(n).astype(np.float16)),
        "ts": pa.array(rng.integers(0, 10**12, n), pa.timestamp("us")),
        "dec": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
        "fsb": pa.array([i.to_bytes(4, "little") for i in range(n)], pa.binary(4)),
        "low": pa.array([["a", "bb", "", None][i % 4] for i in range(n)]),
        "dict": pa.array([["x", "yy", "zzz"][i % 3] for i in range(n)]).dictionary_encode(),
        "all_null": pa.nulls(n, pa.int32()),
        "half_null": pa.array([None if i < n // 2 else i for i in range(n)], pa.int64()),
        "li": pa.ListArray.from_arrays(pa.array(offsets),
                                       pa.array(rng.integers(0, 100, n_items).astype(np.int32)),
                                       mask=pa.array(rng.random(n) < 0.1)),
        "lstr": pa.ListArray.from_arrays(pa.array(offsets), pa.array(
            [f"e{j}" if j % 5 else None for j in range(n_items)])),
        "st": pa.StructArray.from_arrays(
            [pa.array(np.arange(n, dtype=np.int32)),
             pa.array([f"t{i}" if i % 6 else None for i in range(n)])], names=["a", "b"]),
    })


@pytest.fixture(scope="module")
def mixed_table() -> pa.Table:
    return _mixed_table(MIXED_ROWS)


def _big_table(n: int) -> pa.Table:
    rng = np.random.default_rng(7)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "s": pa.array([f"row-{i:08d}-abcdefghijklmnopq" for i in range(n)]),  # 30 chars
        "v": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)),
                                               32),
    })


@pytest.fixture(scope="module")
def big_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """200k rows (int64, 30-char string, 32-float vector) in one file per version."""
    table = _big_table(BIG_ROWS)
    root = tmp_path_factory.mktemp("big")
    out = {}
    for version in ("2.0", "2.1"):
        uri = str(root / f"v{version}")
        lance.write_dataset(table, uri, data_storage_version=version)
        out[version] = uri
    return out


def _write(table: pa.Table, uri: str, version: str, batch_rows: int | None = None,
           **kwargs) -> str:
    """Write with pylance; ``batch_rows`` feeds small batches, which makes 2.0 pages small
    (many pages per column, so reads cross page boundaries)."""
    data = table if batch_rows is None else pa.RecordBatchReader.from_batches(
        table.schema, table.to_batches(max_chunksize=batch_rows))
    lance.write_dataset(data, uri, data_storage_version=version, **kwargs)
    return uri


def assert_same(ours: pa.Table, theirs: pa.Table) -> None:
    """Same schema and, column by column, the same values (and nulls)."""
    assert ours.schema == theirs.schema
    for name in theirs.column_names:
        a, b = ours[name].combine_chunks(), theirs[name].combine_chunks()
        if pa.types.is_dictionary(b.type):
            # dictionaries may be laid out differently; the values must agree
            assert a.to_pylist() == b.to_pylist(), name
        else:
            assert a.equals(b), name


# -- a. takes and range reads return exactly what pylance returns ----------------------------
@pytest.mark.parametrize("batch_rows", [None, 777], ids=["one-batch", "many-pages"])
@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
async def test_take_and_slices_match_pylance(tmp_path: Path, mixed_table: pa.Table,
                                             version: str, batch_rows: int | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _write(mixed_table, str(tmp_path / "ds"), version, batch_rows)
    theirs = lance.dataset(uri)
    ours = await alance.open_dataset(uri)
    by_rows = 0
    read_rows = v20_rows.read_rows

    def counting(*args, **kwargs):
        nonlocal by_rows
        by_rows += 1
        return (yield from read_rows(*args, **kwargs))

    monkeypatch.setattr(v20_rows, "read_rows", counting)
    n = MIXED_ROWS
    rng = np.random.default_rng(11)
    # unsorted, with repeats, both ends, page and byte boundaries
    idx = [*rng.integers(0, n, 300).tolist(), 0, n - 1, 0, 1, 7, 8, 9, 776, 777, 778, 1023,
           1024, n - 1, 5, 3, 3, 25_000, 24_999]
    assert_same(await ours.take(idx), theirs.take(idx))
    # a projection in another order, rows that are null or empty strings only
    cols = ["s", "vec_null_items", "i32"]
    nulls_and_empties = [3, 5, 10, 3, 16, 5]
    assert_same(await ours.take(nulls_and_empties, columns=cols),
                theirs.take(nulls_and_empties, columns=cols))
    assert_same(await ours.take([], columns=cols), theirs.take([], columns=cols))
    if version == "2.0":
        assert by_rows > 0  # the row-by-row path served the take
    # range reads that start and end inside pages (and across page boundaries)
    for offset, limit in [(0, 10), (5000, 10), (999, 3), (776, 2), (12_345, 4321),
                          (n - 5, 10)]:
        assert_same(await ours.to_table(limit=limit, offset=offset),
                    theirs.to_table(limit=limit, offset=offset))


@pytest.mark.parametrize("share", [0.4, 0.9])
@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1"])
async def test_dense_takes_match_pylance(tmp_path: Path, mixed_table: pa.Table, version: str,
                                         share: float) -> None:
    """Takes of most rows: neighbouring rows' bytes are read as one range and the rows
    picked out of it (legacy and 2.0 row plans), unsorted and repeated rows included."""
    uri = _write(mixed_table, str(tmp_path / "ds"), version, 777)
    theirs = lance.dataset(uri)
    ours = await alance.open_dataset(uri)
    rng = np.random.default_rng(int(share * 10))
    idx = rng.choice(MIXED_ROWS, int(MIXED_ROWS * share), replace=False)
    idx = np.concatenate([idx, idx[:50]])
    assert_same(await ours.take(idx), theirs.take(idx))


# -- b. a take of k rows of a 2.0 file reads about k rows' bytes ----------------------------
def _file_take(path: Path, idx: list[int], names: list[str],
               ) -> tuple[pa.RecordBatch, list[list[tuple[int, int]]]]:
    """Take ``idx`` straight from one data file without coalescing: the batch and the
    ranges the plan asked for, step by step."""
    data = path.read_bytes()
    file = run_plan(open_file(len(data)), fetch_from(data))
    assert file.schema is not None
    reader = V2FileReader(file, file.schema)
    steps: list[list[tuple[int, int]]] = []

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        steps.append(list(ranges))
        return fetch_from(data)(ranges)

    projection = LanceSchema([file.schema.field(n) for n in names])
    return run_plan(reader.take(idx, projection), fetch), steps


async def test_v20_take_reads_only_the_rows(big_datasets: dict[str, str], reads: Reads) -> None:
    uri = big_datasets["2.0"]
    ours = await alance.open_dataset(uri)
    theirs = lance.dataset(uri)
    cols = ["id", "s", "v"]
    await ours.take([0], columns=cols)  # opens the file: its metadata is then remembered
    idx = np.random.default_rng(3).choice(BIG_ROWS, 10, replace=False).tolist()
    reads.clear()
    got = await ours.take(idx, columns=cols)
    assert_same(got, theirs.take(idx, columns=cols))
    # Fetched (ranges closer than 64 KiB are read as one): far below the ~35 MB of whole
    # pages the old reader fetched.
    assert reads.fetched_bytes < 1_500_000, reads.fetched_bytes
    assert len(reads.requested) <= 2, reads.requested  # one request per plan step
    assert all(len(call) <= 2 * len(idx) * len(cols) for call in reads.requested)

    # What the plan asks for, before any coalescing: per row 8 (id) + 16 (the string's two
    # end offsets) + 30 (its bytes) + 128 (the vector) bytes, in two steps (values and string
    # ends, then string bytes) of at most two ranges per row and column.
    batch, steps = _file_take(data_file(uri), idx, cols)
    assert pa.Table.from_batches([batch]).equals(got)
    assert len(steps) == 2, steps
    assert all(len(step) <= 2 * len(idx) * len(cols) for step in steps), steps
    asked = sum(e - s for step in steps for s, e in step)
    assert asked == len(idx) * (8 + 16 + 30 + 128), asked
    # coalescing (reader and store, 64 KiB gaps each) adds at most two gaps per range
    n_ranges = sum(len(step) for step in steps)
    assert reads.fetched_bytes <= asked + 2 * n_ranges * DEFAULT_COALESCE_BYTES


async def test_v20_take_reads_validity_bytes_not_pages(tmp_path: Path, mixed_table: pa.Table,
                                                       reads: Reads) -> None:
    uri = _write(mixed_table, str(tmp_path / "ds"), "2.0")
    ours = await alance.open_dataset(uri)
    cols = ["i32", "s", "vec_null_items", "bin"]
    await ours.take([0], columns=cols)
    idx = [40_000, 17, 31_337, 9_999, 123, 17]
    want = lance.dataset(uri).take(idx, columns=cols)
    reads.clear()
    assert_same(await ours.take(idx, columns=cols), want)
    assert reads.fetched_bytes < 0.1 * data_bytes(uri)
    batch, steps = _file_take(data_file(uri), idx, cols)
    assert_same(pa.Table.from_batches([batch]), want)
    # per distinct row: i32 validity byte + 4; string ends 16 + <= 20 bytes; 4 float items
    # (16 bytes) and their validity byte; binary ends 16 + <= 4 bytes
    per_row = (1 + 4) + (16 + 20) + (16 + 1) + (16 + 4)
    asked = sum(e - s for step in steps for s, e in step)
    assert 0 < asked <= len(set(idx)) * per_row, asked


# -- c. limit without a filter reads what it returns ------------------------------------------
@pytest.mark.parametrize("version", ["2.0", "2.1"])
async def test_limit_reads_a_small_part(big_datasets: dict[str, str], version: str,
                                        reads: Reads) -> None:
    uri = big_datasets[version]
    theirs = lance.dataset(uri)
    total = data_bytes(uri)
    for offset in (None, 5000):
        ours = await alance.open_dataset(uri)
        reads.clear()
        got = await ours.to_table(limit=10, offset=offset)
        assert_same(got, theirs.to_table(limit=10, offset=offset))
        assert got["id"].to_pylist() == list(range(offset or 0, (offset or 0) + 10))
        # the old scan read 64k-row chunks, four ahead: the whole file
        assert reads.fetched_bytes < 0.1 * total, (offset, reads.fetched_bytes, total)
    reads.clear()
    await ours.to_table(limit=10)
    assert reads.fetched_bytes < 0.02 * total  # one row group (1024 rows) and no read ahead


async def test_limit_with_offset_into_a_later_fragment(tmp_path: Path, reads: Reads) -> None:
    """Chunks are sized by the rows left after skipped fragments, not the whole offset."""
    uri = _write(_big_table(BIG_ROWS), str(tmp_path / "ds"), "2.1", max_rows_per_file=50_000)
    ours = await alance.open_dataset(uri)
    got = await ours.to_table(limit=10, offset=150_000)  # the first 10 rows of fragment 3
    assert_same(got, lance.dataset(uri).to_table(limit=10, offset=150_000))
    reads.clear()
    await ours.to_table(limit=10, offset=150_000)
    assert reads.fetched_bytes < 0.02 * data_bytes(uri), reads.fetched_bytes


@pytest.mark.parametrize("version", ["2.0", "2.1"])
async def test_limit_with_deletions_schedules_more_chunks(tmp_path: Path, version: str) -> None:
    table = _big_table(40_000).select(["id", "s"])
    uri = _write(table, str(tmp_path / "ds"), version, max_rows_per_file=10_000)
    theirs = lance.dataset(uri)
    theirs.delete("id % 2 = 0")  # every chunk comes up half short
    theirs = lance.dataset(uri)
    ours = await alance.open_dataset(uri)
    for offset, limit in [(None, 3000), (None, 10), (1000, 3000), (7000, 3000),
                          (19_995, 10), (20_000, 10), (0, 40_000)]:
        got = await ours.to_table(limit=limit, offset=offset)
        want = theirs.to_table(limit=limit, offset=offset)
        assert_same(got, want)
        assert got.num_rows == max(0, min(limit, 20_000 - (offset or 0)))
    batches = [b async for b in ours.to_batches(limit=3000, batch_size=1000)]
    assert sum(b.num_rows for b in batches) == 3000
    assert all(0 < b.num_rows <= 1000 for b in batches)
    assert pa.Table.from_batches(batches)["id"].to_pylist() == list(range(1, 6000, 2))


# -- d. the non-blocking local read and its thread fallback ----------------------------------
def _nowait_works(path: Path) -> bool:
    """Whether ``preadv(RWF_NOWAIT)`` serves cached reads of this file system."""
    if not getattr(os, "RWF_NOWAIT", 0):
        return False
    path.read_bytes()  # into the page cache
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = bytearray(16)
        return os.preadv(fd, [buf], 0, os.RWF_NOWAIT) == 16
    except OSError:
        return False
    finally:
        os.close(fd)


@pytest.fixture
def read_paths(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of range reads served on the loop ("inline") and by a thread ("thread")."""
    counts = {"inline": 0, "thread": 0}
    cached, threaded = local_reads.read_cached_ranges, local_reads.read_ranges

    def inline(path, ranges):
        out = cached(path, ranges)
        counts["inline"] += out is not None
        return out

    def thread(path, ranges):
        counts["thread"] += 1
        return threaded(path, ranges)

    local = local_reads.read_local_ranges

    def local_read(path, starts, ends, nowait, joined=True):  # ranges read into place
        out = local(path, starts, ends, nowait, joined)
        counts["inline" if nowait else "thread"] += out is not None
        return out

    monkeypatch.setattr(local_reads, "read_cached_ranges", inline)
    monkeypatch.setattr(local_reads, "read_ranges", thread)
    monkeypatch.setattr(local_reads, "read_local_ranges", local_read)
    return counts


def test_cached_range_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "blob"
    payload = bytes(range(256)) * 64  # 16 KiB
    path.write_bytes(payload)
    ranges = [(0, 10), (100, 100), (5000, 9000), (16_000, 16_384), (3, 4)]
    want = [payload[s:e] for s, e in ranges]
    assert local_reads.read_ranges(str(path), ranges) == want
    with pytest.raises(alance.CorruptFileError):
        local_reads.read_ranges(str(path), [(16_000, 16_385)])
    # past the end or missing: not answered inline (the thread path reports the error)
    assert local_reads.read_cached_ranges(str(path), [(0, 10), (16_380, 16_390)]) is None
    assert local_reads.read_cached_ranges(str(tmp_path / "missing"), [(0, 1)]) is None
    if _nowait_works(path):
        got = local_reads.read_cached_ranges(str(path), ranges)
        assert got is not None and [bytes(g) for g in got] == want
    monkeypatch.setattr(local_reads, "INLINE_READ_BYTES", 100)
    assert local_reads.read_cached_ranges(str(path), [(0, 101)]) is None
    monkeypatch.setattr(local_reads, "INLINE_READ_BYTES", 1024 * 1024)
    monkeypatch.setattr(local_reads, "NOWAIT", 0)
    assert local_reads.read_cached_ranges(str(path), [(0, 10)]) is None


@pytest.mark.parametrize("version", ["2.0", "2.1"])
async def test_inline_and_thread_reads_agree(tmp_path: Path, mixed_table: pa.Table,
                                             version: str, read_paths: dict[str, int],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    uri = _write(mixed_table, str(tmp_path / "ds"), version)
    theirs = lance.dataset(uri)
    idx = [49_999, 12, 31_000, 12, 7, 25_001]
    small = ["id", "i32", "s", "vec"]  # a take of these reads a few KiB
    want, want_small = theirs.take(idx), theirs.take(idx, columns=small)
    want_slice = theirs.to_table(limit=100, offset=4000)
    ours = await alance.open_dataset(uri)
    await ours.take([0])  # metadata read and remembered; file in the page cache
    assert_same(await ours.take(idx), want)
    read_paths.update(inline=0, thread=0)
    assert_same(await ours.take(idx, columns=small), want_small)
    if _nowait_works(data_file(uri)):  # cached and small: served on the event loop
        assert read_paths["inline"] > 0 and read_paths["thread"] == 0, read_paths
    for name, value in [("NOWAIT", 0), ("INLINE_READ_BYTES", 1)]:
        with monkeypatch.context() as m:
            m.setattr(local_reads, name, value)
            read_paths.update(inline=0, thread=0)
            assert_same(await ours.take(idx), want)
            assert_same(await ours.take(idx, columns=small), want_small)
            assert_same(await ours.to_table(limit=100, offset=4000), want_slice)
            assert read_paths["inline"] == 0 and read_paths["thread"] > 0, (name, read_paths)


# -- d/e. truncated data files are typed errors, on both read paths --------------------------
@pytest.mark.parametrize("warm", [True, False], ids=["metadata-cached", "cold"])
@pytest.mark.parametrize("version", ["2.0", "2.1"])
async def test_truncated_data_file_is_corrupt(tmp_path: Path, version: str, warm: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    n = 50_000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "s": pa.array([f"value-{i}" for i in range(n)])})
    uri = _write(table, str(tmp_path / "ds"), version)
    ours = await alance.open_dataset(uri)
    if warm:
        assert (await ours.take([0]))["id"].to_pylist() == [0]
    path = data_file(uri)
    os.truncate(path, path.stat().st_size // 2)
    for nowait in (local_reads.NOWAIT, 0):  # the inline path (where available), then threads
        monkeypatch.setattr(local_reads, "NOWAIT", nowait)
        for idx in ([n - 1], [0, n - 1], [n - 1, 3, n - 2]):
            with pytest.raises(alance.CorruptFileError):
                await ours.take(idx)
        with pytest.raises(alance.CorruptFileError):
            await ours.to_table()
    if warm:  # rows whose bytes survived still read correctly
        assert (await ours.take([5, 1], columns=["id"]))["id"].to_pylist() == [5, 1]


async def test_v20_inconsistent_binary_offsets_are_corrupt(tmp_path: Path) -> None:
    n = 5000
    table = pa.table({"id": pa.array(np.arange(n, dtype=np.int64)),
                      "s": pa.array([f"value-{i}" for i in range(n)])})
    uri = _write(table, str(tmp_path / "ds"), "2.0")
    path = data_file(uri)
    raw = bytearray(path.read_bytes())
    file = run_plan(open_file(len(raw)), fetch_from(bytes(raw)))
    (page,) = file.column(1).pages
    assert page.encoding.WhichOneof("array_encoding") == "binary"
    ends_pos, ends_size = page.buffers[page.encoding.binary.indices.nullable.no_nulls.values
                                       .flat.buffer.buffer_index]
    assert ends_size == 8 * n
    bad = 1000  # row 1000 now ends at 0, before it starts
    raw[ends_pos + 8 * bad: ends_pos + 8 * bad + 8] = (0).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    ours = await alance.open_dataset(uri)
    assert (await ours.take([999, 3]))["s"].to_pylist() == ["value-999", "value-3"]
    with pytest.raises(alance.CorruptFileError):
        await ours.take([bad])  # the row path
    with pytest.raises(alance.CorruptFileError):
        await ours.take([5, bad, 4000])
    with pytest.raises(alance.CorruptFileError):
        await ours.to_table(columns=["s"])  # the whole-page path
