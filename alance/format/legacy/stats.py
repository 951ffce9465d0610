"""Page statistics of v0.1/v0.2 files: one (null_count, min, max) row per column per row group.

Which columns get statistics (matching upstream writers): bool, signed/unsigned integers,
float/double, date32/date64, decimal128, string/binary (and large variants, json) — at the top
level or inside structs, never inside lists. The statistics are themselves stored as columns
of a small schema whose top-level fields are structs named after the data field id::

    "<field id>": struct (not nullable)
        null_count: int64 (not nullable)
        min_value:  <field type> (nullable)
        max_value:  <field type>

Bounds follow the format spec: integers with no non-null value use the type's min/max; floats
ignore NaN, use -inf/+inf when unknown and record zero bounds as -0.0 (min) / +0.0 (max);
booleans record min = "only trues", max = "any true or no false"; strings/binaries compare
bytewise on at most 64-byte prefixes (UTF-8 safe for strings) and, when any value was cut, the
max is incremented to stay an upper bound (null if it cannot be).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import file_pb2
from alance.errors import CorruptFileError
from alance.format.legacy.encode import ByteSink, DictionaryState, encode_column, is_var_binary
from alance.format.legacy.layout import PageTable
from alance.format.schema import (
    ENC_NONE,
    ENC_PLAIN,
    ENC_VAR_BINARY,
    LanceField,
    LanceSchema,
)

PREFIX_LENGTH = 64

_INT_TYPES: dict[str, type[np.integer]] = {
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64,
    "date32:day": np.int32, "date64:ms": np.int64,
}
_FLOAT_TYPES: dict[str, type[np.floating]] = {"float": np.float32, "double": np.float64}
_BINARY_TYPES = ("string", "binary", "large_string", "large_binary", "json")
_I128_MIN = (-(1 << 127)).to_bytes(16, "little", signed=True)
_I128_MAX = ((1 << 127) - 1).to_bytes(16, "little", signed=True)


def supports_statistics(lf: LanceField) -> bool:
    """Whether writers collect statistics for this field's type."""
    lt = lf.logical_type
    return (lt == "bool" or lt in _INT_TYPES or lt in _FLOAT_TYPES or lt in _BINARY_TYPES
            or lt.startswith("decimal:128:"))


def stats_fields(schema: LanceSchema) -> list[LanceField]:
    """Fields that get statistics, by ascending field id (top level and inside structs)."""

    def visit(fields: list[LanceField]) -> Iterator[LanceField]:
        for f in fields:
            yield f
            if f.logical_type == "struct":
                yield from visit(f.children)

    return sorted((f for f in visit(schema.fields) if supports_statistics(f)),
                  key=lambda f: f.id)


@dataclass
class StatsRow:
    """Statistics of one column in one row group.

    ``min_value``/``max_value`` hold raw little-endian bytes for fixed-width types, ``bool``
    for booleans and ``bytes | None`` for binary-like types.
    """

    null_count: int
    min_value: bytes | bool | None
    max_value: bytes | bool | None


def _truncate_utf8(data: bytes, length: int) -> bytes:
    """The longest prefix of valid UTF-8 ``data`` ending on a character boundary, <= length."""
    end = length
    while end > 0 and (data[end] & 0xC0) == 0x80:  # data[end] starts the cut character?
        end -= 1
    return data[:end]


