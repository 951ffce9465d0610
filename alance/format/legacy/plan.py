"""Sans-IO read plans: generators that ask for byte ranges and return a decoded result.

A *plan* is a generator. Each step it yields a list of ``(start, end)`` byte ranges of the file
(end exclusive) and expects, via ``send``, a list with the bytes of each range in the same
order. When it has what it needs it returns its result (``StopIteration.value``). The IO layer
drives plans however it likes (e.g. fetching each step's ranges concurrently); format code
never does IO::

    plan = reader.read_batch(0)
    request = next(plan)
    while True:
        try:
            request = plan.send([fetch(s, e) for s, e in request])
        except StopIteration as done:
            batch = done.value
            break

:func:`run_plan` is that loop for synchronous callers and tests.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import numpy as np

from alance.errors import CorruptFileError

T = TypeVar("T")
Range = tuple[int, int]
Plan = Generator[list[Range], Sequence[bytes | memoryview], T]


def run_plan(plan: Plan[T], fetch: Callable[[list[Range]], Sequence[bytes]]) -> T:
    """Drive ``plan`` to completion, answering each step with ``fetch(ranges)``."""
    try:
        request = next(plan)
        while True:
            request = plan.send(list(fetch(request)))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def read_tail(file_size: int, footer_size: int, tail_size: int,
              tail: bytes | None) -> Plan[bytes]:
    """Plan getting the last ``tail_size`` bytes of a file (at least its footer).

    ``tail`` may hold bytes already fetched from the end of the file; they are used when they
    cover the footer. A file shorter than its footer, or a short read, is corrupt.
    """
    if file_size < footer_size:
        raise CorruptFileError(f"file too short for a Lance file ({file_size} bytes)")
    if tail is not None and len(tail) >= footer_size:
        return tail
    start = max(0, file_size - tail_size)
    (got,) = yield [(start, file_size)]
    if len(got) != file_size - start:
        raise CorruptFileError("short read of the file tail")
    return bytes(got)


class JoinedRanges(list[Range]):
    """A plan step's ranges whose bytes the plan only uses laid end to end: a driver may
    answer with a one-element list holding them joined, in order, instead of one buffer per
    range (the plan cannot tell: it joins what it gets). For steps of many small ranges, where
    a buffer and a view per range cost more than reading them."""


def fetch_from(data: bytes | memoryview) -> Callable[[list[Range]], list[bytes]]:
    """A ``fetch`` for :func:`run_plan` over a file held in memory (truncates like a store)."""
    view = memoryview(data)

    def fetch(ranges: list[Range]) -> list[bytes]:
        return [bytes(view[s:e]) for s, e in ranges]

    return fetch


def gather(plans: Sequence[Plan[Any]]) -> Plan[list[Any]]:
    """Run several plans in lockstep: each step asks for the union of their requests."""
    results: list[Any] = [None] * len(plans)
    pending: dict[int, list[Range]] = {}
    for i, p in enumerate(plans):
        try:
            pending[i] = next(p)
        except StopIteration as done:
            results[i] = done.value
    while pending:
        order = list(pending)
        request = [r for i in order for r in pending[i]]
        response = yield request
        if len(response) != len(request):
            raise CorruptFileError("IO layer returned the wrong number of ranges")
        pos = 0
        for i in order:
            n = len(pending[i])
            part, pos = list(response[pos: pos + n]), pos + n
            try:
                pending[i] = plans[i].send(part)
            except StopIteration as done:
                results[i] = done.value
                del pending[i]
    return results


def merge_ranges(ranges: Sequence[Range], gap: int) -> tuple[list[Range], np.ndarray,
                                                              np.ndarray]:
    """Coalesce ranges whose gap is at most ``gap`` bytes.

    Returns the merged ranges and, for each input range, the index of the merged range that
    holds it and its offset inside that merged range. Empty ranges map to index -1.
    """
    merged, group, offset = _merge(ranges, gap)
    return merged, np.asarray(group, dtype=np.int64), np.asarray(offset, dtype=np.int64)


def _merge(ranges: Sequence[Range], gap: int) -> tuple[list[Range], list[int], list[int]]:
    if len(ranges) <= 32:  # plain Python beats numpy's per-call overhead here
        group, offset = [-1] * len(ranges), [0] * len(ranges)
        merged: list[Range] = []
        reach = 0
        for s, e, i in sorted((s, e, i) for i, (s, e) in enumerate(ranges) if e > s):
            if merged and s <= reach + gap:
                first = merged[-1][0]
                reach = max(reach, e)
                merged[-1] = (first, reach)
                offset[i] = s - first
            else:
                merged.append((s, e))
                reach = e
            group[i] = len(merged) - 1
        return merged, group, offset
    arr = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    g_start, g_end, group_arr, offset_arr = merge_range_arrays(arr[:, 0], arr[:, 1], gap)
    merged_list = list(zip(g_start.tolist(), g_end.tolist(), strict=True))
    return merged_list, group_arr.tolist(), offset_arr.tolist()


def merge_range_arrays(starts: np.ndarray, ends: np.ndarray, gap: int,
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`merge_ranges` over arrays of starts and ends: the merged starts and ends, and
    for each range its merged range (-1 for an empty range) and its offset there."""
    group_arr = np.full(len(starts), -1, dtype=np.int64)
    offset_arr = np.zeros(len(starts), dtype=np.int64)
    idx = np.flatnonzero(ends > starts)
    if len(idx) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, group_arr, offset_arr
    order = idx[np.argsort(starts[idx], kind="stable")]
    sorted_starts, sorted_ends = starts[order], ends[order]
    reach_arr = np.maximum.accumulate(sorted_ends)
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = sorted_starts[1:] > reach_arr[:-1] + gap
    gid = np.cumsum(new_group) - 1
    g_start = sorted_starts[new_group]
    g_end = np.maximum.reduceat(sorted_ends, np.flatnonzero(new_group))
    group_arr[order] = gid
    offset_arr[order] = sorted_starts - g_start[gid]
    return g_start, g_end, group_arr, offset_arr


