"""Normalising what users pass to writers into one async stream of record batches."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

import pyarrow as pa

from alance.errors import InvalidInputError, SchemaMismatchError

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


async def _from_list(items: list[pa.RecordBatch]) -> AsyncIterator[pa.RecordBatch]:
    for item in items:
        yield item


async def _checked(first: pa.RecordBatch | None, rest: AsyncIterator[Any], schema: pa.Schema,
                   ) -> AsyncIterator[pa.RecordBatch]:
    if first is not None:
        yield first
    async for item in rest:
        batch = _as_batch(item)
        if not batch.schema.equals(schema):
            raise SchemaMismatchError(
                f"batch schema {batch.schema} differs from the stream's schema {schema}")
        yield batch


def _as_batch(item: Any) -> pa.RecordBatch:
    if isinstance(item, pa.RecordBatch):
        return item
    if isinstance(item, pa.Table):
        if not item.num_rows:
            return pa.RecordBatch.from_pylist([], schema=item.schema)
        return item.combine_chunks().to_batches()[0]
    raise InvalidInputError(f"expected pyarrow RecordBatch items, got {type(item).__name__}")


async def record_batch_stream(data: Any, schema: pa.Schema | None = None,
                              ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    """The schema of ``data`` and an async iterator over its record batches.

    ``data`` may be a ``pa.Table``, ``pa.RecordBatch``, ``pa.RecordBatchReader``, a pandas
    DataFrame, or a (sync or async) iterable of record batches. For iterables, ``schema`` is
    taken from the first batch unless given; every later batch must have the same schema.
    """
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_records"):
        data = pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, pa.Table):
        if schema is not None and not data.schema.equals(schema):
            data = _cast(data, schema)
        return data.schema, _from_list(data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return _from_reader_like(pa.Table.from_batches([data]), schema)
    if isinstance(data, pa.RecordBatchReader):
        s = data.schema
        return s, _checked(None, _from_sync(iter(data)), s)
    if isinstance(data, AsyncIterable):
        stream: AsyncIterator[Any] = aiter(data)
    elif isinstance(data, Iterable) and not isinstance(data, (str, bytes, dict)):
        stream = _from_sync(iter(data))
    else:
        raise InvalidInputError(f"cannot write data of type {type(data).__name__}")
    first = None
    async for item in stream:
        first = _as_batch(item)
        break
    if first is None:
        if schema is None:
            raise InvalidInputError("an empty stream of batches needs an explicit schema")
        return schema, _from_list([])
    if schema is not None and not first.schema.equals(schema):
        raise SchemaMismatchError(f"batch schema {first.schema} differs from {schema}")
    return first.schema, _checked(first, stream, first.schema)


def _from_reader_like(table: pa.Table, schema: pa.Schema | None,
                      ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    if schema is not None and not table.schema.equals(schema):
        table = _cast(table, schema)
    return table.schema, _from_list(table.to_batches())


def _cast(table: pa.Table, schema: pa.Schema) -> pa.Table:
    try:
        return table.cast(schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
        raise SchemaMismatchError(f"data cannot be cast to the given schema: {exc}") from exc


async def regroup(batches: AsyncIterator[pa.RecordBatch], rows: int,
                  max_bytes: int | None = None) -> AsyncIterator[pa.RecordBatch]:
    """Re-chunk a stream into batches of exactly ``rows`` rows (the last may be shorter).

    Large input batches are sliced without copying; small ones are combined. ``max_bytes``
    (blob columns): combined batches are also cut once they hold that many bytes, so
    batches of large values are not gathered ``rows`` at a time.
    """
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    pending_bytes = 0
    async for batch in batches:
        start = 0
        while start < batch.num_rows:
            take = min(rows - pending_rows, batch.num_rows - start)
            if take == rows and not pending:
                yield batch.slice(start, take)
            else:
                part = batch.slice(start, take)
                pending.append(part)
                pending_rows += take
                if max_bytes is not None:
                    pending_bytes += part.nbytes
                if pending_rows == rows or (max_bytes is not None
                                            and pending_bytes >= max_bytes):
                    yield _concat(pending)
                    pending, pending_rows, pending_bytes = [], 0, 0
            start += take
    if pending:
        yield _concat(pending)


def _concat(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(parts) == 1:
        return parts[0]
    return pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