def _increment_utf8(data: bytes) -> bytes | None:
    """Smallest change (rightmost byte first) that makes a larger valid UTF-8 string."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        original = buf[idx]
        for candidate in range(original + 1, 256):
            buf[idx] = candidate
            try:
                bytes(buf).decode("utf-8")
            except UnicodeDecodeError:
                continue
            return bytes(buf)
        buf[idx] = original
    return None


def _increment_binary(data: bytes) -> bytes | None:
    """Add one to ``data`` read as a big-endian number; None if every byte is 0xFF."""
    buf = bytearray(data)
    for idx in range(len(buf) - 1, -1, -1):
        if buf[idx] < 0xFF:
            buf[idx] += 1
            return bytes(buf)
        buf[idx] = 0
    return None


def compute_stats(lf: LanceField, arr: pa.Array) -> StatsRow:
    """Statistics of one column chunk (``arr`` in its storage type)."""
    lt = lf.logical_type
    nulls = arr.null_count
    has_values = len(arr) - nulls > 0
    if lt == "bool":
        true_present = bool(has_values and pc.any(arr).as_py())
        false_present = bool(has_values and pc.any(pc.invert(arr)).as_py())
        return StatsRow(nulls, true_present and not false_present,
                        true_present or not false_present)
    if lt in _INT_TYPES:
        itype = _INT_TYPES[lt]
        if not has_values:
            info = np.iinfo(itype)
            ilo, ihi = int(info.min), int(info.max)
        else:
            view = arr.view(pa.from_numpy_dtype(itype)) if lt.startswith("date") else arr
            mm = pc.min_max(view)
            ilo, ihi = int(mm["min"].as_py()), int(mm["max"].as_py())
        dtype = np.dtype(itype).newbyteorder("<")
        return StatsRow(nulls, np.array(ilo, dtype).tobytes(), np.array(ihi, dtype).tobytes())
    if lt in _FLOAT_TYPES:
        dtype = np.dtype(_FLOAT_TYPES[lt]).newbyteorder("<")
        flo, fhi = math.nan, math.nan
        if has_values:
            mm = pc.min_max(arr)
            lo_py, hi_py = mm["min"].as_py(), mm["max"].as_py()
            if lo_py is not None and hi_py is not None:
                flo, fhi = float(lo_py), float(hi_py)
        if math.isnan(flo) or math.isnan(fhi):  # no non-NaN value: unknown
            flo, fhi = -math.inf, math.inf
        if flo == 0.0:
            flo = -0.0
        if fhi == 0.0:
            fhi = 0.0
        return StatsRow(nulls, np.array(flo, dtype).tobytes(), np.array(fhi, dtype).tobytes())
    if lt.startswith("decimal:128:"):
        if not has_values:
            return StatsRow(nulls, _I128_MIN, _I128_MAX)
        mm = pc.min_max(arr)
        raw = pa.array([mm["min"], mm["max"]], type=arr.type).buffers()[1].to_pybytes()
        return StatsRow(nulls, raw[:16], raw[16:32])
    # binary-like
    if not has_values:
        return StatsRow(nulls, None, None)
    mm = pc.min_max(arr)
    lo_v, hi_v = mm["min"].as_py(), mm["max"].as_py()
    is_text = isinstance(lo_v, str)
    lo_b = lo_v.encode() if is_text else bytes(lo_v)
    hi_b = hi_v.encode() if is_text else bytes(hi_v)
    truncated = bool(pc.max(pc.binary_length(arr)).as_py() > PREFIX_LENGTH)
    if truncated:
        cut = _truncate_utf8 if is_text else (lambda d, n: d[:n])
        if len(lo_b) > PREFIX_LENGTH:
            lo_b = cut(lo_b, PREFIX_LENGTH)
        if len(hi_b) > PREFIX_LENGTH:
            hi_b = cut(hi_b, PREFIX_LENGTH)
        hi_inc = _increment_utf8(hi_b) if is_text else _increment_binary(hi_b)
        return StatsRow(nulls, lo_b, hi_inc)
    return StatsRow(nulls, lo_b, hi_b)


def _stat_type(lf: LanceField) -> pa.DataType:
    return pa.large_binary() if lf.logical_type == "json" else lf.data_type


def check_stats_column(lf: LanceField, column: pa.Array, group_rows: np.ndarray,
                       where: str) -> None:
    """Check statistics read back from a file before they are trusted to skip pages.

    ``column`` must be the struct described in the module docstring with one entry per row
    group (``group_rows``: rows of each group), bounds of the type the field's statistics
    have, and null counts between 0 and the group's rows. Anything else raises
    :class:`CorruptFileError` naming ``where`` (the file) and the field.
    """
    what = f"{where}: page statistics of field {lf.name!r} (id {lf.id})"
    if not pa.types.is_struct(column.type):
        raise CorruptFileError(f"{what} are a {column.type}, not a struct")
    names = [column.type.field(i).name for i in range(column.type.num_fields)]
    for needed in ("null_count", "min_value", "max_value"):
        if needed not in names:
            raise CorruptFileError(f"{what} have no {needed!r} field (fields: {names})")
    if len(column) != len(group_rows):
        raise CorruptFileError(f"{what} have {len(column)} entries for {len(group_rows)} "
                               "row groups")
    expected = _stat_type(lf)
    for bound in ("min_value", "max_value"):
        found = column.field(bound).type
        if found != expected:
            raise CorruptFileError(f"{what}: {bound} is {found}, expected {expected}")
    counts = column.field("null_count")
    if not pa.types.is_integer(counts.type) or counts.null_count:
        raise CorruptFileError(f"{what}: null_count is not a non-null integer column")
    values = counts.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if np.any(values < 0) or np.any(values > group_rows):
        raise CorruptFileError(f"{what}: a null_count is negative or exceeds its row group's "
                               "rows")


def _build_column(lf: LanceField, values: list[bytes | bool | None]) -> pa.Array:
    t = _stat_type(lf)
    if pa.types.is_boolean(t):
        return pa.array(values, pa.bool_())
    if is_var_binary(t):
        large = pa.types.is_large_string(t) or pa.types.is_large_binary(t)
        raw = pa.array(values, pa.large_binary() if large else pa.binary())
        return raw.view(t) if raw.type != t else raw
    data = b"".join(v for v in values if isinstance(v, bytes))
    return pa.Array.from_buffers(t, len(values), [None, pa.py_buffer(data)])


@dataclass
class GroupStats:
    """Statistics of one column over consecutive row groups (one entry per group)."""

    null_counts: np.ndarray
    min_values: pa.Array
    max_values: pa.Array


def _stats_one_by_one(lf: LanceField, arr: pa.Array, bounds: np.ndarray) -> GroupStats:
    rows = [compute_stats(lf, arr.slice(lo, hi - lo))
            for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)]
    return _rows_to_groups(lf, rows)


def _fixed_values(arr: pa.Array, dtype: type[np.generic]) -> np.ndarray:
    n = len(arr)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=arr.offset + n)[arr.offset:]


def _from_numpy(lf: LanceField, values: np.ndarray) -> pa.Array:
    data = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
    return pa.Array.from_buffers(_stat_type(lf), len(values), [None, pa.py_buffer(data)])


def _first_smallest_slots(words: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Per group (row of ``valid``), the first valid slot with the smallest words.

    ``words`` has shape (words per value, groups, slots); values compare word by word.
    """
    top = np.uint64(np.iinfo(np.uint64).max)
    candidate = valid
    groups = valid.shape[0]
    for k in range(words.shape[0]):
        w = np.where(candidate, words[k], top)
        candidate = candidate & (w == w.min(axis=1, keepdims=True))
        if np.count_nonzero(candidate) == groups:  # one candidate per group left
            break
    return np.argmax(candidate, axis=1)  # type: ignore[no-any-return]


