"""Loading one version of a dataset: its manifest file, checked and decoded."""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler, ManifestLocation, manifest_path
from alance.dataset.versions.bases import base_store, find_base
from alance.errors import CorruptFileError
from alance.format.deletion import decode_deletion_file, deletion_file_kind, deletion_file_path
from alance.format.feature_flags import check_reader_flags
from alance.format.fragment_facts import FragmentFacts, checked_manifest_facts, fragment_facts
from alance.format.manifest import (
    ManifestFile,
    ManifestNamingScheme,
    decode_manifest_file,
    encode_manifest_file,
    fragment_entries,
    is_detached_version,
    manifest_message_bytes,
)
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore


@dataclass
class Snapshot:
    """The state of a dataset at one version (immutable once loaded)."""

    location: ManifestLocation
    manifest_file: ManifestFile

    def __reduce__(self) -> tuple[Any, ...]:
        # Generated protobuf classes do not pickle by reference; ship the manifest's bytes.
        return (_snapshot_from_bytes, (self.location, encode_manifest_file(self.manifest_file)))

    @property
    def manifest(self) -> table_pb2.Manifest:
        """The Manifest message of this version."""
        return self.manifest_file.manifest

    @property
    def version(self) -> int:
        """The version number."""
        return int(self.manifest.version)

    @cached_property
    def schema(self) -> LanceSchema:
        """The dataset schema at this version."""
        return LanceSchema.from_protos(self.manifest.fields, dict(self.manifest.schema_metadata))

    @property
    def fragments(self) -> list[table_pb2.DataFragment]:
        """Fragments of this version, in dataset order (a new list each call)."""
        return list(self._fragments)

    @cached_property
    def _fragments(self) -> tuple[table_pb2.DataFragment, ...]:
        return tuple(self.manifest.fragments)

    @property
    def data_storage_version(self) -> str:
        """The data file version of the dataset (``"0.1"`` for v0.1/v0.2 files, ``"2.0"``...)."""
        fmt = self.manifest.data_format
        return fmt.version if self.manifest.HasField("data_format") else "0.1"


def _snapshot_from_bytes(location: ManifestLocation, data: bytes) -> Snapshot:
    return Snapshot(location, decode_manifest_file(data))


async def load_snapshot(store: DatasetStore, handler: CommitHandler,
                        version: int | None = None) -> Snapshot:
    """Read and check the manifest of ``version`` (the latest when ``None``).

    Raises :class:`~alance.errors.DatasetNotFoundError`, :class:`~alance.errors.NotFoundError`
    for a missing version, :class:`~alance.errors.CorruptFileError` for a bad manifest, and
    :class:`~alance.errors.UnsupportedFeatureError` for reader feature flags alance lacks.
    """
    if version is None:
        location = await handler.latest(store)
    elif is_detached_version(version):  # outside the history: its file, not the handler's
        scheme = ManifestNamingScheme.V2
        location = ManifestLocation(version, manifest_path(version, scheme), scheme)
    else:
        location = await handler.resolve(store, version)
    return await load_snapshot_at(store, location)


async def load_latest(store: DatasetStore, handler: CommitHandler,
                      known: Snapshot | None = None) -> Snapshot:
    """The newest version; ``known`` itself (its manifest not read again) when it is that
    version, as a handle writing to its own dataset usually is."""
    location = await handler.latest(store)
    if known is not None and known.version == location.version:
        return known
    return await load_snapshot_at(store, location)


