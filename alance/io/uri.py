"""Turning a dataset URI (a local path, ``file://``, ``memory://``) into a :class:`DatasetStore`."""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from obstore.store import LocalStore, MemoryStore

from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.io.backends import DictBackend, ObstoreBackend, PosixBackend
from alance.io.store import DEFAULT_MAX_CONCURRENCY, DatasetStore

_memory_lock = threading.Lock()
_memory_store: MemoryStore | None = None
_dict_objects: dict[str, tuple[bytes, dt.datetime]] = {}


def _shared_memory_store() -> MemoryStore:
    """One in-process memory store, so ``memory://x`` names the same dataset everywhere."""
    global _memory_store
    with _memory_lock:
        if _memory_store is None:
            _memory_store = MemoryStore()
        return _memory_store


def _memory_after_fork() -> DictBackend:
    # The parent's obstore memory store cannot be reached from a forked child; the child gets
    # its own (empty) in-process store, as ``memory://`` is process-local by definition.
    return DictBackend(_dict_objects, _memory_lock)


def _reset_after_fork() -> None:
    global _memory_store, _memory_lock
    _memory_store = None
    _memory_lock = threading.Lock()
    _dict_objects.clear()


os.register_at_fork(after_in_child=_reset_after_fork)


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
               ) -> DatasetStore:
    """The :class:`DatasetStore` for a dataset URI.

    Accepted forms: a local path (relative or absolute), ``file:///abs/path`` and
    ``memory://name`` (process-local, for tests and scratch work).
    """
    options = dict(storage_options or {})
    max_concurrency = int(options.pop("max_concurrency", DEFAULT_MAX_CONCURRENCY))
    text = os.fspath(uri)
    if not text:
        raise InvalidInputError("empty dataset URI")
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme == "memory":
        root = (parsed.netloc + parsed.path).strip("/")
        if not root:
            raise InvalidInputError(f"memory URI needs a name: {text!r}")
        return DatasetStore(ObstoreBackend(_shared_memory_store()), root, uri=text,
                            max_concurrency=max_concurrency, after_fork=_memory_after_fork)
    if scheme in ("", "file"):
        path = parsed.path if scheme == "file" else text
        root = os.path.abspath(os.path.expanduser(path))
        return DatasetStore(ObstoreBackend(LocalStore()), root.lstrip("/"), uri=text,
                            max_concurrency=max_concurrency, after_fork=PosixBackend)
    raise UnsupportedFeatureError(f"unsupported URI scheme {scheme!r} in {text!r}")
