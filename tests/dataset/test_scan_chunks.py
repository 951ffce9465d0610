"""Filtered scans: chunks sized by the filter columns, the other columns read in pieces.

A filtered scan reads its filter columns in large chunks and fetches the other projected
columns only for the rows that pass: by row (few pass) or by range, a bounded number of rows
at a time (many pass). These tests shrink the chunk target so a small dataset exercises every
path, with deletions, and compare with pylance on the same dataset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.dataset.fragments import data_file

ROWS = 200_000


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(7)
    table = pa.table({
        "k": pa.array(rng.integers(0, 1000, ROWS, dtype=np.int32)),
        "v": pa.array(np.arange(ROWS, dtype=np.int64)),
        "s": pa.array([f"s{i % 977}" for i in range(ROWS)]),
    })
    uri = str(tmp_path_factory.mktemp("chunks") / "ds.lance")
    lance.write_dataset(table, uri, data_storage_version="2.2", max_rows_per_file=120_000)
    lance.dataset(uri).delete("v % 7 = 3 OR (v >= 50000 AND v < 60000)")
    return uri


@pytest.mark.parametrize("where", ["k < 3", "k < 200", "k < 600", "k >= 0", "k < 0"])
def test_filtered_scan_matches_pylance(dataset: str, where: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # 1 MiB chunks: the filter column (4 bytes a row) reads a whole file per chunk, the
    # others (~44 bytes a row) come in pieces of 64Ki rows.
    monkeypatch.setattr(data_file, "CHUNK_TARGET_BYTES", 1024 * 1024)
    ours = al.open_dataset(dataset)
    scanner = ours.scanner(columns=["v", "s", "k"], filter=where, with_row_id=True)
    inner = scanner._async
    assert inner._streamed.chunk_rows > inner._streamed.rest_rows  # the setting this test is about
    got = scanner.to_table()
    want = lance.dataset(dataset).to_table(columns=["v", "s", "k"], filter=where,
                                           with_row_id=True)
    assert got.schema.names == ["v", "s", "k", "_rowid"]
    assert got.num_rows == want.num_rows
    assert got.equals(want.select(got.schema.names).cast(got.schema))
    assert scanner.to_reader().read_all().equals(got)  # (streamed: the chunks above)


@pytest.mark.parametrize("where", ["k < 3", "k < 200", "k < 600"])
def test_other_columns_come_in_many_pieces(dataset: str, where: str) -> None:
    """However many pieces the other columns are read in (by row or by range, a few in
    flight at once), the rows come out complete and in order."""
    ours = al.open_dataset(dataset)
    scanner = ours.scanner(columns=["s", "v"], filter=where)
    inner = scanner._async  # dozens of pieces per chunk (streamed scans)
    inner._streamed = dataclasses.replace(inner._streamed, rest_rows=3000)
    got = scanner.to_reader().read_all()
    want = lance.dataset(dataset).to_table(columns=["s", "v"], filter=where)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want.cast(got.schema))


def test_filter_on_unprojected_column(dataset: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data_file, "CHUNK_TARGET_BYTES", 1024 * 1024)
    got = al.open_dataset(dataset).to_table(columns=["s"], filter="k < 500")
    want = lance.dataset(dataset).to_table(columns=["s"], filter="k < 500")
    assert got.num_rows == want.num_rows > 0
    assert got.column("s").to_pylist() == want.column("s").to_pylist()


@pytest.fixture(scope="module")
def clustered_legacy(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A v0.2 dataset whose page statistics skip most pages of a filter on ``k``, leaving
    many separate pieces of each chunk to read."""
    n = 60_000
    rng = np.random.default_rng(11)
    k = (np.arange(n) // 1024) % 20 * 100 + rng.integers(0, 100, n)
    table = pa.table({"k": pa.array(k, pa.int32()), "v": pa.array(np.arange(n)),
                      "s": pa.array([f"x{i % 313}" for i in range(n)])})
    uri = str(tmp_path_factory.mktemp("pruned") / "ds.lance")
    lance.write_dataset(table, uri, data_storage_version="legacy", max_rows_per_file=40_000)
    lance.dataset(uri).delete("v % 5 = 1")
    return uri


@pytest.mark.parametrize("where", ["k < 250", "k >= 1850", "k < 150 AND v > 1000"])
def test_pruned_pieces_read_together(clustered_legacy: str, where: str) -> None:
    ours = al.open_dataset(clustered_legacy)
    scanner = ours.scanner(columns=["s", "v"], filter=where, with_row_id=True)
    got = scanner.to_table()
    assert scanner.stats.rows_skipped > 0  # statistics did skip pages
    want = lance.dataset(clustered_legacy).to_table(columns=["s", "v"], filter=where,
                                                    with_row_id=True)
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want.select(got.schema.names).cast(got.schema))
    assert ours.count_rows(filter=where) == want.num_rows


def test_other_columns_read_over_the_passing_rows_only(dataset: str) -> None:
    """Many rows pass, all in the first part of a file: the other columns are read from the
    first passing row to the last, not over the whole chunk."""
    from alance.io.store import counting_io

    ours = al.open_dataset(dataset)
    for columns in (["v"], ["v", "s"]):  # file metadata and the zone maps of v now known
        ours.to_table(columns=columns, filter="v < 80000")
    with counting_io() as strings:
        ours.to_table(columns=["s"])
    with counting_io() as head:
        ours.to_table(columns=["v"], filter="v < 80000")
    with counting_io() as both:
        got = ours.to_table(columns=["v", "s"], filter="v < 80000")
    want = lance.dataset(dataset).to_table(columns=["v", "s"], filter="v < 80000")
    assert got.num_rows == want.num_rows > 0
    assert got.equals(want.cast(got.schema))
    # rows 0..80k of 200k pass (the first file holds 120k): s is read for about 80k rows,
    # not for the first file's 120k
    rest = both.bytes_read - head.bytes_read
    assert 0.3 * strings.bytes_read < rest < 0.5 * strings.bytes_read, (rest, strings.bytes_read)


