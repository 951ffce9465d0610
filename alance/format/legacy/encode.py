"""Encoding Arrow arrays into v0.1/v0.2 pages (no IO).

Encodings, per Arrow type:

* **plain** — fixed-width values back to back: integers, floats (incl. half), dates, times,
  timestamps, durations, decimals, fixed-size binary. Booleans are bit-packed (LSB first).
  A fixed-size list is its flattened items encoded plainly (recursively), in one page.
  Validity is not stored: a null cannot be written.
* **var-binary** — string/binary/large variants: the value bytes, then ``n + 1`` int64
  *absolute file positions* (start of each value, then the end of the last one). The page
  position is the position of that offsets array. A value whose start equals its end reads back
  as null when the field is nullable (so an empty value cannot be written to a nullable field).
* **dictionary** — the keys, plain. The values live elsewhere (see
  :func:`encode_dictionary_values`).
* **list / large_list** — ``n + 1`` int32/int64 offsets, rebased to start at 0 in each row group
  (the page length is ``n + 1``), followed by the child column's pages. A null list cannot be
  written (it would read back as empty).
* **struct** — no page of its own; its children follow. A null struct cannot be written.
* **null** — no bytes; the page records the position and the row count.

:func:`encode_column` encodes a column for several consecutive row groups at once: each field's
pages follow one another (the value bytes of a var-binary field come first, for all groups,
then the offsets page of each group), so fixed-width pages of one column form one contiguous
block and each page is a slice of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import (
    SchemaMismatchError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.schema import LanceField, logical_type_of

# Called for each column that gets page statistics with its values and the row group bounds
# (see :func:`encode_column`): top-level fields and fields nested in structs only (never
# inside lists), like upstream.
StatsHook = Callable[[LanceField, pa.Array, np.ndarray], None]
# Anything exposing the buffer protocol: bytes, memoryview, numpy arrays, pyarrow buffers.
Buffer = Any


class ByteSink:
    """Collects output bytes and knows the absolute file position of the next byte.

    Buffers are kept by reference (no copy) until :meth:`getvalue` joins them, so they must
    not change before then.
    """

    def __init__(self, position: int):
        self.position = position
        self.parts: list[Buffer] = []

    def write(self, data: Buffer) -> None:
        """Append the bytes of any buffer (bytes, memoryview, numpy array, Arrow buffer)."""
        size = memoryview(data).nbytes
        if size:
            self.parts.append(data)
            self.position += size

    def getvalue(self) -> bytes:
        """Everything written, joined."""
        return b"".join(self.parts)

    def getparts(self) -> list[memoryview]:
        """Everything written, as flat byte views (``len`` = bytes), without copying."""
        return [memoryview(p).cast("B") if not isinstance(p, bytes) else memoryview(p)
                for p in self.parts]


@dataclass
class DictionaryState:
    """Dictionary values of the dictionary columns seen so far (field id -> values).

    Later batches whose dictionary differs are re-keyed into this one (new values are
    appended), so keys written earlier stay valid.
    """

    values: dict[int, pa.Array] = field(default_factory=dict)


def _storage(arr: pa.Array) -> pa.Array:
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def _storage_type(t: pa.DataType) -> pa.DataType:
    return t.storage_type if isinstance(t, pa.ExtensionType) else t


def is_var_binary(t: pa.DataType) -> bool:
    """String, binary and their large variants."""
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_large_string(t)
            or pa.types.is_large_binary(t))


def is_fixed_stride(t: pa.DataType) -> bool:
    """Types stored with plain encoding (a fixed number of bits per value).

    Fixed-size lists qualify when their items do (recursively).
    """
    t = _storage_type(t)
    if pa.types.is_fixed_size_list(t):
        return is_fixed_stride(t.value_type)
    return (pa.types.is_boolean(t) or pa.types.is_integer(t) or pa.types.is_floating(t)
            or pa.types.is_temporal(t) or pa.types.is_decimal(t)
            or pa.types.is_fixed_size_binary(t)) and not pa.types.is_interval(t)


def fixed_bit_width(t: pa.DataType) -> int:
    """Bits per value of a fixed-stride type (booleans: 1; fixed-size lists: size x item)."""
    t = _storage_type(t)
    if pa.types.is_boolean(t):
        return 1
    if pa.types.is_fixed_size_list(t):
        return t.list_size * fixed_bit_width(t.value_type)
    if pa.types.is_fixed_size_binary(t):
        return 8 * t.byte_width
    return int(t.bit_width)


def check_type(lf: LanceField, t: pa.DataType, path: str) -> None:
    """Raise SchemaMismatchError unless Arrow type ``t`` stores as Lance field ``lf``."""
    t = _storage_type(t)
    try:
        got = logical_type_of(t)
    except UnsupportedFeatureError as exc:
        raise UnsupportedFeatureError(f"column {path!r}: {exc}") from exc
    want = lf.logical_type
    if want == "json":
        want = "large_binary"
    if got != want:
        raise SchemaMismatchError(f"column {path!r}: expected {lf.logical_type}, got {t}")
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        if sorted(names) != sorted(c.name for c in lf.children):
            raise SchemaMismatchError(f"column {path!r}: struct fields {names} do not match "
                                      f"{[c.name for c in lf.children]}")
        for child in lf.children:
            check_type(child, t.field(child.name).type, f"{path}.{child.name}")
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        check_type(lf.children[0], t.value_type, f"{path}.{lf.children[0].name}")
    elif pa.types.is_map(t):
        raise UnsupportedFeatureError(f"column {path!r}: maps cannot be stored in v0.2 files")
    elif pa.types.is_fixed_size_list(t) and not is_fixed_stride(t):
        raise UnsupportedFeatureError(
            f"column {path!r}: fixed-size lists of {t.value_type} cannot be stored in v0.2 files")


def _refuse_nulls(arr: pa.Array, lf: LanceField, path: str, what: str) -> None:
    if arr.null_count:
        if not lf.nullable:
            raise SchemaMismatchError(f"column {path!r} is not nullable but holds nulls")
        raise UnrepresentableValueError(
            f"column {path!r}: v0.2 files cannot store a null {what} (it would read back as "
            "a value); use data_storage_version 2.x or fill the nulls")


def plain_bytes(arr: pa.Array) -> Buffer:
    """The plain encoding of a fixed-stride array (nulls, if any, write their slot content).

    Byte-wide types return a view of the array's own buffer (no copy).
    """
    arr = _storage(arr)
    t = arr.type
    n = len(arr)
    if pa.types.is_boolean(t):
        if n == 0:
            return b""
        bits = np.asarray(pc.fill_null(arr, False).to_numpy(zero_copy_only=False), dtype=bool)
        return np.packbits(bits, bitorder="little")
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        return plain_bytes(arr.values.slice(arr.offset * size, n * size))
    width = fixed_bit_width(t) // 8
    buf = arr.buffers()[1]
    if buf is None or n == 0:  # a zero-length array may have no data buffer
        return b""
    start = arr.offset * width
    return memoryview(buf)[start: start + n * width]


def _value_offsets(arr: pa.Array) -> np.ndarray:
    """The ``n + 1`` value offsets of a var-binary array as int64 (into its data buffer)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    n = len(arr)
    buf = arr.buffers()[1]
    if buf is None or n == 0:
        return np.zeros(1, dtype=np.int64)
    offsets = np.frombuffer(buf, dtype="<i8" if large else "<i4", count=arr.offset + n + 1)
    return offsets[arr.offset:].astype(np.int64)


