"""What delete, update and merge_insert share: results, re-planning on conflicts, writing rows.

Every DML operation is *planned* on one version (rows found, new data and deletion files
written) and then committed. When the commit meets a concurrent change it cannot be rebased
over (:class:`~alance.errors.RetryableCommitConflictError`), what the attempt wrote is deleted
and the operation is planned again on the newest version, up to ``conflict_retries`` times.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from alance._proto import table_pb2
from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import backoff_delay
from alance.dataset.fragments.inputs import regroup
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import (
    WriteParams,
    blob_chunk_bytes,
    delete_fragment_files,
    file_version_of,
    write_fragments,
)
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import (
    InvalidInputError,
    RetryableCommitConflictError,
    UnrepresentableValueError,
)
from alance.format.feature_flags import check_writer_flags
from alance.io.store import DatasetStore

T = TypeVar("T")

#: How many times DML operations plan again after a retryable conflict (as pylance).
DEFAULT_CONFLICT_RETRIES = 10
#: How long conflicts are retried by planning again (pylance's default ``retry_timeout``).
DEFAULT_RETRY_TIMEOUT = dt.timedelta(seconds=30)


@dataclass(frozen=True)
class DeleteResult:
    """What :meth:`LanceDataset.delete` did; ``dataset`` is the new version (a
    ``LanceDataset`` of the API, async or blocking, it was called from)."""

    dataset: Any
    num_deleted_rows: int

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass(frozen=True)
class UpdateResult:
    """What :meth:`LanceDataset.update` did; ``dataset`` is the new version."""

    dataset: Any
    num_rows_updated: int

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


@dataclass(frozen=True)
class MergeInsertResult:
    """What a merge_insert did; ``dataset`` is the new version. ``num_attempts`` counts plans."""

    dataset: Any
    num_inserted_rows: int
    num_updated_rows: int
    num_deleted_rows: int
    num_attempts: int = 1

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)


def check_writable(snapshot: Snapshot) -> None:
    """Refuse datasets alance cannot add data files and deletion files to."""
    check_writer_flags(snapshot.manifest.writer_feature_flags)
    file_version_of(snapshot.data_storage_version)  # data files alance can write


def check_retries(conflict_retries: int) -> None:
    """Validate a ``conflict_retries`` argument."""
    if isinstance(conflict_retries, bool) or not isinstance(conflict_retries, int) or (
            conflict_retries < 0):
        raise InvalidInputError(f"conflict_retries must be an integer >= 0, "
                                f"got {conflict_retries!r}")


def retry_seconds(retry_timeout: dt.timedelta | float | None) -> float | None:
    """A ``retry_timeout`` argument (a timedelta or seconds; ``None``: no limit) in seconds."""
    if retry_timeout is None:
        return None
    seconds = (retry_timeout.total_seconds() if isinstance(retry_timeout, dt.timedelta)
               else retry_timeout)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise InvalidInputError(f"retry_timeout must be a timedelta or seconds >= 0, got "
                                f"{retry_timeout!r}")
    return float(seconds)


async def with_replanning(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                          attempt: Callable[[Snapshot], Awaitable[T]], conflict_retries: int,
                          retry_timeout: float | None = None) -> tuple[T, int]:
    """Run ``attempt`` (plan + commit) on ``snapshot``, then on the newest version after each
    retryable conflict, up to ``conflict_retries`` times and while ``retry_timeout`` seconds
    have not passed since the start. Returns the result and the number of attempts made."""
    snap = snapshot
    start = time.monotonic()
    for number in range(conflict_retries + 1):
        try:
            return await attempt(snap), number + 1
        except RetryableCommitConflictError:
            if number == conflict_retries or (
                    retry_timeout is not None and time.monotonic() - start >= retry_timeout):
                raise
        await asyncio.sleep(backoff_delay(number))
        snap = await load_snapshot(store, handler)
        check_writable(snap)
    raise AssertionError("unreachable")  # pragma: no cover


def storage_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the plain storage types of ``schema`` (extension types unwrapped)."""
    columns = [c.storage if isinstance(c, pa.ExtensionArray) else c for c in batch.columns]
    out = pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    if not out.schema.equals(schema):
        out = cast_rows(out, schema)
    return out


TableOrBatch = TypeVar("TableOrBatch", pa.Table, pa.RecordBatch)


def cast_rows(rows: TableOrBatch, schema: pa.Schema) -> TableOrBatch:
    """``rows`` cast to ``schema``; a null in a non-nullable column raises
    :class:`~alance.errors.InvalidInputError` naming the column (Arrow's conversion errors
    pass through, for the caller to map)."""
    try:
        return rows.cast(schema)
    except ValueError as exc:
        if isinstance(exc, pa.ArrowException):
            raise
        raise InvalidInputError(f"the rows do not fit the dataset's schema: {exc}") from exc


async def write_rows(ctx: ReadContext, batches: AsyncIterator[pa.RecordBatch],
                     params: WriteParams | None = None) -> list[table_pb2.DataFragment]:
    """Write rows with the dataset's schema into new fragments (ids left unassigned).

    Dictionary columns must only use values already in the dataset's dictionaries (v0.2
    keeps one per column): otherwise :class:`UnrepresentableValueError`, nothing left behind.
    """
    params = params or WriteParams()
    schema = ctx.snapshot.schema
    target = schema.to_arrow()
    seed = dict(ctx.dictionaries)
    dictionaries = dict(seed)

    async def conformed() -> AsyncIterator[pa.RecordBatch]:
        # Batches with blob values are combined only up to a bounded number of bytes.
        async for batch in regroup(batches, params.rows_per_chunk, blob_chunk_bytes(schema),
                                 params.max_rows_per_group):
            yield storage_batch(batch, target)

    fragments = await write_fragments(ctx.store, schema, conformed(), params, dictionaries,
                                      ctx.snapshot.data_storage_version)
    grown = [f.name for f in schema.walk()
             if f.id in seed and len(dictionaries[f.id]) != len(seed[f.id])]
    if grown:
        await delete_fragment_files(ctx.store, fragments)
        raise UnrepresentableValueError(
            f"columns {grown}: values missing from the dataset's dictionary; a v0.2 dataset "
            "keeps one dictionary per column, fixed when it was written")
    return fragments
