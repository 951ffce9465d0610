"""Every logical type of the schema spec through write, read, take and filter, pylance as oracle.

Each type is written by alance and by pylance, into v0.2 files when that format can hold it
and into 2.2 files always, then read back by both engines: schemas, rows, ``take`` and a
filter must agree. The spec's type-conversion table is checked against our mapping and
against the logical types pylance writes into manifests.
"""

from __future__ import annotations

import datetime as dt
import decimal

import lance
import numpy as np
import pyarrow as pa
import pytest
from lance.arrow import bfloat16_array

import alance
import alance.sync
from alance.format.schema import LanceSchema, arrow_type_of, logical_type_of

N = 8
TS = [dt.datetime(2020, 1, 1, 12, 0, 0, 123456) + dt.timedelta(days=i) for i in range(N)]


def _bf16() -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(bfloat16_array([i / 2 for i in range(2 * N)]), 2)


NESTED = pa.struct([("a", pa.list_(pa.struct([("x", pa.int32()),
                                               ("y", pa.struct([("z", pa.string())]))])))])

#: name -> (values, whether v0.2 files can hold the type, a filter on the column or None)
TYPES: dict[str, tuple[pa.Array, bool, str | None]] = {
    "decimal128": (pa.array([decimal.Decimal(f"{i}.25") for i in range(N)],
                            pa.decimal128(10, 2)), True, "c > 3"),
    "decimal256": (pa.array([decimal.Decimal(f"{i}12345678901234567890123456789.5")
                             for i in range(N)], pa.decimal256(40, 1)), True, "c > 3"),
    "date32": (pa.array([dt.date(2020, 1, 1 + i) for i in range(N)], pa.date32()), True,
               "c >= date '2020-01-04'"),
    "date64": (pa.array([dt.date(2020, 1, 1 + i) for i in range(N)], pa.date64()), True,
               "c > date '2020-01-03'"),
    **{f"time32_{u}": (pa.array([dt.time(1, 2, i) for i in range(N)], pa.time32(u)), True,
                       None) for u in ("s", "ms")},
    **{f"time64_{u}": (pa.array([dt.time(1, 2, i, 7) for i in range(N)], pa.time64(u)), True,
                       None) for u in ("us", "ns")},
    **{f"timestamp_{u}_{tz or 'none'}": (pa.array(TS, pa.timestamp(u, tz)), True,
                                         "c > TIMESTAMP '2020-01-03 00:00:00'")
       for u in ("s", "ms", "us", "ns") for tz in (None, "UTC", "America/New_York")},
    **{f"duration_{u}": (pa.array(range(N), pa.duration(u)), True, None)
       for u in ("s", "ms", "us", "ns")},
    "large_string": (pa.array([f"x{i}" for i in range(N)], pa.large_string()), True,
                     "c = 'x3'"),
    "large_binary": (pa.array([b"b%d" % i for i in range(N)], pa.large_binary()), True,
                     "c = X'6233'"),
    "large_list": (pa.array([[i, i + 1] for i in range(N)], pa.large_list(pa.int32())), True,
                   None),
    "fixed_size_binary": (pa.array([bytes([i]) * 4 for i in range(N)], pa.binary(4)), True,
                          "c = X'03030303'"),
    "dictionary": (pa.array([f"v{i % 3}" for i in range(N)]).dictionary_encode(), True,
                   "c = 'v1'"),
    "map": (pa.array([[("a", i), ("b", i + 1)] for i in range(N)],
                     pa.map_(pa.string(), pa.int32())), False, None),
    "struct_list_struct": (pa.array([{"a": [{"x": i, "y": {"z": str(i)}}]} for i in range(N)],
                                    NESTED), True, "c.a IS NOT NULL"),
    "halffloat": (pa.array(np.arange(N, dtype=np.float16)), True, "c > 3"),
    "fixed_size_list": (pa.array([[i, i, i] for i in range(N)], pa.list_(pa.float32(), 3)),
                        True, None),
    "bfloat16": (_bf16(), True, None),
    "uint64": (pa.array(range(N), pa.uint64()), True, "c IN (1, 5)"),
}


async def _write(writer: str, table: pa.Table, uri: str, version: str) -> None:
    if writer == "alance":
        await alance.write_dataset(table, uri, data_storage_version=version,
                                   max_rows_per_file=5)
    else:
        lance.write_dataset(table, uri, data_storage_version=version, max_rows_per_file=5)