#: From this many byte ranges on, :func:`merge_runs` joins close ones (fewer are left to the
#: store, whose coalescing costs less than picking values out of a joined read).
MERGE_MIN_RANGES = 64


def merge_runs(starts: np.ndarray, ends: np.ndarray, gap: int,
               ) -> tuple[list[Range], np.ndarray]:
    """Byte ranges (many ones sorted by start; neighbours may overlap) with those at most
    ``gap`` bytes apart read as one: the ranges to read, and where each given range starts
    in their bytes laid end to end (0 for an empty range)."""
    if not len(starts):
        return [], np.zeros(0, np.int64)
    if len(starts) < MERGE_MIN_RANGES:  # a few: as they are (the store coalesces them)
        lengths = ends - starts
        return (list(zip(starts.tolist(), ends.tolist(), strict=True)),
                np.concatenate(([0], np.cumsum(lengths)[:-1])))
    m_start, m_end, group, offset = merge_range_arrays(starts, ends, gap)
    base = np.concatenate(([0], np.cumsum(m_end - m_start)[:-1]))
    at = np.where(group >= 0, base[np.maximum(group, 0)] + offset, 0)
    return list(zip(m_start.tolist(), m_end.tolist(), strict=True)), at


def _check_ranges(request: Sequence[Range], file_size: int) -> None:
    bad = None
    if len(request) <= 32:
        bad = next(((s, e) for s, e in request if s < 0 or e < s or e > file_size), None)
    elif request:
        arr = np.asarray(request, dtype=np.int64).reshape(-1, 2)
        if arr.min() < 0 or np.any(arr[:, 1] < arr[:, 0]) or arr[:, 1].max() > file_size:
            bad = next((s, e) for s, e in request if s < 0 or e < s or e > file_size)
    if bad is not None:
        raise CorruptFileError(
            f"byte range {bad[0]}..{bad[1]} lies outside the file ({file_size} bytes)")


def coalesced(plan: Plan[T], *, file_size: int) -> Plan[T]:
    """Wrap ``plan`` so each step's ranges are checked against the file, and overlapping or
    touching ranges are asked for once.

    Gaps between ranges are not bridged here: how far apart two ranges may be and still be
    read in one request is IO policy, and the store decides it
    (:meth:`alance.io.store.DatasetStore.get_ranges`). The wrapped plan receives read-only
    views (``memoryview``) into the fetched buffers where a range is part of a larger one.
    """
    try:
        request = next(plan)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    while True:
        _check_ranges(request, file_size)
        merged, group, offset = _merge(request, 0)
        response = yield merged
        if len(response) != len(merged):
            raise CorruptFileError("IO layer returned the wrong number of ranges")
        for (s, e), data in zip(merged, response, strict=True):
            if len(data) != e - s:
                raise CorruptFileError(f"short read at {s}..{e}: file truncated?")
        views = [memoryview(data) for data in response]
        parts: list[bytes | memoryview] = []
        for (s, e), g, off in zip(request, group, offset, strict=True):
            if g < 0:
                parts.append(b"")
            else:
                view = views[g]
                parts.append(view if off == 0 and len(view) == e - s else view[off: off + e - s])
        try:
            request = plan.send(parts)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


__all__ = ["MERGE_MIN_RANGES", "JoinedRanges", "Plan", "Range", "coalesced", "fetch_from",
           "gather", "merge_range_arrays", "merge_ranges", "merge_runs", "run_plan"]
