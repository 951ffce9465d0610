"""Byte-moving backends behind :class:`~alance.io.store.DatasetStore`.

A backend performs raw operations on full object keys and raises alance errors (lower-layer
exceptions are mapped here, at the boundary). Three exist:

* :class:`ObstoreBackend` — obstore (Rust, async), for every store obstore supports. The default.
* :class:`PosixBackend` — plain files through ``os`` calls in worker threads.
* :class:`DictBackend` — an in-process dictionary.

obstore's runtime does not survive ``os.fork()``: in a child forked after the parent used it,
every obstore call hangs. :func:`obstore_usable` tells whether that happened; local and memory
datasets then switch to the pure-Python backends (see ``DatasetStore``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import datetime as dt
import errno
import functools
import os
import re
import stat
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, NoReturn, Protocol

import obstore
from obstore.exceptions import AlreadyExistsError as _ObsAlreadyExists
from obstore.exceptions import BaseError as _ObsBaseError
from obstore.exceptions import GenericError as _ObsGeneric
from obstore.exceptions import InvalidPathError as _ObsInvalidPath
from obstore.exceptions import NotFoundError as _ObsNotFound
from obstore.exceptions import NotSupportedError as _ObsNotSupported
from obstore.exceptions import PermissionDeniedError as _ObsPermissionDenied
from obstore.exceptions import PreconditionError as _ObsPrecondition
from obstore.exceptions import UnauthenticatedError as _ObsUnauthenticated
from obstore.exceptions import UnknownConfigurationKeyError as _ObsUnknownConfig
from obstore.store import LocalStore

from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    TransientStoreError,
)
from alance.io import local_reads

#: Parts of a streaming upload handed to obstore at a time (queue slots), its part size and
#: how many parts it uploads concurrently: together they bound an upload's memory.
UPLOAD_QUEUE_PARTS = 2
UPLOAD_PART_SIZE = 8 * 1024 * 1024
UPLOAD_CONCURRENCY = 4

#: Bytes returned by reads: ``bytes`` or a zero-copy view of a buffer the backend owns.
Buffer = bytes | memoryview

#: Raw object metadata: ``{"path": key, "size": int, "last_modified": datetime|None, ...}``.
Meta = dict[str, Any]

_obstore_pid: int | None = None
#: Whether this process was forked (from a parent that imported alance): only then can the
#: obstore runtime be missing, and ``os.getpid`` is asked.
_forked = [False]


def _note_fork() -> None:
    _forked[0] = True


os.register_at_fork(after_in_child=_note_fork)


def _mark_obstore_used() -> None:
    global _obstore_pid
    if _obstore_pid is None:
        _obstore_pid = os.getpid()
        atexit.register(_let_runtime_threads_finish)


def _let_runtime_threads_finish() -> None:
    """Give obstore's runtime threads a moment before the interpreter finalises.

    A runtime thread that completes a call hands the result to the asyncio loop and may still
    be returning from that hand-off (waiting to re-take the GIL) when the main thread reaches
    interpreter shutdown; Python 3.11 then ends that thread with ``pthread_exit``, which aborts
    the process (SIGABRT) because Rust threads cannot be unwound that way. Sleeping here, with
    the GIL released, lets such threads finish first.
    """
    if obstore_usable():
        time.sleep(0.05)


def obstore_usable() -> bool:
    """False in a process forked after obstore was used (its runtime threads are gone)."""
    return _obstore_pid is None or not _forked[0] or _obstore_pid == os.getpid()


#: Exceptions obstore calls raise besides its own: OS errors, ``ValueError`` for a key it
#: cannot parse (control characters, empty segments), and ``RustPanic`` (an ``Exception``
#: from pyo3) when the Rust side panics, e.g. on a bucket name no URI can hold.
FOREIGN_ERRORS: tuple[type[BaseException], ...] = (_ObsBaseError, OSError, ValueError)

#: OS error codes that trying again cannot fix. ``ENAMETOOLONG``/``EILSEQ`` (and a path
#: obstore cannot parse) are the caller's input; the others are store failures.
_BAD_PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EILSEQ})
_PERMANENT_ERRNOS = _BAD_PATH_ERRNOS | frozenset(
    getattr(errno, name) for name in ("EINVAL", "ELOOP", "EISDIR", "ENOTDIR", "EROFS",
                                      "ENOSPC", "EDQUOT", "EFBIG", "EXDEV", "ENOTEMPTY",
                                      "EBADF", "ENXIO", "ENODEV", "EOVERFLOW", "EMLINK")
    if hasattr(errno, name))
_OS_CODE = re.compile(r"os error (\d+)|Os \{\s*code: (\d+)")
#: Paths longer than this are shortened in messages (the start and end are kept).
_MESSAGE_PATH_CHARS = 240


def _os_errno(exc: BaseException) -> int | None:
    """The OS error code of an OS error, or the one obstore reports in its message."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno
    m = _OS_CODE.search(str(exc))
    return int(m.group(1) or m.group(2)) if m else None