def _same(mine: pa.Table, theirs: pa.Table) -> None:
    assert mine.schema.equals(theirs.schema), (mine.schema, theirs.schema)
    # to_pylist: dictionaries may differ in their value lists while meaning the same rows
    assert mine.to_pylist() == theirs.to_pylist()


CASES = [(name, version) for name, (_, legacy, _) in TYPES.items()
         for version in (["legacy", "2.2"] if legacy else ["2.2"])]


@pytest.mark.parametrize("writer", ["alance", "pylance"])
@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-{v}" for n, v in CASES])
async def test_type_round_trip(tmp_path, name: str, version: str, writer: str) -> None:
    values, _, sql = TYPES[name]
    table = pa.table({"id": pa.array(range(N), pa.int64()), "c": values})
    uri = str(tmp_path / "ds.lance")
    await _write(writer, table, uri, version)
    ds = await alance.open_dataset(uri)
    oracle = lance.dataset(uri)
    _same(await ds.to_table(), oracle.to_table())
    assert (await ds.to_table()).column("c").to_pylist() == values.to_pylist()
    _same(await ds.take([6, 0, 3]), oracle.take([6, 0, 3]))
    for where in ["c IS NOT NULL AND id > 4", sql]:
        if where is not None:
            got = await ds.to_table(filter=where)
            assert got.num_rows > 0, where
            _same(got, oracle.to_table(filter=where))


async def test_nulls_in_2x_files(tmp_path) -> None:
    """2.x files hold nulls of every type (v0.2 cannot: fixed-width nulls read back as 0)."""
    columns = {name: pa.array([None if i == 2 else v for i, v in enumerate(values.to_pylist())],
                              values.type)
               for name, (values, _, _) in TYPES.items()
               if name not in ("bfloat16", "dictionary")}
    table = pa.table({"id": pa.array(range(N), pa.int64()), **columns})
    for writer in ("alance", "pylance"):
        uri = str(tmp_path / f"{writer}.lance")
        await _write(writer, table, uri, "2.2")
        ds = await alance.open_dataset(uri)
        _same(await ds.to_table(), lance.dataset(uri).to_table())
        _same(await ds.to_table(filter="id = 2"), lance.dataset(uri).to_table(filter="id = 2"))
        assert all(v is None for k, v in (await ds.take([2])).to_pylist()[0].items()
                   if k != "id")


#: The type-conversion table of the schema spec: Arrow type -> logical type string.
CONVERSIONS: list[tuple[pa.DataType, str]] = [
    (pa.null(), "null"), (pa.bool_(), "bool"),
    (pa.int8(), "int8"), (pa.int16(), "int16"), (pa.int32(), "int32"), (pa.int64(), "int64"),
    (pa.uint8(), "uint8"), (pa.uint16(), "uint16"), (pa.uint32(), "uint32"),
    (pa.uint64(), "uint64"), (pa.float16(), "halffloat"), (pa.float32(), "float"),
    (pa.float64(), "double"), (pa.string(), "string"), (pa.large_string(), "large_string"),
    (pa.binary(), "binary"), (pa.large_binary(), "large_binary"),
    (pa.decimal128(10, 2), "decimal:128:10:2"), (pa.decimal256(20, 5), "decimal:256:20:5"),
    (pa.date32(), "date32:day"), (pa.date64(), "date64:ms"),
    (pa.time32("s"), "time32:s"), (pa.time32("ms"), "time32:ms"),
    (pa.time64("us"), "time64:us"), (pa.time64("ns"), "time64:ns"),
    (pa.timestamp("us", "UTC"), "timestamp:us:UTC"),
    (pa.timestamp("ms", "America/New_York"), "timestamp:ms:America/New_York"),
    (pa.timestamp("ns"), "timestamp:ns:-"), (pa.timestamp("s"), "timestamp:s:-"),
    (pa.duration("s"), "duration:s"), (pa.duration("ms"), "duration:ms"),
    (pa.duration("us"), "duration:us"), (pa.duration("ns"), "duration:ns"),
    (pa.struct([("a", pa.int32())]), "struct"),
    (pa.list_(pa.int32()), "list"), (pa.list_(pa.struct([("a", pa.int32())])), "list.struct"),
    (pa.large_list(pa.int32()), "large_list"),
    (pa.large_list(pa.struct([("a", pa.int32())])), "large_list.struct"),
    (pa.list_(pa.float32(), 128), "fixed_size_list:float:128"),
    (pa.list_(pa.int32(), 10), "fixed_size_list:int32:10"),
    (pa.binary(16), "fixed_size_binary:16"),
    (pa.dictionary(pa.int16(), pa.string()), "dict:string:int16:false"),
    (pa.map_(pa.string(), pa.int32()), "map"),
]


