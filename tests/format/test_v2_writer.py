"""The 2.1 / 2.2 data file writer: every type with nulls at every level, read back by pylance
and by alance; layouts at their limits; data storage versions of new and existing datasets."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.dataset.fragments.write import storage_version_for
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.legacy.plan import fetch_from, run_plan
from alance.format.schema import LanceSchema
from alance.format.v2 import V2FileReader, open_file
from alance.format.v2 import writer as v2writer
from alance.format.v2.writer import V2FileWriter
from tests.format.test_v2_read_matrix import _same

VERSIONS = ("2.1", "2.2")
N = 8


def _arr(values: list[object], dtype: pa.DataType) -> pa.Array:
    assert len(values) == N
    return pa.array(values, dtype)


def _struct_values() -> pa.Array:
    inner = pa.struct([("x", pa.float64()), ("tag", pa.string())])
    dtype = pa.struct([("a", pa.int32()), ("inner", inner), ("l", pa.list_(pa.int16()))])
    return _arr([{"a": 1, "inner": {"x": 1.5, "tag": "t"}, "l": [1, 2]}, None,
                 {"a": None, "inner": None, "l": None}, {"a": 3, "inner": {"x": None, "tag": ""},
                                                        "l": []},
                 {"a": 4, "inner": {"x": 2.0, "tag": None}, "l": [None]}, None,
                 {"a": None, "inner": {"x": None, "tag": None}, "l": [5]},
                 {"a": 7, "inner": {"x": -0.0, "tag": "z"}, "l": [6, None, 7]}], dtype)


def _packed() -> pa.Array:
    dtype = pa.struct([("a", pa.int32()), ("b", pa.uint8()), ("t", pa.timestamp("ms"))])
    return _arr([{"a": i, "b": i % 3, "t": i * 1000} if i % 4 else None for i in range(N)],
                dtype)


def cases(version: str) -> dict[str, pa.Array]:
    """One 8-row column per type, each with nulls (and empties where the type has them)."""
    ints = [1, None, -3, 0, 127, None, -128, 5]
    uints = [1, None, 3, 0, 255, None, 200, 5]
    out: dict[str, pa.Array] = {}
    for t in ("int8", "int16", "int32", "int64"):
        out[t] = _arr(ints, getattr(pa, t)())
    for t in ("uint8", "uint16", "uint32", "uint64"):
        out[t] = _arr(uints, getattr(pa, t)())
    floats = [1.5, None, float("nan"), -0.0, float("inf"), None, 2.25, -1e3]
    out["f16"] = _arr([None if v is None else np.float16(v) for v in floats], pa.float16())
    out["f32"] = _arr(floats, pa.float32())
    out["f64"] = _arr(floats, pa.float64())
    out["bool"] = _arr([True, None, False, True, None, False, False, True], pa.bool_())
    decs = [None if v is None else decimal.Decimal(v) / 100 for v in ints]
    out["dec128"] = _arr(decs, pa.decimal128(12, 2))
    out["dec256"] = _arr(decs, pa.decimal256(50, 2))
    out["date32"] = _arr([None if v is None else dt.date(2000, 1, 1 + abs(v) % 28)
                          for v in ints], pa.date32())
    out["date64"] = pa.array([None if v is None else abs(v) * 86_400_000 for v in ints],
                             pa.int64()).cast(pa.date64())
    for unit, t in (("s", pa.time32), ("ms", pa.time32), ("us", pa.time64), ("ns", pa.time64)):
        out[f"time_{unit}"] = _arr([None if v is None else abs(v) for v in ints], t(unit))
    for unit in ("s", "ms", "us", "ns"):
        out[f"ts_{unit}"] = _arr(ints, pa.int64()).cast(pa.timestamp(unit))
        out[f"dur_{unit}"] = _arr(ints, pa.int64()).cast(pa.duration(unit))
    out["ts_tz"] = _arr(ints, pa.int64()).cast(pa.timestamp("us", tz="Europe/Paris"))
    strs = ["a", None, "", "héllo", "", None, "x" * 40, "z"]
    out["str"] = _arr(strs, pa.string())
    out["lstr"] = _arr(strs, pa.large_string())
    out["bin"] = _arr([None if s is None else s.encode() for s in strs], pa.binary())
    out["lbin"] = _arr([None if s is None else s.encode() for s in strs], pa.large_binary())
    out["long_str"] = _arr([None if s is None else s * 90 for s in strs], pa.string())
    out["fsb"] = _arr([None if v is None else bytes([abs(v) % 256]) * 4 for v in ints],
                      pa.binary(4))
    out["uuid"] = _arr([None if v is None else bytes([abs(v) % 256]) * 16 for v in ints],
                       pa.binary(16)).cast(pa.uuid())
    out["list"] = _arr([[1, None], None, [], [2], None, [], [3, 4, 5], [None]],
                       pa.list_(pa.int32()))
    out["llist_str"] = _arr([["a", ""], None, [], [None], ["b", None, "c"], [], None, [""]],
                            pa.large_list(pa.string()))
    out["list_list"] = _arr([[[1], None, []], None, [], [[2, None]], [None], [[]], [[3], [4]],
                             None], pa.list_(pa.list_(pa.int64())))
    out["list_bool"] = _arr([[True, None], None, [], [False], None, [True], [], [None]],
                            pa.list_(pa.bool_()))
    out["fsl"] = _arr([[1.0, None, 3.0], None, [4.0, 5.0, 6.0], [None, None, None], None,
                       [7.0, 8.0, 9.0], [0.0, -0.0, 1.0], [2.0, 3.0, None]],
                      pa.list_(pa.float32(), 3))
    out["fsl_dense"] = _arr([[i, i + 1] if i % 3 else None for i in range(N)],
                            pa.list_(pa.int64(), 2))
    out["vec"] = _arr([[float(i)] * 80 if i % 3 else None for i in range(N)],
                      pa.list_(pa.float32(), 80))
    out["vec_null_items"] = _arr([[None if j % 7 == i else float(j) for j in range(70)]
                                  if i != 2 else None for i in range(N)],
                                 pa.list_(pa.float64(), 70))
    out["struct"] = _struct_values()
    out["list_struct"] = _arr([[{"p": 1, "q": "a"}, None], None, [], [{"p": None, "q": None}],
                               [None], [], [{"p": 2, "q": ""}], None],
                              pa.list_(pa.struct([("p", pa.int8()), ("q", pa.string())])))
    out["dict"] = _arr(["red", None, "green", "red", "", None, "blue", "red"],
                       pa.string()).dictionary_encode()
    out["dict8"] = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, None, 1, 0, 0, None, 1], pa.int8()), pa.array(["p", "q"]))
    out["packed"] = _packed()
    out["nulls"] = pa.nulls(N)
    if version >= "2.2":
        out["map"] = _arr([[("a", 1)], None, [], [("b", None), ("c", 3)], None, [], [("", 0)],
                           [("d", 4)]], pa.map_(pa.string(), pa.int32()))
    return out


PACKED_META = {"lance-encoding:packed": "true"}


def table_of(version: str) -> pa.Table:
    cols = cases(version)
    fields = [pa.field(k, v.type, metadata=PACKED_META if k == "packed" else None)
              for k, v in cols.items()]
    return pa.table(list(cols.values()), schema=pa.schema(fields))


def check_reads(uri: str, want: pa.Table) -> None:
    """pylance and alance both return ``want``: full read, projection and a take."""
    theirs, ours = lance.dataset(uri), al.open_dataset(uri)
    _same(theirs.to_table(), want, "pylance to_table")
    _same(ours.to_table(), want, "alance to_table")
    if want.num_rows:
        idx = [want.num_rows - 1, 0, want.num_rows // 2]
        cols = want.column_names[::3]
        _same(theirs.take(idx, columns=cols), want.select(cols).take(idx), "pylance take")
        _same(ours.take(idx, columns=cols), want.select(cols).take(idx), "alance take")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_type_with_nulls(tmp_path: Path, version: str) -> None:
    table = table_of(version)
    uri = str(tmp_path / "ds")
    ds = al.write_dataset(table, uri, data_storage_version=version)
    assert ds.data_storage_version == version
    check_reads(uri, table)
    # Several pages (one per write chunk) and files: the same rows.
    big = pa.concat_tables([table] * 40)
    uri2 = str(tmp_path / "ds2")
    al.write_dataset(big, uri2, data_storage_version=version, max_rows_per_file=100,
                     max_rows_per_group=7)
    check_reads(uri2, big.combine_chunks())


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("n", [0, 1])
def test_zero_and_one_row(tmp_path: Path, version: str, n: int) -> None:
    table = table_of(version).slice(2, n)  # row 2: empties and nulls
    uri = str(tmp_path / "ds")
    al.write_dataset(table, uri, data_storage_version=version)
    check_reads(uri, table)
    assert lance.dataset(uri).count_rows() == n


def test_sans_io_writer_through_our_reader() -> None:
    table = table_of("2.2")
    schema = LanceSchema.from_arrow(table.schema)
    writer = V2FileWriter(schema, (2, 2))
    parts = []
    for batch in table.to_batches(max_chunksize=3):
        parts.extend(bytes(p) for p in writer.write_batch(batch))
    parts.append(writer.finish())
    data = b"".join(parts)
    assert len(data) == writer.bytes_written
    assert data[-8:] == b"\x02\x00\x02\x00LANC"
    file = run_plan(open_file(len(data)), fetch_from(data))
    assert file.num_rows == N and file.version == (2, 2)
    reader = V2FileReader(file, schema)
    got = pa.Table.from_batches([run_plan(reader.read_range(0, N), fetch_from(data))])
    _same(got, table.cast(schema.to_arrow()), "read_range")
    with pytest.raises(InvalidInputError):
        writer.write_batch(table)  # finished


# -- values at the limits of the layouts ----------------------------------------------------

def _limits() -> pa.Table:
    rng = np.random.default_rng(3)
    n = 60_000
    sparse_bool = [None] * n
    sparse_bool[n // 2] = [True, False, None]
    sparse_int = [[] for _ in range(n)]
    sparse_int[7] = [1, 2]
    row_of_empties: list[object] = [None] * n
    row_of_empties[1] = [[] for _ in range(20_000)] + [[9]]
    huge = rng.integers(97, 123, 200_000, dtype=np.uint8).tobytes().decode()
    strings: list[object] = [None] * n
    strings[0], strings[5], strings[6] = huge, "", huge[:70_000]
    lists: list[object] = [None] * n
    lists[3] = list(range(70_000))
    lists[4] = []
    return pa.table({
        "sparse_bool": pa.array(sparse_bool, pa.list_(pa.bool_())),
        "sparse_int": pa.array(sparse_int, pa.list_(pa.int64())),
        "row_of_empties": pa.array(row_of_empties, pa.list_(pa.list_(pa.int32()))),
        "huge_strings": pa.array(strings, pa.large_string()),
        "huge_list": pa.array(lists, pa.list_(pa.int32())),
    })


@pytest.mark.parametrize("version", VERSIONS)
def test_values_beyond_mini_block_limits(tmp_path: Path, version: str) -> None:
    table = _limits()
    uri = str(tmp_path / "ds")
    al.write_dataset(table, uri, data_storage_version=version)
    want = table.combine_chunks()
    _same(lance.dataset(uri).to_table(), want, "pylance")
    _same(al.open_dataset(uri).to_table(), want, "alance")
    idx = [n for n in (0, 1, 3, 7, 30_000, 59_999)]
    _same(lance.dataset(uri).take(idx), want.take(idx), "pylance take")


def test_small_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Columns larger than a page are cut into several pages of whole rows."""
    monkeypatch.setattr(v2writer, "PAGE_BYTES", 4096)
    table = pa.concat_tables([table_of("2.2")] * 50).combine_chunks()
    uri = str(tmp_path / "ds")
    al.write_dataset(table, uri, data_storage_version="2.2")
    check_reads(uri, table)


