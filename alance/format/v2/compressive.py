"""Decoders for the 2.1+ compressive encodings (``lance.encodings21.CompressiveEncoding``).

Two contexts:

* **mini-block**: the values of many mini-blocks at once. Each value buffer is described by a
  :class:`ChunkBufs` (one byte range per chunk inside a shared byte array); ``counts`` gives
  the values per chunk. Work is vectorised across chunks (bit-packed chunks of the same width
  are unpacked together, ranges are gathered with index arithmetic).
* **block**: one whole buffer (dictionaries, repetition/definition levels).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError, UnsupportedFeatureError
from alance.format.arrow_buffers import pooled_empty
from alance.format.v2.blocks import Block, Fixed, FsstVariable, Variable
from alance.format.v2.kernels import (
    BLOCK,
    UINT,
    decompress,
    fastlanes_at,
    fixed_at,
    fsst_symbols,
    gather_ranges,
    range_indices,
    strided_rows,
    unpack_fastlanes,
    words_at,
)


@dataclass
class ChunkBufs:
    """One value buffer of every chunk: ``data[starts[i] : starts[i] + sizes[i]]``."""

    data: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray
    #: The maker has already checked that every range lies in ``data``.
    checked: bool = False

    def check(self) -> None:
        """Raise CorruptFileError if a range falls outside ``data``."""
        if self.checked:
            return
        if len(self.starts) and (self.starts.min() < 0
                                 or (self.starts + self.sizes).max() > len(self.data)):
            raise CorruptFileError("a mini-block buffer runs past its chunk")


def _which(enc: pb.CompressiveEncoding) -> str:
    which = enc.WhichOneof("compression")
    if which is None:
        raise CorruptFileError("compressive encoding is empty")
    return which


def _fsst_on(table: bytes) -> bool:
    return len(table) >= 8 and bool((int.from_bytes(table[:8], "little") >> 24) & 1)


def _flat_bits(enc: pb.CompressiveEncoding, what: str) -> int:
    if _which(enc) != "flat":
        raise UnsupportedFeatureError(f"{what} must be flat, not {_which(enc)}")
    if enc.flat.HasField("data"):
        raise UnsupportedFeatureError(f"{what} with buffer compression")
    return int(enc.flat.bits_per_value)


def _decompress_chunks(scheme: int, bufs: ChunkBufs) -> ChunkBufs:
    parts = [decompress(scheme, bufs.data[s: s + n])
             for s, n in zip(bufs.starts.tolist(), bufs.sizes.tolist(), strict=True)]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return ChunkBufs(data, starts, sizes)


def _fixed_from_chunks(bufs: ChunkBufs, counts: np.ndarray, bits: int,
                       pick: np.ndarray | None = None) -> Fixed:
    if bits == 1:
        nbytes = (counts + 7) // 8
        if np.any(nbytes > bufs.sizes):
            raise CorruptFileError("boolean mini-block is too short")
        raw = gather_ranges(bufs.data, bufs.starts, nbytes)
        allbits = np.unpackbits(raw, bitorder="little")
        bit_starts = np.concatenate(([0], np.cumsum(nbytes * 8)[:-1]))
        return Fixed(allbits[range_indices(bit_starts, counts)].astype(bool), 1)
    if bits % 8:
        raise UnsupportedFeatureError(f"{bits}-bit flat values are not supported")
    width = bits // 8
    need = counts * width
    if np.any(need > bufs.sizes):
        raise CorruptFileError("flat mini-block is too short")
    if pick is not None:
        chunk, pos = _chunk_of(counts, pick)
        at = bufs.starts[chunk] + pos * width
        return Fixed.from_bytes(fixed_at(bufs.data, at, width), bits, len(pick))
    raw = gather_ranges(bufs.data, bufs.starts, need)
    return Fixed.from_bytes(raw, bits, int(counts.sum()))


def _chunk_of(counts: np.ndarray, pick: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For value indices ``pick`` (over all chunks): the chunk of each and the index in it."""
    ends = np.cumsum(counts)
    if len(pick) and (pick.min() < 0 or pick.max() >= (ends[-1] if len(ends) else 0)):
        raise CorruptFileError("mini-block values are fewer than their rows need")
    chunk = np.searchsorted(ends, pick, side="right")
    return chunk, pick - (ends - counts)[chunk]


