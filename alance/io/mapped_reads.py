"""Large ranges of local files served from the page cache without a copy.

A scan reads pages of megabytes. Read with ``preadv``, each costs a buffer (whose pages the
kernel must fault in and zero when the allocator has handed its memory back) and a copy out of
the page cache; together about a third of a millisecond per MiB, a tenth of a 2.x scan's CPU.
Mapping the range instead and asking the kernel to fill in the mapping's page tables at once
(``madvise(MADV_POPULATE_READ)``, Linux 5.14 and later) costs about a twentieth of that, and
the decoders read the page cache in place.

The populate call runs on the reader thread through ``ctypes``, which releases the GIL: a range
that is not in the page cache is read from disk there, as ``preadv`` would, and never by a page
fault on the event loop's thread. Where the kernel lacks the call, nothing is mapped.

Lance data files are immutable (a write makes new files; cleanup deletes whole files, and an
unlinked file stays readable through a mapping). A file changed *in place* while a table still
holds views of it would show the change, or raise ``SIGBUS`` if it was truncated: that is
outside the format's contract, and :func:`set_enabled` turns mapping off for such setups.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
from collections.abc import Callable

import numpy as np

__all__ = ["MAP_MIN_BYTES", "enabled", "map_range", "set_enabled"]

#: Ranges of at least this many bytes are mapped; smaller ones are cheaper to copy than to map.
MAP_MIN_BYTES = 256 * 1024

#: ``MADV_POPULATE_READ`` (Linux ``<asm-generic/mman-common.h>``).
_MADV_POPULATE_READ = 22

_PAGE = mmap.ALLOCATIONGRANULARITY
_lock = threading.Lock()
_wanted = True
_usable: bool | None = None  # probed on first use
_madvise: Callable[[int, int, int], int] | None = None
_mincore: Callable[[int, int, ctypes.Array[ctypes.c_ubyte]], int] | None = None


def set_enabled(enabled: bool) -> None:
    """Whether large local reads may map files (default: yes, where the kernel can populate
    a mapping up front). Turn it off where data files may be rewritten in place."""
    global _wanted
    _wanted = bool(enabled)


def enabled() -> bool:
    """Whether :func:`map_range` maps (switched on, and supported by this kernel)."""
    return _wanted and _probe()


def _probe() -> bool:
    global _usable, _madvise, _mincore
    if _usable is not None:
        return _usable
    with _lock:
        if _usable is None:
            usable = False
            if sys.platform.startswith("linux"):
                try:
                    libc = ctypes.CDLL(None, use_errno=True)
                    fn = libc.madvise
                    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                    fn.restype = ctypes.c_int
                    resident = libc.mincore
                    resident.argtypes = [ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.POINTER(ctypes.c_ubyte)]
                    resident.restype = ctypes.c_int
                    probe = mmap.mmap(-1, _PAGE)
                    try:
                        address = np.frombuffer(probe, dtype=np.uint8).ctypes.data
                        usable = fn(address, _PAGE, _MADV_POPULATE_READ) == 0
                    finally:
                        probe.close()
                    _madvise, _mincore = fn, resident
                except (OSError, AttributeError, ValueError):
                    usable = False
            _usable = usable
    return bool(_usable)


def map_range(fd: int, start: int, end: int, file_size: int, *,
              resident_only: bool = False) -> memoryview | None:
    """Bytes ``start..end`` of the open file ``fd`` (of ``file_size`` bytes; ``end`` at most
    that) as a read-only view of a mapping whose pages are already filled in, or ``None`` when
    mapping is off or fails (the caller then reads the range the usual way, which reports any
    error). The mapping lives as long as views of it do.

    ``resident_only``: ``None`` too unless the page cache already holds every page of the
    range (``mincore``), so that the call never waits for the disk: the event loop may then
    make it (filling in the page tables of resident pages costs ~20 µs per MiB). Where the
    kernel does not report residency (it does so only for files the process may write,
    since Linux 5.0), nothing is mapped this way and the caller's reader thread maps it."""
    if end - start < MAP_MIN_BYTES or end > file_size or not enabled():
        return None
    base = start - start % _PAGE
    try:
        mapped = mmap.mmap(fd, end - base, access=mmap.ACCESS_READ, offset=base)
    except (OSError, ValueError):
        return None
    address = np.frombuffer(mapped, dtype=np.uint8).ctypes.data
    if resident_only and not _all_resident(address, end - base):
        mapped.close()
        return None
    assert _madvise is not None
    if _madvise(address, end - base, _MADV_POPULATE_READ) != 0:
        # (EIO from the disk, EFAULT if the file shrank): let the usual read report it.
        mapped.close()
        return None
    return memoryview(mapped)[start - base:]


def _all_resident(address: int, length: int) -> bool:
    """Whether the page cache holds every page of the mapping at ``address``."""
    assert _mincore is not None
    pages = -(-length // _PAGE)
    vec = (ctypes.c_ubyte * pages)()
    if _mincore(address, length, vec) != 0:
        return False
    return bool((np.frombuffer(memoryview(vec), dtype=np.uint8) & 1).all())