def test_refusals_write_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    maps = pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int32()))})
    with pytest.raises(UnsupportedFeatureError, match=r"2\.2"):
        al.write_dataset(maps, uri, data_storage_version="2.1")
    fsl_str = pa.table({"f": pa.array([["a", "b"]], pa.list_(pa.string(), 2))})
    with pytest.raises(UnsupportedFeatureError, match="fixed-size lists"):
        al.write_dataset(fsl_str, uri)
    nested_empty = pa.table({"s": pa.array([{"e": {}, "x": 1}],
                                           pa.struct([("e", pa.struct([])), ("x", pa.int8())]))})
    with pytest.raises(UnsupportedFeatureError, match="empty struct"):
        al.write_dataset(nested_empty, uri)  # pylance cannot read such a file back
    null_empty = pa.table({"s": pa.array([{}, None], pa.struct([]))})
    with pytest.raises(UnsupportedFeatureError, match="empty struct"):
        al.write_dataset(null_empty, uri)
    bools = [[] for _ in range(40_000)] + [[True]]
    deep = pa.table({"b": pa.array([bools], pa.list_(pa.list_(pa.bool_())))})
    with pytest.raises(UnsupportedFeatureError):
        al.write_dataset(deep, uri)
    nulls = pa.array([{"a": 1, "b": None}], pa.struct([("a", pa.int32()), ("b", pa.int8())]))
    packed = pa.table([nulls], schema=pa.schema([pa.field("p", nulls.type,
                                                          metadata=PACKED_META)]))
    with pytest.raises(UnsupportedFeatureError, match="packed"):
        al.write_dataset(packed, uri)
    assert not (tmp_path / "ds").exists() or not any((tmp_path / "ds").rglob("*.lance"))


