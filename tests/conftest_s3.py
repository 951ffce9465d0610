"""Session-scoped S3 servers and per-test S3 targets (loaded from ``tests/conftest.py``).

Fixtures:

* ``moto_server`` / ``seaweed_server`` — started on first use, once per session, stopped at the
  end (nothing starts when no selected test needs it);
* ``moto_target`` / ``seaweed_target`` / ``external_target`` — an :class:`S3Target` for one test:
  a fresh bucket on moto; on SeaweedFS and external endpoints, the session bucket with a fresh
  key prefix (SeaweedFS gives every bucket its own volume and has few of them);
* ``s3_target`` — parametrised over ``S3_BACKENDS``; ``external`` is included only when
  ``ALANCE_TEST_S3_ENDPOINT`` is set (an opt-in backend).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest

from tests.s3_servers import (
    MotoServer,
    S3Target,
    SeaweedServer,
    delete_prefix,
    external_target,
)

#: Every S3 backend the suite runs: "external" only when configured (it is then a real run,
#: not a skip).
S3_BACKENDS = ["moto", "seaweedfs", *(["external"] if os.environ.get("ALANCE_TEST_S3_ENDPOINT")
                                      else [])]
#: The bucket created once in SeaweedFS for the whole session.
SEAWEED_BUCKET = "alance-test"


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    """moto's S3 on a free loopback port, for the whole session."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def seaweed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedServer]:
    """``weed mini`` on free loopback ports with the bucket ``alance-test``, for the session."""
    server = SeaweedServer(tmp_path_factory.mktemp("seaweedfs")).start((SEAWEED_BUCKET,))
    try:
        yield server
    finally:
        server.stop()


def _test_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def moto_target(moto_server: MotoServer) -> S3Target:
    """A fresh moto bucket (also under a fresh key prefix, like the others)."""
    return moto_server.target().with_prefix(_test_prefix())


@pytest.fixture
def seaweed_target(seaweed_server: SeaweedServer) -> S3Target:
    """The SeaweedFS session bucket under a fresh key prefix."""
    return seaweed_server.target(SEAWEED_BUCKET).with_prefix(_test_prefix())


@pytest.fixture
def external_s3_target() -> Iterator[S3Target]:
    """The external endpoint's bucket under a fresh key prefix (skipped when not configured)."""
    target = external_target()
    if target is None:
        pytest.skip("external S3 endpoint not configured (set ALANCE_TEST_S3_ENDPOINT)")
    client = target.client()
    try:
        client.head_bucket(Bucket=target.bucket)
    except Exception:
        client.create_bucket(Bucket=target.bucket)
    target = target.with_prefix(_test_prefix())
    yield target
    with contextlib.suppress(Exception):  # clean-up is best effort on somebody else's endpoint
        delete_prefix(target, target.key_prefix + "/")


def s3_target_by_name(request: pytest.FixtureRequest, name: str) -> S3Target:
    """The per-test target of backend ``name`` (starting its server lazily)."""
    fixture = {"moto": "moto_target", "seaweedfs": "seaweed_target",
               "external": "external_s3_target"}[name]
    target: S3Target = request.getfixturevalue(fixture)
    return target


@pytest.fixture(params=S3_BACKENDS)
def s3_target(request: pytest.FixtureRequest) -> S3Target:
    """One S3 target per backend in ``S3_BACKENDS``."""
    return s3_target_by_name(request, request.param)
