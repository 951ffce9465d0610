"""Nearest-neighbour search through IVF vector indices (IVF_FLAT, IVF_PQ), as pylance runs it.

For each index segment on the column the query is compared with the partition centroids
(cosine: the normalized query, by l2) and the ``minimum_nprobes`` nearest partitions are
searched (``nprobes`` sets both bounds; by default 1 and all); while a prefilter or deletions leave
fewer than ``k`` rows, further partitions are searched one by one up to ``maximum_nprobes``.
IVF_FLAT rows are scored exactly, IVF_PQ rows with the query's distance table over the PQ
codebook (l2 and cosine on residuals to the partition centroid). Index rows whose row is
deleted, or now lives in a fragment the segment does not cover, are dropped; with
``prefilter=True`` only rows passing the filter count. The best ``k * refine_factor`` rows are
kept; with ``refine_factor`` their vectors are read and re-ranked by exact distance. Fragments
no segment covers are searched exhaustively (unless ``fast_search``) and merged, the index
rows then re-ranked exactly too (as pylance, so both sides' distances compare). Then, as in
the flat search, a post-filter, ``offset`` and ``limit`` apply. Ties go to the lower row id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyroaring

from alance._proto import table_pb2
from alance.dataset.query.indices import ivf
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.ivf_reader import open_segment, search_partitions
from alance.dataset.query.indices.reader import index_reader
from alance.dataset.query.indices.types import uuid_text
from alance.dataset.query.row_ids import row_addresses_of
from alance.dataset.query.vector_math import DISTANCE, _matrix, distances
from alance.errors import InvalidInputError
from alance.transaction.indices import read_bitmap

if TYPE_CHECKING:
    from alance.dataset.query.vector_search import NearestScanner

#: pylance's default ``minimum_nprobes``.
DEFAULT_NPROBES = 1


@dataclass(frozen=True)
class AnnPlan:
    """Which index segments a search uses, and how."""

    name: str
    segments: list[table_pb2.IndexMetadata]
    metric: str
    min_nprobes: int
    max_nprobes: int | None
    refine_factor: int | None
    covered: pyroaring.BitMap      # fragments some segment covers
    unindexed: list[int]           # fragment ids searched flat
    fast_search: bool


def _int_option(nearest: dict[str, Any], key: str) -> int | None:
    value = nearest.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidInputError(f"nearest: {key} must be a positive integer, not {value!r}")
    return int(value)


def plan(scanner: NearestScanner) -> AnnPlan | None:
    """The index plan of a search, or ``None`` when it runs flat (no vector index on the
    column, ``use_index=False``, an explicit metric other than the index's, or a fragment
    subset)."""
    nearest = scanner.nearest
    if nearest.get("use_index") is False or scanner.fragments is not None:
        return None
    ds = scanner.dataset
    field = next((f for f in ds.lance_schema.fields if f.name == scanner.column), None)
    if field is None:
        return None
    found: dict[str, list[table_pb2.IndexMetadata]] = {}
    for name, segs in user_indices(ds._snapshot.manifest_file.indices).items():
        segs = [s for s in segs if ivf.is_vector_index(s) and list(s.fields) == [field.id]]
        if segs:
            found[name] = segs
    if not found:
        return None
    name = sorted(found)[0]
    segments = found[name]
    metric = ivf.metric_name(ivf.details_of(segments[0]).metric_type)
    if scanner.metric_given and scanner.metric != metric:
        return None
    nprobes = _int_option(nearest, "nprobes")
    lo = _int_option(nearest, "minimum_nprobes")
    hi = _int_option(nearest, "maximum_nprobes")
    if nprobes is not None:
        lo, hi = nprobes, nprobes
    lo = lo if lo is not None else DEFAULT_NPROBES
    if hi is not None and hi < lo:
        raise InvalidInputError("nearest: maximum_nprobes is below minimum_nprobes")
    covered = pyroaring.BitMap()
    for seg in segments:
        bitmap = read_bitmap(seg)
        if bitmap is not None:
            covered |= pyroaring.BitMap(bitmap)
    fragments = [int(f.id) for f in ds._snapshot.fragments]
    return AnnPlan(name, segments, metric, lo, hi, _int_option(nearest, "refine_factor"),
                   covered, [f for f in fragments if f not in covered],
                   bool(nearest.get("fast_search", False)))


def explain_lines(scanner: NearestScanner, p: AnnPlan) -> list[str]:
    """The search as plan lines, in the shape of pylance's."""
    k = scanner.k
    fetch = k * (p.refine_factor or 1)
    where = (f", prefilter={scanner.filter!r}" if scanner.prefilter and scanner.filter is not None
             else "")
    lines = []
    if scanner.filter is not None and not scanner.prefilter:
        lines.append(f"FilterExec: {scanner.filter}")
    lines.append(f"Take: columns={scanner._read}")
    if p.refine_factor or (p.unindexed and not p.fast_search):
        lines += [f"SortExec: TopK(fetch={k}), expr=[_distance ASC, _rowid ASC]",
                  f"KNNVectorDistance: metric={scanner.metric}"]
    if p.unindexed and not p.fast_search:
        lines += [f"SortExec: TopK(fetch={fetch}), expr=[_distance ASC, _rowid ASC]",
                  "UnionExec"]
    hi = f"Some({p.max_nprobes})" if p.max_nprobes is not None else "None"
    ann = [f"SortExec: TopK(fetch={fetch}), expr=[_distance ASC, _rowid ASC]",
           f"ANNSubIndex: name={p.name}, k={fetch}, deltas={len(p.segments)}, "
           f"metric={p.metric.upper() if p.metric == 'l2' else p.metric.capitalize()}{where}",
           f"ANNIvfPartition: uuid={uuid_text(p.segments[0])}, minimum_nprobes="
           f"{p.min_nprobes}, maximum_nprobes={hi}, deltas={len(p.segments)}"]
    out = [("  " * i) + line for i, line in enumerate(lines + ann)]
    if p.unindexed and not p.fast_search:
        depth = len(lines)
        out += [("  " * depth) + f"KNNFlat: column={scanner.column}, k={fetch}, "
                f"metric={scanner.metric}, fragments={p.unindexed}"]
    return out