# -- data storage versions --------------------------------------------------------------------

@pytest.mark.parametrize(("given", "stored"), [
    (None, "2.2"), ("stable", "2.2"), ("2.2", "2.2"), ("2.1", "2.1"), ("2.0", "2.0"),
    ("legacy", "0.1"),
    ("0.1", "0.1"), ("0.2", "0.1"), ("STABLE", "2.2")])
def test_storage_version_names(tmp_path: Path, given: str | None, stored: str) -> None:
    assert storage_version_for(given) == stored
    uri = str(tmp_path / "ds")
    table = pa.table({"a": pa.array([1, 2], pa.int64())})
    ds = al.write_dataset(table, uri, data_storage_version=given)
    assert ds.data_storage_version == stored == lance.dataset(uri).data_storage_version
    (frag,) = ds.fragment_protos()
    expected = {"0.1": (0, 2), "2.0": (2, 0)}.get(stored) or tuple(
        int(x) for x in stored.split("."))
    assert (frag.files[0].file_major_version, frag.files[0].file_minor_version) == expected


def test_unwritable_storage_versions(tmp_path: Path) -> None:
    table = pa.table({"a": pa.array([1], pa.int64())})
    with pytest.raises(UnsupportedFeatureError, match="next"):
        al.write_dataset(table, str(tmp_path / "a"), data_storage_version="next")
    with pytest.raises(InvalidInputError):
        al.write_dataset(table, str(tmp_path / "b"), data_storage_version="3.7")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_and_files_as_pylance_writes_them(tmp_path: Path, version: str) -> None:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()),
                      "s": pa.array(["a", None, ""]),
                      "st": pa.array([{"x": 1}, None, {"x": None}],
                                     pa.struct([("x", pa.int32())]))})
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "theirs")
    al.write_dataset(table, ours, data_storage_version=version)
    lance.write_dataset(table, theirs, data_storage_version=version)
    mine, ref = al.open_dataset(ours), al.open_dataset(theirs)
    assert mine._async._snapshot.manifest.data_format == ref._async._snapshot.manifest.data_format
    (fa,), (fb,) = mine.fragment_protos(), ref.fragment_protos()
    for attr in ("fields", "column_indices", "file_major_version", "file_minor_version"):
        assert list(getattr(fa.files[0], attr)) == list(getattr(fb.files[0], attr)) if \
            attr in ("fields", "column_indices") else \
            getattr(fa.files[0], attr) == getattr(fb.files[0], attr), attr
    tail_a = (Path(ours) / "data" / fa.files[0].path).read_bytes()[-8:]
    tail_b = (Path(theirs) / "data" / fb.files[0].path).read_bytes()[-8:]
    assert tail_a == tail_b


