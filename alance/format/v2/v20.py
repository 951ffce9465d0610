"""Reading Lance file format 2.0 (footer version 0.3): array encodings, one column per field.

Unlike 2.1+, every field (structs and lists too) has its own column, in schema pre-order.
Pages describe their contents with a ``lance.encodings.ArrayEncoding`` tree whose leaves name
page buffers. List pages hold end offsets into the item column (null lists marked by adding
``null_offset_adjustment``), and the item column's rows are the items. Binary pages hold end
offsets of each value (nulls marked by adding ``null_adjustment``) and the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_0_pb2 as pb
from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.legacy.plan import Plan, gather
from alance.format.schema import LanceField
from alance.format.v2 import v20_rows
from alance.format.v2.blocks import Block, DictValues, Fixed, Variable, concat_blocks, to_arrow
from alance.format.v2.container import PageInfo, V2File
from alance.format.v2.kernels import decompress, range_indices
from alance.format.v2.leaf import empty_block, is_packed_struct


class Rows20:
    """Rows of a column to read: a range, or sorted unique offsets."""

    def __init__(self, lo: int, hi: int, wanted: np.ndarray | None = None) -> None:
        self.lo, self.hi, self.wanted = lo, hi, wanted

    @property
    def count(self) -> int:
        """Rows selected."""
        return self.hi - self.lo if self.wanted is None else len(self.wanted)


def _buffer(bufs: Sequence[np.ndarray], ref: pb.Buffer) -> np.ndarray:
    if ref.buffer_type != pb.Buffer.page:
        raise UnsupportedFeatureError("2.0 column or file buffers are not supported")
    if ref.buffer_index >= len(bufs):
        raise CorruptFileError("2.0 encoding names a missing page buffer")
    return bufs[ref.buffer_index]


def _flat(enc: pb.Flat, bufs: Sequence[np.ndarray], n: int) -> Fixed:
    raw = _buffer(bufs, enc.buffer)
    if enc.HasField("compression") and enc.compression.scheme:
        scheme = {"lz4": 1, "zstd": 2}.get(enc.compression.scheme)
        if scheme is None:
            raise UnsupportedFeatureError(f"2.0 compression {enc.compression.scheme!r}")
        raw = np.frombuffer(decompress(scheme, raw), np.uint8)
    return Fixed.from_bytes(raw, int(enc.bits_per_value), n)


def decode_values(enc: pb.ArrayEncoding, bufs: Sequence[np.ndarray], n: int,
                  direct_dict: bool = False) -> tuple[Block, np.ndarray | None]:
    """Decode ``n`` values of a leaf page: the values and their validity (None: all valid).

    Dictionaries built by the writer reserve index 0 for null; columns that are dictionaries
    in the schema (``direct_dict``) store Arrow's indices as they are.
    """
    which = enc.WhichOneof("array_encoding")
    if which == "nullable":
        kind = enc.nullable.WhichOneof("nullability")
        if kind == "no_nulls":
            block, _ = decode_values(enc.nullable.no_nulls.values, bufs, n)
            return block, None
        if kind == "some_nulls":
            valid_block, _ = decode_values(enc.nullable.some_nulls.validity, bufs, n)
            if not isinstance(valid_block, Fixed) or valid_block.bits != 1:
                raise CorruptFileError("2.0 validity is not a bitmap")
            block, _ = decode_values(enc.nullable.some_nulls.values, bufs, n)
            return block, valid_block.values.astype(bool)
        if kind == "all_nulls":
            return Fixed(np.zeros(n, np.uint8), 8), np.zeros(n, bool)
        raise CorruptFileError("2.0 nullable encoding is empty")
    if which == "flat":
        return _flat(enc.flat, bufs, n), None
    if which == "binary":
        idx, _ = decode_values(enc.binary.indices, bufs, n)
        if not isinstance(idx, Fixed) or idx.bits != 64:
            raise CorruptFileError("2.0 binary offsets are not 64-bit")
        ends = idx.values.astype(np.int64)
        adj = int(enc.binary.null_adjustment)
        is_null = ends >= adj if adj else np.zeros(n, bool)
        ends = np.where(is_null, ends - adj, ends)
        offsets = np.concatenate(([0], ends)).astype(np.int64)
        data_block, _ = decode_values(enc.binary.bytes, bufs, int(offsets[-1]) if n else 0)
        data = data_block.as_bytes() if isinstance(data_block, Fixed) else None
        if data is None or (n and (np.diff(offsets) < 0).any()) or offsets[-1] > len(data):
            raise CorruptFileError("2.0 binary offsets are inconsistent")
        return Variable(offsets, data), (~is_null if is_null.any() else None)
    if which == "dictionary":
        idx, valid = decode_values(enc.dictionary.indices, bufs, n)
        items, item_valid = decode_values(enc.dictionary.items, bufs,
                                          int(enc.dictionary.num_dictionary_items))
        if not isinstance(idx, Fixed):
            raise CorruptFileError("2.0 dictionary indices are not integers")
        # Index 0 means null; item i is stored as index i + 1.
        ix = idx.values.astype(np.int64) - (0 if direct_dict else 1)
        if valid is not None:
            ix = np.where(valid, ix, 0)
        if len(ix) and ix.max() >= len(items):
            raise CorruptFileError("2.0 dictionary index out of range")
        null = ix < 0
        if item_valid is not None and len(ix):
            null |= ~item_valid[np.maximum(ix, 0)]
        if direct_dict and len(items) and not isinstance(items, DictValues):
            # The stored dictionary and indices, as written (a null item included).
            if null.any():
                valid = ~null if valid is None else valid & ~null
            return DictValues(np.maximum(ix, 0), items, item_valid), valid
        taken = items.take(np.maximum(ix, 0)) if len(items) else empty_block_like(items, n)
        if null.any():
            valid = ~null if valid is None else valid & ~null
        return taken, valid
    if which == "fixed_size_list":
        fsl = enc.fixed_size_list
        dim = int(fsl.dimension)
        items, valid = decode_values(fsl.items, bufs, n * dim)
        if not isinstance(items, Fixed) or items.bits % 8:
            raise UnsupportedFeatureError("2.0 fixed-size lists of non-byte-aligned values")
        width = items.bits // 8 * dim
        raw = items.as_bytes()
        if len(raw) != n * width or (valid is not None and len(valid) != n * dim):
            raise CorruptFileError("2.0 fixed-size list values have the wrong size")
        item_valid = None if valid is None or valid.all() else valid.reshape(n, dim)
        return Fixed(raw.reshape(n, width), width * 8, item_valid), None
    if which == "fixed_size_binary":
        inner, valid = decode_values(enc.fixed_size_binary.bytes, bufs,
                                     n * int(enc.fixed_size_binary.byte_width))
        width = int(enc.fixed_size_binary.byte_width)
        if not isinstance(inner, Fixed):
            raise CorruptFileError("2.0 fixed-size binary bytes are not fixed-width")
        return Fixed(inner.as_bytes().reshape(n, width), width * 8), valid
    if which == "packed_struct":
        width = sum(_packed_bits(inner) for inner in enc.packed_struct.inner)
        if width % 8:
            raise UnsupportedFeatureError("2.0 packed struct fields that are not whole bytes")
        raw = _buffer(bufs, enc.packed_struct.buffer)
        width //= 8
        if len(raw) < n * width:
            raise CorruptFileError("2.0 packed struct buffer is too short")
        return Fixed(raw[: n * width].reshape(n, width), width * 8), None
    if which == "constant":
        value = enc.constant.value
        arr = np.tile(np.frombuffer(value, np.uint8), n)
        return Fixed.from_bytes(arr, len(value) * 8, n), None
    raise UnsupportedFeatureError(f"2.0 encoding {which!r} is not supported")


def _packed_bits(enc: pb.ArrayEncoding) -> int:
    """Bits per value of one field of a 2.0 packed struct."""
    which = enc.WhichOneof("array_encoding")
    if which == "nullable" and enc.nullable.WhichOneof("nullability") == "no_nulls":
        return _packed_bits(enc.nullable.no_nulls.values)
    if which == "flat":
        return int(enc.flat.bits_per_value)
    raise UnsupportedFeatureError(f"2.0 packed struct field encoded as {which!r}")


def empty_block_like(block: Block, n: int) -> Block:
    """``n`` placeholder values of the same kind as ``block``."""
    if isinstance(block, Variable):
        return Variable(np.zeros(n + 1, np.int64), block.data[:0])
    if not isinstance(block, Fixed):
        raise CorruptFileError("2.0 dictionary items are of an unexpected kind")
    return Fixed(np.zeros((n, *block.values.shape[1:]), block.values.dtype), block.bits)


def _pages(file: V2File, column: int, rows: Rows20) -> list[tuple[int, PageInfo]]:
    info = file.column(column)
    if rows.wanted is None:
        idx = info.pages_for(rows.lo, rows.hi)
    else:
        which = np.searchsorted(info.page_starts, rows.wanted, side="right") - 1
        idx = range(0) if len(which) == 0 else range(int(which[0]), int(which[-1]) + 1)
    return [(p, info.pages[p]) for p in idx]


def _read_pages(file: V2File, column: int, rows: Rows20) -> Plan[list[tuple[PageInfo, list]]]:
    pages = _pages(file, column, rows)
    request = [(p, p + s) for _, page in pages for p, s in page.buffers]
    got = yield request
    out, k = [], 0
    for _, page in pages:
        nb = len(page.buffers)
        out.append((page, [np.frombuffer(g, np.uint8) for g in got[k: k + nb]]))
        k += nb
    return out


def _select(first_rows: list[int], rows: Rows20, total: int) -> np.ndarray | slice:
    base = first_rows[0] if first_rows else 0
    if rows.wanted is None:
        return slice(rows.lo - base, rows.hi - base)
    return rows.wanted - base


def check_fits(enc: pb.ArrayEncoding, dtype: pa.DataType, column: int) -> None:
    """Refuse a page whose encoding cannot hold values of ``dtype`` (a schema type changed in
    the manifest, or a damaged page): fixed-size lists come from ``fixed_size_list``
    encodings, variable-width values from ``binary`` ones, and neither from the other kinds.
    Otherwise bytes of the right total size would read as values of another type."""
    which = enc.WhichOneof("array_encoding")
    if which == "nullable":
        kind = enc.nullable.WhichOneof("nullability")
        if kind == "all_nulls" or kind is None:
            return
        inner = getattr(enc.nullable, kind).values
        return check_fits(inner, dtype, column)
    storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
    if pa.types.is_dictionary(storage) or which in ("dictionary", "constant"):
        return
    fsl = pa.types.is_fixed_size_list(storage)
    variable = (pa.types.is_string(storage) or pa.types.is_large_string(storage)
                or pa.types.is_binary(storage) or pa.types.is_large_binary(storage))
    if (((which == "fixed_size_list") != fsl and which in ("flat", "fixed_size_list"))
            or ((which == "binary") != variable and which in ("flat", "binary"))):
        raise CorruptFileError(f"2.0 column {column}: a {which!r} page cannot hold {dtype} "
                               "values")


def _leaf(file: V2File, column: int, dtype: pa.DataType, rows: Rows20) -> Plan[pa.Array]:
    pages = _pages(file, column, rows)
    for _, page in pages:
        check_fits(page.encoding, dtype, column)
    whole = rows.wanted is None and all(
        rows.lo <= page.first_row and page.first_row + page.num_rows <= rows.hi
        for _, page in pages)
    if whole or not all(v20_rows.supported(page.encoding) for _, page in pages):
        return (yield from _whole_pages(file, column, dtype, rows))
    # Only the selected rows' bytes, every page at once.
    plans = []
    for _, page in pages:
        lo, hi = page.first_row, page.first_row + page.num_rows
        local: v20_rows.Rows
        if rows.wanted is None:
            local = range(max(rows.lo, lo) - lo, min(rows.hi, hi) - lo)
        else:
            a, b = np.searchsorted(rows.wanted, [lo, hi])
            local = rows.wanted[a:b].astype(np.int64) - lo
        if len(local):
            plans.append(v20_rows.read_rows(page.encoding, page.buffers, local))
    parts = yield from gather(plans)
    if not parts:
        return pa.array([], dtype)
    block = concat_blocks([b for b, _ in parts]) if len(parts) > 1 else parts[0][0]
    if all(v is None for _, v in parts):
        return to_arrow(block, dtype, None)
    valid = np.concatenate([np.ones(len(b), bool) if v is None else v for b, v in parts])
    return to_arrow(block, dtype, None if valid.all() else valid)


def _whole_pages(file: V2File, column: int, dtype: pa.DataType, rows: Rows20,
                 ) -> Plan[pa.Array]:
    pages = yield from _read_pages(file, column, rows)
    blocks, valids = [], []
    for page, bufs in pages:
        enc = page.encoding
        if (enc.WhichOneof("array_encoding") == "nullable"
                and enc.nullable.WhichOneof("nullability") == "all_nulls"):
            block: Block = empty_block(dtype, page.num_rows)
            valid: np.ndarray | None = np.zeros(page.num_rows, bool)
        else:
            block, valid = decode_values(enc, bufs, page.num_rows,
                                         pa.types.is_dictionary(dtype))
        blocks.append(block)
        valids.append(np.ones(page.num_rows, bool) if valid is None else valid)
    if not blocks:
        return pa.array([], dtype)
    block = concat_blocks(blocks)
    valid = np.concatenate(valids)
    sel = _select([p.first_row for p, _ in pages], rows, len(valid))
    if isinstance(sel, slice):
        block = block.slice(sel.start, sel.stop)
        valid = valid[sel]
    else:
        block, valid = block.take(sel), valid[sel]
    return to_arrow(block, dtype, None if valid.all() else valid)


def _list_offsets(file: V2File, column: int, rows: Rows20,
                  ) -> Plan[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per selected row: first item, item count, validity."""
    pages = yield from _read_pages(file, column, rows)
    starts, lens, valids = [], [], []
    item_base = _items_before(file, column, pages[0][0]) if pages else 0
    for page, bufs in pages:
        lst = page.encoding.list
        if page.encoding.WhichOneof("array_encoding") != "list":
            raise CorruptFileError("2.0 list column page is not a list")
        ends_block, _ = decode_values(lst.offsets, bufs, page.num_rows)
        if not isinstance(ends_block, Fixed):
            raise CorruptFileError("2.0 list offsets are not integers")
        ends = ends_block.values.astype(np.int64)
        adj = int(lst.null_offset_adjustment)
        null = ends >= adj if adj else np.zeros(len(ends), bool)
        ends = np.where(null, ends - adj, ends)
        begin = np.concatenate(([0], ends[:-1]))
        if (ends < begin).any() or (len(ends) and ends[-1] > int(lst.num_items)):
            raise CorruptFileError("2.0 list offsets are inconsistent")
        starts.append(item_base + begin)
        lens.append(ends - begin)
        valids.append(~null)
        item_base += int(lst.num_items)
    if not pages:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, bool)
    st, ln, va = np.concatenate(starts), np.concatenate(lens), np.concatenate(valids)
    sel = _select([p.first_row for p, _ in pages], rows, len(st))
    return st[sel], ln[sel], va[sel]


