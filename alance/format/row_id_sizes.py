"""Exact serialized sizes of row id segments and arrays, computed without building them.

Pure arithmetic over protobuf's wire format (proto3: zero scalars and empty bytes are not
written; all tags used here take one byte). :mod:`alance.format.row_id_sequence` uses these to
pick the smallest encoding.
"""

from __future__ import annotations

import numpy as np

#: Segment kinds, in the order preferred when two have the same size.
SEGMENT_KINDS = ("range", "range_with_holes", "range_with_bitmap", "sorted_array", "array")
_U64_MAX = (1 << 64) - 1



def varint_size(value: int) -> int:
    """Bytes of ``value`` as a protobuf varint."""
    return max(1, (int(value).bit_length() + 6) // 7)


def _scalar_field(value: int) -> int:
    # proto3: a zero scalar is not written at all (all our tags fit one byte)
    return 0 if value == 0 else 1 + varint_size(value)


def message_field_size(size: int) -> int:
    return 1 + varint_size(size) + size


def _bytes_field(size: int) -> int:
    return 0 if size == 0 else 1 + varint_size(size) + size


def _array_widths(lo: int, hi: int, n: int) -> dict[str, int]:
    """Serialized ``EncodedU64Array`` size for each width that can hold values in [lo, hi]."""
    out = {"u64_array": message_field_size(_bytes_field(8 * n))}
    if n == 0:
        return out
    span = hi - lo
    if span <= 0xFFFF:
        out["u16_array"] = message_field_size(_scalar_field(lo) + _bytes_field(2 * n))
    if span <= 0xFFFFFFFF:
        out["u32_array"] = message_field_size(_scalar_field(lo) + _bytes_field(4 * n))
    return out


def best_width(lo: int, hi: int, n: int) -> tuple[str, int]:
    sizes = _array_widths(lo, hi, n)
    if n == 0:
        return "u64_array", sizes["u64_array"]  # an empty array is written as u64 (as Lance)
    order = ("u16_array", "u32_array", "u64_array")
    name = min((k for k in order if k in sizes), key=lambda k: (sizes[k], order.index(k)))
    return name, sizes[name]


def encoded_array_size(values: np.ndarray) -> int:
    """Serialized size of the smallest ``EncodedU64Array`` holding ``values``."""
    if not len(values):
        return best_width(0, 0, 0)[1]
    return best_width(int(values.min()), int(values.max()), len(values))[1]


def _range_body(start: int, end: int) -> int:
    return _scalar_field(start) + _scalar_field(end)


def _hole_bounds(values: np.ndarray, lo: int, hi: int) -> tuple[int, int]:
    """Smallest and largest missing value of sorted distinct ``values`` with a gap."""
    n = len(values)
    expected_from_lo = np.arange(n, dtype=np.uint64) + np.uint64(lo)
    first = int(np.argmax(values != expected_from_lo))
    expected_from_hi = np.uint64(hi) - np.arange(n - 1, -1, -1, dtype=np.uint64)
    last = n - 1 - int(np.argmax((values != expected_from_hi)[::-1]))
    return lo + first, hi - (n - 1 - last)


def candidate_sizes(values: np.ndarray) -> dict[str, int]:
    """Serialized size of a ``U64Segment`` holding ``values`` in each form that can hold them.

    ``values`` must be distinct. ``range`` needs them sorted and contiguous, the two
    range-with forms and ``sorted_array`` need them sorted; ``array`` always applies.
    """
    n = len(values)
    sizes = {"array": message_field_size(encoded_array_size(values))}
    if n == 0:
        sizes["range"] = message_field_size(0)
        return sizes
    if n > 1 and not bool(np.all(values[1:] > values[:-1])):
        return sizes
    lo, hi = int(values[0]), int(values[-1])
    start, end = lo, hi + 1
    sizes["sorted_array"] = sizes["array"]
    if end > _U64_MAX:
        return sizes  # a range's exclusive end cannot be written past u64::MAX
    holes = (end - start) - n
    if holes == 0:
        sizes["range"] = message_field_size(_range_body(start, end))
        return sizes
    hole_lo, hole_hi = _hole_bounds(values, lo, hi)
    hole_array = best_width(hole_lo, hole_hi, holes)[1]
    sizes["range_with_holes"] = message_field_size(_range_body(start, end)
                                               + message_field_size(hole_array))
    sizes["range_with_bitmap"] = message_field_size(_range_body(start, end)
                                                + _bytes_field((end - start + 7) // 8))
    return sizes


def best_kind(sizes: dict[str, int]) -> str:
    """The smallest form among ``sizes`` (ties go to the earlier of :data:`SEGMENT_KINDS`)."""
    return min(sizes, key=lambda k: (sizes[k], SEGMENT_KINDS.index(k)))


__all__ = [
    "SEGMENT_KINDS",
    "best_kind",
    "best_width",
    "candidate_sizes",
    "encoded_array_size",
    "message_field_size",
    "varint_size",
]
