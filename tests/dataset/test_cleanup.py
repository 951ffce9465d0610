"""cleanup_old_versions: same files removed as pylance, tags kept, unverified files kept,
dry runs, and no file a kept version references is ever deleted while another process
keeps committing."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance.dataset.versions.cleanup import _Refs
from alance.dataset.versions.snapshot import load_snapshot
from alance.errors import TaggedVersionError
from tests.s3_servers import S3Target

ZERO = dt.timedelta(0)


def table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "s": [f"s{i}" for i in range(start, start + n)]})


def files(uri: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, f), uri)
            for root, _, names in os.walk(uri) for f in names}


def age(uri: str, days: float) -> None:
    """Make every file of the dataset ``days`` older (as if written long ago)."""
    shift = days * 86400
    for rel in files(uri):
        path = os.path.join(uri, rel)
        st = os.stat(path)
        os.utime(path, (st.st_atime - shift, st.st_mtime - shift))


def history(uri: str) -> None:
    """Overwrites, deletes, an index and a compaction: plenty of unreferenced files."""
    lance.write_dataset(table(0, 300), uri, max_rows_per_file=100,
                        data_storage_version="legacy")
    ds = lance.dataset(uri)
    ds.delete("id < 20")
    ds.delete("id < 40")
    ds.create_scalar_index("id", "BTREE")
    lance.write_dataset(table(300, 50), uri, mode="append")
    lance.dataset(uri).optimize.compact_files()
    lance.write_dataset(table(1000, 30), uri, mode="overwrite")
    lance.dataset(uri).delete("id = 1001")


async def referenced_files_exist(uri: str) -> list[int]:
    """Check every version that still has a manifest: all its files are there. Returns the
    versions checked."""
    ds = await alance.open_dataset(uri)
    checked = []
    for loc in await ds._handler.list_versions(ds._store):
        snap = await load_snapshot(ds._store, ds._handler, loc.version)
        refs = _Refs()
        refs.add_manifest(snap)
        missing = [p for p in refs.paths if not os.path.exists(os.path.join(uri, p))]
        assert not missing, (loc.version, missing)
        for uuid in refs.index_uuids:
            assert os.path.isdir(os.path.join(uri, "_indices", uuid)), (loc.version, uuid)
        checked.append(loc.version)
    return checked


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("days_old", [0, 30])
async def test_removes_what_pylance_removes(tmp_path: Path, days_old: int) -> None:
    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    history(ours)
    if days_old:
        age(ours, days_old)
    shutil.copytree(ours, theirs)  # keeps modification times
    before = files(ours)
    ds = await alance.open_dataset(ours)
    dry = await ds.cleanup_old_versions(ZERO, dry_run=True)
    assert files(ours) == before
    stats = await ds.cleanup_old_versions(ZERO)
    pl_stats = lance.dataset(theirs).cleanup_old_versions(older_than=ZERO)
    assert files(ours) == files(theirs)
    assert (stats.old_versions, stats.bytes_removed) == (pl_stats.old_versions,
                                                         pl_stats.bytes_removed)
    assert (dry.old_versions, dry.bytes_removed) == (stats.old_versions, stats.bytes_removed)
    assert set(dry.removed_paths) == before - files(ours)
    assert stats.old_versions == 8
    if days_old:  # old unreferenced data files of removed versions are gone too
        assert stats.data_files_removed > 0 and stats.index_files_removed > 0
    assert lance.dataset(ours).to_table().equals(lance.dataset(theirs).to_table())
    assert (await (await alance.open_dataset(theirs)).to_table()).equals(
        lance.dataset(theirs).to_table())
    assert await referenced_files_exist(ours) == [9]
    assert await referenced_files_exist(theirs) == [9]
    # nothing left to do
    again = await (await alance.open_dataset(ours)).cleanup_old_versions(ZERO)
    assert again.old_versions == 0 and again.bytes_removed == 0


async def test_tagged_versions_are_kept(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    history(uri)
    age(uri, 30)
    lance.dataset(uri).tags.create("keep", 2)
    ds = await alance.open_dataset(uri)
    await ds.tags.create("also", 6)
    want2 = lance.dataset(uri, version=2).to_table()
    want6 = (await ds.checkout_version(6)).to_table
    with pytest.raises(TaggedVersionError, match="keep"):
        await ds.cleanup_old_versions(ZERO)
    stats = await ds.cleanup_old_versions(ZERO, error_if_tagged_old_versions=False)
    assert stats.old_versions == 6
    assert await referenced_files_exist(uri) == [2, 6, 9]
    assert lance.dataset(uri, version="keep").to_table().equals(want2)
    assert (await (await alance.open_dataset(uri, version="also")).to_table()).equals(
        await want6())
    # pylance agrees nothing more can go
    pl = lance.dataset(uri).cleanup_old_versions(older_than=ZERO,
                                                 error_if_tagged_old_versions=False)
    assert pl.old_versions == 0 and pl.bytes_removed == 0


async def test_unverified_files_and_thresholds(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    ds = await alance.write_dataset(table(0, 100), uri, data_storage_version="legacy")
    ds = await alance.write_dataset(table(100, 100), uri, mode="overwrite")
    orphan = Path(uri) / "data" / "orphan-of-a-failed-write.lance"
    orphan.write_bytes(b"x" * 10)
    stray = Path(uri) / "notes.txt"  # not a Lance file: never touched
    stray.write_text("hello")
    age(uri, 1)
    # versions younger than older_than are kept
    kept = await ds.cleanup_old_versions(dt.timedelta(days=2))
    assert kept.old_versions == 0
    stats = await ds.cleanup_old_versions(ZERO)
    assert stats.old_versions == 1 and stats.data_files_removed == 1
    assert orphan.exists()  # unreferenced and only a day old: maybe a write in progress
    forced = await ds.cleanup_old_versions(ZERO, delete_unverified=True)
    assert not orphan.exists() and forced.data_files_removed == 1
    assert stray.exists()
    assert await ds.count_rows() == 100
    # retain_versions
    for i in range(3):
        await alance.write_dataset(table(i, 1), uri, mode="append")
    stats = await (await alance.open_dataset(uri)).cleanup_old_versions(retain_versions=2)
    assert stats.old_versions == 2
    assert lance.dataset(uri).versions()[0]["version"] == 4
    with pytest.raises(alance.InvalidInputError):
        await ds.cleanup_old_versions(retain_versions=0)
    with pytest.raises(alance.InvalidInputError):
        await ds.cleanup_old_versions(dt.timedelta(days=-1))


WRITER = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    from alance import sync
    uri, seconds = sys.argv[1], float(sys.argv[2])
    end = time.time() + seconds
    i = 0
    while time.time() < end:
        i += 1
        t = pa.table({"id": pa.array(range(i * 100, i * 100 + 20), pa.int64()),
                      "s": [f"w{i}"] * 20})
        ds = sync.write_dataset(t, uri, mode="append", max_rows_per_file=7)
        if i % 3 == 0:
            ds.delete(f"id = {i * 100 + 1}")
        if i % 5 == 0:
            ds = sync.open_dataset(uri).compact_files(target_rows_per_fragment=50).dataset
    print(i)
""")


