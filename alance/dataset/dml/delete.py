"""DELETE: soft-delete the rows matching a predicate.

The predicate is evaluated by a scan that reads only the columns it needs and yields row
addresses; each fragment with matches gets a new deletion file holding its old and new deleted
rows, and fragments left without rows are dropped. The Delete transaction carries the exact
rows removed, so concurrent deletes of other rows of the same fragments merge at commit time.
"""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc

from alance.commit.handler import CommitHandler
from alance.dataset.commit.loop import DEFAULT_MAX_RETRIES, commit_transaction
from alance.dataset.dml.results import check_retries, check_writable, with_replanning
from alance.dataset.fragments.deletions import WrittenFiles, apply_deletions, split_addresses
from alance.dataset.fragments.read import ReadContext
from alance.dataset.fragments.write import removed_on_failure
from alance.dataset.query.scan import ROW_ADDRESS, Scanner
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import InvalidInputError
from alance.io.store import DatasetStore
from alance.transaction.operations import new_delete


async def matching_addresses(ctx: ReadContext, predicate: str | pc.Expression | None,
                             ) -> np.ndarray:
    """Row addresses (uint64) of the live rows matching ``predicate`` (all rows if ``None``)."""
    scanner = Scanner(ctx, columns=[], filter=predicate, with_row_address=True)
    parts = [b.column(ROW_ADDRESS).to_numpy() async for b in scanner.to_batches()]
    return np.concatenate(parts).astype(np.uint64) if parts else np.empty(0, np.uint64)


def predicate_text(predicate: str | pc.Expression) -> str:
    """The predicate as recorded in the transaction."""
    if isinstance(predicate, str):
        if not predicate.strip():
            raise InvalidInputError("the delete predicate is empty")
        return predicate
    if isinstance(predicate, pc.Expression):
        return str(predicate)
    raise InvalidInputError("a delete predicate must be a SQL string or a "
                            f"pyarrow.compute.Expression, got {type(predicate).__name__}")


async def delete_rows(store: DatasetStore, handler: CommitHandler, snapshot: Snapshot,
                      predicate: str | pc.Expression, *, conflict_retries: int,
                      max_retries: int = DEFAULT_MAX_RETRIES,
                      retry_timeout: float | None = None) -> tuple[Snapshot, int, int]:
    """Delete the rows matching ``predicate``; returns (new version, rows deleted, attempts)."""
    text = predicate_text(predicate)
    check_retries(conflict_retries)
    check_writable(snapshot)
    # Compile once up front: unknown columns and type errors fail before anything is written.
    Scanner(ReadContext(store, snapshot), columns=[], filter=predicate)

    async def attempt(snap: Snapshot) -> tuple[Snapshot, int]:
        ctx = ReadContext(store, snap)
        by_fragment = split_addresses(await matching_addresses(ctx, predicate))
        written = WrittenFiles()
        async with removed_on_failure(store, [], written):
            updated, removed = await apply_deletions(ctx, by_fragment, written)
            txn = new_delete(snap.version, updated, removed, text)
            new = await commit_transaction(store, handler, snap, txn, max_retries=max_retries,
                                           affected_rows=by_fragment)
        await written.remove_unreferenced(store, new.fragments)
        return new, sum(len(v) for v in by_fragment.values())

    (new, count), attempts = await with_replanning(store, handler, snapshot, attempt,
                                                   conflict_retries, retry_timeout)
    return new, count, attempts
