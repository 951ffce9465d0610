"""Transactions: every operation's constructor and build_manifest, and pylance reading the result.

The pure tests build manifests from a real dataset's manifest file without committing; the
interop tests commit each operation with alance and check pylance 14 opens the new version
with the expected rows, config, indices and fragment ids.
"""

from __future__ import annotations

import uuid

import lance
import numpy as np
import pyarrow as pa
import pyroaring
import pytest

import alance
from alance._proto import table_pb2, transaction_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.dml.results import write_rows
from alance.dataset.fragments.read import ReadContext
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.feature_flags import FeatureFlag
from alance.format.manifest import (
    decode_transaction_file,
    encode_transaction_file,
)
from alance.transaction import (
    build_manifest,
    new_append,
    new_create_index,
    new_data_replacement,
    new_delete,
    new_merge,
    new_overwrite,
    new_project,
    new_reserve_fragments,
    new_restore,
    new_rewrite,
    new_update,
    new_update_config,
    next_fragment_id,
)
from alance.transaction.indices import read_bitmap, write_bitmap


def table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": [f"s{i}" for i in ids]})


async def three_fragments(uri: str) -> alance.LanceDataset:
    return await alance.write_dataset(table(0, 30), uri, max_rows_per_file=10)


def index_meta(name: str, fields: list[int], fragments: list[int], version: int = 1,
               ) -> table_pb2.IndexMetadata:
    ix = table_pb2.IndexMetadata(name=name, fields=fields, dataset_version=version)
    ix.uuid.uuid = uuid.uuid4().bytes
    write_bitmap(ix, pyroaring.BitMap(fragments))
    return ix


def build(ds: alance.LanceDataset, txn: transaction_pb2.Transaction, **kw: object):
    return build_manifest(ds._snapshot.manifest_file, txn, transaction_file="x.txn", **kw)  # type: ignore[arg-type]


# -- pure: build_manifest per operation ----------------------------------------------------------


async def test_append_assigns_ids_after_high_water_mark(uri: str) -> None:
    ds = await three_fragments(uri)
    m = ds.manifest
    assert [f.id for f in m.fragments] == [0, 1, 2] and m.max_fragment_id == 2
    frag = table_pb2.DataFragment(physical_rows=5)
    mf = build(ds, new_append(ds.version, [frag, frag]))
    assert [f.id for f in mf.manifest.fragments] == [0, 1, 2, 3, 4]
    assert mf.manifest.max_fragment_id == 4 and mf.manifest.version == ds.version + 1
    assert mf.manifest.transaction_file == "x.txn" and mf.transaction is not None
    # a reserved (non-zero) id is kept; fragments stay sorted by id
    reserved = table_pb2.DataFragment(id=9, physical_rows=1)
    mf = build(ds, new_append(ds.version, [reserved, frag]))
    assert [f.id for f in mf.manifest.fragments] == [0, 1, 2, 3, 9]
    assert mf.manifest.max_fragment_id == 9


async def test_delete_replaces_and_drops_fragments_and_sets_flag(uri: str) -> None:
    ds = await three_fragments(uri)
    upd = table_pb2.DataFragment()
    upd.CopyFrom(ds.manifest.fragments[1])
    upd.deletion_file.read_version = ds.version
    upd.deletion_file.id = 7
    upd.deletion_file.num_deleted_rows = 3
    mf = build(ds, new_delete(ds.version, [upd], [2], "id > 1"))
    m = mf.manifest
    assert [f.id for f in m.fragments] == [0, 1]
    assert m.fragments[1].deletion_file.num_deleted_rows == 3
    assert m.reader_feature_flags & FeatureFlag.DELETION_FILES
    assert m.writer_feature_flags & FeatureFlag.DELETION_FILES
    assert m.max_fragment_id == 2  # high-water mark kept
    assert next_fragment_id(m) == 3


async def test_update_removes_updates_and_adds(uri: str) -> None:
    ds = await three_fragments(uri)
    new = table_pb2.DataFragment(physical_rows=4)
    mf = build(ds, new_update(ds.version, removed_fragment_ids=[0], new_fragments=[new]))
    assert [f.id for f in mf.manifest.fragments] == [1, 2, 3]


async def test_overwrite_restarts_ids_and_drops_indices(uri: str) -> None:
    ds = await three_fragments(uri)
    base = ds._snapshot.manifest_file
    base.index_section = table_pb2.IndexSection(indices=[index_meta("i", [0], [0, 1, 2])])
    frag = table_pb2.DataFragment(physical_rows=2)
    mf = build(ds, new_overwrite(ds.version, [frag], ds.lance_schema, {"k": "v"}))
    assert [f.id for f in mf.manifest.fragments] == [0]
    assert mf.manifest.max_fragment_id == 2
    assert dict(mf.manifest.config) == {"k": "v"}
    assert mf.manifest.writer_feature_flags & FeatureFlag.TABLE_CONFIG
    assert mf.index_section is None


