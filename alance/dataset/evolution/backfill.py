"""Backfill: compute new columns for every row of every fragment and write them as data files.

Adding a column (and rewriting one with a new type) leaves the existing data files alone: each
fragment gets one more data file holding only the new fields, with one value per *physical*
row. The computation (a SQL expression, a user function, a join...) sees only the live rows of
a batch; deleted rows get nulls in the new file (they are never read).

Fragments are processed concurrently (a bounded number at a time); within a fragment, batches
are computed one after the other and streamed into the file writer, so memory stays bounded
by a few batches per fragment in flight. :func:`commit_merge` then commits the result.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import (
    WriteParams,
    delete_fragment_files,
    file_version_of,
    removed_on_failure,
    write_fragments,
)
from alance.dataset.query.row_ids import SYSTEM_COLUMNS, system_columns
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.schema import LanceField, LanceSchema
from alance.io.store import DatasetStore
from alance.transaction.operations import new_merge

#: Rows computed at a time (SQL evaluation has a per-call cost: large batches amortise it).
DEFAULT_BATCH_SIZE = 64 * 1024
DEFAULT_CONCURRENCY = 4
#: Rows per row group of new legacy data files (as legacy files are written by default).
ROWS_PER_GROUP = 1024


@dataclass(frozen=True)
class Progress:
    """How far a backfill is: reported after every batch to the ``progress`` callback."""

    fragments_done: int
    fragments_total: int
    rows_done: int
    rows_total: int


#: Computes the new columns of one batch of live rows (same number of rows out as in).
Mapper = Callable[[pa.RecordBatch], Awaitable[pa.RecordBatch]]
ProgressCallback = Callable[[Progress], Any]


def check_writable_files(storage_version: str) -> None:
    """Refuse datasets whose data file version the writer cannot produce."""
    file_version_of(storage_version)


def check_new_fields(schema: LanceSchema, storage_version: str) -> None:
    """New columns of a v0.2 dataset cannot be dictionaries (their values live in the
    manifest, fixed when the dataset was written)."""
    if file_version_of(storage_version) is not None:
        return
    for f in schema.walk():
        if f.logical_type.startswith("dict:"):
            raise UnsupportedFeatureError(
                f"column {f.name!r}: dictionary columns cannot be added to a v0.2 dataset")


def _expand(batch: pa.RecordBatch, keep: np.ndarray, filler: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` (one row per kept position) spread over all positions; deleted positions get
    the one row of ``filler`` (v0.2 files cannot hold nulls of every type; never read)."""
    index = np.cumsum(keep, dtype=np.int64) - 1
    index[~keep] = batch.num_rows
    both = pa.concat_batches([batch, filler])
    return both.take(pa.array(index))


