"""``optimize_indices``: indices extended over appended fragments (delta segments with
``num_indices_to_merge=0``, one merged segment by default), which pylance opens and uses."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from tests.dataset.test_index_remap import _table, same_neighbours

PARTS = 3
FILTERS = [("id = 5", "id_idx(BTree)"), ("id = 1111", "id_idx(BTree)"),
           ("id > 1290", "id_idx(BTree)"), ("cat = 'c3'", "cat_idx(Bitmap)"),
           ("cat IN ('c1', 'c6') AND id > 900", "cat_idx(Bitmap)"),
           ("array_has_all(tags, ['t2', 'u1'])", "tags_idx(LabelList)")]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _build(uri: str, vector: str, *, stable: bool = False, metric: str = "l2") -> None:
    lance.write_dataset(_table(1000), uri, max_rows_per_file=500, enable_stable_row_ids=stable)
    ds = lance.dataset(uri)
    ds.create_scalar_index("id", "BTREE")
    ds.create_scalar_index("cat", "BITMAP")
    ds.create_scalar_index("tags", "LABEL_LIST")
    ds.create_index("vec", vector, num_partitions=PARTS, num_sub_vectors=2, metric=metric)
    lance.write_dataset(_table(300, start=1000), uri, mode="append", max_rows_per_file=200)


def _segments(uri: str) -> dict[str, list[set[int]]]:
    out: dict[str, list[set[int]]] = {}
    for ix in lance.dataset(uri).list_indices():
        out.setdefault(ix["name"], []).append(set(ix["fragment_ids"]))
    return {k: sorted(v, key=min) for k, v in out.items()}


def _check(uri: str) -> None:
    mine, pl = al.dataset(uri), lance.dataset(uri)
    for name in ("id_idx", "cat_idx", "tags_idx", "vec_idx"):
        assert pl.stats.index_stats(name)["num_unindexed_rows"] == 0
        assert mine.index_statistics(name)["num_unindexed_rows"] == 0
    for sql, index in FILTERS:
        want = mine.scanner(filter=sql, use_scalar_index=False).to_table().sort_by("id")
        assert pl.to_table(filter=sql).sort_by("id").equals(want), sql
        assert mine.to_table(filter=sql).sort_by("id").equals(want), sql
        assert f"@{index}" in mine.scanner(filter=sql).explain(), sql
        assert "ScalarIndexQuery" in pl.scanner(filter=sql).explain_plan(True), sql
    vectors = pa.concat_arrays([_table(1000).column("vec").combine_chunks(),
                                _table(300, start=1000).column("vec").combine_chunks()])
    for row in (3, 640, 1007, 1222):
        query = {"column": "vec", "q": vectors[row].values.to_numpy(), "k": 7,
                 "nprobes": PARTS}
        same_neighbours(mine.to_table(nearest=query, columns=["id"]),
                        pl.to_table(nearest=query, columns=["id"]))
        # no flat search over unindexed rows is left
        assert "KNNVectorDistance" not in pl.scanner(nearest=query).explain_plan()
        assert "KNNFlat" not in mine.scanner(nearest=query).explain_plan()


@pytest.mark.parametrize("vector,metric,stable", [("IVF_PQ", "l2", False),
                                                  ("IVF_FLAT", "cosine", False),
                                                  ("IVF_PQ", "dot", True),
                                                  ("IVF_FLAT", "l2", True)])
def test_delta_segments(tmp_path: Path, vector: str, metric: str, stable: bool) -> None:
    uri = str(tmp_path / "a.lance")
    _build(uri, vector, stable=stable, metric=metric)
    ds = al.dataset(uri)
    before = ds.version
    assert ds.optimize.optimize_indices(num_indices_to_merge=0) is None
    assert ds.version == before + 1
    assert _segments(uri) == {n: [{0, 1}, {2, 3}]
                              for n in ("cat_idx", "id_idx", "tags_idx", "vec_idx")}
    _check(uri)
    # pylance optimises on top of alance's deltas, and alance reads the result
    lance.dataset(uri).optimize.optimize_indices()
    assert len(_segments(uri)["vec_idx"]) == 1
    _check(uri)


@pytest.mark.parametrize("stable", [False, True])
def test_merged_segment(tmp_path: Path, stable: bool) -> None:
    uri = str(tmp_path / "a.lance")
    _build(uri, "IVF_PQ", stable=stable)
    lance.dataset(uri).optimize.optimize_indices(num_indices_to_merge=0)  # pylance's deltas
    lance.write_dataset(_table(100, start=1300), uri, mode="append")
    ds = al.dataset(uri)
    ds.optimize.optimize_indices()  # every segment and the new fragment in one
    segments = _segments(uri)
    assert segments == {n: [{0, 1, 2, 3, 4}] for n in ("cat_idx", "id_idx", "tags_idx",
                                                     "vec_idx")}
    assert lance.dataset(uri).to_table(filter="id = 1350")["id"].to_pylist() == [1350]
    # compaction then remaps the merged segments
    lance.dataset(uri).delete("id % 9 = 4")
    ds = al.dataset(uri)
    ds.compact_files()
    assert len(_segments(uri)["id_idx"]) == 1
    for sql in ("id = 1350", "id = 13", "cat = 'c5' AND id < 50"):
        want = ds.scanner(filter=sql, use_scalar_index=False).to_table()
        assert lance.dataset(uri).to_table(filter=sql).equals(want)
        assert ds.to_table(filter=sql).equals(want)


async def test_names_and_nothing_to_do(tmp_path: Path) -> None:
    uri = str(tmp_path / "a.lance")
    _build(uri, "IVF_FLAT")
    ds = await alance.open_dataset(uri)
    with pytest.raises(alance.IndexNotFoundError):
        await ds.optimize_indices(index_names=["nope"])
    with pytest.raises(alance.InvalidInputError):
        await ds.optimize_indices(num_indices_to_merge=-1)
    with pytest.raises(alance.InvalidInputError):
        await ds.optimize_indices(num_indices_to_merg=0)
    ds = await ds.optimize.optimize_indices(index_names=["id_idx"], num_indices_to_merge=0)
    assert len(_segments(uri)["id_idx"]) == 2 and len(_segments(uri)["cat_idx"]) == 1
    assert (await ds.index_statistics("cat_idx"))["num_unindexed_rows"] == 300
    ds = await ds.optimize_indices(num_indices_to_merge=0)
    again = await ds.optimize_indices(num_indices_to_merge=0)
    assert again.version == ds.version  # every fragment indexed: no commit


def test_retrain(tmp_path: Path) -> None:
    uri = str(tmp_path / "a.lance")
    _build(uri, "IVF_PQ")
    ds = al.dataset(uri)
    ds.optimize.optimize_indices(index_names=["vec_idx"], retrain=True)
    stats = lance.dataset(uri).stats.index_stats("vec_idx")
    assert stats["num_unindexed_rows"] == 0 and stats["num_indices"] == 1
    assert len(stats["indices"][0]["partitions"]) == PARTS
