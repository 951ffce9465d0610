"""What alance logs under ``alance.*``, on moto over HTTP: store requests at DEBUG, retries and
backoff at INFO, commit conflicts and rebases at INFO, slow operations at WARNING."""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pytest

import alance
from alance.commit import aws
from alance.errors import CommitConflictError, InvalidInputError
from alance.io.deadline import DEFAULT_SLOW_WARNING
from alance.io.uri import open_store
from tests.dynamodb_rig import DdbTarget, FaultProxy, ddb_target
from tests.s3_servers import S3Target

__all__ = ["ddb_target"]  # the fixture, imported for pytest

TABLE = pa.table({"id": list(range(10)), "s": [f"r{i}" for i in range(10)]})


def _messages(caplog: pytest.LogCaptureFixture, level: int, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == level and r.name == logger]


async def test_store_requests_at_debug(moto_target: S3Target,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="alance")
    uri, opts = moto_target.uri("ds"), moto_target.storage_options
    ds = await alance.write_dataset(TABLE, uri, storage_options=opts)
    assert (await ds.to_table()).equals(TABLE)
    debug = _messages(caplog, logging.DEBUG, "alance.io.store")
    assert any("create " in m and "_versions/" in m for m in debug), debug  # the manifest
    assert any("range(s)" in m and ".lance in" in m for m in debug), debug  # data reads
    assert all(uri.split("/ds")[0] in m and " ms, " in m and "attempt(s)" in m
               for m in debug)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="alance")  # quiet at INFO when nothing goes wrong
    await (await alance.open_dataset(uri, storage_options=opts)).to_table()
    assert not [r for r in caplog.records if r.name.startswith("alance")]


async def test_retries_and_backoff_at_info(moto_target: S3Target,
                                           caplog: pytest.LogCaptureFixture) -> None:
    uri = moto_target.uri("ds")
    await alance.write_dataset(TABLE, uri, storage_options=moto_target.storage_options)
    failed: list[bytes] = []
    lock = threading.Lock()

    # obstore retries a failed request twice itself, quickly and silently; the third failure
    # in a row reaches alance's retry loop, which logs it and backs off.
    def first_gets_fail(first: bytes) -> str | None:
        with lock:
            if first.startswith(b"GET ") and len(failed) < 3:
                failed.append(first)
                return "error"
        return None

    caplog.set_level(logging.INFO, logger="alance")
    with FaultProxy(moto_target.endpoint, first_gets_fail) as proxy:
        opts = {**moto_target.storage_options, "aws_endpoint": proxy.endpoint}
        ds = await alance.open_dataset(uri, storage_options=opts)
        assert (await ds.to_table()).equals(TABLE)
    assert len(failed) == 3
    info = _messages(caplog, logging.INFO, "alance.io.store")
    assert [m for m in info if "transient failure (attempt 1 of 4)" in m
            and "retrying in" in m and "injected by FaultProxy" in m], info


async def test_rebase_and_conflicts_at_info(moto_target: S3Target,
                                            caplog: pytest.LogCaptureFixture) -> None:
    uri, opts = moto_target.uri("ds"), moto_target.storage_options
    base = await alance.write_dataset(TABLE, uri, storage_options=opts)
    caplog.set_level(logging.INFO, logger="alance")
    await alance.write_dataset(TABLE, base, mode="append")  # v2
    rebased = (await base.delete("id < 2")).dataset  # planned on v1, rebased over the append
    assert rebased.version == 3 and await rebased.count_rows() == 18  # the append is kept
    info = _messages(caplog, logging.INFO, "alance.dataset.commit.loop")
    assert any("rebasing a delete from version 1 onto version 2" in m for m in info), info

    # Writers racing for the same version: the losers log the conflict, catch up and land.
    caplog.clear()
    latest = await alance.open_dataset(uri, storage_options=opts)
    done = await _gather_appends(latest, 4)
    assert sorted(d.version for d in done) == [4, 5, 6, 7]
    assert await done[0].checkout_latest() and await (
        await done[0].checkout_latest()).count_rows() == 18 + 4 * 10
    info = _messages(caplog, logging.INFO, "alance.dataset.commit.loop")
    # Each of the three losers rebases onto the newest version, and says so: after losing
    # the race for a version (logged as a conflict, as usually happens), or because it saw
    # the newer version before trying (a writer whose data write finished last).
    assert sum("rebasing a" in m for m in info) >= 3, info

    # A conflict that cannot be rebased: logged, then raised.
    caplog.clear()
    await alance.write_dataset(TABLE, uri, mode="overwrite", storage_options=opts)
    with pytest.raises(CommitConflictError):
        await latest.delete("id > 7")
    info = _messages(caplog, logging.INFO, "alance.dataset.commit.loop")
    assert any("a delete read at version 3 conflicts with version 8; not rebased" in m
               for m in info), info


