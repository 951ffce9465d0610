"""Round trips through alance alone: types, fragments, row groups, scans, takes, versions."""

from __future__ import annotations

import datetime as dt
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import alance
from alance.errors import InvalidInputError


def all_types_table(n: int = 300) -> pa.Table:
    """Every type v0.2 holds faithfully: no nulls in fixed-width columns, no '' when nullable."""
    rng = np.random.default_rng(7)
    ints = np.arange(n)
    cols = {
        "i8": pa.array((ints % 100 - 50).astype(np.int8)),
        "u8": pa.array((ints % 200).astype(np.uint8)),
        "i16": pa.array((ints * 3 - 400).astype(np.int16)),
        "u16": pa.array((ints * 7).astype(np.uint16)),
        "i32": pa.array((ints * 11 - 1000).astype(np.int32)),
        "u32": pa.array((ints * 13).astype(np.uint32)),
        "i64": pa.array(ints.astype(np.int64) * -(2**40)),
        "u64": pa.array(ints.astype(np.uint64) * np.uint64(2**50)),
        "f16": pa.array(rng.random(n).astype(np.float16)),
        "f32": pa.array(rng.random(n).astype(np.float32)),
        "f64": pa.array(rng.standard_normal(n)),
        "b": pa.array(ints % 3 == 0),
        "s": pa.array([None if i % 7 == 0 else f"str{i}" for i in range(n)], pa.string()),
        "ls": pa.array([f"large{i}" * (i % 4 + 1) for i in range(n)], pa.large_string()),
        "bin": pa.array([bytes([i % 256, 1, 2]) for i in range(n)], pa.binary()),
        "lbin": pa.array([b"\x00" + bytes([i % 256]) for i in range(n)], pa.large_binary()),
        "d32": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=i) for i in range(n)]),
        "d64": pa.array(ints.astype(np.int64) * 86_400_000, pa.date64()),
        "t32": pa.array((ints % 86400).astype(np.int32), pa.time32("s")),
        "t64": pa.array(ints.astype(np.int64) * 1000, pa.time64("us")),
        "ts": pa.array(ints.astype(np.int64) * 10**9, pa.timestamp("ns", "UTC")),
        "ts_naive": pa.array(ints.astype(np.int64), pa.timestamp("ms")),
        "dur": pa.array(ints.astype(np.int64), pa.duration("us")),
        "dec": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(10, 2)),
        "dec256": pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal256(40, 0)),
        "fsl": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(n * 16).astype(np.float32)), 16),
        "fsb": pa.array([i.to_bytes(4, "little") for i in range(n)], pa.binary(4)),
        "st": pa.array([{"x": i, "y": f"y{i}"} for i in range(n)],
                       pa.struct([("x", pa.int64()), ("y", pa.string())])),
        "li": pa.array([list(range(i % 5)) for i in range(n)], pa.list_(pa.int32())),
        "lls": pa.array([[f"a{i}", f"b{i}"] for i in range(n)], pa.large_list(pa.string())),
        "lst": pa.array([[{"k": i, "v": float(i)}] * (i % 3) for i in range(n)],
                        pa.list_(pa.struct([("k", pa.int32()), ("v", pa.float64())]))),
    }
    return pa.table(cols)


async def test_round_trip_all_types(uri: str) -> None:
    table = all_types_table()
    ds = await alance.write_dataset(table, uri, max_rows_per_file=120, max_rows_per_group=50)
    assert len(ds.get_fragments()) == 3
    assert ds.schema.equals(table.schema)
    back = await ds.to_table()
    assert back.equals(table)
    again = await alance.open_dataset(uri)
    assert (await again.to_table()).equals(table)
    assert await again.count_rows() == table.num_rows


async def test_empty_table(uri: str) -> None:
    table = pa.table({"a": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    ds = await alance.write_dataset(table, uri)
    assert ds.version == 1
    assert await ds.count_rows() == 0
    out = await ds.to_table()
    assert out.num_rows == 0 and out.schema.equals(table.schema)
    ds = await alance.write_dataset(pa.table({"a": [1], "s": ["x"]}), uri, mode="append")
    assert (await ds.to_table()).to_pydict() == {"a": [1], "s": ["x"]}


async def test_streaming_inputs(uri: str) -> None:
    schema = pa.schema([("a", pa.int64())])

    async def agen():
        for i in range(5):
            yield pa.RecordBatch.from_pydict({"a": list(range(i * 10, i * 10 + 10))}, schema)

    ds = await alance.write_dataset(agen(), uri, max_rows_per_group=7)
    assert (await ds.to_table())["a"].to_pylist() == list(range(50))
    batches = [pa.RecordBatch.from_pydict({"a": [100 + i]}, schema) for i in range(3)]
    ds = await alance.write_dataset(iter(batches), uri, mode="append")
    reader = pa.RecordBatchReader.from_batches(schema, batches)
    ds = await alance.write_dataset(reader, uri, mode="append")
    assert await ds.count_rows() == 56
    assert ds.version == 3


@pytest.fixture
async def numbers(uri: str) -> alance.LanceDataset:
    n = 10_000
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "b": pa.array((np.arange(n) % 100).astype(np.int32)),
        "s": pa.array([("x" if i % 2 else "y") + str(i) for i in range(n)]),
    })
    return await alance.write_dataset(table, uri, max_rows_per_file=3000, max_rows_per_group=512)


