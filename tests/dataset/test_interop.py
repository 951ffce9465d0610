"""Interop with the oracle, pylance 14, in both directions."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import UnrepresentableValueError
from tests.dataset.test_dataset import all_types_table


def sample(n: int, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({
        "id": pa.array(ids),
        "b": pa.array((ids % 37).astype(np.int32)),
        "f": pa.array(ids * 0.5),
        "s": pa.array([f"{'x' if i % 3 else 'y'}{i:08d}" for i in ids]),
        "v": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 4).astype(np.float32)), 4),
    })


async def test_alance_writes_pylance_reads(local_uri: str) -> None:
    uri = local_uri
    await alance.write_dataset(sample(3000), uri, max_rows_per_file=1000, max_rows_per_group=256)
    await alance.write_dataset(sample(500, 3000), uri, mode="append")
    await alance.write_dataset(sample(700, 10_000), uri, mode="overwrite",
                               max_rows_per_group=100)
    ours = await alance.write_dataset(sample(300, 20_000), uri, mode="append")
    expected = {1: sample(3000), 2: pa.concat_tables([sample(3000), sample(500, 3000)]),
                3: sample(700, 10_000),
                4: pa.concat_tables([sample(700, 10_000), sample(300, 20_000)])}
    theirs = lance.dataset(uri)
    assert theirs.version == ours.version == 4
    for version, table in expected.items():
        their = lance.dataset(uri, version=version)
        assert their.to_table().equals(table), version
        assert their.count_rows() == table.num_rows
    latest = expected[4]
    idx = [0, 5, 699, 700, 999]
    assert theirs.take(idx).equals(latest.take(idx))
    assert theirs.take(idx).equals(await ours.take(idx))
    flt = "b < 10 AND s LIKE 'x%'"
    assert theirs.to_table(filter=flt).equals(await ours.to_table(filter=flt))
    assert theirs.count_rows(flt) == await ours.count_rows(flt)
    assert theirs.to_table(columns=["id"], with_row_address=True).equals(
        await ours.to_table(columns=["id"], with_row_address=True))


def test_alance_all_types_pylance_reads(local_uri: str) -> None:
    table = all_types_table()
    al.write_dataset(table, local_uri, max_rows_per_file=100, max_rows_per_group=30)
    assert lance.dataset(local_uri).to_table().equals(table)


@pytest.mark.parametrize("v2_paths", [True, False])
def test_pylance_legacy_alance_reads(tmp_path, v2_paths: bool) -> None:
    uri = str(tmp_path / "legacy.lance")
    table = all_types_table(500)
    lance.write_dataset(table, uri, data_storage_version="legacy", max_rows_per_file=200,
                        max_rows_per_group=64, enable_v2_manifest_paths=v2_paths)
    lance.write_dataset(table.slice(0, 100), uri, mode="append",
                        data_storage_version="legacy")
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    assert ours.version == theirs.version == 2
    assert ours.schema.equals(theirs.schema)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.count_rows() == theirs.count_rows() == 600
    idx = [0, 199, 200, 599, 450, 3]
    assert ours.take(idx).equals(theirs.take(idx))
    flt = "i32 > 100 AND s IS NOT NULL"
    assert ours.to_table(filter=flt).equals(theirs.to_table(filter=flt))
    assert ours.to_table(columns=["i64"], with_row_address=True).equals(
        theirs.to_table(columns=["i64"], with_row_address=True))
    assert al.open_dataset(uri, version=1).to_table().equals(table)


def test_pylance_deletions_alance_reads(tmp_path) -> None:
    uri = str(tmp_path / "del.lance")
    lance.write_dataset(sample(5000), uri, data_storage_version="legacy", max_rows_per_file=2000)
    theirs = lance.dataset(uri)
    theirs.delete("id % 3 = 0")          # sparse: Arrow IPC deletion files
    theirs.delete("id >= 2000 AND id < 3900")  # dense: roaring bitmap
    theirs.delete("id >= 4000")          # whole fragment gone
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.count_rows() == theirs.count_rows()
    assert ours.count_rows("b = 1") == theirs.count_rows("b = 1")
    n = theirs.count_rows()
    idx = [0, 1, n - 1, n // 2, 7]
    assert ours.take(idx).equals(theirs.take(idx))
    assert ours.to_table(with_row_address=True, columns=["id"]).equals(
        theirs.to_table(with_row_address=True, columns=["id"]))
    assert ours.to_table(offset=100, limit=50).equals(theirs.to_table(offset=100, limit=50))


def test_alternating_appends(local_uri: str) -> None:
    uri = local_uri
    al.write_dataset(sample(100), uri)
    for i in range(1, 7):
        chunk = sample(100, i * 100)
        if i % 2:
            lance.write_dataset(chunk, uri, mode="append")
        else:
            al.write_dataset(chunk, uri, mode="append")
    expected = sample(700)
    assert lance.dataset(uri).to_table().equals(expected)
    assert al.open_dataset(uri).to_table().equals(expected)
    assert [v["version"] for v in al.open_dataset(uri).versions()] == list(range(1, 8))
    frags = [f.id for f in al.open_dataset(uri).fragment_protos()]
    assert frags == list(range(7))


def test_pylance_v2_files_read(tmp_path) -> None:
    uri = str(tmp_path / "v2.lance")
    lance.write_dataset(sample(10), uri)
    ds = al.open_dataset(uri)
    assert ds.count_rows() == 10
    assert ds.schema.equals(lance.dataset(uri).schema)
    assert ds.to_table().equals(lance.dataset(uri).to_table())


def test_pylance_legacy_dictionary_alance_reads(tmp_path) -> None:
    uri = str(tmp_path / "dict.lance")
    values = pa.array(["red", "green", "blue", "red", "red", "blue"] * 50)
    table = pa.table({"id": pa.array(range(300), pa.int64()),
                      "color": values.dictionary_encode()})
    lance.write_dataset(table, uri, data_storage_version="legacy", max_rows_per_file=100)
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    assert ours.schema.equals(theirs.schema)
    assert ours.to_table().equals(theirs.to_table())
    assert ours.take([5, 150]).equals(theirs.take([5, 150]))


def test_alance_dictionary_columns_pylance_reads(local_uri: str) -> None:
    colors = pa.array(["red", "green", "blue", "red"] * 100)
    first = pa.table({"id": pa.array(range(400), pa.int64()),
                      "color": colors.dictionary_encode()})
    # a second chunk with its own dictionary (new value "violet") in the same write
    second = pa.table({"id": pa.array(range(400, 410), pa.int64()),
                       "color": pa.array(["violet", "red"] * 5).dictionary_encode()})
    table = pa.concat_tables([first, second])
    al.write_dataset(table, local_uri, max_rows_per_file=150, data_storage_version="legacy")
    expected = table.combine_chunks().column("color").to_pylist()
    theirs = lance.dataset(local_uri).to_table()
    assert theirs["color"].to_pylist() == expected
    ours = al.open_dataset(local_uri)
    assert ours.to_table()["color"].to_pylist() == expected
    # appending values the dictionary has is fine; new values are refused, nothing written
    more = pa.table({"id": pa.array([1000], pa.int64()),
                     "color": pa.array(["blue"]).dictionary_encode()})
    ds = al.write_dataset(more, local_uri, mode="append")
    assert lance.dataset(local_uri).to_table()["color"].to_pylist() == [*expected, "blue"]
    files = sorted(p.name for p in (Path(local_uri) / "data").iterdir())
    bad = pa.table({"id": pa.array([1001], pa.int64()),
                    "color": pa.array(["ultraviolet"]).dictionary_encode()})
    with pytest.raises(UnrepresentableValueError, match="color"):
        al.write_dataset(bad, local_uri, mode="append")
    assert al.open_dataset(local_uri).version == ds.version
    assert sorted(p.name for p in (Path(local_uri) / "data").iterdir()) == files


def test_alance_commits_keep_pylance_indices(tmp_path) -> None:
    uri = str(tmp_path / "idx.lance")
    lance.write_dataset(sample(2000), uri, data_storage_version="legacy", max_rows_per_file=1000)
    lance.dataset(uri).create_scalar_index("id", "BTREE")
    before = lance.dataset(uri).list_indices()
    assert len(before) == 1
    al.write_dataset(sample(500, 2000), uri, mode="append")
    after = lance.dataset(uri)
    indices = after.list_indices()
    assert [i["name"] for i in indices] == [i["name"] for i in before]
    assert indices[0]["fragment_ids"] == before[0]["fragment_ids"] == {0, 1}
    # the index still answers for old rows, and new rows are found by scanning
    assert after.to_table(filter="id = 5")["id"].to_pylist() == [5]
    assert after.to_table(filter="id = 2100")["id"].to_pylist() == [2100]
    assert al.open_dataset(uri).to_table(filter="id = 2100")["id"].to_pylist() == [2100]


def test_extension_types_both_ways(tmp_path) -> None:
    import uuid

    u = pa.array([uuid.UUID(int=i).bytes for i in range(20)], pa.uuid())
    table = pa.table({"id": pa.array(range(20), pa.int64()), "u": u})
    ours_uri, theirs_uri = str(tmp_path / "a.lance"), str(tmp_path / "p.lance")
    ds = al.write_dataset(table, ours_uri)
    assert ds.schema.field("u").type == pa.uuid()
    assert ds.to_table().equals(table)
    assert ds.take([3, 1]).equals(table.take([3, 1]))
    assert lance.dataset(ours_uri).to_table().equals(table)
    lance.write_dataset(table, theirs_uri, data_storage_version="legacy")
    assert al.open_dataset(theirs_uri).to_table().equals(lance.dataset(theirs_uri).to_table())
    # the stored field list is the one pylance writes (incl. the legacy extension_name)
    from alance.format.manifest import decode_manifest_file

    def fields(uri: str) -> list:
        path = next((Path(uri) / "_versions").glob("*.manifest"))
        manifest = decode_manifest_file(path.read_bytes()).manifest
        return [(f.name, f.logical_type, dict(f.metadata), f.extension_name)
                for f in manifest.fields]

    assert fields(ours_uri) == fields(theirs_uri)
