"""Compressive encodings of mini-block values, written (2.1+), and the choice among them.

* **Bit-packing** (``inline_bitpacking``) of 8/16/32/64-bit values (integers, floats, dates,
  times, dictionary indices...): values cut into chunks of 1024; every chunk stores its bit
  width ``w`` in one word of the value size ``T``, then ``w * 1024 / T`` words holding the
  chunk's values in the transposed "FastLanes" order (1024 / T lanes, each lane's ``T`` rows
  packed ``w`` bits apiece, least significant first). The width of a chunk is the bit length
  of the OR of its values (negative numbers therefore keep every bit), as pylance chooses it;
  the last chunk is padded with zeros to 1024 values. Used when it saves at least 5 %.
* **RLE** of the same values when the page has fewer runs than half its values (as pylance):
  chunks of 2048 values, each a buffer of run values and one of u8 run lengths.
* **Levels** (repetition / definition) bit-packed "out of line" at one width per page.
* **General compression** (``general``, zstd) of each chunk's variable-width value buffer
  (offsets and bytes): an 8-byte little-endian uncompressed size, then one zstd frame.
* **Dictionary** encoding of low-cardinality strings / binary: u32 indices (bit-packed in
  turn) into a dictionary stored once per page, chosen with pylance's size rule.

Pure and vectorised: whole chunks of the same width are packed together with shifts over
``(chunks, lanes)`` arrays; only the per-chunk codec calls loop, once per chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import pairwise

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import encodings_v2_1_pb2 as pb
from alance.format.v2.encode_values import FIXED, VARIABLE, ValueData, value_data
from alance.format.v2.kernels import range_indices

#: Values per bit-packed chunk (FastLanes blocks).
BITPACK_CHUNK = 1024
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
# Row groups of a lane are visited in this order (the reader's inverse).
_LANE_ORDER = (0, 4, 2, 6, 1, 5, 3, 7)
#: pylance's dictionary rule: the estimated dictionary-encoded size must stay under this share
#: of the plain size, and pages need at least ``_DICT_MIN_VALUES`` values.
DICT_SIZE_RATIO = 0.8
_DICT_MIN_VALUES = 100
_DICT_SAMPLE = 4096
#: Bit-packing must save at least 5 % (floats, whose exponent fills the top bits, save ~3 %:
#: not worth the time; pylance packs them anyway).
MAX_PACKED_SHARE = 0.95
#: Fewer runs of blocks of one width than this are bit-packed run by run (else width by width).
MAX_PACK_RUNS = 64
#: Field metadata naming the compression a column asks for (``zstd``, ``none``, ...) and
#: its level (pylance's keys).
COMPRESSION_META_KEY = "lance-encoding:compression"
COMPRESSION_LEVEL_META_KEY = "lance-encoding:compression-level"
#: zstd level of a column whose metadata asks for zstd without a level.
REQUESTED_ZSTD_LEVEL = 3
#: zstd level of general compression (1: fast, as good as higher levels on small chunks).
ZSTD_LEVEL = 1
#: Variable pages smaller than this are not worth compressing.
MIN_COMPRESS_BYTES = 4 * 1024


@dataclass
class CodedChunks:
    """Values already cut into chunks and encoded: chunk ``c`` holds values
    ``starts[c] .. starts[c + 1]``; value buffer ``b`` of chunk ``c`` is
    ``datas[b][offsets[b][c]:offsets[b][c + 1]]``."""

    starts: np.ndarray
    datas: list[np.ndarray]  # uint8, one per value buffer
    offsets: list[np.ndarray]  # int64, one more than chunks
    encoding: pb.CompressiveEncoding

    @property
    def sizes(self) -> list[np.ndarray]:
        """Bytes of every chunk's value buffers."""
        return [np.diff(o) for o in self.offsets]


