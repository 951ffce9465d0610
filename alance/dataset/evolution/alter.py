"""Dropping and altering columns (see :mod:`alance.dataset.evolution.new_columns` for the overview).

:func:`drop_columns` commits a Project (metadata only). :func:`alter_columns` renames, changes
nullability (checking the data when tightening) and changes types; a type change rewrites the
column into one new data file per fragment under a new field id, as pylance 14 does, and
commits a Merge whose fragments no longer list files holding nothing of the new schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.evolution.backfill import (
    DEFAULT_CONCURRENCY,
    Backfill,
    check_new_fields,
    check_writable_files,
    commit_merge,
    manifest_max_field_id,
)
from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext
from alance.dataset.query.scan import Scanner
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.filter._arrow_types import arrow_type_name
from alance.format.feature_flags import check_writer_flags
from alance.format.schema import LanceField, LanceSchema
from alance.io.store import DatasetStore
from alance.transaction.operations import new_project


def _find_path(fields: list[LanceField], path: str) -> tuple[list[LanceField], int]:
    """The sibling list holding the field at dotted ``path``, and its index in it."""
    parts = path.split(".")
    siblings = fields
    for depth, part in enumerate(parts):
        idx = next((i for i, f in enumerate(siblings) if f.name == part), None)
        if idx is None:
            raise InvalidInputError(f'Column "{path}" does not exist in the dataset')
        if depth == len(parts) - 1:
            return siblings, idx
        parent = siblings[idx]
        if parent.logical_type != "struct":
            raise InvalidInputError(f"column {path!r}: {part!r} is not a struct")
        siblings = parent.children
    raise AssertionError("unreachable")  # pragma: no cover


def _without_empty_structs(fields: list[LanceField]) -> list[LanceField]:
    out = []
    for f in fields:
        if f.logical_type == "struct":
            if not f.children:
                continue
            f.children = _without_empty_structs(f.children)
            if not f.children:
                continue
        out.append(f)
    return out


async def drop_columns(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                       columns: Sequence[str], *,
                       max_retries: int = DEFAULT_MAX_RETRIES) -> Snapshot:
    """Remove columns (dotted paths reach struct fields) from the schema (a Project)."""
    check_writer_flags(snapshot.manifest.writer_feature_flags)
    if isinstance(columns, str):
        columns = [columns]
    if not columns:
        raise InvalidInputError("no columns to drop")
    schema = copy.deepcopy(snapshot.schema)
    for path in columns:
        siblings, idx = _find_path(schema.fields, path)
        del siblings[idx]
    schema.fields = _without_empty_structs(schema.fields)
    if not schema.fields:
        raise InvalidInputError("cannot drop all columns from a dataset")
    txn = new_project(snapshot.version, schema)
    return await commit_transaction(store, handler, snapshot, txn, max_retries=max_retries)


# -- alter ---------------------------------------------------------------------------------------


def _cast_kind(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t):
        return "int"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_temporal(t):
        return "temporal"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "binary"
    if pa.types.is_decimal(t):
        return "decimal"
    return None


def castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Type changes alter_columns allows: within a kind (integers to integers, floats to
    floats, temporal to temporal, strings and binaries between their sizes, decimals) and
    lists of such types between list sizes."""
    lists = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    if any(f(source) for f in lists):
        return any(f(target) for f in lists) and castable(source.value_type, target.value_type)
    kind = _cast_kind(source)
    return kind is not None and kind == _cast_kind(target)


_ALTER_KEYS = frozenset({"path", "name", "nullable", "data_type"})


async def _has_nulls(ctx: ReadContext, path: str) -> bool:
    top, *rest = path.split(".")
    scanner = Scanner(ctx, columns=[top])
    async for batch in scanner.to_batches():
        column: Any = batch.column(0)
        if isinstance(column, pa.ExtensionArray):
            column = column.storage
        for part in rest:
            column = pc.struct_field(column, part)
        if column.null_count:
            return True
    return False


