"""A fault- and latency-injecting backend wrapper for tests and benchmarks.

:class:`FaultyBackend` wraps any :class:`~alance.io.backends.Backend` and, for a chosen fraction
of calls to chosen operations, raises :class:`~alance.errors.TransientStoreError` (or another
error class) and/or sleeps before answering. It also counts what passes through it: calls and
failures per operation, bytes read and written, and the most calls it ever saw in flight at once.

Install it through the storage option alance reserves for this::

    faults = FaultPlan(fail_rate=0.2, seed=7)
    ds = await alance.open_dataset(uri, storage_options={"wrap_backend": faults})
    ...
    faults.stats  # summed over every backend the plan wrapped

Decisions are deterministic for a seed *independently of scheduling*: whether a call fails is a
hash of ``(seed, operation, key, arguments, how many times this exact call was made before)``,
not a draw from a shared random stream that concurrent tasks would consume in varying order. The
same sequence of calls on the same keys therefore meets the same faults, and a retry of a failed
call is a new occurrence with its own, independent outcome.

Faults happen *before* the wrapped call by default (the request never reached the store). With
``fail_after=True`` the wrapped call runs first and its result is thrown away: the store did the
work but the caller sees an error, as when a response is lost on the way back. That is the case
where an operation's outcome is unknown to the caller (e.g. a conditional create that in fact
succeeded).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from alance.errors import TransientStoreError
from alance.io.backends import Backend, Buffer, Meta, Upload

#: Every operation name a plan can target. ``put`` is an unconditional put, ``put_create`` a
#: conditional create (``put(create=True)``: how manifests are committed); the ``upload_*``
#: names are the steps of a streaming (multipart) upload.
OPERATIONS = frozenset({
    "get", "get_ranges", "head", "list", "put", "put_create", "copy", "delete",
    "upload_write", "upload_complete",
})
#: Operations that only read.
READ_OPERATIONS = frozenset({"get", "get_ranges", "head", "list"})
#: Operations that change the store.
WRITE_OPERATIONS = OPERATIONS - READ_OPERATIONS


@dataclass
class FaultStats:
    """What went through one or more :class:`FaultyBackend` instances (thread-safe updates)."""

    calls: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    delayed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def total_calls(self) -> int:
        """Calls of every operation."""
        return sum(self.calls.values())

    @property
    def total_failures(self) -> int:
        """Injected failures of every operation."""
        return sum(self.failures.values())

    def _enter(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _add(self, *, read: int = 0, written: int = 0, failed: str | None = None,
             delayed: bool = False) -> None:
        with self._lock:
            self.bytes_read += read
            self.bytes_written += written
            if failed is not None:
                self.failures[failed] += 1
            if delayed:
                self.delayed += 1


def _fraction(*parts: object) -> float:
    """A stable pseudo-random number in [0, 1) for these parts (same parts, same number)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class FaultyBackend:
    """A :class:`~alance.io.backends.Backend` that fails or delays some calls of ``inner``.

    Args:
        inner: the wrapped backend (exposed as ``.inner``, which alance follows to find out
            whether an obstore backend sits underneath).
        fail_rate: fraction of targeted calls that fail (0 never, 1 always).
        delay: seconds to sleep before each delayed call.
        delay_rate: fraction of targeted calls that are delayed (default: all, if ``delay``).
        seed: makes the choice of failing/delayed calls reproducible (see the module doc).
        fail_ops: operations that may fail (default: all of :data:`OPERATIONS`).
        delay_ops: operations that may be delayed (default: all).
        fail_calls: indices (0-based, in call order) of calls to ``fail_ops`` that fail in any
            case: deterministic when those calls are made one after another (as a sequential
            write makes its uploads), e.g. ``{2}`` fails the third upload step.
        error: the exception class raised for an injected failure.
        fail_after: run the wrapped call first, then fail (the result is lost).
        stats: counters to update (shared between backends of one :class:`FaultPlan`).
    """

    def __init__(self, inner: Backend, *, fail_rate: float = 0.0, delay: float = 0.0,
                 delay_rate: float = 1.0, seed: int = 0,
                 fail_ops: Iterable[str] = OPERATIONS, delay_ops: Iterable[str] = OPERATIONS,
                 fail_calls: Iterable[int] = (),
                 error: type[Exception] = TransientStoreError, fail_after: bool = False,
                 stats: FaultStats | None = None) -> None:
        self.fail_ops = frozenset(fail_ops)
        self.delay_ops = frozenset(delay_ops)
        unknown = (self.fail_ops | self.delay_ops) - OPERATIONS
        if unknown:
            raise ValueError(f"unknown operations {sorted(unknown)}; known: {sorted(OPERATIONS)}")
        if not (0.0 <= fail_rate <= 1.0 and 0.0 <= delay_rate <= 1.0):
            raise ValueError("fail_rate and delay_rate must be within [0, 1]")
        self.inner = inner
        self.fail_rate = fail_rate
        self.delay = delay
        self.delay_rate = delay_rate
        self.seed = seed
        self.error = error
        self.fail_after = fail_after
        self.fail_calls = frozenset(fail_calls)
        self._targeted = 0  # calls to fail_ops so far
        self.stats = stats if stats is not None else FaultStats()
        self._occurrences: Counter[tuple[Any, ...]] = Counter()
        self._occ_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"FaultyBackend({self.inner!r}, fail_rate={self.fail_rate}, "
                f"delay={self.delay}, seed={self.seed})")

    # -- decisions ---------------------------------------------------------------------------
    def _decide(self, op: str, sig: tuple[Any, ...]) -> tuple[bool, bool]:
        """(fail?, delay?) for this occurrence of the call ``(op, *sig)``."""
        with self._occ_lock:
            n = self._occurrences[(op, *sig)]
            self._occurrences[(op, *sig)] = n + 1
            index = -1
            if op in self.fail_ops:
                index, self._targeted = self._targeted, self._targeted + 1
        fail = op in self.fail_ops and (
            index in self.fail_calls
            or _fraction(self.seed, "fail", op, sig, n) < self.fail_rate)
        slow = (self.delay > 0 and op in self.delay_ops
                and _fraction(self.seed, "delay", op, sig, n) < self.delay_rate)
        return fail, slow

    def _fault(self, op: str, what: str) -> Exception:
        self.stats._add(failed=op)
        return self.error(f"injected fault: {op} {what}")

    async def _run(self, op: str, sig: tuple[Any, ...], call: Callable[[], Any]) -> Any:
        fail, slow = self._decide(op, sig)
        self.stats._enter(op)
        try:
            if slow:
                self.stats._add(delayed=True)
                await asyncio.sleep(self.delay)
            if fail and not self.fail_after:
                raise self._fault(op, str(sig[0]))
            result = await call()
            if fail:
                raise self._fault(op, str(sig[0]))
            return result
        finally:
            self.stats._leave()

    # -- Backend protocol --------------------------------------------------------------------
    async def get(self, key: str) -> bytes:
        """Whole object (may fail or be delayed)."""
        data: bytes = await self._run("get", (key,), lambda: self.inner.get(key))
        self.stats._add(read=len(data))
        return data

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]],
                         coalesce: int) -> list[Buffer]:
        """Byte ranges of one object (may fail or be delayed)."""
        parts: list[Buffer] = await self._run(
            "get_ranges", (key, tuple(ranges)),
            lambda: self.inner.get_ranges(key, ranges, coalesce))
        self.stats._add(read=sum(len(p) for p in parts))
        return parts

    async def head(self, key: str) -> Meta:
        """Object metadata (may fail or be delayed)."""
        meta: Meta = await self._run("head", (key,), lambda: self.inner.head(key))
        return meta

    async def list(self, prefix: str) -> list[Meta]:
        """Listing under a prefix (may fail or be delayed)."""
        metas: list[Meta] = await self._run("list", (prefix,), lambda: self.inner.list(prefix))
        return metas

    async def put(self, key: str, data: bytes, *, create: bool) -> None:
        """Put or conditional create (``put_create``); may fail or be delayed."""
        op = "put_create" if create else "put"
        await self._run(op, (key, len(data)), lambda: self.inner.put(key, data, create=create))
        self.stats._add(written=len(data))

    async def copy(self, src: str, dst: str, *, overwrite: bool) -> None:
        """Server-side copy (may fail or be delayed)."""
        await self._run("copy", (src, dst, overwrite),
                        lambda: self.inner.copy(src, dst, overwrite=overwrite))

    async def delete(self, key: str) -> None:
        """Delete (may fail or be delayed)."""
        await self._run("delete", (key,), lambda: self.inner.delete(key))

    def upload(self, key: str) -> Upload:
        """A streaming upload whose writes and completion may fail or be delayed."""
        return _FaultyUpload(self, key, self.inner.upload(key))


class _FaultyUpload:
    def __init__(self, owner: FaultyBackend, key: str, inner: Upload) -> None:
        self._owner, self._key, self.inner = owner, key, inner
        self._part = 0

    async def write(self, data: Buffer) -> None:
        part = self._part
        self._part += 1
        await self._owner._run("upload_write", (self._key, part, len(data)),
                               lambda: self.inner.write(data))
        self._owner.stats._add(written=len(data))

    async def complete(self) -> None:
        await self._owner._run("upload_complete", (self._key,), self.inner.complete)

    async def abort(self) -> None:
        await self.inner.abort()  # cleanup is never sabotaged


class FaultPlan:
    """A ``wrap_backend`` storage option: wraps each backend it is given in a FaultyBackend.

    Every backend it makes shares one :class:`FaultStats` (``plan.stats``), so a test can read
    the totals after ``open_dataset``/``write_dataset`` made their stores. Keyword arguments are
    those of :class:`FaultyBackend`.
    """

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.stats = FaultStats()
        self.backends: list[FaultyBackend] = []

    def __call__(self, inner: Backend) -> FaultyBackend:
        backend = FaultyBackend(inner, stats=self.stats, **self.kwargs)
        self.backends.append(backend)
        return backend
