"""Blob columns: the descriptors a data file stores for them, and where their bytes are.

A blob column keeps its values out of the normal pages; the column itself holds one small
*descriptor* per row. Two generations exist, told apart by the field in the schema:

* **Blob v1** -- a ``large_binary`` (or ``binary``) field with metadata
  ``lance-encoding:blob = true`` in 2.0 / 2.1 files. The descriptor is ``(position, size)``:
  an absolute byte range of the data file itself. Scans return
  ``struct<position: uint64, size: uint64>``. In 2.1 files the page is a ``BlobLayout`` around
  a packed ``(position, size)`` column, and a null row has ``size == 0`` with the row's
  definition level (shifted left by 16 bits) in ``position``; an empty value is ``(0, 0)``.
  2.0 files mark a null row as ``(1, 0)``; scans report it as a valid descriptor.
* **Blob v2** -- a field with the ``lance.blob.v2`` extension (2.2+ files). The descriptor
  is ``struct<kind: uint8, position: uint64, size: uint64, blob_id: uint32, blob_uri: utf8>``
  where ``kind`` says where the bytes live:

  - ``0`` inline: ``[position, position + size)`` of the data file;
  - ``1`` packed: ``[position, position + size)`` of the sidecar file ``blob_id``;
  - ``2`` dedicated: the whole sidecar file ``blob_id`` (``position`` is 0);
  - ``3`` external: the object at ``blob_uri``; ``size == 0`` means all of it, otherwise
    ``[position, position + size)`` of it.

  Sidecar files sit in a directory named after the data file (without ``.lance``), named
  by the 32 bits of ``blob_id`` written least significant bit first, plus ``.blob``.

What writers put where (and the forms users give blob values in) is in
:mod:`.blob_values` and :mod:`.encode_blob`.

This module is pure: Arrow arrays in, descriptor arrays and :class:`BlobLocation` out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.errors import CorruptFileError, InvalidInputError
from alance.format.schema import LanceField, LanceSchema

BLOB_META_KEY = "lance-encoding:blob"
PACKED_META_KEY = "lance-encoding:packed"
BLOB_V2_EXTENSION = "lance.blob.v2"

KIND_INLINE, KIND_PACKED, KIND_DEDICATED, KIND_EXTERNAL = 0, 1, 2, 3

#: What scans return for a blob v1 column (children nullable, as pylance reports them).
DESCRIPTOR_V1 = pa.struct([pa.field("position", pa.uint64()), pa.field("size", pa.uint64())])
#: What scans return for a blob v2 column.
DESCRIPTOR_V2 = pa.struct([
    pa.field("kind", pa.uint8(), nullable=False),
    pa.field("position", pa.uint64(), nullable=False),
    pa.field("size", pa.uint64(), nullable=False),
    pa.field("blob_id", pa.uint32(), nullable=False),
    pa.field("blob_uri", pa.utf8(), nullable=False),
])
#: The v1 descriptor as stored: two packed, non-null u64.
STORED_V1 = pa.struct([pa.field("position", pa.uint64(), nullable=False),
                       pa.field("size", pa.uint64(), nullable=False)])
_V1_NAMES = ["position", "size"]
_V2_NAMES = ["kind", "position", "size", "blob_id", "blob_uri"]
_V2_LOGICAL = {"kind": "uint8", "position": "uint64", "size": "uint64", "blob_id": "uint32",
               "blob_uri": "string"}


def _truthy(value: bytes | str | None) -> bool:
    if value is None:
        return False
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.strip().lower() == "true"


def blob_version(f: LanceField) -> int | None:
    """1 or 2 for a (logical) blob field of the schema, ``None`` for any other field."""
    if f.extension_name == BLOB_V2_EXTENSION:
        return 2
    if _truthy(f.metadata.get(BLOB_META_KEY)) and f.logical_type in ("large_binary", "binary"):
        return 1
    return None


def is_descriptor_field(f: LanceField) -> bool:
    """Whether ``f`` is the descriptor stand-in :func:`descriptor_field` made for a blob."""
    return (f.logical_type == "struct" and not f.extension_name
            and _truthy(f.metadata.get(BLOB_META_KEY))
            and [c.name for c in f.children] in (_V1_NAMES, _V2_NAMES))


def descriptor_version(f: LanceField) -> int:
    """1 or 2 for a descriptor field."""
    return 2 if len(f.children) == len(_V2_NAMES) else 1


def descriptor_field(f: LanceField) -> LanceField:
    """The field a scan returns for blob field ``f``: same id, name and nullability, typed
    as its descriptor struct. The children have no columns of their own (id -1)."""
    version = blob_version(f)
    if version is None:
        raise InvalidInputError(f"column {f.name!r} is not a blob column")
    if version == 1:
        kids = [LanceField(-1, n, "uint64", True, f.id) for n in _V1_NAMES]
        meta = {BLOB_META_KEY: b"true"}
    else:
        kids = [LanceField(-1, n, _V2_LOGICAL[n], False, f.id) for n in _V2_NAMES]
        meta = {BLOB_META_KEY: b"true", PACKED_META_KEY: b"true"}
    return LanceField(f.id, f.name, "struct", f.nullable, f.parent_id, kids, meta)


def descriptor_schema(schema: LanceSchema) -> LanceSchema:
    """``schema`` with every top-level blob field replaced by its descriptor field (what
    scans and takes return); other fields are the same objects."""
    if not any(blob_version(f) for f in schema.fields):
        return schema
    fields = [descriptor_field(f) if blob_version(f) else f for f in schema.fields]
    return replace(schema, fields=fields)


def stored_type(f: LanceField) -> pa.DataType:
    """The Arrow type a descriptor field's column decodes to (before null handling)."""
    return STORED_V1 if descriptor_version(f) == 1 else DESCRIPTOR_V2


