"""The object-store interface alance's dataset and commit layers use.

A :class:`DatasetStore` is bound to one dataset root. Every path it takes is *relative to that
root* (``"_versions/1.manifest"``, ``"data/abc.lance"``); paths that would leave the root are
refused with :class:`~alance.errors.PathOutsideDatasetError`. It knows nothing of the Lance
format: it holds IO policy (path safety, concurrency bounds, range coalescing, write buffering)
and leaves moving bytes to a backend (:mod:`alance.io.backends`).
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import contextvars
import datetime as dt
import itertools
import logging
import posixpath
import random
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from alance.errors import (
    AlanceError,
    CorruptFileError,
    DeadlineExceededError,
    InvalidInputError,
    NotFoundError,
    PathOutsideDatasetError,
    TransientStoreError,
    UnsupportedFeatureError,
)
from alance.io.backends import Backend, Buffer, ObstoreBackend, Upload, obstore_usable
from alance.io.block_cache import BlockCache, shared_cache
from alance.io.deadline import DEFAULT_DEADLINE, DEFAULT_SLOW_WARNING, call_deadline

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How many requests one store keeps in flight at most (per process and store).
DEFAULT_MAX_CONCURRENCY = 16
#: Ranges longer than this are split into concurrent requests of about this size.
DEFAULT_SPLIT_BYTES = 8 * 1024 * 1024
#: A wanted range up to this many times the split size is fetched whole, by one request
#: (longer ones are split, and their pieces joined by a copy).
WHOLE_RANGE_FACTOR = 4
#: Extra attempts for idempotent operations that failed transiently.
DEFAULT_MAX_RETRIES = 3
#: First retry delay in seconds (doubles per attempt, with full jitter, capped at 2 s).
RETRY_BASE_DELAY = 0.05
#: Streaming writes hand the store parts of about this size (bounded write buffer).
DEFAULT_PART_SIZE = 8 * 1024 * 1024
#: Ranges closer than this are fetched with one request (local files: a page-cache copy of
#: the gap costs more than another call; cloud stores use a far larger gap).
DEFAULT_COALESCE_BYTES = 4 * 1024
#: Up to this many ranges of a local file are coalesced in plain Python, not numpy.
FEW_RANGES = 32
#: Bytes read from the end of a data or index file to open it: its footer and, usually, all
#: its metadata (a bigger tail saves a second request where each costs a round trip).
DEFAULT_TAIL_BYTES = 16 * 1024
#: Decoded bytes per scan chunk on local disk (see ``scan_chunk_bytes``). Every chunk costs
#: plan steps, allocations and numpy set-up per column: 16 MiB chunks scanned a 4M-row 2.1
#: table in 0.63 s of CPU against 0.87 s for 8 MiB ones, and a streaming scan of 10M rows
#: peaked at 451 MB RSS against 358 MB (pylance: 852-899 MB).
DEFAULT_SCAN_CHUNK_BYTES = 16 * 1024 * 1024
#: A scan that builds one table (``to_table``) reads chunks this many times
#: ``scan_chunk_bytes`` on local disk (at most :data:`TABLE_CHUNK_MAX_BYTES`): the table holds
#: every row it reads, so larger chunks add little to its peak memory, and they cut the
#: decoding threads' per-step costs (numpy calls, GIL hand-offs, mappings): a 10M-row 2.1
#: full scan 1.49 -> 1.18 s. Cloud stores use 1: there a larger chunk leaves the decoding
#: threads idle longer while its first pieces arrive, and its longest ranges exceed what is
#: fetched whole (2M rows over S3 at +20 ms a request: 0.54 s at 32 MiB, 0.56-0.59 s and 25%
#: more CPU at 64 MiB).
DEFAULT_TABLE_CHUNK_FACTOR = 4
TABLE_CHUNK_MAX_BYTES = 64 * 1024 * 1024
#: Ranges of one object handed to the backend in one call (holding one in-flight slot). Local
#: disks read them one after another, so batching only saves per-call overhead; cloud stores
#: use 1 so that every HTTP request holds its own slot of the bound.
DEFAULT_RANGES_PER_REQUEST = 64


@dataclass
class IoCounter:
    """Reads made while a :func:`counting_io` block is active (in its task and the tasks
    it starts): backend calls, ranges and bytes."""

    requests: int = 0
    iops: int = 0
    bytes_read: int = 0


_IO_COUNTER: contextvars.ContextVar[IoCounter | None] = contextvars.ContextVar(
    "alance_io_counter", default=None)


@contextlib.contextmanager
def counting_io() -> Iterator[IoCounter]:
    """Count the reads made inside the block (for ``analyze_plan`` and benchmarks)."""
    counter = IoCounter()
    token = _IO_COUNTER.set(counter)
    try:
        yield counter
    finally:
        _IO_COUNTER.reset(token)


#: Read operations (byte ranges after coalescing) of every store in this process.
_PROCESS_IOPS = [0]


def iops_counter() -> int:
    """Read operations (byte ranges fetched, after coalescing) by every dataset store of this
    process so far (pylance's ``lance.iops_counter``): the difference across a call is what
    it read."""
    return _PROCESS_IOPS[0]


def _count(requests: int, iops: int, nbytes: int) -> None:
    _PROCESS_IOPS[0] += iops
    counter = _IO_COUNTER.get()
    if counter is not None:
        counter.requests += requests
        counter.iops += iops
        counter.bytes_read += nbytes


@dataclass(frozen=True)
class ObjectMeta:
    """What a listing or ``head`` tells about one object."""

    path: str  # relative to the dataset root
    size: int
    last_modified: dt.datetime | None = None
    e_tag: str | None = None


def safe_relative_path(path: str) -> str:
    """Normalise a path relative to the dataset root, refusing anything that escapes it."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        raise PathOutsideDatasetError(f"not a relative path inside the dataset: {path!r}")
    norm = posixpath.normpath(path)
    if norm in (".", "..") or norm.startswith("../") or "://" in path:
        raise PathOutsideDatasetError(f"path escapes the dataset root: {path!r}")
    return norm


class DatasetStore:
    """Async access to the objects under one dataset root.

    Args:
        backend: moves the bytes (:mod:`alance.io.backends`), e.g. an ``ObstoreBackend``.
        root: the dataset root *inside* the backend's key space (no leading slash).
        uri: the dataset URI the user gave, for messages and pickling.
        max_concurrency: requests in flight at most through this object.
        coalesce_bytes: gap below which neighbouring ranges of one object are read together.
        after_fork: builds a replacement backend for a process forked after obstore was used
            (obstore cannot run there); ``None`` means such a child cannot use this store.
        split_bytes: ranges longer than this are fetched as several concurrent requests
            (cut between the wanted ranges they merge; one wanted range is cut only when
            it is more than :data:`WHOLE_RANGE_FACTOR` times this long).
        limiter_key: stores with the same key share the in-flight bound in a process
            (e.g. ``"s3://bucket"``); defaults to the first component of ``root``.
        scan_chunk_bytes: decoded bytes a scan reads per chunk (all its columns): bigger
            chunks mean fewer, larger requests, for stores where each request costs a round
            trip; memory stays bounded by a few chunks.
        table_chunk_factor: a scan into one table reads chunks this many times
            ``scan_chunk_bytes`` (at most :data:`TABLE_CHUNK_MAX_BYTES`, never less than
            ``scan_chunk_bytes``): see :data:`DEFAULT_TABLE_CHUNK_FACTOR`.
        tail_bytes: bytes read from the end of a file to open it (footer and metadata).
        block_cache_bytes: bytes of the process-wide block cache for small reads of data and
            index files (:mod:`alance.io.block_cache`); 0 (local stores) reads uncached.
        max_retries: extra attempts for idempotent operations that fail transiently
            (:class:`~alance.errors.TransientStoreError`), with jittered exponential backoff.
            Conditional creates are never retried: their outcome after a failure is unknown.
        deadline: seconds one operation may take, every attempt, backoff pause and wait for
            an in-flight slot included (:mod:`alance.io.deadline`); then
            :class:`~alance.errors.DeadlineExceededError`.
        version_hint: whether commits keep ``_versions/latest_version_hint.json`` up to
            date, as pylance does on local disks (not on object stores, where it would cost
            a request per commit and nothing reads it).
        slow_warning: an operation that takes longer than this many seconds (the same span
            as ``deadline``) is logged at WARNING on ``alance.io.store``; faster ones at DEBUG.

    Logging (``alance.io.store``): every operation when done at DEBUG (what, how long,
    attempts), transient failures and their backoff at INFO, slow operations, retries run out
    and deadlines exceeded at WARNING.
    """

    def __init__(self, backend: Backend, root: str, *, uri: str,
                 max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
                 coalesce_bytes: int = DEFAULT_COALESCE_BYTES,
                 after_fork: Callable[[], Backend] | None = None,
                 max_retries: int = DEFAULT_MAX_RETRIES,
                 split_bytes: int = DEFAULT_SPLIT_BYTES,
                 limiter_key: str | None = None,
                 ranges_per_request: int = DEFAULT_RANGES_PER_REQUEST,
                 scan_chunk_bytes: int = DEFAULT_SCAN_CHUNK_BYTES,
                 table_chunk_factor: int = DEFAULT_TABLE_CHUNK_FACTOR,
                 tail_bytes: int = DEFAULT_TAIL_BYTES,
                 block_cache_bytes: int = 0,
                 deadline: float = DEFAULT_DEADLINE,
                 slow_warning: float = DEFAULT_SLOW_WARNING,
                 version_hint: bool = True) -> None:
        if max_concurrency < 1:
            raise InvalidInputError("max_concurrency must be at least 1")
        if max_retries < 0:
            raise InvalidInputError("max_retries must be >= 0")
        if not deadline > 0:
            raise InvalidInputError("deadline must be positive")
        if not slow_warning > 0:
            raise InvalidInputError("slow_warning must be positive")
        self.max_retries = max_retries
        self.deadline = deadline
        self.slow_warning = slow_warning
        self._backend_obj = backend
        self._after_fork = after_fork
        self.root = root.strip("/")
        self.uri = uri
        self.max_concurrency = max_concurrency
        self.coalesce_bytes = coalesce_bytes
        self.limiter_key = limiter_key or root.split("/", 1)[0]
        self.split_bytes = split_bytes
        self.ranges_per_request = max(1, ranges_per_request)
        self.scan_chunk_bytes = max(1, scan_chunk_bytes)
        self.table_chunk_factor = max(1, table_chunk_factor)
        self.tail_bytes = max(64, tail_bytes)
        self.block_cache = shared_cache(block_cache_bytes) if block_cache_bytes > 0 else None
        self.version_hint = version_hint
        #: ``(uri, storage_options)`` that rebuild this store (set by ``open_store``).
        self.reopen_args: tuple[str, dict[str, Any]] | None = None
        #: The function that rebuilds this store from :attr:`reopen_args` (``open_store``).
        self.reopen_with: Callable[..., DatasetStore] | None = None

    def __repr__(self) -> str:
        return f"DatasetStore({self.uri!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        if self.reopen_args is None or self.reopen_with is None:
            raise TypeError("this DatasetStore was not made by open_store and cannot be pickled")
        return (self.reopen_with, self.reopen_args)

    def wrap_backend(self, wrap: Callable[[Backend], Backend]) -> None:
        """Put ``wrap(backend)`` in place of the backend (also after a fork switch)."""
        self._backend_obj = wrap(self._backend_obj)
        if self._after_fork is not None:
            fallback = self._after_fork
            self._after_fork = lambda: wrap(fallback())

    @property
    def table_chunk_bytes(self) -> int:
        """Decoded bytes per chunk of a scan into one table (see ``table_chunk_factor``)."""
        scan = self.scan_chunk_bytes
        return max(scan, min(self.table_chunk_factor * scan, TABLE_CHUNK_MAX_BYTES))

    @property
    def backend(self) -> Backend:
        """The backend to use in this process (switching to the fork fallback if needed)."""
        if not obstore_usable() and _uses_obstore(self._backend_obj):
            if self._after_fork is None:
                raise UnsupportedFeatureError(
                    f"{self.uri}: this process was forked after alance used obstore, whose "
                    "runtime does not survive fork; open the dataset before forking no object "
                    "store, or start workers with the 'spawn' method")
            self._backend_obj = self._after_fork()
        return self._backend_obj

    # -- helpers -----------------------------------------------------------------------------
    def _key(self, path: str) -> str:
        rel = safe_relative_path(path)
        return f"{self.root}/{rel}" if self.root else rel

    def _rel(self, key: str) -> str:
        prefix = self.root + "/" if self.root else ""
        return key[len(prefix):] if key.startswith(prefix) else key

    @property
    def _sem(self) -> asyncio.Semaphore:
        # Shared by every store with the same limiter key (one bucket, one local disk) and bound
        # in this process, so opening many datasets does not multiply the requests in flight.
        # One per event loop, since asyncio primitives are bound to a loop.
        return _limiter(f"{self.limiter_key}#{self.max_concurrency}", self.max_concurrency)

    def _end(self) -> tuple[float, float]:
        """``(now, end)``: when an operation starting now must be done (monotonic clock)."""
        now = time.monotonic()
        end = now + self.deadline
        outer = call_deadline()
        return now, end if outer is None else min(end, outer)

    def _late(self, what: str, started: float, end: float,
              last: BaseException | None = None) -> DeadlineExceededError:
        bound = end - started
        why = f" (last failure: {last})" if last is not None else ""
        log.warning("%s: %s did not finish within its deadline of %.3g s%s", self.uri, what,
                    bound, why)
        return DeadlineExceededError(f"{self.uri}: {what} did not finish within its deadline "
                                     f"of {bound:.3g} s{why}")

    def _done(self, what: str, started: float, attempts: int) -> None:
        """Log a finished operation: WARNING when slower than ``slow_warning``, else DEBUG."""
        took = time.monotonic() - started
        if took >= self.slow_warning:
            log.warning("%s: slow %s: %.3g s (slow_warning is %.3g s), %d attempt(s)",
                        self.uri, what, took, self.slow_warning, attempts)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %s in %.2f ms, %d attempt(s)", self.uri, what, took * 1e3,
                      attempts)

    async def _bounded(self, call: Awaitable[T], what: str) -> T:
        """Await ``call`` (one attempt, no retry) within the operation deadline."""
        started, end = self._end()
        try:
            async with asyncio.timeout(max(0.0, end - started)):
                result = await call
            self._done(what, started, 1)
            return result
        except TimeoutError as exc:
            if isinstance(exc, AlanceError):
                raise
            raise self._late(what, started, end) from exc

    async def _retrying(self, call: Callable[[Backend], Awaitable[T]], what: str = "a request",
                        ) -> T:
        """Run ``call`` under the concurrency bound, retrying transient failures with
        jittered backoff, all within the operation deadline."""
        started, end = self._end()
        last: BaseException | None = None
        for attempt in range(self.max_retries + 1):
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise self._late(what, started, end, last)
            try:
                async with asyncio.timeout(remaining):
                    async with self._sem:
                        result = await call(self.backend)
                self._done(what, started, attempt + 1)
                return result
            except TransientStoreError as exc:
                last = exc
                if attempt == self.max_retries:
                    log.warning("%s: giving up after %d attempts: %s", self.uri,
                                attempt + 1, exc)
                    raise
                pause = random.uniform(0, min(RETRY_BASE_DELAY * 2**attempt, 2.0))
                if time.monotonic() + pause >= end:
                    raise self._late(what, started, end, exc) from exc
                log.info("%s: transient failure (attempt %d of %d), retrying in %.3f s: %s",
                         self.uri, attempt + 1, self.max_retries + 1, pause, exc)
            except TimeoutError as exc:
                if isinstance(exc, AlanceError):
                    raise
                raise self._late(what, started, end, last) from exc
            await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    async def _once(self, call: Callable[[Backend], Awaitable[T]]) -> T:
        async with self._sem:
            return await call(self.backend)

    # -- reads -------------------------------------------------------------------------------
    async def get(self, path: str) -> bytes:
        """The whole object."""
        key = self._key(path)
        data = await self._retrying(lambda b: b.get(key), f"get {path}")
        _count(1, 1, len(data))
        return data

    async def get_range(self, path: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object."""
        return bytes((await self.get_ranges(path, [(start, end)]))[0])

    async def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
        """Several ranges ``[start, end)`` of one object.

        Ranges closer than ``coalesce_bytes`` are merged into one request; ranges longer than
        ``split_bytes`` are fetched as several requests. Requests run concurrently, each
        call to the backend (``ranges_per_request`` ranges at most) holding one slot of the
        store's in-flight bound. (Local files: merged the same way, each merged piece read
        whole by one ``preadv``; see :meth:`_read_joined`.)
        """
        if not ranges:
            return []
        key = self._key(path)
        if self.joins_ranges and self.coalesce_bytes <= MIN_COALESCE_GAP:
            return await self._read_joined(key, ranges)
        cache = self.block_cache
        if cache is not None and cache.eligible(ranges):
            size = cache.size_of((self.limiter_key, key))
            if size is not None:
                got = await self._get_blocks(cache, path, key, size, ranges)
                if got is not None:
                    return list(got)
        return await self._fetch_ranges(path, key, ranges)

    def note_immutable(self, path: str, size: int) -> None:
        """Tell the store that ``path`` is an immutable object of ``size`` bytes (a data or
        index file): its small reads may then be answered from the block cache."""
        if self.block_cache is not None:
            self.block_cache.note_size((self.limiter_key, self._key(path)), size)

    async def _get_blocks(self, cache: BlockCache, path: str, key: str, size: int,
                          ranges: Sequence[tuple[int, int]]) -> list[bytes] | None:
        ident = (self.limiter_key, key)
        fetch = cache.missing(ident, ranges, size)
        fresh: dict[int, bytes] = {}
        if fetch:
            data = await self._fetch_ranges(path, key, fetch)
            fresh = cache.fill(ident, list(zip(fetch, data, strict=True)))
        return cache.answer(ident, ranges, fresh)

    async def _fetch_ranges(self, path: str, key: str,
                            ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
        pieces = self._pieces(ranges)
        step = self.ranges_per_request
        batches = [pieces[i:i + step] for i in range(0, len(pieces), step)]
        _count(len(batches), len(pieces), sum(e - s for s, e in pieces))

        async def fetch(batch: list[tuple[int, int]]) -> list[Buffer]:
            return list(await self._retrying(
                lambda b: b.get_ranges(key, batch, 0),
                f"read of {len(batch)} range(s), {sum(e - s for s, e in batch)} bytes, "
                f"of {path}"))

        if len(batches) == 1:
            fetched = await fetch(batches[0])
        else:
            fetched = [buf for bufs in await asyncio.gather(*(fetch(b) for b in batches))
                       for buf in bufs]
        return self._answer(path, ranges, pieces, fetched)

    async def _read_joined(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
        """:meth:`get_ranges` of a local file: the ranges coalesced by the same rule (gaps of
        at most ``coalesce_bytes``), worked out with numpy, each piece read straight into a
        buffer of its own, and each range answered by a view of its piece (no per-range
        buffers, searches or copies: a take may ask for tens of thousands of ranges)."""
        n = len(ranges)
        if n <= FEW_RANGES:
            return await self._read_few(key, ranges)
        bounds = np.array(ranges, dtype=np.int64).reshape(n, 2)
        size = np.maximum(bounds[:, 1] - bounds[:, 0], 0)
        live = np.flatnonzero(size)
        if not len(live):
            return [b""] * n
        order = live[np.argsort(bounds[live, 0], kind="stable")]
        s, e = bounds[order, 0], bounds[order, 1]
        new = np.ones(len(order), dtype=bool)
        new[1:] = s[1:] > np.maximum.accumulate(e)[:-1] + self.coalesce_bytes
        first = np.flatnonzero(new)
        p_start, p_end = s[first], np.maximum.reduceat(e, first)
        assert isinstance(self.backend, ObstoreBackend)
        # One buffer per piece: a view kept of a range (a cached dictionary, say) keeps only
        # its own piece, not all that this call read.
        bufs = await self.backend.read_local(key, p_start.tolist(), p_end.tolist(),
                                             joined=False)
        assert bufs is not None  # (a backend that joins ranges always reads them)
        _count(1, len(first), int((p_end - p_start).sum()))
        piece = np.zeros(n, dtype=np.int64)
        piece[order] = np.cumsum(new) - 1
        offset = np.zeros(n, dtype=np.int64)
        offset[order] = s - p_start[piece[order]]
        views = [memoryview(b) for b in bufs]
        return [views[p][o: o + k] if k else b"" for p, o, k in zip(
            piece.tolist(), offset.tolist(), size.tolist(), strict=True)]

    async def _read_few(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[Buffer]:
        """:meth:`_read_joined` of a few ranges (a scan's page buffers), in plain Python: for
        so few, numpy's set-up costs more than the work."""
        live = sorted((s, e, i) for i, (s, e) in enumerate(ranges) if e > s)
        if not live:
            return [b""] * len(ranges)
        p_start: list[int] = []
        p_end: list[int] = []
        where: list[tuple[int, int, int, int]] = []  # (range index, piece, start, end)
        for s, e, i in live:
            if not p_end or s > p_end[-1] + self.coalesce_bytes:
                p_start.append(s)
                p_end.append(e)
            elif e > p_end[-1]:
                p_end[-1] = e
            where.append((i, len(p_start) - 1, s, e))
        assert isinstance(self.backend, ObstoreBackend)
        bufs = await self.backend.read_local(key, p_start, p_end, joined=False)
        assert bufs is not None  # (a backend that joins ranges always reads them)
        _count(1, len(p_start), sum(e - s for s, e in zip(p_start, p_end, strict=True)))
        views = [memoryview(b) for b in bufs]
        out: list[Buffer] = [b""] * len(ranges)
        for i, p, s, e in where:
            base = p_start[p]
            out[i] = views[p][s - base:e - base]
        return out

    @property
    def joins_ranges(self) -> bool:
        """Whether ranges are read straight into their place here (local files: see
        :meth:`get_ranges_joined`) rather than fetched and joined."""
        # (a wrapped backend, as tests and fault injectors wrap them, reads the usual way)
        return isinstance(self.backend, ObstoreBackend) and self.backend.joins_ranges \
            and self.block_cache is None

    async def get_ranges_joined(self, path: str, starts: Sequence[int],
                                ends: Sequence[int]) -> Buffer:
        """The bytes of ``[starts[i], ends[i])`` of ``path`` back to back in one buffer.

        For many ranges of a local file (a take touching hundreds of mini-block chunks) each
        range is read straight into its place, with no per-range buffers or bookkeeping;
        elsewhere it is :meth:`get_ranges` joined.
        """
        if self.joins_ranges and len(starts):
            assert isinstance(self.backend, ObstoreBackend)
            got = await self.backend.read_local(self._key(path), starts, ends)
            if got is not None:
                _count(1, len(starts), len(got[0]))
                return got[0]
        parts = await self.get_ranges(path, list(zip(starts, ends, strict=True)))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def get_ranges_many(self, requests: Sequence[tuple[str, Sequence[tuple[int, int]]]],
                              ) -> list[list[Buffer]]:
        """:meth:`get_ranges` of several objects (``(path, ranges)`` each), all at once.

        What the backend can answer at once (local files in the page cache) is read on the
        spot; the rest is fetched concurrently.
        """
        if self.joins_ranges and self.coalesce_bytes <= MIN_COALESCE_GAP:
            return list(await asyncio.gather(*(self.get_ranges(path, ranges)
                                               for path, ranges in requests)))
        out: list[list[Buffer] | None] = [None] * len(requests)
        read_cached = getattr(self.backend, "read_cached", None)
        pending = []
        for i, (path, ranges) in enumerate(requests):
            pieces = self._pieces(ranges) if read_cached is not None else []
            got = read_cached(self._key(path), pieces) if pieces and read_cached else None
            if got is None:
                pending.append(i)
                continue
            _count(1, len(pieces), sum(e - s for s, e in pieces))
            out[i] = self._answer(path, ranges, pieces, got)
        if len(pending) == 1:
            out[pending[0]] = await self.get_ranges(*requests[pending[0]])
        elif pending:
            fetched = await asyncio.gather(*(self.get_ranges(*requests[i]) for i in pending))
            for i, got in zip(pending, fetched, strict=True):
                out[i] = got
        return [[] if o is None else o for o in out]

    def _pieces(self, ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The byte ranges to request for ``ranges``: coalesced, long ones split (not inside
        a wanted range of up to :data:`WHOLE_RANGE_FACTOR` pieces: see :func:`_split`)."""
        wanted = sorted({(s, e) for s, e in ranges if e > s})
        merged = _coalesce(wanted, self.coalesce_bytes)
        size = self.split_bytes
        if all(e - s <= size for s, e in merged):
            return merged
        # (a range of a quarter piece or less may be cut through: copying it back is cheap)
        whole = [(s, e) for s, e in wanted if size // 4 < e - s <= WHOLE_RANGE_FACTOR * size]
        return [p for m in merged for p in _split(m, size, whole)]

    def _answer(self, path: str, ranges: Sequence[tuple[int, int]],
                pieces: list[tuple[int, int]], fetched: Sequence[Buffer]) -> list[Buffer]:
        # Answer each range with a view of the piece holding it; only a range that spans
        # pieces (of a split) is copied, and then only its own bytes.
        starts = [p[0] for p in pieces]
        out: list[Buffer] = []
        for s, e in ranges:
            if e <= s:
                out.append(b"")
                continue
            i = bisect.bisect_right(starts, s) - 1
            piece_start = pieces[i][0]
            view = memoryview(fetched[i])[s - piece_start:e - piece_start]
            if len(view) < e - s and pieces[i][1] < e and len(fetched[i]) == (pieces[i][1]
                                                                                - piece_start):
                parts = [view]
                got = len(view)
                while got < e - s and i + 1 < len(pieces) and pieces[i + 1][0] == pieces[i][1]:
                    i += 1
                    part = memoryview(fetched[i])[: e - s - got]
                    parts.append(part)
                    got += len(part)
                view = memoryview(b"".join(parts))
            if len(view) != e - s:
                raise CorruptFileError(f"{path}: bytes {s}..{e} requested, but the object "
                                       f"ends before byte {e}")
            out.append(view)
        return out

    async def head(self, path: str) -> ObjectMeta:
        """Size and modification time of an object."""
        key = self._key(path)
        return self._meta(await self._retrying(lambda b: b.head(key), f"head {path}"))

    def _meta(self, meta: dict[str, Any]) -> ObjectMeta:
        return ObjectMeta(self._rel(meta["path"]), meta["size"], meta.get("last_modified"),
                          meta.get("e_tag"))

    async def exists(self, path: str) -> bool:
        """Whether the object exists."""
        try:
            await self.head(path)
        except NotFoundError:
            return False
        return True

    async def list(self, prefix: str) -> list[ObjectMeta]:
        """Every object under the directory ``prefix`` (recursive)."""
        key = self._key(prefix) + "/"
        return [self._meta(m) for m in await self._retrying(lambda b: b.list(key),
                                                            f"list {prefix}/")]

    async def list_names(self, prefix: str) -> builtins.list[str]:
        """Paths of the objects directly in the directory ``prefix``, without their sizes or
        times: cheaper than :meth:`list` where the backend can (local disks list a directory
        in one call, obstore stats every file); else :meth:`list` filtered."""
        head = prefix.rstrip("/")
        return [f"{head}/{n}" for n in await self.names_in(prefix)]

    async def names_in(self, prefix: str) -> builtins.list[str]:
        """The names (last path segments) of the objects directly in the directory
        ``prefix``: :meth:`list_names` without the directory in front."""
        key = self._key(prefix)
        lister = getattr(self.backend, "list_names", None)  # optional (see Backend)
        found: builtins.list[str] | None = None
        if lister is not None:
            found = await self._retrying(lambda b: cast(Any, b).list_names(key),
                                         f"list of names under {prefix}")
        if found is None:
            head = prefix.rstrip("/")
            return [name for m in await self.list(prefix)
                    for parent, _, name in [m.path.rpartition("/")] if parent == head]
        return found

    # -- writes ------------------------------------------------------------------------------
    async def put(self, path: str, data: bytes) -> None:
        """Write an object, replacing any existing one."""
        key = self._key(path)
        await self._retrying(lambda b: b.put(key, data, create=False), f"put {path}")

    async def rewrite(self, path: str, data: bytes) -> None:
        """Replace a small advisory object (a hint every reader checks): in place where the
        backend can (local files, see :func:`alance.io.backends.rewrite_local`: a reader may
        then see a mix of old and new bytes), else as :meth:`put`."""
        key = self._key(path)
        rewriter = getattr(self.backend, "rewrite", None)  # optional (see Backend)
        if rewriter is None or not await self._retrying(
                lambda b: cast(Any, b).rewrite(key, data), f"rewrite {path}"):
            await self.put(path, data)

    async def put_if_absent(self, path: str, data: bytes) -> None:
        """Create an object atomically; :class:`AlreadyExistsError` if it exists already."""
        key = self._key(path)
        await self._bounded(self._once(lambda b: b.put(key, data, create=True)),
                            f"create {path}")

    async def copy(self, src: str, dst: str, *, overwrite: bool = True) -> None:
        """Copy one object to another path inside the dataset."""
        src_key, dst_key = self._key(src), self._key(dst)
        if overwrite:
            await self._retrying(lambda b: b.copy(src_key, dst_key, overwrite=True),
                                f"copy {src}")
        else:
            await self._bounded(
                self._once(lambda b: b.copy(src_key, dst_key, overwrite=False)),
                f"copy {src}")

    async def delete(self, path: str) -> None:
        """Delete an object; deleting a missing object is not an error."""
        key = self._key(path)
        await self._retrying(lambda b: b.delete(key), f"delete {path}")

    async def list_all(self) -> builtins.list[ObjectMeta]:
        """Every object under the root (recursive)."""
        prefix = self.root + "/" if self.root else ""
        return [self._meta(m) for m in await self._retrying(lambda b: b.list(prefix),
                                                            "list")]

    async def delete_all(self) -> int:
        """Delete every object under the root (with bounded concurrency), then, on local file
        systems, the directories left empty; returns the number of objects deleted."""
        objects = await self.list_all()
        gate = asyncio.Semaphore(self.max_concurrency)

        async def remove(path: str) -> None:
            async with gate:
                await self.delete(path)

        await asyncio.gather(*(remove(m.path) for m in objects))
        tidy = getattr(self.backend, "remove_empty_dirs", None)
        if tidy is not None:
            await tidy(self.root)
        return len(objects)

    def open_writer(self, path: str, part_size: int = DEFAULT_PART_SIZE) -> ObjectWriter:
        """A streaming writer for a new object (see :class:`ObjectWriter`)."""
        return ObjectWriter(self, path, part_size)


#: A gap this small is always read through when coalescing; wider gaps (up to the store's
#: ``coalesce_bytes``) only when the merged range holds :data:`DENSE_FACTOR` times as many
#: wanted bytes.
MIN_COALESCE_GAP = 64 * 1024
DENSE_FACTOR = 8


def _coalesce(ranges: Sequence[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Sorted, non-empty ranges merged where they overlap or lie close together.

    Two neighbours are merged across a gap of at most ``gap`` bytes, but a gap wider than
    :data:`MIN_COALESCE_GAP` only when the range built so far holds :data:`DENSE_FACTOR`
    times that many wanted bytes: dense reads (scans) save requests, while sparse reads (a
    take of rows far apart) never fetch megabytes between the few bytes they need.
    """
    merged: list[tuple[int, int]] = []
    useful = 0  # wanted bytes in merged[-1]
    for s, e in ranges:
        if merged:
            first, end = merged[-1]
            between = s - end
            if between <= 0 or (between <= gap and (between <= MIN_COALESCE_GAP
                                                    or between * DENSE_FACTOR <= useful)):
                useful += max(0, e - max(s, end))
                merged[-1] = (first, max(end, e))
                continue
        merged.append((s, e))
        useful = e - s
    return merged


def _split(rng: tuple[int, int], size: int,
           whole: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]]:
    """``rng`` cut into pieces of about ``size`` bytes, but never inside one of the ranges
    ``whole`` (sorted): a cut there moves to that range's start, or, when the range starts the
    piece, to its end. A wanted range cut in two would be copied back together on the event
    loop, which for the pages of a scan (often 8-30 MB) cost as much CPU as decoding some of
    them; requests in flight for other pages keep the transfer parallel."""
    start, end = rng
    if end - start <= size:
        return [rng]
    starts = [s for s, _ in whole]
    cuts = [start]
    pos = start
    while end - pos > size:
        cut = pos + size
        i = bisect.bisect_left(starts, cut) - 1  # the last range starting before the cut
        for s, e in whole[max(0, i - 3): i + 1]:  # (overlapping long ranges are rare)
            if s < cut < e:
                cut = s if s > pos else e
                break
        if cut >= end:
            break
        cuts.append(cut)
        pos = cut
    return list(itertools.pairwise([*cuts, end]))


_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary())


