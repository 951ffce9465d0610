"""Distributed writes: many workers write fragments, one commit makes them visible.

An engine such as Spark runs the same write in many processes. The pattern:

1. the driver *plans* the write once (:func:`plan_write`): it reads the dataset's latest
   version, fixes the schema (with its field ids), the data storage version and the version
   the commit will be based on. The plan is a small picklable object shipped to every task;
2. each task calls :meth:`DistributedWrite.write` with its rows. Data files are written, nothing
   is committed; the task returns :class:`UncommittedFragments` (serialisable fragment
   metadata), which it hands back to the driver;
3. the driver calls :meth:`DistributedWrite.commit` with every task's result: ONE Append (or
   Overwrite) transaction, retried over concurrent commits like any other commit. If the job
   fails instead, :meth:`DistributedWrite.abort` deletes the files the tasks reported.

Task attempts Spark gives up on (killed, failed, speculative duplicates) report nothing, so
the files they wrote are found through the job's staging records
(:mod:`alance.dataset.distributed.staging`): commit and abort delete every recorded file the
new version does not reference, and a task still running after the job ended fails.

Fragments carry no ids until the commit assigns them, so a task result committed twice is
impossible to tell apart only by id: :meth:`~DistributedWrite.commit` refuses duplicate data
files instead (a retried task must hand in its own new result, never an old one twice).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from alance._proto import table_pb2
from alance.commit.registry import commit_handler_for
from alance.dataset.api import LanceDataset
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.distributed.job import Job
from alance.dataset.distributed.staging import (
    OPEN_MARKER,
    STAGING_DIR,
    JobFinishedError,
    discard,
    open_job,
    recording_store,
    staging_dir,
)
from alance.dataset.fragments.inputs import REGROUP_MAX_BYTES, record_batch_stream, regroup
from alance.dataset.fragments.write import (
    FileEvents,
    WriteParams,
    delete_fragment_files,
    file_version_of,
    removed_on_failure,
    storage_version_for,
    write_fragments,
)
from alance.dataset.versions.snapshot import Snapshot, load_snapshot
from alance.errors import (
    AlreadyExistsError,
    DatasetNotFoundError,
    InvalidInputError,
    SchemaMismatchError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.feature_flags import check_writer_flags
from alance.format.manifest import DATA_DIR, ManifestNamingScheme
from alance.format.schema import LanceSchema
from alance.io.store import DatasetStore
from alance.io.uri import open_store
from alance.transaction.operations import new_append, new_overwrite

DistributedMode = str  # "create" | "append" | "overwrite"
__all__ = ["OPEN_MARKER", "STAGING_DIR", "DistributedWrite", "JobFinishedError",
           "UncommittedFragments", "conform_batch", "plan_write"]
_MODES = ("create", "append", "overwrite")


@dataclass(frozen=True)
class UncommittedFragments:
    """What one writer task produced: fragments written but not committed.

    ``fragments`` are serialised ``DataFragment`` messages (ids unassigned); ``job_id`` names
    the planned write they belong to. Picklable and small: a task's commit message.
    """

    job_id: str
    fragments: tuple[bytes, ...] = ()
    num_rows: int = 0

    def fragment_protos(self) -> list[table_pb2.DataFragment]:
        """The fragments as protobuf messages."""
        return [table_pb2.DataFragment.FromString(b) for b in self.fragments]


@dataclass(frozen=True)
class DistributedWrite(Job):
    """A write planned on the driver, executed by many tasks, committed once.

    Make it with :func:`plan_write`; it pickles to every task (no IO on unpickling).
    """

    uri: str
    mode: DistributedMode
    schema: LanceSchema
    read_version: int
    data_storage_version: str
    params: WriteParams = field(default_factory=WriteParams)
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    commit_handler: str | None = None
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema rows are written with."""
        return self.schema.to_arrow()

    @property
    def staging_dir(self) -> str:
        """Where this write's staging records live (relative to the dataset root)."""
        return staging_dir(self.job_id)

    async def write(self, data: Any, schema: pa.Schema | None = None, *,
                    progress: Callable[[int, int | None], Any] | None = None,
                    ) -> UncommittedFragments:
        """Write ``data`` (anything :func:`alance.write_dataset` takes) into new fragments.

        Columns are matched to the planned schema by name (case-insensitively if no exact
        match) and cast without loss; a value that does not fit, or a null in a non-nullable
        column, raises before anything is reported. On error the files already written are
        deleted. Nothing is committed. ``progress(rows_written, rows_total)`` is called after
        each batch is written (``rows_total``: the input's row count when it has one, e.g. a
        table, else ``None``), as for :func:`alance.write_dataset`; it runs where the task
        runs.
        """
        store, recorder = recording_store(self.uri, self.storage_options, self.job_id)
        try:
            fragments, rows = await self.write_to(store, data, schema, progress=progress)
        except BaseException:
            await discard(store, recorder)  # write_fragments deleted the files; records go too
            raise
        return UncommittedFragments(self.job_id,
                                    tuple(f.SerializeToString() for f in fragments), rows)

    async def write_to(self, store: DatasetStore, data: Any, schema: pa.Schema | None = None,
                       events: FileEvents | None = None, *,
                       progress: Callable[[int, int | None], Any] | None = None,
                       ) -> tuple[list[table_pb2.DataFragment], int]:
        """Write ``data`` as :meth:`write` does, through ``store``, with no staging records:
        the fragments (ids unassigned) and the number of rows. Nothing is committed."""
        total_rows = getattr(data, "num_rows", None)
        total_rows = total_rows if isinstance(total_rows, int) else None
        if isinstance(data, Iterator) and schema is None:
            first = await asyncio.to_thread(next, data, None)
            if first is None:  # a task without rows writes nothing
                return [], 0
            data = itertools.chain([first], data)
        _, batches = await record_batch_stream(data, schema)
        target = self.arrow_schema
        counted = [0]

        arrived = getattr(events, "rows_arrived", None)

        async def announced() -> AsyncIterator[pa.RecordBatch]:
            first = True
            async for batch in batches:
                if first and arrived is not None and batch.num_rows:
                    first = False
                    await arrived()
                yield batch

        async def conformed() -> AsyncIterator[pa.RecordBatch]:
            async for batch in regroup(announced(), self.params.rows_per_chunk,
                                       self.params.max_bytes_per_file,
                                       self.params.max_rows_per_group,
                                       split_bytes=REGROUP_MAX_BYTES):
                out = conform_batch(batch, target)
                yield out
                counted[0] += out.num_rows
                if progress is not None:
                    progress(counted[0], total_rows)

        fragments = await write_fragments(store, self.schema, conformed(), self.params, {},
                                          storage_version=self.data_storage_version,
                                          events=events)
        return fragments, counted[0]

    def _collect(self, parts: Iterable[UncommittedFragments | None],
                 ) -> list[table_pb2.DataFragment]:
        fragments: list[table_pb2.DataFragment] = []
        seen: set[str] = set()
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, UncommittedFragments):
                raise InvalidInputError(f"expected UncommittedFragments, got "
                                        f"{type(part).__name__}")
            if part.job_id != self.job_id:
                raise InvalidInputError(f"fragments of write {part.job_id} handed to the commit "
                                        f"of write {self.job_id}")
            for frag in part.fragment_protos():
                paths = [f.path for f in frag.files]
                if seen.intersection(paths):
                    raise InvalidInputError(f"data file {paths[0]} handed in twice; each task "
                                            "result must be committed once")
                seen.update(paths)
                fragments.append(frag)
        return fragments

    async def commit(self, parts: Iterable[UncommittedFragments | None], *,
                     max_retries: int = DEFAULT_MAX_RETRIES) -> LanceDataset:
        """Commit every task's fragments as ONE Append (or Overwrite) transaction.

        ``None`` entries (tasks with nothing to report) are skipped. Commits made since the
        plan are rebased over when compatible (appends always are); an incompatible one
        (e.g. a concurrent overwrite) raises and the fragments' files are deleted.
        Returns the new version.
        """
        fragments = self._collect(parts)
        store = self._store()
        async with self._committing(store):
            snap = await self._commit(store, fragments, max_retries)
        await self._finish(store, {f"{DATA_DIR}/{f.path}" for frag in fragments
                                   for f in frag.files})
        return LanceDataset(store, self._handler(), snap)

    async def _commit(self, store: DatasetStore, fragments: list[table_pb2.DataFragment],
                      max_retries: int) -> Snapshot:
        handler = self._handler()
        options: dict[str, Any] = {"data_storage_version": self.data_storage_version,
                   "naming_scheme": ManifestNamingScheme.V2, "max_retries": max_retries}
        async with removed_on_failure(store, fragments):
            if self.read_version:
                base = await load_snapshot(store, handler, self.read_version)
                txn = (new_append(base.version, fragments) if self.mode == "append"
                       else new_overwrite(base.version, fragments, self.schema))
                return await commit_transaction(store, handler, base, txn, **options)
            try:
                return await commit_transaction(
                    store, handler, None, new_overwrite(0, fragments, self.schema),
                    must_create=True, **options)
            except AlreadyExistsError:
                if self.mode == "create":
                    raise
            # Another writer created the dataset meanwhile: overwrite it, or append to it if
            # the schemas agree (names, types and field ids), as for an existing dataset.
            latest = await load_snapshot(store, handler)
            if self.mode == "overwrite":
                txn = new_overwrite(latest.version, fragments, self.schema)
            elif latest.schema.to_protos() != self.schema.to_protos():
                raise SchemaMismatchError(f"{store.uri} was created by another writer with a "
                                          "different schema while this write ran")
            else:
                txn = new_append(latest.version, fragments)
            return await commit_transaction(store, handler, latest, txn, **options)

    async def abort(self, parts: Iterable[UncommittedFragments | None]) -> None:
        """Delete the data files of the write: those of ``parts`` and those of task attempts
        that reported nothing (best effort). Tasks still running fail."""
        await self._abort_parts((p for p in parts if p is None or p.job_id == self.job_id),
                               _remove_fragments)


