"""The exceptions alance raises.

Every error alance raises on purpose derives from :class:`AlanceError`::

    AlanceError
    ├── InvalidInputError (also ValueError)
    │   ├── SchemaMismatchError        (also OSError)
    │   ├── UnrepresentableValueError
    │   ├── RowCountMismatchError      (also OSError)
    │   ├── MergeInsertMatchError
    │   ├── PathOutsideDatasetError
    │   ├── ArgumentTypeError          (also TypeError)
    │   └── JobFinishedError           (a task of a committed or aborted distributed job)
    ├── NotFoundError (also FileNotFoundError)
    │   └── DatasetNotFoundError       (also ValueError)
    ├── IndexNotFoundError (also KeyError)
    ├── AlreadyExistsError (also FileExistsError)
    ├── EmptyWriteError (also OSError)
    ├── CorruptFileError
    ├── UnsupportedFeatureError
    ├── TaggedVersionError             (cleanup would remove tagged versions)
    ├── CommitConflictError (also OSError)
    │   ├── RetryableCommitConflictError   (re-plan the operation on the new version)
    │   └── IncompatibleTransactionError   (cannot succeed as planned; do not retry blindly)
    └── StoreError
        ├── TransientStoreError       (retried by alance before it reaches you)
        ├── CommitOutcomeUnknownError (a commit may or may not have happened)
        ├── DeadlineExceededError     (also TimeoutError; an operation ran out of time)
        └── PermissionDeniedError     (also PermissionError)

Every class is defined here (``tests/test_errors_tree.py`` checks this tree against the code).

Lower layers (obstore, protobuf, pyarrow) are mapped to these at the boundary where alance calls
them, with the original exception chained as ``__cause__``.
"""

from __future__ import annotations

import difflib


class AlanceError(Exception):
    """Root of every error alance raises on purpose."""


class InvalidInputError(AlanceError, ValueError):
    """The caller passed something alance cannot accept (bad argument, bad data)."""


class SchemaMismatchError(InvalidInputError, OSError):
    """Data does not match the dataset's schema (e.g. appending a different schema). Both a
    ``ValueError`` and an ``OSError``, as pylance raises either for such data."""


class UnrepresentableValueError(InvalidInputError):
    """A value cannot be stored faithfully in the chosen file format version.

    alance refuses such data rather than silently changing it.
    """


class RowCountMismatchError(InvalidInputError, OSError):
    """Values given row by row for a dataset end before its rows do, or go on after them
    (an ``OSError`` too, as pylance reports it)."""


class MergeInsertMatchError(InvalidInputError):
    """A merge insert built with ``when_matched_fail`` found source rows that match rows of
    the table (nothing was written)."""


class ArgumentTypeError(InvalidInputError, TypeError):
    """An argument of the wrong type (a ``TypeError`` as in pylance, and an alance
    :class:`InvalidInputError`)."""


class JobFinishedError(InvalidInputError):
    """A task wrote for a planned distributed job that was already committed or aborted."""


class PathOutsideDatasetError(InvalidInputError):
    """A path (e.g. in a manifest) would escape the dataset root."""


class NotFoundError(AlanceError, FileNotFoundError):
    """An object, version or column does not exist."""


class DatasetNotFoundError(NotFoundError, ValueError):
    """No dataset (no committed version) exists at the given location (also a
    ``ValueError``, which pylance raises for a path that holds no dataset)."""


class IndexNotFoundError(AlanceError, KeyError):
    """No index of that name (pylance raises ``KeyError`` here too)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class AlreadyExistsError(AlanceError, FileExistsError):
    """An object that must be new already exists (e.g. creating an existing dataset)."""


class EmptyWriteError(AlanceError, OSError):
    """A write that must produce data got none (no rows, or no columns), as pylance's
    ``LanceFragment.create`` refuses (an ``OSError`` there)."""


class CorruptFileError(AlanceError):
    """A file's bytes do not decode: truncated, wrong magic, bad protobuf, bad offsets."""


class UnsupportedFeatureError(AlanceError):
    """The data uses a feature this version of alance does not implement (e.g. a feature flag)."""


class TaggedVersionError(AlanceError):
    """Cleanup would remove tagged versions (delete the tags or pass
    ``error_if_tagged_old_versions=False``)."""


class CommitConflictError(AlanceError, OSError):
    """Another writer committed the version this commit tried to create (an ``OSError``, as
    pylance reports commit conflicts).

    Raised by commit handlers when the atomic create of a manifest loses a race, and by the
    commit loop when a conflict cannot be resolved by rebasing within the retry budget.
    """


class RetryableCommitConflictError(CommitConflictError):
    """A concurrent commit changed what this operation read, so it cannot be rebased.

    Running the operation again (re-planned on the newest version) is expected to give the
    intended result, e.g. an update whose fragment a concurrent compaction rewrote, or two
    deletes of the same row. alance's delete/update/merge_insert do that themselves, up to
    their ``conflict_retries``.
    """


class IncompatibleTransactionError(CommitConflictError):
    """A concurrent commit makes this operation meaningless as planned.

    E.g. anything committed against a version that a concurrent Restore or Overwrite replaced,
    or a concurrent commit whose transaction cannot be read. Retrying would change what the
    operation does, so alance never retries these automatically.
    """


class StoreError(AlanceError):
    """The object store failed in a way that is not one of the more specific errors."""


class TransientStoreError(StoreError):
    """A failure that may succeed when tried again (5xx, throttling, timeouts, resets).

    alance retries these with jittered backoff; you see one only when retries ran out.
    """


class CommitOutcomeUnknownError(StoreError):
    """The store failed while a manifest was being committed, and reading it back failed too.

    The new version may or may not exist. Nothing the commit wrote was deleted (a committed
    version may reference it); open the dataset again to see which it is.
    """


class DeadlineExceededError(StoreError, TimeoutError):
    """An object store operation did not finish within its deadline, retries included (the
    storage option ``deadline``, or an :func:`alance.deadline` block around the call).

    A write that raises it committed nothing (see :mod:`alance.io.deadline`).
    """


class PermissionDeniedError(StoreError, PermissionError):
    """The store refused the credentials or the access (never retried)."""


def no_such_column(name: str, names: list[str]) -> InvalidInputError:
    """The error for a column name that does not exist, suggesting the closest names (in
    pylance's words: ``No field named x. Did you mean 'y'?``)."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not close:
        close = [n for n in names if n.lower() == name.lower()]
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else (
        f" Valid fields are {', '.join(names)}.")
    return InvalidInputError(f"No field named {name}.{hint}")


__all__ = [
    "no_such_column",
    "AlanceError",
    "AlreadyExistsError",
    "ArgumentTypeError",
    "CommitConflictError",
    "CommitOutcomeUnknownError",
    "CorruptFileError",
    "DatasetNotFoundError",
    "DeadlineExceededError",
    "EmptyWriteError",
    "IncompatibleTransactionError",
    "InvalidInputError",
    "JobFinishedError",
    "IndexNotFoundError",
    "MergeInsertMatchError",
    "NotFoundError",
    "PathOutsideDatasetError",
    "PermissionDeniedError",
    "RetryableCommitConflictError",
    "RowCountMismatchError",
    "SchemaMismatchError",
    "StoreError",
    "TaggedVersionError",
    "TransientStoreError",
    "UnrepresentableValueError",
    "UnsupportedFeatureError",
]
