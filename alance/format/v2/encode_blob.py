"""Blob columns, written: where every value goes, the bytes for the data file and for the
sidecar files, and the page of descriptors (see :mod:`.blob` for the layouts).

:func:`encode_blob_v2` (2.2 files) and :func:`encode_blob_v1` (2.0 / 2.1 files) take one
batch of a blob column and the 64-byte aligned data file position where its inline bytes
will start, and return an :class:`EncodedBlobs`: the inline bytes (each value at a 64-byte
boundary), the descriptor pages, and the :class:`SidecarChunk` s to append to sidecar
files. :class:`SidecarState` carries the blob ids and the open pack sidecar of one data file
from batch to batch. Pure and vectorised: loops run once per pack sidecar, never per row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from alance._proto import encodings_v2_0_pb2 as pb0
from alance._proto import encodings_v2_1_pb2 as pb
from alance.errors import UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.blob import (
    KIND_DEDICATED,
    KIND_INLINE,
    KIND_PACKED,
    PACKED_META_KEY,
    STORED_V1,
)
from alance.format.v2.blob_values import BlobThresholds, BlobValues
from alance.format.v2.encode_fullzip import encode_fullzip
from alance.format.v2.encode_levels import shred
from alance.format.v2.encode_pages import encode_pages
from alance.format.v2.encode_values import EncodedPage, flat, value_data
from alance.format.v2.kernels import range_indices

#: Inline blob values start at multiples of this many bytes of the data file.
INLINE_ALIGN = 64
#: Values at least this large are copied one slice at a time (no per-byte index arrays);
#: smaller ones are gathered together.
_SLICE_BYTES = 4096
#: Blob ids are u32 and 0 means "no sidecar".
_MAX_BLOB_ID = (1 << 32) - 1
#: A blob v2 descriptor as the full-zip page stores it: kind, position, size, blob id and
#: the length of the (empty) URI that follows, packed without padding.
_DESCRIPTOR_ROW = np.dtype([("kind", "u1"), ("position", "<u8"), ("size", "<u8"),
                            ("blob_id", "<u4"), ("uri_len", "<u4")])
#: 2.1 blob v1: a null row's position holds its definition level shifted by this.
_V1_NULL_SHIFT = 16


@dataclass
class SidecarChunk:
    """Bytes to append to sidecar ``blob_id`` of the data file; ``done``: the sidecar is
    complete after them."""

    blob_id: int
    data: np.ndarray | memoryview
    done: bool


@dataclass
class SidecarState:
    """Sidecar bookkeeping of one data file: the next blob id and the open pack."""

    next_id: int = 1
    pack_id: int | None = None
    pack_size: int = 0

    def take_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive blob ids; returns the first."""
        first = self.next_id
        if first + count - 1 > _MAX_BLOB_ID:
            raise UnsupportedFeatureError("a data file cannot hold more than 2^32 - 1 blob "
                                          "sidecar files")
        self.next_id += count
        return first

    def close(self) -> list[SidecarChunk]:
        """The chunk that completes the open pack sidecar (none if no pack is open)."""
        if self.pack_id is None:
            return []
        done = [SidecarChunk(self.pack_id, np.zeros(0, np.uint8), True)]
        self.pack_id, self.pack_size = None, 0
        return done


@dataclass
class EncodedBlobs:
    """One batch of a blob column, encoded."""

    inline: np.ndarray  # uint8: append to the data file at the position given
    pages: list[EncodedPage]
    sidecars: list[SidecarChunk] = field(default_factory=list)


def _gather(data: np.ndarray, starts: np.ndarray, lens: np.ndarray, out: np.ndarray,
            at: np.ndarray) -> None:
    """Copy ``data[starts[k]:starts[k] + lens[k]]`` to ``out[at[k]:...]`` for every k:
    small values with one gather, large ones slice by slice (at most one slice per
    ``_SLICE_BYTES`` bytes copied)."""
    big = lens >= _SLICE_BYTES
    small = ~big
    if small.any():
        out[range_indices(at[small], lens[small])] = data[range_indices(starts[small],
                                                                        lens[small])]
    for a, n, o in zip(starts[big].tolist(), lens[big].tolist(), at[big].tolist(),
                       strict=True):
        out[o: o + n] = data[a: a + n]


def _inline(values: BlobValues, rows: np.ndarray, start: int,
            ) -> tuple[np.ndarray, np.ndarray]:
    """Lay the values of ``rows`` (bool mask) out from data file position ``start``, each
    at a 64-byte boundary (an empty value gets the position the next value would take).
    Returns the positions of the rows (0 for the others) and the bytes."""
    lens = values.sizes[rows]
    slots = (lens + INLINE_ALIGN - 1) // INLINE_ALIGN * INLINE_ALIGN
    rel = np.concatenate(([0], np.cumsum(slots))).astype(np.int64)
    positions = np.zeros(len(rows), np.uint64)
    positions[rows] = (start + rel[:-1]).astype(np.uint64)
    out = np.zeros(int(rel[-1]), np.uint8)
    if len(lens):
        _gather(values.data, values.offsets[:-1][rows], lens, out, rel[:-1])
    return positions, out


