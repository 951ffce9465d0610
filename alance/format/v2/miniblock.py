"""The mini-block page layout (2.1+): small values cut into independently decodable chunks.

Page buffers: 0 = chunk metadata (one u16 word per chunk; u32 when the layout says
``has_large_chunk``, as 2.2 writers do: the low 4 bits
are log2 of the chunk's value count, the rest the chunk size in 8-byte words minus one);
1 = the chunks; then the dictionary (if any) and the repetition index (if any: per chunk
``depth + 1`` u64 values, the rows that end in the chunk and the items left over after them).

Each chunk: u16 level count, u16 rep size and u16 def size (when present), one size per value
buffer (u16 in 2.1, u32 from 2.2), padding to 8 bytes, then the rep levels, def levels and
value buffers, each padded to 8 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError
from alance.format.v2.blocks import Block, DictValues
from alance.format.v2.chunk_levels import chunk_levels
from alance.format.v2.compressive import ChunkBufs, block_values, miniblock_values
from alance.format.v2.kernels import range_indices
from alance.format.v2.leaf import LeafData
from alance.format.v2.levels import LevelPlan, plan_levels, unravel, visible_mask

ALIGN = 8


@dataclass
class MiniBlockState:
    """What must be known before reading chunks (the "search cache" of a page)."""

    counts: np.ndarray  # values per chunk
    positions: np.ndarray  # absolute file position of every chunk
    sizes: np.ndarray  # bytes per chunk
    first_row: np.ndarray  # page row of the first row starting in each chunk (+ total)
    starts: np.ndarray  # rows starting in each chunk
    trailer: np.ndarray  # chunk's last row continues into the next chunk
    dictionary: Block | None
    #: Derived once, on first lookup: the chunks where rows start, and the first row of each.
    _starting: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)
    #: Derived once: for each chunk, the first chunk from it on in which some row ends.
    _row_ends: np.ndarray | None = field(default=None, repr=False)
    #: Derived once: first row, position, size and value count of each chunk as the
    #: columns of one array.
    _table: np.ndarray | None = field(default=None, repr=False)
    #: Derived once: whether every chunk starts where the one before it ends.
    _adjacent: bool | None = field(default=None, repr=False)

    def chunk_table(self) -> np.ndarray:
        """``(chunks, 4)`` int64: each chunk's first row, position, size and value count."""
        if self._table is None:
            self._table = np.stack([self.first_row[:-1], self.positions, self.sizes,
                                    self.counts], axis=1).astype(np.int64)
        return self._table

    def adjacent(self) -> bool:
        """Whether the chunks lie back to back (as writers lay them out), so any run of them
        is one byte range."""
        if self._adjacent is None:
            self._adjacent = bool(np.array_equal(self.positions[1:],
                                                 self.positions[:-1] + self.sizes[:-1]))
        return self._adjacent

    def starting_chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """The chunks in which some row starts, and the page row of the first such row."""
        if self._starting is None:
            has = np.flatnonzero(self.starts > 0)
            self._starting = (has, self.first_row[has])
        return self._starting

    def next_row_end(self) -> np.ndarray:
        """For each chunk, the first chunk (itself or later) in which some row ends."""
        if self._row_ends is None:
            n = len(self.counts)
            ends_here = (self.starts > 0) | ~self.trailer
            nxt = np.where(ends_here, np.arange(n), n)
            self._row_ends = np.minimum.accumulate(nxt[::-1])[::-1]
        return self._row_ends


def init_buffers(layout: pb.MiniBlockLayout, buffers: list[tuple[int, int]],
                 ) -> list[tuple[int, int]]:
    """The buffers needed before chunks can be located: metadata, dictionary, rep index."""
    if len(buffers) < 2:
        raise CorruptFileError("mini-block page needs at least two buffers")
    need = [buffers[0]]
    if layout.HasField("dictionary"):
        if len(buffers) < 3:
            raise CorruptFileError("mini-block page has no dictionary buffer")
        need.append(buffers[2])
    if layout.repetition_index_depth > 0:
        need.append(buffers[-1])
    return need