def v1_validity_from_smuggled(stored: pa.StructArray) -> np.ndarray:
    """Validity of 2.1 blob v1 rows: a null row stores ``size == 0`` and its (non-zero)
    definition level in ``position``."""
    pos = stored.field("position").to_numpy(zero_copy_only=False)
    size = stored.field("size").to_numpy(zero_copy_only=False)
    return ~((size == 0) & (pos != 0))


def descriptor_array(f: LanceField, stored: pa.Array, valid: np.ndarray | None) -> pa.Array:
    """The descriptor array a scan returns: the decoded children of ``stored`` under the
    row validity ``valid`` (children are null where the row is, as pylance gives them)."""
    if isinstance(stored, pa.ChunkedArray):
        stored = stored.combine_chunks()
    if not pa.types.is_struct(stored.type):
        raise CorruptFileError(f"blob column {f.name!r} decoded to {stored.type}")
    target = DESCRIPTOR_V1 if descriptor_version(f) == 1 else DESCRIPTOR_V2
    names = [t.name for t in target]
    if [s.name for s in stored.type] != names:
        raise CorruptFileError(f"blob column {f.name!r} stores {stored.type}, "
                               f"expected fields {names}")
    n = len(stored)
    if valid is not None and bool(valid.all()):
        valid = None
    mask = None if valid is None else pa.array(~valid)
    kids = []
    for i, t in enumerate(target):
        kid = stored.field(i)
        if kid.type != t.type:
            raise CorruptFileError(f"blob descriptor field {t.name!r} is {kid.type}")
        if mask is not None:
            kid = pc.if_else(mask, pa.nulls(n, t.type), kid)
        kids.append(kid)
    return pa.StructArray.from_arrays(kids, fields=list(target), mask=mask)


def sidecar_path(data_file_path: str, blob_id: int) -> str:
    """Path of sidecar blob file ``blob_id`` of a data file (paths relative to the dataset
    root, e.g. ``data/abc.lance`` -> ``data/abc/1000...0.blob`` for id 1)."""
    if not 0 < blob_id < 1 << 32:
        raise CorruptFileError(f"blob id {blob_id} is out of range")
    stem = data_file_path[:-len(".lance")] if data_file_path.endswith(".lance") \
        else data_file_path
    return f"{stem}/{format(blob_id, '032b')[::-1]}.blob"


