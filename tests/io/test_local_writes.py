"""Small objects on local disks are written on the event loop (no thread round trip): the
same files, the same atomicity and the same errors as obstore's local store."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance.errors import AlreadyExistsError, NotFoundError
from alance.io import backends
from alance.io.backends import write_local
from alance.io.uri import open_store


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_write_local_create_replace_and_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "x.bin"  # missing directories are made
    write_local(str(target), b"one", create=True)
    assert target.read_bytes() == b"one"
    with pytest.raises(AlreadyExistsError):
        write_local(str(target), b"two", create=True)
    assert target.read_bytes() == b"one"
    write_local(str(target), memoryview(b"three"), create=False)
    assert target.read_bytes() == b"three"
    write_local(str(tmp_path / "empty"), b"", create=True)
    assert (tmp_path / "empty").read_bytes() == b""
    # no temporary file is left behind, after a success or a lost create
    assert _files(tmp_path) == ["a/b/x.bin", "empty"]


def test_write_local_errors_are_mapped(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(NotFoundError):  # a file where a directory should be
        write_local(str(tmp_path / "file" / "y"), b"y", create=False)
    assert _files(tmp_path) == ["file"]


@pytest.fixture
def obstore_puts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys obstore's ``put_async`` is called with (the calls still go through)."""
    calls: list[str] = []
    real = backends.obstore.put_async

    async def counted(*args: object, **kwargs: object) -> object:
        calls.append(str(args[1]))
        return await real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(backends.obstore, "put_async", counted)
    return calls


async def test_store_writes_small_inline_and_large_through_obstore(
        tmp_path: Path, obstore_puts: list[str]) -> None:
    calls = obstore_puts
    store = open_store(str(tmp_path / "ds"), None)
    await store.put("small", b"s" * 100)
    await store.put_if_absent("_versions/1.manifest", b"m")
    with pytest.raises(AlreadyExistsError):
        await store.put_if_absent("_versions/1.manifest", b"other")
    big = os.urandom(backends.INLINE_WRITE_BYTES + 1)
    await store.put("big", big)
    writer = store.backend.upload(store._key("data/small.lance"))
    await writer.write(b"d" * 10)
    await writer.complete()
    assert [c.rsplit("/", 1)[-1] for c in calls] == ["big"]
    assert await store.get("big") == big
    assert await store.get("data/small.lance") == b"d" * 10
    assert await store.get("_versions/1.manifest") == b"m"
    assert sorted(await store.list_names("_versions")) == ["_versions/1.manifest"]
    assert await store.list_names("nothing_here") == []


