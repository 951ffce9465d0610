"""Schema and data evolution: add/merge/drop/alter columns, read back by alance and pylance.

pylance 14 is the oracle: what alance evolves must read identically in pylance (every
version), and datasets pylance evolved (including tombstoned field ids) must read identically
in alance.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import alance
from alance.dataset.evolution.backfill import Progress
from alance.dataset.evolution.new_columns import castable, manifest_max_field_id
from alance.errors import (
    InvalidInputError,
    RetryableCommitConflictError,
    UnrepresentableValueError,
)

VERSIONS = ["legacy", "2.2"]


def base_table(n: int = 100) -> pa.Table:
    return pa.table({
        "id": pa.array(np.arange(n), pa.int64()),
        "x": pa.array(np.arange(n) % 7, pa.int32()),
        "s": pa.array([f"s{i}" for i in range(n)]),
    })


def files_of(uri: str) -> set[str]:
    return {p.name for p in (Path(uri) / "data").iterdir()}


async def assert_same_everywhere(uri: str) -> None:
    """Every version reads the same in alance and pylance (rows, names and types)."""
    ds = await alance.open_dataset(uri)
    for v in range(1, ds.version + 1):
        mine = await (await alance.open_dataset(uri, version=v)).to_table()
        theirs = lance.dataset(uri, version=v).to_table()
        assert mine.schema.equals(theirs.schema), (v, mine.schema, theirs.schema)
        assert mine.equals(theirs), v


@pytest.mark.parametrize("storage", VERSIONS)
async def test_add_columns_sql_function_and_merge(local_uri: str, storage: str) -> None:
    ds = await alance.write_dataset(base_table(), local_uri, max_rows_per_file=40,
                                    data_storage_version=storage)
    ds = await ds.add_columns({"x2": "x * 2", "label": "s || '!'"})
    assert ds.schema.field("x2").type == pa.int32()

    reports: list[Progress] = []

    async def plus_one(batch: pa.RecordBatch) -> pa.RecordBatch:
        await asyncio.sleep(0)
        return pa.record_batch({"y": pc.add(batch.column("id"), 1)})

    ds = await ds.add_columns(plus_one, read_columns=["id"], batch_size=16,
                              progress=reports.append)
    assert reports[-1].fragments_done == reports[-1].fragments_total == 3
    assert reports[-1].rows_done == 100

    def neg(batch: pa.RecordBatch) -> dict[str, pa.Array]:
        return {"neg": pc.negate(batch.column("x"))}

    ds = await ds.add_columns(neg, read_columns=["x"])
    ds = await ds.merge(pa.table({"key": [3, 5, 199], "tag": ["three", "five", "none"]}),
                        "id", "key")
    table = await ds.to_table()
    assert table.column("x2").to_pylist() == [2 * (i % 7) for i in range(100)]
    assert table.column("label")[0].as_py() == "s0!"
    assert table.column("y").to_pylist() == list(range(1, 101))
    assert table.column("neg").to_pylist() == [-(i % 7) for i in range(100)]
    tags = table.column("tag").to_pylist()
    assert tags[3] == "three" and tags[5] == "five" and tags.count(None) == 98
    # each fragment got one more data file per add; the first file is untouched
    for frag in ds.fragment_protos():
        assert [list(f.fields) for f in frag.files] == [[0, 1, 2], [3, 4], [5], [6], [7]]
    await assert_same_everywhere(local_uri)


async def test_add_columns_on_rows_with_deletions(local_uri: str) -> None:
    ds = await alance.write_dataset(base_table(50), local_uri, data_storage_version="legacy",
                                    max_rows_per_file=20)
    ds = (await ds.delete("id < 25 AND id > 2")).dataset  # fragment 1 wholly deleted
    seen: list[int] = []

    def record(batch: pa.RecordBatch) -> pa.Table:
        seen.extend(batch.column("id").to_pylist())
        return pa.table({"sq": pc.multiply(batch.column("id"), batch.column("id"))})

    ds = await ds.add_columns(record, read_columns=["id"])
    live = [i for i in range(50) if not 2 < i < 25]
    assert sorted(seen) == live  # only live rows, each once (also the batch probed for types)
    table = await ds.to_table()
    assert table.column("sq").to_pylist() == [i * i for i in live]
    await assert_same_everywhere(local_uri)


@pytest.mark.parametrize("storage", VERSIONS)
async def test_add_columns_in_row_order_and_all_null(local_uri: str, storage: str) -> None:
    ds = await alance.write_dataset(base_table(30), local_uri, max_rows_per_file=12,
                                    data_storage_version=storage)
    ds = await ds.add_columns(pa.table({"w": pa.array(np.arange(30) * 10)}))
    assert (await ds.to_table()).column("w").to_pylist() == list(range(0, 300, 10))
    ds = await ds.add_columns(pa.field("empty", pa.string()))
    assert (await ds.to_table(columns=["empty"])).column(0).null_count == 30
    with pytest.raises(InvalidInputError, match="end before"):
        await ds.add_columns(pa.table({"short": pa.array(np.arange(5))}))
    with pytest.raises(InvalidInputError, match="more new column values"):
        await ds.add_columns(pa.table({"long": pa.array(np.arange(31))}))
    await assert_same_everywhere(local_uri)


async def test_add_columns_errors_leave_nothing_behind(local_uri: str) -> None:
    ds = await alance.write_dataset(base_table(), local_uri, data_storage_version="legacy",
                                    max_rows_per_file=10)
    before = files_of(local_uri)
    with pytest.raises(InvalidInputError, match="already exist"):
        await ds.add_columns({"x": "id"})
    with pytest.raises(InvalidInputError, match="No field named"):
        await ds.add_columns({"z": "nope + 1"})

    def failing(batch: pa.RecordBatch) -> pa.Table:
        if batch.column("id")[0].as_py() >= 50:
            raise RuntimeError("boom")
        return pa.table({"ok": batch.column("id")})

    with pytest.raises(RuntimeError, match="boom"):
        await ds.add_columns(failing, read_columns=["id"])
    with pytest.raises(InvalidInputError, match="returned 1 rows"):
        await ds.add_columns(lambda b: pa.table({"bad": [1]}), read_columns=["id"])
    assert files_of(local_uri) == before
    assert (await alance.open_dataset(local_uri)).version == 1


@pytest.mark.parametrize("storage", VERSIONS)
async def test_drop_is_metadata_only_and_ids_are_not_reused(local_uri: str,
                                                            storage: str) -> None:
    ds = await alance.write_dataset(base_table(), local_uri, max_rows_per_file=50,
                                    data_storage_version=storage)
    ds = await ds.add_columns({"extra": "id + 1"})
    files = files_of(local_uri)
    ds = await ds.drop_columns(["x", "extra"])
    assert files_of(local_uri) == files  # no data written
    assert ds.schema.names == ["id", "s"]
    # the file holding only "extra" left the fragments; the first file still lists x (id 1)
    assert [[list(f.fields) for f in frag.files] for frag in ds.fragment_protos()] == [
        [[0, 1, 2]], [[0, 1, 2]]]
    assert manifest_max_field_id(ds.manifest) == 2
    ds = await ds.add_columns({"again": "id * 3"})
    assert ds.lance_schema.field("again").id == 3
    with pytest.raises(InvalidInputError, match="all columns"):
        await ds.drop_columns(["id", "s", "again"])
    with pytest.raises(InvalidInputError, match="does not exist"):
        await ds.drop_columns(["missing"])
    await assert_same_everywhere(local_uri)


@pytest.mark.parametrize("storage", VERSIONS)
async def test_alter_columns(local_uri: str, storage: str) -> None:
    t = base_table(60).append_column(
        "st", pa.StructArray.from_arrays([pa.array(np.arange(60.0)), pa.array(["a"] * 60)],
                                         ["f", "g"]))
    t = t.append_column("maybe", pa.array([None if i % 5 == 0 else "v" for i in range(60)]))
    ds = await alance.write_dataset(t, local_uri, max_rows_per_file=25,
                                    data_storage_version=storage)
    ds = await ds.alter_columns({"path": "s", "name": "text"}, {"path": "st.g", "name": "h"})
    assert ds.schema.names == ["id", "x", "text", "st", "maybe"]
    assert ds.schema.field("st").type == pa.struct([("f", pa.float64()), ("h", pa.string())])
    ds = await ds.alter_columns({"path": "x", "data_type": pa.int64()})
    old_x = 1
    assert ds.lance_schema.field("x").id == manifest_max_field_id(ds.manifest) != old_x
    assert all(old_x in frag.files[0].fields for frag in ds.fragment_protos())  # like pylance
    assert (await ds.to_table()).column("x").type == pa.int64()
    ds = await ds.alter_columns({"path": "id", "data_type": pa.int16(), "nullable": True})
    ds = await ds.add_columns({"big": "id * 1000"})
    with pytest.raises(InvalidInputError, match=r"Can.t cast value 1000 to type Int8"):
        await ds.alter_columns({"path": "big", "data_type": pa.int8()})
    with pytest.raises(InvalidInputError, match="Cannot cast"):
        await ds.alter_columns({"path": "text", "data_type": pa.int32()})
    with pytest.raises(InvalidInputError, match="holds nulls"):
        await ds.alter_columns({"path": "maybe", "nullable": False})
    with pytest.raises(InvalidInputError, match="already exists"):
        await ds.alter_columns({"path": "x", "name": "id"})
    await assert_same_everywhere(local_uri)


def test_castable_rules() -> None:
    assert castable(pa.int32(), pa.uint64())
    assert castable(pa.float32(), pa.float64())
    assert castable(pa.string(), pa.large_string())
    assert castable(pa.list_(pa.int32()), pa.large_list(pa.int64()))
    assert castable(pa.timestamp("s"), pa.date32())
    assert not castable(pa.int32(), pa.float64())
    assert not castable(pa.string(), pa.binary())
    assert not castable(pa.struct([("a", pa.int8())]), pa.struct([("a", pa.int16())]))


@pytest.mark.parametrize("storage", VERSIONS)
async def test_pylance_evolved_datasets_read_identically(local_uri: str, storage: str) -> None:
    lance.write_dataset(base_table(), local_uri, max_rows_per_file=30,
                        data_storage_version=storage)
    ds = lance.dataset(local_uri)
    ds.add_columns({"double": "x * 2"})
    ds.alter_columns({"path": "x", "data_type": pa.int64()}, {"path": "s", "name": "t"})
    ds.drop_columns(["double"])
    ds.merge(pa.table({"id": [1, 2], "m": ["one", "two"]}), "id")  # v0.2: no null floats
    # an in-place column update: the old file's field id becomes a tombstone (-2)
    ds = lance.dataset(local_uri)
    updated, fields = [], None
    for frag in ds.get_fragments():
        src = pa.table({"id": pa.array(np.arange(100), pa.int64()),
                        "t": pa.array([f"new{i}" for i in range(100)])})
        meta, fields = frag.update_columns(src, left_on="id", right_on="id")
        updated.append(meta)
    op = lance.LanceOperation.Update(updated_fragments=updated, fields_modified=fields,
                                     update_mode="rewrite_columns")
    lance.LanceDataset.commit(local_uri, op, read_version=ds.version)
    mine = await alance.open_dataset(local_uri)
    assert any(-2 in f.fields for frag in mine.fragment_protos() for f in frag.files)
    await assert_same_everywhere(local_uri)
    table = await mine.to_table(filter="t = 'new7'")
    assert table.column("id").to_pylist() == [7]
    taken = await mine.take([0, 99, 31], columns=["t", "x", "m"])
    assert taken.to_pylist() == lance.dataset(local_uri).take(
        [0, 99, 31], columns=["t", "x", "m"]).to_pylist()


@pytest.mark.parametrize("storage", VERSIONS)
async def test_ten_version_history_in_both_engines(local_uri: str, storage: str) -> None:
    """Adds, renames, drops and retypes across 10 versions, alternating engines."""
    await alance.write_dataset(base_table(80), local_uri, max_rows_per_file=30,
                               data_storage_version=storage)                     # v1 alance
    lance.dataset(local_uri).add_columns({"a": "id + 100"})                    # v2 pylance
    ds = await alance.open_dataset(local_uri)
    ds = await ds.add_columns({"b": "x * 3"})                                   # v3 alance
    lance.dataset(local_uri).alter_columns({"path": "a", "name": "a2"})         # v4 pylance
    ds = await (await alance.open_dataset(local_uri)).alter_columns(
        {"path": "b", "data_type": pa.int64()})                                 # v5 alance
    lance.dataset(local_uri).drop_columns(["x"])                               # v6 pylance
    ds = await (await alance.open_dataset(local_uri)).drop_columns(["a2"])      # v7 alance
    lance.dataset(local_uri).alter_columns({"path": "b", "data_type": pa.int32()})  # v8
    ds = await (await alance.open_dataset(local_uri)).merge(
        pa.table({"k": np.arange(0, 80, 2), "half": [str(i) for i in range(40)]}),
        "id", "k")                                                               # v9 alance
    ds = await ds.alter_columns({"path": "s", "name": "str"})                   # v10 alance
    assert ds.version == 10
    await assert_same_everywhere(local_uri)
    final = await ds.to_table()
    assert final.schema.names == ["id", "str", "b", "half"]
    assert final.column("b").type == pa.int32()
    assert final.column("half").to_pylist()[:4] == ["0", None, "1", None]


async def test_async_function_runs_fragments_concurrently_within_bound(local_uri: str) -> None:
    ds = await alance.write_dataset(base_table(120), local_uri, max_rows_per_file=10,
                                    data_storage_version="2.2")
    running, peak = 0, 0

    async def slow(batch: pa.RecordBatch) -> pa.RecordBatch:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        return pa.record_batch({"copy": batch.column("id")})

    slow.output_schema = pa.schema([("copy", pa.int64())])  # type: ignore[attr-defined]
    ds = await ds.add_columns(slow, read_columns=["id"], concurrency=3)
    assert peak == 3
    table = await ds.to_table()
    assert table.column("copy").equals(table.column("id"))


async def test_all_null_columns_and_field_ids_match_pylance(local_uri: str) -> None:
    ds = await alance.write_dataset(base_table(20), local_uri, max_rows_per_file=10,
                                    data_storage_version="2.2")
    files = files_of(local_uri)
    ds = await ds.add_columns([pa.field("n1", pa.float32()), pa.field("n2", pa.string())])
    assert files_of(local_uri) == files  # metadata only on 2.x, like pylance
    lance.dataset(local_uri).add_columns(pa.field("n3", pa.int64()))  # pylance, metadata only
    ds = await (await alance.open_dataset(local_uri)).drop_columns(["x"])
    oracle = lance.dataset(local_uri)
    assert ds.max_field_id == oracle.max_field_id == 5
    table = await ds.to_table()
    assert [table.column(n).null_count for n in ("n1", "n2", "n3")] == [20, 20, 20]
    await assert_same_everywhere(local_uri)
    assert (await ds.to_table(filter="n3 IS NULL AND id < 3")).num_rows == 3


async def test_concurrent_append_preempts_add_columns_cleanly(local_uri: str) -> None:
    ds = await alance.write_dataset(base_table(10), local_uri, data_storage_version="legacy")
    lance.write_dataset(base_table(5), local_uri, mode="append")
    files = files_of(local_uri)
    with pytest.raises(RetryableCommitConflictError, match="append"):
        await ds.add_columns({"y": "x + 1"})
    assert files_of(local_uri) == files  # the new column files were removed
    latest = await (await alance.open_dataset(local_uri)).add_columns({"y": "x + 1"})
    assert (await latest.to_table()).column("y").to_pylist() == [
        i % 7 + 1 for i in list(range(10)) + list(range(5))]


async def test_functions_may_read_row_ids_of_stable_row_id_datasets(local_uri: str) -> None:
    lance.write_dataset(base_table(10), local_uri, enable_stable_row_ids=True,
                        max_rows_per_file=4)
    lance.dataset(local_uri).delete("id = 2")
    lance.write_dataset(base_table(2), local_uri, mode="append")
    ds = await alance.open_dataset(local_uri)

    def ids(batch: pa.RecordBatch) -> pa.Table:
        return pa.table({"rid": batch.column("_rowid"), "addr": batch.column("_rowaddr")})

    ds = await ds.add_columns(ids, read_columns=["id", "_rowid", "_rowaddr"])
    expected = lance.dataset(local_uri).to_table(with_row_id=True, with_row_address=True)
    table = await ds.to_table()
    assert table.column("rid").to_pylist() == expected.column("_rowid").to_pylist()
    assert table.column("addr").to_pylist() == expected.column("_rowaddr").to_pylist()
    await assert_same_everywhere(local_uri)


async def test_v02_cannot_take_null_numbers_and_leaves_nothing(local_uri: str) -> None:
    """As in pylance: unmatched merge keys would need nulls a v0.2 int column cannot hold."""
    ds = await alance.write_dataset(base_table(30), local_uri, data_storage_version="legacy",
                                    max_rows_per_file=10)
    before = files_of(local_uri)
    with pytest.raises(UnrepresentableValueError, match="null"):
        await ds.merge(pa.table({"id": [1, 2], "n": [10, 20]}), "id")
    assert files_of(local_uri) == before
    with pytest.raises(OSError, match="null"):
        lance.dataset(local_uri).merge(pa.table({"id": [1, 2], "n": [10, 20]}), "id")


@pytest.mark.parametrize("storage", VERSIONS)
async def test_new_columns_keep_extension_types(local_uri: str, storage: str) -> None:
    from lance.arrow import bfloat16_array

    ds = await alance.write_dataset(base_table(6), local_uri, max_rows_per_file=4,
                                    data_storage_version=storage)

    def embed(batch: pa.RecordBatch) -> pa.Table:
        n = batch.num_rows
        values = bfloat16_array([float(i) for i in range(2 * n)])
        return pa.table({"e": pa.FixedSizeListArray.from_arrays(values, 2),
                         "u": pa.array([b"0123456789abcdef"] * n, pa.binary(16)).cast(
                             pa.uuid())})

    ds = await ds.add_columns(embed, read_columns=["id"])
    ds = await ds.merge(pa.table({"k": [1], "w": pa.array([b"fedcba9876543210"],
                                                          pa.binary(16)).cast(pa.uuid())}),
                        "id", "k") if storage == "2.2" else ds
    assert ds.lance_schema.field("e").logical_type == "fixed_size_list:lance.bfloat16:2"
    assert isinstance(ds.schema.field("u").type, pa.BaseExtensionType)
    await assert_same_everywhere(local_uri)


def test_batch_udf_schema_and_checkpoint(tmp_path: Path) -> None:
    """A batch_udf's results must keep one schema; with a checkpoint, a rerun after a failure
    computes only the batches not done before, and the checkpoint goes once committed."""
    import os

    from alance import sync
    ds = sync.write_dataset(pa.table({"a": range(100), "b": range(100)}), str(tmp_path / "ds"),
                            max_rows_per_file=20)
    calls: list[int] = []
    checkpoint = tmp_path / "cache.sqlite"

    @sync.batch_udf(checkpoint_file=checkpoint)
    def double(batch: pa.RecordBatch) -> pa.RecordBatch:
        first = batch["a"][0].as_py()
        calls.append(first)
        if first >= 60 and not os.environ.get("ALANCE_TEST_UDF_OK"):
            raise RuntimeError("I failed")
        return pa.record_batch([pc.multiply(batch["a"], 2)], ["a2"])

    with pytest.raises(RuntimeError, match="I failed"):
        ds.add_columns(double, read_columns=["a"])
    assert ds.version == 1 and checkpoint.exists()
    done_before = {c for c in calls if c < 60}
    calls.clear()
    os.environ["ALANCE_TEST_UDF_OK"] = "1"
    try:
        ds.add_columns(double, read_columns=["a"])
    finally:
        del os.environ["ALANCE_TEST_UDF_OK"]
    assert not done_before & set(calls[1:])  # (the first call may be the schema probe)
    assert ds.to_table()["a2"].to_pylist() == [2 * i for i in range(100)]
    assert not checkpoint.exists()
    with pytest.raises(InvalidInputError, match="A checkpoint file cannot be used"):
        ds.get_fragments()[0].merge_columns(
            sync.batch_udf(checkpoint_file=checkpoint)(lambda b: b), columns=["a"])

    @sync.batch_udf()
    def unstable(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch([batch["a"]], [f"c{batch['a'][0].as_py()}"])

    with pytest.raises(InvalidInputError, match="Output schema of function does not match"):
        ds.add_columns(unstable, read_columns=["a"])


def test_values_with_reader_schema_and_counts(tmp_path: Path) -> None:
    from alance import sync
    from alance.errors import RowCountMismatchError
    ds = sync.write_dataset(pa.table({"a": range(10)}), str(tmp_path / "ds"),
                            max_rows_per_file=4)

    def gen(n: int, name: str) -> Any:
        for start in range(0, n, 3):
            yield pa.record_batch([pa.array(range(start, min(n, start + 3)))], [name])

    ds.add_columns(gen(10, "c"), reader_schema=pa.schema([("c", pa.int64())]))
    assert ds.to_table()["c"].to_pylist() == list(range(10))
    with pytest.raises(RowCountMismatchError, match="Stream ended before"):
        ds.add_columns(gen(5, "d"), reader_schema=pa.schema([("d", pa.int64())]))
    with pytest.raises(OSError, match="Stream produced more values"):
        ds.add_columns(gen(11, "d"), reader_schema=pa.schema([("d", pa.int64())]))
    assert ds.schema.names == ["a", "c"]


def test_null_sql_columns_are_metadata_only_and_cast_errors_name_values(
        tmp_path: Path) -> None:
    from alance import sync
    uri = str(tmp_path / "ds")
    ds = sync.write_dataset(pa.table({"a": range(100), "x": pa.array([1, 1024] * 50,
                                                                       pa.int32())}),
                            uri, max_rows_per_file=50)
    files = [f.data_files() for f in ds.get_fragments()]
    ds.add_columns({"b": "CAST(NULL AS INT)"})
    assert [f.data_files() for f in ds.get_fragments()] == files  # nothing written
    assert ds.schema.field("b").type == pa.int32()
    assert lance.dataset(uri).to_table()["b"].null_count == 100
    with pytest.raises(InvalidInputError, match="Can't cast value 1024 to type Int8"):
        ds.alter_columns({"path": "x", "data_type": pa.int8()})
    with pytest.raises(InvalidInputError, match='Cannot cast column "x" from Int32 to Utf8'):
        ds.alter_columns({"path": "x", "data_type": pa.string()})
