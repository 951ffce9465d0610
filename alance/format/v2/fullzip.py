"""The full-zip page layout (2.1+): large values with their levels zipped in one buffer.

Buffer 0 holds, per item: a control word (repetition in the high bits, definition in the low
``bits_def`` bits; 0, 1, 2 or 4 bytes), then for items that carry a value slot either the
fixed-width value or (variable width) a length and the bytes (null items have no length).
Buffer 1, when present, holds ``rows + 1`` byte offsets of the rows in buffer 0 (1, 2, 4 or
8 bytes each). Without it rows have a fixed size.
"""

from __future__ import annotations

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.v2.blocks import Block, Fixed, StructValues, Variable
from alance.format.v2.kernels import (
    decompress,
    fixed_at,
    fsst_decode,
    gather_ranges,
    words_at,
)
from alance.format.v2.leaf import LeafData
from alance.format.v2.levels import plan_levels, unravel


def control_bytes(layout: pb.FullZipLayout) -> int:
    """Bytes of each control word."""
    bits = int(layout.bits_rep) + int(layout.bits_def)
    return 0 if bits == 0 else 1 if bits <= 8 else 2 if bits <= 16 else 4


def row_stride(layout: pb.FullZipLayout) -> int | None:
    """Bytes per row when rows have a fixed size (no repetition index), else None."""
    if layout.WhichOneof("details") != "bits_per_value" or layout.bits_rep:
        return None
    return control_bytes(layout) + int(layout.bits_per_value) // 8


def rep_index_width(buffers: list[tuple[int, int]], num_rows: int) -> int:
    """Bytes per entry of the repetition index."""
    size = buffers[1][1]
    width, rem = divmod(size, num_rows + 1)
    if rem or width not in (1, 2, 4, 8):
        raise CorruptFileError("full-zip repetition index has an unexpected size")
    return width


def parse_rep_index(raw: bytes | memoryview, width: int) -> np.ndarray:
    """Decode repetition index entries."""
    return np.frombuffer(raw, dtype=f"<u{width}").astype(np.int64)


def decode_rows(layout: pb.FullZipLayout, data: np.ndarray, row_starts: np.ndarray,
                row_ends: np.ndarray) -> LeafData:
    """Decode whole rows; row ``i`` occupies ``data[row_starts[i] : row_ends[i]]``."""
    plan = plan_levels(list(layout.layers))
    if layout.bits_rep > 16 or layout.bits_def > 16:
        raise CorruptFileError("full-zip control words wider than 16 bits per level")
    cw = control_bytes(layout)
    bits_def = int(layout.bits_def)
    detail = layout.WhichOneof("details")
    if detail is None:
        raise CorruptFileError("full-zip layout has no value width")
    fixed = detail == "bits_per_value"
    if fixed and layout.bits_per_value % 8:
        raise UnsupportedFeatureError("full-zip values that are not whole bytes")
    vbytes = int(layout.bits_per_value) // 8 if fixed else int(layout.bits_per_offset) // 8
    if not fixed and vbytes not in (4, 8):
        raise CorruptFileError("full-zip lengths must be 4 or 8 bytes")
    vis_max = plan.visible_max
    if len(row_starts) and (row_starts.min() < 0 or row_ends.max() > len(data)
                            or (row_ends < row_starts).any()):
        raise CorruptFileError("full-zip rows lie outside their buffer")
    # Walk all rows in lockstep: one round per item of the longest row.
    ptr = row_starts.astype(np.int64).copy()
    items_row, items_round, reps, defs, vstart, vlen, visible = [], [], [], [], [], [], []
    rnd = 0
    active = np.arange(len(ptr))
    while len(active):
        p = ptr[active]
        if cw:
            word = np.zeros(len(p), dtype=np.int64)
            for b in range(cw):  # at most four passes
                if (p + b >= len(data)).any():
                    raise CorruptFileError("full-zip control word is truncated")
                word |= data[p + b].astype(np.int64) << (8 * b)
            d = word & ((1 << bits_def) - 1)
            r = word >> bits_def
        else:
            d = np.zeros(len(p), dtype=np.int64)
            r = np.full(len(p), plan.max_rep, dtype=np.int64)
        p = p + cw
        vis = np.ones(len(p), bool) if vis_max < 0 else d <= vis_max
        if fixed:
            size = np.where(vis, vbytes, 0)
            start = p
        else:
            has_len = vis & (d == 0)
            length = np.zeros(len(p), dtype=np.int64)
            if has_len.any():
                lp = p[has_len]
                if (lp + vbytes > len(data)).any():
                    raise CorruptFileError("full-zip value length is truncated")
                for b in range(vbytes):
                    length[has_len] |= data[lp + b].astype(np.int64) << (8 * b)
            start = p + np.where(has_len, vbytes, 0)
            size = length
            p = start
        items_row.append(active)
        items_round.append(np.full(len(active), rnd))
        reps.append(r)
        defs.append(d)
        vstart.append(start)
        vlen.append(size)
        visible.append(vis)
        ptr[active] = start + size
        if (ptr[active] > row_ends[active]).any():
            raise CorruptFileError("full-zip item runs past its row")
        if rnd == 0 and not layout.bits_rep and (ptr[active] != row_ends[active]).any():
            raise CorruptFileError("full-zip row has trailing bytes")
        active = active[ptr[active] < row_ends[active]]
        rnd += 1
    row_a = np.concatenate(items_row) if items_row else np.zeros(0, np.int64)
    order = np.lexsort((np.concatenate(items_round), row_a)) if rnd > 1 else None

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        arr = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return arr if order is None else arr[order]

    rep_a, def_a = cat(reps), cat(defs)
    vis_a, st_a, ln_a = cat(visible).astype(bool), cat(vstart), cat(vlen)
    n_items = len(rep_a)
    rep = rep_a.astype(np.uint16) if layout.bits_rep else None
    dfs = def_a.astype(np.uint16) if bits_def else None
    st, ln = st_a[vis_a], ln_a[vis_a]
    raw = gather_ranges(data, st, ln)
    values = _values(layout, raw, ln, fixed, vbytes)
    layers = unravel(rep, dfs, plan, n_items)
    return LeafData(layers, values)


