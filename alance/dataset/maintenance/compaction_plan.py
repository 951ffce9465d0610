"""Compaction planning: which fragments are rewritten together, and the options.

Planning follows Lance (``optimize.compact_files``). Walking the fragments in order, a fragment
is a *candidate* when more than ``materialize_deletions_threshold`` of its rows are deleted
(it is rewritten even alone), or when it has fewer than ``target_rows_per_fragment`` physical
rows (rewritten only together with a neighbouring candidate). Runs of adjacent candidates
covered by the same set of indices form bins (indexed and unindexed rows are never mixed); a
bin of one small fragment is left alone; bins are cut into tasks of at least
``target_rows_per_fragment`` live rows (the remainder joins the last task).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyroaring

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.fragments.read import live_rows
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import InvalidInputError
from alance.io.store import DatasetStore
from alance.transaction import indices as ix
from alance.transaction.operations import FRAG_REUSE_INDEX_NAME

Fragment = table_pb2.DataFragment

#: Manifest config keys that supply defaults (as pylance reads them).
CONFIG_PREFIX = "lance.compaction."


@dataclass(frozen=True)
class CompactionOptions:
    """What to compact and how to write it (pylance's ``compact_files`` arguments)."""

    target_rows_per_fragment: int = 1024 * 1024
    max_rows_per_group: int = 1024
    max_bytes_per_file: int | None = None
    materialize_deletions: bool = True
    materialize_deletions_threshold: float = 0.1
    num_threads: int | None = None
    batch_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("target_rows_per_fragment", "max_rows_per_group"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInputError(f"{name} must be a positive integer, not {value!r}")
        for name in ("max_bytes_per_file", "num_threads", "batch_size"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise InvalidInputError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(self.materialize_deletions_threshold, (int, float)):
            raise InvalidInputError("materialize_deletions_threshold must be a number")

    @property
    def deletes_materialized(self) -> bool:
        """Whether fragments with many deletions are candidates (a threshold >= 1 turns it
        off, as in Lance)."""
        return self.materialize_deletions and self.materialize_deletions_threshold < 1.0

    @property
    def concurrency(self) -> int:
        """Tasks rewritten at once."""
        return self.num_threads or max(1, min(8, os.cpu_count() or 1))

    @classmethod
    def from_config(cls, config: dict[str, str], **given: object) -> CompactionOptions:
        """Options from explicit arguments, else ``lance.compaction.*`` config, else defaults."""
        kinds: dict[str, type] = {"target_rows_per_fragment": int, "max_rows_per_group": int,
                                  "max_bytes_per_file": int, "materialize_deletions": bool,
                                  "materialize_deletions_threshold": float, "batch_size": int}
        values: dict[str, object] = {}
        for name, kind in kinds.items():
            text = config.get(CONFIG_PREFIX + name)
            if text is None:
                continue
            try:
                values[name] = (text.strip().lower() == "true") if kind is bool else kind(text)
            except ValueError:
                raise InvalidInputError(f"config {CONFIG_PREFIX + name}={text!r} is not a "
                                        f"valid {kind.__name__}") from None
        values.update({k: v for k, v in given.items() if v is not None})
        unknown = set(values) - {f for f in cls.__dataclass_fields__}
        if unknown:
            raise InvalidInputError(f"unknown compaction options {sorted(unknown)}")
        return cls(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class CompactionMetrics:
    """What a compaction changed (pylance's ``CompactionMetrics``)."""

    fragments_removed: int = 0
    fragments_added: int = 0
    files_removed: int = 0
    files_added: int = 0


@dataclass(frozen=True)
class CompactionResult:
    """What :meth:`LanceDataset.compact_files` did: the metrics, and the new version
    (``dataset`` is the version compacted when there was nothing to do)."""

    dataset: Any
    metrics: CompactionMetrics

    @property
    def fragments_removed(self) -> int:
        """Fragments replaced."""
        return self.metrics.fragments_removed

    @property
    def fragments_added(self) -> int:
        """Fragments written."""
        return self.metrics.fragments_added

    @property
    def files_removed(self) -> int:
        """Data and deletion files no longer referenced."""
        return self.metrics.files_removed

    @property
    def files_added(self) -> int:
        """Data files written."""
        return self.metrics.files_added


@dataclass
class CompactionTask:
    """Adjacent fragments rewritten together."""

    fragments: list[Fragment]

    @property
    def live_rows(self) -> int:
        """Rows the task writes."""
        return sum(live_rows(f) for f in self.fragments)


@dataclass
class CompactionPlan:
    """Tasks planned on one version."""

    read_version: int
    tasks: list[CompactionTask] = field(default_factory=list)

    @property
    def num_tasks(self) -> int:
        """Number of tasks."""
        return len(self.tasks)


async def _coverage(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                    ) -> list[pyroaring.BitMap]:
    """Fragment ids each index covers (indices without a bitmap: every id of their version)."""
    out = []
    for index in snapshot.manifest_file.indices:
        if index.name == FRAG_REUSE_INDEX_NAME:
            continue
        bitmap = ix.read_bitmap(index)
        if bitmap is None:
            old = await load_snapshot(store, handler, int(index.dataset_version))
            top = old.manifest.max_fragment_id if old.manifest.HasField("max_fragment_id") else 0
            bitmap = pyroaring.BitMap(range(int(top)))
        out.append(bitmap)
    return out


@dataclass
class _Bin:
    fragments: list[Fragment]
    alone: list[bool]  # candidate on its own (many deletions)
    rows: list[int]
    covered_by: tuple[int, ...]

    def is_noop(self) -> bool:
        return len(self.fragments) == 1 and not self.alone[0]

    def newest_tier(self) -> _Bin:
        """The newest fragments of this bin that are alike in size: walking back from the
        last, a fragment joins while it holds at most :data:`TIER_RATIO` times the rows of
        the fragments after it. Merging only those never rewrites a large fragment to absorb
        a few small ones, so repeated small appends rewrite each row a logarithmic number of
        times (sizes grow geometrically, as in a tiered LSM tree)."""
        start, rows = len(self.rows) - 1, self.rows[-1]
        while start > 0 and self.rows[start - 1] <= TIER_RATIO * max(rows, 1):
            start -= 1
            rows += self.rows[start]
        return _Bin(self.fragments[start:], self.alone[start:], self.rows[start:],
                    self.covered_by)

    def split(self, min_rows: int) -> list[CompactionTask]:
        tasks = []
        start = 0
        while True:
            end, total = start, 0
            while total < min_rows and end < len(self.rows):
                total += self.rows[end]
                end += 1
            if sum(self.rows[end:]) >= min_rows:
                tasks.append(CompactionTask(self.fragments[start:end]))
                start = end
            else:
                tasks.append(CompactionTask(self.fragments[start:]))
                return tasks


#: In a tiered compaction, a fragment is merged with newer ones while it holds at most this
#: many times their rows.
TIER_RATIO = 4


def plan_tasks(fragments: Sequence[Fragment], coverage: Sequence[pyroaring.BitMap],
               options: CompactionOptions, *, tiered: bool = False) -> list[CompactionTask]:
    """The compaction tasks for ``fragments`` (in dataset order) given index coverage.

    ``tiered``: of each run of candidates, only its newest tier (:meth:`_Bin.newest_tier`),
    the plan of auto-compaction after small appends; else every candidate, as pylance."""
    bins: list[_Bin] = []
    current: _Bin | None = None
    for frag in fragments:
        physical = int(frag.physical_rows)
        deleted = physical - live_rows(frag)
        ratio = deleted / physical if physical else 0.0
        if options.deletes_materialized and ratio > options.materialize_deletions_threshold:
            alone: bool | None = True
        elif physical < options.target_rows_per_fragment:
            alone = False
        else:
            alone = None
        covered = tuple(i for i, bm in enumerate(coverage) if int(frag.id) in bm)
        if alone is None:
            if current is not None:
                bins.append(current)
                current = None
            continue
        if current is not None and current.covered_by == covered:
            current.fragments.append(frag)
            current.alone.append(alone)
            current.rows.append(physical - deleted)
            continue
        if current is not None:
            bins.append(current)
        current = _Bin([frag], [alone], [physical - deleted], covered)
    if current is not None:
        bins.append(current)
    if tiered:
        bins = [b.newest_tier() for b in bins]
    return [task for b in bins if not b.is_noop()
            for task in b.split(options.target_rows_per_fragment)]


async def plan_compaction(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                          options: CompactionOptions, *, tiered: bool = False,
                          ) -> CompactionPlan:
    """Decide which fragments of ``snapshot`` to rewrite together (no IO on data files);
    ``tiered`` as for :func:`plan_tasks`."""
    coverage = await _coverage(store, handler, snapshot)
    return CompactionPlan(snapshot.version, plan_tasks(snapshot.fragments, coverage, options,
                                                       tiered=tiered))
