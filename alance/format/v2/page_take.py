"""A few rows from many mini-block pages of one column, decoded together (format only, no IO).

A take that touches many fragments reads a handful of rows from one page of each. Read page by
page, every page pays a fixed cost in Python (plan steps, a dozen small array operations, an
Arrow array) that dwarfs its few values. Here the rows of many pages of one column are
decoded in one go: each page only locates its rows' chunks (:func:`locate`), then one
vectorised pass parses every chunk header, decodes every value and builds one Arrow array
(:func:`decode`).

It covers the pages most columns have: mini-block pages whose rows are single non-null items
(no repetition or definition levels, no dictionary, one value buffer) holding flat or inline
bit-packed fixed-width values, fixed-size lists of flat values, or variable-width values,
plain or FSST-compressed (each page with its own symbol table). :func:`kind_of` says whether a
page qualifies; others are read the ordinary way (:mod:`alance.format.v2.reader`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError
from alance.format.v2.blocks import Fixed, Variable, to_arrow
from alance.format.v2.kernels import (
    BLOCK,
    UINT,
    fastlanes_at,
    fastlanes_at_widths,
    fixed_at,
    fsst_decode_many,
    gather_ranges,
    words_at,
)
from alance.format.v2.levels import plan_levels
from alance.format.v2.miniblock import ALIGN, MiniBlockState

#: What decoding a page's values takes: ("flat", bits), ("bitpacked", bits),
#: ("fsl", dim, bits) over flat items, ("variable", offset bytes), ("fsst", offset bytes).
Kind = tuple[Any, ...]


def kind_of(layout: pb.MiniBlockLayout) -> Kind | None:
    """How the values of a page with this layout decode here, or None when this module does
    not handle it. Pages of one kind (and chunk-header width) decode together."""
    if (layout.HasField("rep_compression") or layout.HasField("def_compression")
            or layout.HasField("dictionary") or layout.repetition_index_depth
            or int(layout.num_buffers) != 1):
        return None
    plan = plan_levels(list(layout.layers))
    if plan.max_rep or plan.max_def:
        return None
    value = _value_kind(layout.value_compression)
    return None if value is None else (bool(layout.has_large_chunk), *value)


def _value_kind(enc: pb.CompressiveEncoding) -> Kind | None:
    which = enc.WhichOneof("compression")
    if which == "flat":
        bits = int(enc.flat.bits_per_value)
        if enc.flat.HasField("data") or bits % 8 or bits not in UINT:
            return None
        return ("flat", bits)
    if which == "inline_bitpacking":
        bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        if enc.inline_bitpacking.HasField("values") or bits not in UINT:
            return None
        return ("bitpacked", bits)
    if which == "fixed_size_list":
        fsl = enc.fixed_size_list
        inner = _value_kind(fsl.values)
        if fsl.has_validity or inner is None or inner[0] != "flat":
            return None
        return ("fsl", int(fsl.items_per_value), inner[1])
    if which == "variable":
        return _variable_kind(enc.variable, "variable")
    if which == "fsst" and enc.fsst.values.WhichOneof("compression") == "variable":
        return _variable_kind(enc.fsst.values.variable, "fsst")
    return None


def _variable_kind(enc: pb.Variable, name: str) -> Kind | None:
    offsets = enc.offsets
    if (enc.HasField("values") or offsets.WhichOneof("compression") != "flat"
            or offsets.flat.HasField("data")
            or int(offsets.flat.bits_per_value) not in (32, 64)):
        return None
    return (name, int(offsets.flat.bits_per_value) // 8)


@dataclass
class Located:
    """Where the wanted rows of many pages of one column are (see :func:`locate`)."""

    layouts: list[pb.MiniBlockLayout]  # of every page
    rows_per_page: np.ndarray  # wanted rows of every page
    ranges: list[tuple[int, int, int]]  # (page, start, end) file byte ranges, in page order
    chunk_at: np.ndarray  # each chunk's offset in the concatenated bytes of ``ranges``
    sizes: np.ndarray  # each chunk's size
    counts: np.ndarray  # values in each chunk
    chunk_of_row: np.ndarray  # each row's chunk (an index into the arrays above)
    item: np.ndarray  # each row's position in its chunk

    @property
    def nbytes(self) -> int:
        """Bytes of the ranges."""
        return sum(e - s for _, s, e in self.ranges)


def locate(layouts: Sequence[pb.MiniBlockLayout], states: Sequence[MiniBlockState],
           rows: Sequence[np.ndarray], gap: int = 0) -> Located:
    """The chunks holding the sorted, unique page-local ``rows[i]`` of pages with these
    layouts and chunk tables, all of one :func:`kind_of` kind (there every row is one item of
    one chunk). Pages are laid end to end in one row space, so one search serves them all.

    Chunks of one page at most ``gap`` bytes apart are read as one range (the bytes between
    are read and skipped): a take of many rows then asks for a few long ranges, not one per
    run of chunks."""
    if sum(len(r) for r in rows) <= FEW_ROWS:
        return _locate_few(layouts, states, rows, gap)
    n_pages = len(states)
    page_rows = np.array([int(s.first_row[-1]) for s in states], dtype=np.int64)
    page_base = np.concatenate(([0], np.cumsum(page_rows)[:-1]))
    n_chunks = np.array([len(s.counts) for s in states], dtype=np.int64)
    chunk_base = np.concatenate(([0], np.cumsum(n_chunks)[:-1]))
    wanted = np.array([len(r) for r in rows], dtype=np.int64)
    local = np.concatenate(rows) if n_pages > 1 else np.asarray(rows[0], dtype=np.int64)
    page_of_row = np.repeat(np.arange(n_pages), wanted)
    if len(local) and ((local < 0).any() or (local >= page_rows[page_of_row]).any()):
        raise CorruptFileError("rows asked for lie outside their mini-block page")
    # One table of every page's chunks (first row, position, size, value count), the first
    # rows shifted to where their page starts in the shared row space.
    table = np.concatenate([s.chunk_table() for s in states]) if n_pages > 1 \
        else states[0].chunk_table()
    first = table[:, 0] + np.repeat(page_base, n_chunks) if n_pages > 1 else table[:, 0]
    grow = local + page_base[page_of_row]
    chunk = np.searchsorted(first, grow, side="right") - 1
    # Rows of a page fall in that page's chunks (they lie below the page's row count).
    item = grow - first[chunk]
    new = np.concatenate(([True], chunk[1:] != chunk[:-1]))
    chunks = chunk[new]
    page_of_chunk = np.searchsorted(chunk_base, chunks, side="right") - 1
    picked = table[chunks]
    pos, sizes = picked[:, 1], picked[:, 2]
    end = pos + sizes
    # A range runs over chunks that follow each other (or nearly) in one page's data.
    between = pos[1:] - end[:-1]
    brk = np.flatnonzero((between < 0) | (between > gap)
                         | (page_of_chunk[1:] != page_of_chunk[:-1])) + 1
    first_c = np.concatenate(([0], brk))
    last_c = np.concatenate((brk - 1, [len(pos) - 1]))
    r_start, r_end = pos[first_c], end[last_c]
    r_base = np.concatenate(([0], np.cumsum(r_end - r_start)[:-1]))
    which = np.repeat(np.arange(len(first_c)), last_c - first_c + 1)
    ranges = list(zip(page_of_chunk[first_c].tolist(), r_start.tolist(), r_end.tolist(),
                      strict=True))
    return Located(list(layouts), wanted, ranges, r_base[which] + pos - r_start[which],
                   sizes, picked[:, 3], np.cumsum(new) - 1, item)


#: Up to this many rows, :func:`locate` works row by row in Python (a point read touches a
#: chunk or two per page: numpy's set-up per call costs more than the work).
FEW_ROWS = 64


def _locate_few(layouts: Sequence[pb.MiniBlockLayout], states: Sequence[MiniBlockState],
                rows: Sequence[np.ndarray], gap: int) -> Located:
    """:func:`locate` for a few rows (the same result)."""
    ranges: list[tuple[int, int, int]] = []
    chunk_at: list[int] = []
    sizes: list[int] = []
    counts: list[int] = []
    chunk_of_row: list[int] = []
    items: list[int] = []
    total = 0  # bytes of the ranges so far
    last_end = -1
    for page, (state, local) in enumerate(zip(states, rows, strict=True)):
        if not len(local):
            continue
        page_rows = int(state.first_row[-1])
        wanted = np.asarray(local, dtype=np.int64)
        if int(wanted.min()) < 0 or int(wanted.max()) >= page_rows:
            raise CorruptFileError("rows asked for lie outside their mini-block page")
        table = state.chunk_table()
        found = (np.searchsorted(table[:, 0], wanted, side="right") - 1).tolist()
        prev = -1
        for row, c in zip(wanted.tolist(), found, strict=True):
            first, pos, size, count = table[c].tolist()
            if c != prev:  # a new chunk: in the current range, or a range of its own
                between = pos - last_end
                if ranges and ranges[-1][0] == page and 0 <= between <= gap:
                    ranges[-1] = (page, ranges[-1][1], pos + size)
                    total += between
                else:
                    ranges.append((page, pos, pos + size))
                chunk_at.append(total)
                total += size
                last_end = pos + size
                sizes.append(size)
                counts.append(count)
                prev = c
            chunk_of_row.append(len(sizes) - 1)
            items.append(row - first)
    as64 = partial(np.array, dtype=np.int64)
    return Located(list(layouts), as64([len(r) for r in rows]), ranges, as64(chunk_at),
                   as64(sizes), as64(counts), as64(chunk_of_row), as64(items))


def decode(located: Located, data: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """The rows of every page, in page order, as one Arrow array of ``dtype``.

    ``data`` holds the bytes of ``located.ranges``, one after another.
    """
    kind = kind_of(located.layouts[0])
    if kind is None:
        raise ValueError("decode takes only pages that kind_of accepts, of one kind")
    if len(data) != located.nbytes:
        raise CorruptFileError("mini-block chunk is truncated")
    wide, what = bool(kind[0]), kind[1]
    counts, row_chunk, item = located.counts, located.chunk_of_row, located.item
    vstart, vsize = _value_buffers(data, located.chunk_at, located.sizes, wide)
    if (item >= counts[row_chunk]).any():
        raise CorruptFileError("mini-block chunk holds fewer values than its rows need")
    at = vstart[row_chunk]
    n = len(item)
    if what == "flat":
        width = int(kind[2]) // 8
        _check(vsize, counts * width)
        raw = fixed_at(data, at + item * width, width)
        return to_arrow(Fixed.from_bytes(raw, width * 8, n), dtype, None)
    if what == "fsl":
        dim, bits = int(kind[2]), int(kind[3])
        width = dim * bits // 8
        _check(vsize, counts * width)
        raw = fixed_at(data, at + item * width, width)
        return to_arrow(Fixed(raw.reshape(n, width), width * 8), dtype, None)
    if what == "bitpacked":
        return to_arrow(_bitpacked(data, vstart, vsize, counts, row_chunk, item,
                                   int(kind[2])), dtype, None)
    wb = int(kind[2])
    _check(vsize, (counts + 1) * wb)
    begin = words_at(data, at + item * wb, wb).astype(np.int64)
    end = words_at(data, at + (item + 1) * wb, wb).astype(np.int64)
    if (end < begin).any() or (end > vsize[row_chunk]).any():
        raise CorruptFileError("variable mini-block offsets point outside the chunk")
    lens = end - begin
    values = gather_ranges(data, at + begin, lens)
    offsets = np.concatenate(([0], np.cumsum(lens))).astype(np.int64)
    if what == "fsst":
        tables, table_of_page = _tables(located.layouts)
        page_of_row = np.repeat(np.arange(len(located.layouts)), located.rows_per_page)
        values, offsets = fsst_decode_many(tables, table_of_page[page_of_row], values, offsets)
    return to_arrow(Variable(offsets, values), dtype, None)


def _value_buffers(data: np.ndarray, start: np.ndarray, size: np.ndarray, wide: bool,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Start (in ``data``) and size of each chunk's one value buffer, from its header: a u16
    level count, then the buffer's size (u16, or u32 in pages of large chunks)."""
    hsize = 2 + (4 if wide else 2)
    if (size < hsize).any() or (start + size > len(data)).any():
        raise CorruptFileError("mini-block chunk is shorter than its header")
    vsize = words_at(data, start + 2, hsize - 2).astype(np.int64)
    vstart = start + (hsize + ALIGN - 1) // ALIGN * ALIGN
    if (vstart + vsize > start + size).any():
        raise CorruptFileError("mini-block buffers run past their chunk")
    return vstart, vsize


