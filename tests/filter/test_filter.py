"""Tests for alance.filter: SQL filters compared with what pylance returns for the same text."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from alance.errors import InvalidInputError
from alance.filter import (
    as_expression,
    compile_filter,
    compile_filter_and_columns,
    filter_columns,
)

N = 40


def _with_nulls(values: list[object], every: int) -> list[object]:
    return [None if k % every == 0 else v for k, v in enumerate(values)]


def _make_table() -> pa.Table:
    ids = list(range(N))
    words = ["apple", "Banana", "cherry", "a_b", "a%b", "", "date", "Apple pie", "it's"]
    struct_type = pa.struct([("x", pa.int64()), ("y", pa.struct([("z", pa.string())]))])
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "i": pa.array(_with_nulls([k * 7 % 11 - 5 for k in ids], 5), pa.int64()),
            "i32": pa.array(_with_nulls([k - 10 for k in ids], 7), pa.int32()),
            "u8": pa.array([k * 9 % 256 for k in ids], pa.uint8()),
            "f": pa.array(_with_nulls([k / 4 - 3 for k in ids], 6), pa.float64()),
            "s": pa.array(_with_nulls([words[k % len(words)] for k in ids], 10), pa.string()),
            "b": pa.array(_with_nulls([k % 3 == 0 for k in ids], 4), pa.bool_()),
            "d": pa.array(
                _with_nulls([dt.date(2024, 1, 1) + dt.timedelta(days=5 * k) for k in ids], 8),
                pa.date32(),
            ),
            "ts": pa.array(
                _with_nulls([dt.datetime(2024, 1, 1) + dt.timedelta(hours=13 * k) for k in ids], 9),
                pa.timestamp("us"),
            ),
            "st": pa.array(
                _with_nulls([{"x": k, "y": {"z": f"z{k % 4}"}} for k in ids], 11), struct_type
            ),
            "Upper Col": pa.array([k % 2 for k in ids], pa.int64()),
        }
    )


TABLE = _make_table()
SCHEMA = TABLE.schema
# A single fragment: _rowid and _rowaddr both equal the row offset.
TABLE_WITH_ROWIDS = TABLE.append_column("_rowid", pa.array(range(N), pa.uint64())).append_column(
    "_rowaddr", pa.array(range(N), pa.uint64())
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> lance.LanceDataset:
    path: Path = tmp_path_factory.mktemp("filter") / "ds"
    return lance.write_dataset(TABLE, path)


def _ours(sql: str) -> list[int]:
    result = TABLE_WITH_ROWIDS.filter(compile_filter(sql, SCHEMA))
    return sorted(result["id"].to_pylist())


def _pylance(ds: lance.LanceDataset, sql: str) -> list[int]:
    return sorted(ds.to_table(filter=sql, columns=["id"])["id"].to_pylist())


MATCHING = [
    # comparisons and literal typing
    "i = 1",
    "i == 1",
    "i <> 1",
    "i != 1",
    "1 < i",
    "-5 < i",
    "i >= -2 AND i <= 2",
    "u8 = 9",
    "u8 > 200",
    "f = 1",
    "f > -1",
    "f > .5",
    "f <= 1e0",
    "i32 = f",
    "i > i32",
    "i = 1 + 1",
    "i = -(1)",
    "(i) = 1",
    "i = NULL",
    "i > NULL",
    # identifiers: case-insensitive top level, backticks, double quotes are strings
    "ID = 3",
    "`Upper Col` = 1",
    "`ST`.x > 20",
    's = "apple"',
    "\"s\" = 'apple'",
    "'apple' = s",
    "s = 'it''s'",
    "s = ''",
    # arithmetic: truncating integer division, remainder keeps the dividend's sign
    "i / 2 = 1",
    "i / 2 = -2",
    "i32 / 3 = -2",
    "i % 3 = -1",
    "id % 7 = 0",
    "f % 1 = 0.5",
    "f % 0 > 0",
    "f / 0 > 1",
    "-i > 3",
    "-f = 2.75",
    "i + 1.5 > 2",
    "i * 2 + 1 = 3",
    "i - i32 > 0",
    # boolean logic with NULLs
    "b",
    "NOT b",
    "b = true",
    "b IS TRUE",
    "b IS FALSE",
    "b IS NOT TRUE",
    "b IS NOT FALSE",
    "(i > 0) IS NOT TRUE",
    "id = 1 OR NULL",
    "NOT NULL",
    "true",
    "NOT (i = 1)",
    "NOT (s = 'apple' OR i IS NULL)",
    "f IS NULL OR f < 0",
    "NOT b AND NOT (i IS NULL)",
    "id = 1 AND (i > 0 OR i < 0)",
    "i IS NULL",
    "i IS NOT NULL",
    "i IS DISTINCT FROM 1",
    "i IS NOT DISTINCT FROM NULL",
    "is_valid(i)",
    # IN / BETWEEN
    "i IN (1, 2, NULL)",
    "i NOT IN (1, 2)",
    "i NOT IN (1, NULL)",
    "NOT i IN (1, 2)",
    "u8 IN (9, 18, 255)",
    "st.x IN (1.5, 2)",
    "i IN (i32, 3)",
    "lower(s) IN ('apple', 'banana')",
    "i BETWEEN 1 AND 3",
    "i NOT BETWEEN 1 AND 3",
    "i BETWEEN i32 AND 3",
    "id BETWEEN 3 AND 1",
    "length(s) BETWEEN 1 AND 4",
    # strings
    "s LIKE 'a%'",
    "s LIKE 'a_b'",
    "s LIKE 'a\\_b'",
    "s LIKE 'a\\%b'",
    "s NOT LIKE '%e%'",
    "s ILIKE 'a%'",
    "s NOT ILIKE 'A%'",
    "s LIKE 'a%' ESCAPE '\\'",
    "lower(s) = 'apple'",
    "upper(s) LIKE 'APP%'",
    "s || 'x' = 'applex'",
    "length(s) = 5",
    "char_length(s) = 5",
    "starts_with(s, 'a')",
    "ends_with(s, 'e')",
    "contains(s, 'an')",
    "regexp_like(s, '^a')",
    # dates, timestamps, casts
    "d > date '2024-03-01'",
    "d = date '2024-01-06'",
    "d < timestamp '2024-01-20 12:00:00'",
    "d IN (date '2024-01-06', date '2024-01-11')",
    "d BETWEEN date '2024-01-06' AND date '2024-02-01'",
    "ts > timestamp '2024-01-05 00:00:00'",
    "ts >= timestamp '2024-01-05'",
    "ts > timestamp '2024-01-05T10:00:00'",
    "ts > timestamp '2024-01-05 10:00:00Z'",
    "ts > timestamp '2024-01-05 11:00:00+02:00'",
    "ts > date '2024-01-05'",
    "ts IN (timestamp '2024-01-01 13:00:00')",
    "CAST(i AS string) = '1'",
    "CAST(f AS int) = 1",
    "CAST(i AS bigint) = 1",
    "CAST(i AS float) = 1",
    "cast(id as double) > 28.5",
    "CAST(d AS timestamp) > timestamp '2024-03-01'",
    "CAST('2024-03-01' AS date) < d",
    "abs(i) = 5",
    # nested struct fields (a NULL parent makes the child NULL)
    "st.x > 20",
    "st.y.z = 'z1'",
    "st['x'] > 20",
    "st.x IS NULL",
    "st IS NULL",
    "st.y.z IS NULL",
    "upper(st.y.z) = 'Z1'",
    # virtual row id columns
    "_rowid < 3",
    "_rowaddr >= 38",
    "_rowid IN (1, 2)",
]


@pytest.mark.parametrize("sql", MATCHING)
def test_matches_pylance(dataset: lance.LanceDataset, sql: str) -> None:
    expected = _pylance(dataset, sql)
    assert _ours(sql) == expected


def test_matching_filters_are_selective(dataset: lance.LanceDataset) -> None:
    """Guard against a vacuous suite: most filters keep some rows and drop others."""
    partial = [sql for sql in MATCHING if 0 < len(_pylance(dataset, sql)) < N]
    assert len(partial) > 0.8 * len(MATCHING)


# Filters that pylance rejects; we must reject them too, with InvalidInputError.
BOTH_REJECT = [
    "i > 1.5",  # float literal compared with an int column
    "i = 1.0",
    "i32 = 1000000000000",  # does not fit the column type
    "u8 > -1",
    "u8 = 300",
    "u8 > 1 + 0.5",
    "i = 9223372036854775808",
    "i = '1'",
    "s = 1",
    "i IN ('1', 2)",
    "i IN (1.5)",
    "i BETWEEN 1.5 AND 3",
    "d > '2024-03-01'",  # string literal is not a date
    "ts > '2024-01-05'",
    "d > date '2024-13-01'",
    "unknown_col = 1",
    "UPPER_COL = 1",
    "`upper col` = 1",  # backticks are exact
    "`st.x` > 20",
    "ST.X > 20",  # nested names are case sensitive
    "st.y = 'x'",
    "i.x = 1",
    "NULL",
    "1",
    "i",
    "s LIKE 'a%' ESCAPE '!'",
    "CAST(s AS varchar) = 'apple'",
    "i =",
    "i = 1 AND",
    "foo(i) = 1",
    "i IN (SELECT 1)",
    "",
    "   ",
]


@pytest.mark.parametrize("sql", BOTH_REJECT)
def test_rejects_like_pylance(dataset: lance.LanceDataset, sql: str) -> None:
    with pytest.raises((ValueError, OSError)):
        dataset.to_table(filter=sql)
    with pytest.raises(InvalidInputError):
        compile_filter(sql, SCHEMA)


# Differences from pylance, kept on purpose (see module docstring of alance.filter).
WE_REJECT_ONLY = [
    "i = 1 i = 2",  # pylance silently ignores the trailing text
    "i = 1; i = 2",
    "i = 1 x",
    "s LIKE s",  # pattern must be a literal for Arrow's match_like
    "TRY_CAST(s AS int) > 0",
]


@pytest.mark.parametrize("sql", WE_REJECT_ONLY)
def test_rejects_beyond_pylance(sql: str) -> None:
    with pytest.raises(InvalidInputError):
        compile_filter(sql, SCHEMA)


def test_error_messages_are_clear() -> None:
    with pytest.raises(InvalidInputError, match="No field named nope"):
        compile_filter("nope = 1", SCHEMA)
    with pytest.raises(InvalidInputError, match="cannot be converted"):
        compile_filter("u8 = 300", SCHEMA)
    with pytest.raises(InvalidInputError, match="cannot parse"):
        compile_filter("i = = 1", SCHEMA)
    with pytest.raises(InvalidInputError, match="does not return a boolean"):
        compile_filter("i + 1", SCHEMA)
    with pytest.raises(InvalidInputError, match="unsupported"):
        compile_filter("frobnicate(i)", SCHEMA)


def test_integer_division_by_zero_fails_at_execution(dataset: lance.LanceDataset) -> None:
    expr = compile_filter("i / 0 > 1", SCHEMA)  # compiles: the failure is data dependent
    with pytest.raises(pa.ArrowInvalid):
        TABLE.filter(expr)
    with pytest.raises((ValueError, OSError)):
        dataset.to_table(filter="i / 0 > 1")


def test_literals_take_the_column_type() -> None:
    """A literal compared with a column is converted to that column's type, not the reverse."""
    schema = pa.schema([pa.field("x", pa.uint8()), pa.field("y", pa.float32())])
    table = pa.table({"x": pa.array([7, 8], pa.uint8()), "y": pa.array([0.1, 0.5], pa.float32())})
    assert table.filter(compile_filter("x = 7", schema))["x"].to_pylist() == [7]
    # 0.1 as float32 equals the float32 column value 0.1; as float64 it would not
    assert table.filter(compile_filter("y = 0.1", schema))["y"].to_pylist() == [pytest.approx(0.1)]
    with pytest.raises(InvalidInputError):
        compile_filter("x = 256", schema)