def _plan_packs(sizes: np.ndarray, used0: int | None, limit: int,
                ) -> tuple[np.ndarray, np.ndarray, list[int], list[int], int]:
    """Place values of ``sizes`` (row order) into pack sidecars of at most ``limit`` bytes
    (a value alone may be larger), continuing a pack already holding ``used0`` bytes (None:
    no pack is open). Returns per value its position and its pack (an index into the new
    packs; ``-1``: the pack already open), the indices of the values that start the new
    packs, the packs completed here, and the size of the pack left open."""
    m = len(sizes)
    pos = np.zeros(m, np.uint64)
    pack = np.zeros(m, np.int64)
    csum = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    opens: list[int] = []
    closed: list[int] = []
    current: int | None = None if used0 is None else -1
    used = used0 or 0
    i = 0
    while i < m:
        if current is None:
            opens.append(i)
            current, used = len(opens) - 1, 0
        # Values i .. j-1 still fit the open pack.
        j = int(np.searchsorted(csum, csum[i] + (limit - used), side="right")) - 1
        if j <= i:
            if used:
                closed.append(current)
                current = None
                continue
            j = i + 1
        pos[i:j] = (used + csum[i:j] - csum[i]).astype(np.uint64)
        pack[i:j] = current
        used += int(csum[j] - csum[i])
        i = j
        if i < m:
            closed.append(current)
            current = None
    return pos, pack, opens, closed, used


def encode_blob_v2(f: LanceField, values: BlobValues, start: int, state: SidecarState,
                   limits: BlobThresholds) -> EncodedBlobs:
    """One batch of blob v2 column ``f``: small values inline from data file position
    ``start``, the rest into pack or dedicated sidecars; the descriptors as a full-zip
    page of packed (kind, position, size, blob id, URI) rows."""
    valid = values.valid
    sizes = values.sizes
    n = len(valid)
    kind = np.full(n, KIND_INLINE, np.uint8)
    dedicated = valid & (sizes > limits.dedicated)
    packed = valid & ~dedicated & (sizes > limits.inline)
    kind[packed] = KIND_PACKED
    kind[dedicated] = KIND_DEDICATED
    positions, inline = _inline(values, valid & (kind == KIND_INLINE), start)
    blob_id = np.zeros(n, np.uint32)
    chunks: list[SidecarChunk] = []
    prow = np.flatnonzero(packed)
    drow = np.flatnonzero(dedicated)
    if len(prow) or len(drow):
        was_open = state.pack_id
        ppos, pack, opens, closed, used = _plan_packs(
            sizes[prow], None if was_open is None else state.pack_size, limits.pack_file)
        # Ids go to dedicated values and to new packs, in row order.
        open_rows = prow[np.asarray(opens, np.int64)]
        taking = np.sort(np.concatenate([open_rows, drow]))
        first = state.take_ids(len(taking))
        pack_ids = (np.searchsorted(taking, open_rows) + first).astype(np.int64)
        lookup = np.append(pack_ids, 0 if was_open is None else was_open)  # [-1]: open one
        ids = lookup[pack]
        blob_id[prow] = ids.astype(np.uint32)
        positions[prow] = ppos
        blob_id[drow] = (np.searchsorted(taking, drow) + first).astype(np.uint32)
        if len(prow):
            state.pack_id = int(pack_ids[-1]) if opens else was_open
            state.pack_size = used
        chunks = _sidecar_chunks(values, prow, pack, ids, closed, was_open, drow,
                                 blob_id[drow])
    page = _descriptor_page(f, valid, kind, positions, np.where(valid, sizes, 0), blob_id)
    return EncodedBlobs(inline, [page], chunks)


def _sidecar_chunks(values: BlobValues, prow: np.ndarray, pack: np.ndarray,
                    ids: np.ndarray, closed: list[int], was_open: int | None,
                    drow: np.ndarray, dids: np.ndarray) -> list[SidecarChunk]:
    """The bytes of every pack (one gathered chunk per pack) and dedicated value (a view
    of the input), in row order; a pack's last chunk is marked done when it was closed."""
    out: list[tuple[int, SidecarChunk]] = []
    sizes = values.sizes
    starts = values.offsets[:-1]
    if -1 in closed and was_open is not None and not (len(pack) and pack[0] == -1):
        out.append((-1, SidecarChunk(was_open, np.zeros(0, np.uint8), True)))
    if len(prow):
        bounds = np.flatnonzero(np.diff(pack)) + 1
        for lo, hi in zip(np.concatenate(([0], bounds)).tolist(),
                          np.concatenate((bounds, [len(prow)])).tolist(), strict=True):
            rows = prow[lo:hi]
            bid, done = int(ids[lo]), int(pack[lo]) in closed
            lens = sizes[rows]
            if int(lens.sum()) >= _SLICE_BYTES * len(rows):  # large values: views, no copy
                views = [SidecarChunk(bid, values.data[a: a + n], False)
                         for a, n in zip(starts[rows].tolist(), lens.tolist(), strict=True)]
                views[-1].done = done
                out.extend((int(r), c) for r, c in zip(rows.tolist(), views, strict=True))
                continue
            data = np.empty(int(lens.sum()), np.uint8)
            _gather(values.data, starts[rows], lens, data,
                    np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64))
            out.append((int(rows[0]), SidecarChunk(bid, data, done)))
    for row, bid in zip(drow.tolist(), dids.tolist(), strict=True):
        a = int(starts[row])
        out.append((row, SidecarChunk(int(bid), values.data[a: a + int(sizes[row])], True)))
    out.sort(key=lambda item: item[0])  # stable: a pack's views keep their order
    return [c for _, c in out]


