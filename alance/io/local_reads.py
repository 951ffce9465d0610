"""Ranges of local files: read on the event loop when the page cache holds them (never
waiting for the disk), else by reader threads; large pieces mapped rather than copied
(:mod:`alance.io.mapped_reads`), the rest read into buffers of Arrow's memory pool.

:class:`~alance.io.backends.ObstoreBackend` reads local datasets through these functions:
much cheaper per range than obstore's local reads (a take of 1000 rows touches ~700 ranges).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from alance.errors import CorruptFileError
from alance.io import mapped_reads
from alance.io.mapped_reads import MAP_MIN_BYTES

Buffer = bytes | memoryview

__all__ = ["INLINE_MAP_BYTES", "INLINE_READ_BYTES", "NOWAIT", "POOLED_READ_BYTES",
           "PREAD_WORKERS", "inline_read", "pread_executor", "read_cached_object",
           "read_cached_ranges", "read_local_ranges", "read_ranges"]


#: Threads that read ranges of local files (all started at once, so a process's thread count
#: does not creep up under load; a forked child starts its own).
PREAD_WORKERS = 2
_pread_pool: ThreadPoolExecutor | None = None
_pread_pid = 0
_pread_lock = threading.Lock()


def pread_executor() -> ThreadPoolExecutor:
    """The reader threads of this process (started together on first use, and again in a
    forked child)."""
    global _pread_pool, _pread_pid
    pid = os.getpid()
    if _pread_pool is None or _pread_pid != pid:
        with _pread_lock:
            if _pread_pool is None or _pread_pid != pid:
                pool = ThreadPoolExecutor(PREAD_WORKERS, thread_name_prefix="alance-pread")
                started = threading.Barrier(PREAD_WORKERS + 1)
                for _ in range(PREAD_WORKERS):
                    pool.submit(started.wait)
                started.wait()
                _pread_pool, _pread_pid = pool, pid
    return _pread_pool


def read_ranges(path: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
    """``[start, end)`` ranges of a local file; a range past its end is a
    :class:`CorruptFileError` (the caller expected a longer file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        parts = [_pread(fd, s, e) for s, e in ranges]
    finally:
        os.close(fd)
    for (s, e), part in zip(ranges, parts, strict=True):
        if len(part) != e - s:
            raise CorruptFileError(f"{path}: requested bytes {s}..{e} past the end of the file")
    return parts


#: Reads of at least this many bytes go into buffers of Arrow's memory pool.
POOLED_READ_BYTES = 64 * 1024


def _pread(fd: int, start: int, end: int) -> Buffer:
    """Bytes ``start..end`` of an open file (fewer at its end). Large reads land in a buffer
    of Arrow's memory pool, which reuses the memory of buffers freed before: a fresh
    ``bytes`` of megabytes is new memory from the kernel each time, and faulting its pages in
    costs more than copying the data (numpy and Arrow read the buffer without copying).
    Larger ones still are a view of a mapping of the file (:mod:`.mapped_reads`)."""
    size = end - start
    if size < POOLED_READ_BYTES:
        return os.pread(fd, size, start)
    if size >= MAP_MIN_BYTES and mapped_reads.enabled():
        file_size = os.fstat(fd).st_size
        view = mapped_reads.map_range(fd, start, min(end, file_size), file_size)
        if view is not None:
            return view
    buf = pa.allocate_buffer(size)
    got = os.preadv(fd, [buf], start)
    return memoryview(buf)[:got]


#: Most bytes one call reads on the event loop from the page cache (copying costs ~0.1 ms per
#: MiB; more than this goes to a reader thread).
INLINE_READ_BYTES = 1024 * 1024
NOWAIT = getattr(os, "RWF_NOWAIT", 0)


def read_cached_ranges(path: str, ranges: Sequence[tuple[int, int]],
                       ) -> list[bytearray | pa.Buffer] | None:
    """The ranges if the kernel can serve them all from its page cache without waiting for
    the disk (``preadv`` with ``RWF_NOWAIT``), else ``None`` (then a reader thread reads).

    This never blocks the calling thread on IO, so the event loop may call it: a point read of
    cached data then costs a few microseconds instead of a round trip through a thread.
    """
    if not NOWAIT or sum(e - s for s, e in ranges) > INLINE_READ_BYTES:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None  # the thread path reports the error
    try:
        parts: list[bytearray | pa.Buffer] = []
        for s, e in ranges:
            # (a large one from Arrow's memory pool: see _pread)
            buf = pa.allocate_buffer(e - s) if e - s >= POOLED_READ_BYTES else bytearray(e - s)
            if e > s and os.preadv(fd, [buf], s, NOWAIT) != e - s:
                return None  # short (past the end, or partly cached): the thread path decides
            parts.append(buf)
        return parts
    except OSError:
        return None
    finally:
        os.close(fd)


#: From this many ranges on, those smaller than ``SHARED_PIECE_BYTES`` that would be read
#: into buffers of their own share slabs of ``SHARED_SLAB_BYTES`` instead: a take of thousands
#: of rows reads thousands of small pieces, and one pool allocation each cost more than
#: reading them. (Fewer ranges, as when a page's metadata and dictionary are read to be kept,
#: each get their own buffer.)
SHARED_MIN_RANGES = 64
SHARED_PIECE_BYTES = 64 * 1024
SHARED_SLAB_BYTES = 1024 * 1024


def _separate_targets(sizes: Sequence[int]) -> list[memoryview]:
    """A buffer per range size, from Arrow's pool: each range its own, or, for many ranges,
    the small ones cut from shared slabs (a view kept of one keeps at most a slab)."""
    if len(sizes) < SHARED_MIN_RANGES:
        return [memoryview(pa.allocate_buffer(n)) for n in sizes]
    targets: list[memoryview] = []
    slab = memoryview(b"")
    used = 0
    for n in sizes:
        if n >= SHARED_PIECE_BYTES:
            targets.append(memoryview(pa.allocate_buffer(n)))
            continue
        if used + n > len(slab):
            slab, used = memoryview(pa.allocate_buffer(SHARED_SLAB_BYTES)), 0
        targets.append(slab[used: used + n])
        used += n
    return targets


def read_local_ranges(path: str, starts: Sequence[int], ends: Sequence[int], nowait: bool,
                      joined: bool = True) -> list[memoryview] | None:
    """Ranges of a local file read into buffers of Arrow's memory pool, each by one
    ``preadv`` into its place: back to back in one buffer (``joined``; a list of that one),
    or one buffer per range (so that a view kept of one range keeps only its own bytes;
    large ones are views of a mapping of the file instead, see :mod:`.mapped_reads`).

    ``nowait``: only from the page cache, never waiting for the disk (``None`` when a range is
    not all there, or the file cannot be opened: the caller then reads the usual way, which
    reports errors); else a range past the end of the file is a :class:`CorruptFileError`.
    """
    sizes = [max(e - s, 0) for s, e in zip(starts, ends, strict=True)]
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_NONBLOCK if nowait else 0))
    except OSError:
        if nowait:
            return None
        raise
    try:
        # Large separate pieces are mapped rather than copied (see mapped_reads); without
        # waiting for the disk, only those the page cache holds whole.
        mapping = not joined and mapped_reads.enabled()
        mapped = _mapped_pieces(fd, starts, ends, nowait) if mapping else None
        if nowait and mapping and any(n >= MAP_MIN_BYTES and (mapped is None or mapped[i] is None)
                                      for i, n in enumerate(sizes)):
            return None  # (a large piece not all in the page cache: for a reader thread)
        if mapped is not None:
            sizes = [0 if m is not None else n for n, m in zip(sizes, mapped, strict=True)]
        if joined:
            whole = memoryview(pa.allocate_buffer(sum(sizes)))
            pos, targets = 0, []
            for n in sizes:
                targets.append(whole[pos: pos + n])
                pos += n
        else:
            targets = _separate_targets(sizes)
        for s, n, target in zip(starts, sizes, targets, strict=True):
            if not n:
                continue
            try:
                got = os.preadv(fd, [target], s, NOWAIT if nowait else 0)
            except OSError:
                if nowait:
                    return None
                raise
            if got != n:
                if nowait:
                    return None
                raise CorruptFileError(f"{path}: requested bytes {s}..{s + n} past the end of "
                                       "the file")
    finally:
        os.close(fd)
    if mapped is not None:
        return [t if m is None else m for t, m in zip(targets, mapped, strict=True)]
    return [whole] if joined else targets