#: A bit-packed page whose chunks change width fewer times than this is unpacked run by run
#: of equal widths (straight into the output; one width throughout is one run); more
#: changes, width by width (a copy of each width's chunks, then a scatter of their values).
MAX_WIDTH_RUNS = 64


def _inline_bitpacked(bufs: ChunkBufs, counts: np.ndarray, t: int,
                      pick: np.ndarray | None = None) -> Fixed:
    if t not in UINT:
        raise UnsupportedFeatureError(f"bit-packing of {t}-bit values")
    wb = t // 8
    if len(counts) == 0:
        return Fixed(np.zeros(0, UINT[t]), t)
    if np.any(bufs.sizes < wb) or np.any(counts > BLOCK):
        raise CorruptFileError("bit-packed mini-block is malformed")
    # The first word of each chunk is its bit width.
    first = gather_ranges(bufs.data, bufs.starts, np.full(len(counts), wb))
    widths = first.view(f"<u{wb}").astype(np.int64)
    if np.any(widths > t):
        raise CorruptFileError("bit-packed mini-block has a width above its word size")
    words_needed = widths * (BLOCK // t)
    if np.any(wb * (1 + words_needed) > bufs.sizes):
        raise CorruptFileError("bit-packed mini-block is too short")
    if pick is not None:  # just the values asked for, straight from the packed words
        chunk, pos = _chunk_of(counts, pick)
        vals = np.empty(len(pick), dtype=UINT[t])
        cw = widths[chunk]
        for w in np.unique(cw).tolist():
            sel = np.flatnonzero(cw == w)
            vals[sel] = fastlanes_at(bufs.data, bufs.starts[chunk[sel]] + wb, pos[sel], t,
                                     int(w))
        return Fixed(vals, t)
    out = pooled_empty((len(counts), BLOCK), UINT[t])
    cuts = np.flatnonzero(widths[1:] != widths[:-1]) + 1
    if len(cuts) < MAX_WIDTH_RUNS:
        # Runs of chunks of one width (the usual case: one run; sorted values such as ids
        # widen chunk by chunk): each run unpacked from its chunks (in place when they are
        # evenly spaced) straight into its rows of the output.
        for a, b in pairwise([0, *cuts.tolist(), len(widths)]):
            w, n_words = int(widths[a]), int(widths[a]) * (BLOCK // t)
            rows = strided_rows(bufs.data, bufs.starts[a:b] + wb, n_words * wb)
            if rows is None:
                rows = gather_ranges(bufs.data, bufs.starts[a:b] + wb,
                                     np.full(b - a, n_words * wb)).reshape(b - a, -1)
            unpack_fastlanes(rows.view(f"<u{wb}"), t, w, out[a:b])
    else:
        for w in np.unique(widths).tolist():
            sel = np.flatnonzero(widths == w)
            n_words = w * (BLOCK // t)
            raw = gather_ranges(bufs.data, bufs.starts[sel] + wb,
                                np.full(len(sel), n_words * wb))
            packed = raw.view(f"<u{wb}").reshape(len(sel), n_words)
            out[sel] = unpack_fastlanes(packed, t, int(w))
    flat = out.reshape(-1)
    if (counts[:-1] == BLOCK).all():  # only the last chunk may be short: a plain prefix
        return Fixed(flat[: (len(counts) - 1) * BLOCK + int(counts[-1])], t)
    idx = range_indices(np.arange(len(counts), dtype=np.int64) * BLOCK, counts)
    return Fixed(flat[idx], t)


def _variable_chunks(enc: pb.Variable, bufs: ChunkBufs, counts: np.ndarray,
                     pick: np.ndarray | None = None) -> Variable:
    bits = _flat_bits(enc.offsets, "variable offsets")
    if enc.HasField("values"):
        raise UnsupportedFeatureError("variable values with buffer compression")
    if bits not in (32, 64):
        raise UnsupportedFeatureError(f"{bits}-bit offsets")
    wb = bits // 8
    if np.any((counts + 1) * wb > bufs.sizes):
        raise CorruptFileError("variable mini-block offsets are truncated")
    if pick is not None:
        return _variable_picked(bufs, counts, pick, wb)
    # Each chunk holds counts + 1 offsets into its own bytes: all but the last of every chunk,
    # rebased onto the gathered value bytes, are the output offsets.
    first = words_at(bufs.data, bufs.starts, wb).astype(np.int64)
    last = words_at(bufs.data, bufs.starts + counts * wb, wb).astype(np.int64)
    if np.any(last < first) or np.any(last > bufs.sizes):
        raise CorruptFileError("variable mini-block offsets point outside the chunk")
    lens = last - first
    ends = np.cumsum(lens)
    n = int(counts.sum())
    offsets = pooled_empty(n + 1, np.int64)
    # (64-bit offsets read as signed: a chunk's offsets are far below 2**63, and a damaged
    # one fails the order check below)
    raw = gather_ranges(bufs.data, bufs.starts, counts * wb).view("<u4" if wb == 4 else "<i8")
    np.subtract(raw, np.repeat(first - (ends - lens), counts), out=offsets[:n])
    offsets[n] = int(ends[-1]) if len(ends) else 0
    if n and np.any(offsets[1:] < offsets[:-1]):
        raise CorruptFileError("variable mini-block offsets are not increasing")
    data = gather_ranges(bufs.data, bufs.starts + first, lens)
    return Variable(offsets, data)


def _variable_picked(bufs: ChunkBufs, counts: np.ndarray, pick: np.ndarray,
                     wb: int) -> Variable:
    """Just the values ``pick`` of variable-width mini-blocks: their two offsets each (chunk
    offsets count from the chunk's buffer start), then their bytes."""
    chunk, local = _chunk_of(counts, pick)
    at = bufs.starts[chunk] + local * wb
    begin = words_at(bufs.data, at, wb).astype(np.int64)
    end = words_at(bufs.data, at + wb, wb).astype(np.int64)
    if np.any(end < begin) or np.any(end > bufs.sizes[chunk]):
        raise CorruptFileError("variable mini-block offsets point outside the chunk")
    lens = end - begin
    data = gather_ranges(bufs.data, bufs.starts[chunk] + begin, lens)
    return Variable(np.concatenate(([0], np.cumsum(lens))).astype(np.int64), data)


def _rle_chunks(enc: pb.Rle, values: ChunkBufs, lengths: ChunkBufs,
                counts: np.ndarray) -> Fixed:
    bits = _flat_bits(enc.values, "RLE values")
    if _flat_bits(enc.run_lengths, "RLE run lengths") != 8:
        raise UnsupportedFeatureError("RLE run lengths wider than 8 bits")
    if bits not in UINT:
        raise UnsupportedFeatureError(f"RLE of {bits}-bit values")
    wb = bits // 8
    runs = lengths.sizes
    if np.any(values.sizes < runs * wb):
        raise CorruptFileError("RLE mini-block values are truncated")
    vals = gather_ranges(values.data, values.starts, runs * wb).view(f"<u{wb}")
    lens = gather_ranges(lengths.data, lengths.starts, runs).astype(np.int64)
    expanded = np.repeat(vals, lens)
    run_chunk = np.repeat(np.arange(len(counts)), runs)
    per_chunk = np.bincount(run_chunk, weights=lens, minlength=len(counts)).astype(np.int64)
    if np.array_equal(per_chunk, counts):
        return Fixed(expanded, bits)
    if np.any(per_chunk < counts):
        raise CorruptFileError("RLE mini-block holds fewer values than expected")
    starts = np.concatenate(([0], np.cumsum(per_chunk)[:-1]))
    return Fixed(expanded[range_indices(starts, counts)], bits)


def _bss_chunks(enc: pb.ByteStreamSplit, bufs: ChunkBufs, counts: np.ndarray) -> Fixed:
    bits = _flat_bits(enc.values, "byte-stream-split values")
    if bits not in (16, 32, 64):
        raise UnsupportedFeatureError(f"byte stream split of {bits}-bit values")
    wb = bits // 8
    if np.any(bufs.sizes < counts * wb):
        raise CorruptFileError("byte-stream-split mini-block is truncated")
    raw = gather_ranges(bufs.data, bufs.starts, counts * wb)
    out = np.empty(int(counts.sum()) * wb, dtype=np.uint8)
    pos = 0
    for n in np.unique(counts).tolist():
        sel = np.flatnonzero(counts == n)
        src_starts = np.concatenate(([0], np.cumsum(counts * wb)[:-1]))[sel]
        block = raw[range_indices(src_starts, np.full(len(sel), n * wb))]
        grid = block.reshape(len(sel), wb, n).transpose(0, 2, 1).reshape(len(sel), n * wb)
        dst_starts = np.concatenate(([0], np.cumsum(counts * wb)[:-1]))[sel]
        out[range_indices(dst_starts, np.full(len(sel), n * wb))] = grid.reshape(-1)
        pos += len(sel)
    return Fixed(out.view(f"<u{wb}"), bits)


def miniblock_values(enc: pb.CompressiveEncoding, bufs: list[ChunkBufs],
                     counts: np.ndarray, pick: np.ndarray | None = None) -> Block:
    """Decode the values of many mini-blocks (``counts[i]`` values in chunk ``i``).

    ``pick``: only these (sorted) value indices, counted over all the chunks; encodings that
    allow it (flat, bit-packed) then decode just those values.
    """
    for b in bufs:
        b.check()
    which = _which(enc)
    if which == "general":
        if not bufs:
            raise CorruptFileError("general compression without a buffer")
        inner = [_decompress_chunks(int(enc.general.compression.scheme), bufs[0]), *bufs[1:]]
        return miniblock_values(enc.general.values, inner, counts, pick)
    if pick is not None and which in ("flat", "inline_bitpacking") and len(bufs) == 1:
        buf = bufs[0]
        if which == "flat" and not enc.flat.HasField("data") \
                and int(enc.flat.bits_per_value) % 8 == 0:
            return _fixed_from_chunks(buf, counts, int(enc.flat.bits_per_value), pick)
        if which == "inline_bitpacking" and not enc.inline_bitpacking.HasField("values"):
            bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
            return _inline_bitpacked(buf, counts, bits, pick)
    if pick is not None and len(bufs) == 1 and (
            which == "variable" or (which == "fsst" and _which(enc.fsst.values) == "variable")):
        var_enc = enc.variable if which == "variable" else enc.fsst.values.variable
        picked = _variable_chunks(var_enc, bufs[0], counts, pick)
        if which == "variable":
            return picked
        if _fsst_on(enc.fsst.symbol_table):
            fsst_symbols(enc.fsst.symbol_table)  # a bad table fails here, not later
        return FsstVariable(picked.offsets, picked.data, symbol_table=enc.fsst.symbol_table)
    if pick is not None and which == "fixed_size_list" and not enc.fixed_size_list.has_validity \
            and len(bufs) == 1:
        # The items of the picked lists, picked from the inner encoding.
        dim = int(enc.fixed_size_list.items_per_value)
        item_pick = (pick[:, None] * dim + np.arange(dim)).reshape(-1)
        items = miniblock_values(enc.fixed_size_list.values, bufs, counts * dim, item_pick)
        return _group_fsl(items, dim, len(pick))
    if pick is not None:
        block = miniblock_values(enc, bufs, counts)
        if len(pick) and pick.max() >= len(block):
            raise CorruptFileError("mini-block values are fewer than their rows need")
        return block.take(pick)
    if which == "rle":
        if len(bufs) != 2:
            raise CorruptFileError("RLE mini-blocks need two buffers")
        return _rle_chunks(enc.rle, bufs[0], bufs[1], counts)
    if which == "fixed_size_list" and enc.fixed_size_list.has_validity:
        return _fsl_with_validity(enc.fixed_size_list, bufs, counts)
    if which == "packed_struct":
        return _packed(enc.packed_struct, miniblock_values(enc.packed_struct.values, bufs,
                                                            counts), int(counts.sum()))
    if len(bufs) != 1:
        raise CorruptFileError(f"{which} mini-blocks need one buffer, got {len(bufs)}")
    (buf,) = bufs
    if which == "flat":
        if enc.flat.HasField("data"):
            buf = _decompress_chunks(int(enc.flat.data.scheme), buf)
        return _fixed_from_chunks(buf, counts, int(enc.flat.bits_per_value))
    if which == "inline_bitpacking":
        if enc.inline_bitpacking.HasField("values"):
            buf = _decompress_chunks(int(enc.inline_bitpacking.values.scheme), buf)
        bits = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        return _inline_bitpacked(buf, counts, bits)
    if which == "variable":
        return _variable_chunks(enc.variable, buf, counts)
    if which == "fsst":
        coded = miniblock_values(enc.fsst.values, [buf], counts)
        if not isinstance(coded, Variable):
            raise CorruptFileError("FSST over fixed-width values")
        if _fsst_on(enc.fsst.symbol_table):
            fsst_symbols(enc.fsst.symbol_table)  # a bad table fails here, not later
        return FsstVariable(coded.offsets, coded.data, symbol_table=enc.fsst.symbol_table)
    if which == "byte_stream_split":
        return _bss_chunks(enc.byte_stream_split, buf, counts)
    if which == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            raise UnsupportedFeatureError("fixed-size lists with nullable items")
        dim = int(fsl.items_per_value)
        items = miniblock_values(fsl.values, [buf], counts * dim)
        return _group_fsl(items, dim, int(counts.sum()))
    raise UnsupportedFeatureError(f"mini-block encoding {which!r} is not supported")


def _packed(enc: pb.PackedStruct, inner: Block, n: int) -> Fixed:
    """Packed struct rows: each value holds every field's bytes, one after another."""
    bits = [int(b) for b in enc.bits_per_value]
    if any(b % 8 for b in bits):
        raise UnsupportedFeatureError("packed struct fields that are not whole bytes")
    width = sum(bits) // 8
    if not isinstance(inner, Fixed) or inner.bits != 8 * width:
        raise CorruptFileError("packed struct values disagree with their field widths")
    raw = inner.as_bytes()
    if len(raw) != n * width:
        raise CorruptFileError("packed struct values have the wrong size")
    return Fixed(raw.reshape(n, width), 8 * width)


def _fsl_with_validity(fsl: pb.FixedSizeList, bufs: list[ChunkBufs],
                       counts: np.ndarray) -> Fixed:
    """Fixed-size lists whose items can be null: an item bitmap buffer, then the values."""
    if len(bufs) != 2 or _which(fsl.values) != "flat":
        raise UnsupportedFeatureError("nested or compressed fixed-size lists with null items")
    dim = int(fsl.items_per_value)
    items = counts * dim
    bitmap = _fixed_from_chunks(bufs[0], items, 1)
    inner = miniblock_values(fsl.values, [bufs[1]], items)
    out = _group_fsl(inner, dim, int(counts.sum()))
    out.item_valid = bitmap.values.reshape(-1, dim) if dim else None
    return out


def _group_fsl(inner: Block, dim: int, n: int) -> Fixed:
    if not isinstance(inner, Fixed) or inner.bits % 8:
        raise UnsupportedFeatureError("fixed-size lists of non-byte-aligned values")
    width = inner.bits // 8 * dim
    raw = inner.as_bytes()
    if len(raw) != n * width:
        raise CorruptFileError("fixed-size list values have the wrong size")
    return Fixed(raw.reshape(n, width), width * 8)


def _out_of_line(enc: pb.OutOfLineBitpacking, raw: np.ndarray, n: int) -> Fixed:
    t = int(enc.uncompressed_bits_per_value)
    w = _flat_bits(enc.values, "out-of-line bit-packed values")
    if t not in UINT or w > t:
        raise CorruptFileError(f"bad out-of-line bit-packing ({w} of {t} bits)")
    wb = t // 8
    per_block = BLOCK * w // t
    words = raw[: len(raw) // wb * wb].view(f"<u{wb}")
    full, tail = divmod(n, BLOCK)
    raw_tail = tail > 0 and len(words) == full * per_block + tail
    blocks = full + (1 if tail and not raw_tail else 0)
    if len(words) < blocks * per_block + (tail if raw_tail else 0):
        raise CorruptFileError("out-of-line bit-packed buffer is truncated")
    unpacked = unpack_fastlanes(words[: blocks * per_block].reshape(blocks, per_block), t, w)
    out = unpacked.reshape(-1)[: full * BLOCK + (0 if raw_tail else tail)]
    if raw_tail:
        out = np.concatenate((out, words[full * per_block: full * per_block + tail]))
    return Fixed(out, t)


def block_values(enc: pb.CompressiveEncoding, raw: np.ndarray, n: int) -> Block:
    """Decode one whole buffer holding ``n`` values."""
    which = _which(enc)
    if which == "flat":
        if enc.flat.HasField("data"):
            raw = np.frombuffer(decompress(int(enc.flat.data.scheme), raw), np.uint8)
        return Fixed.from_bytes(raw, int(enc.flat.bits_per_value), n)
    if which == "general":
        inner = np.frombuffer(decompress(int(enc.general.compression.scheme), raw), np.uint8)
        return block_values(enc.general.values, inner, n)
    if which == "out_of_line_bitpacking":
        return _out_of_line(enc.out_of_line_bitpacking, raw, n)
    if which == "inline_bitpacking":
        t = int(enc.inline_bitpacking.uncompressed_bits_per_value)
        return _inline_block(raw, n, t)
    if which == "variable":
        return _variable_block(raw, n)
    if which == "rle":
        return _rle_block(enc.rle, raw, n)
    if which == "constant":
        value = enc.constant.value
        if not value:
            raise UnsupportedFeatureError("constant block without a value")
        arr = np.frombuffer(value, dtype=np.uint8)
        return Fixed.from_bytes(np.tile(arr, n), len(value) * 8, n)
    if which == "fixed_size_list":
        fsl = enc.fixed_size_list
        if fsl.has_validity:
            raise UnsupportedFeatureError("fixed-size lists with nullable items")
        dim = int(fsl.items_per_value)
        return _group_fsl(block_values(fsl.values, raw, n * dim), dim, n)
    if which == "packed_struct":
        return _packed(enc.packed_struct, block_values(enc.packed_struct.values, raw, n), n)
    raise UnsupportedFeatureError(f"block encoding {which!r} is not supported")


def _rle_block(enc: pb.Rle, raw: np.ndarray, n: int) -> Fixed:
    """A whole-buffer RLE: u64 byte size of the run values, the values, then u8 lengths."""
    bits = _flat_bits(enc.values, "RLE values")
    if _flat_bits(enc.run_lengths, "RLE run lengths") != 8 or bits not in UINT:
        raise UnsupportedFeatureError("RLE block with unusual widths")
    if len(raw) < 8:
        raise CorruptFileError("RLE block is truncated")
    size = int(raw[:8].copy().view("<u8")[0])
    wb = bits // 8
    if size % wb or 8 + size > len(raw):
        raise CorruptFileError("RLE block sizes are inconsistent")
    values = raw[8: 8 + size].copy().view(f"<u{wb}")
    lengths = raw[8 + size:].astype(np.int64)
    if len(lengths) != len(values):
        raise CorruptFileError("RLE block has a different number of values and lengths")
    out = np.repeat(values, lengths)
    if len(out) < n:
        raise CorruptFileError("RLE block holds fewer values than expected")
    return Fixed(out[:n], bits)


def _inline_block(raw: np.ndarray, n: int, t: int) -> Fixed:
    if t not in UINT:
        raise UnsupportedFeatureError(f"bit-packing of {t}-bit values")
    wb = t // 8
    words = raw[: len(raw) // wb * wb].view(f"<u{wb}")
    outs, pos, left = [], 0, n
    while left > 0:  # one iteration per 1024 values
        if pos >= len(words):
            raise CorruptFileError("bit-packed block is truncated")
        w = int(words[pos])
        size = w * (BLOCK // t)
        if w > t or pos + 1 + size > len(words):
            raise CorruptFileError("bit-packed block is malformed")
        block = unpack_fastlanes(words[pos + 1: pos + 1 + size].reshape(1, size), t, w)
        outs.append(block[0, : min(left, BLOCK)])
        pos += 1 + size
        left -= BLOCK
    return Fixed(np.concatenate(outs) if outs else np.zeros(0, UINT[t]), t)


def _variable_block(raw: np.ndarray, n: int) -> Variable:
    if len(raw) < 8:
        raise CorruptFileError("variable block is truncated")
    head = raw[:16].tobytes()
    if head[1:4] != b"\0\0\0":
        raise UnsupportedFeatureError("variable block in the old layout")
    bits = int.from_bytes(head[:4], "little")
    if bits == 32:
        start, at = int.from_bytes(head[4:8], "little"), 8
    elif bits == 64:
        if len(raw) < 16:
            raise CorruptFileError("variable block is truncated")
        start, at = int.from_bytes(head[8:16], "little"), 16
    else:
        raise CorruptFileError(f"variable block with {bits}-bit offsets")
    wb = bits // 8
    if start > len(raw) or at + (n + 1) * wb > start:
        raise CorruptFileError("variable block offsets are inconsistent")
    offs = raw[at: at + (n + 1) * wb].copy().view(f"<u{wb}").astype(np.int64)
    data = raw[start:]
    if n and (offs[0] < 0 or offs[-1] > len(data) or np.any(np.diff(offs) < 0)):
        raise CorruptFileError("variable block offsets point outside the data")
    return Variable(offs, data)


__all__ = ["ChunkBufs", "block_values", "miniblock_values"]
