"""Fragment objects, fragment metadata and uncommitted fragment writes (pylance's
``LanceFragment``, ``FragmentMetadata``, ``write_fragments``), checked against pylance."""

from __future__ import annotations

import datetime as dt
import json
import pickle
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.fragment import LanceFragment as AsyncFragment
from alance.errors import EmptyWriteError, InvalidInputError


def _table(start: int, stop: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, stop), pa.int64()),
                     "s": [f"v{i}" for i in range(start, stop)]})


def test_get_fragments_returns_fragment_objects(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 100), local_uri, max_rows_per_file=40)
    frags = ds.get_fragments()
    assert [f.fragment_id for f in frags] == [0, 1, 2]
    assert all(isinstance(f, al.LanceFragment) for f in frags)
    assert [f.physical_rows for f in frags] == [40, 40, 20]
    assert frags[1].count_rows() == 40 and frags[1].count_rows("id >= 70") == 10
    assert frags[2].to_table(columns=["id"])["id"].to_pylist() == list(range(80, 100))
    assert frags[1].take([0, 39], columns=["id"])["id"].to_pylist() == [40, 79]
    assert frags[1].head(2)["id"].to_pylist() == [40, 41]
    second = ds.get_fragment(2)
    assert second is not None and second.fragment_id == 2 and ds.get_fragment(9) is None
    assert frags[0].data_files()[0].path == ds.fragment_protos()[0].files[0].path
    assert frags[0].deletion_file() is None
    # the same answers as pylance's fragments of the same dataset
    theirs = lance.dataset(local_uri).get_fragments()
    assert [f.count_rows() for f in frags] == [f.count_rows() for f in theirs]
    assert frags[1].to_table() == theirs[1].to_table()


async def test_async_fragments_are_coherent(local_uri: str) -> None:
    ds = await alance.write_dataset(_table(0, 30), local_uri, max_rows_per_file=10)
    frags = ds.get_fragments()
    assert all(isinstance(f, AsyncFragment) for f in frags)
    assert await frags[2].count_rows() == 10
    assert (await frags[0].to_table(filter="id > 7"))["id"].to_pylist() == [8, 9]
    # a scan of the dataset limited to fragment objects
    part = await ds.scanner(columns=["id"], fragments=[frags[1]]).to_table()
    assert part["id"].to_pylist() == list(range(10, 20))
    with pytest.raises(InvalidInputError):
        AsyncFragment(ds, 42)


def test_fragment_metadata_json_round_trip_with_pylance(local_uri: str) -> None:
    al.write_dataset(_table(0, 50), local_uri)
    al.dataset(local_uri).delete("id < 5")
    mine = al.dataset(local_uri).get_fragments()[0].metadata
    theirs = lance.dataset(local_uri).get_fragments()[0].metadata
    assert mine.to_json() == theirs.to_json()
    # each side reads the other's JSON
    from lance.fragment import FragmentMetadata as PyMeta
    assert PyMeta.from_json(json.dumps(mine.to_json())).to_json() == theirs.to_json()
    assert al.FragmentMetadata.from_json(json.dumps(theirs.to_json())) == mine
    assert mine.num_deletions == 5 and mine.num_rows == 45
    assert mine.to_proto() == al.dataset(local_uri).fragment_protos()[0]


def test_fragment_objects_pickle(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 20), local_uri, max_rows_per_file=10)
    meta = ds.get_fragments()[1].metadata
    assert pickle.loads(pickle.dumps(meta)) == meta
    frag = pickle.loads(pickle.dumps(ds.get_fragments()[1]))
    assert frag.to_table()["id"].to_pylist() == list(range(10, 20))
    other = al.FragmentMetadata(meta.id, list(meta.files), meta.physical_rows + 1)
    assert other != meta


def test_write_fragments_committed_by_pylance(local_uri: str) -> None:
    al.write_dataset(_table(0, 10), local_uri)
    frags = al.write_fragments(_table(10, 25), local_uri, max_rows_per_file=10)
    assert isinstance(frags, list) and [f.physical_rows for f in frags] == [10, 5]
    from lance.fragment import FragmentMetadata as PyMeta
    converted = [PyMeta.from_json(json.dumps(f.to_json())) for f in frags]
    ds = lance.LanceDataset.commit(local_uri, lance.LanceOperation.Append(converted),
                                   read_version=1)
    assert ds.to_table()["id"].to_pylist() == list(range(25))
    assert al.dataset(local_uri).to_table() == ds.to_table()


def test_pylance_fragments_committed_by_alance(local_uri: str) -> None:
    lance.write_dataset(_table(0, 10), local_uri)
    theirs = lance.fragment.write_fragments(_table(10, 20), local_uri)
    mine = [al.FragmentMetadata.from_json(json.dumps(f.to_json())) for f in theirs]
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Append(mine), read_version=1)
    assert ds.version == 2
    assert lance.dataset(local_uri).to_table()["id"].to_pylist() == list(range(20))


