"""Zone maps learned while scanning: least and greatest value and null count per row group.

Lance 2.x data files carry no page statistics (pylance keeps zone maps in separate index
files, when someone builds one). So alance learns them: when a filtered scan reads a column
of a 2.x file whole, it records for each row group (the grid scans cut 2.x files by) the
least and the greatest value and the number of nulls. Once every group of a file is known,
later filtered scans skip the groups the filter rules out, exactly as with the page
statistics of v0.2 files (:mod:`alance.dataset.query.pruning`): a service answering ``id = 123``
over and over reads one group per file instead of every row.

The maps are kept in memory with the opened file's metadata (process-wide, bounded with it)
and never written anywhere. They are learned from the values read, so they are exact bounds.
Only types Arrow orders the way Lance filters do are learned: integers and temporal types
(not floats, whose NaN Lance orders above every value, nor strings or decimals).
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from alance.format.schema import LanceField


def learnable(field: LanceField) -> bool:
    """Whether zone maps are learned for ``field``."""
    if field.children:
        return False
    dtype = field.data_type
    if isinstance(dtype, pa.BaseExtensionType):
        return False
    return bool(pa.types.is_integer(dtype) or pa.types.is_date(dtype)
                or pa.types.is_time(dtype) or pa.types.is_timestamp(dtype)
                or pa.types.is_duration(dtype))


def _integer_type(dtype: pa.DataType) -> pa.DataType:
    """The integer type whose order is ``dtype``'s (temporal types are signed counts)."""
    if pa.types.is_integer(dtype):
        return dtype
    return {8: pa.int8(), 16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[dtype.bit_width]


class _Column:
    """What is known of one field: bounds and null counts per group, and which groups."""

    def __init__(self, groups: int, dtype: np.dtype, arrow_type: pa.DataType) -> None:
        self.lows = np.zeros(groups, dtype=dtype)
        self.highs = np.zeros(groups, dtype=dtype)
        self.nulls = np.zeros(groups, dtype=np.int64)
        self.known = np.zeros(groups, dtype=bool)
        self.arrow_type = arrow_type


class ZoneMaps:
    """The learned zone maps of one data file whose row groups start at ``bounds`` (plus
    the end)."""

    def __init__(self, bounds: np.ndarray) -> None:
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self._columns: dict[int, _Column] = {}
        self._lock = threading.Lock()

    @property
    def groups(self) -> int:
        """Row groups in the file."""
        return len(self.bounds) - 1

    def complete(self, field_id: int) -> bool:
        """Whether every group of the field is known."""
        col = self._columns.get(field_id)
        return col is not None and bool(col.known.all())

    def learn(self, field: LanceField, start: int, values: pa.Array | pa.ChunkedArray) -> None:
        """Record the groups that the values of rows ``start, start + 1, ...`` cover whole.
        ``field`` must be :func:`learnable`."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        end = start + len(values)
        first = int(np.searchsorted(self.bounds, start, side="left"))
        last = int(np.searchsorted(self.bounds, end, side="right")) - 1
        if last <= first:
            return
        g_start = int(self.bounds[first])
        covered = values.slice(g_start - start, int(self.bounds[last]) - g_start)
        ints = covered.view(_integer_type(covered.type))
        starts = self.bounds[first:last] - g_start
        if ints.null_count:
            raw = ints.fill_null(0).to_numpy()
            valid = ints.is_valid().to_numpy(zero_copy_only=False)
            info = np.iinfo(raw.dtype)
            lows = np.minimum.reduceat(np.where(valid, raw, info.max), starts)
            highs = np.maximum.reduceat(np.where(valid, raw, info.min), starts)
            nulls = np.add.reduceat(~valid, starts).astype(np.int64)
        else:
            raw = ints.to_numpy()
            lows = np.minimum.reduceat(raw, starts)
            highs = np.maximum.reduceat(raw, starts)
            nulls = np.zeros(len(starts), dtype=np.int64)
        with self._lock:
            col = self._columns.get(field.id)
            if col is None:
                col = self._columns[field.id] = _Column(self.groups, raw.dtype,
                                                        field.data_type)
            col.lows[first:last] = lows
            col.highs[first:last] = highs
            col.nulls[first:last] = nulls
            col.known[first:last] = True

    def stats(self, field_ids: list[int]) -> pa.RecordBatch | None:
        """Statistics of the fields whose every group is known (one struct column each,
        named by field id, as :mod:`alance.dataset.query.pruning` reads them); ``None`` if none is
        complete."""
        arrays, names = [], []
        rows = np.diff(self.bounds)
        for fid in field_ids:
            col = self._columns.get(fid)
            if col is None or not col.known.all():
                continue
            empty = col.nulls == rows  # all null: no bounds
            mask = empty if empty.any() else None
            int_type = pa.from_numpy_dtype(col.lows.dtype)
            lows = pa.array(col.lows, int_type, mask=mask).view(col.arrow_type)
            highs = pa.array(col.highs, int_type, mask=mask).view(col.arrow_type)
            arrays.append(pa.StructArray.from_arrays(
                [pa.array(col.nulls), lows, highs], ["null_count", "min_value", "max_value"]))
            names.append(str(fid))
        if not arrays:
            return None
        return pa.RecordBatch.from_arrays(arrays, names)


__all__ = ["ZoneMaps", "learnable"]
