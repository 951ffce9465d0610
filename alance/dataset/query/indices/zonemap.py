"""The ZONEMAP scalar index format (no IO).

One file, ``zonemap.lance``: one row per zone of consecutive rows of one fragment: ``min``,
``max`` (the column's type; NaN left out), ``null_count``, ``nan_count`` (``uint32``),
``fragment_id``, ``zone_start``, ``zone_length`` (``uint64``; physical offsets
``[zone_start, zone_start + zone_length)``, deleted rows inside included). Schema metadata:
``rows_per_zone`` (live rows per zone) and ``null_bitmap``, the global buffer holding the
null rows as a row-address map (:mod:`alance.dataset.query.indices.rowaddr`).

A zone map rules zones *out*; the rows of the zones it keeps are candidates only.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyroaring

from alance.dataset.query.indices.predicates import may_overlap
from alance.dataset.query.indices.rowaddr import encode_row_addr_map, map_of_addresses
from alance.filter import RangeTest

FILE = "zonemap.lance"
ROWS_PER_ZONE = 8192
#: The details pylance 14 records for a zone map of 8192-row zones (protobuf, as written).
DETAILS = b"\x08\x80\x40\x10\x00\x18\x01"

#: Range-test ops a zone map can rule zones out for.
ZONE_OPS = frozenset({"eq", "lt", "le", "gt", "ge", "in", "is_null", "not_null"})


def zone_rows(zones: pa.Table, test: RangeTest) -> dict[int, pyroaring.BitMap]:
    """Per fragment, the physical offsets of the zones that may hold rows passing ``test``."""
    lo = zones.column("min").combine_chunks()
    hi = zones.column("max").combine_chunks()
    nulls = zones.column("null_count").to_numpy()
    keep = may_overlap(lo, hi, nulls, test)
    if test.op == "not_null":
        length = zones.column("zone_length").to_numpy().astype(np.int64)
        keep &= nulls.astype(np.int64) < length
    out: dict[int, pyroaring.BitMap] = {}
    frags = zones.column("fragment_id").to_numpy()
    starts = zones.column("zone_start").to_numpy()
    lengths = zones.column("zone_length").to_numpy()
    for f, s, n, k in zip(frags.tolist(), starts.tolist(), lengths.tolist(), keep.tolist(),
                          strict=True):
        rows = out.setdefault(int(f), pyroaring.BitMap())
        if k:
            rows.add_range(int(s), int(s) + int(n))
    return out


def build_table(values: pa.Array, addresses: np.ndarray,
                rows_per_zone: int = ROWS_PER_ZONE) -> tuple[pa.Table, bytes]:
    """The zone map table for rows ``(values, addresses)`` in address order, and the null
    rows' global buffer."""
    addrs = np.asarray(addresses, dtype=np.uint64)
    frags = (addrs >> np.uint64(32)).astype(np.int64)
    offsets = (addrs & np.uint64(0xFFFFFFFF)).astype(np.int64)
    rows: dict[str, list] = {k: [] for k in ("min", "max", "null_count", "nan_count",
                                             "fragment_id", "zone_start", "zone_length")}
    cuts = np.flatnonzero(np.diff(frags)) + 1 if len(frags) else np.zeros(0, dtype=np.int64)
    floating = pa.types.is_floating(values.type)
    for lo_f, hi_f in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(frags)].tolist(),
                          strict=True):
        if hi_f <= lo_f:
            continue
        for lo in range(lo_f, hi_f, rows_per_zone):
            hi = min(lo + rows_per_zone, hi_f)
            zone = values.slice(lo, hi - lo)
            nan = int(pc.sum(pc.is_nan(zone)).as_py() or 0) if floating else 0
            clean = pc.filter(zone, pc.invert(pc.is_nan(zone))) if floating else zone
            mm = pc.min_max(clean)
            rows["min"].append(mm["min"].as_py())
            rows["max"].append(mm["max"].as_py())
            rows["null_count"].append(zone.null_count)
            rows["nan_count"].append(nan)
            rows["fragment_id"].append(int(frags[lo]))
            rows["zone_start"].append(int(offsets[lo]))
            rows["zone_length"].append(int(offsets[hi - 1]) - int(offsets[lo]) + 1)
    schema = pa.schema([pa.field("min", values.type), pa.field("max", values.type),
                        pa.field("null_count", pa.uint32(), nullable=False),
                        pa.field("nan_count", pa.uint32(), nullable=False),
                        pa.field("fragment_id", pa.uint64(), nullable=False),
                        pa.field("zone_start", pa.uint64(), nullable=False),
                        pa.field("zone_length", pa.uint64(), nullable=False)],
                       metadata={"rows_per_zone": str(rows_per_zone), "null_bitmap": "1"})
    table = pa.table({k: pa.array(v, schema.field(k).type) for k, v in rows.items()},
                     schema=schema)
    null_rows = addrs[np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)]
    return table, encode_row_addr_map(map_of_addresses(null_rows))
