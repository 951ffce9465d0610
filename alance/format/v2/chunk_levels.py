"""Repetition / definition levels of many mini-block chunks at once.

Each chunk of a mini-block page stores its levels in one buffer, compressed as the layout
says. The common encodings (flat, RLE, out-of-line bit-packing) are decoded for all chunks
together with array operations; anything else falls back to one block decode per chunk.
"""

from __future__ import annotations

import numpy as np

from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import CorruptFileError
from alance.format.v2.blocks import Fixed
from alance.format.v2.compressive import ChunkBufs, block_values, miniblock_values
from alance.format.v2.kernels import BLOCK, gather_ranges, range_indices, unpack_fastlanes


def chunk_levels(enc: pb.CompressiveEncoding, data: np.ndarray, starts: np.ndarray,
                 sizes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Levels of chunks whose level buffers are ``data[starts[i] : starts[i] + sizes[i]]``,
    ``counts[i]`` levels each, as one uint16 array."""
    which = enc.WhichOneof("compression")
    if which == "flat" and not enc.flat.HasField("data") and enc.flat.bits_per_value in (8, 16):
        bufs = ChunkBufs(data, starts, sizes)
        bufs.check()
        block = miniblock_values(enc, [bufs], counts)
        if not isinstance(block, Fixed) or len(block) != int(counts.sum()):
            raise CorruptFileError("repetition/definition levels are malformed")
        return block.values.astype(np.uint16)
    if which == "rle" and len(starts) > 1:
        found = _rle_levels(enc.rle, data, starts, sizes, counts)
        if found is not None:
            return found
    if which == "out_of_line_bitpacking" and len(starts) > 1:
        found = _bitpacked_levels(enc.out_of_line_bitpacking, data, starts, sizes, counts)
        if found is not None:
            return found
    parts = []
    for s, sz, n in zip(starts.tolist(), sizes.tolist(), counts.tolist(), strict=True):
        block = block_values(enc, data[s: s + sz], n)  # one call per chunk
        if not isinstance(block, Fixed) or block.bits > 16 or len(block) != n:
            raise CorruptFileError("repetition/definition levels are malformed")
        parts.append(block.values)
    return (np.concatenate(parts) if parts else np.zeros(0)).astype(np.uint16)


def _rle_levels(enc: pb.Rle, data: np.ndarray, starts: np.ndarray, sizes: np.ndarray,
                counts: np.ndarray) -> np.ndarray | None:
    """RLE levels of many chunks at once (each chunk: u64 byte size of the run values, the
    values, then one u8 length per run); None for layouts left to the per-chunk decoder."""
    if enc.values.WhichOneof("compression") != "flat" or enc.values.flat.HasField("data") \
            or enc.run_lengths.WhichOneof("compression") != "flat" \
            or enc.run_lengths.flat.bits_per_value != 8 \
            or enc.values.flat.bits_per_value not in (8, 16):
        return None
    wb = int(enc.values.flat.bits_per_value) // 8
    ChunkBufs(data, starts, sizes).check()
    if (sizes < 8).any():
        raise CorruptFileError("RLE levels are truncated")
    head = gather_ranges(data, starts, np.full(len(starts), 8))
    vsize = np.ascontiguousarray(head).view("<u8").astype(np.int64)
    runs = vsize // wb
    if (vsize < 0).any() or (vsize % wb).any() or (8 + vsize + runs != sizes).any():
        raise CorruptFileError("RLE levels have inconsistent sizes")
    values = gather_ranges(data, starts + 8, vsize)
    values = np.ascontiguousarray(values).view(f"<u{wb}")
    lengths = gather_ranges(data, starts + 8 + vsize, runs).astype(np.int64)
    expanded = np.repeat(values, lengths)
    per_chunk = np.bincount(np.repeat(np.arange(len(starts)), runs), weights=lengths,
                            minlength=len(starts)).astype(np.int64)
    if (per_chunk < counts).any():
        raise CorruptFileError("RLE levels hold fewer values than expected")
    if not np.array_equal(per_chunk, counts):
        first = np.concatenate(([0], np.cumsum(per_chunk)[:-1]))
        expanded = expanded[range_indices(first, counts)]
    return expanded.astype(np.uint16)


def _bitpacked_levels(enc: pb.OutOfLineBitpacking, data: np.ndarray, starts: np.ndarray,
                      sizes: np.ndarray, counts: np.ndarray) -> np.ndarray | None:
    """Bit-packed levels of many chunks at once: a chunk of up to 1024 levels holds one
    packed block, or (a short last chunk) the levels as plain words. None for other
    layouts, which the per-chunk decoder handles."""
    t = int(enc.uncompressed_bits_per_value)
    vals_enc = enc.values
    if vals_enc.WhichOneof("compression") != "flat" or vals_enc.flat.HasField("data") \
            or t not in (8, 16) or (counts > BLOCK).any():
        return None
    w = int(vals_enc.flat.bits_per_value)
    if w > t:
        raise CorruptFileError("bit-packed levels wider than their words")
    ChunkBufs(data, starts, sizes).check()
    wb = t // 8
    per_block = BLOCK * w // t
    words = sizes // wb
    raw = (counts > 0) & (counts < BLOCK) & (words == counts)
    packed = ~raw & (counts > 0) & (words == per_block)
    if not (raw | packed | (counts == 0)).all():
        return None
    out = np.empty(int(counts.sum()), dtype=np.uint16)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    sel = np.flatnonzero(packed)
    if len(sel):
        block = gather_ranges(data, starts[sel], np.full(len(sel), per_block * wb))
        unpacked = unpack_fastlanes(np.ascontiguousarray(block).view(f"<u{wb}").reshape(
            len(sel), per_block), t, w).reshape(-1)
        out[range_indices(first[sel], counts[sel])] = unpacked[
            range_indices(np.arange(len(sel)) * BLOCK, counts[sel])]
    sel = np.flatnonzero(raw)
    if len(sel):
        plain = gather_ranges(data, starts[sel], counts[sel] * wb)
        out[range_indices(first[sel], counts[sel])] = np.ascontiguousarray(plain).view(
            f"<u{wb}")
    return out


__all__ = ["chunk_levels"]
