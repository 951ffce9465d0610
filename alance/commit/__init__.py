"""How versions of a dataset are committed and found.

* :class:`CommitHandler` — the interface (see :mod:`alance.commit.handler`);
* :class:`ConditionalPutCommitHandler` — atomic create of the manifest (local, memory, S3 with
  ``If-None-Match``, GCS, Azure): the default;
* :class:`DynamoDBCommitHandler` — Lance's external manifest store on DynamoDB
  (``s3+ddb://bucket/path?ddbTableName=T``), shared with pylance;
* :class:`ExternalManifestCommitHandler` — the same protocol over any
  :class:`ExternalManifestStore`;
* :class:`LockCommitHandler` — commits under a lock the caller provides
  (:class:`FileCommitLock`, :class:`AsyncioCommitLock` or your own).

Handlers are chosen by URI scheme or passed as ``commit_handler=`` (an object or a dotted name);
see :mod:`alance.commit.registry`.
"""

from __future__ import annotations

from typing import Any

from alance.commit.external import (
    COMMIT_STEPS,
    ExternalEntry,
    ExternalManifestCommitHandler,
    ExternalManifestStore,
    MemoryManifestStore,
)
from alance.commit.handler import CommitHandler, ConditionalPutCommitHandler, ManifestLocation
from alance.commit.lock import AsyncioCommitLock, FileCommitLock, LockCommitHandler
from alance.commit.registry import commit_handler_for, register_commit_handler

_LAZY = {"DynamoDBCommitHandler", "DynamoDBManifestStore"}


def __getattr__(name: str) -> Any:
    # The DynamoDB classes import aiobotocore, which only DynamoDB users need to pay for.
    if name in _LAZY:
        from alance.commit import dynamodb

        return getattr(dynamodb, name)
    raise AttributeError(f"module 'alance.commit' has no attribute {name!r}")


__all__ = [
    "COMMIT_STEPS",
    "AsyncioCommitLock",
    "CommitHandler",
    "ConditionalPutCommitHandler",
    "DynamoDBCommitHandler",
    "DynamoDBManifestStore",
    "ExternalEntry",
    "ExternalManifestCommitHandler",
    "ExternalManifestStore",
    "FileCommitLock",
    "LockCommitHandler",
    "ManifestLocation",
    "MemoryManifestStore",
    "commit_handler_for",
    "register_commit_handler",
]
