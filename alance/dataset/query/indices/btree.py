"""The BTREE scalar index format (no IO).

Files under ``_indices/{uuid}/``:

* ``page_data.lance``: every indexed row as ``values`` (the column's type, nulls first, then
  ascending) and ``ids`` (``uint64``: the row address, also in datasets with stable row ids),
  cut into pages of ``batch_size`` rows (page ``i`` = rows ``[i * batch_size, ...)``);
* ``page_lookup.lance``: one row per page: ``min`` and ``max`` (the page's first and last
  value, so ``min`` is null when the page holds nulls), ``null_count`` (``uint32``),
  ``page_idx`` (``uint32``); schema metadata ``batch_size`` and ``range_partitioned``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.dataset.query.indices.predicates import may_overlap
from alance.filter import RangeTest

DATA_FILE = "page_data.lance"
LOOKUP_FILE = "page_lookup.lance"
#: Rows per page (pylance's default).
BATCH_SIZE = 4096


def page_size(lookup_metadata: dict[bytes, bytes] | None) -> int:
    """Rows per page recorded in the lookup file's schema metadata."""
    raw = (lookup_metadata or {}).get(b"batch_size")
    return int(raw) if raw else BATCH_SIZE


def pages_for(lookup: pa.Table, test: RangeTest) -> list[int]:
    """The pages that may hold rows passing ``test``."""
    lo = lookup.column("min").combine_chunks()
    hi = lookup.column("max").combine_chunks()
    nulls = lookup.column("null_count").to_numpy()
    mask = may_overlap(lo, hi, nulls, test)
    pages = lookup.column("page_idx").to_numpy()
    return sorted(int(p) for p in pages[mask])


def sort_for_index(values: pa.Array, ids: np.ndarray) -> tuple[pa.Array, np.ndarray]:
    """``values`` and ``ids`` ordered as an index stores them: nulls first, then ascending
    values (ties by id)."""
    table = pa.table({"v": values, "i": pa.array(ids, pa.uint64())})
    order = pc.sort_indices(table, options=pc.SortOptions(
        sort_keys=[("v", "ascending", "at_start"), ("i", "ascending", "at_start")]))
    return values.take(order), np.asarray(ids, dtype=np.uint64)[order.to_numpy()]


def build_tables(values: pa.Array, ids: np.ndarray, batch_size: int = BATCH_SIZE,
                 ) -> tuple[pa.Table, pa.Table]:
    """``(page_data, page_lookup)`` tables for the rows ``(values, ids)`` (any order)."""
    values, ids = sort_for_index(values, ids)
    data = pa.table({"values": values,
                     "ids": pa.array(ids, pa.uint64())},
                    schema=pa.schema([pa.field("values", values.type),
                                      pa.field("ids", pa.uint64(), nullable=False)]))
    n = len(values)
    starts = list(range(0, n, batch_size))
    mins = [values[s] for s in starts]
    maxs = [values[min(s + batch_size, n) - 1] for s in starts]
    nulls = [values.slice(s, batch_size).null_count for s in starts]
    schema = pa.schema([pa.field("min", values.type), pa.field("max", values.type),
                        pa.field("null_count", pa.uint32(), nullable=False),
                        pa.field("page_idx", pa.uint32(), nullable=False)],
                       metadata={"range_partitioned": "false", "batch_size": str(batch_size)})
    lookup = pa.table({"min": pa.array([m.as_py() for m in mins], values.type),
                       "max": pa.array([m.as_py() for m in maxs], values.type),
                       "null_count": pa.array(nulls, pa.uint32()),
                       "page_idx": pa.array(range(len(starts)), pa.uint32())}, schema=schema)
    return data, lookup