async def _gather_appends(ds: alance.LanceDataset, n: int) -> list[alance.LanceDataset]:
    import asyncio

    return list(await asyncio.gather(*(ds.insert(TABLE) for _ in range(n))))


async def test_slow_operations_at_warning(moto_target: S3Target,
                                          caplog: pytest.LogCaptureFixture) -> None:
    uri = moto_target.uri("ds")
    opts = {**moto_target.storage_options, "slow_warning": "0.000001"}  # everything is slow
    caplog.set_level(logging.WARNING, logger="alance")
    ds = await alance.write_dataset(TABLE, uri, storage_options=opts)
    await ds.to_table()
    warned = _messages(caplog, logging.WARNING, "alance.io.store")
    assert any("slow put " in m and "slow_warning is 1e-06 s" in m for m in warned), warned
    caplog.clear()
    # The default threshold: nothing on moto is that slow.
    await (await alance.open_dataset(uri, storage_options=moto_target.storage_options)
           ).to_table()
    assert not _messages(caplog, logging.WARNING, "alance.io.store")
    assert open_store(uri, moto_target.storage_options).slow_warning == DEFAULT_SLOW_WARNING
    assert open_store(uri, {**moto_target.storage_options,
                            "slow_warning": "2m"}).slow_warning == 120.0
    with pytest.raises(InvalidInputError, match="slow_warning"):
        open_store(uri, {**moto_target.storage_options, "slow_warning": "soon"})
    with pytest.raises(InvalidInputError, match="slow_warning"):
        open_store("/tmp/x", {"slow_warning": "0"})


async def test_dynamodb_requests_and_retries(ddb_target: DdbTarget,
                                             caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="alance.commit")
    uri = ddb_target.uri("ds")
    await alance.write_dataset(TABLE, uri, storage_options=ddb_target.storage_options)
    debug = _messages(caplog, logging.DEBUG, "alance.commit.dynamodb")
    assert any(m.startswith("DynamoDB put_item on ") for m in debug), debug
    caplog.clear()
    failed: list[bytes] = []
    lock = threading.Lock()

    # botocore retries each call SDK_MAX_ATTEMPTS times itself (its "max_attempts" counts
    # retries); the failure after those reaches alance's own retry loop.
    def first_ddb_calls_fail(first: bytes) -> str | None:
        with lock:
            if (b"x-amz-target: dynamodb" in first.lower()
                    and len(failed) < aws.SDK_MAX_ATTEMPTS + 1):
                failed.append(first)
                return "error"
        return None

    with FaultProxy(ddb_target.endpoint, first_ddb_calls_fail) as proxy:
        opts = {**ddb_target.storage_options, "dynamodb_endpoint": proxy.endpoint}
        ds = await alance.open_dataset(uri, storage_options=opts)
        assert ds.version == 1
    info = _messages(caplog, logging.INFO, "alance.commit.dynamodb")
    assert any("transient failure (attempt 1 of" in m and "retrying in" in m
               for m in info), info