# -- bit-packing ------------------------------------------------------------------------------
@cache
def _row_order(t: int) -> np.ndarray:
    """For position ``p`` of ``t`` rows of a block laid out (rows, lanes), the lane row that
    value index ``p * lanes + lane`` belongs to."""
    groups = t // 8
    block = [_LANE_ORDER[g] * t // 64 for g in range(groups)]
    inverse = np.argsort(np.array(block, dtype=np.int64))
    return np.array([inverse[j] * 8 + s for s in range(8) for j in range(groups)],
                    dtype=np.int64)


@cache
def _pack_plan(t: int, w: int) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                                         np.ndarray, np.ndarray, np.ndarray]:
    """How ``t``-bit words of width ``w`` are filled. Lane row ``r`` starts at bit ``r * w``,
    in word ``r * w // t``. Slot ``j`` lists, for the words where at least ``j + 1`` rows
    start, those words, the position (in value order) of their ``j``-th row and its left
    shift; then the rows spilling into the next word: their position, that word and the
    right shift bringing their high bits down."""
    dtype = _UINT[t]
    position = np.argsort(_row_order(t))  # lane row r is value row position[r]
    rows = np.arange(t, dtype=np.int64)
    word, shift = divmod(rows * w, t)
    first = np.searchsorted(word, np.arange(w), side="left")
    starting = np.append(first[1:], t) - first
    slots = []
    for j in range(int(starting.max())):
        words = np.flatnonzero(starting > j)
        r = first[words] + j
        slots.append((words, position[r], shift[r].astype(dtype)))
    spill = np.flatnonzero(shift + w > t)
    return slots, position[spill], word[spill] + 1, (t - shift[spill]).astype(dtype)


def fastlanes_pack(values: np.ndarray, w: int, out: np.ndarray | None = None) -> np.ndarray:
    """Pack ``(k, 1024)`` unsigned ``T``-bit values (each below ``2 ** w``) into
    ``(k, w * 1024 / T)`` words, FastLanes order (what :func:`~.kernels.unpack_fastlanes`
    undoes). ``out``, if given, is a ``(k, w * 1024 / T)`` view (rows may lie apart) to pack
    into, and is returned."""
    k = values.shape[0]
    dtype = values.dtype.type
    t = values.dtype.itemsize * 8
    lanes = BITPACK_CHUNK // t
    if t == 64 and 0 < w <= WORDS_PACK_MAX_WIDTH and k:
        if out is None:
            out = np.empty((k, w * lanes), dtype=dtype)
        words = out.view()
        words.shape = (k, w, lanes)  # (raises rather than copy: the packing must land in out)
        _pack_by_words(values.reshape(k, t, lanes), w, words)
        return out
    packed = _pack_by_slots(values, w)
    if out is None:
        return packed
    out[...] = packed
    return out


def _pack_by_slots(values: np.ndarray, w: int) -> np.ndarray:
    """:func:`fastlanes_pack` a slot at a time over all the blocks (see :func:`_pack_plan`)."""
    k = values.shape[0]
    dtype = values.dtype.type
    t = values.dtype.itemsize * 8
    lanes = BITPACK_CHUNK // t
    if w == 0 or k == 0:
        return np.zeros((k, w * lanes), dtype=dtype)
    grid = values.reshape(k, t, lanes)  # (value row, lane)
    if w == t:
        return np.take(grid, np.argsort(_row_order(t)), axis=1).reshape(k, t * lanes)
    slots, spill_pos, spill_word, spill_shift = _pack_plan(t, w)
    _, pos, shift = slots[0]  # every word has a first row
    out = np.take(grid, pos, axis=1)
    out <<= shift[None, :, None]
    for words, pos, shift in slots[1:]:
        out[:, words, :] |= np.take(grid, pos, axis=1) << shift[None, :, None]
    if len(spill_pos):
        out[:, spill_word, :] |= np.take(grid, spill_pos, axis=1) >> spill_shift[None, :, None]
    return out.reshape(k, w * lanes)


