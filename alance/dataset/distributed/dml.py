"""Distributed DELETE and UPDATE: tasks rewrite their fragments' deletion vectors, one commit.

The driver plans the delete on one version (:func:`plan_delete`); each task gets some of its
fragments, finds the matching rows there and writes the fragments' new deletion files
(:meth:`DistributedDelete.run`); the driver commits every task's result as ONE Delete
transaction (:meth:`DistributedDelete.commit`). Concurrent deletes of other rows of the same
fragments are merged at commit time, as for :meth:`alance.LanceDataset.delete`; a conflict that
cannot be merged raises, and the job is to be run again on the newest version.

Files written by tasks are recorded under the job's staging directory
(:mod:`alance.dataset.distributed.staging`), so commit and abort also delete what task
attempts that reported nothing (failed, killed, speculative) wrote.

UPDATE works the same way in Lance's rewrite-rows mode (:func:`plan_update`): each task also
writes the matching rows' new values as new fragments; one Update transaction commits all.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from alance._proto import table_pb2
from alance.commit.registry import commit_handler_for
from alance.dataset.api import LanceDataset
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.distributed.job import Job
from alance.dataset.distributed.staging import (
    discard,
    open_job,
    recording_store,
    referenced_files,
)
from alance.dataset.dml.delete import predicate_text
from alance.dataset.dml.results import (
    DeleteResult,
    UpdateResult,
    check_writable,
    storage_batch,
    write_rows,
)
from alance.dataset.dml.update import apply_updates, compile_updates
from alance.dataset.fragments.deletions import WrittenFiles, apply_deletions, split_addresses
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import delete_fragment_files
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import AlanceError, InvalidInputError
from alance.io.store import DatasetStore
from alance.io.uri import open_store
from alance.transaction.operations import new_delete, new_update


@dataclass(frozen=True)
class DeletionPart:
    """One task's result: fragments with new deletion files, fragments now empty, the rows
    deleted per fragment (uint32 offsets as bytes) and the deletion files written."""

    updated: tuple[bytes, ...] = ()
    removed: tuple[int, ...] = ()
    offsets: Mapping[int, bytes] = field(default_factory=dict)
    written: tuple[str, ...] = ()

    @property
    def num_deleted_rows(self) -> int:
        """Rows this task deleted."""
        return sum(len(v) // 4 for v in self.offsets.values())


@dataclass(frozen=True)
class DistributedDelete(Job):
    """A delete planned on one version; picklable (the manifest travels with it)."""

    uri: str
    predicate: str
    snapshot: Snapshot
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    commit_handler: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def tasks(self, fragments_per_task: int = 1) -> list[list[int]]:
        """The fragment ids of this version in groups, one group per task."""
        return _groups(self.snapshot, fragments_per_task)

    async def run(self, fragment_ids: Iterable[int], *,
                  progress: Callable[[int, int], Any] | None = None) -> DeletionPart:
        """Delete the matching rows of these fragments (deletion files written, nothing
        committed). On error the files written are deleted again.

        ``progress(rows_scanned, rows_total)`` is called as the fragments' rows are
        searched (``rows_total``: their physical rows); it runs where the task runs."""
        ids = _checked_ids(self.snapshot, fragment_ids)
        if not ids:
            return DeletionPart()
        store, recorder = recording_store(self.uri, self.storage_options, self.job_id)
        ctx = ReadContext(store, self.snapshot)
        report = _FragmentProgress(self.snapshot, ids, progress)
        written = WrittenFiles()
        try:
            addresses = await fragment_addresses(ctx, self.predicate, ids,
                                                 report.fragment_done)
            by_fragment = split_addresses(addresses)
            updated, removed = await apply_deletions(ctx, by_fragment, written)
        except BaseException:
            await written.remove_all(store)
            await discard(store, recorder)
            raise
        return DeletionPart(tuple(f.SerializeToString() for f in updated), tuple(removed),
                            {k: v.astype(np.uint32).tobytes() for k, v in by_fragment.items()},
                            tuple(written.paths))

    async def commit(self, parts: Iterable[DeletionPart | None], *,
                     max_retries: int = DEFAULT_MAX_RETRIES) -> DeleteResult:
        """Commit every task's deletions as ONE Delete; returns the new version and the
        number of rows deleted."""
        store, handler = self._store(), self._handler()
        updated, removed, affected, written = _merged([p for p in parts if p is not None])
        txn = new_delete(self.snapshot.version, updated, removed, self.predicate)
        async with self._committing(store, lambda: written.remove_all(store)):
            new = await commit_transaction(store, handler, self.snapshot, txn,
                                           max_retries=max_retries, affected_rows=affected)
        await written.remove_unreferenced(store, new.fragments)
        await self._finish(store, referenced_files(new.fragments))
        return DeleteResult(LanceDataset(store, handler, new),
                            sum(len(v) for v in affected.values()))

    async def abort(self, parts: Iterable[DeletionPart | None]) -> None:
        """Delete the deletion files of the job: those of ``parts`` and those of task attempts
        that reported nothing (best effort). Tasks still running fail."""
        await self._abort_parts(parts, _remove_deletion_files)


def _groups(snapshot: Snapshot, fragments_per_task: int) -> list[list[int]]:
    if fragments_per_task < 1:
        raise InvalidInputError("fragments_per_task must be at least 1")
    ids = [int(f.id) for f in snapshot.fragments]
    return [ids[i:i + fragments_per_task] for i in range(0, len(ids), fragments_per_task)]


def _checked_ids(snapshot: Snapshot, fragment_ids: Iterable[int]) -> list[int]:
    ids = [int(i) for i in fragment_ids]
    known = {int(f.id) for f in snapshot.fragments}
    if not set(ids) <= known:
        raise InvalidInputError(f"version {snapshot.version} has no fragments "
                                f"{sorted(set(ids) - known)}")
    return ids


def _merged(parts: list[DeletionPart],
            ) -> tuple[list[table_pb2.DataFragment], list[int], dict[int, np.ndarray],
                       WrittenFiles]:
    """Every task's deletions together (fragments, removed ids, offsets, files written)."""
    written = WrittenFiles()
    for p in parts:
        for path in p.written:
            written.add(path)
    updated = [table_pb2.DataFragment.FromString(b) for p in parts for b in p.updated]
    removed = [i for p in parts for i in p.removed]
    affected = {k: np.frombuffer(v, dtype=np.uint32) for p in parts for k, v in p.offsets.items()}
    if len({f.id for f in updated} | set(removed)) != len(updated) + len(removed) or (
            len(affected) != sum(len(p.offsets) for p in parts)):
        raise InvalidInputError("a fragment was handled by more than one task result")
    return updated, removed, affected, written