async def test_concurrent_writer_process(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    await alance.write_dataset(table(0, 50), uri, data_storage_version="legacy")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, uri, "3"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              cwd=str(Path(__file__).resolve().parents[2]))
    runs = removed = data_removed = 0
    tagged = None
    try:
        while writer.poll() is None:
            latest = await alance.open_dataset(uri)
            if tagged is None and data_removed:
                # from now on a tagged version must survive too (it also holds back the
                # files newer than it, as in Lance)
                await latest.tags.create("mid", latest.version)
                tagged = await latest.to_table()
            stats = await latest.cleanup_old_versions(
                ZERO, error_if_tagged_old_versions=False)
            runs += 1
            removed += stats.old_versions
            data_removed += stats.data_files_removed
            # every kept version is whole right now, while the writer goes on
            await referenced_files_exist(uri)
            time.sleep(0.05)
    finally:
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err.decode()
    commits = int(out)
    assert commits >= 5 and runs >= 3 and removed > 0 and data_removed > 0
    final = await alance.open_dataset(uri)
    await referenced_files_exist(uri)
    assert tagged is not None
    assert (await (await alance.open_dataset(uri, version="mid")).to_table()).equals(tagged)
    assert lance.dataset(uri, version="mid").to_table().equals(tagged)
    # every row the writer appended is there (minus its deletes), and pylance agrees
    expected = 50 + 20 * commits - commits // 3
    assert await final.count_rows() == expected
    assert lance.dataset(uri).count_rows() == expected


async def test_any_store_and_external_row_id_files(uri: str) -> None:
    ds = await alance.write_dataset(table(0, 100), uri, data_storage_version="legacy")
    ds = await alance.write_dataset(table(100, 50), uri, mode="overwrite")
    ds = (await ds.delete("id < 110")).dataset
    stats = await ds.cleanup_old_versions(ZERO, delete_unverified=True)
    assert stats.old_versions == 2 and stats.data_files_removed == 1
    assert stats.transaction_files_removed == 2
    assert await ds.count_rows() == 40
    assert [v["version"] for v in await ds.versions()] == [3]
    # files of external row id / version sequences count as referenced
    from alance._proto import table_pb2
    frag = table_pb2.DataFragment(id=1, physical_rows=5)
    frag.external_row_ids.path = "_rowids/abc.rowids"
    frag.external_created_at_versions.path = "_rowids/def.bin"
    snap = await load_snapshot(ds._store, ds._handler)
    snap.manifest.fragments.append(frag)
    refs = _Refs()
    refs.add_manifest(snap)
    assert {"_rowids/abc.rowids", "_rowids/def.bin"} <= refs.paths


