"""Projections beyond top-level columns, compared with pylance on the same datasets.

``columns`` as ``{name: SQL expression}``, struct field paths (``"s.x"``) and the
``_rowoffset`` system column, in scans and in takes (by position and by row id), through
the async API and the blocking facade.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import InvalidInputError


def _table() -> pa.Table:
    n = 40
    schema = pa.schema([
        pa.field("id", pa.int64(), False),
        pa.field("name", pa.string()),
        pa.field("maybe", pa.int32()),
        pa.field("pt", pa.struct([pa.field("x", pa.int64(), False), pa.field("y", pa.float64()),
                                  pa.field("deep", pa.struct([pa.field("z", pa.string())]))]),
                 False),
        pa.field("opt", pa.struct([pa.field("w", pa.int16(), False)])),
        pa.field("tags", pa.list_(pa.struct([pa.field("k", pa.string()),
                                             pa.field("v", pa.int32())]))),
        pa.field("nums", pa.list_(pa.int64())),
        pa.field("half", pa.float16()),
    ])
    return pa.table({
        "id": range(n),
        "name": [f"n{i}" if i % 5 else None for i in range(n)],
        "maybe": [i * 3 if i % 4 else None for i in range(n)],
        "pt": [{"x": i, "y": i / 2 if i % 3 else None, "deep": {"z": f"z{i}"}}
               for i in range(n)],
        "opt": [{"w": i} if i % 6 else None for i in range(n)],
        "tags": [[{"k": f"k{i}", "v": i}, {"k": "second", "v": -i}][: i % 3] if i % 7 else None
                 for i in range(n)],
        "nums": [list(range(i % 4)) for i in range(n)],
        "half": pa.array(np.arange(n, dtype=np.float16)),
    }, schema=schema)


@pytest.fixture(scope="module", params=["2.1", "legacy"])
def path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A dataset of several fragments with deleted rows, written by pylance."""
    uri = str(tmp_path_factory.mktemp("projection") / "ds.lance")
    lance.write_dataset(_table(), uri, max_rows_per_file=12,
                        data_storage_version=request.param)
    lance.dataset(uri).delete("id IN (1, 2, 13, 30, 31, 32)")
    return uri


def _result(fn: Any) -> Any:
    """A table as comparable values, or the class of the error raised."""
    try:
        table = fn()
    except (ValueError, OSError, TypeError) as exc:
        return type(exc)
    return table.schema, table.to_pydict()


def _same(path: str, call: Any) -> pa.Table:
    """``call(ds)`` gives the same table on pylance and alance.sync; returns alance's."""
    expected = _result(lambda: call(lance.dataset(path)))
    got = _result(lambda: call(al.open_dataset(path)))
    assert got == expected
    out: pa.Table = call(al.open_dataset(path))
    return out


SCANS: list[tuple[Any, dict[str, Any]]] = [
    ({"id10": "id * 10", "name": "name"}, {}),
    ({"id": "id + 1"}, {}),  # an existing name for a computed column
    ({"big": "id > 20", "up": "upper(name)", "f": "CAST(id AS float)"}, {}),
    ({"sum": "id + maybe", "null": "maybe IS NULL", "inlist": "id IN (3, 4, 5)"}, {}),
    ({"x": "pt.x", "z": "pt.deep.z", "y2": "pt.y * 2", "w": "opt.w"}, {}),
    ({"pt": "pt", "opt": "opt"}, {}),
    ({"first": "tags[1]['k']", "second": "tags[2].v", "n1": "nums[1]", "n3": "nums[3]"}, {}),
    ({"h": "half", "one": "1", "s": "'text'", "name": "name"}, {}),
    ({"a": "id * 2"}, {"filter": "maybe > 20"}),
    ({"a": "id * 2", "n": "name"}, {"filter": "id > 5", "limit": 4, "offset": 3}),
    ({"a": "id * 2"}, {"limit": 5, "offset": 17}),
    ({"a": "name"}, {"filter": "pt.x < 10"}),
    ({"r": "_rowid", "o": "_rowoffset", "a": "_rowaddr"}, {}),
    ({"v": "id"}, {"with_row_id": True, "with_row_address": True}),
    ({"_rowid": "_rowid"}, {"with_row_id": True}),
    (["pt.x", "id", "pt.deep.z"], {}),
    (["pt.deep", "opt.w", "pt.y"], {}),
    (["pt", "pt.x"], {}),
    (["pt.y", "name"], {"filter": "pt.x > 7 AND id < 30"}),
    (["pt.y"], {"filter": "name IS NOT NULL", "limit": 3}),
    (["id", "_rowoffset"], {}),
    (["_rowoffset"], {"filter": "id >= 10"}),
    (["_rowoffset", "id"], {"filter": "id > 3", "limit": 5, "offset": 2}),
    (["_rowid", "_rowaddr", "_rowoffset"], {"limit": 7, "offset": 9}),
    (["_rowoffset", "_rowid", "_rowaddr"], {}),
    (["_rowid"], {"with_row_id": True}),
    (["id"], {"with_row_address": True, "with_row_id": True}),
]