def _binary_group_stats(lf: LanceField, arr: pa.Array, bounds: np.ndarray,
                        ) -> GroupStats | None:
    """Strings/binaries without nulls, all of one length: min/max with numpy (else None).

    Values become big-endian 64-bit words (the first 65 bytes decide both bounds, see
    :func:`compute_stats`), laid out as a (groups x longest group) grid and compared word by
    word within each group.
    """
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype="<i8" if large else "<i4",
                            count=arr.offset + n + 1)[arr.offset:]
    width = int(offsets[1] - offsets[0])
    if np.any(np.diff(offsets) != width):
        return None
    starts, counts = bounds[:-1], bounds[1:] - bounds[:-1]
    groups, slots = len(counts), int(counts.max())
    used = min(width, PREFIX_LENGTH + 1)
    nwords = (used + 7) // 8
    grid = np.zeros((groups * slots, nwords * 8), dtype=np.uint8)
    uniform = bool(np.all(counts[:-1] == slots))  # only the last group may be shorter
    slot_of = (np.arange(n, dtype=np.int64) if uniform else
               _gather_slots(starts, counts, slots))
    if used:
        data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
        values = data[int(offsets[0]): int(offsets[-1])].reshape(n, width)[:, :used]
        if uniform:
            grid[:n, :used] = values
        else:
            grid[slot_of, :used] = values
    flat = grid.view(np.uint64)
    flat.byteswap(inplace=True)  # big-endian words compare like the bytes
    words = np.ascontiguousarray(flat.T).reshape(nwords, groups, slots)
    valid = np.arange(slots) < counts[:, None]
    lo_rows = starts + _first_smallest_slots(words, valid)
    hi_rows = starts + _first_smallest_slots(~words, valid)
    lo, hi = arr.take(pa.array(lo_rows)), arr.take(pa.array(hi_rows))
    if width > PREFIX_LENGTH:  # every group has a cut value: apply the rules per group
        rows = [compute_stats(lf, pa.concat_arrays([lo.slice(g, 1), hi.slice(g, 1)]))
                for g in range(groups)]
        return GroupStats(np.zeros(groups, np.int64),
                          _build_column(lf, [r.min_value for r in rows]),
                          _build_column(lf, [r.max_value for r in rows]))
    t = _stat_type(lf)
    return GroupStats(np.zeros(groups, np.int64), lo.view(t), hi.view(t))