@cache
def _word_plan(t: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows that make up each packed word, word after word: for word ``i``, first the
    row spilling into it from word ``i - 1`` (if any), then the rows starting in it. Returns
    their positions (value order), left and right shifts (``(1, m, lanes)``, each row's bits
    moved to where they lie in the word: a spilling row's high bits come down, the others'
    go up) and the index of each word's first contribution."""
    position = np.argsort(_row_order(t))
    word, shift = divmod(np.arange(t, dtype=np.int64) * w, t)
    rows: list[int] = []
    left: list[int] = []
    right: list[int] = []
    first: list[int] = []
    for i in range(w):
        first.append(len(rows))
        prev = np.flatnonzero(word == i - 1)
        if len(prev) and shift[prev[-1]] + w > t:  # the last row of word i - 1 spills
            rows.append(int(position[prev[-1]]))
            left.append(0)
            right.append(int(t - shift[prev[-1]]))
        for r in np.flatnonzero(word == i).tolist():
            rows.append(int(position[r]))
            left.append(int(shift[r]))
            right.append(0)
    lanes = BITPACK_CHUNK // t
    dtype = _UINT[t]

    def per_lane(shifts: list[int]) -> np.ndarray:
        return np.ascontiguousarray(np.repeat(np.array(shifts, dtype=dtype)[None, :, None],
                                              lanes, 2))

    return (np.array(rows, dtype=np.int64), per_lane(left), per_lane(right),
            np.array(first, dtype=np.int64))


#: 64-bit words are packed by word (:func:`_pack_by_words`) up to this width, by slot above
#: it: measured on 2M values, by word is 1.2-1.9x faster up to 21 bits, by slot 1.15-1.3x
#: faster at 32, 40, 48, 51, 60 and 63 bits (by word wins again at 56 and 62, by 10-15%).
WORDS_PACK_MAX_WIDTH = 24
#: Blocks :func:`_pack_by_words` packs per pass (64 blocks of 64-bit values: 512 KiB).
PACK_TILE_BLOCKS = 64


def _pack_by_words(grid: np.ndarray, w: int, out: np.ndarray) -> None:
    """Pack ``grid`` (``(k, t, lanes)``) into ``out`` (``(k, w, lanes)``) a tile of blocks at
    a time: every row that touches a word, in word order (one take), shifted into place, then
    each word's rows ORed together (``bitwise_or.reduceat``). For narrow widths of 64-bit
    words this beats slots over all the blocks (see ``WORDS_PACK_MAX_WIDTH``); for narrower
    words it does not."""
    k, t, lanes = grid.shape
    rows, left, right, first = _word_plan(t, w)
    tmp = np.empty((min(PACK_TILE_BLOCKS, k), len(rows), lanes), dtype=grid.dtype)
    for i in range(0, k, PACK_TILE_BLOCKS):
        part = grid[i: i + PACK_TILE_BLOCKS]
        moved = tmp[: len(part)]
        # (mode "clip": the rows are the plan's own; numpy's default copies once more)
        np.take(part, rows, axis=1, out=moved, mode="clip")
        moved <<= left
        moved >>= right
        np.bitwise_or.reduceat(moved, first, axis=1, out=out[i: i + PACK_TILE_BLOCKS])


def _bit_lengths(ors: np.ndarray, t: int) -> np.ndarray:
    """Bit length of every value of ``ors`` (unsigned, ``t`` bits)."""
    powers = np.left_shift(np.ones(t, dtype=np.uint64), np.arange(t, dtype=np.uint64))
    return np.searchsorted(powers, ors.astype(np.uint64), side="right").astype(np.int64)


def bitpack(raw: np.ndarray, width: int) -> CodedChunks | None:
    """Bit-pack ``n`` values of ``width`` bytes (``raw``: ``(n, width)`` uint8, little endian)
    in chunks of 1024; None when that saves under 5 % or the width cannot be packed."""
    t = width * 8
    if t not in _UINT:
        return None
    n = raw.shape[0]
    if n == 0:
        return None
    dtype = _UINT[t]
    k = -(-n // BITPACK_CHUNK)
    flat = np.ascontiguousarray(raw).view(f"<u{width}").reshape(-1)
    if n % BITPACK_CHUNK == 0 and flat.ctypes.data % width == 0:
        blocks = flat.view(dtype).reshape(k, BITPACK_CHUNK)  # (read only: no copy needed)
    else:  # the last block padded with zeros
        vals = np.empty(k * BITPACK_CHUNK, dtype=dtype)
        vals[:n] = flat
        vals[n:] = 0
        blocks = vals.reshape(k, BITPACK_CHUNK)
    widths = _bit_lengths(np.bitwise_or.reduce(blocks, axis=1), t)
    lanes = BITPACK_CHUNK // t
    words = 1 + widths * lanes  # per chunk: the width word, then the packed words
    if int(words.sum()) > MAX_PACKED_SHARE * n:
        return None
    word_off = np.concatenate(([0], np.cumsum(words))).astype(np.int64)
    out = np.empty(int(word_off[-1]), dtype=dtype)  # (every word is written below)
    out[word_off[:-1]] = widths.astype(dtype)
    # Runs of blocks of one width (a sequence or a slowly growing column has a few long
    # ones): each is a slice of the blocks packed into a strided view of ``out``.
    run_at = np.flatnonzero(widths[1:] != widths[:-1]) + 1
    if len(run_at) < MAX_PACK_RUNS:
        bounds = [0, *run_at.tolist(), k]
        for a, b in pairwise(bounds):
            w = int(widths[a])
            if w:
                rows = out[int(word_off[a]): int(word_off[b])].reshape(b - a, 1 + w * lanes)
                fastlanes_pack(blocks[a:b], w, rows[:, 1:])
    else:  # widths that vary block to block: each width's blocks gathered and scattered
        for w in np.unique(widths).tolist():
            if w == 0:
                continue
            sel = np.flatnonzero(widths == w)
            packed = fastlanes_pack(blocks[sel], int(w))
            idx = (word_off[sel] + 1)[:, None] + np.arange(w * lanes, dtype=np.int64)
            out[idx] = packed
    starts = np.arange(0, n, BITPACK_CHUNK, dtype=np.int64)
    encoding = pb.CompressiveEncoding(
        inline_bitpacking=pb.InlineBitpacking(uncompressed_bits_per_value=t))
    return CodedChunks(starts, [out.view(np.uint8)], [word_off * width], encoding)


# -- run-length encoding ----------------------------------------------------------------------
#: Values per RLE chunk (every chunk but the last): runs of 1..255 values never cross chunks,
#: so a chunk holds at most 2048 runs (18 KiB of 64-bit values and lengths).
RLE_CHUNK = 2048
#: RLE is chosen when the page has fewer runs than this share of its values (as pylance).
RLE_THRESHOLD = 0.5
#: Values per window :func:`rle` samples (three windows) before it counts runs in a page.
RLE_SAMPLE = 4096


def rle(raw: np.ndarray, width: int) -> CodedChunks | None:
    """Run-length encode ``n`` values of ``width`` bytes (``(n, width)`` uint8): per chunk of
    2048 values, a buffer of run values and one of u8 run lengths (runs longer than 255
    split). None when the page has too many runs for RLE to pay."""
    t = width * 8
    n = raw.shape[0]
    if t not in _UINT or n == 0:
        return None
    vals = np.ascontiguousarray(raw).view(f"<u{width}").reshape(-1)
    if n >= 4 * RLE_SAMPLE:
        # A few windows first: values that change nearly every time in all of them are
        # far from RLE's threshold, and the whole page need not be compared.
        changes = 0
        for at in (0, n // 2, n - RLE_SAMPLE):
            w = vals[at: at + RLE_SAMPLE]
            changes += int(np.count_nonzero(w[1:] != w[:-1]))
        if changes >= 0.9 * 3 * (RLE_SAMPLE - 1):
            return None
    change = np.empty(n, dtype=bool)
    change[0] = True
    np.not_equal(vals[1:], vals[:-1], out=change[1:])
    if int(change.sum()) >= RLE_THRESHOLD * n:
        return None
    change[::RLE_CHUNK] = True  # runs restart at every chunk
    run_start = np.flatnonzero(change)
    run_len = np.diff(np.append(run_start, n))
    pieces = (run_len + 254) // 255  # runs of at most 255
    piece_run = np.repeat(np.arange(len(run_start), dtype=np.int64), pieces)
    first_piece = np.concatenate(([0], np.cumsum(pieces)[:-1])).astype(np.int64)
    k = np.arange(len(piece_run), dtype=np.int64) - first_piece[piece_run]
    piece_len = np.minimum(run_len[piece_run] - 255 * k, 255).astype(np.uint8)
    piece_start = run_start[piece_run] + 255 * k
    piece_vals = vals[piece_start]
    starts = np.arange(0, n, RLE_CHUNK, dtype=np.int64)
    bounds = np.searchsorted(piece_start, np.append(starts, n)).astype(np.int64)
    encoding = pb.CompressiveEncoding(rle=pb.Rle(
        values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=t)),
        run_lengths=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=8))))
    return CodedChunks(starts, [piece_vals.view(np.uint8), piece_len],
                       [bounds * width, bounds], encoding)


