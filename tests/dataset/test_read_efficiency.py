"""Reads fetch only what they need: the requested columns' pages, and for take only their rows.

Bytes are counted by recording every range the store is asked for (the store still does the
real reads).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.io.store import DatasetStore


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int]]]:
    """Every (path, bytes) the dataset layer fetched from data files."""
    seen: list[tuple[str, int]] = []
    original = DatasetStore.get_ranges

    async def counting(self: DatasetStore, path: str, ranges: list[tuple[int, int]]):
        out = await original(self, path, ranges)
        if path.startswith("data/"):
            seen.extend((path, len(b)) for b in out)
        return out

    monkeypatch.setattr(DatasetStore, "get_ranges", counting)
    yield seen


def data_bytes(uri: str) -> int:
    return sum(p.stat().st_size for p in (Path(uri) / "data").iterdir())


async def test_projection_reads_only_its_columns(local_uri: str, reads) -> None:
    n = 200_000
    rng = np.random.default_rng(1)
    table = pa.table({
        "small": pa.array(np.arange(n, dtype=np.int32)),
        "big": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 32, dtype=np.float32)),
                                                 32),
        "text": pa.array([f"row-{i:012d}" for i in range(n)]),
    })
    await alance.write_dataset(table, local_uri, max_rows_per_file=100_000)
    ds = await alance.open_dataset(local_uri)
    total = data_bytes(local_uri)
    reads.clear()
    out = await ds.to_table(columns=["small"])
    assert out["small"].to_pylist() == list(range(n))
    fetched = sum(b for _, b in reads)
    # "small" is 800 KB of the ~27 MB of data; metadata and page tables are a few KB more.
    assert fetched < 0.05 * total, (fetched, total)

    reads.clear()
    rows = await ds.take([3, 150_000, 199_999], columns=["big", "text"])
    assert rows["text"].to_pylist() == ["row-000000000003", "row-000000150000",
                                        "row-000000199999"]
    fetched = sum(b for _, b in reads)
    assert fetched < 64 * 1024, fetched  # a few pages' worth, not whole columns


async def test_open_costs_one_request_per_file(local_uri: str, reads) -> None:
    table = pa.table({"a": pa.array(np.arange(50_000, dtype=np.int64))})
    # legacy files: footer, metadata and page table sit together at the end
    await alance.write_dataset(table, local_uri, max_rows_per_file=10_000,
                               data_storage_version="legacy")
    ds = await alance.open_dataset(local_uri)
    reads.clear()
    await ds.take([0])  # opens one file: footer, metadata and page table in one request
    paths = [p for p, _ in reads]
    assert len(set(paths)) == 1
    assert len(paths) <= 2  # the tail, then the page holding row 0


def _recording(calls: list[list[tuple[int, int]]]) -> type:
    """A backend wrapper (``wrap_backend``) that appends the ranges of every ``get_ranges``
    call to ``calls``."""

    class Recording:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        async def get_ranges(self, key, ranges, coalesce):
            calls.append(list(ranges))
            return await self.inner.get_ranges(key, ranges, coalesce)

    return Recording


async def test_large_ranges_are_split_and_joined(local_uri: str) -> None:
    from alance.io.uri import open_store

    calls: list[list[tuple[int, int]]] = []
    store = open_store(local_uri, {"max_concurrency": 3, "coalesce_bytes": 0,
                                   "wrap_backend": _recording(calls)})
    store.split_bytes = 1000
    assert store.ranges_per_request > 1  # local stores batch ranges into one backend call
    store.ranges_per_request = 1  # as cloud stores do: every request holds its own slot
    payload = bytes(range(256)) * 40  # 10,240 bytes
    await store.put("blob", payload)
    got = await store.get_ranges("blob", [(0, 10_240), (5, 7), (100, 3_100), (9, 9)])
    assert [bytes(g) for g in got] == [payload, payload[5:7], payload[100:3_100], b""]
    # overlapping ranges are merged (coalesce_bytes=0 still merges overlaps), and the long
    # result goes out as 1000-byte pieces, one request each, but for the wanted range of
    # 3000 bytes inside it, which is fetched whole
    pieces = sorted(r for c in calls for r in c)
    assert all(len(c) == 1 for c in calls)
    assert pieces == [(0, 100), (100, 3_100), *((i, min(i + 1000, 10_240))
                                                 for i in range(3_100, 10_240, 1000))]
    calls.clear()
    store.coalesce_bytes = 100
    got = await store.get_ranges("blob", [(0, 10), (50, 60), (500, 510)])
    assert [bytes(g) for g in got] == [payload[0:10], payload[50:60], payload[500:510]]
    assert sorted(r for c in calls for r in c) == [(0, 60), (500, 510)]
    calls.clear()
    store.ranges_per_request = 4  # batched: at most 4 ranges per backend call
    got = await store.get_ranges("blob", [(i * 1000, i * 1000 + 10) for i in range(10)])
    assert [bytes(g) for g in got] == [payload[i * 1000:i * 1000 + 10] for i in range(10)]
    assert [len(c) for c in calls] == [4, 4, 2]


async def test_split_pieces_keep_wanted_ranges_whole(local_uri: str) -> None:
    """Long pieces are cut between the wanted ranges they merge, and one wanted range of up
    to WHOLE_RANGE_FACTOR split sizes is fetched by one request (its bytes are then a view,
    never pieces copied back together)."""
    from alance.io.store import WHOLE_RANGE_FACTOR, _split
    from alance.io.uri import open_store

    requests: list[list[tuple[int, int]]] = []
    store = open_store(local_uri, {"coalesce_bytes": 0, "wrap_backend": _recording(requests)})
    store.split_bytes = 1000
    store.ranges_per_request = 1
    payload = bytes(range(256)) * 40
    await store.put("blob", payload)
    # one range of 3x the split size: one request
    got = await store.get_ranges("blob", [(100, 3_100)])
    assert bytes(got[0]) == payload[100:3_100]
    assert requests == [[(100, 3_100)]]
    requests.clear()
    # three touching ranges of 900 bytes: merged, then cut at their own bounds
    wanted = [(0, 900), (900, 1_800), (1_800, 2_700)]
    got = await store.get_ranges("blob", wanted)
    assert [bytes(g) for g in got] == [payload[s:e] for s, e in wanted]
    assert sorted(r for c in requests for r in c) == wanted
    requests.clear()
    # past the factor, a range is split again (and joined)
    long = (0, (WHOLE_RANGE_FACTOR + 1) * 1_000 + 5)
    got = await store.get_ranges("blob", [long])
    assert bytes(got[0]) == payload[long[0]:long[1]]
    assert len(requests) == WHOLE_RANGE_FACTOR + 2
    # the cut rule on its own: small wanted ranges may be cut through, long ones not
    assert _split((0, 2_500), 1_000) == [(0, 1_000), (1_000, 2_000), (2_000, 2_500)]
    assert _split((0, 2_500), 1_000, [(600, 1_500)]) == [(0, 600), (600, 1_600),
                                                         (1_600, 2_500)]
    assert _split((0, 4_000), 1_000, [(0, 3_500)]) == [(0, 3_500), (3_500, 4_000)]


async def test_local_range_reads_check_the_file(local_uri: str) -> None:
    """Local stores read ranges with pread: bytes past the end of a file and missing files
    are typed errors, not short or empty buffers."""
    from alance.errors import CorruptFileError, NotFoundError
    from alance.io.uri import open_store

    store = open_store(local_uri, {})
    payload = bytes(range(256)) * 4
    await store.put("obj", payload)
    got = await store.get_ranges("obj", [(0, 10), (1000, 1024), (5, 7)])
    assert [bytes(g) for g in got] == [payload[:10], payload[1000:], payload[5:7]]
    with pytest.raises(CorruptFileError):
        await store.get_ranges("obj", [(1000, 1025)])
    with pytest.raises(NotFoundError):
        await store.get_ranges("missing", [(0, 1)])


def test_iops_counter_counts_what_reads_fetch(tmp_path: Path) -> None:
    """``alance.iops_counter()`` (pylance's ``lance.iops_counter``): byte ranges read by every
    store of the process; a scan adds the ranges it fetched."""
    from alance import sync as al

    ds = al.write_dataset(pa.table({"a": range(5000), "s": ["x" * 50] * 5000}),
                          str(tmp_path / "ds"), max_rows_per_file=1000)
    before = al.iops_counter()
    ds.to_table(columns=["a"])
    read = al.iops_counter() - before
    assert read >= len(ds.get_fragments())  # at least one range per data file
    before = al.iops_counter()
    ds.to_table(columns=["a"])
    again = al.iops_counter() - before
    assert 0 < again < read  # the files' metadata is cached now: only the data is read
