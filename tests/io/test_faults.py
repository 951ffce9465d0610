"""Faults, delays and bad configuration: reads stay exact, failed writes change nothing.

A :class:`alance.testing.faults.FaultyBackend` is put under alance's store through the
storage option, on local disk and on a real S3 server (moto over HTTP on 127.0.0.1). Reads must
return exactly the rows written however many calls fail transiently (retries absorb them).
Writes must either succeed with the right rows or raise a typed alance error and leave the
dataset exactly at its previous version: same version, same rows, no new manifest (orphaned
data files are tolerated only if no manifest references them).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance
from alance.errors import (
    AlanceError,
    DatasetNotFoundError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    TransientStoreError,
)
from alance.io.uri import open_store
from alance.testing.faults import READ_OPERATIONS, FaultPlan
from tests.s3_servers import S3Target

TIMEOUT = 30  # seconds any one test may take before it counts as hung


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    """A fresh dataset location and its storage options: local disk, then moto S3."""
    if request.param == "local":
        return str(tmp_path / "ds.lance"), {}
    s3: S3Target = request.getfixturevalue("moto_target")
    return s3.uri("ds.lance"), s3.storage_options


# -- data and state -----------------------------------------------------------------------------
def rows(start: int, n: int) -> pa.Table:
    """``n`` rows whose ids start at ``start`` (content derived from the id)."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5, "s": pa.array([f"r{i}" for i in ids])})


@dataclass
class State:
    """Everything a failed write must leave as it was."""

    version: int | None
    table: pa.Table | None
    manifests: list[str]
    data_files: set[str]
    txn_files: set[str]
    referenced: set[str]


async def state_of(uri: str, options: dict[str, Any]) -> State:
    """The dataset's committed state, read through a clean (fault-free) store."""
    store = open_store(uri, options)
    manifests = sorted(m.path for m in await store.list("_versions")
                       if m.path.endswith(".manifest"))
    data = {m.path for m in await store.list("data")}
    txns = {m.path for m in await store.list("_transactions")}
    try:
        ds = await alance.open_dataset(uri, storage_options=options)
    except DatasetNotFoundError:
        return State(None, None, manifests, data, txns, set())
    referenced = {f"data/{f.path}" for frag in ds.fragment_protos() for f in frag.files}
    try:
        table: pa.Table | None = (await ds.to_table()).sort_by("id")
    except NotFoundError:
        table = None  # a file the manifest references is gone; callers assert on this
    return State(ds.version, table, manifests, data, txns, referenced)


async def assert_unchanged(before: State, uri: str, options: dict[str, Any]) -> State:
    """The dataset is exactly at its previous version; orphans are unreferenced."""
    after = await state_of(uri, options)
    assert after.version == before.version
    assert after.manifests == before.manifests, "a failed write left a new manifest"
    if before.table is None:
        assert after.table is None
    else:
        assert after.table is not None and after.table.equals(before.table)
    assert after.referenced == before.referenced
    orphans = after.data_files - before.data_files
    assert not (orphans & after.referenced)
    return after


def with_faults(options: dict[str, Any], plan: FaultPlan, **extra: Any) -> dict[str, Any]:
    # (no block cache: these tests are about the requests, which it would answer from memory)
    return {**options, "wrap_backend": plan, "block_cache_bytes": 0, **extra}


