"""The 2.x file container: footer, offset tables, column metadata and the schema buffer.

Layout (all integers little endian)::

    data pages and buffers ...
    column metadata 0 .. N-1         (one protobuf ColumnMetadata each)
    column metadata offset table     (N x (u64 position, u64 size))
    global buffer offset table       (G x (u64 position, u64 size))
    footer (40 bytes): u64 column-metadata start, u64 CMO table start, u64 GBO table start,
                       u32 G, u32 N, u16 major, u16 minor, b"LANC"

Global buffer 0 holds a ``lance.file.FileDescriptor``: the schema and the row count.
Nothing here does IO: :func:`open_file` is a read plan (see :mod:`alance.format.legacy.plan`).
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from alance._proto import encodings_v2_0_pb2, encodings_v2_1_pb2, file2_pb2, file_pb2
from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.plan import Plan, coalesced, read_tail
from alance.format.schema import LanceSchema

FOOTER_SIZE = 40
MAGIC = b"LANC"
DEFAULT_TAIL_SIZE = 64 * 1024
SUPPORTED_VERSIONS = ((2, 0), (2, 1), (2, 2))
#: Footer version numbers of format 2.0 files (written before the 2.x numbering).
V2_0_FOOTER = (0, 3)


@dataclass(frozen=True)
class Footer:
    """The fixed-size footer of a 2.x file (format 2.0's footer says 0.3: given as 2.0)."""

    column_meta_start: int
    cmo_table_start: int
    gbo_table_start: int
    num_global_buffers: int
    num_columns: int
    major_version: int
    minor_version: int


def parse_footer(tail: bytes | memoryview, file_size: int) -> Footer:
    """Parse the footer from bytes ending at the end of the file."""
    if len(tail) < FOOTER_SIZE:
        raise CorruptFileError("file too short for a Lance 2.x footer")
    raw = bytes(tail[-FOOTER_SIZE:])
    if raw[-4:] != MAGIC:
        raise CorruptFileError("not a Lance file (bad magic)")
    cm, cmo, gbo, ng, nc, major, minor = struct.unpack_from("<QQQIIHH", raw)
    if (major, minor) == V2_0_FOOTER:
        major, minor = 2, 0
    footer = Footer(cm, cmo, gbo, ng, nc, major, minor)
    if (major, minor) not in SUPPORTED_VERSIONS:
        if major < 2:
            raise CorruptFileError(f"file version {major}.{minor} is not a 2.x file")
        raise UnsupportedFeatureError(f"Lance file version {major}.{minor} is not supported")
    end = file_size - FOOTER_SIZE
    if not (cm <= cmo <= gbo <= end) or cmo + 16 * nc > gbo or gbo + 16 * ng > end:
        raise CorruptFileError("footer offsets are inconsistent with the file size")
    return footer


def decode_any(raw: bytes, message: Any, what: str) -> Any:
    """Decode a serialized ``google.protobuf.Any`` holding ``message``'s type."""
    wrapper = any_pb2.Any()
    try:
        wrapper.ParseFromString(raw)
        expected = message.DESCRIPTOR.full_name
        if wrapper.type_url and wrapper.type_url.rsplit("/", 1)[-1] != expected:
            raise UnsupportedFeatureError(
                f"{what} uses encoding {wrapper.type_url!r}; expected {expected}")
        message.ParseFromString(wrapper.value)
    except DecodeError as exc:
        raise CorruptFileError(f"cannot decode {what}: {exc}") from exc
    return message


@dataclass
class PageInfo:
    """One page of a column: its row count, buffers and decoded encoding message."""

    num_rows: int
    first_row: int
    buffers: list[tuple[int, int]]  # (absolute position, size)
    encoding: Any  # PageLayout (2.1+) or ArrayEncoding (2.0)


@dataclass
class ColumnInfo:
    """Pages of one column (parsed on first use)."""

    index: int
    pages: list[PageInfo]
    buffers: list[tuple[int, int]]
    page_starts: np.ndarray  # first row of every page, plus the total
    _starts: list[int] = field(init=False, repr=False)  # the same, for bisect (per range)

    def __post_init__(self) -> None:
        self._starts = self.page_starts.tolist()

    def pages_for(self, start: int, end: int) -> range:
        """Indices of the pages overlapping rows ``[start, end)``."""
        first = bisect_right(self._starts, start) - 1
        last = bisect_left(self._starts, end)
        return range(max(first, 0), min(last, len(self.pages)))


@dataclass
class V2File:
    """What :func:`open_file` learns from a 2.x file's tail: enough to plan any read."""

    file_size: int
    footer: Footer
    num_rows: int
    schema: LanceSchema | None
    column_ranges: np.ndarray  # (N, 2): position and size of every column's metadata
    global_buffers: list[tuple[int, int]]
    tail: bytes
    tail_start: int
    _columns: dict[int, ColumnInfo] = field(default_factory=dict)
    #: Per-page state read once and reused (chunk metadata, dictionaries, ...).
    page_state: dict[Any, Any] = field(default_factory=dict)

    @property
    def version(self) -> tuple[int, int]:
        """(major, minor) from the footer."""
        return self.footer.major_version, self.footer.minor_version

    @property
    def num_columns(self) -> int:
        """Columns in the file."""
        return self.footer.num_columns

    def column(self, index: int) -> ColumnInfo:
        """The parsed metadata of column ``index``."""
        info = self._columns.get(index)
        if info is None:
            if not 0 <= index < self.num_columns:
                raise CorruptFileError(f"column {index} is not in the file "
                                       f"({self.num_columns} columns)")
            pos, size = (int(v) for v in self.column_ranges[index])
            raw = self.tail[pos - self.tail_start: pos - self.tail_start + size]
            info = _parse_column(index, raw, self.version, self.num_rows)
            self._columns[index] = info
        return info


def _parse_column(index: int, raw: bytes, version: tuple[int, int], num_rows: int,
                  ) -> ColumnInfo:
    meta = file2_pb2.ColumnMetadata()
    try:
        meta.ParseFromString(raw)
    except DecodeError as exc:
        raise CorruptFileError(f"cannot decode metadata of column {index}: {exc}") from exc
    pages: list[PageInfo] = []
    row = 0
    for page in meta.pages:
        if len(page.buffer_offsets) != len(page.buffer_sizes):
            raise CorruptFileError(f"column {index}: page buffer lists differ in length")
        which = page.encoding.WhichOneof("location")
        if which != "direct":
            raise UnsupportedFeatureError(f"column {index}: page encoding stored as {which}")
        msg: Any = (encodings_v2_0_pb2.ArrayEncoding() if version == (2, 0)
                    else encodings_v2_1_pb2.PageLayout())
        decode_any(page.encoding.direct.encoding, msg, f"page encoding of column {index}")
        bufs = [(int(o), int(s)) for o, s in zip(page.buffer_offsets, page.buffer_sizes,
                                                  strict=True)]
        pages.append(PageInfo(int(page.length), row, bufs, msg))
        row += int(page.length)
    if pages and row != num_rows and version != (2, 0):  # 2.0 item columns differ
        raise CorruptFileError(f"column {index}: pages hold {row} rows, the file {num_rows}")
    starts = np.array([p.first_row for p in pages] + [row], dtype=np.int64)
    cbufs = [(int(o), int(s)) for o, s in zip(meta.buffer_offsets, meta.buffer_sizes,
                                              strict=False)]
    return ColumnInfo(index, pages, cbufs, starts)


def open_file(file_size: int, *, tail_size: int = DEFAULT_TAIL_SIZE,
              tail: bytes | None = None) -> Plan[V2File]:
    """Plan reading the footer, offset tables, column metadata and schema of a 2.x file.

    One step (the tail) when the metadata fits in ``tail_size`` bytes, else two.
    """
    return coalesced(_guarded_open(file_size, tail_size, tail), file_size=file_size)


def _guarded_open(file_size: int, tail_size: int, tail: bytes | None) -> Plan[V2File]:
    try:
        return (yield from _open_file(file_size, tail_size, tail))
    except (ValueError, IndexError, OverflowError) as exc:
        if isinstance(exc, InvalidInputError):
            raise
        raise CorruptFileError(f"malformed 2.x file metadata: {exc}") from exc


def _open_file(file_size: int, tail_size: int, tail: bytes | None) -> Plan[V2File]:
    tail = yield from read_tail(file_size, FOOTER_SIZE, tail_size, tail)
    tail_start = file_size - len(tail)
    footer = parse_footer(tail, file_size)
    gbo = footer.gbo_table_start
    # Everything from the first global buffer / column metadata to the end is metadata.
    need = min(footer.column_meta_start, gbo)
    if gbo < tail_start:
        (head,) = yield [(gbo, tail_start)]
        tail, tail_start = bytes(head) + tail, gbo
    table = np.frombuffer(tail, dtype="<u8", count=2 * footer.num_global_buffers,
                          offset=gbo - tail_start).reshape(-1, 2)
    globals_ = [(int(p), int(s)) for p, s in table]
    if not globals_:
        raise CorruptFileError("file has no global buffers (the schema is expected in one)")
    for p, s in globals_:
        if p + s > file_size - FOOTER_SIZE:
            raise CorruptFileError("a global buffer lies outside the file")
    need = min(need, globals_[0][0])
    if need < tail_start:
        (head,) = yield [(need, tail_start)]
        tail, tail_start = bytes(head) + tail, need
    cmo = np.frombuffer(tail, dtype="<u8", count=2 * footer.num_columns,
                        offset=footer.cmo_table_start - tail_start).reshape(-1, 2)
    cmo = cmo.astype(np.int64)
    if len(cmo) and (cmo[:, 0].min() < footer.column_meta_start
                     or (cmo[:, 0] + cmo[:, 1]).max() > footer.cmo_table_start
                     or cmo.min() < 0):
        raise CorruptFileError("column metadata offsets point outside the metadata section")
    pos, size = globals_[0]
    if pos < tail_start:
        raise CorruptFileError("schema buffer lies before the metadata")
    descriptor = file_pb2.FileDescriptor()
    try:
        descriptor.ParseFromString(tail[pos - tail_start: pos - tail_start + size])
    except DecodeError as exc:
        raise CorruptFileError(f"cannot decode the file schema: {exc}") from exc
    try:
        schema = LanceSchema.from_protos(descriptor.schema.fields,
                                         dict(descriptor.schema.metadata))
    except (InvalidInputError, UnsupportedFeatureError):
        schema = None  # the dataset's schema is used instead
    return V2File(file_size, footer, int(descriptor.length), schema, cmo, globals_,
                  tail, tail_start)


__all__ = ["FOOTER_SIZE", "MAGIC", "ColumnInfo", "Footer", "PageInfo", "V2File", "decode_any",
           "open_file", "parse_footer"]
