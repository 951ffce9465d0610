"""Handing decoded bytes to Arrow without copying, unless their start is misaligned; large
output arrays allocated from Arrow's memory pool."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

#: Fixed-width values handed to Arrow start at a multiple of this many bytes.
VALUE_ALIGNMENT = 8


def aligned_buffer(data: bytes | bytearray | memoryview | np.ndarray) -> pa.Buffer:
    """``data`` as an Arrow buffer, copied when it does not start on an 8-byte boundary.

    Decoded values are often views of the bytes a store returned, which start anywhere;
    Arrow's kernels expect values aligned to their width (Acero warns about misaligned input,
    and some kernels slow down on it)."""
    raw = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
    if raw.ctypes.data % VALUE_ALIGNMENT:
        raw = raw.copy()
    return pa.py_buffer(raw)


def pooled_empty(shape: int | tuple[int, ...], dtype: np.dtype | type | str) -> np.ndarray:
    """``np.empty(shape, dtype)``, from Arrow's memory pool when large.

    Decoded pages become arrays the caller keeps; numpy takes each large one from fresh
    kernel memory (and asks for huge pages), so every scan pays page faults for all its
    output again. Arrow's pool (mimalloc or jemalloc) hands out the memory of buffers freed
    before, as the Rust reader's allocator does. The array is writable and aligned to 64.
    """
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = 1
    for d in dims:
        count *= int(d)
    nbytes = count * dt.itemsize
    if nbytes < POOLED_BYTES:
        return np.empty(dims, dtype=dt)
    return np.frombuffer(pa.allocate_buffer(nbytes), dtype=dt, count=count).reshape(dims)


def pooled_concatenate(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(arrays)`` (along the first axis) into :func:`pooled_empty` memory."""
    if len(arrays) == 1:
        return arrays[0]
    first = arrays[0]
    shape = (sum(len(a) for a in arrays), *first.shape[1:])
    dtype = np.result_type(*arrays)
    return np.concatenate(arrays, out=pooled_empty(shape, dtype))


def _owner(arr: np.ndarray) -> object:
    """The object whose memory ``arr`` views (the exporter of a memoryview it came from)."""
    base: object = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    while isinstance(base, memoryview):
        base = base.obj
    return base


def adjacent_view(arrays: list[np.ndarray]) -> np.ndarray | None:
    """``arrays`` (along the first axis) as one read-only view, without a copy, when they lie
    back to back in one buffer (pages adjacent in a file, read in one piece); else None.

    The view keeps that buffer alive; it is read-only, so it can never write through to the
    bytes a store handed out."""
    first = arrays[0]
    owner = _owner(first)
    if isinstance(owner, np.ndarray) or owner is None:
        return None
    at = first.ctypes.data
    for a in arrays:
        if (a.dtype != first.dtype or a.shape[1:] != first.shape[1:]
                or not a.flags.c_contiguous or a.ctypes.data != at or _owner(a) is not owner):
            return None
        at += a.nbytes
    try:
        whole = np.frombuffer(owner, np.uint8)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    lo = first.ctypes.data - whole.ctypes.data
    if lo < 0 or lo + (at - first.ctypes.data) > whole.nbytes:
        return None
    view = whole[lo: lo + at - first.ctypes.data].view(first.dtype)
    view = view.reshape((sum(len(a) for a in arrays), *first.shape[1:]))
    view.flags.writeable = False
    return view


#: Arrays of at least this many bytes come from Arrow's memory pool (:func:`pooled_empty`).
POOLED_BYTES = 64 * 1024


__all__ = ["POOLED_BYTES", "VALUE_ALIGNMENT", "adjacent_view", "aligned_buffer",
           "pooled_concatenate", "pooled_empty"]
