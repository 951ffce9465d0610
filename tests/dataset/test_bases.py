"""Datasets with files under several roots (base paths), checked against pylance both ways."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

from alance import sync as al
from alance.errors import InvalidInputError
from tests.s3_servers import S3Target


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "s": [f"v{i}" for i in range(start, start + n)]})


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.lance"))


def test_create_append_delete_compact_across_bases(tmp_path: Path) -> None:
    primary, plain, rooted = tmp_path / "primary", tmp_path / "plain", tmp_path / "rooted"
    ds = al.write_dataset(
        rows(0, 100), str(primary), max_rows_per_file=40,
        initial_bases=[al.DatasetBasePath(str(plain), name="plain"),
                       al.DatasetBasePath(str(rooted), name="rooted", is_dataset_root=True)],
        target_bases=["rooted"])
    bases = ds.base_paths()
    assert {b.name: (i, b.is_dataset_root) for i, b in bases.items()} == {
        "plain": (1, False), "rooted": (2, True)}
    assert len(files_under(rooted)) == 3 and all(f.startswith("data/")
                                                 for f in files_under(rooted))
    assert not (primary / "data").exists()
    # Two targets, by name and by path: files alternate between them.
    ds = al.write_dataset(rows(100, 100), ds, mode="append", max_rows_per_file=25,
                          target_bases=["plain", str(rooted)])
    assert len(files_under(plain)) == 2 and len(files_under(rooted)) == 5
    assert all("/" not in f for f in files_under(plain))  # a plain base holds files directly
    ds = al.write_dataset(rows(200, 10), ds, mode="append")  # no target: the primary root
    assert len(files_under(primary)) == 1
    expected = pa.concat_tables([rows(0, 100), rows(100, 100), rows(200, 10)])
    assert ds.to_table().sort_by("id").equals(expected)
    theirs = lance.dataset(str(primary))
    assert theirs.to_table().sort_by("id").equals(expected)
    assert {i: b.name for i, b in theirs.base_paths().items()} == {1: "plain", 2: "rooted"}
    ds.delete("id % 10 = 0")
    assert lance.dataset(str(primary)).count_rows() == ds.count_rows() == 189
    assert ds.take([0, 188]).equals(lance.dataset(str(primary)).take([0, 188]))
    ds.optimize.compact_files(target_rows_per_fragment=1_000)
    assert lance.dataset(str(primary)).to_table().sort_by("id").equals(
        ds.to_table().sort_by("id"))
    # Later versions keep the bases, an overwrite too.
    ds = al.write_dataset(rows(0, 5), ds, mode="overwrite", target_bases=["plain"])
    assert set(ds.base_paths()) == {1, 2}
    assert lance.dataset(str(primary)).to_table().equals(rows(0, 5))


def test_bad_base_arguments_write_nothing(tmp_path: Path) -> None:
    base = al.DatasetBasePath(str(tmp_path / "b"), name="b")
    uri = str(tmp_path / "ds")
    with pytest.raises(InvalidInputError, match="not found"):
        al.write_dataset(rows(0, 3), uri, initial_bases=[base], target_bases=["nope"])
    with pytest.raises(InvalidInputError, match="used twice"):
        al.write_dataset(rows(0, 3), uri, initial_bases=[base, base])
    assert not os.path.exists(uri) and not os.path.exists(tmp_path / "b")
    ds = al.write_dataset(rows(0, 3), uri, initial_bases=[base])
    with pytest.raises(InvalidInputError, match="Cannot register new bases in Append mode"):
        al.write_dataset(rows(3, 3), ds, mode="append",
                         initial_bases=[al.DatasetBasePath(str(tmp_path / "c"))])
    assert ds.version == 1 and al.open_dataset(uri).count_rows() == 3


@pytest.mark.parametrize("rooted", [False, True])
def test_reads_what_pylance_writes_across_bases(tmp_path: Path, rooted: bool) -> None:
    primary = str(tmp_path / "theirs")
    lance.write_dataset(rows(0, 300), primary, max_rows_per_file=100, initial_bases=[
        lance.DatasetBasePath(str(tmp_path / "tb"), name="tb", is_dataset_root=rooted)],
        target_bases=["tb"])
    lance.write_dataset(rows(300, 50), primary, mode="append")
    lance.dataset(primary).delete("id > 280 AND id < 320")
    ours = al.open_dataset(primary)
    assert ours.to_table().equals(lance.dataset(primary).to_table())
    assert ours.count_rows("id < 100") == 100
    assert ours.base_paths()[1].is_dataset_root is rooted
    # alance commits on top keep pylance's bases readable by pylance.
    al.write_dataset(rows(400, 10), ours, mode="append", target_bases=["tb"])
    assert lance.dataset(primary).count_rows() == 300 + 50 - 39 + 10


def test_bases_on_object_store(moto_target: S3Target, tmp_path: Path) -> None:
    options = moto_target.storage_options
    primary, other = moto_target.uri("primary"), moto_target.uri("other")
    ds = al.write_dataset(rows(0, 50), primary, storage_options=options,
                          initial_bases=[al.DatasetBasePath(other, name="other")],
                          target_bases=["other"])
    assert al.open_dataset(primary, storage_options=options).to_table().equals(rows(0, 50))
    ds.delete("id < 5")
    assert ds.count_rows() == 45
    assert lance.dataset(primary, storage_options=options).count_rows() == 45


def test_add_bases_registers_roots_for_later_writes(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = al.write_dataset(rows(0, 10), uri)
    assert ds.add_bases([]) is ds and ds.version == 1
    ds.add_bases([al.DatasetBasePath(str(tmp_path / "b1"), name="b1")],
                 transaction_properties={"why": "more room"})
    assert ds.version == 2 and ds.base_paths()[1].name == "b1"
    ds = al.write_dataset(rows(10, 10), ds, mode="append", target_bases=["b1"])
    ds.add_bases([al.DatasetBasePath(str(tmp_path / "b2"), name="b2", is_dataset_root=True)])
    ds = al.write_dataset(rows(20, 10), ds, mode="append", target_bases=["b2"])
    assert {i: b.name for i, b in ds.base_paths().items()} == {1: "b1", 2: "b2"}
    assert len(files_under(tmp_path / "b1")) == 1 and len(files_under(tmp_path / "b2")) == 1
    assert lance.dataset(uri).to_table().sort_by("id").equals(rows(0, 30))
    with pytest.raises(InvalidInputError, match="already exists"):
        ds.add_bases([al.DatasetBasePath(str(tmp_path / "b3"), name="b1")])
    with pytest.raises(InvalidInputError, match="already registered"):
        ds.add_bases([al.DatasetBasePath(str(tmp_path / "b1"), name="other")])
    assert ds.version == 5
    # Bases pylance adds are read, and written to, by alance.
    lance.dataset(uri).add_bases([lance.DatasetBasePath(str(tmp_path / "p"), name="p")])
    ours = al.write_dataset(rows(30, 5), uri, mode="append", target_bases=["p"])
    assert ours.count_rows() == 35 and len(files_under(tmp_path / "p")) == 1
