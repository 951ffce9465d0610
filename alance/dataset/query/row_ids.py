"""Stable row ids at read time: loading fragments' row lineage, system columns, the row id
index and ``take_rows``.

For a table with stable row ids, ``_rowid`` is the id stored in the fragment's row id sequence
(see :mod:`alance.format.row_id_sequence`); otherwise it is the row address
``fragment_id << 32 | offset``. ``_row_created_at_version`` / ``_row_last_updated_at_version``
come from the fragment's version sequences (1 where a fragment has none, as pylance reports).

The row id index maps row ids to row addresses for one version. It is built on first use and
kept per version: every fragment's ids (decoded with numpy) minus its deleted rows, sorted once;
lookups are a ``searchsorted``. Decoded sequences are cached per dataset version.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.errors import CorruptFileError, InvalidInputError
from alance.format.feature_flags import FeatureFlag
from alance.format.row_id_sequence import decode_row_ids, parse_row_ids
from alance.format.row_versions import decode_versions
from alance.transaction.lineage import FragmentLineage

if TYPE_CHECKING:
    pass

ROW_ID = "_rowid"
ROW_ADDRESS = "_rowaddr"
ROW_CREATED_AT_VERSION = "_row_created_at_version"
ROW_LAST_UPDATED_AT_VERSION = "_row_last_updated_at_version"
#: The system columns scans and takes can produce (all uint64), in their canonical order.
SYSTEM_COLUMNS = (ROW_ID, ROW_ADDRESS, ROW_CREATED_AT_VERSION, ROW_LAST_UPDATED_AT_VERSION)
VERSION_COLUMNS = (ROW_CREATED_AT_VERSION, ROW_LAST_UPDATED_AT_VERSION)
#: Version pylance reports for rows of fragments that carry no version sequence.
DEFAULT_ROW_VERSION = 1
#: Fragments whose sequences are loaded concurrently when the index is built.
PARALLEL_LOADS = 64

Fragment = table_pb2.DataFragment


def uses_stable_row_ids(manifest: table_pb2.Manifest) -> bool:
    """Whether the table's rows have stable row ids (the reader feature flag)."""
    return bool(manifest.reader_feature_flags & FeatureFlag.STABLE_ROW_IDS)


class _Cache:
    """Decoded sequences of one dataset version (shared by its scans and takes)."""

    def __init__(self) -> None:
        self.row_ids: dict[int, np.ndarray] = {}
        self.versions: dict[tuple[int, str], np.ndarray] = {}
        self.index: RowIdIndex | None = None
        self.index_lock = asyncio.Lock()


_CACHES: weakref.WeakKeyDictionary[ReadContext, _Cache] = weakref.WeakKeyDictionary()


def _cache(ctx: ReadContext) -> _Cache:
    cache = _CACHES.get(ctx)
    if cache is None:
        cache = _CACHES[ctx] = _Cache()
    return cache


async def _external(ctx: ReadContext, ref: table_pb2.ExternalFile, what: str) -> bytes:
    end = int(ref.offset) + int(ref.size)
    data = await ctx.store.get_range(ref.path, int(ref.offset), end)
    if len(data) != ref.size:
        raise CorruptFileError(f"{ref.path}: {what} is {len(data)} bytes, expected {ref.size}")
    return data


async def fragment_row_ids(ctx: ReadContext, fragment: Fragment, *,
                           remember: bool = True) -> np.ndarray:
    """Row id of every physical row of ``fragment`` (uint64; addresses without stable ids).

    ``remember=False`` does not keep the decoded ids in the version's cache."""
    if not uses_stable_row_ids(ctx.snapshot.manifest):
        offsets = np.arange(int(fragment.physical_rows), dtype=np.uint64)
        return (np.uint64(fragment.id) << np.uint64(32)) | offsets
    cache = _cache(ctx)
    found = cache.row_ids.get(fragment.id)
    if found is not None:
        return found
    kind = fragment.WhichOneof("row_id_sequence")
    if kind == "inline_row_ids":
        data: bytes = fragment.inline_row_ids
    elif kind == "external_row_ids":
        data = await _external(ctx, fragment.external_row_ids, "row id sequence")
    else:
        raise CorruptFileError(f"fragment {fragment.id} of a table with stable row ids has no "
                               "row id sequence")
    ids = await _decode(decode_row_ids, data, int(fragment.physical_rows))
    if remember:
        cache.row_ids[fragment.id] = ids
    return ids


