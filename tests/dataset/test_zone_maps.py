"""Zone maps learned by scans prune later filtered scans of 2.x files.

The first filtered scan of a column reads it whole and records each row group's bounds;
later scans skip groups the filter rules out. Results never change: every scan is compared
with pylance's answer and with the same scan without pruning.
"""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.dataset.fragments.zone_maps import ZoneMaps, learnable
from alance.dataset.query.scan import Scanner
from alance.format.schema import LanceField

ROWS = 20_000


def _table(n: int) -> pa.Table:
    rng = np.random.default_rng(11)
    return pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64) - 5_000),
        "rnd": pa.array(rng.integers(0, 1000, n).astype(np.int32)),
        "opt": pa.array([None if i % 3 == 0 or 4096 <= i < 6144 else i for i in range(n)],
                        pa.int64()),
        "big": pa.array(np.arange(n, dtype=np.uint64) + np.uint64(2**63)),
        "ts": pa.array(np.arange(n) * 1_000_000, pa.timestamp("us")),
        "x": pa.array(rng.random(n)),
        "s": pa.array([f"row {i}" for i in range(n)]),
    })


@pytest.fixture(scope="module", params=["2.1", "2.2"])
def uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("zones") / request.param)
    lance.write_dataset(_table(ROWS), path, data_storage_version=request.param,
                        max_rows_per_file=8_000)
    theirs = lance.dataset(path)
    theirs.delete("id % 97 = 3")
    return path


FILTERS = [
    ("id = 1234", True),
    ("id >= 10000 AND id < 10100", True),
    ("id < -4990", True),
    ("id IN (-5000, 7, 14000)", True),
    ("rnd = 5", False),  # random values: every group may hold 5
    ("opt IS NULL", False),  # every group holds nulls
    ("opt > 19990", True),
    ("big = 9223372036854775908", True),
    # (range tests of timestamp literals are not derived yet: learned, but not used)
    ("ts < CAST('1970-01-01 00:00:10' AS TIMESTAMP)", False),
    ("x < 0.001", False),  # floats are not learned
    ("id = 1234 OR s = 'row 7'", False),  # strings are not learned
]


@pytest.mark.parametrize(("sql", "prunes"), FILTERS)
async def test_learned_zone_maps_prune_and_never_change_results(uri: str, sql: str,
                                                                prunes: bool) -> None:
    ds = await alance.open_dataset(uri)
    expected = lance.dataset(uri).to_table(filter=sql)
    first = ds.scanner(filter=sql)
    got = await first.to_table()
    assert got.equals(expected.cast(got.schema)), sql
    again = (await alance.open_dataset(uri)).scanner(filter=sql)  # learned maps are shared
    got = await again.to_table()
    assert got.equals(expected.cast(got.schema)), sql
    assert (again.stats.rows_skipped > 0) == prunes, (sql, again.stats.describe())
    plain = Scanner(ds._ctx, filter=sql, prune=False)
    assert (await plain.to_table()).equals(got), sql


async def test_point_filter_reads_one_group_once_learned(tmp_path: Path) -> None:
    path = str(tmp_path / "point")
    lance.write_dataset(_table(ROWS), path, data_storage_version="2.1")
    ds = await alance.open_dataset(path)
    await ds.to_table(filter="id = 0")  # learns
    scanner = ds.scanner(filter="id = 777", columns=["id", "s"])
    got = await scanner.to_table()
    assert got.to_pylist() == [{"id": 777, "s": "row 5777"}]
    assert scanner.stats.rows_skipped >= ROWS - 2048


def test_zone_maps_learn_whole_groups_only() -> None:
    zones = ZoneMaps(np.array([0, 1024, 2048, 2500]))
    field = LanceField(7, "v", "int32")
    zones.learn(field, 100, pa.array(np.arange(100, 2100, dtype=np.int32)))  # covers group 1
    assert not zones.complete(7)
    assert zones.stats([7]) is None
    zones.learn(field, 0, pa.array(np.arange(1024, dtype=np.int32)))
    zones.learn(field, 2048, pa.array([None] * 452, pa.int32()))  # the last group: all null
    assert zones.complete(7)
    column = zones.stats([7]).column("7")
    assert column.field("min_value").to_pylist() == [0, 1024, None]
    assert column.field("max_value").to_pylist() == [1023, 2047, None]
    assert column.field("null_count").to_pylist() == [0, 0, 452]


def test_learnable_types() -> None:
    assert learnable(LanceField(1, "a", "int64"))
    assert learnable(LanceField(1, "a", "timestamp:us:-"))
    assert learnable(LanceField(1, "a", "date32:day"))
    assert not learnable(LanceField(1, "a", "double"))
    assert not learnable(LanceField(1, "a", "string"))


def test_temporal_and_unsigned_bounds_keep_their_order() -> None:
    zones = ZoneMaps(np.array([0, 3, 6]))
    ts = LanceField(1, "ts", "timestamp:us:-")
    big = LanceField(2, "big", "uint64")
    zones.learn(ts, 0, pa.array([5, -2, 9, 1, 1, 0], pa.timestamp("us")))
    zones.learn(big, 0, pa.array(np.array([2**63 + 1, 3, 2**64 - 1, 7, 8, 9], np.uint64)))
    stats = zones.stats([1, 2])
    assert stats.column("1").field("min_value").cast(pa.int64()).to_pylist() == [-2, 0]
    assert stats.column("1").field("max_value").type == pa.timestamp("us")
    assert stats.column("2").field("min_value").to_pylist() == [3, 7]
    assert stats.column("2").field("max_value").to_pylist() == [2**64 - 1, 9]
