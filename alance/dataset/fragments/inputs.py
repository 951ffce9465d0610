"""Normalising what users pass to writers into one async stream of record batches.

:func:`record_batch_stream` accepts what pylance's ``write_dataset`` accepts, and a little more:

* in memory: a ``pa.Table`` or ``pa.RecordBatch``; a dict of columns (``{"a": [1, 2]}``); a
  list of row dicts; a list of pydantic models; a pandas DataFrame; a polars DataFrame; any
  object exporting ``__arrow_c_array__`` (one batch);
* streamed (memory stays bounded by a batch or two): a ``pa.RecordBatchReader``; a
  ``pyarrow.dataset.Dataset`` or ``Scanner`` (pylance's ``LanceDataset`` and ``LanceScanner``
  are such); an alance ``LanceDataset`` or ``Scanner`` (async or :mod:`alance.sync`); any
  object exporting ``__arrow_c_stream__``; a sync or async iterable of record batches.

With ``schema=``, data of other but convertible types is cast to it (an int32 batch for an
int64 column), column by column and without loss: a value that does not fit raises
:class:`~alance.errors.UnrepresentableValueError` and types that do not convert, or columns
that differ by name, raise :class:`~alance.errors.SchemaMismatchError`. Nothing is dropped
silently: where pyarrow would ignore keys or columns missing from ``schema`` (dicts, rows,
DataFrames) alance refuses, and rows with different keys keep every key (pylance keeps the
first row's keys only).

:func:`appended_layout` fits a stream to the dataset it is appended to: columns may come in
any order and nullable ones may be missing (as in pylance).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from alance.errors import InvalidInputError, SchemaMismatchError, UnrepresentableValueError
from alance.format.schema import LanceField, LanceSchema

_DONE = object()


def _next_or_done(it: Iterator[Any]) -> Any:
    return next(it, _DONE)


async def _from_sync(it: Iterator[Any]) -> AsyncIterator[Any]:
    # The user's iterator may block (read files, call services): step it in a worker thread.
    while True:
        item = await asyncio.to_thread(_next_or_done, it)
        if item is _DONE:
            return
        yield item


async def _from_list(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


async def _checked(first: pa.RecordBatch | None, rest: AsyncIterator[Any], schema: pa.Schema,
                   ) -> AsyncIterator[pa.RecordBatch]:
    """Items as batches, each of ``schema`` (schema inferred from the first batch)."""
    if first is not None:
        yield first
    async for item in rest:
        batch = _as_batch(item)
        if not batch.schema.equals(schema):
            raise SchemaMismatchError(
                f"batch schema {batch.schema} differs from the stream's schema {schema} "
                "(pass schema= to convert batches to one schema)")
        yield batch


async def _cast_each(items: AsyncIterator[Any], schema: pa.Schema,
                     ) -> AsyncIterator[pa.RecordBatch]:
    """Items as batches cast to ``schema`` (pylance's casting of batch iterators)."""
    async for item in items:
        batch = _as_batch(item)
        yield batch if batch.schema.equals(schema) else _cast_batch(batch, schema)


def _as_batch(item: Any) -> pa.RecordBatch:
    if isinstance(item, pa.RecordBatch):
        return item
    if isinstance(item, pa.Table):
        if not item.num_rows:
            return pa.RecordBatch.from_pylist([], schema=item.schema)
        return item.combine_chunks().to_batches()[0]
    raise InvalidInputError(f"expected pyarrow RecordBatch items, got {type(item).__name__}")


# -- casting to a given schema -----------------------------------------------------------------

def _check_names(have: pa.Schema, want: pa.Schema) -> None:
    if have.names != want.names:
        missing = [n for n in want.names if n not in have.names]
        extra = [n for n in have.names if n not in want.names]
        detail = (f"missing {missing}, not in the schema {extra}" if missing or extra
                  else f"order {have.names}, expected {want.names}")
        raise SchemaMismatchError(f"the data's columns do not match the schema: {detail}")


def _cast_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    _check_names(batch.schema, schema)
    table = _cast_columns(pa.Table.from_batches([batch]), schema)
    return _as_batch(table)


def _cast_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    if table.schema.equals(schema):
        return table
    _check_names(table.schema, schema)
    return _cast_columns(table, schema)


def _cast_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema`` (same names), without loss, with alance's errors."""
    columns = []
    for name, col, field in zip(schema.names, table.columns, schema, strict=True):
        target = field.type
        if isinstance(target, pa.BaseExtensionType) and col.type.equals(target.storage_type):
            col = pa.chunked_array([target.wrap_array(c) for c in col.chunks], target)
        elif isinstance(col.type, pa.BaseExtensionType) and col.type.storage_type.equals(target):
            col = pa.chunked_array([c.storage for c in col.chunks], target)
        elif not col.type.equals(target):
            col = _cast_values(name, col, target)
        if not field.nullable and col.null_count:
            raise UnrepresentableValueError(
                f"column {name!r} is not nullable in the schema but the data holds "
                f"{col.null_count} nulls")
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=schema)


