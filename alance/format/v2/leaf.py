"""Decoded leaf columns: levels and values of selected rows, and their assembly into Arrow.

A page decoder returns a :class:`LeafData` for the rows asked of it; those of several pages
are joined with :func:`concat_leaves`; :func:`build_array` turns the leaf data of every leaf
column of a (possibly nested) field into one Arrow array.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.blocks import (
    Block,
    Fixed,
    StructValues,
    Variable,
    concat_blocks,
    to_arrow,
)
from alance.format.v2.levels import Layer


@dataclass
class LeafData:
    """Rows of one leaf column: per-layer structure (innermost first) and leaf values."""

    layers: list[Layer]
    values: Block  # one entry per slot of the innermost layer

    @property
    def num_rows(self) -> int:
        """Slots of the outermost layer."""
        return self.layers[-1].size


def _concat_valid(parts: list[Layer]) -> np.ndarray | None:
    if all(p.valid is None for p in parts):
        return None
    return np.concatenate([np.ones(p.size, bool) if p.valid is None else p.valid
                           for p in parts])


def concat_leaves(parts: list[LeafData]) -> LeafData:
    """Join leaf data of consecutive row ranges."""
    if len(parts) == 1:
        return parts[0]
    depth = len(parts[0].layers)
    if any(len(p.layers) != depth for p in parts):
        raise CorruptFileError("pages of one column have different nesting depths")
    layers = []
    for i in range(depth):
        ps = [p.layers[i] for p in parts]
        lengths = None
        if ps[0].lengths is not None:
            if any(p.lengths is None for p in ps):
                raise CorruptFileError("pages of one column disagree on list layers")
            lengths = np.concatenate([p.lengths for p in ps if p.lengths is not None])
        layers.append(Layer(_concat_valid(ps), lengths, sum(p.size for p in ps)))
    return LeafData(layers, concat_blocks([p.values for p in parts]))


def _fixed_width(dtype: pa.DataType) -> bool:
    try:
        return bool(dtype.bit_width)
    except ValueError:
        return False


def empty_block(dtype: pa.DataType, n: int) -> Block:
    """``n`` placeholder values (zeros / empty strings) of ``dtype``."""
    storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
    if pa.types.is_dictionary(storage):
        storage = storage.value_type
    if (pa.types.is_string(storage) or pa.types.is_binary(storage)
            or pa.types.is_large_string(storage) or pa.types.is_large_binary(storage)):
        return Variable(np.zeros(n + 1, np.int64), np.zeros(0, np.uint8))
    if pa.types.is_boolean(storage):
        return Fixed(np.zeros(n, bool), 1)
    if pa.types.is_null(storage):
        return Fixed(np.zeros(n, np.uint8), 8)
    if pa.types.is_fixed_size_list(storage):
        width = storage.list_size * storage.value_type.bit_width // 8
        return Fixed(np.zeros((n, width), np.uint8), width * 8)
    if pa.types.is_struct(storage) and not all(_fixed_width(f.type) for f in storage):
        # a packed struct with variable-width fields (e.g. blob v2 descriptors)
        kids = [empty_block(f.type, n) for f in storage]
        flat = [k for k in kids if isinstance(k, (Fixed, Variable))]
        if len(flat) != len(kids):
            raise UnsupportedFeatureError("packed struct fields must not be structs")
        return StructValues(flat, n)
    if pa.types.is_struct(storage):  # a packed struct
        width = sum(f.type.bit_width for f in storage) // 8
        return Fixed(np.zeros((n, width), np.uint8), width * 8)
    bits = storage.bit_width
    if bits in (8, 16, 32, 64):
        return Fixed(np.zeros(n, f"<u{bits // 8}"), bits)
    return Fixed(np.zeros((n, bits // 8), np.uint8), bits)


def constant_block(dtype: pa.DataType, n: int, value: bytes) -> Block:
    """``n`` copies of a constant: raw bytes for fixed-width types, else a serialized scalar
    (u32 buffer count, u32 sizes, the buffers: offsets then bytes)."""
    storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
    if pa.types.is_dictionary(storage):
        storage = storage.value_type
    if pa.types.is_null(storage):
        return empty_block(storage, n)
    block = empty_block(storage, 0)
    if isinstance(block, Fixed):
        if block.bits == 1:
            bit = bool(value[0] & 1) if value else False
            return Fixed(np.full(n, bit), 1)
        width = block.bits // 8
        if len(value) != width:
            raise CorruptFileError(f"constant of {len(value)} bytes for a {dtype} column")
        raw = np.tile(np.frombuffer(value, np.uint8), n)
        return Fixed.from_bytes(raw, block.bits, n)
    count = int.from_bytes(value[:4], "little") if len(value) >= 4 else 0
    if count != 2 or len(value) < 12:
        raise UnsupportedFeatureError("constant variable-width value in an unknown layout")
    size0 = int.from_bytes(value[4:8], "little")
    size1 = int.from_bytes(value[8:12], "little")
    payload = value[12 + size0: 12 + size0 + size1]
    if len(value) < 12 + size0 + size1:
        raise CorruptFileError("constant value is truncated")
    data = np.tile(np.frombuffer(payload, np.uint8), n)
    offsets = np.arange(n + 1, dtype=np.int64) * len(payload)
    return Variable(offsets, data)


def is_packed_struct(field: LanceField) -> bool:
    """Whether ``field`` is a struct stored as one column of row-major fixed-width values
    (field metadata ``packed`` or ``lance-encoding:packed`` set to true)."""
    if field.logical_type != "struct":
        return False
    for key in ("packed", "lance-encoding:packed"):
        value = field.metadata.get(key)
        if value is not None:
            text = value.decode() if isinstance(value, bytes) else str(value)
            if text.lower() == "true":
                return True
    return False


def is_blob(field: LanceField) -> bool:
    """Whether ``field`` is a blob column (bytes stored out of line, described by position
    and size): ``lance-encoding:blob`` metadata or the ``lance.blob.v2`` extension."""
    value = field.metadata.get("lance-encoding:blob")
    if value is not None:
        text = value.decode() if isinstance(value, bytes) else str(value)
        if text.lower() == "true":
            return True
    return field.extension_name == "lance.blob.v2"


def _leaf_paths(field: LanceField) -> Iterator[LanceField]:
    if is_packed_struct(field):
        yield field
        return
    if field.logical_type == "struct" and not field.children:
        yield field  # an empty struct has a column of its own (values: none)
        return
    if field.logical_type == "struct" or field.type == 1:  # PARENT / REPEATED recurse
        if not field.children:
            return
        for c in field.children:
            yield from _leaf_paths(c)
    else:
        yield field


def leaves_of(field: LanceField) -> list[LanceField]:
    """The leaf fields under ``field`` (itself if it is a leaf), depth first."""
    return list(_leaf_paths(field))


def build_array(field: LanceField, leaves: dict[int, LeafData]) -> pa.Array:
    """Assemble the Arrow array of ``field`` from the leaf data of its leaf columns."""
    return _build(field, leaves, 0)


def _layer(field: LanceField, leaves: dict[int, LeafData], depth: int) -> Layer:
    first = leaves_of(field)
    if not first:
        raise UnsupportedFeatureError(f"field {field.name!r} has no leaf columns")
    data = leaves[first[0].id]
    idx = len(data.layers) - 1 - depth
    if idx < 0:
        raise CorruptFileError(f"column of {first[0].name!r} has too few nesting levels")
    return data.layers[idx]


def _mask(valid: np.ndarray | None) -> pa.Buffer | None:
    if valid is None or valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _build(field: LanceField, leaves: dict[int, LeafData], depth: int) -> pa.Array:
    dtype = field.data_type
    if field.logical_type == "struct" and not field.children:
        # Its column holds no values (pylance writes it all-null); as pylance, every row
        # reads as an empty struct.
        data = leaves[field.id]
        if depth != len(data.layers) - 1:
            raise CorruptFileError(f"column of {field.name!r} has a different nesting depth")
        storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
        arr = pa.StructArray.from_buffers(storage, data.layers[0].size, [None], children=[])
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if field.logical_type == "struct" and not is_packed_struct(field):
        layer = _layer(field, leaves, depth)
        kids = [_build(c, leaves, depth + 1) for c in field.children]
        for k in kids:
            if len(k) != layer.size:
                raise CorruptFileError(f"struct {field.name!r}: children disagree in length")
        storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
        nulls = 0 if layer.valid is None else int(len(layer.valid) - layer.valid.sum())
        arr = pa.StructArray.from_buffers(storage, layer.size, [_mask(layer.valid)],
                                          null_count=nulls, children=kids)
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if field.type == 1:  # list / large_list
        layer = _layer(field, leaves, depth)
        if layer.lengths is None:
            raise CorruptFileError(f"list {field.name!r} has no list level in its column")
        (child_field,) = field.children
        child = _build(child_field, leaves, depth + 1)
        storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
        large = pa.types.is_large_list(storage)
        offsets = np.concatenate(([0], np.cumsum(layer.lengths))).astype(
            np.int64 if large else np.int32)
        if offsets[-1] != len(child):
            raise CorruptFileError(f"list {field.name!r}: offsets do not match its items")
        nulls = 0 if layer.valid is None else int(len(layer.valid) - layer.valid.sum())
        arr = pa.Array.from_buffers(storage, layer.size, [_mask(layer.valid),
                                                          pa.py_buffer(offsets)],
                                    null_count=nulls, children=[child])
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    data = leaves[field.id]
    if depth != len(data.layers) - 1:
        raise CorruptFileError(f"column of {field.name!r} has a different nesting depth")
    try:
        return to_arrow(data.values, dtype, data.layers[0].valid)
    except CorruptFileError as exc:
        raise CorruptFileError(f"column {field.name!r}: {exc}") from exc


__all__ = ["LeafData", "build_array", "concat_leaves", "constant_block", "empty_block",
           "is_blob", "is_packed_struct", "leaves_of"]