async def test_indices_carried_and_pruned(uri: str) -> None:
    ds = await three_fragments(uri)
    base = ds._snapshot.manifest_file
    base.index_section = table_pb2.IndexSection(indices=[
        index_meta("on_id", [0], [0, 1, 2]), index_meta("on_s", [1], [0])])
    # deleting fragment 0 keeps bitmaps as history (Lance treats them as immutable) but an
    # index left covering no existing fragment is dropped only if it is a vector index
    mf = build(ds, new_delete(ds.version, [], [0], "x"))
    assert [ix.name for ix in mf.indices] == ["on_id", "on_s"]
    assert set(read_bitmap(mf.indices[0]) or []) == {0, 1, 2}
    # projecting away "s" drops the index on it
    mf = build(ds, new_project(ds.version, ds.lance_schema.project(["id"])))
    assert [ix.name for ix in mf.indices] == ["on_id"]
    # an in-place column update un-covers the updated fragments of indices on that column
    upd = table_pb2.DataFragment()
    upd.CopyFrom(ds.manifest.fragments[1])
    mf = build(ds, new_update(ds.version, updated_fragments=[upd], fields_modified=[0],
                              rewrite_columns=True))
    assert set(read_bitmap(mf.indices[0]) or []) == {0, 2}
    # create_index removes by uuid only (as pylance 14): a new segment joins its name's
    replacement = index_meta("on_id", [0], [1])
    mf = build(ds, new_create_index(ds.version, [replacement], [base.indices[1]]))
    assert [(ix.name, ix.uuid.uuid) for ix in mf.indices] == [
        ("on_id", base.indices[0].uuid.uuid), ("on_id", replacement.uuid.uuid)]
    mf = build(ds, new_create_index(ds.version, [replacement], base.indices))
    assert [(ix.name, ix.uuid.uuid) for ix in mf.indices] == [("on_id", replacement.uuid.uuid)]


async def test_rewrite_moves_fragments_and_index_bitmaps(uri: str) -> None:
    ds = await three_fragments(uri)
    idx = index_meta("on_id", [0], [0, 1])
    ds._snapshot.manifest_file.index_section = table_pb2.IndexSection(indices=[idx])
    old = list(ds.manifest.fragments[:2])
    new = table_pb2.DataFragment(physical_rows=20)
    rewritten = transaction_pb2.Transaction.Rewrite.RewrittenIndex()
    rewritten.old_id.CopyFrom(idx.uuid)
    rewritten.new_id.uuid = uuid.uuid4().bytes
    mf = build(ds, new_rewrite(ds.version, [(old, [new])], [rewritten]))
    assert [f.id for f in mf.manifest.fragments] == [2, 3]  # sorted by id, as Lance
    assert [f.physical_rows for f in mf.manifest.fragments] == [10, 20]
    assert set(read_bitmap(mf.indices[0]) or []) == {3}
    assert mf.indices[0].uuid.uuid == rewritten.new_id.uuid


async def test_reserve_config_merge_replacement_restore(uri: str) -> None:
    ds = await three_fragments(uri)
    mf = build(ds, new_reserve_fragments(ds.version, 5))
    assert mf.manifest.max_fragment_id == 7 and len(mf.manifest.fragments) == 3
    txn = new_update_config(ds.version, config={"a": "1", "b": None},
                            table_metadata={"t": "x"}, schema_metadata={"sm": "y"},
                            field_metadata={0: {"fm": "z"}})
    mf = build(ds, txn)
    assert dict(mf.manifest.config) == {"a": "1"}
    assert dict(mf.manifest.table_metadata) == {"t": "x"}
    assert mf.manifest.schema_metadata["sm"] == b"y"
    assert mf.manifest.fields[0].metadata["fm"] == b"z"
    with pytest.raises(InvalidInputError):
        build(ds, new_update_config(ds.version, field_metadata={99: {"x": "1"}}))
    mf = build(ds, new_merge(ds.version, list(ds.manifest.fragments)[1:], ds.lance_schema))
    assert [f.id for f in mf.manifest.fragments] == [1, 2]
    new_file = table_pb2.DataFile()
    new_file.CopyFrom(ds.manifest.fragments[0].files[0])
    new_file.path = "replaced.lance"
    mf = build(ds, new_data_replacement(ds.version, [(0, new_file)]))
    assert mf.manifest.fragments[0].files[0].path == "replaced.lance"
    with pytest.raises(InvalidInputError):
        build(ds, new_data_replacement(ds.version, [(42, new_file)]))
    old = ds._snapshot.manifest_file
    mf = build(ds, new_restore(ds.version, ds.version), restore_source=old)
    assert mf.manifest.version == ds.version + 1
    assert list(mf.manifest.fragments) == list(old.manifest.fragments)
    with pytest.raises(InvalidInputError):
        build(ds, new_restore(ds.version, 1))


