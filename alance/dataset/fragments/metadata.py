"""Fragment metadata as plain Python values, with pylance's names and JSON form.

:class:`FragmentMetadata` (and its :class:`DataFile` / :class:`DeletionFile` parts) is what a
writer task hands to the committer: picklable, comparable, convertible to the JSON that
pylance's ``FragmentMetadata.to_json`` produces (so either library reads the other's), and to
and from the ``DataFragment`` protobuf message alance's transaction layer commits. No IO.
"""

from __future__ import annotations

import base64
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from alance._proto import table_pb2
from alance.errors import InvalidInputError

__all__ = ["DataFile", "DeletionFile", "FragmentMetadata", "RowIdMeta"]

_DELETION_TYPES = {"array": table_pb2.DeletionFile.ARROW_ARRAY,
                   "bitmap": table_pb2.DeletionFile.BITMAP}
_DELETION_NAMES = {v: k for k, v in _DELETION_TYPES.items()}


class _CallablePath(str):
    """A ``str`` that can also be called (pylance's ``DataFile.path()`` was a method)."""

    __slots__ = ()

    def __call__(self) -> str:
        warnings.warn("DataFile.path() is deprecated, use DataFile.path",
                      DeprecationWarning, stacklevel=2)
        return str(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))


class DataFile:
    """One data file of a fragment: its path (relative to ``data/``), the field ids it holds
    and where their columns are, and its format version."""

    __slots__ = ("_path", "base_id", "column_indices", "fields", "file_major_version",
                 "file_minor_version", "file_size_bytes")

    def __init__(self, path: str, fields: list[int], column_indices: list[int] | None = None,
                 file_major_version: int = 0, file_minor_version: int = 0,
                 file_size_bytes: int | None = None, base_id: int | None = None) -> None:
        self._path = str(path)
        self.fields = [int(f) for f in fields]
        self.column_indices = [int(c) for c in column_indices or []]
        self.file_major_version = int(file_major_version)
        self.file_minor_version = int(file_minor_version)
        self.file_size_bytes = file_size_bytes
        self.base_id = base_id

    @property
    def path(self) -> str:
        """The file's path relative to the dataset's ``data/`` directory (a string; calling
        it, pylance's old spelling ``path()``, still works with a DeprecationWarning)."""
        return _CallablePath(self._path)

    def asdict(self) -> dict[str, Any]:
        """The JSON form pylance uses."""
        return {"path": self._path, "fields": list(self.fields),
                "column_indices": list(self.column_indices),
                "file_major_version": self.file_major_version,
                "file_minor_version": self.file_minor_version,
                "file_size_bytes": self.file_size_bytes, "base_id": self.base_id}

    def _key(self) -> tuple[Any, ...]:
        return tuple(self.asdict().values())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DataFile) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (DataFile, tuple(self.asdict().values()))

    def __repr__(self) -> str:
        return (f"DataFile(path='{self._path}', fields={self.fields}, "
                f"column_indices={self.column_indices}, "
                f"file_major_version={self.file_major_version}, "
                f"file_minor_version={self.file_minor_version}, "
                f"file_size_bytes={self.file_size_bytes})")

    @classmethod
    def from_proto(cls, msg: table_pb2.DataFile) -> DataFile:
        """From a ``DataFile`` protobuf message."""
        return cls(msg.path, list(msg.fields), list(msg.column_indices),
                   msg.file_major_version, msg.file_minor_version,
                   msg.file_size_bytes or None,
                   msg.base_id if msg.HasField("base_id") else None)

    def to_proto(self) -> table_pb2.DataFile:
        """As a ``DataFile`` protobuf message."""
        msg = table_pb2.DataFile(path=self._path, fields=self.fields,
                                 column_indices=self.column_indices,
                                 file_major_version=self.file_major_version,
                                 file_minor_version=self.file_minor_version,
                                 file_size_bytes=self.file_size_bytes or 0)
        if self.base_id is not None:
            msg.base_id = self.base_id
        return msg