# -- reads under transient faults ---------------------------------------------------------------
async def test_reads_are_exact_under_transient_faults(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        expected = rows(0, 20_000)
        await alance.write_dataset(expected, uri, storage_options=options,
                                   max_rows_per_file=3_000, max_rows_per_group=500)
        for seed in (1, 2):
            plan = FaultPlan(fail_rate=0.2, seed=seed, fail_ops=READ_OPERATIONS)
            ds = await alance.open_dataset(
                uri, storage_options=with_faults(options, plan, max_retries=12))
            assert (await ds.to_table()).equals(expected)
            assert await ds.count_rows() == expected.num_rows
            assert await ds.count_rows("id % 7 = 0") == 2858
            picked = await ds.to_table(columns=["s", "id"], filter="id >= 19990")
            assert picked.equals(expected.select(["s", "id"]).slice(19_990))
            idx = np.random.default_rng(seed).choice(20_000, 300, replace=False)
            assert (await ds.take(idx)).equals(expected.take(idx))
            batches = [b async for b in ds.scan(batch_size=1_000)]
            assert pa.Table.from_batches(batches).equals(expected)
            # The faults really happened and were retried away.
            assert plan.stats.total_failures >= 1


async def test_reads_fail_typed_when_retries_run_out(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 1_000), uri, storage_options=options)
        plan = FaultPlan(fail_rate=1.0, fail_ops={"get_ranges"})
        ds = await alance.open_dataset(uri,
                                       storage_options=with_faults(options, plan, max_retries=2))
        with pytest.raises(TransientStoreError, match="injected"):
            await ds.to_table()
        # Each logical read is tried 1 + max_retries times, no more.
        assert plan.stats.calls["get_ranges"] % 3 == 0
        assert plan.stats.calls["get_ranges"] == plan.stats.failures["get_ranges"]


@pytest.mark.parametrize("error", [PermissionDeniedError, NotFoundError, StoreError])
async def test_final_errors_are_not_retried(where: tuple[str, dict[str, Any]],
                                            error: type[Exception]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 1_000), uri, storage_options=options)
        plan = FaultPlan(fail_rate=1.0, fail_ops={"get_ranges"}, error=error)
        ds = await alance.open_dataset(uri, storage_options=with_faults(options, plan))
        with pytest.raises(error):
            await ds.to_table()
        assert plan.stats.calls["get_ranges"] == 1


# -- writes under faults ------------------------------------------------------------------------
async def _write(uri: str, options: dict[str, Any], data: pa.Table, mode: str,
                 plan: FaultPlan, **extra: Any) -> AlanceError | None:
    """Write with faults; the typed error it raised, or None if it succeeded."""
    try:
        await alance.write_dataset(data, uri, mode=mode,  # type: ignore[arg-type]
                                   storage_options=with_faults(options, plan, **extra),
                                   max_rows_per_file=1_500, max_rows_per_group=500)
    except AlanceError as exc:
        return exc
    return None


async def test_random_write_faults_commit_all_or_nothing(
        where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        committed: list[pa.Table] = []
        failures = 0
        for i in range(10):
            before = await state_of(uri, options)
            data = rows(i * 10_000, 4_000)
            # Random faults, except one write whose every upload completion fails, so the
            # failing outcome is exercised on every run (not only with high probability).
            plan = (FaultPlan(fail_rate=1.0, fail_ops={"upload_complete"}) if i == 3
                    else FaultPlan(fail_rate=0.1, seed=i))
            mode = "create" if before.version is None else "append"
            error = await _write(uri, options, data, mode, plan)
            assert plan.stats.total_failures > 0 or error is None
            if error is None:
                committed.append(data)
                after = await state_of(uri, options)
                assert after.version == (before.version or 0) + 1
                expected = pa.concat_tables(committed).sort_by("id")
                assert after.table is not None and after.table.equals(expected)
            else:
                failures += 1
                await assert_unchanged(before, uri, options)
        assert failures >= 1
        if committed:
            # pylance, the oracle, reads exactly what alance says was committed.
            final = await state_of(uri, options)
            theirs = lance.dataset(uri, storage_options=options or None).to_table()
            assert final.table is not None and theirs.sort_by("id").equals(final.table)


@pytest.mark.parametrize(("ops", "calls"), [
    ({"upload_write"}, {0}),       # the first part of the first file never arrives
    ({"upload_complete"}, {1}),    # the second file fails to complete, the first is done
    ({"put"}, set()),              # the transaction file cannot be written (after retries)
    ({"put_create"}, set()),       # every manifest create fails before reaching the store
], ids=["upload-part", "second-file", "txn-file", "manifest"])
async def test_failed_append_leaves_previous_version(where: tuple[str, dict[str, Any]],
                                                     ops: set[str], calls: set[int]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 2_000), uri, storage_options=options)
        before = await state_of(uri, options)
        rate = 1.0 if not calls else 0.0
        plan = FaultPlan(fail_rate=rate, fail_ops=ops, fail_calls=calls)
        error = await _write(uri, options, rows(10_000, 4_000), "append", plan)
        assert isinstance(error, TransientStoreError), error
        assert plan.stats.total_failures >= 1
        after = await assert_unchanged(before, uri, options)
        assert after.txn_files == before.txn_files, "a failed commit left its .txn file"
        # The data files of the failed write were cleaned up, not just left unreferenced.
        assert after.data_files == before.data_files