async def _decode(fn: Any, data: bytes, rows: int) -> np.ndarray:
    if len(data) > 1 << 16:  # large sequences decode off the event loop
        result: np.ndarray = await asyncio.to_thread(fn, data, rows)
        return result
    out: np.ndarray = fn(data, rows)
    return out


async def fragment_versions(ctx: ReadContext, fragment: Fragment, column: str) -> np.ndarray:
    """``_row_created_at_version`` or ``_row_last_updated_at_version`` of every physical row."""
    which = ("created_at_version_sequence" if column == ROW_CREATED_AT_VERSION
             else "last_updated_at_version_sequence")
    cache = _cache(ctx)
    key = (int(fragment.id), column)
    found = cache.versions.get(key)
    if found is not None:
        return found
    kind = fragment.WhichOneof(which)  # type: ignore[call-overload]
    rows = int(fragment.physical_rows)
    if kind is None:
        values = np.full(rows, DEFAULT_ROW_VERSION, dtype=np.uint64)
    else:
        if kind.startswith("inline"):
            data: bytes = getattr(fragment, kind)
        else:
            data = await _external(ctx, getattr(fragment, kind), "row version sequence")
        values = await _decode(decode_versions, data, rows)
    cache.versions[key] = values
    return values


async def fragment_lineage(ctx: ReadContext, fragment: Fragment) -> FragmentLineage:
    """Row ids and both versions of every physical row of ``fragment`` (deleted ones too)."""
    ids, created, updated = await asyncio.gather(
        fragment_row_ids(ctx, fragment),
        fragment_versions(ctx, fragment, ROW_CREATED_AT_VERSION),
        fragment_versions(ctx, fragment, ROW_LAST_UPDATED_AT_VERSION))
    return FragmentLineage(ids, created, updated)


async def system_columns(ctx: ReadContext, fragment: Fragment, offsets: np.ndarray,
                         names: Sequence[str]) -> dict[str, pa.Array]:
    """The system columns ``names`` for the rows at physical ``offsets`` of ``fragment``."""
    out: dict[str, pa.Array] = {}
    positions = offsets.astype(np.int64, copy=False)
    for name in names:
        if name == ROW_ADDRESS:
            values = (np.uint64(fragment.id) << np.uint64(32)) | offsets.astype(np.uint64)
        elif name == ROW_ID:
            values = (await fragment_row_ids(ctx, fragment))[positions]
        elif name in VERSION_COLUMNS:
            values = (await fragment_versions(ctx, fragment, name))[positions]
        else:
            raise InvalidInputError(f"{name!r} is not a system column")
        out[name] = pa.array(values, pa.uint64())
    return out


# -- the row id index -----------------------------------------------------------------------


