"""Byte layout of the v0.1/v0.2 Lance data file: footer, metadata block and page tables.

A legacy data file is laid out as::

    data pages            every page of every column of every row group
    page table            int64 pairs (position, length), field-major, batch-minor
    statistics pages      (optional) one page per statistics column, one row per row group
    statistics page table (optional) int64 pairs, one per statistics field
    dictionary values     (optional) values of dictionary columns
    manifest block        (optional) u32 length + ``lance.table.Manifest`` holding the schema
    metadata block        u32 length + ``lance.file.Metadata``
    footer                u64 metadata position, u16 major, u16 minor, b"LANC"

Pages may appear in any order since the page table addresses each one: upstream writes row group
after row group (each with its columns in schema order, depth first); our writer does the same
for one row group per call, and column after column (all groups of the call) for several.

The page table has one row per field id from the smallest to the largest id of the file's schema
(struct fields and ids not present in the file get ``(0, 0)``) and one column per row group.
Everything is little endian. This module does no IO.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from google.protobuf.message import DecodeError

from alance._proto import file_pb2
from alance.errors import CorruptFileError

MAGIC = b"LANC"
FOOTER_SIZE = 16
MAJOR_VERSION = 0
MINOR_VERSION = 2

_FOOTER = struct.Struct("<QHH4s")
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Footer:
    """The last 16 bytes of a legacy file."""

    metadata_position: int
    major_version: int
    minor_version: int


def encode_footer(metadata_position: int, major: int = MAJOR_VERSION,
                  minor: int = MINOR_VERSION) -> bytes:
    """The 16-byte footer pointing at the metadata block."""
    return _FOOTER.pack(metadata_position, major, minor, MAGIC)


def parse_footer(tail: bytes | memoryview) -> Footer:
    """Decode the footer from the last bytes of a file (``tail`` must end at end of file)."""
    if len(tail) < FOOTER_SIZE:
        raise CorruptFileError(f"file too short for a Lance footer ({len(tail)} bytes)")
    pos, major, minor, magic = _FOOTER.unpack(bytes(tail[-FOOTER_SIZE:]))
    if magic != MAGIC:
        raise CorruptFileError(f"not a Lance file: bad magic {magic!r}")
    if major != 0 or minor > 2:
        raise CorruptFileError(f"not a v0.1/v0.2 Lance file (version {major}.{minor})")
    return Footer(pos, major, minor)


def encode_block(message_bytes: bytes) -> bytes:
    """A protobuf block as Lance stores it: a u32 little-endian length, then the message."""
    return _U32.pack(len(message_bytes)) + message_bytes


def block_length(buf: bytes | memoryview, offset: int) -> int:
    """The message length recorded in the block starting at ``offset`` of ``buf``."""
    if offset < 0 or offset + 4 > len(buf):
        raise CorruptFileError("protobuf block length lies outside the file")
    return int(_U32.unpack_from(buf, offset)[0])


def parse_metadata(buf: bytes | memoryview, offset: int = 0) -> file_pb2.Metadata:
    """Decode the ``lance.file.Metadata`` block starting at ``offset`` of ``buf``."""
    n = block_length(buf, offset)
    if offset + 4 + n > len(buf):
        raise CorruptFileError("metadata block is truncated")
    msg = file_pb2.Metadata()
    try:
        msg.ParseFromString(bytes(buf[offset + 4: offset + 4 + n]))
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise CorruptFileError(f"cannot decode file metadata: {exc}") from exc
    return msg


class PageTable:
    """Positions and lengths of the pages of a range of field ids over all row groups.

    ``entries[field_id - min_field_id, batch] == (position, length)``. What ``length`` counts
    depends on the encoding: values for plain and var-binary pages, offsets (values + 1) for
    list offset pages, and nothing for structs.
    """

    def __init__(self, entries: np.ndarray, min_field_id: int):
        self.entries = entries
        self.min_field_id = min_field_id

    @property
    def max_field_id(self) -> int:
        """The largest field id covered."""
        return self.min_field_id + self.entries.shape[0] - 1

    @property
    def num_batches(self) -> int:
        """Number of row groups covered."""
        return int(self.entries.shape[1])

    def get(self, field_id: int, batch: int) -> tuple[int, int]:
        """``(position, length)`` of a page; CorruptFileError if the table does not cover it."""
        row = field_id - self.min_field_id
        if not (0 <= row < self.entries.shape[0]) or not (0 <= batch < self.entries.shape[1]):
            raise CorruptFileError(
                f"page table has no entry for field {field_id}, row group {batch}")
        pos, length = self.entries[row, batch]
        if pos < 0 or length < 0:
            raise CorruptFileError(f"negative page entry for field {field_id}")
        return int(pos), int(length)

    def field_pages(self, field_id: int) -> np.ndarray:
        """``(position, length)`` of a field's page in every row group: shape (groups, 2)."""
        row = field_id - self.min_field_id
        if not 0 <= row < self.entries.shape[0]:
            raise CorruptFileError(f"page table has no entry for field {field_id}")
        return self.entries[row]  # type: ignore[no-any-return]

    @staticmethod
    def byte_size(min_field_id: int, max_field_id: int, num_batches: int) -> int:
        """Bytes the table occupies on disk."""
        return max(0, max_field_id - min_field_id + 1) * num_batches * 16

    @classmethod
    def decode(cls, data: bytes | memoryview, min_field_id: int, max_field_id: int,
               num_batches: int) -> PageTable:
        """Decode a page table read from disk."""
        n_fields = max(0, max_field_id - min_field_id + 1)
        size = n_fields * num_batches * 16
        if len(data) < size:
            raise CorruptFileError("page table is truncated")
        entries = np.frombuffer(data, dtype="<i8", count=n_fields * num_batches * 2)
        return cls(entries.reshape(n_fields, num_batches, 2), min_field_id)

    def encode(self) -> bytes:
        """The on-disk bytes."""
        return np.ascontiguousarray(self.entries, dtype="<i8").tobytes()


__all__ = [
    "FOOTER_SIZE",
    "MAGIC",
    "MAJOR_VERSION",
    "MINOR_VERSION",
    "Footer",
    "PageTable",
    "block_length",
    "encode_block",
    "encode_footer",
    "parse_footer",
    "parse_metadata",
]
