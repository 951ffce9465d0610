"""DynamoDB on moto for the commit tests: tables, targets, a fault proxy and a writer process.

* :class:`DdbTarget` — an S3 target (moto bucket + key prefix) plus a DynamoDB table on the same
  moto server; ``uri(name)`` gives ``s3+ddb://bucket/prefix/name?ddbTableName=T`` and
  ``storage_options`` work for alance and pylance alike.
* :func:`create_table` — a table in Lance's layout (or another layout, for negative tests).
* :class:`FaultProxy` — a loopback HTTP proxy in a background thread that answers a fraction of
  requests with an error itself (the server never sees them) or drops the response of a fraction
  (the server applied the request, the client sees a reset connection).
* ``python -m tests.dynamodb_rig '<json>'`` — a writer/reader process for crash tests (see
  :func:`main`): it can SIGKILL itself right after a chosen commit step.

The ``ddb_target`` fixture is defined here; test modules import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.s3_servers import ACCESS_KEY, REGION, SECRET_KEY, S3Target

ROOT = Path(__file__).resolve().parent.parent
LANCE_KEYS = ({"AttributeName": "base_uri", "KeyType": "HASH"},
              {"AttributeName": "version", "KeyType": "RANGE"})
LANCE_ATTRS = ({"AttributeName": "base_uri", "AttributeType": "S"},
               {"AttributeName": "version", "AttributeType": "N"})


#: Set to run the DynamoDB tests against another endpoint (LocalStack, AWS) instead of moto;
#: S3 then comes from the ``ALANCE_TEST_S3_*`` variables (see ``localstack/README.md``).
EXTERNAL_DDB_ENV = "ALANCE_TEST_DYNAMODB_ENDPOINT"


def ddb_client(endpoint: str) -> Any:
    """A boto3 DynamoDB client (setup and inspection, not the code under test)."""
    import boto3

    external = os.environ.get(EXTERNAL_DDB_ENV)
    if external and endpoint == external:
        return boto3.client("dynamodb", endpoint_url=endpoint)  # credentials from the env
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name=REGION,
                        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)


def create_table(endpoint: str, name: str | None = None, *,
                 keys: tuple[dict[str, str], ...] = LANCE_KEYS,
                 attrs: tuple[dict[str, str], ...] = LANCE_ATTRS) -> str:
    """Create a DynamoDB table (Lance's key layout unless told otherwise); returns its name."""
    name = name or f"commits-{uuid.uuid4().hex[:12]}"
    client = ddb_client(endpoint)
    client.create_table(TableName=name, KeySchema=list(keys), AttributeDefinitions=list(attrs),
                        BillingMode="PAY_PER_REQUEST")
    client.get_waiter("table_exists").wait(TableName=name,
                                           WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    return name


@dataclass(frozen=True)
class DdbTarget:
    """An S3 prefix and a DynamoDB table on one moto server."""

    s3: S3Target
    table: str
    endpoint: str
    extra_options: dict[str, str] = field(default_factory=dict)

    @property
    def storage_options(self) -> dict[str, str]:
        """Options for alance and pylance: S3 settings plus ``dynamodb_endpoint``."""
        return {**self.s3.storage_options, "dynamodb_endpoint": self.endpoint,
                **self.extra_options}

    def uri(self, name: str) -> str:
        """``s3+ddb://bucket/prefix/name?ddbTableName=T``."""
        return f"s3+ddb://{self.s3.uri(name).removeprefix('s3://')}?ddbTableName={self.table}"

    def s3_uri(self, name: str) -> str:
        """The same dataset as a plain ``s3://`` URI (no DynamoDB)."""
        return self.s3.uri(name)

    def base_uri(self, name: str) -> str:
        """The ``base_uri`` key of the dataset in the table."""
        return self.s3.key(name)

    def via(self, endpoint: str) -> DdbTarget:
        """The same target reached through another endpoint (e.g. a proxy)."""
        return DdbTarget(self.s3, self.table, endpoint,
                         {"aws_endpoint": endpoint, "allow_http": "true"})

    def items(self, name: str) -> list[dict[str, Any]]:
        """The table's items of one dataset, by version (consistent query)."""
        client = ddb_client(self.endpoint)
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {}
        while True:
            got = client.query(TableName=self.table, KeyConditionExpression="base_uri = :b",
                               ExpressionAttributeValues={":b": {"S": self.base_uri(name)}},
                               ConsistentRead=True, **kwargs)
            out += got["Items"]
            if "LastEvaluatedKey" not in got:
                return out
            kwargs = {"ExclusiveStartKey": got["LastEvaluatedKey"]}

    def keys(self, name: str) -> list[str]:
        """Object keys under the dataset (relative to it)."""
        client = self.s3.client()
        prefix = self.base_uri(name) + "/"
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=self.s3.bucket, Prefix=prefix):
            keys += [o["Key"][len(prefix):] for o in page.get("Contents", [])]
        return keys


@pytest.fixture
def ddb_target(request: pytest.FixtureRequest) -> Iterator[DdbTarget]:
    """A fresh moto bucket and a fresh DynamoDB table in Lance's layout on the same server.

    With ``ALANCE_TEST_DYNAMODB_ENDPOINT`` set: a fresh table there (deleted afterwards) and
    the external S3 target of ``ALANCE_TEST_S3_*``.
    """
    external = os.environ.get(EXTERNAL_DDB_ENV)
    if not external:
        s3: S3Target = request.getfixturevalue("moto_target")
        yield DdbTarget(s3, create_table(s3.endpoint), s3.endpoint)
        return
    s3 = request.getfixturevalue("external_s3_target")
    table = create_table(external)
    try:
        yield DdbTarget(s3, table, external)
    finally:
        with contextlib.suppress(Exception):
            ddb_client(external).delete_table(TableName=table)


def rows(start: int, n: int) -> pa.Table:
    """``n`` rows with ids ``start ..``; the other columns derive from the id."""
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "x": ids * 0.5, "s": pa.array([f"r{i}" for i in ids])})


