"""Page layouts of 2.1+ files, written: mini-block, full-zip and constant.

:func:`encode_page` picks a layout for one page of one leaf column (a :class:`Shredded`) and
returns its buffers and its ``PageLayout`` message:

* **mini-block** for small values (under 256 bytes each, as upstream decides): values cut
  into chunks of a power-of-two number of values (at most 4096, the last chunk excepted) and
  at most 32 KiB each, levels stored beside them in the chunk; values and levels compressed as
  :mod:`.encode_compress` chooses (bit-packing, RLE, dictionary, zstd);
* **full-zip** for large values, or when a chunk cannot be kept under 32 KiB (a long run of
  empty lists): levels and values of every item zipped into one buffer, plus an index of
  where each row starts;
* **constant** when no item carries a value (all null, or only null / empty lists), and
  (2.2) when every row holds one same fixed-width value.

Pure: arrays in, bytes out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.encode_compress import (
    COMPRESSION_LEVEL_META_KEY,
    COMPRESSION_META_KEY,
    MIN_COMPRESS_BYTES,
    REQUESTED_ZSTD_LEVEL,
    ZSTD_LEVEL,
    CodedChunks,
    bitpack,
    bitpackable,
    general,
    maybe_dictionary,
    pack_levels,
    rle,
    zstd_chunks,
)
from alance.format.v2.encode_fullzip import encode_fullzip
from alance.format.v2.encode_levels import Shredded
from alance.format.v2.encode_values import (
    BOOL,
    FIXED,
    NULLS,
    VARIABLE,
    Buffer,
    EncodedPage,
    ValueData,
    dictionary_block,
    flat,
    value_data,
    value_encoding,
)
from alance.format.v2.kernels import range_indices

ALIGN = 8
MAX_CHUNK_BYTES = 32 * 1024
MAX_CHUNK_VALUES = 4096
#: Values at least this large go to full-zip pages.
FULLZIP_MIN_VALUE = 256
_TARGET_CHUNK_BYTES = 4 * 1024  # small chunks keep random access cheap, as upstream
#: Variable-width chunks that get compressed are larger (compression works better).
_COMPRESSED_CHUNK_BYTES = 24 * 1024
#: Variable-width chunks when zstd is asked for explicitly (tried first; must still fit once
#: compressed).
_REQUESTED_CHUNK_BYTES = 96 * 1024
_ZEROS = np.zeros(ALIGN, dtype=np.uint8)
#: Times a page that cannot be stored mini-block is halved before it goes full-zip.
_MAX_SPLITS = 6

def _pad(n: np.ndarray | int) -> np.ndarray | int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def encode_pages(sh: Shredded, *, large_chunks: bool, depth: int = 0) -> list[EncodedPage]:
    """Encode the leaf column ``sh`` (some whole rows) as one page, or as several.

    A long run of empty or null lists cannot share a mini-block chunk with a value: such
    pages are cut in halves (by rows) a few times, then stored full-zip; booleans, which have
    no full-zip form, are cut down to single rows if need be.
    """
    vd = value_data(sh.values)
    if vd.kind == NULLS or vd.n == 0 or _simple_all_null(sh):
        return [_constant(sh)]
    zippable = _zippable(vd)
    if zippable and vd.max_size >= FULLZIP_MIN_VALUE:
        return [encode_fullzip(sh, vd)]
    if large_chunks and _all_equal(sh, vd):
        return [_constant(sh, bytes(vd.data[0]))]
    asked = requested_compression(sh.field)
    page = _miniblock(sh, maybe_dictionary(sh.values, vd)
                      if vd.kind == VARIABLE and asked is None else vd, large_chunks)
    if page is not None:
        return [page]
    if zippable and (depth >= _MAX_SPLITS or sh.num_rows < 2):
        return [encode_fullzip(sh, vd)]
    if sh.num_rows < 2:
        raise UnsupportedFeatureError(
            f"column {sh.field.name!r}: a value too large for a mini-block chunk, or a row "
            "with too many empty or null lists, of a type that has no full-zip form "
            "(booleans, nested fixed-size lists)")
    half = sh.num_rows // 2
    return [*encode_pages(_rows(sh, 0, half), large_chunks=large_chunks, depth=depth + 1),
            *encode_pages(_rows(sh, half, sh.num_rows), large_chunks=large_chunks,
                          depth=depth + 1)]


def _rows(sh: Shredded, lo: int, hi: int) -> Shredded:
    """Rows ``lo..hi`` of a shredded column."""
    starts = np.append(sh.row_starts(), sh.num_items)
    i0, i1 = int(starts[lo]), int(starts[hi])
    if sh.visible is None:
        v0, v1 = i0, i1
        visible = None
    else:
        before = np.concatenate(([0], np.cumsum(sh.visible)))
        v0, v1 = int(before[i0]), int(before[i1])
        visible = sh.visible[i0:i1]
    return replace(sh, rep=None if sh.rep is None else sh.rep[i0:i1],
                   defs=None if sh.defs is None else sh.defs[i0:i1],
                   values=sh.values.slice(v0, v1 - v0), visible=visible, num_rows=hi - lo)


def _zippable(vd: ValueData) -> bool:
    """Whether full-zip can hold these values: whole bytes, at most one list level."""
    return vd.kind != BOOL and len(vd.dims) <= 1 and vd.leaf_bits != 1


def _simple_all_null(sh: Shredded) -> bool:
    return (sh.rep is None and sh.defs is not None and len(sh.layers) == 1
            and bool((sh.defs != 0).all()))


# -- constant ---------------------------------------------------------------------------------
def _all_equal(sh: Shredded, vd: ValueData) -> bool:
    """Whether every row holds one same (valid, fixed-width) value: a constant page (2.2)."""
    if (sh.rep is not None or sh.defs is not None or len(sh.layers) != 1
            or not bitpackable(vd) or vd.dictionary is not None):
        return False
    vals = np.ascontiguousarray(vd.data).view(f"<u{vd.width}").reshape(-1)
    if (vals[:: max(1, len(vals) // 64)] != vals[0]).any():  # (most pages: decided here)
        return False
    return bool((vals == vals[0]).all())


def _constant(sh: Shredded, value: bytes | None = None) -> EncodedPage:
    layout = pb.ConstantLayout(layers=sh.layers)
    if value is not None:
        layout.inline_value = value
    buffers: list[Buffer] = []
    if not (sh.rep is None and len(sh.layers) == 1):
        rep = b"" if sh.rep is None else sh.rep.astype("<u2").tobytes()
        defs = b"" if sh.defs is None else sh.defs.astype("<u2").tobytes()
        buffers = [rep, defs]
    return EncodedPage(buffers, pb.PageLayout(constant_layout=layout), sh.num_rows)


# -- mini-block -------------------------------------------------------------------------------
def _value_buffer_sizes(vd: ValueData, v0: np.ndarray, v1: np.ndarray) -> list[np.ndarray]:
    """Unpadded size of every value buffer of every chunk ``[v0, v1)``."""
    count = v1 - v0
    if vd.kind == BOOL:
        return [(count + 7) // 8]
    if vd.kind == VARIABLE:
        assert vd.offsets is not None
        data = vd.offsets[v1] - vd.offsets[v0]
        ob = vd.offset_bytes
        return [ob * (count + 1) + (data + ob - 1) // ob * ob]  # padded to the offset width
    sizes = []
    items = count
    for dim, valid in zip(vd.dims, vd.valids, strict=True):  # item bitmaps, outermost first
        items = items * dim
        if valid is not None:
            sizes.append((items + 7) // 8)
    sizes.append((items + 7) // 8 if vd.leaf_bits == 1 else count * vd.width)
    return sizes


def _chunk_sizes(vd: ValueData, v0: np.ndarray, v1: np.ndarray, i0: np.ndarray,
                 i1: np.ndarray, n_levels: int, word: int,
                 ) -> tuple[np.ndarray, list[np.ndarray]]:
    bufs = _value_buffer_sizes(vd, v0, v1)
    header = _pad(2 + 2 * n_levels + word * len(bufs))
    total = header + n_levels * _pad(2 * (i1 - i0))
    for b in bufs:
        total = total + _pad(b)
    return np.asarray(total, dtype=np.int64), bufs


def _item_bounds(starts: np.ndarray, value_item: np.ndarray | None, n_items: int,
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Items of chunk ``c``: from the item of its first value (item 0 for the first chunk)
    to the item of the next chunk's first value."""
    first = starts if value_item is None else value_item[starts]
    first = first.copy()
    if len(first):
        first[0] = 0
    return first, np.append(first[1:], n_items)