async def _remove_fragments(store: DatasetStore, part: UncommittedFragments) -> None:
    await delete_fragment_files(store, part.fragment_protos())


def conform_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with the columns of ``target``, in its order and types (cast without loss).

    Columns are found by exact name, else case-insensitively (Spark's default). Raises
    :class:`SchemaMismatchError` for missing or extra columns and
    :class:`UnrepresentableValueError` for values that do not fit or nulls in non-nullable
    columns.
    """
    names = batch.schema.names
    lower = {n.lower(): i for i, n in enumerate(names)}
    columns: list[pa.Array] = []
    used: set[int] = set()
    for f in target:
        idx = names.index(f.name) if f.name in names else lower.get(f.name.lower())
        if idx is None:
            raise SchemaMismatchError(f"column {f.name!r} of the dataset is missing from the "
                                      f"data (columns {names})")
        used.add(idx)
        col = batch.column(idx)
        if isinstance(col.type, pa.BaseExtensionType):
            col = col.storage
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise UnrepresentableValueError(
                    f"column {f.name!r}: cannot store {col.type} values as {f.type}: "
                    f"{exc}") from exc
        if not f.nullable and col.null_count:
            raise UnrepresentableValueError(f"column {f.name!r} is not nullable in the dataset "
                                            f"but the data holds {col.null_count} nulls")
        columns.append(col)
    extra = [names[i] for i in range(len(names)) if i not in used]
    if extra:
        raise SchemaMismatchError(f"columns {extra} are not in the dataset (columns "
                                  f"{target.names})")
    return pa.RecordBatch.from_arrays(columns, schema=target)


async def plan_write(uri: str | os.PathLike[str], schema: pa.Schema,
                     mode: DistributedMode = "append", *,
                     storage_options: Mapping[str, Any] | None = None,
                     commit_handler: str | None = None,
                     max_rows_per_file: int = 1024 * 1024, max_rows_per_group: int = 1024,
                     max_bytes_per_file: int = 90 * 1024**3,
                     data_storage_version: str | None = None) -> DistributedWrite:
    """Plan a write that many tasks carry out and one commit publishes.

    ``schema``: the Arrow schema of the rows tasks will write. ``mode``: ``"create"`` (the
    dataset must not exist), ``"append"`` (creates it if missing; the columns must match the
    dataset's by name and convert without loss) or ``"overwrite"``.
    ``commit_handler``: ``None`` (by URI) or the dotted name of a handler.
    """
    if mode not in _MODES:
        raise InvalidInputError(f"mode must be one of {_MODES}, not {mode!r}")
    if not isinstance(schema, pa.Schema):
        raise InvalidInputError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if any(pa.types.is_dictionary(f.type) for f in schema):
        raise UnsupportedFeatureError("dictionary columns cannot be written by many tasks "
                                      "(each would build its own dictionary); decode them first")
    text_uri = os.fspath(uri)
    options = dict(storage_options or {})
    params = WriteParams(max_rows_per_file, max_rows_per_group, max_bytes_per_file)
    store = open_store(text_uri, options)
    handler = commit_handler_for(text_uri, options, commit_handler)
    try:
        base: Snapshot | None = await load_snapshot(store, handler)
    except DatasetNotFoundError:
        base = None
    if base is not None:
        check_writer_flags(base.manifest.writer_feature_flags)
        if mode == "create":
            raise AlreadyExistsError(f"a dataset already exists at {store.uri}; use "
                                     "mode='append' or mode='overwrite'")
    plan = planned_write(base, text_uri, mode, schema, options, params, commit_handler,
                    data_storage_version)
    file_version_of(plan.data_storage_version)  # refuse what alance cannot write, now
    await open_job(store, plan.job_id)
    return plan


def planned_write(base: Snapshot | None, text_uri: str, mode: str, schema: pa.Schema,
             options: dict[str, Any], params: WriteParams, commit_handler: str | None,
             data_storage_version: str | None) -> DistributedWrite:
    if base is not None and mode == "append":
        if any(f.dictionary is not None for f in base.schema.walk()):
            raise UnsupportedFeatureError("appending from many tasks to a dataset with "
                                          "dictionary columns is not supported")
        _check_names(base.schema.to_arrow(), schema)
        return DistributedWrite(text_uri, "append", base.schema, base.version,
                                base.data_storage_version, params, options, commit_handler)
    lance_schema = LanceSchema.from_arrow(schema)
    return DistributedWrite(text_uri, "create" if base is None and mode == "create" else mode,
                            lance_schema, base.version if base is not None else 0,
                            storage_version_for(data_storage_version), params, options,
                            commit_handler)


def _check_names(dataset: pa.Schema, data: pa.Schema) -> None:
    mine = {n.lower() for n in dataset.names}
    theirs = {n.lower() for n in data.names}
    if mine != theirs:
        raise SchemaMismatchError(
            f"columns do not match the dataset: missing {sorted(mine - theirs)}, "
            f"not in the dataset {sorted(theirs - mine)}")
