"""delete / update / merge_insert: results, deletion files, bad input, concurrent upserts."""

from __future__ import annotations

import asyncio
import os
import uuid

import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance._proto import table_pb2
from alance.errors import (
    InvalidInputError,
    MergeInsertMatchError,
    RetryableCommitConflictError,
    SchemaMismatchError,
    UnrepresentableValueError,
)
from alance.format.deletion import DeletionFileKind, decode_deletion_file, deletion_file_path


def rows(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids.astype(np.float64), "s": [f"s{i}" for i in ids]})


async def make(uri: str, n: int = 300, per_file: int = 100,
               storage: str | None = None) -> alance.LanceDataset:
    return await alance.write_dataset(rows(0, n), uri, max_rows_per_file=per_file,
                                      data_storage_version=storage)


async def ids(ds: alance.LanceDataset, where: str | None = None) -> list[int]:
    return sorted((await ds.to_table(columns=["id"], filter=where))["id"].to_pylist())


async def deletion_offsets(ds: alance.LanceDataset, frag: table_pb2.DataFragment) -> list[int]:
    df = frag.deletion_file
    kind = DeletionFileKind(df.file_type)
    path = deletion_file_path(frag.id, df.read_version, df.id, kind)
    return decode_deletion_file(kind, await ds._store.get(path)).tolist()


# -- delete ---------------------------------------------------------------------------------------


async def test_delete_writes_deletion_files_and_skips_rows(uri: str) -> None:
    ds = await make(uri)
    result = await ds.delete("id % 10 = 3 or id >= 200")
    assert result.num_deleted_rows == 120 and result["num_deleted_rows"] == 120
    new = result.dataset
    assert new.version == ds.version + 1
    assert [f.id for f in new.manifest.fragments] == [0, 1]  # fragment 2 wholly deleted
    assert new.manifest.max_fragment_id == 2
    frag0 = new.manifest.fragments[0]
    assert frag0.deletion_file.num_deleted_rows == 10
    assert frag0.deletion_file.read_version == ds.version
    assert frag0.deletion_file.file_type == table_pb2.DeletionFile.ARROW_ARRAY
    assert await deletion_offsets(new, frag0) == list(range(3, 100, 10))
    assert new.manifest.reader_feature_flags & 1 and new.manifest.writer_feature_flags & 1
    expect = [i for i in range(200) if i % 10 != 3]
    assert await ids(new) == expect
    assert await new.count_rows() == 180
    assert (await new.take([0, 9, 179]))["id"].to_pylist() == [expect[0], expect[9], expect[179]]
    assert await new.count_rows("id < 50") == 45
    # the old version is unchanged (time travel)
    assert await (await new.checkout_version(ds.version)).count_rows() == 300


async def test_delete_extends_deletions_and_picks_bitmap_as_lance(uri: str) -> None:
    ds = await make(uri, n=12000, per_file=12000)
    ds = (await ds.delete("id < 4000")).dataset  # fresh, < 5000: arrow
    df = ds.manifest.fragments[0].deletion_file
    assert df.file_type == table_pb2.DeletionFile.ARROW_ARRAY and df.num_deleted_rows == 4000
    ds = (await ds.delete("id >= 4000 and id < 5000")).dataset  # extended to 5000: still arrow
    df = ds.manifest.fragments[0].deletion_file
    assert df.file_type == table_pb2.DeletionFile.ARROW_ARRAY and df.num_deleted_rows == 5000
    ds = (await ds.delete("id = 5000")).dataset  # above 5000: bitmap
    df = ds.manifest.fragments[0].deletion_file
    assert df.file_type == table_pb2.DeletionFile.BITMAP and df.num_deleted_rows == 5001
    assert await deletion_offsets(ds, ds.manifest.fragments[0]) == list(range(5001))
    other = await make(uri.replace("ds.lance", "b.lance"), n=6000, per_file=6000)
    other = (await other.delete("id < 5000")).dataset  # fresh, >= 5000: bitmap
    assert other.manifest.fragments[0].deletion_file.file_type == table_pb2.DeletionFile.BITMAP
    assert await other.count_rows() == 1000


