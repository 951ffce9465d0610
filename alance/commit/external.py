"""Commits through an external manifest store (a key-value store with put-if-absent).

Object stores without an atomic create (classic S3) cannot decide which of two writers made a
version. An external store can: it maps ``(base_uri, version)`` to the path of that version's
manifest and refuses a second entry for the same key. The manifests themselves still live in
the object store, so a reader that knows nothing of the external store opens the dataset too
(possibly one version behind).

A commit of version ``N`` runs these steps (each named by the :data:`COMMIT_STEPS` entry that an
``on_step`` observer receives once the step is done):

``staged``
    the manifest is written to ``_versions/{final name}-{uuid}``, a path no one else uses;
``claimed``
    the entry ``N -> staged path`` is created in the external store if ``N`` has none. The
    version is committed from this moment on; losing this race is a
    :class:`~alance.errors.CommitConflictError`;
``copied``
    the staged manifest is copied to the final path ``_versions/{final name}``;
``finalized``
    the entry is updated to point at the final path;
``cleaned``
    the staged object is deleted.

Whoever finds an entry that still points at a staged path (a reader, or the next writer)
finishes the last three steps itself (*repair*). If repair fails the dataset is not opened, so a
half-committed version is never read through a path that may vanish.

Versions missing from the external store (a dataset committed without it before) are looked up
in the object store and recorded in the external store on the way (*back-fill*).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from alance.commit.handler import CommitHandler, ManifestLocation, manifest_path
from alance.errors import (
    AlanceError,
    CommitConflictError,
    CorruptFileError,
    NotFoundError,
)
from alance.format.manifest import (
    VERSIONS_DIR,
    ManifestNamingScheme,
    parse_manifest_file_name,
)
from alance.io.store import DatasetStore

log = logging.getLogger(__name__)

#: The steps of a commit, in order (see the module documentation).
COMMIT_STEPS = ("staged", "claimed", "copied", "finalized", "cleaned")

#: ``on_step(step, version)``: called after each step of a commit or a repair.
StepObserver = Callable[[str, int], None]


@dataclass(frozen=True)
class ExternalEntry:
    """One row of an external manifest store.

    ``path`` is the manifest's path relative to the *bucket* (``base_uri/_versions/...``), the
    way Lance records it; ``size`` and ``e_tag`` describe that object when known.
    """

    version: int
    path: str
    size: int | None = None
    e_tag: str | None = None


class ExternalManifestStore(abc.ABC):
    """A key-value store ``(base_uri, version) -> ExternalEntry`` with put-if-absent.

    ``base_uri`` identifies a dataset (for S3: its path inside the bucket). Implementations
    must read their own writes (consistent reads) and must settle the outcome of a conditional
    create themselves: :meth:`put_if_not_exists` returns only when *this* entry is stored and
    raises :class:`~alance.errors.CommitConflictError` only when another entry is.
    """

    @abc.abstractmethod
    async def get(self, base_uri: str, version: int) -> ExternalEntry | None:
        """The entry of one version, or ``None``."""

    @abc.abstractmethod
    async def latest(self, base_uri: str) -> ExternalEntry | None:
        """The entry with the highest version, or ``None`` when the dataset has none."""

    @abc.abstractmethod
    async def list_after(self, base_uri: str, version: int) -> list[ExternalEntry]:
        """Every entry with a version above ``version``, oldest first."""

    @abc.abstractmethod
    async def put_if_not_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        """Create the entry; :class:`CommitConflictError` if its version has another entry."""

    @abc.abstractmethod
    async def put_if_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        """Replace the existing entry of ``entry.version``; :class:`NotFoundError` if none."""


class MemoryManifestStore(ExternalManifestStore):
    """An in-process external store (tests, and documentation of the contract)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int], ExternalEntry] = {}
        self._lock = threading.Lock()

    async def get(self, base_uri: str, version: int) -> ExternalEntry | None:
        with self._lock:
            return self._entries.get((base_uri, version))

    async def latest(self, base_uri: str) -> ExternalEntry | None:
        entries = await self.list_after(base_uri, -1)
        return entries[-1] if entries else None

    async def list_after(self, base_uri: str, version: int) -> list[ExternalEntry]:
        with self._lock:
            found = [e for (b, v), e in self._entries.items() if b == base_uri and v > version]
        return sorted(found, key=lambda e: e.version)

    async def put_if_not_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        with self._lock:
            old = self._entries.get((base_uri, entry.version))
            if old is not None and old.path != entry.path:
                raise CommitConflictError(f"version {entry.version} of {base_uri} exists")
            self._entries[(base_uri, entry.version)] = entry

    async def put_if_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        with self._lock:
            if (base_uri, entry.version) not in self._entries:
                raise NotFoundError(f"version {entry.version} of {base_uri} has no entry")
            self._entries[(base_uri, entry.version)] = entry