def _fill_null_values(arr: pa.Array) -> pa.Array:
    """Null var-binary values replaced by empty ones (how v0.2 stores a null)."""
    if arr.null_count:
        return pc.if_else(arr.is_null(), pa.scalar(b"", arr.type), arr)
    return arr


def _var_binary_parts(arr: pa.Array) -> tuple[Buffer, np.ndarray]:
    """The value bytes of a var-binary array (nulls empty) and their offsets, from 0."""
    arr = _fill_null_values(_storage(arr))
    offsets = _value_offsets(arr)
    lo, hi = int(offsets[0]), int(offsets[-1])
    data_buf = arr.buffers()[2]
    data = memoryview(data_buf)[lo:hi] if data_buf is not None and hi > lo else b""
    return data, offsets - lo


def var_binary_bytes(arr: pa.Array, position: int) -> tuple[Buffer, bytes]:
    """(data, offsets) of a var-binary page whose first data byte lands at ``position``."""
    data, offsets = _var_binary_parts(arr)
    return data, (offsets + position).astype("<i8").tobytes()


def _has_empty_value(arr: pa.Array) -> bool:
    """Whether a var-binary array holds an empty (non-null) value."""
    if not len(arr):
        return False
    if arr.null_count:
        return bool(pc.any(pc.equal(pc.binary_length(arr), 0)).as_py())
    offsets = _value_offsets(arr)
    return bool((offsets[1:] == offsets[:-1]).any())