async def test_one_failed_manifest_create_is_retried(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 2_000), uri, storage_options=options)
        plan = FaultPlan(fail_ops={"put_create"}, fail_calls={0})
        assert await _write(uri, options, rows(10_000, 1_000), "append", plan) is None
        after = await state_of(uri, options)
        assert after.version == 2 and after.table is not None and after.table.num_rows == 3_000
        assert plan.stats.total_failures == 1


async def test_failed_create_leaves_no_dataset(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        plan = FaultPlan(fail_rate=0.0, fail_ops={"upload_complete"}, fail_calls={2})
        error = await _write(uri, options, rows(0, 6_000), "create", plan)
        assert isinstance(error, TransientStoreError)
        after = await state_of(uri, options)
        assert after.version is None and not after.manifests and not after.data_files
        with pytest.raises(DatasetNotFoundError):
            await alance.open_dataset(uri, storage_options=options)
        # The location is still usable: a clean create succeeds.
        ds = await alance.write_dataset(rows(0, 10), uri, storage_options=options)
        assert ds.version == 1 and await ds.count_rows() == 10


async def test_lost_manifest_response_never_corrupts(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 2_000), uri, storage_options=options)
        before = await state_of(uri, options)
        plan = FaultPlan(fail_ops={"put_create"}, fail_calls={0}, fail_after=True)
        error = await _write(uri, options, rows(10_000, 1_000), "append", plan)
        after = await state_of(uri, options)
        if after.version == before.version:
            assert error is not None
            await assert_unchanged(before, uri, options)
        else:
            # The commit happened: every file it references must exist and read back.
            assert after.version == (before.version or 0) + 1
            assert after.referenced <= after.data_files, "committed manifest lost its files"
            assert after.table is not None and after.table.num_rows == 3_000


async def test_lost_manifest_response_over_http_never_duplicates(moto_target: S3Target) -> None:
    """A real connection reset after the manifest PUT reached moto (proxy on 127.0.0.1)."""
    from benchmarks.latency_proxy import LatencyProxy

    uri, options = moto_target.uri("ds.lance"), moto_target.storage_options
    async with asyncio.timeout(TIMEOUT):
        await alance.write_dataset(rows(0, 100), uri, storage_options=options)
        dropped: list[bytes] = []

        def first_manifest_put(chunk: bytes) -> bool:
            line = chunk.split(b"\r\n", 1)[0]
            if dropped or not (line.startswith(b"PUT ") and b".manifest" in line):
                return False
            dropped.append(line)
            return True

        host, port = moto_target.endpoint.removeprefix("http://").rsplit(":", 1)
        proxy = LatencyProxy((host, int(port)), 0.0, drop_response=first_manifest_put)
        await proxy.start()
        try:
            via_proxy = {**options, "aws_endpoint": f"http://127.0.0.1:{proxy.port}"}
            error = await _write(uri, via_proxy, rows(1_000, 10), "append", FaultPlan())
        finally:
            await proxy.stop()
        assert dropped and proxy.stats.dropped == 1
        after = await state_of(uri, options)
        assert after.table is not None
        if error is None:
            assert after.version == 2
            assert after.table.equals(pa.concat_tables([rows(0, 100), rows(1_000, 10)]))
        else:
            assert after.version in (1, 2)  # unknown outcome, but never a duplicate
            assert after.table.num_rows in (100, 110)
            assert after.referenced <= after.data_files
        ids = after.table.column("id").to_numpy()
        assert len(np.unique(ids)) == len(ids), "the append was committed twice"


