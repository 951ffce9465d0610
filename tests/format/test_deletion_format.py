"""Tests for alance.format.deletion, using pylance as the oracle for real deletion files."""

from __future__ import annotations

from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyroaring
import pytest

from alance.errors import CorruptFileError, InvalidInputError
from alance.format.deletion import (
    BITMAP_THRESHOLD,
    DeletionFileKind,
    decode_deletion_file,
    deletion_file_path,
    encode_deletion_file,
)

# ---------------------------------------------------------------------------------------
# Pure round trips
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(DeletionFileKind))
def test_roundtrip_forced_kind(kind: DeletionFileKind) -> None:
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 2**32, size=3000, dtype=np.uint64)
    # add duplicates and the extreme values
    raw = np.concatenate([raw, raw[:100], np.array([0, 2**32 - 1], np.uint64)])
    got_kind, data = encode_deletion_file(raw, kind=kind)
    assert got_kind is kind
    out = decode_deletion_file(kind, data)
    assert out.dtype == np.uint32
    np.testing.assert_array_equal(out, np.unique(raw).astype(np.uint32))


def test_roundtrip_python_iterable() -> None:
    kind, data = encode_deletion_file([7, 3, 3, 0, 12])
    assert kind is DeletionFileKind.ARROW_ARRAY
    np.testing.assert_array_equal(decode_deletion_file(kind, data), [0, 3, 7, 12])


def test_roundtrip_pyarrow_array() -> None:
    kind, data = encode_deletion_file(pa.array([5, 1, 9], pa.int64()))
    np.testing.assert_array_equal(decode_deletion_file(kind, data), [1, 5, 9])


def test_kind_threshold() -> None:
    below, _ = encode_deletion_file(np.arange(BITMAP_THRESHOLD - 1))
    at, _ = encode_deletion_file(np.arange(BITMAP_THRESHOLD))
    # duplicates do not count towards the threshold
    dup, _ = encode_deletion_file(np.repeat(np.arange(BITMAP_THRESHOLD - 1), 2))
    assert BITMAP_THRESHOLD == 5000
    assert below is DeletionFileKind.ARROW_ARRAY
    assert at is DeletionFileKind.BITMAP
    assert dup is DeletionFileKind.ARROW_ARRAY


def test_arrow_layout_matches_lance() -> None:
    _, data = encode_deletion_file([4, 2])
    assert data[:6] == b"ARROW1"  # IPC file format, not stream
    reader = ipc.open_file(pa.BufferReader(data))
    assert reader.num_record_batches == 1
    assert reader.schema == pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    assert not reader.schema.metadata


def test_bitmap_has_no_run_containers() -> None:
    _, data = encode_deletion_file(np.arange(100_000))
    # 12346 = portable format cookie without run containers
    assert int.from_bytes(data[:4], "little") == 12346


def test_decode_bitmap_with_run_containers() -> None:
    bitmap = pyroaring.BitMap(range(10, 70_000))
    bitmap.run_optimize()
    data = bitmap.serialize()
    assert int.from_bytes(data[:2], "little") == 12347  # has runs
    out = decode_deletion_file(DeletionFileKind.BITMAP, data)
    np.testing.assert_array_equal(out, np.arange(10, 70_000, dtype=np.uint32))


def test_decode_uncompressed_unsorted_arrow() -> None:
    schema = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_batch(pa.record_batch([pa.array([9, 1, 5], pa.uint32())], schema=schema))
    out = decode_deletion_file(0, sink.getvalue().to_pybytes())
    np.testing.assert_array_equal(out, [1, 5, 9])


def test_deletion_file_path() -> None:
    assert (
        deletion_file_path(21, 12, 2**64 - 1, DeletionFileKind.ARROW_ARRAY)
        == "_deletions/21-12-18446744073709551615.arrow"
    )
    assert deletion_file_path(0, 3, 7, DeletionFileKind.BITMAP) == "_deletions/0-3-7.bin"
    with pytest.raises(InvalidInputError):
        deletion_file_path(-1, 0, 0, DeletionFileKind.BITMAP)
    with pytest.raises(InvalidInputError):
        deletion_file_path(0, 0, 2**64, DeletionFileKind.BITMAP)


# ---------------------------------------------------------------------------------------
# Error cases
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [[], [-1], [2**32], [1.5], np.array([1.0]), pa.array([1, None])],
    ids=["empty", "negative", "too-big", "float-list", "float-array", "null"],
)
def test_encode_rejects(bad: object) -> None:
    with pytest.raises(InvalidInputError):
        encode_deletion_file(bad)  # type: ignore[arg-type]