async def test_delete_nothing_and_everything(uri: str) -> None:
    ds = await make(uri)
    none = await ds.delete("id < 0")
    assert none.num_deleted_rows == 0 and none.dataset.version == ds.version + 1
    assert await none.dataset.count_rows() == 300
    everything = await none.dataset.delete("true")
    assert everything.num_deleted_rows == 300
    assert list(everything.dataset.manifest.fragments) == []
    assert await everything.dataset.count_rows() == 0
    appended = await alance.write_dataset(rows(7, 2), uri, mode="append")
    assert [f.id for f in appended.manifest.fragments] == [3]  # ids never reused


async def test_delete_bad_input_writes_nothing(uri: str) -> None:
    ds = await make(uri)
    for bad in ("nope = 1", "id = 'x'", "id +", "", 42):
        with pytest.raises(InvalidInputError):
            await ds.delete(bad)  # type: ignore[arg-type]
    assert await ds.latest_version() == ds.version
    if not uri.startswith("memory://"):
        assert not os.path.exists(os.path.join(uri, "_deletions"))


# -- update ---------------------------------------------------------------------------------------


async def test_update_rewrites_rows(uri: str) -> None:
    ds = await make(uri)
    result = await ds.update({"v": "v * 2 + 1", "s": "upper(s)"}, where="id >= 95 and id < 105")
    assert result.num_rows_updated == 10 and result["num_rows_updated"] == 10
    new = result.dataset
    m = new.manifest
    assert [f.id for f in m.fragments] == [0, 1, 2, 3]
    assert m.fragments[3].physical_rows == 10
    assert m.fragments[0].deletion_file.num_deleted_rows == 5
    txn = new._snapshot.manifest_file.transaction
    assert txn is not None and txn.WhichOneof("operation") == "update"
    assert list(txn.update.fields_for_preserving_frag_bitmap) == [1, 2]
    t = await new.to_table(filter="id >= 94 and id <= 105")
    got = sorted(zip(t["id"].to_pylist(), t["v"].to_pylist(), t["s"].to_pylist(), strict=True))
    assert got[0] == (94, 94.0, "s94") and got[-1] == (105, 105.0, "s105")
    assert got[1] == (95, 191.0, "S95") and got[10] == (104, 209.0, "S104")
    assert await new.count_rows() == 300


async def test_update_values_and_all_rows(uri: str) -> None:
    ds = await make(uri, n=20, per_file=10)
    new = (await ds.update({"v": 0.5, "s": "'x'"})).dataset
    t = await new.to_table()
    assert set(t["v"].to_pylist()) == {0.5} and set(t["s"].to_pylist()) == {"x"}
    assert [f.id for f in new.manifest.fragments] == [2]  # both old fragments emptied
    assert await ids(new) == list(range(20))
    nothing = await new.update({"v": 1.0}, where="id > 100")
    assert nothing.num_rows_updated == 0 and nothing.dataset.version == new.version + 1


async def test_update_bad_input_writes_nothing(uri: str) -> None:
    ds = await make(uri, n=20, per_file=10)
    bad = [({"nope": "1"}, None), ({"id": "nope + 1"}, None), ({"id": "'abc'"}, None),
           ({"id": "1.5"}, None), ({"id": "s"}, None), ({"s": "id"}, None),
           ({"v": "x"}, None), ({"id": "abc"}, "id = 1"), ({}, None), ({"v": 1.0}, "nope = 2"),
           ({"id": [1]}, None), ({"id": "v * 1.5"}, "id = 3")]
    for updates, where in bad:
        with pytest.raises(InvalidInputError):
            await ds.update(updates, where=where)
    assert await ds.latest_version() == ds.version
    if not uri.startswith("memory://"):
        assert len(os.listdir(os.path.join(uri, "data"))) == 2
        assert not os.path.exists(os.path.join(uri, "_deletions"))
    # a null in a fixed-width column cannot be stored in a v0.2 file (2.x files hold it)
    legacy = await make(uri.rstrip("/") + "-legacy", n=20, per_file=10, storage="legacy")
    with pytest.raises(UnrepresentableValueError):
        await legacy.update({"v": "NULL"}, where="id = 1")
    assert await legacy.latest_version() == legacy.version
    new = (await ds.update({"v": "NULL"}, where="id = 1")).dataset
    assert (await new.to_table(filter="id = 1"))["v"].to_pylist() == [None]