async def test_appends_written_inline_open_in_pylance(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": [0]}), uri)
    for i in range(1, 4):
        await alance.write_dataset(pa.table({"a": [i]}), uri, mode="append")
    ds = lance.dataset(uri)
    assert ds.version == 4
    assert sorted(ds.to_table()["a"].to_pylist()) == [0, 1, 2, 3]
    hint = (tmp_path / "ds" / "_versions" / "latest_version_hint.json").read_text()
    assert hint == '{"version":4}'
    assert not [f for f in _files(tmp_path / "ds") if "#" in f]  # no temporary files
    lance.write_dataset(pa.table({"a": [4]}), uri, mode="append")
    assert (await (await alance.open_dataset(uri)).count_rows()) == 5


def test_rewrite_local_in_place(tmp_path: Path) -> None:
    path = tmp_path / "v" / "hint.json"
    backends.rewrite_local(str(path), b'{"version":100}')  # missing: made
    assert path.read_bytes() == b'{"version":100}'
    inode = path.stat().st_ino
    backends.rewrite_local(str(path), b'{"version":101}')
    backends.rewrite_local(str(path), b'{"version":99}')  # shorter: the tail is cut
    assert path.read_bytes() == b'{"version":99}'
    assert path.stat().st_ino == inode  # the same file, no rename
    other = tmp_path / "copy.json"
    os.link(path, other)  # a copy of the dataset made with hard links keeps its bytes
    backends.rewrite_local(str(path), b'{"version":7}')
    assert path.read_bytes() == b'{"version":7}'
    assert other.read_bytes() == b'{"version":99}'
    assert sorted(p.name for p in (tmp_path / "v").iterdir()) == ["hint.json"]


async def test_pylance_reads_hints_written_in_place(tmp_path: Path) -> None:
    """pylance opens the newest version whatever the hint says (it is only a hint), and
    reads the ones alance writes."""
    uri = str(tmp_path / "ds")
    await alance.write_dataset(pa.table({"a": [0]}), uri)
    hint = tmp_path / "ds" / "_versions" / "latest_version_hint.json"
    for i in range(1, 12):  # 1 digit to 2 digits
        await alance.write_dataset(pa.table({"a": [i]}), uri, mode="append")
        assert hint.read_text() == f'{{"version":{i + 1}}}'
        assert lance.dataset(uri).version == i + 1
    for stale in (b'{"version":3}', b'{"version":99}', b'{"vers', b""):
        hint.write_bytes(stale)
        assert lance.dataset(uri).version == 12
    await alance.write_dataset(pa.table({"a": [12]}), uri, mode="append")
    assert hint.read_text() == '{"version":13}'
    lance.write_dataset(pa.table({"a": [13]}), uri, mode="append")
    assert (await (await alance.open_dataset(uri)).count_rows()) == 14


async def test_large_objects_written_part_by_part_without_joining(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, obstore_puts: list[str]) -> None:
    """A data file larger than the inline limit is written by the store's own upload, its
    gathered parts with writev (not joined, not through obstore): the same bytes, visible
    only once complete; an abandoned one leaves nothing; a failure is a mapped error."""
    calls = obstore_puts
    joined: list[int] = []
    real_write_parts = backends.LocalFileUpload.write_parts

    async def spy(self: backends.LocalFileUpload, parts: list[bytes]) -> None:
        joined.append(len(parts))
        await real_write_parts(self, parts)

    monkeypatch.setattr(backends.LocalFileUpload, "write_parts", spy)
    store = open_store(str(tmp_path / "ds"), None)
    chunks = [os.urandom(n) for n in (5, 300_000, 0, 70_000, 3 * 1024 * 1024, 1)]
    async with store.open_writer("data/big.lance", part_size=1024 * 1024) as out:
        for c in chunks:
            await out.write(c)
            await out.write(memoryview(c))
        assert not (tmp_path / "ds" / "data" / "big.lance").exists()  # not yet visible
    expected = b"".join(c + c for c in chunks)
    assert (tmp_path / "ds" / "data" / "big.lance").read_bytes() == expected
    assert calls == []
    assert max(joined) > 1  # gathered writes handed over as they are
    assert _files(tmp_path / "ds") == ["data/big.lance"]  # no temporary file left
    # Abandoned half-way: neither the object nor a temporary file remains.
    with pytest.raises(RuntimeError):
        async with store.open_writer("data/gone.lance", part_size=1024 * 1024) as out:
            await out.write(os.urandom(2 * 1024 * 1024))
            await out.write(os.urandom(2 * 1024 * 1024))
            raise RuntimeError("stop")
    assert _files(tmp_path / "ds") == ["data/big.lance"]
    # A write that cannot happen is reported as a mapped error, and leaves nothing.
    (tmp_path / "ds" / "blocked").write_bytes(b"a file where a directory should be")
    upload = store.backend.upload(store._key("blocked/x.lance"))
    with pytest.raises(NotFoundError):
        await upload.write(os.urandom(backends.INLINE_WRITE_BYTES + 1))
    await upload.abort()
    assert _files(tmp_path / "ds") == ["blocked", "data/big.lance"]


async def test_abandoned_while_its_thread_writes(tmp_path: Path) -> None:
    """A caller cancelled during a write leaves the thread writing; abandoning the upload
    then removes the temporary file once that write is done (never closing it under the
    thread), and the object never appears."""
    store = open_store(str(tmp_path / "ds"), None)
    upload = store.backend.upload(store._key("data/x.lance"))
    task = asyncio.ensure_future(upload.write(bytes(64 * 1024 * 1024)))
    for _ in range(1000):  # until the thread has created the temporary file
        if _files(tmp_path / "ds"):
            break
        await asyncio.sleep(0.001)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await upload.abort()
    for _ in range(2000):  # the thread finishes, then the file goes
        if not _files(tmp_path / "ds"):
            break
        await asyncio.sleep(0.005)
    assert _files(tmp_path / "ds") == []
