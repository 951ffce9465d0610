"""The DynamoDB external manifest store: pylance's table layout, repair, back-fill, interop.

Everything runs against moto over HTTP on 127.0.0.1 (S3 and DynamoDB on one server) and is
checked with pylance, which commits to the same datasets through the same tables.
"""

from __future__ import annotations

import asyncio
import gc
import pickle
import threading
import uuid
import warnings
from typing import Any

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.commit import aws
from alance.commit.dynamodb import DynamoDBCommitHandler
from alance.commit.handler import manifest_path
from alance.errors import (
    CommitConflictError,
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    TransientStoreError,
)
from alance.format.manifest import ManifestNamingScheme
from alance.io.uri import open_store
from alance.testing.faults import FaultPlan
from tests.dynamodb_rig import (
    DdbTarget,
    FaultProxy,
    create_table,
    ddb_client,
    ddb_target,
    item_versions,
    rows,
    sorted_ids,
)

__all__ = ["ddb_target"]  # the fixture, imported for pytest

TIMEOUT = 60


def shape(item: dict[str, Any]) -> dict[str, str]:
    """Attribute name -> DynamoDB type of an item."""
    return {name: next(iter(value)) for name, value in item.items()}


def v2_path(base: str, version: int) -> str:
    return f"{base}/{manifest_path(version, ManifestNamingScheme.V2)}"


async def both_read(target: DdbTarget, name: str) -> tuple[int, pa.Table]:
    """Version and rows as alance and pylance see them (asserting they agree)."""
    uri, opts = target.uri(name), target.storage_options
    ds = await alance.open_dataset(uri, storage_options=opts)
    ours = (await ds.to_table()).sort_by("id")
    theirs_ds = await asyncio.to_thread(lance.dataset, uri, storage_options=opts)
    theirs = (await asyncio.to_thread(theirs_ds.to_table)).sort_by("id")
    assert theirs_ds.version == ds.version
    assert ours.equals(theirs.select(ours.column_names))
    return ds.version, ours


def stage_back(target: DdbTarget, name: str, version: int) -> str:
    """Put a finished commit back into the state right after its 'claimed' step.

    The final manifest moves to a staging path and the item points there, as if the writer had
    died after its conditional PutItem. Returns the staged key (relative to the dataset).
    """
    base = target.base_uri(name)
    final = manifest_path(version, ManifestNamingScheme.V2)
    staged = f"{final}-{uuid.uuid4()}"
    s3 = target.s3.client()
    bucket = target.s3.bucket
    s3.copy_object(Bucket=bucket, Key=f"{base}/{staged}",
                   CopySource={"Bucket": bucket, "Key": f"{base}/{final}"})
    s3.delete_object(Bucket=bucket, Key=f"{base}/{final}")
    client = ddb_client(target.endpoint)
    item = client.get_item(TableName=target.table, ConsistentRead=True,
                           Key={"base_uri": {"S": base}, "version": {"N": str(version)}})["Item"]
    item["path"] = {"S": f"{base}/{staged}"}
    client.put_item(TableName=target.table, Item=item)
    return staged