def build_state(layout: pb.MiniBlockLayout, buffers: list[tuple[int, int]], num_rows: int,
                raws: list[bytes | memoryview], wide: bool) -> MiniBlockState:
    """Parse the metadata (and dictionary / repetition index) fetched by
    :func:`init_buffers`."""
    meta = np.frombuffer(raws[0], dtype="<u4" if wide else "<u2").astype(np.int64)
    items = int(layout.num_items)
    n = len(meta)
    log = meta & 0xF
    sizes = ((meta >> 4) + 1) * ALIGN
    counts = np.left_shift(1, log)
    if n:
        counts[-1] = items - int(counts[:-1].sum())
    if n and counts[-1] < 0:
        raise CorruptFileError("mini-block chunk counts exceed the page's items")
    data_pos, data_size = buffers[1]
    positions = data_pos + np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    if n and int(sizes.sum()) > data_size:
        raise CorruptFileError("mini-block chunks run past their buffer")
    k = 1
    dictionary = None
    if layout.HasField("dictionary"):
        raw = np.frombuffer(raws[k], dtype=np.uint8)
        dictionary = block_values(layout.dictionary, raw, int(layout.num_dictionary_items))
        k += 1
    if layout.repetition_index_depth > 0:
        stride = int(layout.repetition_index_depth) + 1
        idx = np.frombuffer(raws[k], dtype="<u8").astype(np.int64)
        if len(idx) != n * stride:
            raise CorruptFileError("repetition index does not match the chunk count")
        idx = idx.reshape(n, stride)
        ends, partial = idx[:, 0], idx[:, 1]
        trailer = partial > 0
        preamble = np.concatenate(([False], trailer[:-1]))
        starts = ends + trailer - preamble
    else:
        trailer = np.zeros(n, dtype=bool)
        starts = counts.copy()
    if (starts < 0).any():
        raise CorruptFileError("repetition index is inconsistent")
    first_row = np.concatenate(([0], np.cumsum(starts))).astype(np.int64)
    if first_row[-1] != num_rows:
        raise CorruptFileError(f"mini-block page holds {first_row[-1]} rows, "
                               f"expected {num_rows}")
    return MiniBlockState(counts, positions, sizes, first_row, starts, trailer, dictionary)


def chunks_for_range(state: MiniBlockState, lo: int, hi: int) -> np.ndarray:
    """Chunk indices holding page rows ``lo..hi``."""
    ends = chunks_for_rows(state, np.array([lo, hi - 1], dtype=np.int64))
    return np.arange(int(ends[0]), int(ends[-1]) + 1, dtype=np.int64)


def chunks_for_rows(state: MiniBlockState, rows: np.ndarray) -> np.ndarray:
    """Sorted chunk indices holding the (sorted, page-local) ``rows``."""
    has, has_first = state.starting_chunks()
    if len(rows) == 0 or len(has) == 0:
        return np.zeros(0, dtype=np.int64)
    first = has[np.searchsorted(has_first, rows, side="right") - 1]
    needed = [first]
    last_of_chunk = state.first_row[first + 1] - 1
    spill = (rows == last_of_chunk) & state.trailer[first]
    if not spill.any():
        # ``rows`` are sorted, so ``first`` is too: only repeats to drop (cheaper than unique)
        if len(first) > 1 and not (first[1:] > first[:-1]).all():
            first = first[np.concatenate(([True], first[1:] != first[:-1]))]
        return first
    # A spilling row continues until the next chunk in which some row ends.
    n = len(state.counts)
    nxt = np.append(state.next_row_end(), n - 1)  # (a last chunk has no next one)
    c = first[spill]
    stop = np.minimum(nxt[c + 1], n - 1)  # chunks c + 1 .. stop hold the rest of row
    needed.append(range_indices(c + 1, np.maximum(stop - c, 0)))
    return np.unique(np.concatenate(needed))


