"""Decoded values reach Arrow aligned: views of store bytes that start anywhere are copied.

Acero warns ("An input buffer was poorly aligned") and some kernels slow down when a
fixed-width buffer does not start on its width; store reads (S3 especially) hand back bytes
at arbitrary offsets.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import acero

from alance.format.arrow_buffers import (
    POOLED_BYTES,
    adjacent_view,
    aligned_buffer,
    pooled_concatenate,
    pooled_empty,
)
from alance.format.v2.blocks import Fixed, to_arrow


def _misaligned(values: np.ndarray) -> np.ndarray:
    raw = np.frombuffer(b"\0" * 3 + values.tobytes(), np.uint8)[3:]
    assert raw.ctypes.data % 8
    return raw


def test_misaligned_values_are_copied_aligned(capfd) -> None:
    values = np.arange(100, dtype=np.int64)
    arr = to_arrow(Fixed.from_bytes(_misaligned(values), 64, 100), pa.int64(), None)
    assert arr.buffers()[1].address % 8 == 0
    assert arr.to_pylist() == values.tolist()
    vec = to_arrow(Fixed(_misaligned(np.arange(40, dtype=np.float32)).reshape(10, 16), 128),
                   pa.list_(pa.float32(), 4), None)
    assert vec.values.buffers()[1].address % 8 == 0
    # Acero takes them without complaint.
    table = pa.table({"a": arr})
    acero.Declaration.from_sequence([
        acero.Declaration("table_source", acero.TableSourceNodeOptions(table)),
        acero.Declaration("filter", acero.FilterNodeOptions(pc.field("a") > 50)),
    ]).to_table(use_threads=False)
    assert "poorly aligned" not in capfd.readouterr().err


def test_aligned_bytes_are_not_copied() -> None:
    data = np.arange(16, dtype=np.int64).view(np.uint8)
    assert aligned_buffer(data).address == data.ctypes.data
    assert aligned_buffer(_misaligned(np.arange(4))).address % 8 == 0


def test_large_arrays_come_from_arrows_pool_and_small_ones_from_numpy() -> None:
    pool = pa.default_memory_pool()
    before = pool.bytes_allocated()
    big = pooled_empty((3, POOLED_BYTES // 8), np.uint64)
    assert pool.bytes_allocated() - before >= big.nbytes  # Arrow's pool holds it
    assert big.shape == (3, POOLED_BYTES // 8) and big.dtype == np.uint64
    assert big.flags.writeable and big.flags.c_contiguous and big.ctypes.data % 64 == 0
    big[...] = 7
    assert int(big.sum()) == 7 * big.size
    small = pooled_empty(10, np.int32)
    assert small.shape == (10,) and small.flags.writeable
    del big
    assert pool.bytes_allocated() == before  # freed back to the pool with the array


def test_pooled_concatenate_joins_along_the_first_axis() -> None:
    parts = [np.arange(12, dtype=np.int32).reshape(6, 2),
             np.arange(POOLED_BYTES // 4, dtype=np.int32).reshape(-1, 2)]
    got = pooled_concatenate(parts)
    assert got.shape == (6 + POOLED_BYTES // 8, 2) and got.dtype == np.int32
    assert np.array_equal(got, np.concatenate(parts))
    assert pooled_concatenate(parts[:1]) is parts[0]


def test_adjacent_views_of_one_buffer_join_without_a_copy() -> None:
    buf = pa.allocate_buffer(64)
    raw = memoryview(buf)
    parts = [np.frombuffer(raw[0:16], np.uint32), np.frombuffer(raw[16:48], np.uint32)]
    joined = adjacent_view(parts)
    assert joined is not None and len(joined) == 12
    assert joined.ctypes.data == parts[0].ctypes.data and not joined.flags.writeable
    assert np.array_equal(joined, np.concatenate(parts))
    # a gap, another buffer, another dtype: no view
    assert adjacent_view([parts[0], np.frombuffer(raw[20:48], np.uint32)]) is None
    other = np.frombuffer(pa.allocate_buffer(32), np.uint32)
    assert adjacent_view([parts[0], other]) is None
    assert adjacent_view([parts[0], np.frombuffer(raw[16:48], np.uint16)]) is None
    assert adjacent_view([np.arange(4), np.arange(4)]) is None  # numpy-owned memory
