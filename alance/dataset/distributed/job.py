"""What every distributed job shares: where it writes, how it commits, how it ends.

A job (write, delete, update, compaction) is a dataclass planned on the driver with ``uri``,
``storage_options``, ``commit_handler`` and ``job_id``; :class:`Job` gives it

* :meth:`Job._store` / :meth:`Job._handler` -- the store and commit handler, opened where the
  job runs (a plan pickles without them);
* :meth:`Job._committing` -- the one failure rule around a job's commit: if the commit's
  outcome is unknown, everything is kept (a committed version may reference it); on any other
  failure ``undo`` removes what the tasks wrote and the job is closed keeping nothing;
* :meth:`Job._finish` -- close the job after a commit, keeping the files the new version uses
  (:func:`~alance.dataset.distributed.staging.finish_job`);
* :meth:`Job._abort_parts` -- close the job keeping nothing, and remove what each reported part
  wrote (best effort: a file that cannot be removed is left for cleanup).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

from alance.commit.handler import CommitHandler
from alance.commit.registry import commit_handler_for
from alance.dataset.distributed.staging import finish_job
from alance.errors import AlanceError, CommitOutcomeUnknownError
from alance.io.store import DatasetStore
from alance.io.uri import open_store

P = TypeVar("P")

__all__ = ["Job"]


class Job:
    """Base of the distributed job plans (see the module docstring)."""

    uri: str
    storage_options: Mapping[str, Any]
    commit_handler: str | None
    job_id: str

    def _store(self) -> DatasetStore:
        """The dataset's store, opened in this process."""
        return open_store(self.uri, self.storage_options)

    def _handler(self) -> CommitHandler:
        """The commit handler of the dataset (by URI, or the one the plan names)."""
        return commit_handler_for(self.uri, self.storage_options, self.commit_handler)

    @contextlib.asynccontextmanager
    async def _committing(self, store: DatasetStore,
                         undo: Callable[[], Awaitable[None]] | None = None,
                         ) -> AsyncIterator[None]:
        """Around the job's commit: see the module docstring."""
        try:
            yield
        except CommitOutcomeUnknownError:
            raise  # the files may be referenced now: keep everything
        except BaseException:
            if undo is not None:
                await undo()
            await finish_job(store, self.job_id, set())
            raise

    async def _finish(self, store: DatasetStore, keep: set[str]) -> None:
        """Close the job after its commit, keeping ``keep`` (paths under the dataset root)."""
        await finish_job(store, self.job_id, keep)

    async def _abort_parts(self, parts: Iterable[P | None],
                          remove: Callable[[DatasetStore, P], Awaitable[None]]) -> None:
        """Close the job keeping nothing, then ``remove`` what each reported part wrote (best
        effort). Task attempts that reported nothing are cleaned up by ``finish_job``; tasks
        still running fail."""
        store = self._store()
        await finish_job(store, self.job_id, set())
        for part in parts:
            if part is None:
                continue
            with contextlib.suppress(AlanceError):
                await remove(store, part)