def _cast_values(name: str, col: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    try:
        return col.cast(target, safe=True)
    except pa.ArrowInvalid as exc:
        if _castable(col.type, target):
            raise UnrepresentableValueError(
                f"column {name!r}: a value does not fit in {target}: {exc}") from exc
        raise SchemaMismatchError(f"column {name!r}: cannot convert {col.type} to {target}: "
                                  f"{exc}") from exc
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError) as exc:
        raise SchemaMismatchError(f"column {name!r}: cannot convert {col.type} to {target}: "
                                  f"{exc}") from exc


def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether the types convert at all (so a failed cast is about a value)."""
    try:
        pa.array([], source).cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def _check_convertible(have: pa.Schema, want: pa.Schema) -> None:
    """Fail fast, before any row is written, when ``have`` cannot convert to ``want``."""
    if have.equals(want):
        return
    _check_names(have, want)
    for name, a, b in zip(want.names, have.types, want.types, strict=True):
        a = a.storage_type if isinstance(a, pa.BaseExtensionType) else a
        b = b.storage_type if isinstance(b, pa.BaseExtensionType) else b
        if not a.equals(b) and not _castable(a, b):
            raise SchemaMismatchError(f"column {name!r}: cannot convert {a} to {b}")


# -- in-memory inputs --------------------------------------------------------------------------

def _arrow_errors(what: str, schema: pa.Schema | None, exc: Exception) -> InvalidInputError:
    if schema is None:
        return InvalidInputError(f"cannot convert {what} to Arrow: {exc}")
    if isinstance(exc, pa.ArrowInvalid):
        return UnrepresentableValueError(f"{what} does not fit the schema: {exc}")
    return SchemaMismatchError(f"{what} does not match the schema: {exc}")


def _no_extra(what: str, names: Iterable[Any], schema: pa.Schema | None) -> None:
    if schema is None:
        return
    extra = [n for n in names if n not in schema.names]
    if extra:
        raise SchemaMismatchError(f"{what} has columns {extra} that are not in the schema "
                                  f"{schema.names}")


def _check_nulls(table: pa.Table, schema: pa.Schema | None) -> pa.Table:
    for f in schema if schema is not None else ():
        if not f.nullable and f.name in table.column_names and \
                table.column(f.name).null_count:
            raise UnrepresentableValueError(
                f"column {f.name!r} is not nullable in the schema but the data holds "
                f"{table.column(f.name).null_count} nulls")
    return table


_ARROW_ERRORS = (pa.ArrowException, TypeError, ValueError, KeyError)


def _from_pydict(data: Mapping[Any, Any], schema: pa.Schema | None) -> pa.Table:
    _no_extra("the dict", data.keys(), schema)
    missing = [n for n in schema.names if n not in data] if schema is not None else []
    if missing:
        raise SchemaMismatchError(f"the dict lacks the schema's columns {missing}")
    try:
        table = pa.Table.from_pydict(dict(data), schema=schema)
    except _ARROW_ERRORS as exc:
        raise _arrow_errors("the dict of columns", schema, exc) from exc
    return _check_nulls(table, schema)


def _from_rows(rows: list[Any], schema: pa.Schema | None, what: str = "the rows") -> pa.Table:
    if not all(isinstance(r, Mapping) for r in rows):
        raise InvalidInputError(f"{what}: every item of a list of rows must be a dict")
    names = list(dict.fromkeys(k for r in rows for k in r))  # every key, first seen first
    _no_extra(what, names, schema)
    try:
        if schema is None:
            return pa.Table.from_pydict({n: [r.get(n) for r in rows] for n in names})
        table = pa.Table.from_pylist(rows, schema=schema)
    except _ARROW_ERRORS as exc:
        raise _arrow_errors(what, schema, exc) from exc
    return _check_nulls(table, schema)


def _from_models(models: list[Any], schema: pa.Schema | None) -> pa.Table:
    cls = type(models[0])
    if any(type(m) is not cls for m in models):
        raise InvalidInputError(f"a list of pydantic models must hold {cls.__name__} "
                                "instances only")
    dump = "model_dump" if hasattr(cls, "model_dump") else "dict"
    return _from_rows([getattr(m, dump)() for m in models], schema, f"the {cls.__name__} models")


def _from_pandas(df: Any, schema: pa.Schema | None) -> pa.Table:
    _no_extra("the DataFrame", list(df.columns), schema)
    try:
        # The index as pyarrow keeps it by default (a RangeIndex as metadata), as pylance.
        table = pa.Table.from_pandas(df, schema=schema)
    except _ARROW_ERRORS as exc:
        raise _arrow_errors("the DataFrame", schema, exc) from exc
    return _check_nulls(table, schema)


def _is_pandas(data: Any, kind: str) -> bool:
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(data, getattr(pd, kind))


def _is_pydantic_model(item: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(item, pydantic.BaseModel)


def _is_polars(data: Any, kind: str = "DataFrame") -> bool:
    return type(data).__module__.startswith("polars") and type(data).__name__ == kind


def _in_memory(data: Any, schema: pa.Schema | None) -> pa.Table | None:
    """``data`` as a table when it is in memory anyway (None: it is not)."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, Mapping):
        return _from_pydict(data, schema)
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        return _from_rows(data, schema)
    if isinstance(data, list) and data and _is_pydantic_model(data[0]):
        return _from_models(data, schema)
    if _is_pandas(data, "DataFrame"):
        return _from_pandas(data, schema)
    if _is_pandas(data, "Series"):
        raise InvalidInputError("a pandas Series is one column, not a table: pass "
                                "series.to_frame() (pylance does not take Series either)")
    if _is_polars(data):
        table = data.to_arrow()  # large_string/large_binary columns, as pylance gets them
        return table if isinstance(table, pa.Table) else pa.table(table)
    if _is_polars(data, "LazyFrame"):
        raise InvalidInputError("a polars LazyFrame must be collected first (.collect())")
    if hasattr(data, "__arrow_c_array__") and not hasattr(data, "__arrow_c_stream__"):
        return pa.Table.from_batches([pa.record_batch(data)])
    return None


