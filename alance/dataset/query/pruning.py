"""Page pruning: filtered scans skip row ranges whose page statistics rule the filter out.

v0.1/v0.2 data files store, per column and row group, a null count and lower/upper bounds
(:mod:`alance.format.legacy.stats`). The range tests of a SQL filter
(:func:`alance.filter.bound_predicate`) are evaluated on those bounds, vectorised over all
row groups of a file; row groups where the filter cannot hold for any value within the bounds
are never read. Caveats honoured (format spec):

* bounds are not values: they are only used to rule pages *out*, never to answer queries;
* truncated binary/string bounds: the min is a prefix (still a lower bound), the max was
  incremented or is null; a null bound means "unknown", which rules nothing out;
* NaN is ignored by float bounds, and Lance's filters order NaN above every value: only
  float tests NaN fails (``<``, ``<=``, ``=``, ``IN``) are evaluated, so rows holding NaN
  are never skipped wrongly;
* -0.0 and +0.0 compare equal, so zero bounds written either way stay correct bounds.

2.x files (what pylance writes by default) carry no page statistics: in Lance those live in
zone-map *indices*, outside the data files. alance learns zone maps of them while scanning
(:mod:`alance.dataset.fragments.zone_maps`) and prunes with those once a file's are complete.

Files of one fragment may cut rows into groups differently (a column added later lives in its
own file), so tests are evaluated on the common refinement of the files' group boundaries.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.fragments.data_file import DataFileReader
from alance.dataset.fragments.read import FragmentReader, ReadContext
from alance.dataset.fragments.zone_maps import learnable
from alance.filter import AllOf, AnyOf, BoundPredicate, RangeTest, bound_predicate, tested_columns
from alance.format.legacy.stats import check_stats_column
from alance.format.schema import LanceField


@dataclass
class ScanStats:
    """What a scan read and what page statistics let it skip (updated while it runs)."""

    fragments: int = 0
    #: Rows read from data files (deleted rows excluded), before any filter.
    rows_scanned: int = 0
    rows_total: int = 0
    rows_skipped: int = 0
    pages_skipped: int = 0
    bytes_skipped: int = 0
    predicate: str = ""
    pruned_fragments: set[int] = field(default_factory=set)

    def describe(self) -> str:
        """One line per counter."""
        return (f"pruning predicate: {self.predicate or 'none'}\n"
                f"fragments: {self.fragments}, with pages skipped: {len(self.pruned_fragments)}"
                f"\nrows: {self.rows_total}, skipped by statistics: {self.rows_skipped}\n"
                f"pages skipped: {self.pages_skipped}, bytes skipped: {self.bytes_skipped}")


def _cmp(op: str, lo: pa.Array, hi: pa.Array, value: pa.Scalar) -> pa.Array:
    if op == "eq":
        return pc.and_(pc.less_equal(lo, value), pc.greater_equal(hi, value))
    if op == "lt":
        return pc.less(lo, value)
    if op == "le":
        return pc.less_equal(lo, value)
    if op == "gt":
        return pc.greater(hi, value)
    return pc.greater_equal(hi, value)  # ge


#: IN lists longer than this are tested against the bounds with a sorted search, not one
#: comparison per value.
_IN_LOOP_VALUES = 16


def _any_within(lo: pa.Array, hi: pa.Array, values: tuple[pa.Scalar, ...]) -> np.ndarray:
    """Per row group: does some value lie within ``[lo, hi]``? (True where a bound is
    unknown.) One sorted search of the values per group instead of one comparison per
    value: a 200,000-value IN list costs milliseconds."""
    known = pc.and_(pc.is_valid(lo), pc.is_valid(hi)).to_numpy(zero_copy_only=False)
    if not known.any():
        return np.ones(len(lo), dtype=bool)
    ordered = pa.array(values, type=values[0].type)
    ordered = pc.unique(ordered)
    ordered = ordered.take(pc.sort_indices(ordered)).to_numpy(zero_copy_only=False)
    filler = values[0].cast(lo.type)
    lows = pc.fill_null(lo, filler).to_numpy(zero_copy_only=False)
    highs = pc.fill_null(hi, filler).to_numpy(zero_copy_only=False)
    first = np.searchsorted(ordered, lows, side="left")  # first value >= the group's min
    inside = first < len(ordered)
    candidate = ordered[np.minimum(first, len(ordered) - 1)]
    inside &= np.asarray(candidate <= highs, dtype=bool)
    return inside | ~known  # type: ignore[no-any-return]


def _may_match(test: RangeTest, stats: pa.StructArray, rows: np.ndarray) -> np.ndarray:
    """Per row group: can some row satisfy ``test``? (True where the statistics can't tell)."""
    nulls = stats.field("null_count").to_numpy(zero_copy_only=False)
    if test.op == "is_null":
        return nulls > 0  # type: ignore[no-any-return]
    if test.op == "not_null":
        return nulls < rows  # type: ignore[no-any-return]
    lo, hi = stats.field("min_value"), stats.field("max_value")
    if test.op == "in" and len(test.values) > _IN_LOOP_VALUES:
        return _any_within(lo, hi, test.values) & (nulls < rows)  # type: ignore[no-any-return]
    if test.op == "in":
        result = None
        for v in test.values:
            part = _cmp("eq", lo, hi, v)
            result = part if result is None else pc.or_kleene(result, part)
        assert result is not None
    else:
        result = _cmp(test.op, lo, hi, test.values[0])
    maybe = pc.fill_null(result, True).to_numpy(zero_copy_only=False)
    return maybe & (nulls < rows)  # type: ignore[no-any-return]


#: Needed row ranges closer than this are read as one (small reads cost more than rows).
MIN_GAP_ROWS = 2048


class Pruner:
    """Decides, per fragment, which row ranges a filtered scan must read."""

    def __init__(self, ctx: ReadContext, predicate: BoundPredicate,
                 read_fields: list[LanceField], stats: ScanStats) -> None:
        self.ctx = ctx
        self.predicate = predicate
        self.read_fields = read_fields
        self.stats = stats
        self.columns = {name: ctx.schema.field(name) for name in tested_columns(predicate)}

    async def _file_tests(self, reader: FragmentReader,
                          ) -> tuple[list[np.ndarray], dict[str, tuple[np.ndarray, pa.Array]]]:
        """Group boundaries of the tested columns' files and each column's statistics."""
        bounds: list[np.ndarray] = []
        found: dict[str, tuple[np.ndarray, pa.Array]] = {}
        for name, lf in self.columns.items():
            owner = await reader.open_owner(lf)
            offsets = owner.group_offsets if owner is not None else None
            if owner is None or offsets is None:
                continue
            batch = await owner.page_stats([lf.id])
            if batch is None or str(lf.id) not in batch.schema.names:
                continue
            column = batch.column(str(lf.id))
            check_stats_column(lf, column, np.diff(offsets), owner.path)
            bounds.append(offsets)
            found[name] = (offsets, column)
        return bounds, found

    def _evaluate(self, pred: BoundPredicate, starts: np.ndarray, seg_rows: np.ndarray,
                  found: dict[str, tuple[np.ndarray, pa.Array]]) -> np.ndarray:
        if isinstance(pred, AllOf):
            out = np.ones(len(starts), dtype=bool)
            for part in pred.parts:
                out &= self._evaluate(part, starts, seg_rows, found)
            return out
        if isinstance(pred, AnyOf):
            out = np.zeros(len(starts), dtype=bool)
            for part in pred.parts:
                out |= self._evaluate(part, starts, seg_rows, found)
            return out
        if not isinstance(pred, RangeTest) or pred.column not in found:
            return np.ones(len(starts), dtype=bool)
        offsets, column = found[pred.column]
        group_rows = np.diff(offsets)
        per_group = _may_match(pred, column, group_rows)
        groups = np.searchsorted(offsets, starts, side="right") - 1
        return per_group[groups]  # type: ignore[no-any-return]

    async def ranges(self, fragment: table_pb2.DataFragment) -> np.ndarray | None:
        """Row ranges ``[[start, end), ...]`` that may hold matches (``None``: read all)."""
        reader = self.ctx.fragment(fragment)
        n = int(fragment.physical_rows)
        self.stats.fragments += 1
        self.stats.rows_total += n
        bounds, found = await self._file_tests(reader)
        if not found:
            return None
        only = bounds[0]
        if (len(bounds) == 1 and len(only) > 1 and only[0] == 0 and only[-1] == n
                and bool((only[1:] > only[:-1]).all())):
            cuts = only  # one file's groups (the usual case): already the cuts
        else:
            cuts = np.unique(np.concatenate([*bounds, [0, n]]))
            cuts = cuts[(cuts >= 0) & (cuts <= n)]
        starts, ends = cuts[:-1], cuts[1:]
        maybe = self._evaluate(self.predicate, starts, ends - starts, found)
        if maybe.all():
            return None
        keep = np.stack([starts[maybe], ends[maybe]], axis=1)
        return _merge_adjacent(keep)

    async def split(self, reader: FragmentReader, maybe: np.ndarray, start: int, end: int,
                    ) -> list[tuple[int, int]]:
        """The spans of rows ``[start, end)`` to read, given the ``maybe`` ranges.

        Reading many small pieces costs more than it saves, so a chunk that is mostly needed
        is read whole, and needed pieces closer than :data:`MIN_GAP_ROWS` are joined.
        """
        parts = clip(maybe, start, end)
        needed = sum(b - a for a, b in parts)
        if needed * 2 > end - start:
            return [(start, end)]
        joined: list[tuple[int, int]] = []
        for a, b in parts:
            if joined and a - joined[-1][1] < MIN_GAP_ROWS:
                joined[-1] = (joined[-1][0], b)
            else:
                joined.append((a, b))
        bounds = np.array([start, *[x for ab in joined for x in ab], end], dtype=np.int64)
        gaps = bounds.reshape(-1, 2)
        gaps = gaps[gaps[:, 1] > gaps[:, 0]]
        if len(gaps):
            self.stats.pruned_fragments.add(reader.id)
            await self._count_skipped(reader, gaps[:, 0], gaps[:, 1])
        return joined

    async def _count_skipped(self, reader: FragmentReader, starts: np.ndarray,
                             ends: np.ndarray) -> None:
        self.stats.rows_skipped += int((ends - starts).sum())
        by_file: dict[str, tuple[DataFileReader, list[int]]] = {}
        for lf in self.read_fields:
            owner = await reader.open_owner(lf)
            if owner is None or owner.group_offsets is None:
                continue
            entry = by_file.setdefault(owner.path, (owner, []))
            entry[1].extend(f.id for f in lf.walk())
        for owner, ids in by_file.values():
            offsets = owner.group_offsets
            assert offsets is not None
            # Row groups lying wholly inside a skipped range.
            first = np.searchsorted(offsets, starts, side="left")
            last = np.searchsorted(offsets, ends, side="right") - 1
            spans = [np.arange(a, b) for a, b in zip(first, last, strict=True) if b > a]
            groups = np.concatenate(spans) if spans else np.empty(0, np.int64)
            pages, size = owner.page_bytes(ids, groups.astype(np.int64))
            self.stats.pages_skipped += pages
            self.stats.bytes_skipped += size


def _merge_adjacent(ranges: np.ndarray) -> np.ndarray:
    if len(ranges) < 2:
        return ranges
    breaks = np.nonzero(ranges[1:, 0] != ranges[:-1, 1])[0] + 1
    starts = ranges[np.concatenate([[0], breaks]), 0]
    ends = ranges[np.concatenate([breaks - 1, [len(ranges) - 1]]), 1]
    return np.stack([starts, ends], axis=1)


def clip(ranges: np.ndarray, start: int, end: int) -> list[tuple[int, int]]:
    """The parts of ``ranges`` inside ``[start, end)``."""
    lo = np.maximum(ranges[:, 0], start)
    hi = np.minimum(ranges[:, 1], end)
    ok = hi > lo
    return [(int(a), int(b)) for a, b in zip(lo[ok], hi[ok], strict=True)]


def make_pruner(ctx: ReadContext, sql: object, read_fields: list[LanceField],
                stats: ScanStats) -> Pruner | None:
    """A pruner for a SQL filter, or ``None`` when nothing in it can be decided by bounds."""
    if not isinstance(sql, str) or not sql.strip():
        return None
    pred = bound_predicate(sql, ctx.schema.to_arrow())
    tested = tested_columns(pred)
    if not tested:
        return None
    if ctx.snapshot.data_storage_version not in ("0.1", "0.2", "legacy") and not any(
            learnable(ctx.schema.field(name)) for name in tested):
        return None  # 2.x files have zone maps only of what alance learns
    stats.predicate = repr(pred)
    return Pruner(ctx, pred, read_fields, stats)


__all__ = ["Pruner", "ScanStats", "clip", "make_pruner"]