@pytest.mark.parametrize("storage", ["legacy", "2.1", "2.2"])
def test_appends_keep_the_dataset_version(tmp_path: Path, storage: str) -> None:
    uri = str(tmp_path / "ds")
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "s": pa.array(["a", "b"])})
    al.write_dataset(first, uri, data_storage_version=storage)
    second = pa.table({"id": pa.array([3], pa.int64()), "s": pa.array(["c"])})
    ds = al.write_dataset(second, uri, mode="append")  # default: the dataset's version
    ds = al.write_dataset(second, uri, mode="append", data_storage_version="2.2")
    versions = {(f.files[0].file_major_version, f.files[0].file_minor_version)
                for f in ds.fragment_protos()}
    assert len(versions) == 1, versions
    assert ds.data_storage_version == storage_version_for(storage)
    want = pa.concat_tables([first, second, second])
    assert lance.dataset(uri).to_table().equals(want)
    assert ds.to_table().equals(want)


@pytest.mark.parametrize("pylance_version", [None, "2.1"])
def test_alance_appends_to_a_pylance_dataset(tmp_path: Path, pylance_version: str | None,
                                             ) -> None:
    uri = str(tmp_path / "ds")
    base = table_of("2.2" if pylance_version is None else "2.1").drop_columns(["packed"])
    if pylance_version is None:
        lance.write_dataset(base, uri)  # pylance's defaults
    else:
        lance.write_dataset(base, uri, data_storage_version=pylance_version)
    stored = lance.dataset(uri).data_storage_version
    al.write_dataset(base, uri, mode="append")
    ds = al.open_dataset(uri)
    assert ds.data_storage_version == stored
    assert {f.files[0].file_minor_version for f in ds.fragment_protos()} == {
        int(stored.split(".")[1])}
    want = pa.concat_tables([base, base]).combine_chunks()
    _same(lance.dataset(uri).to_table(), want, "pylance")
    _same(ds.to_table(), want, "alance")