# -- layout and pylance compatibility -------------------------------------------------------------
async def test_items_have_pylance_shape(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("ds"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
    await asyncio.to_thread(lance.write_dataset, rows(20, 10), uri, mode="append",
                            storage_options=opts)
    items = sorted(ddb_target.items("ds"), key=lambda i: int(i["version"]["N"]))
    assert item_versions(items) == [1, 2, 3]
    by = {i["committer"]["S"]: i for i in items}
    assert set(by) == {"alance", "lancedb"}
    assert shape(by["alance"]) == shape(by["lancedb"])
    base = ddb_target.base_uri("ds")
    for item in items:
        version = int(item["version"]["N"])
        assert item["base_uri"] == {"S": base}
        assert item["path"] == {"S": v2_path(base, version)}
        size = ddb_target.s3.client().head_object(
            Bucket=ddb_target.s3.bucket, Key=item["path"]["S"])["ContentLength"]
        assert int(item["size"]["N"]) == size
    assert not [k for k in ddb_target.keys("ds") if ".manifest-" in k]  # no staged leftovers
    version, table = await both_read(ddb_target, "ds")
    assert version == 3 and sorted_ids(table) == list(range(30))


async def test_alance_and_pylance_alternate(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("alt"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 5), uri, storage_options=opts)
    for i in range(1, 7):
        if i % 2:
            await asyncio.to_thread(lance.write_dataset, rows(i * 100, 5), uri, mode="append",
                                    storage_options=opts)
        else:
            await alance.write_dataset(rows(i * 100, 5), uri, mode="append",
                                       storage_options=opts)
        version, table = await both_read(ddb_target, "alt")
        assert version == i + 1
        assert sorted_ids(table) == sorted(
            [*range(5), *(j * 100 + k for j in range(1, i + 1) for k in range(5))])
    assert item_versions(ddb_target.items("alt")) == list(range(1, 8))


async def test_alance_and_pylance_commit_concurrently(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("conc"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 5), uri, storage_options=opts)
    per_writer = 4

    def pylance_writer(w: int) -> None:
        for k in range(per_writer):
            lance.write_dataset(rows(10_000 * (w + 1) + k * 10, 5), uri, mode="append",
                                storage_options=opts)

    async def alance_writer(w: int) -> None:
        for k in range(per_writer):
            await alance.write_dataset(rows(100_000 * (w + 1) + k * 10, 5), uri, mode="append",
                                       storage_options=opts)

    threads = [threading.Thread(target=pylance_writer, args=(w,)) for w in range(2)]
    async with asyncio.timeout(TIMEOUT):
        for t in threads:
            t.start()
        await asyncio.gather(*(alance_writer(w) for w in range(2)))
        await asyncio.to_thread(lambda: [t.join() for t in threads])
    expected = sorted([*range(5)]
                      + [10_000 * (w + 1) + k * 10 + j for w in range(2)
                         for k in range(per_writer) for j in range(5)]
                      + [100_000 * (w + 1) + k * 10 + j for w in range(2)
                         for k in range(per_writer) for j in range(5)])
    version, table = await both_read(ddb_target, "conc")
    assert version == 1 + 4 * per_writer
    assert sorted_ids(table) == expected
    items = ddb_target.items("conc")
    assert item_versions(items) == list(range(1, version + 1))
    assert {i["committer"]["S"] for i in items} == {"alance", "lancedb"}


# -- configuration -------------------------------------------------------------------------------
@pytest.mark.parametrize("keys,attrs", [
    ([{"AttributeName": "uri", "KeyType": "HASH"},
      {"AttributeName": "version", "KeyType": "RANGE"}],
     [{"AttributeName": "uri", "AttributeType": "S"},
      {"AttributeName": "version", "AttributeType": "N"}]),
    ([{"AttributeName": "base_uri", "KeyType": "HASH"},
      {"AttributeName": "version", "KeyType": "RANGE"}],
     [{"AttributeName": "base_uri", "AttributeType": "S"},
      {"AttributeName": "version", "AttributeType": "S"}]),
    ([{"AttributeName": "base_uri", "KeyType": "HASH"}],
     [{"AttributeName": "base_uri", "AttributeType": "S"}]),
], ids=["wrong-hash-name", "version-is-a-string", "no-range-key"])
async def test_wrong_table_layout_is_refused(ddb_target: DdbTarget, keys: Any,
                                             attrs: Any) -> None:
    table = create_table(ddb_target.endpoint, keys=tuple(keys), attrs=tuple(attrs))
    bad = DdbTarget(ddb_target.s3, table, ddb_target.endpoint)
    with pytest.raises(InvalidInputError, match="key schema"):
        await alance.write_dataset(rows(0, 3), bad.uri("ds"), storage_options=bad.storage_options)
    assert bad.keys("ds") == [] or not [k for k in bad.keys("ds") if "_versions" in k]


async def test_missing_table_is_not_found(ddb_target: DdbTarget) -> None:
    missing = DdbTarget(ddb_target.s3, "no-such-table", ddb_target.endpoint)
    with pytest.raises(NotFoundError, match="does not exist"):
        await alance.write_dataset(rows(0, 3), missing.uri("ds"),
                                   storage_options=missing.storage_options)


@pytest.mark.parametrize("query", ["", "?ddbTableName=", "?ddbTableName=T&x=1", "?table=T"])
async def test_bad_ddb_uri_is_refused(ddb_target: DdbTarget, query: str) -> None:
    uri = f"s3+ddb://{ddb_target.s3.bucket}/ds{query}"
    with pytest.raises(InvalidInputError, match="ddbTableName"):
        await alance.open_dataset(uri, storage_options=ddb_target.storage_options)


async def test_endpoint_from_environment(ddb_target: DdbTarget,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNAMODB_ENDPOINT", ddb_target.endpoint)
    opts = dict(ddb_target.s3.storage_options)  # no dynamodb_endpoint
    ds = await alance.write_dataset(rows(0, 3), ddb_target.uri("env"), storage_options=opts)
    assert ds.version == 1 and item_versions(ddb_target.items("env")) == [1]


def test_dataset_pickles_with_its_handler(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("pk"), ddb_target.storage_options
    ds = al.write_dataset(rows(0, 3), uri, storage_options=opts)
    copy = pickle.loads(pickle.dumps(ds))
    assert isinstance(copy._async._handler, DynamoDBCommitHandler)
    al.write_dataset(rows(3, 3), uri, mode="append", storage_options=opts)
    assert al.open_dataset(uri, storage_options=opts).version == 2
    assert asyncio.run(copy._async.latest_version()) == 2


# -- back-fill and stale writers -------------------------------------------------------------------
async def test_versions_committed_without_ddb_are_backfilled(ddb_target: DdbTarget) -> None:
    s3_uri, opts = ddb_target.s3_uri("old"), ddb_target.storage_options
    for i in range(3):
        await asyncio.to_thread(lance.write_dataset, rows(i * 10, 10), s3_uri,
                                mode="create" if i == 0 else "append",
                                storage_options=ddb_target.s3.storage_options,
                                data_storage_version="legacy")
    assert ddb_target.items("old") == []
    ds = await alance.open_dataset(ddb_target.uri("old"), storage_options=opts)
    assert ds.version == 3 and item_versions(ddb_target.items("old")) == [3]
    assert (await ds.checkout_version(2)).version == 2
    assert item_versions(ddb_target.items("old")) == [2, 3]
    ds = await alance.write_dataset(rows(30, 10), ddb_target.uri("old"), mode="append",
                                    storage_options=opts)
    assert ds.version == 4
    version, table = await both_read(ddb_target, "old")
    assert version == 4 and sorted_ids(table) == list(range(40))


async def test_existing_manifest_is_never_overwritten(ddb_target: DdbTarget) -> None:
    """A writer that missed versions committed without DynamoDB loses, not overwrites."""
    s3_uri = ddb_target.s3_uri("stale")
    await alance.write_dataset(rows(0, 5), s3_uri, storage_options=ddb_target.s3.storage_options)
    await alance.write_dataset(rows(5, 5), s3_uri, mode="append",
                               storage_options=ddb_target.s3.storage_options)
    store = open_store(ddb_target.uri("stale"), ddb_target.storage_options)
    handler = DynamoDBCommitHandler.from_uri(ddb_target.uri("stale"), ddb_target.storage_options)
    path = manifest_path(2, ManifestNamingScheme.V2)
    before = await store.get(path)
    with pytest.raises(CommitConflictError):
        await handler.commit(store, 2, b"not the real manifest", ManifestNamingScheme.V2)
    assert await store.get(path) == before
    assert ddb_target.items("stale") == []
    assert not [k for k in ddb_target.keys("stale") if ".manifest-" in k]


# -- reader repair ---------------------------------------------------------------------------------
@pytest.mark.parametrize("first", ["alance", "pylance"])
async def test_reader_finishes_a_claimed_commit(ddb_target: DdbTarget, first: str) -> None:
    uri, opts = ddb_target.uri("rep"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
    staged = stage_back(ddb_target, "rep", 2)
    assert staged in ddb_target.keys("rep")
    if first == "alance":
        ds = await alance.open_dataset(uri, storage_options=opts)
        assert ds.version == 2 and await ds.count_rows() == 20
    else:
        ds_py = await asyncio.to_thread(lance.dataset, uri, storage_options=opts)
        assert ds_py.version == 2 and ds_py.count_rows() == 20
    base = ddb_target.base_uri("rep")
    item = {int(i["version"]["N"]): i for i in ddb_target.items("rep")}[2]
    assert item["path"]["S"] == v2_path(base, 2)
    keys = ddb_target.keys("rep")
    assert staged not in keys and manifest_path(2, ManifestNamingScheme.V2) in keys
    version, table = await both_read(ddb_target, "rep")
    assert version == 2 and sorted_ids(table) == list(range(20))


async def test_version_listing_finishes_claimed_commits(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("lst"), ddb_target.storage_options
    ds = await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
    stage_back(ddb_target, "lst", 2)
    assert [v["version"] for v in await ds.versions()] == [1, 2]  # ds still reads version 1
    assert ".manifest-" not in "".join(ddb_target.keys("lst"))


async def test_reader_refuses_when_repair_is_impossible(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("lost"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
    staged = stage_back(ddb_target, "lost", 2)
    ddb_target.s3.client().delete_object(Bucket=ddb_target.s3.bucket,
                                         Key=f"{ddb_target.base_uri('lost')}/{staged}")
    with pytest.raises(CorruptFileError, match="refusing to load"):
        await alance.open_dataset(uri, storage_options=opts)
    with pytest.raises(Exception):  # noqa: B017 - pylance refuses too (its own error type)
        await asyncio.to_thread(lance.dataset, uri, storage_options=opts)


async def test_reader_refuses_while_repair_fails_then_repairs(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("flaky"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
    stage_back(ddb_target, "flaky", 2)
    plan = FaultPlan(fail_ops={"copy"}, fail_rate=1.0)
    with pytest.raises(TransientStoreError, match="refusing to load"):
        await alance.open_dataset(uri, storage_options={**opts, "wrap_backend": plan})
    assert plan.stats.failures["copy"] >= 1
    ds = await alance.open_dataset(uri, storage_options=opts)
    assert ds.version == 2 and await ds.count_rows() == 20


# -- lost responses ---------------------------------------------------------------------------
async def test_lost_putitem_response_is_not_a_conflict(ddb_target: DdbTarget) -> None:
    """The first PutItem reaches moto but its response is lost: botocore retries, the retry
    fails its condition on our own item, and the commit must still count as ours (once)."""
    uri = ddb_target.uri("lost-put")
    await alance.write_dataset(rows(0, 10), uri, storage_options=ddb_target.storage_options)
    dropped: list[bytes] = []

    def first_putitem(head: bytes) -> str | None:
        if not dropped and b"dynamodb_20120810.putitem" in head.lower():
            dropped.append(head)
            return "drop"
        return None

    with FaultProxy(ddb_target.endpoint, first_putitem) as proxy:
        opts = {**ddb_target.storage_options, "dynamodb_endpoint": proxy.endpoint}
        ds = await alance.write_dataset(rows(10, 10), uri, mode="append", storage_options=opts)
        assert proxy.counts.dropped == 1
    assert ds.version == 2
    version, table = await both_read(ddb_target, "lost-put")
    assert version == 2 and sorted_ids(table) == list(range(20))  # committed exactly once


# -- client lifetime -----------------------------------------------------------------------------
def test_clients_are_shared_per_loop_and_closed(ddb_target: DdbTarget) -> None:
    uri, opts = ddb_target.uri("cl"), ddb_target.storage_options
    seen: list[Any] = []

    async def work() -> None:
        await alance.write_dataset(rows(0, 3), uri, storage_options=opts)
        await alance.write_dataset(rows(3, 3), uri, mode="append", storage_options=opts)
        holder = aws._loops[asyncio.get_running_loop()]
        seen.append(holder)
        assert len(holder.clients) == 1  # one client for both datasets' handlers

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(work())
        asyncio.run(_open(uri, opts))
        gc.collect()
    assert seen[0].clients == {}  # closed when asyncio.run shut the loop down
    unclosed = [w for w in caught if "Unclosed client session" in str(w.message)
                or "Unclosed connector" in str(w.message)]
    assert not unclosed, [str(w.message) for w in unclosed]


async def _open(uri: str, opts: dict[str, str]) -> None:
    ds = await alance.open_dataset(uri, storage_options=opts)
    assert ds.version == 2


async def test_close_clients_closes_this_loops_clients(ddb_target: DdbTarget) -> None:
    await alance.write_dataset(rows(0, 3), ddb_target.uri("cc"),
                               storage_options=ddb_target.storage_options)
    holder = aws._loops[asyncio.get_running_loop()]
    client = next(iter(holder.clients.values()))
    await aws.close_clients()
    assert holder.clients == {}
    again = await aws.client("dynamodb", DynamoDBCommitHandler.from_uri(
        ddb_target.uri("cc"), ddb_target.storage_options).external.settings)  # type: ignore[attr-defined]
    assert again is not client


def test_the_test_table_settles_racing_creates_like_dynamodb(ddb_target: DdbTarget) -> None:
    """Racing conditional creates of one item have one winner on the test server too (moto's
    own check-then-store is not atomic: see ``make_moto_dynamodb_atomic``); commit tests
    that count versions rely on it."""
    import boto3

    client = boto3.client("dynamodb", endpoint_url=ddb_target.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    racers, base = 8, f"race-{uuid.uuid4().hex}"
    for version in range(30):
        winners: list[int] = []
        barrier = threading.Barrier(racers)

        def create(i: int, version: int = version, barrier: threading.Barrier = barrier,
                   winners: list[int] = winners) -> None:
            barrier.wait()
            try:
                client.put_item(
                    TableName=ddb_target.table,
                    Item={"base_uri": {"S": base}, "version": {"N": str(version)},
                          "path": {"S": f"p{i}"}},
                    ConditionExpression="attribute_not_exists(#b) AND attribute_not_exists(#v)",
                    ExpressionAttributeNames={"#b": "base_uri", "#v": "version"})
                winners.append(i)
            except client.exceptions.ConditionalCheckFailedException:
                pass

        threads = [threading.Thread(target=create, args=(i,)) for i in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(winners) == 1, (version, winners)
