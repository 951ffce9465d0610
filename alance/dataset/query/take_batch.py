"""Concurrent takes on one dataset, merged into one read.

An async service issues many small takes at once (one per request it serves). Each costs
mostly fixed work: planning per column, a request per chunk, Arrow assembly. A
:class:`TakeBatcher` collects the takes that arrive while earlier ones run (or in the same
event-loop turn), reads the union of their rows with one take, and hands each caller its own
rows, in its own order. A take that finds the batcher idle starts on the next loop turn, so
batching adds no waiting of its own; under load, the cost of a read is shared by all the
takes it serves.

Errors that belong to one caller (bad indices) are raised before batching; an error of the
shared read (a corrupt file, a store failure) reaches every caller whose rows it was reading.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

#: Shared reads of one projection in flight at once (one reads while the next gathers).
MAX_RUNNING = 2
#: Rows one shared read takes at most (more waiting requests go to the next read).
MAX_BATCH_ROWS = 64 * 1024
#: Takes of more rows than this run on their own: they already amortise fixed costs.
MAX_SHARED_TAKE = 1024

Reader = Callable[[np.ndarray, Sequence[str] | None], Awaitable[pa.Table]]


@dataclass
class _Queue:
    loop: asyncio.AbstractEventLoop
    columns: Sequence[str] | None
    waiting: list[tuple[np.ndarray, asyncio.Future[pa.Table]]] = field(default_factory=list)
    running: int = 0
    scheduled: bool = False


class TakeBatcher:
    """Merges concurrent takes of sorted unique dataset positions (see module docstring).

    ``read(positions, columns)`` reads sorted unique, validated positions, returning their
    rows in that order.
    """

    def __init__(self, read: Reader) -> None:
        self._read = read
        # Futures belong to one event loop: each loop that takes gets its own queues.
        self._queues: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[tuple[str, ...] | None, _Queue]] = (
                weakref.WeakKeyDictionary())

    async def take(self, positions: np.ndarray, columns: Sequence[str] | None) -> pa.Table:
        """Rows at ``positions`` (validated, any order, repeats allowed), in that order."""
        if len(positions) > MAX_SHARED_TAKE:
            return await _alone(self._read, positions, columns)
        loop = asyncio.get_running_loop()
        queues = self._queues.get(loop)
        if queues is None:
            queues = self._queues[loop] = {}
        key = None if columns is None else tuple(columns)
        queue = queues.get(key)
        if queue is None:
            queue = queues[key] = _Queue(loop, columns)
        fut: asyncio.Future[pa.Table] = loop.create_future()
        queue.waiting.append((positions, fut))
        self._schedule(queue)
        return await fut

    def _schedule(self, queue: _Queue) -> None:
        if queue.waiting and not queue.scheduled and queue.running < MAX_RUNNING:
            queue.scheduled = True
            queue.loop.call_soon(self._start, queue)

    def _start(self, queue: _Queue) -> None:
        queue.scheduled = False
        if queue.running >= MAX_RUNNING:
            return
        batch: list[tuple[np.ndarray, asyncio.Future[pa.Table]]] = []
        rows = 0
        while queue.waiting and (not batch or rows + len(queue.waiting[0][0]) <= MAX_BATCH_ROWS):
            item = queue.waiting.pop(0)
            if not item[1].done():  # skip callers that gave up
                batch.append(item)
                rows += len(item[0])
        if not batch:
            return
        queue.running += 1
        queue.loop.create_task(self._run(queue, batch))
        self._schedule(queue)

    async def _run(self, queue: _Queue,
                   batch: list[tuple[np.ndarray, asyncio.Future[pa.Table]]]) -> None:
        try:
            if len(batch) == 1:
                result = await _alone(self._read, batch[0][0], queue.columns)
                _deliver(batch[0][1], result)
                return
            union, inverse = np.unique(np.concatenate([p for p, _ in batch]),
                                       return_inverse=True)
            table = await self._read(union, queue.columns)
            at = 0
            for positions, fut in batch:
                part = inverse[at: at + len(positions)]
                at += len(positions)
                if not fut.done():
                    _deliver(fut, table.take(pa.array(part)))
        except BaseException as exc:  # the shared read failed: every caller sees why
            for _, fut in batch:
                if fut.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    fut.cancel()
                else:
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            queue.running -= 1
            self._schedule(queue)


def _deliver(fut: asyncio.Future[pa.Table], table: pa.Table) -> None:
    if not fut.done():
        fut.set_result(table)


async def _alone(read: Reader, positions: np.ndarray, columns: Sequence[str] | None,
                 ) -> pa.Table:
    """One caller's take: read its unique rows, then put them in its order."""
    if len(positions) > 1 and bool(np.all(positions[1:] > positions[:-1])):
        return await read(positions, columns)
    union, inverse = np.unique(positions, return_inverse=True)
    table = await read(union, columns)
    if len(union) == len(positions) and np.array_equal(union, positions):
        return table
    return table.take(pa.array(inverse.ravel()))


__all__ = ["MAX_RUNNING", "TakeBatcher"]
