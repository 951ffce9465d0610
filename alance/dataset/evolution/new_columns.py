"""Schema and data evolution: add, merge, drop and alter columns without rewriting the table.

* :func:`add_columns` computes new columns for every row (SQL expressions over existing
  columns, a user function over batches, or values given in row order) and commits a Merge:
  each fragment gets one more data file holding the new fields.
* :func:`merge_columns` adds the columns of a table joined on a key (upstream's ``merge``).
* :func:`drop_columns` commits a Project: metadata only, data files stay (files left holding
  no field of the schema are removed from the fragments).
* :func:`alter_columns` renames, relaxes or tightens nullability, and changes types. A type
  change rewrites the column into a new data file under a *new* field id, as pylance 14 does
  (checked by decoding its manifests): the old file keeps listing the old id, which the
  schema no longer has, so readers ignore it. Readers also honour ``-2`` (tombstoned) ids,
  which pylance writes when it updates columns in place.

New field ids start after the highest id the manifest uses, in the schema *or* in any data
file (ids of dropped columns are never reused while a file still lists them).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES
from alance.dataset.evolution.alter import alter_columns, castable, drop_columns
from alance.dataset.evolution.backfill import (
    DEFAULT_CONCURRENCY,
    Backfill,
    Mapper,
    ProgressCallback,
    as_mapper,
    check_new_fields,
    check_writable_files,
    commit_merge,
    conform,
    manifest_max_field_id,
    only_new_files,
    system_columns_in,
)
from alance.dataset.evolution.batch_udf import BatchUDF
from alance.dataset.fragments.inputs import record_batch_stream
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import delete_fragment_files, file_version_of
from alance.dataset.query.scan import SYSTEM_COLUMNS
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import InvalidInputError, RowCountMismatchError, SchemaMismatchError
from alance.filter import compile_expression
from alance.format.feature_flags import check_writer_flags
from alance.format.schema import LanceField, LanceSchema, as_schema, with_extension_type
from alance.io.store import DatasetStore


def _check_new_names(schema: LanceSchema, names: Sequence[str]) -> None:
    if len(set(names)) != len(names):
        raise InvalidInputError(f"new column names repeat: {list(names)}")
    taken = [n for n in names if n in schema.names]
    if taken:
        raise InvalidInputError(f"columns {taken} already exist in the dataset")
    bad = [n for n in names if not isinstance(n, str) or not n or n in SYSTEM_COLUMNS]
    if bad:
        raise InvalidInputError(f"invalid new column names: {bad}")


def _new_fields(snapshot: Snapshot, arrow: pa.Schema) -> LanceSchema:
    _check_new_names(snapshot.schema, arrow.names)
    first = manifest_max_field_id(snapshot.manifest) + 1
    return LanceSchema.from_arrow(arrow, first_id=first)


def _sql_mapper(snapshot: Snapshot, exprs: Mapping[str, str],
                ) -> tuple[Mapper, pa.Schema, list[str]]:
    """Compile ``name -> SQL`` into a mapper, the output schema and the columns read."""
    arrow = snapshot.schema.to_arrow()
    compiled: dict[str, pc.Expression] = {}
    fields: list[pa.Field] = []
    read: dict[str, None] = {}
    for name, sql in exprs.items():
        if not isinstance(sql, str):
            raise InvalidInputError(f"column {name!r}: expected a SQL expression string")
        expr, dtype, columns = compile_expression(sql, arrow)
        if pa.types.is_null(dtype):
            # A bare NULL: pylance gives such columns a concrete type only when asked; we
            # store them as nullable strings would be ambiguous, so refuse.
            raise InvalidInputError(f"column {name!r}: the type of {sql!r} is unknown; "
                                    "write CAST(NULL AS <type>)")
        compiled[name] = expr
        fields.append(pa.field(name, dtype, True))
        read.update(dict.fromkeys(columns))
    out = pa.schema(fields)
    read_names = [n for n in arrow.names if n in read] + [n for n in read if n in SYSTEM_COLUMNS]

    def evaluate(batch: pa.RecordBatch) -> pa.RecordBatch:
        try:
            if batch.num_columns:
                table = pa.Table.from_batches([batch])
                result = pads.dataset(table).to_table(columns=compiled)
            else:
                result = _evaluate_no_columns(compiled, batch.num_rows)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise InvalidInputError(f"cannot compute the new columns: {exc}") from exc
        return conform(result, out, batch.num_rows)

    async def mapper(batch: pa.RecordBatch) -> pa.RecordBatch:
        return await asyncio.to_thread(evaluate, batch)  # CPU work off the event loop

    return mapper, out, read_names


async def _null_constants(mapper: Mapper) -> bool:
    """Whether expressions that read no column all evaluate to null."""
    one = await mapper(pa.RecordBatch.from_pydict({"row": [None]}).select([]))
    return all(column.null_count == len(column) for column in one.columns) if len(one) else False


def _evaluate_no_columns(compiled: Mapping[str, pc.Expression], rows: int) -> pa.Table:
    """Expressions that read no column (constants, ``random()``...) over ``rows`` rows."""
    table = pa.table({"__alance_rows": pa.nulls(rows, pa.int8())})
    return pads.dataset(table).to_table(columns=dict(compiled))


class _InOrder:
    """Values given in dataset row order (live rows), consumed fragment by fragment; streamed
    from anything :func:`~alance.dataset.fragments.inputs.record_batch_stream` takes."""

    def __init__(self, schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch]) -> None:
        self.batches = batches
        self.schema = schema
        self.pending: pa.Table = self.schema.empty_table()

    @classmethod
    async def of(cls, data: Any) -> _InOrder:
        return cls(*await record_batch_stream(data, purpose="add as columns"))

    async def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        need = batch.num_rows
        while self.pending.num_rows < need:
            more = await anext(self.batches, None)
            if more is None:
                raise RowCountMismatchError(
                    "Stream ended before producing values for all rows in dataset (the new "
                    "column values end before the dataset's rows do)")
            self.pending = pa.concat_tables([self.pending, pa.Table.from_batches([more])])
        out, self.pending = self.pending.slice(0, need), self.pending.slice(need)
        return out

    async def check_exhausted(self) -> None:
        extra = self.pending.num_rows
        async for more in self.batches:
            extra += more.num_rows
            if extra:
                break
        if extra:
            raise RowCountMismatchError(
                "Stream produced more values than expected for dataset (more new column "
                "values were given than the dataset has rows)")


class _Probed:
    """A mapper that answers its first real call from the probe's result when the batches
    match (so the user function is not run twice on the first batch)."""

    def __init__(self, mapper: Mapper) -> None:
        self.mapper = mapper
        self.saved: tuple[pa.RecordBatch, Any] | None = None

    async def __call__(self, batch: pa.RecordBatch) -> Any:
        saved = self.saved
        if saved is not None and saved[0].num_rows == batch.num_rows and saved[0].equals(batch):
            self.saved = None
            return saved[1]
        return await self.mapper(batch)


async def _probe_schema(ctx: ReadContext, read_fields: list[LanceField], system: list[str],
                        mapper: _Probed, batch_size: int | None) -> pa.Schema:
    """The schema a user function returns, learnt by running it on the first live rows."""
    probe = Backfill(ctx, read_fields, system, mapper, LanceSchema([]), batch_size=batch_size)
    for fragment in ctx.snapshot.fragments:
        async for batch, _, _ in probe.input_batches(fragment):
            if batch.num_rows:
                result = await mapper.mapper(batch)
                mapper.saved = (batch, result)
                if isinstance(result, pa.RecordBatch | pa.Table):
                    return result.schema
                if isinstance(result, dict):
                    return pa.RecordBatch.from_pydict(result).schema
                return pa.RecordBatch.from_pandas(result, preserve_index=False).schema
    raise InvalidInputError("cannot learn the new columns' types from an empty dataset: give "
                            "the function an 'output_schema' attribute")


def _storage_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type.storage_type, f.nullable, f.metadata)
                      if isinstance(f.type, pa.BaseExtensionType) else f for f in schema])


async def add_columns(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                      transforms: Any, read_columns: Sequence[str] | None = None,
                      batch_size: int | None = None, *,
                      concurrency: int = DEFAULT_CONCURRENCY,
                      progress: ProgressCallback | None = None,
                      max_retries: int = DEFAULT_MAX_RETRIES,
                      reader_schema: pa.Schema | None = None) -> Snapshot:
    """Add columns computed for every row; commits a Merge and returns the new version.

    ``transforms``: a mapping ``name -> SQL expression``; a function (sync or async) taking a
    batch of the ``read_columns`` (default: all; ``_rowid``/``_rowaddr`` allowed) and
    returning the new columns (RecordBatch, Table, dict of arrays or pandas DataFrame; an
    ``output_schema`` attribute fixes their types, else the first batch decides); values in
    row order (live rows, dataset order), streamed from a ``pa.Table``, ``RecordBatchReader``,
    dataset, DataFrame, iterable of batches... (see :mod:`alance.dataset.fragments.inputs`); or a
    ``pa.Field``/``pa.Schema``/list of fields for all-null columns. ``reader_schema``: the
    schema of an iterable of batches given as values (pylance's argument).
    """
    check_writer_flags(snapshot.manifest.writer_feature_flags)
    transforms = _with_reader_schema(transforms, reader_schema)
    ctx = ReadContext(store, snapshot)
    schema = snapshot.schema
    planned = await plan_columns(ctx, transforms, read_columns, batch_size,
                                 concurrency=concurrency, progress=progress)
    if isinstance(planned, LanceSchema):  # all-null columns, metadata only
        merged = LanceSchema(copy.deepcopy(schema.fields) + planned.fields,
                             dict(schema.metadata))
        return await commit_merge(store, handler, snapshot, snapshot.fragments, merged,
                                  max_retries)
    backfill, new_fields, in_order = planned
    fragments = await backfill.run()
    if in_order is not None:
        try:
            await in_order.check_exhausted()
        except InvalidInputError:
            await delete_fragment_files(store, [only_new_files(o, n) for o, n in
                                                zip(snapshot.fragments, fragments, strict=True)])
            raise
    merged = LanceSchema(copy.deepcopy(schema.fields) + new_fields.fields, dict(schema.metadata))
    new = await commit_merge(store, handler, snapshot, fragments, merged, max_retries)
    finished = getattr(transforms, "finished", None)
    if isinstance(transforms, BatchUDF) and finished is not None:
        await asyncio.to_thread(finished)  # its checkpoint is no longer needed
    return new


def _with_reader_schema(transforms: Any, reader_schema: pa.Schema | None) -> Any:
    """An iterable of batches given with ``reader_schema`` as a RecordBatchReader."""
    if reader_schema is None or isinstance(transforms, Mapping | pa.Schema | pa.Field) or (
            callable(transforms) and not isinstance(transforms, Iterator)):
        return transforms
    if isinstance(transforms, pa.RecordBatchReader | pa.Table | pa.RecordBatch):
        return transforms
    return pa.RecordBatchReader.from_batches(reader_schema, iter(transforms))


async def plan_columns(ctx: ReadContext, transforms: Any, read_columns: Sequence[str] | None,
                       batch_size: int | None, *, concurrency: int = DEFAULT_CONCURRENCY,
                       progress: ProgressCallback | None = None,
                       ) -> LanceSchema | tuple[Backfill, LanceSchema, _InOrder | None]:
    """How :func:`add_columns` computes new columns (``transforms`` as it takes them): the
    backfill, the new fields and the row-order source to check for leftovers; or only the new
    fields when they are all-null columns 2.x files need no data for."""
    snapshot = ctx.snapshot
    schema = snapshot.schema
    concurrency_used = concurrency
    in_order: _InOrder | None = None
    if isinstance(transforms, pa.Field):
        transforms = pa.schema([transforms])
    if isinstance(transforms, list) and transforms and all(
            isinstance(f, pa.Field) for f in transforms):
        transforms = pa.schema(transforms)
    if isinstance(transforms, pa.Schema):
        nulls = _storage_schema(transforms)
        if any(not f.nullable for f in nulls):
            raise InvalidInputError("all-null columns must be nullable")
        out_arrow = nulls
        if file_version_of(snapshot.data_storage_version) is not None:
            # 2.x readers take fields no data file holds as nulls: metadata only, as pylance.
            # (v0.2 readers of pylance cannot mix such fields in: there files are written.)
            return _new_fields(snapshot, transforms)

        async def null_mapper(batch: pa.RecordBatch) -> pa.RecordBatch:
            return pa.RecordBatch.from_arrays(
                [pa.nulls(batch.num_rows, f.type) for f in out_arrow], schema=out_arrow)
        mapper: Mapper = null_mapper
        read_names: list[str] = []
        new_fields = _new_fields(snapshot, transforms)
    elif isinstance(transforms, Mapping):
        if not transforms:
            raise InvalidInputError("no columns to add")
        _check_new_names(schema, list(transforms))
        mapper, out_arrow, read_names = _sql_mapper(snapshot, transforms)
        if (not read_names and file_version_of(snapshot.data_storage_version) is not None
                and await _null_constants(mapper)):
            # e.g. CAST(NULL AS INT): 2.x readers take fields no file holds as nulls, so
            # only the schema changes (as pylance does).
            return _new_fields(snapshot, out_arrow)
        new_fields = _new_fields(snapshot, out_arrow)
    elif callable(transforms):
        names = list(read_columns) if read_columns is not None else schema.names
        read_names = names
        read_fields = [schema.field(n) for n in names if n not in SYSTEM_COLUMNS]
        probed = _Probed(_typed_for_user(as_mapper(transforms), read_fields))
        mapper = probed
        if isinstance(transforms, BatchUDF) and transforms.checkpoint_file is not None:
            concurrency_used = 1  # batches done in order, so a rerun resumes where it failed
        declared = getattr(transforms, "output_schema", None)
        if declared is None:
            declared = await _probe_schema(ctx, read_fields, system_columns_in(names), probed,
                                           batch_size)
            if isinstance(transforms, BatchUDF):
                # As pylance: a batch UDF's schema comes from a call of its own, and every
                # batch (the first one again) is then computed and checked against it.
                probed.saved = None
        new_fields = _new_fields(snapshot, declared)
    else:  # values in row order: a table, reader, dataset, DataFrame, batches...
        in_order = await _InOrder.of(transforms)
        mapper, read_names, concurrency_used = in_order, [], 1
        new_fields = _new_fields(snapshot, in_order.schema)
    for n in read_names:
        if n not in SYSTEM_COLUMNS:
            schema.field(n)  # unknown names -> InvalidInputError
    check_writable_files(snapshot.data_storage_version)
    check_new_fields(new_fields, snapshot.data_storage_version)
    read_fields = [schema.field(n) for n in read_names if n not in SYSTEM_COLUMNS]
    backfill = Backfill(ctx, read_fields, system_columns_in(read_names),
                        mapper, new_fields,
                        batch_size=batch_size, concurrency=concurrency_used, progress=progress)
    return backfill, new_fields, in_order


def _typed_for_user(mapper: Mapper, read_fields: list[LanceField]) -> Mapper:
    """Give user functions batches with extension types (as scans return them)."""
    if not read_fields:
        return mapper

    async def typed(batch: pa.RecordBatch) -> Any:
        schema = pa.schema([with_extension_type(f) for f in batch.schema])
        return await mapper(as_schema(batch, schema))
    return typed


async def _as_table(data: Any, schema: pa.Schema | None = None) -> pa.Table:
    """The new data of a merge, gathered (the join needs all of it): anything
    :func:`~alance.dataset.fragments.inputs.record_batch_stream` takes."""
    schema, batches = await record_batch_stream(data, schema, purpose="merge")
    return pa.Table.from_batches([b async for b in batches], schema=schema)


async def merge_columns(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                        data: Any, left_on: str, right_on: str | None = None, *,
                        concurrency: int = DEFAULT_CONCURRENCY,
                        progress: ProgressCallback | None = None,
                        max_retries: int = DEFAULT_MAX_RETRIES,
                        schema: pa.Schema | None = None) -> Snapshot:
    """Add the columns of ``data`` matched to rows by ``left_on`` = ``right_on`` (left join).

    Rows without a match get nulls; when ``data`` repeats a key, its first row is used.
    ``data``: anything :func:`~alance.dataset.fragments.inputs.record_batch_stream` takes (cast to
    ``schema`` if given).
    """
    right_on = right_on or left_on
    table = await _as_table(data, schema)
    if right_on not in table.column_names:
        raise InvalidInputError(f"merge: {right_on!r} is not a column of the new data")
    key_field = snapshot.schema.field(left_on)
    key_type = key_field.data_type
    keys = table.column(right_on)
    if isinstance(keys.type, pa.BaseExtensionType):
        keys = keys.cast(keys.type.storage_type)
    try:
        keys = keys.cast(key_type) if not keys.type.equals(key_type) else keys
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise SchemaMismatchError(f"merge: keys of type {keys.type} cannot be compared with "
                                  f"{left_on!r} ({key_type})") from exc
    right = table.drop_columns([right_on])
    if right.num_columns == 0:
        raise InvalidInputError("merge: the new data has no column besides the key")
    new_fields = _new_fields(snapshot, right.schema)  # extension types kept (as metadata)
    keys = keys.combine_chunks()

    async def join(batch: pa.RecordBatch) -> pa.Table:
        positions = pc.index_in(batch.column(0), value_set=keys)
        return right.take(positions)

    check_writable_files(snapshot.data_storage_version)
    check_new_fields(new_fields, snapshot.data_storage_version)
    ctx = ReadContext(store, snapshot)
    backfill = Backfill(ctx, [key_field], [], join, new_fields, concurrency=concurrency,
                        progress=progress)
    fragments = await backfill.run()
    schema = snapshot.schema
    merged = LanceSchema(copy.deepcopy(schema.fields) + new_fields.fields, dict(schema.metadata))
    return await commit_merge(store, handler, snapshot, fragments, merged, max_retries)


__all__ = ["add_columns", "alter_columns", "castable", "drop_columns",
           "manifest_max_field_id", "merge_columns"]
