"""Stable row ids and row versions: assignment, updates, takes, system columns, rebase, and
interop with pylance in both directions."""

from __future__ import annotations

import asyncio
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance._proto import table_pb2
from alance.dataset.commit.loop import commit_transaction
from alance.dataset.fragments.write import WriteParams, write_fragments
from alance.dataset.query.row_ids import build_index, fragment_lineage
from alance.errors import CorruptFileError, InvalidInputError
from alance.format.feature_flags import FeatureFlag
from alance.format.row_id_sequence import decode_row_ids
from alance.transaction.lineage import (
    FragmentLineage,
    assign_new_rows,
    attach_lineage,
    carry_lineage,
    inline_lineage,
    rewrite_lineage,
)
from alance.transaction.operations import new_rewrite

LINEAGE = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"]
COLS = ["id", "v", *LINEAGE]
LEGACY = {"data_storage_version": "legacy"}


def _table(lo: int, hi: int, tag: str = "s") -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()),
                     "v": pa.array([f"{tag}{i}" for i in range(lo, hi)])})


def _same(a: pa.Table, b: pa.Table) -> None:
    a, b = a.sort_by("_rowid"), b.sort_by("_rowid")
    assert a.column_names == b.column_names
    assert a.to_pylist() == b.to_pylist()


def _history(path: str, storage: str | None = "legacy") -> al.LanceDataset:
    """v1 create 20 rows (2 fragments), v2 append 5, v3 update 2, v4 delete 1, v5 upsert."""
    ds = al.write_dataset(_table(0, 20), path, enable_stable_row_ids=True,
                          max_rows_per_file=10, data_storage_version=storage)
    ds = al.write_dataset(_table(20, 25, "a"), path, mode="append")
    ds = ds.update({"v": "'upd'"}, where="id = 3 or id = 21").dataset
    ds = ds.delete("id = 5").dataset
    src = pa.table({"id": pa.array([7, 100, 101], pa.int64()), "v": ["m", "n", "o"]})
    return ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all(
    ).execute(src).dataset


@pytest.mark.parametrize("storage", ["legacy", None])
def test_ids_and_versions_follow_the_history(local_uri: str, storage: str | None) -> None:
    ds = _history(local_uri, storage)
    assert ds.version == 5 and ds.has_stable_row_ids
    assert ds.manifest.reader_feature_flags & FeatureFlag.STABLE_ROW_IDS
    assert ds.manifest.next_row_id == 27
    rows = {r["id"]: r for r in ds.to_table(columns=COLS).to_pylist()}
    assert 5 not in rows
    assert rows[0]["_rowid"] == 0 and rows[0]["_row_created_at_version"] == 1
    # updated rows keep their id and creation version; last update is the update's version
    assert (rows[3]["_rowid"], rows[3]["_row_created_at_version"],
            rows[3]["_row_last_updated_at_version"], rows[3]["v"]) == (3, 1, 3, "upd")
    assert (rows[21]["_rowid"], rows[21]["_row_created_at_version"],
            rows[21]["_row_last_updated_at_version"]) == (21, 2, 3)
    assert (rows[7]["_rowid"], rows[7]["_row_last_updated_at_version"], rows[7]["v"]) == (
        7, 5, "m")
    assert (rows[100]["_rowid"], rows[101]["_rowid"]) == (25, 26)
    assert rows[100]["_row_created_at_version"] == 5
    assert sorted(r["_rowid"] for r in rows.values()) == sorted(set(range(27)) - {5})
    # the old physical rows are tombstoned: the new ones live at new addresses
    addr = {r["id"]: r["_rowaddr"] for r in ds.to_table(columns=["id", "_rowaddr"]).to_pylist()}
    assert addr[3] >> 32 == 3 and addr[21] >> 32 == 3 and addr[7] >> 32 == 4
    # pylance reads exactly the same
    _same(lance.dataset(local_uri).to_table(columns=COLS), ds.to_table(columns=COLS))


def test_take_rows_and_system_columns(local_uri: str) -> None:
    ds = _history(local_uri)
    got = ds.take_rows([21, 3, 25, 0], columns=["id", "_rowaddr", "_row_created_at_version"])
    assert got["id"].to_pylist() == [21, 3, 100, 0]
    assert got["_row_created_at_version"].to_pylist() == [2, 1, 5, 1]
    assert got.column_names == ["id", "_rowaddr", "_row_created_at_version"]
    ref = lance.dataset(local_uri)._take_rows([21, 3, 25, 0], columns=["id", "v"])
    assert ds.take_rows([21, 3, 25, 0], columns=["id", "v"]).equals(ref)
    with pytest.raises(InvalidInputError, match=r"\[5\]"):
        ds.take_rows([4, 5])  # 5 was deleted
    with pytest.raises(InvalidInputError):
        ds.take_rows([-1])
    assert ds.take_rows([]).num_rows == 0
    # projections and filters over system columns, in any position
    t = ds.to_table(columns=["_row_last_updated_at_version", "id"],
                    filter="_row_last_updated_at_version > 2 AND _rowid < 100")
    assert t.column_names == ["_row_last_updated_at_version", "id"]
    assert sorted(t["id"].to_pylist()) == [3, 7, 21, 100, 101]
    assert ds.count_rows(filter="_row_created_at_version = 2") == 5
    t = ds.to_table(columns=["id"], filter="_rowid >= 25", with_row_id=True)
    assert t.column_names == ["id", "_rowid"] and t["_rowid"].to_pylist() == [25, 26]


