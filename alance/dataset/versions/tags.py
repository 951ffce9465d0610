"""Tags: names for versions, kept as small JSON files next to the manifests.

A tag ``NAME`` is the object ``_refs/tags/NAME.json`` under the dataset root. Its content is the
JSON Lance writes (pretty-printed, camelCase keys)::

    {"branch": null, "version": 3, "createdAt": "...Z", "updatedAt": "...Z",
     "manifestSize": 408, "metadata": {}}

``manifestSize`` is the byte size of the tagged version's manifest file. Older Lance releases
wrote only ``branch``, ``version`` and ``manifestSize``; both forms are read. A tagged version
is kept by :func:`~alance.dataset.versions.cleanup.cleanup_old_versions` however old it is, and a
tag
name can be given wherever a version number is accepted (``open_dataset(uri, version="v1")``).
"""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import json
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from alance.commit.handler import CommitHandler
from alance.errors import (
    AlreadyExistsError,
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    UnsupportedFeatureError,
)
from alance.io.store import DatasetStore

#: Directory (relative to the dataset root) that holds one ``NAME.json`` per tag.
TAGS_DIR = "_refs/tags"
TAG_SUFFIX = ".json"


@dataclass(frozen=True, eq=False)
class Tag(Mapping[str, Any]):
    """One tag: the version it names and what Lance records about it.

    Also a read-only mapping with the keys of pylance's tag dicts (``tag["version"]``,
    ``dict(tag)``), so code written for pylance's ``tags.list()`` works unchanged.
    """

    name: str
    version: int
    manifest_size: int
    branch: str | None = None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The tag as a plain dict (pylance's ``tags.list()`` value shape)."""
        return {"branch": self.branch, "version": self.version, "created_at": self.created_at,
                "updated_at": self.updated_at, "manifest_size": self.manifest_size,
                "metadata": dict(self.metadata)}

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(_TAG_KEYS)

    def __len__(self) -> int:
        return len(_TAG_KEYS)

    def __hash__(self) -> int:
        return hash((self.name, self.version, self.manifest_size))


_TAG_KEYS = ("branch", "version", "created_at", "updated_at", "manifest_size", "metadata")


def check_tag_name(name: str) -> None:
    """Refuse tag names Lance refuses (and any that could leave the tags directory)."""
    if not isinstance(name, str) or not name:
        raise InvalidInputError("a tag name must be a non-empty string")
    if not all(ch.isalnum() or ch in "._-" for ch in name):
        raise InvalidInputError(f"tag {name!r}: only letters, digits, '.', '-' and '_' are "
                                "allowed")
    if name.startswith(".") or name.endswith("."):
        raise InvalidInputError(f"tag {name!r} cannot begin or end with a dot")
    if name.endswith(".lock"):
        raise InvalidInputError(f"tag {name!r} cannot end with .lock")
    if ".." in name:
        raise InvalidInputError(f"tag {name!r} cannot have two consecutive dots")


def tag_path(name: str) -> str:
    """Path of a tag's file relative to the dataset root."""
    check_tag_name(name)
    return f"{TAGS_DIR}/{name}{TAG_SUFFIX}"


def _format_time(ns: int) -> str:
    """RFC 3339 in UTC with as many fractional digits as needed (0, 3, 6 or 9), as Lance."""
    seconds, nanos = divmod(ns, 1_000_000_000)
    base = dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if nanos == 0:
        return base + "Z"
    if nanos % 1_000_000 == 0:
        return f"{base}.{nanos // 1_000_000:03d}Z"
    if nanos % 1000 == 0:
        return f"{base}.{nanos // 1000:06d}Z"
    return f"{base}.{nanos:09d}Z"


def _parse_time(text: Any, where: str) -> dt.datetime | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise CorruptFileError(f"{where}: timestamp {text!r} is not a string")
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)", text)
    if m is None:
        raise CorruptFileError(f"{where}: timestamp {text!r} is not RFC 3339")
    micros = int((m.group(2) or "0").ljust(9, "0")[:6])
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        when = dt.datetime.fromisoformat(m.group(1) + zone)
    except ValueError as exc:
        raise CorruptFileError(f"{where}: timestamp {text!r}: {exc}") from exc
    return when.replace(microsecond=micros).astimezone(dt.UTC)


def encode_tag(version: int, manifest_size: int, *, created_ns: int | None = None,
               updated_ns: int | None = None, created_text: str | None = None,
               metadata: dict[str, str] | None = None) -> bytes:
    """The bytes of a tag file (pretty JSON with two-space indents, as Lance writes it)."""
    now = time.time_ns()
    created = created_text or _format_time(created_ns if created_ns is not None else now)
    body = {"branch": None, "version": int(version), "createdAt": created,
            "updatedAt": _format_time(updated_ns if updated_ns is not None else now),
            "manifestSize": int(manifest_size), "metadata": dict(metadata or {})}
    return json.dumps(body, indent=2).encode()