def bitpackable(vd: ValueData) -> bool:
    """Whether ``vd`` holds plain 8/16/32/64-bit values (not lists, structs or bits)."""
    return (vd.kind == FIXED and not vd.dims and vd.packed_bits is None
            and vd.width in (1, 2, 4, 8))


def pack_levels(levels: np.ndarray, i0: np.ndarray, i1: np.ndarray,
                ) -> tuple[pb.CompressiveEncoding, list[np.ndarray]] | None:
    """Repetition / definition levels (uint16) of mini-block chunks ``[i0[c], i1[c])``,
    bit-packed "out of line" at one width for the page: every 1024 levels of a chunk one
    FastLanes block; a chunk's last partial block is padded to 1024 levels and packed when
    that is smaller, else kept as plain u16 (readers tell the two apart by the size).
    Returns the encoding and every chunk's bytes, or None (a page of at most 1024 levels)."""
    n = len(levels)
    if n <= BITPACK_CHUNK:
        return None
    t = 16
    w = int(levels.max()).bit_length()
    if w == 0 or w >= t:
        return None
    counts = (i1 - i0).astype(np.int64)
    full = counts // BITPACK_CHUNK
    tail = counts % BITPACK_CHUNK
    padded = (tail > 0) & (w * (BITPACK_CHUNK - tail) < (t - w) * tail)
    blocks_per = full + padded
    total_blocks = int(blocks_per.sum())
    first_block = np.concatenate(([0], np.cumsum(blocks_per))).astype(np.int64)
    grid = np.zeros(total_blocks * BITPACK_CHUNK, dtype=np.uint16)
    if not tail[:-1].any():  # whole blocks but at the end: the levels as they are
        grid[: min(n, len(grid))] = levels[: len(grid)]
    else:  # source start and length of every block, chunk by chunk
        chunk_of = np.repeat(np.arange(len(counts), dtype=np.int64), blocks_per)
        within = np.arange(total_blocks, dtype=np.int64) - first_block[chunk_of]
        src = i0[chunk_of] + within * BITPACK_CHUNK
        lens = np.where(within < full[chunk_of], BITPACK_CHUNK, tail[chunk_of])
        grid[range_indices(np.arange(total_blocks, dtype=np.int64) * BITPACK_CHUNK, lens)] = \
            levels[range_indices(src, lens)]
    packed = fastlanes_pack(grid.reshape(total_blocks, BITPACK_CHUNK), w).view(np.uint8)
    pieces: list[np.ndarray] = []
    raw_tail = (tail > 0) & ~padded
    for c, (b0, b1) in enumerate(zip(first_block[:-1].tolist(), first_block[1:].tolist(),
                                     strict=True)):
        body = packed[b0:b1].reshape(-1)
        if raw_tail[c]:
            end = int(i1[c])
            body = np.concatenate([body, levels[end - int(tail[c]): end].view(np.uint8)])
        pieces.append(body)
    encoding = pb.CompressiveEncoding(out_of_line_bitpacking=pb.OutOfLineBitpacking(
        uncompressed_bits_per_value=t,
        values=pb.CompressiveEncoding(flat=pb.Flat(bits_per_value=w))))
    return encoding, pieces


