"""JSON text of whole JSONB columns: which kernel prints which values.

A column converts in three tiers, each handing what it cannot print to the next:

1. values sharing shapes, by :func:`alance.format.jsonb_shapes.shaped_text` (a few Arrow
   calls per shape and item);
2. the rest, by the generic column kernel :func:`alance.format.jsonb_bulk.bulk_text` (level
   by level, one token layout for all values);
3. values either kernel marks (strings needing escapes, integers beyond int64, damage), one
   by one by :func:`alance.format.jsonb.to_text`, which also raises the precise error for a
   damaged value.

Columns of fewer than :data:`BULK_MIN_VALUES` values go value by value.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.format.jsonb import MAX_VALUE_BYTES, to_text
from alance.format.jsonb_bulk import TEXT_POOL, texts_at
from alance.format.jsonb_shapes import shaped_text

__all__ = ["BULK_MIN_VALUES", "PIECE_BYTES", "array_to_text"]


def array_to_text(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """JSON text (``arrow.json`` over utf8) of a binary array of JSONB values (nulls kept)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    storage = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
    if len(storage) >= BULK_MIN_VALUES:
        pieces = -(-storage.nbytes // PIECE_BYTES)
        if pieces > 1:  # (the generic kernel's token indices are 32-bit)
            step = -(-len(storage) // pieces)
            texts = [_bulk_to_text(storage.slice(i, step))
                     for i in range(0, len(storage), step)]
            return pa.chunked_array(texts).combine_chunks()
        return _bulk_to_text(storage)
    values = storage.to_pylist()
    texts = [None if v is None else to_text(v) for v in values]
    return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()), pa.array(texts, pa.utf8()))


#: Columns of at least this many values are converted by the column kernels; fewer, value by
#: value.
BULK_MIN_VALUES = 64
#: The column kernels convert at most about this many bytes of values at once.
PIECE_BYTES = 256 << 20


def _bulk_to_text(storage: pa.Array) -> pa.Array:
    if storage.type != pa.large_binary():
        storage = storage.cast(pa.large_binary())
    n = len(storage)
    offsets = np.frombuffer(storage.buffers()[1], np.int64, n + 1, storage.offset * 8)
    data = (np.frombuffer(storage.buffers()[2], np.uint8) if storage.buffers()[2] is not None
            else np.zeros(0, np.uint8))
    if (offsets[1:] - offsets[:-1]).max(initial=0) > MAX_VALUE_BYTES:
        values = storage.to_pylist()
        texts_list = [None if v is None else to_text(v) for v in values]
        return pa.ExtensionArray.from_storage(pa.json_(pa.utf8()),
                                              pa.array(texts_list, pa.utf8()))
    valid = np.asarray(storage.is_valid())
    rows = np.flatnonzero(valid)
    texts, slow = shaped_text(data, offsets[:-1][rows], offsets[1:][rows])
    out = texts
    if slow.any():  # printed one by one (and damaged values raise here)
        again = rows[slow]
        fixed = pa.array([to_text(storage[int(i)].as_py()) for i in again], pa.large_string())
        index = np.arange(len(rows))
        index[np.flatnonzero(slow)] = len(rows) + np.arange(len(again))
        out = texts_at([out, fixed], index)
    if len(rows) != n:  # nulls back in place
        index = np.full(n, -1, dtype=np.int64)
        index[rows] = np.arange(len(rows))
        out = pc.take(out, pa.array(index, mask=~valid), memory_pool=TEXT_POOL)
    return pa.ExtensionArray.from_storage(
        pa.json_(pa.utf8()), pc.cast(out, pa.utf8(), memory_pool=TEXT_POOL))
