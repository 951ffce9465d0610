"""Using scalar indices for a filtered scan.

The filter's range tests (:func:`alance.filter.bound_predicate`: a condition every matching
row meets) are matched with the BTREE / BITMAP / ZONEMAP indices of their columns (a zone
map answers with whole zones), and its list membership tests (``array_has_any``,
``array_has_all``, ``array_contains``) with LABEL_LIST indices. Evaluating that
tree with the indices gives, for the fragments the indices cover, a *superset* of the rows
the filter can select; the scan then reads only those rows and applies the whole filter to
them (so results never depend on the index being exact), and scans the fragments the indices
do not cover as usual. Rows deleted since the index was built are dropped by the scan like
any deleted row; rows moved out of a covered fragment live in fragments the index does not
cover.

A selection maps fragment id -> offsets; a fragment missing from it is unconstrained.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np
import pyroaring

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.indices.describe import user_indices
from alance.dataset.query.indices.predicates import ORDERED_OPS
from alance.dataset.query.indices.reader import Rows, index_reader
from alance.dataset.query.indices.types import (
    BITMAP_URL,
    BTREE_URL,
    LABEL_LIST_URL,
    ZONEMAP_URL,
    type_name,
    type_url,
)
from alance.filter import AllOf, AnyOf, BoundPredicate, RangeTest, bound_predicate
from alance.transaction.indices import read_bitmap

#: Index types whose range tests the planner answers, best first.
_SEARCHABLE = (BTREE_URL, BITMAP_URL, ZONEMAP_URL, LABEL_LIST_URL)
#: List membership tests (answered by LABEL_LIST indices only).
_LIST_OPS = frozenset({"has_any", "has_all"})


@dataclass(frozen=True)
class IndexLeaf:
    """One range test answered by one index (all its segments)."""

    test: RangeTest
    name: str
    kind: str
    segments: tuple[table_pb2.IndexMetadata, ...]

    @property
    def url(self) -> str:
        """The index's details type URL."""
        return type_url(self.segments[0])

    def describe(self) -> str:
        """pylance's ``[col = v]@name(Kind)`` shape."""
        return f"[{_test_text(self.test)}]@{self.name}({self.kind})"


@dataclass(frozen=True)
class IndexAnd:
    """Every part holds (parts without an index were left out)."""

    parts: tuple[IndexPlan, ...]


@dataclass(frozen=True)
class IndexOr:
    """Some part holds."""

    parts: tuple[IndexPlan, ...]


IndexPlan = IndexLeaf | IndexAnd | IndexOr