async def fragment_addresses(ctx: ReadContext, predicate: str | pc.Expression, ids: list[int],
                             fragment_done: Callable[[int], None] | None = None,
                             ) -> np.ndarray:
    """Row addresses (uint64) of the live rows of fragments ``ids`` matching ``predicate``
    (``fragment_done(id)`` after each fragment is searched, when given)."""
    parts: list[np.ndarray] = []
    for group in ([ids] if fragment_done is None else [[i] for i in ids]):
        scanner = Scanner(ctx, columns=[], filter=predicate, with_row_address=True,
                          fragments=group)
        parts.extend([b.column(ROW_ADDRESS).to_numpy() async for b in scanner.to_batches()])
        if fragment_done is not None:
            fragment_done(group[0])
    return np.concatenate(parts).astype(np.uint64) if parts else np.empty(0, np.uint64)


class _FragmentProgress:
    """``progress(rows_done, rows_total)`` of a task over whole fragments (physical rows)."""

    def __init__(self, snapshot: Snapshot, ids: list[int],
                 progress: Callable[[int, int], Any] | None) -> None:
        rows = {int(f.id): int(f.physical_rows) for f in snapshot.fragments}
        self.rows = {i: rows.get(i, 0) for i in ids}
        self.total = sum(self.rows.values())
        self.done = 0
        self.progress = progress
        if progress is not None:
            progress(0, self.total)

    @property
    def fragment_done(self) -> Callable[[int], None] | None:
        """The per-fragment hook (``None`` without a callback: fragments scanned together)."""
        return None if self.progress is None else self._done

    def _done(self, fragment_id: int) -> None:
        self.done += self.rows.get(fragment_id, 0)
        assert self.progress is not None
        self.progress(self.done, self.total)


