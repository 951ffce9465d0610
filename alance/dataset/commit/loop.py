"""The commit loop: write the transaction file, build the next manifest, commit, rebase, retry.

A commit tries to create the manifest of ``latest + 1``. When another writer got there first,
every transaction committed since ours was read is checked against ours
(:mod:`alance.transaction.conflicts`); if all are compatible (deletion vectors merged where
both deleted from a fragment), the transaction is built again on the newest version and
committed after a short random pause that grows with each loss (:func:`race_delay`), up to
``max_retries`` times and then on until :data:`COMMIT_DEADLINE` seconds have passed since the
commit began. A conflict that cannot
be rebased raises :class:`~alance.errors.RetryableCommitConflictError` or
:class:`~alance.errors.IncompatibleTransactionError`; running out of attempts raises
:class:`~alance.errors.CommitConflictError`.

Whatever the commit wrote and no manifest references (transaction files of failed attempts,
merged deletion files) is deleted again. When the committed config asks for it
(``lance.auto_cleanup.*``), old versions are then cleaned up, as Lance does after a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import numpy as np

from alance._proto import transaction_pb2
from alance.commit.handler import CommitHandler, ManifestLocation, manifest_path
from alance.dataset.commit.rebase import finish_rebase
from alance.dataset.fragments.deletions import WrittenFiles
from alance.dataset.versions.auto_cleanup import AUTO_CLEANUP_INTERVAL, auto_cleanup_hook
from alance.dataset.versions.snapshot import (
    Snapshot,
    committed_here,
    load_snapshot,
    load_snapshot_at,
)
from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CorruptFileError,
    DatasetNotFoundError,
    InvalidInputError,
    NotFoundError,
    StoreError,
)
from alance.format.deletion import deletion_path
from alance.format.manifest import (
    LATEST_VERSION_HINT_NAME,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    ManifestFile,
    ManifestNamingScheme,
    decode_transaction_file,
    encode_latest_version_hint,
    encode_manifest_file,
    encode_transaction_file,
    transaction_file_name,
)
from alance.io.store import DatasetStore
from alance.transaction.build import build_manifest
from alance.transaction.conflicts import RebaseState
from alance.transaction.operations import operation_name

log = logging.getLogger(__name__)

#: How many times a commit that lost a race is rebased and retried before giving up.
DEFAULT_MAX_RETRIES = 20
#: Seconds a commit that keeps losing races to compatible commits goes on retrying once its
#: ``max_retries`` are used up: under heavy contention a rebasable commit waits its turn
#: instead of failing after a fixed number of races (``max_retries=0``: never retried).
COMMIT_DEADLINE = 60.0
#: A base found to be the newest version at most this many seconds before its commit starts
#: (by the same write: ``base_checked_at``) is not checked again (see
#: :meth:`_CommitLoop.run`): the check would repeat, moments later, the listing that found it.
FRESH_BASE_SECONDS = 0.5
#: First backoff pause (seconds) and the cap of the growing pause.
BACKOFF_BASE = 0.005
BACKOFF_CAP = 0.5

Transaction = transaction_pb2.Transaction
#: Checks a commit's caller adds (e.g. merge_insert's "no concurrently inserted key"): called
#: with the concurrent (version, transaction) pairs and the newest snapshot before a rebase.
CommitCheck = Callable[[Sequence[tuple[int, Transaction]], Snapshot], Awaitable[None]]


async def committed_transaction(store: DatasetStore, handler: CommitHandler, version: int,
                                scheme: ManifestNamingScheme | None = None,
                                ) -> Transaction | None:
    """The transaction that created ``version``, or ``None`` if it cannot be read.

    ``scheme``: the dataset's naming scheme, when known: the manifest is then read from its
    final path straight away (a manifest there is committed, whatever the handler), and
    only when it is not there does the handler resolve the version (a HEAD per naming
    scheme, or a DynamoDB read): while rebasing, one request per version less."""
    try:
        snap = await _load_committed(store, handler, version, scheme)
    except (NotFoundError, CorruptFileError):
        return None
    return await transaction_of(store, snap)


async def _load_committed(store: DatasetStore, handler: CommitHandler, version: int,
                          scheme: ManifestNamingScheme | None) -> Snapshot:
    if scheme is not None:
        with contextlib.suppress(NotFoundError):
            return await load_snapshot_at(
                store, ManifestLocation(version, manifest_path(version, scheme), scheme))
    return await load_snapshot(store, handler, version)


async def transaction_of(store: DatasetStore, snap: Snapshot) -> Transaction | None:
    """The transaction that created the loaded version ``snap`` (inline in its manifest or in
    its transaction file), or ``None`` if it cannot be read."""
    if snap.manifest_file.transaction is not None:
        return snap.manifest_file.transaction
    name = snap.manifest.transaction_file
    if not name:
        return None
    try:
        return decode_transaction_file(await store.get(f"{TRANSACTIONS_DIR}/{name}"))
    except (NotFoundError, CorruptFileError):
        return None


#: Operations that change only table metadata: a version cleaned up since their read
#: version does not stop their rebase.
METADATA_ONLY = frozenset({"update_config"})


async def _cleaned_up(store: DatasetStore, handler: CommitHandler, version: int) -> bool:
    """Whether ``version`` no longer exists (removed by cleanup)."""
    try:
        await load_snapshot(store, handler, version)
    except NotFoundError:
        return True
    except CorruptFileError:
        return False
    return False


#: Intervening versions whose transactions are read at once while rebasing.
REBASE_READ_CONCURRENCY = 8


async def newest_and_since(store: DatasetStore, handler: CommitHandler, checked: int,
                   ) -> tuple[Snapshot, list[tuple[int, Transaction | None]]]:
    """The newest version, and the transactions of versions ``checked + 1`` up to it (oldest
    first). Once the newest version is known, its manifest and those of the versions in
    between are read at once (a bounded number at a time), the latter from their final
    paths (see :func:`committed_transaction`)."""
    location = await handler.latest(store)
    limit = asyncio.Semaphore(REBASE_READ_CONCURRENCY)

    async def one(version: int) -> Transaction | None:
        async with limit:
            return await committed_transaction(store, handler, version,
                                               location.naming_scheme)

    versions = range(checked + 1, location.version)
    latest, found = await asyncio.gather(load_snapshot_at(store, location),
                                         asyncio.gather(*(one(v) for v in versions)))
    pairs = list(zip(versions, found, strict=True))
    if latest.version > checked:
        pairs.append((latest.version, await transaction_of(store, latest)))
    return latest, pairs


#: First pause (seconds) after a lost commit race: four times :data:`BACKOFF_BASE`. Measured
#: with 8 to 32 writers on one dataset (``benchmarks/commit.py``), shorter first pauses make
#: writers collide again at once, and pauses of a whole attempt's length or more (random
#: slots as long as the first attempt, as pylance pauses) leave the store idle.
RACE_BACKOFF_BASE = 0.02


def race_delay(attempt: int, attempt_seconds: float = 0.0) -> float:
    """A random pause after the ``attempt``-th lost race (0: the first): full jitter up to
    ``RACE_BACKOFF_BASE * 2**attempt``, capped at :data:`BACKOFF_CAP` or twice what the
    attempt took, whichever is longer (see :func:`backoff_delay`)."""
    cap = max(BACKOFF_CAP, 2 * attempt_seconds)
    return random.uniform(0, min(RACE_BACKOFF_BASE * 2 ** min(attempt, 32), cap))


def backoff_delay(attempt: int, attempt_seconds: float = 0.0) -> float:
    """A random pause before attempt ``attempt + 1`` (full jitter, exponential cap).

    The cap grows to twice what one attempt took (``attempt_seconds``): where an attempt is
    slow (a loaded machine, a distant store), writers that pause less than an attempt lasts
    keep colliding."""
    cap = max(BACKOFF_CAP, 2 * attempt_seconds)
    return random.uniform(0, min(BACKOFF_BASE * 2 ** min(attempt, 32), cap))


async def commit_transaction(
    store: DatasetStore,
    handler: CommitHandler,
    base: Snapshot | None,
    txn: Transaction,
    *,
    data_storage_version: str = "0.1",
    naming_scheme: ManifestNamingScheme = ManifestNamingScheme.V2,
    max_retries: int = DEFAULT_MAX_RETRIES,
    must_create: bool = False,
    prelude: bytes | None = None,
    affected_rows: Mapping[int, np.ndarray] | None = None,
    check: CommitCheck | None = None,
    stable_row_ids: bool = False,
    base_checked_at: float | None = None,
) -> Snapshot:
    """Commit ``txn`` on top of ``base`` (its read version; ``None``: create the dataset).

    ``affected_rows`` (fragment id -> offsets) are the rows a Delete/Update removed; with them
    concurrent deletes of other rows of the same fragment are merged instead of refused.
    ``must_create`` turns losing the race for version 1 into :class:`AlreadyExistsError`.
    ``stable_row_ids`` creates the dataset with stable row ids (ignored when it exists).
    ``base_checked_at``: when (``time.monotonic()``) the caller found ``base`` to be the
    newest version, if it did; within :data:`FRESH_BASE_SECONDS` the commit does not ask
    again before its first attempt.
    Returns the snapshot of the new version.
    """
    if max_retries < 0:
        raise InvalidInputError("max_retries must be >= 0")
    loop = _CommitLoop(store, handler, data_storage_version, naming_scheme, prelude,
                       affected_rows, check)
    loop.stable_row_ids = stable_row_ids
    loop.base_fresh = (base_checked_at is not None
                       and time.monotonic() - base_checked_at <= FRESH_BASE_SECONDS)
    try:
        snap = await loop.run(base, txn, max_retries, must_create)
    except CommitOutcomeUnknownError:
        raise  # a committed version may reference what this commit wrote: keep it all
    except BaseException:
        await loop.cleanup(None)
        raise
    await loop.cleanup(snap)
    if AUTO_CLEANUP_INTERVAL in snap.manifest.config:
        await auto_cleanup_hook(store, handler, snap)
    return snap


class _CommitLoop:
    def __init__(self, store: DatasetStore, handler: CommitHandler, data_storage_version: str,
                 naming_scheme: ManifestNamingScheme, prelude: bytes | None,
                 affected_rows: Mapping[int, np.ndarray] | None, check: CommitCheck | None,
                 ) -> None:
        self.store = store
        self.handler = handler
        self.data_storage_version = data_storage_version
        self.naming_scheme = naming_scheme
        self.prelude = prelude
        self.affected_rows = affected_rows
        self.check = check
        self.txn_files: list[str] = []
        self.merged = WrittenFiles()
        self.restore_source: ManifestFile | None = None
        self.stable_row_ids = False
        self.base_fresh = False

    async def cleanup(self, committed: Snapshot | None) -> None:
        """Delete what the committed version (``None``: nothing) does not reference."""
        keep_txn = committed.manifest.transaction_file if committed is not None else None
        unused = [f"{TRANSACTIONS_DIR}/{name}" for name in self.txn_files if name != keep_txn]
        if committed is not None and self.merged.paths:
            used = {deletion_path(f) for f in committed.fragments if f.HasField("deletion_file")}
            unused += [p for p in self.merged.paths if p not in used]
        elif committed is None:
            unused += self.merged.paths
        for path in unused:
            with contextlib.suppress(AlanceError):  # best effort
                await self.store.delete(path)

    async def _write_txn_file(self, txn: Transaction) -> str:
        name = transaction_file_name(txn.read_version, txn.uuid)
        if name not in self.txn_files:
            self.txn_files.append(name)
            await self.store.put(f"{TRANSACTIONS_DIR}/{name}", encode_transaction_file(txn))
        return name

    async def _build(self, current: Snapshot | None, txn: Transaction, name: str,
                     ) -> ManifestFile:
        if operation_name(txn) == "restore" and self.restore_source is None:
            old = await load_snapshot(self.store, self.handler, txn.restore.version)
            self.restore_source = old.manifest_file
        return build_manifest(current.manifest_file if current else None, txn,
                              transaction_file=name,
                              data_storage_version=self.data_storage_version,
                              prelude=self.prelude, restore_source=self.restore_source,
                              stable_row_ids=self.stable_row_ids)

    async def _outcome(self, version: int, txn: Transaction, error: StoreError | None,
                       ) -> Snapshot | None:
        """Whether ``txn`` is what ``version`` holds: its snapshot, or ``None`` if not.

        After a store error (``error``), failing to find out raises
        :class:`CommitOutcomeUnknownError`; the files this commit wrote are then kept.
        """
        try:
            return await _committed_by(self.store, self.handler, version, txn)
        except AlanceError as exc:
            if error is None:
                raise
            raise CommitOutcomeUnknownError(
                f"committing version {version} of {self.store.uri} failed ({error}) and "
                f"reading it back failed too ({exc}); it may or may not have been committed"
            ) from error

    async def _taken(self, version: int) -> bool:
        """Whether a lost commit lost a real race (the version now exists): only those are
        retried past ``max_retries`` (a lock that refuses, say, is not waited out)."""
        return await _taken_by_another(self.handler, self.store, version)

    async def run(self, base: Snapshot | None, txn: Transaction, max_retries: int,
                  must_create: bool) -> Snapshot:
        current = base
        checked = base.version if base is not None else 0
        state = RebaseState.start(txn, base.manifest.fragments if base else [],
                                  self.affected_rows is not None)
        # Start from the newest version: cleanup may have removed the version after a stale
        # base, and a conditional create of that number would then succeed behind the
        # dataset's back (a lost commit, or a rewound history).
        # The transaction file does not depend on the answer: written meanwhile, it saves a
        # round trip on every commit (a rebase writes another one; cleanup removes this one).
        # A base the caller found to be the newest moments ago (``base_fresh``: the listing
        # of the same write, before its data files) is not asked about again: the window in
        # which a version could land and be cleaned up is then as short as the one between
        # this check and the commit (a request per commit less: a LIST on S3, a DynamoDB
        # query, a directory listing on a local disk).
        catch_up = False
        if base is not None and self.base_fresh:
            await self._write_txn_file(txn)
        elif base is not None:
            newest, _ = await asyncio.gather(self.handler.latest(self.store),
                                             self._write_txn_file(txn))
            catch_up = newest.version > base.version
        if catch_up and max_retries == 0:
            assert base is not None
            raise CommitConflictError(
                f"Commit conflict for version {base.version + 1}: {self.store.uri} has moved "
                "past the read version and max_retries=0 allows no rebase")
        began = time.monotonic()
        attempt = -1
        while True:
            attempt += 1
            started = time.monotonic()
            if catch_up:  # rebase onto the newest version (after a conflict, or stale base)
                catch_up = False
                latest, since = await newest_and_since(self.store, self.handler, checked)
                others: list[tuple[int, Transaction]] = []
                for version, other in since:
                    if other is not None and other.uuid == txn.uuid:
                        # An earlier attempt of ours landed after all (e.g. a lost response
                        # that the store client retried into a conflict).
                        mine = latest if version == latest.version else await load_snapshot(
                            self.store, self.handler, version)
                        await _write_hint(self.store, version)
                        return mine
                    if other is None and state.name in METADATA_ONLY and (
                            await _cleaned_up(self.store, self.handler, version)):
                        # A version cleanup removed since: skipped, as pylance skips it
                        # (config and metadata changes rebase onto the newest state).
                        continue
                    try:
                        state.check(other, version)
                    except CommitConflictError as exc:
                        log.info("%s: a %s read at version %d conflicts with version %d; "
                                 "not rebased: %s", self.store.uri, state.name, checked,
                                 version, exc)
                        raise
                    if other is not None:
                        others.append((version, other))
                if self.check is not None and others:
                    try:
                        await self.check(others, latest)
                    except CommitConflictError as exc:
                        log.info("%s: a %s read at version %d conflicts with the commits up "
                                 "to version %d; not rebased: %s", self.store.uri, state.name,
                                 checked, latest.version, exc)
                        raise
                log.info("%s: rebasing a %s from version %d onto version %d (%d commits "
                         "in between)", self.store.uri, state.name, checked, latest.version,
                         len(others))
                txn = await finish_rebase(self.store, latest, state, self.affected_rows,
                                          self.merged)
                state = RebaseState.start(txn, latest.manifest.fragments,
                                          self.affected_rows is not None)
                checked = latest.version
                current = latest
            name = await self._write_txn_file(txn)
            mf = await self._build(current, txn, name)
            scheme = current.location.naming_scheme if current is not None else (
                self.naming_scheme)
            encoded = encode_manifest_file(mf)
            try:
                location = await self.handler.commit(self.store, mf.manifest.version,
                                                     encoded, scheme)
            except StoreError as exc:
                # The manifest may have been written before the failure (a lost response):
                # read the version back to learn what happened.
                outcome = await self._outcome(mf.manifest.version, txn, exc)
                if outcome is not None:
                    await _write_hint(self.store, outcome.version)
                    return outcome
                if attempt >= max_retries:
                    raise
                pause = backoff_delay(attempt)
                log.info("%s: commit of version %d failed (%s); the version is still free, "
                         "retrying in %.3f s", self.store.uri, mf.manifest.version, exc, pause)
                await asyncio.sleep(pause)
                continue  # the version is still free: try the same commit again
            except CommitConflictError:
                last = max_retries == 0 or (attempt >= max_retries and (
                    time.monotonic() - began >= COMMIT_DEADLINE
                    or not await self._taken(mf.manifest.version)))
                if must_create or last:
                    outcome = await self._outcome(mf.manifest.version, txn, None)
                    if outcome is not None:  # our own earlier attempt landed after all
                        await _write_hint(self.store, outcome.version)
                        return outcome
                if must_create:
                    raise AlreadyExistsError(
                        f"a dataset already exists at {self.store.uri}") from None
                if last:
                    break
                pause = race_delay(attempt, time.monotonic() - started)
                if attempt >= max_retries:
                    log.info("commit to %s lost %d races; retrying until its deadline",
                             self.store.uri, attempt + 1)
                else:
                    log.info("%s: commit conflict: version %d was taken by another writer "
                             "(attempt %d); catching up in %.3f s", self.store.uri,
                             mf.manifest.version, attempt + 1, pause)
                # Pause first, then catch up: the newest version is then as fresh as it can be
                # when the next attempt is made.
                await asyncio.sleep(pause)
                catch_up = True
                continue
            committed_here(encoded, mf.fragment_facts())
            await _write_hint(self.store, location.version)
            return Snapshot(location, mf)
        raise CommitConflictError(
            f"Commit conflict for version {mf.manifest.version}: commit to {self.store.uri} "
            f"lost {attempt + 1} races in a row; giving up")


async def _taken_by_another(handler: CommitHandler, store: DatasetStore, version: int,
                            ) -> bool:
    """Whether ``version`` exists now (another writer won the race for it)."""
    try:
        return (await handler.latest(store)).version >= version
    except DatasetNotFoundError:
        return False


async def _committed_by(store: DatasetStore, handler: CommitHandler, version: int,
                        txn: Transaction) -> Snapshot | None:
    """The snapshot of ``version`` if ``txn`` created it, else ``None`` (version absent or
    someone else's). Store failures propagate."""
    try:
        snap = await load_snapshot(store, handler, version)
    except NotFoundError:
        return None
    inline = snap.manifest_file.transaction
    if inline is not None:
        return snap if inline.uuid == txn.uuid else None
    name = transaction_file_name(txn.read_version, txn.uuid)
    return snap if snap.manifest.transaction_file == name else None


async def _write_hint(store: DatasetStore, version: int) -> None:
    """Update ``_versions/latest_version_hint.json`` where the store keeps one (local disks,
    as pylance); it is only a hint, so failures are logged."""
    if not store.version_hint:
        return
    try:
        # In place: readers (pylance) check the hint, and a rename over the old file costs
        # ext4 a forced block allocation at every commit.
        await store.rewrite(f"{VERSIONS_DIR}/{LATEST_VERSION_HINT_NAME}",
                            encode_latest_version_hint(version))
    except AlanceError as exc:  # pragma: no cover - depends on store failures
        log.warning("could not update the latest version hint of %s: %s", store.uri, exc)
