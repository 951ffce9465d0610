"""Row id sequences: the stable row ids of one fragment, in row order (``RowIdSequence``).

Pure byte <-> numpy code; no IO.

A sequence is a list of segments. Each segment holds some u64 values in one of five forms:

* ``range``: every value of ``[start, end)``;
* ``range_with_holes``: ``[start, end)`` minus the (absolute, sorted) values in ``holes``;
* ``range_with_bitmap``: the values of ``[start, end)`` whose bit is set. Bit ``i`` (value
  ``start + i``) is bit ``i % 8`` of byte ``i // 8`` counted from the *least* significant
  bit: that is what pylance 14 writes and reads (the format's text says most significant
  first, the files say otherwise);
* ``sorted_array`` / ``array``: an ``EncodedU64Array`` (sorted, resp. in any order).

An ``EncodedU64Array`` stores values as little-endian u16 or u32 offsets from a base, or as
plain little-endian u64 values.

Encoding picks, for every segment, the form whose serialized size is smallest (computed
exactly, without building the candidates), and splits a sequence into segments at long
contiguous runs so that those cost a ``range`` each. Decoding is vectorised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from alance._proto import rowids_pb2
from alance.errors import CorruptFileError, InvalidInputError
from alance.format.row_id_sizes import (
    SEGMENT_KINDS,
    best_kind,
    best_width,
    candidate_sizes,
    encoded_array_size,
    message_field_size,
    varint_size,
)

U64Segment = rowids_pb2.U64Segment
EncodedU64Array = rowids_pb2.EncodedU64Array
RowIdSequence = rowids_pb2.RowIdSequence

_U64 = np.dtype("<u8")
_U32 = np.dtype("<u4")
_U16 = np.dtype("<u2")
#: Contiguous runs at least this long become a ``range`` segment of their own.
MIN_RANGE_RUN = 32


# -- encoding ---------------------------------------------------------------------------------


def encode_u64_array(values: np.ndarray) -> EncodedU64Array:
    """The smallest ``EncodedU64Array`` holding ``values`` (order kept)."""
    values = np.asarray(values, dtype=np.uint64)
    out = EncodedU64Array()
    if not len(values):
        out.u64_array.SetInParent()
        return out
    lo = int(values.min())
    name, _ = best_width(lo, int(values.max()), len(values))
    if name == "u64_array":
        out.u64_array.values = values.astype(_U64).tobytes()
    elif name == "u32_array":
        out.u32_array.base = lo
        out.u32_array.offsets = (values - np.uint64(lo)).astype(_U32).tobytes()
    else:
        out.u16_array.base = lo
        out.u16_array.offsets = (values - np.uint64(lo)).astype(_U16).tobytes()
    return out


def encode_segment(values: np.ndarray, kind: str | None = None) -> U64Segment:
    """A ``U64Segment`` holding ``values`` (distinct u64s), in the smallest form or ``kind``."""
    values = np.asarray(values, dtype=np.uint64)
    sizes = candidate_sizes(values)
    if kind is None:
        kind = best_kind(sizes)
    elif kind not in sizes:
        raise InvalidInputError(f"these values cannot be stored as a {kind} segment")
    seg = U64Segment()
    if kind == "range":
        if len(values):
            seg.range.start = int(values[0])
            seg.range.end = int(values[-1]) + 1
        else:
            seg.range.SetInParent()
        return seg
    if kind in ("sorted_array", "array"):
        getattr(seg, kind).CopyFrom(encode_u64_array(values))
        return seg
    start, end = int(values[0]), int(values[-1]) + 1
    present = np.zeros(end - start, dtype=bool)
    present[(values - np.uint64(start)).astype(np.int64)] = True
    if kind == "range_with_holes":
        holes = np.flatnonzero(~present).astype(np.uint64) + np.uint64(start)
        seg.range_with_holes.start = start
        seg.range_with_holes.end = end
        seg.range_with_holes.holes.CopyFrom(encode_u64_array(holes))
    else:
        seg.range_with_bitmap.start = start
        seg.range_with_bitmap.end = end
        seg.range_with_bitmap.bitmap = np.packbits(present, bitorder="little").tobytes()
    return seg


def _runs(values: np.ndarray) -> list[tuple[int, int]]:
    """Cut points: ``[(a, b), ...]`` covering ``values``; long contiguous runs stand alone."""
    n = len(values)
    if n == 0:
        return [(0, 0)]
    step_one = values[1:] == values[:-1] + np.uint64(1)
    # contiguous runs: maximal stretches where each value follows the previous by one
    breaks = np.flatnonzero(~step_one) + 1
    starts = np.concatenate([[0], breaks])
    ends = np.concatenate([breaks, [n]])
    long_runs = (ends - starts) >= MIN_RANGE_RUN
    cuts: list[tuple[int, int]] = []
    pos = 0
    for a, b in zip(starts[long_runs].tolist(), ends[long_runs].tolist(), strict=True):
        if a > pos:
            cuts.append((pos, a))
        cuts.append((a, b))
        pos = b
    if pos < n:
        cuts.append((pos, n))
    return cuts


def _sorted_pieces(values: np.ndarray) -> list[tuple[int, int]]:
    """Cut points splitting ``values`` into strictly increasing pieces."""
    n = len(values)
    if n <= 1:
        return [(0, n)]
    breaks = np.flatnonzero(values[1:] <= values[:-1]) + 1
    starts = np.concatenate([[0], breaks]).tolist()
    ends = np.concatenate([breaks, [n]]).tolist()
    return list(zip(starts, ends, strict=True))


def plan_segments(values: np.ndarray) -> list[tuple[int, int, str]]:
    """How :func:`encode_row_ids` stores ``values``: ``(start, end, kind)`` per segment.

    Candidates: one segment for everything, or strictly increasing pieces each cut at long
    contiguous runs. The smaller total (exact sizes) wins.
    """
    values = np.asarray(values, dtype=np.uint64)
    n = len(values)
    whole = candidate_sizes(values)
    whole_kind = best_kind(whole)
    best: list[tuple[int, int, str]] = [(0, n, whole_kind)]
    best_size = message_field_size(whole[whole_kind])
    pieces = _sorted_pieces(values)
    if len(pieces) > max(8, n // 16):
        return best  # essentially unsorted: one array
    plan: list[tuple[int, int, str]] = []
    size = 0
    for a, b in pieces:
        part = values[a:b]
        for c, d in _runs(part):
            sub = candidate_sizes(part[c:d])
            kind = best_kind(sub)
            plan.append((a + c, a + d, kind))
            size += message_field_size(sub[kind])
    if size < best_size:
        return plan
    return best


def encode_row_ids(values: np.ndarray | Sequence[int]) -> RowIdSequence:
    """The ``RowIdSequence`` message for ``values`` (distinct u64 row ids, in row order)."""
    arr = np.asarray(values, dtype=np.uint64)
    seq = RowIdSequence()
    if not len(arr):
        return seq
    for a, b, kind in plan_segments(arr):
        seq.segments.add().CopyFrom(encode_segment(arr[a:b], kind))
    return seq


def encode_row_id_bytes(values: np.ndarray | Sequence[int]) -> bytes:
    """Serialized :func:`encode_row_ids`."""
    return encode_row_ids(values).SerializeToString(deterministic=True)


def range_row_ids(start: int, count: int) -> bytes:
    """Serialized sequence ``[start, start + count)`` (one ``range`` segment, as Lance)."""
    seq = RowIdSequence()
    if count:
        seg = seq.segments.add()
        seg.range.start = start
        seg.range.end = start + count
    return seq.SerializeToString(deterministic=True)


# -- decoding ---------------------------------------------------------------------------------


def decode_u64_array(msg: EncodedU64Array) -> np.ndarray:
    """The values of an ``EncodedU64Array`` as a uint64 numpy array."""
    which = msg.WhichOneof("array")
    width: np.dtype[Any]
    if which == "u16_array":
        raw, width, base = msg.u16_array.offsets, _U16, msg.u16_array.base
    elif which == "u32_array":
        raw, width, base = msg.u32_array.offsets, _U32, msg.u32_array.base
    elif which == "u64_array":
        raw, width, base = msg.u64_array.values, _U64, 0
    else:
        raise CorruptFileError("row id array: no u16/u32/u64 array set")
    if len(raw) % width.itemsize:
        raise CorruptFileError(f"row id array: {len(raw)} bytes is not a whole number of "
                               f"{width.itemsize}-byte values")
    values = np.frombuffer(raw, dtype=width).astype(np.uint64)
    if base:
        if len(values) and int(values.max()) + base > 0xFFFFFFFFFFFFFFFF:
            raise CorruptFileError("row id array: base + offset overflows u64")
        values += np.uint64(base)
    return values


def _array_length(msg: EncodedU64Array) -> int:
    which = msg.WhichOneof("array")
    if which == "u16_array":
        return len(msg.u16_array.offsets) // 2
    if which == "u32_array":
        return len(msg.u32_array.offsets) // 4
    if which == "u64_array":
        return len(msg.u64_array.values) // 8
    raise CorruptFileError("row id array: no u16/u32/u64 array set")


def _check_range(start: int, end: int) -> int:
    if end < start:
        raise CorruptFileError(f"row id segment: range end {end} before start {start}")
    return end - start


def segment_length(seg: U64Segment) -> int:
    """Number of values in a segment, without decoding it."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        return _check_range(seg.range.start, seg.range.end)
    if kind == "range_with_holes":
        r = seg.range_with_holes
        span = _check_range(r.start, r.end)
        holes = _array_length(r.holes)
        if holes > span:
            raise CorruptFileError("row id segment: more holes than values in the range")
        return span - holes
    if kind == "range_with_bitmap":
        r2 = seg.range_with_bitmap
        span = _check_range(r2.start, r2.end)
        if len(r2.bitmap) * 8 < span:
            raise CorruptFileError(f"row id segment: bitmap of {len(r2.bitmap)} bytes is too "
                                   f"short for {span} values")
        bits = np.unpackbits(np.frombuffer(r2.bitmap, np.uint8), bitorder="little")[:span]
        return int(np.count_nonzero(bits))
    if kind in ("sorted_array", "array"):
        return _array_length(getattr(seg, kind))
    raise CorruptFileError("row id segment: no segment kind set")