def _limiter(key: str, size: int) -> asyncio.Semaphore:
    """The process-wide in-flight bound for ``key`` on the running event loop."""
    per_loop = _limiters.setdefault(asyncio.get_running_loop(), {})
    sem = per_loop.get(key)
    if sem is None:
        sem = per_loop[key] = asyncio.Semaphore(size)
    return sem


def _uses_obstore(backend: Backend) -> bool:
    """Whether ``backend`` is (or wraps, via ``.inner``) an obstore backend."""
    while True:
        if isinstance(backend, ObstoreBackend):
            return True
        inner = getattr(backend, "inner", None)
        if inner is None:
            return False
        backend = inner


class ObjectWriter:
    """Streams one object to the store in parts, so the caller never holds the whole file.

    Use as ``async with store.open_writer(path) as w: await w.write(chunk)``. The object appears
    only when the block exits without an exception; on an exception the upload is abandoned and
    any visible partial object is deleted.
    """

    def __init__(self, store: DatasetStore, path: str, part_size: int) -> None:
        self._store = store
        self.path = path
        self._key = store._key(path)
        self._upload: Upload | None = None
        self._part_size = part_size
        self._pending: list[Buffer] = []
        self._pending_bytes = 0
        self.bytes_written = 0

    async def __aenter__(self) -> ObjectWriter:
        self._upload = self._store.backend.upload(self._key)
        return self

    async def write(self, data: Buffer) -> None:
        """Append bytes to the object being written.

        Small writes are gathered into parts of about ``part_size`` bytes before they are
        handed to the store, so per-call overhead does not depend on how finely the caller
        slices its output.
        """
        if not data:
            return
        self._pending.append(data)
        self._pending_bytes += len(data)
        self.bytes_written += len(data)
        if self._pending_bytes >= self._part_size:
            await self._flush()

    async def _flush(self) -> None:
        if not self._pending:
            return
        parts, self._pending, self._pending_bytes = self._pending, [], 0
        assert self._upload is not None
        write_parts = getattr(self._upload, "write_parts", None)
        if write_parts is not None and len(parts) > 1:  # no join (a copy on the event loop)
            await self._store._bounded(write_parts(parts), f"upload of {self.path}")
            return
        part = parts[0] if len(parts) == 1 else b"".join(parts)
        await self._store._bounded(self._upload.write(part), f"upload of {self.path}")

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        assert self._upload is not None
        if exc_type is None:
            try:
                await self._flush()
                await self._store._bounded(self._upload.complete(),
                                           f"upload of {self.path}")
            except BaseException:
                await self._abandon()
                raise
        else:
            await self._abandon()

    async def _abandon(self) -> None:
        # Best effort once out of time: the original error is what the caller needs to see,
        # and an object no manifest references is invisible to readers of the dataset.
        assert self._upload is not None
        with contextlib.suppress(DeadlineExceededError):
            await self._store._bounded(self._upload.abort(), f"upload of {self.path}")
            await self._store.delete(self.path)