async def alter_columns(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                        alterations: Sequence[Mapping[str, Any]], *,
                        concurrency: int = DEFAULT_CONCURRENCY,
                        max_retries: int = DEFAULT_MAX_RETRIES) -> Snapshot:
    """Rename columns, change their nullability or their type (pylance's alterations).

    Each alteration is ``{"path": ..., "name"?: ..., "nullable"?: ..., "data_type"?: ...}``.
    Making a column non-nullable checks it holds no null. A type change rewrites the column
    (values cast without loss, else :class:`InvalidInputError`) under a new field id.
    """
    check_writer_flags(snapshot.manifest.writer_feature_flags)
    if not alterations:
        raise InvalidInputError("no alterations given")
    ctx = ReadContext(store, snapshot)
    schema = copy.deepcopy(snapshot.schema)
    next_id = manifest_max_field_id(snapshot.manifest) + 1
    casts: list[tuple[LanceField, LanceField]] = []  # (old top-level field, new)
    for alteration in alterations:
        if not isinstance(alteration, Mapping) or "path" not in alteration:
            raise InvalidInputError("each alteration is a dict with a 'path'")
        unknown = set(alteration) - _ALTER_KEYS
        if unknown:
            raise InvalidInputError(f"Unknown key: {sorted(unknown)[0]} (an alteration takes "
                                    f"{sorted(_ALTER_KEYS)})")
        if not set(alteration) & {"name", "nullable", "data_type"}:
            raise InvalidInputError("At least one of name, nullable, or data_type must be "
                                    f"specified for column {alteration['path']!r}")
        path = alteration["path"]
        siblings, idx = _find_path(schema.fields, path)
        field = siblings[idx]
        name = alteration.get("name")
        nullable = alteration.get("nullable")
        data_type = alteration.get("data_type")
        if nullable is not None and not isinstance(nullable, bool):
            raise InvalidInputError("'nullable' must be a bool")
        if nullable is False and field.nullable and await _has_nulls(ctx, path):
            raise InvalidInputError(f"column {path!r} holds nulls: it cannot be made "
                                    "non-nullable")
        if name is not None:
            if not isinstance(name, str) or not name:
                raise InvalidInputError("'name' must be a non-empty string")
            if any(s.name == name for i, s in enumerate(siblings) if i != idx):
                raise InvalidInputError(f"a column named {name!r} already exists")
            field.name = name
        if nullable is not None:
            field.nullable = nullable
        if data_type is not None:
            if "." in path:
                raise UnsupportedFeatureError("changing the type of a nested field is not "
                                              "supported yet")
            if not isinstance(data_type, pa.DataType):
                raise InvalidInputError("'data_type' must be a pyarrow DataType")
            if not castable(field.data_type, data_type):
                raise InvalidInputError(
                    f'Cannot cast column "{path}" from {arrow_type_name(field.data_type)} to '
                    f"{arrow_type_name(data_type)}")
            arrow = pa.schema([pa.field(field.name, data_type, field.nullable)])
            new = LanceSchema.from_arrow(arrow, first_id=next_id).fields[0]
            next_id = max(f.id for f in new.walk()) + 1
            original = next(f for f in snapshot.schema.fields if f.id == field.id)
            casts.append((original, new))
            siblings[idx] = new
    if len({f.name for f in schema.fields}) != len(schema.fields):
        raise InvalidInputError("alterations would give two columns the same name")
    if not casts:
        txn = new_project(snapshot.version, schema)
        return await commit_transaction(store, handler, snapshot, txn, max_retries=max_retries)
    return await _rewrite_columns(store, handler, snapshot, schema, casts, concurrency,
                                  max_retries)


async def _rewrite_columns(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                           schema: LanceSchema, casts: list[tuple[LanceField, LanceField]],
                           concurrency: int, max_retries: int) -> Snapshot:
    check_writable_files(snapshot.data_storage_version)
    new_schema = LanceSchema([new for _, new in casts])
    check_new_fields(new_schema, snapshot.data_storage_version)
    out_arrow = new_schema.to_arrow()

    async def cast(batch: pa.RecordBatch) -> pa.RecordBatch:
        columns = []
        for column, field in zip(batch.columns, out_arrow, strict=True):
            try:
                columns.append(pc.cast(column, field.type, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidInputError(f"column {field.name!r}: {_cast_failure(column, field)}"
                                        f" ({exc})") from exc
        return pa.RecordBatch.from_arrays(columns, schema=out_arrow)

    ctx = ReadContext(store, snapshot)
    backfill = Backfill(ctx, [old for old, _ in casts], [], cast, new_schema,
                        concurrency=concurrency)
    fragments = await backfill.run()
    keep_ids = set(schema.field_ids())
    for frag in fragments:
        kept = [f for f in frag.files
                if any(i != TOMBSTONE_FIELD_ID and i in keep_ids for i in f.fields)]
        del frag.files[:]
        frag.files.extend(kept)
    return await commit_merge(store, handler, snapshot, fragments, schema, max_retries)


__all__ = ["alter_columns", "castable", "drop_columns"]


#: Arrow's names of integer types (as pylance's messages spell them).
_INT_NAMES = {pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32", pa.int64(): "Int64",
              pa.uint8(): "UInt8", pa.uint16(): "UInt16", pa.uint32(): "UInt32",
              pa.uint64(): "UInt64"}


def _cast_failure(column: pa.Array, field: pa.Field) -> str:
    """Why ``column`` does not fit ``field``'s type, naming the first value that does not
    (pylance's wording for integers: "Can't cast value 1024 to type Int8")."""
    target = field.type
    if target in _INT_NAMES and (pa.types.is_integer(column.type)
                                 or pa.types.is_floating(column.type)):
        info = np.iinfo(target.to_pandas_dtype())
        values = column.drop_null().to_numpy(zero_copy_only=False)
        bad = values[(values < info.min) | (values > info.max)] if len(values) else values
        if len(bad):
            value = bad[0].item()
            return f"Can't cast value {value} to type {_INT_NAMES[target]}"
    return f"values do not fit {target}"