async def load_snapshot_at(store: DatasetStore, location: ManifestLocation) -> Snapshot:
    """Read and check the manifest at a known location.

    Besides decoding, the fragments' numbers are checked against each other
    (as :func:`~alance.format.validate.validate_manifest` does; fragments whose bytes passed
    before are not checked again): a corrupt count is a
    :class:`~alance.errors.CorruptFileError` here, not a silently wrong read later.
    """
    data = await store.get(location.path)
    manifest_file = decode_manifest_file(data)
    check_reader_flags(manifest_file.manifest.reader_feature_flags)
    digest = hashlib.blake2b(data, digest_size=16).digest()
    facts = _KNOWN.get(digest)  # the same bytes were checked (or committed) before
    if facts is None or len(facts) != len(manifest_file.manifest.fragments):
        # Fragments unchanged since a version checked before are not checked again.
        facts = checked_manifest_facts(manifest_file.manifest,
                                       fragment_entries(manifest_message_bytes(data)),
                                       location.path)
        _remember(digest, facts)
    manifest_file.facts = facts
    snapshot = Snapshot(location, manifest_file)
    await _count_unknown_deletions(store, snapshot)
    return snapshot


async def _count_unknown_deletions(store: DatasetStore, snapshot: Snapshot) -> None:
    """Fill in ``num_deleted_rows`` of deletion files whose manifest left it 0 (unknown: older
    writers did not record it), from the deletion files themselves, as pylance does.

    Every row count (``count_rows``, positions of ``take``) is computed from the manifest;
    reading a 0 as "nothing deleted" would count deleted rows. The next commit writes the
    counts (pylance's manifest migration).
    """
    mf = snapshot.manifest_file
    facts = mf.fragment_facts()
    positions = [i for i, f in enumerate(facts) if f.unknown_deletions]
    if not positions:
        return
    unknown = [snapshot.manifest.fragments[i] for i in positions]
    options = store.reopen_args[1] if store.reopen_args else None

    async def count(fragment: table_pb2.DataFragment) -> int:
        df = fragment.deletion_file
        kind = deletion_file_kind(df.file_type, f"fragment {fragment.id}")
        path = deletion_file_path(fragment.id, df.read_version, df.id, kind)
        where = store
        if df.HasField("base_id"):
            base = find_base(snapshot.manifest.base_paths, int(df.base_id),
                             f"fragment {fragment.id}'s deletion file")
            if not base.is_dataset_root:
                raise CorruptFileError(f"fragment {fragment.id}'s deletion file is under base "
                                       f"path {df.base_id}, which is not a dataset root")
            where = base_store(base, options)
        offsets = decode_deletion_file(kind, await where.get(path), path)
        if len(offsets) and int(offsets[-1]) >= fragment.physical_rows:
            raise CorruptFileError(f"{path}: deletes row {int(offsets[-1])} of a fragment with "
                                   f"{fragment.physical_rows} rows")
        return len(offsets)

    counts = await asyncio.gather(*(count(f) for f in unknown))
    updated = list(facts)
    for i, fragment, n in zip(positions, unknown, counts, strict=True):
        fragment.deletion_file.num_deleted_rows = n
        updated[i] = fragment_facts(fragment)
    mf.facts = tuple(updated)


#: Digests of manifest files that passed the checks (a service reopens the same versions over
#: and over), or that this process committed (built from a checked version and its own
#: writes), with the facts of their fragments.
_KNOWN: dict[bytes, tuple[FragmentFacts, ...]] = {}
#: Fragment facts the memory holds at most (summed over manifests), then it starts over.
MAX_KNOWN_FACTS = 1_000_000
_known_size = [0]


def _remember(digest: bytes, facts: tuple[FragmentFacts, ...]) -> None:
    if len(_KNOWN) >= 4096 or _known_size[0] + len(facts) > MAX_KNOWN_FACTS:
        _KNOWN.clear()
        _known_size[0] = 0
    _KNOWN[digest] = facts
    _known_size[0] += len(facts)


def committed_here(data: bytes, facts: tuple[FragmentFacts, ...]) -> None:
    """Note that this process committed the manifest file ``data`` (whose fragments have
    ``facts``): loading it back (the next commit's base) needs no check of its numbers."""
    _remember(hashlib.blake2b(data, digest_size=16).digest(), facts)
