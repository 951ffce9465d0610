"""Single Lance files outside datasets (``alance.file`` / ``alance.sync.file``), checked against
pylance's ``lance.file`` both ways."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import lance.file as pylance_file
import numpy as np
import pyarrow as pa
import pytest

import alance.file as afile
from alance import sync
from alance.errors import InvalidInputError, SchemaMismatchError, UnsupportedFeatureError
from alance.sync import file as sfile
from tests.s3_servers import S3Target

VERSIONS = ["2.0", "2.1", "2.2"]


def sample(n: int = 1_000, start: int = 0) -> pa.Table:
    ids = np.arange(start, start + n)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "s": pa.array([None if i % 7 == 0 else f"value-{i}" for i in ids], pa.string()),
        "v": pa.FixedSizeListArray.from_arrays(
            pa.array(np.arange(n * 4, dtype=np.float32)), 4),
        "l": pa.array([[int(i), None] if i % 3 else None for i in ids],
                      pa.list_(pa.int32())),
        "st": pa.array([{"a": int(i), "b": f"b{i}"} for i in ids],
                       pa.struct([("a", pa.int64()), ("b", pa.string())])),
    })


@pytest.mark.parametrize("version", VERSIONS)
def test_pylance_reads_what_alance_writes(tmp_path: Path, version: str) -> None:
    table = sample(5_000)
    path = tmp_path / "ours.lance"
    with sfile.LanceFileWriter(str(path), version=version) as writer:
        for batch in table.to_batches(max_chunksize=700):
            writer.write_batch(batch)
    theirs = pylance_file.LanceFileReader(str(path))
    assert theirs.read_all().to_table().equals(table)
    meta = theirs.metadata()
    ours = sfile.LanceFileReader(str(path)).metadata()
    assert (meta.major_version, meta.minor_version) == (ours.major_version, ours.minor_version)
    assert meta.num_rows == ours.num_rows == 5_000


@pytest.mark.parametrize("version", VERSIONS)
def test_alance_reads_what_pylance_writes(tmp_path: Path, version: str) -> None:
    table = sample(3_000)
    path = tmp_path / "theirs.lance"
    with pylance_file.LanceFileWriter(str(path), version=version) as writer:
        writer.write_batch(table)
        index = writer.add_global_buffer(b"payload")
        writer.add_schema_metadata("k", "v")
    reader = sfile.LanceFileReader(str(path))
    assert reader.num_rows() == 3_000
    assert reader.read_all(batch_size=256).to_table().equals(table)
    assert reader.read_range(100, 50).to_table().equals(table.slice(100, 50))
    assert reader.take_rows([2_999, 0, 17]).to_table().equals(table.take([2_999, 0, 17]))
    assert reader.read_global_buffer(index) == b"payload"
    meta = reader.metadata()
    theirs = pylance_file.LanceFileReader(str(path)).metadata()
    assert meta.schema.metadata[b"k"] == b"v"
    assert (meta.num_data_bytes, meta.num_column_metadata_bytes,
            meta.num_global_buffer_bytes) == (theirs.num_data_bytes,
                                              theirs.num_column_metadata_bytes,
                                              theirs.num_global_buffer_bytes)
    assert [len(c.pages) for c in meta.columns] == [len(c.pages) for c in theirs.columns]
    stats = reader.file_statistics()
    their_stats = pylance_file.LanceFileReader(str(path)).file_statistics()
    assert [(c.num_pages, c.size_bytes) for c in stats.columns] == [
        (c.num_pages, c.size_bytes) for c in their_stats.columns]


def test_projection_batches_and_errors(tmp_path: Path) -> None:
    table = sample(2_500)
    path = str(tmp_path / "f.lance")
    with sfile.LanceFileWriter(path, table.schema) as writer:
        writer.write_batch(table)
    reader = sfile.LanceFileReader(path, columns=["s", "id"])
    batches = list(reader.read_all(batch_size=1_000).to_batches())
    assert [b.num_rows for b in batches] == [1_000, 1_000, 500]
    assert pa.Table.from_batches(batches).equals(table.select(["s", "id"]))
    with pytest.raises(InvalidInputError, match="out of range"):
        reader.take_rows([0, 2_500])
    with pytest.raises(InvalidInputError, match="out of range"):
        reader.read_range(2_000, 501)
    with pytest.raises(InvalidInputError, match="no columns"):
        sfile.LanceFileReader(path, columns=["nope"])
    with pytest.raises(InvalidInputError, match="global buffer"):
        reader.read_global_buffer(5)


def test_unclosed_or_failed_writes_leave_nothing(tmp_path: Path) -> None:
    path = tmp_path / "a.lance"
    writer = sfile.LanceFileWriter(str(path), pa.schema([("a", pa.int64())]))
    writer.write_batch(pa.table({"a": [1, 2, 3]}))
    del writer
    assert os.listdir(tmp_path) == []
    with pytest.raises(SchemaMismatchError), sfile.LanceFileWriter(str(path)) as writer:
        writer.write_batch(pa.table({"a": [1]}))
        writer.write_batch(pa.table({"b": [1]}))
    assert os.listdir(tmp_path) == []
    with pytest.raises(InvalidInputError, match="Schema is unknown"), \
            sfile.LanceFileWriter(str(path)):
        pass
    assert os.listdir(tmp_path) == []
    writer = sfile.LanceFileWriter(str(path))
    writer.write_batch(pa.table({"a": [1]}))
    assert writer.close() == 1
    assert writer.close() is None  # closing twice is harmless
    with pytest.raises(InvalidInputError, match="closed"):
        writer.write_batch(pa.table({"a": [2]}))
    with pytest.raises(UnsupportedFeatureError):
        sfile.LanceFileWriter(str(tmp_path / "b.lance"), version="legacy")
    with pytest.raises(InvalidInputError, match="unknown Lance file version"):
        sfile.LanceFileWriter(str(tmp_path / "b.lance"), version="9.9")


def test_schema_only_file(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("a", pa.int64(), metadata={"m": "1"})])
    path = str(tmp_path / "empty.lance")
    with sfile.LanceFileWriter(path, schema):
        pass
    reader = sfile.LanceFileReader(path)
    assert reader.num_rows() == 0
    assert reader.metadata().schema.equals(schema, check_metadata=True)
    assert reader.read_all().to_table().num_rows == 0
    assert pylance_file.LanceFileReader(path).num_rows() == 0


def test_small_batches_gather_into_pages(tmp_path: Path) -> None:
    """Like pylance, many small batches make one page per ``data_cache_bytes``, and 2.0 files
    split pages over ``max_page_bytes``."""
    path = str(tmp_path / "f.lance")
    with sfile.LanceFileWriter(path, version="2.1") as writer:
        for i in range(200):
            writer.write_batch(pa.table({"a": pa.array(np.arange(i * 10, i * 10 + 10))}))
    reader = sfile.LanceFileReader(path)
    assert reader.file_statistics().columns[0].num_pages == 1
    assert reader.read_all().to_table().column("a").to_numpy().tolist() == list(range(2_000))
    with sfile.LanceFileWriter(path, version="2.0", max_page_bytes=8) as writer:
        writer.write_batch(pa.table({"a": [1, 2, 3]}))
    assert sfile.LanceFileReader(path).file_statistics().columns[0].num_pages == 3
    with sfile.LanceFileWriter(path, version="2.1", data_cache_bytes=64) as writer:
        for _ in range(4):
            writer.write_batch(pa.table({"a": pa.array(np.arange(10))}))
    assert sfile.LanceFileReader(path).file_statistics().columns[0].num_pages == 4


@pytest.mark.parametrize("version", VERSIONS)
def test_blob_columns_read_back_as_bytes(tmp_path: Path, version: str) -> None:
    schema = pa.schema([pa.field("val", pa.large_binary(),
                                 metadata={"lance-encoding:blob": "true"})])
    values = [b"x" * 300_000, None, b"", b"small"]
    table = pa.table({"val": pa.array(values, pa.large_binary())}, schema=schema)
    ours = str(tmp_path / "ours.lance")
    with sfile.LanceFileWriter(ours, schema, version=version) as writer:
        for _ in range(3):
            writer.write_batch(table)
    expected = pa.concat_tables([table] * 3)
    assert sfile.LanceFileReader(ours).read_all().to_table().equals(expected)
    assert pylance_file.LanceFileReader(ours).read_all().to_table().equals(expected)
    assert sfile.LanceFileReader(ours).metadata().columns[0].pages.__len__() == 1
    theirs = str(tmp_path / "theirs.lance")
    with pylance_file.LanceFileWriter(theirs, schema, version=version) as writer:
        writer.write_batch(table)
    assert sfile.LanceFileReader(theirs).take_rows([3, 1, 0]).to_table().equals(
        table.take([3, 1, 0]))


def test_requested_compression(tmp_path: Path) -> None:
    values = [f"row-{i}-" + "abc" * (i % 5) for i in range(20_000)]
    for scheme in ("zstd", "none"):
        schema = pa.schema([pa.field("s", pa.string(),
                                     metadata={"lance-encoding:compression": scheme})])
        table = pa.table({"s": values}, schema=schema)
        path = str(tmp_path / f"{scheme}.lance")
        with sfile.LanceFileWriter(path, schema) as writer:
            writer.write_batch(table)
        assert pylance_file.LanceFileReader(path).read_all().to_table().equals(table)
        encoding = sfile.LanceFileReader(path).metadata().columns[0].pages[0].encoding
        assert ("general" in encoding) == (scheme == "zstd")
    bad = pa.schema([pa.field("s", pa.string(), metadata={"lance-encoding:compression": "xz"})])
    with pytest.raises(UnsupportedFeatureError, match="xz"), \
            sfile.LanceFileWriter(str(tmp_path / "bad.lance"), bad) as writer:
        writer.write_batch(pa.table({"s": values}, schema=bad))


def test_threads_share_one_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "t.lance")
    schema = pa.schema([("t", pa.int64()), ("i", pa.int64())])
    with sfile.LanceFileWriter(path, schema) as writer:
        def work(t: int) -> None:
            for k in range(20):
                writer.write_batch(pa.table({"t": [t] * 50, "i": range(k * 50, k * 50 + 50)},
                                            schema=schema))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    got = sfile.LanceFileReader(path).read_all().to_table()
    assert got.num_rows == 4_000
    for t in range(4):
        mine = got.filter(pa.compute.equal(got["t"], t))["i"].to_pylist()
        assert sorted(mine) == list(range(1_000))


def test_session_and_object_store(tmp_path: Path, moto_target: S3Target) -> None:
    session = sfile.LanceFileSession(str(tmp_path))
    with session.open_writer("a/one.lance") as writer:
        writer.write_batch(pa.table({"a": [1, 2]}))
    assert session.open_reader("a/one.lance").read_all().to_table() == pa.table({"a": [1, 2]})
    assert (tmp_path / "a" / "one.lance").exists()
    # The same API over S3 (moto), both engines.
    uri = moto_target.uri("files/two.lance")
    options = moto_target.storage_options
    table = sample(1_500)
    with sfile.LanceFileWriter(uri, storage_options=options) as writer:
        writer.write_batch(table)
    assert sfile.LanceFileReader(uri, storage_options=options).read_all().to_table().equals(
        table)
    assert pylance_file.LanceFileReader(uri, storage_options=options).read_all().to_table(
    ).equals(table)


async def test_async_api(tmp_path: Path) -> None:
    path = str(tmp_path / "async.lance")
    table = sample(3_000)
    async with afile.LanceFileWriter(path) as writer:
        await writer.write_batch(table)
        assert writer.add_global_buffer(b"abc") == 1
    reader = await afile.LanceFileReader.open(path)
    batches = [b async for b in reader.read_all(batch_size=1_024)]
    assert pa.Table.from_batches(batches).equals(table)
    assert await reader.read_global_buffer(1) == b"abc"
    assert (await reader.take_rows([5, 1]).to_table()).equals(table.take([5, 1]))
    assert afile.stable_version() == sync.file.stable_version()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_file_of_an_empty_struct_round_trips(tmp_path: Path, version: str) -> None:
    table = pa.table({"empties": [{}] * 3},
                     schema=pa.schema([pa.field("empties", pa.struct([]))]))
    path = str(tmp_path / "f.lance")
    with sfile.LanceFileWriter(path, version=version) as writer:
        writer.write_batch(table)
    assert sfile.LanceFileReader(path).read_all().to_table() == table
    assert pylance_file.LanceFileReader(path).read_all().to_table() == table


def test_asked_for_zstd_is_smaller_than_the_default(tmp_path: Path) -> None:
    """Strings asked to be zstd-compressed get bigger chunks (compressing better) and end
    smaller than the default encoding's file; pylance reads them."""
    values = [f"compress_me_please-{i}" for i in range(10 * 1024)]
    plain = pa.table({"s": values})
    schema = pa.schema([pa.field("s", pa.string(),
                                 metadata={"lance-encoding:compression": "zstd"})])
    asked = pa.table({"s": values}, schema=schema)
    with sfile.LanceFileWriter(str(tmp_path / "d.lance")) as writer:
        writer.write_batch(plain)
    with sfile.LanceFileWriter(str(tmp_path / "z.lance"), schema) as writer:
        writer.write_batch(asked)
    assert os.path.getsize(tmp_path / "z.lance") < os.path.getsize(tmp_path / "d.lance")
    got = pylance_file.LanceFileReader(str(tmp_path / "z.lance")).read_all().to_table()
    assert got.column("s").to_pylist() == values
