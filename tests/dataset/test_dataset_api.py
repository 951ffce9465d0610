"""pylance dataset-API details: sampling, scanner schemas, the default batch size, list
literals in updates, commits that may not rebase."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from alance import sync as al
from alance.errors import CommitConflictError, DatasetNotFoundError, InvalidInputError
from tests.s3_servers import S3Target


@pytest.fixture
def numbers(local_uri: str) -> al.LanceDataset:
    return al.write_dataset(pa.table({"x": [i * 10 for i in range(40)], "y": range(40)}),
                            local_uri, max_rows_per_file=15)


def test_sample_draws_distinct_rows(numbers: al.LanceDataset) -> None:
    got = numbers.sample(12, columns=["x"], seed=7)
    assert got.num_rows == 12 and got.column_names == ["x"]
    values = got["x"].to_pylist()
    assert len(set(values)) == 12 and all(v % 10 == 0 and 0 <= v < 400 for v in values)
    assert numbers.sample(12, ["x"], seed=7).equals(got)  # a seed repeats the draw
    ordered = numbers.sample(10, randomize_order=False)["y"].to_pylist()
    assert ordered == sorted(ordered)
    assert numbers.sample(40).num_rows == 40
    with pytest.raises(InvalidInputError, match="between 0 and 40"):
        numbers.sample(41)


def test_scanner_schemas(numbers: al.LanceDataset) -> None:
    scanner = numbers.scanner(columns=["y"])
    assert scanner.dataset_schema == numbers.schema
    assert scanner.projected_schema == pa.schema([pa.field("y", pa.int64())])


def test_default_batch_size_from_environment(numbers: al.LanceDataset,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANCE_DEFAULT_BATCH_SIZE", "4")
    sizes = [b.num_rows for b in numbers.to_batches()]
    assert sum(sizes) == 40 and max(sizes) == 4
    monkeypatch.setenv("LANCE_DEFAULT_BATCH_SIZE", "zero")
    with pytest.raises(InvalidInputError, match="LANCE_DEFAULT_BATCH_SIZE"):
        numbers.scanner()
    monkeypatch.delenv("LANCE_DEFAULT_BATCH_SIZE")
    assert max(b.num_rows for b in numbers.to_batches()) == 15


def test_update_with_list_literal(local_uri: str) -> None:
    vecs = pa.FixedSizeListArray.from_arrays(pa.array(range(20), type=pa.float32()), 2)
    ds = al.write_dataset(pa.table({"a": range(10), "vec": vecs}), local_uri)
    ds.update({"vec": "[42.0, 43.0]"}, where="a < 3")
    got = ds.to_table().sort_by("a")
    assert got["vec"].to_pylist()[:4] == [[42.0, 43.0]] * 3 + [[6.0, 7.0]]
    assert got.schema.field("vec").type == pa.list_(pa.float32(), 2)
    with pytest.raises(InvalidInputError):
        ds.update({"vec": "[1.0, 2.0, 3.0]"})
    with pytest.raises(InvalidInputError, match="literals only"):
        ds.update({"vec": "[a, 1.0]"})
    assert ds.version == 2


def test_commit_without_retries_refuses_a_moved_dataset(local_uri: str) -> None:
    table = pa.table({"a": range(10)})
    fragment = al.LanceFragment.create(local_uri, table)
    operation = al.LanceOperation.Overwrite(table.schema, [fragment])
    first = al.LanceDataset.commit(local_uri, operation, max_retries=0)
    al.LanceDataset.commit(local_uri, operation, read_version=first.version, max_retries=0)
    with pytest.raises(CommitConflictError, match=f"Commit conflict for version "
                                                  f"{first.version + 1}"):
        al.LanceDataset.commit(local_uri, operation, read_version=first.version,
                               max_retries=0)
    with pytest.raises(OSError):  # as pylance reports commit conflicts
        al.LanceDataset.commit(local_uri, operation, read_version=first.version,
                               max_retries=0)
    assert al.open_dataset(local_uri).version == first.version + 1


@pytest.mark.parametrize("granularity", ["fragment", "batch"])
def test_shards_cover_every_row_once(local_uri: str, granularity: str) -> None:
    ds = al.write_dataset(pa.table({"a": range(1_000)}), local_uri, max_rows_per_file=100)
    seen: list[int] = []
    for rank in range(3):
        shard = al.ShardedBatchIterator(local_uri if rank else ds, rank, 3, columns=["a"],
                                        batch_size=64, granularity=granularity)
        mine = [v for b in shard for v in b["a"].to_pylist()]
        if granularity == "fragment":  # whole files: every third one
            assert mine[:100] == list(range(rank * 100, rank * 100 + 100))
        else:  # runs of 64 rows, every third one
            assert mine[:64] == list(range(rank * 64, rank * 64 + 64))
        seen += mine
    assert sorted(seen) == list(range(1_000))
    with pytest.raises(InvalidInputError, match="rank"):
        list(al.ShardedBatchIterator(ds, 3, 3))


def test_drop_deletes_a_dataset_root_only(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    ds = al.write_dataset(pa.table({"x": [0, 1]}), str(root))
    ds.delete("x = 0")
    (root / "notes.txt").write_text("unmanaged, goes too")
    al.LanceDataset.drop(root)
    assert not root.exists()
    al.LanceDataset.drop(root, ignore_not_found=True)
    with pytest.raises(DatasetNotFoundError):
        al.LanceDataset.drop(root)
    with pytest.raises(OSError):  # as pylance
        al.LanceDataset.drop(root, ignore_not_found=False)
    # Something that is not a dataset is refused, not emptied.
    other = tmp_path / "other"
    (other / "data").mkdir(parents=True)
    (other / "data" / "precious.bin").write_bytes(b"keep")
    with pytest.raises(InvalidInputError, match="not a dataset root"):
        al.LanceDataset.drop(other)
    assert (other / "data" / "precious.bin").read_bytes() == b"keep"


def test_drop_on_object_store(moto_target: S3Target) -> None:
    uri = moto_target.uri("dropme")
    options = moto_target.storage_options
    al.write_dataset(pa.table({"x": [1]}), uri, storage_options=options)
    al.LanceDataset.drop(uri, storage_options=options)
    with pytest.raises(DatasetNotFoundError):
        al.open_dataset(uri, storage_options=options)


def test_missing_dataset_is_also_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError):  # pylance raises ValueError here
        al.open_dataset(tmp_path / "nothing.lance")
    ds = al.write_dataset(pa.table({"a": [1]}), str(tmp_path / "ds"))
    with pytest.raises(OSError):  # and OSError for an append of another schema
        al.write_dataset(pa.table({"b": [1]}), ds, mode="append")


def test_default_scan_options(local_uri: str) -> None:
    al.write_dataset(pa.table({"a": range(100), "b": range(100)}), local_uri)
    ds = al.dataset(local_uri, default_scan_options={"with_row_id": True, "batch_size": 30})
    assert ds.schema.names == ["a", "b", "_rowid"]
    assert ds.to_table().schema.names == ["a", "b", "_rowid"]
    assert max(b.num_rows for b in ds.to_batches()) == 30
    assert ds.to_table(columns=["a"], batch_size=50).schema.names == ["a", "_rowid"]
    ds.delete("a < 10")  # the defaults follow the object to its new version
    assert ds.schema.names == ["a", "b", "_rowid"] and ds.count_rows() == 90
    ds = al.dataset(local_uri, default_scan_options={"with_row_address": True})
    assert ds.schema.names == ["a", "b", "_rowaddr"]
    assert al.dataset(local_uri).schema.names == ["a", "b"]
    with pytest.raises(InvalidInputError):
        al.dataset(local_uri, default_scan_options={"no_such_option": 1})


@pytest.mark.parametrize("where", ["schema-value", "field-value", "field-key"])
def test_non_utf8_metadata_is_refused(local_uri: str, where: str) -> None:
    bad = {b"k": b"\xff"} if where.endswith("value") else {b"\xfe": b"v"}
    field = pa.field("a", pa.int64(), metadata=None if where.startswith("schema") else bad)
    schema = pa.schema([field], metadata=bad if where.startswith("schema") else None)
    with pytest.raises(InvalidInputError, match="UTF-8"):
        al.write_dataset(pa.table({"a": [1]}, schema=schema), local_uri)
    assert not Path(local_uri).exists()


def test_lance_schema_answers_pylance_and_alance_spellings(local_uri: str) -> None:
    import lance
    schema = pa.schema([pa.field("a", pa.int64(), metadata={"k": "v"}),
                        pa.field("s", pa.struct([("x", pa.int32())]))])
    ds = al.write_dataset(pa.table({"a": [1, 2], "s": [{"x": 1}, {"x": 2}]}, schema=schema),
                          local_uri)
    ours, theirs = ds.lance_schema, lance.dataset(local_uri).lance_schema
    assert [(f.name(), f.id()) for f in ours.fields()] == [
        (f.name(), f.id()) for f in theirs.fields()]
    a = ours.field("a")
    assert a is not None and a.metadata == {"k": "v"} and a.name == "a" and a.id == 0
    assert [c.name() for c in ours.field("s").children()] == ["x"]
    assert ours.field("nope") is None and ours.field_case_insensitive("A").id() == 0
    assert ours.to_pyarrow().equals(ds.schema)
    assert [f.name for f in ours.walk()] == ["a", "s", "x"]  # alance's own API still answers
    import pickle
    assert repr(ours).startswith("Schema {") and pickle.loads(pickle.dumps(ours)) == ours
    # pylance's Project with a schema built from Arrow: drop and rename columns.
    project = al.LanceOperation.Project(al.LanceSchema.from_pyarrow(pa.schema([("b", pa.int64())])))
    ds = al.LanceDataset.commit(ds, project, read_version=1)
    assert ds.to_table().to_pydict() == {"b": [1, 2]}
    assert lance.dataset(local_uri).to_table().to_pydict() == {"b": [1, 2]}


def test_vec_to_table() -> None:
    import numpy as np
    vectors = {"a": np.arange(4.0), "b": np.ones(4)}
    table = al.vector.vec_to_table(vectors)
    assert table.schema == pa.schema([("id", pa.string()),
                                      ("vector", pa.list_(pa.float32(), 4))])
    assert table["vector"].to_pylist() == [[0, 1, 2, 3], [1, 1, 1, 1]]
    matrix = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert al.vector.vec_to_table(matrix, names="v")["v"].to_pylist()[2] == [8, 9, 10, 11]
    assert al.vector.vec_to_table([[1, 2], [3, 4]]).num_rows == 2
    with pytest.raises(InvalidInputError, match="dimensions"):
        al.vector.vec_to_table([[1, 2], [3]])
