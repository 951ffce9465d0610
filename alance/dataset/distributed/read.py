"""Distributed reads: a dataset version cut into tasks (fragment row ranges) that engines such as
Spark run in parallel, each scanning its range with a projection and a filter.

:func:`plan_read` gives one task per fragment (large fragments cut into row ranges);
:func:`plan_read_groups` packs such ranges into about ``parallelism`` groups, each one engine
task (an engine's per-task costs are paid once per group); :func:`scan_tasks` scans a group.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.scan import Scanner, _Chunk, _Sizes
from alance.errors import InvalidInputError


@dataclass(frozen=True)
class ReadTask:
    """Physical rows ``[start, end)`` of one fragment: one task of a distributed read."""

    fragment_id: int
    start: int
    end: int


def plan_read(fragments: Iterable[table_pb2.DataFragment], rows_per_task: int,
              ) -> list[ReadTask]:
    """One task per fragment; fragments of more than ``rows_per_task`` physical rows are cut
    into row ranges of about equal size."""
    if rows_per_task < 1:
        raise InvalidInputError("rows_per_task must be at least 1")
    tasks: list[ReadTask] = []
    for frag in fragments:
        rows = int(frag.physical_rows)
        pieces = max(1, -(-rows // rows_per_task))
        bounds = [rows * i // pieces for i in range(pieces + 1)]
        tasks += [ReadTask(int(frag.id), s, e) for s, e in itertools.pairwise(bounds)
                  if e > s or rows == 0]
    return tasks


def plan_read_groups(fragments: Iterable[table_pb2.DataFragment], rows_per_task: int,
                     parallelism: int | None = None) -> list[list[ReadTask]]:
    """The tasks of :func:`plan_read`, packed into groups of consecutive tasks.

    Without ``parallelism`` every task is a group of its own. With it, the rows are cut into
    at most ``max(parallelism, ceil(rows / rows_per_task))`` runs of about equal size (larger
    fragments cut into ranges) and each task joins the run its middle row falls in, so a
    dataset of many small fragments reads as about ``parallelism`` groups instead of one per
    fragment. No group holds more than ``rows_per_task`` rows.
    """
    frags = list(fragments)
    if parallelism is None or parallelism < 1:
        return [[t] for t in plan_read(frags, rows_per_task)]
    total = sum(int(f.physical_rows) for f in frags)
    runs = max(parallelism, -(-total // rows_per_task))
    size = max(1, min(rows_per_task, -(-total // runs)))
    groups: list[list[ReadTask]] = []
    run, rows, seen = -1, 0, 0
    for task in plan_read(frags, size):
        n = task.end - task.start
        middle = (2 * seen + n) * runs // (2 * max(total, 1))
        seen += n
        if middle != run or rows + n > rows_per_task or not groups:
            groups.append([task])
            run, rows = middle, n
        else:
            groups[-1].append(task)
            rows += n
    return groups


class RangeScanner(Scanner):
    """A scan of fragments' physical row ranges, in the order given (deleted rows skipped as
    usual).

    ``filter`` may be a pyarrow expression whose referenced top-level columns are given as
    ``filter_columns``: only those (and the projection) are read, the filter ones first.
    """

    def __init__(self, ctx: ReadContext, tasks: ReadTask | Sequence[ReadTask], *,
                 columns: list[str] | None, filter: str | pc.Expression | None,
                 filter_columns: Iterable[str] = (), batch_size: int | None = None) -> None:
        self.tasks = [tasks] if isinstance(tasks, ReadTask) else list(tasks)
        super().__init__(ctx, columns=columns, filter=filter, batch_size=batch_size,
                         fragments=[t.fragment_id for t in self.tasks])
        if isinstance(filter, pc.Expression):
            # The base class assumes an expression may use any column; ours says which.
            names = list(dict.fromkeys(filter_columns))
            projected = {f.name for f in self.projection}
            self._filter_names = set(names)
            self._filter_system = []
            extra = [ctx.schema.field(n) for n in names if n not in projected]
            self.read_fields = self.projection + extra
            # what a filtered scan reads before the filter (the rest only for matching rows)
            self._filter_fields = extra + [f for f in self.projection if f.name in names]

    def _plan_fragments(self) -> tuple[list[table_pb2.DataFragment], int]:
        return self.fragments, 0

    async def _chunks(self, fragments: list[table_pb2.DataFragment], sizes: _Sizes,
                      ) -> AsyncGenerator[_Chunk, None]:
        by_id = {f.id: f for f in fragments}
        for task in self.tasks:
            start, end = task.start, task.end
            async for chunk in super()._chunks([by_id[task.fragment_id]], sizes):
                lo, hi = max(chunk.start, start), min(chunk.end, end)
                if hi > lo:
                    yield _Chunk(chunk.fragment, lo, hi)


def scan_tasks(dataset: Any, tasks: ReadTask | Sequence[ReadTask], *,
               columns: list[str] | None = None, filter: str | pc.Expression | None = None,
               filter_columns: Iterable[str] = (), batch_size: int | None = None,
               ) -> AsyncIterator[pa.RecordBatch]:
    """Stream the rows of ``tasks`` (one :class:`ReadTask` or several) of ``dataset`` (a
    ``LanceDataset``), one task after the other, as one scan (the next task's chunks are
    read ahead)."""
    group = [tasks] if isinstance(tasks, ReadTask) else list(tasks)
    have = {f.id for f in dataset.fragment_protos()}
    for task in group:
        if task.fragment_id not in have:
            raise InvalidInputError(f"version {dataset.version} has no fragment "
                                    f"{task.fragment_id}")
    scanner = RangeScanner(dataset._ctx, group, columns=columns, filter=filter,
                           filter_columns=filter_columns, batch_size=batch_size)
    return scanner.to_batches()


def scan_task(dataset: Any, task: ReadTask, *, columns: list[str] | None = None,
              filter: str | pc.Expression | None = None, filter_columns: Iterable[str] = (),
              batch_size: int | None = None) -> AsyncIterator[pa.RecordBatch]:
    """Stream the rows of one :class:`ReadTask` of ``dataset`` (a ``LanceDataset``)."""
    return scan_tasks(dataset, [task], columns=columns, filter=filter,
                      filter_columns=filter_columns, batch_size=batch_size)