def decode_chunks(layout: pb.MiniBlockLayout, state: MiniBlockState, chunks: np.ndarray,
                  data: np.ndarray, starts: np.ndarray, wide: bool,
                  wanted: np.ndarray | None = None,
                  ) -> tuple[np.ndarray | None, np.ndarray | None, Block, np.ndarray | None]:
    """Decode chunks whose bytes start at ``starts`` in ``data``.

    Returns rep levels, def levels, values of the visible items and the page row of every
    item (or, when items are consecutive rows, just the row of the first item). When
    ``wanted`` (sorted page rows) is given and every row is one item with a value (no
    lists), only those items are decoded and the row result is None.
    """
    plan = plan_levels(list(layout.layers))
    has_rep = layout.HasField("rep_compression")
    has_def = layout.HasField("def_compression")
    nbuf = int(layout.num_buffers)
    counts = state.counts[chunks]
    sizes = state.sizes[chunks]
    if len(starts) and (starts + sizes).max() > len(data):
        raise CorruptFileError("mini-block chunk is truncated")
    head_words = 1 + has_rep + has_def
    hsize = 2 * head_words + (4 if wide else 2) * nbuf
    if (sizes < hsize).any():
        raise CorruptFileError("mini-block chunk is shorter than its header")
    # (Every chunk lies in ``data`` and holds a header: checked above.)
    hdr = data[starts[:, None] + _header_bytes(hsize)]
    small = np.ascontiguousarray(hdr[:, : 2 * head_words]).view("<u2").astype(np.int64)
    big = np.ascontiguousarray(hdr[:, 2 * head_words:]).view("<u4" if wide else "<u2")
    big = big.astype(np.int64).reshape(len(chunks), nbuf)
    num_levels = small[:, 0]
    pos = starts + (hsize + ALIGN - 1) // ALIGN * ALIGN
    sizes_list = []
    col = 1
    if has_rep:
        sizes_list.append(small[:, col])
        col += 1
    if has_def:
        sizes_list.append(small[:, col])
    sizes_list.extend(big[:, j] for j in range(nbuf))
    buf_starts = []
    for sz in sizes_list:
        buf_starts.append(pos.copy())
        pos = pos + (sz + ALIGN - 1) // ALIGN * ALIGN
    if len(chunks) and (pos - starts > sizes).any():
        raise CorruptFileError("mini-block buffers run past their chunk")
    rep = defs = None
    k = 0
    if has_rep:
        rep = chunk_levels(layout.rep_compression, data, buf_starts[k], sizes_list[k], num_levels)
        k += 1
    if has_def:
        defs = chunk_levels(layout.def_compression, data, buf_starts[k], sizes_list[k], num_levels)
        k += 1
    # Checked above: every buffer lies inside its chunk, every chunk inside ``data``.
    value_bufs = [ChunkBufs(data, buf_starts[k + j], sizes_list[k + j], checked=True)
                  for j in range(nbuf)]
    pick = None
    if (wanted is not None and not plan.max_rep and plan.visible_max < 0 and len(chunks)
            and (defs is None or np.array_equal(num_levels, counts))):
        first = state.first_row[chunks]
        ci = np.searchsorted(first, wanted, side="right") - 1
        local = wanted - first[np.maximum(ci, 0)]
        if (ci < 0).any() or (local >= counts[np.maximum(ci, 0)]).any():
            raise CorruptFileError("mini-block chunks do not hold the rows asked for")
        pick = np.concatenate(([0], np.cumsum(counts)[:-1]))[ci] + local
    values = miniblock_values(layout.value_compression, value_bufs, counts, pick)
    if pick is not None:
        if len(values) != len(pick):
            raise CorruptFileError("mini-block value count disagrees with its rows")
        if defs is not None:
            defs = defs[pick]
        values = _dict_lookup(state, values)
        return None if rep is None else rep[pick], defs, values, None
    values = _dict_lookup(state, values)
    items_per_chunk = num_levels if (has_rep or has_def) else counts
    n_items = int(items_per_chunk.sum())
    vis = visible_mask(defs, plan)
    n_vis = n_items if vis is None else int(np.count_nonzero(vis))
    if (vis is not None and n_vis != len(values)) or (vis is None and n_items != len(values)):
        raise CorruptFileError("mini-block value count disagrees with its levels")
    contiguous = len(chunks) == 0 or int(chunks[-1] - chunks[0]) == len(chunks) - 1
    if (rep is None or not plan.max_rep) and contiguous:
        # Items are rows, in order: row numbers are a plain range.
        first = int(state.first_row[chunks[0]]) if len(chunks) else 0
        return rep, defs, values, np.array([first], dtype=np.int64)
    chunk_of_item = np.repeat(np.arange(len(chunks)), items_per_chunk)
    if rep is not None and plan.max_rep:
        is_start = (rep == plan.max_rep).astype(np.int64)
    else:
        is_start = np.ones(n_items, dtype=np.int64)
    csum = np.cumsum(is_start)
    chunk_base = np.concatenate(([0], np.cumsum(items_per_chunk)[:-1]))
    before = np.concatenate(([0], csum))[chunk_base]
    local = csum - np.repeat(before, items_per_chunk)
    row = state.first_row[chunks][chunk_of_item] + local - 1
    return rep, defs, values, row


@cache
def _header_bytes(size: int) -> np.ndarray:
    return np.arange(size, dtype=np.int64)


def _dict_lookup(state: MiniBlockState, values: Block) -> Block:
    """Decoded indices into the page's dictionary, looked up when used (``values`` itself
    without a dictionary)."""
    if state.dictionary is None:
        return values
    return DictValues.lookup(values, state.dictionary)