# -- streamed inputs ---------------------------------------------------------------------------

def _alance_source(data: Any) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]] | None:
    """An alance dataset or scanner (async, or the :mod:`alance.sync` twin): its scan.

    alance's readers offer ``write_source()``: the schema and the async batches a writer
    takes from them (read on the caller's loop, with no Arrow stream in between).
    """
    if not type(data).__module__.startswith("alance."):
        return None
    inner = getattr(data, "_async", data)  # the blocking facade wraps the async object
    source = getattr(inner, "write_source", None)
    if not callable(source):
        return None
    found: tuple[pa.Schema, AsyncIterator[pa.RecordBatch]] = source()
    return found


def _reader(data: Any) -> pa.RecordBatchReader | None:
    """``data`` as a reader when it is a streamed Arrow source (None: it is not)."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    pads = sys.modules.get("pyarrow.dataset")
    if pads is not None:
        # pylance's LanceDataset / LanceScanner are pyarrow Dataset / Scanner subclasses.
        if isinstance(data, pads.Dataset):
            return data.scanner().to_reader()
        if isinstance(data, pads.Scanner):
            return data.to_reader()
    if hasattr(data, "__arrow_c_stream__"):
        try:
            return pa.RecordBatchReader.from_stream(data)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise InvalidInputError(f"cannot read the Arrow stream of a "
                                    f"{type(data).__name__}: {exc}") from exc
    return None


def _conformed(have: pa.Schema, batches: AsyncIterator[Any], schema: pa.Schema | None,
               ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    if schema is None:
        return have, batches
    if have.equals(schema):  # the same but for metadata: the given schema's is kept
        return schema, batches
    _check_convertible(have, schema)
    return schema, _cast_each(batches, schema)


async def record_batch_stream(data: Any, schema: pa.Schema | None = None, *,
                              purpose: str = "write",
                              ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    """The schema of ``data`` and an async iterator over its record batches.

    ``data``: see the module docstring. ``schema``: the schema the batches must have; data
    of other types is cast to it without loss. Without it, an iterable's schema is that of
    its first batch and every later batch must have that schema (pylance asks for
    ``schema=`` with iterables; alance infers it). Readers, datasets and iterables are
    streamed, never gathered. ``purpose`` names the operation in errors.
    """
    if schema is not None and not isinstance(schema, pa.Schema):
        raise InvalidInputError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    found_schema, batches = await _stream(data, schema, purpose)
    _check_metadata(found_schema)
    required = [i for i, f in enumerate(found_schema) if not f.nullable]
    if required:
        batches = _no_nulls_in(batches, found_schema, required)
    return found_schema, batches


async def _no_nulls_in(batches: AsyncIterator[pa.RecordBatch], schema: pa.Schema,
                       required: list[int]) -> AsyncIterator[pa.RecordBatch]:
    """``batches``, refusing one that holds a null in a column its schema declares not
    nullable (as pylance does): such a file would be refused by every reader afterwards."""
    async for batch in batches:
        for i in required:
            nulls = batch.column(i).null_count
            if nulls:
                raise UnrepresentableValueError(
                    f"column {schema.field(i).name!r} is declared as non-nullable but holds "
                    f"{nulls} null values")
        yield batch


def _check_metadata(schema: pa.Schema) -> None:
    """Schema metadata must be UTF-8 text, as pylance requires (its readers decode it)."""
    for key, value in (schema.metadata or {}).items():
        try:
            value.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(
                f"schema metadata {key.decode('utf-8', 'replace')!r} is not UTF-8 text; "
                "encode binary metadata (e.g. base64) first") from None


async def _stream(data: Any, schema: pa.Schema | None, purpose: str,
                  ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    source = _alance_source(data)
    if source is not None:
        return _conformed(*source, schema)
    table = _in_memory(data, schema)
    if table is not None:
        if schema is not None:
            table = _cast_table(table, schema)
        return (schema if schema is not None else table.schema), _from_list(table.to_batches())
    reader = _reader(data)
    if reader is not None:
        return _conformed(reader.schema, _from_sync(iter(reader)), schema)
    if isinstance(data, AsyncIterable):
        stream: AsyncIterator[Any] = aiter(data)
    elif isinstance(data, list | tuple):
        stream = _from_list(data)  # already in memory: no worker thread per item
    elif isinstance(data, Iterable) and not isinstance(data, str | bytes | bytearray):
        stream = _from_sync(iter(data))
    else:
        raise InvalidInputError(
            f"cannot {purpose} data of type {type(data).__name__}: give a pyarrow Table, "
            "RecordBatch, RecordBatchReader or Dataset, a dict of columns, a list of rows, a "
            "pandas or polars DataFrame, a Lance dataset, or an iterable of record batches")
    if schema is not None:
        return schema, _cast_each(stream, schema)
    first = None
    async for item in stream:
        first = _as_batch(item)
        break
    if first is None:
        raise InvalidInputError("an empty stream of batches needs an explicit schema")
    return first.schema, _checked(first, stream, first.schema)


# -- appending to a dataset --------------------------------------------------------------------

def appended_layout(dataset: LanceSchema, arrow_schema: pa.Schema,
                    batches: AsyncIterator[pa.RecordBatch], *, legacy: bool = False,
                    ) -> tuple[LanceSchema, AsyncIterator[pa.RecordBatch]]:
    """The fields new fragments hold when ``arrow_schema`` data is appended to ``dataset``,
    and the batches to write into them.

    As in pylance, columns are matched by name, in any order (2.x files keep the data's
    order, legacy files the dataset's), and nullable columns may be left out: the new
    fragments do not hold them and read as nulls. Fields left out of a struct column are
    written as nulls (alance's readers, unlike pylance's, need every field of a struct a
    file holds). Types must agree (:meth:`LanceSchema.check_compatible`). Legacy
    (v0.1/v0.2 files) datasets need every column: their readers take no fragment without.
    """
    names = first_names = arrow_schema.names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"the data repeats column names: {names}")
    unexpected = [n for n in names if n not in dataset.names]
    missing = [f for f in dataset.fields if f.name not in names]
    if unexpected or not names:
        raise SchemaMismatchError(
            f"schema does not match the dataset: columns {unexpected} are not in the dataset "
            f"(columns {dataset.names})" if unexpected else "the data has no columns")
    required = [f.name for f in missing if not f.nullable or legacy]
    if required:
        raise SchemaMismatchError(
            f"schema does not match the dataset: columns {required} are missing from the data"
            + (" (a legacy dataset takes only appends of every column)" if legacy
               else " and are not nullable"))
    if legacy and names != dataset.names:
        # Legacy files hold the columns in the dataset's order (pylance's readers rely on it).
        arrow_schema = pa.schema([arrow_schema.field(n) for n in dataset.names],
                                 metadata=arrow_schema.metadata)
        names = dataset.names
    projected = dataset.project(names)
    layout = pa.schema([_laid_out(a, f) for a, f in zip(arrow_schema, projected.fields,
                                                        strict=True)],
                       metadata=arrow_schema.metadata)
    projected.check_compatible(layout)
    if layout.equals(arrow_schema) and layout.names == first_names:
        return projected, batches
    return projected, _relaid(batches, layout)


def _laid_out(have: pa.Field, want: LanceField) -> pa.Field:
    """``have`` with its struct children in the dataset's order, missing nullable ones
    added (as the dataset has them); other differences are left for the compatibility
    check to report."""
    htype = have.type
    if not (pa.types.is_struct(htype) and want.logical_type == "struct"):
        return have
    by_name = {htype.field(i).name: htype.field(i) for i in range(htype.num_fields)}
    unknown = [n for n in by_name if n not in {c.name for c in want.children}]
    if unknown:
        raise SchemaMismatchError(f"schema does not match the dataset: fields {unknown} of "
                                  f"{have.name!r} are not in the dataset")
    kids = []
    for child in want.children:
        if child.name in by_name:
            kids.append(_laid_out(by_name[child.name], child))
        elif child.nullable:
            kids.append(child.to_arrow())
        else:
            raise SchemaMismatchError(f"schema does not match the dataset: field "
                                      f"{child.name!r} of {have.name!r} is missing and not "
                                      "nullable")
    return pa.field(have.name, pa.struct(kids), have.nullable, have.metadata)


async def _relaid(batches: AsyncIterator[pa.RecordBatch], layout: pa.Schema,
                  ) -> AsyncIterator[pa.RecordBatch]:
    """The batches' columns in the order of ``layout``, struct fields as it lays them out."""
    async for batch in batches:
        columns = []
        for f in layout:
            col = batch.column(f.name)
            columns.append(col if col.type.equals(f.type) else _relaid_array(col, f.type))
        yield pa.RecordBatch.from_arrays(columns, schema=layout)


def _relaid_array(array: pa.Array, target: pa.DataType) -> pa.Array:
    if not (pa.types.is_struct(array.type) and pa.types.is_struct(target)):
        return array
    present = dict(zip([array.type.field(i).name for i in range(array.type.num_fields)],
                       array.flatten(), strict=True))  # children with the parent's offset
    children = []
    for i in range(target.num_fields):
        f = target.field(i)
        child = present.get(f.name)
        children.append(pa.nulls(len(array), f.type) if child is None
                        else _relaid_array(child, f.type))
    mask = array.is_null() if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)


