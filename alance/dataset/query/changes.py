"""The change data feed: rows inserted, updated and deleted between two versions.

For a table with stable row ids, between ``begin`` (exclusive) and ``end`` (inclusive):

* **inserted**: rows of ``end`` with ``_row_created_at_version`` in ``(begin, end]``;
* **updated**: rows of ``end`` with ``_row_created_at_version <= begin`` and
  ``_row_last_updated_at_version`` in ``(begin, end]``;
* **deleted**: rows live at ``begin`` whose row id no live row of ``end`` has (stable row ids
  are never reused, so this is exact as long as version ``begin`` can still be read; its
  values are those of ``begin``).

These are net changes: a row inserted and then updated in the range is one insert, a row
inserted and deleted in the range does not appear. Every batch carries the projected columns,
``_rowid``, both version columns and ``_change_type`` (``"insert"``, ``"update"`` or
``"delete"``), inserts first, then updates, then deletes. Rows are streamed: batches of the
scans of ``end`` and takes from ``begin``, never the whole result at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from alance.dataset.fragments.read import ReadContext
from alance.dataset.query.row_ids import (
    ROW_CREATED_AT_VERSION,
    ROW_ID,
    ROW_LAST_UPDATED_AT_VERSION,
    row_id_index,
    uses_stable_row_ids,
)
from alance.dataset.query.scan import Scanner
from alance.dataset.query.take_rows import take_rows_by_id
from alance.errors import InvalidInputError, UnsupportedFeatureError

CHANGE_TYPE = "_change_type"
INSERT, UPDATE, DELETE = "insert", "update", "delete"
#: Deleted rows are read from the begin version this many at a time.
DELETE_BATCH = 8192
_LINEAGE = (ROW_ID, ROW_CREATED_AT_VERSION, ROW_LAST_UPDATED_AT_VERSION)


def inserted_filter(begin: int, end: int) -> str:
    """SQL selecting rows created in ``(begin, end]`` (the format's wording)."""
    return f"{ROW_CREATED_AT_VERSION} > {begin} AND {ROW_CREATED_AT_VERSION} <= {end}"


def updated_filter(begin: int, end: int) -> str:
    """SQL selecting rows that existed at ``begin`` and were updated in ``(begin, end]``."""
    return (f"{ROW_CREATED_AT_VERSION} <= {begin} AND {ROW_LAST_UPDATED_AT_VERSION} > {begin}"
            f" AND {ROW_LAST_UPDATED_AT_VERSION} <= {end}")


class ChangeFeed:
    """The changes between two versions (see the module docs). Iterate it with ``async for``
    or read it whole with :meth:`to_table`."""

    def __init__(self, begin: ReadContext | None, end: ReadContext,
                 columns: Sequence[str] | None, *, include_deleted: bool = True,
                 batch_size: int | None = None) -> None:
        for ctx in (begin, end):
            if ctx is not None and not uses_stable_row_ids(ctx.snapshot.manifest):
                raise UnsupportedFeatureError("the change data feed needs a dataset created "
                                              "with enable_stable_row_ids=True")
        if begin is not None and begin.snapshot.version > end.snapshot.version:
            raise InvalidInputError(f"begin version {begin.snapshot.version} is after end "
                                    f"version {end.snapshot.version}")
        self.begin_ctx = begin
        self.end_ctx = end
        names = list(columns) if columns is not None else list(end.schema.names)
        self.columns = [n for n in names if n not in _LINEAGE]
        self.include_deleted = include_deleted
        self.batch_size = batch_size
        # compile now: unknown columns fail before anything is read
        self._scanner(INSERT)

    @property
    def begin_version(self) -> int:
        """The version the changes are counted from (exclusive; 0: from the start)."""
        return self.begin_ctx.snapshot.version if self.begin_ctx is not None else 0

    @property
    def end_version(self) -> int:
        """The version the changes are counted up to (inclusive)."""
        return self.end_ctx.snapshot.version

    @property
    def schema(self) -> pa.Schema:
        """Schema of every batch: the columns, ``_rowid``, the versions, ``_change_type``."""
        base = self._scanner(INSERT).output_schema
        return base.append(pa.field(CHANGE_TYPE, pa.string(), False))

    def _scanner(self, kind: str) -> Scanner:
        b, e = self.begin_version, self.end_version
        where = inserted_filter(b, e) if kind == INSERT else updated_filter(b, e)
        return Scanner(self.end_ctx, columns=[*self.columns, *_LINEAGE], filter=where,
                       batch_size=self.batch_size)

    def _tagged(self, batch: pa.RecordBatch, kind: str) -> pa.RecordBatch:
        tag = pa.array(np.full(batch.num_rows, kind, dtype=object), pa.string())
        return pa.RecordBatch.from_arrays([*batch.columns, tag], schema=self.schema)

    async def deleted_row_ids(self) -> np.ndarray:
        """Row ids live at the begin version and not at the end version (sorted)."""
        if self.begin_ctx is None:
            return np.empty(0, dtype=np.uint64)
        before, after = await row_id_index(self.begin_ctx), await row_id_index(self.end_ctx)
        ids = before.row_ids()
        _, found = after.lookup(ids)
        return ids[~found]

    async def to_batches(self) -> AsyncIterator[pa.RecordBatch]:
        """Stream the changes as record batches."""
        if self.begin_version == self.end_version:
            return
        for kind in (INSERT, UPDATE):
            async for batch in self._scanner(kind).to_batches():
                if batch.num_rows:
                    yield self._tagged(batch, kind)
        if not self.include_deleted or self.begin_ctx is None:
            return
        gone = await self.deleted_row_ids()
        step = self.batch_size or DELETE_BATCH
        # columns added after the begin version are null in deleted rows
        present = [n for n in self.columns if n in self.begin_ctx.schema.names]
        target = self.schema
        for start in range(0, len(gone), step):
            rows = await take_rows_by_id(self.begin_ctx, gone[start:start + step],
                                         [*present, *_LINEAGE])
            for batch in rows.to_batches():
                if batch.num_rows:
                    yield self._tagged(_conform(batch, target), DELETE)

    def __aiter__(self) -> AsyncIterator[pa.RecordBatch]:
        return self.to_batches()

    async def to_table(self) -> pa.Table:
        """All changes in one table."""
        batches = [b async for b in self.to_batches()]
        return pa.Table.from_batches(batches, schema=self.schema)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the columns of ``target`` (minus ``_change_type``), nulls for missing."""
    arrays = []
    for field in list(target)[:-1]:
        if field.name in batch.schema.names:
            col = batch.column(field.name)
            arrays.append(col if col.type == field.type else col.cast(field.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(list(target)[:-1]))


def change_feed(begin: ReadContext, end: ReadContext, columns: Sequence[str] | None = None,
                **kwargs: Any) -> ChangeFeed:
    """A :class:`ChangeFeed` between two loaded versions."""
    return ChangeFeed(begin, end, columns, **kwargs)


__all__ = ["CHANGE_TYPE", "DELETE", "INSERT", "UPDATE", "ChangeFeed", "change_feed",
           "inserted_filter", "updated_filter"]
