"""ds.stats, ds.optimize and tags as pylance's mappings, against pylance on the same data."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al


def _table(n: int) -> pa.Table:
    return pa.table({"x": pa.array(range(n), pa.int64()),
                     "y": pa.array([str(i) * 3 for i in range(n)]),
                     "s": pa.array([{"a": i, "b": str(i)} for i in range(n)])})


@pytest.mark.parametrize("version", ["legacy", "2.0", "2.1", "2.2"])
@pytest.mark.parametrize("writer", ["pylance", "alance"])
def test_stats_equal_pylance(tmp_path: Path, version: str, writer: str) -> None:
    uri = str(tmp_path / "ds")
    (lance if writer == "pylance" else al).write_dataset(  # type: ignore[attr-defined]
        _table(3000), uri, data_storage_version=version, max_rows_per_file=1024)
    ours, theirs = al.open_dataset(uri), lance.dataset(uri)
    ours.delete("x < 5")
    theirs = lance.dataset(uri)
    for rows_per_group in (1024, 600):
        assert (ours.stats.dataset_stats(rows_per_group)
                == theirs.stats.dataset_stats(rows_per_group))
    assert ours.stats.dataset_stats() == {"num_deleted_rows": 5, "num_fragments": 3,
                                          "num_small_files": 1}
    mine = [(f.id, f.bytes_on_disk) for f in ours.stats.data_stats().fields]
    assert mine == [(f.id, f.bytes_on_disk) for f in theirs.stats.data_stats().fields]
    if version != "legacy":
        assert all(n > 0 for fid, n in mine if fid != 2)  # 2 is the struct itself


async def test_async_stats_and_optimize(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = await alance.write_dataset(_table(1000), uri, max_rows_per_file=100)
    assert (await ds.stats.dataset_stats())["num_fragments"] == 10
    result = await ds.optimize.compact_files(target_rows_per_fragment=1000)
    assert (result.fragments_removed, result.fragments_added) == (10, 1)
    assert ds.version == 1 and result.dataset.version == 3  # reserve ids, then rewrite
    assert (await result.dataset.stats.dataset_stats())["num_fragments"] == 1


def test_sync_optimize_moves_the_dataset_like_pylance(tmp_path: Path) -> None:
    ours = al.write_dataset(_table(1000), str(tmp_path / "a"), max_rows_per_file=100)
    theirs = lance.write_dataset(_table(1000), str(tmp_path / "b"), max_rows_per_file=100)
    for ds in (ours, theirs):
        metrics = ds.optimize.compact_files(target_rows_per_fragment=1000)
        assert (metrics.fragments_removed, metrics.fragments_added,
                metrics.files_removed, metrics.files_added) == (10, 1, 10, 1)
        assert ds.version == 3 and len(ds.get_fragments()) == 1


def test_tags_read_like_pylance_dicts(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    al.write_dataset(_table(10), uri)
    ds = al.write_dataset(_table(10), uri, mode="append")
    ds.tags.create("one", 1)
    ds.tags.create("two", 2)
    theirs = lance.dataset(uri).tags
    assert {n: t["version"] for n, t in ds.tags.list().items()} == {"one": 1, "two": 2}
    assert dict(ds.tags.list()["one"]) == theirs.list()["one"]
    for order in (None, "asc", "desc"):
        mine = [(n, dict(t)) for n, t in ds.tags.list_ordered(order)]
        assert mine == theirs.list_ordered(order)
    with pytest.raises(alance.InvalidInputError):
        ds.tags.list_ordered("sideways")


def test_take_rows_has_pylance_spelling(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(100), uri, enable_stable_row_ids=True)
    ids = lance.dataset(uri).to_table(with_row_id=True)["_rowid"].to_pylist()[::7]
    theirs = lance.dataset(uri)._take_rows(ids, columns=["x", "y"])
    assert al.open_dataset(uri)._take_rows(ids, columns=["x", "y"]).equals(theirs)


def test_len_is_the_row_count(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    lance.write_dataset(_table(100), uri, max_rows_per_file=30)
    lance.dataset(uri).delete("x < 7")
    assert len(al.open_dataset(uri)) == len(lance.dataset(uri)) == 93
