"""The change data feed cut into tasks that engines such as Spark run in parallel.

A :class:`~alance.dataset.query.changes.ChangeFeed` between two versions splits along fragments:

* one ``"upserts"`` task per fragment of the end version: its rows inserted or updated in the
  range (inserts first, then updates), read by a scan of that fragment alone;
* one ``"deletes"`` task per fragment of the begin version (when deleted rows are asked for):
  its rows that were live at the begin version and have no live row at the end version (by
  stable row id), with their values at the begin version.

Together the tasks yield exactly the rows of the feed, in the feed's schema; each task reads
only its fragment (plus, for deletes, the end version's row id index).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from alance.dataset.query.changes import (
    CHANGE_TYPE,
    DELETE,
    DELETE_BATCH,
    INSERT,
    UPDATE,
    ChangeFeed,
    inserted_filter,
    updated_filter,
)
from alance.dataset.query.row_ids import (
    ROW_CREATED_AT_VERSION,
    ROW_ID,
    ROW_LAST_UPDATED_AT_VERSION,
    row_id_index,
)
from alance.dataset.query.scan import Scanner
from alance.dataset.query.take_rows import take_rows_by_id
from alance.errors import InvalidInputError

#: Task kinds: rows of an end fragment inserted/updated; rows of a begin fragment deleted.
UPSERTS, DELETES = "upserts", "deletes"
_LINEAGE = (ROW_ID, ROW_CREATED_AT_VERSION, ROW_LAST_UPDATED_AT_VERSION)


@dataclass(frozen=True)
class ChangeTask:
    """One task of a distributed change feed: a kind and a fragment id."""

    kind: str
    fragment_id: int


def plan_change_tasks(feed: ChangeFeed) -> list[ChangeTask]:
    """The tasks that together yield ``feed``'s rows (none when begin and end are equal)."""
    if feed.begin_version == feed.end_version:
        return []
    tasks = [ChangeTask(UPSERTS, int(f.id)) for f in feed.end_ctx.snapshot.fragments]
    if feed.include_deleted and feed.begin_ctx is not None:
        tasks += [ChangeTask(DELETES, int(f.id)) for f in feed.begin_ctx.snapshot.fragments]
    return tasks


def _tagged(batch: pa.RecordBatch, kind: str, schema: pa.Schema) -> pa.RecordBatch:
    tag = pa.array(np.full(batch.num_rows, kind, dtype=object), pa.string())
    return pa.RecordBatch.from_arrays([*batch.columns, tag], schema=schema)


async def scan_change_task(feed: ChangeFeed, task: ChangeTask) -> AsyncIterator[pa.RecordBatch]:
    """Stream the changes of one :class:`ChangeTask` in ``feed.schema``."""
    schema = feed.schema
    if task.kind == UPSERTS:
        if not any(f.id == task.fragment_id for f in feed.end_ctx.snapshot.fragments):
            raise InvalidInputError(f"version {feed.end_version} has no fragment "
                                    f"{task.fragment_id}")
        b, e = feed.begin_version, feed.end_version
        for kind, where in ((INSERT, inserted_filter(b, e)), (UPDATE, updated_filter(b, e))):
            scanner = Scanner(feed.end_ctx, columns=[*feed.columns, *_LINEAGE], filter=where,
                              batch_size=feed.batch_size, fragments=[task.fragment_id])
            async for batch in scanner.to_batches():
                if batch.num_rows:
                    yield _tagged(batch, kind, schema)
        return
    if task.kind != DELETES:
        raise InvalidInputError(f"unknown change task kind {task.kind!r}")
    begin = feed.begin_ctx
    if begin is None or not any(f.id == task.fragment_id for f in begin.snapshot.fragments):
        raise InvalidInputError(f"version {feed.begin_version} has no fragment "
                                f"{task.fragment_id}")
    live = Scanner(begin, columns=[ROW_ID], fragments=[task.fragment_id])
    parts = [b.column(0).to_numpy() async for b in live.to_batches()]
    if not parts:
        return
    ids = np.concatenate(parts).astype(np.uint64)
    _, found = (await row_id_index(feed.end_ctx)).lookup(ids)
    gone = ids[~found]
    present = [n for n in feed.columns if n in begin.schema.names]
    step = feed.batch_size or DELETE_BATCH
    for start in range(0, len(gone), step):
        rows = await take_rows_by_id(begin, gone[start:start + step], [*present, *_LINEAGE])
        for batch in rows.to_batches():
            if batch.num_rows:
                yield _tagged(_conform(batch, schema), DELETE, schema)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the columns of ``schema`` but the change type; nulls for columns added
    after the begin version."""
    fields = [f for f in schema if f.name != CHANGE_TYPE]
    arrays = []
    for f in fields:
        if f.name in batch.schema.names:
            col = batch.column(f.name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