def _check_var_binary(arr: pa.Array, lf: LanceField, path: str) -> None:
    if lf.nullable:
        if _has_empty_value(arr):
            raise UnrepresentableValueError(
                f"column {path!r}: v0.2 files cannot store an empty string/binary in a "
                "nullable column (it would read back as null)")
    elif arr.null_count:
        raise SchemaMismatchError(f"column {path!r} is not nullable but holds nulls")


def _check_fixed(arr: pa.Array, lf: LanceField, path: str) -> None:
    """Refuse nulls anywhere in a fixed-stride value (including fixed-size list items)."""
    _refuse_nulls(arr, lf, path, "value")
    t = arr.type
    if pa.types.is_fixed_size_list(t):
        size = t.list_size
        items = arr.values.slice(arr.offset * size, len(arr) * size)
        if items.null_count:
            raise UnrepresentableValueError(
                f"column {path!r}: v0.2 files cannot store null items in a fixed-size list")
        _check_fixed(items, LanceField(-1, "item", "", nullable=True), path)


def encode_dictionary_values(values: pa.Array, position: int) -> tuple[bytes, int]:
    """Encode dictionary values whose first byte lands at file ``position``.

    Returns ``(bytes, offset)``: record ``(offset, len(values))`` as the field's dictionary.
    Binary-like values use var-binary encoding (offset = position of the offsets array);
    numeric values are plain (offset = ``position``).
    """
    values = _storage(values)
    if is_var_binary(values.type):
        data, offsets = var_binary_bytes(values, position)
        return bytes(data) + offsets, position + memoryview(data).nbytes
    if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
        return bytes(plain_bytes(values)), position
    raise UnsupportedFeatureError(
        f"dictionary values of type {values.type} cannot be stored in v0.2 files")