def test_write_fragments_return_transaction_and_create(tmp_path: Path) -> None:
    uri = str(tmp_path / "new")
    txn = al.write_fragments(_table(0, 8), uri, return_transaction=True)
    assert isinstance(txn, al.Transaction) and txn.read_version == 0
    assert isinstance(txn.operation, al.LanceOperation.Overwrite)
    ds = al.LanceDataset.commit(uri, txn)
    assert lance.dataset(uri).to_table() == _table(0, 8)
    txn2 = al.write_fragments(_table(8, 9), uri, return_transaction=True)
    assert isinstance(txn2.operation, al.LanceOperation.Append)
    assert al.LanceDataset.commit(uri, txn2).count_rows() == 9 and ds.version == 1


def test_create_fragment_and_empty_input(tmp_path: Path) -> None:
    meta = al.LanceFragment.create(tmp_path, pa.table({"a": [1, 2, 3]}), fragment_id=4)
    assert meta.id == 4 and meta.physical_rows == 3 and meta.files[0].fields == [0]
    with pytest.raises(EmptyWriteError):
        al.LanceFragment.create(tmp_path / "x", pa.table({}))
    with pytest.raises(OSError):  # pylance's exception type
        al.LanceFragment.create(tmp_path / "y", pa.table({}))


def test_fragment_delete_commits_as_delete(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 20), local_uri, max_rows_per_file=10)
    frag = ds.get_fragments()[0]
    updated = frag.delete("id < 3")
    assert updated is not None and updated.num_deletions == 3
    assert frag.delete("id > 100") == frag.metadata  # nothing matched
    assert ds.get_fragments()[1].delete("id >= 0") is None  # every row gone
    op = al.LanceOperation.Delete([updated], [1], "id < 3 or id >= 10")
    new = al.LanceDataset.commit(local_uri, op, read_version=ds.version)
    assert lance.dataset(local_uri).to_table()["id"].to_pylist() == list(range(3, 10))
    assert new.count_rows() == 7


def test_fragment_merge_and_update_columns(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 6), local_uri, max_rows_per_file=3)
    merged, schema = [], None
    for frag in ds.get_fragments():
        ids = frag.to_table(columns=["id"])["id"]
        meta, schema = frag.merge(pa.table({"id": ids, "x": pa.compute.multiply(ids, 10)}),
                                  "id")
        merged.append(meta)
    ds = al.LanceDataset.commit(local_uri, al.LanceOperation.Merge(merged, schema),
                                read_version=ds.version)
    assert lance.dataset(local_uri).to_table()["x"].to_pylist() == [0, 10, 20, 30, 40, 50]
    one = ds.get_fragment(1)
    assert one is not None
    meta, fields = one.update_columns(pa.table({"_rowid": pa.array([(1 << 32) + 1],
                                                                    pa.uint64()),
                                                 "s": ["changed"]}))
    assert fields == [ds.lance_schema.field("s").id]
    al.LanceDataset.commit(local_uri, al.LanceOperation.Update(updated_fragments=[meta],
                                                               fields_modified=fields),
                           read_version=ds.version)
    assert lance.dataset(local_uri).to_table()["s"].to_pylist() == [
        "v0", "v1", "v2", "v3", "changed", "v5"]
    with pytest.raises(InvalidInputError, match="does not exist"):
        one.update_columns(pa.table({"_rowid": pa.array([0], pa.uint64()), "nope": [1]}))


class _Counting(al.FragmentWriteProgress):
    def __init__(self) -> None:
        self.begun: list[str] = []
        self.completed: list[int] = []

    def begin(self, fragment: al.FragmentMetadata, **kwargs: object) -> None:
        self.begun.append(fragment.files[0].path)

    def complete(self, fragment: al.FragmentMetadata, **kwargs: object) -> None:
        self.completed.append(fragment.physical_rows)


def test_progress_hooks_per_data_file(tmp_path: Path) -> None:
    progress = _Counting()
    ds = al.write_dataset(_table(0, 10), tmp_path / "a", max_rows_per_file=4,
                          progress=progress)
    assert progress.completed == [4, 4, 2]
    assert progress.begun == [f.files[0].path for f in ds.fragment_protos()]
    tracker = al.FileSystemFragmentWriteProgress(str(tmp_path / "p"), {"worker": "1"})
    meta = al.LanceFragment.create(tmp_path / "b", _table(0, 3), fragment_id=5,
                                   progress=tracker)
    saved = json.loads((tmp_path / "p" / "fragment_5.json").read_text())
    assert saved["files"][0]["path"] == meta.files[0].path
    assert not (tmp_path / "p" / "fragment_5.in_progress").exists()  # completed


def test_uncommitted_fragments_are_removed_by_cleanup(local_uri: str) -> None:
    ds = al.write_dataset(_table(0, 3), local_uri)
    committed = {f.files[0].path for f in ds.fragment_protos()}
    (orphan,) = al.write_fragments(_table(3, 6), local_uri)  # a writer that never commits
    data = Path(local_uri) / "data"
    assert (data / orphan.files[0].path).exists()
    ds.delete("id = 0")
    ds.cleanup_old_versions(older_than=dt.timedelta(0), delete_unverified=True)
    assert {p.name for p in data.iterdir()} == committed
    assert al.dataset(local_uri).count_rows() == 2