def test_large_in_list() -> None:
    values = ", ".join(str(v) for v in range(0, 10_000, 3))
    expr = compile_filter(f"id IN ({values})", SCHEMA)
    assert TABLE.filter(expr)["id"].to_pylist() == list(range(0, N, 3))


def test_filter_columns() -> None:
    assert filter_columns("i > 1 AND s LIKE 'a%'", SCHEMA) == ["i", "s"]
    assert filter_columns("st.y.z = 'a' OR f IS NULL", SCHEMA) == ["f", "st"]
    assert filter_columns("ID = 3 AND `Upper Col` = 1", SCHEMA) == ["id", "Upper Col"]
    assert filter_columns("_rowid < 3 AND b", SCHEMA) == ["b", "_rowid"]
    assert filter_columns("true", SCHEMA) == []
    expr, columns = compile_filter_and_columns("st.x > 20 AND i IS NULL", SCHEMA)
    assert columns == ["i", "st"]
    assert TABLE.filter(expr)["id"].to_pylist() == [25, 30, 35]
    with pytest.raises(InvalidInputError):
        filter_columns("missing = 1", SCHEMA)


def test_extra_columns() -> None:
    with pytest.raises(InvalidInputError):
        compile_filter("_rowid < 3", SCHEMA, extra_columns=())
    expr = compile_filter("_rowoffset < 3", SCHEMA, extra_columns=["_rowoffset"])
    table = TABLE.append_column("_rowoffset", pa.array(range(N), pa.uint64()))
    assert table.filter(expr)["id"].to_pylist() == [0, 1, 2]


