"""Keeping index metadata right when a transaction changes fragments or the schema.

Whoever built an index, alance's commits must carry it the way Lance does, so that both
engines keep using it correctly:

* an index's ``fragment_bitmap`` (a serialized roaring bitmap of fragment ids) says which
  fragments it covers. Lance treats it as immutable history: deleting a fragment does not
  remove its id (readers intersect with the fragments that exist), so neither does alance.
* indices on columns that left the schema are dropped;
* among indices sharing a name, the ones covering no existing fragment are dropped (an empty
  scalar index is kept only when all of that name are empty: the oldest one);
* a rewrite (compaction) moves covered fragment ids to the new fragments (of the indices it
  rewrote, and with stable row ids of every index holding row ids);
* an update that changed a column's values in place un-covers those fragments in indices on
  that column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyroaring

from alance._proto import table_pb2, transaction_pb2
from alance.errors import CorruptFileError, InvalidInputError
from alance.transaction.operations import FRAG_REUSE_INDEX_NAME, SYSTEM_INDEX_NAMES

Index = table_pb2.IndexMetadata


def read_bitmap(index: Index) -> pyroaring.BitMap | None:
    """The fragment ids an index covers (``None``: the index does not record them)."""
    if not index.fragment_bitmap:
        return None
    try:
        return pyroaring.BitMap.deserialize(index.fragment_bitmap)
    except (ValueError, IndexError, OverflowError) as exc:
        raise CorruptFileError(f"index {index.name!r}: fragment bitmap does not decode: {exc}"
                               ) from exc


def write_bitmap(index: Index, bitmap: pyroaring.BitMap) -> None:
    """Store ``bitmap`` as the index's fragment bitmap (without run containers, as Lance)."""
    index.fragment_bitmap = bytes(pyroaring.BitMap(bitmap, optimize=False).serialize())


def is_system_index(index: Index) -> bool:
    """Lance's own bookkeeping indices (fragment reuse, MemWAL), never dropped for coverage."""
    return index.name in SYSTEM_INDEX_NAMES


def _is_vector_index(index: Index) -> bool:
    return index.HasField("index_details") and index.index_details.type_url.endswith(
        "VectorIndexDetails")


def _is_empty(index: Index, existing: pyroaring.BitMap) -> bool:
    bitmap = read_bitmap(index)
    return bitmap is None or not (bitmap & existing)


def retain_relevant_indices(indices: list[Index], field_ids: set[int],
                            fragment_ids: Iterable[int]) -> list[Index]:
    """The indices that still make sense for this schema and the fragments of these ids."""
    if not indices:
        return indices
    kept = [ix for ix in indices
            if is_system_index(ix) or all(f in field_ids for f in ix.fields)]
    existing = pyroaring.BitMap(int(fid) for fid in fragment_ids)
    by_name: dict[str, list[Index]] = {}
    for ix in kept:
        if ix.name != FRAG_REUSE_INDEX_NAME:
            by_name.setdefault(ix.name, []).append(ix)
    keep_uuids: set[bytes] = set()
    for group in by_name.values():
        empty = [ix for ix in group if _is_empty(ix, existing)]
        full = [ix for ix in group if not _is_empty(ix, existing)]
        if len(group) == 1:
            ix = group[0]
            if full or not _is_vector_index(ix):
                keep_uuids.add(ix.uuid.uuid)
        elif full:
            keep_uuids.update(ix.uuid.uuid for ix in full)
        else:
            oldest = min(empty, key=lambda ix: ix.dataset_version)
            if not _is_vector_index(oldest):
                keep_uuids.add(oldest.uuid.uuid)
    return [ix for ix in kept if ix.name == FRAG_REUSE_INDEX_NAME or ix.uuid.uuid in keep_uuids]


def prune_modified_fields(indices: Sequence[Index], fragment_ids: Iterable[int],
                          fields_modified: Iterable[int]) -> None:
    """Un-cover ``fragment_ids`` in indices over a field whose values changed in place."""
    modified = set(fields_modified)
    ids = list(fragment_ids)
    if not modified or not ids:
        return
    for ix in indices:
        if modified & set(ix.fields):
            bitmap = read_bitmap(ix)
            if bitmap is not None:
                for fid in ids:
                    bitmap.discard(fid)
                write_bitmap(ix, bitmap)


def _moved(bitmap: pyroaring.BitMap,
           groups: Sequence[tuple[Sequence[table_pb2.DataFragment],
                                  Sequence[table_pb2.DataFragment]]]) -> pyroaring.BitMap:
    out = pyroaring.BitMap(bitmap)
    for old, new in groups:
        covered = [f.id in bitmap for f in old]
        if not any(covered):
            continue
        if not all(covered):
            raise InvalidInputError("a rewrite group mixes fragments an index covers and ones it "
                                    "does not")
        for f in old:
            out.discard(f.id)
        out.update(f.id for f in new)
    return out


def _holds_addresses(index: Index) -> bool:
    """With stable row ids, BTREE indices of ``index_version`` 1 hold row addresses."""
    return (index.index_details.type_url == "/lance.table.BTreeIndexDetails"
            and index.index_version >= 1)


#: Indices that record zones of fragments (not rows): a rewrite cannot carry them over.
ZONE_INDEX_URLS = ("/lance.table.ZoneMapIndexDetails", "/lance.table.BloomFilterIndexDetails")


def apply_rewrite(indices: Sequence[Index],
                  rewritten: Sequence[transaction_pb2.Transaction.Rewrite.RewrittenIndex],
                  groups: Sequence[tuple[Sequence[table_pb2.DataFragment],
                                         Sequence[table_pb2.DataFragment]]],
                  *, stable_row_ids: bool = False) -> None:
    """Point rewritten indices (new uuid, files, details) at the fragments the rewrite
    produced. With stable row ids the other indices hold row ids, which a rewrite keeps: their
    bitmaps move too, except zone indices', which lose the rewritten fragments (as pylance 14)."""
    seen: set[bytes] = set()
    for change in rewritten:
        old_id = change.old_id.uuid
        if old_id in seen:
            raise InvalidInputError("a rewrite changes the same index twice")
        seen.add(old_id)
        target = next((ix for ix in indices if ix.uuid.uuid == old_id), None)
        if target is None:
            raise InvalidInputError("a rewrite refers to an index that does not exist")
        bitmap = read_bitmap(target)
        if bitmap is None:
            raise InvalidInputError(f"index {target.name!r} has no fragment bitmap to rewrite")
        write_bitmap(target, _moved(bitmap, groups))
        target.uuid.CopyFrom(change.new_id)
        if change.HasField("new_index_details"):
            target.index_details.CopyFrom(change.new_index_details)
            target.index_version = change.new_index_version
        del target.files[:]
        target.files.extend(change.new_index_files)
    if not stable_row_ids:
        return
    old_ids = {f.id for old, _ in groups for f in old}
    for ix in indices:
        bitmap = read_bitmap(ix)
        if (ix.uuid.uuid in seen or is_system_index(ix) or bitmap is None
                or _holds_addresses(ix)):
            continue  # (an address-holding index not rewritten keeps its old fragments)
        if ix.index_details.type_url in ZONE_INDEX_URLS:
            write_bitmap(ix, bitmap - pyroaring.BitMap(old_ids))
        else:
            write_bitmap(ix, _moved(bitmap, groups))