def table_2_0() -> pa.Table:
    """The every-type table less what 2.0 cannot hold (maps, null structs) or alance does not
    write to it (fixed-size lists of booleans or of lists)."""
    table = table_of("2.1").drop_columns(["struct", "list_struct", "packed"])
    struct = pa.StructArray.from_arrays(
        [pa.array([1, None, 3, 4, 5, 6, None, 8], pa.int32()),
         pa.array(["a", "", None, "d", "e", "f", "g", None]),
         pa.array([[1], None, [], [2, None], [3], [], None, [4]], pa.list_(pa.int8()))],
        names=["a", "s", "l"])
    items = pa.StructArray.from_arrays([pa.array([1, None, 2, 3, 4], pa.int8())], names=["p"])
    list_struct = pa.ListArray.from_arrays(pa.array([0, 2, 2, 3, 3, 4, 4, 5, 5], pa.int32()),
                                           items)
    packed = pa.StructArray.from_arrays([pa.array(range(N), pa.int32()),
                                         pa.array(range(N), pa.uint8())], names=["a", "b"])
    table = table.append_column("struct", struct).append_column("list_struct", list_struct)
    return table.append_column(pa.field("packed", packed.type, metadata=PACKED_META), packed)


def test_every_type_in_2_0_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = table_2_0()
    uri = str(tmp_path / "ds")
    ds = al.write_dataset(table, uri, data_storage_version="2.0")
    assert ds.data_storage_version == "2.0"
    (frag,) = ds.fragment_protos()
    assert (frag.files[0].file_major_version, frag.files[0].file_minor_version) == (2, 0)
    assert (Path(uri) / "data" / frag.files[0].path).read_bytes()[-8:] == b"\0\0\3\0LANC"
    check_reads(uri, table)
    # Many pages per column (structs keep one page per file, as 2.0 readers need).
    monkeypatch.setattr(v2writer, "PAGE_BYTES", 256)
    big = pa.concat_tables([table] * 30).combine_chunks()
    uri2 = str(tmp_path / "ds2")
    al.write_dataset(big, uri2, data_storage_version="2.0")
    _same(lance.dataset(uri2).to_table(), big, "pylance, many pages")
    flat = [c for c in big.column_names if "list" not in c and c != "struct"]
    _same(al.open_dataset(uri2).to_table(columns=flat), big.select(flat), "alance, many pages")