def sidecar_owner(path: str) -> str | None:
    """The data file a sidecar blob file belongs to (``data/abc/1000...0.blob`` ->
    ``data/abc.lance``), or ``None`` if ``path`` is not named like a sidecar."""
    stem, sep, name = path.rpartition("/")
    if not sep or not name.endswith(".blob") or not stem:
        return None
    return f"{stem}.lance"


@dataclass(frozen=True)
class BlobLocation:
    """Where one blob's bytes are: a path of the dataset (relative to its root) or an
    external URI, a start and a size (``None``: the whole object, size unknown yet)."""

    path: str | None
    position: int
    size: int | None
    uri: str | None = field(default=None)


def _ints(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False)).astype(np.uint64)


def locate(descriptors: pa.Array, data_file_paths: list[str], *,
           v2: bool, v1_null_marker: bool = False) -> list[BlobLocation | None]:
    """Where the bytes of each row's blob are (``None`` for a null blob).

    ``descriptors``: as a scan returns them (:data:`DESCRIPTOR_V1` / :data:`DESCRIPTOR_V2`);
    ``data_file_paths``: per row, the dataset-relative path of the data file that holds the
    row's descriptor. ``v1_null_marker``: the rows come from 2.0 files, where ``(1, 0)``
    marks a null.
    """
    if isinstance(descriptors, pa.ChunkedArray):
        descriptors = descriptors.combine_chunks()
    n = len(descriptors)
    if len(data_file_paths) != n:
        raise InvalidInputError("one data file path per descriptor is needed")
    valid = np.ones(n, bool) if descriptors.null_count == 0 else \
        np.asarray(descriptors.is_valid().to_numpy(zero_copy_only=False), bool)
    pos = _ints(descriptors.field("position"))
    size = _ints(descriptors.field("size"))
    end = pos + size
    if bool((valid & (end < pos)).any()):
        raise CorruptFileError("a blob descriptor's range overflows")
    if not v2:
        if v1_null_marker:
            valid &= ~((pos == 1) & (size == 0))
        return [BlobLocation(data_file_paths[i], int(pos[i]), int(size[i])) if valid[i]
                else None for i in range(n)]
    kind = _ints(descriptors.field("kind"))
    blob_id = _ints(descriptors.field("blob_id"))
    uris = descriptors.field("blob_uri").to_pylist()
    bad = valid & (kind > KIND_EXTERNAL)
    if bad.any():
        raise CorruptFileError(f"unknown blob kind {int(kind[np.argmax(bad)])}")
    out: list[BlobLocation | None] = []
    for i in range(n):
        if not valid[i]:
            out.append(None)
            continue
        k = int(kind[i])
        if k == KIND_INLINE:
            out.append(BlobLocation(data_file_paths[i], int(pos[i]), int(size[i])))
        elif k in (KIND_PACKED, KIND_DEDICATED):
            path = sidecar_path(data_file_paths[i], int(blob_id[i]))
            out.append(BlobLocation(path, int(pos[i]), int(size[i])))
        else:
            uri = uris[i]
            if not uri:
                raise CorruptFileError("an external blob has no URI")
            whole = size[i] == 0 and pos[i] == 0
            out.append(BlobLocation(None, int(pos[i]), None if whole else int(size[i]), uri))
    return out


__all__ = ["BLOB_META_KEY", "BLOB_V2_EXTENSION", "DESCRIPTOR_V1", "DESCRIPTOR_V2",
           "KIND_DEDICATED", "KIND_EXTERNAL", "KIND_INLINE", "KIND_PACKED", "PACKED_META_KEY",
           "STORED_V1", "BlobLocation", "blob_version", "descriptor_array", "descriptor_field",
           "descriptor_schema", "descriptor_version", "is_descriptor_field", "locate",
           "sidecar_owner",
           "sidecar_path", "stored_type", "v1_validity_from_smuggled"]
