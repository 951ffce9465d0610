"""Vectorised byte-level kernels used by the 2.x decoders (numpy / pyarrow, no Python loops
over values).

* :func:`gather_ranges` concatenates many byte (or element) ranges of one array.
* :func:`unpack_fastlanes` undoes the 1024-value "FastLanes" bit-packing Lance uses for
  bit-packed integers (a transposed layout: each block of 1024 values is spread over
  ``1024 / T`` lanes of ``T``-bit words).
* :func:`fsst_decode` expands FSST-compressed strings with a symbol table.
* :func:`decompress` undoes the general-purpose compressors (lz4 block with a size prefix,
  zstd frames with or without an 8-byte size prefix).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.arrow_buffers import pooled_empty

UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
BLOCK = 1024
# Order in which FastLanes visits the eight 8-row groups of a lane.
_LANE_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)


def gather_ranges(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([data[s:s+n] for s, n in zip(starts, lengths)])`` without a loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return data[:0]
    if len(starts) > 1 and np.array_equal(starts[1:], starts[:-1] + lengths[:-1]):
        starts, lengths = starts[:1], np.array([total])  # one contiguous run
    if len(starts) == 1:
        s = int(starts[0])
        out = data[s: s + total]
        if len(out) != total:
            raise CorruptFileError("a buffer range runs past the end of its data")
        return out
    if starts.min() < 0 or (starts + lengths).max() > len(data):
        raise CorruptFileError("a buffer range runs past the end of its data")
    strided = _gather_strided(data, starts, lengths, total)
    if strided is not None:
        return strided
    if (len(starts) >= SPAN_TAKE_RANGES and total < SPAN_TAKE_MAX_AVERAGE * len(starts)
            and data.dtype == np.uint8 and data.ndim == 1
            and bool((starts[1:] >= starts[:-1] + lengths[:-1]).all())):
        return _gather_spans(data, starts, lengths, total)
    if total >= 64 * len(starts):  # long ranges: copying slices beats index arithmetic
        return np.concatenate([data[s: s + n] for s, n in
                               zip(starts.tolist(), lengths.tolist(), strict=True)],
                              out=pooled_empty(total, data.dtype))
    ends = np.cumsum(lengths)
    shift = np.repeat(starts - (ends - lengths), lengths)
    return data[np.arange(total, dtype=np.int64) + shift]


#: From this many byte ranges on (in order, not overlapping), :func:`gather_ranges` copies
#: them with one Arrow take (a few ns per range) rather than by index arithmetic (a few ns
#: per byte) or one numpy slice each (a Python object and call each)...
SPAN_TAKE_RANGES = 64
#: ... and while they average fewer bytes than this (longer ones are copied faster as numpy
#: slices: 2,000 ranges of ~2.8 KB 0.61 -> 0.20 ms by one take, 300 of ~30 KB 0.29 vs 0.36).
SPAN_TAKE_MAX_AVERAGE = 16 * 1024


def _gather_spans(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                  total: int) -> np.ndarray:
    """:func:`gather_ranges` of ordered, disjoint byte ranges, by :func:`span_array`."""
    taken = span_array(data, starts, starts + lengths)
    return np.frombuffer(taken.buffers()[2], np.uint8, count=total)


def span_array(data: np.ndarray, starts: np.ndarray, ends: np.ndarray,
               memory_pool: pa.MemoryPool | None = None) -> pa.Array:
    """``data[starts[i]:ends[i]]`` for ordered, disjoint ranges inside the byte array
    ``data``, as one large binary array: ``data`` seen (without a copy) as an array whose
    items are, in turn, the gap before a range and the range, of which Arrow's take keeps
    the ranges (a few ns per range). Its buffers come from ``memory_pool`` (default: Arrow's
    default pool)."""
    k = len(starts)
    data = np.ascontiguousarray(data)  # (Arrow wraps contiguous memory only)
    bounds = np.empty(2 * k + 2, np.int64)
    bounds[0], bounds[-1] = 0, len(data)
    bounds[1:-1:2], bounds[2:-1:2] = starts, ends
    items = pa.Array.from_buffers(pa.large_binary(), 2 * k + 1,
                                  [None, pa.py_buffer(bounds), pa.py_buffer(data)])
    return pc.take(items, pa.array(np.arange(1, 2 * k, 2, dtype=np.int64)),
                   memory_pool=memory_pool)


def _gather_strided(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                    total: int) -> np.ndarray | None:
    """:func:`gather_ranges` in one strided copy when the ranges (but perhaps the last) have
    one length and lie a fixed distance apart, as equal-sized mini-blocks do; else None.
    (The caller has checked that every range lies in ``data``.)"""
    k = len(starts) - 1  # ranges in the regular part; the last one is copied on its own
    size, step = int(lengths[0]), int(starts[1] - starts[0])
    if k < 2 or size <= 0 or step <= 0 or data.ndim != 1:
        return None
    if (lengths[:k] != size).any() or (np.diff(starts[:k]) != step).any():
        return None
    s0 = int(starts[0])
    item = data.strides[0]
    grid = np.lib.stride_tricks.as_strided(data[s0:], shape=(k, size),
                                           strides=(step * item, item), writeable=False)
    out = pooled_empty(total, data.dtype)
    out[: k * size].reshape(k, size)[...] = grid
    last = int(starts[k])
    out[k * size:] = data[last: last + int(lengths[k])]
    return out


def strided_rows(data: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray | None:
    """``size`` bytes at each of ``starts`` as rows of a ``(k, size)`` view of ``data`` (no
    copy) when the starts lie a fixed distance apart, as the blocks of equal-sized mini-block
    chunks do; None otherwise, or when a row would run past ``data``."""
    k = len(starts)
    if k < 2 or size <= 0 or data.ndim != 1 or data.dtype != np.uint8:
        return None
    s0, step = int(starts[0]), int(starts[1] - starts[0])
    if step < size or (np.diff(starts) != step).any():
        return None
    if s0 < 0 or s0 + (k - 1) * step + size > len(data):
        raise CorruptFileError("a buffer range runs past the end of its data")
    return np.lib.stride_tricks.as_strided(data[s0:], shape=(k, size), strides=(step, 1),
                                           writeable=False)


def range_indices(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The indices ``starts[i] .. starts[i] + lengths[i]`` of every range, concatenated."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum()) if len(lengths) else 0
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    shift = np.repeat(np.asarray(starts, dtype=np.int64) - (ends - lengths), lengths)
    return np.arange(total, dtype=np.int64) + shift


@cache
def _fastlanes_plan(t: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For word size ``t`` and width ``w``: per row of a lane the word holding its first bit
    and the shift; the rows that spill into the next word; and the order of the ``t / 8``
    row groups in the output."""
    rows = np.arange(t, dtype=np.int64)
    bit = rows * w
    word = bit // t
    shift = bit % t
    spill = np.flatnonzero(shift + w > t)
    # Row r = 8 * g + s of lane l lands at s * 128 + _LANE_ORDER[g] * 16 + l; for a given s
    # the groups are blocks of 1024 / t lanes, group g at block _LANE_ORDER[g] * t / 64.
    groups = t // 8
    block = np.array([_LANE_ORDER[g] * t // 64 for g in range(groups)], dtype=np.int64)
    inverse = np.argsort(block)
    return word, shift, spill, inverse


@dataclass(frozen=True)
class _LaneRows:
    """How the rows of a FastLanes block come out of its packed words (see
    :func:`_fastlanes_rows`)."""

    word: np.ndarray    # per output row: the packed row holding its first bit
    shift: np.ndarray   # ... and the right shift that brings that bit down, (1, t, lanes)
    spill: np.ndarray   # the output rows whose bits continue in the next packed row
    spill_word: np.ndarray  # ... that next row
    up: np.ndarray      # ... and the left shift that brings those bits in, (1, k, lanes)
    #: The spilling rows as a few evenly spaced runs, when they are (``spill`` is then in
    #: run order): per run a slice of output rows and the slice of ``spill`` it covers.
    spill_runs: tuple[tuple[slice, slice], ...] | None
    next_word: np.ndarray  # per output row: the next packed row (capped), for all rows
    up_all: np.ndarray  # ... and the left shift (1, t, lanes): ``t`` for rows not spilling,
    #                     which shifts the next row's bits out entirely (numpy: 0)

    @property
    def few_spill(self) -> bool:
        """Whether a third of the rows or fewer spill (then those are picked out; for more,
        treating every row alike is faster)."""
        return 3 * len(self.spill) <= len(self.word)


@cache
def _fastlanes_rows(t: int, w: int) -> _LaneRows:
    """The lane rows of a block in output order: for each its word and shift, and for the
    rows that spill into the next word, that word and the left shift."""
    word, shift, _, inverse = _fastlanes_plan(t, w)
    groups = t // 8
    # Output position (s * groups + j) * lanes + l holds row inverse[j] * 8 + s of lane l.
    order = np.array([inverse[j] * 8 + s for s in range(8) for j in range(groups)])
    dtype = UINT[t]
    w_lo, s_lo = word[order], shift[order]
    spill = np.flatnonzero(s_lo + w > t)
    runs = _even_runs(spill.tolist())
    spill_runs = None
    if runs is not None:
        spill = np.array([r for run in runs for r in run], dtype=np.int64)
        spill_runs, at = [], 0
        for run in runs:
            step = run[1] - run[0] if len(run) > 1 else 1
            spill_runs.append((slice(run[0], run[-1] + 1, step), slice(at, at + len(run))))
            at += len(run)
    lanes = BLOCK // t

    def per_lane(shifts: np.ndarray) -> np.ndarray:
        # (a shift for every value of a block, not one per row broadcast over the lanes: numpy
        # then runs one loop over the block instead of one per row, 1.5x faster)
        return np.ascontiguousarray(np.repeat(shifts.astype(dtype)[None, :, None], lanes, 2))

    return _LaneRows(w_lo, per_lane(s_lo), spill, w_lo[spill] + 1, per_lane(t - s_lo[spill]),
                     None if spill_runs is None else tuple(spill_runs),
                     np.minimum(w_lo + 1, max(w - 1, 0)), per_lane(t - s_lo))


def _even_runs(rows: list[int], most: int = 4) -> list[list[int]] | None:
    """``rows`` (ascending) as at most ``most`` runs of evenly spaced rows with one spacing
    (each run: the rows of one remainder modulo that spacing, with none of that remainder
    missing between its first and last), or None."""
    if not rows:
        return None
    for step in range(1, rows[-1] + 2):
        by_rest: dict[int, list[int]] = {}
        for r in rows:
            by_rest.setdefault(r % step, []).append(r)
        if len(by_rest) <= most and all(
                run[-1] - run[0] == step * (len(run) - 1) for run in by_rest.values()):
            return sorted(by_rest.values())
    return None


def unpack_fastlanes(words: np.ndarray, t: int, w: int, out: np.ndarray | None = None,
                     ) -> np.ndarray:
    """Unpack ``k`` blocks of ``1024 * w / t`` packed ``t``-bit words into ``(k, 1024)`` values.

    ``words`` is a 2-D array ``(k, w * 1024 / t)`` of dtype ``uint{t}``; ``out``, if given, a
    C-contiguous ``(k, 1024)`` array of that dtype to unpack into (and return).
    """
    k = words.shape[0]
    dtype = UINT[t]
    lanes = BLOCK // t
    if out is None:
        out = pooled_empty((k, t, lanes), dtype)  # rows already in output order
    elif out.shape != (k, BLOCK) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError("unpack_fastlanes: out must be a C-contiguous (k, 1024) array")
    out = out.reshape(k, t, lanes)
    if w == 0 or k == 0:
        out[...] = 0
        return out.reshape(k, BLOCK)
    if words.shape[1] != w * lanes:
        raise CorruptFileError("bit-packed block has the wrong size")
    packed = np.asarray(words, dtype=dtype).reshape(k, w, lanes)
    rows = _fastlanes_rows(t, w)
    mask = dtype((1 << w) - 1) if w < t else None
    # Tiles of blocks (see UNPACK_TILE_BYTES). The takes use mode "clip": the row indices
    # are the plan's own, and numpy's default mode copies the taken rows a second time when
    # given ``out`` (3x slower). The next words go into one scratch tile, not a fresh array
    # per pass (whose pages the kernel would fault in every time).
    step = max(1, UNPACK_TILE_BYTES // (BLOCK * t // 8))
    if mask is None:  # (all t bits: the rows only change places)
        return _fastlanes_transpose(packed, out, rows.word, step).reshape(k, BLOCK)
    spill_rows = len(rows.spill) if rows.few_spill else t
    scratch = np.empty((min(step, k), spill_rows, lanes), dtype) if spill_rows else None
    for i in range(0, k, step):
        vals = out[i: i + step]
        part = packed[i: i + step]
        np.take(part, rows.word, axis=1, out=vals, mode="clip")
        vals >>= rows.shift
        if scratch is None:
            pass
        elif rows.few_spill:  # the bits continuing in the next word, for those rows only
            hi = scratch[: len(part)]
            np.take(part, rows.spill_word, axis=1, out=hi, mode="clip")
            hi <<= rows.up
            if rows.spill_runs is None:
                vals[:, rows.spill] |= hi
            else:  # (in place through strided views: no gather and scatter)
                for out_rows, hi_rows in rows.spill_runs:
                    vals[:, out_rows] |= hi[:, hi_rows]
        else:  # for every row
            hi = scratch[: len(part)]
            np.take(part, rows.next_word, axis=1, out=hi, mode="clip")
            if _WIDE_SHIFTS_ZERO:
                hi <<= rows.up_all
            else:  # (in two steps: a shift by the full width is undefined in C)
                hi <<= rows.up_all - dtype(1)
                hi <<= dtype(1)
            vals |= hi
        vals &= mask
    return out.reshape(k, BLOCK)


def _fastlanes_transpose(packed: np.ndarray, out: np.ndarray, order: np.ndarray,
                         step: int) -> np.ndarray:
    """Full-width FastLanes rows into output order: output row ``s * G + j`` is packed row
    ``8 * group[j] + s`` (``G = t / 8`` groups), so each group is one strided copy of whole
    lane rows (faster than a take of the rows by index)."""
    k, t, lanes = out.shape
    groups = t // 8
    group = order[:groups] // 8
    src = packed.reshape(k, groups, 8, lanes)
    dst = out.reshape(k, 8, groups, lanes)
    for i in range(0, k, step):
        for j in range(groups):
            dst[i: i + step, :, j, :] = src[i: i + step, group[j], :, :]
    return out


#: Whether numpy shifts an unsigned word left by its full width to 0 (it defines such
#: shifts so, rather than leave them to C).
_WIDE_SHIFTS_ZERO = bool(np.left_shift(np.array([1], np.uint64), np.uint64(64))[0] == 0)

#: Bytes of values :func:`unpack_fastlanes` unpacks per pass (blocks of 1,024 values). Each
#: pass is a numpy call that gives up the GIL and takes it back, which two decoding threads
#: and the event loop contend for: in a scan, larger tiles won over passes that stay in a
#: core's L2 cache (10M-row 2-column projection: 4 MiB 93 ms, 512 KiB 114 ms, 128 KiB 134
#: ms, a whole 8 MiB page at once 96 ms), though one thread alone runs 128 KiB tiles faster.
UNPACK_TILE_BYTES = 4 * 1024 * 1024


def fastlanes_at(data: np.ndarray, block_start: np.ndarray, pos: np.ndarray, t: int,
                 w: int) -> np.ndarray:
    """Single values out of FastLanes-packed blocks, without unpacking whole blocks.

    Value ``pos[i]`` (0..1023) of the block of ``t``-bit words ``w`` bits wide that starts at
    byte ``block_start[i]`` of ``data``. The caller checks that the blocks lie in ``data``.
    """
    dtype = UINT[t]
    if w == 0 or len(pos) == 0:
        return np.zeros(len(pos), dtype=dtype)
    word, shift, _, inverse = _fastlanes_plan(t, w)
    lanes = BLOCK // t
    groups = t // 8
    lane = pos % lanes
    q = pos // lanes
    row = inverse[q % groups] * 8 + q // groups  # the row of the lane holding the value
    wb = t // 8
    addr = block_start + (word[row] * lanes + lane) * wb
    sh = shift[row].astype(dtype)
    out = _words_at(data, addr, wb, dtype) >> sh
    spill = np.flatnonzero(shift[row] + w > t)
    if len(spill):
        hi = _words_at(data, addr[spill] + lanes * wb, wb, dtype)
        out[spill] |= hi << (t - sh[spill])
    if w < t:
        out &= dtype((1 << w) - 1)
    return out


def fastlanes_at_widths(data: np.ndarray, block_start: np.ndarray, pos: np.ndarray, t: int,
                        widths: np.ndarray) -> np.ndarray:
    """:func:`fastlanes_at` where each value's block has its own width ``widths[i]`` (0..t):
    one vectorised pass instead of one per width (a take of a few rows from chunks packed
    at different widths)."""
    dtype = UINT[t]
    out = np.zeros(len(pos), dtype=dtype)
    live = np.flatnonzero(widths > 0)  # width 0: every value is 0 and the block holds no words
    if not len(live):
        return out
    w = widths[live].astype(np.int64)
    p = pos[live]
    inverse = _fastlanes_plan(t, 1)[3]  # the order of row groups does not depend on width
    lanes = BLOCK // t
    groups = t // 8
    wb = t // 8
    q = p // lanes
    row = inverse[q % groups] * 8 + q // groups
    bit = row * w
    sh = bit % t
    addr = block_start[live] + ((bit // t) * lanes + p % lanes) * wb
    vals = _words_at(data, addr, wb, dtype) >> sh.astype(dtype)
    spill = np.flatnonzero(sh + w > t)
    if len(spill):
        hi = _words_at(data, addr[spill] + lanes * wb, wb, dtype)
        vals[spill] |= hi << (t - sh[spill]).astype(dtype)
    narrow = w < t
    if narrow.any():
        one = np.ones(int(narrow.sum()), dtype=dtype)
        vals[narrow] &= (one << w[narrow].astype(dtype)) - one
    out[live] = vals
    return out


def _words_at(data: np.ndarray, addr: np.ndarray, wb: int, dtype: type) -> np.ndarray:
    return words_at(data, addr, wb).astype(dtype, copy=False)


def fixed_at(data: np.ndarray, addr: np.ndarray, width: int) -> np.ndarray:
    """The ``width`` bytes at each byte position ``addr`` of the byte array ``data``, back to
    back (one gather of ``width``-byte items over a view in which every byte starts one)."""
    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    count = len(data) - width + 1
    if len(addr) and (count <= 0 or int(addr.min()) < 0 or int(addr.max()) >= count):
        raise CorruptFileError("a buffer range runs past the end of its data")
    if not len(addr):
        return np.zeros(0, np.uint8)
    items = np.ndarray((count,), dtype=f"V{width}", buffer=data, strides=(1,))
    return items[addr].view(np.uint8).reshape(-1)


def words_at(data: np.ndarray, addr: np.ndarray, wb: int) -> np.ndarray:
    """The little-endian unsigned ``wb``-byte word at each byte position ``addr`` of the
    byte array ``data`` (aligned or not): one gather over a view in which every byte starts
    a word (the words overlap; nothing is copied but the words picked)."""
    return fixed_at(data, addr, wb).view(f"<u{wb}")


def fsst_symbols(table: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Parse an FSST symbol table into a ``(512, 8)`` expansion table and lengths.

    Rows 0..255 are the codes (255 is the escape, length 0); rows 256 + b expand to the literal
    byte ``b``. Parsed tables are remembered (every chunk of a page shares one); the arrays
    are read-only.
    """
    return _fsst_symbols(bytes(table))


@lru_cache(maxsize=256)
def _fsst_symbols(table: bytes) -> tuple[np.ndarray, np.ndarray]:
    if len(table) < 8:
        raise CorruptFileError("FSST symbol table is truncated")
    header = int.from_bytes(table[:8], "little")
    if header >> 32 != 0x46535354:
        raise CorruptFileError("FSST symbol table has a bad magic number")
    n = header & 0xFF
    if len(table) < 8 + 8 * n + n:
        raise CorruptFileError("FSST symbol table is truncated")
    sym = np.frombuffer(table, dtype=np.uint8, count=8 * n, offset=8).reshape(n, 8)
    lens = np.frombuffer(table, dtype=np.uint8, count=n, offset=8 + 8 * n)
    expand = np.zeros((512, 8), dtype=np.uint8)
    length = np.zeros(512, dtype=np.int64)
    expand[:n] = sym
    length[:n] = np.minimum(lens, 8)
    expand[256:, 0] = np.arange(256, dtype=np.uint8)
    length[256:] = 1
    length[255] = 0
    expand.setflags(write=False)
    length.setflags(write=False)
    return expand, length


def fsst_decode(table: bytes, data: np.ndarray, offsets: np.ndarray, top: int | None = None,
                ) -> tuple[np.ndarray, np.ndarray]:
    """Decompress FSST strings: returns (bytes, int64 offsets). ``top``: the largest code of
    ``data`` when the caller knows it (one pass fewer)."""
    table = bytes(table)
    if len(table) >= 8 and not (int.from_bytes(table[:8], "little") >> 24) & 1:
        # The encoder was switched off (too little data): the bytes are stored as they are.
        if int.from_bytes(table[:8], "little") >> 32 != 0x46535354:
            raise CorruptFileError("FSST symbol table has a bad magic number")
        return data, np.asarray(offsets, dtype=np.int64)
    expand, length = fsst_symbols(table)
    n = len(data)
    if n == 0:
        return data[:0], np.zeros(len(offsets), dtype=np.int64)
    top = int(data.max()) if top is None else top
    if top != 255:  # no escapes (a max is cheaper than a comparison pass)
        if n >= PAIR_DECODE_CODES:
            return _fsst_expand_pairs(table, data, offsets)
        return _fsst_expand(expand, length, data.astype(np.int32), offsets)
    return _fsst_expand(expand, length, _expansion_rows(data, data == 255), offsets)


def fsst_yields_ascii(table: bytes, top: int) -> bool:
    """Whether :func:`fsst_decode` of codes whose largest is ``top`` (-1: no codes) with
    ``table`` yields ASCII bytes only (hence valid UTF-8, with no need to scan the output):
    the table is switched on, all its symbols are ASCII and no code is the escape (which
    would bring in a literal byte)."""
    return top != 255 and _ascii_symbols(bytes(table))


@lru_cache(maxsize=256)
def _ascii_symbols(table: bytes) -> bool:
    if len(table) < 8 or not (int.from_bytes(table[:8], "little") >> 24) & 1:
        return False  # (switched off: the bytes are stored as they are, unchecked)
    expand, length = fsst_symbols(table)
    used = np.arange(8)[None, :] < length[:255, None]
    return bool((expand[:255][used] < 0x80).all())


def _expansion_rows(data: np.ndarray, is_ff: np.ndarray) -> np.ndarray:
    """The expansion-table row of every code byte: the code itself, or 256 + the byte for
    the literal after an escape. ``is_ff``: the bytes that are 255 and act as codes.

    In each maximal run of 255 bytes every other byte from the first is an escape, and the
    byte after an escape is a literal."""
    n = len(data)
    codes = data.astype(np.int32)
    if not n or not is_ff.any():
        return codes
    run_start = is_ff & ~np.concatenate(([False], is_ff[:-1]))
    run_id = np.cumsum(run_start)
    first = np.flatnonzero(run_start)
    pos_in_run = np.arange(n) - first[np.maximum(run_id - 1, 0)]
    escape = is_ff & (pos_in_run % 2 == 0)
    if escape[-1]:
        raise CorruptFileError("FSST data ends with an escape byte")
    literal = np.concatenate(([False], escape[:-1]))
    return np.where(literal, 256 + codes, codes)


def fsst_decode_many(tables: list[bytes], table_of: np.ndarray, data: np.ndarray,
                     offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decompress FSST strings that use different symbol tables: string ``i`` (bytes
    ``offsets[i]..offsets[i + 1]`` of ``data``) uses ``tables[table_of[i]]``. Returns (bytes,
    int64 offsets) as :func:`fsst_decode` does, in one pass over all the strings."""
    offs = np.asarray(offsets, dtype=np.int64)
    if len(offs) and (offs[0] < 0 or offs[-1] > len(data) or (np.diff(offs) < 0).any()):
        raise CorruptFileError("FSST offsets point outside the data")
    parsed: list[tuple[np.ndarray, np.ndarray]] = []
    on = np.zeros(len(tables), dtype=bool)
    for i, table in enumerate(tables):
        table = bytes(table)
        if len(table) < 8 or int.from_bytes(table[:8], "little") >> 32 != 0x46535354:
            raise CorruptFileError("FSST symbol table has a bad magic number")
        on[i] = bool((int.from_bytes(table[:8], "little") >> 24) & 1)
        # A table whose encoder was switched off stores bytes as they are: literals only.
        parsed.append(fsst_symbols(table) if on[i] else _LITERALS)
    data = data[int(offs[0]): int(offs[-1])] if len(offs) else data[:0]
    # Which table each code uses (not needed when one table, switched on, serves all).
    per_byte = (np.repeat(np.asarray(table_of, dtype=np.int32), np.diff(offs))
                if len(tables) > 1 or not on.all() else None)
    if per_byte is None:
        rows = _expansion_rows(data, data == 255)
    else:
        on_byte = on[per_byte]
        rows = _expansion_rows(data, (data == 255) & on_byte)
        rows = np.where(on_byte, rows, 256 + rows)
        rows += 512 * per_byte
    offs = offs - (offs[0] if len(offs) else 0)
    parsed = parsed or [_LITERALS]
    if len(rows) <= SMALL_EXPAND_CODES:
        # A few codes: expand them with numpy (no Arrow tables to join).
        expand = np.concatenate([e for e, _ in parsed]) if len(parsed) > 1 else parsed[0][0]
        length = np.concatenate([n for _, n in parsed]) if len(parsed) > 1 else parsed[0][1]
        lens = length[rows]
        out = expand[rows][_arange8() < lens[:, None]]
        ends = np.concatenate(([0], np.cumsum(lens)))
        return out, ends[offs].astype(np.int64)
    return _expand_rows(parsed, rows, offs)


#: Up to this many codes, :func:`fsst_decode_many` expands with numpy rather than Arrow.
SMALL_EXPAND_CODES = 4096


@cache
def _arange8() -> np.ndarray:
    return np.arange(8)[None, :]


def _literal_table() -> tuple[np.ndarray, np.ndarray]:
    expand = np.zeros((512, 8), dtype=np.uint8)
    length = np.zeros(512, dtype=np.int64)
    expand[256:, 0] = np.arange(256, dtype=np.uint8)
    length[256:] = 1
    expand.setflags(write=False)
    length.setflags(write=False)
    return expand, length


#: The expansion table of stored-as-is bytes (rows 256 + b expand to b).
_LITERALS = _literal_table()


def _expansions(expand: np.ndarray, length: np.ndarray, large: bool) -> pa.Array:
    """Every code's expansion as an Arrow binary array (remembered for the parsed tables of
    :func:`fsst_symbols`, which are shared and read-only)."""
    key = (id(expand), large)
    hit = _EXPANSIONS.get(key)
    if hit is not None and hit[0] is expand:
        return hit[1]
    sym_offsets = np.concatenate(([0], np.cumsum(length))).astype(np.int64 if large else np.int32)
    sym_bytes = expand[np.arange(8)[None, :] < length[:, None]]
    arr = pa.Array.from_buffers(pa.large_binary() if large else pa.binary(), len(length),
                                [None, pa.py_buffer(sym_offsets), pa.py_buffer(sym_bytes)])
    if not expand.flags.writeable:  # a parsed, shared table: worth remembering
        with _EXPANSIONS_LOCK:
            if len(_EXPANSIONS) >= 512:
                _EXPANSIONS.pop(next(iter(_EXPANSIONS)))
            _EXPANSIONS[key] = (expand, arr)
    return arr


#: (id of a read-only expansion table, large) -> (that table, its expansions as Arrow).
#: Holding the table keeps its id from being reused while the entry lives.
_EXPANSIONS: dict[tuple[int, bool], tuple[np.ndarray, pa.Array]] = {}
_EXPANSIONS_LOCK = threading.Lock()


def _fsst_expand(expand: np.ndarray, length: np.ndarray, row: np.ndarray,
                 offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate the expansion of every code (row of ``expand``): Arrow's take on a binary
    array of the 512 expansions does it in one pass and also yields each code's offset."""
    return _expand_rows([(expand, length)], row, offsets)


def _expand_rows(tables: list[tuple[np.ndarray, np.ndarray]], row: np.ndarray,
                 offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_fsst_expand` over several parsed tables, row ``512 * t + r`` being row ``r``
    of table ``t``."""
    n = len(row)
    offs = np.asarray(offsets, dtype=np.int64)
    if len(offs) and (offs.min() < 0 or offs.max() > n):
        raise CorruptFileError("FSST offsets point outside the data")
    longest = max(int(length.max()) for _, length in tables) * n
    large = longest >= 2**31 - 1
    arrays = [_expansions(expand, length, large) for expand, length in tables]
    table = arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)
    taken = table.take(pa.array(row.astype(np.int32, copy=False)))
    code_ends = np.frombuffer(taken.buffers()[1], dtype=np.int64 if large else np.int32,
                              count=n + 1)
    total = int(code_ends[-1])
    out = np.frombuffer(taken.buffers()[2], dtype=np.uint8, count=total) if total else \
        np.zeros(0, np.uint8)
    return out, code_ends[offs].astype(np.int64)


#: FSST data of at least this many codes (and no escapes) is expanded two codes at a time.
PAIR_DECODE_CODES = 1 << 16


@lru_cache(maxsize=16)
def _fsst_pair_table(table: bytes) -> tuple[pa.Array, np.ndarray]:
    """The expansion of every pair of codes (no escapes) as a binary array indexed by
    ``first + 256 * second`` (two code bytes read as one little-endian u16), and the
    length of each single code's expansion.

    Built by one Arrow take of the single-code expansions in the order first, second of each
    pair: the taken bytes are all the pairs back to back, and every other taken offset is a
    pair boundary (about half a millisecond; a page of 2.1 strings has a table of its own).
    """
    expand, length = fsst_symbols(table)
    singles = _expansions(expand, length, False)
    pair = np.arange(1 << 16, dtype=np.int32)
    codes = np.empty(1 << 17, dtype=np.int32)
    codes[0::2] = pair & 255
    codes[1::2] = pair >> 8
    taken = singles.take(pa.array(codes))
    ends = np.frombuffer(taken.buffers()[1], dtype=np.int32, count=(1 << 17) + 1)
    arr = pa.Array.from_buffers(pa.binary(), 1 << 16,
                                [None, pa.py_buffer(np.ascontiguousarray(ends[0::2])),
                                 taken.buffers()[2]])
    return arr, length[:256]


def _fsst_expand_pairs(table: bytes, data: np.ndarray, offsets: np.ndarray,
                       ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_fsst_expand` for escape-free data, two codes per lookup (half the work)."""
    pairs, lens = _fsst_pair_table(table)
    n = len(data)
    offs = np.asarray(offsets, dtype=np.int64)
    if len(offs) and (offs.min() < 0 or offs.max() > n):
        raise CorruptFileError("FSST offsets point outside the data")
    if n & 1:
        # An odd count: pair the last code with the escape code, which expands to nothing
        # here (the data holds no escapes).
        codes = np.empty(n + 1, dtype=np.uint8)
        codes[:n] = data
        codes[n] = 255
    else:
        codes = np.ascontiguousarray(data)
    index = codes.view("<u2")
    if 16 * len(index) >= 2**31 - 1:
        pairs = pairs.cast(pa.large_binary())
    taken = pairs.take(pa.array(index))
    large = pa.types.is_large_binary(taken.type)
    pair_ends = np.frombuffer(taken.buffers()[1], dtype=np.int64 if large else np.int32,
                              count=len(index) + 1)
    total = int(pair_ends[-1])
    out = (np.frombuffer(taken.buffers()[2], dtype=np.uint8, count=total) if total
           else np.zeros(0, np.uint8))
    # A string boundary after code c lies at the end of pair c // 2, plus the expansion of
    # code c - 1 when c is odd (it opens the next pair). Computed for every boundary with
    # the odd ones' addend scaled by 1 and the others' by 0: cheaper than selecting them.
    # (At an even c, index c - 1 may be -1: a valid numpy index whose term is scaled away.)
    odd = (offs & 1).astype(pair_ends.dtype)
    ends = np.take(pair_ends, offs >> 1)
    ends += np.take(lens.astype(pair_ends.dtype), np.take(data, offs - 1, mode="wrap")) * odd
    return out, ends.astype(np.int64)


def _zstd_content_size(buf: bytes) -> int | None:
    if len(buf) < 6:
        return None
    fhd = buf[4]
    fcs_flag = fhd >> 6
    single = (fhd >> 5) & 1
    dict_flag = fhd & 3
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
    size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if size == 0 or len(buf) < pos + size:
        return None
    value = int.from_bytes(buf[pos: pos + size], "little")
    return value + 256 if size == 2 else value


def decompress(scheme: int, buf: bytes | memoryview | np.ndarray) -> bytes:
    """Undo general compression ``scheme`` (1 = lz4, 2 = zstd) of one buffer."""
    raw = buf.tobytes() if isinstance(buf, np.ndarray) else bytes(buf)
    if not raw:
        return b""
    try:
        if scheme == 1:
            if len(raw) < 4:
                raise CorruptFileError("lz4 buffer is truncated")
            size = int.from_bytes(raw[:4], "little")
            out = pa.Codec("lz4_raw").decompress(raw[4:], decompressed_size=size)
            if out.size != size:
                raise CorruptFileError("lz4 buffer decompressed to the wrong size")
            return out.to_pybytes()
        if scheme == 2:
            magic = raw[:4] == b"\x28\xb5\x2f\xfd"
            if magic and len(raw) >= 8 and not raw[4] & 0x08:
                found = _zstd_content_size(raw)
                if found is None:
                    raise UnsupportedFeatureError("zstd frame without a content size")
                size, body = found, raw
            else:
                if len(raw) < 8:
                    raise CorruptFileError("zstd buffer is truncated")
                size = int.from_bytes(raw[:8], "little")
                body = raw[8:]
            if size > (1 << 34):
                raise CorruptFileError("zstd buffer claims an absurd size")
            return pa.Codec("zstd").decompress(body, decompressed_size=size).to_pybytes()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(f"cannot decompress a buffer: {exc}") from exc
    raise UnsupportedFeatureError(f"general compression scheme {scheme} is not supported")


__all__ = ["BLOCK", "UINT", "decompress", "fastlanes_at", "fixed_at", "fsst_decode",
           "fsst_symbols", "fsst_yields_ascii", "gather_ranges", "range_indices", "span_array",
           "unpack_fastlanes", "words_at"]
