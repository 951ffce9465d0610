"""Compaction: merge small fragments and materialise deletions, keeping the row order.

The plan (which fragments are rewritten together) is made by
:mod:`alance.dataset.maintenance.compaction_plan`. Each task streams the live rows of its fragments,
in
order, into new data files of ``target_rows_per_fragment`` rows (the remainder goes to the
last file, as in pylance 14); tasks run ``num_threads`` at a time, so memory is bounded by
that many read chunks and file writers. Then fragment ids are reserved for every new fragment
(a ReserveFragments commit, as Lance does) and one Rewrite transaction replaces each task's old
fragments by its new ones.

Indices: the rows of rewritten fragments get new addresses. Indices holding addresses of them
(BTREE, BITMAP, LABEL_LIST, IVF_FLAT, IVF_PQ) are copied with the addresses remapped and listed
in the Rewrite as rewritten indices, so they cover the new fragments, as pylance 14 does
(:mod:`alance.dataset.maintenance.index_remap`); indices holding stable row ids just move
their fragment bitmaps. Kinds alance cannot remap keep their old coverage: the new fragments
are unindexed until the index is rebuilt or optimised (queries stay correct).

Blob columns are read as their descriptors and their bytes fetched slice by slice as the
rows are written (:mod:`alance.dataset.fragments.blob_rewrite`), so the new files hold the same blob
bytes, laid out by size as any write lays them out; external blobs are refused.

With stable row ids, each new fragment's row id sequence and ``created_at`` /
``last_updated_at`` version sequences are the old fragments' sequences concatenated, minus
the deleted rows (:func:`alance.transaction.lineage.rewrite_lineage`).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import AsyncIterator, Callable, Sequence

import numpy as np
import pyarrow as pa

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.dml.results import check_writable, write_rows
from alance.dataset.fragments.blob_rewrite import blob_fields, read_fields, with_blob_bytes
from alance.dataset.fragments.deletions import WrittenFiles
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import WriteParams, delete_fragment_files, removed_on_failure
from alance.dataset.maintenance.compaction_plan import (
    CompactionMetrics,
    CompactionOptions,
    CompactionPlan,
    CompactionResult,
    CompactionTask,
    plan_compaction,
    plan_tasks,
)
from alance.dataset.maintenance.index_remap import remap_indices
from alance.dataset.maintenance.row_remap import Group
from alance.dataset.query.row_ids import fragment_lineage, uses_stable_row_ids
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import CorruptFileError
from alance.io.store import DatasetStore
from alance.transaction.lineage import attach_lineage, rewrite_lineage
from alance.transaction.operations import (
    new_reserve_fragments,
    new_rewrite,
)

Fragment = table_pb2.DataFragment
#: Rows read from a source fragment per step (bounded memory per task).
READ_CHUNK_ROWS = 64 * 1024
#: Chunks read ahead of the writer per task.
READ_AHEAD = 4
#: Row id sequences of rewritten fragments are stored inline whatever their size.
INLINE_ALWAYS = 1 << 62
#: ``progress(rows_done, rows_total)``: called as rows are rewritten.
Progress = Callable[[int, int], None]

__all__ = ["CompactionMetrics", "CompactionOptions", "CompactionPlan", "CompactionResult",
           "CompactionTask", "commit_rewrite", "compact_files", "external_files", "output_sizes",
           "plan_compaction", "plan_tasks", "reserve_fragment_ids", "rewrite_task",
           "rows_progress"]


async def _live_batches(ctx: ReadContext, fragments: Sequence[Fragment], chunk_rows: int,
                        progress: Callable[[int], None]) -> AsyncIterator[pa.RecordBatch]:
    """The live rows of ``fragments`` in order, ``chunk_rows`` physical rows per read.

    Up to :data:`READ_AHEAD` chunks are read ahead while the caller writes, so reading and
    writing overlap; memory stays bounded by that many chunks.
    """
    # Blob columns are read as their descriptors; their bytes are fetched per slice as the
    # writer consumes the rows (alance.dataset.fragments.blob_rewrite).
    projection = read_fields(ctx.schema)
    blobs = bool(blob_fields(ctx.schema))
    jobs = ((frag, start, min(start + chunk_rows, int(frag.physical_rows)))
            for frag in fragments for start in range(0, int(frag.physical_rows), chunk_rows))

    async def read(frag: Fragment, start: int, end: int,
                   ) -> tuple[pa.RecordBatch, np.ndarray | None, int]:
        batch = await ctx.fragment(frag).read_range(projection, start, end)
        offsets = np.arange(start, end, dtype=np.uint64) if blobs else None
        deleted = await ctx.deleted_offsets(frag)
        if deleted is not None and len(deleted):
            lo, hi = np.searchsorted(deleted, [start, end])
            if hi > lo:
                keep = np.ones(end - start, dtype=bool)
                keep[deleted[lo:hi].astype(np.int64) - start] = False
                batch = batch.filter(pa.array(keep))
                offsets = offsets[keep] if offsets is not None else None
        if offsets is not None:
            offsets |= np.uint64(int(frag.id)) << np.uint64(32)
        return batch, offsets, end - start

    pending: collections.deque[asyncio.Future[tuple[pa.RecordBatch, np.ndarray | None, int]]] = (
        collections.deque(asyncio.ensure_future(read(*job))
                          for job in itertools.islice(jobs, READ_AHEAD)))
    try:
        while pending:
            batch, addresses, rows = await pending.popleft()
            job = next(jobs, None)
            if job is not None:
                pending.append(asyncio.ensure_future(read(*job)))
            progress(rows)
            if not batch.num_rows:
                continue
            if addresses is None:
                yield batch
            else:
                async for piece in with_blob_bytes(ctx, ctx.schema, batch, addresses):
                    yield piece
    finally:
        for fut in pending:
            fut.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def output_sizes(rows: int, target: int) -> list[int]:
    """Rows of each file a task of ``rows`` live rows writes (as pylance 14 cuts them): files
    of ``target`` rows, the remainder added to the last one, so no file is below the target
    unless the whole task is."""
    if rows <= 0:
        return []
    count = max(1, rows // target)
    return [target] * (count - 1) + [rows - target * (count - 1)]


class _Cutter:
    """Hands out consecutive runs of exactly ``n`` rows from a stream of batches."""

    def __init__(self, batches: AsyncIterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._carry: pa.RecordBatch | None = None

    async def take(self, n: int) -> AsyncIterator[pa.RecordBatch]:
        while n > 0:
            batch = self._carry if self._carry is not None else await anext(self._batches, None)
            self._carry = None
            if batch is None:
                raise CorruptFileError(f"compaction: {n} rows fewer than the fragments' "
                                       "metadata promised")
            if batch.num_rows > n:
                batch, self._carry = batch.slice(0, n), batch.slice(n)
            n -= batch.num_rows
            yield batch

    async def finish(self) -> None:
        if self._carry is not None or await anext(self._batches, None) is not None:
            raise CorruptFileError("compaction: more rows than the fragments' metadata promised")


async def rewrite_task(ctx: ReadContext, task: CompactionTask, options: CompactionOptions,
                       progress: Callable[[int], None] = lambda n: None) -> list[Fragment]:
    """Write the live rows of a task's fragments into new fragments (ids not yet assigned),
    cut as :func:`output_sizes` says."""
    params = WriteParams(max_rows_per_file=2**62, max_rows_per_group=options.max_rows_per_group,
                         batch_rows=options.batch_size,
                         **({"max_bytes_per_file": options.max_bytes_per_file}
                            if options.max_bytes_per_file else {}))
    live = 0
    for frag in task.fragments:
        deleted = await ctx.deleted_offsets(frag)
        live += int(frag.physical_rows) - (len(deleted) if deleted is not None else 0)
    chunk = options.batch_size or READ_CHUNK_ROWS
    cutter = _Cutter(_live_batches(ctx, task.fragments, chunk, progress))
    fragments: list[Fragment] = []
    extra: list[str] = []
    try:
        for size in output_sizes(live, options.target_rows_per_fragment):
            fragments += await write_rows(ctx, cutter.take(size), params)
        await cutter.finish()
        if uses_stable_row_ids(ctx.snapshot.manifest):
            extra = await _carry_lineage(ctx, task.fragments, fragments)
    except BaseException:
        await delete_fragment_files(ctx.store, fragments)
        for path in extra:
            await ctx.store.delete(path)
        raise
    return fragments


async def _carry_lineage(ctx: ReadContext, old: Sequence[Fragment], new: Sequence[Fragment],
                         ) -> list[str]:
    """Give the new fragments the row ids and row versions of the old fragments' live rows,
    in order (the concatenation of the old sequences minus deleted rows). Returns the paths
    of external row id files written."""
    sources = [await fragment_lineage(ctx, f) for f in old]
    deleted = [await ctx.deleted_offsets(f) for f in old]
    parts = rewrite_lineage(sources, [int(f.physical_rows) for f in new], deleted)
    written: list[str] = []
    try:
        for frag, part in zip(new, parts, strict=True):
            # Always inline, as pylance's compaction does: pylance 14 refuses manifests whose
            # fragments keep their row ids in external files.
            for path, data in attach_lineage(frag, part, inline_limit=INLINE_ALWAYS).items():
                written.append(path)
                await ctx.store.put(path, data)
    except BaseException:
        for path in written:
            await ctx.store.delete(path)
        raise
    return written


def _files(fragments: Sequence[Fragment]) -> int:
    return sum(len(f.files) + int(f.HasField("deletion_file")) for f in fragments)


def external_files(fragments: Sequence[Fragment]) -> WrittenFiles:
    """External row id files of new fragments (to delete if they are not committed)."""
    files = WrittenFiles()
    for frag in fragments:
        if frag.HasField("external_row_ids"):
            files.add(frag.external_row_ids.path)
    return files


async def reserve_fragment_ids(store: DatasetStore, handler: CommitHandler, base: Snapshot,
                               count: int, max_retries: int) -> list[int]:
    """Claim ``count`` fragment ids with a ReserveFragments commit; returns them in order."""
    snap = await commit_transaction(store, handler, base, new_reserve_fragments(
        base.version, count), data_storage_version=base.data_storage_version,
        max_retries=max_retries)
    top = int(snap.manifest.max_fragment_id)
    return list(range(top - count + 1, top + 1))


async def commit_rewrite(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                         groups: Sequence[Group], written: WrittenFiles,
                         max_retries: int) -> Snapshot:
    """Remap the indices over the rewritten rows (:mod:`.index_remap`; new index files are
    added to ``written``) and commit one Rewrite of ``groups`` (new fragments with ids)."""
    rewritten = await remap_indices(store, snapshot, groups, written)
    txn = new_rewrite(snapshot.version, groups, rewritten)
    return await commit_transaction(store, handler, snapshot, txn,
                                    data_storage_version=snapshot.data_storage_version,
                                    max_retries=max_retries)


def rows_progress(total: int, progress: Progress | None) -> Callable[[int], None]:
    """A ``rows_rewritten(n)`` hook that reports the running sum to ``progress(done,
    total)``."""
    done = 0

    def advance(rows: int) -> None:
        nonlocal done
        done += rows
        if progress is not None:
            progress(done, total)

    return advance


async def compact_files(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                        options: CompactionOptions, *, progress: Progress | None = None,
                        max_retries: int = DEFAULT_MAX_RETRIES, tiered: bool = False,
                        ) -> tuple[Snapshot | None, CompactionMetrics]:
    """Plan, rewrite and commit a compaction of ``snapshot`` (``tiered``: only the newest
    tier of small fragments, see :func:`~.compaction_plan.plan_tasks`).

    Returns the new version (``None`` when there was nothing to compact: no commit is made,
    as in Lance) and the metrics. On any failure the files written are deleted again.
    """
    check_writable(snapshot)
    plan = await plan_compaction(store, handler, snapshot, options, tiered=tiered)
    if not plan.tasks:
        return None, CompactionMetrics()
    advance = rows_progress(sum(int(f.physical_rows) for t in plan.tasks for f in t.fragments),
                            progress)
    ctx = ReadContext(store, snapshot)
    sem = asyncio.Semaphore(options.concurrency)
    results: list[list[Fragment] | None] = [None] * len(plan.tasks)

    async def run(i: int, task: CompactionTask) -> None:
        async with sem:
            results[i] = await rewrite_task(ctx, task, options, advance)

    running = [asyncio.ensure_future(run(i, t)) for i, t in enumerate(plan.tasks)]
    try:
        finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_EXCEPTION)
        for fut in finished:
            fut.result()  # the first failure, if any
    except BaseException:
        # stop the other tasks (each deletes what it wrote), then drop the finished ones' files
        for fut in running:
            fut.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        done_frags = [f for r in results if r for f in r]
        await external_files(done_frags).remove_all(store)
        await delete_fragment_files(store, done_frags)
        raise
    written = [f for r in results if r for f in r]
    extra = external_files(written)
    async with removed_on_failure(store, written, extra):
        ids = iter(await reserve_fragment_ids(store, handler, snapshot, len(written),
                                              max_retries) if written else [])
        groups = []
        for task, new in zip(plan.tasks, results, strict=True):
            assert new is not None
            for frag in new:
                frag.id = next(ids)
            groups.append((task.fragments, new))
        snap = await commit_rewrite(store, handler, snapshot, groups, extra, max_retries)
    old = [f for t in plan.tasks for f in t.fragments]
    return snap, CompactionMetrics(len(old), len(written), _files(old), _files(written))