@dataclass(frozen=True)
class DeletionFile:
    """The tombstones of a fragment: ``_deletions/{fragment}-{read_version}-{id}.{arrow|bin}``.
    ``file_type`` is ``"array"`` or ``"bitmap"``."""

    read_version: int
    id: int
    file_type: str
    num_deleted_rows: int
    base_id: int | None = None

    def __post_init__(self) -> None:
        if self.file_type not in _DELETION_TYPES:
            raise InvalidInputError(f"deletion file_type must be 'array' or 'bitmap', "
                                    f"not {self.file_type!r}")

    def asdict(self) -> dict[str, Any]:
        """The JSON form pylance uses."""
        return {"read_version": self.read_version, "id": self.id,
                "file_type": self.file_type, "num_deleted_rows": self.num_deleted_rows,
                "base_id": self.base_id}

    def path(self, fragment_id: int) -> str:
        """The file's path relative to the dataset root."""
        suffix = "arrow" if self.file_type == "array" else "bin"
        return f"_deletions/{fragment_id}-{self.read_version}-{self.id}.{suffix}"

    @classmethod
    def from_proto(cls, msg: table_pb2.DeletionFile) -> DeletionFile:
        """From a ``DeletionFile`` protobuf message."""
        return cls(msg.read_version, msg.id, _DELETION_NAMES[msg.file_type],
                   msg.num_deleted_rows, msg.base_id if msg.HasField("base_id") else None)

    def to_proto(self) -> table_pb2.DeletionFile:
        """As a ``DeletionFile`` protobuf message."""
        msg = table_pb2.DeletionFile(file_type=_DELETION_TYPES[self.file_type],
                                     read_version=self.read_version, id=self.id,
                                     num_deleted_rows=self.num_deleted_rows)
        if self.base_id is not None:
            msg.base_id = self.base_id
        return msg


@dataclass(frozen=True)
class RowIdMeta:
    """A fragment's stable row ids: the serialised ``RowIdSequence`` kept inline in the
    manifest (``inline``), or the location of an external file holding it."""

    inline: bytes | None = None
    external_path: str | None = None
    external_offset: int = 0
    external_size: int = 0

    def asdict(self) -> dict[str, Any]:
        """The JSON form pylance writes: ``{"Inline": [byte, ...]}`` or
        ``{"External": {"path", "offset", "size"}}``."""
        if self.inline is not None:
            return {"Inline": list(self.inline)}
        return {"External": {"path": self.external_path, "offset": self.external_offset,
                             "size": self.external_size}}

    def json(self) -> str:
        """:meth:`asdict` as a JSON string."""
        return json.dumps(self.asdict())

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RowIdMeta:
        """Inverse of :meth:`asdict`."""
        inline = data.get("Inline", data.get("inline"))
        if inline is not None:
            return cls(inline=bytes(inline) if isinstance(inline, list)
                       else base64.b64decode(inline))
        ext = data.get("External", data.get("external")) or {}
        return cls(None, ext.get("path"), int(ext.get("offset", 0)), int(ext.get("size", 0)))

    @classmethod
    def from_json(cls, text: str) -> RowIdMeta:
        """Inverse of :meth:`json`."""
        return cls.from_dict(json.loads(text))


