"""Commit handlers: how a new manifest becomes the next version, atomically.

Contract every handler keeps:

* **Atomic visibility** — a version is either fully visible (its manifest can be read whole) or
  not visible at all.
* **Mutual exclusion** — of two writers committing the same version number, exactly one wins;
  the other gets :class:`~alance.errors.CommitConflictError` and nothing it wrote replaces the
  winner's manifest.
* **Consistent resolution** — after a commit returns, :meth:`CommitHandler.latest` in any
  process sees that version (or a newer one).

Handlers move manifest *bytes*; they do not interpret them.
"""

from __future__ import annotations

import abc
import datetime as dt
from dataclasses import dataclass

from alance.errors import (
    AlreadyExistsError,
    CommitConflictError,
    DatasetNotFoundError,
    NotFoundError,
)
from alance.format.manifest import (
    VERSIONS_DIR,
    ManifestNamingScheme,
    detached_manifest_file_name,
    is_detached_version,
    manifest_file_name,
    parse_manifest_file_name,
)
from alance.io.store import DatasetStore, ObjectMeta


@dataclass(frozen=True)
class ManifestLocation:
    """Where the manifest of one version lives."""

    version: int
    path: str  # relative to the dataset root
    naming_scheme: ManifestNamingScheme
    size: int | None = None
    last_modified: dt.datetime | None = None


def manifest_path(version: int, scheme: ManifestNamingScheme) -> str:
    """Path (relative to the dataset root) of the manifest of ``version`` (a detached
    version's: ``_versions/d{version}.manifest``)."""
    if is_detached_version(version):
        return f"{VERSIONS_DIR}/{detached_manifest_file_name(version)}"
    return f"{VERSIONS_DIR}/{manifest_file_name(version, scheme)}"


def _location(meta: ObjectMeta) -> ManifestLocation | None:
    name = meta.path.rsplit("/", 1)[-1]
    if meta.path != f"{VERSIONS_DIR}/{name}":
        return None
    parsed = parse_manifest_file_name(name)
    if parsed is None:
        return None
    version, scheme = parsed
    return ManifestLocation(version, meta.path, scheme, meta.size, meta.last_modified)


class CommitHandler(abc.ABC):
    """Resolves versions and commits manifests for one kind of store."""

    async def list_versions(self, store: DatasetStore) -> list[ManifestLocation]:
        """Every committed version, oldest first."""
        found: dict[int, ManifestLocation] = {}
        for meta in await store.list(VERSIONS_DIR):
            loc = _location(meta)
            if loc is not None:
                found[loc.version] = loc
        return [found[v] for v in sorted(found)]

    async def latest(self, store: DatasetStore) -> ManifestLocation:
        """The newest committed version; :class:`DatasetNotFoundError` if there is none.

        Read from the names in ``_versions/`` only (no sizes: on a local disk that is one
        ``listdir`` however many versions there are; every commit asks)."""
        best: tuple[int, int, str, ManifestNamingScheme] | None = None
        for path in await store.list_names(VERSIONS_DIR):
            name = path.rsplit("/", 1)[-1]
            parsed = parse_manifest_file_name(name) if path == f"{VERSIONS_DIR}/{name}" else None
            if parsed is None or is_detached_version(parsed[0]):
                continue
            version, scheme = parsed
            key = (version, int(scheme is ManifestNamingScheme.V2), path, scheme)
            if best is None or key[:2] > best[:2]:
                best = key
        if best is None:
            raise DatasetNotFoundError(f"no dataset at {store.uri}")
        return ManifestLocation(best[0], best[2], best[3])

    async def resolve(self, store: DatasetStore, version: int) -> ManifestLocation:
        """The location of one version; :class:`NotFoundError` if it does not exist."""
        for scheme in (ManifestNamingScheme.V2, ManifestNamingScheme.V1):
            path = manifest_path(version, scheme)
            try:
                meta = await store.head(path)
            except FileNotFoundError:
                continue
            return ManifestLocation(version, path, scheme, meta.size, meta.last_modified)
        if not await self.list_versions(store):
            raise DatasetNotFoundError(f"no dataset at {store.uri}")
        raise NotFoundError(f"version {version} of {store.uri} does not exist")

    @abc.abstractmethod
    async def commit(self, store: DatasetStore, version: int, manifest: bytes,
                     naming_scheme: ManifestNamingScheme) -> ManifestLocation:
        """Make ``manifest`` version ``version``, or raise :class:`CommitConflictError`."""


class ConditionalPutCommitHandler(CommitHandler):
    """Commits by creating the manifest object only if it does not exist yet.

    Works wherever the store has an atomic put-if-absent: local disks, memory, and S3-compatible
    stores that honour ``If-None-Match: *``.
    """

    async def commit(self, store: DatasetStore, version: int, manifest: bytes,
                     naming_scheme: ManifestNamingScheme) -> ManifestLocation:
        path = manifest_path(version, naming_scheme)
        other = manifest_path(version, ManifestNamingScheme.V1
                              if naming_scheme is ManifestNamingScheme.V2
                              else ManifestNamingScheme.V2)
        if await store.exists(other):
            raise CommitConflictError(f"version {version} of {store.uri} already exists")
        try:
            await store.put_if_absent(path, manifest)
        except AlreadyExistsError as exc:
            raise CommitConflictError(
                f"version {version} of {store.uri} was committed by another writer") from exc
        return ManifestLocation(version, path, naming_scheme, len(manifest))
