"""Sessions: the metadata a dataset handle keeps between reads, bounded in bytes.

Each open of a dataset (``open_dataset``, ``write_dataset``) gets a :class:`Session` of its
own, shared by every version and handle derived from it, as pylance's datasets share theirs
(``open_dataset(..., session=...)`` shares one between opens). Its metadata cache holds the
loaded manifests and the opened data files (footers, column metadata and page state) of the
handles' read contexts, least recently used first out once ``metadata_cache_size_bytes`` is
exceeded; ``size_bytes()`` says how much it holds. With a capacity of 0 nothing is kept: each
read looks its files up again (in the process-wide cache of opened files, so without IO).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from alance.errors import InvalidInputError
from alance.io.store import DatasetStore

#: Default capacities (pylance's: 6 GiB of indices, 1 GiB of metadata).
DEFAULT_INDEX_CACHE_BYTES = 6 * 1024 ** 3
DEFAULT_METADATA_CACHE_BYTES = 1024 ** 3
#: What a session itself takes, counted in ``size_bytes`` whatever its caches hold.
SESSION_OVERHEAD_BYTES = 152


class _ByteCache:
    """Entries with a size and an eviction callback, bounded by their total size (LRU)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.size = 0
        self._entries: OrderedDict[Any, tuple[int, Callable[[], None] | None]] = OrderedDict()

    def admit(self, key: Any, size: int, on_evict: Callable[[], None] | None) -> bool:
        """Hold ``key`` (``size`` bytes); False when it can never fit. Entries evicted to
        make room have their callbacks run (after the caller releases the lock)."""
        if size > self.capacity:
            return False
        old = self._entries.pop(key, None)
        if old is not None:
            self.size -= old[0]
        self._entries[key] = (size, on_evict)
        self.size += size
        return True

    def touch(self, key: Any) -> None:
        if key in self._entries:
            self._entries.move_to_end(key)

    def overflow(self) -> list[Callable[[], None]]:
        """Evict least recently used entries until the total fits; their callbacks."""
        dropped = []
        while self.size > self.capacity and self._entries:
            _, (size, on_evict) = self._entries.popitem(last=False)
            self.size -= size
            if on_evict is not None:
                dropped.append(on_evict)
        return dropped

    def forget(self, keys: list[Any]) -> None:
        for key in keys:
            old = self._entries.pop(key, None)
            if old is not None:
                self.size -= old[0]


class Session:
    """The caches shared by the dataset handles of one open (pylance's ``Session``).

    ``metadata_cache_size_bytes``: bytes of manifests and opened data file metadata kept
    (default 1 GiB; 0 keeps nothing). ``index_cache_size_bytes``: the capacity pylance gives
    its index cache (6 GiB by default); alance keeps opened indices with each version's read
    state and does not count them here yet, so :meth:`index_cache_size_bytes` reports 0.
    """

    def __init__(self, index_cache_size_bytes: int | None = None,
                 metadata_cache_size_bytes: int | None = None) -> None:
        for name, value in (("index_cache_size_bytes", index_cache_size_bytes),
                            ("metadata_cache_size_bytes", metadata_cache_size_bytes)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidInputError(f"{name} must be a non-negative integer, not {value!r}")
        self._index_capacity = (DEFAULT_INDEX_CACHE_BYTES if index_cache_size_bytes is None
                                else index_cache_size_bytes)
        self._metadata = _ByteCache(DEFAULT_METADATA_CACHE_BYTES
                                    if metadata_cache_size_bytes is None
                                    else metadata_cache_size_bytes)
        self._lock = threading.Lock()
        #: Keys whose owners are gone, dropped on the next access: owners go at garbage
        #: collection, which may run while this thread holds the lock.
        self._gone: list[Any] = []

    def __reduce__(self) -> tuple[Any, ...]:
        # Caches are process-local: a session travels as its capacities.
        return (Session, (self._index_capacity, self._metadata.capacity))

    def __repr__(self) -> str:
        return (f"Session(index_cache_size_bytes={self.index_cache_size_bytes()}, "
                f"metadata_cache_size_bytes={self.metadata_cache_size_bytes()})")

    def size_bytes(self) -> int:
        """Bytes the session holds: its caches' contents and its own overhead."""
        return SESSION_OVERHEAD_BYTES + self.metadata_cache_size_bytes() \
            + self.index_cache_size_bytes()

    def metadata_cache_size_bytes(self) -> int:
        """Bytes of metadata (manifests, opened data files) the session holds."""
        with self._lock:
            self._drain()
            return self._metadata.size

    def index_cache_size_bytes(self) -> int:
        """Bytes of opened indices the session holds (not counted yet: 0)."""
        return 0

    def is_same_as(self, other: Session) -> bool:
        """Whether ``other`` is this very session (handles share caches through it)."""
        return self is other

    def keep(self, key: Any, size: int, on_evict: Callable[[], None] | None = None) -> bool:
        """Hold ``size`` bytes of metadata under ``key`` (a repeat refreshes it); False when
        the capacity cannot hold them (the caller then keeps nothing). ``on_evict`` runs when
        the entry is pushed out later."""
        with self._lock:
            self._drain()
            if not self._metadata.admit(key, size, on_evict):
                return False
            dropped = self._metadata.overflow()
        for callback in dropped:
            callback()
        return True

    def used(self, key: Any) -> None:
        """Mark ``key`` as recently used."""
        with self._lock:
            self._metadata.touch(key)

    def forget(self, keys: list[Any]) -> None:
        """Drop entries (their owner is gone; safe to call from a finalizer)."""
        self._gone.extend(keys)

    def _drain(self) -> None:
        if self._gone:
            gone, self._gone = self._gone, []
            self._metadata.forget(gone)


_SESSIONS: weakref.WeakKeyDictionary[DatasetStore, Session] = weakref.WeakKeyDictionary()
_SESSIONS_LOCK = threading.Lock()


def session_of(store: DatasetStore) -> Session:
    """The session of the handles opened through ``store`` (created on first use)."""
    with _SESSIONS_LOCK:
        found = _SESSIONS.get(store)
        if found is None:
            found = _SESSIONS[store] = Session()
        return found


def bind_session(store: DatasetStore, session: Session) -> None:
    """Make ``session`` the one of the handles opened through ``store``."""
    if not isinstance(session, Session):
        raise InvalidInputError(f"session must be an alance Session, not {type(session)}")
    with _SESSIONS_LOCK:
        _SESSIONS[store] = session


__all__ = ["DEFAULT_INDEX_CACHE_BYTES", "DEFAULT_METADATA_CACHE_BYTES", "Session",
           "bind_session", "session_of"]
