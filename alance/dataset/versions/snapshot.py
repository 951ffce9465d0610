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
from alance.format.manifest import (
    ManifestFile,
    ManifestNamingScheme,
    decode_manifest_file,
    encode_manifest_file,
    is_detached_version,
)
from alance.format.schema import LanceSchema
from alance.format.validate import validate_manifest
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
    (:func:`~alance.format.validate.validate_manifest`): a corrupt count is a
    :class:`~alance.errors.CorruptFileError` here, not a silently wrong read later.
    """
    data = await store.get(location.path)
    manifest_file = decode_manifest_file(data)
    check_reader_flags(manifest_file.manifest.reader_feature_flags)
    digest = hashlib.blake2b(data, digest_size=16).digest()
    if digest not in _VALIDATED:  # the same bytes were checked before: same verdict
        validate_manifest(manifest_file.manifest, location.path)
        _remember(digest)
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
    unknown = [f for f in snapshot.manifest.fragments
               if f.HasField("deletion_file") and f.deletion_file.num_deleted_rows == 0]
    if not unknown:
        return
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
    for fragment, n in zip(unknown, counts, strict=True):
        fragment.deletion_file.num_deleted_rows = n


#: Digests of manifest files that passed :func:`validate_manifest` (a service reopens the
#: same versions over and over; checking 100 fragments costs more than the open itself), or
#: that this process committed (built from a checked version and its own writes).
_VALIDATED: set[bytes] = set()


def _remember(digest: bytes) -> None:
    if len(_VALIDATED) >= 4096:
        _VALIDATED.clear()
    _VALIDATED.add(digest)


def committed_here(data: bytes) -> None:
    """Note that this process committed the manifest file ``data``: loading it back (the next
    commit's base) needs no check of its numbers."""
    _remember(hashlib.blake2b(data, digest_size=16).digest())
