"""Choosing the commit handler of a dataset: by URI scheme, or explicitly.

``open_dataset``/``write_dataset`` take ``commit_handler=``:

* ``None`` (default): chosen by the URI scheme. ``s3+ddb://`` commits through DynamoDB
  (:mod:`alance.commit.dynamodb`); everything else uses conditional put
  (:class:`~alance.commit.handler.ConditionalPutCommitHandler`). More schemes can be added with
  :func:`register_commit_handler`.
* a :class:`~alance.commit.handler.CommitHandler` instance: used as is.
* a string naming an importable object, ``"package.module:name"`` or ``"package.module.name"``:
  a ``CommitHandler`` instance, a ``CommitHandler`` subclass (instantiated with no arguments),
  or a factory ``f(uri, storage_options) -> CommitHandler``.

Writing a handler: subclass :class:`~alance.commit.handler.CommitHandler` and implement
``commit(store, version, manifest, naming_scheme)``, which must make ``manifest`` (bytes)
version ``version`` atomically or raise :class:`~alance.errors.CommitConflictError`; override
``latest``/``resolve``/``list_versions`` if versions are not found by listing ``_versions/``.
Run ``tests/test_commit_conformance.py`` against it.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlparse

from alance.commit.handler import CommitHandler, ConditionalPutCommitHandler
from alance.errors import InvalidInputError

#: ``factory(uri, storage_options) -> CommitHandler``.
HandlerFactory = Callable[[str, Mapping[str, Any]], CommitHandler]
#: What ``commit_handler=`` accepts.
HandlerSpec = CommitHandler | str | None

_lock = threading.Lock()
_factories: dict[str, HandlerFactory] = {}


def _dynamodb(uri: str, storage_options: Mapping[str, Any]) -> CommitHandler:
    from alance.commit.dynamodb import DynamoDBCommitHandler  # imports aiobotocore lazily

    return DynamoDBCommitHandler.from_uri(uri, storage_options)


def register_commit_handler(scheme: str, factory: HandlerFactory) -> None:
    """Use ``factory(uri, storage_options)`` for URIs of ``scheme`` (replacing any other)."""
    if not scheme or not callable(factory):
        raise InvalidInputError("register_commit_handler needs a scheme and a callable")
    with _lock:
        _factories[scheme.lower()] = factory


def _scheme(uri: str) -> str:
    scheme = urlparse(uri).scheme.lower()
    return "" if len(scheme) <= 1 else scheme  # "" for paths (and Windows drive letters)


def import_object(name: str) -> Any:
    """The object named ``"pkg.module:attr"`` or ``"pkg.module.attr"``."""
    module_name, sep, attr = name.partition(":")
    if not sep:
        module_name, _, attr = name.rpartition(".")
    if not module_name or not attr:
        raise InvalidInputError(f"commit_handler {name!r} is not a dotted name "
                                "('package.module:name')")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInputError(f"commit_handler {name!r}: cannot import {module_name}: "
                                f"{exc}") from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise InvalidInputError(f"commit_handler {name!r}: {module_name} has no "
                                    f"{attr}") from exc
    return obj


def _from_object(obj: Any, what: str, uri: str, options: Mapping[str, Any]) -> CommitHandler:
    if isinstance(obj, CommitHandler):
        return obj
    if isinstance(obj, type):
        if not issubclass(obj, CommitHandler):
            raise InvalidInputError(f"commit_handler {what} is a class but not a CommitHandler")
        return obj()
    if callable(obj):
        made = obj(uri, options)
        if not isinstance(made, CommitHandler):
            raise InvalidInputError(f"commit_handler factory {what} returned {made!r}, "
                                    "not a CommitHandler")
        return made
    raise InvalidInputError(f"commit_handler {what} is {obj!r}, not a CommitHandler, a "
                            "CommitHandler class or a factory")


def commit_handler_for(uri: str | os.PathLike[str],
                       storage_options: Mapping[str, Any] | None = None,
                       commit_handler: HandlerSpec = None) -> CommitHandler:
    """The handler for a dataset URI (see the module documentation for the rules)."""
    text = os.fspath(uri)
    options = dict(storage_options or {})
    if commit_handler is not None:
        if isinstance(commit_handler, str):
            return _from_object(import_object(commit_handler), repr(commit_handler), text,
                                options)
        return _from_object(commit_handler, repr(commit_handler), text, options)
    scheme = _scheme(text)
    with _lock:
        factory = _factories.get(scheme)
    if factory is not None:
        return factory(text, options)
    return ConditionalPutCommitHandler()


register_commit_handler("s3+ddb", _dynamodb)