def test_alance_appends_to_a_2_0_dataset(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = table_2_0()
    lance.write_dataset(table, uri, data_storage_version="2.0")
    ds = al.write_dataset(table, uri, mode="append")
    assert {(f.files[0].file_major_version, f.files[0].file_minor_version)
            for f in ds.fragment_protos()} == {(2, 0)}
    want = pa.concat_tables([table, table]).combine_chunks()
    _same(lance.dataset(uri).to_table(), want, "pylance")
    _same(ds.to_table(), want, "alance")
    ds = ds.delete("int32 = 1").dataset
    assert lance.dataset(uri).count_rows() == 2 * N - 2
    # 2.0 cannot hold null structs: refused, nothing written
    before = sorted(p.name for p in Path(uri).rglob("*"))
    nulls = table.set_column(table.column_names.index("struct"), "struct",
                             pa.nulls(N, table.schema.field("struct").type))
    with pytest.raises(UnsupportedFeatureError, match="null structs"):
        al.write_dataset(nulls, uri, mode="append")
    assert sorted(p.name for p in Path(uri).rglob("*")) == before


def test_dml_and_dictionaries_on_a_2_2_dataset(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array(range(20), pa.int64()),
                      "v": pa.array([float(i) for i in range(20)]),
                      "c": pa.array(["x", "y"] * 10).dictionary_encode()})
    ds = al.write_dataset(table, uri, max_rows_per_file=10)
    ds = ds.update({"v": "NULL"}, where="id < 3").dataset
    ds = ds.delete("id = 10").dataset
    # new dictionary values are fine in 2.x (each page has its own dictionary)
    more = pa.table({"id": pa.array([100], pa.int64()), "v": pa.array([None], pa.float64()),
                     "c": pa.array(["brand new"]).dictionary_encode()})
    ds = al.write_dataset(more, uri, mode="append")
    versions = {(f.files[0].file_major_version, f.files[0].file_minor_version)
                for f in ds.fragment_protos()}
    assert versions == {(2, 2)}
    theirs = lance.dataset(uri).to_table().sort_by("id")
    assert theirs.column("v").to_pylist()[:4] == [None, None, None, 3.0]
    assert theirs.column("c").to_pylist()[-1] == "brand new"
    assert 10 not in theirs.column("id").to_pylist()
    assert ds.to_table().sort_by("id").cast(theirs.schema).equals(theirs)


# -- bounded memory ---------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import asyncio, resource, sys
    import numpy as np, pyarrow as pa
    import alance

    ROWS, BATCHES = 100_000, {batches}
    words = pa.array([f"word-{{i}}" for i in range(1000)])

    async def stream():
        for i in range(BATCHES):
            idx = pa.array(np.arange(ROWS) % 1000)
            offsets = pa.array(np.arange(0, ROWS * 3 + 1, 3, dtype=np.int32))
            yield pa.record_batch({{
                "a": pa.array(np.full(ROWS, i, dtype=np.int64)),
                "s": words.take(idx),
                "l": pa.ListArray.from_arrays(offsets, pa.array(np.arange(ROWS * 3) % 7)),
            }})

    async def main():
        ds = await alance.write_dataset(stream(), sys.argv[1], max_rows_per_file=10_000_000,
                                        data_storage_version="2.2")
        assert await ds.count_rows() == ROWS * BATCHES

    asyncio.run(main())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
