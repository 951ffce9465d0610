"""Large local ranges served by mapping the file (alance.io.mapped_reads): same bytes as a
read, the same errors, small ranges still copied, and a switch to turn it off."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.errors import CorruptFileError
from alance.io import mapped_reads
from alance.io.uri import open_store

pytestmark = pytest.mark.skipif(not mapped_reads.enabled(),
                                reason="this kernel cannot populate a mapping up front")


@pytest.fixture
def mapping_switch() -> Iterator[None]:
    yield
    mapped_reads.set_enabled(True)


def _owner(buf: object) -> object:
    return memoryview(buf).obj  # type: ignore[arg-type]


def test_map_range_unaligned_start(tmp_path) -> None:
    data = np.random.default_rng(1).integers(0, 256, 2_000_000, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        view = mapped_reads.map_range(fd, 12_345, 1_500_000, len(data))
        assert view is not None and bytes(view) == data[12_345:1_500_000]
        assert isinstance(view.obj, mmap.mmap)
        # Too small to be worth mapping, or past the end of the file: not mapped.
        assert mapped_reads.map_range(fd, 0, 1000, len(data)) is None
        assert mapped_reads.map_range(fd, 0, len(data) + 1, len(data)) is None
    finally:
        os.close(fd)


async def test_store_maps_large_pieces_only(tmp_path, mapping_switch) -> None:
    data = np.random.default_rng(2).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    ranges = [(0, 100), (1_000_001, 2_999_999)]
    got = await store.get_ranges("f.bin", ranges)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in ranges]
    assert not isinstance(_owner(got[0]), mmap.mmap)
    assert isinstance(_owner(got[1]), mmap.mmap)

    mapped_reads.set_enabled(False)
    again = await store.get_ranges("f.bin", ranges)
    assert [bytes(g) for g in again] == [data[s:e] for s, e in ranges]
    assert not isinstance(_owner(again[1]), mmap.mmap)


async def test_range_past_the_end_is_still_corrupt(tmp_path) -> None:
    (tmp_path / "f.bin").write_bytes(bytes(1_000_000))
    store = open_store(str(tmp_path))
    with pytest.raises(CorruptFileError, match="past the end"):
        await store.get_ranges("f.bin", [(0, 100), (500_000, 1_400_000)])


async def test_a_mapped_view_outlives_the_file(tmp_path) -> None:
    """Cleanup deletes whole files; a table still holding views of one keeps reading it."""
    data = np.arange(1_000_000, dtype=np.int64).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    (got,) = await store.get_ranges("f.bin", [(8, len(data))])
    assert isinstance(_owner(got), mmap.mmap)
    os.unlink(tmp_path / "f.bin")
    values = np.frombuffer(got, dtype=np.int64)
    assert values[0] == 1 and values[-1] == 999_999


@pytest.mark.parametrize("version", ["2.0", "2.1"])
async def test_scan_same_rows_mapped_or_read(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                            mapping_switch, version: str) -> None:
    """A pylance-written dataset whose pages are megabytes reads the same either way."""
    maps = []
    real = mapped_reads.map_range

    def counted(*args: int, **kwargs: bool) -> memoryview | None:
        view = real(*args, **kwargs)
        maps.append(view is not None)
        return view

    monkeypatch.setattr(mapped_reads, "map_range", counted)
    rng = np.random.default_rng(3)
    n = 300_000
    table = pa.table({"id": np.arange(n), "x": rng.random(n),
                      "vec": pa.FixedSizeListArray.from_arrays(
                          pa.array(rng.random(n * 8, dtype=np.float32)), 8),
                      "s": pa.array([f"row-{i % 977}-{i}" for i in range(n)])})
    uri = str(tmp_path / "t.lance")
    lance.write_dataset(table, uri, data_storage_version=version)  # type: ignore[arg-type]
    ds = await alance.open_dataset(uri)
    mapped = await ds.to_table()
    assert sum(maps) >= 2  # (the scan did map its large pages)
    mapped_reads.set_enabled(False)
    read = await (await alance.open_dataset(uri)).to_table()
    assert mapped.equals(table) and read.equals(table)
    assert (await ds.to_table(filter="id >= 123456", columns=["vec", "s"])).equals(
        table.slice(123_456).select(["vec", "s"]))


async def test_mapping_failures_fall_back_to_reading(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                     ) -> None:
    """A file system that cannot map, or a populate call that fails (EIO from the disk):
    the range is read the usual way, with the same bytes."""
    data = np.random.default_rng(4).integers(0, 256, 2_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    store = open_store(str(tmp_path))
    wanted = [(0, 100), (300_000, 1_900_000)]

    def cannot_map(*args: object, **kwargs: object) -> mmap.mmap:
        raise OSError(19, "No such device")

    with monkeypatch.context() as m:
        m.setattr(mapped_reads.mmap, "mmap", cannot_map)
        got = await store.get_ranges("f.bin", wanted)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in wanted]
    assert not isinstance(_owner(got[1]), mmap.mmap)

    with monkeypatch.context() as m:
        m.setattr(mapped_reads, "_madvise", lambda address, length, advice: -1)
        got = await store.get_ranges("f.bin", wanted)
    assert [bytes(g) for g in got] == [data[s:e] for s, e in wanted]
    assert not isinstance(_owner(got[1]), mmap.mmap)


def test_kernel_without_populate_maps_nothing(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "f.bin").write_bytes(bytes(1_000_000))
    monkeypatch.setattr(mapped_reads, "_usable", False)
    assert not mapped_reads.enabled()
    fd = os.open(tmp_path / "f.bin", os.O_RDONLY)
    try:
        assert mapped_reads.map_range(fd, 0, 900_000, 1_000_000) is None
    finally:
        os.close(fd)


def test_resident_pieces_are_mapped_on_the_spot(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                ) -> None:
    """A read that may not wait for the disk maps a large piece only when the page cache
    holds all of it, and otherwise gives up (a reader thread then reads it)."""
    from alance.io import local_reads

    if not local_reads.NOWAIT:
        pytest.skip("no preadv(RWF_NOWAIT) here")
    data = np.random.default_rng(5).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data)  # (just written: in the page cache)
    starts, ends = [10, 400_000], [200, 2_900_000]
    got = local_reads.read_local_ranges(str(path), starts, ends, True, False)
    assert got is not None
    assert [bytes(g) for g in got] == [data[10:200], data[400_000:2_900_000]]
    assert isinstance(_owner(got[1]), mmap.mmap) and not isinstance(_owner(got[0]), mmap.mmap)

    monkeypatch.setattr(mapped_reads, "_all_resident", lambda address, length: False)
    assert local_reads.read_local_ranges(str(path), starts, ends, True, False) is None
    got = local_reads.read_local_ranges(str(path), starts, ends, False, False)
    assert got is not None and bytes(got[1]) == data[400_000:2_900_000]


def test_what_the_event_loop_may_read(monkeypatch: pytest.MonkeyPatch, mapping_switch) -> None:
    from alance.io import local_reads

    monkeypatch.setattr(local_reads, "NOWAIT", 8)
    piece, big = mapped_reads.MAP_MIN_BYTES - 1, local_reads.INLINE_MAP_BYTES
    copies = local_reads.INLINE_READ_BYTES // piece  # pieces too small to map, copied
    starts = [i * piece for i in range(copies)]
    ends = [s + piece for s in starts]
    # copies of at most INLINE_READ_BYTES, mappings of at most INLINE_MAP_BYTES
    assert local_reads.inline_read([*starts, 1 << 30], [*ends, (1 << 30) + big], joined=False)
    assert not local_reads.inline_read([*starts, 1 << 30], [*ends, (1 << 30) + piece],
                                       joined=False)
    assert not local_reads.inline_read([0], [big + 1], joined=False)
    # joined (a take's ranges, read into one buffer) or mapping off: copies only
    assert not local_reads.inline_read([0], [big], joined=True)
    mapped_reads.set_enabled(False)
    assert not local_reads.inline_read([0], [big], joined=False)
    assert local_reads.inline_read(starts, ends, joined=False)
    monkeypatch.setattr(local_reads, "NOWAIT", 0)
    assert not local_reads.inline_read([0], [10], joined=False)