# -- delays and concurrency ---------------------------------------------------------------------
async def test_delayed_calls_stay_correct_and_bounded(where: tuple[str, dict[str, Any]]) -> None:
    uri, options = where
    async with asyncio.timeout(TIMEOUT):
        expected = rows(0, 12_000)
        plan = FaultPlan(delay=0.05)
        ds = await alance.write_dataset(expected, uri,
                                        storage_options=with_faults(options, plan,
                                                                    max_concurrency=4),
                                        max_rows_per_file=2_000, max_rows_per_group=500)
        assert (await ds.to_table()).equals(expected)
        assert plan.stats.max_in_flight <= 4, plan.stats
        plan = FaultPlan(delay=0.05)
        ds = await alance.open_dataset(
            uri, storage_options=with_faults(options, plan, max_concurrency=4))
        idx = np.random.default_rng(3).choice(12_000, 200, replace=False)
        assert (await ds.take(idx)).equals(expected.take(idx))
        assert await ds.count_rows("x < 100") == 200
        assert (await ds.to_table(columns=["id"])).column("id").equals(expected.column("id"))
        assert plan.stats.delayed == plan.stats.total_calls > 0
        assert plan.stats.max_in_flight <= 4, plan.stats
        # Six files to read: the bound is used, not just respected.
        assert plan.stats.max_in_flight >= 2, plan.stats


async def test_each_store_keeps_its_own_concurrency_bound(moto_target: S3Target) -> None:
    uri, options = moto_target.uri("ds.lance"), moto_target.storage_options
    async with asyncio.timeout(TIMEOUT):
        expected = rows(0, 12_000)
        await alance.write_dataset(expected, uri, storage_options=options,  # default bound
                                   max_rows_per_file=2_000, max_rows_per_group=500)
        plan = FaultPlan(delay=0.05)
        ds = await alance.open_dataset(
            uri, storage_options=with_faults(options, plan, max_concurrency=2))
        assert (await ds.to_table()).equals(expected)
        assert plan.stats.max_in_flight <= 2, plan.stats


async def test_http_requests_in_flight_stay_within_max_concurrency(
        moto_target: S3Target) -> None:
    from benchmarks.latency_proxy import LatencyProxy

    uri, options = moto_target.uri("ds.lance"), moto_target.storage_options
    async with asyncio.timeout(TIMEOUT):
        expected = rows(0, 200_000)
        await alance.write_dataset(expected, uri, storage_options={**options,
                                                                   "max_concurrency": 2},
                                   max_rows_per_file=50_000)
        host, port = moto_target.endpoint.removeprefix("http://").rsplit(":", 1)
        proxy = LatencyProxy((host, int(port)), 0.02)
        await proxy.start()
        try:
            via_proxy = {**options, "aws_endpoint": f"http://127.0.0.1:{proxy.port}",
                         "max_concurrency": 2}
            ds = await alance.open_dataset(uri, storage_options=via_proxy)
            idx = np.random.default_rng(5).choice(expected.num_rows, 500, replace=False)
            assert (await ds.take(idx)).equals(expected.take(idx))
            assert (await ds.to_table()).equals(expected)
        finally:
            await proxy.stop()
        assert proxy.stats.requests > 4
        assert proxy.stats.max_waiting <= 2, proxy.stats


# -- bad configuration --------------------------------------------------------------------------
async def _typed_error_within(seconds: float, coro: Any) -> AlanceError:
    start = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            await coro
    except AlanceError as exc:
        elapsed = time.monotonic() - start
        assert elapsed < seconds
        return exc
    raise AssertionError("expected a typed alance error")


async def test_missing_bucket_is_not_found_quickly(moto_target: S3Target) -> None:
    options = moto_target.storage_options
    uri = moto_target.with_bucket(f"no-such-bucket-{uuid.uuid4().hex[:8]}").uri("ds.lance")
    exc = await _typed_error_within(5, alance.open_dataset(uri, storage_options=options))
    assert isinstance(exc, NotFoundError), exc
    exc = await _typed_error_within(5, alance.write_dataset(rows(0, 10), uri,
                                                            storage_options=options))
    assert isinstance(exc, NotFoundError), exc