async def test_on_s3_with_pylance(moto_target: S3Target) -> None:
    uri, opts = moto_target.uri("maint.lance"), moto_target.storage_options
    ds = await alance.write_dataset(table(0, 100), uri, max_rows_per_file=20,
                                    data_storage_version="legacy", storage_options=opts)
    ds = (await ds.delete("id < 30")).dataset
    await ds.tags.create("trimmed", ds.version)
    result = await ds.compact_files()
    assert lance.dataset(uri, storage_options=opts).tags.get_version("trimmed") == 2
    stats = await result.dataset.cleanup_old_versions(ZERO, delete_unverified=True,
                                                      error_if_tagged_old_versions=False)
    assert stats.old_versions == 2  # versions 1 and 3 (the id reservation); 2 is tagged
    assert stats.data_files_removed == 1  # fragment 0, wholly deleted in version 2
    pl = lance.dataset(uri, storage_options=opts)
    assert pl.count_rows() == 70 and len(pl.get_fragments()) == 1
    assert lance.dataset(uri, version="trimmed", storage_options=opts).count_rows() == 70
    restored = await result.dataset.restore("trimmed")
    assert len(lance.dataset(uri, storage_options=opts).get_fragments()) == 4
    assert await restored.count_rows() == 70


async def test_blob_sidecars_go_with_their_data_file(tmp_path: Path) -> None:
    big = os.urandom(4 * 1024 * 1024 + 1)  # above pylance's limit for packed blobs: own file
    schema = pa.schema([pa.field("id", pa.int64()), lance.blob_field("b")])

    def table(first: int) -> pa.Table:
        return pa.Table.from_arrays([pa.array([first, first + 1], pa.int64()),
                                     lance.blob_array([b"small", big])], schema=schema)

    ours, theirs = str(tmp_path / "a.lance"), str(tmp_path / "b.lance")
    lance.write_dataset(table(0), ours)
    lance.write_dataset(table(10), ours, mode="overwrite")
    shutil.copytree(ours, theirs)
    sidecars = {p for p in files(ours) if p.endswith(".blob")}
    assert len(sidecars) == 2  # one per data file
    ds = await alance.open_dataset(ours)
    dry = await ds.cleanup_old_versions(ZERO, dry_run=True)
    assert len([p for p in dry.removed_paths if p.endswith(".blob")]) == 1
    await ds.cleanup_old_versions(ZERO)
    lance.dataset(theirs).cleanup_old_versions(older_than=ZERO)
    assert files(ours) == files(theirs)
    assert len({p for p in files(ours) if p.endswith(".blob")}) == 1
    blobs = lance.dataset(ours).take_blobs("b", indices=[1])
    assert blobs[0].readall() == big


async def test_stale_handle_never_recreates_a_cleaned_up_version(tmp_path: Path) -> None:
    """A handle opened before versions were cleaned up commits after the newest version (or
    refuses): it never creates the cleaned-up version number again, which would lose the
    commit or rewind the history."""
    uri = str(tmp_path / "ds")
    await alance.write_dataset(table(0, 100), uri)
    stale = await alance.open_dataset(uri)  # version 1
    for i in range(3):
        lance.write_dataset(table(100 * (i + 1), 100), uri, mode="append")
    fresh = await alance.open_dataset(uri)
    await fresh.cleanup_old_versions(older_than=dt.timedelta(0))
    assert [v["version"] for v in await fresh.versions()] == [4]
    try:
        result = await stale.delete("id < 10")
    except alance.CommitConflictError:  # the versions it would rebase over are gone
        pass
    else:
        assert result.dataset.version == 5
    versions = [v["version"] for v in await (await alance.open_dataset(uri)).versions()]
    assert 2 not in versions and max(versions) >= 4
    assert lance.dataset(uri).count_rows() in (400, 390)
    # A config change skips the versions cleanup removed (as pylance) and lands after the
    # newest one; it never recreates a removed version number.
    changed = await stale.update_config({"k": "v"})
    assert changed.dataset.version == max(versions) + 1
    assert lance.dataset(uri).config()["k"] == "v"
    assert lance.dataset(uri).count_rows() in (400, 390)
