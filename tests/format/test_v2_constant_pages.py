"""Constant pages pylance 14 writes when every valid value of a page is the same."""

from __future__ import annotations

from pathlib import Path

import lance
import pyarrow as pa
import pytest

from alance import sync as al

N = 5000


def _columns() -> dict[str, pa.Array]:
    return {
        "nullable_int": pa.array([7 if i % 3 else None for i in range(N)], pa.int64()),
        "all_same": pa.array([3] * N, pa.int32()),
        "nullable_str": pa.array(["k" if i % 5 else None for i in range(N)], pa.string()),
        "nullable_list": pa.array([[1] if i % 3 else None for i in range(N)],
                                  pa.list_(pa.int64())),
        "all_null": pa.array([None] * N, pa.float64()),
    }


@pytest.mark.parametrize("version", ["2.1", "2.2"])
@pytest.mark.parametrize("name", list(_columns()))
def test_constant_pages_read_like_pylance(tmp_path: Path, version: str, name: str) -> None:
    table = pa.table({name: _columns()[name], "id": pa.array(range(N), pa.int64())})
    uri = str(tmp_path / "ds")
    lance.write_dataset(table, uri, data_storage_version=version)
    theirs = lance.dataset(uri)
    ours = al.open_dataset(uri)
    assert ours.to_table().equals(theirs.to_table())
    rows = [0, 1, 2, 3, 1234, N - 1]
    assert ours.take(rows).equals(theirs.take(rows))
    assert ours.to_table(columns=[name]).equals(table.select([name]))