def sorted_ids(table: pa.Table) -> list[int]:
    """The ``id`` column, sorted."""
    return sorted(table.column("id").to_pylist())


# -- fault proxy ---------------------------------------------------------------------------------
_DDB_ERRORS = [
    (500, "com.amazonaws.dynamodb.v20120810#InternalServerError"),
    (400, "com.amazonaws.dynamodb.v20120810#ThrottlingException"),
    (400, "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"),
]


def _canned(first: bytes, rng: random.Random) -> bytes:
    if b"x-amz-target: dynamodb" in first.lower():
        status, kind = rng.choice(_DDB_ERRORS)
        body = json.dumps({"__type": kind, "message": "injected by FaultProxy"}).encode()
        ctype = b"application/x-amz-json-1.0"
    else:
        status = rng.choice([500, 503])
        code = b"SlowDown" if status == 503 else b"InternalError"
        body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code +
                b"</Code><Message>injected by FaultProxy</Message></Error>")
        ctype = b"application/xml"
    reason = {400: b"Bad Request", 500: b"Internal Server Error", 503: b"Slow Down"}[status]
    return (b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (status, reason, ctype, len(body))) + body


@dataclass
class FaultCounts:
    """What a :class:`FaultProxy` did."""

    requests: int = 0
    errors: int = 0
    dropped: int = 0


