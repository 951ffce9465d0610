"""Blob columns: pylance writes them (blob v1 in 2.0/2.1 files, blob v2 in 2.2), alance scans
them (descriptors, as pylance returns them) and opens their bytes lazily (take_blobs)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import CorruptFileError, InvalidInputError, UnsupportedFeatureError
from alance.format.v2 import blob

SMALL = b"small"
INLINE_MAX = os.urandom(64 * 1024)  # pylance's largest inline blob
PACKED = os.urandom(100_000)  # > inline threshold: a packed sidecar file in 2.2
DEDICATED = os.urandom(4 * 1024 * 1024 + 1)  # > packed threshold: its own sidecar file
VALUES: list[bytes | None] = [b"", SMALL, None, INLINE_MAX, PACKED, DEDICATED, b"x" * 300]


def _blob_table(values: list[bytes | None], version: str) -> pa.Table:
    ids = pa.array(range(len(values)), pa.int64())
    if version == "2.2":
        return pa.table({"id": ids, "data": lance.blob_array(values)})
    field = pa.field("data", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    schema = pa.schema([pa.field("id", pa.int64()), field])
    return pa.table([ids, pa.array(values, pa.large_binary())], schema=schema)


@pytest.fixture(scope="module")
def blob_datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """One pylance-written dataset per file version, two fragments each."""
    root = tmp_path_factory.mktemp("blobs")
    out = {}
    for version in ("2.0", "2.1", "2.2"):
        path = str(root / f"v{version}")
        lance.write_dataset(_blob_table(VALUES, version), path, data_storage_version=version,
                            max_rows_per_file=4)
        out[version] = path
    return out


def _same_blobs(mine: list, theirs: list) -> None:
    assert len(mine) == len(theirs)
    for a, b in zip(mine, theirs, strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert a.size() == b.size()
            assert a.read() == b.read()


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_scan_returns_pylance_descriptors(blob_datasets: dict[str, str], version: str) -> None:
    path = blob_datasets[version]
    ours, theirs = al.open_dataset(path).to_table(), lance.dataset(path).to_table()
    assert ours.schema.equals(theirs.schema, check_metadata=True)
    assert ours.equals(theirs)
    expected = blob.DESCRIPTOR_V2 if version == "2.2" else blob.DESCRIPTOR_V1
    assert ours.schema.field("data").type == expected
    # The schema stays the logical one; other columns read normally, with filters and takes.
    ds = al.open_dataset(path)
    assert ds.schema.field("data").type != expected
    assert ds.to_table(columns=["id"], filter="id >= 5").column("id").to_pylist() == [5, 6]
    assert ds.take([6, 2], columns=["id", "data"]).equals(
        lance.dataset(path).take([6, 2], columns=["id", "data"]))


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_take_blobs_same_bytes_as_pylance(blob_datasets: dict[str, str], version: str) -> None:
    path = blob_datasets[version]
    order = [6, 5, 2, 0, 1, 4, 3, 5]  # any order, repeats allowed
    mine = al.open_dataset(path).take_blobs("data", indices=order)
    _same_blobs(mine, lance.dataset(path).take_blobs("data", indices=order))
    assert [None if b is None else b.size() for b in mine] == [
        None if VALUES[i] is None else len(VALUES[i]) for i in order]  # type: ignore[arg-type]
    assert mine[2] is None and mine[3] is not None and mine[3].read() == b""


def test_blob_v2_kinds_and_sidecar_files(blob_datasets: dict[str, str]) -> None:
    """pylance 14's layout: inline up to 64 KiB, packed up to 4 MiB, dedicated above."""
    table = al.open_dataset(blob_datasets["2.2"]).to_table()
    kinds = table.column("data").combine_chunks().field("kind").to_pylist()
    assert kinds == [0, 0, None, 0, 1, 2, 0]
    sidecars = list(Path(blob_datasets["2.2"], "data").glob("*/*.blob"))
    assert len(sidecars) == 2


async def test_async_blob_file_reads_ranges(blob_datasets: dict[str, str]) -> None:
    ds = await alance.open_dataset(blob_datasets["2.2"])
    (packed, dedicated) = await ds.take_blobs("data", indices=[4, 5], buffer_size=1024)
    assert packed is not None and dedicated is not None
    async with dedicated as f:
        assert f.size() == len(DEDICATED)
        assert await f.read(10) == DEDICATED[:10]
        assert f.tell() == 10
        assert await f.read(5000) == DEDICATED[10:5010]  # larger than the read-ahead buffer
        f.seek(-7, io.SEEK_END)
        assert await f.read() == DEDICATED[-7:]
        assert await f.read() == b""
        f.seek(100)
        buf = bytearray(50)
        assert await f.readinto(buf) == 50 and bytes(buf) == DEDICATED[100:150]
        assert await f.read_range(1000, 20) == DEDICATED[1000:1020]
        assert f.tell() == 150
        with pytest.raises(InvalidInputError):
            f.seek(-1)
    assert f.closed
    with pytest.raises(ValueError):
        await f.read(1)
    theirs = lance.dataset(blob_datasets["2.2"]).take_blobs("data", indices=[4])[0]
    assert theirs is not None
    theirs.seek(1234)
    packed.seek(1234)
    assert await packed.read(777) == theirs.read(777)


def test_blocking_blob_file_is_a_binary_file(blob_datasets: dict[str, str]) -> None:
    (f,) = al.open_dataset(blob_datasets["2.1"]).take_blobs("data", indices=[5])
    assert f is not None
    reader = io.BufferedReader(f, buffer_size=4096)
    assert reader.read(3) == DEDICATED[:3]
    reader.seek(2_000_000)
    assert reader.read(10) == DEDICATED[2_000_000:2_000_010]
    assert f.read_range(7, 3) == DEDICATED[7:10]
    reader.seek(0)
    assert reader.read() == DEDICATED