async def plan_delete(uri: str | os.PathLike[str], predicate: str, *,
                      storage_options: Mapping[str, Any] | None = None,
                      commit_handler: str | None = None,
                      version: int | None = None) -> DistributedDelete:
    """Plan a delete of the rows matching ``predicate`` (SQL text) on the latest version
    (or ``version``). The predicate is compiled here, so a bad one fails before any task."""
    text_uri = os.fspath(uri)
    options = dict(storage_options or {})
    store = open_store(text_uri, options)
    handler = commit_handler_for(text_uri, options, commit_handler)
    snap = await load_snapshot(store, handler, version)
    check_writable(snap)
    text = predicate_text(predicate)
    Scanner(ReadContext(store, snap), columns=[], filter=text)
    plan = DistributedDelete(text_uri, text, snap, options, commit_handler)
    await open_job(store, plan.job_id)
    return plan


# -- UPDATE -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class UpdatePart:
    """One task's update: the rewritten rows as new fragments, plus the deletions of the old
    rows (as in :class:`DeletionPart`)."""

    new_fragments: tuple[bytes, ...] = ()
    deletions: DeletionPart = field(default_factory=DeletionPart)

    @property
    def num_updated_rows(self) -> int:
        """Rows this task updated."""
        return self.deletions.num_deleted_rows


