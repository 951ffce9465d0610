"""Pages of Lance file format 2.0, written (so alance can append to 2.0 datasets).

2.0 gives every field its own column, in schema pre-order: structs get pages without buffers,
lists get pages of end offsets into their item column (whose rows are the items), leaves get
pages described by an ``ArrayEncoding`` tree: ``nullable`` (validity bitmap) over ``flat``
values, ``binary`` (end offsets plus bytes) for variable-width values, ``fixed_size_list`` and
``dictionary``. Offsets are local to the page; a null list or value is marked by adding an
adjustment larger than any offset. 2.0 cannot hold null structs or maps.

Pure: arrays in, buffers and encodings out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_0_pb2 as pb
from alance.errors import UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.encode_levels import storage_of
from alance.format.v2.encode_values import FIXED, VARIABLE, Buffer, value_data
from alance.format.v2.leaf import is_packed_struct

#: One page of one column: (buffers, encoding, rows).
Page20 = tuple[list[Buffer], pb.ArrayEncoding, int]


class _Buffers:
    """Page buffers collected while an encoding tree is built."""

    def __init__(self) -> None:
        self.items: list[Buffer] = []

    def add(self, data: Buffer) -> pb.Buffer:
        self.items.append(data)
        return pb.Buffer(buffer_index=len(self.items) - 1, buffer_type=pb.Buffer.page)


def check_field20(field: LanceField, path: str) -> None:
    """Refuse fields 2.0 files cannot hold."""
    if field.logical_type == "map":
        raise UnsupportedFeatureError(f"field {path!r}: 2.0 files cannot hold maps")
    dtype = field.data_type
    if pa.types.is_fixed_size_list(dtype):
        item = dtype.value_type
        item = item.storage_type if isinstance(item, pa.ExtensionType) else item
        if pa.types.is_fixed_size_list(item) or pa.types.is_boolean(item) or not (
                pa.types.is_primitive(item) or pa.types.is_fixed_size_binary(item)
                or pa.types.is_decimal(item)):
            raise UnsupportedFeatureError(
                f"field {path!r}: alance writes 2.0 fixed-size lists of fixed-width values "
                f"only, not of {item}")
    for c in field.children:
        check_field20(c, f"{path}.{c.name}")


def columns20(fields: list[LanceField]) -> list[LanceField]:
    """The fields that get a column in a 2.0 file, in column order: every field, pre-order,
    except the fields inside packed structs (stored with their struct)."""
    out: list[LanceField] = []
    for f in fields:
        out.append(f)
        if not is_packed_struct(f):
            out.extend(columns20(f.children))
    return out


def encode_field20(field: LanceField, arr: pa.Array) -> list[Page20]:
    """One page for each column of ``field`` (pre-order), holding the rows of ``arr``;
    columns that get no rows (items of lists that are all empty) get no page (``None`` rows
    are dropped by the caller)."""
    out: list[Page20] = []
    _encode(field, storage_of(arr), out)
    return out


def _encode(field: LanceField, arr: pa.Array, out: list[Page20]) -> None:
    dtype = arr.type
    if pa.types.is_struct(dtype) and is_packed_struct(field):
        if arr.null_count:
            raise UnsupportedFeatureError(
                f"field {field.name!r}: 2.0 files cannot hold null structs (use 2.1 or 2.2)")
        vd = value_data(arr)  # row-major bytes of the fields
        assert vd.packed_bits is not None
        bufs = _Buffers()
        ref = bufs.add(np.ascontiguousarray(vd.data))
        inner = [_no_nulls(pb.ArrayEncoding(flat=pb.Flat(bits_per_value=b, buffer=ref)))
                 for b in vd.packed_bits]
        out.append((bufs.items, pb.ArrayEncoding(packed_struct=pb.PackedStruct(
            inner=inner, buffer=ref)), len(arr)))
        return
    if pa.types.is_struct(dtype):
        if arr.null_count:
            raise UnsupportedFeatureError(
                f"field {field.name!r}: 2.0 files cannot hold null structs (use 2.1 or 2.2)")
        out.append(([], pb.ArrayEncoding(struct=pb.SimpleStruct()), len(arr)))
        for i, child in enumerate(field.children):
            _encode(child, storage_of(arr.field(i)), out)
        return
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        offsets = np.asarray(arr.offsets).astype(np.int64)
        first, last = int(offsets[0]), int(offsets[-1])
        ends = offsets[1:] - first
        num_items = last - first
        adjust = num_items + 1
        if arr.null_count:
            ends = np.where(np.asarray(arr.is_valid()), ends, ends + adjust)
        bufs = _Buffers()
        enc = pb.ArrayEncoding(list=pb.List(
            offsets=_no_nulls(pb.ArrayEncoding(flat=pb.Flat(
                bits_per_value=64, buffer=bufs.add(ends.astype("<u8").tobytes())))),
            null_offset_adjustment=adjust, num_items=num_items))
        out.append((bufs.items, enc, len(arr)))
        (child,) = field.children
        _encode(child, storage_of(arr.values).slice(first, num_items), out)
        return
    bufs = _Buffers()
    enc = _leaf(arr, bufs)
    out.append((bufs.items, enc, len(arr)))


def _no_nulls(values: pb.ArrayEncoding) -> pb.ArrayEncoding:
    return pb.ArrayEncoding(nullable=pb.Nullable(no_nulls=pb.Nullable.NoNull(values=values)))


def _validity(arr: pa.Array) -> np.ndarray | None:
    if pa.types.is_null(arr.type):
        return np.zeros(len(arr), bool)
    return np.asarray(arr.is_valid()) if arr.null_count else None


def _leaf(arr: pa.Array, bufs: _Buffers) -> pb.ArrayEncoding:
    dtype = arr.type
    valid = _validity(arr)
    if pa.types.is_null(dtype) or len(arr) == 0 or (valid is not None and not valid.any()):
        return pb.ArrayEncoding(nullable=pb.Nullable(all_nulls=pb.Nullable.AllNull()))
    if pa.types.is_dictionary(dtype):
        return _dictionary(arr, bufs)
    vd = value_data(arr)
    if vd.kind == VARIABLE:
        assert vd.offsets is not None
        ends = vd.offsets[1:].copy()
        adjust = int(vd.offsets[-1]) + 1
        if valid is not None:
            ends = np.where(valid, ends, ends + adjust)
        indices = _no_nulls(pb.ArrayEncoding(flat=pb.Flat(
            bits_per_value=64, buffer=bufs.add(ends.astype("<u8").tobytes()))))
        data = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=8, buffer=bufs.add(vd.data)))
        return pb.ArrayEncoding(binary=pb.Binary(indices=indices, bytes=data,
                                                 null_adjustment=adjust))
    validity_ref = None
    if valid is not None:
        validity_ref = bufs.add(np.packbits(valid, bitorder="little"))
    if vd.kind == FIXED and vd.dims:
        if len(vd.dims) > 1 or vd.leaf_bits == 1:  # (pylance writes neither to 2.0)
            raise UnsupportedFeatureError(
                f"alance writes 2.0 fixed-size lists of fixed-width values only, not {dtype}")
        item_valid = vd.item_valid
        item_ref = None
        if item_valid is not None:
            item_ref = bufs.add(np.packbits(item_valid, bitorder="little"))
        flat = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=vd.leaf_bits,
                                             buffer=bufs.add(np.ascontiguousarray(vd.data))))
        items = _wrap(flat, item_ref)
        values = pb.ArrayEncoding(fixed_size_list=pb.FixedSizeList(dimension=vd.dims[0],
                                                                    items=items))
        return _wrap(values, validity_ref)
    if vd.kind == FIXED:
        raw: Buffer = np.ascontiguousarray(vd.data)
        bits = vd.width * 8
    else:  # booleans
        assert vd.bits is not None
        raw, bits = np.packbits(vd.bits, bitorder="little"), 1
    flat = pb.ArrayEncoding(flat=pb.Flat(bits_per_value=bits, buffer=bufs.add(raw)))
    return _wrap(flat, validity_ref)


def _wrap(values: pb.ArrayEncoding, validity: pb.Buffer | None) -> pb.ArrayEncoding:
    if validity is None:
        return _no_nulls(values)
    return pb.ArrayEncoding(nullable=pb.Nullable(some_nulls=pb.Nullable.SomeNull(
        validity=pb.ArrayEncoding(flat=pb.Flat(bits_per_value=1, buffer=validity)),
        values=values)))


def _dictionary(arr: pa.Array, bufs: _Buffers) -> pb.ArrayEncoding:
    """Indices as given, nulls pointing at a null item appended to the dictionary."""
    dictionary = storage_of(arr.dictionary)
    indices = arr.indices
    if indices.null_count:
        indices = indices.fill_null(len(dictionary))
        dictionary = pa.concat_arrays([dictionary, pa.nulls(1, dictionary.type)])
    width = arr.type.index_type.bit_width
    raw = value_data(indices)
    idx = _no_nulls(pb.ArrayEncoding(flat=pb.Flat(
        bits_per_value=width, buffer=bufs.add(np.ascontiguousarray(raw.data)))))
    items = _leaf(dictionary, bufs)
    return pb.ArrayEncoding(dictionary=pb.Dictionary(indices=idx, items=items,
                                                     num_dictionary_items=len(dictionary)))


__all__ = ["Page20", "check_field20", "columns20", "encode_field20"]
