"""The values users write to blob columns: the forms they come in, their bytes, and the size
limits that decide where blob v2 values go.

Users give blob v2 values as pylance's ``lance.blob.v2`` extension arrays (a struct of
``data``, ``uri`` and optionally ``position`` / ``size``) and blob v1 values as binary
arrays of a field with ``lance-encoding:blob`` metadata. A 2.2 dataset stores blob v1 input
fields as blob v2 columns, as pylance does (:func:`v2_arrow_field`).

Blob v2 writers put a value of at most ``inline`` bytes (64 KiB) into the data file, one of
at most ``dedicated`` bytes (4 MiB) into the open *pack* sidecar (a new pack is started
when the value would take it past ``pack_file`` bytes, 1 GiB), and a larger value into a
sidecar of its own; field metadata ``lance-encoding:blob-{inline,dedicated,pack-file}-size-
threshold`` overrides the limits (see :mod:`.encode_blob`).

Pure: Arrow arrays in, numpy arrays out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.schema import LanceField, LanceSchema
from alance.format.v2.blob import BLOB_META_KEY, BLOB_V2_EXTENSION, blob_version
from alance.format.v2.kernels import range_indices

INLINE_THRESHOLD_KEY = "lance-encoding:blob-inline-size-threshold"
DEDICATED_THRESHOLD_KEY = "lance-encoding:blob-dedicated-size-threshold"
PACK_FILE_THRESHOLD_KEY = "lance-encoding:blob-pack-file-size-threshold"

#: The storage of pylance's blob v2 extension type: what users write.
BLOB_V2_STORAGE = pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.utf8()),
                             pa.field("position", pa.uint64()),
                             pa.field("size", pa.uint64())])


@dataclass(frozen=True)
class BlobThresholds:
    """Where blob v2 values go by size: inline up to ``inline`` bytes, into a pack sidecar
    up to ``dedicated`` bytes, else into a sidecar of their own; a pack holds at most
    ``pack_file`` bytes (unless one value alone is larger)."""

    inline: int = 64 * 1024
    dedicated: int = 4 * 1024 * 1024
    pack_file: int = 1024 * 1024 * 1024


def _threshold(f: LanceField, key: str, default: int, minimum: int) -> int:
    raw = f.metadata.get(key)
    if raw is None:
        return default
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        value = int(text.strip())
    except ValueError:
        raise InvalidInputError(f"blob column {f.name!r}: {key} must be an integer, "
                                f"not {text!r}") from None
    if value < minimum:
        raise InvalidInputError(f"blob column {f.name!r}: {key} must be at least {minimum}")
    return value


def thresholds_of(f: LanceField) -> BlobThresholds:
    """The size limits of blob v2 field ``f`` (defaults unless its metadata sets them)."""
    base = BlobThresholds()
    return BlobThresholds(_threshold(f, INLINE_THRESHOLD_KEY, base.inline, 0),
                          _threshold(f, DEDICATED_THRESHOLD_KEY, base.dedicated, 1),
                          _threshold(f, PACK_FILE_THRESHOLD_KEY, base.pack_file, 1))


#: The short storage pylance gives converted blob v1 fields (no external ranges).
BLOB_V2_MINIMAL = pa.struct([pa.field("data", pa.large_binary()), pa.field("uri", pa.utf8())])


class BlobV2Type(pa.ExtensionType):
    """The ``lance.blob.v2`` extension (over :data:`BLOB_V2_MINIMAL` unless told), for
    converted inputs (not registered with pyarrow: pylance registers its own type)."""

    def __init__(self, storage: pa.DataType = BLOB_V2_MINIMAL) -> None:
        """A blob v2 type over ``storage``."""
        super().__init__(storage, BLOB_V2_EXTENSION)

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType,
                                  serialized: bytes) -> BlobV2Type:
        return cls(storage_type)


def v2_arrow_field(field: pa.Field) -> pa.Field:
    """Arrow field ``field`` (a blob v1 ``binary`` / ``large_binary`` with blob metadata) as
    the blob v2 field a 2.2 dataset stores."""
    meta = {k: v for k, v in (field.metadata or {}).items() if k != BLOB_META_KEY.encode()}
    return pa.field(field.name, BlobV2Type(), field.nullable, meta or None)


def is_v1_arrow_field(field: pa.Field) -> bool:
    """Whether an Arrow field is a blob v1 field (binary with ``lance-encoding:blob``)."""
    flag = (field.metadata or {}).get(BLOB_META_KEY.encode(), b"")
    return (flag.decode(errors="replace").strip().lower() == "true"
            and (pa.types.is_large_binary(field.type) or pa.types.is_binary(field.type)))


def v2_values_of_binary(arr: pa.Array) -> pa.ExtensionArray:
    """Binary values as blob v2 rows (``data`` set, ``uri`` / range null)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    data = arr.cast(pa.large_binary())
    mask = None if arr.null_count == 0 else arr.is_null()
    kids = [data, pa.nulls(n, pa.utf8())]
    storage = pa.StructArray.from_arrays(kids, fields=list(BLOB_V2_MINIMAL), mask=mask)
    return pa.ExtensionArray.from_storage(BlobV2Type(), storage)