@dataclass(frozen=True)
class DistributedUpdate(Job):
    """An update planned on one version (Lance's rewrite-rows mode); picklable."""

    uri: str
    updates: Mapping[str, Any]
    where: str | None
    snapshot: Snapshot
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    commit_handler: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def tasks(self, fragments_per_task: int = 1) -> list[list[int]]:
        """The fragment ids of this version in groups, one group per task."""
        return _groups(self.snapshot, fragments_per_task)

    async def run(self, fragment_ids: Iterable[int], *,
                  progress: Callable[[int, int], Any] | None = None) -> UpdatePart:
        """Rewrite the matching rows of these fragments (new fragments and deletion files
        written, nothing committed; removed again on error).

        ``progress(rows_done, rows_total)`` is called as each fragment's matching rows are
        rewritten (``rows_total``: the fragments' physical rows); it runs where the task
        runs."""
        ids = _checked_ids(self.snapshot, fragment_ids)
        if not ids:
            return UpdatePart()
        store, recorder = recording_store(self.uri, self.storage_options, self.job_id)
        try:
            return await self._run(store, ids, _FragmentProgress(self.snapshot, ids, progress))
        except BaseException:
            await discard(store, recorder)
            raise

    async def _run(self, store: DatasetStore, ids: list[int],
                   report: _FragmentProgress) -> UpdatePart:
        ctx = ReadContext(store, self.snapshot)
        compiled = compile_updates(self.snapshot.schema, self.updates)
        target = self.snapshot.schema.to_arrow()
        addresses: list[np.ndarray] = []
        fragment_done = report.fragment_done

        async def new_rows() -> AsyncIterator[pa.RecordBatch]:
            for group in ([ids] if fragment_done is None else [[i] for i in ids]):
                scanner = Scanner(ctx, filter=self.where, with_row_address=True,
                                  fragments=group)
                async for batch in scanner.to_batches():
                    addresses.append(batch.column(ROW_ADDRESS).to_numpy())
                    rows = storage_batch(batch.drop_columns([ROW_ADDRESS]), target)
                    yield apply_updates(rows, target, compiled)
                if fragment_done is not None:
                    fragment_done(group[0])

        fragments = await write_rows(ctx, new_rows())
        written = WrittenFiles()
        try:
            by_fragment = split_addresses(np.concatenate(addresses) if addresses
                                          else np.empty(0, np.uint64))
            updated, removed = await apply_deletions(ctx, by_fragment, written)
        except BaseException:
            await written.remove_all(store)
            await delete_fragment_files(store, fragments)
            raise
        deletions = DeletionPart(
            tuple(f.SerializeToString() for f in updated), tuple(removed),
            {k: v.astype(np.uint32).tobytes() for k, v in by_fragment.items()},
            tuple(written.paths))
        return UpdatePart(tuple(f.SerializeToString() for f in fragments), deletions)

    async def commit(self, parts: Iterable[UpdatePart | None], *,
                     max_retries: int = DEFAULT_MAX_RETRIES) -> UpdateResult:
        """Commit every task's rewrite as ONE Update; returns the new version and the count."""
        got = [p for p in parts if p is not None]
        store, handler = self._store(), self._handler()
        updated, removed, affected, written = _merged([p.deletions for p in got])
        new_fragments = [table_pb2.DataFragment.FromString(b) for p in got
                         for b in p.new_fragments]
        field_ids = [self.snapshot.schema.field(n).id for n in self.updates]
        txn = new_update(self.snapshot.version, removed_fragment_ids=removed,
                         updated_fragments=updated, new_fragments=new_fragments,
                         fields_for_preserving_frag_bitmap=field_ids)

        async def undo() -> None:
            await written.remove_all(store)
            await delete_fragment_files(store, new_fragments)

        async with self._committing(store, undo):
            new = await commit_transaction(store, handler, self.snapshot, txn,
                                           max_retries=max_retries, affected_rows=affected)
        await written.remove_unreferenced(store, new.fragments)
        await self._finish(store, referenced_files(new.fragments))
        return UpdateResult(LanceDataset(store, handler, new),
                            sum(len(v) for v in affected.values()))

    async def abort(self, parts: Iterable[UpdatePart | None]) -> None:
        """Delete what the job wrote: the files of ``parts`` and those of task attempts that
        reported nothing (best effort). Tasks still running fail."""
        await self._abort_parts(parts, _remove_update_files)


async def _remove_deletion_files(store: DatasetStore, part: DeletionPart) -> None:
    for path in part.written:
        with contextlib.suppress(AlanceError):
            await store.delete(path)


async def _remove_update_files(store: DatasetStore, part: UpdatePart) -> None:
    with contextlib.suppress(AlanceError):
        await delete_fragment_files(store, [table_pb2.DataFragment.FromString(b)
                                            for b in part.new_fragments])
    await _remove_deletion_files(store, part.deletions)


async def plan_update(uri: str | os.PathLike[str], updates: Mapping[str, Any],
                      where: str | None = None, *,
                      storage_options: Mapping[str, Any] | None = None,
                      commit_handler: str | None = None,
                      version: int | None = None) -> DistributedUpdate:
    """Plan an update (column -> SQL expression or value) of the rows matching ``where``
    (all rows if ``None``). Updates and filter are compiled here, before any task runs."""
    text_uri = os.fspath(uri)
    options = dict(storage_options or {})
    store = open_store(text_uri, options)
    handler = commit_handler_for(text_uri, options, commit_handler)
    snap = await load_snapshot(store, handler, version)
    check_writable(snap)
    compile_updates(snap.schema, updates)
    if isinstance(where, str) and not where.strip():
        where = None
    Scanner(ReadContext(store, snap), columns=[], filter=where)
    plan = DistributedUpdate(text_uri, dict(updates), where, snap, options, commit_handler)
    await open_job(store, plan.job_id)
    return plan
