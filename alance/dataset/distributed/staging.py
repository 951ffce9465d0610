"""Staging records: how a distributed job finds every file its tasks wrote, reported or not.

Jobs run by an engine such as Spark (writes, deletes, updates, compactions) have tasks that
write files and report them to the driver. Attempts the engine gives up on (failed, killed,
speculative duplicates) and tasks of a job that fails report nothing, yet may have written
files. So every planned job keeps a directory ``_alance_staging/{job_id}/``:

* the plan puts an ``open`` marker there (:func:`open_job`);
* before a task's file becomes visible, an empty *record* is put at
  ``_alance_staging/{job_id}/{path of the file}``; after it became visible, the task checks
  that the marker is still there and fails with :class:`JobFinishedError` otherwise (the job
  ended without it; the task's own error handling deletes its files);
* commit and abort call :func:`finish_job`: marker first, then every recorded file the new
  version does not reference, then the records.

What stays possible: a worker killed between completing a file and checking the marker leaves
that one file; such files are never referenced by any version.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alance._proto import table_pb2
from alance.errors import AlanceError, JobFinishedError, NotFoundError
from alance.format.deletion import deletion_path
from alance.format.manifest import DATA_DIR
from alance.format.v2.blob import sidecar_owner
from alance.io.store import DatasetStore
from alance.io.uri import open_store

#: Where planned jobs keep their staging records (relative to the dataset root).
STAGING_DIR = "_alance_staging"
#: The marker that says a planned job still accepts files.
OPEN_MARKER = "open"


def staging_dir(job_id: str) -> str:
    """Where job ``job_id`` keeps its staging records (relative to the dataset root)."""
    return f"{STAGING_DIR}/{job_id}"


async def open_job(store: DatasetStore, job_id: str) -> None:
    """Put the ``open`` marker of a newly planned job."""
    await store.put(f"{staging_dir(job_id)}/{OPEN_MARKER}", b"")


@dataclass
class Recorder:
    """The files a task recorded (paths relative to the dataset root), in order."""

    job_id: str
    records: list[str] = field(default_factory=list)


class _RecordingUpload:
    def __init__(self, inner: Any, before: Any, after: Any) -> None:
        self.inner, self.before, self.after = inner, before, after
        self.completed = False

    async def write(self, data: Any) -> None:
        await self.inner.write(data)

    async def complete(self) -> None:
        await self.before()
        await self.inner.complete()
        self.completed = True
        await self.after()

    async def abort(self) -> None:
        if not self.completed:  # a completed object is deleted by the caller instead
            await self.inner.abort()


class _RecordingBackend:
    """Records each new object before it becomes visible; checks the marker after."""

    def __init__(self, inner: Any, store: DatasetStore, recorder: Recorder) -> None:
        self.inner, self.store, self.recorder = inner, store, recorder
        self._dir = staging_dir(recorder.job_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _relative(self, key: str) -> str | None:
        """The dataset-relative path of ``key``; None for staging objects (not recorded)."""
        rel = self.store._rel(key)
        return None if rel.startswith(f"{STAGING_DIR}/") else rel

    async def _record(self, rel: str) -> None:
        self.recorder.records.append(rel)
        await self.inner.put(self.store._key(f"{self._dir}/{rel}"), b"", create=False)

    async def _check_open(self) -> None:
        try:
            await self.inner.head(self.store._key(f"{self._dir}/{OPEN_MARKER}"))
        except NotFoundError:
            raise JobFinishedError(f"job {self.recorder.job_id} on {self.store.uri} was "
                                   "committed or aborted while this task ran") from None

    async def put(self, key: str, data: bytes, *, create: bool) -> None:
        rel = self._relative(key)
        if rel is None:
            await self.inner.put(key, data, create=create)
            return
        await self._record(rel)
        await self.inner.put(key, data, create=create)
        await self._check_open()

    def upload(self, key: str) -> Any:
        rel = self._relative(key)
        if rel is None:
            return self.inner.upload(key)

        async def before() -> None:
            await self._record(rel)

        return _RecordingUpload(self.inner.upload(key), before, self._check_open)


def recording_store(uri: str, storage_options: Mapping[str, Any], job_id: str,
                    ) -> tuple[DatasetStore, Recorder]:
    """A store for a task of job ``job_id`` that records every object it creates."""
    store = open_store(uri, storage_options)
    recorder = Recorder(job_id)
    store.wrap_backend(lambda inner: _RecordingBackend(inner, store, recorder))
    return store, recorder


async def discard(store: DatasetStore, recorder: Recorder) -> None:
    """Delete what a failed task recorded: the files (if still there) and their records."""
    for rel in recorder.records:
        with contextlib.suppress(AlanceError):
            await store.delete(rel)
            await store.delete(f"{staging_dir(recorder.job_id)}/{rel}")
    recorder.records.clear()


def referenced_files(fragments: Iterable[table_pb2.DataFragment]) -> set[str]:
    """Paths (relative to the dataset root) of every file ``fragments`` point to."""
    paths: set[str] = set()
    for frag in fragments:
        paths.update(f"{DATA_DIR}/{f.path}" for f in frag.files)
        if frag.HasField("deletion_file"):
            paths.add(deletion_path(frag))
        external = (frag.external_row_ids, frag.external_created_at_versions,
                    frag.external_last_updated_at_versions)
        paths.update(ext.path for ext in external if ext.path)
    return paths


async def finish_job(store: DatasetStore, job_id: str, keep: set[str]) -> None:
    """Close job ``job_id``: remove its marker, then every recorded file not in ``keep``
    (paths relative to the dataset root; blob sidecars go with their data file), then the
    records. Best effort: what stays is never
    referenced by a version."""
    directory = staging_dir(job_id)
    with contextlib.suppress(AlanceError):
        await store.delete(f"{directory}/{OPEN_MARKER}")
    try:
        records = await store.list(directory)
    except AlanceError:
        return
    for meta in records:
        rel = meta.path[len(directory) + 1:]
        with contextlib.suppress(AlanceError):
            if rel != OPEN_MARKER and rel not in keep and sidecar_owner(rel) not in keep:
                await store.delete(rel)
            await store.delete(meta.path)
