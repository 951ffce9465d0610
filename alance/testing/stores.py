"""A conformance suite for :class:`~alance.io.store.DatasetStore` backends.

Subclass :class:`StoreConformance` in a pytest module and give it a ``store`` fixture returning
a fresh, empty store over your backend (``DatasetStore(MyBackend(...), root)``, or
``open_store(uri, options)``); every test then runs against it::

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self, tmp_path):
            return DatasetStore(MyBackend(tmp_path), "ds")

The tests need pytest and pytest-asyncio (``asyncio_mode = "auto"``, or mark the class with
``pytest.mark.asyncio``). alance's own backends (local, memory, the fork fallbacks, moto and
SeaweedFS S3) run it in ``tests/test_store_conformance.py``.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from alance.errors import (
    AlreadyExistsError,
    CorruptFileError,
    NotFoundError,
    PathOutsideDatasetError,
)
from alance.io.store import DatasetStore

MiB = 1024 * 1024

__all__ = ["StoreConformance", "random_bytes"]


def random_bytes(n: int, seed: int = 0) -> bytes:
    """Random bytes (aperiodic, so a misplaced range cannot compare equal by accident)."""
    return random.Random(seed).randbytes(n)


class StoreConformance:
    """What every store backend must do (see the module docstring)."""

    @pytest.fixture
    def store(self) -> DatasetStore:
        """A fresh, empty store: override it."""
        raise NotImplementedError("give the suite a `store` fixture")

    async def test_get_roundtrip_and_missing(self, store: DatasetStore) -> None:
        data = random_bytes(100_000)
        await store.put("data/a.bin", data)
        await store.put("empty.bin", b"")
        assert await store.get("data/a.bin") == data
        assert await store.get("empty.bin") == b""
        with pytest.raises(NotFoundError):
            await store.get("data/missing.bin")
        with pytest.raises(NotFoundError):
            await store.get_range("data/missing.bin", 0, 10)
        with pytest.raises(NotFoundError):
            await store.head("missing.bin")

    async def test_get_range_and_ranges(self, store: DatasetStore) -> None:
        data = random_bytes(300_000, seed=3)
        await store.put("f.bin", data)
        assert await store.get_range("f.bin", 0, 10) == data[:10]
        assert await store.get_range("f.bin", 299_990, 300_000) == data[-10:]
        assert await store.get_ranges("f.bin", []) == []
        ranges = [(5, 5), (100, 200), (0, 0), (250_000, 300_000), (100, 200), (1, 2)]
        got = await store.get_ranges("f.bin", ranges)
        assert [bytes(b) for b in got] == [data[s:e] for s, e in ranges]

    async def test_many_coalescable_ranges(self, store: DatasetStore) -> None:
        data = random_bytes(2 * MiB, seed=7)
        await store.put("f.bin", data)
        # 400 small ranges with small gaps (coalescable), in shuffled order, plus some far apart.
        ranges = [(i * 5000, i * 5000 + 100 + i % 17) for i in range(400)]
        ranges = ranges[::2] + ranges[1::2] + [(2 * MiB - 7, 2 * MiB), (MiB, MiB + 70_000)]
        got = await store.get_ranges("f.bin", ranges)
        assert len(got) == len(ranges)
        for (s, e), buf in zip(ranges, got, strict=True):
            assert bytes(buf) == data[s:e]

    @pytest.mark.parametrize("rng", [(10, 12), (20, 30), (5, 15)],
                             ids=["at-end", "beyond-end", "straddling-end"])
    async def test_range_past_end_is_typed_error(self, store: DatasetStore,
                                                 rng: tuple[int, int]) -> None:
        await store.put("ten.bin", b"0123456789")
        with pytest.raises(CorruptFileError):
            await store.get_range("ten.bin", *rng)
        with pytest.raises(CorruptFileError):
            await store.get_ranges("ten.bin", [(0, 2), rng])

    async def test_head_and_exists(self, store: DatasetStore) -> None:
        await store.put("_versions/1.manifest", b"x" * 1234)
        meta = await store.head("_versions/1.manifest")
        assert meta.path == "_versions/1.manifest"
        assert meta.size == 1234
        assert await store.exists("_versions/1.manifest")
        assert not await store.exists("_versions/2.manifest")
        assert not await store.exists("_versions")  # a "directory" is not an object

    async def test_list_recursive_relative_paths(self, store: DatasetStore) -> None:
        files = {"data/a.lance": 3, "data/sub/b.lance": 5, "data/sub/deeper/c.lance": 7,
                 "_versions/1.manifest": 11, "data2/other.lance": 1, "datafile": 2}
        await asyncio.gather(*(store.put(p, b"z" * n) for p, n in files.items()))
        listed = {m.path: m.size for m in await store.list("data")}
        assert listed == {p: n for p, n in files.items() if p.startswith("data/")}
        assert {m.path for m in await store.list("_versions")} == {"_versions/1.manifest"}
        assert await store.list("nothing") == []
        assert await store.list("data/sub/deeper") != []

    async def test_list_empty_store(self, store: DatasetStore) -> None:
        assert await store.list("_versions") == []
        assert await store.list("data") == []

    async def test_put_overwrites(self, store: DatasetStore) -> None:
        await store.put("a.bin", b"first")
        await store.put("a.bin", b"second version")
        assert await store.get("a.bin") == b"second version"
        assert (await store.head("a.bin")).size == len(b"second version")

    async def test_put_if_absent(self, store: DatasetStore) -> None:
        await store.put_if_absent("_versions/1.manifest", b"winner")
        with pytest.raises(AlreadyExistsError):
            await store.put_if_absent("_versions/1.manifest", b"loser")
        assert await store.get("_versions/1.manifest") == b"winner"

    async def test_put_if_absent_race_tasks(self, store: DatasetStore) -> None:
        async def create(i: int) -> int:
            await store.put_if_absent("_versions/7.manifest", f"writer {i}".encode())
            return i

        results = await asyncio.gather(*(create(i) for i in range(16)), return_exceptions=True)
        winners = [r for r in results if isinstance(r, int)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1, results
        assert all(isinstance(e, AlreadyExistsError) for e in losers), losers
        assert await store.get("_versions/7.manifest") == f"writer {winners[0]}".encode()

    async def test_copy(self, store: DatasetStore) -> None:
        await store.put("src.bin", b"source bytes")
        await store.put("dst.bin", b"old")
        await store.copy("src.bin", "dst.bin")  # overwrite is the default
        assert await store.get("dst.bin") == b"source bytes"
        await store.put("src.bin", b"changed")
        with pytest.raises(AlreadyExistsError):
            await store.copy("src.bin", "dst.bin", overwrite=False)
        assert await store.get("dst.bin") == b"source bytes"
        await store.copy("src.bin", "new/dst.bin", overwrite=False)
        assert await store.get("new/dst.bin") == b"changed"
        with pytest.raises(NotFoundError):
            await store.copy("missing.bin", "x.bin")
        assert not await store.exists("x.bin")

    async def test_delete(self, store: DatasetStore) -> None:
        await store.put("a.bin", b"a")
        await store.put("ab.bin", b"ab")
        await store.delete("a.bin")
        assert not await store.exists("a.bin")
        with pytest.raises(NotFoundError):
            await store.get("a.bin")
        await store.delete("a.bin")  # missing: not an error
        await store.delete("never/was/here.bin")
        assert await store.get("ab.bin") == b"ab"

    async def test_open_writer_small(self, store: DatasetStore) -> None:
        async with store.open_writer("data/small.lance") as w:
            for i in range(100):
                await w.write(f"{i},".encode())
        assert await store.get("data/small.lance") == "".join(f"{i}," for i in range(100)).encode()

    @pytest.mark.parametrize("path", ["../x", "/abs/x", "a/../../x", "..", "s3://other/x",
                                      "a\\b", "", "."])
    async def test_path_escape_refused(self, store: DatasetStore, path: str) -> None:
        for call in (lambda: store.get(path), lambda: store.put(path, b"x"),
                     lambda: store.put_if_absent(path, b"x"), lambda: store.head(path),
                     lambda: store.delete(path), lambda: store.get_range(path, 0, 1),
                     lambda: store.copy("a.bin", path)):
            with pytest.raises(PathOutsideDatasetError):
                await call()
        if path not in ("", "."):  # listing the root itself may be allowed
            with pytest.raises(PathOutsideDatasetError):
                await store.list(path)
