"""Flat (exhaustive) nearest-neighbour search: ``scanner(nearest={...})`` without an index.

The vector column is scanned fragment by fragment with the columns the result needs; each
batch's distances to the query are computed with numpy and only the best ``k`` rows seen so
far are kept, so memory stays bounded by ``k`` rows plus one batch. Distances are Lance's:
``l2`` (the default; squared euclidean), ``cosine`` (1 - cosine similarity), ``dot``
(1 - dot product); ties go to the lower row id. Rows with a null vector are never results.

``prefilter=True`` applies the filter before the search (the ``k`` best matching rows);
without it the filter is applied to the ``k`` best rows (which may leave fewer than ``k``),
as pylance does. ``limit``/``offset`` then cut the ranked rows. The result holds the
projected columns, then ``_distance`` (unless ``disable_scoring_autoprojection`` and the
projection leaves it out), then ``_rowid``/``_rowaddr`` when asked for by flag.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.dataset.query.ranked import RankedSearch
from alance.dataset.query.vector_math import DISTANCE, _matrix, distances, query_vector
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.filter import compile_filter_and_columns

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

__all__ = ["DISTANCE", "NearestScanner", "distances"]

_ROW_ID = "_rowid"
_ROW_ADDRESS = "_rowaddr"
_SYSTEM = frozenset({_ROW_ID, _ROW_ADDRESS, "_row_created_at_version",
                     "_row_last_updated_at_version", DISTANCE})
_METRICS = {"l2": "l2", "euclidean": "l2", "cosine": "cosine", "dot": "dot"}
#: Keys of ``nearest`` that tune index searches (a flat search has no index to tune).
_INDEX_TUNING = {"nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor",
                 "use_index", "ef", "fast_search"}


class NearestScanner(RankedSearch):
    """A scan that returns the rows nearest to a query vector (see the module)."""

    _RANK = DISTANCE

    def __init__(self, dataset: LanceDataset, nearest: Mapping[str, Any],
                 columns: Sequence[str] | Mapping[str, str] | None, filter: Any,
                 limit: int | None, offset: int | None, batch_size: int | None,
                 with_row_id: bool, with_row_address: bool, fragments: Sequence[Any] | None,
                 prefilter: bool, disable_scoring_autoprojection: bool,
                 options: Mapping[str, Any]) -> None:
        if isinstance(columns, Mapping):
            raise UnsupportedFeatureError("nearest with SQL projections is not supported; "
                                          "project by column names")
        unknown = set(nearest) - {"column", "q", "k", "metric", "distance_type"} - _INDEX_TUNING
        if unknown:
            raise InvalidInputError(f"nearest: unknown keys {sorted(unknown)}")
        if "column" not in nearest or "q" not in nearest:
            raise InvalidInputError("nearest needs 'column' and 'q'")
        self.column = str(nearest["column"])
        self.query = query_vector(nearest["q"])
        k = nearest.get("k", 10)
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidInputError(f"nearest: k must be a positive integer, not {k!r}")
        self.k = k
        self.nearest = dict(nearest)
        self.metric_given = bool(nearest.get("metric") or nearest.get("distance_type"))
        metric = str(nearest.get("metric") or nearest.get("distance_type") or "l2").lower()
        if metric not in _METRICS:
            raise InvalidInputError(f"nearest: metric must be one of {sorted(_METRICS)}, not "
                                    f"{metric!r}")
        self.metric = _METRICS[metric]
        schema = dataset.schema
        if self.column not in schema.names:
            raise InvalidInputError(f"nearest: no column {self.column!r} (columns: "
                                    f"{schema.names})")
        self.dataset = dataset
        self.filter = filter
        self.prefilter = bool(prefilter)
        self.limit, self.offset = limit, offset or 0
        self.batch_size = batch_size
        self.fragments = fragments
        self.options = dict(options)
        self.with_row_id, self.with_row_address = with_row_id, with_row_address
        names = list(columns) if columns is not None else [
            n for n in schema.names if n not in _SYSTEM]
        self.projection = names
        self.rank_shown = DISTANCE in names or not (
            disable_scoring_autoprojection and columns is not None)
        filter_columns: list[str] = []
        if filter is not None and not self.prefilter and isinstance(filter, str):
            _, filter_columns = compile_filter_and_columns(filter, schema)
        #: Columns the post-filter (if any) reads.
        self.post_filter_columns = list(filter_columns)
        wanted = [n for n in names if n != DISTANCE]
        self._read = list(dict.fromkeys([*wanted, self.column, *filter_columns, _ROW_ID]))
        if with_row_address and _ROW_ADDRESS not in self._read:
            self._read.append(_ROW_ADDRESS)
        if filter is not None and not self.prefilter and not isinstance(filter, str):
            raise UnsupportedFeatureError("nearest with a post-filter needs the filter as SQL "
                                          "text (or prefilter=True)")

    # -- the search ---------------------------------------------------------------------------
    def _index_plan(self) -> Any:
        from alance.dataset.query import ann
        found = ann.plan(self)
        if found is not None and not self.metric_given:
            self.metric = found.metric
        return found

    def _flat_part(self, fragments: list[int], k: int) -> NearestScanner:
        """The exhaustive search of some fragments only (prefiltered as this one), for the
        fragments an index does not cover."""
        nearest = {"column": self.column, "q": self.query, "k": k, "metric": self.metric}
        return NearestScanner(self.dataset, nearest, [self.column], self.filter, None, None,
                              self.batch_size, True, False, fragments, self.prefilter,
                              False, self.options)

    async def _ranked(self) -> pa.Table:
        found = None if self.nearest.get("use_index") is False else self._index_plan()
        if found is not None:
            from alance.dataset.query import ann
            best = await ann.ranked(self, found)
        else:
            best = await self._ranked_raw()
        if best.num_rows and self.filter is not None and not self.prefilter:
            expr, _ = compile_filter_and_columns(self.filter, best.schema)
            best = best.filter(expr)
        if self.offset or self.limit is not None:
            stop = None if self.limit is None else self.offset + self.limit
            best = best.slice(self.offset, None if stop is None else stop - self.offset)
        return best

    async def _ranked_raw(self) -> pa.Table:
        """The flat search's ``k`` best rows (all columns read), before the post-filter."""
        inner = self.dataset.scanner(
            self._read, self.filter if self.prefilter else None, batch_size=self.batch_size,
            fragments=self.fragments, **self.options)
        best: pa.Table | None = None
        dim = len(self.query)
        async for batch in inner.to_batches():
            if not batch.num_rows:
                continue
            vectors, valid = _matrix(batch.column(self.column), dim)
            dist = distances(vectors, self.query, self.metric)
            keep = np.flatnonzero(valid & ~np.isnan(dist))
            if len(keep) > self.k:
                keep = keep[np.argpartition(dist[keep], self.k - 1)[: self.k]]
            part = pa.Table.from_batches([batch]).take(pa.array(keep)).append_column(
                DISTANCE, pa.array(dist[keep], pa.float32()))
            best = part if best is None else pa.concat_tables([best, part])
            if best.num_rows > self.k:
                best = _top(best, self.k)
        if best is None:
            schema = self.dataset.schema
            fields = [pa.field(DISTANCE, pa.float32()) if n == DISTANCE else
                      pa.field(n, pa.uint64()) if n in (_ROW_ID, _ROW_ADDRESS) else
                      schema.field(n) for n in [*self._read, DISTANCE]]
            return pa.schema(fields).empty_table()
        return _top(best, self.k)

    async def _result(self) -> pa.Table:
        return await self._ranked()

    def explain_plan(self, verbose: bool = False) -> str:
        """The search as text (the index used, if any, in the shape of pylance's plan)."""
        found = None if self.nearest.get("use_index") is False else self._index_plan()
        if found is not None:
            from alance.dataset.query import ann
            return "\n".join(ann.explain_lines(self, found))
        where = (f", prefilter={self.filter!r}" if self.prefilter and self.filter is not None
                 else f", postfilter={self.filter!r}" if self.filter is not None else "")
        return (f"KNNFlat: column={self.column}, k={self.k}, metric={self.metric}{where}\n"
                f"  LanceScan: columns={self._read}")


def _top(table: pa.Table, k: int) -> pa.Table:
    """The ``k`` rows of smallest distance, ordered by distance then row id."""
    order = pc.sort_indices(table, sort_keys=[(DISTANCE, "ascending"), (_ROW_ID, "ascending")])
    return table.take(order.slice(0, k))