def test_as_expression() -> None:
    ready = pc.field("i") > 2
    assert as_expression(ready, SCHEMA) is ready
    assert as_expression(None, SCHEMA) is None
    compiled = as_expression("i > 2", SCHEMA)
    assert isinstance(compiled, pc.Expression)
    assert TABLE.filter(compiled).equals(TABLE.filter(ready))
    with pytest.raises(InvalidInputError):
        as_expression(42, SCHEMA)  # type: ignore[arg-type]


def _make_other_types() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(5), pa.int64()),
            "f32": pa.array([0.1, 0.5, None, 2.5, -1.0], pa.float32()),
            "ls": pa.array(["a", "b", None, "a", "ab"], pa.large_string()),
            "tn": pa.array(
                [dt.datetime(2024, 1, k + 1) for k in range(4)] + [None], pa.timestamp("ns")
            ),
            "tz": pa.array(
                [dt.datetime(2024, 1, k + 1) for k in range(5)], pa.timestamp("us", "UTC")
            ),
            "dec": pa.array(
                [Decimal("1.50"), Decimal("0.25"), None, Decimal("3.00"), Decimal("-2")],
                pa.decimal128(10, 2),
            ),
            "dict": pa.array(["x", "y", "x", None, "xy"]).dictionary_encode(),
            "bin": pa.array([b"ab", b"c", None, b"", b"ab"], pa.binary()),
            "i16": pa.array([1, -2, 3, None, 300], pa.int16()),
        }
    )