def is_rust_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a Rust panic that crossed into Python (pyo3's ``RustPanic`` or
    ``PanicException``): a bug or unsupported input on the Rust side, never transient."""
    return type(exc).__name__ in ("RustPanic", "PanicException")


def raise_mapped(exc: Exception, what: str) -> NoReturn:
    """Raise the alance error for an exception an obstore or OS call raised (see
    :func:`map_error`); exceptions of other kinds (bugs) are raised unchanged."""
    if not isinstance(exc, AlanceError) and (isinstance(exc, FOREIGN_ERRORS)
                                             or is_rust_panic(exc)):
        raise map_error(exc, what) from exc
    raise exc


def _short(what: str) -> str:
    if len(what) <= _MESSAGE_PATH_CHARS:
        return what
    half = _MESSAGE_PATH_CHARS // 2
    return f"{what[:half]}...({len(what)} characters)...{what[-half:]}"


def map_error(exc: BaseException, what: str) -> AlanceError:
    """The alance error for an obstore or OS exception.

    Not found, already exists / precondition failed, permission errors, paths the store
    cannot use (too long, control characters: :class:`InvalidInputError`), OS errors no retry
    can fix and Rust panics are final; other obstore failures (5xx, throttling, timeouts,
    connection errors) are transient.
    """
    if isinstance(exc, AlanceError):
        return exc
    what = _short(what)
    if isinstance(exc, (_ObsNotFound, FileNotFoundError, NotADirectoryError)):
        return NotFoundError(f"not found: {what}")
    if isinstance(exc, (_ObsAlreadyExists, _ObsPrecondition, FileExistsError)):
        return AlreadyExistsError(f"already exists: {what}")
    if isinstance(exc, _ObsUnauthenticated) and _PROVIDER_FAILED in str(exc):
        # alance's credential provider explained why there are no credentials: say that.
        reason = str(exc).split(_PROVIDER_FAILED, 1)[1].split("\n\n", 1)[0].strip()
        return PermissionDeniedError(f"{reason} (on {what})")
    if isinstance(exc, (_ObsPermissionDenied, _ObsUnauthenticated, PermissionError)):
        return PermissionDeniedError(f"access denied on {what}: {_first_line(exc)}")
    if isinstance(exc, (_ObsNotSupported, _ObsInvalidPath, _ObsUnknownConfig, IsADirectoryError)):
        return StoreError(f"object store error on {what}: {_first_line(exc)}")
    if isinstance(exc, _ObsGeneric) and _status_in(exc, (404,)):
        return NotFoundError(f"not found (missing bucket or object): {what}: "
                             f"{_first_line(exc)}")
    if isinstance(exc, _ObsGeneric) and _status_in(exc, (401, 403)):
        return PermissionDeniedError(f"access denied on {what}: {_first_line(exc)}")
    if isinstance(exc, _ObsGeneric) and _status_in(exc, _PERMANENT_STATUS):
        return StoreError(f"object store error on {what}: {_first_line(exc)}")
    if isinstance(exc, ValueError):  # obstore could not parse the key
        return InvalidInputError(f"the object store cannot use the path {what!r}: "
                                 f"{_first_line(exc)}")
    if is_rust_panic(exc):
        return StoreError(f"the object store client failed (a Rust panic) on {what}: "
                          f"{_first_line(exc)}")
    code = _os_errno(exc)
    if code is not None and code in _BAD_PATH_ERRNOS:
        return InvalidInputError(f"the path cannot be used ({os.strerror(code)}): {what}")
    if code is not None and code in _PERMANENT_ERRNOS:
        return StoreError(f"object store error on {what}: {os.strerror(code)}")
    return TransientStoreError(f"object store error on {what}: {_first_line(exc)}")


#: How obstore words a failure of a Python credential provider that raised alance's error.
_PROVIDER_FAILED = "PermissionDeniedError: "


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return _short(text.splitlines()[0]) if text else exc.__class__.__name__


#: HTTP statuses that trying again cannot fix (throttling, 429, and 5xx are transient).
_PERMANENT_STATUS = (400, 405, 409, 411, 412, 413, 416)


def _status_in(exc: BaseException, codes: Sequence[int]) -> bool:
    """Whether obstore's generic error reports one of these HTTP status codes.

    A structured status (an integer ``status`` / ``status_code`` attribute) is used when the
    error carries one; obstore 0.12's ``GenericError`` carries only its message, so the status
    is then read from the message's wording.
    """
    for attribute in ("status", "status_code"):
        status = getattr(exc, attribute, None)
        if isinstance(status, int):
            return status in codes
    text = str(exc)
    return any(f"status code: {code}" in text or f"Client error with status {code}" in text
               or f"status: {code}" in text for code in codes)


class Upload(Protocol):
    """A streaming write of one object: visible only after :meth:`complete`.

    An upload may also offer ``async write_parts(parts)``: several buffers written as if
    joined, without joining them (:class:`~alance.io.store.ObjectWriter` then hands its
    gathered writes over as they are)."""

    async def write(self, data: Buffer) -> None: ...
    async def complete(self) -> None: ...
    async def abort(self) -> None: ...


class Backend(Protocol):
    """Raw object operations on full keys (no leading slash).

    A backend may also offer ``read_cached(key, ranges) -> list[Buffer] | None``: the ranges
    right away, without awaiting, when it can serve them without waiting (``None`` else);
    :meth:`DatasetStore.get_ranges_many` uses it to skip the task per object. And
    ``async list_names(prefix) -> list[str] | None``: the names (last segments) of the keys
    directly under a directory, when that is cheaper than ``list`` (``None``: it is not).
    And ``async rewrite(key, data) -> bool``: replace a small advisory object's bytes in place
    (readers may then see a mix of old and new bytes; ``False``: not offered for this key).
    """

    async def get(self, key: str) -> bytes: ...
    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         coalesce: int) -> list[Buffer]: ...
    async def head(self, key: str) -> Meta: ...
    async def list(self, prefix: str) -> list[Meta]: ...
    async def put(self, key: str, data: bytes, *, create: bool) -> None: ...
    async def copy(self, src: str, dst: str, *, overwrite: bool) -> None: ...
    async def delete(self, key: str) -> None: ...
    def upload(self, key: str) -> Upload: ...


# -- obstore ----------------------------------------------------------------------------------
_END = object()


class _ObstoreUpload:
    """A streaming upload through ``obstore.put_async`` fed from a small bounded queue.

    obstore uploads what the queue yields (a multipart upload once it exceeds one part, parts
    sent concurrently); :meth:`abort` makes the source raise, and obstore then aborts the
    multipart upload, so no incomplete upload or partial object is left behind.

    The first part is held until a second one comes: an object written in one part (most
    data files of an append) is sent with one plain PUT when the upload completes, instead of
    the three requests of a multipart upload (start, part, complete).
    """

    def __init__(self, store: Any, key: str) -> None:
        self._store, self._key = store, key
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=UPLOAD_QUEUE_PARTS)
        self._task: asyncio.Task[Any] | None = None
        self._held: Buffer | None = None

    async def _source(self) -> Any:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def _started(self) -> asyncio.Task[Any]:
        if self._task is None:
            self._task = asyncio.ensure_future(obstore.put_async(
                self._store, self._key, self._source(), chunk_size=UPLOAD_PART_SIZE,
                max_concurrency=UPLOAD_CONCURRENCY))
        return self._task

    async def _send(self, item: Any) -> None:
        task = self._started()
        put = asyncio.ensure_future(self._queue.put(item))
        done, _ = await asyncio.wait({put, task}, return_when=asyncio.FIRST_COMPLETED)
        if put not in done:  # the upload ended (failed) while we waited for queue room
            put.cancel()
            await self._result(task)
            raise StoreError(f"upload of {self._key} ended early")

    async def _result(self, task: asyncio.Task[Any]) -> None:
        try:
            await task
        except Exception as exc:
            raise_mapped(exc, self._key)

    async def write(self, data: Buffer) -> None:
        if self._task is None and self._held is None:
            self._held = data
            return
        if self._held is not None:
            held, self._held = self._held, None
            await self._send(held)
        await self._send(data)

    async def complete(self) -> None:
        if self._task is None:  # one part at most: a plain PUT
            held, self._held = self._held, None
            data = held if isinstance(held, bytes | bytearray) else bytes(held or b"")
            try:
                await obstore.put_async(self._store, self._key, data)
            except Exception as exc:
                raise_mapped(exc, self._key)
            return
        await self._send(_END)
        await self._result(self._started())

    async def abort(self) -> None:
        self._held = None
        if self._task is None:
            return
        if not self._task.done():
            try:
                self._queue.put_nowait(_Aborted())
            except asyncio.QueueFull:
                # The consumer is busy with earlier parts: make room, then fail the source.
                while not self._queue.empty():
                    self._queue.get_nowait()
                self._queue.put_nowait(_Aborted())
        with contextlib.suppress(Exception):  # the upload failing is the point of aborting
            await self._task


class _Aborted(Exception):
    """Raised inside an upload's source to make obstore abort the upload."""