async def test_update_widening_and_exact_casts(uri: str) -> None:
    ds = await make(uri, n=10, per_file=10)
    new = (await ds.update({"v": "id * 3", "id": "id + 100"}, where="id = 2")).dataset
    assert (await new.to_table(filter="id = 102"))["v"].to_pylist() == [6.0]


# -- merge_insert ---------------------------------------------------------------------------------


def source(keys: list[int], v: float) -> pa.Table:
    ids_ = pa.array(keys, pa.int64())
    return pa.table({"id": ids_, "v": [v] * len(keys), "s": [f"n{k}" for k in keys]})


async def test_merge_insert_upsert(uri: str) -> None:
    ds = await make(uri)
    result = await (ds.merge_insert("id").when_matched_update_all()
                    .when_not_matched_insert_all().execute(source([5, 150, 900, 901], -1.0)))
    assert (result.num_inserted_rows, result.num_updated_rows, result.num_deleted_rows) == (
        2, 2, 0)
    new = result.dataset
    assert await new.count_rows() == 302
    t = await new.to_table(filter="v = -1")
    assert sorted(t["id"].to_pylist()) == [5, 150, 900, 901]
    assert await ids(new) == [*range(300), 900, 901]


async def test_merge_insert_conditions_and_source_deletes(uri: str) -> None:
    ds = await make(uri)
    src = source([10, 20, 30, 999], 25.0)
    result = await (ds.merge_insert("id").when_matched_update_all("target.v < source.v")
                    .when_not_matched_by_source_delete("id >= 290").execute(src))
    assert (result.num_inserted_rows, result.num_updated_rows, result.num_deleted_rows) == (
        0, 2, 10)
    new = result.dataset
    assert await ids(new, "v = 25 and id <> 25") == [10, 20]
    assert await new.count_rows() == 290
    everything = await (new.merge_insert("id").when_not_matched_by_source_delete()
                        .execute(source([1, 2], 0.0)))
    assert everything.num_deleted_rows == 288
    assert await ids(everything.dataset) == [1, 2]


async def test_merge_insert_default_on_is_primary_key(uri: str) -> None:
    schema = pa.schema([pa.field("k", pa.int64(), nullable=False,
                                 metadata={"lance-schema:unenforced-primary-key": "true"}),
                        pa.field("v", pa.float64())])
    ds = await alance.write_dataset(pa.table({"k": [1, 2], "v": [1.0, 2.0]}, schema=schema), uri)
    result = await ds.merge_insert().when_matched_update_all().when_not_matched_insert_all(
    ).execute(pa.table({"k": [2, 3], "v": [20.0, 30.0]}, schema=schema))
    assert (result.num_inserted_rows, result.num_updated_rows) == (1, 1)
    t = await result.dataset.to_table()
    assert sorted(zip(t["k"].to_pylist(), t["v"].to_pylist(), strict=True)) == [
        (1, 1.0), (2, 20.0), (3, 30.0)]
    plain = await alance.write_dataset(rows(0, 3), uri.replace("ds.lance", "p.lance"))
    with pytest.raises(InvalidInputError):
        plain.merge_insert()


async def test_merge_insert_bad_input_writes_nothing(uri: str) -> None:
    ds = await make(uri, n=20, per_file=10)
    with pytest.raises(InvalidInputError):
        ds.merge_insert("nope")
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    nulls = pa.table({"id": pa.array([1, None], pa.int64()), "v": [1.0, 2.0], "s": ["a", "b"]})
    with pytest.raises(InvalidInputError):
        await builder.execute(nulls)
    with pytest.raises(InvalidInputError):
        await builder.execute(source([1, 1], 0.0))
    with pytest.raises(SchemaMismatchError, match="missing keys"):
        await builder.execute(pa.table({"v": [1.0], "s": ["a"]}))
    with pytest.raises(SchemaMismatchError, match="unexpected"):
        await builder.execute(pa.table({"id": [1], "v": [1.0], "s": ["a"], "z": [0]}))
    with pytest.raises(SchemaMismatchError):
        await builder.execute(pa.table({"id": ["x"], "v": [1.0], "s": ["a"]}))
    with pytest.raises(InvalidInputError):
        ds.merge_insert("id").when_matched_update_all("target.nope > 1")
    with pytest.raises(InvalidInputError):
        ds.merge_insert("id").when_not_matched_by_source_delete("nope > 1")
    with pytest.raises(InvalidInputError):
        await ds.merge_insert("id").execute(source([1], 0.0))
    assert await ds.latest_version() == ds.version
    if not uri.startswith("memory://"):
        assert len(os.listdir(os.path.join(uri, "data"))) == 2


