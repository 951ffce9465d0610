"""Damaged manifests the fuzzer (tests/test_fuzz.py) found reading silently wrong or failing
with foreign exceptions; each now reads as pylance does or raises a typed alance error.

* a deletion file whose count the manifest leaves 0 (unknown, as older writers did) is counted
  from the file, as pylance does: ``count_rows`` and ``take`` agree with the scan;
* schema field ids that are negative or repeated, and parents that are not nested fields;
* a data file whose manifest entry lists another file version than its footer, or a
  ``file_size_bytes`` beyond any file;
* a column that holds nulls although the schema says it is not nullable (pylance refuses it);
* a 2.0 page whose encoding cannot hold the schema's type;
* a column the manifest types otherwise than the data file's own schema does (bytes of the
  right size would read as values of another type).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance._proto import table_pb2
from alance.errors import CorruptFileError
from alance.format.manifest import decode_manifest_file, encode_manifest_file


def table(start: int, n: int, nulls: bool = True) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "x": pa.array([None if nulls and i % 5 == 0 else i * 0.5 for i in ids]),
                     "s": pa.array([f"v{i}" for i in ids]),
                     "l": pa.array([[i] for i in ids], pa.list_(pa.int32()))})


async def make(uri: str, fmt: str, writer: str = "pylance") -> None:
    """Three fragments of 90 rows; version 4 deletes rows with id % 10 = 1."""
    for k in range(3):
        part = table(90 * k, 90, nulls=fmt != "legacy")
        if writer == "pylance":
            lance.write_dataset(part, uri, mode="append" if k else "create",
                                data_storage_version=fmt)
        else:
            await alance.write_dataset(part, uri, mode="append" if k else "create",
                                       data_storage_version=fmt)
    if writer == "pylance":
        lance.dataset(uri).delete("id % 10 = 1")
    else:
        await (await alance.open_dataset(uri)).delete("id % 10 = 1")


def rewrite(uri: str, change: Callable[[table_pb2.Manifest], None]) -> Path:
    paths = list(Path(uri, "_versions").glob("*.manifest"))
    path = max(paths, key=lambda p: decode_manifest_file(p.read_bytes()).manifest.version)
    mf = decode_manifest_file(path.read_bytes())
    change(mf.manifest)
    path.write_bytes(encode_manifest_file(mf))
    return path


@pytest.mark.parametrize("fmt", ["legacy", "2.1"])
async def test_unknown_deletion_count_is_read_from_the_file(local_uri: str, fmt: str) -> None:
    await make(local_uri, fmt, writer="alance")
    for frag in (0, 2):
        rewrite(local_uri, lambda m, f=frag: setattr(m.fragments[f].deletion_file,
                                                     "num_deleted_rows", 0))
    oracle = lance.dataset(local_uri)
    expected = oracle.to_table()
    assert expected.num_rows == 243 and oracle.count_rows() == 243
    ds = await alance.open_dataset(local_uri)
    assert await ds.count_rows() == 243  # (was 252: the 0 read as "nothing deleted")
    assert (await ds.to_table()).equals(expected)
    assert (await ds.take([242, 0, 100])).equals(expected.take([242, 0, 100]))
    assert [await f.count_rows() for f in ds.get_fragments()] == [81, 81, 81]
    # the next commit records the counts
    await alance.write_dataset(table(1000, 3, nulls=False), local_uri, mode="append")
    latest = decode_manifest_file(
        max(Path(local_uri, "_versions").glob("*.manifest"),
            key=lambda p: decode_manifest_file(p.read_bytes()).manifest.version).read_bytes())
    assert [f.deletion_file.num_deleted_rows for f in latest.manifest.fragments[:3]] == [9] * 3


def _field(name: str, **values: int) -> Callable[[table_pb2.Manifest], None]:
    def change(m: table_pb2.Manifest) -> None:
        field = next(f for f in m.fields if f.name == name)
        for key, value in values.items():
            setattr(field, key, value)
    return change


BAD_SCHEMAS = {
    "negative_id": (_field("id", id=-5), "id is -5"),
    "repeated_id": (lambda m: setattr(m.fields[2], "id", m.fields[1].id), "used by two"),
    "unknown_parent": (_field("x", parent_id=77), "parent_id 77"),
    "parent_not_nested": (_field("x", parent_id=0), "has no children"),
}


@pytest.mark.parametrize("case", sorted(BAD_SCHEMAS))
async def test_bad_schema_ids_are_refused(local_uri: str, case: str) -> None:
    change, message = BAD_SCHEMAS[case]
    await make(local_uri, "2.1")
    path = rewrite(local_uri, change)
    with pytest.raises(CorruptFileError, match=message) as info:
        await alance.open_dataset(local_uri)
    assert path.name in str(info.value)


@pytest.mark.parametrize(("version", "fmt"), [((3, 0), "2.0"), ((2, 1), "2.0"),
                                              ((2, 0), "2.1"), ((2, 2), "2.1")])
async def test_data_file_version_must_match_its_footer(local_uri: str, version: tuple[int, int],
                                                       fmt: str) -> None:
    await make(local_uri, fmt)
    names: list[str] = []

    def change(m: table_pb2.Manifest) -> None:
        data_file = m.fragments[1].files[0]
        data_file.file_major_version, data_file.file_minor_version = version
        names.append(data_file.path)

    rewrite(local_uri, change)
    ds = await alance.open_dataset(local_uri)
    with pytest.raises(CorruptFileError, match="manifest lists it as") as info:
        await ds.to_table()
    assert names[0] in str(info.value)
    with pytest.raises(Exception):  # noqa: B017 - pylance refuses it too (in its own words)
        lance.dataset(local_uri).to_table()
    assert (await ds.take([0, 80])).num_rows == 2  # the other fragments read


async def test_file_size_beyond_any_file(local_uri: str) -> None:
    await make(local_uri, "2.1")
    rewrite(local_uri, lambda m: setattr(m.fragments[0].files[0], "file_size_bytes", 2**64 - 1))
    with pytest.raises(CorruptFileError, match="file_size_bytes"):
        await alance.open_dataset(local_uri)
    rewrite(local_uri, lambda m: setattr(m.fragments[0].files[0], "file_size_bytes", 2**62))
    ds = await alance.open_dataset(local_uri)
    with pytest.raises(CorruptFileError, match="past the end"):
        await ds.to_table()


@pytest.mark.parametrize("fmt", ["2.0", "2.1"])
async def test_nulls_in_a_column_declared_not_nullable(local_uri: str, fmt: str) -> None:
    await make(local_uri, fmt)
    rewrite(local_uri, _field("x", nullable=False))
    with pytest.raises(Exception, match="non-nullable"):
        lance.dataset(local_uri).to_table()  # pylance's verdict
    ds = await alance.open_dataset(local_uri)
    for read in (lambda: ds.to_table(), lambda: ds.take([0]),
                 lambda: ds.to_table(columns=["x"], filter="id < 3")):
        with pytest.raises(CorruptFileError, match="'x' holds nulls"):
            await read()
    assert (await ds.to_table(columns=["id"])).num_rows == 243  # other columns read
    assert (await ds.take([1])).column("x").to_pylist() == [1.0]  # a row without a null


def _field_type(name: str, logical_type: str) -> Callable[[table_pb2.Manifest], None]:
    def change(m: table_pb2.Manifest) -> None:
        next(f for f in m.fields if f.name == name).logical_type = logical_type
    return change


# Types the soak fuzzer found read as other values: the manifest retypes a column to a type
# whose values fit the stored bytes (same width, or a layout the decoder accepts).
RETYPED = [("legacy", "alance", "id", "decimal:128:5:0"), ("legacy", "alance", "x", "int32"),
           ("2.0", "pylance", "x", "int64"), ("2.0", "pylance", "x", "fixed_size_list:int32:2"),
           ("2.0", "pylance", "s", "fixed_size_list:int32:2"),
           ("2.0", "pylance", "s", "dict:string:int32:false"),
           ("2.1", "pylance", "x", "fixed_size_list:int32:2"), ("2.1", "alance", "id", "double"),
           ("2.1", "alance", "s", "dict:string:int32:false")]


@pytest.mark.parametrize(("fmt", "writer", "name", "logical_type"), RETYPED)
async def test_a_column_retyped_in_the_manifest_is_refused(
        local_uri: str, fmt: str, writer: str, name: str, logical_type: str) -> None:
    """Data files record their schema by field id: a manifest that types a column otherwise
    is damaged, whatever the decoder could make of the bytes (pylance reads the bits of a
    same-width type; alance refuses rather than return other values)."""
    await make(local_uri, fmt, writer)
    rewrite(local_uri, _field_type(name, logical_type))
    ds = await alance.open_dataset(local_uri)
    stored = "double" if name == "x" else "string" if name == "s" else "int64"
    pattern = (f"field '{name}' \\(id \\d+\\) is '{logical_type}' in the manifest but "
               f"'{stored}' in the data file")
    for read in (lambda: ds.to_table(), lambda: ds.take([0]),
                 lambda: ds.to_table(columns=[name]),
                 lambda: ds.to_table(columns=["id"], filter=f"{name} IS NOT NULL")):
        with pytest.raises(CorruptFileError, match=pattern):
            await read()
