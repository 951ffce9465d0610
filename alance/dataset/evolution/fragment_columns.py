"""Column changes to ONE fragment, uncommitted (pylance's ``LanceFragment.merge`` and
``LanceFragment.update_columns``).

Both run the :class:`~alance.dataset.evolution.backfill.Backfill` machinery on a single fragment:
the
new values are joined to the fragment's rows by a key column (``_rowid`` by default for
updates) and written as one new data file of the fragment. Nothing is committed: the caller
commits the returned metadata with ``LanceOperation.Merge`` / ``LanceOperation.Update``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.dataset.evolution.backfill import (
    Backfill,
    check_new_fields,
    check_writable_files,
    only_new_files,
)
from alance.dataset.evolution.new_columns import _as_table, _new_fields, plan_columns
from alance.dataset.fragments.read import TOMBSTONE_FIELD_ID, ReadContext
from alance.dataset.fragments.write import delete_fragment_files
from alance.dataset.query.row_ids import ROW_ID, SYSTEM_COLUMNS
from alance.errors import InvalidInputError, SchemaMismatchError
from alance.format.schema import LanceField, LanceSchema

__all__ = ["merge_fragment", "merge_fragment_columns", "update_fragment_columns"]


def _keys(table: pa.Table, right_on: str, key_type: pa.DataType) -> pa.Array:
    if right_on not in table.column_names:
        raise InvalidInputError(f"{right_on!r} is not a column of the new data")
    keys = table.column(right_on)
    try:
        keys = keys.cast(key_type) if not keys.type.equals(key_type) else keys
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"keys of type {keys.type} cannot be compared with the key "
                                  f"column ({key_type})") from exc
    return keys.combine_chunks()


def _key_source(ctx: ReadContext, left_on: str) -> tuple[list[LanceField], list[str], pa.DataType]:
    """What Backfill reads for the key: a data column, or a system column."""
    if left_on in SYSTEM_COLUMNS:
        return [], [left_on], pa.uint64()
    key = ctx.snapshot.schema.field(left_on)
    return [key], [], key.data_type


async def merge_fragment(ctx: ReadContext, fragment: table_pb2.DataFragment, data: Any,
                         left_on: str, right_on: str | None = None,
                         schema: pa.Schema | None = None,
                         ) -> tuple[table_pb2.DataFragment, LanceSchema]:
    """Add the columns of ``data`` to ``fragment`` (left join on ``left_on`` = ``right_on``):
    the fragment with one more data file, and the dataset schema with the new columns."""
    right_on = right_on or left_on
    table = await _as_table(data, schema)
    read_fields, system, key_type = _key_source(ctx, left_on)
    keys = _keys(table, right_on, key_type)
    right = table.drop_columns([right_on])
    if right.num_columns == 0:
        raise InvalidInputError("merge: the new data has no column besides the key")
    new_fields = _new_fields(ctx.snapshot, right.schema)
    check_writable_files(ctx.snapshot.data_storage_version)
    check_new_fields(new_fields, ctx.snapshot.data_storage_version)

    async def join(batch: pa.RecordBatch) -> pa.Table:
        return right.take(pc.index_in(batch.column(0), value_set=keys))

    out = await Backfill(ctx, read_fields, system, join, new_fields).run_fragment(fragment)
    base = ctx.snapshot.schema
    merged = LanceSchema(copy.deepcopy(base.fields) + new_fields.fields, dict(base.metadata))
    return out, merged


async def merge_fragment_columns(ctx: ReadContext, fragment: table_pb2.DataFragment,
                                 value_func: Any, columns: Sequence[str] | None = None,
                                 batch_size: int | None = None,
                                 ) -> tuple[table_pb2.DataFragment, LanceSchema]:
    """Add computed columns to ``fragment`` (``value_func`` as ``add_columns`` takes it): the
    fragment with one more data file, and the dataset schema with the new columns."""
    if getattr(value_func, "checkpoint_file", None) is not None:
        raise InvalidInputError("A checkpoint file cannot be used with merge_columns (a "
                                "fragment's columns are computed in one go): use "
                                "add_columns, or a batch_udf without checkpoint_file")
    planned = await plan_columns(ctx, value_func, columns, batch_size)
    base = ctx.snapshot.schema
    if isinstance(planned, LanceSchema):  # all-null columns: nothing to write
        out = table_pb2.DataFragment()
        out.CopyFrom(fragment)
        new_fields = planned
    else:
        backfill, new_fields, in_order = planned
        out = await backfill.run_fragment(fragment)
        if in_order is not None:
            try:
                await in_order.check_exhausted()
            except InvalidInputError:
                await delete_fragment_files(ctx.store, [only_new_files(fragment, out)])
                raise
    merged = LanceSchema(copy.deepcopy(base.fields) + new_fields.fields, dict(base.metadata))
    return out, merged


async def update_fragment_columns(ctx: ReadContext, fragment: table_pb2.DataFragment,
                                  data: Any, left_on: str = ROW_ID, right_on: str | None = None,
                                  ) -> tuple[table_pb2.DataFragment, list[int]]:
    """Replace values of existing columns in the rows of ``fragment`` whose ``left_on``
    matches ``right_on`` in ``data``; other rows keep theirs. Returns the fragment (the
    updated columns moved to a new data file, tombstoned in the old ones) and the ids of the
    updated fields."""
    right_on = right_on or left_on
    table = await _as_table(data)
    names = [n for n in table.column_names if n != right_on]
    system = [n for n in names if n in SYSTEM_COLUMNS or n.startswith("_row")]
    if system:
        raise InvalidInputError(f"metadata column(s) {system} cannot be updated")
    schema = ctx.snapshot.schema
    missing = [n for n in names if n not in schema.names]
    if missing:
        raise InvalidInputError(f"column {missing[0]!r} does not exist in the dataset")
    if not names:
        raise InvalidInputError("update_columns: the new data has no column besides the key")
    if left_on not in SYSTEM_COLUMNS and left_on not in schema.names:
        raise InvalidInputError(f"key column {left_on!r} does not exist in the dataset")
    updated = schema.project(names)
    check_writable_files(ctx.snapshot.data_storage_version)
    read_fields, system_cols, key_type = _key_source(ctx, left_on)
    keys = _keys(table, right_on, key_type)
    targets = updated.to_arrow()
    right = table.select(names)
    try:
        right = right.cast(targets)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"update_columns: new values do not fit the columns: "
                                  f"{exc}") from exc
    old_fields = [f for f in updated.fields if f.name != left_on]
    read = read_fields + [f for f in old_fields if all(f.id != r.id for r in read_fields)]
    key_index = len(read) if system_cols else 0

    async def replace(batch: pa.RecordBatch) -> pa.Table:
        key = batch.column(key_index)
        positions = pc.index_in(key, value_set=keys)
        found = pc.is_valid(positions)
        new = right.take(positions)
        columns = [pc.if_else(found, new.column(i).combine_chunks(),
                              batch.column(batch.schema.get_field_index(f.name)))
                   for i, f in enumerate(targets)]
        return pa.table(columns, schema=targets)

    out = await Backfill(ctx, read, system_cols, replace, updated).run_fragment(fragment)
    ids = set(updated.field_ids())
    for data_file in out.files[:-1]:
        data_file.fields[:] = [TOMBSTONE_FIELD_ID if i in ids else i for i in data_file.fields]
    return out, sorted(ids)
