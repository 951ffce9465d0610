"""The conflict matrix: every pair of operations committed concurrently against one version.

For each ordered pair (theirs, mine) a fresh table (3 fragments of 100 rows, ids 0..299) is
made at version N; ``theirs`` commits N+1, then ``mine`` -- planned on N -- commits. The
outcome must be the documented one (:data:`EXPECTED`: ok, retryable or incompatible), and
when it is ok the final table must equal running ``theirs`` then ``mine`` one after the other
(mine planned on N+1). For retryable outcomes of DML operations, running them again with their
default re-planning must also end equal to the serial execution.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable

import numpy as np
import pyarrow as pa
import pyroaring
import pytest

import alance
from alance._proto import table_pb2, transaction_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.dml.results import write_rows
from alance.dataset.fragments.read import ReadContext
from alance.errors import (
    CommitConflictError,
    IncompatibleTransactionError,
    RetryableCommitConflictError,
)
from alance.transaction import (
    new_create_index,
    new_reserve_fragments,
    new_restore,
    new_rewrite,
    new_update_config,
)
from alance.transaction.conflicts import _ALWAYS_OK, _INCOMPATIBLE, Outcome, RebaseState
from alance.transaction.indices import write_bitmap
from alance.transaction.operations import KNOWN_OPERATIONS

Op = Callable[[alance.LanceDataset, int], Awaitable[object]]


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64)})


async def commit(ds: alance.LanceDataset, txn: transaction_pb2.Transaction) -> None:
    await commit_transaction(ds._store, ds._handler, ds._snapshot, txn)


async def op_append(ds: alance.LanceDataset, retries: int) -> None:
    # a writer that read version N appends: same as an Append transaction planned on N
    ctx = ReadContext(ds._store, ds._snapshot)

    async def batches():  # type: ignore[no-untyped-def]
        for b in rows(1000, 10).to_batches():
            yield b

    frags = await write_rows(ctx, batches())
    from alance.transaction import new_append
    await commit(ds, new_append(ds.version, frags))


async def op_overwrite(ds: alance.LanceDataset, retries: int) -> None:
    from alance.transaction import new_overwrite
    ctx = ReadContext(ds._store, ds._snapshot)

    async def batches():  # type: ignore[no-untyped-def]
        for b in rows(5000, 7).to_batches():
            yield b

    frags = await write_rows(ctx, batches())
    await commit(ds, new_overwrite(ds.version, frags, ds.lance_schema))


async def op_rewrite(ds: alance.LanceDataset, retries: int) -> None:
    """Compact fragments 0 and 1 into one."""
    old = [f for f in ds.manifest.fragments if f.id in (0, 1)]
    if len(old) != 2:
        raise RetryableCommitConflictError("fragments to compact are gone")
    live = await ds.scanner(fragments=[0, 1]).to_table()
    ctx = ReadContext(ds._store, ds._snapshot)

    async def batches():  # type: ignore[no-untyped-def]
        for b in live.to_batches():
            yield b

    new = await write_rows(ctx, batches())
    await commit(ds, new_rewrite(ds.version, [(old, new)]))


async def op_create_index(ds: alance.LanceDataset, retries: int) -> None:
    ix = table_pb2.IndexMetadata(name="id_idx", fields=[0], dataset_version=ds.version)
    ix.uuid.uuid = uuid.uuid4().bytes
    write_bitmap(ix, pyroaring.BitMap([0, 1, 2]))
    await commit(ds, new_create_index(ds.version, [ix]))


OPS: dict[str, Op] = {
    "append": op_append,
    "delete": lambda ds, r: ds.delete("id < 10", conflict_retries=r),
    "delete_near": lambda ds, r: ds.delete("id >= 50 and id < 60", conflict_retries=r),
    "delete_same": lambda ds, r: ds.delete("id < 5", conflict_retries=r),
    "delete_far": lambda ds, r: ds.delete("id >= 250 and id < 260", conflict_retries=r),
    "update": lambda ds, r: ds.update({"v": "v * 2"}, "id >= 100 and id < 110",
                                      conflict_retries=r),
    "merge_insert": lambda ds, r: ds.merge_insert("id").when_matched_update_all()
    .when_not_matched_insert_all().conflict_retries(r)
    .execute(pa.table({"id": pa.array([105, 2000], pa.int64()), "v": [-1.0, -2.0]})),
    "overwrite": op_overwrite,
    "restore": lambda ds, r: commit(ds, new_restore(ds.version, 1)),
    "update_config": lambda ds, r: commit(ds, new_update_config(ds.version,
                                                                config={"k": str(ds.version)})),
    "create_index": op_create_index,
    "rewrite": op_rewrite,
    "reserve": lambda ds, r: commit(ds, new_reserve_fragments(ds.version, 2)),
}
DML = {"delete", "delete_near", "delete_same", "delete_far", "update", "merge_insert"}
#: Fragments (of 0, 1, 2) each operation changes rows of; None: all/none of the table.
TOUCHES = {"delete": {0}, "delete_near": {0}, "delete_same": {0}, "delete_far": {2},
           "update": {1}, "merge_insert": {1}, "rewrite": {0, 1}}
#: Pairs of DML ops removing the same rows.
SAME_ROWS = {frozenset({"delete", "delete_same"}), frozenset({"update", "merge_insert"})}


def expected(theirs: str, mine: str) -> str:
    """The documented outcome of committing ``mine`` after a concurrent ``theirs``."""
    if theirs in ("overwrite", "restore") and mine not in ("overwrite", "restore",
                                                           "update_config"):
        return "incompatible"
    if mine == "update_config" and theirs == "update_config":
        return "incompatible"  # both set config key "k"
    mine_rows, their_rows = TOUCHES.get(mine, set()), TOUCHES.get(theirs, set())
    if mine in DML | {"rewrite"} and theirs in DML | {"rewrite"} and mine_rows & their_rows:
        if "rewrite" in (mine, theirs) or mine == theirs or frozenset({mine, theirs}) in SAME_ROWS:
            return "retryable"
        return "ok"  # different rows of one fragment: deletion vectors merged
    if {mine, theirs} == {"rewrite", "create_index"}:
        return "retryable"  # the new index covers the fragments the rewrite moves
    return "ok"


async def fresh(uri: str) -> alance.LanceDataset:
    await alance.write_dataset(rows(0, 300), uri, max_rows_per_file=100)
    return await alance.open_dataset(uri)


async def final_rows(uri: str) -> list[tuple[int, float]]:
    ds = await alance.open_dataset(uri)
    t = await ds.to_table()
    return sorted(zip(t["id"].to_pylist(), t["v"].to_pylist(), strict=True))


PAIRS = list(itertools.product(OPS, OPS))


@pytest.mark.parametrize(("theirs", "mine"), PAIRS, ids=[f"{a}-then-{b}" for a, b in PAIRS])
async def test_conflict_matrix(theirs: str, mine: str) -> None:
    want = expected(theirs, mine)
    uri = f"memory://{uuid.uuid4().hex}/t.lance"
    base = await fresh(uri)
    await OPS[theirs](base, 0)
    outcome = "ok"
    try:
        await OPS[mine](base, 0)
    except RetryableCommitConflictError:
        outcome = "retryable"
    except IncompatibleTransactionError:
        outcome = "incompatible"
    assert outcome == want
    latest = await alance.open_dataset(uri)
    assert latest.version == base.version + (2 if outcome == "ok" else 1)
    for v in range(1, latest.version + 1):  # every version readable
        await (await latest.checkout_version(v)).count_rows()
    if outcome == "retryable" and mine in DML:
        await OPS[mine](base, 10)  # re-planned on the newest version
        outcome = "ok"
    if outcome != "ok":
        return
    serial_uri = f"memory://{uuid.uuid4().hex}/t.lance"
    serial = await fresh(serial_uri)
    await OPS[theirs](serial, 0)
    await OPS[mine](await alance.open_dataset(serial_uri), 0)
    assert await final_rows(uri) == await final_rows(serial_uri)


async def test_delete_delete_merges_deletion_vectors() -> None:
    uri = f"memory://{uuid.uuid4().hex}/t.lance"
    base = await fresh(uri)
    await base.delete("id < 10")
    result = await base.delete("id >= 20 and id < 30", conflict_retries=0)
    frag0 = result.dataset.manifest.fragments[0]
    assert frag0.deletion_file.num_deleted_rows == 20
    assert frag0.deletion_file.file_type == table_pb2.DeletionFile.BITMAP  # merged: a bitmap
    assert frag0.deletion_file.read_version == base.version + 1  # rebased onto the winner
    txn = result.dataset._snapshot.manifest_file.transaction
    assert txn is not None and txn.read_version == base.version + 1
    assert await result.dataset.count_rows() == 280


async def test_concurrent_deletes_emptying_a_fragment_remove_it() -> None:
    uri = f"memory://{uuid.uuid4().hex}/t.lance"
    base = await fresh(uri)
    await base.delete("id < 50")
    result = await base.delete("id >= 50 and id < 100", conflict_retries=0)
    assert [f.id for f in result.dataset.manifest.fragments] == [1, 2]
    assert await result.dataset.count_rows() == 200


async def test_unreadable_concurrent_transaction_is_incompatible() -> None:
    uri = f"memory://{uuid.uuid4().hex}/t.lance"
    base = await fresh(uri)
    await base.delete("id < 5")
    # the concurrent version's transaction (inline and file) can no longer be read
    latest = await alance.open_dataset(uri)
    name = latest.manifest.transaction_file
    await latest._store.put(f"_transactions/{name}", b"\xff\xff garbage")
    from alance.format.manifest import encode_manifest_file
    mf = latest._snapshot.manifest_file
    mf.transaction = None
    await latest._store.put(latest._snapshot.location.path, encode_manifest_file(mf))
    with pytest.raises(IncompatibleTransactionError):
        await base.delete("id >= 250", conflict_retries=0)


def test_every_pair_of_known_operations_is_decided() -> None:
    """The pure matrix has an answer (no exception other than the typed ones) for all pairs."""
    for mine in _ALWAYS_OK:
        assert _ALWAYS_OK[mine].isdisjoint(_INCOMPATIBLE[mine])
        for theirs in KNOWN_OPERATIONS:
            txn = transaction_pb2.Transaction(read_version=1, uuid="a")
            getattr(txn, mine).SetInParent()
            other = transaction_pb2.Transaction(read_version=1, uuid="b")
            getattr(other, theirs).SetInParent()
            outcome, _ = RebaseState.start(txn, [], True).classify(other)
            assert isinstance(outcome, Outcome)
    txn = transaction_pb2.Transaction(read_version=1, uuid="a")
    txn.append.SetInParent()
    state = RebaseState.start(txn, [], False)
    assert state.classify(None)[0] is Outcome.INCOMPATIBLE
    with pytest.raises(CommitConflictError):
        state.check(None, 2)
