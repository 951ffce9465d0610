"""The object-store interface alance's dataset and commit layers use, and its obstore backend.

A :class:`DatasetStore` is bound to one dataset root. Every path it takes is *relative to that
root* (``"_versions/1.manifest"``, ``"data/abc.lance"``); paths that would leave the root are
refused with :class:`~alance.errors.PathOutsideDatasetError`. It knows nothing of the Lance
format: it moves bytes, maps obstore's exceptions to alance's, and bounds concurrency.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import obstore
from obstore.exceptions import AlreadyExistsError as _ObsAlreadyExists
from obstore.exceptions import BaseError as _ObsBaseError
from obstore.exceptions import NotFoundError as _ObsNotFound
from obstore.exceptions import PreconditionError as _ObsPrecondition

from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    InvalidInputError,
    NotFoundError,
    PathOutsideDatasetError,
    StoreError,
)

#: How many requests one store keeps in flight at most (per process and store).
DEFAULT_MAX_CONCURRENCY = 16
#: Streaming writes hand the store parts of about this size (bounded write buffer).
DEFAULT_PART_SIZE = 8 * 1024 * 1024
#: Ranges closer than this are fetched with one request.
DEFAULT_COALESCE_BYTES = 64 * 1024


@dataclass(frozen=True)
class ObjectMeta:
    """What a listing or ``head`` tells about one object."""

    path: str  # relative to the dataset root
    size: int
    last_modified: dt.datetime | None = None
    e_tag: str | None = None


def _map_error(exc: BaseException, path: str) -> AlanceError:
    """Turn an obstore (or OS) exception into the matching alance error."""
    if isinstance(exc, (_ObsNotFound, FileNotFoundError)):
        return NotFoundError(f"not found: {path}")
    if isinstance(exc, (_ObsAlreadyExists, _ObsPrecondition, FileExistsError)):
        return AlreadyExistsError(f"already exists: {path}")
    return StoreError(f"object store error on {path}: {exc}")


def safe_relative_path(path: str) -> str:
    """Normalise a path relative to the dataset root, refusing anything that escapes it."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PathOutsideDatasetError(f"not a relative path inside the dataset: {path!r}")
    norm = posixpath.normpath(path)
    if norm in (".", "..") or norm.startswith("../") or "://" in path:
        raise PathOutsideDatasetError(f"path escapes the dataset root: {path!r}")
    return norm