def _fsl_with_validity(fsl: pb.FixedSizeList, rows: np.ndarray) -> Fixed:
    """Fixed-size lists with nullable items: each value is an item bitmap (whole bytes)
    followed by the items."""
    dim = int(fsl.items_per_value)
    if fsl.values.WhichOneof("compression") != "flat" or dim <= 0:
        raise UnsupportedFeatureError("nested or compressed fixed-size lists with null items")
    bits = int(fsl.values.flat.bits_per_value)
    if bits % 8:
        raise UnsupportedFeatureError("fixed-size lists of non-byte-aligned values")
    nmap = (dim + 7) // 8
    if rows.shape[1] != nmap + dim * bits // 8:
        raise CorruptFileError("full-zip fixed-size list values have the wrong size")
    bitmap = np.unpackbits(rows[:, :nmap], axis=1, bitorder="little")[:, :dim].astype(bool)
    values = np.ascontiguousarray(rows[:, nmap:])
    return Fixed(values, dim * bits, None if bitmap.all() else bitmap)


def _variable_packed(enc: pb.VariablePackedStruct, raw: np.ndarray,
                     offsets: np.ndarray) -> StructValues:
    """Packed struct rows with variable-width fields: each row holds its fields in order, a
    fixed-width field as its bytes, a variable one as a length and the bytes. Empty rows
    (null structs) hold nothing."""
    n = len(offsets) - 1
    present = np.flatnonzero(offsets[1:] > offsets[:-1])
    ptr = offsets[:-1][present].astype(np.int64)
    end = offsets[1:][present]
    fields: list[Fixed | Variable] = []
    for f in enc.fields:
        kind = f.WhichOneof("layout")
        value = f.value.WhichOneof("compression")
        if kind == "bits_per_value" and value == "flat" and f.bits_per_value % 8 == 0:
            width = int(f.bits_per_value) // 8
            if len(ptr) and (ptr + width > end).any():
                raise CorruptFileError("packed struct field runs past its row")
            out = np.zeros((n, width), np.uint8)
            out[present] = fixed_at(raw, ptr, width).reshape(-1, width)
            fields.append(Fixed.from_bytes(out.reshape(-1), width * 8, n))
            ptr = ptr + width
        elif kind == "bits_per_length" and value in ("variable", "fsst") \
                and f.bits_per_length in (32, 64):
            lw = int(f.bits_per_length) // 8
            if len(ptr) and (ptr + lw > end).any():
                raise CorruptFileError("packed struct field length runs past its row")
            length = words_at(raw, ptr, lw).astype(np.int64)
            if len(ptr) and ((length < 0).any() or (ptr + lw + length > end).any()):
                raise CorruptFileError("packed struct field runs past its row")
            data = gather_ranges(raw, ptr + lw, length)
            all_lens = np.zeros(n, np.int64)
            all_lens[present] = length
            offs = np.concatenate(([0], np.cumsum(all_lens)))
            if value == "fsst":
                data, offs = fsst_decode(f.value.fsst.symbol_table, data, offs)
            fields.append(Variable(offs, data))
            ptr = ptr + lw + length
        else:
            raise UnsupportedFeatureError(f"packed struct field stored as {kind}/{value}")
    if len(ptr) and (ptr != end).any():
        raise CorruptFileError("packed struct row has trailing bytes")
    return StructValues(fields, n)


def _values(layout: pb.FullZipLayout, raw: np.ndarray, lengths: np.ndarray, fixed: bool,
            vbytes: int) -> Block:
    enc = layout.value_compression
    which = enc.WhichOneof("compression")
    n = len(lengths)
    if fixed:
        if which == "flat":
            return Fixed.from_bytes(raw, int(enc.flat.bits_per_value), n)
        if which == "fixed_size_list":
            fsl = enc.fixed_size_list
            if not fsl.has_validity:
                return Fixed(raw.reshape(n, vbytes), vbytes * 8)
            return _fsl_with_validity(fsl, raw.reshape(n, vbytes))
        if which == "packed_struct":
            if sum(int(b) for b in enc.packed_struct.bits_per_value) != vbytes * 8:
                raise CorruptFileError("packed struct values disagree with their width")
            return Fixed(raw.reshape(n, vbytes), vbytes * 8)
        raise UnsupportedFeatureError(f"full-zip fixed-width encoding {which!r}")
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    if which == "variable":
        return Variable(offsets, raw)
    if which == "fsst":
        data, offs = fsst_decode(enc.fsst.symbol_table, raw, offsets)
        return Variable(offs, data)
    if which == "variable_packed_struct":
        return _variable_packed(enc.variable_packed_struct, raw, offsets)
    if which == "general":
        scheme = int(enc.general.compression.scheme)
        parts = [decompress(scheme, raw[offsets[i]: offsets[i + 1]])  # values >= 32 KiB
                 for i in range(n)]
        sizes = np.array([len(p) for p in parts], dtype=np.int64)
        return Variable(np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
                        np.frombuffer(b"".join(parts), np.uint8))
    raise UnsupportedFeatureError(f"full-zip variable-width encoding {which!r}")


__all__ = ["control_bytes", "decode_rows", "parse_rep_index", "rep_index_width", "row_stride"]
