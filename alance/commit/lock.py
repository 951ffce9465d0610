"""Commits serialised by a lock the caller brings (like pylance's ``commit_lock``).

:class:`LockCommitHandler` takes a *lock factory*: called with the version about to be
committed, it returns a context manager (async, or plain) that holds the lock while entered.
Inside the lock the handler checks that the version's manifest does not exist yet and writes it
with an ordinary put, so the store needs no atomic create: mutual exclusion comes from the lock.
A lock should expire on its own (e.g. after 30 s) so that a crashed writer cannot block the
dataset forever; the factory may raise :class:`~alance.errors.CommitConflictError` when it
knows the version is taken.

Two ready-made locks: :class:`AsyncioCommitLock` (one event loop) and :class:`FileCommitLock`
(``flock`` on a file: every process of one machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any

from alance.commit.handler import CommitHandler, ManifestLocation, manifest_path
from alance.errors import CommitConflictError, InvalidInputError, TransientStoreError
from alance.format.manifest import ManifestNamingScheme
from alance.io.store import DatasetStore

LockFactory = Callable[[int], AbstractAsyncContextManager[Any] | AbstractContextManager[Any]]


@contextlib.asynccontextmanager
async def _held(lock: Any) -> AsyncIterator[None]:
    if hasattr(lock, "__aenter__"):
        async with lock:
            yield
    elif hasattr(lock, "__enter__"):
        # A blocking lock: take it in a worker thread so the event loop keeps running.
        await asyncio.to_thread(lock.__enter__)
        try:
            yield
        except BaseException as exc:
            if not await asyncio.to_thread(lock.__exit__, type(exc), exc, exc.__traceback__):
                raise
        else:
            await asyncio.to_thread(lock.__exit__, None, None, None)
    else:
        raise InvalidInputError(f"the commit lock factory returned {lock!r}, which is not a "
                                "context manager")


class LockCommitHandler(CommitHandler):
    """Commits while holding ``lock_factory(version)`` (see the module documentation)."""

    def __init__(self, lock_factory: LockFactory) -> None:
        if not callable(lock_factory):
            raise InvalidInputError("lock_factory must be callable: version -> context manager")
        self.lock_factory = lock_factory

    def __repr__(self) -> str:
        return f"LockCommitHandler({self.lock_factory!r})"

    async def commit(self, store: DatasetStore, version: int, manifest: bytes,
                     naming_scheme: ManifestNamingScheme) -> ManifestLocation:
        path = manifest_path(version, naming_scheme)
        async with _held(self.lock_factory(version)):
            taken = await asyncio.gather(*(store.exists(manifest_path(version, s))
                                           for s in ManifestNamingScheme))
            if any(taken):
                raise CommitConflictError(f"version {version} of {store.uri} already exists")
            await store.put(path, manifest)
        return ManifestLocation(version, path, naming_scheme, len(manifest))


class AsyncioCommitLock:
    """A lock factory for writers in one event loop: ``LockCommitHandler(AsyncioCommitLock())``.

    All versions share one :class:`asyncio.Lock` per event loop (commits of one dataset are
    serialised, which is what matters; the version is not needed).
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary())

    def __call__(self, version: int) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock


class FileCommitLock:
    """A lock factory over ``flock`` on one file: every process on this machine.

    ``timeout`` bounds the wait (then :class:`~alance.errors.TransientStoreError`); the lock is
    polled without blocking, so a cancelled waiter never holds it. A process that dies holding
    it releases it (the kernel drops the lock with the file descriptor).
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 60.0,
                 poll: float = 0.005) -> None:
        self.path = os.fspath(path)
        self.timeout = timeout
        self.poll = poll

    def __repr__(self) -> str:
        return f"FileCommitLock({self.path!r})"

    def __call__(self, version: int) -> AbstractAsyncContextManager[None]:
        return self._hold()

    @contextlib.asynccontextmanager
    async def _hold(self) -> AsyncIterator[None]:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + self.timeout
            delay = self.poll
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TransientStoreError(
                            f"commit lock {self.path} still held after {self.timeout}s") from None
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.1)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
