"""alance and pylance on the same S3 datasets (moto, SeaweedFS, opt-in external endpoint).

Also: the storage-option spellings and environment variables alance accepts for S3, and the
typed errors for bad credentials, a missing bucket and an unreachable endpoint.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import alance
from alance import sync
from alance.errors import AlanceError, NotFoundError
from alance.io.uri import open_store
from tests.s3_servers import S3Target, free_ports, make_target

#: A typed error must come back well within this (no endless retries, no hang).
ERROR_DEADLINE_S = 20.0


def make_table(start: int, n: int) -> pa.Table:
    """Rows ``start .. start+n-1``: an id, a non-empty string and a float."""
    ids = pa.array(range(start, start + n), pa.int64())
    return pa.table({"id": ids,
                     "name": pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), ""),
                     "value": pc.multiply(pc.cast(ids, pa.float64()), 0.5)})


def sorted_by_id(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


# -- pylance writes, alance reads ---------------------------------------------------------------
def test_pylance_writes_alance_reads(s3_target: S3Target) -> None:
    uri, opts = s3_target.uri("from_pylance.lance"), s3_target.storage_options
    table = make_table(0, 2000)
    lance.write_dataset(table, uri, storage_options=opts, data_storage_version="legacy",
                        max_rows_per_file=700, max_rows_per_group=128)
    lance.write_dataset(make_table(2000, 300), uri, mode="append", storage_options=opts)
    oracle = lance.dataset(uri, storage_options=opts)

    ds = sync.open_dataset(uri, storage_options=opts)
    assert ds.version == oracle.version == 2
    assert ds.to_table().equals(oracle.to_table())
    assert ds.count_rows() == 2300
    idx = [2299, 0, 699, 700, 1400, 2000, 5]
    assert ds.take(idx).equals(oracle.take(idx))
    flt = "id >= 650 AND id < 1450 AND value > 400"
    assert ds.to_table(filter=flt).equals(oracle.to_table(filter=flt))
    assert ds.to_table(columns=["name"]).equals(oracle.to_table(columns=["name"]))
    old = sync.open_dataset(uri, version=1, storage_options=opts)
    assert old.to_table().equals(table)


# -- alance writes, pylance reads ---------------------------------------------------------------
def test_alance_writes_pylance_reads(s3_target: S3Target) -> None:
    uri, opts = s3_target.uri("from_alance.lance"), s3_target.storage_options
    first, second = make_table(0, 1500), make_table(1500, 600)
    ds = sync.write_dataset(first, uri, storage_options=opts, max_rows_per_file=1000)
    assert ds.version == 1
    ds = sync.write_dataset(second, uri, mode="append", storage_options=opts)
    assert ds.version == 2

    oracle = lance.dataset(uri, storage_options=opts)
    assert oracle.version == 2
    assert oracle.to_table().equals(pa.concat_tables([first, second]))
    assert oracle.take([0, 1000, 2099]).equals(ds.take([0, 1000, 2099]))
    assert lance.dataset(uri, version=1, storage_options=opts).to_table().equals(first)
    assert [v["version"] for v in oracle.versions()] == [1, 2]


# -- both engines commit to one dataset ---------------------------------------------------------
def test_alternating_appends(s3_target: S3Target) -> None:
    uri, opts = s3_target.uri("both.lance"), s3_target.storage_options
    lance.write_dataset(make_table(0, 100), uri, storage_options=opts,
                        data_storage_version="legacy")
    start = 100
    for round_ in range(3):
        sync.write_dataset(make_table(start, 50), uri, mode="append", storage_options=opts)
        start += 50
        lance.write_dataset(make_table(start, 50), uri, mode="append", storage_options=opts)
        start += 50
        assert sync.open_dataset(uri, storage_options=opts).version == 3 + 2 * round_

    expected = make_table(0, start)
    ours, theirs = sync.open_dataset(uri, storage_options=opts), lance.dataset(
        uri, storage_options=opts)
    assert ours.version == theirs.version == 7
    assert sorted_by_id(ours.to_table()).equals(expected)
    assert sorted_by_id(theirs.to_table()).equals(expected)
    assert [v["version"] for v in ours.versions()] == list(range(1, 8))
    assert [v["version"] for v in theirs.versions()] == list(range(1, 8))


async def test_concurrent_alance_appends(s3_target: S3Target) -> None:
    uri, opts = s3_target.uri("conc.lance"), s3_target.storage_options
    await alance.write_dataset(make_table(0, 10), uri, storage_options=opts)

    async def append(i: int) -> int:
        ds = await alance.write_dataset(make_table(10 + 10 * i, 10), uri, mode="append",
                                        storage_options=opts)
        return ds.version

    versions = await asyncio.gather(*(append(i) for i in range(8)))
    assert sorted(versions) == list(range(2, 10))
    ds = await alance.open_dataset(uri, storage_options=opts)
    assert ds.version == 9
    assert [v["version"] for v in await ds.versions()] == list(range(1, 10))
    assert sorted_by_id(await ds.to_table()).equals(make_table(0, 90))
    oracle = await asyncio.to_thread(lance.dataset, uri, storage_options=opts)
    assert oracle.version == 9
    assert sorted_by_id(oracle.to_table()).equals(make_table(0, 90))


async def test_concurrent_appends_from_both_engines(s3_target: S3Target) -> None:
    """4 alance tasks and 4 pylance threads append at once: nothing lost, versions contiguous.

    A lost row here would mean one engine replaced the other's manifest, i.e. a commit that is
    not a conditional create on one side.
    """
    uri, opts = s3_target.uri("mixed.lance"), s3_target.storage_options
    await alance.write_dataset(make_table(0, 10), uri, storage_options=opts)

    async def ours(i: int) -> None:
        await alance.write_dataset(make_table(10 + 10 * i, 10), uri, mode="append",
                                   storage_options=opts)

    def theirs(i: int) -> None:
        lance.write_dataset(make_table(50 + 10 * i, 10), uri, mode="append",
                            storage_options=opts)

    await asyncio.gather(*(ours(i) for i in range(4)),
                         *(asyncio.to_thread(theirs, i) for i in range(4)))
    ds = await alance.open_dataset(uri, storage_options=opts)
    assert ds.version == 9
    assert [v["version"] for v in await ds.versions()] == list(range(1, 10))
    assert sorted_by_id(await ds.to_table()).equals(make_table(0, 90))
    oracle = await asyncio.to_thread(lance.dataset, uri, storage_options=opts)
    assert sorted_by_id(oracle.to_table()).equals(make_table(0, 90))


# -- storage options and environment ------------------------------------------------------------
def _write_marker(target: S3Target, name: str) -> str:
    uri = target.uri(name)
    lance.write_dataset(make_table(0, 5), uri, storage_options=target.storage_options,
                        data_storage_version="legacy")
    return uri


@pytest.mark.parametrize("spelling", ["plain", "endpoint_alias", "bool_allow_http", "no_prefix"])
def test_storage_option_spellings(s3_target: S3Target, spelling: str) -> None:
    uri = _write_marker(s3_target, "opts.lance")
    t = s3_target
    choices: dict[str, dict[str, Any]] = {
        "plain": dict(t.storage_options),
        "endpoint_alias": {"endpoint": t.endpoint, "aws_access_key_id": t.access_key_id,
                           "aws_secret_access_key": t.secret_access_key,
                           "aws_region": t.region, "allow_http": "true"},
        "bool_allow_http": {**t.storage_options, "allow_http": True},
        "no_prefix": {"endpoint": t.endpoint, "access_key_id": t.access_key_id,
                      "secret_access_key": t.secret_access_key, "region": t.region,
                      "allow_http": "true"},
    }
    opts = choices[spelling]
    assert sync.open_dataset(uri, storage_options=opts).to_table().equals(make_table(0, 5))


@pytest.mark.parametrize("endpoint_var", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"])
def test_environment_variables(s3_target: S3Target, monkeypatch: pytest.MonkeyPatch,
                               endpoint_var: str) -> None:
    uri = _write_marker(s3_target, "env.lance")
    for name, value in s3_target.env.items():
        if name.startswith("AWS_ENDPOINT"):
            continue
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv(endpoint_var, s3_target.endpoint)
    assert sync.open_dataset(uri).to_table().equals(make_table(0, 5))
    ds = sync.write_dataset(make_table(5, 5), uri, mode="append")
    assert ds.version == 2


def test_unknown_storage_option_refused(s3_target: S3Target) -> None:
    with pytest.raises(alance.InvalidInputError):
        open_store(s3_target.uri("x.lance"), {**s3_target.storage_options, "aws_endpiont": "x"})


# -- bad input: typed errors, quickly -----------------------------------------------------------
async def _typed_error_quickly(coro: Any) -> BaseException:
    started = time.monotonic()
    try:
        await asyncio.wait_for(coro, ERROR_DEADLINE_S)
    except TimeoutError:
        pytest.fail(f"no error within {ERROR_DEADLINE_S}s (hang or endless retries)")
    except AlanceError as exc:
        assert time.monotonic() - started < ERROR_DEADLINE_S
        return exc
    pytest.fail("no error raised")


async def test_missing_bucket(s3_target: S3Target) -> None:
    target = s3_target.with_bucket("no-such-bucket-" + s3_target.key_prefix[-8:])
    store = open_store(target.uri("ds.lance"), target.storage_options)
    exc = await _typed_error_quickly(store.get("_versions/1.manifest"))
    assert isinstance(exc, NotFoundError | alance.StoreError), exc
    exc = await _typed_error_quickly(store.put("a.bin", b"x"))
    assert isinstance(exc, NotFoundError | alance.StoreError), exc
    exc = await _typed_error_quickly(
        alance.write_dataset(make_table(0, 3), target.uri("ds.lance"),
                             storage_options=target.storage_options))
    assert not isinstance(exc, alance.AlreadyExistsError), exc


async def test_wrong_credentials(seaweed_target: S3Target) -> None:
    # moto accepts any credentials; SeaweedFS checks them.
    uri = _write_marker(seaweed_target, "creds.lance")
    bad = {**seaweed_target.storage_options, "aws_secret_access_key": "wrong-secret"}
    exc = await _typed_error_quickly(alance.open_dataset(uri, storage_options=bad))
    assert isinstance(exc, alance.StoreError), exc
    exc = await _typed_error_quickly(open_store(uri, bad).put("data/x.bin", b"x"))
    assert isinstance(exc, alance.StoreError), exc


async def test_unreachable_endpoint() -> None:
    port = free_ports(1)[0]  # nothing listens there
    target = make_target("dead", f"http://127.0.0.1:{port}", "bucket")
    exc = await _typed_error_quickly(
        alance.open_dataset(target.uri("ds.lance"), storage_options=target.storage_options))
    assert isinstance(exc, alance.StoreError), exc
    store = open_store(target.uri("ds.lance"), target.storage_options)
    exc = await _typed_error_quickly(store.put_if_absent("_versions/1.manifest", b"m"))
    assert isinstance(exc, alance.StoreError), exc
