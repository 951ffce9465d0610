"""Distributed reads: a dataset version cut into tasks (fragment row ranges) that engines such as
Spark run in parallel, each scanning its range with a projection and a filter.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.scan import Scanner, _Chunk
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


class RangeScanner(Scanner):
    """A scan of one fragment's physical row range (deleted rows skipped as usual).

    ``filter`` may be a pyarrow expression whose referenced top-level columns are given as
    ``filter_columns``: only those (and the projection) are read, the filter ones first.
    """

    def __init__(self, ctx: ReadContext, task: ReadTask, *, columns: list[str] | None,
                 filter: str | pc.Expression | None, filter_columns: Iterable[str] = (),
                 batch_size: int | None = None) -> None:
        super().__init__(ctx, columns=columns, filter=filter, batch_size=batch_size,
                         fragments=[task.fragment_id])
        self.task = task
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

    async def _chunks(self, fragments: list[table_pb2.DataFragment],
                      ) -> AsyncGenerator[_Chunk, None]:
        start, end = self.task.start, self.task.end
        async for chunk in super()._chunks(fragments):
            lo, hi = max(chunk.start, start), min(chunk.end, end)
            if hi > lo:
                yield _Chunk(chunk.fragment, lo, hi)


def scan_task(dataset: Any, task: ReadTask, *, columns: list[str] | None = None,
              filter: str | pc.Expression | None = None, filter_columns: Iterable[str] = (),
              batch_size: int | None = None) -> AsyncIterator[pa.RecordBatch]:
    """Stream the rows of one :class:`ReadTask` of ``dataset`` (a ``LanceDataset``)."""
    if not any(f.id == task.fragment_id for f in dataset.fragment_protos()):
        raise InvalidInputError(f"version {dataset.version} has no fragment {task.fragment_id}")
    scanner = RangeScanner(dataset._ctx, task, columns=columns, filter=filter,
                           filter_columns=filter_columns, batch_size=batch_size)
    return scanner.to_batches()