def _unify_dictionary(lf: LanceField, arr: pa.DictionaryArray, state: DictionaryState,
                      path: str) -> tuple[pa.Array, pa.Array | None]:
    """Keys of ``arr`` expressed against the file's dictionary, and the new dictionary."""
    values = _storage(arr.dictionary)
    if is_var_binary(values.type) and len(values) and pc.any(
            pc.equal(pc.binary_length(values), 0)).as_py():
        raise UnrepresentableValueError(
            f"column {path!r}: v0.2 files cannot store an empty string in a dictionary "
            "(it would read back as null)")
    current = state.values.get(lf.id)
    if current is None:
        return arr.indices, values
    if current.equals(values):
        return arr.indices, None
    found = pc.fill_null(pc.index_in(values, value_set=current), -1)
    pos = np.asarray(found.to_numpy(zero_copy_only=False), dtype=np.int64)
    missing = pos < 0
    added = values.filter(pa.array(missing)) if missing.any() else None
    merged = pa.concat_arrays([current, added]) if added is not None else current
    pos[missing] = len(current) + np.arange(int(missing.sum()))
    key_type = arr.indices.type
    limit = np.iinfo(key_type.to_pandas_dtype()).max
    if len(merged) - 1 > limit:
        raise UnrepresentableValueError(
            f"column {path!r}: the file's dictionary outgrows key type {key_type}")
    keys = np.asarray(arr.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    new_keys = pa.array(pos[keys], type=key_type)
    return new_keys, (merged if added is not None else None)


def _page_entries(positions: np.ndarray | int, lengths: np.ndarray) -> np.ndarray:
    """``(position, length)`` rows of a page table, one per row group."""
    out = np.empty((len(lengths), 2), dtype=np.int64)
    out[:, 0] = positions
    out[:, 1] = lengths
    return out


def _spread(values: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """For each row group ``g``, ``values[bounds[g] : bounds[g + 1] + 1]``, concatenated.

    Pages of offsets need ``n + 1`` entries, so each group repeats its neighbour's first.
    """
    groups = len(bounds) - 1
    if groups == 1:
        return values
    counts = bounds[1:] - bounds[:-1] + 1
    idx = np.arange(int(bounds[-1]) + groups, dtype=np.int64) - np.repeat(
        np.arange(groups, dtype=np.int64), counts)
    return values[idx]


def _encode_plain(lf: LanceField, arr: pa.Array, bounds: np.ndarray, sink: ByteSink,
                  pages: dict[int, np.ndarray]) -> None:
    """Fixed-stride values: one page per row group, back to back."""
    counts = bounds[1:] - bounds[:-1]
    bits = fixed_bit_width(arr.type)
    starts = bounds[:-1] * bits
    if bits % 8 == 0 or not np.any(starts % 8):  # every page starts on a byte boundary
        pages[lf.id] = _page_entries(sink.position + starts // 8, counts)
        sink.write(plain_bytes(arr))
        return
    positions = np.empty(len(counts), dtype=np.int64)
    for g, (lo, n) in enumerate(zip(bounds[:-1].tolist(), counts.tolist(), strict=True)):
        positions[g] = sink.position
        sink.write(plain_bytes(arr.slice(lo, n)))
    pages[lf.id] = _page_entries(positions, counts)


def _encode_var_binary(lf: LanceField, arr: pa.Array, bounds: np.ndarray,
                       sink: ByteSink, pages: dict[int, np.ndarray]) -> None:
    """The values of all row groups, then each group's page of absolute value positions."""
    data, offsets = _var_binary_parts(arr)
    positions = offsets + sink.position
    sink.write(data)
    groups = len(bounds) - 1
    first = sink.position + 8 * (bounds[:-1] + np.arange(groups, dtype=np.int64))
    pages[lf.id] = _page_entries(first, bounds[1:] - bounds[:-1])
    sink.write(np.ascontiguousarray(_spread(positions, bounds), dtype="<i8"))


def encode_column(lf: LanceField, arr: pa.Array, bounds: np.ndarray, sink: ByteSink,
                  pages: dict[int, np.ndarray], dicts: DictionaryState,
                  new_dicts: dict[int, pa.Array], *, path: str, check: bool = True,
                  stats: StatsHook | None = None) -> None:
    """Append the pages of one column (and its children) for consecutive row groups.

    Row group ``g`` holds values ``bounds[g]:bounds[g + 1]`` of ``arr`` (``bounds`` is an
    int64 array starting at 0 and ending at ``len(arr)``). The pages of each field are
    written back to back, field after field (depth first); ``pages[field_id]`` receives one
    ``(position, length)`` row per row group. Dictionary columns whose dictionary must change
    put the new values into ``new_dicts`` (the caller commits them). With ``check``, values
    v0.2 cannot hold faithfully raise UnrepresentableValueError first.
    """
    arr = _storage(arr)
    t = arr.type
    n = len(arr)
    counts = bounds[1:] - bounds[:-1]
    if pa.types.is_null(t):
        if check and not lf.nullable and n:
            raise SchemaMismatchError(f"column {path!r} is not nullable but holds nulls")
        pages[lf.id] = _page_entries(sink.position, counts)
    elif pa.types.is_dictionary(t):
        if check:
            _refuse_nulls(arr.indices, lf, path, "dictionary key")
        keys, new_values = _unify_dictionary(lf, arr, dicts, path)
        if new_values is not None:
            new_dicts[lf.id] = new_values
        _encode_plain(lf, keys, bounds, sink, pages)
    elif is_var_binary(t):
        if check:
            _check_var_binary(arr, lf, path)
        if stats is not None:
            stats(lf, arr, bounds)
        _encode_var_binary(lf, arr, bounds, sink, pages)
    elif is_fixed_stride(t):
        if check:
            _check_fixed(arr, lf, path)
        if stats is not None:
            stats(lf, arr, bounds)
        _encode_plain(lf, arr, bounds, sink, pages)
    elif pa.types.is_struct(t):
        if check:
            _refuse_nulls(arr, lf, path, "struct")
        for child in lf.children:
            encode_column(child, arr.field(child.name), bounds, sink, pages, dicts, new_dicts,
                          path=f"{path}.{child.name}", check=check, stats=stats)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        if check:
            _refuse_nulls(arr, lf, path, "list")
        offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
        if len(offsets) == 0:
            offsets = np.zeros(1, dtype=np.int64)
        lo, hi = int(offsets[0]), int(offsets[-1])
        rebased = _spread(offsets, bounds) - np.repeat(offsets[bounds[:-1]], counts + 1)
        width = 8 if pa.types.is_large_list(t) else 4
        first = sink.position + width * (bounds[:-1] + np.arange(len(counts), dtype=np.int64))
        pages[lf.id] = _page_entries(first, counts + 1)
        sink.write(np.ascontiguousarray(rebased, dtype="<i8" if width == 8 else "<i4"))
        child = lf.children[0]
        encode_column(child, arr.values.slice(lo, hi - lo), offsets[bounds] - lo, sink, pages,
                      dicts, new_dicts, path=f"{path}.{child.name}", check=check, stats=None)
    else:
        raise UnsupportedFeatureError(f"column {path!r}: type {t} cannot be stored in v0.2 files")


__all__ = [
    "ByteSink",
    "DictionaryState",
    "check_type",
    "encode_dictionary_values",
    "encode_column",
    "fixed_bit_width",
    "is_fixed_stride",
    "is_var_binary",
    "plain_bytes",
    "var_binary_bytes",
]
