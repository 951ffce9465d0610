"""Removing old versions and the files only they reference (``cleanup_old_versions``).

The rules are Lance's, and conservative:

* The versions kept (the *working set*) are: the version the cleanup was started from and every
  newer one, every version younger than ``older_than`` (or among the ``retain_versions``
  newest), and every tagged version. Tagged versions that would otherwise go make the cleanup
  fail unless ``error_if_tagged_old_versions=False``.
* The manifests of the other versions are deleted. A data, deletion, transaction or index file
  is deleted only when no kept version references it, and only if it is at least as old as the
  oldest kept manifest (anything newer may belong to a commit in progress).
* A file no manifest references at all may be part of a commit in progress. It is deleted only
  when it is older than 7 days, or when ``delete_unverified=True`` (only safe when nothing else
  writes to the dataset). A file referenced by a removed version is known not to be in flight.
* Just before deleting, the version list is read again: files referenced by versions committed
  meanwhile are kept. Manifests go first, then the files, so an interrupted cleanup never
  leaves a version whose files are missing.

Only files in Lance's own directories are considered (``data/*.lance`` with their blob
sidecars ``data/<stem>/*.blob``, which go with their data file, ``_deletions/``,
``_transactions/*.txn``, ``_indices/<uuid>/``, ``_rowids/*.rowids``, old
``_versions/*.manifest``); tags, the version
hint and anything unknown are never touched. Datasets with branches are refused (branch
versions reference the same data files).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid as uuidlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler, ManifestLocation
from alance.dataset.versions.snapshot import Snapshot, load_snapshot_at
from alance.dataset.versions.tags import Tags
from alance.errors import (
    InvalidInputError,
    NotFoundError,
    TaggedVersionError,
    UnsupportedFeatureError,
)
from alance.format.deletion import deletion_path
from alance.format.manifest import DATA_DIR, TRANSACTIONS_DIR, VERSIONS_DIR
from alance.format.v2.blob import sidecar_owner
from alance.io.store import DatasetStore, ObjectMeta

#: A file no manifest references is deleted only when it is at least this old.
UNVERIFIED_THRESHOLD = dt.timedelta(days=7)
#: ``older_than`` when neither it nor ``retain_versions`` is given (as pylance).
DEFAULT_OLDER_THAN = dt.timedelta(weeks=2)
DELETIONS_DIR = "_deletions"
INDICES_DIR = "_indices"
BRANCHES_DIR = "_refs/branches"
#: alance's external row id sequences (see :mod:`alance.transaction.lineage`).
ROW_IDS_DIR = "_rowids"
#: Manifests read / objects deleted concurrently.
PARALLELISM = 16


@dataclass(frozen=True)
class CleanupStats:
    """What a cleanup removed (or, with ``dry_run``, would remove)."""

    bytes_removed: int = 0
    old_versions: int = 0
    data_files_removed: int = 0
    deletion_files_removed: int = 0
    transaction_files_removed: int = 0
    index_files_removed: int = 0
    dry_run: bool = False
    removed_paths: tuple[str, ...] = field(default=(), repr=False)


@dataclass
class _Refs:
    """Files some set of manifests references (paths relative to the dataset root)."""

    paths: set[str] = field(default_factory=set)
    index_uuids: set[str] = field(default_factory=set)

    def add_manifest(self, snap: Snapshot) -> None:
        manifest = snap.manifest
        for frag in manifest.fragments:
            for data_file in frag.files:
                if not data_file.HasField("base_id"):
                    self.paths.add(f"{DATA_DIR}/{data_file.path}")
            if frag.HasField("deletion_file"):
                self.paths.add(deletion_path(frag))
            self.paths.update(_external_paths(frag))
        if manifest.transaction_file:
            self.paths.add(f"{TRANSACTIONS_DIR}/{manifest.transaction_file}")
        for index in snap.manifest_file.indices:
            self.index_uuids.add(index_uuid(index))


def _external_paths(frag: table_pb2.DataFragment) -> Iterable[str]:
    for name in ("external_row_ids", "external_last_updated_at_versions",
                 "external_created_at_versions"):
        if frag.HasField(name):  # type: ignore[arg-type]
            yield getattr(frag, name).path


def index_uuid(index: table_pb2.IndexMetadata) -> str:
    """An index's uuid as the name of its directory under ``_indices/``."""
    raw = index.uuid.uuid
    return str(uuidlib.UUID(bytes=raw)) if len(raw) == 16 else raw.hex()


def _utc(when: dt.datetime | None) -> dt.datetime | None:
    if when is None:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def manifest_time(snap: Snapshot) -> dt.datetime:
    """When a version was committed (its manifest's timestamp), in UTC."""
    ts = snap.manifest.timestamp
    return dt.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, dt.UTC)