def staged_manifest_path(version: int, scheme: ManifestNamingScheme) -> str:
    """A fresh staging path for the manifest of ``version`` (relative to the dataset root)."""
    return f"{manifest_path(version, scheme)}-{uuid.uuid4()}"


def parse_entry_path(rel_path: str, version: int) -> tuple[ManifestNamingScheme, bool]:
    """``(naming scheme, is_final)`` of an entry's manifest path (relative to the dataset).

    Final paths are ``_versions/<manifest name>``; staged ones add ``-<uuid>``. Anything else,
    or a path naming another version, is :class:`CorruptFileError`.
    """
    directory, _, name = rel_path.rpartition("/")
    final_name, dash, suffix = name.partition(".manifest-")
    if dash:
        final_name += ".manifest"
    parsed = parse_manifest_file_name(final_name) if directory == VERSIONS_DIR else None
    if parsed is None or (dash and not suffix):
        raise CorruptFileError(f"external manifest store entry for version {version} names "
                               f"{rel_path!r}, which is not a manifest path")
    if parsed[0] != version:
        raise CorruptFileError(f"external manifest store entry for version {version} names "
                               f"the manifest of version {parsed[0]} ({rel_path!r})")
    return parsed[1], not dash


class ExternalManifestCommitHandler(CommitHandler):
    """Commits through an :class:`ExternalManifestStore` (see the module documentation).

    Args:
        external: the external store.
        on_step: observer called as ``on_step(step, version)`` after each step of a commit or
            repair (names in :data:`COMMIT_STEPS`); for tests and instrumentation.
    """

    def __init__(self, external: ExternalManifestStore, *,
                 on_step: StepObserver | None = None) -> None:
        self.external = external
        self.on_step = on_step

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.external!r})"

    # -- paths -------------------------------------------------------------------------------
    @staticmethod
    def base_uri(store: DatasetStore) -> str:
        """The key of ``store``'s dataset in the external store (its path in the bucket)."""
        return store.root

    def _full(self, store: DatasetStore, rel_path: str) -> str:
        return f"{store.root}/{rel_path}" if store.root else rel_path

    def _relative(self, store: DatasetStore, entry: ExternalEntry) -> str:
        prefix = f"{store.root}/" if store.root else ""
        if not entry.path.startswith(prefix):
            raise CorruptFileError(f"external manifest store entry for version {entry.version} "
                                   f"of {store.uri} points outside the dataset: {entry.path!r}")
        return entry.path[len(prefix):]

    def _step(self, step: str, version: int) -> None:
        if self.on_step is not None:
            self.on_step(step, version)

    # -- resolution --------------------------------------------------------------------------
    async def latest(self, store: DatasetStore) -> ManifestLocation:
        entry = await self.external.latest(self.base_uri(store))
        if entry is not None:
            return await self._settled(store, entry)
        # Never committed through the external store: the object store knows the versions.
        location = await super().latest(store)
        await self._backfill(store, location)
        return location

    async def resolve(self, store: DatasetStore, version: int) -> ManifestLocation:
        entry = await self.external.get(self.base_uri(store), version)
        if entry is not None:
            return await self._settled(store, entry)
        location = await super().resolve(store, version)
        await self._backfill(store, location)
        return location

    async def list_versions(self, store: DatasetStore) -> list[ManifestLocation]:
        found = {loc.version: loc for loc in await super().list_versions(store)}
        newest = max(found, default=0)
        # Versions claimed but not yet copied to their final path are not in the listing.
        for entry in await self.external.list_after(self.base_uri(store), newest):
            found[entry.version] = await self._settled(store, entry)
        return [found[v] for v in sorted(found)]

    async def _settled(self, store: DatasetStore, entry: ExternalEntry) -> ManifestLocation:
        """The final location of an entry, repairing a staged one first."""
        rel = self._relative(store, entry)
        scheme, final = parse_entry_path(rel, entry.version)
        if final:
            return ManifestLocation(entry.version, rel, scheme, entry.size)
        try:
            return await self._finish(store, entry.version, rel, scheme, entry.size)
        except AlanceError as exc:
            raise type(exc)(
                f"version {entry.version} of {store.uri} is committed but its manifest is still "
                f"at the staging path {rel!r} and could not be moved to its final path; refusing "
                f"to load it: {exc}") from exc

    async def _backfill(self, store: DatasetStore, location: ManifestLocation) -> None:
        """Record a version found only in the object store (best effort)."""
        size = location.size
        if size is None:  # found by name only: the entry records the manifest's size
            with contextlib.suppress(AlanceError):
                size = (await store.head(location.path)).size
        entry = ExternalEntry(location.version, self._full(store, location.path), size)
        try:
            await self.external.put_if_not_exists(self.base_uri(store), entry)
        except CommitConflictError:
            pass  # recorded meanwhile (by a writer or another reader)
        except AlanceError as exc:
            log.warning("could not record version %d of %s in the external manifest store: "
                        "%s", location.version, store.uri, exc)

    # -- committing --------------------------------------------------------------------------
    async def commit(self, store: DatasetStore, version: int, manifest: bytes,
                     naming_scheme: ManifestNamingScheme) -> ManifestLocation:
        staged = staged_manifest_path(version, naming_scheme)
        # A manifest already at the final path was committed without the external store (or
        # before it was used): the version is taken, whatever the external store says.
        put, taken = await asyncio.gather(
            store.put(staged, manifest),
            store.exists(manifest_path(version, naming_scheme)), return_exceptions=True)
        for outcome in (put, taken):
            if isinstance(outcome, BaseException):
                if not isinstance(put, BaseException):
                    await self._discard(store, staged)
                raise outcome
        if taken:
            await self._discard(store, staged)
            raise CommitConflictError(f"version {version} of {store.uri} already exists")
        self._step("staged", version)
        entry = ExternalEntry(version, self._full(store, staged), len(manifest))
        try:
            await self.external.put_if_not_exists(self.base_uri(store), entry)
        except CommitConflictError:
            await self._discard(store, staged)
            raise
        # Any other failure leaves the staged manifest in place: the entry may exist.
        self._step("claimed", version)
        try:
            return await self._finish(store, version, staged, naming_scheme, len(manifest))
        except AlanceError as exc:
            # Committed already; readers finish the move. Report where the manifest is now.
            log.warning("version %d of %s is committed, but moving its manifest to the final "
                        "path failed (readers will retry): %s", version, store.uri, exc)
            return ManifestLocation(version, staged, naming_scheme, len(manifest))

    async def _discard(self, store: DatasetStore, staged: str) -> None:
        with contextlib.suppress(AlanceError):  # an orphaned staged file is only garbage
            await store.delete(staged)

    async def _finish(self, store: DatasetStore, version: int, staged: str,
                      scheme: ManifestNamingScheme, size: int | None) -> ManifestLocation:
        """Copy a claimed staged manifest to its final path, point the entry there, clean up."""
        final = manifest_path(version, scheme)
        try:
            await store.copy(staged, final, overwrite=True)
        except NotFoundError:
            # Someone else finished the move and deleted the staged copy.
            try:
                meta = await store.head(final)
            except NotFoundError:
                raise CorruptFileError(
                    f"version {version} of {store.uri}: neither the staged manifest {staged!r} "
                    f"nor the final manifest {final!r} exists") from None
            return ManifestLocation(version, final, scheme, meta.size, meta.last_modified)
        self._step("copied", version)
        if size is None:
            size = (await store.head(final)).size
        await self.external.put_if_exists(
            self.base_uri(store), ExternalEntry(version, self._full(store, final), size))
        self._step("finalized", version)
        await self._discard(store, staged)
        self._step("cleaned", version)
        return ManifestLocation(version, final, scheme, size)

