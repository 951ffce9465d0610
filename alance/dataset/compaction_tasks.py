"""pylance's compaction task API (``lance.optimize.Compaction``): plan, run tasks anywhere,
commit their rewrites.

:meth:`Compaction.plan` picks the groups of fragments to rewrite on one version;
each :class:`CompactionTask` (picklable) rewrites its group into new fragments without
committing (:meth:`CompactionTask.execute` gives a picklable :class:`RewriteResult`);
:meth:`Compaction.commit` commits any number of results as one rewrite (fragment ids are
reserved first, so it makes two versions, as pylance's does). Built on
:class:`alance.dataset.distributed.compaction.DistributedCompaction`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alance.dataset.api import LanceDataset
from alance.dataset.distributed.compaction import (
    CompactionPart,
    DistributedCompaction,
    plan_distributed_compaction,
)
from alance.dataset.fragments.metadata import FragmentMetadata
from alance.dataset.maintenance.compaction_plan import CompactionMetrics, CompactionOptions
from alance.errors import InvalidInputError

__all__ = ["Compaction", "CompactionPlan", "CompactionTask", "RewriteResult"]


@dataclass(frozen=True)
class RewriteResult:
    """One task's rewrite: the fragments it read and the new ones (not committed)."""

    read_version: int
    new_fragments: list[FragmentMetadata]
    old_fragments: list[FragmentMetadata]
    metrics: CompactionMetrics
    part: CompactionPart = field(repr=False)
    job: DistributedCompaction = field(repr=False, compare=False)

    def __repr__(self) -> str:
        return (f"RewriteResult(read_version={self.read_version}, "
                f"new_fragments={self.new_fragments}, old_fragments={self.old_fragments})")


@dataclass(frozen=True)
class CompactionTask:
    """One group of fragments to rewrite together."""

    read_version: int
    fragments: list[FragmentMetadata]
    index: int = field(repr=False)
    job: DistributedCompaction = field(repr=False, compare=False)

    async def execute(self, dataset: Any = None) -> RewriteResult:
        """Rewrite the group into new fragments (nothing is committed)."""
        part = await self.job.run(self.index)
        new = [FragmentMetadata.from_proto(f) for f in part.fragment_protos()]
        metrics = CompactionMetrics(fragments_removed=len(self.fragments),
                                    fragments_added=len(new),
                                    files_removed=sum(len(f.files) for f in self.fragments),
                                    files_added=sum(len(f.files) for f in new))
        return RewriteResult(self.read_version, new, list(self.fragments), metrics, part,
                             self.job)


@dataclass(frozen=True)
class CompactionPlan:
    """The tasks of a compaction planned on version ``read_version``."""

    read_version: int
    tasks: list[CompactionTask]

    def num_tasks(self) -> int:
        """How many tasks there are."""
        return len(self.tasks)

    def __repr__(self) -> str:
        return (f"CompactionPlan(read_version={self.read_version}, "
                f"tasks=<{len(self.tasks)} compaction tasks>)")


class Compaction:
    """Planning and committing compactions whose tasks run elsewhere."""

    @staticmethod
    async def plan(dataset: Any, options: Mapping[str, Any] | None = None) -> CompactionPlan:
        """Plan a compaction of ``dataset``'s latest version (``options``: as
        :meth:`LanceDataset.compact_files` takes them)."""
        target = getattr(dataset, "_async", dataset)
        if not isinstance(target, LanceDataset):
            raise InvalidInputError("Compaction.plan takes a dataset")
        opts = dict(options or {})
        opts.pop("defer_index_remap", None)
        job = await plan_distributed_compaction(
            target.uri, CompactionOptions(**opts),
            storage_options=target._store.reopen_args[1] if target._store.reopen_args
            else None)
        by_id = {int(f.id): f for f in job.snapshot.fragments}
        tasks = [CompactionTask(job.snapshot.version,
                                [FragmentMetadata.from_proto(by_id[i]) for i in group], index,
                                job)
                 for index, group in enumerate(job.groups)]
        return CompactionPlan(job.snapshot.version, tasks)

    @staticmethod
    async def commit(dataset: Any, rewrites: Iterable[RewriteResult],
                     ) -> tuple[LanceDataset, CompactionMetrics]:
        """Commit the given rewrites as one compaction; returns the new version and the
        summed metrics."""
        results = list(rewrites)
        if not results:
            raise InvalidInputError("Compaction.commit needs at least one RewriteResult")
        jobs = {r.job.job_id for r in results}
        if len(jobs) != 1:
            raise InvalidInputError("rewrites of different compaction plans cannot be "
                                    "committed together")
        new = await results[0].job.commit([r.part for r in results], partial=True)
        metrics = CompactionMetrics(
            fragments_removed=sum(r.metrics.fragments_removed for r in results),
            fragments_added=sum(r.metrics.fragments_added for r in results),
            files_removed=sum(r.metrics.files_removed for r in results),
            files_added=sum(r.metrics.files_added for r in results))
        return new, metrics
