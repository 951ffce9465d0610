"""Turning a dataset URI (a local path, ``file://``, ``memory://``) into a :class:`DatasetStore`."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from obstore.store import LocalStore, MemoryStore

from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.io.store import DEFAULT_MAX_CONCURRENCY, DatasetStore

_memory_lock = threading.Lock()
_memory_store: MemoryStore | None = None


def _shared_memory_store() -> MemoryStore:
    """One in-process memory store, so ``memory://x`` names the same dataset everywhere."""
    global _memory_store
    with _memory_lock:
        if _memory_store is None:
            _memory_store = MemoryStore()
        return _memory_store


def _reset_memory_after_fork() -> None:
    global _memory_store
    _memory_store = None


os.register_at_fork(after_in_child=_reset_memory_after_fork)


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
        return DatasetStore(_shared_memory_store(), root, uri=text,
                            max_concurrency=max_concurrency)
    if scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt"):
        path = parsed.path if scheme == "file" else text
        root = os.path.abspath(os.path.expanduser(path))
        return DatasetStore(LocalStore(), root.lstrip("/"), uri=text,
                            max_concurrency=max_concurrency)
    raise UnsupportedFeatureError(f"unsupported URI scheme {scheme!r} in {text!r}")
