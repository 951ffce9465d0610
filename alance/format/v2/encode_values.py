"""Leaf values of a 2.1+ page as plain byte arrays, and the compressive encodings that
describe them (uncompressed: flat, variable, fixed-size list, dictionary indices).

:func:`value_data` turns the value slots of a leaf column (an Arrow array, nulls included)
into a :class:`ValueData`: fixed-width bytes, bits, or offsets plus bytes. Nothing is
compressed; the layouts only need to know each value's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import UnsupportedFeatureError

FIXED, BOOL, VARIABLE, NULLS = "fixed", "bool", "variable", "nulls"


@dataclass
class ValueData:
    """Values of one page, in one of four shapes.

    * ``fixed``: ``data`` is ``(n, width)`` uint8; for fixed-size lists ``dims`` gives the
      list sizes (outermost first), ``valids`` the validity of the items of every level
      (None: all valid) and ``leaf_bits`` the width of the innermost values (1: booleans,
      held in ``bits``; ``data`` is then empty);
    * ``bool``: ``bits`` holds ``n`` booleans;
    * ``variable``: ``offsets`` (``n + 1`` int64 from 0) into ``data`` (uint8);
    * ``nulls``: nothing stored (the Arrow null type).

    ``dictionary`` (variable or fixed) is set when ``data`` holds u32 dictionary indices.
    """

    kind: str
    n: int
    data: np.ndarray
    width: int = 0
    offsets: np.ndarray | None = None
    bits: np.ndarray | None = None
    dims: list[int] = field(default_factory=list)
    valids: list[np.ndarray | None] = field(default_factory=list)
    leaf_bits: int = 0
    dictionary: ValueData | None = None
    offset_bytes: int = 4  # variable: width of the offsets (8 for large types)
    packed_bits: list[int] | None = None  # packed structs: bits of every field
    #: How the page describes the values when the shape alone does not say it (blob v2
    #: descriptors: variable-width rows of a packed struct).
    encoding: pb.CompressiveEncoding | None = None

    @property
    def items_per_value(self) -> int:
        """Innermost items in each fixed-size list value (1 for other values)."""
        return int(np.prod(self.dims)) if self.dims else 1

    @property
    def dim(self) -> int:
        """Size of a one-level fixed-size list (0: not one)."""
        return self.dims[0] if len(self.dims) == 1 else 0

    @property
    def item_valid(self) -> np.ndarray | None:
        """Item validity of a one-level fixed-size list."""
        return self.valids[0] if len(self.valids) == 1 else None

    def value_sizes(self) -> np.ndarray:
        """Bytes of every value (the length of variable-width values)."""
        if self.kind == VARIABLE:
            assert self.offsets is not None
            return np.diff(self.offsets)
        return np.full(self.n, self.width, dtype=np.int64)

    @property
    def max_size(self) -> int:
        """The largest value, in bytes (what decides between mini-block and full-zip)."""
        if self.kind == VARIABLE:
            return int(self.value_sizes().max()) if self.n else 0
        return self.width


Buffer = bytes | np.ndarray


@dataclass
class EncodedPage:
    """One page of one column: its buffers (in order) and layout."""

    buffers: list[Buffer]
    layout: pb.PageLayout
    num_rows: int


def _buffer(arr: pa.Array, i: int) -> np.ndarray:
    buf = arr.buffers()[i]
    return np.zeros(0, np.uint8) if buf is None else np.frombuffer(buf, dtype=np.uint8)


def _fixed_bytes(arr: pa.Array, width: int) -> np.ndarray:
    raw = _buffer(arr, 1)
    start = arr.offset * width
    return raw[start: start + len(arr) * width].reshape(len(arr), width)


def _bits(arr: pa.Array) -> np.ndarray:
    raw = _buffer(arr, 1)
    bits = np.unpackbits(raw, bitorder="little", count=arr.offset + len(arr))
    return bits[arr.offset:].astype(bool)


def _byte_width(dtype: pa.DataType) -> int:
    if pa.types.is_fixed_size_binary(dtype):
        return int(dtype.byte_width)
    try:
        bits = dtype.bit_width
    except ValueError:
        bits = 0
    if bits < 8 or bits % 8:
        raise UnsupportedFeatureError(f"values of type {dtype} cannot be written to 2.x files")
    return bits // 8


def value_data(arr: pa.Array) -> ValueData:
    """The value slots of ``arr`` (a leaf array, storage type, nulls allowed) as bytes."""
    dtype = arr.type
    n = len(arr)
    if pa.types.is_null(dtype):
        return ValueData(NULLS, n, np.zeros(0, np.uint8))
    if pa.types.is_dictionary(dtype):
        # Indices keep the width of the declared key type (readers check it).
        indices = arr.indices
        if indices.null_count:
            indices = indices.fill_null(0)
        dictionary = value_data(arr.dictionary)
        if dictionary.kind not in (FIXED, VARIABLE) or dictionary.dims:
            raise UnsupportedFeatureError(f"dictionaries of {dtype.value_type}")
        width = dtype.index_type.bit_width // 8
        return ValueData(FIXED, n, _fixed_bytes(indices, width), width, dictionary=dictionary)
    if pa.types.is_boolean(dtype):
        return ValueData(BOOL, n, np.zeros(0, np.uint8), bits=_bits(arr))
    if (pa.types.is_string(dtype) or pa.types.is_binary(dtype)
            or pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)):
        large = pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype)
        offs = _buffer(arr, 1).view(np.int64 if large else np.int32)
        offs = offs[arr.offset: arr.offset + n + 1].astype(np.int64)
        data = _buffer(arr, 2)
        if n == 0:
            return ValueData(VARIABLE, 0, data[:0], offsets=np.zeros(1, np.int64),
                             offset_bytes=8 if large else 4)
        data = data[int(offs[0]): int(offs[-1])]
        return ValueData(VARIABLE, n, data, offsets=offs - offs[0],
                         offset_bytes=8 if large else 4)
    if pa.types.is_fixed_size_list(dtype):
        return _fixed_size_list(arr)
    if pa.types.is_struct(dtype):
        return _packed_struct(arr)
    width = _byte_width(dtype)
    return ValueData(FIXED, n, _fixed_bytes(arr, width), width, leaf_bits=8 * width)


def _packed_struct(arr: pa.Array) -> ValueData:
    """A struct stored row-major: the fields' bytes side by side in every value."""
    valid = None if arr.null_count == 0 else np.asarray(arr.is_valid())
    parts, bits = [], []
    for i in range(arr.type.num_fields):
        child = arr.field(i)
        while isinstance(child, pa.ExtensionArray):
            child = child.storage
        ctype = child.type
        if pa.types.is_boolean(ctype) or not (
                pa.types.is_primitive(ctype) or pa.types.is_fixed_size_binary(ctype)
                or pa.types.is_decimal(ctype)):
            raise UnsupportedFeatureError(
                f"packed struct field {arr.type.field(i).name!r} of type {ctype}: packed "
                "structs hold fixed-width fields only")
        if child.null_count and (valid is None or np.asarray(child.is_null())[valid].any()):
            raise UnsupportedFeatureError(
                f"packed struct field {arr.type.field(i).name!r} has nulls: packed structs "
                "cannot hold null fields")
        width = _byte_width(ctype)
        parts.append(_fixed_bytes(child, width))
        bits.append(width * 8)
    data = np.concatenate(parts, axis=1) if parts else np.zeros((len(arr), 0), np.uint8)
    return ValueData(FIXED, len(arr), data, int(data.shape[1]), packed_bits=bits)


