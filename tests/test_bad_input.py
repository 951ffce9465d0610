"""Bad input and damaged datasets: each gives a typed alance error and changes nothing.

"Unchanged" is checked on the bytes: every file under the dataset root (path, size, content
hash) is the same before and after the failed call, and the rows still read the same (pylance
is the oracle where the dataset is intact).
"""

from __future__ import annotations

import hashlib
import shutil
import struct
import uuid
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import (
    AlreadyExistsError,
    CorruptFileError,
    DatasetNotFoundError,
    InvalidInputError,
    NotFoundError,
    PathOutsideDatasetError,
    SchemaMismatchError,
    UnrepresentableValueError,
    UnsupportedFeatureError,
)
from alance.format.manifest import decode_manifest_file, encode_manifest_file

UNKNOWN_BIT = 1 << 40


def part(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "x": pa.array([i * 0.25 for i in ids], pa.float64()),
        "s": pa.array([f"v{i}" for i in ids], pa.string()),
    })


A, B = part(0, 100), part(100, 100)
AB = pa.concat_tables([A, B])


def tree(root: str | Path) -> dict[str, tuple[int, str]]:
    """Every file under ``root``: relative path -> (size, sha256)."""
    root = Path(root)
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def manifest_path(root: str, version: int) -> Path:
    matches = [p for p in (Path(root) / "_versions").glob("*.manifest")
               if decode_manifest_file(p.read_bytes()).manifest.version == version]
    assert len(matches) == 1
    return matches[0]


def data_file_of(root: str, fragment: int) -> Path:
    """The data file of fragment ``fragment`` of the latest version."""
    ds = al.open_dataset(root)
    path = Path(root) / "data" / ds.fragment_protos()[fragment].files[0].path
    assert path.is_file()
    return path


@pytest.fixture
def ds2(local_uri: str) -> str:
    """A local legacy dataset: version 1 = rows A (fragment 0), version 2 = A + B
    (fragment 1)."""
    al.write_dataset(A, local_uri, data_storage_version="legacy")
    al.write_dataset(B, local_uri, mode="append")
    assert lance.dataset(local_uri).to_table().equals(AB)
    return local_uri


def assert_intact(uri: str, before: dict[str, tuple[int, str]], version: int = 2,
                  rows: pa.Table = AB) -> None:
    """Same files, same bytes, same latest version and rows (alance and pylance agree)."""
    assert tree(uri) == before, "the failed call changed files of the dataset"
    ds = al.open_dataset(uri)
    assert ds.version == version
    assert ds.to_table().equals(rows)
    assert lance.dataset(uri).to_table().equals(rows)


# -- damaged manifests ---------------------------------------------------------------------------

_FF = b"\xff" * 60


def _garbage_framed(good: bytes) -> bytes:
    # a well-framed file (length prefix, footer with the right magic) around undecodable bytes
    return struct.pack("<I", len(_FF)) + _FF + struct.pack("<qhh4s", 0, 0, 2, b"LANC")