OTHER = _make_other_types()
OTHER_MATCHING = [
    "f32 = 0.1",  # the literal becomes float32, so this matches
    "f32 > 0.3",
    "f32 > 1",
    "ls = 'a'",
    "ls LIKE 'a%'",
    "tn > timestamp '2024-01-02 00:00:00'",
    "tn >= timestamp(9) '2024-01-02 00:00:00.000000001'",
    "tz > timestamp '2024-01-02 00:00:00'",
    "tz > timestamp '2024-01-02 00:00:00Z'",
    "tz > date '2024-01-02'",
    "tz IN (timestamp '2024-01-02 00:00:00')",
    "dec > 1",
    "dec = 3",
    "dec IN (3, 1)",
    "dec BETWEEN -2 AND 2",
    "dict = 'x'",
    "dict IN ('x', NULL)",
    "dict > 'w'",
    "NOT (dict = 'x')",
    "lower(dict) = 'x'",
    "dict LIKE 'x%'",
    "i16 = 1",
    "i16 IN (1, 3)",
    "i16 * 1000 > 1000",  # widened to int64 like Lance, no int16 overflow
    "i16 + f32 > 3",
    "f32 * 1.5 > 0.7",
]


@pytest.fixture(scope="module")
def other_dataset(tmp_path_factory: pytest.TempPathFactory) -> lance.LanceDataset:
    return lance.write_dataset(OTHER, tmp_path_factory.mktemp("other") / "ds")


@pytest.mark.parametrize("sql", OTHER_MATCHING)
def test_other_types_match_pylance(other_dataset: lance.LanceDataset, sql: str) -> None:
    expected = sorted(other_dataset.to_table(filter=sql)["id"].to_pylist())
    got = sorted(OTHER.filter(compile_filter(sql, OTHER.schema))["id"].to_pylist())
    assert got == expected