def test_take_blobs_by_ids_and_addresses(tmp_path: Path) -> None:
    path = str(tmp_path / "ids.lance")
    values = [os.urandom(n) if n >= 0 else None
              for n in (0, 10, -1, 70_000, 200, 5, -1, 90_000)]
    lance.write_dataset(_blob_table(values, "2.2"), path, max_rows_per_file=3,
                        enable_stable_row_ids=True)
    lance.dataset(path).delete("id = 1 OR id = 4")
    pds, ds = lance.dataset(path), al.open_dataset(path)
    ids = pds.to_table(columns=["id"], with_row_id=True).column("_rowid").to_pylist()[::-1]
    _same_blobs(ds.take_blobs("data", ids=ids), pds.take_blobs("data", ids=ids))
    addrs = pds.to_table(columns=[], with_row_address=True).column("_rowaddr").to_pylist()
    _same_blobs(ds.take_blobs("data", addresses=addrs), pds.take_blobs("data", addresses=addrs))
    idx = [5, 0, 3]  # positions skip deleted rows
    _same_blobs(ds.take_blobs("data", indices=idx), pds.take_blobs("data", indices=idx))
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data", ids=[1])  # a deleted row
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data", indices=[6])


def test_external_blob_uri(tmp_path: Path) -> None:
    target = tmp_path / "outside.bin"
    target.write_bytes(bytes(range(256)) * 8)
    uri = target.as_uri()
    path = str(tmp_path / "ext.lance")
    table = pa.table({"data": lance.blob_array([uri, lance.Blob.from_uri(uri, 3, 10), None])})
    lance.write_dataset(table, path, allow_external_blob_outside_bases=True)
    _same_blobs(al.open_dataset(path).take_blobs("data", indices=[0, 1, 2]),
                lance.dataset(path).take_blobs("data", indices=[0, 1, 2]))


def test_missing_or_truncated_blob_files(tmp_path: Path,
                                         blob_datasets: dict[str, str]) -> None:
    path = str(tmp_path / "broken.lance")
    shutil.copytree(blob_datasets["2.2"], path)
    packed, dedicated = sorted(Path(path, "data").glob("*/*.blob"),
                               key=lambda p: p.stat().st_size)
    packed.unlink()
    with dedicated.open("r+b") as fh:
        fh.truncate(1000)
    ds = al.open_dataset(path)
    missing, short = ds.take_blobs("data", indices=[4, 5])  # lazy: nothing read yet
    assert missing is not None and short is not None
    with pytest.raises(CorruptFileError, match="missing"):
        missing.read()
    with pytest.raises(CorruptFileError, match="shorter"):
        short.read()
    # The other columns and inline blobs still read.
    assert ds.to_table(columns=["id"]).num_rows == len(VALUES)
    (inline,) = ds.take_blobs("data", indices=[1])
    assert inline is not None and inline.read() == SMALL


def test_bad_selections_and_columns(blob_datasets: dict[str, str]) -> None:
    ds = al.open_dataset(blob_datasets["2.2"])
    with pytest.raises(InvalidInputError, match="not a blob column"):
        ds.take_blobs("id", indices=[0])
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data")
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data", indices=[0], ids=[0])
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data", indices=[len(VALUES)])
    with pytest.raises(InvalidInputError):
        ds.take_blobs("data", addresses=[(99 << 32) | 0])
    assert ds.take_blobs("data", indices=np.array([], np.int64)) == []


def test_rewriting_blob_columns_keeps_the_bytes(tmp_path: Path,
                                               blob_datasets: dict[str, str]) -> None:
    """Update rewrites rows of blob columns with their bytes (more in
    test_blob_rewrite.py); updating a blob column itself is refused (typed)."""
    path = str(tmp_path / "rw.lance")
    shutil.copytree(blob_datasets["2.2"], path)
    ds = al.open_dataset(path)
    version = ds.version
    with pytest.raises(UnsupportedFeatureError):
        ds.update({"data": None}, where="id < 3")
    assert lance.dataset(path).version == version
    moved = str(tmp_path / "moved.lance")
    shutil.copytree(blob_datasets["2.2"], moved)
    al.open_dataset(moved).update({"id": "id + 10"}, where="id = 5")
    assert al.open_dataset(moved).take_blobs("data", indices=[6])[0].read() == DEDICATED
    # Metadata-only and new-column operations still work, and pylance reads the result.
    ds.delete("id = 0")
    ds = al.open_dataset(path).add_columns({"twice": "id * 2"})
    assert lance.dataset(path).to_table(columns=["twice"]).column(0).to_pylist() == [
        2, 4, 6, 8, 10, 12]
    _same_blobs(ds.take_blobs("data", indices=[3]),
                lance.dataset(path).take_blobs("data", indices=[3]))


def test_blob_inside_a_struct_is_refused_typed(tmp_path: Path) -> None:
    path = str(tmp_path / "nested.lance")
    inner = pa.StructArray.from_arrays(
        [pa.array([1, 2]), lance.blob_array([b"a", None])],
        fields=[pa.field("x", pa.int64()), lance.blob_field("b")])
    lance.write_dataset(pa.table({"id": [1, 2], "s": inner}), path)
    ds = al.open_dataset(path)
    with pytest.raises(UnsupportedFeatureError, match="inside"):
        ds.to_table()
    assert ds.to_table(columns=["id"]).column(0).to_pylist() == [1, 2]