class DatasetStore:
    """Async access to the objects under one dataset root, through an obstore store.

    Args:
        store: the obstore store (``LocalStore``, ``MemoryStore``, ``S3Store``...).
        root: the dataset root *inside* that store (no leading slash), e.g. ``"data/t.lance"``.
        uri: the dataset URI the user gave, for messages and pickling.
        max_concurrency: requests in flight at most through this object.
        coalesce_bytes: gap below which neighbouring ranges of one object are read together.
    """

    def __init__(self, store: Any, root: str, *, uri: str,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                 coalesce_bytes: int = DEFAULT_COALESCE_BYTES) -> None:
        if max_concurrency < 1:
            raise InvalidInputError("max_concurrency must be at least 1")
        self.store = store
        self.root = root.strip("/")
        self.uri = uri
        self.max_concurrency = max_concurrency
        self.coalesce_bytes = coalesce_bytes
        self._semaphores: dict[int, asyncio.Semaphore] = {}

    def __repr__(self) -> str:
        return f"DatasetStore({self.uri!r})"

    # -- helpers -----------------------------------------------------------------------------
    def _key(self, path: str) -> str:
        rel = safe_relative_path(path)
        return f"{self.root}/{rel}" if self.root else rel

    def _rel(self, key: str) -> str:
        prefix = self.root + "/" if self.root else ""
        return key[len(prefix):] if key.startswith(prefix) else key

    @property
    def _sem(self) -> asyncio.Semaphore:
        # One semaphore per event loop: a store may be used from several loops over its life
        # (the sync facade's loop, a user's loop), and asyncio primitives are loop-bound.
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(id(loop))
        if sem is None:
            sem = self._semaphores[id(loop)] = asyncio.Semaphore(self.max_concurrency)
        return sem

    # -- reads -------------------------------------------------------------------------------
    async def get(self, path: str) -> bytes:
        """The whole object."""
        key = self._key(path)
        async with self._sem:
            try:
                result = await obstore.get_async(self.store, key)
                return bytes(await result.bytes_async())
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, path) from exc

    async def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""
        if end <= start:
            return b""
        key = self._key(path)
        async with self._sem:
            try:
                return bytes(await obstore.get_range_async(self.store, key, start=start, end=end))
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, path) from exc

    async def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Several ranges ``[start, end)`` of one object, coalesced where close together."""
        if not ranges:
            return []
        wanted = [(s, e) for s, e in ranges if e > s]
        out: dict[tuple[int, int], bytes] = {(s, e): b"" for s, e in ranges if e <= s}
        if wanted:
            key = self._key(path)
            async with self._sem:
                try:
                    parts = await obstore.get_ranges_async(
                        self.store, key, starts=[s for s, _ in wanted],
                        ends=[e for _, e in wanted], coalesce=self.coalesce_bytes)
                except (_ObsBaseError, OSError) as exc:
                    raise _map_error(exc, path) from exc
            for rng, part in zip(wanted, parts, strict=True):
                out[rng] = bytes(part)
        return [out[(s, e)] for s, e in ranges]

    async def head(self, path: str) -> ObjectMeta:
        """Size and modification time of an object."""
        key = self._key(path)
        async with self._sem:
            try:
                meta = await obstore.head_async(self.store, key)
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, path) from exc
        return ObjectMeta(self._rel(meta["path"]), meta["size"], meta.get("last_modified"),
                          meta.get("e_tag"))

    async def exists(self, path: str) -> bool:
        """Whether the object exists."""
        try:
            await self.head(path)
        except NotFoundError:
            return False
        return True

    async def list(self, prefix: str) -> list[ObjectMeta]:
        """Every object whose path starts with the directory ``prefix`` (recursive)."""
        key = self._key(prefix)
        out: list[ObjectMeta] = []
        async with self._sem:
            try:
                stream = obstore.list(self.store, key + "/")
                async for chunk in stream:
                    out.extend(ObjectMeta(self._rel(m["path"]), m["size"],
                                          m.get("last_modified"), m.get("e_tag"))
                               for m in chunk)
            except (_ObsNotFound, FileNotFoundError):
                return []
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, prefix) from exc
        return out

    # -- writes ------------------------------------------------------------------------------
    async def put(self, path: str, data: bytes) -> None:
        """Write an object, replacing any existing one."""
        await self._put(path, data, None)

    async def put_if_absent(self, path: str, data: bytes) -> None:
        """Create an object atomically; :class:`AlreadyExistsError` if it exists already."""
        await self._put(path, data, "create")

    async def _put(self, path: str, data: bytes, mode: str | None) -> None:
        key = self._key(path)
        async with self._sem:
            try:
                await obstore.put_async(self.store, key, data, mode=mode)  # type: ignore[arg-type]
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, path) from exc

    async def copy(self, src: str, dst: str, *, overwrite: bool = True) -> None:
        """Copy one object to another path inside the dataset."""
        async with self._sem:
            try:
                await obstore.copy_async(self.store, self._key(src), self._key(dst),
                                         overwrite=overwrite)
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, f"{src} -> {dst}") from exc

    async def delete(self, path: str) -> None:
        """Delete an object; deleting a missing object is not an error."""
        async with self._sem:
            try:
                await obstore.delete_async(self.store, self._key(path))
            except (_ObsNotFound, FileNotFoundError):
                return
            except (_ObsBaseError, OSError) as exc:
                raise _map_error(exc, path) from exc

    def open_writer(self, path: str, part_size: int = DEFAULT_PART_SIZE) -> ObjectWriter:
        """A streaming writer for a new object (see :class:`ObjectWriter`)."""
        return ObjectWriter(self, path, part_size)


class ObjectWriter:
    """Streams one object to the store in parts, so the caller never holds the whole file.

    Use as ``async with store.open_writer(path) as w: await w.write(chunk)``. The object appears
    only when the block exits without an exception; on an exception the upload is abandoned and
    any visible partial object is deleted.
    """

    def __init__(self, store: DatasetStore, path: str, part_size: int) -> None:
        self._store = store
        self.path = path
        self._key = store._key(path)
        self._file: Any = None
        self._part_size = part_size
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self.bytes_written = 0

    async def __aenter__(self) -> ObjectWriter:
        try:
            self._file = obstore.open_writer_async(self._store.store, self._key)
        except (_ObsBaseError, OSError) as exc:
            raise _map_error(exc, self.path) from exc
        return self

    async def write(self, data: bytes) -> None:
        """Append bytes to the object being written.

        Small writes are gathered into parts of about ``part_size`` bytes before they are
        handed to the store, so per-call overhead does not depend on how finely the caller
        slices its output.
        """
        if not data:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.bytes_written += len(data)
        if self._pending_bytes >= self._part_size:
            await self._flush()

    async def _flush(self) -> None:
        if not self._pending:
            return
        part = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._pending_bytes = [], 0
        try:
            await self._file.write(part)
        except (_ObsBaseError, OSError) as exc:
            raise _map_error(exc, self.path) from exc

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                await self._flush()
                await self._file.close()
            except (_ObsBaseError, OSError) as err:
                await self._store.delete(self.path)
                raise _map_error(err, self.path) from err
        else:
            # Never completing the upload leaves no object; delete in case a backend made one.
            await self._store.delete(self.path)

