"""alance writes blob columns (blob v2 with sidecar files in 2.2, blob v1 in 2.0 / 2.1) laid
out as pylance lays them out: pylance reads them identically (scan, take, take_blobs), and the
descriptors equal those pylance writes for the same rows."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

from alance import sync as al
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.format.schema import LanceField
from alance.format.v2.blob import sidecar_path
from alance.format.v2.blob_values import BlobThresholds, blob_values
from alance.format.v2.encode_blob import SidecarState, _plan_packs, encode_blob_v2

KIB, MIB = 1024, 1024 * 1024
_RNG = np.random.default_rng(7)
INLINE_MAX = _RNG.bytes(64 * KIB)  # pylance's largest inline value
PACKED = _RNG.bytes(64 * KIB + 1)  # the smallest packed value
PACKED_MAX = _RNG.bytes(4 * MIB)  # the largest packed value
DEDICATED = _RNG.bytes(4 * MIB + 1)  # the smallest value with a sidecar of its own
VALUES: list[bytes | None] = [b"", None, b"abc", INLINE_MAX, b"", PACKED, DEDICATED, b"y" * 100,
                              PACKED_MAX, None, b"\0"]


def _v2_table(values: list[bytes | None], field: pa.Field | None = None) -> pa.Table:
    ids = pa.array(range(len(values)), pa.int64())
    blob = lance.blob_array(values)
    field = field or lance.blob_field("b")
    return pa.Table.from_arrays([ids, blob], schema=pa.schema([pa.field("id", pa.int64()),
                                                               field]))


def _v1_table(values: list[bytes | None]) -> pa.Table:
    field = pa.field("b", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    return pa.Table.from_arrays([pa.array(range(len(values)), pa.int64()),
                                 pa.array(values, pa.large_binary())],
                                schema=pa.schema([pa.field("id", pa.int64()), field]))


def _files(path: str) -> list[tuple[str, int]]:
    """Sizes of the data and sidecar files, by their place (names are random)."""
    out = []
    for root, _, names in os.walk(os.path.join(path, "data")):
        for name in names:
            full = os.path.join(root, name)
            kind = name if name.endswith(".blob") else "data file"
            out.append((kind, os.path.getsize(full)))
    return sorted(out)


def _blob_bytes(ds: lance.LanceDataset, n: int) -> list[bytes | None]:
    return [None if b is None else b.readall() for b in ds.take_blobs("b", indices=range(n))]


def _check_same_as_pylance(table: pa.Table, tmp_path: Path, name: str, **kwargs: object,
                           ) -> tuple[str, str]:
    """Write ``table`` with both engines; the descriptors and bytes must agree."""
    mine, theirs = str(tmp_path / f"{name}_al"), str(tmp_path / f"{name}_pl")
    al.write_dataset(table, mine, **kwargs)  # type: ignore[arg-type]
    lance.write_dataset(table, theirs, **kwargs)  # type: ignore[arg-type]
    a, b = lance.dataset(mine), lance.dataset(theirs)
    assert a.data_storage_version == b.data_storage_version
    assert a.schema == b.schema
    assert a.to_table().equals(b.to_table())  # the descriptors: same kinds, places, ids
    n = table.num_rows
    expected = table.column("b").to_pylist()
    expected = [None if v is None else (v["data"] if isinstance(v, dict) else v)
                for v in expected]
    assert _blob_bytes(a, n) == expected
    assert _files(mine) == _files(theirs)
    rows = [n - 1, 0, n // 2] if n else []
    assert a.take(rows).equals(b.take(rows))
    ours = al.open_dataset(mine)
    assert ours.to_table().equals(a.to_table())
    got = [None if f is None else f.read() for f in ours.take_blobs("b", indices=list(range(n)))]
    assert got == expected
    return mine, theirs


def test_v22_layout_matches_pylance(tmp_path: Path) -> None:
    """Inline up to 64 KiB, packed up to 4 MiB, dedicated above; nulls and empties."""
    mine, _ = _check_same_as_pylance(_v2_table(VALUES), tmp_path, "v22")
    desc = lance.dataset(mine).to_table().column("b").combine_chunks()
    kinds = desc.field("kind").to_pylist()
    assert [kinds[i] for i in (0, 2, 3, 4, 5, 6, 8)] == [0, 0, 0, 0, 1, 2, 1]
    assert desc.is_null().to_pylist() == [v is None for v in VALUES]


def test_v1_input_in_22_becomes_blob_v2_like_pylance(tmp_path: Path) -> None:
    mine, _ = _check_same_as_pylance(_v1_table(VALUES), tmp_path, "v1in22")
    assert lance.dataset(mine).schema.field("b").type.extension_name == "lance.blob.v2"


@pytest.mark.parametrize("version", ["2.0", "2.1"])
def test_blob_v1_matches_pylance(tmp_path: Path, version: str) -> None:
    _check_same_as_pylance(_v1_table(VALUES), tmp_path, f"v1_{version}",
                           data_storage_version=version)


def test_many_small_values_and_several_fragments(tmp_path: Path) -> None:
    n = 3000
    sizes = _RNG.integers(0, 400, n)
    sizes[::500] = 70_000  # some packed values in every fragment
    data = _RNG.bytes(int(sizes.sum()))
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    values: list[bytes | None] = [data[a:b] for a, b in itertools.pairwise(bounds.tolist())]
    for i in range(0, n, 7):
        values[i] = None
    mine, _ = _check_same_as_pylance(_v2_table(values), tmp_path, "many",
                                     max_rows_per_file=1000)
    ds = lance.dataset(mine)
    assert len(ds.get_fragments()) == 3
    sidecars = [p for p, _ in _files(mine) if p.endswith(".blob")]
    assert len(sidecars) == 3  # one pack per data file


def test_thresholds_from_field_metadata_like_pylance(tmp_path: Path) -> None:
    field = lance.blob_field("b", inline_size_threshold=10, dedicated_size_threshold=1000,
                             pack_file_size_threshold=2500)
    values: list[bytes | None] = [bytes([i]) * s for i, s in
                                  enumerate([10, 11, 1000, 1001, 900, 800, 700, 5])]
    mine, _ = _check_same_as_pylance(_v2_table(values, field), tmp_path, "thr")
    desc = lance.dataset(mine).to_table().column("b").combine_chunks()
    assert desc.field("kind").to_pylist() == [0, 1, 1, 2, 1, 1, 1, 0]
    assert desc.field("blob_id").to_pylist() == [0, 1, 1, 2, 1, 3, 3, 0]


def test_pack_continues_across_batches(tmp_path: Path) -> None:
    """A stream of batches: the open pack sidecar carries over, as in pylance."""
    field = lance.blob_field("b", pack_file_size_threshold=300_000)
    schema = pa.schema([pa.field("id", pa.int64()), field])
    batches = [_v2_table([_RNG.bytes(100_000 + j), b"s"], field).to_batches()[0]
               for j in range(5)]
    table = pa.Table.from_batches(batches, schema)
    mine, theirs = str(tmp_path / "al"), str(tmp_path / "pl")
    al.write_dataset(iter(batches), mine, schema=schema)
    lance.write_dataset(pa.RecordBatchReader.from_batches(schema, iter(batches)), theirs)
    assert lance.dataset(mine).to_table().equals(lance.dataset(theirs).to_table())
    expected = table.column("b").combine_chunks().storage.field("data").to_pylist()
    assert _blob_bytes(lance.dataset(mine), 10) == expected
    assert _files(mine) == _files(theirs)


def test_empty_dataset(tmp_path: Path) -> None:
    path = str(tmp_path / "empty")
    al.write_dataset(_v2_table([]), path)
    ds = lance.dataset(path)
    assert ds.count_rows() == 0
    assert ds.schema.field("b").type.extension_name == "lance.blob.v2"
    al.write_dataset(_v2_table([b"x", None]), path, mode="append")
    assert _blob_bytes(lance.dataset(path), 2) == [b"x", None]


def test_appends_between_engines(tmp_path: Path) -> None:
    path = str(tmp_path / "mixed")
    lance.write_dataset(_v2_table([b"a", PACKED]), path)
    al.write_dataset(_v2_table([None, DEDICATED, b""]), path, mode="append")
    lance.write_dataset(_v2_table([INLINE_MAX]), path, mode="append")
    expected = [b"a", PACKED, None, DEDICATED, b"", INLINE_MAX]
    assert _blob_bytes(lance.dataset(path), 6) == expected
    ours = al.open_dataset(path)
    assert [None if f is None else f.read() for f in ours.take_blobs("b", indices=range(6))
            ] == expected
    assert ours.to_table().column("id").to_pylist() == [0, 1, 0, 1, 2, 0]


def test_refused_where_files_cannot_hold_them(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"2\.2"):
        al.write_dataset(_v2_table([b"a"]), str(tmp_path / "a"), data_storage_version="2.1")
    with pytest.raises(UnsupportedFeatureError, match="legacy"):
        al.write_dataset(_v1_table([b"a"]), str(tmp_path / "b"), data_storage_version="0.2")
    with pytest.raises(UnsupportedFeatureError, match="URI"):
        al.write_dataset(_v2_table(["file:///tmp/x"]), str(tmp_path / "c"))  # type: ignore
    for name in "abc":
        assert not (tmp_path / name / "data").exists() or not os.listdir(tmp_path / name
                                                                         / "data")


def test_failed_write_leaves_no_sidecars(tmp_path: Path) -> None:
    path = tmp_path / "fail"
    schema = _v2_table([]).schema

    def batches():  # type: ignore[no-untyped-def]
        yield _v2_table([DEDICATED, PACKED]).to_batches()[0]
        raise RuntimeError("source failed")

    with pytest.raises(RuntimeError):
        al.write_dataset(batches(), str(path), schema=schema, max_rows_per_file=2)
    leftovers = [f for _, _, fs in os.walk(path) for f in fs]
    assert leftovers == []


def test_rewrites_keep_blobs(tmp_path: Path) -> None:
    """Compaction and update copy the blob bytes of the rows they rewrite (more in
    test_blob_rewrite.py)."""
    path = str(tmp_path / "rw")
    for i in range(2):
        al.write_dataset(_v2_table([PACKED, b"z" * i]), path, mode="append")
    ds = al.open_dataset(path)
    ds.compact_files()
    al.open_dataset(path).update({"id": "id + 1"})
    assert len(lance.dataset(path).get_fragments()) == 1
    assert _blob_bytes(lance.dataset(path), 4) == [PACKED, b"", PACKED, b"z"]


def test_plan_packs_rolls_over_at_the_limit() -> None:
    sizes = np.array([100, 100, 100, 250, 10], np.int64)
    pos, pack, opens, closed, used = _plan_packs(sizes, None, 200)
    assert pos.tolist() == [0, 100, 0, 0, 0] and pack.tolist() == [0, 0, 1, 2, 3]
    assert opens == [0, 2, 3, 4] and closed == [0, 1, 2] and used == 10
    pos, pack, opens, closed, used = _plan_packs(np.array([50, 60]), 150, 200)
    assert pos.tolist() == [150, 0] and pack.tolist() == [-1, 0] and closed == [-1]


def test_sidecar_chunks_stream_views_of_the_input() -> None:
    """Large values reach the sidecars as views of the input buffer (no copy), ids in
    row order, each sidecar completed once."""
    field = LanceField(1, "b", "large_binary")
    arr = pa.array([DEDICATED, PACKED, b"s", PACKED_MAX], pa.large_binary())
    values = blob_values(field, arr)
    state = SidecarState()
    enc = encode_blob_v2(field, values, 0, state, BlobThresholds())
    chunks = enc.sidecars + state.close()
    assert [(c.blob_id, len(c.data), c.done) for c in chunks] == [
        (1, len(DEDICATED), True), (2, len(PACKED), False), (2, len(PACKED_MAX), False),
        (2, 0, True)]
    assert np.shares_memory(np.asarray(chunks[0].data), values.data)
    assert len(enc.inline) == 64
    assert sidecar_path("data/x.lance", 2) == "data/x/" + "01" + "0" * 30 + ".blob"
    with pytest.raises(InvalidInputError):
        blob_values(field, pa.array([1, 2]))


def test_large_batches_are_split_but_laid_out_the_same(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch with more blob bytes than one writer call takes is written in pieces: the
    sidecars and bytes stay those pylance writes (inline values move: pages of the earlier
    pieces lie between them)."""
    import alance.dataset.fragments.write as write_module

    monkeypatch.setattr(write_module, "BLOB_BYTES_PER_CALL", 100_000)
    table = _v2_table(VALUES)
    mine, theirs = str(tmp_path / "al"), str(tmp_path / "pl")
    al.write_dataset(table, mine)
    lance.write_dataset(table, theirs)
    a = lance.dataset(mine).to_table().column("b").combine_chunks()
    b = lance.dataset(theirs).to_table().column("b").combine_chunks()
    for name in ("kind", "size", "blob_id"):
        assert a.field(name).equals(b.field(name))
    sidecar = [k in (1, 2) for k in b.field("kind").fill_null(0).to_pylist()]
    assert a.field("position").filter(sidecar).equals(b.field("position").filter(sidecar))
    assert _blob_bytes(lance.dataset(mine), len(VALUES)) == VALUES
    assert [f for f in _files(mine) if f[0].endswith(".blob")] == [
        f for f in _files(theirs) if f[0].endswith(".blob")]


