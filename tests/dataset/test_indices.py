"""Scalar indices: reading pylance-built ones, building ones pylance uses
(alance.dataset.query.indices, alance.dataset.maintenance.index_build)."""

from __future__ import annotations

import asyncio
import re
import warnings
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.query.indices.rowaddr import (
    decode_row_addr_map,
    encode_row_addr_map,
    map_of_addresses,
)
from alance.errors import AlreadyExistsError, IndexNotFoundError, InvalidInputError
from alance.io.store import counting_io

N = 12_000

FILTERS = [
    "v = 5",
    "v < 40 AND v >= 20",
    "v > 990",
    "v IS NULL",
    "v IS NOT NULL AND v < 3",
    "v IN (3, 998, 500)",
    "cat = 'c3'",
    "cat IS NULL",
    "cat IN ('c1', 'c5')",
    "cat > 'c4'",
    "v = 7 OR cat = 'c2'",
    "v < 100 AND cat = 'c6' AND id % 2 = 0",
    "v = 123456",
]


def _table(n: int = N, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    v = pa.array([None if i % 17 == 0 else int((i * 31) % 997) for i in ids], pa.int32())
    cat = pa.array([None if i % 13 == 0 else f"c{i % 7}" for i in ids])
    return pa.table({"id": pa.array(ids, pa.int64()), "v": v, "cat": cat})


def _pylance_quiet() -> None:
    warnings.simplefilter("ignore", DeprecationWarning)


@pytest.fixture
def indexed(tmp_path: Path) -> str:
    """pylance-built BTREE on v and BITMAP on cat; then deletions and an unindexed append."""
    uri = str(tmp_path / "indexed")
    ds = lance.write_dataset(_table(), uri, max_rows_per_file=4000)
    ds.create_scalar_index("v", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.delete("id % 5 = 1")
    lance.write_dataset(_table(3000, start=N), uri, mode="append")
    return uri


def _check_same(uri: str, sql: str) -> pa.Table:
    ours = al.dataset(uri).to_table(filter=sql)
    theirs = lance.dataset(uri).to_table(filter=sql)
    plain = al.dataset(uri).scanner(filter=sql, use_scalar_index=False).to_table()
    assert ours.equals(theirs), sql
    assert ours.equals(plain), sql
    return ours


@pytest.mark.parametrize("sql", FILTERS)
def test_pylance_built_indices_answer_filters(indexed: str, sql: str) -> None:
    _check_same(indexed, sql)


def test_explain_names_the_index(indexed: str) -> None:
    ds = al.dataset(indexed)
    assert "@v_idx(BTree)" in ds.scanner(filter="v = 5").explain()
    assert "@cat_idx(Bitmap)" in ds.scanner(filter="cat IS NULL").explain()
    text = ds.scanner(filter="v = 7 OR cat = 'c2'").explain()
    assert "OR(" in text and "v_idx" in text and "cat_idx" in text
    assert "scalar index" not in ds.scanner(filter="id = 5").explain()
    assert "scalar index" not in ds.scanner(filter="v = 5", use_scalar_index=False).explain()
    plan = ds.scanner(filter="v = 5").explain_plan(True)
    assert "ScalarIndexQuery: query=[v = 5]@v_idx(BTree)" in plan
    assert "ScalarIndexQuery" not in ds.scanner(filter="v = 5",
                                                use_scalar_index=False).explain_plan(True)
    analyzed = ds.scanner(filter="v = 5").analyze_plan()
    assert "ScalarIndexQuery" in analyzed and "rows_scanned=" in analyzed


def test_index_narrows_what_is_read(indexed: str) -> None:
    """Covered fragments are read only at the rows the index selects; the appended fragment
    (not covered) is scanned whole."""
    ds = al.dataset(indexed)
    scan = ds.scanner(filter="v = 5")
    assert scan.to_table().num_rows > 0
    appended = 3000
    assert scan.stats.rows_scanned < appended + 100
    full = ds.scanner(filter="v = 5", use_scalar_index=False)
    full.to_table()
    assert full.stats.rows_scanned == N * 4 // 5 + appended


def _pylance_bytes_read(plan: str) -> float:
    """Sum of the ``bytes_read=`` figures of pylance's analyze_plan text."""
    units = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9}
    return sum(float(n) * units[u] for n, u in re.findall(r"bytes_read=([\d.]+)\s*([KMG]?)",
                                                          plan))


def test_indexed_point_lookup_reads_about_what_pylance_reads(tmp_path: Path) -> None:
    """A BTREE-narrowed lookup of a few rows spread over the files fetches their chunks only:
    no megabytes of gaps between them, no oversized file tails (issue target: at most 1.2x
    pylance's bytes)."""
    rng = np.random.default_rng(0)
    n = 200_000
    uri = str(tmp_path / "lookup")
    table = pa.table({"id": pa.array(np.arange(n)),
                      "v": pa.array(rng.integers(0, 10_000, n).astype(np.int32)),
                      "payload": pa.array([f"{i:060d}" for i in range(n)])})
    lance.write_dataset(table, uri, max_rows_per_file=n // 4).create_scalar_index("v", "BTREE")
    sql = "v = 4242"
    theirs = lance.dataset(uri).to_table(filter=sql)
    plan = lance.dataset(uri).scanner(filter=sql).analyze_plan()

    async def ours() -> tuple[pa.Table, int]:
        ds = await alance.open_dataset(uri)
        await ds.to_table(filter="v = 1")  # files opened (pylance's figure has no footers)
        with counting_io() as io:
            got = await ds.to_table(filter=sql)
        return got, io.bytes_read

    got, read = asyncio.run(ours())
    assert got.equals(theirs) and got.num_rows > 0
    assert read <= 1.2 * _pylance_bytes_read(plan), (read, plan)


def test_limit_offset_count_and_projection(indexed: str) -> None:
    ds, pl = al.dataset(indexed), lance.dataset(indexed)
    sql = "cat = 'c3'"
    assert ds.count_rows(sql) == pl.count_rows(sql)
    ours = ds.to_table(columns=["id"], filter=sql, limit=7, offset=11)
    assert ours.equals(pl.to_table(columns=["id"], filter=sql, limit=7, offset=11))
    with_ids = ds.to_table(columns=["v"], filter="v = 9", with_row_id=True)
    assert with_ids.equals(pl.to_table(columns=["v"], filter="v = 9", with_row_id=True))


def test_async_api(indexed: str) -> None:
    async def main() -> tuple[pa.Table, list[dict], dict]:
        ds = await alance.open_dataset(indexed)
        table = await ds.to_table(filter="v < 10")
        return table, ds.list_indices(), await ds.index_statistics("v_idx")

    table, listed, stats = asyncio.run(main())
    assert table.equals(lance.dataset(indexed).to_table(filter="v < 10"))
    assert {e["name"] for e in listed} == {"v_idx", "cat_idx"}
    assert stats["num_unindexed_fragments"] == 1


def test_stable_row_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "stable")
    ds = lance.write_dataset(_table(5000), uri, max_rows_per_file=2000,
                             enable_stable_row_ids=True)
    ds.delete("id % 3 = 0")
    ds.create_scalar_index("v", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.update({"v": "v + 1"}, where="id < 100")  # moves rows: the index keeps stale entries
    for sql in ("v = 5", "v < 50", "cat = 'c1'", "cat IS NULL"):
        _check_same(uri, sql)


def test_describe_and_stats_match_pylance(tmp_path: Path) -> None:
    _pylance_quiet()
    uri = str(tmp_path / "described")
    table = _table(5000).append_column(
        "tags", pa.array([[f"t{i % 3}", f"u{i % 5}"] for i in range(5000)]))
    table = table.append_column("x", pa.array(np.random.default_rng(0).random(5000)))
    ds = lance.write_dataset(table, uri, max_rows_per_file=2000)
    for column, kind in (("v", "BTREE"), ("cat", "BITMAP"), ("tags", "LABEL_LIST"),
                         ("x", "ZONEMAP")):
        ds.create_scalar_index(column, kind)
    lance.write_dataset(table.slice(0, 100), uri, mode="append")
    ours, theirs = al.dataset(uri), lance.dataset(uri)
    assert ours.list_indices() == [
        {**e, "fragment_ids": set(e["fragment_ids"])} for e in theirs.list_indices()]
    assert [repr(d) for d in ours.describe_indices()] == [
        repr(d) for d in theirs.describe_indices()]
    for d in theirs.describe_indices():
        assert ours.stats.index_stats(d.name) == theirs.stats.index_stats(d.name)
        assert ours.index_statistics(d.name) == theirs.stats.index_stats(d.name)
    assert ours.has_index
    with pytest.raises(IndexNotFoundError):
        ours.stats.index_stats("nope")
    with pytest.raises(KeyError):
        ours.index_statistics("nope")


@pytest.mark.parametrize("kind", ["BTREE", "BITMAP"])
def test_pylance_uses_alance_built_index(tmp_path: Path, kind: str) -> None:
    uri = str(tmp_path / "built")
    al.write_dataset(_table(), uri, max_rows_per_file=5000)
    al.dataset(uri).delete("id % 7 = 3")
    ds = al.dataset(uri)
    ds.create_scalar_index("v", kind)
    ds.create_scalar_index("cat", kind, name="cat_index")
    pl = lance.dataset(uri)
    names = {d.name: d.index_type for d in pl.describe_indices()}
    expected = "BTree" if kind == "BTREE" else "Bitmap"
    assert names == {"v_idx": expected, "cat_index": expected}
    for sql in FILTERS:
        if sql.startswith("v IS NOT NULL") or " % " in sql:
            continue
        plan = pl.scanner(filter=sql).explain_plan(True)
        if sql != "v = 7 OR cat = 'c2'" or kind != "BTREE":
            assert "ScalarIndexQuery" in plan or "MaterializeIndex" in plan, (sql, plan)
        assert "v_idx" in plan or "cat_index" in plan, (sql, plan)
        theirs = pl.to_table(filter=sql)
        assert theirs.equals(pl.scanner(filter=sql, use_scalar_index=False).to_table()), sql
        assert theirs.equals(ds.to_table(filter=sql)), sql
    stats = pl.stats.index_stats("v_idx")
    assert stats["num_indexed_rows"] == ds.count_rows()
    assert ds.stats.index_stats("v_idx") == stats


def test_alance_reads_what_it_built_after_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "appended")
    al.write_dataset(_table(4000), uri)
    al.dataset(uri).create_scalar_index("v", "btree")
    al.write_dataset(_table(2000, start=4000), uri, mode="append")
    lance.dataset(uri).delete("id % 4 = 0")
    ds = al.dataset(uri)
    assert ds.stats.index_stats("v_idx")["num_unindexed_rows"] == 1500
    for sql in ("v = 11", "v >= 990", "v IS NULL"):
        _check_same(uri, sql)


def test_replace_and_drop(tmp_path: Path) -> None:
    uri = str(tmp_path / "dropped")
    al.write_dataset(_table(3000), uri)
    ds = al.dataset(uri)
    ds.create_scalar_index("v", "BTREE")
    first = ds.list_indices()[0]["uuid"]
    with pytest.raises(AlreadyExistsError):
        ds.create_scalar_index("v", "BITMAP", replace=False)
    ds.create_scalar_index("v", "BITMAP")
    assert [(e["type"], e["uuid"] != first) for e in ds.list_indices()] == [("Bitmap", True)]
    assert [d.index_type for d in lance.dataset(uri).describe_indices()] == ["Bitmap"]
    ds.drop_index("v_idx")
    assert ds.list_indices() == []
    assert lance.dataset(uri).describe_indices() == []
    with pytest.raises(IndexNotFoundError):
        ds.drop_index("v_idx")
    with pytest.raises(InvalidInputError):
        ds.create_scalar_index("nope", "BTREE")
    with pytest.raises(InvalidInputError):
        ds.create_scalar_index("v", "HASH")


def test_row_address_map_round_trip() -> None:
    addrs = np.array([5, 1, (3 << 32) + 7, (3 << 32) + 2, (1 << 40)], dtype=np.uint64)
    mapping = map_of_addresses(addrs)
    assert sorted(mapping) == [0, 3, 256]
    data = encode_row_addr_map({**mapping, 9: None})
    back = decode_row_addr_map(data)
    assert back[9] is None
    assert list(back[0]) == [1, 5] and list(back[3]) == [2, 7] and list(back[256]) == [0]


def test_alance_built_index_with_stable_row_ids(tmp_path: Path) -> None:
    uri = str(tmp_path / "stable_built")
    al.write_dataset(_table(5000), uri, max_rows_per_file=2000, enable_stable_row_ids=True)
    ds = al.dataset(uri)
    ds.delete("id % 3 = 0")
    ds.create_scalar_index("v", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    for sql in ("v = 5", "v < 50", "cat = 'c1'", "cat IS NULL"):
        assert "ScalarIndexQuery" in lance.dataset(uri).scanner(filter=sql).explain_plan(True)
        _check_same(uri, sql)


ZONE_FILTERS = ["x < 500", "x > 9000 AND x < 9300", "x = 15000", "i IS NULL AND x < 300",
                "i >= 19990", "i IN (5, 17000)", "x < -1"]


def _zoned(n: int = 20_000) -> pa.Table:
    return pa.table({"x": pa.array(np.arange(n, dtype=np.float64)),
                     "i": pa.array([None if k % 5 == 0 else k for k in range(n)], pa.int32())})


def test_pylance_built_zonemap(tmp_path: Path) -> None:
    uri = str(tmp_path / "zones")
    ds = lance.write_dataset(_zoned(), uri, max_rows_per_file=12_000)
    ds.delete("x < 100 OR (x > 9000 AND x < 9100)")
    ds.create_scalar_index("x", "ZONEMAP")
    ds.create_scalar_index("i", "ZONEMAP")
    lance.write_dataset(_zoned(500), uri, mode="append")
    ours = al.dataset(uri)
    assert "@x_idx(ZoneMap)" in ours.scanner(filter="x < 500").explain()
    for sql in ZONE_FILTERS:
        _check_same(uri, sql)
    scan = ours.scanner(filter="i > 15000")
    scan.to_table()
    assert scan.stats.rows_scanned == 8000  # the second fragment's one zone (the append: pruned)


def test_pylance_uses_alance_built_zonemap(tmp_path: Path) -> None:
    uri = str(tmp_path / "zones_built")
    al.write_dataset(_zoned(), uri, max_rows_per_file=12_000)
    al.dataset(uri).delete("x < 100 OR (x > 9000 AND x < 9100)")
    ds = al.dataset(uri)
    ds.create_scalar_index("x", "ZONEMAP")
    ds.create_scalar_index("i", "zonemap")
    pl = lance.dataset(uri)
    assert [d.index_type for d in pl.describe_indices()] == ["ZoneMap", "ZoneMap"]
    for sql in ZONE_FILTERS:
        assert "ZoneMap" in pl.scanner(filter=sql).explain_plan(True), sql
        theirs = pl.to_table(filter=sql)
        assert theirs.equals(pl.scanner(filter=sql, use_scalar_index=False).to_table()), sql
        assert theirs.equals(ds.to_table(filter=sql)), sql
    assert ds.stats.index_stats("x_idx") == pl.stats.index_stats("x_idx")


def test_merge_insert_use_index_as_pylance(tmp_path: Path) -> None:
    ds = al.write_dataset(pa.table({"id": range(100), "value": range(100)}),
                          str(tmp_path / "a"))
    ds.create_scalar_index("id", "BTREE")
    builder = ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all()
    with pytest.raises(Exception, match="does not support explain_plan"):
        builder.explain_plan()  # as pylance: the indexed join cannot be explained
    plan = builder.use_index(False).explain_plan()
    assert "MergeInsert" in plan and "Join" in plan
    result = builder.execute(pa.table({"id": [1, 2, 101], "value": [999, 999, 999]}))
    assert (result["num_updated_rows"], result["num_inserted_rows"]) == (2, 1)
    assert ds.to_table().column("value").to_pylist().count(999) == 3