#: Bytes of input combined into one batch at most by :func:`regroup` (a file writer's
#: working memory per call; wide rows get fewer rows per batch).
REGROUP_MAX_BYTES = 32 * 1024 * 1024


async def regroup(batches: AsyncIterator[pa.RecordBatch], rows: int,
                  max_bytes: int | None = None, align: int = 1,
                  split_bytes: int | None = None) -> AsyncIterator[pa.RecordBatch]:
    """Re-chunk a stream into batches of ``rows`` rows (the last may be shorter).

    Large input batches are sliced without copying; small ones are combined, and combined
    batches are also cut once they hold ``max_bytes`` (batches of large values, such as
    blobs, are not gathered ``rows`` at a time). An input batch of more than ``split_bytes``
    (default: ``max_bytes``, at most :data:`REGROUP_MAX_BYTES`) is sliced into fewer rows,
    judged by its bytes per row: whole groups of ``align`` rows where one fits, else as many
    rows as fit (one at least).
    """
    if split_bytes is None:
        split_bytes = REGROUP_MAX_BYTES if max_bytes is None else min(max_bytes,
                                                                      REGROUP_MAX_BYTES)
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    pending_bytes = 0
    async for batch in batches:
        n = batch.num_rows
        step = rows
        if n and batch.nbytes > split_bytes:
            fit = int(split_bytes * n // batch.nbytes)
            step = min(rows, fit - fit % align if fit >= align else max(1, fit))
        start = 0
        while start < n:
            if pending and pending_rows >= step:
                yield _concat(pending)
                pending, pending_rows, pending_bytes = [], 0, 0
            take = min(step - pending_rows, n - start)
            part = batch.slice(start, take)
            if take == step and not pending:
                yield part
            else:
                pending.append(part)
                pending_rows += take
                pending_bytes += part.nbytes
                if pending_rows >= step or pending_bytes >= split_bytes or (
                        max_bytes is not None and pending_bytes >= max_bytes):
                    yield _concat(pending)
                    pending, pending_rows, pending_bytes = [], 0, 0
            start += take
    if pending:
        yield _concat(pending)


def _concat(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(parts) == 1:
        return parts[0]
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