def _gather_slots(starts: np.ndarray, counts: np.ndarray, slots: int) -> np.ndarray:
    """Grid slot (group * slots + index in group) of every value."""
    group = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    return np.arange(int(counts.sum()), dtype=np.int64) - starts[group] + group * slots


def group_stats(lf: LanceField, arr: pa.Array, bounds: np.ndarray) -> GroupStats:
    """Statistics of consecutive row groups: group ``g`` is ``arr[bounds[g]:bounds[g+1]]``.

    Gives the same values as :func:`compute_stats` on each group, vectorised over groups for
    the common cases (no nulls, non-empty groups).
    """
    lt = lf.logical_type
    starts, counts = bounds[:-1], bounds[1:] - bounds[:-1]
    if arr.null_count or not np.all(counts):
        return _stats_one_by_one(lf, arr, bounds)
    zeros = np.zeros(len(counts), dtype=np.int64)
    if lt == "bool":
        bits = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
        return GroupStats(zeros, pa.array(np.logical_and.reduceat(bits, starts)),
                          pa.array(np.logical_or.reduceat(bits, starts)))
    if lt in _INT_TYPES:
        values = _fixed_values(arr, _INT_TYPES[lt])
        return GroupStats(zeros, _from_numpy(lf, np.minimum.reduceat(values, starts)),
                          _from_numpy(lf, np.maximum.reduceat(values, starts)))
    if lt in _FLOAT_TYPES:
        values = _fixed_values(arr, _FLOAT_TYPES[lt])
        lo, hi = np.fmin.reduceat(values, starts), np.fmax.reduceat(values, starts)
        unknown = np.isnan(lo) | np.isnan(hi)
        lo = np.where(unknown, -np.inf, np.where(lo == 0, -0.0, lo)).astype(values.dtype)
        hi = np.where(unknown, np.inf, np.where(hi == 0, 0.0, hi)).astype(values.dtype)
        return GroupStats(zeros, _from_numpy(lf, lo), _from_numpy(lf, hi))
    if lt in _BINARY_TYPES:
        result = _binary_group_stats(lf, arr, bounds)
        if result is not None:
            return result
    return _stats_one_by_one(lf, arr, bounds)


def _rows_to_groups(lf: LanceField, rows: list[StatsRow]) -> GroupStats:
    return GroupStats(np.array([r.null_count for r in rows], dtype=np.int64),
                      _build_column(lf, [r.min_value for r in rows]),
                      _build_column(lf, [r.max_value for r in rows]))