def test_take_rows_without_stable_ids_uses_addresses(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 10), local_uri, max_rows_per_file=5, **LEGACY)
    assert not ds.has_stable_row_ids
    got = ds.take_rows([(1 << 32) | 2, 0], columns=["id", "_rowid"])
    assert got.to_pylist() == [{"id": 7, "_rowid": (1 << 32) | 2}, {"id": 0, "_rowid": 0}]
    t = ds.to_table(columns=["id", "_row_created_at_version"], limit=2)
    assert t["_row_created_at_version"].to_pylist() == [1, 1]  # as pylance reports
    with pytest.raises(InvalidInputError, match="created without stable row ids"):
        al.write_dataset(_table(10, 12), local_uri, mode="append", enable_stable_row_ids=True)


def test_overwrite_keeps_the_flag_and_never_reuses_ids(local_uri: str) -> None:
    al.write_dataset(_table(0, 20), local_uri, enable_stable_row_ids=True, **LEGACY)
    ds = al.write_dataset(_table(0, 5), local_uri, mode="overwrite", **LEGACY)
    assert ds.has_stable_row_ids and ds.manifest.next_row_id == 25
    assert ds.to_table(columns=["_rowid"])["_rowid"].to_pylist() == [20, 21, 22, 23, 24]
    assert lance.dataset(local_uri).to_table(
        columns=["_rowid"])["_rowid"].to_pylist() == [20, 21, 22, 23, 24]


async def test_concurrent_appends_get_distinct_ids_after_rebase(local_uri: str) -> None:
    await alance.write_dataset(_table(0, 10), local_uri, enable_stable_row_ids=True, **LEGACY)

    async def append(i: int) -> None:
        await alance.write_dataset(_table(100 * i, 100 * i + 7), local_uri, mode="append")

    await asyncio.gather(*(append(i) for i in range(1, 7)))
    ds = await alance.open_dataset(local_uri)
    t = await ds.to_table(columns=["id", *LINEAGE])
    ids = t["_rowid"].to_pylist()
    assert sorted(ids) == list(range(52)) and ds.manifest.next_row_id == 52
    # each append's rows got one contiguous block and the version that committed them
    for frag in ds.fragment_protos()[1:]:
        frag_ids = decode_row_ids(frag.inline_row_ids, frag.physical_rows)
        assert np.array_equal(frag_ids, np.arange(frag_ids[0], frag_ids[0] + 7))
    created = {r["id"] // 100: r["_row_created_at_version"] for r in t.to_pylist()}
    assert sorted(created.values()) == list(range(1, 8))
    _same(lance.dataset(local_uri).to_table(columns=["id", *LINEAGE]), t)


def _pylance_history(path: str, storage: str = "stable") -> None:
    lance.write_dataset(_table(0, 3000), path, enable_stable_row_ids=True,
                        max_rows_per_file=1000, data_storage_version=storage)
    lance.write_dataset(_table(3000, 3500, "a"), path, mode="append")
    ds = lance.dataset(path)
    ds.update({"v": "'upd'"}, where="id % 97 = 0")
    ds = lance.dataset(path)
    ds.delete("id % 13 = 0 OR (id > 1200 AND id < 1900)")
    ds = lance.dataset(path)
    src = _table(3400, 3600, "m")
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(src)


def test_pylance_datasets_read_identically(tmp_path: Path) -> None:
    path = str(tmp_path / "py.lance")
    _pylance_history(path)
    versions = []
    for step in range(2):
        ref = lance.dataset(path)
        ds = al.open_dataset(path)
        assert ds.version == ref.version
        _same(ds.to_table(columns=COLS), ref.to_table(columns=COLS))
        ids = ds.to_table(columns=["_rowid"])["_rowid"].to_numpy()
        pick = np.random.default_rng(step).choice(ids, 50, replace=False)
        assert ds.take_rows(pick, columns=["id", "v"]).equals(
            ref._take_rows(pick.tolist(), columns=["id", "v"]))
        flt = "_row_last_updated_at_version > 2 AND id < 3450"
        _same(ds.to_table(columns=COLS, filter=flt), ref.to_table(columns=COLS, filter=flt))
        versions.append(ds.version)
        if step == 0:  # then compact with pylance: ids and versions move with the rows
            ref.optimize.compact_files(target_rows_per_fragment=2000)
    assert versions[1] > versions[0]
    frags = al.open_dataset(path).fragment_protos()
    kinds = {f.WhichOneof("row_id_sequence") for f in frags}
    assert kinds == {"inline_row_ids"}


def test_alance_writes_on_pylance_stable_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "py.lance")
    _pylance_history(path, storage="legacy")
    ds = al.open_dataset(path)
    ds = al.write_dataset(_table(5000, 5010), path, mode="append")
    ds = ds.update({"v": "'alance'"}, where="id = 1 OR id = 3401 OR id = 5003").dataset
    ds = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all(
    ).execute(_table(5008, 5012, "z")).dataset
    ref = lance.dataset(path)
    _same(ds.to_table(columns=COLS), ref.to_table(columns=COLS))
    rows = {r["id"]: r for r in ds.to_table(columns=COLS).to_pylist()}
    assert rows[1]["_rowid"] == 1 and rows[1]["_row_last_updated_at_version"] == ds.version - 1
    assert rows[5011]["_row_created_at_version"] == ds.version
    assert len(set(r["_rowid"] for r in rows.values())) == len(rows)
    # and pylance keeps going on top of what alance wrote
    ref.update({"v": "'py'"}, where="id = 5003")
    again = al.open_dataset(path)
    row = again.to_table(columns=COLS, filter="id = 5003").to_pylist()[0]
    assert (row["v"], row["_rowid"]) == ("py", rows[5003]["_rowid"])
    _same(again.to_table(columns=COLS), lance.dataset(path).to_table(columns=COLS))