class ObstoreBackend:
    """Backend over an obstore store."""

    def __init__(self, store: Any) -> None:
        self.store = store
        # Range reads of a local file system go through pread in a worker thread: much cheaper
        # per range than obstore's local reads (1000 random-row takes touch ~700 ranges).
        self._pread = isinstance(store, LocalStore) and getattr(store, "prefix", None) is None

    async def get(self, key: str) -> bytes:
        if self._pread:
            cached = local_reads.read_cached_object("/" + key)
            if cached is not None:  # small and in the page cache (a manifest, a hint)
                return cached
        _mark_obstore_used()
        try:
            result = await obstore.get_async(self.store, key)
            return bytes(await result.bytes_async())
        except Exception as exc:
            raise_mapped(exc, key)

    def read_cached(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        """The ranges at once when they can be read without waiting (a local file whose
        bytes are in the page cache), else ``None``."""
        if not self._pread:
            return None
        cached = local_reads.read_cached_ranges("/" + key, ranges)
        return None if cached is None else [memoryview(b) for b in cached]

    @property
    def joins_ranges(self) -> bool:
        """Whether :meth:`read_local` reads ranges here (a local file)."""
        return self._pread

    async def read_local(self, key: str, starts: Sequence[int], ends: Sequence[int], *,
                         joined: bool = True) -> list[Buffer] | None:
        """The ranges ``starts[i]..ends[i]`` of a local file, each read straight into its
        place: all back to back in one buffer (``joined``: a list of that one) or one buffer
        per range. From the page cache on the spot when it holds them all, else by a reader
        thread; ``None`` when this backend does not read local files."""
        if not self._pread:
            return None
        path = "/" + key
        if local_reads.inline_read(starts, ends, joined):
            cached = local_reads.read_local_ranges(path, starts, ends, True, joined)
            if cached is not None:
                return list(cached)
        try:
            got = await asyncio.get_running_loop().run_in_executor(
                local_reads.pread_executor(), local_reads.read_local_ranges, path, starts, ends,
                False, joined)
        except OSError as exc:
            raise map_error(exc, key) from exc
        assert got is not None  # (only a read that may not wait gives up)
        return list(got)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         coalesce: int) -> list[Buffer]:
        if self._pread:
            cached = self.read_cached(key, ranges)
            if cached is not None:
                return cached
            try:
                local = await asyncio.get_running_loop().run_in_executor(
                    local_reads.pread_executor(), local_reads.read_ranges, "/" + key, ranges)
            except OSError as exc:
                raise map_error(exc, key) from exc
            return list(local)
        _mark_obstore_used()
        try:
            parts = await obstore.get_ranges_async(
                self.store, key, starts=[s for s, _ in ranges], ends=[e for _, e in ranges],
                coalesce=coalesce)
        except Exception as exc:
            if is_rust_panic(exc):  # obstore panics on some ranges past the end
                raise CorruptFileError(f"{key}: a requested range lies past the end of the "
                                       "object") from exc
            if not isinstance(exc, FOREIGN_ERRORS):
                raise
            if "range" in str(exc).lower() and not isinstance(exc, (_ObsNotFound, ValueError)):
                # The object is shorter than the caller expects it to be.
                raise CorruptFileError(f"{key}: requested bytes past the end of the object "
                                       f"({exc.__class__.__name__})") from exc
            raise map_error(exc, key) from exc
        return [memoryview(p) for p in parts]  # zero-copy views of obstore's buffers

    async def head(self, key: str) -> Meta:
        _mark_obstore_used()
        try:
            return dict(await obstore.head_async(self.store, key))
        except Exception as exc:
            raise_mapped(exc, key)

    async def list_names(self, prefix: str) -> list[str] | None:
        """Names of the keys directly under the directory ``prefix`` (no sizes or times),
        when that is cheaper than :meth:`list` (a local file system: one ``listdir``, where
        obstore stats every file); ``None`` otherwise."""
        if not self._pread:
            return None
        # On the event loop: one listdir costs less than the round trip through a thread
        # (and less than the caller's pass over the names).
        try:
            return _names_in("/" + prefix.rstrip("/"))
        except OSError as exc:
            raise map_error(exc, prefix) from exc

    async def list(self, prefix: str) -> list[Meta]:
        _mark_obstore_used()
        out: list[Meta] = []
        try:
            async for chunk in obstore.list(self.store, prefix):
                out.extend(dict(m) for m in chunk)
        except (_ObsNotFound, FileNotFoundError):
            return []
        except Exception as exc:
            raise_mapped(exc, prefix)
        return out

    async def put(self, key: str, data: bytes, *, create: bool) -> None:
        if self._pread and len(data) <= INLINE_WRITE_BYTES:
            write_local("/" + key, data, create=create)
            return
        _mark_obstore_used()
        try:
            await obstore.put_async(self.store, key, data,
                                    mode="create" if create else None)  # type: ignore[arg-type]
        except Exception as exc:
            raise_mapped(exc, key)

    async def rewrite(self, key: str, data: bytes) -> bool:
        """Overwrite a small local file in place (see :func:`rewrite_local`); ``False`` for
        other stores (the caller then puts the object)."""
        if not self._pread or len(data) > INLINE_WRITE_BYTES:
            return False
        rewrite_local("/" + key, data)
        return True

    async def copy(self, src: str, dst: str, *, overwrite: bool) -> None:
        _mark_obstore_used()
        try:
            await obstore.copy_async(self.store, src, dst, overwrite=overwrite)
        except Exception as exc:
            raise_mapped(exc, f"{src} -> {dst}")

    async def delete(self, key: str) -> None:
        _mark_obstore_used()
        try:
            await obstore.delete_async(self.store, key)
        except (_ObsNotFound, FileNotFoundError):
            return
        except Exception as exc:
            raise_mapped(exc, key)

    def upload(self, key: str) -> Upload:
        _mark_obstore_used()
        if self._pread:  # a local file system: written here, part by part
            return LocalFileUpload("/" + key)
        return _ObstoreUpload(self.store, key)

    async def remove_empty_dirs(self, prefix: str) -> None:
        """Local file systems: remove the directories left empty under ``prefix``."""
        if self._pread:
            await asyncio.to_thread(remove_empty_tree, "/" + prefix)


