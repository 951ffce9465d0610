"""The IO half of rebasing: merging deletion vectors when two writers deleted from one fragment.

:class:`~alance.transaction.conflicts.RebaseState` decides (without IO) which fragments both
our Delete/Update and a concurrent one added deletions to. Here, for each such fragment, the
newest version's deletion vector is read and merged with the rows we deleted; if both removed
the same row the operation must be planned again (retryable conflict). The merged vector is
written as a new deletion file (a roaring bitmap, as Lance writes merged vectors) named with
the newest version as its read version, and our transaction is pointed at it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from alance._proto import transaction_pb2
from alance.dataset.fragments.deletions import WrittenFiles, sorted_unique, write_deletion_vector
from alance.dataset.fragments.read import ReadContext
from alance.dataset.versions.snapshot import Snapshot
from alance.errors import RetryableCommitConflictError
from alance.format.deletion import DeletionFileKind
from alance.io.store import DatasetStore
from alance.transaction.conflicts import RebaseState
from alance.transaction.operations import operation_name

_EMPTY = np.empty(0, dtype=np.uint32)


async def finish_rebase(store: DatasetStore, latest: Snapshot, state: RebaseState,
                        affected_rows: Mapping[int, np.ndarray] | None,
                        written: WrittenFiles) -> transaction_pb2.Transaction:
    """Our transaction, ready to be built on ``latest`` (all concurrent commits checked)."""
    txn = transaction_pb2.Transaction()
    txn.CopyFrom(state.txn)
    name = operation_name(txn)
    if name not in ("delete", "update"):
        return txn
    txn.read_version = latest.version
    if not state.needs_merge:
        return txn
    ctx = ReadContext(store, latest)
    current = {f.id: f for f in latest.fragments}
    replaced: dict[int, object] = {}
    emptied: list[int] = []
    for fid in sorted(state.needs_merge):
        frag = current.get(fid)
        if frag is None:
            raise RetryableCommitConflictError(
                f"fragment {fid} was removed by a concurrent commit; plan again")
        theirs = await ctx.deleted_offsets(frag)
        theirs = theirs if theirs is not None else _EMPTY
        ours = np.asarray((affected_rows or {}).get(fid, _EMPTY), dtype=np.uint32)
        both = ours[np.isin(ours, theirs, assume_unique=True)]
        if both.size:
            raise RetryableCommitConflictError(
                f"a concurrent commit (version {latest.version} or earlier) also changed rows "
                f"{both[:5].tolist()} of fragment {fid}; plan again")
        merged = sorted_unique(np.concatenate([theirs, ours]))
        new = await write_deletion_vector(store, frag, merged, DeletionFileKind.BITMAP,
                                          latest.version, written)
        if new is None:
            emptied.append(fid)
        else:
            replaced[fid] = new.deletion_file
    op = txn.delete if name == "delete" else txn.update
    keep = []
    for frag in op.updated_fragments:
        if frag.id in emptied:
            continue
        copy = type(frag)()
        copy.CopyFrom(frag)
        if frag.id in replaced:
            copy.deletion_file.CopyFrom(replaced[frag.id])  # type: ignore[arg-type]
        keep.append(copy)
    del op.updated_fragments[:]
    op.updated_fragments.extend(keep)
    removed = txn.delete.deleted_fragment_ids if name == "delete" else (
        txn.update.removed_fragment_ids)
    removed.extend(sorted(set(emptied) - set(removed)))
    return txn