async def test_rewrite_keeps_lineage_with_external_row_ids(local_uri: str) -> None:
    """A compaction-style rewrite through the pure helpers, row ids stored externally."""
    ds = al.write_dataset(_table(0, 300), local_uri, enable_stable_row_ids=True,
                          max_rows_per_file=100, **LEGACY)
    ds = ds.update({"v": "'u'"}, where="id % 7 = 0").dataset
    ds = ds.delete("id % 5 = 0").dataset
    before = ds.to_table(columns=COLS)
    snap = ds._async._snapshot
    ctx = ds._async._ctx
    old = snap.fragments
    sources = [await fragment_lineage(ctx, f) for f in old]
    deleted = [await ctx.deleted_offsets(f) for f in old]
    rows = [await ds._async.scanner(columns=["id", "v"], fragments=[f]).to_table() for f in old]
    table = pa.concat_tables(rows)

    async def batches():  # type: ignore[no-untyped-def]
        for b in table.to_batches(max_chunksize=100):
            yield b

    new = await write_fragments(ctx.store, snap.schema, batches(),
                                WriteParams(max_rows_per_file=150))
    lineage = rewrite_lineage(sources, [int(f.physical_rows) for f in new], deleted)
    for frag, part in zip(new, lineage, strict=True):
        for path, data in attach_lineage(frag, part, inline_limit=0).items():
            await ctx.store.put(path, data)
    # versions may be external too (alance never writes them so, but reads them): put the
    # first fragment's creation versions at an offset inside a file
    data = new[0].inline_created_at_versions
    await ctx.store.put("_rowids/versions.bin", b"pad" + data)
    new[0].external_created_at_versions.path = "_rowids/versions.bin"
    new[0].external_created_at_versions.offset = 3
    new[0].external_created_at_versions.size = len(data)
    # the pure, inline variant gives the same lineage
    inline_copies = [table_pb2.DataFragment(physical_rows=f.physical_rows) for f in new]
    carry_lineage(old, deleted, inline_copies)
    for frag, part in zip(inline_copies, lineage, strict=True):
        assert np.array_equal(decode_row_ids(frag.inline_row_ids), part.row_ids)
        assert np.array_equal(inline_lineage(frag).created_at, part.created_at)
    txn = new_rewrite(snap.version, [(old, new)])
    committed = await commit_transaction(ctx.store, ds._async._handler, snap, txn)
    assert all(f.WhichOneof("row_id_sequence") == "external_row_ids"
               for f in committed.fragments)
    assert committed.fragments[0].WhichOneof("created_at_version_sequence") == (
        "external_created_at_versions")
    after = al.open_dataset(local_uri)
    assert after.version == committed.version
    _same(after.to_table(columns=COLS), before)
    assert after.take_rows([14, 1], columns=["id"])["id"].to_pylist() == [14, 1]
    # Why alance stores row ids inline by default: pylance 14 cannot open this version.
    with pytest.raises(ValueError, match="must have row ids"):
        lance.dataset(local_uri)
    # the inline default, on the same rewrite, is read by pylance
    plain = table_pb2.DataFragment(physical_rows=3)
    assert attach_lineage(plain, lineage[0].select(slice(0, 3))) == {}
    assert plain.WhichOneof("row_id_sequence") == "inline_row_ids"