async def test_concurrent_merge_inserts_of_one_new_key_make_no_duplicates(uri: str) -> None:
    ds = await make(uri, n=100, per_file=50)

    def upsert(base: alance.LanceDataset, keys: list[int], v: float, retries: int = 10):  # type: ignore[no-untyped-def]
        return (base.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
                .conflict_retries(retries).execute(source(keys, v)))

    first = await upsert(ds, [500, 3], 1.0)
    assert first.num_inserted_rows == 1
    with pytest.raises(RetryableCommitConflictError):
        await upsert(ds, [500, 60], 2.0, retries=0)  # planned on the old version
    second = await upsert(ds, [500, 60], 2.0)
    assert second.num_attempts == 2
    assert (second.num_inserted_rows, second.num_updated_rows) == (0, 2)
    final = second.dataset
    assert (await ids(final, "id = 500")) == [500]
    assert await final.count_rows() == 101
    # many at once: every task inserts the same new keys
    tasks = [upsert(final, [700, 701, i], float(i)) for i in range(6)]
    results = await asyncio.gather(*tasks)
    latest = await alance.open_dataset(uri)
    assert await ids(latest, "id >= 700") == [700, 701]
    assert sum(r.num_inserted_rows for r in results) == 2
    assert await latest.count_rows() == 103


async def test_concurrent_deletes_of_different_rows_merge(uri: str) -> None:
    ds = await make(uri, n=1000, per_file=1000)
    await asyncio.gather(*(ds.delete(f"id >= {i * 100} and id < {i * 100 + 50}")
                           for i in range(8)))
    latest = await alance.open_dataset(uri)
    assert await latest.count_rows() == 600
    assert latest.version == ds.version + 8


def test_sync_twins(tmp_path: object) -> None:
    uri = str(tmp_path) + "/s.lance"  # type: ignore[operator]
    ds = al.write_dataset(rows(0, 10), uri)
    d = ds.delete("id < 2")
    assert isinstance(d.dataset, al.LanceDataset) and d.num_deleted_rows == 2
    u = d.dataset.update({"v": "v + 1"}, "id = 5")
    assert u.num_rows_updated == 1
    m = (u.dataset.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
         .execute(source([9, 10], 0.0)))
    assert isinstance(m.dataset, al.LanceDataset)
    assert (m.num_inserted_rows, m.num_updated_rows) == (1, 1)
    assert m.dataset.count_rows() == 9
    assert uuid.UUID(m.dataset.manifest.transaction_file.split("-", 1)[1][:-4])


KEY_CASES = {
    "dense-int": (lambda i: i, pa.int64()),
    "sparse-int": (lambda i: i * 1_000_003 - 7, pa.int64()),
    "uint32": (lambda i: i * 3, pa.uint32()),
    "string": (lambda i: f"key-{i:05d}", pa.string()),
}


@pytest.mark.parametrize("case", sorted(KEY_CASES))
async def test_merge_insert_matches_pylance(tmp_path: object, case: str) -> None:
    """Same merge on identical copies: alance and pylance end with the same rows."""
    import shutil

    import lance

    make_key, key_type = KEY_CASES[case]
    n = 3000
    base = pa.table({"k": pa.array([make_key(i) for i in range(n)], key_type),
                     "g": pa.array([i % 3 for i in range(n)], pa.int32()),
                     "v": pa.array(np.arange(n, dtype=np.float64))})
    root = str(tmp_path)
    lance.write_dataset(base, root + "/a.lance", max_rows_per_file=1000,
                        data_storage_version="legacy")
    shutil.copytree(root + "/a.lance", root + "/p.lance")
    keys = [make_key(i) for i in (*range(0, n, 7), *range(n, n + 50))]
    src = pa.table({"k": pa.array(keys, key_type), "g": pa.array([9] * len(keys), pa.int32()),
                    "v": pa.array(np.full(len(keys), -1.0))})
    ds = await alance.open_dataset(root + "/a.lance")
    got = await (ds.merge_insert("k").when_matched_update_all("source.v < target.v")
                 .when_not_matched_insert_all()
                 .when_not_matched_by_source_delete("v > 2900").execute(src))
    pl = lance.dataset(root + "/p.lance")
    want = (pl.merge_insert("k").when_matched_update_all("source.v < target.v")
            .when_not_matched_insert_all().when_not_matched_by_source_delete("v > 2900")
            .execute(src))
    assert (got.num_inserted_rows, got.num_updated_rows, got.num_deleted_rows) == (
        want["num_inserted_rows"], want["num_updated_rows"], want["num_deleted_rows"])
    a = (await got.dataset.to_table()).sort_by("k")
    b = lance.dataset(root + "/p.lance").to_table().sort_by("k")
    assert a.equals(b)