async def test_tombstoned_files_removed_and_unknown_operation(uri: str) -> None:
    ds = await three_fragments(uri)
    frag = table_pb2.DataFragment(physical_rows=3)
    frag.files.add(path="a.lance", fields=[-2, -2])
    frag.files.add(path="b.lance", fields=[0, 1])
    mf = build(ds, new_append(ds.version, [frag]))
    assert [f.path for f in mf.manifest.fragments[-1].files] == ["b.lance"]
    txn = transaction_pb2.Transaction(read_version=1, uuid="u")
    txn.clone.is_shallow = True
    with pytest.raises(UnsupportedFeatureError):
        build(ds, txn)
    with pytest.raises(UnsupportedFeatureError):
        build(ds, transaction_pb2.Transaction(read_version=1, uuid="u"))
    with pytest.raises(InvalidInputError):
        build_manifest(None, new_append(0, [frag]), transaction_file="x")


def test_transactions_round_trip_the_wire() -> None:
    txns = [new_delete(3, [table_pb2.DataFragment(id=4)], [5, 1], "x < 1"),
            new_update(2, removed_fragment_ids=[1], new_fragments=[table_pb2.DataFragment()]),
            new_update_config(1, config={"k": None}), new_reserve_fragments(1, 3),
            new_restore(4, 2)]
    for txn in txns:
        back = decode_transaction_file(encode_transaction_file(txn))
        assert back == txn
    assert list(txns[0].delete.deleted_fragment_ids) == [1, 5]
    assert not txns[2].update_config.config_updates.update_entries[0].HasField("value")


# -- committed with alance, read by pylance ------------------------------------------------------


async def commit(ds: alance.LanceDataset, txn: transaction_pb2.Transaction,
                 ) -> alance.LanceDataset:
    snap = await commit_transaction(ds._store, ds._handler, ds._snapshot, txn)
    return alance.LanceDataset(ds._store, ds._handler, snap)


async def test_pylance_reads_every_alance_operation(local_uri: str) -> None:
    ds = await three_fragments(local_uri)
    ds = await commit(ds, new_update_config(ds.version, config={"team": "a"},
                                            table_metadata={"owner": "me"}))
    assert lance.dataset(local_uri).config()["team"] == "a"
    ds = await commit(ds, new_reserve_fragments(ds.version, 4))
    lance.write_dataset(table(100, 3), local_uri, mode="append")
    pl = lance.dataset(local_uri)
    assert [f.fragment_id for f in pl.get_fragments()][-1] == 7  # after the reserved ids
    ds = await alance.open_dataset(local_uri)
    # compact fragments 0 and 1 with a Rewrite
    old = list(ds.manifest.fragments[:2])
    ctx = ReadContext(ds._store, ds._snapshot)
    rows = await ds.to_table(filter="id < 20")

    async def batches():  # type: ignore[no-untyped-def]
        for b in rows.to_batches():
            yield b

    new = await write_rows(ctx, batches())
    ds = await commit(ds, new_rewrite(ds.version, [(old, new)]))
    pl = lance.dataset(local_uri)
    assert sorted(pl.to_table()["id"].to_pylist()) == [*range(30), 100, 101, 102]
    assert len(pl.get_fragments()) == 3
    # project away "s", then restore the version before
    before = ds.version
    ds = await commit(ds, new_project(ds.version, ds.lance_schema.project(["id"])))
    assert lance.dataset(local_uri).schema.names == ["id"]
    ds = await commit(ds, new_restore(ds.version, before))
    pl = lance.dataset(local_uri)
    assert pl.schema.names == ["id", "s"] and pl.version == ds.version
    assert pl.count_rows() == 33


async def test_pylance_index_survives_alance_commits(local_uri: str) -> None:
    lance.write_dataset(table(0, 3000), local_uri, max_rows_per_file=1000,
                        data_storage_version="legacy")
    lance.dataset(local_uri).create_scalar_index("id", "BTREE")
    ds = await alance.open_dataset(local_uri)
    ds = (await ds.delete("id < 1000")).dataset  # drops fragment 0
    ds = (await ds.update({"s": "'changed'"}, where="id = 1500")).dataset
    ds = await alance.write_dataset(table(5000, 5), local_uri, mode="append")
    pl = lance.dataset(local_uri)
    described = pl.describe_indices()
    assert [d.name for d in described] == ["id_idx"]
    got = pl.to_table(filter="id = 1500 or id = 1501 or id = 5002 or id = 10")
    assert sorted(got["id"].to_pylist()) == [1500, 1501, 5002]
    assert got.filter(pa.compute.equal(got["id"], 1500))["s"].to_pylist() == ["changed"]
    ix = ds._snapshot.manifest_file.indices[0]
    assert set(read_bitmap(ix) or []) == {0, 1, 2}  # history kept, as pylance does
