"""The BITMAP and LABEL_LIST scalar index formats (no IO).

One file, ``bitmap_page_lookup.lance``: one row per distinct value, ``keys`` (the column's
type; the null key first, then ascending) and ``bitmaps`` (``binary``: the rows holding that
value as a serialized row-address map, :mod:`alance.dataset.query.indices.rowaddr`). Schema metadata
``lance:index_stats`` is ``{"num_bitmaps": N}``. A LABEL_LIST index of a list column is the
same file over the lists' items (a row under every item its list holds), with
``lance:label_list_nulls`` naming the global buffer that holds the rows whose list is null.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance.dataset.query.indices.btree import sort_for_index
from alance.dataset.query.indices.rowaddr import (
    addresses_of_map,
    decode_row_addr_map,
    encode_row_addr_map,
    map_of_addresses,
)

FILE = "bitmap_page_lookup.lance"
STATS_KEY = "lance:index_stats"
#: LABEL_LIST files: the global buffer holding the rows whose list is null (row-address map).
LABEL_LIST_NULLS = "lance:label_list_nulls"


def group_rows(values: pa.Array, ids: np.ndarray) -> tuple[pa.Array, list[np.ndarray]]:
    """Distinct values (null first, then ascending) and the ids holding each."""
    values, ids = sort_for_index(values, ids)
    if not len(values):
        return values, []
    nulls = values.null_count
    keys = [values.slice(0, 1)] if nulls else []
    groups = [ids[:nulls]] if nulls else []
    rest = values.slice(nulls)
    if len(rest):
        arr = rest.to_numpy(zero_copy_only=False)
        change = np.flatnonzero(arr[1:] != arr[:-1]) + 1 if len(arr) > 1 else np.zeros(
            0, dtype=np.int64)
        starts = np.r_[0, change]
        ends = np.r_[change, len(arr)]
        keys.append(rest.take(pa.array(starts)))
        groups.extend(ids[nulls + s:nulls + e] for s, e in zip(starts, ends, strict=True))
    return pa.concat_arrays([k.cast(values.type) for k in keys]), groups


def build_table(values: pa.Array, ids: np.ndarray,
                metadata: Mapping[str, str] | None = None) -> pa.Table:
    """The bitmap file's table for the rows ``(values, ids)`` (schema ``metadata`` added)."""
    keys, groups = group_rows(values, ids)
    bitmaps = [encode_row_addr_map(map_of_addresses(g)) for g in groups]
    meta = {**(metadata or {}),
            STATS_KEY: json.dumps({"num_bitmaps": len(groups)}, separators=(",", ":"))}
    schema = pa.schema([pa.field("keys", values.type), pa.field("bitmaps", pa.binary())],
                       metadata=meta)
    return pa.table({"keys": keys, "bitmaps": pa.array(bitmaps, pa.binary())}, schema=schema)


def build_label_list(lists: pa.Array, ids: np.ndarray) -> tuple[pa.Table, bytes]:
    """A LABEL_LIST index of list rows ``(lists, ids)``: the bitmap table of the lists'
    items (a key per distinct item, null items under the null key, each row once per key)
    and the global buffer of the rows whose list is null (``label_list_nulls``)."""
    ids = np.asarray(ids, dtype=np.uint64)
    parents = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)
    items = pc.list_flatten(lists)
    table = build_table(items, ids[parents.astype(np.int64)], {LABEL_LIST_NULLS: "1"})
    null_lists = np.asarray(lists.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return table, encode_row_addr_map(map_of_addresses(ids[null_lists]))


Remap = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def remap_map(data: bytes, remap: Remap, fragment_rows: Mapping[int, int]) -> bytes:
    """A serialized row-address map with every address passed through ``remap`` (which gives
    new addresses and whether each row still exists). ``fragment_rows``: physical rows of
    the fragments whole-fragment entries stand for."""
    new, kept = remap(addresses_of_map(decode_row_addr_map(data), fragment_rows))
    return encode_row_addr_map(map_of_addresses(new[kept]))


def remap_table(table: pa.Table, remap: Remap, fragment_rows: Mapping[int, int]) -> pa.Table:
    """The bitmap file's table with every bitmap remapped (:func:`remap_map`); keys and
    metadata are kept."""
    maps = [remap_map(raw, remap, fragment_rows) for raw in table.column("bitmaps").to_pylist()]
    return table.set_column(table.schema.get_field_index("bitmaps"),
                            table.schema.field("bitmaps"), pa.array(maps, pa.binary()))