async def test_merge_insert_on_two_columns(uri: str) -> None:
    t = pa.table({"a": pa.array([1, 1, 2, 2], pa.int64()), "b": ["x", "y", "x", "y"],
                  "v": [1.0, 2.0, 3.0, 4.0]})
    ds = await alance.write_dataset(t, uri)
    src = pa.table({"a": pa.array([1, 3], pa.int64()), "b": ["y", "x"], "v": [20.0, 30.0]})
    result = await (ds.merge_insert(["a", "b"]).when_matched_update_all()
                    .when_not_matched_insert_all().when_not_matched_by_source_delete("a = 2")
                    .execute(src))
    assert (result.num_inserted_rows, result.num_updated_rows, result.num_deleted_rows) == (
        1, 1, 2)
    out = (await result.dataset.to_table()).sort_by([("a", "ascending"), ("b", "ascending")])
    assert out.to_pylist() == [{"a": 1, "b": "x", "v": 1.0}, {"a": 1, "b": "y", "v": 20.0},
                               {"a": 3, "b": "x", "v": 30.0}]


def test_null_into_non_nullable_column_is_typed_and_commits_nothing(local_uri: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    ds = al.write_dataset(pa.table({"id": [1, 2], "s": ["x", "y"]}, schema=schema), local_uri)
    with pytest.raises(InvalidInputError, match="'id'"):
        ds.update({"id": "NULL"}, where="id = 1")
    source = pa.table({"id": pa.array([None, 1], pa.int64()), "s": ["a", "x"]})
    with pytest.raises(InvalidInputError, match="'id'"):
        ds.merge_insert("s").when_matched_update_all().when_not_matched_insert_all().execute(
            source)
    assert ds.version == 1
    assert ds.to_table().equals(pa.table({"id": [1, 2], "s": ["x", "y"]}, schema=schema))


def test_when_matched_fail_refuses_matches_and_writes_nothing(local_uri: str) -> None:
    ds = al.write_dataset(pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}), local_uri)
    result = (ds.merge_insert("id").when_matched_fail().when_not_matched_insert_all()
              .execute(pa.table({"id": [4, 5], "v": [40, 50]})))
    assert (result.num_inserted_rows, result.num_updated_rows) == (2, 0)
    assert ds.version == 2
    files_before = sorted(os.listdir(os.path.join(local_uri, "data")))
    clash = pa.table({"id": [2, 9], "v": [200, 900]})
    with pytest.raises(MergeInsertMatchError, match="1 source rows match"):
        ds.merge_insert("id").when_matched_fail().when_not_matched_insert_all().execute(clash)
    with pytest.raises(MergeInsertMatchError):
        ds.merge_insert("id").when_matched_fail().execute_uncommitted(clash)
    assert ds.version == 2
    assert sorted(os.listdir(os.path.join(local_uri, "data"))) == files_before
    assert ds.to_table().sort_by("id")["id"].to_pylist() == [1, 2, 3, 4, 5]


def test_retry_timeout_arguments(local_uri: str) -> None:
    import datetime as dt
    ds = al.write_dataset(pa.table({"id": [1, 2, 3]}), local_uri)
    ds.update({"id": "id + 10"}, where="id = 1", conflict_retries=2,
              retry_timeout=dt.timedelta(seconds=5))
    ds.delete("id = 2", retry_timeout=1.5)
    (ds.merge_insert("id").retry_timeout(dt.timedelta(seconds=3)).when_not_matched_insert_all()
     .execute(pa.table({"id": [7]})))
    assert sorted(ds.to_table()["id"].to_pylist()) == [3, 7, 11]
    with pytest.raises(InvalidInputError, match="retry_timeout"):
        ds.delete("id = 3", retry_timeout=-1)


