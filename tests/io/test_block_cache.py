"""The block cache for small reads of immutable objects on cloud stores
(alance.io.block_cache, DatasetStore.get_ranges)."""

from __future__ import annotations

import asyncio

import lance
import numpy as np
import pyarrow as pa

import alance
from alance.io.block_cache import MAX_RANGE_BYTES, BlockCache
from alance.io.store import counting_io
from tests.s3_servers import S3Target

KEY = ("s3://bucket", "root/data/x.lance")


def _read(cache: BlockCache, data: bytes, ranges: list[tuple[int, int]]) -> list[bytes] | None:
    fetch = cache.missing(KEY, ranges, len(data))
    fresh = cache.fill(KEY, [((s, e), data[s:e]) for s, e in fetch])
    return cache.answer(KEY, ranges, fresh)


def test_blocks_answer_ranges_and_are_reused() -> None:
    data = bytes(range(256)) * 100  # 25,600 bytes: 7 blocks of 4 KiB, the last one short
    cache = BlockCache(capacity=1 << 20, block=4096)
    ranges = [(10, 20), (4090, 4100), (25_000, 25_600), (7, 7)]
    assert cache.missing(KEY, ranges, len(data)) == [(0, 8192), (24_576, 25_600)]
    assert _read(cache, data, ranges) == [data[10:20], data[4090:4100], data[25_000:], b""]
    # everything is now in memory: nothing to fetch, the same bytes
    assert cache.missing(KEY, [(0, 8000), (24_600, 25_000)], len(data)) == []
    assert cache.answer(KEY, [(0, 8000), (24_600, 25_000)], {}) == [data[:8000],
                                                                   data[24_600:25_000]]
    assert cache.hits >= 2


def test_capacity_bounds_memory_and_reads_still_answer() -> None:
    data = bytes(64 * 1024)
    cache = BlockCache(capacity=8192, block=4096)
    got = _read(cache, data, [(0, 40_000)])  # ten blocks through a two-block cache
    assert got == [data[:40_000]]
    assert cache.held_bytes() <= 8192
    # evicted blocks are fetched again, not answered wrongly
    assert cache.missing(KEY, [(0, 10)], len(data)) == [(0, 4096)]


def test_a_range_past_the_end_is_not_answered_from_blocks() -> None:
    data = bytes(5000)
    cache = BlockCache(capacity=1 << 20, block=4096)
    assert _read(cache, data, [(4000, 6000)]) is None  # the store then reads (and refuses) it


def test_small_reads_only() -> None:
    cache = BlockCache(capacity=1 << 20, block=4096)
    assert cache.eligible([(0, 100), (5000, 9000)])
    assert not cache.eligible([(0, MAX_RANGE_BYTES + 1)])
    assert not BlockCache(capacity=0).eligible([(0, 10)])


def test_repeated_takes_on_s3_are_answered_from_memory(moto_target: S3Target) -> None:
    """A service's second take of rows near the first ones makes no request; results stay
    identical to pylance's."""
    uri = moto_target.uri("cached.lance")
    opts = moto_target.storage_options
    n = 20_000
    table = pa.table({"id": pa.array(np.arange(n)),
                      "s": pa.array([f"row-{i}" for i in range(n)])})
    lance.write_dataset(table, uri, max_rows_per_file=5000, storage_options=opts)
    rows = [3, 4_999, 5_000, 12_345, 19_999]

    async def run() -> tuple[pa.Table, pa.Table, int, int]:
        ds = await alance.open_dataset(uri, storage_options=opts)
        with counting_io() as first:
            a = await ds.take(rows)
        with counting_io() as second:
            b = await ds.take(rows)
        return a, b, first.requests, second.requests

    a, b, first, second = asyncio.run(run())
    theirs = lance.dataset(uri, storage_options=opts).take(rows)
    assert a.equals(theirs) and b.equals(theirs)
    assert first > 0 and second == 0


def test_local_stores_have_no_block_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from alance.io.uri import open_store

    assert open_store(str(tmp_path / "d")).block_cache is None