def test_pure_lineage_helpers() -> None:
    a = FragmentLineage(np.arange(5, dtype=np.uint64), np.full(5, 1, np.uint64),
                        np.array([1, 1, 3, 1, 1], np.uint64))
    b = FragmentLineage(np.array([20, 9], np.uint64), np.array([2, 1], np.uint64),
                        np.array([2, 4], np.uint64))
    out = rewrite_lineage([a, b], [3, 3], [np.array([1], np.uint32), None])
    assert [p.row_ids.tolist() for p in out] == [[0, 2, 3], [4, 20, 9]]
    assert [p.last_updated_at.tolist() for p in out] == [[1, 3, 1], [1, 2, 4]]
    with pytest.raises(InvalidInputError):
        rewrite_lineage([a], [4])
    frags = [table_pb2.DataFragment(physical_rows=3), table_pb2.DataFragment(physical_rows=2)]
    frags[0].inline_row_ids = b""  # present but empty: rows get new ids
    assert assign_new_rows(frags, 10, 4) == 15
    assert decode_row_ids(frags[1].inline_row_ids).tolist() == [13, 14]
    index = build_index([(0, np.array([5, 1, 9], np.uint64), np.array([1], np.uint32)),
                         (2, np.array([3, 7], np.uint64), None)])
    addr, found = index.lookup(np.array([9, 1, 3, 4, 7, 0, 2**63], np.uint64))
    assert found.tolist() == [True, False, True, False, True, False, False]
    assert addr[:1].tolist() == [2] and addr[2] == 2 << 32 and addr[4] == (2 << 32) | 1
    assert index.row_ids().tolist() == [3, 5, 7, 9] and len(index) == 4
    # runs: a fragment written in one go is one run, split where rows were deleted
    big = build_index([(0, np.arange(1000, dtype=np.uint64), np.array([10, 11], np.uint32)),
                       (1, np.arange(1000, 1100, dtype=np.uint64), None)])
    assert big.num_runs == 3 and len(big) == 1098
    addr, found = big.lookup(np.array([9, 10, 12, 1050], np.uint64))
    assert found.tolist() == [True, False, True, True]
    assert addr.tolist() == [9, 0, 12, (1 << 32) | 50]
    same = build_index([(0, range(0, 1000), np.array([10, 11], np.uint32)),
                        (1, range(1000, 1100), None)])
    assert np.array_equal(same.row_ids(), big.row_ids())
    assert np.array_equal(same.lookup(np.arange(1200, dtype=np.uint64))[0],
                          big.lookup(np.arange(1200, dtype=np.uint64))[0])
    with pytest.raises(CorruptFileError, match="more than one live row"):
        build_index([(0, np.arange(5, dtype=np.uint64), None),
                     (1, np.array([4], np.uint64), None)])


async def test_concurrent_dml_keeps_ids_unique(local_uri: str) -> None:
    base = await alance.write_dataset(_table(0, 40), local_uri, enable_stable_row_ids=True,
                                      max_rows_per_file=10, **LEGACY)
    src = pa.table({"id": pa.array([5, 1000, 1001], pa.int64()), "v": ["m", "n", "o"]})
    # all planned on version 1: the commits rebase (ids re-assigned, deletions merged)
    await asyncio.gather(
        base.update({"v": "'u'"}, "id = 1 OR id = 25"),
        base.update({"v": "'w'"}, "id = 2"),
        base.merge_insert("id").when_matched_update_all().when_not_matched_insert_all(
        ).execute(src),
        alance.write_dataset(_table(500, 503), local_uri, mode="append"),
    )
    ds = await alance.open_dataset(local_uri)
    t = (await ds.to_table(columns=COLS)).to_pylist()
    rows = {r["id"]: r for r in t}
    assert len(t) == 45 and len({r["_rowid"] for r in t}) == 45
    assert ds.manifest.next_row_id == 45
    for i in (1, 2, 5, 25):  # updated rows kept their ids
        assert rows[i]["_rowid"] == i and rows[i]["_row_last_updated_at_version"] > 1
    assert {rows[i]["_rowid"] for i in (500, 501, 502, 1000, 1001)} == set(range(40, 45))
    _same(lance.dataset(local_uri).to_table(columns=COLS), await ds.to_table(columns=COLS))