# -- plain files --------------------------------------------------------------------------------
def remove_empty_tree(path: str) -> None:
    """Remove the directories under ``path`` (and ``path`` itself) that hold no files: what a
    local file system keeps after every object under a prefix was deleted."""
    if not os.path.isdir(path):
        return
    for here, _dirs, _files in os.walk(path, topdown=False):
        with contextlib.suppress(OSError):  # not empty: something else lives there
            os.rmdir(here)


def _meta_of(key: str, st: os.stat_result) -> Meta:
    return {"path": key, "size": st.st_size,
            "last_modified": dt.datetime.fromtimestamp(st.st_mtime, dt.UTC)}


def _temp_name(path: str) -> str:
    return f"{path}.#{uuid.uuid4().hex}"


#: Most bytes an object written to a local file system may have to be written on the event
#: loop (new file, write, rename or link: tens of microseconds, where a round trip through a
#: worker thread costs hundreds); larger objects are written on worker threads (obstore's,
#: or :class:`LocalFileUpload`'s).
INLINE_WRITE_BYTES = 256 * 1024
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_local(path: str, data: Buffer, *, create: bool) -> None:
    """Write a local file as obstore's local store does, on the calling thread: the bytes go
    to a temporary file next to it, which is then renamed over ``path`` or, with ``create``,
    hard-linked to it (atomic: :class:`AlreadyExistsError` if ``path`` exists). Readers never
    see a partial file. Missing directories are made. OS errors are mapped to alance errors.
    """
    tmp = _temp_name(path)
    try:
        try:
            fd = os.open(tmp, _CREATE_FLAGS, 0o666)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(tmp, _CREATE_FLAGS, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if create:
            try:
                os.link(tmp, path)  # fails if the target exists
            finally:
                with contextlib.suppress(OSError):  # done (or failed) either way
                    os.unlink(tmp)
        else:
            try:
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise map_error(exc, path.lstrip("/")) from exc


class LocalFileUpload:
    """An object of a local file system written as obstore's local store writes it (a
    temporary file beside it, renamed over it when complete, so readers never see part of
    it), with its parts written by ``writev`` on a worker thread: no copy joins them, and
    the event loop never waits for the disk. An object of at most ``INLINE_WRITE_BYTES`` is
    written at :meth:`complete`, on the calling thread (:func:`write_local`)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._held: list[Buffer] = []
        self._held_bytes = 0
        self._tmp: str | None = None
        self._fd: int | None = None
        self._busy: asyncio.Future[None] | None = None  # the write running on its thread

    async def write(self, data: Buffer) -> None:
        await self.write_parts([data])

    async def write_parts(self, parts: Sequence[Buffer]) -> None:
        """Append ``parts``, in order."""
        if self._fd is None:
            self._held.extend(parts)
            self._held_bytes += sum(memoryview(p).nbytes for p in parts)
            if self._held_bytes <= INLINE_WRITE_BYTES:
                return
            parts, self._held, self._held_bytes = self._held, [], 0
        self._busy = asyncio.ensure_future(asyncio.to_thread(self._write, parts))
        # (shielded: a cancelled caller leaves the thread writing, and _busy says when it is
        # done, so that abort never closes the file under it)
        await asyncio.shield(self._busy)

    def _write(self, parts: Sequence[Buffer]) -> None:
        try:
            if self._fd is None:
                self._tmp = _temp_name(self._path)
                try:
                    self._fd = os.open(self._tmp, _CREATE_FLAGS, 0o666)
                except FileNotFoundError:
                    os.makedirs(os.path.dirname(self._path), exist_ok=True)
                    self._fd = os.open(self._tmp, _CREATE_FLAGS, 0o666)
            views = [v for v in (memoryview(p).cast("B") for p in parts) if v.nbytes]
            while views:
                written = os.writev(self._fd, views[:_WRITEV_MAX])
                while views and written >= views[0].nbytes:
                    written -= views[0].nbytes
                    views.pop(0)
                if written:
                    views[0] = views[0][written:]
        except OSError as exc:
            raise map_error(exc, self._path.lstrip("/")) from exc

    async def complete(self) -> None:
        if self._fd is None:  # small: one write, here
            held, self._held = self._held, []
            data = held[0] if len(held) == 1 else b"".join(held)
            write_local(self._path, data, create=False)
            return
        await asyncio.to_thread(self._finish)

    def _finish(self) -> None:
        assert self._fd is not None and self._tmp is not None
        fd, self._fd = self._fd, None
        try:
            os.close(fd)
            os.replace(self._tmp, self._path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)
            raise map_error(exc, self._path.lstrip("/")) from exc

    async def abort(self) -> None:
        self._held = []
        busy = self._busy
        if busy is not None and not busy.done():  # discarded once its thread is done
            busy.add_done_callback(self._discard_after)
            return
        self._discard()

    def _discard_after(self, write: asyncio.Future[None]) -> None:
        if not write.cancelled():
            write.exception()  # (its failure is moot now: the upload is abandoned)
        self._discard()

    def _discard(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        if self._tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._tmp)


#: Most buffers one ``writev`` call takes (Linux's IOV_MAX is 1024).
_WRITEV_MAX = 1024


def rewrite_local(path: str, data: bytes) -> None:
    """Overwrite a small local file in place (made as :func:`write_local` makes it if
    missing), on the calling thread.

    Not atomic: a reader at that moment may see a mix of old and new bytes. For advisory
    files only (``latest_version_hint.json``, which every reader checks against the listing
    or by probing). Renaming a fresh file over the old one would make ext4 (``auto_da_alloc``)
    allocate the new file's blocks and start writing them out at once, a fraction of a
    millisecond per commit; this reuses the old file's block instead.
    """
    try:
        fd = os.open(path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        try:
            write_local(path, data, create=True)
        except AlreadyExistsError:  # made meanwhile by another writer: write over it
            rewrite_local(path, data)
        return
    except OSError as exc:
        raise map_error(exc, path.lstrip("/")) from exc
    try:
        st = os.fstat(fd)
        if st.st_nlink > 1 or not stat.S_ISREG(st.st_mode):
            shared = True  # another name shares the file (a copy made with hard links)
        else:
            shared = False
            view = memoryview(data)
            while view:
                view = view[os.pwrite(fd, view, len(data) - len(view)):]
            if st.st_size > len(data):  # longer before (a bigger number): cut
                os.ftruncate(fd, len(data))
    except OSError as exc:
        raise map_error(exc, path.lstrip("/")) from exc
    finally:
        os.close(fd)
    if shared:  # give this name a file of its own
        write_local(path, data, create=False)


def _names_in(directory: str) -> list[str]:
    """The entry names of a local directory (none if it does not exist)."""
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _walk(root: str, prefix: str) -> list[Meta]:
    base = os.path.join("/", root)
    out: list[Meta] = []
    for dirpath, _, files in os.walk(base):
        for name in files:
            if ".#" in name:
                continue  # in-flight temporary files
            full = os.path.join(dirpath, name)
            try:
                out.append(_meta_of(full.lstrip("/"), os.stat(full)))
            except FileNotFoundError:
                continue
    return [m for m in out if m["path"].startswith(prefix)]


class _PosixUpload:
    def __init__(self, path: str) -> None:
        self._path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._tmp = _temp_name(path)
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed in complete/abort

    async def write(self, data: Buffer) -> None:
        await asyncio.to_thread(self._file.write, data)

    async def complete(self) -> None:
        def finish() -> None:
            self._file.close()
            os.replace(self._tmp, self._path)

        await asyncio.to_thread(finish)

    async def abort(self) -> None:
        self._file.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)


class PosixBackend:
    """Backend over the local file system (keys are absolute paths without the leading '/')."""

    @staticmethod
    def _path(key: str) -> str:
        return "/" + key

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except OSError as exc:
            raise map_error(exc, what) from exc

    async def get(self, key: str) -> bytes:
        def read() -> bytes:
            with open(self._path(key), "rb") as f:
                return f.read()

        return await self._call(key, read)  # type: ignore[no-any-return]

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         coalesce: int) -> list[Buffer]:
        return await self._call(key, local_reads.read_ranges, self._path(key), ranges)  # type: ignore[no-any-return]

    async def head(self, key: str) -> Meta:
        st = await self._call(key, os.stat, self._path(key))
        if not stat.S_ISREG(st.st_mode):  # a directory is not an object
            raise NotFoundError(f"not found: {key}")
        return _meta_of(key, st)

    async def list_names(self, prefix: str) -> list[str] | None:
        """Names of the keys directly under the directory ``prefix`` (one ``listdir``)."""
        return await self._call(prefix, _names_in, self._path(prefix.rstrip("/")))  # type: ignore[no-any-return]

    async def list(self, prefix: str) -> list[Meta]:
        root = prefix.rstrip("/")
        return await self._call(prefix, _walk, root, prefix)  # type: ignore[no-any-return]

    async def put(self, key: str, data: bytes, *, create: bool) -> None:
        await self._call(key, functools.partial(write_local, create=create), self._path(key),
                         data)

    async def rewrite(self, key: str, data: bytes) -> bool:
        """Overwrite a small file in place (see :func:`rewrite_local`)."""
        await asyncio.to_thread(rewrite_local, self._path(key), data)
        return True

    async def copy(self, src: str, dst: str, *, overwrite: bool) -> None:
        data = await self.get(src)
        await self.put(dst, data, create=not overwrite)

    async def delete(self, key: str) -> None:
        try:
            await self._call(key, os.unlink, self._path(key))
        except NotFoundError:
            return

    def upload(self, key: str) -> Upload:
        return _PosixUpload(self._path(key))

    async def remove_empty_dirs(self, prefix: str) -> None:
        """Remove the directories left empty under ``prefix``."""
        await asyncio.to_thread(remove_empty_tree, self._path(prefix))


# -- in-process dictionary ----------------------------------------------------------------------
class _DictUpload:
    def __init__(self, backend: DictBackend, key: str) -> None:
        self._backend, self._key = backend, key
        self._parts: list[bytes] = []

    async def write(self, data: Buffer) -> None:
        self._parts.append(bytes(data))

    async def complete(self) -> None:
        await self._backend.put(self._key, b"".join(self._parts), create=False)

    async def abort(self) -> None:
        self._parts = []


class DictBackend:
    """Backend over a dictionary shared by every store of one process (``memory://``)."""

    def __init__(self, objects: dict[str, tuple[bytes, dt.datetime]],
                 lock: threading.Lock) -> None:
        self._objects = objects
        self._lock = lock

    def _entry(self, key: str) -> tuple[bytes, dt.datetime]:
        with self._lock:
            entry = self._objects.get(key)
        if entry is None:
            raise NotFoundError(f"not found: {key}")
        return entry

    async def get(self, key: str) -> bytes:
        return self._entry(key)[0]

    def read_cached(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer] | None:
        """The ranges right away (memory never waits); ``None`` for a missing object."""
        with self._lock:
            entry = self._objects.get(key)
        return None if entry is None else [entry[0][s:e] for s, e in ranges]

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         coalesce: int) -> list[Buffer]:
        data = self._entry(key)[0]
        return [data[s:e] for s, e in ranges]

    async def head(self, key: str) -> Meta:
        data, when = self._entry(key)
        return {"path": key, "size": len(data), "last_modified": when}

    async def list(self, prefix: str) -> list[Meta]:
        with self._lock:
            items = [(k, v) for k, v in self._objects.items() if k.startswith(prefix)]
        return [{"path": k, "size": len(d), "last_modified": w} for k, (d, w) in items]

    async def put(self, key: str, data: bytes, *, create: bool) -> None:
        now = dt.datetime.now(dt.UTC)
        with self._lock:
            if create and key in self._objects:
                raise AlreadyExistsError(f"already exists: {key}")
            self._objects[key] = (bytes(data), now)

    async def copy(self, src: str, dst: str, *, overwrite: bool) -> None:
        await self.put(dst, await self.get(src), create=not overwrite)

    async def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def upload(self, key: str) -> Upload:
        return _DictUpload(self, key)
