"""Decoding v0.1/v0.2 pages into Arrow arrays, as sans-IO plans (see :mod:`.plan`).

Values to read are given as *spans*: ``[start, end)`` intervals of value indices within the page
of a row group, sorted by (group, start) and disjoint. A range of whole row groups is one span
per group; a take is one span per group of adjacent rows. Whatever the number of groups, each
field yields ONE array and every step of its plan asks for all the byte ranges it needs at once.
List columns turn the spans of their rows into spans of child values, so only the needed bytes
of every level are read. All decoding is vectorised with numpy/pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa

from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.arrow_buffers import aligned_buffer, pooled_concatenate
from alance.format.legacy.encode import fixed_bit_width, is_fixed_stride, is_var_binary
from alance.format.legacy.plan import MERGE_MIN_RANGES, Plan, gather, merge_runs
from alance.format.schema import LanceField
from alance.format.v2.kernels import gather_ranges

# field id -> int64 array of shape (row groups, 2): (position, length) of its page per group
PageLookup = Callable[[int], np.ndarray]

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Spans:
    """Disjoint ``[start, end)`` value intervals within row groups' pages (int64 arrays)."""

    groups: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        """Spans from arrays (converted to int64), dropping empty intervals."""
        g, s, e = (np.asarray(a, dtype=np.int64) for a in (groups, starts, ends))
        keep = e > s
        if not keep.all():
            g, s, e = g[keep], s[keep], e[keep]
        return cls(g, s, e)

    @classmethod
    def whole(cls, group: int, length: int) -> Spans:
        """Values ``0..length`` of one group's page."""
        return cls.of(np.array([group]), np.array([0]), np.array([length]))

    @classmethod
    def from_indices(cls, groups: np.ndarray, indices: np.ndarray) -> Spans:
        """Spans of consecutive indices of a (group, index)-sorted list of distinct values."""
        n = len(indices)
        if n == 0:
            return cls(_EMPTY, _EMPTY, _EMPTY)
        g = np.asarray(groups, dtype=np.int64)
        idx = np.asarray(indices, dtype=np.int64)
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(idx[1:], idx[:-1] + 1, out=new[1:])
        new[1:] |= g[1:] != g[:-1]
        first = np.flatnonzero(new)
        lengths = np.empty(len(first), dtype=np.int64)
        np.subtract(first[1:], first[:-1], out=lengths[:-1])
        lengths[-1] = n - first[-1]
        starts = idx[first]
        return cls(g[first], starts, starts + lengths)

    @classmethod
    def from_intervals(cls, groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Spans:
        """Merge back-to-back intervals of the same group, dropping empty ones."""
        spans = cls.of(groups, starts, ends)
        g, s, e = spans.groups, spans.starts, spans.ends
        if len(s) < 2:
            return spans
        new = np.ones(len(s), dtype=bool)
        new[1:] = (s[1:] != e[:-1]) | (g[1:] != g[:-1])
        if new.all():
            return spans
        last = np.concatenate((np.flatnonzero(new)[1:] - 1, [len(s) - 1]))
        return cls(g[new], s[new], e[last])

    @cached_property
    def count(self) -> int:
        """Number of values covered."""
        return int((self.ends - self.starts).sum())

    def value_groups(self) -> np.ndarray:
        """The group of every value covered, in order."""
        return np.repeat(self.groups, self.ends - self.starts)

    def check_within(self, lengths: np.ndarray, what: str) -> None:
        """CorruptFileError unless every span lies inside its page (``lengths`` per span).

        (Starts are never negative: callers build spans from row numbers or from offsets
        that were checked.)
        """
        if len(self.ends) and (self.ends > lengths).any():
            raise CorruptFileError(f"{what}: a page has fewer values than the file says")


def _fetch(starts: np.ndarray, ends: np.ndarray, gap: int = 0,
           ) -> Plan[bytes | memoryview | np.ndarray]:
    """The bytes of the given file ranges, concatenated in order (asked for in one step).

    Back-to-back ranges (contiguous pages of one column) are asked for as one; so are many
    ranges (a take of many rows) at most ``gap`` bytes apart, the bytes between them read
    and skipped.
    """
    if gap > 0 and len(starts) >= MERGE_MIN_RANGES:
        return (yield from _fetch_merged(starts, ends, gap))
    if len(starts) <= 16:  # plain Python beats numpy's per-call overhead here
        request: list[tuple[int, int]] = []
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            if e > s:
                if request and request[-1][1] == s:
                    request[-1] = (request[-1][0], e)
                else:
                    request.append((s, e))
    else:
        keep = ends > starts
        if not keep.all():
            starts, ends = starts[keep], ends[keep]
        new = np.ones(len(starts), dtype=bool)
        new[1:] = starts[1:] != ends[:-1]
        if not new.all():
            last = np.concatenate((np.flatnonzero(new)[1:] - 1, [len(starts) - 1]))
            starts, ends = starts[new], ends[last]
        request = list(zip(starts.tolist(), ends.tolist(), strict=True))
    if not request:
        return b""
    parts = yield request
    if len(parts) == 1:
        return parts[0]
    # Joined in an array of Arrow's memory pool (reused memory; see pooled_empty).
    return pooled_concatenate([np.frombuffer(p, dtype=np.uint8) for p in parts])


def _fetch_merged(starts: np.ndarray, ends: np.ndarray, gap: int,
                  ) -> Plan[bytes | memoryview | np.ndarray]:
    """:func:`_fetch` of many ranges: those at most ``gap`` bytes apart read as one, then
    each range picked out of what was read."""
    ranges, at = merge_runs(starts, ends, gap)
    if not ranges:
        return b""
    parts = yield ranges
    joined = (np.frombuffer(parts[0], dtype=np.uint8) if len(parts) == 1 else
              pooled_concatenate([np.frombuffer(p, dtype=np.uint8) for p in parts]))
    return gather_ranges(joined, at, np.maximum(ends - starts, 0))


def _gather_positions(bases: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(bases[i], bases[i] + lengths[i])`` for all i."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(bases - firsts, lengths) + np.arange(total, dtype=np.int64)


def _has_bits(t: pa.DataType) -> bool:
    if pa.types.is_boolean(t):
        return True
    return pa.types.is_fixed_size_list(t) and _has_bits(t.value_type)


def _from_bytes(t: pa.DataType, n: int, data: bytes | memoryview | np.ndarray) -> pa.Array:
    if pa.types.is_fixed_size_list(t):
        child = _from_bytes(t.value_type, n * t.list_size, data)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.Array.from_buffers(t, n, [None, aligned_buffer(data)])


def _from_bits(t: pa.DataType, n: int, bits: np.ndarray) -> pa.Array:
    if pa.types.is_fixed_size_list(t):
        child = _from_bits(t.value_type, n * t.list_size, bits)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.array(bits, type=pa.bool_())


def _read_plain(t: pa.DataType, pos: np.ndarray, spans: Spans, gap: int = 0,
                ) -> Plan[pa.Array]:
    """Fixed-stride values (plain encoding); ``pos`` is the page position of each span."""
    n = spans.count
    if _has_bits(t):
        k = fixed_bit_width(t)
        bit0 = spans.starts * k
        bit1 = spans.ends * k
        byte0 = bit0 // 8
        byte1 = (bit1 + 7) // 8
        parts = yield list(zip((pos + byte0).tolist(), (pos + byte1).tolist(), strict=True))
        allbits = np.unpackbits(np.frombuffer(b"".join(parts), dtype=np.uint8),
                                bitorder="little").astype(bool)
        nbytes = byte1 - byte0
        bases = 8 * (np.cumsum(nbytes) - nbytes) + (bit0 - 8 * byte0)
        bits = allbits[_gather_positions(bases, bit1 - bit0)]
        return _from_bits(t, n, bits)
    w = fixed_bit_width(t) // 8
    data = yield from _fetch(pos + spans.starts * w, pos + spans.ends * w, gap)
    return _from_bytes(t, n, data)


def _read_offsets(pos: np.ndarray, width: int, spans: Spans, gap: int = 0,
                  ) -> Plan[tuple[np.ndarray, np.ndarray]]:
    """(start, end) pairs of every value of ``spans`` from offsets pages of ``width`` bytes."""
    data = yield from _fetch(pos + spans.starts * width, pos + (spans.ends + 1) * width,
                             gap)
    offs = np.frombuffer(data, dtype="<i4" if width == 4 else "<i8").astype(np.int64)
    per_span = spans.ends - spans.starts + 1
    if len(per_span) == 1:
        starts, ends = offs[:-1], offs[1:]
    else:
        lasts = np.cumsum(per_span) - 1
        keep = np.ones(len(offs), dtype=bool)
        keep[lasts] = False
        starts = offs[keep]
        keep[:] = True
        keep[lasts - per_span + 1] = False
        ends = offs[keep]
    if len(starts) and (np.any(ends < starts) or starts.min() < 0):
        raise CorruptFileError("offsets are not increasing")
    return starts, ends


def _read_var_binary(lf: LanceField, t: pa.DataType, pos: np.ndarray, spans: Spans, *,
                     nullable: bool, gap: int = 0) -> Plan[pa.Array]:
    """Var-binary values: their absolute positions first, then the bytes."""
    n = spans.count
    if n == 0:
        return pa.array([], type=t)
    starts, ends = yield from _read_offsets(pos, 8, spans, gap)
    data = yield from _fetch(starts, ends, gap)
    lengths = ends - starts
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
    if not large and offsets[-1] > np.iinfo(np.int32).max:
        raise InvalidInputError(f"column {lf.name!r}: over 2 GiB of values in one read; "
                                "read fewer rows at a time")
    validity = None
    null_count = 0
    if nullable:
        valid = lengths > 0
        null_count = n - int(np.count_nonzero(valid))
        if null_count:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    off_buf = pa.py_buffer(offsets.astype("<i8" if large else "<i4"))
    arr = pa.Array.from_buffers(t, n, [validity, off_buf, pa.py_buffer(data)], null_count)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise CorruptFileError(f"column {lf.name!r}: invalid UTF-8 data") from exc
    return arr


_LEAF_TYPES: dict[str, pa.DataType] = {}


def field_type(lf: LanceField) -> pa.DataType:
    """``lf.data_type``, remembered per logical type for fields without children."""
    if lf.children:
        return lf.data_type
    t = _LEAF_TYPES.get(lf.logical_type)
    if t is None:
        t = _LEAF_TYPES.setdefault(lf.logical_type, lf.data_type)
    return t


def read_field(lf: LanceField, pages: PageLookup, spans: Spans,
               dictionaries: Mapping[int, pa.Array], gap: int = 0) -> Plan[pa.Array]:
    """Plan reading the values ``spans`` of one field (and its children) as one array.
    ``gap``: many ranges at most this many bytes apart are read as one (a dense take)."""
    t = field_type(lf)
    if spans.count == 0 and not pa.types.is_dictionary(t):
        return pa.array([], type=t)
    if pa.types.is_struct(t):
        children = yield from gather([read_field(c, pages, spans, dictionaries, gap)
                                      for c in lf.children])
        if not lf.children:
            return pa.array([{}] * spans.count, type=t)
        return pa.StructArray.from_arrays(children, fields=[c.to_arrow() for c in lf.children])
    entries = pages(lf.id)[spans.groups]
    pos, lengths = entries[:, 0], entries[:, 1]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        spans.check_within(np.maximum(lengths - 1, 0), f"list column {lf.name!r}")
        width = 8 if pa.types.is_large_list(t) else 4
        starts, ends = yield from _read_offsets(pos, width, spans, gap)
        child_spans = Spans.from_intervals(spans.value_groups(), starts, ends)
        child = yield from read_field(lf.children[0], pages, child_spans, dictionaries, gap)
        offsets = np.zeros(spans.count + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        off_arr = pa.array(offsets, pa.int64() if width == 8 else pa.int32())
        cls = pa.LargeListArray if width == 8 else pa.ListArray
        return cls.from_arrays(off_arr, child, type=t)
    spans.check_within(lengths, f"column {lf.name!r}")
    if pa.types.is_null(t):
        return pa.nulls(spans.count)
    if pa.types.is_dictionary(t):
        values = dictionaries.get(lf.id)
        if values is None:
            raise InvalidInputError(f"dictionary values of column {lf.name!r} were not loaded")
        keys = pa.array([], type=t.index_type)
        if spans.count:
            keys = yield from _read_plain(t.index_type, pos, spans, gap)
        if len(keys):
            k = keys.to_numpy()
            if k.min() < 0 or k.max() >= len(values):
                raise CorruptFileError(f"column {lf.name!r}: dictionary key out of range")
        return pa.DictionaryArray.from_arrays(keys, values.cast(t.value_type))
    if is_var_binary(t):
        return (yield from _read_var_binary(lf, t, pos, spans, nullable=lf.nullable,
                                            gap=gap))
    if is_fixed_stride(t):
        return (yield from _read_plain(t, pos, spans, gap))
    raise UnsupportedFeatureError(f"column {lf.name!r}: type {t} is not readable from v0.2 files")


def read_dictionary_values(value_type: pa.DataType, offset: int, length: int) -> Plan[pa.Array]:
    """Plan reading dictionary values stored at ``(offset, length)`` (a Field.dictionary).

    Binary-like values are var-binary with empty values read as null (as upstream does);
    numeric values are plain.
    """
    spans = Spans.whole(0, length)
    pos = np.full(len(spans.groups), offset, dtype=np.int64)
    if is_var_binary(value_type):
        lf = LanceField(id=-1, name="dictionary", logical_type="binary")
        return (yield from _read_var_binary(lf, value_type, pos, spans, nullable=True))
    if pa.types.is_integer(value_type) or pa.types.is_floating(value_type):
        if length == 0:
            return pa.array([], type=value_type)
        return (yield from _read_plain(value_type, pos, spans))
    raise UnsupportedFeatureError(f"dictionary values of type {value_type} are not supported")


__all__ = ["PageLookup", "Spans", "field_type", "read_dictionary_values", "read_field"]
