"""The commit loop: write the transaction file, build the next manifest, commit, rebase, retry."""

from __future__ import annotations

import asyncio
import logging
import random

from alance._proto import transaction_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.snapshot import Snapshot, load_snapshot
from alance.dataset.transaction import build_manifest, check_compatible
from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    CommitConflictError,
    CorruptFileError,
    NotFoundError,
)
from alance.format.manifest import (
    LATEST_VERSION_HINT_NAME,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    ManifestNamingScheme,
    decode_transaction_file,
    encode_latest_version_hint,
    encode_manifest_file,
    encode_transaction_file,
    transaction_file_name,
)
from alance.io.store import DatasetStore

log = logging.getLogger(__name__)

#: How many times a commit that lost a race is rebased and retried before giving up.
DEFAULT_MAX_RETRIES = 20


async def _committed_transaction(store: DatasetStore, handler: CommitHandler, version: int,
                                 ) -> transaction_pb2.Transaction | None:
    """The transaction that created ``version``, or ``None`` if it cannot be read."""
    try:
        snap = await load_snapshot(store, handler, version)
    except (NotFoundError, CorruptFileError):
        return None
    if snap.manifest_file.transaction is not None:
        return snap.manifest_file.transaction
    name = snap.manifest.transaction_file
    if not name:
        return None
    try:
        return decode_transaction_file(await store.get(f"{TRANSACTIONS_DIR}/{name}"))
    except (NotFoundError, CorruptFileError):
        return None


async def commit_transaction(
    store: DatasetStore,
    handler: CommitHandler,
    base: Snapshot | None,
    txn: transaction_pb2.Transaction,
    *,
    data_storage_version: str = "0.1",
    naming_scheme: ManifestNamingScheme = ManifestNamingScheme.V2,
    max_retries: int = DEFAULT_MAX_RETRIES,
    must_create: bool = False,
    prelude: bytes | None = None,
) -> Snapshot:
    """Commit ``txn`` on top of ``base`` (``None``: create the dataset) and return the new version.

    When another writer commits first, the transactions committed since ``base`` are checked
    for compatibility with ``txn``; if compatible, ``txn`` is rebuilt on the newest version and
    committed again after a jittered backoff, up to ``max_retries`` times.
    ``must_create`` turns losing the race for version 1 into :class:`AlreadyExistsError`.
    """
    txn_name = transaction_file_name(txn.read_version, txn.uuid)
    txn_path = f"{TRANSACTIONS_DIR}/{txn_name}"
    await store.put(txn_path, encode_transaction_file(txn))
    try:
        return await _commit_loop(store, handler, base, txn, txn_name, data_storage_version,
                                  naming_scheme, max_retries, must_create, prelude)
    except BaseException:
        await store.delete(txn_path)  # no manifest references it
        raise


async def _commit_loop(store: DatasetStore, handler: CommitHandler, base: Snapshot | None,
                       txn: transaction_pb2.Transaction, txn_name: str,
                       data_storage_version: str, naming_scheme: ManifestNamingScheme,
                       max_retries: int, must_create: bool, prelude: bytes | None,
                       ) -> Snapshot:
    current = base
    checked = base.version if base is not None else 0
    for attempt in range(max_retries + 1):
        mf = build_manifest(current.manifest_file if current else None, txn,
                            transaction_file=txn_name, data_storage_version=data_storage_version,
                            prelude=prelude)
        scheme = current.location.naming_scheme if current is not None else naming_scheme
        try:
            location = await handler.commit(store, mf.manifest.version, encode_manifest_file(mf),
                                            scheme)
        except CommitConflictError:
            if must_create:
                raise AlreadyExistsError(f"a dataset already exists at {store.uri}") from None
            if attempt == max_retries:
                break
            latest = await load_snapshot(store, handler)
            for version in range(checked + 1, latest.version + 1):
                check_compatible(txn, await _committed_transaction(store, handler, version))
            checked = latest.version
            current = latest
            await asyncio.sleep(random.uniform(0, min(0.01 * 2 ** attempt, 0.5)))
            continue
        await _write_hint(store, location.version)
        return Snapshot(location, mf)
    raise CommitConflictError(
        f"commit to {store.uri} lost {max_retries + 1} races in a row; giving up")


async def _write_hint(store: DatasetStore, version: int) -> None:
    """Update ``_versions/latest_version_hint.json``; it is only a hint, so failures are logged."""
    try:
        await store.put(f"{VERSIONS_DIR}/{LATEST_VERSION_HINT_NAME}",
                        encode_latest_version_hint(version))
    except AlanceError as exc:  # pragma: no cover - depends on store failures
        log.warning("could not update the latest version hint of %s: %s", store.uri, exc)
