"""Index kinds: the ``index_details`` type URLs Lance records in the manifest, the names
pylance reports for them, and the names users pass to ``create_scalar_index`` (no IO)."""

from __future__ import annotations

import uuid as _uuid
from functools import lru_cache

from alance._proto import table_pb2
from alance.errors import InvalidInputError

#: ``index_details.type_url`` -> the index type pylance reports.
TYPE_NAMES = {
    "/lance.table.BTreeIndexDetails": "BTree",
    "/lance.table.BitmapIndexDetails": "Bitmap",
    "/lance.table.LabelListIndexDetails": "LabelList",
    "/lance.table.ZoneMapIndexDetails": "ZoneMap",
    "/lance.table.InvertedIndexDetails": "Inverted",
    "/lance.table.NGramIndexDetails": "NGram",
    "/lance.table.BloomFilterIndexDetails": "BloomFilter",
    "/lance.table.JsonIndexDetails": "Json",
    "/lance.table.VectorIndexDetails": "Vector",
    "/lance.table.FragmentReuseIndexDetails": "FragmentReuse",
    "/lance.table.MemWalIndexDetails": "MemWal",
}

BTREE_URL = "/lance.table.BTreeIndexDetails"
BITMAP_URL = "/lance.table.BitmapIndexDetails"
LABEL_LIST_URL = "/lance.table.LabelListIndexDetails"
ZONEMAP_URL = "/lance.table.ZoneMapIndexDetails"
INVERTED_URL = "/lance.table.InvertedIndexDetails"
VECTOR_URL = "/lance.table.VectorIndexDetails"

#: ``create_scalar_index`` type names (upper-cased) -> type URL.
SCALAR_KINDS = {"BTREE": BTREE_URL, "BITMAP": BITMAP_URL, "LABEL_LIST": LABEL_LIST_URL,
                "ZONEMAP": ZONEMAP_URL, "INVERTED": INVERTED_URL}


def type_url(index: table_pb2.IndexMetadata) -> str:
    """The index's details type URL ("" when it records none)."""
    return index.index_details.type_url if index.HasField("index_details") else ""


def type_name(index: table_pb2.IndexMetadata) -> str:
    """The index type as pylance reports it ("BTree", "Bitmap"...; "Unknown" if unknown)."""
    url = type_url(index)
    if url in TYPE_NAMES:
        return TYPE_NAMES[url]
    tail = url.rsplit(".", 1)[-1]
    return tail.removesuffix("IndexDetails") or "Unknown"


def scalar_kind(index_type: str) -> str:
    """The canonical scalar index kind for a user's ``index_type`` ("btree" -> "BTREE")."""
    kind = index_type.strip().upper().replace("-", "_")
    if kind == "LABELLIST":
        kind = "LABEL_LIST"
    if kind == "FTS":
        kind = "INVERTED"
    if kind not in SCALAR_KINDS:
        raise InvalidInputError(f"unsupported scalar index type {index_type!r}; alance builds "
                                f"{', '.join(sorted(SCALAR_KINDS))}")
    return kind


def uuid_text(index: table_pb2.IndexMetadata) -> str:
    """The index's uuid in the usual 8-4-4-4-12 form."""
    return _uuid_text(bytes(index.uuid.uuid))


@lru_cache(maxsize=4096)
def _uuid_text(raw: bytes) -> str:
    return str(_uuid.UUID(bytes=raw))


def index_dir(index: table_pb2.IndexMetadata) -> str:
    """The index's directory relative to the dataset root."""
    return f"_indices/{uuid_text(index)}"