@pytest.mark.parametrize(("columns", "kwargs"), SCANS, ids=[str(i) for i in range(len(SCANS))])
async def test_scans_match_pylance(path: str, columns: Any, kwargs: dict[str, Any]) -> None:
    table = _same(path, lambda ds: ds.to_table(columns=columns, **kwargs))
    ds = await alance.open_dataset(path)
    assert await ds.to_table(columns=columns, **kwargs) == table
    scanner = ds.scanner(columns, **kwargs)
    assert scanner.output_schema == table.schema
    batches = [b async for b in ds.to_batches(columns, batch_size=4, **kwargs)]
    assert all(b.num_rows <= 4 for b in batches)
    assert pa.Table.from_batches(batches, schema=table.schema) == table


def test_row_offset_is_the_dataset_position(path: str) -> None:
    ds = al.open_dataset(path)
    full = ds.to_table(columns=["id", "_rowoffset"])
    assert full.schema.field("_rowoffset").type == pa.uint64()
    assert full["_rowoffset"].to_pylist() == list(range(ds.count_rows()))
    # Unchanged by filters, limits and offsets: the index take() accepts.
    some = ds.to_table(columns=["_rowoffset", "id"], filter="id % 3 = 0", limit=4, offset=1)
    assert ds.take(some["_rowoffset"].to_pylist(), columns=["id"])["id"] == some["id"]
    # A scan of some fragments still gives dataset positions.
    fragment = ds.get_fragments()[1]
    part = ds.scanner(["id", "_rowoffset"], fragments=[fragment]).to_table()
    assert part == full.filter(pa.compute.is_in(full["id"], part["id"]))
    pylance_part = lance.dataset(path).scanner(
        columns=["id", "_rowoffset"],
        fragments=[lance.dataset(path).get_fragments()[1]]).to_table()
    assert part == pylance_part


def test_row_offset_is_not_a_filter_column(path: str) -> None:
    with pytest.raises(ValueError):
        lance.dataset(path).to_table(filter="_rowoffset > 3")
    with pytest.raises(InvalidInputError, match="_rowoffset"):
        al.open_dataset(path).to_table(filter="_rowoffset > 3")


TAKES: list[Any] = [
    {"id2": "id * 2", "up": "UPPER(name)"},
    {"o": "_rowoffset", "x": "pt.x + 1", "r": "_rowid"},
    {"x": "pt.deep.z", "t": "tags[1].v"},
    ["pt.x"],
    ["pt.y", "id", "pt.x"],
    ["pt.deep.z", "opt.w"],
    ["pt.x", "name", "pt"],
    ["id", "id", "pt.y"],
    ["id", "_rowoffset"],
    ["_rowid", "name", "_rowaddr", "_rowoffset"],
    ["_rowoffset"],
    ["_rowid", "id", "_rowid", "_rowoffset", "_rowoffset", "id"],  # system columns repeat
    ["_rowaddr", "_rowaddr"],
]


@pytest.mark.parametrize("columns", TAKES, ids=[str(i) for i in range(len(TAKES))])
async def test_takes_match_pylance(path: str, columns: Any) -> None:
    indices = [20, 0, 5, 5, 33]
    table = _same(path, lambda ds: ds.take(indices, columns=columns))
    ds = await alance.open_dataset(path)
    assert await ds.take(indices, columns) == table
    assert await ds.take(pa.array(indices), columns) == table
    # The same rows by row id (pylance's _take_rows; alance's take_rows).
    ids = (await ds.to_table(columns=["_rowid"]))["_rowid"].take(pa.array(indices))
    by_id = _same(path, lambda ds: ds._take_rows(ids.to_pylist(), columns=columns))
    assert by_id == table
    assert await ds.take_rows(ids, columns) == table
    assert al.open_dataset(path).take_rows(ids, columns) == table


async def test_take_without_rows(path: str) -> None:
    table = _same(path, lambda ds: ds.take([], columns={"x": "id * 2"}))
    assert table.num_rows == 0
    ds = await alance.open_dataset(path)
    assert (await ds.take([], ["pt.x", "_rowoffset"])).column_names == ["pt", "_rowoffset"]


