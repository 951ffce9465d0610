"""Deletion files: the per-fragment record of deleted row offsets.

A fragment's deleted rows are stored in a separate, immutable object under
``_deletions/`` at the dataset root. Two encodings exist, selected by the
``DeletionFile.file_type`` field of the fragment's manifest entry:

* ``ARROW_ARRAY`` (``.arrow``): an Arrow IPC *file* (not stream) holding exactly one
  record batch with a single non-nullable ``uint32`` column named ``row_id``. The values
  are row offsets within the fragment, in no particular order. Lance compresses the
  batch body with ZSTD; we do the same.
* ``BITMAP`` (``.bin``): a Roaring bitmap in the portable serialization format shared by
  CRoaring and roaring-rs. Written without run containers, as roaring-rs does.

Lance writes a bitmap when a freshly computed set of deletions holds at least
:data:`BITMAP_THRESHOLD` offsets and an Arrow array otherwise. (When Lance extends an
existing array deletion vector it only switches above the threshold, so either kind can
be seen at exactly 5000 offsets; readers must accept both regardless of size.)

This module only converts between offsets and bytes; it performs no IO.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring

from alance._proto import table_pb2
from alance.errors import CorruptFileError, InvalidInputError

__all__ = [
    "BITMAP_THRESHOLD",
    "DELETIONS_DIR",
    "DeletionFileKind",
    "decode_deletion_file",
    "deletion_file_kind",
    "deletion_file_path",
    "encode_deletion_file",
]

#: Folder (relative to the dataset root) holding deletion files.
DELETIONS_DIR = "_deletions"

#: A fresh deletion set with at least this many offsets is written as a bitmap.
BITMAP_THRESHOLD = 5000

_COLUMN_NAME = "row_id"
_ARROW_SCHEMA = pa.schema([pa.field(_COLUMN_NAME, pa.uint32(), nullable=False)])
_UINT32_MAX = 0xFFFFFFFF


class DeletionFileKind(Enum):
    """How a deletion file is encoded; values match the manifest's ``DeletionFileType``."""

    ARROW_ARRAY = 0
    BITMAP = 1

    @property
    def suffix(self) -> str:
        """The file name extension (without the dot) used for this kind."""
        return "arrow" if self is DeletionFileKind.ARROW_ARRAY else "bin"


