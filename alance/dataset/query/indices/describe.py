"""What ``list_indices`` / ``describe_indices`` report, from the manifest alone (no IO)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

from alance._proto import table_pb2
from alance.dataset.fragments.read import live_rows
from alance.dataset.query.indices import ivf
from alance.dataset.query.indices.types import type_name, type_url, uuid_text
from alance.transaction.indices import is_system_index, read_bitmap


@dataclass(frozen=True)
class IndexSegmentDescription:
    """One segment (delta) of an index: pylance's ``IndexSegmentDescription``."""

    uuid: str
    dataset_version_at_last_update: int
    fragment_ids: set[int]
    index_version: int
    created_at: dt.datetime | None
    base_id: int | None
    size_bytes: int | None
    covering_fields: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class IndexDescription:
    """All segments of one named index: pylance's ``IndexDescription``."""

    name: str
    type_url: str
    index_type: str
    num_rows_indexed: int
    fields: list[int]
    field_names: list[str]
    segments: list[IndexSegmentDescription]
    details: Any = "{}"

    @property
    def total_size_bytes(self) -> int:
        """Bytes of every segment's files."""
        return sum(s.size_bytes or 0 for s in self.segments)

    @property
    def num_segments(self) -> int:
        """Number of segments."""
        return len(self.segments)

    def __repr__(self) -> str:
        return (f"IndexDescription(name={self.name!r}, type_url={self.type_url!r}, "
                f"num_rows_indexed={self.num_rows_indexed}, fields={self.fields}, "
                f"field_names={json.dumps(self.field_names)}, "
                f"num_segments={self.num_segments}, total_size_bytes={self.total_size_bytes})")


def user_indices(manifest_indices: list[table_pb2.IndexMetadata],
                 ) -> dict[str, list[table_pb2.IndexMetadata]]:
    """Segments of the user's indices (system indices left out), by name, in manifest order."""
    out: dict[str, list[table_pb2.IndexMetadata]] = {}
    for ix in manifest_indices:
        if not is_system_index(ix):
            out.setdefault(ix.name, []).append(ix)
    return out


def covered_fragments(index: table_pb2.IndexMetadata,
                      fragments: list[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
    """The existing fragments the segment covers."""
    bitmap = read_bitmap(index)
    if bitmap is None:
        return []
    return [f for f in fragments if int(f.id) in bitmap]


def _segment(ix: table_pb2.IndexMetadata) -> IndexSegmentDescription:
    bitmap = read_bitmap(ix)
    created = (dt.datetime.fromtimestamp(ix.created_at / 1000, tz=dt.UTC)
               if ix.HasField("created_at") else None)
    size = sum(int(f.size_bytes) for f in ix.files) if len(ix.files) else None
    return IndexSegmentDescription(
        uuid=uuid_text(ix), dataset_version_at_last_update=int(ix.dataset_version),
        fragment_ids=set(bitmap) if bitmap is not None else set(),
        index_version=int(ix.index_version), created_at=created,
        base_id=int(ix.base_id) if ix.HasField("base_id") else None, size_bytes=size)


def describe(manifest_indices: list[table_pb2.IndexMetadata],
             fragments: list[table_pb2.DataFragment],
             field_names: dict[int, str], *, kind: Any = None) -> list[IndexDescription]:
    """One :class:`IndexDescription` per index name, sorted by name (as pylance).

    ``kind``: a function naming an index's type when the manifest alone cannot (vector
    indices), given its first segment."""
    out = []
    for name, segments in sorted(user_indices(manifest_indices).items()):
        first = segments[0]
        rows = sum(live_rows(f) for ix in segments for f in covered_fragments(ix, fragments))
        vector = ivf.is_vector_index(first)
        out.append(IndexDescription(
            name=name, type_url=type_url(first),
            index_type=(ivf.vector_kind(first) if vector else None)
            or (kind(first) if kind is not None else None) or type_name(first),
            details=ivf.details_dict(ivf.details_of(first)) if vector else "{}",
            num_rows_indexed=rows, fields=[int(f) for f in first.fields],
            field_names=[field_names.get(int(f), str(f)) for f in first.fields],
            segments=[_segment(ix) for ix in segments]))
    return out


def list_entries(descriptions: list[IndexDescription]) -> list[dict[str, Any]]:
    """pylance's ``list_indices`` dicts: one per segment."""
    return [{"name": d.name, "type": d.index_type, "uuid": s.uuid, "fields": d.field_names,
             "version": s.dataset_version_at_last_update, "fragment_ids": s.fragment_ids,
             "base_id": s.base_id}
            for d in descriptions for s in d.segments]
