"""Handing decoded bytes to Arrow without copying, unless their start is misaligned."""

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


__all__ = ["VALUE_ALIGNMENT", "aligned_buffer"]