def select_rows(layout: pb.MiniBlockLayout, rep: np.ndarray | None, defs: np.ndarray | None,
                values: Block, row: np.ndarray | None, wanted: np.ndarray | None,
                lo: int, hi: int) -> LeafData:
    """Keep the items of the wanted rows (sorted; or the range ``lo..hi``) and unravel.

    ``row`` None: the items are already exactly the wanted rows.
    """
    plan: LevelPlan = plan_levels(list(layout.layers))
    if row is None:
        expected = (hi - lo) if wanted is None else len(wanted)
        layers = unravel(rep, defs, plan, len(values))
        if layers[-1].size != expected:
            raise CorruptFileError(f"decoded {layers[-1].size} rows of a page, "
                                   f"expected {expected}")
        return LeafData(layers, values)
    n_items = len(rep) if rep is not None else len(defs) if defs is not None else len(values)
    if len(row) != n_items or n_items == 1:
        # Consecutive rows starting at row[0].
        first = int(row[0])
        if wanted is None and defs is None and rep is None:
            sl = values.slice(lo - first, hi - first)
            layers = unravel(None, None, plan, len(sl))
            return LeafData(layers, sl)
        row = np.arange(first, first + n_items, dtype=np.int64)
    # Items of a row are consecutive and rows ascend, so each wanted row is a run of items.
    if wanted is None:
        first_item = np.searchsorted(row, [lo, hi])
        items = np.arange(first_item[0], first_item[1])
    else:
        begin = np.searchsorted(row, wanted, side="left")
        end = np.searchsorted(row, wanted, side="right")
        items = range_indices(begin, end - begin)
    vis = visible_mask(defs, plan)
    if vis is None:
        if len(items) != len(values):
            values = values.take(items)
    else:
        slot = np.cumsum(vis) - 1  # value index of each visible item
        vitems = items[vis[items]]
        values = values.take(slot[vitems])
    rep = None if rep is None else rep[items]
    defs = None if defs is None else defs[items]
    n = len(items)
    layers = unravel(rep, defs, plan, n)
    expected = (hi - lo) if wanted is None else len(wanted)
    if layers[-1].size != expected:
        raise CorruptFileError(f"decoded {layers[-1].size} rows of a page, expected {expected}")
    return LeafData(layers, values)


def chunk_ranges(state: MiniBlockState, chunks: np.ndarray, gap: int = 0,
                 ) -> list[tuple[int, int]]:
    """Byte ranges covering the (sorted) chunks: neighbours merged, and also chunks at most
    ``gap`` bytes apart (the IO layer would read those together anyway)."""
    if len(chunks) == 0:
        return []
    s, e = _chunk_groups(state, chunks, gap)
    return list(zip(s.tolist(), e.tolist(), strict=True))


def _chunk_groups(state: MiniBlockState, chunks: np.ndarray, gap: int,
                  ) -> tuple[np.ndarray, np.ndarray]:
    if (len(chunks) > 1 and int(chunks[-1]) - int(chunks[0]) == len(chunks) - 1
            and state.adjacent()):  # a run of back-to-back chunks (what scans read): one range
        a, b = int(chunks[0]), int(chunks[-1])
        return state.positions[a:a + 1], state.positions[b:b + 1] + state.sizes[b:b + 1]
    pos = state.positions[chunks]
    end = pos + state.sizes[chunks]
    if len(chunks) == 1:
        return pos, end
    brk = np.flatnonzero(pos[1:] - end[:-1] > gap) + 1
    first = np.concatenate(([0], brk))
    last = np.concatenate((brk - 1, [len(chunks) - 1]))
    return pos[first], end[last]


def chunk_starts_in(ranges_data: list[np.ndarray], state: MiniBlockState, chunks: np.ndarray,
                    gap: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the ranges fetched for :func:`chunk_ranges` (same ``gap``) and locate each
    chunk inside the result."""
    if len(chunks) == 0:
        data = np.concatenate(ranges_data) if len(ranges_data) != 1 else ranges_data[0]
        return data, np.zeros(0, np.int64)
    pos = state.positions[chunks]
    if len(ranges_data) == 1:  # one group: every chunk counts from the first one
        return ranges_data[0], (pos - pos[0]).astype(np.int64)
    g_start, g_end = _chunk_groups(state, chunks, gap)
    group = np.searchsorted(g_start, pos, side="right") - 1
    sizes = state.sizes[chunks]
    if 2 * int(sizes.sum()) < int((g_end - g_start).sum()):
        # The ranges hold mostly bytes between the chunks (read to save requests): copy out
        # just the chunks rather than everything.
        if len(ranges_data) != len(g_start):
            raise CorruptFileError("mini-block chunk ranges do not match their data")
        rel = (pos - g_start[group]).tolist()
        parts = [ranges_data[g][r: r + n] for g, r, n in
                 zip(group.tolist(), rel, sizes.tolist(), strict=True)]
        data = np.concatenate(parts)
        if len(data) != int(sizes.sum()):
            raise CorruptFileError("mini-block chunk is truncated")
        return data, np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    data = np.concatenate(ranges_data)
    base = np.concatenate(([0], np.cumsum(g_end - g_start)[:-1]))
    return data, (pos - g_start[group] + base[group]).astype(np.int64)


__all__ = ["MiniBlockState", "build_state", "chunk_ranges", "chunk_starts_in",
           "chunks_for_rows", "decode_chunks", "init_buffers", "range_indices",
           "select_rows"]
