"""Page pruning: filtered scans of v0.2 files skip row groups their statistics rule out.

Results must never change: every pruned scan is compared with the same scan without pruning
(and with pylance). Bytes are counted at the store.
"""

from __future__ import annotations

from collections.abc import Iterator

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.dataset.query.scan import Scanner
from alance.io.store import DatasetStore


@pytest.fixture
def data_bytes_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A one-element list counting bytes fetched from data files."""
    seen = [0]
    original = DatasetStore.get_ranges

    async def counting(self: DatasetStore, path: str, ranges: list[tuple[int, int]]):
        out = await original(self, path, ranges)
        if path.startswith("data/"):
            seen[0] += sum(len(b) for b in out)
        return out

    monkeypatch.setattr(DatasetStore, "get_ranges", counting)
    yield seen


async def both_ways(ds: alance.LanceDataset, sql: str,
                    columns: list[str] | None = None) -> tuple[pa.Table, Scanner]:
    pruned = ds.scanner(columns=columns, filter=sql)
    got = await pruned.to_table()
    plain = Scanner(ds._ctx, columns=columns, filter=sql, prune=False)
    assert got.to_pandas().equals((await plain.to_table()).to_pandas()), sql  # NaN == NaN
    return got, pruned


async def test_selective_filter_on_sorted_column_reads_under_5_percent(
        local_uri: str, data_bytes_read: list[int]) -> None:
    n = 2_000_000
    rng = np.random.default_rng(7)
    table = pa.table({"sorted": np.arange(n, dtype=np.int64),
                      "random": rng.integers(0, 1 << 40, n),
                      "value": rng.random(n)})
    await alance.write_dataset(table, local_uri, data_storage_version="legacy")
    ds = await alance.open_dataset(local_uri)
    data_bytes_read[0] = 0
    full = await ds.to_table()
    full_bytes = data_bytes_read[0]
    assert full.num_rows == n

    sql = "sorted >= 1200000 AND sorted < 1202000"  # 0.1% of the rows
    data_bytes_read[0] = 0
    scanner = ds.scanner(filter=sql)
    got = await scanner.to_table()
    pruned_bytes = data_bytes_read[0]
    assert pruned_bytes < 0.05 * full_bytes, (pruned_bytes, full_bytes)
    plain = await Scanner(ds._ctx, filter=sql, prune=False).to_table()
    assert got.equals(plain)
    assert got.column("sorted").to_pylist() == list(range(1_200_000, 1_202_000))
    assert scanner.stats.rows_skipped >= n - 4096
    assert scanner.stats.bytes_skipped > 0.9 * full_bytes
    assert "bytes skipped" in scanner.explain()
    assert await ds.count_rows(sql) == 2000


@pytest.mark.parametrize("writer", ["alance", "pylance"])
async def test_statistics_caveats_never_change_results(local_uri: str, writer: str) -> None:
    """NaN, -0.0/+0.0, long (truncated) strings, null-only groups, IN/OR/BETWEEN/IS NULL."""
    n = 20_000
    rng = np.random.default_rng(1)
    floats = np.sort(np.round(rng.normal(size=n), 1))
    floats[::997] = np.nan
    floats[9000:9100] = -0.0
    prefix = "p" * 70  # longer than the 64-byte statistics prefix: bounds get truncated
    long = [None if 6000 <= i < 8000 else f"{prefix}{i:05d}" for i in range(n)]
    table = pa.table({"i": np.arange(n, dtype=np.int64), "f": floats, "long": pa.array(long),
                      "short": pa.array([f"k{i:05d}" for i in range(n)]),
                      "b": pa.array(np.arange(n) < 500),
                      "d": pa.array(np.arange(n, dtype=np.int32), pa.date32())})
    if writer == "alance":
        await alance.write_dataset(table, local_uri, data_storage_version="legacy",
                                   max_rows_per_group=500)
    else:
        lance.write_dataset(table, local_uri, data_storage_version="legacy",
                            max_rows_per_group=500)
    ds = await alance.open_dataset(local_uri)
    # pylance itself prunes v0.2 pages by statistics that leave NaN out although its filters
    # order NaN above all floats: for float filters, ask it about a copy without statistics.
    oracle = lance.dataset(local_uri)
    no_stats = lance.write_dataset(table, local_uri + "_v2", data_storage_version="2.2")
    prunes = ["i < 3000", "i >= 19000 OR i = 200", "i BETWEEN 5000 AND 6000",
              "i IN (3, 2500, 19999)", "f < -1.5", "f = 0.0", "f = -0.0", "f <= -2.5", "f = 0.3",
              "short = 'k00150'", "short > 'k17000'", "short < 'k00010'", "long IS NULL",
              "b = true", "d < date '1970-01-20'", "i > 100 AND long IS NULL",
              "i < 10 OR short > 'k19000'"]
    cannot = ["f > 1.5", "f >= 0", f"long = '{prefix}00150'", f"long < '{prefix}00010'",
              "long IS NOT NULL", "i < 10 OR f > 2.0", "i + 0 < 5", "NOT (i > 5)"]
    for sql in prunes + cannot:
        got, scanner = await both_ways(ds, sql)
        expected = (no_stats if "f " in sql else oracle).to_table(filter=sql)
        assert got.column("i").to_pylist() == expected.column("i").to_pylist(), sql
        assert (scanner.stats.rows_skipped > 0) == (sql in prunes), sql


async def test_pruning_on_added_columns(local_uri: str) -> None:
    n = 5000
    table = pa.table({"i": np.arange(n, dtype=np.int64)})
    ds = await alance.write_dataset(table, local_uri, data_storage_version="legacy",
                                    max_rows_per_group=100, max_rows_per_file=2000)
    ds = await ds.add_columns({"j": "i * 2"})  # own files (same row groups, as pylance needs)
    for sql in ["j BETWEEN 3000 AND 3100", "i < 150 AND j > 100", "j > 9990 OR i < 3"]:
        got, scanner = await both_ways(ds, sql)
        assert got.equals(lance.dataset(local_uri).to_table(filter=sql)), sql
        assert scanner.stats.rows_skipped > n // 2, sql


async def test_2x_files_prune_only_with_learned_zone_maps(local_uri: str) -> None:
    """2.x files store no page statistics: the first scan reads everything (and learns the
    zone maps, see test_zone_maps.py), the next one prunes."""
    table = pa.table({"i": np.arange(3000, dtype=np.int64)})
    lance.write_dataset(table, local_uri, data_storage_version="2.2")
    ds = await alance.open_dataset(local_uri)
    got, scanner = await both_ways(ds, "i < 10")
    assert got.num_rows == 10
    assert scanner.stats.rows_skipped == 0
    got, scanner = await both_ways(ds, "i < 10")
    assert got.num_rows == 10
    assert scanner.stats.rows_skipped == 3000 - 1024
    assert "skipped by statistics: 1976" in scanner.explain()


async def test_pruned_scans_keep_row_addresses_deletions_limit_and_offset(
        local_uri: str) -> None:
    n = 30_000
    table = pa.table({"i": np.arange(n, dtype=np.int64), "v": np.arange(n) * 0.5})
    ds = await alance.write_dataset(table, local_uri, data_storage_version="legacy",
                                    max_rows_per_file=10_000)
    ds = (await ds.delete("i % 10 = 3 OR (i > 15000 AND i < 15100)")).dataset
    sql = "i >= 14000 AND i < 16500"
    for kwargs in ({}, {"limit": 70, "offset": 1000}, {"offset": 2000}):
        pruned = ds.scanner(filter=sql, with_row_address=True, **kwargs)
        plain = Scanner(ds._ctx, filter=sql, with_row_address=True, prune=False, **kwargs)
        got = await pruned.to_table()
        assert got.equals(await plain.to_table()), kwargs
        assert pruned.stats.rows_skipped > n // 2
        expected = lance.dataset(local_uri).to_table(filter=sql, with_row_address=True,
                                                     **kwargs)
        assert got.column("_rowaddr").to_pylist() == expected.column("_rowaddr").to_pylist()
    assert await ds.count_rows(sql) == lance.dataset(local_uri).count_rows(sql)