def test_row_id_meta_json_matches_pylance(local_uri: str) -> None:
    lance.write_dataset(_table(0, 3), local_uri, enable_stable_row_ids=True)
    theirs = lance.dataset(local_uri).get_fragments()[0].metadata.to_json()
    mine = al.dataset(local_uri).get_fragments()[0].metadata
    assert mine.to_json()["row_id_meta"] == theirs["row_id_meta"]
    back = al.FragmentMetadata.from_json(json.dumps(theirs))
    assert back.row_id_meta == mine.row_id_meta and back.files == mine.files
    # the per-row version sequences survive the proto round trip (not the JSON one, as they
    # are derived again at commit)
    assert mine.to_proto() == al.dataset(local_uri).fragment_protos()[0]


@pytest.mark.parametrize("version", ["2.0", "2.1", "2.2"])
def test_fragment_from_an_existing_file(tmp_path: Path, version: str) -> None:
    """A file written with the file API joins the dataset as a new fragment; pylance reads
    the result."""
    import uuid

    import lance

    from alance import sync
    from alance.errors import SchemaMismatchError
    data = pa.table({"a": range(800), "b": [f"s{i}" for i in range(800)]})
    ds = sync.write_dataset(data.slice(0, 0), str(tmp_path), schema=data.schema,
                            data_storage_version=version)
    for round_ in range(2):
        name = f"{uuid.uuid4()}.lance"
        with sync.file.LanceFileWriter(str(tmp_path / "data" / name), version=version) as w:
            w.write_batch(data)
        frag = sync.LanceFragment.create_from_file(name, ds, 0)
        ds = sync.LanceDataset.commit(ds.uri, sync.LanceOperation.Append([frag]),
                                      read_version=ds.version)
        assert [f.fragment_id for f in ds.get_fragments()] == list(range(round_ + 1))
    assert ds.count_rows() == 1_600
    assert ds.to_table().equals(pa.concat_tables([data, data]))
    assert lance.dataset(str(tmp_path)).to_table().equals(pa.concat_tables([data, data]))
    bad = f"{uuid.uuid4()}.lance"
    with sync.file.LanceFileWriter(str(tmp_path / "data" / bad), version=version) as w:
        w.write_batch(pa.table({"a": pa.array([1], pa.int32())}))
    with pytest.raises(SchemaMismatchError):
        sync.LanceFragment.create_from_file(bad, ds, 0)


def test_progress_marks_a_fragment_whose_input_fails(tmp_path: Path) -> None:
    """``begin`` runs as soon as rows arrive, so a write whose input then fails leaves its
    in-progress marker (and no data file); a good write leaves final metadata only."""
    import json

    from alance import sync
    progress_dir = tmp_path / "progress"
    batch = pa.record_batch([pa.array(range(10))], names=["a"])

    def failing() -> Any:
        yield batch
        raise RuntimeError("input broke")

    reader = pa.RecordBatchReader.from_batches(batch.schema, failing())
    progress = sync.FileSystemFragmentWriteProgress(str(progress_dir), metadata={"k": "v"})
    with pytest.raises(Exception, match="input broke"):
        sync.LanceFragment.create(str(tmp_path / "ds"), reader, fragment_id=3,
                                  progress=progress)
    marker = json.loads((progress_dir / "fragment_3.in_progress").read_text())
    assert marker == {"fragment_id": 3, "metadata": {"k": "v"}}
    assert not list((tmp_path / "ds").rglob("*.lance"))
    meta = sync.LanceFragment.create(str(tmp_path / "ds"), pa.table({"a": [1]}),
                                     fragment_id=4, progress=progress)
    assert not (progress_dir / "fragment_4.in_progress").exists()
    written = json.loads((progress_dir / "fragment_4.json").read_text())
    assert written["files"][0]["path"] == meta.files[0].path
    assert written["physical_rows"] == 1


def test_write_fragments_cut_files_at_batch_boundaries_by_bytes(tmp_path: Path) -> None:
    """A small ``max_bytes_per_file`` ends a file after each input batch (as pylance does),
    however many rows a batch holds: two 8 MB batches, two fragments; pylance reads them."""
    schema = pa.schema([pa.field("a", pa.string())])
    batch = pa.record_batch([pa.array(["0" * 1024] * 8192)], schema=schema)
    frags = al.write_fragments(pa.RecordBatchReader.from_batches(schema, [batch, batch]),
                               str(tmp_path / "t"), max_rows_per_group=512,
                               max_bytes_per_file=1024)
    assert len(frags) == 2 and [f.physical_rows for f in frags] == [8192, 8192]
    from lance.fragment import FragmentMetadata as PyMeta
    converted = [PyMeta.from_json(json.dumps(f.to_json())) for f in frags]
    ds = lance.LanceDataset.commit(str(tmp_path / "t"),
                                   lance.LanceOperation.Overwrite(schema, converted))
    assert ds.count_rows() == 16384
