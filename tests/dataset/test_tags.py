"""Tags: upstream's on-disk form, both ways with pylance, checkout by tag, bad names."""

from __future__ import annotations

import json
import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync
from alance.dataset.versions.tags import decode_tag, encode_tag


def table(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


async def three_versions(uri: str) -> alance.LanceDataset:
    await alance.write_dataset(table(0, 10), uri, data_storage_version="legacy")
    await alance.write_dataset(table(10, 10), uri, mode="append")
    return await alance.write_dataset(table(20, 10), uri, mode="append")


async def test_alance_tags_are_pylance_tags(local_uri: str) -> None:
    ds = await three_versions(local_uri)
    tag = await ds.tags.create("first", 1)
    await ds.tags.create("second.v-2_x", 2)
    path = Path(local_uri) / "_refs" / "tags" / "first.json"
    body = json.loads(path.read_bytes())
    assert set(body) == {"branch", "version", "createdAt", "updatedAt", "manifestSize",
                         "metadata"}
    manifests = sorted((Path(local_uri) / "_versions").glob("*.manifest"))
    sizes = {os.path.getsize(p) for p in manifests}
    assert body["version"] == 1 and body["manifestSize"] in sizes
    assert body["branch"] is None and body["metadata"] == {}
    assert tag.manifest_size == body["manifestSize"]

    pl = lance.dataset(local_uri)
    tags = pl.tags.list()
    assert {k: v["version"] for k, v in tags.items()} == {"first": 1, "second.v-2_x": 2}
    assert tags["first"]["manifest_size"] == body["manifestSize"]
    assert tags["first"]["created_at"].replace(tzinfo=None) == tag.created_at.replace(
        tzinfo=None)
    assert lance.dataset(local_uri, version="first").count_rows() == 10
    assert pl.tags.get_version("second.v-2_x") == 2


async def test_pylance_tags_read_updated_and_deleted_by_alance(local_uri: str) -> None:
    await three_versions(local_uri)
    pl = lance.dataset(local_uri)
    pl.tags.create("old", 1)
    pl.tags.create("mid", 2)
    ds = await alance.open_dataset(local_uri)
    listed = await ds.tags.list()
    assert {k: t.version for k, t in listed.items()} == {"old": 1, "mid": 2}
    assert listed["old"].created_at is not None
    # checkout by tag, both entry points
    assert (await alance.open_dataset(local_uri, version="old")).version == 1
    assert await (await ds.checkout_version("mid")).count_rows() == 20
    # update keeps createdAt, moves the version; pylance sees it
    before = json.loads((Path(local_uri) / "_refs/tags/old.json").read_bytes())
    await ds.tags.update("old", 3)
    after = json.loads((Path(local_uri) / "_refs/tags/old.json").read_bytes())
    assert after["createdAt"] == before["createdAt"] and after["version"] == 3
    assert lance.dataset(local_uri).tags.get_version("old") == 3
    await ds.tags.delete("mid")
    assert set(lance.dataset(local_uri).tags.list()) == {"old"}
    ordered = await ds.tags.list_ordered("asc")
    assert [name for name, _ in ordered] == ["old"]
    assert ordered[0][1]["version"] == 3 and dict(ordered[0][1])["manifest_size"] > 0


async def test_tag_errors(uri: str) -> None:
    ds = await three_versions(uri)
    await ds.tags.create("t", 2)
    with pytest.raises(alance.AlreadyExistsError):
        await ds.tags.create("t", 1)
    for bad in ("", "a/b", "../x", ".hidden", "end.", "x.lock", "a..b", "sp ace"):
        with pytest.raises(alance.InvalidInputError):
            await ds.tags.create(bad, 1)
    with pytest.raises(alance.NotFoundError):
        await ds.tags.create("nover", 99)
    with pytest.raises(alance.NotFoundError):
        await ds.tags.delete("missing")
    with pytest.raises(alance.NotFoundError):
        await ds.tags.update("missing", 1)
    with pytest.raises(alance.NotFoundError):
        await alance.open_dataset(uri, version="missing")
    # a tag of a tag resolves to the version
    await ds.tags.create("alias", "t")
    assert await ds.tags.get_version("alias") == 2


def test_tag_file_codec_round_trip() -> None:
    data = encode_tag(7, 1234, created_ns=1_700_000_000_123_456_789,
                      updated_ns=1_700_000_001_000_000_000)
    text = data.decode()
    assert '"createdAt": "2023-11-14T22:13:20.123456789Z"' in text
    assert '"updatedAt": "2023-11-14T22:13:21Z"' in text
    tag = decode_tag("x", data)
    assert (tag.version, tag.manifest_size, tag.branch) == (7, 1234, None)
    assert tag.created_at is not None and tag.created_at.microsecond == 123456
    # the older form (no timestamps) still reads
    old = decode_tag("y", b'{"branch": null, "version": 3, "manifestSize": 99}')
    assert old.version == 3 and old.created_at is None
    with pytest.raises(alance.CorruptFileError):
        decode_tag("z", b'{"version": -1, "manifestSize": 1}')
    with pytest.raises(alance.CorruptFileError):
        decode_tag("z", b"not json")


def test_sync_tags(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    sync.write_dataset(table(0, 5), uri, data_storage_version="legacy")
    ds = sync.write_dataset(table(5, 5), uri, mode="append")
    ds.tags.create("one", 1)
    assert ds.tags.get_version("one") == 1
    assert sync.open_dataset(uri, version="one").count_rows() == 5
    assert ds.checkout_version("one").version == 1
    ds.tags.delete("one")
    assert ds.tags.list() == {}
