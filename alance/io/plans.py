"""Running the format layer's read plans against a store.

The format layer describes a read as a *plan*: a generator that yields the byte ranges it needs
next and receives their bytes (:mod:`alance.format.legacy.plan`). :func:`run_plan` is the IO
side: it fetches each step's ranges through the store (which coalesces them) and feeds them
back, decoding big steps on a small shared thread pool (:func:`decode_pool`) so the event loop
stays free.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from alance.errors import CorruptFileError
from alance.io.store import DatasetStore

T = TypeVar("T")

#: A plan step whose fetched bytes total at least this much is decoded on a worker thread
#: (smaller steps cost less than the hand-off).
OFFLOAD_BYTES = 96 * 1024

__all__ = ["DECODE_WORKERS", "OFFLOAD_BYTES", "decode_pool", "offloading", "run_plan",
           "set_offloading"]


#: Decoding threads shared by every read of the process, which writes also encode their
#: columns on (numpy and pyarrow release the GIL in their kernels, so two workers keep both
#: cores busy next to the event loop).
DECODE_WORKERS = 2
_decode_pool: ThreadPoolExecutor | None = None
_decode_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _decode_pool
    if _decode_pool is None:
        with _decode_pool_lock:
            if _decode_pool is None:
                _decode_pool = ThreadPoolExecutor(DECODE_WORKERS,
                                                  thread_name_prefix="alance-decode")
    return _decode_pool


def decode_pool() -> ThreadPoolExecutor:
    """The decoding threads shared by every read (and write encoding) of the process."""
    return _pool()


def _forget_pool_after_fork() -> None:
    # A forked child inherits the pool object but not its threads: start a fresh one there.
    global _decode_pool, _decode_pool_lock
    _decode_pool = None
    _decode_pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_pool_after_fork)


#: Whether decoding may move off the event loop's thread (see :func:`set_offloading`).
_offloading = True


def set_offloading(enabled: bool) -> None:
    """Let big decode steps run on the decoding threads (``True``, the default) or keep all
    decoding on the event loop's thread (``False``), for this process.

    The hand-off buys parallelism when one process reads alone; where every core already
    runs a reading process (Spark's Python workers: one task per core) it buys none and
    costs thread wake-ups and contention: Spark's read tasks turn it off.
    """
    global _offloading
    _offloading = bool(enabled)


def offloading() -> bool:
    """Whether decode steps may run on the decoding threads (:func:`set_offloading`)."""
    return _offloading


_DONE = object()


def _step(plan: Generator[Any, Any, Any], data: Any) -> tuple[Any, Any]:
    """Resume ``plan`` with ``data``: ``(next ranges, None)`` or ``(_DONE, result)``.

    (A StopIteration cannot cross into a future, so the result travels as a value.)
    """
    try:
        return plan.send(data), None
    except StopIteration as stop:
        return _DONE, stop.value


async def _step_off_loop(plan: Generator[Any, Any, Any], data: Any) -> tuple[Any, Any]:
    fut = asyncio.get_running_loop().run_in_executor(_pool(), _step, plan, data)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(fut)
            break
        except asyncio.CancelledError:
            # The plan is still running on its thread: it must finish before anyone may
            # close it, so wait for it and only then pass the cancellation on.
            if fut.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


async def run_plan(plan: Generator[list[tuple[int, int]], list[bytes], T], store: DatasetStore,
                   path: str, offload_bytes: int | None = OFFLOAD_BYTES) -> T:
    """Drive a read plan to completion, fetching each step's ranges from ``path``.

    Steps that receive at least ``offload_bytes`` (where decoding happens; ``None``: never)
    run on a small thread pool, so the event loop stays free; the plan is only ever resumed
    by one thread at a time.
    """
    try:
        ranges: Any = next(plan)
        while True:
            data = await store.get_ranges(path, ranges)
            total = 0
            for (start, end), chunk in zip(ranges, data, strict=True):
                if len(chunk) != end - start:
                    raise CorruptFileError(f"{path}: file ends before byte {end}")
                total += end - start
            if offload_bytes is not None and total >= offload_bytes and _offloading:
                ranges, value = await _step_off_loop(plan, data)
            else:
                ranges, value = _step(plan, data)
            if ranges is _DONE:
                return value  # type: ignore[no-any-return]
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    except CorruptFileError as exc:
        if path in str(exc):
            raise
        raise CorruptFileError(f"{path}: {exc}") from exc  # name the file that is damaged
    finally:
        plan.close()
