"""Datasets and scanners as Arrow streams: DuckDB, Polars, pandas and pyarrow read them
directly, batch by batch (the Arrow PyCapsule interface, ``__arrow_c_stream__``)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import lance
import numpy as np
import pyarrow as pa
import pytest

import alance.sync as als

ROWS = 50_000


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("streams") / "ds")
    table = pa.table({"id": np.arange(ROWS, dtype=np.int64),
                      "g": pa.array(np.arange(ROWS) % 7, pa.int32()),
                      "s": [f"row {i}" for i in range(ROWS)]})
    lance.write_dataset(table, path, max_rows_per_file=20_000)
    return path


def test_duckdb_queries_a_dataset_and_a_scanner(uri: str) -> None:
    ds = als.dataset(uri)
    got = duckdb.sql("select g, count(*) as n, sum(id) as total from ds group by g order by g")
    rows = got.fetchall()
    assert len(rows) == 7 and sum(n for _, n, _ in rows) == ROWS
    assert sum(t for _, _, t in rows) == ROWS * (ROWS - 1) // 2
    scanner = ds.scanner(columns=["id", "s"], filter="id < 10")  # noqa: F841 (used by SQL)
    assert duckdb.sql("select max(id) from scanner").fetchall() == [(9,)]


def test_polars_and_pandas(uri: str) -> None:
    import polars as pl

    ds = als.dataset(uri)
    frame = pl.DataFrame(ds)
    assert frame.height == ROWS and frame.columns == ["id", "g", "s"]
    df = ds.to_pandas(columns=["id"], filter="g = 3")
    assert len(df) == len(range(3, ROWS, 7)) and df["id"].iloc[0] == 3
    assert ds.scanner(filter="id >= 49990").to_pandas()["s"].tolist()[-1] == "row 49999"


def test_reader_streams_batch_by_batch(uri: str) -> None:
    ds = als.dataset(uri)
    reader = ds.to_reader(columns=["id"], batch_size=1000)
    first = reader.read_next_batch()
    assert first.num_rows <= 20_000 and first.column(0)[0].as_py() == 0
    rest = reader.read_all()
    assert first.num_rows + rest.num_rows == ROWS
    stream = pa.RecordBatchReader.from_stream(ds)
    assert stream.schema == ds.schema
    assert stream.read_all().num_rows == ROWS


def test_stream_of_an_empty_result(tmp_path: Path, uri: str) -> None:
    ds = als.dataset(uri)
    empty = ds.scanner(filter="id < 0")
    assert duckdb.sql("select count(*) from empty").fetchall() == [(0,)]
    assert pa.RecordBatchReader.from_stream(empty).read_all().num_rows == 0


def test_sql_over_a_dataset(tmp_path: Path) -> None:
    """``ds.sql`` (pylance's API) runs on DuckDB over the dataset's rows, streamed."""
    from alance import sync
    from alance.errors import InvalidInputError
    ds = sync.write_dataset(pa.table({"id": [1, 2, 3], "value": ["a", "b", "c"]}),
                            str(tmp_path / "ds"), max_rows_per_file=2)
    query = ds.sql("SELECT * FROM t WHERE id > 1 ORDER BY id").table_name("t").build()
    assert pa.Table.from_batches(query.to_batch_records()).to_pydict() == {
        "id": [2, 3], "value": ["b", "c"]}
    reader = ds.sql("SELECT UPPER(value) AS v FROM dataset WHERE id = 1").build()
    assert [b.to_pydict() for b in reader.to_stream_reader()] == [{"v": ["A"]}]
    with pytest.raises(InvalidInputError, match="nope"):
        ds.sql("SELECT nope FROM dataset").build().to_batch_records()
