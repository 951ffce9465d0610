"""Distributed compaction: the tasks of a compaction plan run as engine tasks, one commit.

The driver plans the compaction on one version (:func:`plan_distributed_compaction`, the same
plan as :meth:`alance.LanceDataset.compact_files`); each task rewrites its group of fragments
into new fragments (:meth:`DistributedCompaction.run`); the driver reserves fragment ids and
commits ONE Rewrite transaction for all groups (:meth:`DistributedCompaction.commit`).
Files written by tasks are recorded under the job's staging directory
(:mod:`alance.dataset.distributed.staging`), so commit and abort also delete what task
attempts that reported nothing (failed, killed, speculative) wrote.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alance._proto import table_pb2
from alance.commit.registry import commit_handler_for
from alance.dataset.api import LanceDataset
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES
from alance.dataset.distributed.job import Job
from alance.dataset.distributed.staging import (
    discard,
    open_job,
    recording_store,
    referenced_files,
)
from alance.dataset.dml.results import check_writable
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import delete_fragment_files, removed_on_failure
from alance.dataset.maintenance.compaction import (
    commit_rewrite,
    external_files,
    reserve_fragment_ids,
    rewrite_task,
    rows_progress,
)
from alance.dataset.maintenance.compaction_plan import (
    CompactionOptions,
    CompactionTask,
    plan_compaction,
)
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import InvalidInputError
from alance.format.manifest import DATA_DIR
from alance.io.store import DatasetStore
from alance.io.uri import open_store


@dataclass(frozen=True)
class CompactionPart:
    """One task's result: which planned group it rewrote and the new fragments (no ids)."""

    index: int
    fragments: tuple[bytes, ...] = ()

    def fragment_protos(self) -> list[table_pb2.DataFragment]:
        """The new fragments as protobuf messages."""
        return [table_pb2.DataFragment.FromString(b) for b in self.fragments]


@dataclass(frozen=True)
class DistributedCompaction(Job):
    """A compaction planned on one version; picklable (the manifest travels with it)."""

    uri: str
    snapshot: Snapshot
    groups: tuple[tuple[int, ...], ...]
    options: CompactionOptions = field(default_factory=CompactionOptions)
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    commit_handler: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def tasks(self) -> list[int]:
        """The task indexes to run (one per group of fragments; empty: nothing to compact)."""
        return list(range(len(self.groups)))

    def _group(self, index: int) -> list[table_pb2.DataFragment]:
        if not 0 <= index < len(self.groups):
            raise InvalidInputError(f"no compaction task {index} (there are "
                                    f"{len(self.groups)})")
        by_id = {int(f.id): f for f in self.snapshot.fragments}
        return [by_id[i] for i in self.groups[index]]

    async def run(self, index: int, *,
                  progress: Callable[[int, int], Any] | None = None) -> CompactionPart:
        """Rewrite group ``index`` into new fragments (nothing committed; removed on error).

        ``progress(rows_done, rows_total)`` is called as the group's rows are rewritten
        (``rows_total``: its physical rows), as for :meth:`LanceDataset.compact_files`; it
        runs where the task runs."""
        group = self._group(index)
        total = sum(int(f.physical_rows) for f in group)
        advance = rows_progress(total, progress)
        store, recorder = recording_store(self.uri, self.storage_options, self.job_id)
        try:
            if progress is not None:
                progress(0, total)
            new = await rewrite_task(ReadContext(store, self.snapshot), CompactionTask(group),
                                     self.options, advance)
        except BaseException:
            await discard(store, recorder)
            raise
        return CompactionPart(index, tuple(f.SerializeToString() for f in new))

    async def commit(self, parts: Iterable[CompactionPart | None], *,
                     max_retries: int = DEFAULT_MAX_RETRIES,
                     partial: bool = False) -> LanceDataset:
        """Reserve fragment ids and commit every group's rewrite as ONE Rewrite
        (``partial``: the groups whose results are given; the others stay as they are)."""
        by_index: dict[int, CompactionPart] = {}
        for p in parts:
            if p is None:
                continue
            if p.index in by_index:
                raise InvalidInputError(f"compaction task {p.index} handed in twice")
            by_index[p.index] = p
        if not by_index:
            raise InvalidInputError("no compaction task results to commit")
        if sorted(by_index) != self.tasks() and not partial:
            raise InvalidInputError(f"compaction tasks {sorted(set(self.tasks()) - set(by_index))}"
                                    " are missing; commit needs every task's result")
        store, handler = self._store(), self._handler()
        new = {i: p.fragment_protos() for i, p in by_index.items()}
        done = sorted(by_index)
        written = [f for i in done for f in new[i]]
        extra = external_files(written)
        async with self._committing(store), removed_on_failure(store, written, extra):
            ids = iter(await reserve_fragment_ids(store, handler, self.snapshot,
                                                  len(written), max_retries)
                       if written else [])
            groups = []
            for i in done:
                for frag in new[i]:
                    frag.id = next(ids)
                groups.append((self._group(i), new[i]))
            snap = await commit_rewrite(store, handler, self.snapshot, groups, extra,
                                        max_retries)
        keep = referenced_files(snap.fragments) | await _sidecar_files(store, written)
        await self._finish(store, keep)
        return LanceDataset(store, handler, snap)

    async def abort(self, parts: Iterable[CompactionPart | None]) -> None:
        """Delete what the job wrote: the files of ``parts`` and those of task attempts that
        reported nothing (best effort). Tasks still running fail."""
        await self._abort_parts(parts, _remove_part)


async def _remove_part(store: DatasetStore, part: CompactionPart) -> None:
    frags = part.fragment_protos()
    await external_files(frags).remove_all(store)
    await delete_fragment_files(store, frags)


async def _sidecar_files(store: DatasetStore, fragments: Iterable[table_pb2.DataFragment],
                         ) -> set[str]:
    """The blob sidecar files (``data/<stem>/*.blob``) of the data files of ``fragments``:
    they are kept with their data file."""
    found: set[str] = set()
    for frag in fragments:
        for f in frag.files:
            if f.path.endswith(".lance"):
                stem = f"{DATA_DIR}/{f.path[: -len('.lance')]}"
                found.update(m.path for m in await store.list(stem)
                             if m.path.endswith(".blob"))
    return found


async def plan_distributed_compaction(uri: str | os.PathLike[str],
                                      options: CompactionOptions | None = None, *,
                                      storage_options: Mapping[str, Any] | None = None,
                                      commit_handler: str | None = None,
                                      ) -> DistributedCompaction:
    """Plan a compaction of the latest version (which fragments are rewritten together)."""
    text_uri = os.fspath(uri)
    opts = dict(storage_options or {})
    store = open_store(text_uri, opts)
    handler = commit_handler_for(text_uri, opts, commit_handler)
    snap = await load_snapshot(store, handler)
    check_writable(snap)
    options = options or CompactionOptions()
    plan = await plan_compaction(store, handler, snap, options)
    groups = tuple(tuple(int(f.id) for f in t.fragments) for t in plan.tasks)
    job = DistributedCompaction(text_uri, snap, groups, options, opts, commit_handler)
    if groups:  # nothing to compact: no job to finish either
        await open_job(store, job.job_id)
    return job