def blob_bytes_per_row(schema: LanceSchema, batch: pa.RecordBatch) -> np.ndarray | None:
    """Bytes of blob values in every row of ``batch`` (all blob columns of ``schema``
    together; ``None`` when the schema has no blob column)."""
    total: np.ndarray | None = None
    for f in schema.fields:
        if blob_version(f) is None or f.name not in batch.schema.names:
            continue
        arr = batch.column(f.name)
        while isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        if pa.types.is_struct(arr.type):
            arr = arr.field(0)
        if not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            continue  # blob_values refuses it when the batch is written
        offs = np.frombuffer(arr.buffers()[1], np.int64 if pa.types.is_large_binary(
            arr.type) else np.int32)[arr.offset: arr.offset + len(arr) + 1]
        sizes = np.diff(offs.astype(np.int64)) if len(arr) else np.zeros(0, np.int64)
        total = sizes if total is None else total + sizes
    return total


@dataclass(frozen=True)
class BlobValues:
    """The values of a blob column to write: ``valid`` per row, and the bytes of row ``i``
    as ``data[offsets[i]:offsets[i + 1]]`` (empty for a null row)."""

    valid: np.ndarray  # bool
    offsets: np.ndarray  # int64, n + 1, from 0
    data: np.ndarray  # uint8 (a view of the Arrow buffer where possible)

    @property
    def sizes(self) -> np.ndarray:
        """Bytes of every row's value."""
        return np.diff(self.offsets)


def blob_values(f: LanceField, arr: pa.Array) -> BlobValues:
    """The bytes of a blob column's rows: ``arr`` is the users' blob v2 storage struct
    (``data``, ``uri``, optionally ``position`` / ``size``) or binary values.

    External blobs (a ``uri``) are refused (UnsupportedFeatureError): alance writes only
    blob bytes it holds; a valid row with neither ``data`` nor ``uri`` is InvalidInputError.
    """
    while isinstance(arr, pa.ExtensionArray):
        arr = arr.storage
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    if pa.types.is_struct(arr.type):
        names = [t.name for t in arr.type]
        if names[:2] != ["data", "uri"]:
            raise InvalidInputError(f"blob column {f.name!r}: values must be a struct of "
                                    f"data, uri[, position, size], not {arr.type}")
        row_valid = np.ones(n, bool) if arr.null_count == 0 else \
            np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
        uri = arr.field(1)
        if uri.null_count < n and bool((np.asarray(uri.is_valid()) & row_valid).any()):
            raise UnsupportedFeatureError(
                f"blob column {f.name!r}: external blob URIs are not written by alance "
                "(give the bytes as data)")
        data = arr.field(0)
        data_valid = np.ones(n, bool) if data.null_count == 0 else \
            np.asarray(data.is_valid().to_numpy(zero_copy_only=False), bool)
        if bool((row_valid & ~data_valid).any()):
            raise InvalidInputError(f"blob column {f.name!r}: a non-null blob sets neither "
                                    "data nor uri (use a null row for a null blob)")
        valid = row_valid
    elif pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        data = arr
        valid = np.ones(n, bool) if arr.null_count == 0 else \
            np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), bool)
    else:
        raise InvalidInputError(f"blob column {f.name!r} takes binary values or blob "
                                f"structs, not {arr.type}")
    if not pa.types.is_large_binary(data.type):
        data = data.cast(pa.large_binary())
    bufs = data.buffers()
    offs = np.frombuffer(bufs[1], np.int64)[data.offset: data.offset + n + 1] if n else \
        np.zeros(1, np.int64)
    raw = np.zeros(0, np.uint8) if bufs[2] is None else np.frombuffer(bufs[2], np.uint8)
    lengths = np.diff(offs)
    if not bool(lengths[~valid].any()):  # null rows hold no bytes: use the buffer as is
        return BlobValues(valid, offs - offs[0], raw[int(offs[0]): int(offs[-1])])
    sizes = np.where(valid, lengths, 0)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    return BlobValues(valid, offsets, raw[range_indices(offs[:-1][valid], sizes[valid])])


__all__ = ["BLOB_V2_MINIMAL", "BLOB_V2_STORAGE", "DEDICATED_THRESHOLD_KEY",
           "INLINE_THRESHOLD_KEY", "PACK_FILE_THRESHOLD_KEY", "BlobThresholds", "BlobV2Type",
           "BlobValues", "blob_bytes_per_row", "blob_values", "is_v1_arrow_field",
           "thresholds_of", "v2_arrow_field", "v2_values_of_binary"]
