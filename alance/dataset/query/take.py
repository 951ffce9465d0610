"""Random access: rows by their position in the dataset, reading only the pages that hold them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from alance.dataset.fragments.read import ReadContext, live_rows
from alance.dataset.query.projection import ROW_OFFSET, Columns, Projection, system_columns_at
from alance.dataset.query.take_batch import TakeBatcher
from alance.dataset.query.take_pages import read_parts
from alance.errors import InvalidInputError
from alance.format.schema import with_extension_type


def _as_indices(indices: Any) -> np.ndarray:
    try:
        arr = np.asarray(indices.to_numpy() if isinstance(indices, (pa.Array, pa.ChunkedArray))
                         else indices)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"indices must be integers: {exc}") from exc
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInputError(f"indices must be integers, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _schemas(ctx: ReadContext, columns: Sequence[str] | None) -> tuple[list[Any], pa.Schema]:
    """The projected fields and the schema of the result (unknown names refused)."""
    schema = ctx.schema
    projection = [schema.field(n) for n in (columns if columns is not None else schema.names)]
    out_schema = pa.schema([with_extension_type(f.to_arrow()) for f in projection])
    return projection, out_schema


async def take_rows(ctx: ReadContext, indices: Any, columns: Columns,
                    batcher: TakeBatcher | None = None) -> pa.Table:
    """Rows at dataset positions ``indices`` (0-based, deleted rows not counted), in order.

    With a ``batcher``, takes that run concurrently share one read (see
    :mod:`alance.dataset.query.take_batch`). ``columns`` may also hold system columns, struct
    field paths and SQL expressions (see :mod:`alance.dataset.query.projection`).
    """
    plan = Projection.parse(ctx.schema, columns, take=True, plain=())
    if plan is not None:
        return await _take_projected(ctx, indices, plan, batcher)
    columns = None if columns is None else list(columns)  # names only, as parse found
    _, out_schema = _schemas(ctx, columns)  # unknown columns fail here, for this caller
    idx = _as_indices(indices)
    if idx.size == 0:
        return out_schema.empty_table()
    ends = ctx.live_row_ends()
    total = int(ends[-1]) if len(ends) else 0
    if idx.min() < 0 or idx.max() >= total:
        bad = idx[(idx < 0) | (idx >= total)]
        raise InvalidInputError(f"row index {int(bad[0])} is out of range: the dataset has "
                                f"{total} rows")
    if not out_schema:  # no columns, but one row per index (as pylance returns)
        return pa.Table.from_batches(
            [pa.RecordBatch.from_arrays([pa.nulls(len(idx))], ["_"]).select([])])
    if batcher is not None:
        return await batcher.take(idx, columns)
    union, inverse = np.unique(idx, return_inverse=True)
    table = await read_positions(ctx, union, columns)
    if len(union) == len(idx) and np.array_equal(union, idx):
        return table
    return table.take(pa.array(inverse.ravel()))


async def _take_projected(ctx: ReadContext, indices: Any, plan: Projection,
                          batcher: TakeBatcher | None) -> pa.Table:
    """:func:`take_rows` of what ``plan`` computes: its data columns taken, its system
    columns added (``_rowoffset`` is the index itself), then the projection applied."""
    data = [n for n in plan.inner if n in ctx.schema.names]
    table = await take_rows(ctx, indices, data, batcher)  # validates the indices
    system = [n for n in plan.inner if n not in data]
    if system:
        positions = _as_indices(indices)
        extra = await system_columns_at(ctx, positions, [n for n in system if n != ROW_OFFSET])
        if ROW_OFFSET in system:
            extra[ROW_OFFSET] = pa.array(positions.astype(np.uint64), pa.uint64())
        table = pa.Table.from_arrays([*table.combine_chunks().columns, *extra.values()],
                                     names=[*table.column_names, *extra])
    return plan.apply_table(table)


async def read_positions(ctx: ReadContext, positions: np.ndarray,
                         columns: Sequence[str] | None) -> pa.Table:
    """Rows at sorted, unique, valid dataset ``positions``, in that order."""
    projection, out_schema = _schemas(ctx, columns)
    fragments = ctx.snapshot.fragments
    ends = ctx.live_row_ends()
    which = np.searchsorted(ends, positions, side="right")
    if len(fragments) == 1 or int(which[0]) == int(which[-1]):
        groups = [(int(which[0]), positions)]
    else:
        cut = np.flatnonzero(np.diff(which)) + 1
        groups = [(int(which[a]), positions[a:b]) for a, b in
                  zip(np.concatenate(([0], cut)), np.concatenate((cut, [len(which)])),
                      strict=True)]

    async def physical(pos: int, wanted: np.ndarray) -> tuple[Any, np.ndarray]:
        frag = fragments[pos]
        local = wanted - (int(ends[pos]) - live_rows(frag))
        deleted = await ctx.deleted_offsets(frag)
        if deleted is not None and len(deleted):
            alive = np.setdiff1d(np.arange(frag.physical_rows, dtype=np.int64),
                                 deleted.astype(np.int64), assume_unique=True)
            local = alive[local]
        return frag, local

    parts = [await physical(*g) for g in groups]
    taken = await read_parts(ctx, parts, projection)
    columns_out = []
    for f, out in zip(projection, out_schema, strict=True):
        col = taken[f.id]
        if isinstance(out.type, pa.BaseExtensionType) and \
                not isinstance(col.type, pa.BaseExtensionType):
            chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
            col = pa.chunked_array([pa.ExtensionArray.from_storage(out.type, c)
                                    for c in chunks], out.type)
        columns_out.append(col)
    return pa.Table.from_arrays(columns_out, schema=out_schema)
