"""Blocking twin of :class:`alance.BatchedInserter`: threads that insert share commits.

Every thread's ``insert`` runs on alance's one background event loop, so inserts from many
threads (a threaded web server, a pool of workers) are grouped into shared commits exactly as
concurrent coroutines are.
"""

from __future__ import annotations

from typing import Any

from alance.dataset.group_insert import MAX_BATCH_ROWS
from alance.dataset.group_insert import BatchedInserter as _A
from alance.sync.twin import Twin, blocking, twin_of, unwrap


class BatchedInserter(Twin, of=_A):
    """Blocking twin of :class:`alance.BatchedInserter` over an :mod:`alance.sync` dataset
    (or an async one); ``insert`` returns the blocking handle of the version that holds the
    rows."""

    def __init__(self, dataset: Any, *, compact_after: int | None = None,
                 max_batch_rows: int = MAX_BATCH_ROWS) -> None:
        super().__init__(_A(unwrap(dataset), compact_after=compact_after,
                            max_batch_rows=max_batch_rows))

    insert = blocking(_A.insert)

    @property
    def dataset(self) -> Any:
        """The newest version this inserter has committed (or started from)."""
        return twin_of(self._async.dataset)


__all__ = ["BatchedInserter"]
