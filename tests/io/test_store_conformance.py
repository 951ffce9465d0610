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
    NotFoundError,
)
from alance.io.backends import DictBackend, PosixBackend
from alance.io.store import DatasetStore
from alance.io.uri import open_store
from alance.testing.stores import StoreConformance
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


class TestStores(StoreConformance):
    """alance's own backends, through the shipped suite (:mod:`alance.testing.stores`)."""

    @pytest.fixture
    def store(self, backend: Backend) -> DatasetStore:
        """A fresh, empty dataset store of each backend kind."""
        return backend.store()


def _blob(n: int, seed: int = 0) -> bytes:
    """Random bytes (aperiodic, so a misplaced range cannot compare equal by accident)."""
    return random.Random(seed).randbytes(n)


# -- listing ------------------------------------------------------------------------------------


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


# -- writes -------------------------------------------------------------------------------------


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
