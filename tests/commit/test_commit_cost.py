"""What a commit costs: fragments are not rebuilt, re-checked or re-read more than they must be.

A commit works from facts of each fragment remembered by the fragment's encoded bytes
(:mod:`alance.format.fragment_facts`), builds appends/deletes/updates on a copy of the base
manifest (:func:`~alance.transaction.build.build_manifest`'s in-place path) and finds the newest
version from a listing with one pass of string tests. These tests hold each shortcut to the
result of the long way, and check pylance reads what the short ways commit.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pyroaring
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alance
from alance import sync as al
from alance._proto import table_pb2
from alance.commit.handler import ConditionalPutCommitHandler, newest_manifest
from alance.dataset.commit import loop as commit_loop
from alance.dataset.commit.loop import BACKOFF_CAP, RACE_BACKOFF_BASE, race_delay
from alance.errors import CommitConflictError, CorruptFileError
from alance.format.fragment_facts import all_facts, checked_manifest_facts
from alance.format.manifest import (
    U64_MAX,
    ManifestFile,
    ManifestNamingScheme,
    decode_latest_version_hint,
    fragment_entries,
    is_detached_version,
    manifest_message_bytes,
    parse_manifest_file_name,
)
from alance.io.uri import open_store
from alance.testing.faults import FaultPlan
from alance.transaction import build as build_module
from alance.transaction import (
    build_manifest,
    new_append,
    new_create_index,
    new_delete,
    new_update,
    new_update_config,
)
from alance.transaction.indices import write_bitmap
from tests.s3_servers import S3Target

# -- newest version from a listing ------------------------------------------------------------


def _newest_the_long_way(paths: list[str]) -> tuple[int, str] | None:
    best: tuple[int, int, str] | None = None
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        if path != f"_versions/{name}":
            continue
        parsed = parse_manifest_file_name(name)
        if parsed is None or is_detached_version(parsed[0]):
            continue
        key = (parsed[0], int(parsed[1].value == "v2"), path)
        if best is None or key[:2] > best[:2]:
            best = key
    return (best[0], best[2]) if best is not None else None


_NAMES = st.one_of(
    st.integers(0, 2**20).map(lambda v: f"_versions/{v}.manifest"),
    st.integers(0, 2**20).map(lambda v: f"_versions/{U64_MAX - v:020d}.manifest"),
    st.integers(2**63, U64_MAX).map(lambda v: f"_versions/{U64_MAX - v:020d}.manifest"),
    st.integers(2**63, U64_MAX).map(lambda v: f"_versions/d{v}.manifest"),
    st.sampled_from(["_versions/latest_version_hint.json", "_versions/7.manifest-abc",
                     "_versions/sub/3.manifest", "_versions/0000000000000000000x.manifest",
                     "_versions/99999999999999999999.manifest", "other/5.manifest",
                     "_versions/.tmp_9.manifest"]),
)


@given(st.lists(_NAMES, max_size=30))
def test_newest_manifest_agrees_with_parsing_every_name(paths: list[str]) -> None:
    found = newest_manifest(paths)
    expected = _newest_the_long_way(paths)
    assert (None if found is None else (found.version, found.path)) == expected


# -- fragment facts and the manifest walk -----------------------------------------------------


def _fragment(rng: random.Random, fid: int) -> table_pb2.DataFragment:
    frag = table_pb2.DataFragment(id=fid, physical_rows=rng.randint(1, 100))
    major, minor = rng.choice([(2, 1), (2, 2), (0, 2)])
    fields = rng.choice([[0, 1], [0], [1], [-2, 1]])
    columns = list(range(len(fields))) if major == 2 else []
    frag.files.add(path=f"{uuid.uuid4().hex}.lance", fields=fields, column_indices=columns,
                   file_major_version=major, file_minor_version=minor)
    if rng.random() < 0.2:  # a data file left holding only dropped fields
        frag.files.add(path=f"{uuid.uuid4().hex}.lance", fields=[-2], column_indices=[0],
                       file_major_version=2, file_minor_version=1)
    if rng.random() < 0.3:
        frag.deletion_file.file_type = 1  # type: ignore[assignment]
        frag.deletion_file.read_version = 1
        frag.deletion_file.id = rng.randint(1, 1000)
        frag.deletion_file.num_deleted_rows = rng.randint(1, frag.physical_rows)
    return frag


def _base(rng: random.Random, n: int, with_index: bool) -> ManifestFile:
    manifest = table_pb2.Manifest(version=5)
    manifest.fields.add(name="id", id=0, parent_id=-1, logical_type="int64")
    manifest.fields.add(name="v", id=1, parent_id=-1, logical_type="double")
    ids = sorted(rng.sample(range(3 * n + 1), n))
    manifest.fragments.extend(_fragment(rng, fid) for fid in ids)
    if ids and rng.random() < 0.5:
        manifest.max_fragment_id = ids[-1] + rng.randint(0, 3)
    section = None
    if with_index:
        ix = table_pb2.IndexMetadata(name="on_id", fields=[0], dataset_version=3)
        ix.uuid.uuid = uuid.uuid4().bytes
        write_bitmap(ix, pyroaring.BitMap(ids[: n // 2]))
        section = table_pb2.IndexSection(indices=[ix])
    return ManifestFile(manifest=manifest, index_section=section)


def _txn(rng: random.Random, base: ManifestFile, kind: str):  # type: ignore[no-untyped-def]
    frags = list(base.manifest.fragments)
    ids = [f.id for f in frags]
    new = [_fragment(rng, 0) for _ in range(rng.randint(0, 3))]
    if kind == "append":
        if ids and rng.random() < 0.2:  # a reserved id below the base's: needs sorting
            new.append(_fragment(rng, max(ids[0] - 1, 1) if ids[0] > 1 else ids[-1] + 50))
        return new_append(5, new)
    picked = rng.sample(frags, min(len(frags), rng.randint(0, 3)))
    updated = []
    for frag in picked:
        copy = table_pb2.DataFragment()
        copy.CopyFrom(frag)
        copy.deletion_file.file_type = 1  # type: ignore[assignment]
        copy.deletion_file.id = rng.randint(1, 1000)
        copy.deletion_file.num_deleted_rows = 1
        updated.append(copy)
    removed = rng.sample(ids, min(len(ids), rng.randint(0, 2)))
    if rng.random() < 0.2:
        removed.append(10**6)  # an id the base does not have
    if kind == "delete":
        return new_delete(5, updated, removed, "x")
    if kind == "update":
        return new_update(5, removed_fragment_ids=removed, updated_fragments=updated,
                          new_fragments=new, fields_modified=[0] if rng.random() < 0.5 else [])
    if kind == "create_index":
        ix = table_pb2.IndexMetadata(name="other", fields=[1], dataset_version=5)
        ix.uuid.uuid = uuid.uuid4().bytes
        write_bitmap(ix, pyroaring.BitMap(ids))
        return new_create_index(5, [ix])
    return new_update_config(5, config={"k": str(rng.random())})


def _comparable(mf: ManifestFile) -> tuple[bytes, bytes]:
    manifest = table_pb2.Manifest()
    manifest.CopyFrom(mf.manifest)
    manifest.ClearField("timestamp")
    section = mf.index_section.SerializeToString(deterministic=True) if mf.index_section else b""
    return manifest.SerializeToString(deterministic=True), section


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32), n=st.integers(0, 40), with_index=st.booleans(),
       kind=st.sampled_from(["append", "delete", "update", "create_index", "update_config"]),
       stable=st.booleans())
def test_in_place_build_equals_building_every_fragment(seed: int, n: int, with_index: bool,
                                                      kind: str, stable: bool) -> None:
    rng = random.Random(seed)
    base = _base(rng, n, with_index)
    if stable:  # stable row ids: every fragment carries (here: empty) row ids
        for frag in base.manifest.fragments:
            frag.inline_row_ids = b""
        base.manifest.reader_feature_flags = 2
        base.manifest.writer_feature_flags = 2
    txn = _txn(rng, base, kind)
    other = table_pb2.Manifest()
    other.CopyFrom(base.manifest)
    slow_base = ManifestFile(manifest=other, index_section=base.index_section)

    fast = build_manifest(base, txn, transaction_file="t.txn", data_storage_version="2.1")
    saved = build_module._IN_PLACE
    build_module._IN_PLACE = frozenset()
    try:
        slow = build_manifest(slow_base, txn, transaction_file="t.txn",
                              data_storage_version="2.1")
    finally:
        build_module._IN_PLACE = saved
    assert _comparable(fast) == _comparable(slow)
    assert fast.fragment_facts() == all_facts(fast.manifest.fragments)


async def test_fragment_entries_are_each_fragments_bytes(local_uri: str) -> None:
    lance.write_dataset(pa.table({"id": range(50)}), local_uri, max_rows_per_file=10)
    ds = await alance.write_dataset(pa.table({"id": range(5)}), local_uri, mode="append")
    for version in (1, 2):
        snap = (await alance.open_dataset(local_uri, version=version))._snapshot
        data = await ds.store.get(snap.location.path)
        entries = fragment_entries(manifest_message_bytes(data))
        assert entries is not None
        decoded = [table_pb2.DataFragment.FromString(e) for e in entries]
        assert decoded == list(snap.manifest.fragments)
        assert snap.manifest_file.fragment_facts() == all_facts(snap.manifest.fragments)
    assert fragment_entries(b"\x0b\x01") is None  # a group (wire type 3): not walked
    assert fragment_entries(b"\x12\x05ab") is None  # shorter than it says


def test_a_changed_fragment_is_checked_again() -> None:
    manifest = table_pb2.Manifest()
    manifest.fragments.add(id=1, physical_rows=10).files.add(path="a.lance", fields=[0])
    entries = [f.SerializeToString() for f in manifest.fragments]
    assert checked_manifest_facts(manifest, entries, "m")[0].id == 1
    manifest.fragments[0].physical_rows = 0  # now corrupt (files but no rows)
    entries = [f.SerializeToString() for f in manifest.fragments]
    with pytest.raises(CorruptFileError, match="physical_rows"):
        checked_manifest_facts(manifest, entries, "m")
    manifest.fragments[0].physical_rows = 10
    manifest.fragments.add(id=1, physical_rows=3)  # same bytes checked, but a second id 1
    entries = [f.SerializeToString() for f in manifest.fragments]
    with pytest.raises(CorruptFileError, match="used by two fragments"):
        checked_manifest_facts(manifest, entries, "m")


# -- what the short ways commit, read by pylance ------------------------------------------------


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "v": pa.array(np.arange(start, start + n) * 0.5)})


@pytest.mark.parametrize("stable", [False, True])
async def test_many_fragment_history_reads_the_same_in_pylance(local_uri: str,
                                                               stable: bool) -> None:
    lance.write_dataset(_rows(0, 120), local_uri, max_rows_per_file=1,
                        enable_stable_row_ids=stable)
    ds = await alance.open_dataset(local_uri)
    for k in range(6):  # from the URI and from the handle, as writers do
        target = ds if k % 2 else local_uri
        ds = await alance.write_dataset(_rows(1000 + 10 * k, 10), target, mode="append")
    ds = (await ds.delete("id % 7 = 3")).dataset
    ds = (await ds.update({"v": "v + 100"}, where="id >= 1000 AND id < 1010")).dataset
    ds = (await ds.delete("id < 5")).dataset  # whole fragments go
    al.write_dataset(_rows(2000, 3), local_uri, mode="append")
    theirs = lance.dataset(local_uri)
    mine = await alance.open_dataset(local_uri)
    assert theirs.version == mine.version
    assert theirs.to_table().sort_by("id").equals((await mine.to_table()).sort_by("id"))
    for version in range(1, mine.version + 1):  # every version, as pylance reads it
        old = lance.dataset(local_uri, version=version)
        ours = await alance.open_dataset(local_uri, version=version)
        assert old.count_rows() == await ours.count_rows()
        assert [f.fragment_id for f in old.get_fragments()] == [
            f.id for f in ours.manifest.fragments]
    # and pylance commits on top of it
    lance.write_dataset(_rows(3000, 5), local_uri, mode="append")
    assert (await alance.open_dataset(local_uri)).version == mine.version + 1


# -- requests per commit ------------------------------------------------------------------------


async def test_an_s3_append_makes_fewer_requests_than_pylance(moto_target: S3Target,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               ) -> None:
    """One GET (the manifest), one LIST (the newest version, when the write starts), the
    data file in one plain PUT, the transaction file, the conditional create of the manifest:
    pylance sends a second LIST before the commit. No HEAD, no multipart upload, no version
    hint. A base older than ``FRESH_BASE_SECONDS`` when the commit starts is listed again."""
    uri, options = moto_target.uri("ds"), moto_target.storage_options
    await alance.write_dataset(_rows(0, 10), uri, storage_options=options)
    await alance.write_dataset(_rows(10, 10), uri, mode="append", storage_options=options)
    plan = FaultPlan()  # no faults: it only counts
    for k in range(3):
        await alance.write_dataset(_rows(100 + 10 * k, 10), uri, mode="append",
                                   storage_options={**options, "wrap_backend": plan})
    assert dict(plan.stats.calls) == {"get": 3, "list": 3, "put": 3, "put_create": 3,
                                      "upload_write": 3, "upload_complete": 3}
    monkeypatch.setattr(commit_loop, "FRESH_BASE_SECONDS", -1.0)  # every base is stale
    plan.stats.calls.clear()
    await alance.write_dataset(_rows(200, 10), uri, mode="append",
                               storage_options={**options, "wrap_backend": plan})
    assert plan.stats.calls["list"] == 2, plan.stats.calls
    store = open_store(uri, options)
    names = [m.path for m in await store.list_all()]
    assert not any(n.endswith("latest_version_hint.json") for n in names), names
    for meta in await store.list("data"):  # one PUT each: no multipart "-<parts>" ETag
        assert meta.e_tag is not None and "-" not in meta.e_tag, meta.e_tag
    theirs = lance.dataset(uri, storage_options=options)
    assert theirs.version == 6 and theirs.count_rows() == 60


async def test_local_commits_keep_the_version_hint(local_uri: str) -> None:
    await alance.write_dataset(_rows(0, 10), local_uri)
    await alance.write_dataset(_rows(10, 10), local_uri, mode="append")
    hint = Path(local_uri) / "_versions" / "latest_version_hint.json"
    assert decode_latest_version_hint(hint.read_bytes()) == 2
    lance.write_dataset(_rows(20, 10), local_uri, mode="append")  # pylance keeps it too
    await alance.write_dataset(_rows(30, 10), local_uri, mode="append")
    assert decode_latest_version_hint(hint.read_bytes()) == 4


async def test_a_version_listed_as_taken_is_refused_without_asking(local_uri: str) -> None:
    await alance.write_dataset(_rows(0, 10), local_uri)
    await alance.write_dataset(_rows(10, 10), local_uri, mode="append")
    store, handler = open_store(local_uri), ConditionalPutCommitHandler()
    assert (await handler.latest(store)).version == 2
    plan = FaultPlan()
    store.wrap_backend(plan)
    for scheme in ManifestNamingScheme:
        with pytest.raises(CommitConflictError):
            await handler.commit(store, 2, b"x", scheme)
    assert plan.stats.total_calls == 0
    for scheme in ManifestNamingScheme:  # a create (version 1) always asks the store
        with pytest.raises(CommitConflictError):
            await handler.commit(store, 1, b"x", scheme)
    assert plan.stats.total_calls > 0
    # the next version: under the directory's own scheme only the conditional create; under
    # the other scheme a HEAD first
    plan.stats.calls.clear()
    await handler.commit(store, 3, b"three", ManifestNamingScheme.V2)
    assert dict(plan.stats.calls) == {"put_create": 1}
    plan.stats.calls.clear()
    with pytest.raises(CommitConflictError):
        await handler.commit(store, 3, b"three again", ManifestNamingScheme.V1)
    assert dict(plan.stats.calls) == {"head": 1}  # the other scheme: asked (and found)
    assert (await handler.latest(store)).version == 3
    plan.stats.calls.clear()
    await handler.commit(store, 4, b"four", ManifestNamingScheme.V1)
    assert dict(plan.stats.calls) == {"head": 1, "put_create": 1}


async def test_a_rebase_reads_each_newer_manifest_once(local_uri: str) -> None:
    ds = await alance.write_dataset(_rows(0, 10), local_uri)
    for k in range(3):  # three commits the handle does not know of
        await alance.write_dataset(_rows(100 + 10 * k, 10), local_uri, mode="append")
    plan = FaultPlan()
    ds.store.wrap_backend(plan)
    new = (await ds.delete("id = 3")).dataset  # planned on version 1: rebased over 2..4
    assert new.version == 5
    # the newest version is listed, then versions 2..4 read by their paths: no HEAD
    assert plan.stats.calls["get"] == 3 and "head" not in plan.stats.calls, plan.stats.calls
    assert lance.dataset(local_uri).count_rows() == 39


def test_lost_race_pauses_grow_and_stay_bounded() -> None:
    first = [race_delay(0) for _ in range(300)]
    assert min(first) >= 0 and max(first) <= RACE_BACKOFF_BASE
    assert max(race_delay(40) for _ in range(300)) <= BACKOFF_CAP
    slow = [race_delay(40, attempt_seconds=2.0) for _ in range(300)]
    assert BACKOFF_CAP < max(slow) <= 4.0