def _ipc_file(batches: list[pa.RecordBatch], schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _bad_arrow_files() -> dict[str, bytes]:
    good_schema = pa.schema([pa.field("row_id", pa.uint32(), nullable=False)])
    one = pa.record_batch([pa.array([1, 2], pa.uint32())], schema=good_schema)
    i32 = pa.schema([pa.field("row_id", pa.int32())])
    other = pa.schema([pa.field("offset", pa.uint32())])
    nullable = pa.schema([pa.field("row_id", pa.uint32())])
    stream = pa.BufferOutputStream()
    with ipc.new_stream(stream, good_schema) as writer:
        writer.write_batch(one)
    _, good = encode_deletion_file(np.arange(100))
    return {
        "empty": b"",
        "garbage": b"not an arrow file at all",
        "truncated": good[: len(good) // 2],
        "stream-format": stream.getvalue().to_pybytes(),
        "two-batches": _ipc_file([one, one], good_schema),
        "no-batches": _ipc_file([], good_schema),
        "int32": _ipc_file([pa.record_batch([pa.array([1], pa.int32())], schema=i32)], i32),
        "wrong-name": _ipc_file(
            [pa.record_batch([pa.array([1], pa.uint32())], schema=other)], other
        ),
        "nulls": _ipc_file(
            [pa.record_batch([pa.array([1, None], pa.uint32())], schema=nullable)], nullable
        ),
    }


@pytest.mark.parametrize("name", sorted(_bad_arrow_files()))
def test_decode_corrupt_arrow(name: str) -> None:
    with pytest.raises(CorruptFileError):
        decode_deletion_file(DeletionFileKind.ARROW_ARRAY, _bad_arrow_files()[name])


@pytest.mark.parametrize("cut", [0, 2, 7, 100, -1])
def test_decode_corrupt_bitmap(cut: int) -> None:
    _, good = encode_deletion_file(np.arange(0, 20_000, 3))
    with pytest.raises(CorruptFileError):
        decode_deletion_file(DeletionFileKind.BITMAP, good[:cut])


def test_decode_unknown_kind() -> None:
    with pytest.raises(CorruptFileError):
        decode_deletion_file(5, b"")


# ---------------------------------------------------------------------------------------
# Against pylance
# ---------------------------------------------------------------------------------------

ROWS_PER_FILE = 12_000
NUM_ROWS = 2 * ROWS_PER_FILE + 500  # three fragments, the last one small


def _make_dataset(path: Path, storage_version: str) -> lance.LanceDataset:
    table = pa.table({"id": pa.array(np.arange(NUM_ROWS), pa.int64())})
    ds = lance.write_dataset(
        table,
        path,
        max_rows_per_file=ROWS_PER_FILE,
        max_rows_per_group=1000,  # legacy files otherwise round fragments to 1024-row groups
        data_storage_version=storage_version,
    )
    assert [f.metadata.physical_rows for f in ds.get_fragments()] == [12_000, 12_000, 500]
    return ds


def _expected_offsets(predicate: np.ndarray, fragment_index: int) -> np.ndarray:
    start = fragment_index * ROWS_PER_FILE
    stop = min(start + ROWS_PER_FILE, NUM_ROWS)
    return np.nonzero(predicate[start:stop])[0].astype(np.uint32)


_IDS = np.arange(NUM_ROWS)
CASES = {
    # (sql, mask over ids)
    "sparse": ("id % 97 = 0", _IDS % 97 == 0),
    "dense": ("id % 2 = 1", _IDS % 2 == 1),
    "mod3": ("id % 3 = 0", _IDS % 3 == 0),
}


@pytest.mark.parametrize("storage_version", ["legacy", "stable"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_decode_pylance_files(tmp_path: Path, storage_version: str, case: str) -> None:
    sql, mask = CASES[case]
    ds = _make_dataset(tmp_path / "ds", storage_version)
    ds.delete(sql)
    ds = lance.dataset(tmp_path / "ds")
    seen_kinds = set()
    for index, fragment in enumerate(ds.get_fragments()):
        meta = fragment.metadata
        deletion = meta.deletion_file
        expected = _expected_offsets(mask, index)
        assert deletion is not None
        kind = _kind_of(deletion)
        # upstream's choice for a fresh delete matches ours
        assert kind is encode_deletion_file(expected)[0]
        seen_kinds.add(kind)
        rel = deletion_file_path(meta.id, deletion.read_version, deletion.id, kind)
        assert rel == deletion.path(meta.id)
        got = decode_deletion_file(kind, (tmp_path / "ds" / rel).read_bytes())
        np.testing.assert_array_equal(got, expected)
        assert deletion.num_deleted_rows == len(expected)
    if case == "dense":
        # 6000 deletions in the big fragments give bitmaps, the 500-row one an array
        assert seen_kinds == {DeletionFileKind.ARROW_ARRAY, DeletionFileKind.BITMAP}
    else:
        # at most 4000 deletions per fragment: arrays only
        assert seen_kinds == {DeletionFileKind.ARROW_ARRAY}


def _kind_of(deletion: object) -> DeletionFileKind:
    file_type = deletion.file_type  # type: ignore[attr-defined]
    return DeletionFileKind.BITMAP if file_type == "bitmap" else DeletionFileKind.ARROW_ARRAY


@pytest.mark.parametrize("storage_version", ["legacy", "stable"])
@pytest.mark.parametrize("case", ["sparse", "dense"])
def test_pylance_reads_our_files(tmp_path: Path, storage_version: str, case: str) -> None:
    """Overwrite pylance's deletion files with ours for a *different* set of the same size.

    If pylance really decodes our bytes, the visible rows follow our offsets, not the
    predicate pylance deleted with.
    """
    sql, mask = CASES[case]
    ds = _make_dataset(tmp_path / "ds", storage_version)
    ds.delete(sql)
    ds = lance.dataset(tmp_path / "ds")
    rng = np.random.default_rng(7)
    deleted_ids = []
    for index, fragment in enumerate(ds.get_fragments()):
        meta = fragment.metadata
        deletion = meta.deletion_file
        kind = _kind_of(deletion)
        start = index * ROWS_PER_FILE
        num_rows = min(ROWS_PER_FILE, NUM_ROWS - start)
        ours = rng.choice(num_rows, size=deletion.num_deleted_rows, replace=False)
        assert not np.array_equal(np.sort(ours), _expected_offsets(mask, index))
        got_kind, data = encode_deletion_file(ours, kind=kind)
        assert got_kind is kind
        rel = deletion_file_path(meta.id, deletion.read_version, deletion.id, kind)
        (tmp_path / "ds" / rel).write_bytes(data)
        deleted_ids.append(ours + start)
    result = lance.dataset(tmp_path / "ds").to_table()["id"].to_numpy()
    np.testing.assert_array_equal(np.sort(result), np.setdiff1d(_IDS, np.concatenate(deleted_ids)))
