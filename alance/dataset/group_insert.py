"""Group commit: small inserts from many concurrent callers merged into shared commits.

A service that appends what each request brings makes one commit per request, and commits of
one dataset are serial: under load the requests queue behind each other's commits, and each
commit leaves a small fragment behind. A :class:`BatchedInserter` collects the inserts that
arrive while a commit is running and writes them with the next one (one data file, one
manifest), the way databases group commits. A caller waits for the commit that holds its rows
and gets that version back; an insert that finds the inserter idle starts at once, so batching
adds no waiting of its own.

Each caller's rows stay its own: its data is converted (and checked) before it joins a batch,
inserts of different schemas go to different commits, and when a shared commit fails on its
data every insert of the batch is retried alone, so one caller's bad rows fail that caller
only. A failed commit commits nothing; every caller of that batch gets its error. A caller
cancelled before its batch starts is taken out (its rows are not written); once the batch is
being committed it runs to the end.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from alance.dataset.api import LanceDataset
from alance.dataset.fragments.inputs import record_batch_stream
from alance.errors import AlanceError, InvalidInputError

#: Rows one shared commit takes at most (later inserts go to the next commit).
MAX_BATCH_ROWS = 1 << 20


@dataclass(eq=False)  # compared by identity: one caller's insert
class _Pending:
    table: pa.Table
    done: asyncio.Future[LanceDataset]
    started: bool = False


@dataclass
class _State:
    waiting: list[_Pending] = field(default_factory=list)
    running: asyncio.Task[None] | None = None


class BatchedInserter:
    """Inserts into one dataset from concurrent callers, committed together (group commit).

    ``dataset`` is the handle to start from (its store client and caches are reused);
    ``compact_after`` as for :meth:`LanceDataset.insert` (auto-compaction of small
    fragments). Use one inserter per dataset and event loop::

        inserter = alance.BatchedInserter(ds, compact_after=8)
        version = await inserter.insert(rows)   # in each request handler
    """

    def __init__(self, dataset: LanceDataset, *, compact_after: int | None = None,
                 max_batch_rows: int = MAX_BATCH_ROWS) -> None:
        if not isinstance(dataset, LanceDataset):
            raise InvalidInputError(f"BatchedInserter needs an alance LanceDataset, not "
                                    f"{type(dataset).__name__}")
        if max_batch_rows < 1:
            raise InvalidInputError("max_batch_rows must be positive")
        self._dataset = dataset
        self._compact_after = compact_after
        self._max_rows = max_batch_rows
        self._state = _State()
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def dataset(self) -> LanceDataset:
        """The newest version this inserter has committed (or started from)."""
        return self._dataset

    async def insert(self, data: Any) -> LanceDataset:
        """Append ``data`` (anything :meth:`LanceDataset.insert` takes that fits in memory)
        and return the version whose commit holds it (it may hold other callers' rows too).
        """
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise InvalidInputError("a BatchedInserter serves one event loop; make one per loop")
        schema, batches = await record_batch_stream(data, purpose="insert")
        table = pa.Table.from_batches([b async for b in batches], schema=schema)
        pending = _Pending(table, loop.create_future())
        state = self._state
        state.waiting.append(pending)
        if state.running is None:
            state.running = loop.create_task(self._run())
        try:
            return await asyncio.shield(pending.done)
        except asyncio.CancelledError:
            if not pending.started:  # not written yet: withdraw the rows
                if pending in state.waiting:
                    state.waiting.remove(pending)
                pending.done.cancel()
            raise

    async def _run(self) -> None:
        state = self._state
        try:
            while state.waiting:
                batch = self._next_batch()
                for item in batch:
                    item.started = True
                await self._commit(batch)
        finally:
            state.running = None
            if state.waiting:  # arrived while the task was finishing
                state.running = asyncio.get_running_loop().create_task(self._run())

    def _next_batch(self) -> list[_Pending]:
        """The oldest waiting inserts of one schema, up to the row limit."""
        waiting = self._state.waiting
        first = waiting.pop(0)
        batch, rows = [first], first.table.num_rows
        keep: list[_Pending] = []
        for item in waiting:
            if (rows + item.table.num_rows <= self._max_rows
                    and item.table.schema.equals(first.table.schema, check_metadata=True)):
                batch.append(item)
                rows += item.table.num_rows
            else:
                keep.append(item)
        waiting[:] = keep
        return [item for item in batch if not item.done.done()]

    async def _commit(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        try:
            table = (batch[0].table if len(batch) == 1 else
                     pa.concat_tables([item.table for item in batch]))
            version = await self._dataset.insert(table, compact_after=self._compact_after)
        except (AlanceError, pa.ArrowException) as exc:
            if len(batch) > 1 and _about_the_data(exc):
                for item in batch:  # find whose rows these are: each insert alone
                    await self._commit([item])
                return
            _fail(batch, exc)
            return
        except BaseException as exc:
            _fail(batch, exc)
            raise
        if version.version > self._dataset.version:
            self._dataset = version
        for item in batch:
            if not item.done.done():
                item.done.set_result(version)


def _about_the_data(exc: BaseException) -> bool:
    """Whether an insert failed on the rows it was given (schema mismatches, values that do
    not fit...), not on the store or a commit."""
    return isinstance(exc, (InvalidInputError, pa.ArrowException))


def _fail(batch: list[_Pending], exc: BaseException) -> None:
    for item in batch:
        if item.done.done():
            continue
        if isinstance(exc, asyncio.CancelledError):
            item.done.cancel()
        else:
            item.done.set_exception(exc)


__all__ = ["MAX_BATCH_ROWS", "BatchedInserter"]