def decode_segment(seg: U64Segment) -> np.ndarray:
    """The values of one segment, in order, as uint64."""
    kind = seg.WhichOneof("segment")
    if kind == "range":
        span = _check_range(seg.range.start, seg.range.end)
        return np.arange(span, dtype=np.uint64) + np.uint64(seg.range.start)
    if kind == "range_with_holes":
        r = seg.range_with_holes
        span = _check_range(r.start, r.end)
        holes = decode_u64_array(r.holes)
        inside = (holes >= np.uint64(r.start)) & (holes < np.uint64(r.end))
        if not bool(np.all(inside)):
            raise CorruptFileError("row id segment: a hole lies outside its range")
        keep = np.ones(span, dtype=bool)
        keep[(holes - np.uint64(r.start)).astype(np.int64)] = False
        return np.flatnonzero(keep).astype(np.uint64) + np.uint64(r.start)
    if kind == "range_with_bitmap":
        r2 = seg.range_with_bitmap
        span = _check_range(r2.start, r2.end)
        if len(r2.bitmap) * 8 < span:
            raise CorruptFileError(f"row id segment: bitmap of {len(r2.bitmap)} bytes is too "
                                   f"short for {span} values")
        bits = np.unpackbits(np.frombuffer(r2.bitmap, np.uint8), bitorder="little")[:span]
        return np.flatnonzero(bits).astype(np.uint64) + np.uint64(r2.start)
    if kind in ("sorted_array", "array"):
        return decode_u64_array(getattr(seg, kind))
    raise CorruptFileError("row id segment: no segment kind set")