#: Most bytes one call maps on the event loop (pieces the page cache holds whole; see
#: :func:`inline_read`).
INLINE_MAP_BYTES = 16 * 1024 * 1024


def inline_read(starts: Sequence[int], ends: Sequence[int], joined: bool) -> bool:
    """Whether :func:`read_local_ranges` of these ranges may be tried on the event loop
    (``nowait``): at most :data:`INLINE_READ_BYTES` to copy and :data:`INLINE_MAP_BYTES` to
    map (filling in a mapping of resident pages costs about a fifth of copying them)."""
    if not NOWAIT:
        return False
    sizes = [e - s for s, e in zip(starts, ends, strict=True)]
    if joined or not mapped_reads.enabled():
        return sum(sizes) <= INLINE_READ_BYTES
    mapped = sum(n for n in sizes if n >= MAP_MIN_BYTES)
    return sum(sizes) - mapped <= INLINE_READ_BYTES and mapped <= INLINE_MAP_BYTES


def _mapped_pieces(fd: int, starts: Sequence[int], ends: Sequence[int], resident_only: bool,
                   ) -> list[memoryview | None] | None:
    """The ranges of ``fd`` that :func:`mapped_reads.map_range` maps (``None`` for the others
    to be read), or ``None`` when it maps none of them. (The caller checked that mapping is
    on.)"""
    if not any(e - s >= MAP_MIN_BYTES for s, e in zip(starts, ends, strict=True)):
        return None
    size = os.fstat(fd).st_size
    views = [mapped_reads.map_range(fd, s, e, size, resident_only=resident_only)
             for s, e in zip(starts, ends, strict=True)]
    return views if any(v is not None for v in views) else None


def read_cached_object(path: str) -> bytes | None:
    """A whole local file of at most :data:`INLINE_READ_BYTES` if the page cache holds all of
    it (never waits for the disk), else ``None`` (then the usual path reads it and reports
    errors, a missing file included)."""
    if not NOWAIT:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size > INLINE_READ_BYTES:
            return None
        buf = bytearray(size)
        if size and os.preadv(fd, [buf], 0, NOWAIT) != size:
            return None
        return bytes(buf)
    except OSError:
        return None
    finally:
        os.close(fd)