def decode_tag(name: str, data: bytes) -> Tag:
    """Read a tag file; :class:`CorruptFileError` when it is not a tag."""
    where = tag_path(name)
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise CorruptFileError(f"{where}: expected a JSON object")
    version, size = obj.get("version"), obj.get("manifestSize")
    for key, value in (("version", version), ("manifestSize", size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CorruptFileError(f"{where}: {key} must be a non-negative integer, "
                                   f"not {value!r}")
    branch = obj.get("branch")
    if branch is not None and not isinstance(branch, str):
        raise CorruptFileError(f"{where}: branch must be a string or null")
    metadata = obj.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CorruptFileError(f"{where}: metadata must map strings to strings")
    assert isinstance(version, int) and isinstance(size, int)
    return Tag(name, version, size, branch, _parse_time(obj.get("createdAt"), where),
               _parse_time(obj.get("updatedAt"), where), dict(metadata))


class Tags:
    """The tags of one dataset (``ds.tags``): list, get, create, update, delete.

    Tags live outside the version history: creating or deleting one commits no version.
    """

    def __init__(self, store: DatasetStore, handler: CommitHandler) -> None:
        self._store = store
        self._handler = handler

    async def list(self) -> dict[str, Tag]:
        """Every tag by name."""
        names = []
        for meta in await self._store.list(TAGS_DIR):
            rel = meta.path[len(TAGS_DIR) + 1:] if meta.path.startswith(TAGS_DIR + "/") else ""
            if rel.endswith(TAG_SUFFIX) and "/" not in rel:
                names.append(rel[: -len(TAG_SUFFIX)])
        found = await asyncio.gather(*(self._read(n) for n in sorted(names)))
        return {tag.name: tag for tag in found if tag is not None}

    async def list_ordered(self, order: str | None = "desc",
                           ) -> builtins.list[tuple[str, Tag]]:
        """``(name, tag)`` pairs sorted by version (``"desc"``, the default: newest first,
        or ``"asc"``), then by name, as pylance returns them."""
        order = order or "desc"
        if order not in ("asc", "desc"):
            raise InvalidInputError(f"order must be 'asc' or 'desc', not {order!r}")
        tags = list((await self.list()).values())
        tags.sort(key=lambda t: t.name)
        tags.sort(key=lambda t: t.version, reverse=order == "desc")
        return [(t.name, t) for t in tags]

    async def _read(self, name: str) -> Tag | None:
        try:
            check_tag_name(name)
            data = await self._store.get(tag_path(name))
        except (NotFoundError, InvalidInputError):
            return None
        return decode_tag(name, data)

    async def get(self, name: str) -> Tag:
        """One tag; :class:`NotFoundError` if it does not exist."""
        check_tag_name(name)
        tag = await self._read(name)
        if tag is None:
            raise NotFoundError(f"tag {name!r} does not exist in {self._store.uri}")
        return tag

    async def get_version(self, name: str) -> int:
        """The version a tag names."""
        return (await self.get(name)).version

    async def _manifest_size(self, version: int | str) -> tuple[int, int]:
        if isinstance(version, str):
            version = await self.get_version(version)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidInputError(f"a version must be a positive integer, not {version!r}")
        location = await self._handler.resolve(self._store, version)
        size = location.size
        if size is None:
            size = (await self._store.head(location.path)).size
        return version, size

    async def create(self, name: str, version: int | str) -> Tag:
        """Name ``version`` (a number, or another tag's name) ``name``.

        :class:`AlreadyExistsError` if the tag exists; :class:`NotFoundError` if the version
        does not.
        """
        path = tag_path(name)
        number, size = await self._manifest_size(version)
        data = encode_tag(number, size)
        try:
            await self._store.put_if_absent(path, data)
        except AlreadyExistsError:
            raise AlreadyExistsError(f"tag {name!r} already exists in {self._store.uri}"
                                     ) from None
        return decode_tag(name, data)

    async def update(self, name: str, version: int | str) -> Tag:
        """Point an existing tag at another version (keeps its creation time and metadata)."""
        old = await self.get(name)
        if old.branch is not None:
            raise UnsupportedFeatureError(f"tag {name!r} names a version of branch "
                                          f"{old.branch!r}; alance does not support branches")
        number, size = await self._manifest_size(version)
        raw = json.loads(await self._store.get(tag_path(name)))
        data = encode_tag(number, size, created_text=raw.get("createdAt"),
                          metadata=old.metadata)
        await self._store.put(tag_path(name), data)
        return decode_tag(name, data)

    async def delete(self, name: str) -> None:
        """Remove a tag (the version stays); :class:`NotFoundError` if it does not exist."""
        await self.get(name)
        await self._store.delete(tag_path(name))


async def resolve_version(store: DatasetStore, handler: CommitHandler,
                          version: int | str | None) -> int | None:
    """A version argument as a number: a tag name is looked up, ``None`` stays ``None``."""
    if version is None:
        return None
    if isinstance(version, str):
        tag = await Tags(store, handler).get(version)
        if tag.branch is not None:
            raise UnsupportedFeatureError(f"tag {version!r} names a version of branch "
                                          f"{tag.branch!r}; alance does not support branches")
        return tag.version
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidInputError(f"version must be an integer or a tag name, not {version!r}")
    return version
