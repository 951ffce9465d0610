"""Compaction: same plan and layout as pylance, rows kept in order, interop both ways,
indices, concurrent commits, options."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance import sync
from alance import sync as al
from alance.dataset.fragments.file_cuts import CACHE_BYTES_PER_COLUMN, FlushedBytes
from alance.dataset.maintenance.compaction import CompactionOptions, output_sizes, plan_tasks
from alance.format.manifest import decode_manifest_file

MANY_TYPES = pa.schema([
    ("id", pa.int64()), ("f", pa.float32()), ("s", pa.string()),
    ("tags", pa.list_(pa.string())), ("pt", pa.struct([("x", pa.int32()), ("y", pa.utf8())])),
    ("cat", pa.dictionary(pa.int32(), pa.string())), ("b", pa.binary()),
])


def table(start: int, n: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "s": [f"s{i}" for i in ids]})


def many_types(n: int) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table({
        "id": ids, "f": pa.array(ids.astype(np.float32)),
        "s": [None if i % 11 == 0 else f"v{i}" for i in ids],
        "tags": [[f"t{i}"] * (i % 3) for i in ids],
        "pt": [{"x": int(i), "y": str(i)} for i in ids],
        "cat": pa.array([["a", "b", "c"][i % 3] for i in ids]).dictionary_encode().cast(
            pa.dictionary(pa.int32(), pa.string())),
        "b": [bytes([i % 256]) * (i % 4 + 1) for i in ids],
    }, schema=MANY_TYPES)


def layout(uri: str) -> list[tuple[int, int]]:
    return [(f.fragment_id, f.count_rows()) for f in lance.dataset(uri).get_fragments()]


def pylance_history(uri: str, storage_version: str = "legacy") -> None:
    """Small fragments, deletions of both kinds of candidacy, an appended tail."""
    lance.write_dataset(table(0, 1000), uri, max_rows_per_file=100,
                        data_storage_version=storage_version)
    ds = lance.dataset(uri)
    ds.delete("id % 10 = 0 and id < 300")      # 10%: not above the threshold
    ds.delete("id >= 500 and id < 550")        # 50% of fragment 5: compacted alone
    lance.write_dataset(table(1000, 40), uri, mode="append", max_rows_per_file=20)


@pytest.mark.parametrize("storage_version", ["legacy", "2.2"])
async def test_same_plan_and_rows_as_pylance(tmp_path: Path, storage_version: str) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    pylance_history(ours, storage_version)
    shutil.copytree(ours, theirs)
    expected = lance.dataset(ours).to_table()

    ds = await alance.open_dataset(ours)
    result = await ds.compact_files(target_rows_per_fragment=300)
    metrics = lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=300)
    assert (result.fragments_removed, result.fragments_added, result.files_removed,
            result.files_added) == (metrics.fragments_removed, metrics.fragments_added,
                                    metrics.files_removed, metrics.files_added)
    assert layout(ours) == layout(theirs)
    assert result.dataset.version == lance.dataset(theirs).version == ds.version + 2
    # pylance reads alance's compacted dataset identically; order is kept
    assert lance.dataset(ours).to_table().equals(expected)
    assert (await result.dataset.to_table()).equals(expected)
    assert all(not f.HasField("deletion_file") for f in result.dataset.fragment_protos()
               if f.id > 12)
    # the two commits: ReserveFragments then a Rewrite using the reserved ids
    versions = sorted((Path(ours) / "_versions").glob("*.manifest"))
    newest = [decode_manifest_file(p.read_bytes()) for p in versions[:2]]
    rewrite, reserve = newest[0].transaction, newest[1].transaction
    assert reserve is not None and rewrite is not None
    assert reserve.WhichOneof("operation") == "reserve_fragments"
    assert reserve.reserve_fragments.num_fragments == result.fragments_added
    new_ids = sorted(f.id for g in rewrite.rewrite.groups for f in g.new_fragments)
    top = newest[1].manifest.max_fragment_id
    assert new_ids == list(range(top - len(new_ids) + 1, top + 1))
    # compacting again changes nothing and commits nothing
    again = await result.dataset.compact_files(target_rows_per_fragment=300)
    assert again.dataset.version == result.dataset.version and again.fragments_removed == 0


async def test_pylance_compacts_alance_data_and_alance_reads_it(local_uri: str) -> None:
    ds = await alance.write_dataset(many_types(3000), local_uri, max_rows_per_file=250,
                                    max_rows_per_group=64, data_storage_version="legacy")
    ds = (await ds.delete("id % 5 = 1")).dataset
    expected = await ds.to_table()
    lance.dataset(local_uri).optimize.compact_files(target_rows_per_fragment=1000)
    back = await alance.open_dataset(local_uri)
    assert [f.physical_rows for f in back.get_fragments()] == [1000, 1400]
    assert (await back.to_table()).equals(expected)


async def test_many_types_round_trip(local_uri: str) -> None:
    ds = await alance.write_dataset(many_types(2000), local_uri, max_rows_per_file=150,
                                    max_rows_per_group=40, data_storage_version="legacy")
    ds = (await ds.delete("id % 3 = 0 or id >= 1900")).dataset
    expected = await ds.to_table()
    seen: list[tuple[int, int]] = []
    result = await ds.compact_files(target_rows_per_fragment=600, max_rows_per_group=100,
                                    num_threads=2, batch_size=70,
                                    progress=lambda done, total: seen.append((done, total)))
    physical = sum(f.physical_rows for f in ds.get_fragments())
    assert seen and seen[-1][0] == seen[-1][1] == physical
    frags = result.dataset.get_fragments()
    assert [f.physical_rows for f in frags] == [600, expected.num_rows - 600]
    assert (await result.dataset.to_table()).equals(expected)
    assert lance.dataset(local_uri).to_table().equals(expected)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_index_boundaries_and_pylance_queries(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    lance.write_dataset(table(0, 600), ours, max_rows_per_file=100,
                        data_storage_version="legacy")
    pl = lance.dataset(ours)
    pl.create_scalar_index("id", "BTREE")
    lance.write_dataset(table(600, 100), ours, mode="append", max_rows_per_file=50)
    shutil.copytree(ours, theirs)
    await (await alance.open_dataset(ours)).compact_files(target_rows_per_fragment=300)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=300)
    # indexed and unindexed fragments are never merged together, as in pylance
    assert layout(ours) == layout(theirs) == [(8, 300), (9, 300), (10, 100)]
    # the index is remapped onto the new fragments, as pylance remaps it
    pl = lance.dataset(ours)
    assert pl.list_indices()[0]["fragment_ids"] == set(
        lance.dataset(theirs).list_indices()[0]["fragment_ids"]) == {8, 9}
    mine = await alance.open_dataset(ours)
    for probe in ("id = 55", "id >= 290 and id < 310", "id = 650", "id > 10000"):
        want = lance.dataset(theirs).to_table(filter=probe).sort_by("id")
        assert pl.to_table(filter=probe).sort_by("id").equals(want), probe
        assert (await mine.to_table(filter=probe)).sort_by("id").equals(want), probe
        assert "id_idx" in pl.scanner(filter=probe).explain_plan(True)
        assert "@id_idx(BTree)" in mine.scanner(filter=probe).explain()
    pl.optimize.optimize_indices()
    assert lance.dataset(ours).to_table(filter="id = 55")["id"].to_pylist() == [55]


async def test_concurrent_commits(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    lance.write_dataset(table(0, 400), uri, max_rows_per_file=100,
                        data_storage_version="legacy")
    ds = await alance.open_dataset(uri)
    # an append after planning is rebased over
    lance.write_dataset(table(400, 10), uri, mode="append")
    result = await ds.compact_files(target_rows_per_fragment=1000)
    assert lance.dataset(uri).count_rows() == 410
    assert layout(uri) == [(4, 10), (5, 400)]
    # a delete in a fragment being rewritten makes the compaction fail, leaving no files
    lance.write_dataset(table(500, 100), uri, mode="append", max_rows_per_file=50)
    ds = await alance.open_dataset(uri)
    lance.dataset(uri).delete("id = 520")
    data_files = set(os.listdir(Path(uri) / "data"))
    with pytest.raises(alance.RetryableCommitConflictError):
        await ds.compact_files(target_rows_per_fragment=1000)
    assert set(os.listdir(Path(uri) / "data")) == data_files
    assert lance.dataset(uri).count_rows() == 509
    assert result.dataset.version < lance.dataset(uri).version


async def test_deletion_heavy_and_config_defaults(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    ds = await alance.write_dataset(table(0, 400), ours, max_rows_per_file=100,
                                    data_storage_version="legacy")
    ds = (await ds.delete("id < 90 or (id >= 150 and id < 200) or id >= 300")).dataset
    assert len(ds.get_fragments()) == 3  # the last fragment is gone entirely
    lance.dataset(ours).update_config({"lance.compaction.target_rows_per_fragment": "20"})
    shutil.copytree(ours, theirs)
    ds = await alance.open_dataset(ours)
    result = await ds.compact_files()  # target 20, from the config
    lance.dataset(theirs).optimize.compact_files()
    assert layout(ours) == layout(theirs)
    assert [f.physical_rows for f in result.dataset.get_fragments()] == [100, 20, 20, 20]
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    with pytest.raises(alance.InvalidInputError):
        await ds.compact_files(target_rows_per_fragment=0)
    with pytest.raises(alance.InvalidInputError):
        await ds.compact_files(num_threads=-1)


def test_planner_rules() -> None:
    from alance._proto import table_pb2

    def frag(i: int, rows: int, deleted: int = 0) -> table_pb2.DataFragment:
        f = table_pb2.DataFragment(id=i, physical_rows=rows)
        if deleted:
            f.deletion_file.num_deleted_rows = deleted
        return f

    opts = CompactionOptions(target_rows_per_fragment=100)
    big, small = frag(0, 500), frag(1, 50)
    assert plan_tasks([big, small, frag(2, 500)], [], opts) == []  # lone small fragment
    tasks = plan_tasks([big, frag(1, 500, 60), frag(2, 500)], [], opts)
    assert [[f.id for f in t.fragments] for t in tasks] == [[1]]  # many deletions: alone
    off = CompactionOptions(target_rows_per_fragment=100, materialize_deletions=False)
    assert plan_tasks([big, frag(1, 500, 60), frag(2, 500)], [], off) == []
    tasks = plan_tasks([frag(i, 40) for i in range(7)], [], opts)
    assert [[f.id for f in t.fragments] for t in tasks] == [[0, 1, 2], [3, 4, 5, 6]]
    assert output_sizes(590, 300) == [590] and output_sizes(500, 100) == [100] * 5
    assert output_sizes(1266, 600) == [600, 666] and output_sizes(0, 5) == []


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_stable_row_ids_and_versions_kept(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    lance.write_dataset(table(0, 200), ours, max_rows_per_file=50,
                        data_storage_version="legacy", enable_stable_row_ids=True)
    lance.write_dataset(table(200, 60), ours, mode="append", max_rows_per_file=20)
    pl = lance.dataset(ours)
    pl.update({"s": "'changed'"}, where="id % 7 = 0")
    pl.delete("id % 4 = 0")
    pl.create_scalar_index("id", "BTREE")
    shutil.copytree(ours, theirs)
    cols = ["id", "s", "_rowid", "_row_created_at_version", "_row_last_updated_at_version"]

    def read(uri: str) -> pa.Table:
        return lance.dataset(uri).to_table(columns=cols).sort_by("_rowid")

    before = read(ours)
    assert set(before["_row_last_updated_at_version"].to_pylist()) == {1, 2, 3}
    ds = await alance.open_dataset(ours)
    result = await ds.compact_files(target_rows_per_fragment=100)
    lance.dataset(theirs).optimize.compact_files(target_rows_per_fragment=100)
    assert layout(ours) == layout(theirs)
    # row ids and both row versions move with their rows, as pylance moves them
    assert read(ours).equals(before) and read(theirs).equals(before)
    got = await result.dataset.to_table(with_row_id=True)
    assert got["_rowid"].to_pylist() == lance.dataset(ours).to_table(
        with_row_id=True)["_rowid"].to_pylist()
    # pylance 14 BTREE indices hold row addresses (it remaps them even here), and so does
    # alance: the index covers the new fragments in both
    assert lance.dataset(ours).list_indices()[0]["fragment_ids"] == set(
        lance.dataset(theirs).list_indices()[0]["fragment_ids"])
    mine = await alance.open_dataset(ours)
    for probe in ("id = 14", "id = 15", "id < 100", "id >= 50 and id < 210"):
        want = lance.dataset(theirs).to_table(filter=probe, with_row_id=True).sort_by("_rowid")
        assert lance.dataset(ours).to_table(filter=probe, with_row_id=True).sort_by(
            "_rowid").equals(want), probe
        assert (await mine.to_table(filter=probe, with_row_id=True)).sort_by(
            "_rowid").equals(want), probe
        assert "id_idx" in lance.dataset(ours).scanner(filter=probe).explain_plan(True)
    assert lance.dataset(ours).to_table(filter="id = 14")["s"].to_pylist() == ["changed"]
    # appends after the compaction continue the row ids
    lance.write_dataset(table(1000, 3), ours, mode="append")
    assert max(read(ours)["_rowid"].to_pylist()) == max(before["_rowid"].to_pylist()) + 3


def test_sync_compact(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    sync.write_dataset(table(0, 100), uri, max_rows_per_file=10, data_storage_version="legacy")
    ds = sync.open_dataset(uri)
    result = ds.compact_files()
    assert isinstance(result.dataset, sync.LanceDataset)
    assert result.fragments_removed == 10 and result.fragments_added == 1
    assert result.dataset.count_rows() == 100



async def test_failed_task_leaves_no_files(local_uri: str) -> None:
    ds = await alance.write_dataset(table(0, 600), local_uri, max_rows_per_file=50,
                                    data_storage_version="legacy")
    victim = Path(local_uri) / "data" / ds.fragment_protos()[-1].files[0].path
    victim.write_bytes(victim.read_bytes()[:40])  # truncated: reading it fails
    before = set(os.listdir(Path(local_uri) / "data"))
    with pytest.raises(alance.AlanceError):
        await ds.compact_files(target_rows_per_fragment=100, num_threads=3)
    assert set(os.listdir(Path(local_uri) / "data")) == before
    assert (await alance.open_dataset(local_uri)).version == ds.version


async def test_evolved_schema_files_are_merged(tmp_path: Path) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    lance.write_dataset(table(0, 300), ours, max_rows_per_file=60,
                        data_storage_version="legacy")
    pl = lance.dataset(ours)
    pl.add_columns({"twice": "id * 2", "tag": "'t'"})
    pl.drop_columns(["tag"])
    pl.delete("id % 9 = 0")
    shutil.copytree(ours, theirs)
    assert len(pl.get_fragments()[0].metadata.files) == 2
    result = await (await alance.open_dataset(ours)).compact_files()
    lance.dataset(theirs).optimize.compact_files()
    frag = result.dataset.fragment_protos()[0]
    assert len(frag.files) == 1 and sorted(frag.files[0].fields) == [0, 1, 2]
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert lance.dataset(ours).schema == lance.dataset(theirs).schema


def test_compaction_tasks_run_anywhere_and_commit_in_part(tmp_path: Path) -> None:
    """pylance's task API: a plan's tasks pickle, run separately and commit as one rewrite;
    a commit may hold only some of the results."""
    import pickle

    from alance import sync
    uri = str(tmp_path / "ds")
    ds = sync.write_dataset(pa.table({"a": range(800), "b": range(800)}), uri,
                            max_rows_per_file=200)
    plan = sync.Compaction.plan(ds, {"target_rows_per_fragment": 400})
    assert (plan.read_version, plan.num_tasks()) == (1, 2)
    assert repr(plan) == "CompactionPlan(read_version=1, tasks=<2 compaction tasks>)"
    frags = ds.get_fragments()
    assert plan.tasks[0].fragments == [f.metadata for f in frags[:2]]
    task = pickle.loads(pickle.dumps(plan.tasks[0]))
    result = pickle.loads(pickle.dumps(task.execute(ds)))
    assert isinstance(result, sync.RewriteResult)
    assert repr(result).startswith("RewriteResult(read_version=1, new_fragments=[")
    metrics = sync.Compaction.commit(ds, [result])
    assert (metrics.fragments_removed, metrics.fragments_added) == (2, 1)
    assert ds.version == 3  # ids reserved, then the rewrite (as pylance)
    assert len(ds.get_fragments()) == 3
    assert ds.to_table().sort_by("a").equals(pa.table({"a": range(800), "b": range(800)}))
    assert lance.dataset(uri).to_table().sort_by("a").equals(ds.to_table().sort_by("a"))
    with pytest.raises(alance.InvalidInputError):
        sync.Compaction.commit(ds, [])


# -- max_bytes_per_file: files end where pylance's writer would end them ----------------------
def _vectors(rows: int, dim: int = 1024) -> pa.Table:
    values = pa.array(np.arange(rows * dim, dtype=np.int64))
    return pa.table({"a": pa.FixedSizeListArray.from_arrays(values, dim)})


@pytest.mark.parametrize(("batch_size", "files"), [(128, 4), (2048, 2)])
def test_max_bytes_per_file_cuts_where_pylance_does(tmp_path: Path, batch_size: int,
                                                    files: int) -> None:
    data = _vectors(4096)  # 8 KiB per row: 1024 rows fill one 8 MiB page
    options = dict(target_rows_per_fragment=100 * 1024, max_bytes_per_file=1000,
                   batch_size=batch_size)
    mine = al.write_dataset(data, str(tmp_path / "a"), max_rows_per_file=2048)
    theirs = lance.write_dataset(data, str(tmp_path / "p"), max_rows_per_file=2048)
    m = mine.optimize.compact_files(materialize_deletions=False, **options)
    t = theirs.optimize.compact_files(materialize_deletions=False, **options)
    assert (m.fragments_added, m.files_added) == (t.fragments_added, t.files_added) == (
        files, files)
    assert [f.physical_rows for f in mine.get_fragments()] == [
        f.physical_rows for f in theirs.get_fragments()]
    assert lance.dataset(mine.uri).to_table() == data


def test_flushed_bytes_follow_the_page_buffer() -> None:
    batch = _vectors(300).to_batches()[0]  # 8 KiB per row
    cut = FlushedBytes(limit=1, unit_rows=100)
    assert cut.take(batch) == 300 and not cut.full  # 2.3 MiB: nothing flushed yet
    cut = FlushedBytes(limit=1, unit_rows=100, cache_bytes=1024 * 1024)
    assert cut.take(batch) == 200 and cut.full  # the page fills in the second unit
    assert cut.take(batch) == 0
    big = FlushedBytes(limit=3 * CACHE_BYTES_PER_COLUMN)
    assert big.take(batch) == 300 and not big.full