async def test_constants_only(path: str) -> None:
    # pylance refuses a scan of constants alone; alance gives one value per row.
    ds = await alance.open_dataset(path)
    rows = await ds.count_rows()
    assert (await ds.to_table(columns={})).num_rows == rows  # (pylance: on 2.x files only)
    table = await ds.to_table(columns={"one": "1", "s": "'x'"})
    assert table.to_pydict() == {"one": [1] * rows, "s": ["x"] * rows}
    assert table.schema.field("one").nullable is False
    assert (await ds.take([3, 4], {"one": "1"}))["one"].to_pylist() == [1, 1]
    ids = (await ds.to_table(columns=["_rowid"], limit=2))["_rowid"]
    assert (await ds.take_rows(ids, {"one": "1"})).num_rows == 2


BAD: list[Any] = [
    ["nope"],
    ["pt.nope"],
    ["id.x"],
    ["pt.x", "pt.x"],
    ["id", "id"],
    {"x": "id +"},
    {"x": "nope + 1"},
    {"x": "pt.nope"},
    {"x": "id[1]"},
]


@pytest.mark.parametrize("columns", BAD, ids=[str(i) for i in range(len(BAD))])
async def test_bad_projections(path: str, columns: Any) -> None:
    with pytest.raises(ValueError):
        lance.dataset(path).to_table(columns=columns)
    with pytest.raises(InvalidInputError):
        al.open_dataset(path).to_table(columns=columns)
    ds = await alance.open_dataset(path)
    with pytest.raises(InvalidInputError):
        ds.scanner(columns)


async def test_error_messages(path: str) -> None:
    ds = await alance.open_dataset(path)
    with pytest.raises(InvalidInputError, match=r"No field named pt\.nope"):
        await ds.to_table(columns=["pt.nope"])
    with pytest.raises(InvalidInputError, match=r"'x' as 'id \+'.*cannot parse"):
        await ds.to_table(columns={"x": "id +"})
    with pytest.raises(InvalidInputError, match="No field named nope"):
        await ds.take([0], {"x": "nope * 2"})
    with pytest.raises(InvalidInputError, match="constant positive"):
        await ds.to_table(columns={"x": "nums[-1]"})
    with pytest.raises(InvalidInputError, match=r"\(str\)"):
        await ds.to_table(columns={"x": 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="strings"):
        await ds.to_table(columns=[1])  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="out of range"):
        await ds.take([10_000], {"x": "id"})


async def test_paths_read_only_the_fields_they_name(path: str) -> None:
    ds = await alance.open_dataset(path)
    scan = ds.scanner(["pt.x", "pt.deep.z"])
    [pt] = scan.read_fields
    assert pt.to_arrow().type == pa.struct([pa.field("x", pa.int64(), False),
                                            pa.field("deep", pa.struct([("z", pa.string())]))])
    # A filter on the struct reads it whole (and the projection still picks the fields).
    scan = ds.scanner(["pt.x"], filter="pt.y > 3")
    assert [f.to_arrow().type for f in scan.read_fields] == [ds.schema.field("pt").type]
    expected = lance.dataset(path).to_table(columns=["pt.x"], filter="pt.y > 3")
    assert await scan.to_table() == expected
    # Expressions read only the columns they use.
    assert [f.name for f in ds.scanner({"a": "id * 2", "b": "maybe"}).read_fields] == [
        "id", "maybe"]


def test_list_index_in_filters(path: str) -> None:
    for where in ["nums[2] = 1", "tags[1]['k'] = 'k4'", "tags[2].v < -3", "nums[0] IS NULL"]:
        _same(path, lambda ds, where=where: ds.to_table(columns=["id"], filter=where))


def test_plain_lists_keep_the_direct_path(path: str) -> None:
    ds = al.open_dataset(path)
    scanner = ds.scanner(["name", "id", "_rowid"])
    assert scanner._async._final is None
    assert ds.scanner({"name": "name"})._async._final is not None


def test_add_columns_from_projected_scans(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    base = pa.table({"a": range(30), "b": range(30)})
    ds = al.write_dataset(base, uri, max_rows_per_file=10)
    doubled = [ds.to_table(columns={"double_b": "b * 2"}, limit=15),
               ds.to_table(columns={"double_b": "b * 2"}, offset=15, limit=15)]
    ds.add_columns(pa.concat_tables(doubled))
    assert ds.to_table() == base.append_column("double_b", pa.array(range(0, 60, 2)))
    assert lance.dataset(uri).to_table() == ds.to_table()
