"""pylance's other scanner arguments: mapped, accepted as hints, or refused with a typed error."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al


@pytest.fixture
def uri(tmp_path: Path) -> str:
    path = str(tmp_path / "ds")
    lance.write_dataset(pa.table({"a": range(1000), "b": [str(i) for i in range(1000)]}),
                        path, max_rows_per_file=300)
    return path


def test_strict_batch_size_matches_pylance(uri: str) -> None:
    ours = [b.num_rows for b in al.open_dataset(uri).to_batches(batch_size=128,
                                                                 strict_batch_size=True)]
    theirs = [b.num_rows for b in lance.dataset(uri).to_batches(batch_size=128,
                                                                strict_batch_size=True)]
    assert ours == theirs == [128] * 7 + [104]
    rows = pa.Table.from_batches(list(al.open_dataset(uri).to_batches(
        batch_size=100, strict_batch_size=True, filter="a % 3 = 0")))
    assert rows.equals(lance.dataset(uri).to_table(filter="a % 3 = 0"))


async def test_tuning_arguments_leave_the_rows_alone(uri: str) -> None:
    ds = await alance.open_dataset(uri)
    expected = lance.dataset(uri).to_table(filter="a < 500")
    got = await ds.to_table(filter="a < 500", batch_readahead=1, fragment_readahead=2,
                            scan_in_order=False, use_stats=False, late_materialization=True,
                            io_buffer_size=1 << 20, prefilter=True, batch_size_bytes=1024)
    assert got.sort_by("a").equals(expected.sort_by("a"))


def test_unsupported_and_unknown_arguments_are_refused(uri: str) -> None:
    ds = al.open_dataset(uri)
    with pytest.raises(alance.InvalidInputError, match="no INVERTED index"):
        ds.to_table(full_text_query="words")
    with pytest.raises(alance.InvalidInputError, match="no column"):
        ds.to_table(nearest={"column": "v", "q": [1.0]})
    with pytest.raises(alance.UnsupportedFeatureError):
        ds.scanner(order_by=["a"])
    with pytest.raises(alance.InvalidInputError, match="with_row_id is false"):
        ds.to_table(include_deleted_rows=True)
    with pytest.raises(alance.InvalidInputError):
        ds.to_table(no_such_argument=1)
    with pytest.raises(alance.InvalidInputError):
        ds.to_table(batch_readahead=0)


def test_include_deleted_rows_as_pylance(tmp_path: Path) -> None:
    table = pa.table({"a": range(100), "b": range(100)})
    mine = al.write_dataset(table, str(tmp_path / "a"), max_rows_per_file=25)
    theirs = lance.write_dataset(table, str(tmp_path / "p"), max_rows_per_file=25)
    for ds in (mine, theirs):
        ds.delete("a < 30 and a > 2")
    for kwargs in ({}, {"filter": "a < 32"}, {"filter": "b >= 28", "columns": ["b"]}):
        ours = mine.scanner(with_row_id=True, include_deleted_rows=True, **kwargs).to_table()
        pl = theirs.scanner(with_row_id=True, include_deleted_rows=True, **kwargs).to_table()
        assert ours == pl, kwargs
    got = mine.scanner(with_row_id=True, include_deleted_rows=True).to_table()
    assert got.num_rows == 100  # every fragment keeps a live row: all rows come back
    assert got.column("_rowid").null_count == 27  # the deleted ones (3..29) have no row id
    assert mine.scanner(with_row_id=True).to_table().num_rows == 73
    with pytest.raises(ValueError, match="with_row_id is false"):
        mine.scanner(include_deleted_rows=True).to_table()
