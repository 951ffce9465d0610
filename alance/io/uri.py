"""Turning a dataset URI (a local path, ``file://``, ``memory://``) into a :class:`DatasetStore`."""

from __future__ import annotations

import datetime as dt
import os
import re
import threading
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from obstore.store import LocalStore, MemoryStore

from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.io.backends import DictBackend, ObstoreBackend, PosixBackend
from alance.io.block_cache import DEFAULT_CACHE_BYTES
from alance.io.deadline import seconds as deadline_seconds
from alance.io.object_stores import build_cloud_store
from alance.io.store import DEFAULT_MAX_CONCURRENCY, DatasetStore

#: Requests in flight per cloud store: latency-bound, so far more than for local disks.
CLOUD_MAX_CONCURRENCY = 64
#: Ranges closer than this are read with one request on cloud stores: a round trip costs as
#: much time as transferring about a megabyte.
CLOUD_COALESCE_BYTES = 1024 * 1024
#: Decoded bytes per scan chunk on cloud stores: a round trip per request makes few, large
#: requests pay (about a page of each column, as pylance reads them).
CLOUD_SCAN_CHUNK_BYTES = 32 * 1024 * 1024
#: Bytes read from the end of a file to open it on cloud stores: a second round trip for
#: metadata that did not fit costs far more than the extra bytes.
CLOUD_TAIL_BYTES = 64 * 1024
#: obstore's own retries (under alance's): a couple, quickly, so failures surface in seconds.
CLOUD_RETRY_CONFIG = {"max_retries": 2, "retry_timeout": dt.timedelta(seconds=20),
                      "backoff": {"init_backoff": dt.timedelta(milliseconds=50),
                                  "max_backoff": dt.timedelta(seconds=2), "base": 2}}

#: Schemes of datasets committed through an external manifest store -> their object store.
EXTERNAL_COMMIT_SCHEMES = {"s3+ddb": "s3"}

_memory_lock = threading.Lock()
_memory_store: MemoryStore | None = None
_dict_objects: dict[str, tuple[bytes, dt.datetime]] = {}
#: ``memory://name`` -> the root its dataset lives under now, for names whose dataset was
#: created again (see :func:`renew_memory_store`); other names are their own root.
_memory_roots: dict[str, str] = {}


#: Local stores read ranges up to this long with one call (no pieces to join).
LOCAL_SPLIT_BYTES = 1 << 40

#: Bucket / container names alance accepts: what S3 (including legacy names), GCS and Azure
#: allow, and nothing a URL or a request signature cannot carry (a space makes obstore's
#: request signer panic).
_BUCKET = {"s3": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"),
           "gs": re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}"),
           "az": re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,254}")}
#: Object keys are at most 1024 bytes on S3, GCS and Azure; a dataset root leaves room for
#: the longest names alance writes under it.
MAX_CLOUD_ROOT_BYTES = 1024 - 128
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_root(text: str, root: str) -> None:
    """Refuse a dataset root no object store key can hold (control characters, which
    obstore rejects, and empty, ``.`` or ``..`` path segments)."""
    if _CONTROL.search(root):
        raise InvalidInputError(f"{text!r}: dataset paths cannot contain control characters")
    if any(part in ("", ".", "..") for part in root.split("/")):
        raise InvalidInputError(f"{text!r}: empty, '.' and '..' path segments are not "
                                "allowed in a dataset URI")

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
    _memory_roots.clear()


def renew_memory_store(store: DatasetStore) -> DatasetStore | None:
    """A store on a fresh, empty root for the ``memory://name`` that ``store`` was opened
    from, the name now bound to it (None for stores of any other kind).

    pylance gives every call its own in-memory store, so creating a dataset at a
    ``memory://`` URI always starts from nothing. alance keeps a name's dataset for later
    opens in the process, and a create there starts a new dataset under that name: handles of
    the earlier one keep reading and writing it; opening the name finds the new one.
    """
    if store.reopen_args is None or not str(store.reopen_args[0]).lower().startswith(
            "memory://"):
        return None
    uri, options = store.reopen_args
    name = _memory_name(urlparse(uri))
    if not name:
        return None
    with _memory_lock:
        _memory_roots[name] = f"{name}.{uuid.uuid4().hex}"
    return open_store(uri, options)


def _memory_name(parsed: Any) -> str:
    return str(parsed.netloc + parsed.path).strip("/")


os.register_at_fork(after_in_child=_reset_after_fork)


def open_store(uri: str | os.PathLike[str], storage_options: Mapping[str, Any] | None = None,
               ) -> DatasetStore:
    """The :class:`DatasetStore` for a dataset URI.

    Accepted forms: a local path (relative or absolute), ``file:///abs/path``,
    ``memory://name`` (process-local, for tests and scratch work), ``s3://bucket/path``,
    ``gs://bucket/path`` and ``az://container/path``; ``s3+ddb://bucket/path?ddbTableName=T``
    is the S3 dataset ``s3://bucket/path`` (its commits go through DynamoDB).

    ``storage_options`` take the names pylance accepts (``aws_endpoint``,
    ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_region``, ``allow_http``, ...)
    plus alance's own: ``max_concurrency`` (requests in flight, default 16 locally and 64 for
    cloud stores), ``coalesce_bytes`` (4 KiB local, 1 MiB cloud), ``max_retries``,
    ``deadline`` (seconds one store operation may take, retries included: default 60; see
    :mod:`alance.io.deadline`), ``slow_warning`` (store operations slower than this are logged
    at WARNING: default 10 s), ``profile`` (the AWS profile for ``s3://``), and
    ``wrap_backend`` (a callable that wraps the byte-moving backend, e.g. to inject faults or
    count requests in tests).
    """
    options = dict(storage_options or {})
    wrap = options.pop("wrap_backend", None)
    store = _open(uri, options)
    store.reopen_args = (store.uri or os.fspath(uri), dict(storage_options or {}))
    store.reopen_with = open_store
    if wrap is not None:
        # For tests and instrumentation: e.g. a backend that injects faults or latency.
        store.wrap_backend(wrap)
    return store