async def test_unreachable_endpoint_fails_typed_within_seconds(moto_target: S3Target) -> None:
    options = {**moto_target.storage_options, "aws_endpoint": "http://127.0.0.1:1"}
    uri = moto_target.uri("unreachable/ds.lance")
    exc = await _typed_error_within(15, alance.open_dataset(uri, storage_options=options))
    assert isinstance(exc, StoreError), exc
    exc = await _typed_error_within(15, alance.write_dataset(rows(0, 10), uri,
                                                             storage_options=options))
    assert isinstance(exc, StoreError), exc


async def test_unsigned_requests_are_denied(moto_target: S3Target) -> None:
    uri = moto_target.uri("ds.lance")
    await alance.write_dataset(rows(0, 10), uri, storage_options=moto_target.storage_options)
    anonymous = {"aws_endpoint": moto_target.endpoint, "aws_region": "us-east-1",
                 "allow_http": "true", "skip_signature": "true"}
    exc = await _typed_error_within(10, alance.open_dataset(uri, storage_options=anonymous))
    assert isinstance(exc, PermissionDeniedError), exc
    assert isinstance(exc, PermissionError)


async def test_wrong_credentials_are_denied_quickly(seaweed_target: S3Target) -> None:
    uri = seaweed_target.uri("ds.lance")
    await alance.write_dataset(rows(0, 10), uri, storage_options=seaweed_target.storage_options)
    for bad in ({"aws_secret_access_key": "not-the-secret"},
                {"aws_access_key_id": "nobody", "aws_secret_access_key": "nothing"}):
        options = {**seaweed_target.storage_options, **bad}
        exc = await _typed_error_within(10, alance.open_dataset(uri, storage_options=options))
        assert isinstance(exc, PermissionDeniedError), exc
        exc = await _typed_error_within(10, alance.write_dataset(
            rows(10, 10), uri, mode="append", storage_options=options))
        assert isinstance(exc, PermissionDeniedError), exc
    # Nothing was written by the refused append.
    ds = await alance.open_dataset(uri, storage_options=seaweed_target.storage_options)
    assert ds.version == 1 and await ds.count_rows() == 10


async def test_unknown_storage_option_is_refused_for_s3(moto_target: S3Target) -> None:
    uri = moto_target.uri("x/ds.lance")
    for bad in ({"aws_endpoitn": moto_target.endpoint}, {"max_concurrency": "many"},
                {"max_concurrency": -1}, {"max_retries": -1}, {"coalesce_bytes": "x"}):
        with pytest.raises(InvalidInputError):
            await alance.open_dataset(uri, storage_options={**moto_target.storage_options, **bad})


async def test_unknown_storage_option_is_refused_for_local(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds.lance")
    await alance.write_dataset(rows(0, 10), uri)
    with pytest.raises(InvalidInputError):
        await alance.open_dataset(uri, storage_options={"aws_endpoitn": "http://x"})


def test_zero_max_concurrency_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError):
        open_store(str(tmp_path / "ds.lance"), {"max_concurrency": 0})


async def test_retries_and_rebases_are_logged(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    import logging
    uri = str(tmp_path / "ds")
    caplog.set_level(logging.INFO, logger="alance")
    await alance.write_dataset(rows(0, 100), uri)
    plan = FaultPlan(fail_rate=0.0, fail_ops={"get_ranges"}, fail_calls={0})
    ds = await alance.open_dataset(uri, storage_options=with_faults({}, plan, max_retries=3))
    assert (await ds.to_table()).num_rows == 100
    assert any("transient failure (attempt 1 of 4)" in r.getMessage() for r in caplog.records)
    stale = await alance.open_dataset(uri)
    await alance.write_dataset(rows(100, 10), uri, mode="append")
    await stale.delete("id < 5")  # planned on version 1, rebased over the append
    assert any("rebasing a delete from version 1 onto version 2" in r.getMessage()
               for r in caplog.records)