def conform(result: Any, schema: pa.Schema, rows: int) -> pa.RecordBatch:
    """A mapper's result as a batch of ``schema`` (storage types) with ``rows`` rows."""
    if isinstance(result, pa.Table):
        result = result.combine_chunks()
        batches = result.to_batches()
        result = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=result.schema)
    elif isinstance(result, dict):
        result = pa.RecordBatch.from_pydict(result)
    elif not isinstance(result, pa.RecordBatch) and hasattr(result, "columns") and hasattr(
            result, "dtypes"):
        result = pa.RecordBatch.from_pandas(result, preserve_index=False)
    if not isinstance(result, pa.RecordBatch):
        raise InvalidInputError("a column function must return a pyarrow RecordBatch or Table, "
                                f"a dict of arrays or a pandas DataFrame, not "
                                f"{type(result).__name__}")
    if result.num_rows != rows:
        raise InvalidInputError(f"a column function returned {result.num_rows} rows for a "
                                f"batch of {rows}")
    if result.schema.names != schema.names:
        raise InvalidInputError(f"a column function returned columns {result.schema.names}, "
                                f"expected {schema.names}")
    columns = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in result.columns]
    try:
        columns = [c if c.type.equals(f.type) else c.cast(f.type)
                   for c, f in zip(columns, schema, strict=True)]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidInputError(f"a column function returned values of another type: {exc}",
                                ) from exc
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def as_mapper(fn: Callable[[pa.RecordBatch], Any]) -> Mapper:
    """Wrap a user function: coroutine functions are awaited, plain ones run in a thread."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)):  # noqa: B004
        async def run_async(batch: pa.RecordBatch) -> Any:
            return await fn(batch)
        return run_async

    async def run_sync(batch: pa.RecordBatch) -> Any:
        result = await asyncio.to_thread(fn, batch)
        if inspect.isawaitable(result):
            result = await result
        return result
    return run_sync


class Backfill:
    """One backfill over the fragments of a version (see the module docstring)."""

    def __init__(self, ctx: ReadContext, read_fields: Sequence[LanceField],
                 system_columns: Sequence[str], mapper: Mapper, out_schema: LanceSchema, *,
                 batch_size: int | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                 progress: ProgressCallback | None = None) -> None:
        if batch_size is not None and batch_size < 1:
            raise InvalidInputError("batch_size must be >= 1")
        if concurrency < 1:
            raise InvalidInputError("concurrency must be >= 1")
        self.ctx = ctx
        self.read_fields = list(read_fields)
        self.system_columns = list(system_columns)
        self.mapper = mapper
        self.out_schema = out_schema
        self.out_arrow = out_schema.to_arrow()
        self.storage_version = ctx.snapshot.data_storage_version
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE
        self.concurrency = concurrency
        self.progress = progress
        self._done_fragments = 0
        self._done_rows = 0
        self._total_rows = sum(int(f.physical_rows) for f in ctx.snapshot.fragments)

    async def _report(self, rows: int, fragment_done: bool) -> None:
        self._done_rows += rows
        self._done_fragments += fragment_done
        if self.progress is not None:
            result = self.progress(Progress(self._done_fragments, len(self.ctx.snapshot.fragments),
                                            self._done_rows, self._total_rows))
            if inspect.isawaitable(result):
                await result

    async def layout(self, fragment: table_pb2.DataFragment,
                     ) -> tuple[list[tuple[int, int]], int]:
        """The row spans to compute at a time, and the rows per group of the new file.

        pylance reads a v0.2 fragment only if all its files have the same row groups, so new
        legacy files copy the groups of the fragment's first file: spans are whole runs of its
        groups (one group per span when their sizes vary).
        """
        n = int(fragment.physical_rows)
        if file_version_of(self.storage_version) is None and fragment.files:
            bounds = await self.ctx.fragment(fragment).row_group_bounds()
            sizes = np.diff(bounds)
            if len(sizes) and int(bounds[-1]) == n:
                group = int(sizes[0])
                if group and (sizes[:-1] == group).all() and sizes[-1] <= group:
                    per = max(1, self.batch_size // group) * group
                    return [(s, min(n, s + per)) for s in range(0, n, per)], group
                return ([(int(a), int(b)) for a, b in itertools.pairwise(bounds)],
                        int(sizes.max()))
        step = self.batch_size
        return [(s, min(n, s + step)) for s in range(0, n, step)], ROWS_PER_GROUP

    async def input_batches(self, fragment: table_pb2.DataFragment,
                            ) -> AsyncIterator[tuple[pa.RecordBatch, np.ndarray | None,
                                                     pa.RecordBatch]]:
        """Live rows of the fragment in batches, with the keep mask of each physical range
        (``None``: nothing deleted) and the whole range (deleted rows included)."""
        reader = self.ctx.fragment(fragment)
        deleted = await self.ctx.deleted_offsets(fragment)
        spans, _ = await self.layout(fragment)
        for start, end in spans:
            batch = await reader.read_range(self.read_fields, start, end)
            offsets = np.arange(start, end, dtype=np.uint64)
            if self.system_columns:
                extra = await system_columns(self.ctx, fragment, offsets, self.system_columns)
                arrays = [*batch.columns, *extra.values()]
                fields = [*batch.schema, *(pa.field(n, pa.uint64(), True) for n in extra)]
                batch = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
            if deleted is not None and len(deleted):
                keep = ~np.isin(offsets, deleted.astype(np.uint64), assume_unique=True)
                yield batch.filter(pa.array(keep)), keep, batch
            else:
                yield batch, None, batch

    async def _outputs(self, fragment: table_pb2.DataFragment) -> AsyncIterator[pa.RecordBatch]:
        async for batch, keep, whole in self.input_batches(fragment):
            result = conform(await self.mapper(batch), self.out_arrow, batch.num_rows)
            if keep is not None:
                if result.num_rows:
                    filler = result.slice(0, 1)
                else:  # every row of the range is deleted: any value of the right type will do
                    filler = conform(await self.mapper(whole.slice(0, 1)), self.out_arrow, 1)
                result = _expand(result, keep, filler)
            await self._report(len(keep) if keep is not None else result.num_rows, False)
            yield result

    async def _fragment(self, fragment: table_pb2.DataFragment, sem: asyncio.Semaphore,
                        written: list[table_pb2.DataFragment]) -> table_pb2.DataFragment:
        async with sem:
            out = table_pb2.DataFragment()
            out.CopyFrom(fragment)
            n = int(fragment.physical_rows)
            if n:
                _, group = await self.layout(fragment)
                params = WriteParams(max_rows_per_file=n, max_rows_per_group=group)
                new = await write_fragments(self.ctx.store, self.out_schema,
                                            self._outputs(fragment), params, {},
                                            storage_version=self.storage_version)
                written.extend(new)
                if len(new) != 1 or new[0].physical_rows != n:
                    raise InvalidInputError(f"fragment {fragment.id}: wrote "
                                            f"{sum(f.physical_rows for f in new)} rows, "
                                            f"expected {n}")
                out.files.add().CopyFrom(new[0].files[0])
            await self._report(0, True)
            return out

    async def run_fragment(self, fragment: table_pb2.DataFragment) -> table_pb2.DataFragment:
        """One fragment with one more data file holding the new fields (nothing committed).

        On failure the file written is deleted before the error propagates.
        """
        written: list[table_pb2.DataFragment] = []
        try:
            return await self._fragment(fragment, asyncio.Semaphore(1), written)
        except BaseException:
            await delete_fragment_files(self.ctx.store, written)
            raise

    async def run(self) -> list[table_pb2.DataFragment]:
        """Every fragment with one more data file holding the new fields (nothing committed).

        On failure the files written so far are deleted before the error propagates.
        """
        sem = asyncio.Semaphore(self.concurrency)
        written: list[table_pb2.DataFragment] = []
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self._fragment(f, sem, written))
                         for f in self.ctx.snapshot.fragments]
        except BaseException as exc:
            await delete_fragment_files(self.ctx.store, written)
            first: BaseException = exc
            while isinstance(first, BaseExceptionGroup):  # report the first failure itself
                first = first.exceptions[0]
            if first is not exc:
                raise first from None
            raise
        return [t.result() for t in tasks]


def system_columns_in(names: Sequence[str]) -> list[str]:
    """The system columns (``_rowid``, ``_rowaddr``, row versions) among ``names``."""
    return [n for n in names if n in SYSTEM_COLUMNS]


def manifest_max_field_id(manifest: table_pb2.Manifest) -> int:
    """The highest field id in use: in the schema or listed by any data file (-1 if none)."""
    ids = [int(f.id) for f in manifest.fields]
    ids += [int(i) for frag in manifest.fragments for df in frag.files for i in df.fields]
    return max(ids, default=-1)


async def commit_merge(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                       fragments: list[table_pb2.DataFragment], schema: LanceSchema,
                       max_retries: int) -> Snapshot:
    """Commit a Merge of ``fragments`` (every fragment, with its new files) and ``schema``;
    the new files are deleted if the commit fails."""
    added = [only_new_files(old, new)
             for old, new in zip(snapshot.fragments, fragments, strict=True)]
    txn = new_merge(snapshot.version, fragments, schema)
    async with removed_on_failure(store, added):
        return await commit_transaction(store, handler, snapshot, txn, max_retries=max_retries)


def only_new_files(old: table_pb2.DataFragment, new: table_pb2.DataFragment,
                   ) -> table_pb2.DataFragment:
    """``new`` holding only the data files ``old`` does not have."""
    known = {f.path for f in old.files}
    out = table_pb2.DataFragment(id=new.id, physical_rows=new.physical_rows)
    out.files.extend(f for f in new.files if f.path not in known)
    return out