def _items_before(file: V2File, column: int, page: PageInfo) -> int:
    info = file.column(column)
    total = 0
    for p in info.pages:
        if p is page:
            return total
        total += int(p.encoding.list.num_items)
    raise CorruptFileError("2.0 list page not found in its column")


def read_field20(file: V2File, field: LanceField, columns: Mapping[int, int],
                 rows: Rows20) -> Plan[pa.Array]:
    """Plan reading one field (and its children) of a 2.0 file."""
    col = columns.get(field.id)
    if col is None or col < 0:
        raise CorruptFileError(f"field {field.name!r} has no column in the 2.0 file")
    dtype = field.data_type
    if field.logical_type == "struct" and not is_packed_struct(field):
        kids = yield from gather([read_field20(file, c, columns, rows) for c in field.children])
        storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
        if not kids:  # an empty struct: its rows are the rows asked for
            return pa.StructArray.from_buffers(storage, rows.count, [None], children=[])
        return pa.StructArray.from_arrays(kids, fields=list(storage))
    if field.type == 1:
        starts, lens, valid = yield from _list_offsets(file, col, rows)
        (child,) = field.children
        if len(lens) and lens.sum() and np.array_equal(starts[1:], starts[:-1] + lens[:-1]):
            child_rows = Rows20(int(starts[0]), int(starts[-1] + lens[-1]))
        else:
            child_rows = Rows20(0, 0, range_indices(starts, lens))
        items = (yield from read_field20(file, child, columns, child_rows)) if lens.sum() \
            else pa.array([], child.data_type)
        storage = dtype.storage_type if isinstance(dtype, pa.ExtensionType) else dtype
        large = pa.types.is_large_list(storage)
        offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64 if large else np.int32)
        mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(storage, len(lens), [mask, pa.py_buffer(offsets)],
                                     children=[items])
    try:
        return (yield from _leaf(file, col, dtype, rows))
    except CorruptFileError as exc:
        raise CorruptFileError(f"column {field.name!r}: {exc}") from exc


__all__ = ["Rows20", "decode_values", "read_field20"]
