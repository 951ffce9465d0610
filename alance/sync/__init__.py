"""Blocking facade over alance's async API, name for name.

Every call runs the one async implementation on alance's background event loop (see
:mod:`alance._loop`) and waits for it. Safe from any thread, from code already running an event
loop (e.g. Jupyter), and in processes forked after use (Spark's Python workers)::

    from alance import sync as al
    ds = al.open_dataset("/data/events.lance")
    table = ds.to_table(columns=["id"], filter="id > 10")

The blocking classes are *derived* from the async ones (:mod:`alance.sync.twin`): each method
is made from its async original, with the same name, signature and docstring. Modules:
:mod:`.dataset` (the handle, scans, tags, merge-insert, SQL), :mod:`.fragment` (fragments and
manual commits), :mod:`.distributed` (jobs), :mod:`.compaction` (compaction tasks),
:mod:`.file` (``lance.file``), :mod:`.schema` (pylance's schema views).
"""

from __future__ import annotations

from alance import vector
from alance.dataset.commit.operations import LANCE_COMMIT_MESSAGE_KEY, LanceOperation, Transaction
from alance.dataset.evolution.batch_udf import BatchUDF, batch_udf
from alance.dataset.fragments.metadata import DataFile, DeletionFile, FragmentMetadata, RowIdMeta
from alance.dataset.fragments.progress import (
    FileSystemFragmentWriteProgress,
    FragmentWriteProgress,
    NoopFragmentWriteProgress,
)
from alance.dataset.fragments.session import Session
from alance.dataset.versions.auto_cleanup import AutoCleanupConfig
from alance.dataset.versions.bases import DatasetBasePath
from alance.io.deadline import deadline
from alance.io.store import iops_counter
from alance.sync import file, schema
from alance.sync.compaction import Compaction, CompactionPlan, CompactionTask, RewriteResult
from alance.sync.dataset import (
    ChangeFeed,
    DatasetOptimizer,
    FullTextScanner,
    LanceDataset,
    LanceStats,
    MergeInsertBuilder,
    NearestScanner,
    Scanner,
    ShardedBatchIterator,
    SqlQuery,
    SqlQueryBuilder,
    Tags,
    dataset,
    manifest_needs_migration,
    open_dataset,
    write_dataset,
)
from alance.sync.distributed import (
    DistributedCompaction,
    DistributedDelete,
    DistributedUpdate,
    DistributedWrite,
    plan_delete,
    plan_distributed_compaction,
    plan_update,
    plan_write,
)
from alance.sync.file import LanceFileReader, LanceFileSession, LanceFileWriter
from alance.sync.fragment import (
    BulkCommitResult,
    FragmentSession,
    LanceFragment,
    format_fragment,
    write_fragments,
)
from alance.sync.group_insert import BatchedInserter
from alance.sync.schema import LanceField, LanceSchema

__all__ = ["LANCE_COMMIT_MESSAGE_KEY", "AutoCleanupConfig", "BatchUDF", "BatchedInserter",
           "BulkCommitResult",
           "ChangeFeed", "Compaction", "CompactionPlan", "CompactionTask", "DataFile",
           "DatasetBasePath", "DatasetOptimizer", "DeletionFile", "DistributedCompaction",
           "DistributedDelete", "DistributedUpdate", "DistributedWrite",
           "FileSystemFragmentWriteProgress", "FragmentMetadata", "FragmentSession",
           "FragmentWriteProgress", "LanceDataset", "LanceField", "LanceFileReader",
           "LanceFileSession", "LanceFileWriter", "LanceFragment", "LanceOperation",
           "LanceSchema", "LanceStats", "MergeInsertBuilder", "NearestScanner", "FullTextScanner",
           "NoopFragmentWriteProgress", "RewriteResult", "RowIdMeta", "Scanner",
           "Session", "ShardedBatchIterator", "SqlQuery", "SqlQueryBuilder", "Tags", "Transaction",
           "batch_udf", "dataset", "deadline", "file", "format_fragment", "iops_counter",
           "manifest_needs_migration", "open_dataset", "plan_delete",
           "plan_distributed_compaction", "plan_update",
           "plan_write", "schema", "vector", "write_dataset", "write_fragments"]
