"""A read-through cache of fixed-size blocks of immutable objects, for stores where every
request costs a round trip.

Small reads from cloud stores (a take's mini-block chunks, index pages) are widened to whole
blocks (:data:`BLOCK_BYTES`, a size that costs no more latency than a few bytes) and the
blocks are kept in a process-wide LRU bounded in bytes, so a later read of a nearby row is
answered from memory. Only objects whose size the store has been told
(:meth:`BlockCache.note_size`) take part: data and index files, which are never rewritten in
place. Local stores have the operating system's page cache and use none.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

#: Bytes per cached block: at 20 ms a request and hundreds of MB/s, a 64 KiB read costs what
#: a 1 KiB read does.
BLOCK_BYTES = 64 * 1024
#: Bytes of blocks a process keeps by default (storage option ``block_cache_bytes``).
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
#: A read goes through the cache only if every range is at most this long and all of them
#: total at most :data:`MAX_CALL_BYTES` (scans stream past it; caching them would only evict).
MAX_RANGE_BYTES = 4 * BLOCK_BYTES
MAX_CALL_BYTES = 1024 * 1024
#: Object sizes remembered (names are short; the bound keeps a long-running service flat).
MAX_SIZES = 100_000

Key = tuple[str, str]  # (store identity, object path)


class BlockCache:
    """Blocks of objects, least recently used evicted first; thread-safe."""

    def __init__(self, capacity: int = DEFAULT_CACHE_BYTES, block: int = BLOCK_BYTES) -> None:
        self.capacity = capacity
        self.block = block
        self._blocks: OrderedDict[tuple[Key, int], bytes] = OrderedDict()
        self._sizes: OrderedDict[Key, int] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()
        #: Blocks answered from memory and blocks fetched, since the process started.
        self.hits = 0
        self.misses = 0

    def note_size(self, key: Key, size: int) -> None:
        """Record the size of an immutable object: from now on its small reads are cached."""
        with self._lock:
            self._sizes[key] = size
            self._sizes.move_to_end(key)
            while len(self._sizes) > MAX_SIZES:
                self._sizes.popitem(last=False)

    def size_of(self, key: Key) -> int | None:
        """The recorded size of an object (None: not cached)."""
        with self._lock:
            return self._sizes.get(key)

    def eligible(self, ranges: Sequence[tuple[int, int]]) -> bool:
        """Whether a read of these ranges should go through the cache."""
        total = 0
        for s, e in ranges:
            if e - s > MAX_RANGE_BYTES:
                return False
            total += max(0, e - s)
        return self.capacity > 0 and total <= MAX_CALL_BYTES

    def missing(self, key: Key, ranges: Sequence[tuple[int, int]], size: int,
                ) -> list[tuple[int, int]]:
        """The byte ranges (whole blocks, clipped to the object) to fetch so that every range
        can be answered: runs of consecutive missing blocks."""
        want: set[int] = set()
        for s, e in ranges:
            if e > s:
                want.update(range(s // self.block, (min(e, size) - 1) // self.block + 1))
        with self._lock:
            absent = sorted(b for b in want if (key, b) not in self._blocks)
            self.hits += len(want) - len(absent)
            self.misses += len(absent)
        runs: list[tuple[int, int]] = []
        for b in absent:
            if runs and runs[-1][1] == b:
                runs[-1] = (runs[-1][0], b + 1)
            else:
                runs.append((b, b + 1))
        return [(a * self.block, min(z * self.block, size)) for a, z in runs]

    def fill(self, key: Key, fetched: Sequence[tuple[tuple[int, int], bytes | memoryview]],
             ) -> dict[int, bytes]:
        """Store fetched block runs; returns their blocks (also when the cache is too small
        to keep them, so the read in progress can always be answered)."""
        blocks: dict[int, bytes] = {}
        for (start, _end), data in fetched:
            view = memoryview(data)
            for off in range(0, len(view), self.block):
                blocks[(start + off) // self.block] = bytes(view[off: off + self.block])
        with self._lock:
            for b, data in blocks.items():
                old = self._blocks.pop((key, b), None)
                if old is not None:
                    self._held -= len(old)
                self._blocks[(key, b)] = data
                self._held += len(data)
            while self._held > self.capacity and self._blocks:
                _, dropped = self._blocks.popitem(last=False)
                self._held -= len(dropped)
        return blocks

    def answer(self, key: Key, ranges: Sequence[tuple[int, int]],
               fresh: dict[int, bytes]) -> list[bytes] | None:
        """Each range's bytes from the blocks (``fresh`` first, then the cache); None if a
        block went missing meanwhile (evicted by another thread): read again uncached."""
        out: list[bytes] = []
        with self._lock:
            for s, e in ranges:
                if e <= s:
                    out.append(b"")
                    continue
                parts = []
                for b in range(s // self.block, (e - 1) // self.block + 1):
                    data = fresh.get(b)
                    if data is None:
                        data = self._blocks.get((key, b))
                        if data is None:
                            return None
                        self._blocks.move_to_end((key, b))
                    lo = max(s - b * self.block, 0)
                    hi = min(e - b * self.block, len(data))
                    parts.append(data[lo:hi])
                piece = parts[0] if len(parts) == 1 else b"".join(parts)
                if len(piece) != e - s:  # the object ends before the range does
                    return None
                out.append(piece)
        return out

    def held_bytes(self) -> int:
        """Bytes of blocks held now."""
        with self._lock:
            return self._held


_SHARED: BlockCache | None = None
_SHARED_LOCK = threading.Lock()


def shared_cache(capacity: int = DEFAULT_CACHE_BYTES) -> BlockCache:
    """The process's block cache (created on first use; a later, larger capacity grows it)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = BlockCache(capacity)
        elif capacity > _SHARED.capacity:
            _SHARED.capacity = capacity
        return _SHARED


__all__ = ["BLOCK_BYTES", "DEFAULT_CACHE_BYTES", "BlockCache", "shared_cache"]
