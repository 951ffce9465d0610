"""Row-address sets as Lance stores them inside index files (no IO).

A row address is ``fragment_id << 32 | offset``. Bitmap-style indices store a set of them as
a map from fragment id to a 32-bit roaring bitmap of offsets:

    u32 count
    count x [u32 fragment_id][u32 size][size bytes: portable roaring bitmap]

(little-endian). ``size == 0`` means "every row of the fragment".
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

import numpy as np
import pyroaring

from alance.errors import CorruptFileError

#: One fragment's rows: a bitmap of offsets, or ``None`` for every row of the fragment.
Selection = pyroaring.BitMap | None
RowAddrMap = dict[int, Selection]

_U32 = struct.Struct("<I")


def decode_row_addr_map(data: bytes | memoryview) -> RowAddrMap:
    """The fragment -> offsets map serialized in ``data``."""
    view = memoryview(data)
    try:
        (count,) = _U32.unpack_from(view, 0)
        pos = 4
        out: RowAddrMap = {}
        for _ in range(count):
            fragment, size = struct.unpack_from("<II", view, pos)
            pos += 8
            if size == 0:
                out[fragment] = None
                continue
            if pos + size > len(view):
                raise CorruptFileError("row address map: a bitmap runs past the buffer")
            out[fragment] = pyroaring.BitMap.deserialize(bytes(view[pos:pos + size]))
            pos += size
    except (struct.error, ValueError) as exc:
        raise CorruptFileError(f"row address map does not decode: {exc}") from exc
    return out


def encode_row_addr_map(mapping: Mapping[int, Selection]) -> bytes:
    """Serialize a fragment -> offsets map (fragments in ascending order)."""
    parts = [_U32.pack(len(mapping))]
    for fragment in sorted(mapping):
        selection = mapping[fragment]
        if selection is None:
            parts.append(struct.pack("<II", fragment, 0))
            continue
        body = bytes(pyroaring.BitMap(selection, optimize=False).serialize())
        parts.append(struct.pack("<II", fragment, len(body)))
        parts.append(body)
    return b"".join(parts)


def map_of_addresses(addresses: Iterable[int] | np.ndarray) -> RowAddrMap:
    """Group row addresses by fragment."""
    addrs = np.asarray(addresses, dtype=np.uint64)
    if not len(addrs):
        return {}
    addrs = np.sort(addrs)
    frags = (addrs >> np.uint64(32)).astype(np.int64)
    offsets = (addrs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    cuts = np.flatnonzero(np.diff(frags)) + 1
    out: RowAddrMap = {}
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(addrs)], strict=True):
        out[int(frags[lo])] = pyroaring.BitMap(offsets[lo:hi])
    return out


def addresses_of_map(mapping: Mapping[int, Selection],
                     fragment_rows: Mapping[int, int] | None = None) -> np.ndarray:
    """The row addresses of a map, ascending. A whole-fragment entry needs the fragment's
    physical row count in ``fragment_rows`` (fragments missing there are left out)."""
    parts = []
    for fragment in sorted(mapping):
        selection = mapping[fragment]
        if selection is None:
            if fragment_rows is None or fragment not in fragment_rows:
                continue
            offsets = np.arange(fragment_rows[fragment], dtype=np.uint64)
        else:
            offsets = np.asarray(selection.to_array(), dtype=np.uint64)
        parts.append((np.uint64(fragment) << np.uint64(32)) | offsets)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
