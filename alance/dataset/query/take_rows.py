"""Rows by their stable row id (or address, without stable ids): ``take_rows``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from alance.dataset.fragments.deletions import split_addresses
from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.projection import ROW_OFFSET, Columns, Projection, row_offsets
from alance.dataset.query.row_ids import (
    ROW_ADDRESS,
    SYSTEM_COLUMNS,
    as_row_ids,
    row_addresses_of,
    system_columns,
)
from alance.dataset.query.take_pages import read_parts
from alance.errors import InvalidInputError
from alance.format.schema import as_schema, with_extension_type


async def take_rows_by_id(ctx: ReadContext, row_ids: Any,
                          columns: Columns = None) -> pa.Table:
    """The rows with ``row_ids`` (stable ids, or addresses without them), in the order given.

    ``columns`` may name system columns. An id that names no live row of this version is
    :class:`InvalidInputError`. ``columns`` may also hold ``_rowoffset``, struct field paths
    and SQL expressions (see :mod:`alance.dataset.query.projection`).
    """
    plan = Projection.parse(ctx.schema, columns, take=True, plain=SYSTEM_COLUMNS)
    if plan is not None:
        return await _take_projected(ctx, row_ids, plan)
    ids = as_row_ids(row_ids)
    schema = ctx.schema
    names = list(columns) if columns is not None else list(schema.names)
    data_fields = [schema.field(n) for n in names if n not in SYSTEM_COLUMNS]
    system = [n for n in names if n in SYSTEM_COLUMNS]
    out_fields = [with_extension_type(schema.field(n).to_arrow()) if n not in SYSTEM_COLUMNS
                  else pa.field(n, pa.uint64(), True) for n in names]
    out_schema = pa.schema(out_fields)
    if not len(ids):
        return out_schema.empty_table()
    addresses, found = await row_addresses_of(ctx, ids)
    if not bool(found.all()):
        missing = ids[~found][:5].tolist()
        raise InvalidInputError(f"row ids {missing} name no row of version "
                                f"{ctx.snapshot.version}")
    by_id = {int(f.id): f for f in ctx.snapshot.fragments}
    groups = split_addresses(addresses)
    storage = pa.schema([pa.field(n, pa.uint64(), True) if n in SYSTEM_COLUMNS
                         else schema.field(n).to_arrow() for n in names])

    parts = [(by_id[fid], off.astype(np.int64)) for fid, off in groups.items()]
    data = await read_parts(ctx, parts, data_fields)
    by_name: dict[str, pa.Array | pa.ChunkedArray] = {f.name: data[f.id] for f in data_fields}
    if system:
        extra = [await system_columns(ctx, by_id[fid], off, system)
                 for fid, off in groups.items()]
        for n in system:
            by_name[n] = pa.chunked_array([e[n] for e in extra], pa.uint64())
    # rows come back grouped by fragment, offsets ascending: i.e. sorted by address
    unique_addr = np.concatenate([(np.uint64(fid) << np.uint64(32)) | off.astype(np.uint64)
                                  for fid, off in groups.items()])
    order = np.searchsorted(unique_addr, addresses)
    table = pa.Table.from_arrays([by_name[n] for n in names], schema=storage)
    if len(order) != len(unique_addr) or not np.array_equal(order, np.arange(len(order))):
        table = table.take(pa.array(order))
    table = table.combine_chunks()
    return pa.Table.from_batches([as_schema(b, out_schema) for b in table.to_batches()],
                                 schema=out_schema)


async def _take_projected(ctx: ReadContext, row_ids: Any, plan: Projection) -> pa.Table:
    """:func:`take_rows_by_id` of what the projection ``plan`` computes."""
    inner = [n for n in plan.inner if n != ROW_OFFSET]
    # Some column, so that the rows are counted (a literal needs none).
    table = await take_rows_by_id(ctx, row_ids, inner or [ROW_ADDRESS])
    if ROW_OFFSET in plan.inner:
        ids = as_row_ids(row_ids)
        addresses, _ = await row_addresses_of(ctx, ids)  # all found: the take succeeded
        by_id = {int(f.id): f for f in ctx.snapshot.fragments}
        frag_ids = addresses >> np.uint64(32)
        offsets = np.zeros(len(ids), dtype=np.uint64)
        for fid in np.unique(frag_ids).tolist():
            mask = frag_ids == np.uint64(fid)
            found = await row_offsets(ctx, by_id[int(fid)],
                                      addresses[mask] & np.uint64(0xFFFFFFFF))
            offsets[mask] = found.to_numpy()
        table = table.append_column(pa.field(ROW_OFFSET, pa.uint64(), False),
                                    pa.array(offsets, pa.uint64()))
    result: pa.Table = plan.apply_table(table)
    return result
