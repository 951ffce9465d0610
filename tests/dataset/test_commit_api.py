"""Hand-built commits (pylance's ``LanceOperation``, ``Transaction``,
``LanceDataset.commit`` / ``commit_batch``) through alance's transaction layer."""

from __future__ import annotations

import pickle
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset import manual_commit as manual_commit
from alance.errors import (
    CommitConflictError,
    DatasetNotFoundError,
    InvalidInputError,
    UnsupportedFeatureError,
)

SCHEMA = pa.schema([pa.field("id", pa.int64())])


def _ids(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64())})


def test_overwrite_creates_and_append_adds(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    frags = [al.LanceFragment.create(uri, _ids(i * 3, i * 3 + 3)) for i in range(3)]
    ds = al.LanceDataset.commit(uri, al.LanceOperation.Overwrite(SCHEMA, frags))
    assert ds.version == 1 and [f.fragment_id for f in ds.get_fragments()] == [0, 1, 2]
    more = al.write_fragments(_ids(9, 12), uri)
    ds = al.LanceDataset.commit(uri, al.LanceOperation.Append(more), read_version=1)
    assert lance.dataset(uri).to_table()["id"].to_pylist() == list(range(12))
    assert lance.dataset(uri).version == ds.version == 2


def test_operations_pickle_and_reject_wrong_types() -> None:
    meta = al.FragmentMetadata(0, [al.DataFile("a.lance", [0])], 3)
    txn = al.Transaction(1, al.LanceOperation.Append([meta]))
    back = pickle.loads(pickle.dumps(txn))
    assert back == txn and back.operation.fragments[0].files[0].path == "a.lance"
    with pytest.raises(TypeError):
        al.LanceOperation.Append([{"id": 0}])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        al.LanceOperation.Overwrite("not a schema", [])


def test_append_needs_a_dataset(tmp_path: Path) -> None:
    frags = al.write_fragments(_ids(0, 3), tmp_path / "a")
    with pytest.raises(DatasetNotFoundError):
        al.LanceDataset.commit(tmp_path / "b", al.LanceOperation.Append(frags),
                               read_version=1)
    with pytest.raises(InvalidInputError, match="read_version"):
        al.LanceDataset.commit(tmp_path / "a", al.LanceOperation.Append(frags))


def test_stale_conflicting_commit_raises_and_publishes_nothing(local_uri: str) -> None:
    ds = al.write_dataset(_ids(0, 10), local_uri)
    stale = ds.get_fragments()[0].delete("id < 2")
    assert stale is not None
    al.dataset(local_uri).delete("id = 9")  # a concurrent delete in the same fragment: v2
    with pytest.raises(CommitConflictError):
        al.LanceDataset.commit(local_uri, al.LanceOperation.Delete([stale], [], "id < 2"),
                               read_version=1, max_retries=2)
    assert lance.dataset(local_uri).version == 2
    assert lance.dataset(local_uri).to_table()["id"].to_pylist() == list(range(9))


def test_stale_compatible_commit_is_rebased(local_uri: str) -> None:
    al.write_dataset(_ids(0, 5), local_uri)
    frags = al.write_fragments(_ids(5, 7), local_uri)
    lance.write_dataset(_ids(7, 8), local_uri, mode="append")  # v2, by pylance
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Append(frags), read_version=1)
    assert ds.version == 3
    assert sorted(lance.dataset(local_uri).to_table()["id"].to_pylist()) == list(range(8))


def test_commit_batch_merges_appends(local_uri: str) -> None:
    al.write_dataset(_ids(0, 2), local_uri)
    txns = [al.write_fragments(_ids(i, i + 1), local_uri, return_transaction=True)
            for i in (2, 3, 4)]
    result = al.LanceDataset.commit_batch(local_uri, txns)
    assert result.dataset.version == 2 and len(result.merged.operation.fragments) == 3
    assert lance.dataset(local_uri).to_table()["id"].to_pylist() == list(range(5))
    with pytest.raises(UnsupportedFeatureError):
        al.LanceDataset.commit_batch(local_uri, [al.Transaction(
            2, al.LanceOperation.Restore(1))])


def test_restore_project_and_update_config(local_uri: str) -> None:
    al.write_dataset(pa.table({"id": [1, 2], "x": ["a", "b"]}), local_uri)
    al.dataset(local_uri).delete("id = 1")
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Restore(1), read_version=2)
    assert ds.count_rows() == 2
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Project(pa.schema(
        [pa.field("x", pa.string())])), read_version=ds.version)
    assert lance.dataset(local_uri).schema.names == ["x"]
    op = al.LanceOperation.UpdateConfig(
        config_updates=al.LanceOperation.UpdateMap({"k": "v"}))
    ds = al.LanceDataset.commit(local_uri, op, read_version=ds.version)
    assert lance.dataset(local_uri).config().get("k") == "v"


def test_rewrite_replaces_fragments(local_uri: str) -> None:
    ds = al.write_dataset(_ids(0, 6), local_uri, max_rows_per_file=2)
    old = [f.metadata for f in ds.get_fragments()[:2]]
    new = al.write_fragments(_ids(0, 4), local_uri)
    op = al.LanceOperation.Rewrite([al.LanceOperation.RewriteGroup(old, new)])
    ds = al.LanceDataset.commit(local_uri, op, read_version=ds.version)
    assert len(ds.get_fragments()) == 2
    assert sorted(lance.dataset(local_uri).to_table()["id"].to_pylist()) == list(range(6))