def deletion_file_path(fragment_id: int, read_version: int, id: int, kind: DeletionFileKind) -> str:
    """Return the path of a deletion file, relative to the dataset root.

    The layout is ``_deletions/{fragment_id}-{read_version}-{id}.{arrow|bin}`` where all
    three numbers are unsigned 64-bit integers written in decimal.
    """
    for name, value in (("fragment_id", fragment_id), ("read_version", read_version), ("id", id)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise InvalidInputError(f"{name} must be an integer, got {type(value).__name__}")
        if not 0 <= int(value) < 2**64:
            raise InvalidInputError(f"{name} must fit in an unsigned 64-bit integer, got {value}")
    try:
        kind = DeletionFileKind(kind)
    except ValueError as exc:
        raise InvalidInputError(f"unknown deletion file type {kind!r} (0 = arrow array, "
                                "1 = bitmap)") from exc
    return f"{DELETIONS_DIR}/{int(fragment_id)}-{int(read_version)}-{int(id)}.{kind.suffix}"


def deletion_file_kind(file_type: int, where: str) -> DeletionFileKind:
    """The kind of a deletion file from a manifest's ``DeletionFile.file_type``.

    Raises :class:`CorruptFileError` naming ``where`` (e.g. the fragment) for a type Lance
    does not define.
    """
    try:
        return DeletionFileKind(file_type)
    except ValueError as exc:
        raise CorruptFileError(f"{where}: unknown deletion file type {file_type!r} (0 = arrow "
                               "array, 1 = bitmap)") from exc


def _normalize_offsets(offsets: np.ndarray | Iterable[int]) -> np.ndarray:
    """Validate offsets and return them as sorted, unique ``uint32`` values."""
    if isinstance(offsets, (pa.Array, pa.ChunkedArray)):
        if offsets.null_count:
            raise InvalidInputError("deletion offsets must not contain nulls")
        arr = offsets.to_numpy()
    elif isinstance(offsets, np.ndarray):
        arr = offsets
    else:
        items = list(offsets)
        try:
            arr = np.asarray(items) if items else np.empty(0, dtype=np.int64)
        except (OverflowError, ValueError, TypeError) as exc:
            raise InvalidInputError(f"deletion offsets must be integers: {exc}") from exc
    arr = np.asarray(arr).ravel()
    if arr.size == 0:
        return np.empty(0, dtype=np.uint32)
    if arr.dtype.kind not in "iu":
        raise InvalidInputError(f"deletion offsets must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and int(arr.min()) < 0:
        raise InvalidInputError(f"deletion offsets must be non-negative, got {int(arr.min())}")
    if int(arr.max()) > _UINT32_MAX:
        raise InvalidInputError(
            f"deletion offsets must fit in 32 bits (max {_UINT32_MAX}), got {int(arr.max())}"
        )
    return np.unique(arr.astype(np.uint32, copy=False))


def encode_deletion_file(
    offsets: np.ndarray | Iterable[int],
    kind: DeletionFileKind | None = None,
) -> tuple[DeletionFileKind, bytes]:
    """Encode deleted row offsets of one fragment as deletion file bytes.

    ``offsets`` are row offsets within the fragment (0 <= offset < 2**32); duplicates are
    ignored. Unless ``kind`` forces an encoding, it is chosen the way Lance does for a
    fresh deletion set: a bitmap for :data:`BITMAP_THRESHOLD` offsets or more, an Arrow
    array below that. Returns the kind (for the manifest and the file name) and the bytes.

    Raises :class:`InvalidInputError` for empty input (Lance writes no deletion file when
    nothing is deleted) and for offsets that are negative, too large or not integers.
    """
    values = _normalize_offsets(offsets)
    if values.size == 0:
        raise InvalidInputError(
            "no offsets given: a fragment without deletions has no deletion file"
        )
    if kind is None:
        kind = (
            DeletionFileKind.BITMAP
            if values.size >= BITMAP_THRESHOLD
            else DeletionFileKind.ARROW_ARRAY
        )
    kind = DeletionFileKind(kind)
    if kind is DeletionFileKind.BITMAP:
        # optimize=False keeps array/bitset containers only (no run containers), matching
        # what roaring-rs produces and can read.
        bitmap = pyroaring.BitMap(values, optimize=False)
        return kind, bytes(bitmap.serialize())
    batch = pa.record_batch([pa.array(values, type=pa.uint32())], schema=_ARROW_SCHEMA)
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(sink, _ARROW_SCHEMA, options=options) as writer:
        writer.write_batch(batch)
    return kind, sink.getvalue().to_pybytes()


def decode_deletion_file(kind: DeletionFileKind | int, data: bytes | memoryview,
                         path: str | None = None) -> np.ndarray:
    """Decode deletion file bytes into sorted, unique ``uint32`` row offsets.

    Raises :class:`CorruptFileError` if the bytes are not a valid deletion file of the
    given kind (bad IPC/bitmap bytes, wrong schema, more than one batch, nulls); its message
    starts with ``path`` when given.
    """
    where = path or "deletion file"
    try:
        kind = DeletionFileKind(kind)
    except ValueError as exc:
        raise CorruptFileError(f"{where}: unknown deletion file type {kind!r}") from exc
    try:
        if kind is DeletionFileKind.BITMAP:
            return _decode_bitmap(data)
        return _decode_arrow(data)
    except CorruptFileError as exc:
        if path is None:
            raise
        raise CorruptFileError(f"{path}: {exc}") from exc.__cause__


def _decode_bitmap(data: bytes | memoryview) -> np.ndarray:
    try:
        bitmap = pyroaring.BitMap.deserialize(bytes(data))
    except (ValueError, IndexError, OverflowError, MemoryError, SystemError) as exc:
        raise CorruptFileError(f"deletion bitmap does not decode: {exc}") from exc
    # Roaring bitmaps iterate in ascending order, so the array is already sorted.
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32).copy()


def _decode_arrow(data: bytes | memoryview) -> np.ndarray:
    try:
        reader = ipc.open_file(pa.BufferReader(pa.py_buffer(data)))
        schema = reader.schema
        num_batches = reader.num_record_batches
        batch = reader.get_batch(0) if num_batches == 1 else None
        if batch is not None:
            batch.validate(full=True)
        # Names are decoded from UTF-8 on access: a damaged name raises UnicodeDecodeError.
        names = schema.names
    except (pa.ArrowException, ValueError, OSError, IndexError) as exc:
        # (UnicodeDecodeError is a ValueError)
        raise CorruptFileError(f"deletion file is not a valid Arrow IPC file: {exc}") from exc
    if num_batches != 1 or batch is None:
        raise CorruptFileError(
            f"deletion file must hold exactly one record batch, found {num_batches}"
        )
    if (
        len(schema) != 1
        or names[0] != _COLUMN_NAME
        or schema.field(0).type != pa.uint32()
    ):
        raise CorruptFileError(
            f"deletion file must have a single uint32 column {_COLUMN_NAME!r}, "
            f"found schema {schema}"
        )
    column = batch.column(0)
    if column.null_count:
        raise CorruptFileError("deletion file contains null row offsets")
    return np.unique(column.to_numpy(zero_copy_only=False).astype(np.uint32, copy=False))


def deletion_path(fragment: table_pb2.DataFragment) -> str:
    """Path of the fragment's deletion file (which it must have)."""
    df = fragment.deletion_file
    kind = deletion_file_kind(df.file_type, f"fragment {fragment.id}")
    return deletion_file_path(fragment.id, df.read_version, df.id, kind)