def _fixed_size_list(arr: pa.Array) -> ValueData:
    """Fixed-size lists (possibly of fixed-size lists) of fixed-width values or booleans."""
    n = len(arr)
    dims: list[int] = []
    valids: list[np.ndarray | None] = []
    cur = arr
    while pa.types.is_fixed_size_list(cur.type):
        dim = int(cur.type.list_size)
        child = cur.values
        while isinstance(child, pa.ExtensionArray):
            child = child.storage
        cur = child.slice(cur.offset * dim, len(cur) * dim)
        dims.append(dim)
        valids.append(np.asarray(cur.is_valid()) if cur.null_count else None)
    leaf_type = cur.type
    per_value = int(np.prod(dims))
    if pa.types.is_boolean(leaf_type):
        return ValueData(FIXED, n, np.zeros((n, 0), np.uint8), 0, bits=_bits(cur), dims=dims,
                         valids=valids, leaf_bits=1)
    if not (pa.types.is_primitive(leaf_type) or pa.types.is_fixed_size_binary(leaf_type)
            or pa.types.is_decimal(leaf_type)):
        raise UnsupportedFeatureError(
            f"fixed-size lists of {arr.type.value_type} cannot be written to 2.x files")
    width = _byte_width(leaf_type)
    raw = _fixed_bytes(cur, width).reshape(n, per_value * width)
    return ValueData(FIXED, n, raw, per_value * width, dims=dims, valids=valids,
                     leaf_bits=8 * width)


def flat(bits: int) -> pb.CompressiveEncoding:
    """An uncompressed fixed-width encoding."""
    return pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=bits))


def variable32() -> pb.CompressiveEncoding:
    """Variable-width values with uncompressed 32-bit offsets."""
    return pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32)))


def value_encoding(vd: ValueData) -> pb.CompressiveEncoding:
    """How the values of ``vd`` are described in a page layout."""
    if vd.encoding is not None:
        return vd.encoding
    if vd.kind == BOOL:
        return flat(1)
    if vd.kind == VARIABLE:
        return pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(8 * vd.offset_bytes)))
    if vd.packed_bits is not None:
        return pb.CompressiveEncoding(packed_struct=pb.PackedStruct(
            bits_per_value=vd.packed_bits, values=flat(vd.width * 8)))
    if vd.dims:
        enc = flat(vd.leaf_bits)
        for dim, valid in zip(reversed(vd.dims), reversed(vd.valids), strict=True):
            enc = pb.CompressiveEncoding(fixed_size_list=pb.FixedSizeList(
                items_per_value=dim, values=enc, has_validity=valid is not None))
        return enc
    return flat(vd.width * 8)


def dictionary_block(vd: ValueData) -> tuple[pb.CompressiveEncoding, bytes]:
    """A whole dictionary as one buffer: flat bytes, or (variable) a u32 offset width, the
    u32 position of the bytes, the offsets, then the bytes."""
    if vd.kind == VARIABLE:
        assert vd.offsets is not None
        offsets = vd.offsets.astype("<u4")
        start = 8 + offsets.nbytes
        head = np.array([32, start], dtype="<u4").tobytes()
        return variable32(), head + offsets.tobytes() + vd.data.tobytes()
    return flat(vd.width * 8), np.ascontiguousarray(vd.data).tobytes()


__all__ = ["BOOL", "FIXED", "NULLS", "VARIABLE", "Buffer", "EncodedPage", "ValueData",
           "dictionary_block", "flat", "value_data", "value_encoding", "variable32"]
