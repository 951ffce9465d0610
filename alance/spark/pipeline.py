"""Pipeline helpers for Spark jobs that drive alance explicitly (beyond ``format("alance")``).

* :func:`write_fragments` + :func:`commit_fragments`: tasks write fragments through
  ``mapInArrow`` and hand back their metadata as rows; the driver commits them when it decides
  to (e.g. after checking them, or together with other work). :func:`write_dataframe` does
  both in one call.
* :func:`delete_where` / :func:`update_where`: a distributed DELETE / UPDATE; each task
  rewrites the deletion vectors of its fragments (and, for an update, writes the new rows),
  the driver commits once.
* :func:`compact`: a distributed compaction; one task per group of small fragments, one
  Rewrite commit.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from alance import sync
from alance.dataset.distributed.write import UncommittedFragments
from alance.dataset.dml.results import DeleteResult, UpdateResult
from alance.spark.types import spark_arrow_schema

#: The column ``write_fragments`` returns: one pickled task result per row.
RESULT_COLUMN = "alance_fragments"


def write_fragments(df: Any, uri: str | os.PathLike[str], mode: str = "append", *,
                    storage_options: Mapping[str, Any] | None = None,
                    **write_options: Any) -> tuple[sync.DistributedWrite, list[Any]]:
    """Write ``df``'s partitions as uncommitted fragments; returns the plan and the task
    results (commit them with :func:`commit_fragments`, or ``plan.abort(results)``).

    ``write_options``: ``max_rows_per_file``, ``max_rows_per_group``, ``data_storage_version``,
    ``commit_handler``, as for :func:`alance.plan_write`.
    """
    arrow = spark_arrow_schema(df.schema)
    plan = sync.plan_write(uri, arrow, mode, storage_options=storage_options, **write_options)

    def task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        part = plan.write(batches)
        yield pa.record_batch({RESULT_COLUMN: pa.array([pickle.dumps(part)], pa.binary())})

    try:
        rows = df.mapInArrow(task, f"{RESULT_COLUMN} binary").collect()
    except BaseException:
        plan.abort([])  # tasks that finished are found through their staging records
        raise
    return plan, [pickle.loads(r[0]) for r in rows]


def commit_fragments(plan: sync.DistributedWrite, results: list[UncommittedFragments],
                     ) -> sync.LanceDataset:
    """Publish the results of :func:`write_fragments` as one version."""
    return plan.commit(results)


def write_dataframe(df: Any, uri: str | os.PathLike[str], mode: str = "append",
                    **kwargs: Any) -> sync.LanceDataset:
    """:func:`write_fragments` then :func:`commit_fragments`: one new version."""
    plan, results = write_fragments(df, uri, mode, **kwargs)
    return commit_fragments(plan, results)


def _run_tasks(spark: Any, plan: Any, tasks: list[Any]) -> list[Any]:
    """``plan.run`` for every task, one Spark task each; if the job fails, the plan is aborted
    (which also deletes the files of tasks that finished: see
    :mod:`alance.dataset.distributed.staging`) and the error raised."""
    try:
        return spark.sparkContext.parallelize(tasks, len(tasks)).map(plan.run).collect()
    except BaseException:
        plan.abort([])
        raise


def delete_where(spark: Any, uri: str | os.PathLike[str], predicate: str, *,
                 storage_options: Mapping[str, Any] | None = None,
                 fragments_per_task: int = 1) -> DeleteResult:
    """Delete the rows matching ``predicate`` (SQL) with one Spark task per group of
    fragments and one commit. Returns the new version (blocking API) and the row count."""
    plan = sync.plan_delete(uri, predicate, storage_options=storage_options)
    groups = plan.tasks(fragments_per_task)
    if not groups:
        return plan.commit([])
    return plan.commit(_run_tasks(spark, plan, groups))


def update_where(spark: Any, uri: str | os.PathLike[str], updates: Mapping[str, Any],
                 where: str | None = None, *,
                 storage_options: Mapping[str, Any] | None = None,
                 fragments_per_task: int = 1) -> UpdateResult:
    """Set columns (``{"col": "SQL expression"}`` or plain values) of the rows matching
    ``where`` with one Spark task per group of fragments and one commit."""
    plan = sync.plan_update(uri, updates, where, storage_options=storage_options)
    groups = plan.tasks(fragments_per_task)
    if not groups:
        return plan.commit([])
    return plan.commit(_run_tasks(spark, plan, groups))


def compact(spark: Any, uri: str | os.PathLike[str], *,
            storage_options: Mapping[str, Any] | None = None,
            **options: Any) -> sync.LanceDataset | None:
    """Compact the dataset with one Spark task per group of fragments and one commit.

    ``options``: :class:`alance.dataset.maintenance.compaction_plan.CompactionOptions` fields
    (``target_rows_per_fragment``, ``materialize_deletions``, ...). Returns the new version,
    or ``None`` when there was nothing to compact.
    """
    from alance.dataset.maintenance.compaction_plan import CompactionOptions

    plan = sync.plan_distributed_compaction(uri, CompactionOptions(**options),
                                            storage_options=storage_options)
    tasks = plan.tasks()
    if not tasks:
        return None
    return plan.commit(_run_tasks(spark, plan, tasks))
