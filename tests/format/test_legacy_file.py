"""Tests for alance.format.legacy (v0.1/v0.2 data files), with pylance as the oracle."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import itertools
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance.errors import (
    CorruptFileError,
    InvalidInputError,
    SchemaMismatchError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.legacy import (
    LegacyFileReader,
    LegacyFileWriter,
    encode_dictionary_values,
    fetch_from,
    gather,
    open_file,
    parse_footer,
    read_dictionary_values,
    run_plan,
)
from alance.format.legacy.plan import merge_ranges
from alance.format.legacy.stats import compute_stats
from alance.format.manifest import decode_manifest_file
from alance.format.schema import LanceField, LanceSchema

# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------

BF16_META = {"ARROW:extension:name": "lance.bfloat16", "ARROW:extension:metadata": ""}


def _table() -> pa.Table:
    """Every type v0.2 stores faithfully, no nulls where v0.2 cannot keep them."""
    n = 7
    f32 = np.arange(n * 3, dtype=np.float32)
    return pa.table({
        "i8": pa.array(range(-3, n - 3), pa.int8()),
        "u8": pa.array(range(n), pa.uint8()),
        "i16": pa.array(range(n), pa.int16()),
        "u16": pa.array(range(n), pa.uint16()),
        "i32": pa.array(range(n), pa.int32()),
        "u32": pa.array(range(n), pa.uint32()),
        "i64": pa.array([-(2**63), *range(n - 2), 2**63 - 1], pa.int64()),
        "u64": pa.array([*range(n - 1), 2**64 - 1], pa.uint64()),
        "f16": pa.array(np.arange(n, dtype=np.float16)),
        "f32": pa.array([0.5, -0.0, float("nan"), float("inf"), 1, 2, 3], pa.float32()),
        "f64": pa.array([1.5, -2.0, 0.0, float("-inf"), 4, 5, float("nan")]),
        "b": pa.array([True, False, True, True, False, False, True]),
        "d32": pa.array([datetime.date(2024, 1, i + 1) for i in range(n)]),
        "d64": pa.array(range(n), pa.date64()),
        "t32": pa.array(range(n), pa.time32("ms")),
        "t64": pa.array(range(n), pa.time64("us")),
        "ts": pa.array(range(n), pa.timestamp("ns", "Europe/Paris")),
        "ts2": pa.array(range(n), pa.timestamp("s")),
        "dur": pa.array(range(n), pa.duration("us")),
        "dec": pa.array([decimal.Decimal(i) / 4 for i in range(n)], pa.decimal128(9, 2)),
        "dec256": pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal256(40, 3)),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array(f32), 3),
        "bvec": pa.FixedSizeListArray.from_arrays(pa.array([True, False, True] * n), 3),
        "fsb": pa.array([bytes([i, i + 1]) for i in range(n)], pa.binary(2)),
        "bf16": pa.FixedSizeListArray.from_arrays(
            pa.array([bytes([i, 0x3F]) for i in range(2 * n)], pa.binary(2)),
            type=pa.list_(pa.field("item", pa.binary(2), True, BF16_META), 2)),
        "dict": pa.array(list("abacbca")).dictionary_encode(),
        "s": pa.array(["a", None, "ccc", "é" * 40, "x", None, "zz"]),
        "ls": pa.array(["a", "b", None, "d", "e", "f", "g"], pa.large_string()),
        "bin": pa.array([b"\x00", b"\xff" * 70, None, b"b", b"c", b"d", b"e"]),
        "lbin": pa.array([b"a", b"b", b"c", None, b"e", b"f", b"g"], pa.large_binary()),
        "st": pa.array([{"x": i, "y": str(i)} for i in range(n)],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "li": pa.array([[1, 2], [], [3], [4, 5, 6], [], [7], [8]], pa.list_(pa.int64())),
        "lli": pa.array([[1], [2, 3], [], [], [4], [5], [6]], pa.large_list(pa.int16())),
        "lst": pa.array([[{"a": i}] * (i % 3) for i in range(n)],
                        pa.list_(pa.struct([("a", pa.int32())]))),
        "nested": pa.array([[[1], []], [], [[2, 3]], [[4]], [], [[5]], [[6, 7]]],
                           pa.list_(pa.list_(pa.int32()))),
        "lstr": pa.array([["a", None], ["b"], [], ["c"], ["d"], [], ["e"]],
                         pa.list_(pa.string())),
        "deep": pa.array([{"a": {"b": "q", "c": i}} for i in range(n)],
                         pa.struct([("a", pa.struct([("b", pa.string()), ("c", pa.int8())]))])),
        "nul": pa.nulls(n),
    })


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Table equality that treats identical NaN bit patterns as equal."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    for name in a.column_names:
        x, y = a[name].combine_chunks(), b[name].combine_chunks()
        if pa.types.is_floating(x.type):
            ints = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[x.type.bit_width]
            x, y = x.view(ints), y.view(ints)
        if not x.equals(y):
            return False
    return True


def _write(table: pa.Table, rows_per_group: int | None = None, **kw: object) -> tuple[bytes,
                                                                                      LanceSchema]:
    schema = LanceSchema.from_arrow(table.schema)
    w = LegacyFileWriter(schema, **kw)  # type: ignore[arg-type]
    parts = [w.write_batch(b) for b in table.to_batches(max_chunksize=rows_per_group)]
    parts.append(w.finish())
    data = b"".join(parts)
    assert w.bytes_written == len(data)
    assert w.num_rows == table.num_rows
    return data, w.schema


def _reader(data: bytes, **kw: object) -> LegacyFileReader:
    lf = run_plan(open_file(len(data), **kw), fetch_from(data))  # type: ignore[arg-type]
    r = LegacyFileReader(lf)
    run_plan(r.read_dictionaries(), fetch_from(data))
    return r


def _storage_only(table: pa.Table) -> pa.Table:
    """``table`` with extension types (also as fixed-size list items) replaced by their storage
    types: pylance returns e.g. ``lance.bfloat16`` items only once ``lance.arrow`` registered it."""
    columns = []
    for col in table.columns:
        arr = col.combine_chunks()
        if isinstance(arr.type, pa.BaseExtensionType):
            arr = arr.storage
        elif (pa.types.is_fixed_size_list(arr.type)
              and isinstance(arr.type.value_type, pa.BaseExtensionType)):
            item = pa.field("item", arr.type.value_type.storage_type, arr.type.value_field.nullable,
                            arr.type.value_field.metadata)
            arr = pa.FixedSizeListArray.from_arrays(arr.values.storage,
                                                    type=pa.list_(item, arr.type.list_size),
                                                    mask=arr.is_null() if arr.null_count else None)
        columns.append(arr)
    return pa.Table.from_arrays(columns, names=table.column_names)


def _read_all(r: LegacyFileReader, data: bytes, projection: object = None) -> pa.Table:
    fetch = fetch_from(data)
    batches = [run_plan(r.read_batch(i, projection), fetch)  # type: ignore[arg-type]
               for i in range(r.num_batches)]
    if not batches:
        return r.schema.to_arrow().empty_table()
    return pa.Table.from_batches(batches)


def _pylance_file(tmp_path: Path, table: pa.Table, rows_per_group: int | None = None,
                  ) -> tuple[bytes, lance.LanceDataset]:
    kw = {"max_rows_per_group": rows_per_group} if rows_per_group else {}
    ds = lance.write_dataset(table, tmp_path / "ds", data_storage_version="legacy", **kw)
    (path,) = list((tmp_path / "ds" / "data").glob("*.lance"))
    return path.read_bytes(), ds


# ---------------------------------------------------------------------------------------
# Round trips and byte identity with pylance
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("rows_per_group", [None, 1, 3])
def test_round_trip_all_types(rows_per_group: int | None) -> None:
    table = _table()
    data, _ = _write(table, rows_per_group)
    r = _reader(data)
    assert r.file.version == (0, 2)
    assert r.num_batches == (1 if rows_per_group is None else -(-7 // rows_per_group))
    assert _same(_read_all(r, data), table)


@pytest.mark.parametrize("rows_per_group", [None, 2, 3])
def test_bytes_identical_to_pylance(tmp_path: Path, rows_per_group: int | None) -> None:
    table = _table()
    theirs, _ = _pylance_file(tmp_path, table, rows_per_group)
    mine, _ = _write(table, rows_per_group, writer_version=("lance", lance.__version__))
    assert mine == theirs


def test_bytes_identical_non_nullable(tmp_path: Path) -> None:
    table = pa.table({"a": pa.array([3, 1, 2], pa.int32()), "s": ["x", "", "zz"],
                      "t": pa.array([1, 2, 3], pa.time32("ms"))})
    table = table.cast(pa.schema([pa.field("a", pa.int32(), False),
                                  pa.field("s", pa.string(), False),
                                  pa.field("t", pa.time32("ms"))]))
    theirs, _ = _pylance_file(tmp_path, table)
    mine, _ = _write(table, writer_version=("lance", lance.__version__))
    assert mine == theirs
    r = _reader(mine)
    assert _read_all(r, mine).equals(table)  # "" survives in a non-nullable column


def test_reads_pylance_dataset_with_manifest_ids(tmp_path: Path) -> None:
    table = _table()
    data, ds = _pylance_file(tmp_path, table, rows_per_group=3)
    (manifest_path,) = list((tmp_path / "ds" / "_versions").glob("*.manifest"))
    mbytes = manifest_path.read_bytes()
    mf = decode_manifest_file(mbytes)
    schema = LanceSchema.from_protos(mf.manifest.fields)
    (frag,) = mf.manifest.fragments
    (df,) = frag.files
    assert (df.file_major_version, df.file_minor_version) == (0, 2)
    lf = run_plan(open_file(len(data), list(df.fields), tail_size=256), fetch_from(data))
    # dictionary values of a legacy dataset live in the manifest file
    dicts = {}
    for f in schema.walk():
        if f.dictionary is not None:
            dicts[f.id] = run_plan(read_dictionary_values(f.data_type.value_type,
                                                          *f.dictionary), fetch_from(mbytes))
    r = LegacyFileReader(lf, schema, dictionaries=dicts)
    expected = _storage_only(ds.to_table())
    assert _same(_storage_only(_read_all(r, data)), expected)
    rows = [6, 0, 4, 4, 2]
    got = run_plan(r.take(rows), fetch_from(data))
    assert _same(pa.Table.from_batches([got]), expected.take(rows))


def test_reads_what_pylance_loses(tmp_path: Path) -> None:
    """pylance silently turns nulls into values in v0.2; we read exactly what it reads."""
    table = pa.table({
        "i": pa.array([1, None, 3]),
        "st": pa.array([{"x": 1}, None, {"x": 3}], pa.struct([("x", pa.int32())])),
        "l": pa.array([[1], None, []], pa.list_(pa.int8())),
        "s": pa.array(["a", "", None]),
    })
    data, ds = _pylance_file(tmp_path, table)
    assert _same(_read_all(_reader(data), data), ds.to_table())


# ---------------------------------------------------------------------------------------
# Many row groups per write call
# ---------------------------------------------------------------------------------------


def _write_chunked(table: pa.Table, rows_per_group: int, chunk: int | None = None,
                   **kw: object) -> tuple[bytes, LanceSchema]:
    w = LegacyFileWriter(LanceSchema.from_arrow(table.schema), **kw)  # type: ignore[arg-type]
    parts = [w.write_batches(b, rows_per_group)
             for b in table.to_batches(max_chunksize=chunk)]
    data = b"".join([*parts, w.finish()])
    assert w.bytes_written == len(data) and w.num_rows == table.num_rows
    return data, w.schema


def _all_stats(data: bytes) -> pa.RecordBatch | None:
    r = _reader(data)
    return run_plan(r.read_page_stats(r.schema.field_ids()), fetch_from(data))


@pytest.mark.parametrize("rows_per_group", [1, 2, 3, 5])
def test_write_batches_matches_per_group_writes(rows_per_group: int) -> None:
    table = _table()
    mine, _ = _write_chunked(table, rows_per_group)
    ref, _ = _write(table, rows_per_group)
    assert mine != ref  # pages are laid out column by column...
    r = _reader(mine)
    assert r.num_batches == -(-7 // rows_per_group)
    assert r.file.batch_offsets.tolist() == _reader(ref).file.batch_offsets.tolist()
    assert _same(_read_all(r, mine), table)  # ...holding the same values
    assert _all_stats(mine) == _all_stats(ref)  # and the same statistics
    one_group, _ = _write_chunked(table, 7)
    assert one_group == _write(table)[0]  # one group: byte for byte what write_batch writes
    w = LegacyFileWriter(LanceSchema.from_arrow(table.schema))
    parts = w.write_batches_parts(table, rows_per_group)
    assert all(isinstance(p, memoryview) for p in parts)
    assert sum(len(p) for p in parts) == w.bytes_written
    assert b"".join([*parts, w.finish()]) == mine  # the same bytes, unjoined


def _wide_table(n: int) -> pa.Table:
    rng = np.random.default_rng(5)
    words = np.array(["", "a", "bb", "ccc", "é" * 40, "zz" * 40], dtype=object)
    strings = words[rng.integers(0, len(words), n)]
    return pa.table({
        "i": pa.array(np.arange(n, dtype=np.int64)),
        "f": pa.array(np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
                      pa.float32()),
        "b": pa.array(rng.random(n) < 0.3),
        "bv": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(3 * n) < 0.5), 3),
        "s": pa.array([None if x == "" else x for x in strings], pa.string()),
        "id": pa.array([f"{x:08x}" for x in rng.integers(0, 1 << 31, n)]),
        "d": pa.array(rng.integers(0, 5, n).astype(str)).dictionary_encode(),
        "l": pa.array([list(range(i % 4)) for i in range(n)], pa.list_(pa.int16())),
        "ls": pa.array([["x"] * (i % 3) for i in range(n)], pa.list_(pa.string())),
        "st": pa.array([{"x": i, "y": f"y{i % 7}"} for i in range(n)],
                       pa.struct([("x", pa.int32()), ("y", pa.string())])),
        "dt": pa.array(rng.integers(0, 20000, n).astype(np.int32), pa.date32()),
    })


def test_write_batches_read_by_pylance(tmp_path: Path) -> None:
    from lance.fragment import LanceFragment

    table = _wide_table(3000).drop_columns(["d"])  # v0.2 dictionaries live in the manifest
    w = LegacyFileWriter(LanceSchema.from_arrow(table.schema),
                         writer_version=("lance", lance.__version__))
    data = w.write_batches(table.slice(0, 2000), 100)  # 100: bools not byte aligned
    data += w.write_batches(table.slice(2000), 333) + w.finish()
    ds = lance.write_dataset(table.slice(0, 1), tmp_path / "ds", data_storage_version="legacy")
    (tmp_path / "ds" / "data" / "mine.lance").write_bytes(data)
    frag = LanceFragment.create_from_file("mine.lance", ds, 0)
    ds = lance.LanceDataset.commit(tmp_path / "ds", lance.LanceOperation.Overwrite(
        ds.schema, [frag]), read_version=ds.version)
    assert _same(ds.to_table(), table)
    rows = [2999, 0, 1999, 2000, 150]
    took = ds.take(rows, columns=["s"])  # (pylance panics taking fixed-size lists of bools)
    assert took.column("s").to_pylist() == table.column("s").take(rows).to_pylist()
    assert _same(_read_all(_reader(data), data), table)


def test_group_stats_match_per_group_stats() -> None:
    table = _wide_table(1000)
    ref, _ = _write(table, 64)
    mine, _ = _write_chunked(table, 64, chunk=320)
    assert _all_stats(mine) == _all_stats(ref)
    long_ids = pa.table({"k": pa.array([f"{i % 37:070d}" for i in range(500)]),
                         "e": pa.array([b""] * 500, pa.binary()).cast(pa.binary()),
                         "u": pa.array(np.arange(500, dtype=np.uint64) * 7 % 11)})
    long_ids = long_ids.cast(pa.schema([("k", pa.string()), pa.field("e", pa.binary(), False),
                                        ("u", pa.uint64())]))
    assert _all_stats(_write_chunked(long_ids, 50)[0]) == _all_stats(_write(long_ids, 50)[0])


def test_group_stats_equal_one_group_rules() -> None:
    """The vectorised statistics give what compute_stats gives for each group alone."""
    from alance.format.legacy.stats import _build_column, group_stats

    rng = np.random.default_rng(11)
    f = rng.normal(size=400)
    f[rng.random(400) < 0.2] = np.nan
    f[rng.random(400) < 0.2] = 0.0
    f[:40] = np.nan  # a group with no number at all
    columns = {
        "f": pa.array(f), "f32": pa.array(f.astype(np.float32)),
        "i8": pa.array(rng.integers(-128, 128, 400).astype(np.int8)),
        "u64": pa.array(rng.integers(0, 1 << 63, 400).astype(np.uint64) * 2),
        "b": pa.array(np.concatenate([np.ones(40, bool), rng.random(360) < 0.5])),
        "d": pa.array(rng.integers(0, 30000, 400).astype(np.int32), pa.date32()),
        "k": pa.array([f"{x:02d}" for x in rng.integers(0, 100, 400)]),
        "long": pa.array([bytes([255] * 70) if x else bytes([1] * 70) + b"x"
                          for x in rng.random(400) < 0.5][:400], pa.binary()),
        "long_eq": pa.array(["é" * 33 + str(x) for x in rng.integers(0, 10, 400)]),
    }
    for cuts in ([0, 40, 41, 100, 233, 400], [0, 150, 300, 400], [0, 400]):
        bounds = np.array(cuts, dtype=np.int64)
        for name, arr in columns.items():
            lf = LanceSchema.from_arrow(pa.schema([(name, arr.type)])).fields[0]
            got = group_stats(lf, arr, bounds)
            rows = [compute_stats(lf, arr.slice(a, b - a))
                    for a, b in itertools.pairwise(bounds)]
            assert got.null_counts.tolist() == [r.null_count for r in rows], name
            assert got.min_values.equals(_build_column(lf, [r.min_value for r in rows])), name
            assert got.max_values.equals(_build_column(lf, [r.max_value for r in rows])), name


def test_single_and_multi_group_calls_mix() -> None:
    table = _table()
    w = LegacyFileWriter(LanceSchema.from_arrow(table.schema))
    data = (w.write_batch(table.slice(0, 1)) + w.write_batches(table.slice(1, 4), 2)
            + w.write_batch(table.slice(5, 2)) + w.finish())
    ref = LegacyFileWriter(LanceSchema.from_arrow(table.schema))
    ref_data = b"".join([*(ref.write_batch(table.slice(a, b - a))
                           for a, b in itertools.pairwise([0, 1, 3, 5, 7])), ref.finish()])
    r = _reader(data)
    assert r.file.batch_offsets.tolist() == [0, 1, 3, 5, 7]
    assert _same(_read_all(r, data), table)
    stats = _all_stats(data)
    assert stats is not None and stats.num_rows == 4
    assert stats == _all_stats(ref_data)


def test_ranges_across_groups() -> None:
    table = _table()
    data, _ = _write_chunked(table, 3)
    r = _reader(data)
    fetch = fetch_from(data)
    for start in range(8):
        for stop in range(start, 8):
            got = run_plan(r.read_range(start, stop), fetch)
            assert _same(pa.Table.from_batches([got]), table.slice(start, stop - start))


def test_contiguous_pages_read_in_one_range() -> None:
    table = pa.table({"x": pa.array(np.arange(100_000, dtype=np.int64)),
                      "s": pa.array([f"value-{i}" for i in range(100_000)])})
    data, schema = _write_chunked(table, 1000, chunk=50_000)
    r = _reader(data)
    steps: list[list[tuple[int, int]]] = []
    inner = fetch_from(data)

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        steps.append(ranges)
        return inner(ranges)

    got = run_plan(r.read_range(500, 49_900, [schema.field("x").id]), fetch)
    assert got.column("x").to_numpy().tolist() == list(range(500, 49_900))
    assert steps == [[(500 * 8, 49_900 * 8)]]  # 50 row groups: one read of exactly the values
    steps.clear()
    got = run_plan(r.read_range(10_000, 30_000, [schema.field("s").id]), fetch)
    assert got.column("s").to_pylist() == [f"value-{i}" for i in range(10_000, 30_000)]
    assert [len(s) for s in steps] == [1, 1]  # the offsets, then the values


# ---------------------------------------------------------------------------------------
# Selected rows, projections, ranges
# ---------------------------------------------------------------------------------------


def test_take_matches_table_take() -> None:
    table = _table()
    data, _ = _write(table, rows_per_group=2)
    r = _reader(data)
    rng = np.random.default_rng(7)
    for rows in ([0], [6], [1, 2, 3], [5, 0, 5, 2], list(rng.integers(0, 7, 20)), []):
        got = run_plan(r.take(rows), fetch_from(data))
        assert _same(pa.Table.from_batches([got]), table.take(pa.array(rows, pa.int64())))


def test_take_reads_only_needed_pages() -> None:
    table = pa.table({"x": pa.array(np.arange(100_000, dtype=np.int64)),
                      "s": pa.array([f"value-{i}" for i in range(100_000)])})
    data, _ = _write(table, rows_per_group=10_000)
    r = _reader(data)
    asked: list[tuple[int, int]] = []
    inner = fetch_from(data)

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        asked.extend(ranges)
        return inner(ranges)

    got = run_plan(r.take([5, 55_555, 99_999]), fetch)
    assert got.column("x").to_pylist() == [5, 55_555, 99_999]
    assert got.column("s").to_pylist() == ["value-5", "value-55555", "value-99999"]
    assert sum(e - s for s, e in asked) < 1000  # a few values and offsets, not whole pages


def test_projection_and_range() -> None:
    table = _table()
    data, schema = _write(table, rows_per_group=3)
    r = _reader(data)
    sub = schema.project(["deep", "s", "vec"])
    got = _read_all(r, data, sub)
    assert got.equals(table.select(["deep", "s", "vec"]))
    # by ids: a struct child alone keeps its parent
    c_id = schema.field("deep").children[0].children[1].id
    got = _read_all(r, data, [schema.field("i32").id, c_id])
    assert got.column("deep").to_pylist()[2] == {"a": {"c": 2}}
    rng = run_plan(r.read_range(2, 6, sub), fetch_from(data))
    assert pa.Table.from_batches([rng]).equals(table.select(["deep", "s", "vec"]).slice(2, 4))


def test_field_ids_not_starting_at_zero() -> None:
    table = pa.table({"a": [1, 2], "b": pa.array([{"c": "x"}, {"c": "y"}])})
    schema = LanceSchema.from_arrow(table.schema, first_id=5)
    w = LegacyFileWriter(schema)
    data = w.write_batch(table.to_batches()[0]) + w.finish()
    lf = run_plan(open_file(len(data), [5, 6, 7]), fetch_from(data))
    assert (lf.page_table.min_field_id, lf.page_table.max_field_id) == (5, 7)
    assert _read_all(LegacyFileReader(lf, schema), data).equals(table)


def test_empty_batches_and_file() -> None:
    schema = LanceSchema.from_arrow(pa.schema([("a", pa.int32()), ("s", pa.string())]))
    w = LegacyFileWriter(schema)
    empty = pa.RecordBatch.from_pylist([], schema=schema.to_arrow())
    assert w.write_batch(empty) == b""
    data = w.finish()
    with pytest.raises(InvalidInputError):  # no rows: no embedded schema
        run_plan(open_file(len(data)), fetch_from(data))
    r = LegacyFileReader(run_plan(open_file(len(data), [0, 1]), fetch_from(data)), schema)
    assert (r.num_rows, r.num_batches) == (0, 0)
    assert run_plan(r.take([]), fetch_from(data)).num_rows == 0
    assert r.file.metadata.batch_offsets == []


def test_small_tail_needs_more_reads() -> None:
    table = _table()
    data, _ = _write(table, rows_per_group=2)
    steps = []
    inner = fetch_from(data)

    def fetch(ranges: list[tuple[int, int]]) -> list[bytes]:
        steps.append(ranges)
        return inner(ranges)

    lf = run_plan(open_file(len(data), tail_size=20), fetch)
    assert len(steps) >= 3  # tail, then metadata, then manifest/page table
    assert lf.num_rows == 7 and lf.schema is not None


# ---------------------------------------------------------------------------------------
# Dictionaries
# ---------------------------------------------------------------------------------------


def test_dictionaries_unified_across_batches() -> None:
    b1 = pa.record_batch({"d": pa.array(["x", "y", "x"]).dictionary_encode()})
    b2 = pa.record_batch({"d": pa.array(["z", "x"]).dictionary_encode()})
    w = LegacyFileWriter(LanceSchema.from_arrow(b1.schema))
    data = w.write_batch(b1) + w.write_batch(b2) + w.finish()
    assert w.dictionaries[0].to_pylist() == ["x", "y", "z"]
    assert w.schema.fields[0].dictionary is not None
    got = _read_all(_reader(data), data)
    assert got.column("d").to_pylist() == ["x", "y", "x", "z", "x"]


def test_dictionary_seeded_from_dataset() -> None:
    schema = LanceSchema.from_arrow(pa.schema([("d", pa.dictionary(pa.int32(), pa.string()))]))
    w = LegacyFileWriter(schema, dictionaries={0: pa.array(["p", "q"])})
    batch = pa.record_batch({"d": pa.array(["q", "r", "q"]).dictionary_encode()})
    data = w.write_batch(batch) + w.finish()
    assert w.dictionaries[0].to_pylist() == ["p", "q", "r"]  # old keys stay valid
    r = _reader(data)
    got = _read_all(r, data).column("d").combine_chunks()
    assert got.indices.to_pylist() == [1, 2, 1]
    assert got.to_pylist() == ["q", "r", "q"]


def test_dictionary_key_overflow_refused() -> None:
    w = LegacyFileWriter(LanceSchema.from_arrow(pa.schema([("d", pa.dictionary(pa.int8(),
                                                                                 pa.string()))])))
    first = pa.DictionaryArray.from_arrays(pa.array([0], pa.int8()),
                                           pa.array([f"a{i}" for i in range(128)]))
    w.write_batch(pa.record_batch({"d": first}))
    second = pa.DictionaryArray.from_arrays(pa.array([0], pa.int8()), pa.array(["new"]))
    with pytest.raises(UnrepresentableValueError, match="'d'"):
        w.write_batch(pa.record_batch({"d": second}))


def test_dictionary_values_codec() -> None:
    for values in (pa.array(["a", "bb", "c"]), pa.array([1, 5, 9], pa.int16())):
        blob, offset = encode_dictionary_values(values, 100)
        file = b"\0" * 100 + blob
        got = run_plan(read_dictionary_values(values.type, offset, len(values)),
                       fetch_from(file))
        assert got.equals(values)


# ---------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("column", [
    pa.array([1, None], pa.int32()),
    pa.array([1.0, None]),
    pa.array([True, None]),
    pa.array([datetime.date(2020, 1, 1), None]),
    pa.array([1, None], pa.timestamp("us")),
    pa.array([decimal.Decimal(1), None], pa.decimal128(5, 1)),
    pa.array([b"ab", None], pa.binary(2)),
    pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2)),
    pa.array([[1.0, None]], pa.list_(pa.float32(), 2)),
    pa.array([[1], None], pa.list_(pa.int32())),
    pa.array([[1, None]], pa.list_(pa.int32())),
    pa.array([{"x": 1}, None], pa.struct([("x", pa.int32())])),
    pa.array([{"x": None}], pa.struct([("x", pa.int32())])),
    pa.array(["a", ""]),
    pa.array([b""], pa.large_binary()),
    pa.array([["a", ""]], pa.list_(pa.string())),
    pa.array(["a", None]).dictionary_encode(),
    pa.array(["a", ""]).dictionary_encode(),
])
def test_refuses_unrepresentable(column: pa.Array) -> None:
    table = pa.table({"ok": pa.array(range(len(column)), pa.int64()), "col": column})
    w = LegacyFileWriter(LanceSchema.from_arrow(table.schema))
    with pytest.raises(UnrepresentableValueError, match="col"):
        w.write_batch(table.to_batches()[0])
    assert (w.bytes_written, w.num_rows) == (0, 0)  # refused batches leave no trace
    good = table.filter(pa.array([False] * len(column)))
    assert w.write_batch(good) == b""
    assert w.write_batch(table.slice(0, 0)) == b""
    data = w.finish()
    lf = run_plan(open_file(len(data), w.schema.field_ids()), fetch_from(data))
    assert lf.num_rows == 0


def test_refuses_schema_violations() -> None:
    schema = LanceSchema.from_arrow(pa.schema([pa.field("s", pa.string(), False)]))
    w = LegacyFileWriter(schema)
    with pytest.raises(SchemaMismatchError):
        w.write_batch(pa.record_batch({"s": pa.array(["a", None])}))
    with pytest.raises(SchemaMismatchError):
        w.write_batch(pa.record_batch({"s": pa.array([1])}))
    with pytest.raises(SchemaMismatchError):
        w.write_batch(pa.record_batch({"t": pa.array(["a"])}))
    for unsupported in (pa.map_(pa.string(), pa.int32()), pa.list_(pa.string(), 2)):
        with pytest.raises(UnsupportedFeatureError):
            LegacyFileWriter(LanceSchema.from_arrow(pa.schema([("m", unsupported)])))
    w.finish()
    with pytest.raises(InvalidInputError):
        w.write_batch(pa.record_batch({"s": pa.array(["a"])}))


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------


def _stats(values: pa.Array) -> tuple[int, object, object]:
    lf = LanceSchema.from_arrow(pa.schema([("c", values.type)])).fields[0]
    row = compute_stats(lf, values)

    def decode(v: object) -> object:
        if isinstance(v, bytes) and not (pa.types.is_string(values.type)
                                          or pa.types.is_binary(values.type)):
            return pa.Array.from_buffers(values.type, 1, [None, pa.py_buffer(v)])[0].as_py()
        return v
    return row.null_count, decode(row.min_value), decode(row.max_value)


def test_statistics_rules() -> None:
    inf = float("inf")
    assert _stats(pa.array([float("nan"), None])) == (1, -inf, inf)
    assert _stats(pa.array([0.0, 1.0]))[1:] == (-0.0, 1.0)
    assert str(_stats(pa.array([0.0, 1.0]))[1]) == "-0.0"
    assert str(_stats(pa.array([-1.0, -0.0]))[2]) == "0.0"
    assert _stats(pa.array([float("nan"), 2.0, -inf])) == (0, -inf, 2.0)
    assert _stats(pa.array([None, None], pa.int16())) == (2, -32768, 32767)
    assert _stats(pa.array([None], pa.uint8())) == (1, 0, 255)
    assert _stats(pa.array([True, None])) == (1, True, True)
    assert _stats(pa.array([None], pa.bool_())) == (1, False, True)
    assert _stats(pa.array([None], pa.string())) == (1, None, None)
    assert _stats(pa.array(["b", "a" * 70])) == (0, b"a" * 64, b"c")  # max bumped: truncated
    assert _stats(pa.array(["é" * 40]))[1:] == (("é" * 32).encode(), ("é" * 31 + "ê").encode())
    assert _stats(pa.array([b"\xff" * 70]))[1:] == (b"\xff" * 64, None)
    assert _stats(pa.array([b"a\xff" + b"z" * 70]))[2] == b"a\xff" + b"z" * 61 + b"{"
    assert _stats(pa.array([decimal.Decimal("1.5"), decimal.Decimal("-2")],
                           pa.decimal128(4, 1)))[1:] == (decimal.Decimal("-2.0"),
                                                         decimal.Decimal("1.5"))


def test_statistics_written_and_read() -> None:
    table = _table()
    data, schema = _write(table, rows_per_group=4)
    r = _reader(data)
    ids: dict[str, int] = {}

    def visit(f: LanceField, prefix: str) -> None:
        ids[prefix + f.name] = f.id
        for c in f.children:
            visit(c, prefix + f.name + ".")

    for f in schema.fields:
        visit(f, "")
    stats = run_plan(r.read_page_stats(list(ids.values())), fetch_from(data))
    assert stats is not None and stats.num_rows == 2  # one row per row group
    # statistics for top-level and struct children, none inside lists, none for unsupported
    have = set(stats.schema.names)
    for name in ("i8", "u64", "f32", "b", "d32", "d64", "dec", "s", "ls", "bin", "lbin", "st.x",
                 "st.y", "deep.a.b", "deep.a.c"):
        assert str(ids[name]) in have, name
    for name in ("f16", "t32", "ts", "dur", "dec256", "vec", "bvec", "fsb", "dict", "li",
                 "lst.item.a", "lstr.item", "nul"):
        assert str(ids[name]) not in have, name
    f32 = stats.column(str(ids["f32"])).to_pylist()
    assert f32[0] == {"null_count": 0, "min_value": -0.0, "max_value": float("inf")}
    assert str(f32[0]["min_value"]) == "-0.0"
    assert f32[1] == {"null_count": 0, "min_value": 1.0, "max_value": 3.0}
    s = stats.column(str(ids["s"])).to_pylist()
    assert s[0]["null_count"] == 1 and s[0]["min_value"] == "a"
    assert s[0]["max_value"] == "é" * 31 + "ê"
    assert run_plan(r.read_page_stats([ids["vec"]]), fetch_from(data)) is None
    no_stats, _ = _write(table, statistics=False)
    assert not _reader(no_stats).file.metadata.HasField("statistics")


# ---------------------------------------------------------------------------------------
# Corruption and plan mechanics
# ---------------------------------------------------------------------------------------


def _read_everything(data: bytes) -> None:
    r = _reader(data)
    _read_all(r, data)
    run_plan(r.take([0, r.num_rows - 1] if r.num_rows else []), fetch_from(data))
    run_plan(r.read_page_stats(range(50)), fetch_from(data))


def test_truncated_files_are_corrupt() -> None:
    data, _ = _write(_table(), rows_per_group=3)
    for cut in sorted({0, 1, 15, 16, 17, len(data) // 2, len(data) - 17, len(data) - 1}):
        with pytest.raises(CorruptFileError):
            _read_everything(data[:cut])


def test_flipped_bytes_give_corrupt_or_data() -> None:
    data, _ = _write(_table(), rows_per_group=3)
    rng = np.random.default_rng(3)
    positions = list(rng.integers(0, len(data), 150)) + list(range(len(data) - 40, len(data)))
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        with contextlib.suppress(CorruptFileError):  # anything else fails the test
            _read_everything(bytes(bad))


def test_footer_checks() -> None:
    with pytest.raises(CorruptFileError):
        parse_footer(b"\0" * 12 + b"LANX")
    with pytest.raises(CorruptFileError):
        parse_footer(b"\0" * 8 + b"\x02\0\0\0" + b"LANC")  # version 2.0 is not legacy
    data, _ = _write(pa.table({"a": [1]}), minor_version=1)
    assert parse_footer(data).minor_version == 1


def test_merge_and_gather() -> None:
    merged, group, offset = merge_ranges([(10, 20), (0, 5), (22, 30), (7, 7)], gap=2)
    assert merged == [(0, 5), (10, 30)]
    assert group.tolist() == [1, 0, 1, -1] and offset.tolist() == [0, 0, 12, 0]

    rng = np.random.default_rng(2)
    for count in (5, 40, 200):  # small requests take a pure Python path, large ones numpy
        starts = rng.integers(0, 5000, count)
        ranges = [(int(s), int(s + rng.integers(0, 60))) for s in starts]
        merged, group, offset = merge_ranges(ranges, gap=16)
        for (s, e), g, off in zip(ranges, group.tolist(), offset.tolist(), strict=True):
            if e == s:
                assert g == -1
            else:
                assert merged[g][0] + off == s and e <= merged[g][1]
        for (_, e1), (s2, _) in itertools.pairwise(merged):
            assert s2 > e1 + 16  # merged ranges are sorted and further apart than the gap
        covered = {(s, e) for s, e in ranges if e > s}
        assert all(any(a <= s and e <= b for a, b in merged) for s, e in covered)

    def plan(a: int) -> object:
        (x,) = yield [(a, a + 2)]
        (y,) = yield [(a + 2, a + 4)]
        return x + y

    out = run_plan(gather([plan(0), plan(4)]), fetch_from(bytes(range(10))))  # type: ignore
    assert out == [bytes([0, 1, 2, 3]), bytes([4, 5, 6, 7])]


def test_schema_field_types_default_encodings() -> None:
    """The Field.encoding values pylance puts into legacy manifests, for the lead's schema."""
    schema = LanceSchema.from_arrow(_table().schema)
    enc = {f.name: f.encoding for f in schema.walk()}
    assert enc["i8"] == enc["vec"] == enc["fsb"] == enc["li"] == enc["dec"] == 1  # PLAIN
    assert enc["s"] == enc["lbin"] == 2  # VAR_BINARY
    assert enc["dict"] == 3  # DICTIONARY
    assert enc["st"] == enc["nul"] == 0  # NONE
    assert isinstance(schema.fields[0], LanceField)