def _bitpacked(data: np.ndarray, vstart: np.ndarray, vsize: np.ndarray, counts: np.ndarray,
               row_chunk: np.ndarray, item: np.ndarray, t: int) -> Fixed:
    """Inline bit-packed values: each chunk starts with its bit width (one ``t``-bit word),
    then one FastLanes block of 1024 values."""
    wb = t // 8
    if (vsize < wb).any() or (counts > BLOCK).any():
        raise CorruptFileError("bit-packed mini-block is malformed")
    widths = words_at(data, vstart, wb).astype(np.int64)
    if (widths > t).any() or (wb * (1 + widths * (BLOCK // t)) > vsize).any():
        raise CorruptFileError("bit-packed mini-block is malformed")
    row_width = widths[row_chunk]
    block = vstart[row_chunk] + wb
    if (row_width == row_width[0]).all():
        return Fixed(fastlanes_at(data, block, item, t, int(row_width[0])), t)
    return Fixed(fastlanes_at_widths(data, block, item, t, row_width), t)


def _tables(layouts: Sequence[pb.MiniBlockLayout]) -> tuple[list[bytes], np.ndarray]:
    """The distinct FSST symbol tables of the pages and each page's index among them."""
    index: dict[bytes, int] = {}
    of_page = np.empty(len(layouts), dtype=np.int64)
    for i, layout in enumerate(layouts):
        of_page[i] = index.setdefault(layout.value_compression.fsst.symbol_table, len(index))
    return list(index), of_page


def _check(vsize: np.ndarray, need: np.ndarray) -> None:
    if (need > vsize).any():
        raise CorruptFileError("mini-block value buffer is too short for its values")


__all__ = ["Kind", "Located", "decode", "kind_of", "locate"]
