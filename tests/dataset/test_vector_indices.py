"""IVF vector indices (IVF_FLAT, IVF_PQ): pylance-built indices searched by alance with the
same results as pylance, and alance-built indices used by pylance."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al

DIM = 16


def _table(n: int, seed: int, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(n, DIM)).astype(np.float32)
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), DIM),
                     "g": pa.array([i % 5 for i in range(start, start + n)], pa.int64())})


def _queries(count: int = 6) -> np.ndarray:
    return np.random.default_rng(99).normal(size=(count, DIM)).astype(np.float32)


def _same(ours: pa.Table, theirs: pa.Table) -> None:
    assert ours.schema.names == theirs.schema.names
    assert ours["id"].to_pylist() == theirs["id"].to_pylist()
    np.testing.assert_allclose(ours["_distance"].to_numpy(), theirs["_distance"].to_numpy(),
                               rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module", params=[("IVF_PQ", "l2"), ("IVF_PQ", "cosine"),
                                        ("IVF_PQ", "dot"), ("IVF_FLAT", "l2"),
                                        ("IVF_FLAT", "cosine"), ("IVF_FLAT", "dot")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def indexed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            ) -> tuple[str, str, str]:
    kind, metric = request.param
    uri = str(tmp_path_factory.mktemp("ivf") / "ds")
    ds = lance.write_dataset(_table(3000, 1), uri, max_rows_per_file=1000)
    extra = {"num_sub_vectors": 4} if kind == "IVF_PQ" else {}
    ds.create_index("vec", kind, num_partitions=8, metric=metric, **extra)
    return uri, kind, metric


@pytest.mark.parametrize("options", [{"nprobes": 1}, {"nprobes": 3}, {"nprobes": 8},
                                     {"nprobes": 2, "refine_factor": 3}])
@pytest.mark.parametrize("args", [{}, {"filter": "g = 1"}, {"filter": "g = 1",
                                                             "prefilter": True}])
def test_pylance_index_same_results(indexed: tuple[str, str, str], options: dict,
                                    args: dict) -> None:
    uri, _, _ = indexed
    ours, theirs = al.dataset(uri), lance.dataset(uri)
    for q in _queries():
        nearest = {"column": "vec", "q": q, "k": 10, **options}
        _same(ours.to_table(nearest=nearest, **args), theirs.to_table(nearest=nearest, **args))


def test_explain_names_the_index(indexed: tuple[str, str, str]) -> None:
    uri, _, metric = indexed
    plan = al.dataset(uri).scanner(nearest={"column": "vec", "q": _queries()[0], "k": 5,
                                            "nprobes": 2}).explain_plan()
    assert "ANNSubIndex: name=vec_idx, k=5" in plan
    assert "minimum_nprobes=2, maximum_nprobes=Some(2)" in plan
    flat = al.dataset(uri).scanner(nearest={"column": "vec", "q": _queries()[0], "k": 5,
                                            "use_index": False}).explain_plan()
    assert "ANN" not in flat and "KNNFlat" in flat
    # Another metric than the index's is a flat search (as in pylance).
    other = "dot" if metric != "dot" else "l2"
    plan = al.dataset(uri).scanner(nearest={"column": "vec", "q": _queries()[0], "k": 5,
                                            "metric": other}).explain_plan()
    assert "ANN" not in plan


def test_deletions_and_unindexed_fragments(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    ds = lance.write_dataset(_table(3000, 2), uri, max_rows_per_file=1000)
    ds.create_index("vec", "IVF_PQ", num_partitions=6, num_sub_vectors=4)
    al.write_dataset(_table(800, 3, start=3000), uri, mode="append")   # not indexed
    al.dataset(uri).delete("id % 7 = 0 OR (id >= 1000 AND id < 2000 AND id % 2 = 0)")
    ours, theirs = al.dataset(uri), lance.dataset(uri)
    assert ours.index_statistics("vec_idx")["num_unindexed_rows"] == \
        theirs.stats.index_stats("vec_idx")["num_unindexed_rows"]
    for q in _queries():
        for options in ({"nprobes": 2}, {"nprobes": 6, "refine_factor": 2}):
            nearest = {"column": "vec", "q": q, "k": 20, **options}
            o = ours.to_table(nearest=nearest, with_row_id=True)
            _same(o, theirs.to_table(nearest=nearest, with_row_id=True))
            assert not (o["id"].to_numpy() % 7 == 0).any()
            o = ours.to_table(nearest={**nearest, "fast_search": True})
            assert (o["id"].to_numpy() < 3000).all()
    plan = ours.scanner(nearest={"column": "vec", "q": _queries()[0], "k": 5}).explain_plan()
    assert "KNNFlat" in plan and "ANNIvfPartition" in plan


def _recall(ds: object, queries: np.ndarray, truth: list[set[int]], **options: object,
            ) -> float:
    hits = 0
    for q, want in zip(queries, truth, strict=True):
        got = ds.to_table(nearest={"column": "vec", "q": q, "k": 10,  # type: ignore[attr-defined]
                                   **options}, columns=["id"])
        hits += len(want & set(got["id"].to_pylist()))
    return hits / (10 * len(queries))


def test_recall_matches_pylance(indexed: tuple[str, str, str]) -> None:
    uri, _, metric = indexed
    queries = _queries(20)
    flat = al.dataset(uri)
    truth = [set(flat.to_table(nearest={"column": "vec", "q": q, "k": 10, "metric": metric,
                                        "use_index": False}, columns=["id"])["id"].to_pylist())
             for q in queries]
    ours = _recall(al.dataset(uri), queries, truth, nprobes=3)
    theirs = _recall(lance.dataset(uri), queries, truth, nprobes=3)
    assert abs(ours - theirs) <= 0.01
    assert ours > 0.3


def test_list_describe_statistics_as_pylance(indexed: tuple[str, str, str]) -> None:
    uri, kind, _ = indexed
    ours, theirs = al.dataset(uri), lance.dataset(uri)
    mine, their = ours.list_indices(), theirs.list_indices()
    assert [{**e, "fragment_ids": set(e["fragment_ids"])} for e in mine] == \
        [{**e, "fragment_ids": set(e["fragment_ids"])} for e in their]
    assert mine[0]["type"] == kind
    d, e = ours.describe_indices()[0], theirs.describe_indices()[0]
    assert (d.index_type, d.type_url, d.details, d.num_rows_indexed) == \
        (e.index_type, e.type_url, e.details, e.num_rows_indexed)
    assert ours.index_statistics("vec_idx") == theirs.stats.index_stats("vec_idx")


@pytest.mark.parametrize("kind,metric", [("IVF_PQ", "l2"), ("IVF_PQ", "cosine"),
                                         ("IVF_PQ", "dot"), ("IVF_FLAT", "l2"),
                                         ("IVF_FLAT", "cosine")])
def test_alance_built_index_used_by_pylance(tmp_path: Path, kind: str, metric: str) -> None:
    uri = str(tmp_path / "ds")
    al.write_dataset(_table(2000, 4), uri, max_rows_per_file=700)
    al.dataset(uri).create_index("vec", kind, metric=metric, num_partitions=6,
                                 num_sub_vectors=4)
    ours, theirs = al.dataset(uri), lance.dataset(uri)
    assert theirs.list_indices()[0]["type"] == kind
    assert ours.index_statistics("vec_idx") == theirs.stats.index_stats("vec_idx")
    plan = theirs.scanner(nearest={"column": "vec", "q": _queries()[0], "k": 10,
                                   "nprobes": 2}).explain_plan()
    assert "ANNSubIndex" in plan
    for q in _queries():
        for options in ({"nprobes": 2}, {"nprobes": 3, "refine_factor": 2}):
            nearest = {"column": "vec", "q": q, "k": 10, **options}
            _same(ours.to_table(nearest=nearest), theirs.to_table(nearest=nearest))
    truth = [set(ours.to_table(nearest={"column": "vec", "q": q, "k": 10, "metric": metric,
                                        "use_index": False})["id"].to_pylist())
             for q in _queries(20)]
    assert _recall(ours, _queries(20), truth, nprobes=6, refine_factor=5) > 0.9
