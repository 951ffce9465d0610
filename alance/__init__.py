"""alance: an asyncio-native engine for the Lance table format.

The async API lives here (``await alance.open_dataset(...)``); :mod:`alance.sync` mirrors it
name for name for blocking code.
"""

from __future__ import annotations

from alance._version import __version__
from alance.commit.handler import CommitHandler, ConditionalPutCommitHandler, ManifestLocation
from alance.dataset.api import LanceDataset, open_dataset, write_dataset
from alance.dataset.commit.operations import LanceOperation, Transaction
from alance.dataset.distributed.compaction import (
    CompactionPart,
    DistributedCompaction,
    plan_distributed_compaction,
)
from alance.dataset.distributed.dml import (
    DeletionPart,
    DistributedDelete,
    DistributedUpdate,
    UpdatePart,
    plan_delete,
    plan_update,
)
from alance.dataset.distributed.write import DistributedWrite, UncommittedFragments, plan_write
from alance.dataset.evolution.batch_udf import BatchUDF, batch_udf
from alance.dataset.fragment import LanceFragment, write_fragments
from alance.dataset.fragments.metadata import DataFile, DeletionFile, FragmentMetadata
from alance.dataset.fragments.session import Session
from alance.dataset.group_insert import BatchedInserter
from alance.dataset.query.scan import Scanner
from alance.dataset.versions.bases import DatasetBasePath
from alance.errors import (
    AlanceError,
    AlreadyExistsError,
    ArgumentTypeError,
    CommitConflictError,
    CommitOutcomeUnknownError,
    CorruptFileError,
    DatasetNotFoundError,
    DeadlineExceededError,
    EmptyWriteError,
    IncompatibleTransactionError,
    IndexNotFoundError,
    InvalidInputError,
    JobFinishedError,
    MergeInsertMatchError,
    NotFoundError,
    PathOutsideDatasetError,
    PermissionDeniedError,
    RetryableCommitConflictError,
    RowCountMismatchError,
    SchemaMismatchError,
    StoreError,
    TaggedVersionError,
    TransientStoreError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.io.deadline import deadline
from alance.io.store import iops_counter

__all__ = [
    "AlanceError",
    "BatchedInserter",
    "iops_counter",
    "IndexNotFoundError",
    "ArgumentTypeError",
    "CommitOutcomeUnknownError",
    "JobFinishedError",
    "MergeInsertMatchError",
    "RowCountMismatchError",
    "TaggedVersionError",
    "AlreadyExistsError",
    "CommitConflictError",
    "CommitHandler",
    "CompactionPart",
    "ConditionalPutCommitHandler",
    "CorruptFileError",
    "DataFile",
    "DatasetNotFoundError",
    "DeadlineExceededError",
    "deadline",
    "DeletionFile",
    "DeletionPart",
    "DistributedCompaction",
    "DistributedDelete",
    "DistributedUpdate",
    "DistributedWrite",
    "EmptyWriteError",
    "FragmentMetadata",
    "IncompatibleTransactionError",
    "InvalidInputError",
    "LanceDataset",
    "Session",
    "LanceFragment",
    "LanceOperation",
    "DatasetBasePath",
    "BatchUDF",
    "batch_udf",
    "ManifestLocation",
    "NotFoundError",
    "PathOutsideDatasetError",
    "PermissionDeniedError",
    "RetryableCommitConflictError",
    "Scanner",
    "SchemaMismatchError",
    "StoreError",
    "Transaction",
    "TransientStoreError",
    "UncommittedFragments",
    "UnrepresentableValueError",
    "UnsupportedFeatureError",
    "UpdatePart",
    "__version__",
    "open_dataset",
    "plan_delete",
    "plan_distributed_compaction",
    "plan_update",
    "plan_write",
    "write_dataset",
    "write_fragments",
]