def _category(path: str) -> str | None:
    """Which kind of Lance file ``path`` is (``None``: not one cleanup may delete)."""
    if path.startswith(f"{DATA_DIR}/") and path.endswith(".lance"):
        return "data"
    if path.startswith(f"{DATA_DIR}/") and path.endswith(".blob") and path.count("/") == 2:
        return "blob"
    if path.startswith(f"{DELETIONS_DIR}/") and path.endswith((".arrow", ".bin")):
        return "deletion"
    if path.startswith(f"{TRANSACTIONS_DIR}/") and path.endswith(".txn"):
        return "transaction"
    if path.startswith(f"{ROW_IDS_DIR}/") and path.endswith(".rowids"):
        return "rowids"
    if path.startswith(f"{INDICES_DIR}/") and path.count("/") >= 2:
        return "index"
    if path.startswith(f"{VERSIONS_DIR}/.tmp"):
        return "temporary"
    return None


def _owner(path: str) -> str:
    """The file whose references keep ``path``: a blob sidecar ``data/<stem>/<id>.blob``
    belongs to the data file ``data/<stem>.lance``; any other file to itself."""
    owner = sidecar_owner(path) if _category(path) == "blob" else None
    return owner or path


class _Cleanup:
    def __init__(self, store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                 before: dt.datetime | None, before_version: int | None,
                 delete_unverified: bool, error_if_tagged: bool) -> None:
        self.store = store
        self.handler = handler
        self.snapshot = snapshot
        self.before = before
        self.before_version = before_version
        self.delete_unverified = delete_unverified
        self.error_if_tagged = error_if_tagged
        self.kept = _Refs()
        self.verified = _Refs()
        self.old_manifests: list[ManifestLocation] = []
        self.earliest_kept: dt.datetime | None = None
        self.newest_seen = 0

    def too_old(self, snap: Snapshot) -> bool:
        old = True
        if self.before is not None:
            old &= manifest_time(snap) < self.before
        if self.before_version is not None:
            old &= snap.version < self.before_version
        return old

    async def _load_all(self, locations: Sequence[ManifestLocation],
                        ) -> list[tuple[ManifestLocation, Snapshot]]:
        """The manifests at ``locations``; ones deleted meanwhile (by a concurrent cleanup)
        are left out. Any other failure stops the cleanup: skipping a manifest that cannot
        be read could delete files it references."""
        sem = asyncio.Semaphore(PARALLELISM)

        async def one(loc: ManifestLocation) -> Snapshot | None:
            async with sem:
                try:
                    return await load_snapshot_at(self.store, loc)
                except NotFoundError:
                    return None

        snaps = await asyncio.gather(*(one(loc) for loc in locations))
        return [(loc, snap) for loc, snap in zip(locations, snaps, strict=True)
                if snap is not None]

    async def inspect(self) -> None:
        if [m for m in await self.store.list(BRANCHES_DIR) if m.path.endswith(".json")]:
            raise UnsupportedFeatureError("the dataset has branches; alance cannot clean up "
                                          "datasets with branches yet")
        tags = await Tags(self.store, self.handler).list()
        tagged = {t.version for t in tags.values()}
        old_tagged: set[int] = set()
        for loc, snap in await self._load_all(await self.handler.list_versions(self.store)):
            self.newest_seen = max(self.newest_seen, snap.version)
            latest = snap.version >= self.snapshot.version
            old = self.too_old(snap)
            keep = latest or not old or snap.version in tagged
            if snap.version in tagged and old and not latest:
                old_tagged.add(snap.version)
            if keep:
                self.kept.add_manifest(snap)
                when = manifest_time(snap)
                if self.earliest_kept is None or when < self.earliest_kept:
                    self.earliest_kept = when
            else:
                self.verified.add_manifest(snap)
                self.old_manifests.append(loc)
        if old_tagged and self.error_if_tagged:
            names = {n: t.version for n, t in sorted(tags.items()) if t.version in old_tagged}
            raise TaggedVersionError(
                f"{len(names)} tagged version(s) would be cleaned up; delete the tags or pass "
                f"error_if_tagged_old_versions=False: {names}")

    def deletable(self, meta: ObjectMeta, now: dt.datetime) -> bool:
        kind = _category(meta.path)
        if kind is None:
            return False
        modified = _utc(meta.last_modified)
        if self.earliest_kept is not None and (modified is None
                                               or modified > self.earliest_kept):
            return False
        maybe_in_flight = not self.delete_unverified and (
            modified is None or modified >= now - UNVERIFIED_THRESHOLD)
        if kind == "temporary":
            return not maybe_in_flight
        if kind == "index":
            uuid = meta.path.split("/")[1]
            if uuid in self.kept.index_uuids:
                return False
            return not maybe_in_flight or uuid in self.verified.index_uuids
        path = _owner(meta.path)
        if path in self.kept.paths:
            return False
        return not maybe_in_flight or path in self.verified.paths

    async def candidates(self) -> list[ObjectMeta]:
        now = dt.datetime.now(dt.UTC)
        listed = await asyncio.gather(*(self.store.list(d) for d in (
            DATA_DIR, DELETIONS_DIR, TRANSACTIONS_DIR, INDICES_DIR, VERSIONS_DIR, ROW_IDS_DIR)))
        return [m for metas in listed for m in metas if self.deletable(m, now)]

    async def protect_new_versions(self, found: list[ObjectMeta]) -> list[ObjectMeta]:
        """Drop candidates that versions committed since the inspection reference."""
        fresh = [loc for loc in await self.handler.list_versions(self.store)
                 if loc.version > self.newest_seen]
        if not fresh:
            return found
        refs = _Refs()
        for _, snap in await self._load_all(fresh):
            refs.add_manifest(snap)
        return [m for m in found if _owner(m.path) not in refs.paths and not (
            _category(m.path) == "index" and m.path.split("/")[1] in refs.index_uuids)]


