"""Filter evaluation to row positions (:mod:`alance.dataset.query.selection`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from alance.dataset.query.selection import matching_rows, select_rows
from alance.errors import InvalidInputError


def _reference(batch: pa.RecordBatch, expression: pc.Expression) -> list[int]:
    """Positions by pyarrow's own filter on a table with a position column."""
    table = pa.Table.from_batches([batch]).append_column("pos", pa.array(
        np.arange(batch.num_rows)))
    return table.filter(expression).column("pos").to_pylist()


@pytest.mark.parametrize("offset", [0, 3, 8, 13])
def test_positions_match_pyarrow_filter_with_nulls_and_offsets(offset: int) -> None:
    rng = np.random.default_rng(offset)
    n = 5_000
    values = rng.integers(0, 10, n)
    mask = rng.random(n) < 0.2
    # a sliced batch: the bitmaps start inside a byte
    batch = pa.RecordBatch.from_arrays(
        [pa.array(values, mask=mask), pa.array(rng.random(n))], ["a", "b"]).slice(offset)
    for expression in (pc.field("a") < 5, pc.field("a") == 3, (pc.field("a") > 2) |
                       (pc.field("b") < 0.5), ~pc.field("a").is_null(), pc.field("a") > 100):
        got = matching_rows(batch, expression)
        assert got.dtype == np.int64
        assert got.tolist() == _reference(batch, expression)


def test_long_batches_come_back_in_order() -> None:
    """Acero cuts a long batch into pieces: positions continue across them."""
    n = 3 * 1024 * 1024 + 17
    batch = pa.RecordBatch.from_arrays([pa.array(np.arange(n) % 7)], ["a"])
    got = matching_rows(batch, pc.field("a") == 0)
    assert got.tolist() == list(range(0, n, 7))


def test_literals_and_errors() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2, 3])], ["a"])
    assert matching_rows(batch, pc.scalar(True)).tolist() == [0, 1, 2]
    assert matching_rows(batch, pc.scalar(False)).tolist() == []
    assert matching_rows(batch, pc.scalar(None)).tolist() == []
    with pytest.raises(InvalidInputError, match="not booleans"):
        matching_rows(batch, pc.field("a") + 1)
    with pytest.raises(InvalidInputError, match="cannot evaluate filter"):
        matching_rows(batch, pc.field("missing") > 1)


def test_select_rows_slices_runs_and_takes_the_rest() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array(range(10))], ["a"])
    assert select_rows(batch, np.array([3, 4, 5])).column(0).to_pylist() == [3, 4, 5]
    assert select_rows(batch, np.array([1, 4, 9])).column(0).to_pylist() == [1, 4, 9]
    assert select_rows(batch, np.zeros(0, np.int64)).num_rows == 0
    assert select_rows(batch.select([]), np.array([1, 4])).num_rows == 2
