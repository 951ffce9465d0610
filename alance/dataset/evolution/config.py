"""Dataset config and metadata: four string maps, changed by UpdateConfig transactions.

A Lance dataset carries four maps of strings, all stored in the manifest:

* the **config** (``Manifest.config``): settings for engines, e.g. ``lance.auto_cleanup.*``
  or ``lance.compaction.*``;
* the **table metadata** (``Manifest.table_metadata``): free-form user metadata;
* the **schema metadata** (``Manifest.schema_metadata``): the Arrow schema's metadata;
* the **field metadata** (``Field.metadata`` of each schema field): an Arrow field's metadata.

Each change is committed as one ``UpdateConfig`` transaction holding an ``UpdateMap`` per map
changed (fields 6-9 of the message): entries set a key (a value) or remove it (no value), and
``replace`` makes the entries the whole new map (entries without a value are then ignored).
That is the form pylance 14 writes and reads. Concurrent commits are checked by Lance's rules
(:mod:`alance.transaction.conflicts`): two config updates conflict when one sets a key the
other sets or removes, or when both change the schema metadata or the same field's metadata.

The values returned are the maps of the version committed (after any rebase over concurrent
commits), as pylance returns them.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import (
    DEFAULT_MAX_RETRIES,
    commit_transaction,
)
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import ArgumentTypeError, NotFoundError
from alance.format.schema import LanceField, LanceSchema
from alance.io.store import DatasetStore
from alance.transaction.operations import new_update_config

__all__ = ["ArgumentTypeError", "MetadataUpdate", "check_changes", "check_keys",
           "commit_metadata_update", "config_of", "field_changes", "field_metadata_of",
           "find_field", "schema_metadata_of", "split_field_path", "table_metadata_of",
           "warn_deprecated"]

log = logging.getLogger(__name__)

#: A field named by its path (``"a"``, ``"s.x"``, ``"`odd.name`.x"``) or by its id.
FieldRef = str | int
MapChanges = Mapping[str, str | None]


@dataclass(frozen=True)
class MetadataUpdate:
    """What an async config / metadata update committed: the new version (``dataset``) and
    the whole map as that version holds it (``values``)."""

    dataset: Any
    values: dict[str, str]

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def warn_deprecated(old: str, new: str) -> None:
    """Warn that pylance deprecated ``old`` in favour of ``new`` (points at the API's caller)."""
    warnings.warn(f"{old} is deprecated. Use {new} instead.", DeprecationWarning, stacklevel=3)


# -- reading -------------------------------------------------------------------------------------


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def config_of(snapshot: Snapshot) -> dict[str, str]:
    """The config map of a version."""
    return dict(snapshot.manifest.config)


def table_metadata_of(snapshot: Snapshot) -> dict[str, str]:
    """The table metadata of a version."""
    return dict(snapshot.manifest.table_metadata)


def schema_metadata_of(snapshot: Snapshot) -> dict[str, str]:
    """The schema metadata of a version, as text."""
    return {k: _text(v) for k, v in snapshot.manifest.schema_metadata.items()}


def field_metadata_of(field: LanceField) -> dict[str, str]:
    """One field's metadata, as text."""
    return {k: _text(v) for k, v in field.metadata.items()}


# -- arguments -----------------------------------------------------------------------------------


def check_changes(values: Any, what: str = "values") -> dict[str, str | None]:
    """``values`` as a dict of key -> value (``None``: remove the key), or ArgumentTypeError."""
    if not isinstance(values, Mapping):
        raise ArgumentTypeError(f"{what} must be a dict of str to str or None, "
                                f"not {type(values).__name__}")
    out: dict[str, str | None] = {}
    for key, value in values.items():
        if not isinstance(key, str):
            raise ArgumentTypeError(f"{what}: keys must be str, got {type(key).__name__}")
        if value is not None and not isinstance(value, str):
            raise ArgumentTypeError(f"{what}[{key!r}]: values must be str or None, "
                                    f"got {type(value).__name__}")
        out[key] = value
    return out


def check_keys(keys: Any) -> list[str]:
    """A list of config keys (a lone string is refused, as pylance does)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise ArgumentTypeError(f"keys must be a list of str, not {type(keys).__name__}")
    out = list(keys)
    for key in out:
        if not isinstance(key, str):
            raise ArgumentTypeError(f"keys must be str, got {type(key).__name__}")
    return out


def split_field_path(path: str) -> list[str] | None:
    """The names along a dotted field path; a name holding dots or backticks is quoted with
    backticks (a backtick inside doubled). ``None`` if the path is malformed."""
    names: list[str] = []
    current: list[str] = []
    quoted = was_quoted = False
    i = 0
    while i < len(path):
        ch = path[i]
        if quoted:
            if ch == "`" and path[i + 1:i + 2] == "`":
                current.append("`")
                i += 1
            elif ch == "`":
                quoted = False
                if i + 1 < len(path) and path[i + 1] != ".":
                    return None
            else:
                current.append(ch)
        elif ch == "`":
            if current:
                return None
            quoted = was_quoted = True
        elif ch == ".":
            if not current and not was_quoted:
                return None
            names.append("".join(current))
            current, was_quoted = [], False
        else:
            current.append(ch)
        i += 1
    if quoted or (not current and not was_quoted):
        return None
    names.append("".join(current))
    return names


def _paths(schema: LanceSchema) -> list[str]:
    out: list[str] = []

    def visit(field: LanceField, prefix: str) -> None:
        path = f"{prefix}{field.name}"
        out.append(path)
        for child in field.children:
            visit(child, path + ".")

    for top in schema.fields:
        visit(top, "")
    return out


def find_field(schema: LanceSchema, ref: FieldRef) -> LanceField:
    """The field at path ``ref`` (a str) or with id ``ref`` (an int); NotFoundError if none."""
    if isinstance(ref, bool) or not isinstance(ref, (str, int)):
        raise ArgumentTypeError(f"a field is named by its path (str) or id (int), "
                                f"not {type(ref).__name__}")
    if isinstance(ref, int):
        for field in schema.walk():
            if field.id == ref:
                return field
        raise NotFoundError(f"Field ID {ref} not found in schema")
    names = split_field_path(ref)
    siblings = schema.fields
    found: LanceField | None = None
    for name in names or []:
        found = next((f for f in siblings if f.name == name), None)
        if found is None:
            break
        siblings = found.children
    if not names or found is None:
        raise NotFoundError(f"Field {ref!r} not found. Available fields: {_paths(schema)}")
    return found


def field_changes(schema: LanceSchema, updates: Any) -> dict[int, dict[str, str | None]]:
    """``{field path or id: {key: value or None}}`` as changes by field id."""
    if not isinstance(updates, Mapping):
        raise ArgumentTypeError("field_updates must be a dict of field path (or id) to a dict "
                                f"of metadata, not {type(updates).__name__}")
    out: dict[int, dict[str, str | None]] = {}
    for ref, values in updates.items():
        changes = check_changes(values, f"field_updates[{ref!r}]")
        out[find_field(schema, ref).id] = changes
    return out


# -- committing ----------------------------------------------------------------------------------


async def commit_metadata_update(store: DatasetStore, handler: CommitHandler,
                                 snapshot: Snapshot, *,
                                 config: MapChanges | None = None,
                                 table_metadata: MapChanges | None = None,
                                 schema_metadata: MapChanges | None = None,
                                 field_metadata: Mapping[int, MapChanges] | None = None,
                                 replace: bool = False,
                                 max_retries: int = DEFAULT_MAX_RETRIES) -> Snapshot:
    """Commit one UpdateConfig read from ``snapshot``; returns the new version.

    Each given map is merged in (or, with ``replace``, replaces the whole map). Field
    metadata is keyed by field id (see :func:`field_changes`).
    """
    if not isinstance(replace, bool):
        raise ArgumentTypeError(f"replace must be a bool, not {type(replace).__name__}")
    txn = new_update_config(snapshot.version, config=config, table_metadata=table_metadata,
                            schema_metadata=schema_metadata, field_metadata=field_metadata,
                            replace=replace)
    return await commit_transaction(store, handler, snapshot, txn,
                                    data_storage_version=snapshot.data_storage_version,
                                    max_retries=max_retries)
