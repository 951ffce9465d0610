"""One conformance suite for every :class:`DatasetStore` backend.

Backends: ``local`` and ``memory`` (obstore's LocalStore and MemoryStore, as ``open_store``
builds them), ``posix`` and ``dict`` (the pure-Python fallbacks used after a fork), ``moto`` and
``seaweedfs`` (real S3 servers on 127.0.0.1) and ``external`` (opt-in: ``ALANCE_TEST_S3_*``).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import pickle
import random
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from alance.errors import (
    AlreadyExistsError,
    CorruptFileError,
    NotFoundError,
    PathOutsideDatasetError,
)
from alance.io.backends import DictBackend, PosixBackend
from alance.io.store import DatasetStore
from alance.io.uri import open_store
from tests.conftest_s3 import S3_BACKENDS, s3_target_by_name
from tests.s3_servers import S3Target

MiB = 1024 * 1024
URI_BACKENDS = ["local", "memory", *S3_BACKENDS]
ALL_BACKENDS = ["local", "memory", "posix", "dict", *S3_BACKENDS]


class Backend:
    """Makes dataset URIs and stores of one backend kind for one test."""

    def __init__(self, kind: str, base: Callable[[str], str], options: dict[str, Any],
                 direct: Callable[[str], DatasetStore] | None = None,
                 target: S3Target | None = None) -> None:
        self.kind = kind
        self._base = base
        self.options = options
        self._direct = direct
        self.target = target  # S3 backends: the endpoint and bucket, for inspection

    def open_multipart_uploads(self) -> list[str]:
        """Keys of multipart uploads started and neither completed nor aborted (S3 only)."""
        if self.target is None:
            return []
        client = self.target.client()
        got = client.list_multipart_uploads(Bucket=self.target.bucket,
                                            Prefix=self.target.key_prefix)
        return [u["Key"] for u in got.get("Uploads", [])]

    def uri(self, name: str = "ds.lance") -> str:
        """A dataset URI unique to this test."""
        return self._base(name)

    def store(self, name: str = "ds.lance") -> DatasetStore:
        """The store of dataset ``name``."""
        if self._direct is not None:
            return self._direct(name)
        return open_store(self.uri(name), self.options)


def _backend(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> Backend:
    if kind in ("local", "posix"):
        base = lambda name: str(tmp_path / name)  # noqa: E731
        direct = None
        if kind == "posix":
            direct = lambda name: DatasetStore(  # noqa: E731
                PosixBackend(), base(name).lstrip("/"), uri=base(name))
        return Backend(kind, base, {}, direct)
    if kind in ("memory", "dict"):
        space = uuid.uuid4().hex
        base = lambda name: f"memory://{space}/{name}"  # noqa: E731
        direct = None
        if kind == "dict":
            objects: dict[str, Any] = {}
            lock = threading.Lock()
            direct = lambda name: DatasetStore(  # noqa: E731
                DictBackend(objects, lock), f"{space}/{name}", uri=base(name))
        return Backend(kind, base, {}, direct)
    target = s3_target_by_name(request, kind)
    return Backend(kind, target.uri, dict(target.storage_options), target=target)


@pytest.fixture(params=ALL_BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """Every backend kind."""
    return _backend(request, tmp_path, request.param)


@pytest.fixture(params=URI_BACKENDS)
def uri_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    """The backends reachable through a URI (``open_store``)."""
    return _backend(request, tmp_path, request.param)


@pytest.fixture
def store(backend: Backend) -> DatasetStore:
    """A fresh, empty dataset store."""
    return backend.store()


def _blob(n: int, seed: int = 0) -> bytes:
    """Random bytes (aperiodic, so a misplaced range cannot compare equal by accident)."""
    return random.Random(seed).randbytes(n)


# -- reads ----------------------------------------------------------------------------------
async def test_get_roundtrip_and_missing(store: DatasetStore) -> None:
    data = _blob(100_000)
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


async def test_get_range_and_ranges(store: DatasetStore) -> None:
    data = _blob(300_000, seed=3)
    await store.put("f.bin", data)
    assert await store.get_range("f.bin", 0, 10) == data[:10]
    assert await store.get_range("f.bin", 299_990, 300_000) == data[-10:]
    assert await store.get_ranges("f.bin", []) == []
    ranges = [(5, 5), (100, 200), (0, 0), (250_000, 300_000), (100, 200), (1, 2)]
    got = await store.get_ranges("f.bin", ranges)
    assert [bytes(b) for b in got] == [data[s:e] for s, e in ranges]


async def test_many_coalescable_ranges(store: DatasetStore) -> None:
    data = _blob(2 * MiB, seed=7)
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
async def test_range_past_end_is_typed_error(store: DatasetStore, rng: tuple[int, int]) -> None:
    await store.put("ten.bin", b"0123456789")
    with pytest.raises(CorruptFileError):
        await store.get_range("ten.bin", *rng)
    with pytest.raises(CorruptFileError):
        await store.get_ranges("ten.bin", [(0, 2), rng])


async def test_head_and_exists(store: DatasetStore) -> None:
    await store.put("_versions/1.manifest", b"x" * 1234)
    meta = await store.head("_versions/1.manifest")
    assert meta.path == "_versions/1.manifest"
    assert meta.size == 1234
    assert await store.exists("_versions/1.manifest")
    assert not await store.exists("_versions/2.manifest")
    assert not await store.exists("_versions")  # a "directory" is not an object


# -- listing ------------------------------------------------------------------------------------
async def test_list_recursive_relative_paths(store: DatasetStore) -> None:
    files = {"data/a.lance": 3, "data/sub/b.lance": 5, "data/sub/deeper/c.lance": 7,
             "_versions/1.manifest": 11, "data2/other.lance": 1, "datafile": 2}
    await asyncio.gather(*(store.put(p, b"z" * n) for p, n in files.items()))
    listed = {m.path: m.size for m in await store.list("data")}
    assert listed == {p: n for p, n in files.items() if p.startswith("data/")}
    assert {m.path for m in await store.list("_versions")} == {"_versions/1.manifest"}
    assert await store.list("nothing") == []
    assert await store.list("data/sub/deeper") != []


async def test_list_isolated_between_datasets(backend: Backend) -> None:
    a, b = backend.store("ds"), backend.store("ds2")
    await a.put("data/x.lance", b"a")
    await b.put("data/y.lance", b"bb")
    await b.put("_versions/1.manifest", b"m")
    assert [m.path for m in await a.list("data")] == ["data/x.lance"]
    assert [m.path for m in await b.list("data")] == ["data/y.lance"]
    assert await a.list("_versions") == []
    with pytest.raises(NotFoundError):
        await a.get("data/y.lance")


async def test_list_empty_store(store: DatasetStore) -> None:
    assert await store.list("_versions") == []
    assert await store.list("data") == []


# -- writes -------------------------------------------------------------------------------------
async def test_put_overwrites(store: DatasetStore) -> None:
    await store.put("a.bin", b"first")
    await store.put("a.bin", b"second version")
    assert await store.get("a.bin") == b"second version"
    assert (await store.head("a.bin")).size == len(b"second version")


async def test_put_if_absent(store: DatasetStore) -> None:
    await store.put_if_absent("_versions/1.manifest", b"winner")
    with pytest.raises(AlreadyExistsError):
        await store.put_if_absent("_versions/1.manifest", b"loser")
    assert await store.get("_versions/1.manifest") == b"winner"


async def test_put_if_absent_race_tasks(store: DatasetStore) -> None:
    async def create(i: int) -> int:
        await store.put_if_absent("_versions/7.manifest", f"writer {i}".encode())
        return i

    results = await asyncio.gather(*(create(i) for i in range(16)), return_exceptions=True)
    winners = [r for r in results if isinstance(r, int)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1, results
    assert all(isinstance(e, AlreadyExistsError) for e in losers), losers
    assert await store.get("_versions/7.manifest") == f"writer {winners[0]}".encode()


def _race_child(uri: str, options: dict[str, Any], i: int, barrier: Any, out: Any) -> None:
    async def run() -> str:
        store = open_store(uri, options)
        await store.exists("warm-up")  # connect before the start line
        barrier.wait(timeout=60)
        try:
            await store.put_if_absent("_versions/9.manifest", f"proc {i}".encode())
        except AlreadyExistsError:
            return "lost"
        return "won"

    try:
        out.put((i, asyncio.run(run())))
    except BaseException as exc:  # report, never hang the parent
        out.put((i, f"error {exc!r}"))


@pytest.mark.parametrize("kind", ["local", "moto"])
def test_put_if_absent_race_processes(request: pytest.FixtureRequest, tmp_path: Path,
                                      kind: str) -> None:
    be = _backend(request, tmp_path, kind)
    uri = be.uri("race.lance")
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_race_child, args=(uri, be.options, i, barrier, out))
             for i in range(4)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    assert sorted(results.values()) == ["lost", "lost", "lost", "won"], results
    winner = next(i for i, r in results.items() if r == "won")
    got = asyncio.run(open_store(uri, be.options).get("_versions/9.manifest"))
    assert got == f"proc {winner}".encode()


async def test_copy(store: DatasetStore) -> None:
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


async def test_delete(store: DatasetStore) -> None:
    await store.put("a.bin", b"a")
    await store.put("ab.bin", b"ab")
    await store.delete("a.bin")
    assert not await store.exists("a.bin")
    with pytest.raises(NotFoundError):
        await store.get("a.bin")
    await store.delete("a.bin")  # missing: not an error
    await store.delete("never/was/here.bin")
    assert await store.get("ab.bin") == b"ab"


# -- streaming writes -----------------------------------------------------------------------
async def test_open_writer_multipart(backend: Backend) -> None:
    store = backend.store()
    chunks = [_blob(3 * MiB + 17, seed=s) for s in range(4)]  # ~12 MiB in 6 MiB parts
    async with store.open_writer("data/big.lance", part_size=6 * MiB) as w:
        for chunk in chunks:
            await w.write(chunk)
            assert not await store.exists("data/big.lance")  # invisible before close
        await w.write(b"")
    expected = b"".join(chunks)
    meta = await store.head("data/big.lance")
    assert meta.size == len(expected)
    if backend.target is not None:  # S3: a multipart upload's ETag ends in -<part count>
        assert meta.e_tag is not None and "-" in meta.e_tag, meta.e_tag
        assert backend.open_multipart_uploads() == []
    assert await store.get("data/big.lance") == expected
    assert await store.get_range("data/big.lance", 6 * MiB - 3, 6 * MiB + 3) == \
        expected[6 * MiB - 3:6 * MiB + 3]


async def test_open_writer_small(store: DatasetStore) -> None:
    async with store.open_writer("data/small.lance") as w:
        for i in range(100):
            await w.write(f"{i},".encode())
    assert await store.get("data/small.lance") == "".join(f"{i}," for i in range(100)).encode()


class _Boom(Exception):
    pass


@pytest.mark.parametrize("size", [1000, 7 * MiB], ids=["small", "multipart"])
async def test_open_writer_failure_leaves_nothing(backend: Backend, size: int) -> None:
    store = backend.store()
    with pytest.raises(_Boom):
        async with store.open_writer("data/partial.lance", part_size=5 * MiB + 1) as w:
            await w.write(_blob(size))
            await w.write(_blob(size))
            raise _Boom
    assert not await store.exists("data/partial.lance")
    assert await store.list("data") == []
    assert backend.open_multipart_uploads() == []  # started uploads are aborted


# -- paths --------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", ["../x", "/abs/x", "a/../../x", "..", "s3://other/x", "a\\b",
                                  "", "."])
async def test_path_escape_refused(store: DatasetStore, path: str) -> None:
    for call in (lambda: store.get(path), lambda: store.put(path, b"x"),
                 lambda: store.put_if_absent(path, b"x"), lambda: store.head(path),
                 lambda: store.delete(path), lambda: store.get_range(path, 0, 1),
                 lambda: store.copy("a.bin", path)):
        with pytest.raises(PathOutsideDatasetError):
            await call()
    if path not in ("", "."):  # listing the root itself may be allowed
        with pytest.raises(PathOutsideDatasetError):
            await store.list(path)


# -- pickling (Spark ships stores and datasets to workers) -------------------------------------
async def test_store_pickles(uri_backend: Backend) -> None:
    store = uri_backend.store()
    await store.put("data/p.bin", b"pickled")
    clone = pickle.loads(pickle.dumps(store))
    assert isinstance(clone, DatasetStore)
    assert clone.uri == store.uri
    assert await clone.get("data/p.bin") == b"pickled"
    await clone.put("data/q.bin", b"from clone")
    assert await store.get("data/q.bin") == b"from clone"


def test_dataset_handle_pickles(uri_backend: Backend) -> None:
    from alance import sync

    table = pa.table({"id": pa.array(range(50), pa.int64()),
                      "s": pa.array([f"r{i}" for i in range(50)], pa.string())})
    uri = uri_backend.uri("pk.lance")
    ds = sync.write_dataset(table, uri, storage_options=uri_backend.options)
    sync.write_dataset(table, uri, mode="append", storage_options=uri_backend.options)
    ds1 = sync.open_dataset(uri, version=1, storage_options=uri_backend.options)
    for handle in (ds, ds1, ds1._async):
        clone = pickle.loads(pickle.dumps(handle))
        assert type(clone) is type(handle)
        assert clone.version == 1
    clone = pickle.loads(pickle.dumps(sync.open_dataset(uri, storage_options=uri_backend.options)))
    assert clone.version == 2
    assert clone.to_table().equals(pa.concat_tables([table, table]))


@pytest.mark.parametrize("kind", ["local", "moto"])
def test_spawned_process_reads_pickled_dataset(request: pytest.FixtureRequest, tmp_path: Path,
                                               kind: str) -> None:
    from alance import sync

    uri_backend = _backend(request, tmp_path, kind)

    table = pa.table({"id": pa.array(range(20), pa.int64())})
    ds = sync.write_dataset(table, uri_backend.uri("sp.lance"),
                            storage_options=uri_backend.options)
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        rows = pool.apply(_count_rows, (pickle.dumps(ds),))
    assert rows == 20


def _count_rows(blob: bytes) -> int:
    return int(pickle.loads(blob).count_rows())

