"""Flat nearest-neighbour search (``nearest=`` without an index), checked against pylance."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import InvalidInputError


@pytest.fixture
def vectors(tmp_path: Path) -> str:
    rng = np.random.default_rng(3)
    n, dim = 3_000, 16
    values = rng.normal(size=(n, dim)).astype(np.float32)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim)
    mask = np.zeros(n, bool)
    mask[::97] = True  # some null vectors
    vec = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), dim,
                                            mask=pa.array(mask))
    table = pa.table({"id": pa.array(range(n), pa.int64()), "vec": vec,
                      "g": pa.array([f"g{i % 5}" for i in range(n)])})
    uri = str(tmp_path / "vectors")
    al.write_dataset(table, uri, max_rows_per_file=700)
    al.dataset(uri).delete("id % 11 = 0")
    return uri


@pytest.mark.parametrize("metric", ["l2", "dot", "cosine"])
def test_same_rows_and_distances_as_pylance(vectors: str, metric: str) -> None:
    query = np.linspace(-1, 1, 16).astype(np.float32)
    nearest = {"column": "vec", "q": query, "k": 25, "metric": metric}
    ours = al.dataset(vectors).to_table(nearest=nearest)
    theirs = lance.dataset(vectors).to_table(nearest=nearest)
    assert ours.schema.names == theirs.schema.names == ["id", "vec", "g", "_distance"]
    assert ours["id"].to_pylist() == theirs["id"].to_pylist()
    np.testing.assert_allclose(ours["_distance"].to_numpy(), theirs["_distance"].to_numpy(),
                               rtol=1e-4, atol=1e-5)
    ids = ours["id"].to_numpy()
    assert not (ids % 11 == 0).any() and not (ids % 97 == 0).any()  # deleted / null vectors


@pytest.mark.parametrize("args", [
    {"filter": "g = 'g1'"},
    {"filter": "g = 'g1'", "prefilter": True},
    {"columns": ["id"], "with_row_id": True},
    {"columns": ["_rowid", "id"]},
    {"columns": ["id"], "disable_scoring_autoprojection": True},
    {"limit": 3, "offset": 2},
])
def test_options_as_pylance(vectors: str, args: dict) -> None:
    nearest = {"column": "vec", "q": np.ones(16, np.float32), "k": 10}
    ours = al.dataset(vectors).to_table(nearest=nearest, **args)
    theirs = lance.dataset(vectors).to_table(nearest=nearest, **args)
    assert ours.schema.names == theirs.schema.names
    assert ours.drop_columns(["_distance"] if "_distance" in ours.schema.names else []).equals(
        theirs.drop_columns(["_distance"] if "_distance" in theirs.schema.names else []))


def test_tensor_columns_and_errors(tmp_path: Path) -> None:
    tensor = pa.fixed_shape_tensor(pa.float32(), [4])
    storage = pa.array([[1, 2, 3, 4], [10, 20, 30, 40], [100, 200, 300, 400]],
                       pa.list_(pa.float32(), 4))
    ds = al.write_dataset(pa.table({"t": pa.ExtensionArray.from_storage(tensor, storage),
                                    "s": ["a", "b", "c"]}), str(tmp_path / "t"))
    query = pa.ExtensionArray.from_storage(tensor, storage.slice(1, 1))[0]
    assert ds.to_table(nearest={"column": "t", "q": query, "k": 1})["s"].to_pylist() == ["b"]
    assert ds.to_table(nearest={"column": "t", "q": [1, 2, 3, 4], "k": 10}).num_rows == 3
    with pytest.raises(InvalidInputError, match="dimensions"):
        ds.to_table(nearest={"column": "t", "q": [1, 2], "k": 1})
    with pytest.raises(InvalidInputError, match="metric"):
        ds.to_table(nearest={"column": "t", "q": [1, 2, 3, 4], "metric": "manhattan"})
    with pytest.raises(InvalidInputError, match="fixed-size list"):
        ds.to_table(nearest={"column": "s", "q": [1.0]})
    with pytest.raises(InvalidInputError, match="no column"):
        ds.to_table(nearest={"column": "nope", "q": [1.0]})


async def test_async_search_streams_bounded(vectors: str) -> None:
    ds = await alance.open_dataset(vectors)
    scanner = ds.scanner(nearest={"column": "vec", "q": np.zeros(16), "k": 5},
                         columns=["id"], batch_size=2)
    batches = [b async for b in scanner.to_batches()]
    assert [b.num_rows for b in batches] == [2, 2, 1]
    assert await scanner.count_rows() == 5
    assert "KNNFlat" in scanner.explain_plan()
