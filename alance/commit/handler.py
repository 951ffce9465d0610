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
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from alance.errors import (
    AlreadyExistsError,
    CommitConflictError,
    DatasetNotFoundError,
    NotFoundError,
)
from alance.format.manifest import (
    DETACHED_VERSION_MASK,
    MANIFEST_SUFFIX,
    U64_MAX,
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


#: Length of a V2 manifest name (20 digits and the suffix).
_V2_NAME_LEN = 20 + len(".manifest")
#: The V2 stem of the newest version that is not detached (stems sort like numbers; smaller
#: stems are newer versions, and those below this one are detached).
_V2_OLDEST_DETACHED_STEM = f"{U64_MAX - DETACHED_VERSION_MASK:020d}"


def newest_manifest(paths: Iterable[str]) -> ManifestLocation | None:
    """The newest committed (not detached) version among the paths of a listing of
    ``_versions/`` (``None`` if there is none); other names and deeper paths are ignored.

    V2 names are compared as strings (20 digits each: the smallest is the newest), so only
    the winners of each scheme are parsed: a listing of thousands of versions costs one
    pass of string tests."""
    return _newest(paths)[0]


def _newest(paths: Iterable[str]) -> tuple[ManifestLocation | None, bool]:
    """:func:`newest_manifest`, and whether committed manifests of both naming schemes were
    listed."""
    prefix = VERSIONS_DIR + "/"
    cut = len(prefix)
    return _newest_in([p[cut:] for p in paths
                       if p.startswith(prefix) and "/" not in p[cut:]])


#: Every committed (not detached) V2 manifest name sorts after this one (same length).
_V2_NEWEST_DETACHED_NAME = _V2_OLDEST_DETACHED_STEM + MANIFEST_SUFFIX


def _newest_in(names: list[str]) -> tuple[ManifestLocation | None, bool]:
    """:func:`_newest` of the names (last segments) of the objects in ``_versions/``.

    A few passes of string tests over the names, in C loops (every commit lists the
    directory: thousands of versions must stay cheap)."""
    manifests = [n for n in names if n.endswith(MANIFEST_SUFFIX)]
    v2 = [n for n in manifests if len(n) == _V2_NAME_LEN]
    others = [n for n in manifests if len(n) != _V2_NAME_LEN] if len(v2) < len(manifests) else []
    best: tuple[int, int, str, ManifestNamingScheme] | None = None
    # Same length and suffix: names compare as their stems; the smallest stem is the newest.
    committed = [n for n in v2 if n > _V2_NEWEST_DETACHED_NAME]
    if committed:
        name = min(committed)
        parsed = parse_manifest_file_name(name)
        if parsed is not None:  # a 20-digit stem
            best = (parsed[0], 1, f"{VERSIONS_DIR}/{name}", parsed[1])
        else:  # not all digits: look at every such name
            others.extend(v2)
    schemes = {best[3]} if best is not None else set()
    for name in others:
        parsed = parse_manifest_file_name(name)
        if parsed is None or is_detached_version(parsed[0]):
            continue
        version, scheme = parsed
        schemes.add(scheme)
        key = (version, int(scheme is ManifestNamingScheme.V2), f"{VERSIONS_DIR}/{name}",
               scheme)
        if best is None or key[:2] > best[:2]:
            best = key
    found = ManifestLocation(best[0], best[2], best[3]) if best is not None else None
    return found, len(schemes) > 1


@dataclass(frozen=True)
class _Listed:
    """What the last listing of a store's ``_versions/`` in this process showed."""

    version: int
    scheme: ManifestNamingScheme
    mixed: bool


#: The last listing of each store (see :meth:`ConditionalPutCommitHandler.commit`).
_LISTED: weakref.WeakKeyDictionary[DatasetStore, _Listed] = weakref.WeakKeyDictionary()


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
        found, mixed = _newest_in(await store.names_in(VERSIONS_DIR))
        if found is None:
            _LISTED.pop(store, None)
            raise DatasetNotFoundError(f"no dataset at {store.uri}")
        _LISTED[store] = _Listed(found.version, found.naming_scheme, mixed)
        return found

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

    The create is conditional on the name of one naming scheme; the version must not exist
    under the other either. That is checked with a request, unless the newest listing of
    the store in this process already answers: a version at or below the newest one listed
    exists (a conflict, no request), and the version right after it, in a directory whose
    manifests all use the scheme being committed with, can only be taken under that
    scheme's name (writers commit with the scheme of the newest manifest), which the
    conditional create itself guards.
    """

    async def commit(self, store: DatasetStore, version: int, manifest: bytes,
                     naming_scheme: ManifestNamingScheme) -> ManifestLocation:
        path = manifest_path(version, naming_scheme)
        other = manifest_path(version, ManifestNamingScheme.V1
                              if naming_scheme is ManifestNamingScheme.V2
                              else ManifestNamingScheme.V2)
        listed = _LISTED.get(store) if version > 1 else None  # a create always asks
        if listed is not None and version <= listed.version:
            raise CommitConflictError(f"version {version} of {store.uri} already exists")
        known_free = (listed is not None and not listed.mixed
                      and listed.scheme is naming_scheme and version == listed.version + 1)
        if not known_free and await store.exists(other):
            raise CommitConflictError(f"version {version} of {store.uri} already exists")
        try:
            await store.put_if_absent(path, manifest)
        except AlreadyExistsError as exc:
            raise CommitConflictError(
                f"version {version} of {store.uri} was committed by another writer") from exc
        return ManifestLocation(version, path, naming_scheme, len(manifest))