def _as_group_stats(lf: LanceField, chunks: list[GroupStats | StatsRow]) -> list[GroupStats]:
    """Consecutive single-group rows gathered into :class:`GroupStats` (order kept)."""
    out: list[GroupStats] = []
    rows: list[StatsRow] = []
    for c in chunks:
        if isinstance(c, StatsRow):
            rows.append(c)
            continue
        if rows:
            out.append(_rows_to_groups(lf, rows))
            rows = []
        out.append(c)
    if rows:
        out.append(_rows_to_groups(lf, rows))
    return out


@dataclass
class StatisticsCollector:
    """Accumulates statistics rows per row group and writes the statistics section."""

    fields: list[LanceField]
    chunks: dict[int, list[GroupStats | StatsRow]] = field(default_factory=dict)

    @classmethod
    def for_schema(cls, schema: LanceSchema) -> StatisticsCollector | None:
        """A collector for the schema, or None if no field supports statistics."""
        fields = stats_fields(schema)
        return cls(fields, {f.id: [] for f in fields}) if fields else None

    def wanted(self) -> set[int]:
        """Field ids that get statistics."""
        return set(self.chunks)

    def add(self, groups: Mapping[int, GroupStats | StatsRow]) -> None:
        """Commit the statistics of some row groups (every collected field must be present).

        A :class:`StatsRow` stands for one row group, a :class:`GroupStats` for several.
        """
        for fid, chunks in self.chunks.items():
            chunks.append(groups[fid])

    def stats_schema(self) -> LanceSchema:
        """The schema of the statistics columns, ids assigned depth first from 0."""
        out: list[LanceField] = []
        next_id = 0
        for f in self.fields:
            parent = LanceField(id=next_id, name=str(f.id), logical_type="struct",
                                nullable=False, encoding=ENC_NONE)
            value_type = "large_binary" if f.logical_type == "json" else f.logical_type
            value_enc = ENC_VAR_BINARY if value_type in _BINARY_TYPES else ENC_PLAIN
            parent.children = [
                LanceField(id=next_id + 1, name="null_count", logical_type="int64",
                           nullable=False, parent_id=next_id, encoding=ENC_PLAIN),
                LanceField(id=next_id + 2, name="min_value", logical_type=value_type,
                           nullable=True, parent_id=next_id, encoding=value_enc),
                LanceField(id=next_id + 3, name="max_value", logical_type=value_type,
                           nullable=True, parent_id=next_id, encoding=value_enc),
            ]
            out.append(parent)
            next_id += 4
        return LanceSchema(out)

    def write(self, sink: ByteSink) -> file_pb2.Metadata.StatisticsMetadata | None:
        """Write the statistics pages and page table; None when there is nothing to write."""
        if not self.fields or not any(self.chunks.values()):
            return None
        schema = self.stats_schema()
        pages: dict[int, np.ndarray] = {}
        for data_field, stats_field in zip(self.fields, schema.fields, strict=True):
            chunks = _as_group_stats(data_field, self.chunks[data_field.id])
            columns = [
                pa.array(np.concatenate([c.null_counts for c in chunks]), pa.int64()),
                pa.concat_arrays([c.min_values for c in chunks]),
                pa.concat_arrays([c.max_values for c in chunks]),
            ]
            struct = pa.StructArray.from_arrays(columns, names=[c.name for c in
                                                                stats_field.children])
            bounds = np.array([0, len(struct)], dtype=np.int64)
            encode_column(stats_field, struct, bounds, sink, pages, DictionaryState(), {},
                          path=stats_field.name, check=False)
        ids = schema.field_ids()
        entries = np.zeros((max(ids) + 1, 1, 2), dtype="<i8")
        for fid, rows in pages.items():
            entries[fid] = rows
        table_pos = sink.position
        sink.write(PageTable(entries, 0).encode())
        meta = file_pb2.Metadata.StatisticsMetadata(page_table_position=table_pos)
        protos = schema.to_protos()
        for p in protos:
            p.ClearField("type")  # upstream leaves Field.type unset here
        meta.schema.extend(protos)
        meta.fields.extend(ids)
        return meta


__all__ = [
    "PREFIX_LENGTH",
    "GroupStats",
    "StatisticsCollector",
    "StatsRow",
    "check_stats_column",
    "compute_stats",
    "group_stats",
    "stats_fields",
    "supports_statistics",
]
