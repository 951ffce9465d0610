"""Random access: rows by their position in the dataset, reading only the pages that hold them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from alance.dataset.read import ReadContext, live_rows
from alance.dataset.scan import as_schema
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


async def take_rows(ctx: ReadContext, indices: Any, columns: Sequence[str] | None) -> pa.Table:
    """Rows at dataset positions ``indices`` (0-based, deleted rows not counted), in order."""
    schema = ctx.schema
    projection = [schema.field(n) for n in (columns if columns is not None else schema.names)]
    storage_schema = pa.schema([f.to_arrow() for f in projection])
    out_schema = pa.schema([with_extension_type(f) for f in storage_schema])
    idx = _as_indices(indices)
    if idx.size == 0:
        return out_schema.empty_table()
    fragments = ctx.snapshot.fragments
    ends = np.cumsum([live_rows(f) for f in fragments], dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    bad = idx[(idx < 0) | (idx >= total)]
    if bad.size:
        raise InvalidInputError(f"row index {int(bad[0])} is out of range: the dataset has "
                                f"{total} rows")
    which = np.searchsorted(ends, idx, side="right")
    starts = ends - np.array([live_rows(f) for f in fragments], dtype=np.int64)

    async def read(pos: int) -> tuple[np.ndarray, pa.RecordBatch]:
        frag = fragments[pos]
        reader = ctx.fragment(frag)
        mask = which == pos
        local = np.unique(idx[mask] - starts[pos])
        deleted = await ctx.deleted_offsets(frag)
        if deleted is not None and len(deleted):
            alive = np.setdiff1d(np.arange(frag.physical_rows, dtype=np.int64),
                                 deleted.astype(np.int64), assume_unique=True)
            physical = alive[local]
        else:
            physical = local
        batch = await reader.read_rows(projection, physical)
        return local + starts[pos], batch

    parts = await asyncio.gather(*(read(int(p)) for p in np.unique(which)))
    positions = np.concatenate([p for p, _ in parts])
    table = pa.Table.from_batches([b for _, b in parts], schema=storage_schema)
    order = np.searchsorted(positions, idx)  # positions is sorted: fragments in order, unique
    result = table.take(pa.array(order)).combine_chunks()
    return pa.Table.from_batches([as_schema(b, out_schema) for b in result.to_batches()],
                                 schema=out_schema)