@dataclass(frozen=True)
class RowIdIndex:
    """Row id -> row address for the live rows of one version.

    Stored as *runs*: ``lengths[i]`` consecutive row ids from ``starts[i]`` live at
    consecutive addresses from ``addresses[i]``, sorted by ``starts``. Fragments written in
    one go hold one run (split only where rows were deleted or ids jump), so the index is
    small and built with a few vectorised passes; lookups are a ``searchsorted``.
    """

    starts: np.ndarray
    lengths: np.ndarray
    addresses: np.ndarray

    def __len__(self) -> int:
        return int(self.lengths.sum()) if len(self.lengths) else 0

    @property
    def num_runs(self) -> int:
        """Number of runs the index holds."""
        return len(self.starts)

    def lookup(self, row_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(addresses, found)`` for ``row_ids``; addresses of ids not found are 0."""
        ids = np.asarray(row_ids, dtype=np.uint64)
        pos = np.searchsorted(self.starts, ids, side="right").astype(np.int64) - 1
        valid = pos >= 0
        pos = np.where(valid, pos, 0)
        if not len(self.starts):
            return np.zeros(len(ids), dtype=np.uint64), np.zeros(len(ids), dtype=bool)
        delta = ids - self.starts[pos]
        found = valid & (delta < self.lengths[pos])
        addresses = np.where(found, self.addresses[pos] + delta, np.uint64(0))
        return addresses.astype(np.uint64), found

    def row_ids(self) -> np.ndarray:
        """Every live row id, sorted (materialised: one uint64 per row)."""
        total = len(self)
        if not total:
            return np.empty(0, dtype=np.uint64)
        lengths = self.lengths.astype(np.int64)
        firsts = np.cumsum(lengths) - lengths
        within = np.arange(total, dtype=np.int64) - np.repeat(firsts, lengths)
        return np.repeat(self.starts, lengths) + within.astype(np.uint64)


def _range_runs(fid: int, ids: range, deleted: np.ndarray | None,
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of a fragment whose ids are one contiguous range: cut at deleted rows only."""
    gone = (np.empty(0, dtype=np.int64) if deleted is None
            else np.asarray(deleted, dtype=np.int64))
    firsts = np.concatenate([[0], gone + 1])
    ends = np.concatenate([gone, [len(ids)]])
    keep = ends > firsts
    firsts, ends = firsts[keep].astype(np.uint64), ends[keep].astype(np.uint64)
    return (firsts + np.uint64(ids.start), ends - firsts,
            (np.uint64(fid) << np.uint64(32)) | firsts)


def _runs_of(fid: int, ids: np.ndarray | range, deleted: np.ndarray | None,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs (first id, length, first address) of one fragment's live rows."""
    if isinstance(ids, range):
        return _range_runs(fid, ids, deleted)
    offsets = np.arange(len(ids), dtype=np.uint64)
    if deleted is not None and len(deleted):
        keep = np.ones(len(ids), dtype=bool)
        keep[deleted.astype(np.int64)] = False
        ids, offsets = ids[keep], offsets[keep]
    n = len(ids)
    if not n:
        empty = np.empty(0, dtype=np.uint64)
        return empty, empty, empty
    one = np.uint64(1)
    # a run ends where the next id or the next offset is not one more (wrap-around of
    # decreasing ids also lands here)
    breaks = np.flatnonzero((ids[1:] - ids[:-1] != one) | (offsets[1:] - offsets[:-1] != one))
    firsts = np.concatenate([[0], breaks + 1])
    lengths = np.diff(np.concatenate([firsts, [n]])).astype(np.uint64)
    return ids[firsts], lengths, (np.uint64(fid) << np.uint64(32)) | offsets[firsts]


def build_index(parts: Sequence[tuple[int, np.ndarray | range, np.ndarray | None]],
                ) -> RowIdIndex:
    """The index from ``(fragment id, row ids, deleted offsets)`` of every fragment (row ids
    as an array, or a ``range`` when they are contiguous).

    Pure and vectorised. Two live rows with one id are :class:`CorruptFileError`.
    """
    runs = [_runs_of(fid, ids, deleted) for fid, ids, deleted in parts]
    if not runs:
        empty = np.empty(0, dtype=np.uint64)
        return RowIdIndex(empty, empty, empty)
    starts = np.concatenate([r[0] for r in runs])
    lengths = np.concatenate([r[1] for r in runs])
    addresses = np.concatenate([r[2] for r in runs])
    if len(starts) > 1 and not bool(np.all(starts[1:] > starts[:-1])):
        order = np.argsort(starts, kind="stable")
        starts, lengths, addresses = starts[order], lengths[order], addresses[order]
    if len(starts) > 1:
        overlap = starts[1:] < starts[:-1] + lengths[:-1]
        if bool(overlap.any()):
            dup = int(starts[1:][overlap][0])
            raise CorruptFileError(f"row id {dup} belongs to more than one live row")
    return RowIdIndex(starts, lengths, addresses)


def _single_range(fragment: Fragment) -> range | None:
    """The fragment's row ids when they are one inline ``range`` segment (the usual case)."""
    if fragment.WhichOneof("row_id_sequence") != "inline_row_ids":
        return None
    seq = parse_row_ids(fragment.inline_row_ids)
    if len(seq.segments) != 1 or seq.segments[0].WhichOneof("segment") != "range":
        return None
    r = seq.segments[0].range
    if r.end - r.start != fragment.physical_rows:
        raise CorruptFileError(f"row id sequence holds {r.end - r.start} ids for "
                               f"{fragment.physical_rows} rows")
    return range(r.start, r.end)


async def row_id_index(ctx: ReadContext) -> RowIdIndex:
    """The row id index of the context's version (built once, on first use)."""
    cache = _cache(ctx)
    async with cache.index_lock:
        if cache.index is None:
            fragments = ctx.snapshot.fragments
            sem = asyncio.Semaphore(PARALLEL_LOADS)

            async def load(frag: Fragment,
                           ) -> tuple[int, np.ndarray | range, np.ndarray | None]:
                async with sem:
                    contiguous = _single_range(frag)
                    if contiguous is not None:
                        return int(frag.id), contiguous, await ctx.deleted_offsets(frag)
                    ids, deleted = await asyncio.gather(
                        fragment_row_ids(ctx, frag, remember=False),
                        ctx.deleted_offsets(frag))
                return int(frag.id), ids, deleted

            parts = await asyncio.gather(*(load(f) for f in fragments))
            total = sum(len(p[1]) for p in parts if not isinstance(p[1], range))
            if total > 1 << 20:
                cache.index = await asyncio.to_thread(build_index, parts)
            else:
                cache.index = build_index(parts)
        return cache.index


async def row_addresses_of(ctx: ReadContext, row_ids: np.ndarray) -> tuple[np.ndarray,
                                                                           np.ndarray]:
    """``(addresses, found)`` of ``row_ids`` in this version (live rows only)."""
    ids = np.asarray(row_ids, dtype=np.uint64)
    if uses_stable_row_ids(ctx.snapshot.manifest):
        return (await row_id_index(ctx)).lookup(ids)
    # Without stable ids a row id is an address: check that it names a live row.
    frag_ids = (ids >> np.uint64(32)).astype(np.int64)
    offsets = (ids & np.uint64(0xFFFFFFFF)).astype(np.int64)
    known, physical, has_deletions = ctx.fragment_table()
    if not len(known):
        return ids.copy(), np.zeros(len(ids), dtype=bool)
    at = np.minimum(np.searchsorted(known, frag_ids), len(known) - 1)
    found = (known[at] == frag_ids) & (offsets < physical[at])
    touched = found & has_deletions[at]
    if touched.any():
        rows = {int(f.id): f for f in ctx.snapshot.fragments}
    for fid in np.unique(frag_ids[touched]).tolist() if touched.any() else []:
        deleted = await ctx.deleted_offsets(rows[int(fid)])
        if deleted is not None and len(deleted):
            mask = np.flatnonzero(found & (frag_ids == fid))
            found[mask] = ~np.isin(offsets[mask], deleted.astype(np.int64))
    return ids.copy(), found


def as_row_ids(values: Any) -> np.ndarray:
    try:
        if isinstance(values, (pa.Array, pa.ChunkedArray)):
            values = values.to_numpy()
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"row ids must be integers: {exc}") from exc
    arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"row ids must be integers, got {arr.dtype}")
    if arr.size and np.issubdtype(arr.dtype, np.signedinteger) and int(arr.min()) < 0:
        raise InvalidInputError("row ids must not be negative")
    return arr.astype(np.uint64, copy=False)


__all__ = [
    "DEFAULT_ROW_VERSION",
    "ROW_ADDRESS",
    "ROW_CREATED_AT_VERSION",
    "ROW_ID",
    "ROW_LAST_UPDATED_AT_VERSION",
    "SYSTEM_COLUMNS",
    "VERSION_COLUMNS",
    "RowIdIndex",
    "build_index",
    "fragment_lineage",
    "fragment_row_ids",
    "fragment_versions",
    "row_addresses_of",
    "row_id_index",
    "system_columns",
    "uses_stable_row_ids",
]