def parse_row_ids(data: bytes | bytearray | memoryview) -> RowIdSequence:
    """Parse a serialized ``RowIdSequence`` (``CorruptFileError`` if it does not parse)."""
    seq = RowIdSequence()
    try:
        seq.ParseFromString(bytes(data))
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise CorruptFileError(f"row id sequence does not decode: {exc}") from exc
    return seq


def sequence_length(seq: RowIdSequence) -> int:
    """Number of row ids in a parsed sequence (no decoding of values)."""
    return sum(segment_length(s) for s in seq.segments)


def decode_row_ids(data: bytes | bytearray | memoryview,
                   expected_length: int | None = None) -> np.ndarray:
    """Row ids (uint64, row order) from a serialized ``RowIdSequence``.

    With ``expected_length`` (the fragment's physical rows), a sequence of another length is
    :class:`CorruptFileError`, checked before anything large is allocated.
    """
    seq = parse_row_ids(data)
    if expected_length is not None:
        total = sequence_length(seq)
        if total != expected_length:
            raise CorruptFileError(f"row id sequence holds {total} ids for {expected_length} "
                                   "rows")
    parts = [decode_segment(s) for s in seq.segments]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint64)


__all__ = [
    "MIN_RANGE_RUN",
    "SEGMENT_KINDS",
    "best_kind",
    "candidate_sizes",
    "decode_row_ids",
    "decode_segment",
    "decode_u64_array",
    "encode_row_id_bytes",
    "encode_row_ids",
    "encode_segment",
    "encode_u64_array",
    "encoded_array_size",
    "parse_row_ids",
    "plan_segments",
    "range_row_ids",
    "segment_length",
    "sequence_length",
    "varint_size",
]