@pytest.mark.parametrize(("arrow", "logical"), CONVERSIONS, ids=[c[1] for c in CONVERSIONS])
def test_type_conversion_table(arrow: pa.DataType, logical: str) -> None:
    assert logical_type_of(arrow) == logical
    schema = LanceSchema.from_arrow(pa.schema([pa.field("c", arrow)]))
    back = LanceSchema.from_protos(schema.to_protos())
    assert back.to_arrow().field("c").type == arrow
    if not logical.startswith(("struct", "list", "large_list", "map")):
        assert arrow_type_of(logical) == arrow


def test_logical_types_match_pylance_manifests(tmp_path) -> None:
    """The logical types (and field ids) pylance writes for every type are the ones we give."""
    table = pa.table({name: values for name, (values, _, _) in TYPES.items()})
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(table, uri)
    theirs = [(f.id, f.parent_id, f.name, f.logical_type)
              for f in alance.sync.open_dataset(uri).lance_schema.walk()]
    ours = [(f.id, f.parent_id, f.name, f.logical_type)
            for f in LanceSchema.from_arrow(table.schema).walk()]
    assert ours == theirs
    bf16 = next(f for f in alance.sync.open_dataset(uri).lance_schema.walk()
                if f.name == "bfloat16")
    assert bf16.logical_type == "fixed_size_list:lance.bfloat16:2"


def test_json_text_columns_are_stored_as_jsonb(tmp_path) -> None:
    """JSON text is written as Lance's JSONB and read back as text (tests/test_json.py)."""
    table = pa.table({"j": pa.array(['{"a": 1}'], pa.json_())})
    alance.sync.write_dataset(table, str(tmp_path / "ds.lance"))
    back = lance.dataset(str(tmp_path / "ds.lance")).to_table().column("j")
    assert back.type == pa.json_() and back.to_pylist() == ['{"a":1}']  # stored compactly


@pytest.mark.parametrize("offload", [True, False])
def test_large_json_columns_read_like_pylance(tmp_path, offload: bool) -> None:
    """A JSON column big enough to be converted in pieces on the decoding threads (or, with
    offloading off, on the reading thread) reads back as pylance reads it, nulls in place."""
    import json

    from alance.io.plans import set_offloading
    docs = [None if i % 97 == 0 else json.dumps(
        {"id": i, "name": f"user_{i}", "score": i / 7, "tags": ["a", "b"][: i % 3],
         "nested": {"x": i * 1_000_003, "ok": i % 2 == 0, "n": None}}) for i in range(6000)]
    path = str(tmp_path / "docs.lance")
    lance.write_dataset(pa.table({"doc": pa.array(docs, pa.json_(pa.utf8()))}), path)
    set_offloading(offload)
    try:
        ours = alance.sync.dataset(path).to_table().column("doc")
    finally:
        set_offloading(True)
    theirs = lance.dataset(path).to_table().column("doc")
    assert ours.type == pa.json_() and ours.to_pylist() == theirs.to_pylist()
    assert ours.null_count == len([d for d in docs if d is None])


async def test_float_filters_order_nan_and_zeros_like_pylance(tmp_path) -> None:
    """Lance compares stored floats with NaN equal to itself and above everything, and
    -0.0 equal to 0.0 (also in IN lists)."""
    values = [-0.0, 0.0, float("nan"), 1.0, None, float("-inf"), float("inf")]
    table = pa.table({"id": pa.array(range(len(values)), pa.int64()),
                      "f": pa.array(values, pa.float64()),
                      "g": pa.array(values, pa.float32()),
                      "h": pa.array([None if v is None else np.float16(v) for v in values],
                                    pa.float16())})
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(table, uri)
    ds = await alance.open_dataset(uri)
    oracle = lance.dataset(uri)
    for sql in ["f > 0.5", "f >= 0.0", "f < 0.0", "f = -0.0", "f != 0.0", "f = f", "f < g",
                "g > 1e30", "NOT (f < 1)", "f BETWEEN -1 AND 0", "f IN (0.0)",
                "f NOT IN (-0.0, 1.0)", "h > 0.5", "h = 0", "h < f"]:
        got = (await ds.to_table(filter=sql)).column("id").to_pylist()
        assert got == oracle.to_table(filter=sql).column("id").to_pylist(), sql
