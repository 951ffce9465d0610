"""JSON columns: text for users, JSONB in files (as pylance does).

Writing: top-level ``arrow.json`` columns (JSON text over utf8 / large_utf8) become Lance
``json`` columns; their values are converted to JSONB (:mod:`alance.format.jsonb`) before
they reach the file writer. Reading: scans and takes of a dataset return ``json`` columns as
``arrow.json`` text (:func:`text_view` gives the fields users see; the fragment reader reads
the stored field and converts with :func:`to_text_column`).

Columns are converted whole by the column kernel (:mod:`alance.format.jsonb_text`; small
ones value by value, :mod:`alance.format.jsonb`); columns of more than :data:`OFFLOAD_BYTES`
are converted on the decoding threads, in pieces side by side, so the event loop stays free.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pyarrow as pa

from alance.format import jsonb
from alance.format.jsonb_bulk import TEXT_POOL
from alance.format.jsonb_text import array_to_text
from alance.format.schema import EXT_META_KEY, EXT_NAME_KEY, LanceField, LanceSchema
from alance.io.plans import DECODE_WORKERS, decode_pool, offloading

ARROW_JSON = "arrow.json"
LANCE_JSON = "lance.json"
#: Columns with more value bytes than this convert on a worker thread (a few milliseconds of
#: conversion either way: the event loop is not held longer).
OFFLOAD_BYTES = 64 * 1024


def _is_text_json(field: pa.Field) -> bool:
    """Whether an Arrow field holds JSON *text* (to be stored as JSONB)."""
    dtype = field.type
    if isinstance(dtype, pa.JsonType):
        return True
    name = (field.metadata or {}).get(EXT_NAME_KEY.encode())
    return name in (ARROW_JSON.encode(), LANCE_JSON.encode()) and (
        pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def storage_field(field: pa.Field) -> pa.Field:
    """The Arrow field a JSON text field is written as: JSONB bytes named ``lance.json``."""
    meta = {k: v for k, v in (field.metadata or {}).items()
            if k not in (EXT_NAME_KEY.encode(), EXT_META_KEY.encode())}
    meta[EXT_NAME_KEY.encode()] = LANCE_JSON.encode()
    meta[EXT_META_KEY.encode()] = b""
    return pa.field(field.name, pa.large_binary(), field.nullable, meta)


def storage_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with its top-level JSON text fields as :func:`storage_field` (others as
    they are)."""
    if not any(_is_text_json(f) for f in schema):
        return schema
    return pa.schema([storage_field(f) if _is_text_json(f) else f for f in schema],
                     metadata=schema.metadata)


def _encode_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    arrays = [jsonb.array_from_text(col) if _is_text_json(f) else col
              for f, col in zip(batch.schema, batch.columns, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


async def as_jsonb(schema: pa.Schema, batches: AsyncIterator[pa.RecordBatch],
                   ) -> tuple[pa.Schema, AsyncIterator[pa.RecordBatch]]:
    """The schema and batches to write for input with JSON text columns (their values as
    JSONB); input without any is returned as it is."""
    target = storage_schema(schema)
    if target is schema:
        return schema, batches

    async def converted() -> AsyncIterator[pa.RecordBatch]:
        async for batch in batches:
            if batch.nbytes > OFFLOAD_BYTES:
                yield await asyncio.to_thread(_encode_batch, batch, target)
            else:
                yield _encode_batch(batch, target)

    return target, converted()


# -- reading -----------------------------------------------------------------------------------
def is_json(field: LanceField) -> bool:
    """Whether a stored field is a Lance JSON (JSONB) column."""
    return field.logical_type == "json"


def text_field(field: LanceField) -> LanceField:
    """The field users see for stored JSON field ``field``: ``arrow.json`` text (same id)."""
    meta = {k: v for k, v in field.metadata.items() if k not in (EXT_NAME_KEY, EXT_META_KEY)}
    meta[EXT_NAME_KEY] = ARROW_JSON.encode()
    meta[EXT_META_KEY] = b""
    return replace(field, logical_type="string", metadata=meta, extension_name="",
                   children=[])


def text_view(schema: LanceSchema) -> LanceSchema:
    """``schema`` with top-level JSON fields as :func:`text_field` (others unchanged)."""
    if not any(is_json(f) for f in schema.fields):
        return schema
    return replace(schema, fields=[text_field(f) if is_json(f) else f for f in schema.fields])


async def to_text_column(column: pa.Array) -> pa.Array:
    """JSON text of a column of JSONB values.

    Large columns convert off the event loop, on the shared decoding threads, in one piece
    per thread (the kernels release the GIL, so the pieces run side by side); with
    offloading turned off (:func:`~alance.io.plans.set_offloading`), on the calling thread.
    """
    if column.nbytes <= OFFLOAD_BYTES or not offloading():
        return array_to_text(column)
    loop = asyncio.get_running_loop()
    pieces = max(1, min(DECODE_WORKERS, column.nbytes // OFFLOAD_BYTES, len(column) // 1024))
    step = -(-len(column) // pieces)
    texts = await asyncio.gather(*(
        loop.run_in_executor(decode_pool(), array_to_text, column.slice(i, step))
        for i in range(0, len(column), step)))
    if len(texts) == 1:
        return texts[0]
    # (joining copies the texts: off the event loop too)
    return await loop.run_in_executor(decode_pool(), _joined, texts)


def _joined(arrays: list[pa.Array]) -> pa.Array:
    return pa.chunked_array(arrays).combine_chunks(memory_pool=TEXT_POOL)


__all__ = ["as_jsonb", "is_json", "storage_field", "storage_schema", "text_field",
           "text_view", "to_text_column"]
