"""Row lineage of fragments: stable row ids and row versions, as pure functions.

A fragment of a table with stable row ids carries, per physical row, its row id, the version
that created the row and the version that last updated it (see
:mod:`alance.format.row_id_sequence` and :mod:`alance.format.row_versions`). This module

* assigns them to the new fragments of a commit (:func:`assign_new_rows`, used by
  :func:`~alance.transaction.build.build_manifest`): rows without a row id get the next ones
  from ``Manifest.next_row_id``; rows without a creation version were created by the commit;
  every row of a new fragment was last updated by the commit;
* carries them through rewrites (:func:`rewrite_lineage`: compaction keeps row ids and
  versions of the surviving rows) and writes them into fragments (:func:`attach_lineage`).

Nothing here does IO: sequences stored in external files are loaded by
:mod:`alance.dataset.query.row_ids`, and the external files :func:`attach_lineage` asks for are
written by its caller.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from alance._proto import table_pb2
from alance.errors import InvalidInputError
from alance.format.row_id_sequence import (
    decode_row_ids,
    encode_row_id_bytes,
    parse_row_ids,
    range_row_ids,
    sequence_length,
)
from alance.format.row_versions import decode_versions, encode_version_bytes, uniform_versions

Fragment = table_pb2.DataFragment

#: The format's size limit for inline row id sequences ("< 200KB"); larger ones may go to a
#: file of their own. pylance 14 always writes them inline and refuses to open a table with
#: an external one ("All fragments must have row ids", checked), so alance writes external
#: sequences only when a caller asks for it with ``inline_limit``; it reads both.
INLINE_LIMIT = 200 * 1024
#: Where external row id sequence files go (relative to the dataset root). pylance's cleanup
#: never deletes files in this directory.
ROW_IDS_DIR = "_rowids"

_EMPTY = np.empty(0, dtype=np.uint64)


@dataclass(frozen=True)
class FragmentLineage:
    """Row ids and versions of some rows, in row order (three uint64 arrays, same length)."""

    row_ids: np.ndarray
    created_at: np.ndarray
    last_updated_at: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.row_ids)
        if len(self.created_at) != n or len(self.last_updated_at) != n:
            raise InvalidInputError("row lineage: row ids and versions differ in length")

    def __len__(self) -> int:
        return len(self.row_ids)

    def select(self, positions: np.ndarray | slice) -> FragmentLineage:
        """The lineage of the rows at ``positions`` (or where a boolean mask is true)."""
        return FragmentLineage(self.row_ids[positions], self.created_at[positions],
                               self.last_updated_at[positions])

    @classmethod
    def concat(cls, parts: Iterable[FragmentLineage]) -> FragmentLineage:
        """The lineages one after the other."""
        items = list(parts)
        if not items:
            return cls(_EMPTY, _EMPTY, _EMPTY)
        return cls(np.concatenate([p.row_ids for p in items]),
                   np.concatenate([p.created_at for p in items]),
                   np.concatenate([p.last_updated_at for p in items]))

    def split(self, sizes: Sequence[int]) -> list[FragmentLineage]:
        """Consecutive pieces of ``sizes`` rows (which must add up to the length)."""
        if sum(int(s) for s in sizes) != len(self):
            raise InvalidInputError(f"row lineage: {len(self)} rows cannot be split into "
                                    f"pieces of {list(sizes)} rows")
        bounds = np.cumsum([0, *[int(s) for s in sizes]])
        return [self.select(slice(int(a), int(b))) for a, b in itertools.pairwise(bounds)]


def rewrite_lineage(sources: Sequence[FragmentLineage], output_rows: Sequence[int],
                    deleted: Sequence[np.ndarray | None] | None = None,
                    ) -> list[FragmentLineage]:
    """Lineage of the fragments a rewrite (compaction) writes from ``sources``.

    ``sources`` are the full lineages of the old fragments (one entry per physical row, e.g.
    from :func:`alance.dataset.query.row_ids.fragment_lineage`), in the order their rows are
    written; ``deleted`` gives each one's deleted offsets (``None``: no deletions), which are
    dropped. ``output_rows`` are the new fragments' row counts, in order. Row ids and both
    versions move with their rows unchanged.
    """
    if deleted is not None and len(deleted) != len(sources):
        raise InvalidInputError("rewrite_lineage: one deletion vector per source fragment")
    live = []
    for i, src in enumerate(sources):
        gone = deleted[i] if deleted is not None else None
        if gone is not None and len(gone):
            keep = np.ones(len(src), dtype=bool)
            keep[np.asarray(gone, dtype=np.int64)] = False
            src = src.select(keep)
        live.append(src)
    return FragmentLineage.concat(live).split(output_rows)


def inline_lineage(fragment: Fragment, default_version: int = 1) -> FragmentLineage:
    """The lineage of every physical row of ``fragment`` from its inline sequences (pure).

    A missing version sequence reads as ``default_version`` (what pylance reports). A
    sequence stored in an external file needs IO: use
    :func:`alance.dataset.query.row_ids.fragment_lineage` instead (``InvalidInputError`` here).
    """
    rows = int(fragment.physical_rows)
    if fragment.WhichOneof("row_id_sequence") != "inline_row_ids":
        raise InvalidInputError(f"fragment {fragment.id}: row ids are not stored inline")
    ids = decode_row_ids(fragment.inline_row_ids, rows)
    versions = []
    for which in ("created_at_version_sequence", "last_updated_at_version_sequence"):
        kind = fragment.WhichOneof(which)  # type: ignore[call-overload]
        if kind is None:
            versions.append(np.full(rows, default_version, dtype=np.uint64))
        elif kind.startswith("inline"):
            versions.append(decode_versions(getattr(fragment, kind), rows))
        else:
            raise InvalidInputError(f"fragment {fragment.id}: versions are not stored inline")
    return FragmentLineage(ids, versions[0], versions[1])


def carry_lineage(old_fragments: Sequence[Fragment],
                  deleted: Sequence[np.ndarray | None],
                  new_fragments: Sequence[Fragment]) -> None:
    """Give the fragments a rewrite (compaction) wrote the row ids and versions of the rows
    they hold (pure; in place; everything inline).

    ``old_fragments`` are the rewritten fragments in the order their live rows were written
    (``deleted``: each one's deleted offsets, ``None`` for none) and ``new_fragments`` the
    fragments written, in order, with their ``physical_rows`` set.
    """
    sources = [inline_lineage(f) for f in old_fragments]
    parts = rewrite_lineage(sources, [int(f.physical_rows) for f in new_fragments], deleted)
    for frag, part in zip(new_fragments, parts, strict=True):
        attach_lineage(frag, part)


def external_row_ids_path() -> str:
    """A fresh path (relative to the dataset root) for an external row id sequence."""
    return f"{ROW_IDS_DIR}/{uuid.uuid4().hex}.rowids"


def attach_lineage(fragment: Fragment, lineage: FragmentLineage, *,
                   inline_limit: int | None = None,
                   with_last_updated: bool = True) -> dict[str, bytes]:
    """Store ``lineage`` (one entry per physical row) in ``fragment``'s fields.

    Row ids are stored inline unless ``inline_limit`` is given (e.g. :data:`INLINE_LIMIT`)
    and their serialized size exceeds it: then they go to an external file (which pylance 14
    cannot read) and the returned mapping (path relative to the dataset root -> bytes) lists
    the files the caller must write before committing. Version sequences are always stored
    inline (run-length encoded, they are small; pylance 14 cannot load external ones).
    ``with_last_updated=False`` leaves the last-updated sequence unset, for the commit to
    fill in.
    """
    if len(lineage) != fragment.physical_rows:
        raise InvalidInputError(f"fragment has {fragment.physical_rows} rows, lineage "
                                f"{len(lineage)}")
    files: dict[str, bytes] = {}
    ids = encode_row_id_bytes(lineage.row_ids)
    if inline_limit is not None and len(ids) > inline_limit:
        path = external_row_ids_path()
        files[path] = ids
        fragment.external_row_ids.path = path
        fragment.external_row_ids.offset = 0
        fragment.external_row_ids.size = len(ids)
    else:
        fragment.inline_row_ids = ids
    fragment.inline_created_at_versions = encode_version_bytes(lineage.created_at)
    if with_last_updated:
        fragment.inline_last_updated_at_versions = encode_version_bytes(lineage.last_updated_at)
    else:
        fragment.ClearField("last_updated_at_version_sequence")
    return files


def attach_kept_rows(fragment: Fragment, row_ids: np.ndarray, created_at: np.ndarray) -> None:
    """Give the first ``len(row_ids)`` rows of a new fragment existing row ids and creation
    versions (rows rewritten by an update); the commit fills in the rest (inline only)."""
    if len(row_ids) != len(created_at) or len(row_ids) > fragment.physical_rows:
        raise InvalidInputError("kept rows: row ids and versions must match, at most one per "
                                "row")
    if not len(row_ids):
        return
    fragment.inline_row_ids = encode_row_id_bytes(row_ids)
    fragment.inline_created_at_versions = encode_version_bytes(created_at)


def distribute_kept_rows(fragments: Sequence[Fragment], row_ids: np.ndarray,
                         created_at: np.ndarray) -> None:
    """Spread kept rows' ids and creation versions over new fragments written in that order
    (the kept rows first): see :func:`attach_kept_rows`."""
    if len(row_ids) > sum(int(f.physical_rows) for f in fragments):
        raise InvalidInputError("more kept rows than rows written")
    start = 0
    for frag in fragments:
        take = min(int(frag.physical_rows), len(row_ids) - start)
        if take <= 0:
            break
        attach_kept_rows(frag, row_ids[start:start + take], created_at[start:start + take])
        start += take


def _inline_count(fragment: Fragment, which: str) -> int | None:
    """Rows covered by an inline sequence (None: external, so assumed complete)."""
    if which == "row_id_sequence":
        kind = fragment.WhichOneof("row_id_sequence")
        if kind is None:
            return 0
        if kind == "external_row_ids":
            return None
        return sequence_length(parse_row_ids(fragment.inline_row_ids))
    kind = fragment.WhichOneof(which)  # type: ignore[call-overload]
    if kind is None:
        return 0
    if not kind.startswith("inline"):
        return None
    return len(decode_versions(getattr(fragment, kind)))


def assign_new_rows(fragments: Iterable[Fragment], next_row_id: int, version: int) -> int:
    """Complete the lineage of a commit's new fragments (in place); returns the new
    ``next_row_id``.

    Rows past a fragment's (possibly partial or absent) row id sequence get ids from
    ``next_row_id`` on, rows past its creation versions get ``version``, and the last-updated
    version of every row is ``version`` (all rows of a new fragment were written now).
    """
    for frag in fragments:
        rows = int(frag.physical_rows)
        have = _inline_count(frag, "row_id_sequence")
        if have is None:
            pass
        elif have > rows:
            raise InvalidInputError(f"a new fragment has {have} row ids for {rows} rows")
        elif have == 0:
            frag.inline_row_ids = range_row_ids(next_row_id, rows)
            next_row_id += rows
        elif have < rows:
            old = decode_row_ids(frag.inline_row_ids)
            added = np.arange(rows - have, dtype=np.uint64) + np.uint64(next_row_id)
            frag.inline_row_ids = encode_row_id_bytes(np.concatenate([old, added]))
            next_row_id += rows - have
        created = _inline_count(frag, "created_at_version_sequence")
        if created is None:
            pass
        elif created > rows:
            raise InvalidInputError(f"a new fragment has {created} creation versions for "
                                    f"{rows} rows")
        elif created == 0:
            frag.inline_created_at_versions = uniform_versions(rows, version)
        elif created < rows:
            old_v = decode_versions(frag.inline_created_at_versions)
            full = np.concatenate([old_v, np.full(rows - created, version, dtype=np.uint64)])
            frag.inline_created_at_versions = encode_version_bytes(full)
        frag.inline_last_updated_at_versions = uniform_versions(rows, version)
    return next_row_id


__all__ = [
    "INLINE_LIMIT",
    "ROW_IDS_DIR",
    "FragmentLineage",
    "assign_new_rows",
    "attach_kept_rows",
    "attach_lineage",
    "carry_lineage",
    "distribute_kept_rows",
    "inline_lineage",
    "external_row_ids_path",
    "rewrite_lineage",
]