def _top(ids: np.ndarray, dist: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` smallest distances, ties broken by row id (ascending)."""
    if 0 < n < len(dist) // 4:
        # Only rows within the n-th smallest distance can make it: sort just those (ties
        # at the threshold included, so the id order among them still decides).
        bound = np.partition(dist, n - 1)[n - 1]
        near = np.flatnonzero(dist <= bound) if not np.isnan(bound) else None
        if near is not None and len(near) >= n:
            order = near[np.lexsort((ids[near], dist[near]))[:n]]
            return ids[order], dist[order]
    order = np.lexsort((ids, dist))[:n]
    return ids[order], dist[order]


async def _allowed(scanner: NearestScanner) -> np.ndarray | None:
    """Row ids passing the prefilter (sorted), or ``None`` without one."""
    if not scanner.prefilter or scanner.filter is None:
        return None
    inner = scanner.dataset.scanner([], scanner.filter, with_row_id=True, **scanner.options)
    table = await inner.to_table()
    return np.sort(table.column("_rowid").to_numpy().astype(np.uint64))


def _covered(frags: np.ndarray, covers: pyroaring.BitMap, version_ids: np.ndarray,
             ) -> np.ndarray:
    """Whether each row's fragment is one the index segment covers (all of them, without a
    per-row test, when the segment covers every fragment of the version)."""
    if all(int(i) in covers for i in version_ids.tolist()):
        return np.ones(len(frags), dtype=bool)
    return np.isin(frags, np.asarray(list(covers), dtype=np.int64))


async def _segment_candidates(scanner: NearestScanner, p: AnnPlan,
                              seg: table_pb2.IndexMetadata, query: np.ndarray,
                              allowed: np.ndarray | None, want: int,
                              ) -> tuple[np.ndarray, np.ndarray, int]:
    """Valid candidate ids and distances of one segment, and the partitions searched."""
    reader = index_reader(scanner.dataset._ctx)
    segment = await open_segment(reader, seg)
    if segment.dimension != len(query):
        raise InvalidInputError(f"nearest: the query has {len(query)} dimensions, the index "
                                f"{segment.dimension}")
    total = segment.model.num_partitions
    order = ivf.find_partitions(segment.model, query, segment.metric, total)
    lo = min(p.min_nprobes, total)
    hi = total if p.max_nprobes is None else min(p.max_nprobes, total)
    bitmap = read_bitmap(seg)
    covers = pyroaring.BitMap(bitmap) if bitmap is not None else pyroaring.BitMap()
    ctx = scanner.dataset._ctx
    ids_parts: list[np.ndarray] = []
    dist_parts: list[np.ndarray] = []
    found = 0
    start, stop = 0, lo
    while True:
        ids, dist = await search_partitions(reader, segment, order[start:stop], query)
        if len(ids):
            addrs, live = await row_addresses_of(ctx, ids)
            frags = (addrs >> np.uint64(32)).astype(np.int64)
            keep = live & _covered(frags, covers, ctx.fragment_table()[0])
            keep &= ~np.isnan(dist)
            if allowed is not None:
                keep &= np.isin(ids, allowed, assume_unique=False)
            ids_parts.append(ids[keep])
            dist_parts.append(dist[keep])
            found += int(keep.sum())
        if found >= want or stop >= hi:
            break
        start, stop = stop, stop + 1
    if not ids_parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.float32), stop
    return np.concatenate(ids_parts), np.concatenate(dist_parts), stop


async def ranked(scanner: NearestScanner, p: AnnPlan) -> pa.Table:
    """The search's ranked rows (before the post-filter, offset and limit)."""
    query = scanner.query
    if p.metric == "cosine":
        query = ivf.normalized(query)
    fetch = scanner.k * (p.refine_factor or 1)
    allowed = await _allowed(scanner)
    all_ids: list[np.ndarray] = []
    all_dist: list[np.ndarray] = []
    for seg in p.segments:
        ids, dist, _ = await _segment_candidates(scanner, p, seg, query, allowed, scanner.k)
        ids, dist = _top(ids, dist, fetch)
        all_ids.append(ids)
        all_dist.append(dist)
    ids, dist = _top(np.concatenate(all_ids), np.concatenate(all_dist), fetch)
    searched_flat = bool(p.unindexed) and not p.fast_search
    if (p.refine_factor or searched_flat) and len(ids):
        # Exact distances: asked for, or needed to rank index rows with the flat rows.
        vec = await scanner.dataset.take_rows(ids, columns=[scanner.column])
        vectors, valid = _matrix(vec.column(scanner.column), len(scanner.query))
        exact = distances(vectors, scanner.query, p.metric)
        ok = valid & ~np.isnan(exact)
        ids, dist = _top(ids[ok], exact[ok], scanner.k)
    if searched_flat:
        flat = await scanner._flat_part(p.unindexed, scanner.k)._ranked_raw()
        ids, dist = _top(np.concatenate([ids, flat.column("_rowid").to_numpy().astype(np.uint64)]),
                         np.concatenate([dist, flat.column(DISTANCE).to_numpy().astype(
                             np.float32)]), scanner.k)
    ids, dist = ids[: scanner.k], dist[: scanner.k]
    # The vector column is read only where the result shows it (or a post-filter needs it).
    read = [c for c in scanner._read if c != "_rowid" and (
        c != scanner.column or c in scanner.projection or c in scanner.post_filter_columns)]
    table = await scanner.dataset.take_rows(ids, columns=read)
    table = table.append_column(DISTANCE, pa.array(dist, pa.float32()))
    return table.append_column("_rowid", pa.array(ids, pa.uint64()))
