"""Blocking twins of pylance's compaction task API (:mod:`alance.dataset.compaction_tasks`,
``lance.optimize.Compaction``): plan, run tasks anywhere, commit their rewrites."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from alance import _loop
from alance.dataset import compaction_tasks as _tasks
from alance.dataset.compaction_tasks import RewriteResult
from alance.dataset.fragments.metadata import FragmentMetadata
from alance.sync.dataset import LanceDataset
from alance.sync.twin import Twin, blocking, blocking_function, forwarding, twin_of

__all__ = ["Compaction", "CompactionPlan", "CompactionTask", "RewriteResult"]

_T = _tasks.CompactionTask
_P = _tasks.CompactionPlan


class CompactionTask(Twin, of=_T):
    """Blocking twin of :class:`alance.dataset.compaction_tasks.CompactionTask` (picklable)."""

    @property
    def read_version(self) -> int:
        """The version the task was planned on."""
        return int(self._async.read_version)

    @property
    def fragments(self) -> list[FragmentMetadata]:
        """The fragments the task rewrites."""
        return list(self._async.fragments)

    execute = blocking(_T.execute)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactionTask) and self._async == other._async

    def __hash__(self) -> int:
        return hash(self._async.index)


class CompactionPlan(Twin, of=_P):
    """Blocking twin of :class:`alance.dataset.compaction_tasks.CompactionPlan`."""

    @property
    def read_version(self) -> int:
        """The version the plan was made on."""
        return int(self._async.read_version)

    @property
    def tasks(self) -> list[CompactionTask]:
        """The tasks, one per group of fragments rewritten together."""
        return [twin_of(t) for t in self._async.tasks]

    num_tasks = forwarding(_P.num_tasks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactionPlan) and self._async == other._async

    def __hash__(self) -> int:
        return hash(self.read_version)


class Compaction:
    """Blocking twin of :class:`alance.dataset.compaction_tasks.Compaction` (pylance's
    ``lance.optimize.Compaction``)."""

    plan = staticmethod(blocking_function(_tasks.Compaction.plan, returns=CompactionPlan))

    @staticmethod
    def commit(dataset: LanceDataset, rewrites: Iterable[RewriteResult]) -> Any:
        """Commit task results as one compaction; ``dataset`` moves to the new version (as
        pylance's). Returns the metrics."""
        new, metrics = _loop.run(_tasks.Compaction.commit(dataset._async, rewrites))
        dataset._moved_to(new)
        return metrics