async def cleanup_old_versions(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                               older_than: dt.timedelta | None = None,
                               retain_versions: int | None = None, *,
                               delete_unverified: bool = False,
                               error_if_tagged_old_versions: bool = True,
                               dry_run: bool = False,
                               progress: Callable[[int, int], Any] | None = None,
                               ) -> CleanupStats:
    """Delete versions older than ``older_than`` and the files only they reference.

    See the module documentation for exactly what is kept. With ``dry_run`` nothing is
    deleted and the statistics say what would be.
    """
    if older_than is not None and not isinstance(older_than, dt.timedelta):
        raise InvalidInputError("older_than must be a datetime.timedelta")
    if older_than is not None and older_than < dt.timedelta(0):
        raise InvalidInputError("older_than must not be negative")
    if retain_versions is not None and (isinstance(retain_versions, bool) or not isinstance(
            retain_versions, int) or retain_versions < 1):
        raise InvalidInputError("retain_versions must be a positive integer")
    if older_than is None and retain_versions is None:
        older_than = DEFAULT_OLDER_THAN
    before = dt.datetime.now(dt.UTC) - older_than if older_than is not None else None
    before_version = None
    if retain_versions is not None:
        versions = [loc.version for loc in await handler.list_versions(store)]
        before_version = versions[max(0, len(versions) - retain_versions)] if versions else None
    job = _Cleanup(store, handler, snapshot, before, before_version, delete_unverified,
                   error_if_tagged_old_versions)
    await job.inspect()
    files = await job.protect_new_versions(await job.candidates())
    manifest_sizes = []
    for loc in job.old_manifests:
        manifest_sizes.append(loc.size if loc.size is not None else
                              (await store.head(loc.path)).size)
    counts = dict.fromkeys(("data", "blob", "deletion", "transaction", "index", "rowids",
                            "temporary"), 0)
    for meta in files:
        counts[_category(meta.path) or "temporary"] += 1
    paths = [loc.path for loc in job.old_manifests] + [m.path for m in files]
    if not dry_run:
        count = _Count(len(paths), progress)
        await _delete_all(store, [loc.path for loc in job.old_manifests], count)
        await _delete_all(store, [m.path for m in files], count)
    return CleanupStats(
        bytes_removed=sum(manifest_sizes) + sum(m.size for m in files),
        old_versions=len(job.old_manifests), data_files_removed=counts["data"],
        deletion_files_removed=counts["deletion"],
        transaction_files_removed=counts["transaction"], index_files_removed=counts["index"],
        dry_run=dry_run, removed_paths=tuple(paths))


class _Count:
    """Deleted files so far, reported to a ``progress(done, total)`` callback."""

    def __init__(self, total: int, progress: Callable[[int, int], Any] | None) -> None:
        self.total = total
        self.done = 0
        self.progress = progress
        if progress is not None:
            progress(0, total)

    def one_more(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.total)


async def _delete_all(store: DatasetStore, paths: Sequence[str], count: _Count) -> None:
    sem = asyncio.Semaphore(PARALLELISM)

    async def one(path: str) -> None:
        async with sem:
            await store.delete(path)
        count.one_more()

    await asyncio.gather(*(one(p) for p in paths))
