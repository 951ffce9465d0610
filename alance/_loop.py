"""The background event loop behind :mod:`alance.sync`.

One daemon thread runs one asyncio loop, created lazily under a lock. :func:`run` submits a
coroutine to it and blocks until the result is ready, so blocking code (threads, Spark executors,
notebooks or code already inside a running event loop) can call the async implementation.
After ``os.fork()`` the child forgets the parent's loop and thread (they do not exist in the
child) and starts its own on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _start() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="alance-loop", daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def loop() -> asyncio.AbstractEventLoop:
    """The background loop, started if needed."""
    return _loop if _loop is not None and _thread is not None and _thread.is_alive() else _start()


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and return its result (blocking the caller)."""
    background = loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("alance.sync called from alance's own event loop thread; "
                           "use the async API (alance) there instead")
    future = asyncio.run_coroutine_threadsafe(coro, background)
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


def iterate(agen: AsyncIterator[T]) -> Iterator[T]:
    """A blocking iterator over an async iterator, stepped on the background loop."""
    try:
        while True:
            try:
                item: T = run(anext(agen))  # type: ignore[arg-type]
            except StopAsyncIteration:
                return
            yield item
    finally:
        aclose = getattr(agen, "aclose", None)
        if aclose is not None:
            run(aclose())


def _after_fork_in_child() -> None:
    # The loop thread does not exist in the child; its loop object may be mid-iteration and
    # must not be touched. Drop both and start fresh when the child first needs a loop.
    global _loop, _thread, _lock
    _loop, _thread = None, None
    _lock = threading.Lock()


def _shutdown() -> None:
    with _lock:
        if _loop is not None and _thread is not None and _thread.is_alive():
            _loop.call_soon_threadsafe(_loop.stop)
            _thread.join(timeout=5)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_shutdown)