# -- general compression ----------------------------------------------------------------------
def zstd_chunks(data: np.ndarray, offsets: np.ndarray, level: int = ZSTD_LEVEL,
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """zstd-compress every chunk ``data[offsets[c]:offsets[c + 1]]`` (8-byte size prefix);
    None when the result is not smaller."""
    codec = pa.Codec("zstd", level)
    parts: list[bytes] = []
    sizes = np.empty(len(offsets) - 1, dtype=np.int64)
    bounds = offsets.tolist()
    for c in range(len(bounds) - 1):
        a, b = bounds[c], bounds[c + 1]
        body = codec.compress(data[a:b], asbytes=True)
        parts.append((b - a).to_bytes(8, "little"))
        parts.append(body)
        sizes[c] = 8 + len(body)
    total = int(sizes.sum())
    if total >= int(offsets[-1] - offsets[0]):
        return None
    out = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return out, np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)


def general(inner: pb.CompressiveEncoding, level: int = ZSTD_LEVEL,
            ) -> pb.CompressiveEncoding:
    """``inner`` wrapped in zstd general compression."""
    return pb.CompressiveEncoding(general=pb.General(
        compression=pb.BufferCompression(scheme=pb.COMPRESSION_ALGORITHM_ZSTD,
                                         level=level),
        values=inner))