def test_bare_memory_uri_is_a_fresh_private_dataset() -> None:
    one = al.write_dataset(pa.table({"id": [1, 2]}), "memory://")
    two = al.write_dataset(pa.table({"id": [3]}), "memory://")
    assert one.uri != two.uri
    one.delete("id = 1")
    assert one.to_table()["id"].to_pylist() == [2]
    assert al.open_dataset(one.uri).count_rows() == 1
    assert two.count_rows() == 1


def test_merge_insert_explain_and_analyze_write_nothing(local_uri: str) -> None:
    ds = al.write_dataset(pa.table({"id": [1, 2, 3, 4], "value": list("abcd")}), local_uri)
    builder = (ds.merge_insert("id").when_matched_update_all("source.value != 'z'")
               .when_not_matched_insert_all().when_not_matched_by_source_delete("id > 3"))
    plan = builder.explain_plan()
    assert plan.startswith("MergeInsert: on=[id]") and "Delete(id > 3)" in plan
    assert "source schema" in builder.explain_plan(verbose=True)
    files = sorted(os.listdir(os.path.join(local_uri, "data")))
    text = builder.analyze_plan(pa.table({"id": [1, 5], "value": ["x", "e"]}))
    assert "num_inserted_rows=1, num_updated_rows=1, num_deleted_rows=1" in text
    assert "num_files_written=2" in text and "bytes_written=" in text
    assert ds.version == 1 and sorted(os.listdir(os.path.join(local_uri, "data"))) == files
    with pytest.raises(InvalidInputError, match="does nothing"):
        ds.merge_insert("id").explain_plan()


def test_merge_insert_with_some_columns_keeps_the_others(local_uri: str) -> None:
    """A source with only some columns updates those in matched rows (the rest keep their
    values) and inserts rows with nulls in the columns it lacks."""
    import lance
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("num", pa.string()),
                        pa.field("x", pa.float64())])
    ds = al.write_dataset(pa.table({"id": range(6), "num": [str(i) for i in range(6)],
                                    "x": [0.5] * 6}, schema=schema), local_uri,
                          max_rows_per_file=4)
    result = (ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
              .execute(pa.table({"id": [1, 4, 9], "x": [10.0, 40.0, 90.0]})))
    assert (result.num_updated_rows, result.num_inserted_rows) == (2, 1)
    expected = {"id": [0, 1, 2, 3, 4, 5, 9], "num": ["0", "1", "2", "3", "4", "5", None],
                "x": [0.5, 10.0, 0.5, 0.5, 40.0, 0.5, 90.0]}
    assert ds.to_table().sort_by("id").to_pydict() == expected
    assert lance.dataset(local_uri).to_table().sort_by("id").to_pydict() == expected
    with pytest.raises(InvalidInputError, match="non-nullable"):
        (ds.merge_insert("num").when_not_matched_insert_all()
         .execute(pa.table({"num": ["new"], "x": [1.0]})))
    assert ds.count_rows() == 7


def test_create_at_a_memory_name_starts_a_new_dataset() -> None:
    """As pylance (a memory store per call), creating a dataset at a ``memory://`` name that
    holds one succeeds with a new version 1; handles of the earlier dataset keep it, and the
    name now opens the new one."""
    import lance

    name = f"memory://{uuid.uuid4().hex}"
    table = pa.table({"id": range(10), "updated": [False] * 10})
    for write in (lance.write_dataset, al.write_dataset):
        first = write(table, name)
        second = write(table.slice(0, 3), name)
        assert (first.version, second.version) == (1, 1)
        assert (first.count_rows(), second.count_rows()) == (10, 3)
    first.delete("id >= 5")
    assert (first.count_rows(), second.count_rows()) == (5, 3)
    assert al.dataset(name).count_rows() == 3 and al.dataset(name).version == 1
    # merge_insert committed through the handle, as pylance's test_merge_insert_with_commit
    txn, stats = (second.merge_insert(on="id").when_matched_update_all()
                  .execute_uncommitted(pa.table({"id": [1], "updated": [True]})))
    assert stats["num_updated_rows"] == 1
    done = al.LanceDataset.commit(second, txn)
    assert done.to_table().sort_by("id")["updated"].to_pylist() == [False, True, False]
    with pytest.raises(alance.AlreadyExistsError):
        al.write_dataset(table, done, mode="create")  # a dataset object is not a name