""")


def _peak_mb(tmp_path: Path, batches: int) -> int:
    script = tmp_path / "w.py"
    script.write_text(SCRIPT.format(batches=batches))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / f"d{batches}.lance")],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_streaming_write_memory_is_bounded(tmp_path: Path) -> None:
    small = _peak_mb(tmp_path, 2)   # ~8 MB of input
    large = _peak_mb(tmp_path, 30)  # ~120 MB of input, one file
    assert large - small < 60, (small, large)


@pytest.mark.parametrize(("first", "given", "stored"), [
    ("legacy", None, "0.1"), ("2.1", None, "2.1"), ("legacy", "2.2", "2.2"),
    ("2.2", "2.1", "2.1")])
def test_overwrite_keeps_the_version_unless_given(tmp_path: Path, first: str,
                                                  given: str | None, stored: str) -> None:
    uri = str(tmp_path / "ds")
    table = pa.table({"id": pa.array([1, 2], pa.int64())})
    al.write_dataset(table, uri, data_storage_version=first)
    ds = al.write_dataset(table, uri, mode="overwrite", data_storage_version=given)
    assert ds.data_storage_version == stored == lance.dataset(uri).data_storage_version
    assert lance.dataset(uri).to_table().equals(table)


@pytest.mark.parametrize("version", VERSIONS)
def test_fixed_size_list_shapes(tmp_path: Path, version: str) -> None:
    """Fixed-size lists of booleans and of fixed-size lists (pylance reads them; alance's
    reader does not decode these two shapes yet)."""
    rows = 3000
    table = pa.table({
        "fsl_bool": pa.array([[True, None, False], None, [False, False, True]] * rows,
                             pa.list_(pa.bool_(), 3)),
        "fsl_fsl": pa.array([[[1, 2], [3, 4]], None, [[5, 6], None]] * rows,
                            pa.list_(pa.list_(pa.int32(), 2), 2)),
        "wide_fsl_fsl": pa.array([[[float(i)] * 50] * 4 if i % 3 else None
                                  for i in range(3 * rows)],
                                 pa.list_(pa.list_(pa.float64(), 50), 4)),
        "list_fsl_bool": pa.array([[[True, None]], None, [None, [False, True]]] * rows,
                                  pa.list_(pa.list_(pa.bool_(), 2))),
    })
    uri = str(tmp_path / "ds")
    al.write_dataset(table, uri, data_storage_version=version)
    ds = lance.dataset(uri)
    _same(ds.to_table(), table, "pylance")
    idx = [0, 1, 2, 4_000, 3 * rows - 1]
    _same(ds.take(idx), table.take(idx), "pylance take")


# -- random nested types ------------------------------------------------------------------------

_LEAVES = [pa.int32(), pa.int8(), pa.string(), pa.bool_(), pa.float64(), pa.large_binary(),
           pa.binary(3)]


def _random_type(rng: random.Random, depth: int) -> pa.DataType:
    k = rng.random()
    if depth >= 3 or k < 0.35:
        return rng.choice(_LEAVES)
    if k < 0.55:
        return pa.struct([(f"f{i}", _random_type(rng, depth + 1))
                          for i in range(rng.randint(1, 3))])
    if k < 0.75:
        return pa.list_(_random_type(rng, depth + 1))
    if k < 0.85:
        return pa.large_list(_random_type(rng, depth + 1))
    if k < 0.95:
        return pa.list_(rng.choice([pa.int16(), pa.float32(), pa.bool_()]), rng.randint(1, 4))
    return pa.map_(pa.string(), _random_type(rng, depth + 1))


def _random_value(rng: random.Random, t: pa.DataType, p_null: float) -> object:
    if rng.random() < p_null:
        return None
    if pa.types.is_struct(t):
        return {f.name: _random_value(rng, f.type, p_null) for f in t}
    if pa.types.is_fixed_size_list(t):
        return [_random_value(rng, t.value_type, p_null) for _ in range(t.list_size)]
    if pa.types.is_map(t):
        return [(f"k{rng.randint(0, 9)}", _random_value(rng, t.item_type, p_null))
                for _ in range(rng.choice([0, 0, 1, 2, 5]))]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_random_value(rng, t.value_type, p_null)
                for _ in range(rng.choice([0, 0, 1, 2, 3, 7, 40]))]
    if t == pa.string():
        return rng.choice(["", "a", "hello", "x" * rng.choice([1, 300])])
    if t == pa.large_binary():
        return rng.choice([b"", b"zz", b"q" * 500])
    if t == pa.binary(3):
        return b"abc"
    if t == pa.bool_():
        return rng.random() < 0.5
    if t == pa.float64():
        return rng.random()
    return rng.randint(-100, 100)


@pytest.mark.parametrize("seed", range(24))
def test_random_nested_types(tmp_path: Path, seed: int) -> None:
    """Random nestings of structs, lists, fixed-size lists and maps, nulls at every level,
    sliced input, several files: pylance reads exactly the rows (450 seeds pass offline)."""
    rng = random.Random(seed)
    dtype = _random_type(rng, 0)
    n = rng.choice([1, 3, 50, 500])
    p_null = rng.choice([0.0, 0.1, 0.5, 0.95])
    arr = pa.array([_random_value(rng, dtype, p_null) for _ in range(n)], dtype)
    arr = arr.slice(rng.randint(0, n // 3))
    version = "2.2" if "map" in str(dtype) or seed % 2 else "2.1"
    table = pa.table({"c": arr})
    uri = str(tmp_path / "ds")
    al.write_dataset(table, uri, data_storage_version=version,
                     max_rows_per_file=rng.choice([100, 10_000]))
    ds = lance.dataset(uri)
    _same(ds.to_table(), table.combine_chunks(), f"{dtype}")
    idx = sorted(rng.sample(range(len(arr)), min(5, len(arr))))
    _same(ds.take(idx), table.take(idx), f"take {dtype}")


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_top_level_empty_structs_both_ways(tmp_path: Path, version: str) -> None:
    """A struct with no fields is a column of its own (an all-null constant page in 2.1+, a
    struct page in 2.0), as pylance writes it; every row reads as ``{}``."""
    schema = pa.schema([pa.field("id", pa.int32()), pa.field("empties", pa.struct([]))])
    table = pa.table({"id": [0, 1, 2], "empties": [{}] * 3}, schema=schema)
    mine = al.write_dataset(table, str(tmp_path / "a"), data_storage_version=version)
    assert mine.to_table() == table
    assert mine.take([2, 0, 1]) == table.take([2, 0, 1])
    assert lance.dataset(str(tmp_path / "a")).to_table() == table
    lance.write_dataset(table, str(tmp_path / "p"), data_storage_version=version)
    theirs = al.dataset(str(tmp_path / "p"))
    assert theirs.to_table() == table
    assert theirs.take([2, 0, 1]) == table.take([2, 0, 1])


def test_columns_are_encoded_costliest_first_and_come_back_in_order() -> None:
    """With a pool, a batch's big string column is submitted first (a batch lasts as long
    as its last column), and the file is the same as one encoded column by column."""
    from concurrent.futures import ThreadPoolExecutor

    rows = 20_000
    rng = np.random.default_rng(3)
    table = pa.table({
        "id": pa.array(np.arange(rows, dtype=np.int64)),
        "x": pa.array(rng.random(rows)),
        "s": pa.array([f"value-{v}" for v in rng.integers(0, 10**9, rows)]),
        "k": pa.array(rng.integers(0, 5, rows, dtype=np.int32)),
    })
    schema = LanceSchema.from_arrow(table.schema)
    started: list[str] = []
    plain = V2FileWriter(schema, (2, 2))
    pooled = V2FileWriter(schema, (2, 2))
    encode = pooled._encode_field

    def recording(field: tuple[object, pa.Array]) -> object:
        started.append(field[0].name)  # type: ignore[attr-defined]
        return encode(field)  # type: ignore[arg-type]

    pooled._encode_field = recording  # type: ignore[method-assign]
    with ThreadPoolExecutor(1) as pool:  # one thread: columns start in submission order
        pooled_bytes = b"".join(bytes(b) for b in pooled.write_batch(table, pool))
    plain_bytes = b"".join(bytes(b) for b in plain.write_batch(table))
    assert started[0] == "s"
    assert sorted(started) == sorted(table.column_names)
    assert pooled_bytes + pooled.finish() == plain_bytes + plain.finish()