async def test_projection_filter_limit_offset(numbers: alance.LanceDataset) -> None:
    ds = numbers
    full = await ds.to_table()
    expected = full.filter(pc.and_(pc.less(full["b"], 10), pc.starts_with(full["s"], "x")))
    got = await ds.to_table(columns=["id", "s"], filter="b < 10 AND s LIKE 'x%'")
    assert got.column_names == ["id", "s"]
    assert got["id"].to_pylist() == expected["id"].to_pylist()
    page = await ds.to_table(columns=["id", "s"], filter="b < 10 AND s LIKE 'x%'", limit=100,
                             offset=10)
    assert page["id"].to_pylist() == expected["id"].to_pylist()[10:110]
    # offset across fragment boundaries without a filter
    tail = await ds.to_table(columns=["id"], offset=6500, limit=7)
    assert tail["id"].to_pylist() == list(range(6500, 6507))
    assert (await ds.to_table(limit=0)).num_rows == 0
    assert (await ds.to_table(offset=20_000)).num_rows == 0
    expr = await ds.to_table(columns=["id"], filter=pc.field("id") >= 9995)
    assert expr["id"].to_pylist() == list(range(9995, 10_000))


async def test_row_id_and_address(numbers: alance.LanceDataset) -> None:
    ds = numbers
    t = await ds.to_table(columns=["id"], with_row_id=True, with_row_address=True)
    assert t.column_names == ["id", "_rowid", "_rowaddr"]
    ids = t["id"].to_numpy()
    frag, off = ids // 3000, ids % 3000
    expected = (frag.astype(np.uint64) << np.uint64(32)) | off.astype(np.uint64)
    assert np.array_equal(t["_rowaddr"].to_numpy(), expected)
    assert np.array_equal(t["_rowid"].to_numpy(), expected)
    t = await ds.to_table(columns=["id"], filter="_rowaddr >= 8589934592")  # fragment >= 2
    assert t["id"].to_pylist() == list(range(6000, 10_000))


async def test_scan_batches(numbers: alance.LanceDataset) -> None:
    sizes = [b.num_rows async for b in numbers.scan(columns=["id"], batch_size=1000)]
    assert sum(sizes) == 10_000 and max(sizes) <= 1000
    ids = [i async for b in numbers.scan(columns=["id"]) for i in b["id"].to_pylist()]
    assert ids == list(range(10_000))
    # leaving early cancels cleanly
    async for _ in numbers.scan(batch_size=10):
        break


async def test_take(numbers: alance.LanceDataset) -> None:
    idx = [0, 5, 9999, 3000, 2999, 5, 6001]
    t = await numbers.take(idx)
    assert t["id"].to_pylist() == idx
    assert t.column_names == ["id", "b", "s"]
    t = await numbers.take(np.array([7, 1]), columns=["s"])
    assert t.to_pydict() == {"s": ["x7", "x1"]}
    assert (await numbers.take([])).num_rows == 0
    with pytest.raises(InvalidInputError):
        await numbers.take([10_000])
    with pytest.raises(InvalidInputError):
        await numbers.take([-1])


async def test_count_rows_with_filter(numbers: alance.LanceDataset) -> None:
    assert await numbers.count_rows() == 10_000
    assert await numbers.count_rows("b = 3") == 100
    assert await numbers.count_rows("id < 0") == 0


async def test_versions_and_time_travel(uri: str) -> None:
    one = pa.table({"a": pa.array([1, 2], pa.int64())})
    await alance.write_dataset(one, uri)
    await alance.write_dataset(one, uri, mode="append")
    ds = await alance.write_dataset(pa.table({"a": pa.array([9], pa.int64())}), uri,
                                    mode="overwrite")
    assert ds.version == 3
    versions = await ds.versions()
    assert [v["version"] for v in versions] == [1, 2, 3]
    assert all(isinstance(v["timestamp"], dt.datetime) for v in versions)
    assert versions[0]["timestamp"] <= versions[2]["timestamp"]
    assert (await (await alance.open_dataset(uri, version=1)).to_table())["a"].to_pylist() == [1, 2]
    v2 = await ds.checkout_version(2)
    assert await v2.count_rows() == 4
    assert (await ds.to_table())["a"].to_pylist() == [9]
    assert await ds.latest_version() == 3


async def test_overwrite_changes_schema(uri: str) -> None:
    await alance.write_dataset(pa.table({"a": [1, 2]}), uri)
    ds = await alance.write_dataset(pa.table({"z": ["q"]}), uri, mode="overwrite")
    assert ds.schema.names == ["z"]
    assert [f.id for f in ds.fragment_protos()] == [0]
    old = await ds.checkout_version(1)
    assert old.schema.names == ["a"]


async def test_field_ids_depth_first(uri: str) -> None:
    schema = pa.schema([("a", pa.int32()),
                        ("b", pa.struct([("c", pa.list_(pa.int32())), ("d", pa.int32())])),
                        ("e", pa.int64())])
    ds = await alance.write_dataset(schema.empty_table(), uri)
    fields = [(f.name, f.id, f.parent_id) for f in ds.lance_schema.walk()]
    assert fields == [("a", 0, -1), ("b", 1, -1), ("c", 2, 1), ("item", 3, 2), ("d", 4, 1),
                      ("e", 5, -1)]