def test_merge_insert_writes_new_blob_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "mi")
    al.write_dataset(_v2_table([b"a", PACKED]), path)
    source = pa.Table.from_arrays(
        [pa.array([1, 2], pa.int64()), lance.blob_array([b"new", DEDICATED])],
        schema=_v2_table([]).schema)
    ds = al.open_dataset(path)
    ds.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        source)
    got = lance.dataset(path).to_table(columns=["id"]).column(0).to_pylist()
    by_id = dict(zip(got, _blob_bytes(lance.dataset(path), 3), strict=True))
    assert by_id == {0: b"a", 1: b"new", 2: DEDICATED}


def test_two_blob_columns_share_the_sidecar_ids(tmp_path: Path) -> None:
    """Blob ids count per data file over every blob column (column by column), and both
    columns fill one pack, as pylance does."""
    table = pa.table({"a": lance.blob_array([PACKED, DEDICATED, b"q", None]),
                      "b": lance.blob_array([None, PACKED, DEDICATED, INLINE_MAX])})
    mine, theirs = str(tmp_path / "al"), str(tmp_path / "pl")
    al.write_dataset(table, mine)
    lance.write_dataset(table, theirs)
    assert lance.dataset(mine).to_table().equals(lance.dataset(theirs).to_table())
    assert _files(mine) == _files(theirs)
    got = lance.dataset(mine).take_blobs("b", indices=[1, 2, 3])
    assert [f.readall() for f in got] == [PACKED, DEDICATED, INLINE_MAX]
