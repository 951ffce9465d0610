"""Decoding v0.1/v0.2 pages into Arrow arrays, as sans-IO plans (see :mod:`.plan`).

Rows to read are given as *runs*: sorted, non-overlapping ``[start, end)`` intervals of value
indices within a page. A whole row group is one run; a take is one run per group of adjacent
rows. List columns turn the runs of their rows into runs of child values, so only the needed
bytes of every level are read. All decoding is vectorised with numpy/pyarrow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.encode import fixed_bit_width, is_fixed_stride, is_var_binary
from alance.format.legacy.plan import Plan, gather
from alance.format.schema import LanceField

PageLookup = Callable[[int], tuple[int, int]]  # field id -> (position, length) in this batch


@dataclass(frozen=True)
class Runs:
    """Sorted, disjoint ``[start, end)`` intervals of value indices (int64 arrays)."""

    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def span(cls, start: int, stop: int) -> Runs:
        """One interval (nothing when empty)."""
        if stop <= start:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        return cls(np.array([start], np.int64), np.array([stop], np.int64))

    @classmethod
    def from_indices(cls, indices: np.ndarray) -> Runs:
        """Runs of consecutive values of a sorted array of distinct indices."""
        idx = np.asarray(indices, dtype=np.int64)
        if len(idx) == 0:
            return cls.span(0, 0)
        breaks = np.flatnonzero(np.diff(idx) != 1) + 1
        first = np.concatenate(([0], breaks))
        last = np.concatenate((breaks - 1, [len(idx) - 1]))
        return cls(idx[first], idx[last] + 1)

    @classmethod
    def from_intervals(cls, starts: np.ndarray, ends: np.ndarray) -> Runs:
        """Merge back-to-back intervals (``ends[i] == starts[i + 1]``), dropping empty ones."""
        keep = ends > starts
        s, e = starts[keep], ends[keep]
        if len(s) == 0:
            return cls.span(0, 0)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] != e[:-1]
        last = np.concatenate((np.flatnonzero(new)[1:] - 1, [len(s) - 1]))
        return cls(s[new], e[last])

    @property
    def count(self) -> int:
        """Number of values covered."""
        return int((self.ends - self.starts).sum())

    def check_within(self, length: int, what: str) -> None:
        """CorruptFileError unless every interval lies inside a page of ``length`` values."""
        if len(self.ends) and (self.ends[-1] > length or self.starts[0] < 0):
            raise CorruptFileError(f"{what}: page has {length} values, need up to "
                                   f"{int(self.ends[-1])}")


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


def _from_bytes(t: pa.DataType, n: int, data: bytes) -> pa.Array:
    if pa.types.is_fixed_size_list(t):
        child = _from_bytes(t.value_type, n * t.list_size, data)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.Array.from_buffers(t, n, [None, pa.py_buffer(data)])


def _from_bits(t: pa.DataType, n: int, bits: np.ndarray) -> pa.Array:
    if pa.types.is_fixed_size_list(t):
        child = _from_bits(t.value_type, n * t.list_size, bits)
        return pa.FixedSizeListArray.from_arrays(child, type=t)
    return pa.array(bits, type=pa.bool_())


def _read_plain(t: pa.DataType, pos: int, runs: Runs) -> Plan[pa.Array]:
    """Fixed-stride values (plain encoding) of the given runs."""
    n = runs.count
    if _has_bits(t):
        k = fixed_bit_width(t)
        bit0 = runs.starts * k
        bit1 = runs.ends * k
        byte0 = bit0 // 8
        byte1 = (bit1 + 7) // 8
        parts = yield [(pos + int(a), pos + int(b)) for a, b in zip(byte0, byte1, strict=True)]
        allbits = np.unpackbits(np.frombuffer(b"".join(parts), dtype=np.uint8),
                                bitorder="little").astype(bool)
        nbytes = byte1 - byte0
        bases = 8 * (np.cumsum(nbytes) - nbytes) + (bit0 - 8 * byte0)
        bits = allbits[_gather_positions(bases, bit1 - bit0)]
        return _from_bits(t, n, bits)
    w = fixed_bit_width(t) // 8
    parts = yield [(pos + int(s) * w, pos + int(e) * w)
                   for s, e in zip(runs.starts, runs.ends, strict=True)]
    data = parts[0] if len(parts) == 1 else b"".join(parts)
    return _from_bytes(t, n, data)


def _read_offsets(pos: int, width: int, runs: Runs) -> Plan[tuple[np.ndarray, np.ndarray]]:
    """(start, end) pairs of every value in ``runs`` from an offsets page of ``width`` bytes."""
    parts = yield [(pos + int(s) * width, pos + (int(e) + 1) * width)
                   for s, e in zip(runs.starts, runs.ends, strict=True)]
    offs = np.frombuffer(b"".join(parts), dtype="<i4" if width == 4 else "<i8").astype(np.int64)
    per_run = runs.ends - runs.starts + 1
    lasts = np.cumsum(per_run) - 1
    firsts = lasts - per_run + 1
    starts = np.delete(offs, lasts)
    ends = np.delete(offs, firsts)
    if len(starts) and (np.any(ends < starts) or starts.min() < 0):
        raise CorruptFileError("offsets are not increasing")
    return starts, ends


def _read_var_binary(lf: LanceField, t: pa.DataType, pos: int, runs: Runs, *,
                     nullable: bool) -> Plan[pa.Array]:
    """Var-binary values: their absolute positions first, then the bytes."""
    n = runs.count
    if n == 0:
        return pa.array([], type=t)
    starts, ends = yield from _read_offsets(pos, 8, runs)
    data_runs = Runs.from_intervals(starts, ends)
    data = b""
    if len(data_runs.starts):
        parts = yield list(zip(data_runs.starts.tolist(), data_runs.ends.tolist(), strict=True))
        data = parts[0] if len(parts) == 1 else b"".join(parts)
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
        null_count = int(n - valid.sum())
        if null_count:
            validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    off_buf = pa.py_buffer(offsets.astype("<i8" if large else "<i4").tobytes())
    arr = pa.Array.from_buffers(t, n, [validity, off_buf, pa.py_buffer(data)], null_count)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise CorruptFileError(f"column {lf.name!r}: invalid UTF-8 data") from exc
    return arr


def read_field(lf: LanceField, pages: PageLookup, runs: Runs,
               dictionaries: Mapping[int, pa.Array]) -> Plan[pa.Array]:
    """Plan reading the values ``runs`` of one field (and its children) in one row group."""
    t = lf.data_type
    if runs.count == 0 and not pa.types.is_dictionary(t):
        return pa.array([], type=t)
    if pa.types.is_struct(t):
        children = yield from gather([read_field(c, pages, runs, dictionaries)
                                      for c in lf.children])
        if not lf.children:
            return pa.array([{}] * runs.count, type=t)
        return pa.StructArray.from_arrays(children, fields=[c.to_arrow() for c in lf.children])
    pos, length = pages(lf.id)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        runs.check_within(max(length - 1, 0), f"list column {lf.name!r}")
        width = 8 if pa.types.is_large_list(t) else 4
        starts, ends = yield from _read_offsets(pos, width, runs)
        child = yield from read_field(lf.children[0], pages,
                                      Runs.from_intervals(starts, ends), dictionaries)
        offsets = np.zeros(runs.count + 1, dtype=np.int64)
        np.cumsum(ends - starts, out=offsets[1:])
        off_arr = pa.array(offsets, pa.int64() if width == 8 else pa.int32())
        cls = pa.LargeListArray if width == 8 else pa.ListArray
        return cls.from_arrays(off_arr, child, type=t)
    runs.check_within(length, f"column {lf.name!r}")
    if pa.types.is_null(t):
        return pa.nulls(runs.count)
    if pa.types.is_dictionary(t):
        values = dictionaries.get(lf.id)
        if values is None:
            raise InvalidInputError(f"dictionary values of column {lf.name!r} were not loaded")
        keys = pa.array([], type=t.index_type)
        if runs.count:
            keys = yield from _read_plain(t.index_type, pos, runs)
        if len(keys):
            k = keys.to_numpy()
            if k.min() < 0 or k.max() >= len(values):
                raise CorruptFileError(f"column {lf.name!r}: dictionary key out of range")
        return pa.DictionaryArray.from_arrays(keys, values.cast(t.value_type))
    if is_var_binary(t):
        return (yield from _read_var_binary(lf, t, pos, runs, nullable=lf.nullable))
    if is_fixed_stride(t):
        return (yield from _read_plain(t, pos, runs))
    raise UnsupportedFeatureError(f"column {lf.name!r}: type {t} is not readable from v0.2 files")


def read_dictionary_values(value_type: pa.DataType, offset: int, length: int) -> Plan[pa.Array]:
    """Plan reading dictionary values stored at ``(offset, length)`` (a Field.dictionary).

    Binary-like values are var-binary with empty values read as null (as upstream does);
    numeric values are plain.
    """
    runs = Runs.span(0, length)
    if is_var_binary(value_type):
        lf = LanceField(id=-1, name="dictionary", logical_type="binary")
        return (yield from _read_var_binary(lf, value_type, offset, runs, nullable=True))
    if pa.types.is_integer(value_type) or pa.types.is_floating(value_type):
        return (yield from _read_plain(value_type, offset, runs))
    raise UnsupportedFeatureError(f"dictionary values of type {value_type} are not supported")


__all__ = ["PageLookup", "Runs", "read_dictionary_values", "read_field"]
