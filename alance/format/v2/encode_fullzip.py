"""The full-zip page layout (2.1+), written: levels and values of every item zipped into one
buffer, for values too large for mini-block chunks.

Pure and vectorised: the item headers (control word, value length) and the value bytes are
scattered into one output array with masks, never item by item.
"""

from __future__ import annotations

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.format.v2.encode_levels import Shredded
from alance.format.v2.encode_values import (
    VARIABLE,
    Buffer,
    EncodedPage,
    ValueData,
    value_encoding,
)
from alance.format.v2.kernels import range_indices


def encode_fullzip(sh: Shredded, vd: ValueData) -> EncodedPage:
    """One full-zip page: per item, a control word (repetition and definition levels), then
    (value slots only) the value: fixed-width bytes (item bitmap first for fixed-size lists
    with null items), or a length and the bytes of a valid variable-width value. A second
    buffer gives where every row starts when rows vary in size."""
    bits_rep = sh.max_rep.bit_length() if sh.rep is not None else 0
    bits_def = sh.max_def.bit_length() if sh.defs is not None else 0
    cw_bits = bits_rep + bits_def
    cw = 0 if cw_bits == 0 else 1 if cw_bits <= 8 else 2 if cw_bits <= 16 else 4
    n_items = sh.num_items
    visible = np.ones(n_items, bool) if sh.visible is None else sh.visible
    defs = np.zeros(n_items, np.int64) if sh.defs is None else sh.defs.astype(np.int64)
    with_validity = vd.item_valid is not None
    variable = vd.kind == VARIABLE
    lw = vd.offset_bytes if variable else 0  # bytes of each value's length
    # Bytes after the control word, per item.
    slot_sizes = np.zeros(n_items, dtype=np.int64)
    if variable:
        value_len = np.zeros(n_items, dtype=np.int64)
        value_len[visible] = vd.value_sizes()
        has_len = visible & (defs == 0)
        value_len[~has_len] = 0
        head = cw + np.where(has_len, lw, 0)
        slot_sizes = head + value_len
    else:
        item_bytes = vd.width + ((vd.dim + 7) // 8 if with_validity else 0)
        head = np.full(n_items, cw, dtype=np.int64)
        value_len = np.where(visible, item_bytes, 0)
        slot_sizes = head + value_len
    item_start = np.concatenate(([0], np.cumsum(slot_sizes))).astype(np.int64)
    total = int(item_start[-1])
    out = np.empty(total, dtype=np.uint8)
    # Header bytes: control word (little endian), then the u32 length.
    head_bytes = np.zeros((n_items, cw + lw), dtype=np.uint8)
    if cw:
        rep = np.zeros(n_items, np.int64) if sh.rep is None else sh.rep.astype(np.int64)
        word = (rep << bits_def) | defs
        head_bytes[:, :cw] = word.astype("<u4").view(np.uint8).reshape(n_items, 4)[:, :cw]
    if variable:
        head_bytes[:, cw:] = value_len.astype(f"<u{lw}").view(np.uint8).reshape(n_items, lw)
    head_mask = np.arange(cw + lw)[None, :] < head[:, None]
    is_head = np.zeros(total, dtype=bool)
    is_head[range_indices(item_start[:-1], head)] = True
    out[is_head] = head_bytes[head_mask]
    out[~is_head] = _zip_payload(vd, visible, has_len if variable else None, with_validity)
    layout = pb.FullZipLayout(bits_rep=bits_rep, bits_def=bits_def, num_items=n_items,
                              num_visible_items=vd.n, layers=sh.layers,
                              value_compression=value_encoding(vd))
    if variable:
        layout.bits_per_offset = 8 * lw
    else:
        layout.bits_per_value = (vd.width + ((vd.dim + 7) // 8 if with_validity else 0)) * 8
    buffers: list[Buffer] = [out]
    if variable or sh.rep is not None:
        rows = np.append(sh.row_starts(), n_items)
        offsets = item_start[rows]
        width = 1 if total < 1 << 8 else 2 if total < 1 << 16 else 4 if total < 1 << 32 else 8
        buffers.append(offsets.astype(f"<u{width}").tobytes())
    return EncodedPage(buffers, pb.PageLayout(full_zip_layout=layout), sh.num_rows)


def _zip_payload(vd: ValueData, visible: np.ndarray, has_len: np.ndarray | None,
                 with_validity: bool) -> np.ndarray:
    """Value bytes of the items, in item order."""
    if vd.kind == VARIABLE:
        assert has_len is not None
        keep = has_len[visible]  # slots holding a valid value
        if keep.all():
            return vd.data
        assert vd.offsets is not None
        starts = vd.offsets[:-1][keep]
        lens = np.diff(vd.offsets)[keep]
        return vd.data[range_indices(starts, lens)]
    values = np.ascontiguousarray(vd.data)
    if with_validity:
        assert vd.item_valid is not None
        bitmap = np.packbits(vd.item_valid.reshape(vd.n, vd.dim), axis=1, bitorder="little")
        values = np.concatenate([bitmap, values], axis=1)
    return values.reshape(-1)


__all__ = ["encode_fullzip"]