class FaultProxy:
    """A loopback HTTP/1.1 proxy that fails some requests (see the module doc).

    ``choose(first_chunk) -> None | "error" | "drop"`` decides per request (the first chunk
    holds the request line and headers). Runs its own event loop in a daemon thread, so it
    serves while the test process waits on subprocesses. Use as a context manager.
    """

    def __init__(self, upstream: str, choose: Callable[[bytes], str | None],
                 seed: int = 0) -> None:
        host, port = upstream.removeprefix("http://").rsplit(":", 1)
        self.upstream = (host, int(port))
        self.choose = choose
        self.counts = FaultCounts()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()  # strong references while they run
        self.endpoint = ""

    def __enter__(self) -> FaultProxy:
        self._thread.start()

        async def start() -> asyncio.Server:
            return await asyncio.start_server(self._handle, "127.0.0.1", 0)

        self._server = asyncio.run_coroutine_threadsafe(start(), self._loop).result(10)
        self.endpoint = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._handlers.add(me)
            me.add_done_callback(self._handlers.discard)
        try:
            ur, uw = await asyncio.open_connection(*self.upstream)
        except OSError:
            cw.close()
            return
        state = {"new": True, "drop": False}

        async def client_to_server() -> None:
            while data := await cr.read(256 * 1024):
                if state["new"]:
                    state["new"] = False
                    verdict = self.choose(data)
                    with self._lock:
                        self.counts.requests += 1
                        if verdict == "error":
                            self.counts.errors += 1
                            reply = _canned(data, self._rng)
                    if verdict == "error":
                        cw.write(reply)
                        with contextlib.suppress(Exception):
                            await cw.drain()
                        cw.transport.abort()
                        uw.transport.abort()
                        return
                    state["drop"] = verdict == "drop"
                uw.write(data)
                await uw.drain()

        async def server_to_client() -> None:
            while data := await ur.read(256 * 1024):
                if state["drop"]:
                    with self._lock:
                        self.counts.dropped += 1
                    cw.transport.abort()
                    uw.transport.abort()
                    return
                state["new"] = True
                cw.write(data)
                await cw.drain()
            cw.close()

        tasks = [asyncio.ensure_future(client_to_server()),
                 asyncio.ensure_future(server_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            for w in (cw, uw):
                with contextlib.suppress(Exception):
                    w.close()


def random_faults(error_rate: float, drop_rate: float, seed: int = 0,
                  only: bytes | None = None) -> Callable[[bytes], str | None]:
    """A ``choose`` for :class:`FaultProxy`: errors and drops at the given rates.

    ``only`` (a lower-case byte string) limits faults to requests whose head contains it.
    """
    rng = random.Random(seed)
    lock = threading.Lock()

    def choose(first: bytes) -> str | None:
        if only is not None and only not in first.lower():
            return None
        with lock:
            draw = rng.random()
        if draw < error_rate:
            return "error"
        if draw < error_rate + drop_rate:
            return "drop"
        return None

    return choose


def item_versions(items: list[dict[str, Any]]) -> list[int]:
    """Versions of DynamoDB items, sorted."""
    return sorted(int(i["version"]["N"]) for i in items)


# -- writer / reader process ---------------------------------------------------------------------
def run_child(spec: dict[str, Any], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tests.dynamodb_rig <spec>`` and wait for it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tests.dynamodb_rig", json.dumps(spec)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def start_child(spec: dict[str, Any]) -> subprocess.Popen[str]:
    """Start ``python -m tests.dynamodb_rig <spec>`` without waiting."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "tests.dynamodb_rig", json.dumps(spec)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _killer(step: str | None, version: int | None) -> Callable[[str, int], None] | None:
    if step is None:
        return None

    def on_step(done: str, at: int) -> None:
        if done == step and (version is None or at == version):
            os.kill(os.getpid(), signal.SIGKILL)

    return on_step


async def _child(spec: dict[str, Any]) -> None:
    import alance
    from alance.commit.dynamodb import DynamoDBCommitHandler

    uri, options = spec["uri"], spec["options"]
    handler = DynamoDBCommitHandler.from_uri(
        uri, options, on_step=_killer(spec.get("crash_after"), spec.get("crash_version")))
    if spec["mode"] == "open":
        ds = await alance.open_dataset(uri, storage_options=options, commit_handler=handler)
        print(json.dumps({"version": ds.version, "rows": await ds.count_rows()}), flush=True)
        return
    for start in spec["starts"]:
        ds = await alance.write_dataset(rows(start, spec["count"]), uri, mode="append",
                                        storage_options=options, commit_handler=handler,
                                        max_retries=spec.get("max_retries", 20))
        print(json.dumps({"start": start, "version": ds.version}), flush=True)


def main() -> None:
    """``python -m tests.dynamodb_rig '<json>'``.

    Spec keys: ``uri``, ``options``, ``mode`` (``"append"`` or ``"open"``), for appends
    ``starts`` (first id of each append, one commit each) and ``count`` (rows per append);
    optional ``crash_after`` (a commit step) and ``crash_version``: SIGKILL this process right
    after that step (of that version). Prints one JSON line per commit (or for the open).
    """
    asyncio.run(_child(json.loads(sys.argv[1])))


if __name__ == "__main__":
    main()