def test_small_scans_are_cut_for_every_decoding_thread(dataset: str) -> None:
    """A scan of fewer rows than a chunk per decoding thread is cut into a piece per thread
    (not below SPLIT_MIN_BYTES a piece); with decoding kept on the event loop, not at all."""
    from alance.dataset.query import scan
    from alance.io.plans import DECODE_WORKERS, set_offloading

    ours = al.open_dataset(dataset)
    fields = ours.scanner(columns=["v", "s"])._async.read_fields
    assert scan._per_worker(100_000, 200_000, fields) == 100_000 // DECODE_WORKERS
    assert scan._per_worker(10 * 200_000, 200_000, fields) == 200_000  # enough chunks
    assert scan._per_worker(100, 200_000, fields) == 200_000  # a tiny scan: one piece
    big = ours.scanner(columns=["v", "s"])._async
    assert big._streamed.chunk_rows <= -(-ROWS // DECODE_WORKERS)
    try:
        set_offloading(False)
        assert scan._per_worker(100_000, 200_000, fields) == 200_000
    finally:
        set_offloading(True)
    got = ours.to_table(columns=["v", "s"])
    want = lance.dataset(dataset).to_table(columns=["v", "s"])
    assert got.equals(want.cast(got.schema))


def test_tables_read_larger_chunks_than_streams(dataset: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """On local disk ``to_table`` cuts a scan into chunks ``table_chunk_factor`` times
    larger than a stream's (a table holds every row anyway); both give pylance's rows,
    filtered or not."""
    from alance.dataset.query import scan

    seen: list[int] = []  # the rest_rows each chunk read was given
    real = scan.Scanner._read_chunk

    async def spy(self: scan.Scanner, chunk: Any, rest_rows: int) -> list[pa.RecordBatch]:
        seen.append(rest_rows)
        return await real(self, chunk, rest_rows)

    monkeypatch.setattr(scan.Scanner, "_read_chunk", spy)
    ours = al.open_dataset(dataset, storage_options={"scan_chunk_bytes": str(4 << 20)})
    for where in (None, "k < 600", "k < 3"):
        scanner = ours.scanner(columns=["v", "s", "k"], filter=where)
        streamed, table = scanner._async._streamed, scanner._async._table_sizes()
        assert table.rest_rows > streamed.rest_rows
        assert table.chunk_rows >= streamed.chunk_rows
        factor = ours._async._ctx.store.table_chunk_factor
        assert factor > 1
        assert table.rest_rows <= factor * streamed.rest_rows + 1024
        seen.clear()
        got = scanner.to_table()
        assert set(seen) == {table.rest_rows}
        seen.clear()
        streamed_got = scanner.to_reader().read_all()
        assert set(seen) == {streamed.rest_rows}
        want = lance.dataset(dataset).to_table(columns=["v", "s", "k"], filter=where)
        assert got.num_rows == want.num_rows > 0
        assert got.equals(want.cast(got.schema))
        assert streamed_got.equals(got)


def test_limits_and_fixed_chunks_keep_their_cuts(dataset: str) -> None:
    """A limit, or chunk rows the caller chose, cut a table like a stream."""
    from alance.dataset.query.scan import Scanner

    ours = al.open_dataset(dataset)
    for inner in (ours.scanner(columns=["v"], limit=10)._async,
                  Scanner(ours._async._ctx, columns=["v"], chunk_rows=5000)):
        assert inner._table_sizes() == inner._streamed
    got = ours.scanner(columns=["v"], limit=10).to_table()
    assert got.equals(lance.dataset(dataset).to_table(columns=["v"], limit=10))


def test_table_chunks_are_larger_on_local_disk_only(tmp_path: Any) -> None:
    """Local stores read tables in chunks ``table_chunk_factor`` times a stream's (capped);
    cloud stores keep a stream's chunks, so decoding starts as soon as pieces arrive."""
    from alance.io.store import TABLE_CHUNK_MAX_BYTES
    from alance.io.uri import open_store

    local = open_store(str(tmp_path / "ds"))
    assert local.table_chunk_bytes == min(local.table_chunk_factor * local.scan_chunk_bytes,
                                          TABLE_CHUNK_MAX_BYTES) > local.scan_chunk_bytes
    small = open_store(str(tmp_path / "ds"), {"scan_chunk_bytes": "1000"})
    assert small.table_chunk_bytes == small.table_chunk_factor * 1000
    tuned = open_store(str(tmp_path / "ds"), {"scan_chunk_bytes": "1000",
                                              "table_chunk_factor": "2"})
    assert tuned.table_chunk_bytes == 2000
    cloud = open_store("s3://bucket/ds", {"aws_region": "us-east-1",
                                          "aws_endpoint": "http://127.0.0.1:9",
                                          "aws_access_key_id": "k",
                                          "aws_secret_access_key": "s"})
    assert cloud.table_chunk_bytes == cloud.scan_chunk_bytes
