"""Datasets whose files live under several roots (pylance's ``DatasetBasePath``).

A manifest's ``base_paths`` lists extra roots by id; a data file or deletion file whose
``base_id`` is set lives under that root instead of the dataset's own. A base that
``is_dataset_root`` holds files as a dataset does (``data/``, ``_deletions/``); any other
base holds data files directly. Bases are registered when a dataset is created
(``initial_bases``) and inherited by every later version; writes choose where new data
files go with ``target_bases`` (names or paths, used in turn, file by file).

Files are reached through a store opened on the base's URI with the dataset's storage
options; paths inside it are checked like any other (no escaping the base).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from alance._proto import table_pb2
from alance.errors import CorruptFileError, InvalidInputError
from alance.format.manifest import DATA_DIR
from alance.io.store import DatasetStore
from alance.io.uri import open_store

__all__ = ["DatasetBasePath", "WriteTarget", "base_store", "find_base", "registered",
           "resolve_targets", "target_of"]


@dataclass(frozen=True)
class DatasetBasePath:
    """An extra root of a dataset: its URI, an optional name, whether it is laid out as a
    dataset root, and its id (assigned when registered if ``None``)."""

    path: str
    name: str | None = None
    is_dataset_root: bool = False
    id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", os.fspath(self.path))
        if not self.path:
            raise InvalidInputError("a base path needs a path")
        if self.id is not None and not (isinstance(self.id, int) and 0 < self.id < 2**32):
            raise InvalidInputError(f"base path id must be in 1..2^32-1, not {self.id!r}")

    def to_proto(self, base_id: int) -> table_pb2.BasePath:
        """The manifest message, with id ``base_id``."""
        msg = table_pb2.BasePath(id=base_id, is_dataset_root=self.is_dataset_root,
                                 path=self.path)
        if self.name is not None:
            msg.name = self.name
        return msg

    @classmethod
    def from_proto(cls, msg: table_pb2.BasePath) -> DatasetBasePath:
        """A manifest message as an object."""
        return cls(msg.path, msg.name if msg.HasField("name") else None,
                   msg.is_dataset_root, int(msg.id))


def registered(initial: Iterable[DatasetBasePath],
               existing: Sequence[table_pb2.BasePath] = ()) -> list[table_pb2.BasePath]:
    """``initial`` bases as manifest messages, ids assigned after the ``existing`` ones (from
    1); names and ids must be unique."""
    out: list[table_pb2.BasePath] = []
    taken = {int(b.id) for b in existing}
    names = {b.name for b in existing if b.HasField("name")}
    next_id = max(taken, default=0) + 1
    for base in initial:
        if not isinstance(base, DatasetBasePath):
            raise InvalidInputError(f"initial_bases takes DatasetBasePath objects, not "
                                    f"{type(base).__name__}")
        base_id = base.id
        if base_id is None:
            while next_id in taken:
                next_id += 1
            base_id = next_id
        if base_id in taken:
            raise InvalidInputError(f"base path id {base_id} is used twice")
        if base.name is not None and base.name in names:
            raise InvalidInputError(f"base path name {base.name!r} is used twice")
        taken.add(base_id)
        if base.name is not None:
            names.add(base.name)
        out.append(base.to_proto(base_id))
    return out


def resolve_targets(references: Sequence[str],
                    bases: Sequence[table_pb2.BasePath]) -> list[table_pb2.BasePath]:
    """The bases ``references`` name (each a base's name or its path)."""
    out = []
    for ref in references:
        found = next((b for b in bases if (b.HasField("name") and b.name == ref)
                      or b.path == ref), None)
        if found is None:
            known = [b.name if b.HasField("name") else b.path for b in bases]
            raise InvalidInputError(f"base reference {ref!r} not found in the dataset's "
                                    f"bases {known}")
        out.append(found)
    return out


@dataclass(frozen=True)
class WriteTarget:
    """Where new data files go: a store, the directory inside it, and the base id the data
    files record (``None``: the dataset's own root)."""

    store: DatasetStore
    data_dir: str = DATA_DIR
    base_id: int | None = None

    def path(self, name: str) -> str:
        """The store path of data file ``name``."""
        return f"{self.data_dir}/{name}" if self.data_dir else name


def base_store(base: table_pb2.BasePath, storage_options: Mapping[str, Any] | None,
               ) -> DatasetStore:
    """A store rooted at ``base``'s URI (with the dataset's storage options)."""
    if not base.path:
        raise CorruptFileError(f"base path {base.id} has no path")
    return open_store(base.path, storage_options)


def target_of(base: table_pb2.BasePath, storage_options: Mapping[str, Any] | None,
              ) -> WriteTarget:
    """Where data files written to ``base`` go."""
    return WriteTarget(base_store(base, storage_options),
                       DATA_DIR if base.is_dataset_root else "", int(base.id))


def find_base(bases: Sequence[table_pb2.BasePath], base_id: int, what: str,
              ) -> table_pb2.BasePath:
    """The base with id ``base_id`` (:class:`CorruptFileError` naming ``what`` if none)."""
    for base in bases:
        if int(base.id) == base_id:
            return base
    raise CorruptFileError(f"{what} refers to base path {base_id}, which the manifest does "
                           "not list")