# -- dictionary -------------------------------------------------------------------------------
def maybe_dictionary(values: pa.Array, vd: ValueData) -> ValueData:
    """``vd`` as u32 indices into a dictionary when that is smaller by pylance's rule
    (dictionary bytes plus its offsets plus 4 bytes per value under 80 % of the plain bytes
    and offsets); else ``vd`` unchanged. A sample is checked first, so high-cardinality
    pages are not hashed in full."""
    if (vd.kind != VARIABLE or vd.dictionary is not None or vd.n < _DICT_MIN_VALUES
            or vd.offset_bytes != 4):  # large types: readers want 64-bit dictionary offsets
        return vd
    n = vd.n
    ob = vd.offset_bytes
    plain = len(vd.data) + ob * n
    avg = len(vd.data) // n
    limit = DICT_SIZE_RATIO * plain

    def small_enough(card: int) -> bool:
        return card * (avg + ob) + n * 4 < limit

    if n > _DICT_SAMPLE:
        step = n // _DICT_SAMPLE
        sample = values.take(pa.array(np.arange(0, n, step, dtype=np.int64)))
        seen = int(pc.count_distinct(sample, mode="all").as_py())
        # A sample this varied means a cardinality far too high: don't hash the page.
        if seen > len(sample) // 4 or not small_enough(seen):
            return vd
    encoded = pc.dictionary_encode(values)
    card = len(encoded.dictionary)
    if not small_enough(card) or card >= 1 << 31:
        return vd
    indices = encoded.indices
    if indices.null_count:
        indices = indices.fill_null(0)
    idx = np.asarray(indices).astype("<u4").view(np.uint8).reshape(n, 4)
    return ValueData(FIXED, n, idx, 4, dictionary=value_data(encoded.dictionary))


__all__ = ["BITPACK_CHUNK", "RLE_CHUNK", "CodedChunks", "bitpack", "bitpackable",
           "fastlanes_pack", "general", "maybe_dictionary", "pack_levels", "rle", "zstd_chunks"]
