"""Decoded value blocks, and their conversion to Arrow arrays.

A 2.x compressive decoder produces one of:

* :class:`Fixed` - ``n`` fixed-width values: a 1-D unsigned integer array (8..64 bits), a
  1-D boolean array (1 bit), or a 2-D ``(n, width)`` uint8 array (any other byte width);
* :class:`Variable` - ``n`` variable-width values: int64 offsets (``n + 1``) and bytes;
* :class:`DictValues` - ``n`` indices into a page's dictionary (one of the above), looked up
  only when the values are needed, so that a dictionary column reads back as the dictionary
  and indices the page stores.

:func:`to_arrow` turns a block plus an optional validity mask into an array of the field's
Arrow type.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.arrow_buffers import (
    adjacent_view,
    aligned_buffer,
    pooled_concatenate,
    pooled_empty,
)


@dataclass
class Fixed:
    """Fixed-width values (see module docstring)."""

    values: np.ndarray
    bits: int
    #: Fixed-size lists only: validity of the items, ``(n, dim)`` booleans (None: all valid).
    item_valid: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.values.shape[0])

    def take(self, idx: np.ndarray) -> Fixed:
        """The values at ``idx``."""
        inner = None if self.item_valid is None else self.item_valid[idx]
        return Fixed(self.values[idx], self.bits, inner)

    def slice(self, start: int, stop: int) -> Fixed:
        """Values ``start..stop``."""
        if not 0 <= start <= stop <= len(self):
            raise CorruptFileError("a page holds fewer values than its rows need")
        inner = None if self.item_valid is None else self.item_valid[start:stop]
        return Fixed(self.values[start:stop], self.bits, inner)

    @staticmethod
    def from_bytes(raw: np.ndarray, bits: int, n: int) -> Fixed:
        """Interpret ``raw`` (uint8) as ``n`` values of ``bits`` bits."""
        if bits == 1:
            bits_arr = np.unpackbits(raw, bitorder="little", count=n) if n else raw[:0]
            if len(bits_arr) < n:
                raise CorruptFileError("boolean buffer is too short")
            return Fixed(bits_arr.astype(bool), 1)
        if bits % 8:
            raise UnsupportedFeatureError(f"{bits}-bit flat values are not supported")
        width = bits // 8
        if len(raw) < n * width:
            raise CorruptFileError("flat buffer is too short")
        raw = raw[: n * width]
        if bits in (8, 16, 32, 64):
            return Fixed(np.ascontiguousarray(raw).view(f"<u{width}"), bits)
        return Fixed(raw.reshape(n, width), bits)

    def as_bytes(self) -> np.ndarray:
        """The values as a flat little-endian byte array (not for 1-bit values)."""
        if self.bits == 1:
            return np.packbits(self.values.astype(np.uint8), bitorder="little")
        return np.ascontiguousarray(self.values).view(np.uint8).reshape(-1)


@dataclass
class Variable:
    """Variable-width values (see module docstring)."""

    offsets: np.ndarray  # int64, n + 1, starting anywhere
    data: np.ndarray  # uint8
    #: Whether every byte is known to be ASCII from how the values were made (their offsets
    #: checked too): string values that need no UTF-8 scan. ``False``: not known.
    ascii: bool = False

    def __len__(self) -> int:
        return int(len(self.offsets) - 1)

    def slice(self, start: int, stop: int) -> Variable:
        """Values ``start..stop``."""
        if not 0 <= start <= stop <= len(self):
            raise CorruptFileError("a page holds fewer values than its rows need")
        return Variable(self.offsets[start: stop + 1], self.data, self.ascii)

    def take(self, idx: np.ndarray) -> Variable:
        """The values at ``idx``."""
        from alance.format.v2.kernels import gather_ranges

        starts = self.offsets[:-1][idx]
        lens = self.offsets[1:][idx] - starts
        data = gather_ranges(self.data, starts, lens)
        return Variable(np.concatenate(([0], np.cumsum(lens))).astype(np.int64), data,
                        self.ascii)


@dataclass
class FsstVariable(Variable):
    """FSST-compressed variable-width values, decompressed only when used (so a ``take``
    expands just the strings it keeps)."""

    symbol_table: bytes = b""

    def slice(self, start: int, stop: int) -> FsstVariable:
        """Values ``start..stop`` (still compressed)."""
        v = Variable.slice(self, start, stop)
        return FsstVariable(v.offsets, v.data, symbol_table=self.symbol_table)

    def take(self, idx: np.ndarray) -> FsstVariable:
        """The values at ``idx`` (still compressed)."""
        v = Variable.take(self, idx)
        return FsstVariable(v.offsets, v.data, symbol_table=self.symbol_table)

    def decoded(self) -> Variable:
        """The decompressed values."""
        from alance.format.v2.kernels import fsst_decode, fsst_yields_ascii

        start, end = int(self.offsets[0]), int(self.offsets[-1])
        codes = self.data[start:end]
        top = int(codes.max()) if len(codes) else -1
        data, offs = fsst_decode(self.symbol_table, codes, self.offsets - start, top)
        return Variable(offs, data, fsst_yields_ascii(self.symbol_table, top))


@dataclass
class StructValues:
    """Values of a packed struct whose fields differ in width: one block per field."""

    fields: list[Fixed | Variable]
    n: int

    def __len__(self) -> int:
        return self.n

    def take(self, idx: np.ndarray) -> StructValues:
        """The values at ``idx``."""
        return StructValues([f.take(idx) for f in self.fields], len(idx))

    def slice(self, start: int, stop: int) -> StructValues:
        """Values ``start..stop``."""
        if not 0 <= start <= stop <= self.n:
            raise CorruptFileError("a page holds fewer values than its rows need")
        return StructValues([f.slice(start, stop) for f in self.fields], stop - start)


@dataclass
class DictValues:
    """Indices into a dictionary of values, as a dictionary-encoded page stores them.

    ``take`` and ``slice`` work on the indices; :meth:`decoded` looks the values up. Blocks
    of one page (the same ``dictionary`` object) concatenate without a lookup, so a column of
    Arrow dictionary type can be returned with exactly the page's dictionary and indices.
    """

    indices: np.ndarray  # 1-D integers, each in range(len(dictionary)) (checked on creation)
    dictionary: Fixed | Variable | StructValues
    #: Validity of the dictionary items (None: all valid); 2.0 pages store a null item.
    dict_valid: np.ndarray | None = None
    #: The dictionaries of several pages joined end to end (see :func:`concat_blocks`).
    joined: bool = False

    def __len__(self) -> int:
        return int(self.indices.shape[0])

    def take(self, idx: np.ndarray) -> DictValues:
        """The values at ``idx``."""
        return DictValues(self.indices[idx], self.dictionary, self.dict_valid, self.joined)

    def slice(self, start: int, stop: int) -> DictValues:
        """Values ``start..stop``."""
        if not 0 <= start <= stop <= len(self):
            raise CorruptFileError("a page holds fewer values than its rows need")
        return DictValues(self.indices[start:stop], self.dictionary, self.dict_valid,
                          self.joined)

    def decoded(self) -> Fixed | Variable | StructValues:
        """The looked-up values."""
        out = self.dictionary.take(self.indices)
        return out.decoded() if isinstance(out, FsstVariable) else out

    @staticmethod
    def lookup(indices: Block, dictionary: Block, dict_valid: np.ndarray | None = None,
               ) -> DictValues:
        """``indices`` (decoded integers) into ``dictionary``, checked to be in range."""
        if (not isinstance(indices, Fixed) or indices.values.ndim != 1 or indices.bits == 1
                or isinstance(dictionary, DictValues)):
            raise CorruptFileError("dictionary indices are not integers")
        idx = indices.values
        if len(idx) and int(idx.max()) >= len(dictionary):
            raise CorruptFileError("dictionary index out of range")
        return DictValues(idx, dictionary, dict_valid)


Block = Fixed | Variable | StructValues | DictValues


def plain(block: Block) -> Fixed | Variable | StructValues:
    """``block`` with any deferred decompression or dictionary lookup done."""
    if isinstance(block, (FsstVariable, DictValues)):
        return block.decoded()
    return block


def concat_blocks(blocks: list[Block]) -> Block:
    """Join blocks of the same kind end to end (indices into one dictionary stay indices)."""
    if len(blocks) == 1:
        return blocks[0]
    if all(isinstance(b, DictValues) for b in blocks):
        return _concat_dicts([b for b in blocks if isinstance(b, DictValues)])
    blocks = [plain(b) for b in blocks]
    if all(isinstance(b, StructValues) for b in blocks):
        parts = [b for b in blocks if isinstance(b, StructValues)]
        if len({len(b.fields) for b in parts}) != 1:
            raise CorruptFileError("pages of one packed struct differ in their fields")
        fields = [concat_blocks([b.fields[i] for b in parts]) for i in range(len(parts[0].fields))]
        return StructValues(fields, sum(b.n for b in parts))  # type: ignore[arg-type]
    if all(isinstance(b, Fixed) for b in blocks):
        fixed = [b for b in blocks if isinstance(b, Fixed)]
        bits = {b.bits for b in fixed}
        if len(bits) != 1:
            raise CorruptFileError("pages of one column decode to different value widths")
        inner = None
        dims = [b.item_valid.shape[1] for b in fixed if b.item_valid is not None]
        if dims:
            inner = np.concatenate([np.ones((len(b), dims[0]), bool)
                                    if b.item_valid is None else b.item_valid for b in fixed])
        values = [b.values for b in fixed]
        joined = adjacent_view(values)  # (pages read in one piece: no copy)
        return Fixed(pooled_concatenate(values) if joined is None else joined, fixed[0].bits,
                     inner)
    if all(isinstance(b, Variable) for b in blocks):
        var = [b for b in blocks if isinstance(b, Variable)]
        datas, offs, base = [], [np.zeros(1, np.int64)], 0
        for b in var:
            o = b.offsets - b.offsets[0]
            datas.append(b.data[int(b.offsets[0]): int(b.offsets[-1])])
            offs.append(o[1:] + base)
            base += int(o[-1])
        return Variable(np.concatenate(offs), pooled_concatenate(datas) if datas else
                        np.zeros(0, np.uint8), all(b.ascii for b in var))
    raise CorruptFileError("pages of one column decode to different kinds of values")


def _concat_dicts(blocks: list[DictValues]) -> Block:
    """Indices into one page's dictionary stay as they are; several pages' dictionaries are
    joined end to end, each page's indices offset past the items before it (pylance joins
    them so too)."""
    first = blocks[0]
    if all(b.dictionary is first.dictionary for b in blocks):
        return DictValues(np.concatenate([b.indices for b in blocks]), first.dictionary,
                          first.dict_valid, first.joined)
    dicts: list[DictValues] = []
    for b in blocks:  # one entry per dictionary (consecutive parts of a page share one)
        if dicts and b.dictionary is dicts[-1].dictionary:
            dicts[-1] = DictValues(np.concatenate([dicts[-1].indices, b.indices]),
                                   b.dictionary, b.dict_valid)
        else:
            dicts.append(b)
    items = [plain(d.dictionary) for d in dicts]
    kinds = {type(i) for i in items}
    if len(kinds) != 1 or StructValues in kinds:
        return concat_blocks([d.decoded() for d in dicts])
    sizes = np.array([len(d.dictionary) for d in dicts], np.int64)
    base = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    indices = np.concatenate([d.indices.astype(np.int64) + int(o)
                              for d, o in zip(dicts, base.tolist(), strict=True)])
    valid = None
    if any(d.dict_valid is not None for d in dicts):
        valid = np.concatenate([np.ones(len(d.dictionary), bool) if d.dict_valid is None
                                else d.dict_valid for d in dicts])
    dictionary = concat_blocks(list(items))
    assert not isinstance(dictionary, DictValues)
    return DictValues(indices, dictionary, valid, joined=True)


def _validity_buffer(valid: np.ndarray | None) -> tuple[pa.Buffer | None, int]:
    if valid is None:
        return None, 0
    nulls = int(len(valid) - np.count_nonzero(valid))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


def _packed_struct(block: Fixed, storage: pa.StructType, n: int, vbuf: pa.Buffer | None,
                   nulls: int) -> pa.Array:
    """Split row-major packed struct values into one child array per field."""
    widths = []
    for f in storage:
        bits = f.type.bit_width if not pa.types.is_nested(f.type) else 0
        if not bits or bits % 8:
            raise UnsupportedFeatureError(f"packed struct field of type {f.type}")
        widths.append(bits // 8)
    raw = block.values
    if raw.ndim == 1:
        raw = raw.view(np.uint8).reshape(n, -1) if n else raw.reshape(0, sum(widths))
    if raw.shape != (n, sum(widths)):
        raise CorruptFileError("packed struct values have the wrong width")
    kids, pos = [], 0
    for f, w in zip(storage, widths, strict=True):
        part = np.ascontiguousarray(raw[:, pos: pos + w]).reshape(-1)
        kids.append(pa.Array.from_buffers(f.type, n, [None, pa.py_buffer(part)]))
        pos += w
    return pa.StructArray.from_buffers(storage, n, [vbuf], null_count=nulls, children=kids)


def _check_strings(arr: pa.Array) -> None:
    """Refuse string values that are not UTF-8 (or whose offsets are out of order).

    Arrow assumes both without checking, so a damaged page would otherwise come back as a
    string array that fails (or misbehaves) wherever it is used later. One vectorised pass
    over the array: a few milliseconds per 2M short strings.
    """
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptFileError(f"string values are not valid UTF-8: {exc}") from exc


def _dictionary_array(block: DictValues, dtype: pa.DictionaryType,
                      valid: np.ndarray | None) -> pa.Array | None:
    """The page's dictionary and indices as an array of ``dtype`` (None when the indices do
    not fit its index type)."""
    index_type = dtype.index_type
    if block.joined and len(block) < len(block.dictionary):
        # Fewer values than the joined dictionaries hold: as pylance, the distinct values the
        # slots point at (null rows' slots too, unless at a null item), sorted, become the
        # dictionary.
        items = to_arrow(block.dictionary, dtype.value_type, block.dict_valid)
        slots = items.take(pa.array(block.indices))
        distinct = pc.unique(slots.drop_null())
        distinct = distinct.take(pc.sort_indices(distinct))
        indices = pc.index_in(slots, distinct).cast(index_type)
        if valid is not None and not valid.all():
            indices = pc.if_else(pa.array(valid), indices, pa.nulls(len(indices), index_type))
        return pa.DictionaryArray.from_arrays(indices, distinct, ordered=dtype.ordered)
    np_type = np.dtype(index_type.to_pandas_dtype())
    if len(block.dictionary) and len(block.dictionary) - 1 > np.iinfo(np_type).max:
        return None
    idx = np.ascontiguousarray(block.indices, dtype=np_type)
    vbuf, nulls = _validity_buffer(valid)
    indices = pa.Array.from_buffers(index_type, len(idx), [vbuf, pa.py_buffer(idx)],
                                    null_count=nulls)
    dictionary = to_arrow(block.dictionary, dtype.value_type, block.dict_valid)
    return pa.DictionaryArray.from_arrays(indices, dictionary, ordered=dtype.ordered,
                                          safe=False)


def _looked_up(block: DictValues, storage: pa.DataType, valid: np.ndarray | None,
               ) -> pa.Array | None:
    """Variable-width dictionary values looked up by Arrow's ``take`` (one gather in C++;
    the dictionary's strings are checked once, not every value taken from it). None when the
    dictionary is not variable-width, or the values taken overflow 32-bit offsets."""
    items = plain(block.dictionary)
    if not isinstance(items, Variable):
        return None
    dictionary = to_arrow(items, storage, None)
    idx = np.ascontiguousarray(block.indices)
    vbuf, nulls = _validity_buffer(valid)
    indices = pa.Array.from_buffers(pa.from_numpy_dtype(idx.dtype), len(idx),
                                    [vbuf, pa.py_buffer(idx)], null_count=nulls)
    try:
        return dictionary.take(indices)
    except (pa.ArrowInvalid, pa.ArrowCapacityError, pa.ArrowIndexError):
        return None  # the plain path decodes it, or says what is wrong with the page


def to_arrow(block: Block, dtype: pa.DataType, valid: np.ndarray | None) -> pa.Array:
    """An Arrow array of ``dtype`` from decoded values and an optional validity mask.

    A dictionary type gets the page's own dictionary and indices when ``block`` holds them
    (:class:`DictValues` of one page); other values are dictionary-encoded here.
    """
    n = len(block)
    if valid is not None and len(valid) != n:
        raise CorruptFileError(f"{len(valid)} validity bits for {n} values")
    if pa.types.is_dictionary(dtype):
        if isinstance(block, DictValues):
            arr = _dictionary_array(block, dtype, valid)
            if arr is not None:
                return arr
        values = to_arrow(block, dtype.value_type, valid)
        return values.dictionary_encode().cast(dtype)
    if pa.types.is_null(dtype):
        return pa.nulls(n)
    storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
    if isinstance(block, DictValues) and (
            pa.types.is_string(storage) or pa.types.is_binary(storage)
            or pa.types.is_large_string(storage) or pa.types.is_large_binary(storage)):
        taken = _looked_up(block, storage, valid)
        if taken is not None:
            return taken if storage is dtype else pa.ExtensionArray.from_storage(dtype, taken)
    block = plain(block)
    vbuf, nulls = _validity_buffer(valid)
    if isinstance(block, Variable):
        if not (pa.types.is_string(storage) or pa.types.is_binary(storage)
                or pa.types.is_large_string(storage) or pa.types.is_large_binary(storage)):
            raise CorruptFileError(f"variable-width values for a {dtype} column")
        first = int(block.offsets[0])
        data = block.data[first: int(block.offsets[-1])]
        large = pa.types.is_large_string(storage) or pa.types.is_large_binary(storage)
        if not large and int(block.offsets[-1]) - first > np.iinfo(np.int32).max:
            raise UnsupportedFeatureError("more than 2 GiB of strings in one batch")
        # Rebased straight into the output offsets (which the result keeps: pooled memory).
        offs = pooled_empty(len(block.offsets), np.int64 if large else np.int32)
        np.subtract(block.offsets, first, out=offs, casting="unsafe")
        arr = pa.Array.from_buffers(storage, n, [vbuf, pa.py_buffer(offs),
                                                 pa.py_buffer(np.ascontiguousarray(data))],
                                    null_count=nulls)
        if block.ascii:
            arr.validate()  # (sizes only: the bytes and offsets are known good)
        elif pa.types.is_string(storage) or pa.types.is_large_string(storage):
            _check_strings(arr)
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if isinstance(block, StructValues):
        if not pa.types.is_struct(storage) or storage.num_fields != len(block.fields):
            raise CorruptFileError(f"packed struct values for a {dtype} column")
        kids = [to_arrow(b, f.type, None) for b, f in zip(block.fields, storage, strict=True)]
        arr = pa.StructArray.from_buffers(storage, n, [vbuf], null_count=nulls, children=kids)
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if pa.types.is_boolean(storage):
        if block.bits != 1:
            raise CorruptFileError("boolean column stored with more than one bit per value")
        vals = pa.py_buffer(np.packbits(block.values.astype(np.uint8), bitorder="little"))
        arr = pa.Array.from_buffers(storage, n, [vbuf, vals], null_count=nulls)
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if pa.types.is_struct(storage):
        arr = _packed_struct(block, storage, n, vbuf, nulls)
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    if pa.types.is_fixed_size_list(storage):
        dim = storage.list_size
        child_type = storage.value_type
        width = child_type.bit_width if child_type.bit_width else 0
        raw = block.as_bytes()
        if width == 1 or width % 8:
            raise UnsupportedFeatureError(f"fixed-size lists of {child_type}")
        item_bytes = width // 8
        if len(raw) != n * dim * item_bytes:
            raise CorruptFileError("fixed-size list values have the wrong size")
        cvalid, cnulls = None, 0
        if block.item_valid is not None:
            flat = np.broadcast_to(block.item_valid, (n, dim)).reshape(-1)
            cvalid, cnulls = _validity_buffer(flat)
        child = pa.Array.from_buffers(child_type, n * dim, [cvalid, aligned_buffer(raw)],
                                      null_count=cnulls)
        arr = pa.FixedSizeListArray.from_arrays(child, dim, mask=None if vbuf is None else
                                                pa.array(~valid))  # type: ignore[operator]
        return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)
    width = storage.bit_width
    raw = block.as_bytes()
    if len(raw) != n * width // 8:
        raise CorruptFileError(f"{len(raw)} bytes for {n} values of {dtype}")
    arr = pa.Array.from_buffers(storage, n, [vbuf, aligned_buffer(raw)], null_count=nulls)
    return arr if storage is dtype else pa.ExtensionArray.from_storage(dtype, arr)


__all__ = ["Block", "DictValues", "Fixed", "FsstVariable", "StructValues", "Variable",
           "concat_blocks", "plain", "to_arrow"]