def _plan_chunks(sh: Shredded, vd: ValueData, value_item: np.ndarray | None, n_levels: int,
                 word: int, target: int = _TARGET_CHUNK_BYTES) -> np.ndarray | None:
    """First value of every chunk (of about ``target`` bytes), or None if some value cannot
    fit a chunk."""
    n = vd.n
    est_total = int(sum(int(s.sum()) for s in _value_buffer_sizes(
        vd, np.array([0]), np.array([n])))) + 2 * n_levels * sh.num_items
    per_value = max(est_total / max(n, 1), 1 / 8)
    k = int(min(MAX_CHUNK_VALUES, max(2, target // per_value)))
    k = 1 << (k.bit_length() - 1)
    starts = np.arange(0, n, k, dtype=np.int64)
    while True:
        v1 = np.append(starts[1:], n)
        i0, i1 = _item_bounds(starts, value_item, sh.num_items)
        sizes, _ = _chunk_sizes(vd, starts, v1, i0, i1, n_levels, word)
        over = (sizes > MAX_CHUNK_BYTES) | (i1 - i0 > 0xFFFF)
        if n_levels:
            over |= 2 * (i1 - i0) > 0xFFFF
        if not over.any():
            return starts
        counts = v1 - starts
        if (counts[over] <= 2).any():
            return None  # only the last chunk may hold a single value
        c = counts[over]
        # Halve power-of-two chunks; cut the last one at a power of two below its size.
        half = np.left_shift(1, np.floor(np.log2(np.maximum(c - 1, 1))).astype(np.int64))
        starts = np.union1d(starts, starts[over] + half)


def _miniblock(sh: Shredded, vd: ValueData, large: bool) -> EncodedPage | None:
    n_levels = int(sh.rep is not None) + int(sh.defs is not None)
    word = 4 if large else 2
    value_item = None if sh.visible is None else np.flatnonzero(sh.visible)
    coded = _coded(sh, vd, value_item, n_levels, word)
    if coded is not None:
        starts = coded.starts
    else:
        planned = _plan_chunks(sh, vd, value_item, n_levels, word)
        if planned is None:
            return None
        starts = planned
    n = vd.n
    v1 = np.append(starts[1:], n)
    i0, i1 = _item_bounds(starts, value_item, sh.num_items)
    if coded is not None:
        sizes, bufs = _coded_sizes(coded, i0, i1, n_levels, word), coded.sizes
    else:
        sizes, bufs = _chunk_sizes(vd, starts, v1, i0, i1, n_levels, word)
    rep = None if sh.rep is None else _levels(sh.rep, i0, i1)
    defs = None if sh.defs is None else _levels(sh.defs, i0, i1)
    level_sizes = [lv[2] for lv in (rep, defs) if lv is not None]
    if level_sizes:  # the planned sizes assumed plain u16 levels
        sizes = sizes - n_levels * _pad(2 * (i1 - i0))
        for ls in level_sizes:
            sizes = sizes + _pad(ls)
    heads = _chunk_headers(i1 - i0 if n_levels else np.zeros(len(starts), np.int64),
                           level_sizes, bufs, word)
    # Every chunk: header, levels, value buffers, each padded to 8 bytes.
    head_width = heads.shape[1]
    columns: list[_Parts] = [_Ranges(np.ascontiguousarray(heads).reshape(-1),
                                     np.arange(len(starts), dtype=np.int64) * head_width,
                                     np.full(len(starts), head_width, dtype=np.int64))]
    for lv in (rep, defs):
        if lv is not None:
            columns.append((lv[1], lv[2]))
    if coded is not None:
        for data, at, size in zip(coded.datas, coded.offsets, coded.sizes, strict=True):
            columns.append(_Ranges(data, at[:-1], size))
    elif vd.kind == FIXED and vd.leaf_bits != 1 and all(v is None for v in vd.valids):
        raw, w = _raw_values(vd), vd.width  # plain bytes: slices of the values
        columns.append(_Ranges(raw.reshape(-1), starts * w, bufs[0]))
    else:
        raw_values = _raw_values(vd)
        per_chunk = [_chunk_values(vd, raw_values, a, b)
                     for a, b in zip(starts.tolist(), v1.tolist(), strict=True)]
        for b, size in enumerate(bufs):
            columns.append(([parts[b] for parts in per_chunk], size))
    chunks = _interleave(columns)
    counts = v1 - starts
    logs = np.floor(np.log2(np.maximum(counts, 1))).astype(np.int64)
    logs[-1] = 0
    meta = ((sizes // ALIGN - 1) << 4) | logs
    meta_buf = meta.astype("<u4" if large else "<u2").tobytes()
    layout = pb.MiniBlockLayout(
        layers=sh.layers, num_buffers=len(bufs), num_items=n, has_large_chunk=large,
        value_compression=value_encoding(vd) if coded is None else coded.encoding)
    if rep is not None:
        layout.rep_compression.CopyFrom(rep[0])
    if defs is not None:
        layout.def_compression.CopyFrom(defs[0])
    buffers: list[Buffer] = [meta_buf, chunks]
    if vd.dictionary is not None:
        enc, dict_buf = dictionary_block(vd.dictionary)
        layout.dictionary.CopyFrom(enc)
        layout.num_dictionary_items = vd.dictionary.n
        buffers.append(dict_buf)
    if rep is not None:
        layout.repetition_index_depth = 1
        buffers.append(_repetition_index(sh, i0, i1))
    return EncodedPage(buffers, pb.PageLayout(mini_block_layout=layout), sh.num_rows)


def _coded_sizes(coded: CodedChunks, i0: np.ndarray, i1: np.ndarray, n_levels: int,
                 word: int) -> np.ndarray:
    """Padded size of every chunk holding one coded value buffer."""
    header = _pad(2 + 2 * n_levels + word * len(coded.datas))
    total = header + n_levels * _pad(2 * (i1 - i0))
    for size in coded.sizes:
        total = total + _pad(size)
    return np.asarray(total, dtype=np.int64)


def _coded(sh: Shredded, vd: ValueData, value_item: np.ndarray | None, n_levels: int,
           word: int) -> CodedChunks | None:
    """The values compressed (bit-packed, or zstd on variable-width chunks) when that saves
    space and every chunk still fits its limits; None to store them uncompressed."""
    coded: CodedChunks | None = None
    asked = requested_compression(sh.field)
    if asked == "none":
        return None
    level = asked if isinstance(asked, int) else ZSTD_LEVEL
    if bitpackable(vd):
        return _fitting(rle(vd.data, vd.width) or bitpack(vd.data, vd.width), sh, value_item,
                        n_levels, word)
    if vd.kind == VARIABLE and (asked is not None or len(vd.data) + vd.offset_bytes * vd.n
                                >= MIN_COMPRESS_BYTES):
        # Asked for zstd, the user wants size: bigger chunks compress better (as long as each
        # still fits a mini-block once compressed; else the usual size).
        for chunk_bytes in ((_REQUESTED_CHUNK_BYTES, _COMPRESSED_CHUNK_BYTES)
                            if isinstance(asked, int) else (_COMPRESSED_CHUNK_BYTES,)):
            starts = _plan_chunks(sh, vd, value_item, n_levels, word, chunk_bytes)
            if starts is None:
                continue
            packed = zstd_chunks(*_variable_chunk_bytes(vd, starts), level)
            if packed is not None:
                coded = _fitting(CodedChunks(starts, [packed[0]], [packed[1]],
                                             general(value_encoding(vd), level)),
                                 sh, value_item, n_levels, word)
                if coded is not None:
                    return coded
    return coded


def _fitting(coded: CodedChunks | None, sh: Shredded, value_item: np.ndarray | None,
             n_levels: int, word: int) -> CodedChunks | None:
    """``coded`` if every chunk fits a mini-block's limits, else None."""
    if coded is None:
        return None
    i0, i1 = _item_bounds(coded.starts, value_item, sh.num_items)
    sizes = _coded_sizes(coded, i0, i1, n_levels, word)
    if ((sizes > MAX_CHUNK_BYTES) | (i1 - i0 > 0xFFFF)).any() or (
            n_levels and (2 * (i1 - i0) > 0xFFFF).any()):
        return None
    return coded


def requested_compression(field: LanceField) -> int | str | None:
    """What the field's metadata asks of its values: a zstd level, ``"none"`` (store them
    uncompressed), or ``None`` (the encoder chooses). Other schemes are refused."""
    raw = field.metadata.get(COMPRESSION_META_KEY)
    if raw is None:
        return None
    scheme = (raw.decode() if isinstance(raw, bytes) else str(raw)).strip().lower()
    if scheme in ("none", ""):
        return "none"
    if scheme == "fsst":
        return None  # the encoder's own choice for strings
    if scheme != "zstd":
        raise UnsupportedFeatureError(
            f"field {field.name!r}: {COMPRESSION_META_KEY}={scheme!r} is not supported "
            "(zstd, fsst or none)")
    level = field.metadata.get(COMPRESSION_LEVEL_META_KEY)
    if level is None:
        return REQUESTED_ZSTD_LEVEL
    try:
        return int(level.decode() if isinstance(level, bytes) else level)
    except ValueError:
        raise InvalidInputError(f"field {field.name!r}: {COMPRESSION_LEVEL_META_KEY} must "
                                f"be an integer, not {level!r}") from None


def _levels(levels: np.ndarray, i0: np.ndarray, i1: np.ndarray,
            ) -> tuple[pb.CompressiveEncoding, list[np.ndarray], np.ndarray]:
    """Levels of every chunk: their encoding, bytes per chunk and sizes (bit-packed when the
    page has more than 1024, else plain u16)."""
    packed = pack_levels(levels, i0, i1)
    if packed is not None:
        enc, parts = packed
    else:
        plain = levels.astype("<u2").view(np.uint8)
        enc = flat(16)
        parts = [plain[2 * a: 2 * b] for a, b in zip(i0.tolist(), i1.tolist(), strict=True)]
    return enc, parts, np.array([len(p) for p in parts], dtype=np.int64)


@dataclass
class _Ranges:
    """One part of every chunk as ranges of one buffer: chunk ``c``'s part is
    ``data[starts[c]:starts[c] + sizes[c]]``."""

    data: np.ndarray  # uint8
    starts: np.ndarray
    sizes: np.ndarray

    def arrays(self) -> list[np.ndarray]:
        return [self.data[a: a + n] for a, n in
                zip(self.starts.tolist(), self.sizes.tolist(), strict=True)]

    def rows(self, k: int) -> np.ndarray | None:
        """Chunks ``0..k-1``'s parts as rows of a strided view, when they have one size and
        lie evenly spaced (as equal chunks of one buffer do); else None."""
        if k < 2:
            return None
        size, step = int(self.sizes[0]), int(self.starts[1] - self.starts[0])
        if (step < size or (self.sizes[:k] != size).any()
                or (np.diff(self.starts[:k]) != step).any()):
            return None
        first = int(self.starts[0])
        if first < 0 or first + (k - 1) * step + size > len(self.data):
            return None
        return np.lib.stride_tricks.as_strided(self.data[first:], shape=(k, size),
                                               strides=(step * self.data.strides[0],
                                                        self.data.strides[0]),
                                               writeable=False)


#: A part of every chunk: one array per chunk and their sizes, or :class:`_Ranges`.
_Parts = tuple[list[np.ndarray], np.ndarray] | _Ranges


def _interleave(columns: list[_Parts]) -> np.ndarray:
    """Chunk after chunk, the parts of every column, each padded to 8 bytes.

    Runs of chunks whose parts keep one size and come as evenly spaced ranges of a buffer
    (plain values, or bit-packed values of one width) are laid out as a matrix, a strided copy
    per part; other chunks are concatenated part by part (thousands of small arrays)."""
    ranges = [c for c in columns if isinstance(c, _Ranges)]
    k = len(columns[0].sizes if isinstance(columns[0], _Ranges) else columns[0][1])
    if k < MATRIX_MIN_CHUNKS or len(ranges) != len(columns):
        return _concatenated(columns)
    changes = np.zeros(k - 1, dtype=bool)
    for c in ranges:
        changes |= c.sizes[1:] != c.sizes[:-1]
    cuts = [0, *(np.flatnonzero(changes) + 1).tolist(), k]
    if len(cuts) - 1 > k // MATRIX_MIN_CHUNKS:  # sizes vary chunk to chunk
        return _concatenated(columns)
    pieces: list[np.ndarray] = []
    for a, b in pairwise(cuts):
        part = [_Ranges(c.data, c.starts[a:b], c.sizes[a:b]) for c in ranges]
        laid = _matrix(part, b - a) if b - a >= MATRIX_MIN_CHUNKS else None
        pieces.append(laid if laid is not None else _concatenated(list(part)))
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


#: Runs of at least this many equal chunks are laid out as a matrix by :func:`_interleave`.
MATRIX_MIN_CHUNKS = 4


def _matrix(columns: list[_Ranges], k: int) -> np.ndarray | None:
    """``k`` chunks whose parts each have one size, as rows of a matrix (None when a part's
    ranges are not evenly spaced)."""
    grids: list[np.ndarray] = []
    for c in columns:
        grid = c.rows(k)
        if grid is None:
            return None
        grids.append(grid)
    widths = [int(g.shape[1]) for g in grids]
    padded = [w + (-w) % ALIGN for w in widths]
    out = np.empty((k, sum(padded)), dtype=np.uint8)
    at = 0
    for grid, w, p in zip(grids, widths, padded, strict=True):
        out[:, at: at + w] = grid
        out[:, at + w: at + p] = 0
        at += p
    return out.reshape(-1)


def _concatenated(columns: list[_Parts]) -> np.ndarray:
    """:func:`_interleave` by concatenating every part and pad of every chunk."""
    lists: list[list[np.ndarray]] = []
    for col in columns:
        arrays, sizes = (col.arrays(), col.sizes) if isinstance(col, _Ranges) else col
        lists.append(arrays)
        pads = (-sizes) % ALIGN
        if pads.any():
            lists.append([_ZEROS[:p] for p in pads.tolist()])
    pieces = [part for chunk in zip(*lists, strict=True) for part in chunk]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)


def _chunk_headers(num_levels: np.ndarray, level_sizes: list[np.ndarray],
                   bufs: list[np.ndarray], word: int) -> np.ndarray:
    """Per chunk (a row): u16 level count, u16 rep / def sizes, value buffer sizes (u16 or
    u32)."""
    small = [num_levels, *level_sizes]
    head_small = np.stack(small, axis=1).astype("<u2").view(np.uint8)
    head_big = np.stack(bufs, axis=1).astype("<u4" if word == 4 else "<u2").view(np.uint8)
    return np.concatenate([head_small, head_big], axis=1)


def _raw_values(vd: ValueData) -> np.ndarray:
    if vd.kind == VARIABLE:
        return vd.data
    if vd.kind == BOOL:
        assert vd.bits is not None
        return vd.bits
    return np.ascontiguousarray(vd.data).reshape(-1)


def _variable_chunk_bytes(vd: ValueData, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of variable-width chunks starting at values ``starts``, back to back (what
    :func:`_chunk_values` gives each chunk: its offsets relative to the chunk, then its data
    padded to the offset width), and the byte offset of every chunk (one more than chunks).
    The offsets of all chunks are computed at once and everything is copied once."""
    assert vd.offsets is not None
    ob = vd.offset_bytes
    raw = _raw_values(vd)
    v1 = np.append(starts[1:], vd.n)
    offs = np.asarray(vd.offsets, dtype=np.int64)
    counts = v1 - starts + 1  # offsets per chunk
    first = offs[starts]
    rel = offs[range_indices(starts, counts)] - np.repeat(first - ob * counts, counts)
    rel_bytes = rel.astype(f"<u{ob}").view(np.uint8)
    data_len = offs[v1] - first
    pads = (-data_len) % ob
    rel_at = np.concatenate(([0], np.cumsum(counts * ob))).tolist()
    pieces: list[np.ndarray] = []
    for c, (lo, hi, pad) in enumerate(zip(first.tolist(), offs[v1].tolist(), pads.tolist(),
                                          strict=True)):
        pieces.append(rel_bytes[rel_at[c]: rel_at[c + 1]])
        pieces.append(raw[lo:hi])
        if pad:
            pieces.append(_ZEROS[:pad])
    sizes = counts * ob + data_len + pads
    return (np.concatenate(pieces) if pieces else np.zeros(0, np.uint8),
            np.concatenate(([0], np.cumsum(sizes))).astype(np.int64))


def _chunk_values(vd: ValueData, raw: np.ndarray, a: int, b: int) -> list[np.ndarray]:
    if vd.kind == BOOL:
        return [np.packbits(raw[a:b], bitorder="little")]
    if vd.kind == VARIABLE:
        assert vd.offsets is not None
        offs = vd.offsets[a: b + 1]
        ob = vd.offset_bytes
        rel = (offs - offs[0] + ob * (b - a + 1)).astype(f"<u{ob}")
        data = raw[int(offs[0]): int(offs[-1])]
        if len(data) % ob:
            data = np.concatenate([data, _ZEROS[: ob - len(data) % ob]])
        return [np.concatenate([rel.view(np.uint8), data])]
    out = []
    per = 1
    for dim, valid in zip(vd.dims, vd.valids, strict=True):
        per *= dim
        if valid is not None:
            out.append(np.packbits(valid[a * per: b * per], bitorder="little"))
    if vd.leaf_bits == 1:
        assert vd.bits is not None
        out.append(np.packbits(vd.bits[a * per: b * per], bitorder="little"))
    else:
        out.append(raw[a * vd.width: b * vd.width])
    return out


def _repetition_index(sh: Shredded, i0: np.ndarray, i1: np.ndarray) -> bytes:
    """Per chunk: rows completed in it, and items after the last completed row."""
    row_first = sh.row_starts()
    row_last = np.append(row_first[1:], sh.num_items) - 1  # last item of every row
    # Rows whose last item lies in chunk c.
    ends = np.searchsorted(row_last, i1, side="left") - np.searchsorted(row_last, i0,
                                                                         side="left")
    k = np.searchsorted(row_last, i1, side="left") - 1  # last row completed by chunk end
    last_end = np.where(k >= 0, row_last[np.maximum(k, 0)] + 1, 0)
    partial = np.where(ends > 0, i1 - last_end, i1 - i0)
    return np.stack([ends, partial], axis=1).astype("<u8").tobytes()


__all__ = ["Buffer", "EncodedPage", "encode_pages"]