def _open(uri: str | os.PathLike[str], options: dict[str, Any]) -> DatasetStore:
    policy: dict[str, Any] = {}
    for name in ("max_concurrency", "coalesce_bytes", "max_retries", "scan_chunk_bytes",
                 "table_chunk_factor", "tail_bytes", "block_cache_bytes"):
        if name in options:
            try:
                policy[name] = int(options.pop(name))
            except (TypeError, ValueError) as exc:
                raise InvalidInputError(f"storage option {name} must be an integer") from exc
    if "deadline" in options:
        policy["deadline"] = deadline_seconds(options.pop("deadline"))
    if "slow_warning" in options:
        policy["slow_warning"] = deadline_seconds(options.pop("slow_warning"),
                                                  "slow_warning")
    concurrency: int | None = policy.pop("max_concurrency", None)
    max_concurrency = DEFAULT_MAX_CONCURRENCY if concurrency is None else concurrency
    options.pop("dynamodb_endpoint", None)  # used by the DynamoDB commit handler
    text = os.fspath(uri)
    if not text:
        raise InvalidInputError("empty dataset URI")
    parsed = urlparse(text)
    scheme = parsed.scheme.lower()
    if scheme in ("memory", "", "file") and options:
        raise InvalidInputError(f"unknown storage options for {scheme or 'local'} URIs: "
                                f"{sorted(options)}")
    if scheme == "memory":
        root = _memory_name(parsed)
        if not root:
            # A bare ``memory://`` is a fresh, private dataset (as pylance treats it); it is
            # named, so objects reopened from this store's URI find it again.
            root = f"anonymous-{uuid.uuid4().hex}"
            text = f"memory://{root}"
        _check_root(text, root)
        with _memory_lock:
            root = _memory_roots.get(root, root)
        return DatasetStore(ObstoreBackend(_shared_memory_store()), root, uri=text,
                            max_concurrency=max_concurrency, after_fork=_memory_after_fork,
                            limiter_key="memory://", **policy)
    if scheme in ("", "file"):
        path = parsed.path if scheme == "file" else text
        if "\x00" in path:
            raise InvalidInputError(f"{text!r}: a local path cannot contain NUL characters")
        root = os.path.abspath(os.path.expanduser(path))
        if root.strip("/"):
            _check_root(text, root.strip("/"))
        # A local range is read by one pread however long: splitting it would only add a
        # join of the pieces.
        policy.setdefault("split_bytes", LOCAL_SPLIT_BYTES)
        return DatasetStore(ObstoreBackend(LocalStore()), root.lstrip("/"), uri=text,
                            max_concurrency=max_concurrency, after_fork=PosixBackend,
                            limiter_key="file://", **policy)
    if scheme in EXTERNAL_COMMIT_SCHEMES:
        # The objects live in plain S3; the query string (``?ddbTableName=T``) configures the
        # commit handler (alance.commit.registry), not the store.
        scheme, parsed = EXTERNAL_COMMIT_SCHEMES[scheme], parsed._replace(query="")
    cloud = {"s3": "s3", "s3a": "s3", "gs": "gs", "gcs": "gs", "az": "az", "abfs": "az",
             "azure": "az"}.get(scheme)
    if cloud is None:
        raise UnsupportedFeatureError(f"unsupported URI scheme {scheme!r} in {text!r}")
    if not parsed.netloc:
        raise InvalidInputError(f"{text!r} names no bucket")
    if not _BUCKET[cloud].fullmatch(parsed.netloc):
        raise InvalidInputError(f"{text!r}: {parsed.netloc!r} is not a valid bucket name "
                                "(letters, digits, '.', '-' and '_')")
    if parsed.query:
        raise InvalidInputError(f"unexpected query string in {text!r}")
    root = parsed.path.strip("/")
    if not root:
        raise InvalidInputError(f"{text!r}: a dataset needs a path inside the bucket")
    _check_root(text, root)
    if len(root.encode()) > MAX_CLOUD_ROOT_BYTES:
        raise InvalidInputError(f"{text[:200]!r}...: the dataset path is "
                                f"{len(root.encode())} bytes long; object keys are limited "
                                f"to 1024 bytes, so it can be at most {MAX_CLOUD_ROOT_BYTES}")
    store = build_cloud_store(cloud, parsed.netloc, options, CLOUD_RETRY_CONFIG)
    policy.setdefault("coalesce_bytes", CLOUD_COALESCE_BYTES)
    policy.setdefault("scan_chunk_bytes", CLOUD_SCAN_CHUNK_BYTES)
    policy.setdefault("table_chunk_factor", 1)
    policy.setdefault("ranges_per_request", 1)
    policy.setdefault("tail_bytes", CLOUD_TAIL_BYTES)
    policy.setdefault("block_cache_bytes", DEFAULT_CACHE_BYTES)
    return DatasetStore(ObstoreBackend(store), root, uri=text, version_hint=False,
                        max_concurrency=(CLOUD_MAX_CONCURRENCY if concurrency is None
                                         else concurrency),
                        limiter_key=f"{cloud}://{parsed.netloc}", **policy)
