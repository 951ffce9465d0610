"""Deadlines: a hung or failing store gives up within the operation's deadline, with a typed
error, and a write that runs out of time commits nothing.

The hung endpoint is a real TCP server on 127.0.0.1 that accepts connections and never
answers. Time bounds are loose (to catch hangs, not to measure).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import DeadlineExceededError, InvalidInputError, StoreError
from alance.io.uri import open_store
from alance.testing.faults import FaultPlan

TABLE = pa.table({"id": list(range(100))})
HANG_BOUND = 30.0  # seconds: far above the 1-2 s deadlines used, far below the 240 s of old


@pytest.fixture
def hung_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            held.append(conn)  # keep it open, read nothing, answer nothing

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        server.close()


def _options(endpoint: str, **more: str) -> dict[str, str]:
    return {"aws_endpoint": endpoint, "aws_access_key_id": "k", "aws_secret_access_key": "s",
            "aws_region": "us-east-1", "allow_http": "true", **more}


async def test_hung_endpoint_storage_option(hung_endpoint: str) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="deadline of 1 s") as info:
        await alance.open_dataset("s3://bucket/ds",
                                  storage_options=_options(hung_endpoint, deadline="1s"))
    assert isinstance(info.value, StoreError) and isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < HANG_BOUND


async def test_hung_endpoint_call_deadline(hung_endpoint: str) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError), alance.deadline(1.5):
        await alance.write_dataset(TABLE, "s3://bucket/ds",
                                   storage_options=_options(hung_endpoint))
    assert time.monotonic() - started < HANG_BOUND


def test_hung_endpoint_blocking_facade(hung_endpoint: str) -> None:
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError), alance.deadline(1):
        al.write_dataset(TABLE, "s3://bucket/ds", storage_options=_options(hung_endpoint))
    assert time.monotonic() - started < HANG_BOUND


async def test_slow_append_commits_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    await alance.write_dataset(TABLE, uri)
    slow = FaultPlan(delay=30.0, delay_ops={"put", "put_create", "upload_write",
                                            "upload_complete"})
    with pytest.raises(DeadlineExceededError):
        await alance.write_dataset(TABLE, uri, mode="append",
                                   storage_options={"wrap_backend": slow, "deadline": 1})
    assert slow.stats.delayed > 0
    ds = await alance.open_dataset(uri)
    assert ds.version == 1 and await ds.count_rows() == 100


async def test_retries_stop_at_the_deadline(tmp_path: Path) -> None:
    uri = str(tmp_path / "ds")
    await alance.write_dataset(TABLE, uri)
    # Every read fails transiently and would be retried 10,000 times; the deadline ends it,
    # naming the last failure.
    failing = FaultPlan(fail_rate=1.0, fail_ops={"get", "get_ranges", "head", "list"})
    with pytest.raises(DeadlineExceededError, match="injected fault"):
        await alance.open_dataset(uri, storage_options={
            "wrap_backend": failing, "max_retries": 10_000, "deadline": 1})
    assert failing.stats.failures.total() > 3  # it did retry, inside the deadline


async def test_nested_deadlines_keep_the_earlier_end(hung_endpoint: str) -> None:
    started = time.monotonic()
    with alance.deadline(600), alance.deadline(1) as end:
        assert end < started + 2
        with alance.deadline(600) as inner:
            assert inner == end
            with pytest.raises(DeadlineExceededError):
                await alance.open_dataset("s3://bucket/ds",
                                          storage_options=_options(hung_endpoint))
    assert time.monotonic() - started < HANG_BOUND


def test_deadline_values() -> None:
    assert open_store("memory://x", {"deadline": "500ms"}).deadline == 0.5
    assert open_store("memory://x", {"deadline": "2m"}).deadline == 120.0
    assert open_store("memory://x").deadline == 60.0
    for bad in ("soon", "0", -1):
        with pytest.raises(InvalidInputError):
            open_store("memory://x", {"deadline": bad})
    with pytest.raises(InvalidInputError), alance.deadline(0):
        pass
