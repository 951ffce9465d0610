"""Columns of Arrow dictionary type in 2.x files: read back with the dictionary and indices
the page stores (not re-encoded), and joined across pages and batches as pylance joins them.

Every case is checked against pylance's reader and writer: the dictionary and the indices of
every returned chunk must be pylance's, whichever engine wrote the file.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lance
import lance.file as pylance_file
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.format.v2.blocks import DictValues, Fixed, Variable, concat_blocks, to_arrow
from alance.format.v2.writer import combine_chunks
from alance.sync import file as sfile

VERSIONS = ["2.0", "2.1", "2.2"]
WRITERS = {"alance": sfile.LanceFileWriter, "pylance": pylance_file.LanceFileWriter}
WORDS = pa.array(["foo", "bar", "baz"])
INT32 = pa.int32()


def parts(column: pa.ChunkedArray) -> list[tuple[list[Any], list[Any]]]:
    """Each chunk's dictionary and indices, as Python lists."""
    return [(c.dictionary.to_pylist(), c.indices.to_pylist()) for c in column.chunks]


def dict_array(indices: list[Any], index_type: pa.DataType = INT32,
               dictionary: pa.Array = WORDS) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, index_type), dictionary)


def round_trip(path: Path, arrays: list[pa.Array], version: str, writer: str = "alance",
               **options: Any) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """Write each array as one batch; read the file with alance and with pylance."""
    with WRITERS[writer](str(path), version=version, **options) as w:
        for arr in arrays:
            w.write_batch(pa.table({"d": arr}))
    reader: Any = sfile.LanceFileReader(str(path))
    ours = reader.read_all().to_table().column("d")
    theirs = pylance_file.LanceFileReader(str(path)).read_all().to_table().column("d")
    return ours, theirs


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("index_type", [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
                                        pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_dictionary_and_indices_as_written(tmp_path: Path, version: str, writer: str,
                                           index_type: pa.DataType) -> None:
    # Indices out of dictionary order and items never used: a reader that re-encodes the
    # values would reorder the dictionary and drop "baz".
    arr = dict_array([2, 1, 0, 1, 2, 0, 1], index_type)
    ours, theirs = round_trip(tmp_path / "f.lance", [arr], version, writer)
    assert ours.type == arr.type
    assert ours.chunk(0) == arr
    assert parts(ours) == parts(theirs) == [(["foo", "bar", "baz"], [2, 1, 0, 1, 2, 0, 1])]
    unused = dict_array([0, 0, 1, 1], index_type)
    ours, theirs = round_trip(tmp_path / "g.lance", [unused], version, writer)
    assert ours.chunk(0).dictionary == WORDS
    assert parts(ours) == parts(theirs)


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("version", VERSIONS)
def test_nulls_and_value_types(tmp_path: Path, version: str, writer: str) -> None:
    cases = [
        dict_array([2, None, 0, 0, None], pa.uint8()),  # 2.0 adds a null item, as pylance
        dict_array([1, 0, 1], pa.int16(), pa.array([10, 20], pa.int64())),
        dict_array([0, 0, 0], pa.int8()),
        dict_array([1, 0], pa.int32(), pa.array([b"\x00x", b"y"], pa.binary())),
    ]
    for i, arr in enumerate(cases):
        ours, theirs = round_trip(tmp_path / f"f{i}.lance", [arr], version, writer)
        assert ours.type == arr.type
        assert ours.to_pylist() == arr.to_pylist()
        assert parts(ours) == parts(theirs), arr


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("version", VERSIONS)
def test_batches_gathered_into_one_page(tmp_path: Path, version: str, writer: str) -> None:
    """Batches with different dictionaries gathered into one page: their dictionaries are
    concatenated (not unified); batches sharing one dictionary keep it once."""
    first = dict_array([0, 1, 0], dictionary=pa.array(["a", "b"]))
    second = dict_array([1, 0, 2], dictionary=pa.array(["c", "b", "x"]))
    ours, theirs = round_trip(tmp_path / "f.lance", [first, second], version, writer)
    assert parts(ours) == parts(theirs) == [(["a", "b", "c", "b", "x"], [0, 1, 0, 3, 2, 4])]
    same = dict_array([1, None], dictionary=pa.array(["a", "b"]))
    ours, theirs = round_trip(tmp_path / "g.lance", [first, same], version, writer)
    assert parts(ours) == parts(theirs)
    assert ours.to_pylist() == ["a", "b", "a", "b", None]


def test_combine_chunks_overflowing_index_type() -> None:
    """Joined dictionaries too long for the index type: the values are encoded afresh."""
    a = dict_array([0, 99], pa.int8(), pa.array([str(i) for i in range(100)]))
    b = dict_array([5, 98], pa.int8(), pa.array([str(i) for i in range(100, 200)]))
    joined = combine_chunks(pa.chunked_array([a, b]))
    assert joined.type == a.type
    assert joined.to_pylist() == ["0", "99", "105", "198"]
    assert len(joined.dictionary) == 4


def multi_page_file(path: Path, version: str, writer: str, n: int = 2_000) -> None:
    """Four pages of ``n`` rows, each with its own 5-item dictionary (the third with nulls)."""
    with WRITERS[writer](str(path), version=version, data_cache_bytes=1024) as w:
        for k in range(4):
            values = (np.arange(n) * 7 + k) % 5
            idx: list[Any] = values.tolist()
            if k == 2:
                idx = [None if i % 3 == 0 else v for i, v in enumerate(idx)]
            w.write_batch(pa.table({"d": dict_array(idx, dictionary=pa.array(
                [f"v{k}{i}" for i in range(5)]))}))


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("version", VERSIONS)
def test_reads_across_pages_match_pylance(tmp_path: Path, version: str, writer: str) -> None:
    """A batch within one page gets that page's dictionary; a batch spanning pages gets the
    pages' dictionaries joined, or (when it has fewer rows than they hold) its distinct
    values, sorted."""
    n = 2_000
    path = tmp_path / "f.lance"
    multi_page_file(path, version, writer, n)
    ours, theirs = sfile.LanceFileReader(str(path)), pylance_file.LanceFileReader(str(path))
    assert len(ours.metadata().columns[0].pages) == 4
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("read_range", (n - 2, 4), {}), ("read_range", (n - 5, 10), {}),
        ("read_range", (n - 4, 9), {}), ("read_range", (2 * n - 3, 9), {}),
        ("read_all", (), {"batch_size": 3_000}), ("read_all", (), {"batch_size": 7}),
        ("read_all", (), {}), ("take_rows", ([1, n + 1, n + 2],), {}),
        ("take_rows", (list(range(5)) + list(range(n, n + 7)),), {}),
        ("take_rows", (list(range(0, 4 * n, 97)),), {"batch_size": 13}),
    ]
    for name, args, kwargs in calls:
        got = getattr(ours, name)(*args, **kwargs).to_table().column("d")
        want = getattr(theirs, name)(*args, **kwargs).to_table().column("d")
        assert parts(got) == parts(want), (name, args, kwargs)


@pytest.mark.parametrize("version", VERSIONS)
def test_datasets_keep_dictionaries(tmp_path: Path, version: str) -> None:
    """Scans, takes and filtered scans of a dataset return what pylance returns."""
    table = pa.table({"id": [0, 1, 2, 3],
                      "d": dict_array([2, 0, None, 2], pa.int16(), pa.array(["x", "y", "z"]))})
    writers: list[Any] = [lance.write_dataset, al.write_dataset]
    for write in writers:
        uri = tmp_path / "ds"
        shutil.rmtree(uri, ignore_errors=True)
        write(table, str(uri), data_storage_version=version)
        ours, theirs = al.dataset(str(uri)), lance.dataset(str(uri))
        for call in (lambda ds: ds.to_table(), lambda ds: ds.take([3, 0]),
                     lambda ds: ds.to_table(filter="id > 1")):
            got, want = call(ours).column("d"), call(theirs).column("d")
            assert got.type == want.type == table.schema.field("d").type
            assert parts(got) == parts(want)


def test_blocks_keep_indices_through_take_and_concat() -> None:
    """Unit level: take/slice/concat of one page's indices never look values up."""
    words = Variable(np.array([0, 3, 6, 9], np.int64), np.frombuffer(b"foobarbaz", np.uint8))
    block = DictValues.lookup(Fixed(np.array([2, 0, 1, 2], np.uint8), 8), words)
    joined = concat_blocks([block.slice(0, 2), block.take(np.array([3, 1]))])
    assert isinstance(joined, DictValues) and joined.dictionary is words
    dtype = pa.dictionary(pa.uint8(), pa.string())
    arr = to_arrow(joined, dtype, None)
    assert arr.dictionary.to_pylist() == ["foo", "bar", "baz"]
    assert arr.indices.to_pylist() == [2, 0, 2, 0]
    # The same block read as plain strings is looked up.
    assert to_arrow(joined, pa.string(), None).to_pylist() == ["baz", "foo", "baz", "foo"]