def _descriptor_page(f: LanceField, valid: np.ndarray, kind: np.ndarray,
                     positions: np.ndarray, sizes: np.ndarray,
                     blob_id: np.ndarray) -> EncodedPage:
    n = len(valid)
    rec = np.zeros(n, _DESCRIPTOR_ROW)
    rec["kind"], rec["position"], rec["size"], rec["blob_id"] = kind, positions, sizes, blob_id
    data = rec[valid].view(np.uint8).reshape(-1)
    offsets = np.concatenate(([0], np.cumsum(np.where(valid, _DESCRIPTOR_ROW.itemsize, 0))))
    mask = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.Array.from_buffers(pa.binary(), n, [mask, pa.py_buffer(offsets.astype("<i4")),
                                                 pa.py_buffer(data)])
    (sh,) = shred(f, arr)
    vd = value_data(sh.values)
    vd.encoding = _variable_packed()
    return encode_fullzip(sh, vd)


def _variable_packed() -> pb.CompressiveEncoding:
    """How pylance describes blob v2 descriptor rows: four fixed-width fields, then the
    URI with a u32 length."""
    fields = [pb.VariablePackedStruct.FieldEncoding(value=flat(bits), bits_per_value=bits)
              for bits in (8, 64, 64, 32)]
    fields.append(pb.VariablePackedStruct.FieldEncoding(
        value=pb.CompressiveEncoding(variable=pb.Variable(offsets=flat(32))),
        bits_per_length=32))
    return pb.CompressiveEncoding(variable_packed_struct=pb.VariablePackedStruct(fields=fields))


def encode_blob_v1(f: LanceField, values: BlobValues, start: int,
                   version: tuple[int, int]) -> EncodedBlobs:
    """One batch of blob v1 column ``f`` (2.0 / 2.1 files): every value inline from data
    file position ``start``; the descriptors as (position, size) pairs, ``(0, 0)`` for an
    empty value. A null row is
    ``(1, 0)`` in 2.0 files and ``(1 << 16, 0)`` (its definition level, shifted) in a 2.1
    ``BlobLayout``."""
    valid = values.valid
    positions, inline = _inline(values, valid, start)
    sizes = np.where(valid, values.sizes, 0).astype(np.uint64)
    positions[sizes == 0] = 0  # an empty value is (0, 0), as pylance stores it
    null_pos = 1 if version == (2, 0) else 1 << _V1_NULL_SHIFT
    positions = np.where(valid, positions, np.uint64(null_pos)).astype(np.uint64)
    if version == (2, 0):
        return EncodedBlobs(inline, [_v20_page(positions, sizes)])
    stored = pa.StructArray.from_arrays([pa.array(positions, pa.uint64()),
                                         pa.array(sizes, pa.uint64())],
                                        fields=list(STORED_V1))
    kids = [LanceField(-1, name, "uint64", False, f.id) for name in ("position", "size")]
    stub = LanceField(f.id, f.name, "struct", False, f.parent_id, kids,
                      {PACKED_META_KEY: b"true"})
    layers = [pb.REPDEF_ALL_VALID_ITEM if valid.all() else pb.REPDEF_NULLABLE_ITEM]
    pages = []
    for page in encode_pages(shred(stub, stored)[0], large_chunks=version >= (2, 2)):
        layout = pb.PageLayout(blob_layout=pb.BlobLayout(inner_layout=page.layout,
                                                         layers=layers))
        pages.append(EncodedPage(page.buffers, layout, page.num_rows))
    return EncodedBlobs(inline, pages)


def _v20_page(positions: np.ndarray, sizes: np.ndarray) -> EncodedPage:
    """A 2.0 page of (position, size) pairs: a packed struct of two u64 fields, row-major
    in one buffer."""
    rows = np.stack([positions, sizes], axis=1).astype("<u8")

    def u64() -> pb0.ArrayEncoding:
        flat64 = pb0.ArrayEncoding(flat=pb0.Flat(bits_per_value=64, buffer=pb0.Buffer()))
        return pb0.ArrayEncoding(nullable=pb0.Nullable(
            no_nulls=pb0.Nullable.NoNull(values=flat64)))

    enc = pb0.ArrayEncoding(packed_struct=pb0.PackedStruct(inner=[u64(), u64()],
                                                           buffer=pb0.Buffer()))
    return EncodedPage([rows.tobytes()], enc, len(positions))  # type: ignore[arg-type]


__all__ = ["INLINE_ALIGN", "EncodedBlobs", "SidecarChunk", "SidecarState", "encode_blob_v1",
           "encode_blob_v2"]
