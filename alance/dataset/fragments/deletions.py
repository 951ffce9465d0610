"""Writing deletion files: soft-deleting rows of fragments the way Lance does.

Deleted rows are recorded per fragment in an immutable file under ``_deletions/``, named
``{fragment_id}-{read_version}-{random u64}.{arrow|bin}`` where ``read_version`` is the version
the deleting writer read. Which encoding Lance picks:

* a fragment without deletions gets a roaring bitmap for 5000 or more deleted rows, an Arrow
  array below that;
* extending an Arrow-array vector switches to a bitmap only above 5000 rows; a bitmap stays
  a bitmap;
* a vector merged during conflict resolution is always written as a bitmap.

A fragment whose rows are all deleted gets no file: it is removed from the manifest instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Iterable, Mapping

import numpy as np

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.errors import AlanceError, InvalidInputError
from alance.format.deletion import (
    BITMAP_THRESHOLD,
    DeletionFileKind,
    deletion_file_kind,
    deletion_file_path,
    deletion_path,
    encode_deletion_file,
)
from alance.io.store import DatasetStore

_EMPTY = np.empty(0, dtype=np.uint32)
#: Deletion files written concurrently per operation.
PARALLEL_WRITES = 16


class WrittenFiles:
    """Paths an operation wrote and must delete again if it does not commit."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def add(self, path: str) -> None:
        """Remember ``path``."""
        self.paths.append(path)

    async def remove_unreferenced(self, store: DatasetStore,
                                  fragments: Iterable[table_pb2.DataFragment]) -> None:
        """Delete the remembered deletion files none of ``fragments`` points to."""
        used = {deletion_path(f) for f in fragments if f.HasField("deletion_file")}
        self.paths = [p for p in self.paths if p not in used]
        await self.remove_all(store)

    async def remove_all(self, store: DatasetStore) -> None:
        """Delete every remembered file (best effort: errors are ignored)."""
        for path in self.paths:
            with contextlib.suppress(AlanceError):  # best effort
                await store.delete(path)
        self.paths.clear()


def kind_for(existing: DeletionFileKind | None, total: int) -> DeletionFileKind:
    """The encoding Lance uses for ``total`` deleted rows, given the fragment's current file."""
    if existing is None:
        return DeletionFileKind.BITMAP if total >= BITMAP_THRESHOLD else (
            DeletionFileKind.ARROW_ARRAY)
    if existing is DeletionFileKind.BITMAP or total > BITMAP_THRESHOLD:
        return DeletionFileKind.BITMAP
    return DeletionFileKind.ARROW_ARRAY


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``values`` sorted without duplicates (a sort: much faster than ``np.unique`` on ints)."""
    out = np.sort(values)
    if len(out) > 1:
        keep = np.empty(len(out), dtype=bool)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        out = out[keep]
    return out


def split_addresses(addresses: np.ndarray) -> dict[int, np.ndarray]:
    """Row addresses (``fragment_id << 32 | offset``) grouped as fragment id -> sorted offsets."""
    addr = sorted_unique(np.asarray(addresses, dtype=np.uint64))
    if not addr.size:
        return {}
    frags = (addr >> np.uint64(32)).astype(np.int64)
    offsets = (addr & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    bounds = np.flatnonzero(np.diff(frags)) + 1
    starts = np.concatenate([[0], bounds])
    return {int(frags[s]): part for s, part in zip(starts, np.split(offsets, bounds), strict=True)}


async def write_deletion_vector(store: DatasetStore, fragment: table_pb2.DataFragment,
                                offsets: np.ndarray, kind: DeletionFileKind, read_version: int,
                                written: WrittenFiles) -> table_pb2.DataFragment | None:
    """Store ``offsets`` (all deleted rows, sorted, unique) as ``fragment``'s deletion file.

    Returns the fragment with its new ``deletion_file``, or ``None`` when every row is deleted
    (then no file is written: the fragment is to be removed).
    """
    rows = int(fragment.physical_rows)
    if len(offsets) and int(offsets[-1]) >= rows:
        raise InvalidInputError(f"fragment {fragment.id} has {rows} rows; cannot delete row "
                                f"{int(offsets[-1])}")
    if len(offsets) == rows:
        return None
    kind, data = encode_deletion_file(offsets, kind)
    file_id = secrets.randbits(64)
    path = deletion_file_path(fragment.id, read_version, file_id, kind)
    written.add(path)
    await store.put(path, data)
    new = table_pb2.DataFragment()
    new.CopyFrom(fragment)
    new.deletion_file.Clear()
    new.deletion_file.file_type = kind.value  # type: ignore[assignment]
    new.deletion_file.read_version = read_version
    new.deletion_file.id = file_id
    new.deletion_file.num_deleted_rows = len(offsets)
    return new


async def extend_deletions(ctx: ReadContext, fragment: table_pb2.DataFragment,
                           new_offsets: np.ndarray, written: WrittenFiles,
                           ) -> table_pb2.DataFragment | None:
    """Add ``new_offsets`` to the fragment's deleted rows (see :func:`write_deletion_vector`)."""
    existing = await ctx.deleted_offsets(fragment)
    current_kind = (deletion_file_kind(fragment.deletion_file.file_type,
                                       f"fragment {fragment.id}")
                    if fragment.HasField("deletion_file") else None)
    merged = sorted_unique(np.concatenate([existing if existing is not None else _EMPTY,
                                           new_offsets.astype(np.uint32)]))
    return await write_deletion_vector(ctx.store, fragment, merged,
                                       kind_for(current_kind, len(merged)),
                                       ctx.snapshot.version, written)


async def apply_deletions(ctx: ReadContext, deleted: Mapping[int, np.ndarray],
                          written: WrittenFiles,
                          ) -> tuple[list[table_pb2.DataFragment], list[int]]:
    """Delete rows (fragment id -> offsets) of this version's fragments.

    Returns the fragments with new deletion files (in dataset order) and the ids of fragments
    whose rows are now all deleted.
    """
    fragments = [f for f in ctx.snapshot.fragments if f.id in deleted]
    if len(fragments) != len(deleted):
        missing = sorted(set(deleted) - {f.id for f in fragments})
        raise InvalidInputError(f"no fragments {missing} in version {ctx.snapshot.version}")
    sem = asyncio.Semaphore(PARALLEL_WRITES)

    async def one(frag: table_pb2.DataFragment) -> table_pb2.DataFragment | None:
        async with sem:
            return await extend_deletions(ctx, frag, deleted[frag.id], written)

    results = await asyncio.gather(*(one(f) for f in fragments))
    updated = [r for r in results if r is not None]
    removed = [f.id for f, r in zip(fragments, results, strict=True) if r is None]
    return updated, removed


def concat_offsets(parts: Iterable[np.ndarray]) -> np.ndarray:
    """Sorted unique offsets from several arrays."""
    arrays = [p for p in parts if len(p)]
    return sorted_unique(np.concatenate(arrays)).astype(np.uint32) if arrays else _EMPTY
