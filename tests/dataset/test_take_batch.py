"""Concurrent takes on one dataset object share reads (alance.dataset.query.take_batch.TakeBatcher).

Every take is checked against what pylance's ``take`` returns for the same indices and
projection, on datasets pylance wrote: file formats 2.1, 2.0 and legacy; one fragment, several
fragments, and several fragments with deleted rows (one fragment deleted entirely). The
batcher's shared reader (``ds._takes._read``) is wrapped to count reads, to hold them open
(cancellation tests) and to make them fail (error tests).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.query.take_batch import MAX_RUNNING, MAX_SHARED_TAKE
from alance.errors import AlanceError, CorruptFileError, InvalidInputError

ROWS = 3000
ROWS_PER_FILE = 700  # 5 fragments in the multi-fragment layouts
FORMATS = ["2.1", "2.0", "legacy"]
LAYOUTS = ["one", "multi", "deleted"]
PROJECTIONS: list[list[str] | None] = [None, ["id"], ["s", "id"], ["v", "s", "l"]]
#: Bound on waiting for a take in tests that could hang if the batcher lost a caller.
HANG = 30.0

Reader = Callable[[np.ndarray, Sequence[str] | None], Awaitable[pa.Table]]


def source_table() -> pa.Table:
    ids = np.arange(ROWS, dtype=np.int64)
    return pa.table({
        "id": pa.array(ids),
        "s": pa.array([None if i % 11 == 0 else f"row-{i}-" + "x" * (i % 17) for i in ids],
                      pa.string()),
        "v": pa.array(ids * 0.5, pa.float64()),
        "l": pa.array([None if i % 13 == 0 else list(range(int(i % 4))) for i in ids],
                      pa.list_(pa.int32())),
    })


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], str]:
    """URIs of the datasets pylance writes, by (format, layout)."""
    root = tmp_path_factory.mktemp("take_batch")
    table = source_table()
    out = {}
    for fmt in FORMATS:
        for layout in LAYOUTS:
            uri = str(root / f"{fmt}-{layout}.lance")
            kwargs: dict[str, Any] = {}
            if layout != "one":
                kwargs["max_rows_per_file"] = ROWS_PER_FILE
            lance.write_dataset(table, uri, data_storage_version=fmt, **kwargs)
            if layout == "deleted":
                lds = lance.dataset(uri)
                lds.delete("id % 5 = 2")
                lds.delete("id >= 1400 AND id < 2100")  # all of the third fragment
            out[(fmt, layout)] = uri
    return out


def live_rows(uri: str) -> int:
    return lance.dataset(uri).count_rows()


def expected(uri: str, idx: np.ndarray, columns: list[str] | None) -> pa.Table:
    return lance.dataset(uri).take(idx.tolist(), columns=columns)


def assert_same(got: pa.Table, want: pa.Table, columns: list[str] | None) -> None:
    if columns is not None:
        assert got.column_names == columns
    assert got.column_names == want.column_names
    assert got.num_rows == want.num_rows
    assert got.schema.equals(want.schema), (got.schema, want.schema)
    assert got.combine_chunks().equals(want.combine_chunks())


def requests(n: int, seed: int) -> list[tuple[np.ndarray, list[str] | None]]:
    """64 takes: unsorted, repeats within one, overlap between them, 1-row ones, one big."""
    rng = np.random.default_rng(seed)
    hot = rng.choice(n, size=40, replace=False)  # rows many requests ask for
    out: list[tuple[np.ndarray, list[str] | None]] = []
    for k in range(64):
        columns = PROJECTIONS[k % len(PROJECTIONS)]
        kind = k % 8
        if kind == 0:
            idx = rng.integers(0, n, 1)
        elif kind in (1, 2):  # overlapping hot rows with repeats
            idx = rng.choice(hot, size=int(rng.integers(2, 30)), replace=True)
        elif kind == 3:  # the first and last rows: spans every fragment
            idx = np.array([n - 1, 0, n // 2, n - 1, 1])
        elif kind == 4:  # a run across a fragment boundary, reversed
            start = int(rng.integers(0, n - 60))
            idx = np.arange(start, start + 60)[::-1]
        else:
            idx = rng.integers(0, n, int(rng.integers(2, 300)))
        out.append((idx.astype(np.int64), columns))
    big = rng.integers(0, n, MAX_SHARED_TAKE * 2)  # runs on its own, unsorted with repeats
    out[37] = (big.astype(np.int64), ["s", "id"])
    return out


def count_reads(ds: alance.LanceDataset) -> list[np.ndarray]:
    """Wrap the dataset's shared reader; the list collects the positions of every read."""
    calls: list[np.ndarray] = []
    inner: Reader = ds._takes._read

    async def counting(positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        calls.append(np.array(positions))
        return await inner(positions, columns)

    ds._takes._read = counting
    return calls


class Gate:
    """A shared reader that holds every read until released (reads still return real rows)."""

    def __init__(self, ds: alance.LanceDataset) -> None:
        self.inner: Reader = ds._takes._read
        self.release = asyncio.Event()
        self.started: list[np.ndarray] = []
        self.finished = 0
        ds._takes._read = self.read

    async def read(self, positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        self.started.append(np.array(positions))
        await self.release.wait()
        try:
            return await self.inner(positions, columns)
        finally:
            self.finished += 1

    async def until_started(self, n: int) -> None:
        async def wait() -> None:
            while len(self.started) < n:
                await asyncio.sleep(0)
        await asyncio.wait_for(wait(), HANG)


# -- 1. many concurrent takes, each exactly its own rows, sharing reads ------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("fmt", FORMATS)
async def test_concurrent_takes_match_pylance_and_share_reads(
        datasets: dict[tuple[str, str], str], fmt: str, layout: str) -> None:
    uri = datasets[(fmt, layout)]
    n = live_rows(uri)
    reqs = requests(n, seed=FORMATS.index(fmt) * 10 + LAYOUTS.index(layout))
    ds = await alance.open_dataset(uri)
    assert await ds.count_rows() == n
    calls = count_reads(ds)

    results = await asyncio.gather(*(ds.take(idx, columns=cols) for idx, cols in reqs))

    for (idx, cols), got in zip(reqs, results, strict=True):
        assert_same(got, expected(uri, idx, cols), cols)
    # The shared reader gets sorted unique positions only, and far fewer reads than takes.
    for positions in calls:
        assert np.all(np.diff(positions) > 0)
    assert 0 < len(calls) < len(reqs) // 4, len(calls)
    assert max(len(p) for p in calls) > max(len(np.unique(i)) for i, _ in reqs
                                            if len(i) <= MAX_SHARED_TAKE)

    # The same object keeps serving: a second wave, and single takes one after another.
    again = await asyncio.gather(*(ds.take(idx, columns=cols) for idx, cols in reqs[:16]))
    for (idx, cols), got in zip(reqs[:16], again, strict=True):
        assert_same(got, expected(uri, idx, cols), cols)
    for idx, cols in reqs[:4]:
        assert_same(await ds.take(idx, columns=cols), expected(uri, idx, cols), cols)


async def test_index_forms_and_empty_take(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    idx = np.array([n - 1, 3, 3, 0], dtype=np.int64)
    want = expected(uri, idx, ["id", "s"])
    forms: list[Any] = [idx, idx.tolist(), pa.array(idx), pa.chunked_array([idx[:2], idx[2:]]),
                        idx.astype(np.int32), idx.astype(np.uint64)]
    results = await asyncio.gather(*(ds.take(f, columns=["id", "s"]) for f in forms),
                                   ds.take([], columns=["id", "s"]))
    for got in results[:-1]:
        assert_same(got, want, ["id", "s"])
    assert results[-1].num_rows == 0
    assert results[-1].column_names == ["id", "s"]


# -- 2. one caller's bad request fails only that caller -----------------------------------------
async def test_bad_request_fails_only_its_caller(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    calls = count_reads(ds)
    good = [(np.array([5, 1, 5]), ["id"]), (np.array([n - 1, 0]), None),
            (np.array([2, n // 2]), ["s", "id"]), (np.array([7]), ["id"])]
    bad: list[tuple[Any, list[str] | None]] = [
        (np.array([1, n]), ["id"]),                 # one past the end
        (np.array([3, -1]), ["id"]),                # negative
        (np.array([2**63 + 5], dtype=np.uint64), ["id"]),  # wraps negative as int64
        (np.array([1, 2]), ["id", "nope"]),         # unknown column
        (np.array([1, 2]), ["nope"]),
        (np.array([1.5, 2.0]), ["id"]),             # not integers
        ("abc", ["id"]),
    ]
    calls_before = len(calls)
    mixed = [good[0], bad[0], good[1], bad[1], bad[2], good[2], bad[3], bad[4], bad[5], bad[6],
             good[3]]
    results = await asyncio.gather(*(ds.take(i, columns=c) for i, c in mixed),
                                   return_exceptions=True)
    for (idx, cols), got in zip(mixed, results, strict=True):
        if any(idx is b[0] for b in bad):
            assert isinstance(got, InvalidInputError), got
            assert isinstance(got, AlanceError)
        else:
            assert isinstance(got, pa.Table), got
            assert_same(got, expected(uri, idx, cols), cols)
    # Bad requests never reach the shared reader: the good ones of one projection share one.
    assert len(calls) - calls_before <= 3
    for positions in calls:
        assert positions.min() >= 0 and positions.max() < n


# -- 3. cancellation ---------------------------------------------------------------------------
async def test_cancel_before_the_read_starts(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.0", "multi")]
    ds = await alance.open_dataset(uri)
    calls = count_reads(ds)
    a = asyncio.create_task(ds.take([10, 2], columns=["id", "s"]))
    b = asyncio.create_task(ds.take([2999, 2998], columns=["id", "s"]))
    c = asyncio.create_task(ds.take([2, 1500], columns=["id", "s"]))
    await asyncio.sleep(0)  # all three queued, the shared read not yet started
    b.cancel()
    got_a, got_c = await asyncio.wait_for(asyncio.gather(a, c), HANG)
    with pytest.raises(asyncio.CancelledError):
        await b
    assert_same(got_a, expected(uri, np.array([10, 2]), ["id", "s"]), ["id", "s"])
    assert_same(got_c, expected(uri, np.array([2, 1500]), ["id", "s"]), ["id", "s"])
    assert len(calls) == 1
    assert 2999 not in calls[0]  # a caller that gave up before its read is not read for


async def test_cancel_while_the_shared_read_runs(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    gate = Gate(ds)
    reqs = [(np.array([4, 0, 4]), ["id"]), (np.array([n - 1]), ["id"]),
            (np.array([1, n // 2]), ["id"])]
    tasks = [asyncio.create_task(ds.take(i, columns=c)) for i, c in reqs]
    await gate.until_started(1)
    tasks[1].cancel()
    gate.release.set()
    got0, got2 = await asyncio.wait_for(asyncio.gather(tasks[0], tasks[2]), HANG)
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]
    assert_same(got0, expected(uri, *reqs[0]), ["id"])
    assert_same(got2, expected(uri, *reqs[2]), ["id"])
    assert len(gate.started) == 1
    # A later take works.
    idx = np.array([n - 2, 3])
    got = await asyncio.wait_for(ds.take(idx, columns=["s", "id"]), HANG)
    assert_same(got, expected(uri, idx, ["s", "id"]), ["s", "id"])


async def test_cancel_every_caller_of_running_reads(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("legacy", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    gate = Gate(ds)
    # A read with one caller, then one shared by two, then a big take on its own: all cancelled.
    alone = asyncio.create_task(ds.take([3, 1, 3], columns=["id"]))
    await gate.until_started(1)
    pair = [asyncio.create_task(ds.take([i, i + 1], columns=["id"])) for i in (5, 50)]
    await gate.until_started(2)
    big = asyncio.create_task(ds.take(np.arange(MAX_SHARED_TAKE + 1)[::-1], columns=["id"]))
    await gate.until_started(3)
    for t in (alone, *pair, big):
        t.cancel()
    results = await asyncio.gather(alone, *pair, big, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)
    gate.release.set()
    # The abandoned shared reads still finish; then the batcher serves new takes.
    reqs = [(np.array([n - 1, 0]), ["id"]), (np.array([9, 9]), None), (np.array([2]), ["id"])]
    got = await asyncio.wait_for(
        asyncio.gather(*(ds.take(i, columns=c) for i, c in reqs)), HANG)
    for (idx, cols), table in zip(reqs, got, strict=True):
        assert_same(table, expected(uri, idx, cols), cols)


async def test_cancel_while_waiting_behind_running_reads(
        datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "multi")]
    ds = await alance.open_dataset(uri)
    gate = Gate(ds)
    running = []
    for k in range(MAX_RUNNING):  # fill every read slot of the ["id"] projection
        running.append(asyncio.create_task(ds.take([k * 100], columns=["id"])))
        await gate.until_started(k + 1)
    waiting = [asyncio.create_task(ds.take(i, columns=["id"])) for i in ([2900, 7], [8, 7], [9])]
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(gate.started) == MAX_RUNNING  # the rest wait for a free slot
    waiting[1].cancel()
    gate.release.set()
    results = await asyncio.wait_for(
        asyncio.gather(*running, waiting[0], waiting[2]), HANG)
    with pytest.raises(asyncio.CancelledError):
        await waiting[1]
    for idx, table in zip([[0], [100], [2900, 7], [9]], results, strict=True):
        assert_same(table, expected(uri, np.array(idx), ["id"]), ["id"])
    assert not any(8 in p for p in gate.started)


# -- 4. a failing shared read reaches every caller of it ---------------------------------------
async def test_shared_read_failure_reaches_every_caller(
        datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    working: Reader = ds._takes._read
    failures = 0

    async def broken(positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        nonlocal failures
        await asyncio.sleep(0)
        if columns is not None and list(columns) == ["id"]:
            failures += 1
            raise CorruptFileError(f"bad page in read {failures}")
        return await working(positions, columns)

    ds._takes._read = broken
    reqs = requests(n, seed=4)
    results = await asyncio.wait_for(
        asyncio.gather(*(ds.take(i, columns=c) for i, c in reqs), return_exceptions=True), HANG)
    assert failures >= 1
    for (idx, cols), got in zip(reqs, results, strict=True):
        if cols == ["id"]:  # every caller of the failed reads sees the read's error
            assert isinstance(got, CorruptFileError), got
            assert str(got).startswith("bad page in read")
        else:  # other projections' reads are unaffected
            assert isinstance(got, pa.Table), got
            assert_same(got, expected(uri, idx, cols), cols)

    # Every read fails, the big take on its own included.
    async def all_broken(positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        raise CorruptFileError("everything is broken")

    ds._takes._read = all_broken
    results = await asyncio.wait_for(
        asyncio.gather(*(ds.take(i, columns=c) for i, c in reqs), return_exceptions=True), HANG)
    assert all(isinstance(r, CorruptFileError) and str(r) == "everything is broken"
               for r in results), results

    # Restored, the batcher serves every projection again.
    ds._takes._read = working
    results = await asyncio.wait_for(
        asyncio.gather(*(ds.take(i, columns=c) for i, c in reqs)), HANG)
    for (idx, cols), got in zip(reqs, results, strict=True):
        assert_same(got, expected(uri, idx, cols), cols)


async def test_failure_while_others_wait_for_a_slot(datasets: dict[tuple[str, str], str]) -> None:
    """A failed read frees its slot: the takes queued behind it still run."""
    uri = datasets[("2.0", "deleted")]
    n = live_rows(uri)
    ds = await alance.open_dataset(uri)
    gate = Gate(ds)
    working = gate.inner

    async def first_reads_fail(positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        if len(gate.started) <= MAX_RUNNING:
            raise CorruptFileError("first reads fail")
        return await working(positions, columns)

    gate.inner = first_reads_fail
    first = []
    for k in range(MAX_RUNNING):
        first.append(asyncio.create_task(ds.take([k], columns=["s"])))
        await gate.until_started(k + 1)
    later = [asyncio.create_task(ds.take([n - 1 - k, k], columns=["s"])) for k in range(5)]
    await asyncio.sleep(0)
    gate.release.set()
    done = await asyncio.wait_for(asyncio.gather(*first, return_exceptions=True), HANG)
    assert all(isinstance(r, CorruptFileError) for r in done)
    results = await asyncio.wait_for(asyncio.gather(*later), HANG)
    for k, got in enumerate(results):
        assert_same(got, expected(uri, np.array([n - 1 - k, k]), ["s"]), ["s"])


# -- 5. the blocking facade from many threads at once ------------------------------------------
def test_sync_facade_from_many_threads(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "deleted")]
    n = live_rows(uri)
    ds = al.open_dataset(uri)
    per_thread = [requests(n, seed=100 + t)[t::8] for t in range(16)]
    want = [[expected(uri, i, c) for i, c in reqs] for reqs in per_thread]
    barrier = threading.Barrier(16)

    def work(t: int) -> list[pa.Table]:
        barrier.wait(HANG)
        return [ds.take(i, columns=c) for i, c in per_thread[t]]

    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(work, range(16), timeout=120))
    for t in range(16):
        for (_, cols), table, w in zip(per_thread[t], got[t], want[t], strict=True):
            assert_same(table, w, cols)


# -- 6. one dataset object, event loops one after another --------------------------------------
def test_dataset_object_on_successive_event_loops(datasets: dict[tuple[str, str], str]) -> None:
    uri = datasets[("2.1", "multi")]
    n = live_rows(uri)
    reqs = requests(n, seed=6)[:24]
    ds = asyncio.run(alance.open_dataset(uri))

    async def take_all() -> list[pa.Table]:
        return list(await asyncio.gather(*(ds.take(i, columns=c) for i, c in reqs)))

    async def leave_a_take_pending() -> pa.Table:
        # A take still queued/reading when its loop shuts down (asyncio.run cancels it).
        gate = Gate(ds)
        asyncio.get_running_loop().create_task(ds.take([1, 2], columns=["id"]))
        await gate.until_started(1)
        ds._takes._read = gate.inner
        return await ds.take([3], columns=["id"])

    for _ in range(2):
        for (idx, cols), got in zip(reqs, asyncio.run(take_all()), strict=True):
            assert_same(got, expected(uri, idx, cols), cols)
    got = asyncio.run(leave_a_take_pending())
    assert got.column("id").to_pylist() == [3]
    for (idx, cols), got in zip(reqs, asyncio.run(take_all()), strict=True):
        assert_same(got, expected(uri, idx, cols), cols)


# -- known bug: one dataset object on two event loops at the same time -------------------------
async def test_takes_on_two_event_loops_at_once(datasets: dict[tuple[str, str], str]) -> None:
    """A dataset object shared by two running loops keeps one queue per loop."""
    uri = datasets[("2.1", "one")]
    ds = await alance.open_dataset(uri)
    gate = Gate(ds)
    here = asyncio.get_running_loop()

    async def gated_here(positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        if asyncio.get_running_loop() is here:
            return await gate.read(positions, columns)
        return await gate.inner(positions, columns)

    ds._takes._read = gated_here
    running = []
    for k in range(MAX_RUNNING):
        running.append(asyncio.create_task(ds.take([k], columns=["id"])))
        await gate.until_started(k + 1)
    queued = asyncio.create_task(ds.take([7], columns=["id"]))
    await asyncio.sleep(0)
    # Meanwhile another thread takes from the same object on its own event loop.
    other = await asyncio.to_thread(asyncio.run, ds.take([4], columns=["id"]))
    assert other.column("id").to_pylist() == [4]
    gate.release.set()
    await asyncio.wait_for(asyncio.gather(*running), 2)
    got = await asyncio.wait_for(queued, 2)
    assert got.column("id").to_pylist() == [7]