async def test_async_commit(local_uri: str) -> None:
    await alance.write_dataset(_ids(0, 3), local_uri)
    from alance.dataset.fragment import write_fragments
    frags = await write_fragments(_ids(3, 4), local_uri)
    assert isinstance(frags, list)
    ds = await manual_commit.commit(local_uri, alance.LanceOperation.Append(frags), 1)
    assert isinstance(ds, alance.LanceDataset) and await ds.count_rows() == 4
    more = await alance.write_fragments(_ids(4, 5), local_uri)
    assert isinstance(more, list)
    ds = await alance.LanceDataset.commit(local_uri, alance.LanceOperation.Append(more),
                                          ds.version)
    assert ds.version == 3 and [await f.count_rows() for f in ds.get_fragments()] == [3, 1, 1]
    detached = await manual_commit.commit(local_uri, al.LanceOperation.Append(frags), 1,
                                          detached=True)
    assert detached.version >= 1 << 63 and (await alance.open_dataset(local_uri)).version == 3


def test_fragment_merge_columns_and_batch_result_keys(local_uri: str) -> None:
    ds = al.write_dataset(_ids(0, 4), local_uri)
    meta, schema = ds.get_fragments()[0].merge_columns({"double": "id * 2"})
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Merge([meta], schema),
                                read_version=ds.version)
    assert lance.dataset(local_uri).to_table()["double"].to_pylist() == [0, 2, 4, 6]
    txn = al.write_fragments(pa.table({"id": [4], "double": [8]}), local_uri,
                             return_transaction=True)
    result = al.LanceDataset.commit_batch(local_uri, [txn])
    assert result["dataset"].version == result.dataset.version == ds.version + 1
    with pytest.warns(DeprecationWarning):
        assert meta.files[0].path() == meta.files[0].path  # type: ignore[operator]


def test_transaction_properties_and_read_transaction(local_uri: str) -> None:
    ds = al.write_dataset(_ids(0, 1), local_uri, commit_message="first",
                          transaction_properties={"k": "v"})
    frags = al.write_fragments(_ids(1, 2), local_uri)
    al.LanceDataset.commit(local_uri, al.LanceOperation.Append(frags), read_version=1,
                           commit_message="second")
    ds = al.dataset(local_uri)
    first, = [t for t in ds.get_transactions() if t.read_version == 0]
    assert first.transaction_properties == {al.LANCE_COMMIT_MESSAGE_KEY: "first", "k": "v"}
    latest = ds.read_transaction(2)
    assert isinstance(latest.operation, al.LanceOperation.Append)
    assert [f.physical_rows for f in latest.operation.fragments] == [1]
    # pylance reads the same properties
    theirs = lance.dataset(local_uri).read_transaction(2)
    assert theirs is not None
    assert theirs.transaction_properties == {al.LANCE_COMMIT_MESSAGE_KEY: "second"}


def test_merge_insert_execute_uncommitted(local_uri: str) -> None:
    ds = al.write_dataset(pa.table({"id": range(4), "v": [0] * 4}), local_uri)
    txn, stats = (ds.merge_insert(on="id").when_matched_update_all()
                  .when_not_matched_insert_all()
                  .execute_uncommitted(pa.table({"id": [1, 9], "v": [5, 6]})))
    assert stats == {"num_inserted_rows": 1, "num_updated_rows": 1, "num_deleted_rows": 0}
    assert isinstance(txn.operation, al.LanceOperation.Update)
    assert lance.dataset(local_uri).version == 1  # nothing visible yet
    al.LanceDataset.commit(local_uri, txn)
    assert lance.dataset(local_uri).to_table().sort_by("id").to_pydict() == {
        "id": [0, 1, 2, 3, 9], "v": [0, 5, 0, 0, 6]}


def test_detached_commits_stay_outside_the_history(local_uri: str) -> None:
    ds = al.write_dataset(_ids(0, 1), local_uri)
    frag = al.LanceFragment.create(local_uri, _ids(1, 2))
    detached = al.LanceDataset.commit(local_uri, al.LanceOperation.Append([frag]),
                                      read_version=ds.version, detached=True)
    assert detached.version & (1 << 63)
    assert detached.to_table()["id"].to_pylist() == [0, 1]
    assert al.dataset(local_uri).to_table()["id"].to_pylist() == [0]  # the latest is unmoved
    ds = al.write_dataset(_ids(2, 3), local_uri, mode="append")
    again = ds.checkout_version(detached.version)
    assert again.to_table()["id"].to_pylist() == [0, 1]
    frag = al.LanceFragment.create(local_uri, _ids(3, 4))
    chained = al.LanceDataset.commit(local_uri, al.LanceOperation.Append([frag]),
                                     read_version=detached.version, detached=True)
    assert chained.to_table()["id"].to_pylist() == [0, 1, 3]
    assert [v["version"] for v in ds.versions()] == [1, 2]
    assert lance.dataset(local_uri, version=chained.version).to_table().equals(
        chained.to_table())