_OP_TEXT = {"eq": "=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _test_text(test: RangeTest) -> str:
    if test.op in _LIST_OPS:
        items = ", ".join(str(v.as_py()) for v in test.values)
        return f"array_{test.op}({test.column}, List([{items}]))"
    if test.op == "is_null":
        return f"{test.column} IS NULL"
    if test.op == "not_null":
        return f"{test.column} IS NOT NULL"
    if test.op == "in":
        return f"{test.column} IN [{', '.join(str(v.as_py()) for v in test.values)}]"
    return f"{test.column} {_OP_TEXT[test.op]} {test.values[0].as_py()}"


def describe_plan(plan: IndexPlan) -> str:
    """The plan as text, pylance's ``ScalarIndexQuery`` shape."""
    if isinstance(plan, IndexLeaf):
        return plan.describe()
    word = "AND" if isinstance(plan, IndexAnd) else "OR"
    text = describe_plan(plan.parts[0])
    for part in plan.parts[1:]:
        text = f"{word}({text},{describe_plan(part)})"
    return text


def index_names(plan: IndexPlan) -> list[str]:
    """Names of the indices a plan uses."""
    if isinstance(plan, IndexLeaf):
        return [plan.name]
    return list(dict.fromkeys(n for p in plan.parts for n in index_names(p)))


def _searchable(ctx: ReadContext) -> dict[str, tuple[str, list[table_pb2.IndexMetadata]]]:
    """Column name -> (index name, segments) of the best index answering range tests."""
    section = ctx.snapshot.manifest_file.index_section
    if section is None:
        return {}
    names = {int(f.id): f for f in ctx.snapshot.schema.fields}
    out: dict[str, tuple[str, list[table_pb2.IndexMetadata]]] = {}
    rank: dict[str, int] = {}
    for name, segments in user_indices(list(section.indices)).items():
        first = segments[0]
        url = type_url(first)
        if url not in _SEARCHABLE or len(first.fields) != 1:
            continue
        field = names.get(int(first.fields[0]))
        if field is None:
            continue
        r = _SEARCHABLE.index(url)
        if field.name not in rank or r < rank[field.name]:
            rank[field.name] = r
            out[field.name] = (name, segments)
    return out


def _plan(pred: BoundPredicate,
          indexed: dict[str, tuple[str, list[table_pb2.IndexMetadata]]]) -> IndexPlan | None:
    if isinstance(pred, RangeTest):
        found = indexed.get(pred.column)
        if found is None:
            return None
        name, segments = found
        lists = type_url(segments[0]) == LABEL_LIST_URL
        if pred.op not in (_LIST_OPS if lists else ORDERED_OPS):
            return None
        return IndexLeaf(pred, name, type_name(segments[0]), tuple(segments))
    if isinstance(pred, AllOf):
        parts = tuple(p for p in (_plan(x, indexed) for x in pred.parts) if p is not None)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else IndexAnd(parts)
    if isinstance(pred, AnyOf):
        ors = [_plan(x, indexed) for x in pred.parts]
        if not ors or any(p is None for p in ors):
            return None
        kept = tuple(p for p in ors if p is not None)
        return kept[0] if len(kept) == 1 else IndexOr(kept)
    return None


def plan_filter(ctx: ReadContext, sql: object) -> IndexPlan | None:
    """The indices that can narrow a scan with filter ``sql`` (None: none can)."""
    if not isinstance(sql, str) or not sql.strip():
        return None
    indexed = _searchable(ctx)
    if not indexed:
        return None
    pred = bound_predicate(sql, ctx.schema.to_arrow(), list_tests=True)
    # IN tests merged from ORs of equalities keep their column; split long IN lists as is.
    return _plan(pred, indexed)


async def _leaf_rows(ctx: ReadContext, leaf: IndexLeaf) -> Rows:
    reader = index_reader(ctx)
    existing = {int(f.id) for f in ctx.snapshot.fragments}
    covered: set[int] = set()
    for seg in leaf.segments:
        bitmap = read_bitmap(seg)
        if bitmap is not None:
            covered |= set(bitmap) & existing
    if leaf.url == ZONEMAP_URL:
        parts = list(await asyncio.gather(*(reader.zone_rows(seg, leaf.test)
                                            for seg in leaf.segments)))
    else:
        found = await asyncio.gather(*(reader.search(seg, leaf.test) for seg in leaf.segments))
        parts = list(await asyncio.gather(*(
            reader.rows_of_ids(seg, ids) for seg, ids in zip(leaf.segments, found, strict=True))))
    out: Rows = {f: pyroaring.BitMap() for f in covered}
    for part in parts:
        for frag, rows in part.items():
            if frag in out:
                out[frag] |= rows
    return out


async def evaluate(ctx: ReadContext, plan: IndexPlan) -> Rows:
    """The rows, per covered fragment, that may pass the planned tests (fragments missing
    from the result are not constrained)."""
    if isinstance(plan, IndexLeaf):
        return await _leaf_rows(ctx, plan)
    results = await asyncio.gather(*(evaluate(ctx, p) for p in plan.parts))
    out: Rows = {}
    if isinstance(plan, IndexAnd):
        for part in results:
            for frag, rows in part.items():
                out[frag] = out[frag] & rows if frag in out else rows
        return out
    common = set(results[0])
    for part in results[1:]:
        common &= set(part)
    for frag in common:
        merged = pyroaring.BitMap()
        for part in results:
            merged |= part[frag]
        out[frag] = merged
    return out


def runs(offsets: pyroaring.BitMap, max_rows: int) -> list[tuple[tuple[int, int], ...]]:
    """Offsets as runs ``(start, end)``, grouped into chunks of at most ``max_rows`` rows."""
    arr = np.asarray(offsets.to_array(), dtype=np.int64)
    if not len(arr):
        return []
    breaks = np.flatnonzero(np.diff(arr) != 1) + 1
    starts = arr[np.r_[0, breaks]]
    ends = arr[np.r_[breaks - 1, len(arr) - 1]] + 1
    chunks: list[tuple[tuple[int, int], ...]] = []
    current: list[tuple[int, int]] = []
    count = 0
    for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
        while b - a > 0:
            take = min(b - a, max_rows - count)
            current.append((a, a + take))
            count += take
            a += take
            if count >= max_rows:
                chunks.append(tuple(current))
                current, count = [], 0
    if current:
        chunks.append(tuple(current))
    return chunks


__all__ = ["IndexAnd", "IndexLeaf", "IndexOr", "IndexPlan", "describe_plan", "evaluate",
           "index_names", "plan_filter", "runs"]