@dataclass
class FragmentMetadata:
    """One fragment: its id, data files, row count before deletions, deletion file and
    stable row ids. ``id`` 0 on a fragment not yet committed means "assign at commit"."""

    id: int
    files: list[DataFile]
    physical_rows: int
    deletion_file: DeletionFile | None = None
    row_id_meta: RowIdMeta | None = None
    created_at_version_meta: Any = None
    last_updated_at_version_meta: Any = None
    overlays: list[Any] = field(default_factory=list)

    @property
    def num_deletions(self) -> int:
        """Rows deleted from this fragment."""
        return 0 if self.deletion_file is None else self.deletion_file.num_deleted_rows

    @property
    def num_rows(self) -> int:
        """Rows left after deletions."""
        return self.physical_rows - self.num_deletions

    def data_files(self) -> list[DataFile]:
        """The data files (pylance's deprecated spelling of :attr:`files`)."""
        return self.files

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict, in pylance's form."""
        return {"id": self.id, "files": [f.asdict() for f in self.files], "overlays": [],
                "physical_rows": self.physical_rows,
                "deletion_file": None if self.deletion_file is None
                else self.deletion_file.asdict(),
                "row_id_meta": None if self.row_id_meta is None else self.row_id_meta.asdict(),
                "created_at_version_meta": None, "last_updated_at_version_meta": None}

    @staticmethod
    def from_json(json_data: str | Mapping[str, Any]) -> FragmentMetadata:
        """Inverse of :meth:`to_json` (a JSON string, as pylance takes, or the dict)."""
        data = json.loads(json_data) if isinstance(json_data, str | bytes) else json_data
        try:
            deletion = data.get("deletion_file")
            row_ids = data.get("row_id_meta")
            return FragmentMetadata(
                id=int(data["id"]),
                files=[DataFile(**f) for f in data["files"]],
                physical_rows=int(data["physical_rows"]),
                deletion_file=None if deletion is None else DeletionFile(**deletion),
                row_id_meta=None if row_ids is None else RowIdMeta.from_dict(row_ids))
        except (KeyError, TypeError) as exc:
            raise InvalidInputError(f"not fragment metadata JSON: {exc}") from exc

    @classmethod
    def from_proto(cls, msg: table_pb2.DataFragment) -> FragmentMetadata:
        """From a ``DataFragment`` protobuf message."""
        row_ids: RowIdMeta | None = None
        if msg.WhichOneof("row_id_sequence") == "inline_row_ids":
            row_ids = RowIdMeta(inline=bytes(msg.inline_row_ids))
        elif msg.WhichOneof("row_id_sequence") == "external_row_ids":
            ext = msg.external_row_ids
            row_ids = RowIdMeta(None, ext.path, ext.offset, ext.size)
        return cls(msg.id, [DataFile.from_proto(f) for f in msg.files], msg.physical_rows,
                   DeletionFile.from_proto(msg.deletion_file)
                   if msg.HasField("deletion_file") else None, row_ids,
                   _version_meta(msg, "created_at"), _version_meta(msg, "last_updated_at"))

    def to_proto(self) -> table_pb2.DataFragment:
        """As a ``DataFragment`` protobuf message."""
        msg = table_pb2.DataFragment(id=self.id, files=[f.to_proto() for f in self.files],
                                     physical_rows=self.physical_rows)
        if self.deletion_file is not None:
            msg.deletion_file.CopyFrom(self.deletion_file.to_proto())
        if self.row_id_meta is not None:
            if self.row_id_meta.inline is not None:
                msg.inline_row_ids = self.row_id_meta.inline
            else:
                ext = msg.external_row_ids
                ext.path = self.row_id_meta.external_path or ""
                ext.offset = self.row_id_meta.external_offset
                ext.size = self.row_id_meta.external_size
        _set_version_meta(msg, "created_at", self.created_at_version_meta)
        _set_version_meta(msg, "last_updated_at", self.last_updated_at_version_meta)
        return msg


def _version_meta(msg: table_pb2.DataFragment, kind: str) -> tuple[Any, ...] | None:
    """A fragment's per-row version sequence, kept opaque: ``("inline", bytes)`` or
    ``("external", path, offset, size)`` (carried through unchanged, never interpreted)."""
    which = msg.WhichOneof(f"{kind}_version_sequence")  # type: ignore[call-overload]
    if which is None:
        return None
    value = getattr(msg, which)
    if which.startswith("inline"):
        return ("inline", bytes(value))
    return ("external", value.path, value.offset, value.size)


def _set_version_meta(msg: table_pb2.DataFragment, kind: str, meta: Any) -> None:
    if not isinstance(meta, tuple):
        return  # None, or a value only the commit derives
    if meta[0] == "inline":
        setattr(msg, f"inline_{kind}_versions", meta[1])
    else:
        ext = getattr(msg, f"external_{kind}_versions")
        ext.path, ext.offset, ext.size = meta[1], meta[2], meta[3]