@pytest.mark.parametrize("sql", ["dec > 1.5", "dec > 99999999999", "i16 = 40000", "bin = 'ab'"])
def test_other_types_reject_like_pylance(other_dataset: lance.LanceDataset, sql: str) -> None:
    with pytest.raises((ValueError, OSError)):
        other_dataset.to_table(filter=sql)
    with pytest.raises(InvalidInputError):
        compile_filter(sql, OTHER.schema)


async def test_error_messages_suggest_names_and_carry_no_terminal_codes(tmp_path) -> None:
    import alance
    from alance.errors import InvalidInputError

    ds = await alance.write_dataset(pa.table({"score": [1, 2], "name": ["a", "b"]}),
                                    str(tmp_path / "msg"))
    with pytest.raises(InvalidInputError, match=r"No field named scor\. Did you mean 'score'"):
        await ds.to_table(filter="scor > 1")
    with pytest.raises(InvalidInputError, match=r"Did you mean 'name'"):
        await ds.to_table(columns=["nmae"])
    with pytest.raises(InvalidInputError) as info:
        await ds.to_table(filter="score = = 1")
    assert "\x1b" not in str(info.value) and "cannot parse filter" in str(info.value)


def test_arrow_cast_names_arrow_types(tmp_path: Path) -> None:
    from alance import sync
    from alance.filter._arrow_types import arrow_type_named
    assert arrow_type_named("FixedSizeList(8, Float32)") == pa.list_(pa.float32(), 8)
    assert arrow_type_named("Timestamp(Nanosecond, Some(\"UTC\"))") == pa.timestamp("ns", "UTC")
    assert arrow_type_named("List(LargeUtf8)") == pa.list_(pa.large_string())
    with pytest.raises(InvalidInputError, match="unknown Arrow type"):
        arrow_type_named("Int33")
    ds = sync.write_dataset(pa.table({"id": range(5)}), str(tmp_path / "ds"))
    ds.add_columns({"vec": "arrow_cast(NULL, 'FixedSizeList(4, Float32)')",
                    "small": "arrow_cast(id, 'Int8')"})
    assert ds.schema.field("vec").type == pa.list_(pa.float32(), 4)
    assert ds.schema.field("small").type == pa.int8()
    got = ds.to_table(filter="arrow_cast(id, 'Utf8') = '3'")
    assert got.to_pydict() == {"id": [3], "vec": [None], "small": [3]}
    with pytest.raises(InvalidInputError, match="string literal"):
        ds.to_table(filter="arrow_cast(id, id) = 1")


@pytest.mark.parametrize("fmt", ["2.1", "2.0"])
def test_list_membership_regexp_and_current_date(tmp_path: Path, fmt: str) -> None:
    """pylance's filter functions: array_has_any / array_has_all / array_contains,
    regexp_match / regexp_like and current_date, with pylance's results."""
    import datetime

    import lance

    from alance import sync
    genres = [["action", "comedy"], ["anime", "drama"], ["adventure"], None, [], ["anime"]]
    table = pa.table({
        "genres": pa.array(genres * 50, pa.list_(pa.string())),
        "s": [f"{w}{i}" for i in range(50) for w in ("aaa", "cab", "cba", "bbb", "xyz", "c")],
        "d": pa.array([datetime.date(2020, 1, 1)] * 300, pa.date32()),
    })
    uri = str(tmp_path / "ds")
    ds = sync.write_dataset(table, uri, max_rows_per_file=70, data_storage_version=fmt)
    for sql in ["array_has_any(genres, ['anime', 'adventure'])",
                "array_contains(genres, 'comedy')",
                "array_has_all(genres, ['anime', 'drama'])",
                "NOT array_has_any(genres, ['anime'])",
                "regexp_match(s, '^c.+1')",
                "regexp_like(s, 'b{3}')",
                "d <= current_date() AND array_has(genres, 'anime')"]:
        ours = ds.to_table(filter=sql)
        assert ours.equals(lance.dataset(uri).to_table(filter=sql)), sql
        assert ds.count_rows(sql) == ours.num_rows
    with pytest.raises(InvalidInputError, match="list"):
        ds.to_table(filter="array_has_any(s, ['a'])")
    with pytest.raises(InvalidInputError, match="regular expression"):
        ds.to_table(filter="regexp_match(s, '(')")