MANIFEST_DAMAGE = {
    "truncated_half": lambda b: b[: len(b) // 2],
    "truncated_last_byte": lambda b: b[:-1],
    "empty": lambda b: b"",
    "random_garbage": lambda b: bytes(range(256)) * 3,
    "garbage_with_valid_footer": _garbage_framed,
    "footer_points_past_end": lambda b: b[:-16] + struct.pack("<qhh4s", len(b) * 2, 0, 2,
                                                               b"LANC"),
}


@pytest.mark.parametrize("damage", sorted(MANIFEST_DAMAGE))
async def test_damaged_latest_manifest(ds2: str, damage: str) -> None:
    path = manifest_path(ds2, 2)
    path.write_bytes(MANIFEST_DAMAGE[damage](path.read_bytes()))
    before = tree(ds2)
    with pytest.raises(CorruptFileError):
        await alance.open_dataset(ds2)
    with pytest.raises(CorruptFileError):
        await alance.open_dataset(ds2, version=2)
    # a writer must not commit on top of (or past) a version it cannot read
    with pytest.raises(CorruptFileError):
        await alance.write_dataset(part(500, 5), ds2, mode="append")
    assert tree(ds2) == before
    old = await alance.open_dataset(ds2, version=1)  # the earlier version is still fine
    assert (await old.to_table()).equals(A)


# -- damaged data files --------------------------------------------------------------------------


def _bad_magic(b: bytes) -> bytes:
    return b[:-4] + b"XXXX"


def _bad_metadata_position(b: bytes) -> bytes:
    _pos, major, minor, magic = struct.unpack("<QHH4s", b[-16:])
    return b[:-16] + struct.pack("<QHH4s", len(b) + 1000, major, minor, magic)


def _bad_metadata_bytes(b: bytes) -> bytes:
    pos = struct.unpack("<Q", b[-16:-8])[0]
    return b[:pos + 4] + b"\xff" * (len(b) - 16 - pos - 4) + b[-16:]


DATA_DAMAGE = {
    "truncated_half": lambda b: b[: len(b) // 2],
    "truncated_footer": lambda b: b[:-3],
    "empty": lambda b: b"",
    "bad_magic": _bad_magic,
    "bad_metadata_position": _bad_metadata_position,
    "garbage_metadata": _bad_metadata_bytes,
}


@pytest.mark.parametrize("damage", sorted(DATA_DAMAGE))
async def test_damaged_data_file(ds2: str, damage: str) -> None:
    path = data_file_of(ds2, 1)  # rows 100..199
    path.write_bytes(DATA_DAMAGE[damage](path.read_bytes()))
    before = tree(ds2)
    ds = await alance.open_dataset(ds2)  # the manifest is fine: opening works
    assert await ds.count_rows() == 200  # from the manifest alone
    with pytest.raises(CorruptFileError):
        await ds.to_table()
    with pytest.raises(CorruptFileError):
        await (await alance.open_dataset(ds2)).take([150])
    with pytest.raises(CorruptFileError):
        await (await alance.open_dataset(ds2)).to_table(columns=["s"], filter="id >= 0")
    # rows of the intact fragment still come back
    fresh = await alance.open_dataset(ds2)
    assert (await fresh.take([5, 99])).equals(A.take([5, 99]))
    assert (await (await alance.open_dataset(ds2, version=1)).to_table()).equals(A)
    assert tree(ds2) == before


@pytest.mark.parametrize("damage", ["truncated_half", "empty", "bad_magic"])
async def test_damaged_data_file_in_memory(damage: str) -> None:
    from alance.io.uri import open_store

    uri = f"memory://{uuid.uuid4().hex}/ds.lance"
    await alance.write_dataset(A, uri)
    store = open_store(uri)
    ds = await alance.open_dataset(uri)
    path = f"data/{ds.fragment_protos()[0].files[0].path}"
    await store.put(path, DATA_DAMAGE[damage](await store.get(path)))
    with pytest.raises(CorruptFileError):
        await (await alance.open_dataset(uri)).to_table()


# -- feature flags -------------------------------------------------------------------------------


def _set_flag(uri: str, side: str) -> None:
    path = manifest_path(uri, 2)
    mf = decode_manifest_file(path.read_bytes())
    setattr(mf.manifest, side, getattr(mf.manifest, side) | UNKNOWN_BIT)
    path.write_bytes(encode_manifest_file(mf))


async def test_unknown_reader_flag(ds2: str) -> None:
    _set_flag(ds2, "reader_feature_flags")
    before = tree(ds2)
    with pytest.raises(UnsupportedFeatureError, match=str(UNKNOWN_BIT)):
        await alance.open_dataset(ds2)
    with pytest.raises(UnsupportedFeatureError):
        await (await alance.open_dataset(ds2, version=1)).checkout_version(2)
    with pytest.raises(UnsupportedFeatureError):
        await alance.write_dataset(part(500, 5), ds2, mode="append")
    assert tree(ds2) == before
    assert (await (await alance.open_dataset(ds2, version=1)).to_table()).equals(A)


@pytest.mark.parametrize("mode", ["append", "overwrite"])
async def test_unknown_writer_flag(ds2: str, mode: str) -> None:
    _set_flag(ds2, "writer_feature_flags")
    before = tree(ds2)
    ds = await alance.open_dataset(ds2)  # reading is allowed
    assert (await ds.to_table()).equals(AB)
    with pytest.raises(UnsupportedFeatureError, match=str(UNKNOWN_BIT)):
        await alance.write_dataset(part(500, 5), ds2, mode=mode)  # type: ignore[arg-type]
    # no new manifest, no data files, no transaction file
    assert tree(ds2) == before


# -- values v0.2 files cannot hold ---------------------------------------------------------------

NULL_COLUMNS = {
    "int64": pa.array([1, None, 3], pa.int64()),
    "float64": pa.array([1.0, 2.0, None], pa.float64()),
    "bool": pa.array([True, None, False], pa.bool_()),
    "int32": pa.array([None, 1, 2], pa.int32()),
    "fixed_size_list": pa.array([[1.0, 2.0], None, [5.0, 6.0]], pa.list_(pa.float32(), 2)),
    "fixed_size_list_item": pa.array([[1.0, 2.0], [None, 4.0], [5.0, 6.0]],
                                     pa.list_(pa.float32(), 2)),
}


def _with_column(base: pa.Table, name: str, arr: pa.Array) -> pa.Table:
    return base.slice(0, len(arr)).append_column(name, arr)


@pytest.mark.parametrize("kind", sorted(NULL_COLUMNS))
async def test_null_in_fixed_width_column_on_create(local_uri: str, kind: str) -> None:
    table = _with_column(A, "amount_col", NULL_COLUMNS[kind])
    with pytest.raises(UnrepresentableValueError, match="amount_col"):
        await alance.write_dataset(table, local_uri, data_storage_version="legacy")
    assert not [p for p in tree(local_uri) if not p.startswith("_transactions/")], \
        "files left behind"
    with pytest.raises(DatasetNotFoundError):
        await alance.open_dataset(local_uri)


async def test_null_in_fixed_width_column_on_append(local_uri: str) -> None:
    good = _with_column(A, "amount_col", pa.array([7, 8, 9], pa.int64()))
    await alance.write_dataset(good, local_uri, data_storage_version="legacy")
    before = tree(local_uri)
    bad = _with_column(A, "amount_col", NULL_COLUMNS["int64"])
    with pytest.raises(UnrepresentableValueError, match="amount_col"):
        await alance.write_dataset(bad, local_uri, mode="append")
    assert_intact(local_uri, before, version=1, rows=good)


async def test_bad_value_after_files_were_written(local_uri: str) -> None:
    """The bad row arrives after two data files were already uploaded: they are removed."""
    al.write_dataset(A, local_uri, data_storage_version="legacy")
    before = tree(local_uri)
    batches = [part(1000 + 100 * i, 100).to_batches()[0] for i in range(3)]
    x = batches[2].column(1).to_pylist()
    x[50] = None
    batches[2] = batches[2].set_column(1, "x", pa.array(x, pa.float64()))
    reader = pa.RecordBatchReader.from_batches(A.schema, batches)
    with pytest.raises(UnrepresentableValueError, match="'x'"):
        await alance.write_dataset(reader, local_uri, mode="append", max_rows_per_file=100)
    assert_intact(local_uri, before, version=1, rows=A)


@pytest.mark.parametrize("kind", ["string", "large_string", "binary"])
@pytest.mark.parametrize("mode", ["create", "append"])
async def test_empty_string_in_nullable_column(local_uri: str, kind: str, mode: str) -> None:
    values = ["a", "", None] if kind != "binary" else [b"a", b"", None]
    col = pa.array(values, getattr(pa, kind)())
    if mode == "append":
        await alance.write_dataset(_with_column(A, "label", pa.array(["p", "q", "r"], col.type)),
                                   local_uri, data_storage_version="legacy")
    before = tree(local_uri)
    with pytest.raises(UnrepresentableValueError, match="label"):
        await alance.write_dataset(_with_column(A, "label", col), local_uri, mode=mode,
                                   data_storage_version="legacy")
    if mode == "append":
        assert tree(local_uri) == before
        assert (await alance.open_dataset(local_uri)).version == 1
    else:
        assert not [p for p in tree(local_uri) if not p.startswith("_transactions/")]


# -- schema mismatch, create over existing, missing dataset -----------------------------------

MISMATCHED = {
    "renamed_column": A.rename_columns(["id", "x", "t"]),
    "different_type": A.set_column(0, "id", A.column("id").cast(pa.int32())),
    "string_for_float": A.set_column(1, "x", pa.array([str(v) for v in A.column("x").to_pylist()])),
    "missing_column": A.select(["id", "s"]),  # ds2 is legacy: appends need every column
    "extra_column": A.append_column("y", pa.array(range(100), pa.int64())),
    # (columns in another order are appended by name, as pylance does: tests/test_inputs.py)
}


@pytest.mark.parametrize("case", sorted(MISMATCHED))
async def test_schema_mismatch_on_append(ds2: str, case: str) -> None:
    before = tree(ds2)
    with pytest.raises(SchemaMismatchError):
        await alance.write_dataset(MISMATCHED[case], ds2, mode="append")
    assert_intact(ds2, before)


async def test_create_over_existing(ds2: str) -> None:
    before = tree(ds2)
    with pytest.raises(AlreadyExistsError) as info:
        await alance.write_dataset(part(900, 3), ds2, mode="create")
    assert isinstance(info.value, FileExistsError)
    with pytest.raises(AlreadyExistsError):
        al.write_dataset(part(900, 3), ds2)  # create is the default, also through sync
    assert_intact(ds2, before)


@pytest.mark.parametrize("where", ["missing_path", "empty_dir", "empty_versions_dir", "memory"])
async def test_open_missing_dataset(tmp_path: Path, where: str) -> None:
    uri = str(tmp_path / "nothing.lance")
    if where == "empty_dir":
        Path(uri).mkdir()
    elif where == "empty_versions_dir":
        (Path(uri) / "_versions").mkdir(parents=True)
    elif where == "memory":
        uri = f"memory://{uuid.uuid4().hex}/nothing.lance"
    before = tree(uri) if where != "memory" else None
    with pytest.raises(DatasetNotFoundError) as info:
        await alance.open_dataset(uri)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(DatasetNotFoundError):
        await alance.open_dataset(uri, version=1)
    with pytest.raises(DatasetNotFoundError):
        al.open_dataset(uri)
    if where == "missing_path":
        assert not Path(uri).exists(), "opening created the directory"
    elif before is not None:
        assert tree(uri) == before


# -- manifest paths escaping the dataset root ---------------------------------------------------


@pytest.mark.parametrize("escape", ["../../etc/passwd", "../../outside.lance",
                                    "../../../../../../../../etc/passwd"])
async def test_data_file_path_outside_root(ds2: str, tmp_path: Path, escape: str) -> None:
    # plant a real, valid data file where "../../outside.lance" points (<tmp>/outside.lance),
    # so an unchecked read would succeed rather than fail with "not found"
    root = Path(ds2)
    shutil.copy(data_file_of(ds2, 1), root.parent / "outside.lance")
    path = manifest_path(ds2, 2)
    mf = decode_manifest_file(path.read_bytes())
    mf.manifest.fragments[1].files[0].path = escape
    path.write_bytes(encode_manifest_file(mf))
    before = tree(ds2)

    async def read_all() -> None:
        ds = await alance.open_dataset(ds2)
        await ds.to_table()

    async def take_one() -> None:
        ds = await alance.open_dataset(ds2)
        await ds.take([150])

    with pytest.raises(PathOutsideDatasetError):
        await read_all()
    with pytest.raises(PathOutsideDatasetError):
        await take_one()
    assert tree(ds2) == before


# -- missing versions, bad take indices, bad filters ------------------------------------------


async def test_missing_version(ds2: str) -> None:
    for v in (3, 99):
        with pytest.raises(NotFoundError) as info:
            await alance.open_dataset(ds2, version=v)
        assert not isinstance(info.value, DatasetNotFoundError)  # the dataset does exist
        with pytest.raises(NotFoundError):
            await (await alance.open_dataset(ds2)).checkout_version(v)
    with pytest.raises(NotFoundError):
        al.open_dataset(ds2).checkout_version(99)
    assert_intact(ds2, tree(ds2))


@pytest.mark.parametrize("indices", [[200], [-1], [0, 10**12], [5, 199, 200], [1.5]])
async def test_take_bad_index(ds2: str, indices: list[float]) -> None:
    ds = await alance.open_dataset(ds2)
    with pytest.raises(InvalidInputError):
        await ds.take(indices)
    with pytest.raises(InvalidInputError):
        al.open_dataset(ds2).take(indices)
    assert (await ds.take([199, 0])).equals(AB.take([199, 0]))  # the edges are fine


BAD_FILTERS = ["id <", "no_such_column > 1", "id > 1 AND", "))", "id = = 3", "SELECT * FROM t",
               "id IN (", "s LIKE", "x + ", "id > 'abc'"]


@pytest.mark.parametrize("expr", BAD_FILTERS)
async def test_bad_filter(ds2: str, expr: str) -> None:
    ds = await alance.open_dataset(ds2)
    with pytest.raises(InvalidInputError):
        await ds.to_table(filter=expr)
    with pytest.raises(InvalidInputError):
        await ds.count_rows(filter=expr)
    with pytest.raises(InvalidInputError):
        al.open_dataset(ds2).to_table(filter=expr)
    with pytest.raises(InvalidInputError):
        [b async for b in ds.scan(filter=expr)]


async def test_nulls_in_a_non_nullable_column_are_refused_before_anything_is_written(
        tmp_path: Path) -> None:
    """pylance refuses such data when writing; alance once wrote it and only its readers
    refused the file afterwards."""
    import os

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])
    uri = str(tmp_path / "ds")
    ds = await alance.write_dataset(pa.table({"id": [1], "s": ["a"]}, schema=schema), uri)
    bad = pa.table({"id": [None, 2], "s": ["b", "c"]}, schema=schema)
    with pytest.raises(alance.UnrepresentableValueError, match="'id' is declared as non-nullable"):
        await ds.insert(bad)
    with pytest.raises(alance.InvalidInputError):
        await alance.write_dataset(bad, str(tmp_path / "new"))
    assert (await alance.open_dataset(uri)).version == 1
    assert len(os.listdir(tmp_path / "ds" / "data")) == 1
    assert not (tmp_path / "new").exists() or not any((tmp_path / "new").rglob("*.manifest"))
    with pytest.raises(OSError):  # pylance refuses the same data
        lance.write_dataset(bad, uri, mode="append")
