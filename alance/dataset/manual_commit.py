"""Committing a hand-built :class:`~alance.dataset.commit.operations.LanceOperation` (pylance's
``LanceDataset.commit`` / ``commit_batch``).

The operation becomes a wire transaction built on ``read_version`` and goes through
:func:`alance.dataset.commit.loop.commit_transaction`: concurrent commits since ``read_version``
are rebased over when compatible, otherwise a typed
:class:`~alance.errors.CommitConflictError` is raised and nothing becomes visible.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alance._proto import transaction_pb2
from alance.commit.handler import ManifestLocation, manifest_path
from alance.commit.lock import LockCommitHandler
from alance.dataset.api import LanceDataset, _destination
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.commit.operations import (
    LANCE_COMMIT_MESSAGE_KEY,
    LanceOperation,
    Transaction,
    to_wire,
)
from alance.dataset.evolution.new_columns import manifest_max_field_id
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import (
    AlreadyExistsError,
    CommitConflictError,
    DatasetNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)
from alance.format.manifest import (
    DETACHED_VERSION_MASK,
    TRANSACTIONS_DIR,
    ManifestNamingScheme,
    encode_manifest_file,
    encode_transaction_file,
    transaction_file_name,
)
from alance.io.store import DatasetStore
from alance.transaction.build import build_manifest

__all__ = ["BulkCommitResult", "commit", "commit_batch"]


def _storage_version(operation: LanceOperation.BaseOperation) -> str:
    """The data storage version of a dataset an Overwrite creates: that of its files."""
    for frag in getattr(operation, "fragments", ()):
        for f in frag.files:
            if f.file_major_version >= 2:
                return f"{f.file_major_version}.{f.file_minor_version}"
            return "0.1"
    return "2.2"


async def commit(base_uri: Any, operation: LanceOperation.BaseOperation | Transaction,
                 read_version: int | None = None, commit_lock: Any = None,
                 storage_options: Mapping[str, Any] | None = None,
                 enable_v2_manifest_paths: bool | None = None, detached: bool | None = False,
                 max_retries: int = DEFAULT_MAX_RETRIES, *,
                 commit_message: str | None = None, enable_stable_row_ids: bool | None = None,
                 **kwargs: Any) -> LanceDataset:
    """Commit ``operation`` (or a :class:`Transaction`) to the dataset at ``base_uri``.

    ``read_version``: the version the operation was built from (default: the latest; a
    :class:`Transaction` carries its own). Creating a dataset takes an ``Overwrite``.
    ``commit_lock``: a callable ``version -> context manager`` held while committing.
    Returns the new version.
    """
    unknown = {k for k, v in kwargs.items() if v is not None and k != "commit_timeout"}
    if unknown:
        raise UnsupportedFeatureError(f"commit options not supported: {sorted(unknown)}")
    uuid = None
    properties: dict[str, str] = {}
    if isinstance(operation, Transaction):
        read_version = operation.read_version if read_version is None else read_version
        uuid, properties = operation.uuid, dict(operation.transaction_properties or {})
        operation = operation.operation
    if commit_message is not None:
        properties[LANCE_COMMIT_MESSAGE_KEY] = commit_message
    if not isinstance(operation, LanceOperation.BaseOperation):
        raise TypeError(f"operation must be a LanceOperation, got {type(operation).__name__}")
    if read_version is None and not isinstance(operation, LanceOperation.Overwrite
                                               | LanceOperation.Restore):
        raise InvalidInputError(f"{type(operation).__name__} needs the read_version it was "
                                "built from (only Overwrite and Restore can do without)")
    store, handler = _destination(os.fspath(base_uri) if isinstance(base_uri, os.PathLike)
                                  else base_uri, storage_options, None)
    if commit_lock is not None:
        handler = LockCommitHandler(commit_lock)
    base: Snapshot | None
    try:
        base = await load_snapshot(store, handler, read_version or None)
    except DatasetNotFoundError:
        if not isinstance(operation, LanceOperation.Overwrite):
            raise
        base = None
    txn = to_wire(operation, base.version if base is not None else 0,
                  base.schema if base is not None else None,
                  manifest_max_field_id(base.manifest) if base is not None else -1,
                  uuid=uuid, properties=properties)
    if detached:
        if base is None:
            raise InvalidInputError("a detached commit needs an existing dataset to start from")
        return LanceDataset(store, handler, await commit_detached(store, base, txn))
    scheme = (ManifestNamingScheme.V1 if enable_v2_manifest_paths is False
              else ManifestNamingScheme.V2)
    snap = await commit_transaction(
        store, handler, base, txn,
        data_storage_version=(base.data_storage_version if base is not None
                              else _storage_version(operation)),
        naming_scheme=scheme, max_retries=max_retries,
        stable_row_ids=bool(enable_stable_row_ids))
    return LanceDataset(store, handler, snap)


@dataclass
class BulkCommitResult:
    """What :func:`commit_batch` returns: the new version (an async dataset, or a blocking one
    from :mod:`alance.sync`) and the one transaction committed (read as attributes, or as
    keys like pylance's dict: ``result["dataset"]``)."""

    dataset: Any
    merged: Transaction

    def __getitem__(self, key: str) -> Any:
        if key not in ("dataset", "merged"):
            raise KeyError(key)
        return getattr(self, key)


async def commit_batch(dest: Any, transactions: Sequence[Transaction],
                       commit_lock: Any = None, storage_options: Mapping[str, Any] | None = None,
                       enable_v2_manifest_paths: bool | None = None,
                       detached: bool | None = False, max_retries: int = DEFAULT_MAX_RETRIES,
                       **kwargs: Any) -> BulkCommitResult:
    """Commit several Append transactions as one version (their fragments together).

    As pylance, only ``Append`` transactions can be combined; the read version is the
    oldest of theirs.
    """
    if not transactions:
        raise InvalidInputError("commit_batch needs at least one transaction")
    if not all(isinstance(t, Transaction) for t in transactions):
        raise TypeError("commit_batch takes Transaction objects")
    if not all(isinstance(t.operation, LanceOperation.Append) for t in transactions):
        raise UnsupportedFeatureError("commit_batch only combines Append transactions")
    fragments = [f for t in transactions
                 for f in t.operation.fragments]  # type: ignore[attr-defined]
    merged = Transaction(min(t.read_version for t in transactions),
                         LanceOperation.Append(fragments))
    dataset = await commit(dest, merged, None, commit_lock, storage_options,
                           enable_v2_manifest_paths, detached, max_retries, **kwargs)
    return BulkCommitResult(dataset, merged)


async def commit_detached(store: DatasetStore, base: Snapshot,
                          txn: transaction_pb2.Transaction) -> Snapshot:
    """Commit ``txn`` on ``base`` as a detached version: a random version number with the
    high bit set, its manifest at ``_versions/d{version}.manifest``, outside the history
    (the latest version does not change; ``checkout_version`` reaches it)."""
    name = transaction_file_name(txn.read_version, txn.uuid)
    await store.put(f"{TRANSACTIONS_DIR}/{name}", encode_transaction_file(txn))
    mf = build_manifest(base.manifest_file, txn, transaction_file=name,
                        data_storage_version=base.data_storage_version)
    scheme = ManifestNamingScheme.V2
    for _ in range(8):  # a clash of 63 random bits is all but impossible; try again if so
        version = secrets.randbits(63) | DETACHED_VERSION_MASK
        mf.manifest.version = version
        path = manifest_path(version, scheme)
        try:
            await store.put_if_absent(path, encode_manifest_file(mf))
        except AlreadyExistsError:
            continue
        return Snapshot(ManifestLocation(version, path, scheme), mf)
    raise CommitConflictError("no free detached version number was found")
