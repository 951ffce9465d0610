"""One conformance suite for every commit handler, and handler selection.

Each setup pairs a handler with a store: conditional put on local disk, memory, moto S3 and
SeaweedFS S3; DynamoDB (moto) over moto S3; the generic external-store protocol over an
in-memory store; and the lock handler with a file lock (on moto S3, whose plain puts give no
protection of their own) and with an asyncio lock. Every setup must give:

* racing commits of one version: exactly one winner, the others ``CommitConflictError``, and
  the winner's bytes are what that version resolves to;
* ``list_versions``/``latest``/``resolve`` agreeing, in both manifest naming schemes, with
  typed errors for missing versions and datasets;
* concurrent appends through the whole stack: every version present, no row lost.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import alance
from alance.commit import (
    AsyncioCommitLock,
    CommitHandler,
    ConditionalPutCommitHandler,
    ExternalManifestCommitHandler,
    FileCommitLock,
    LockCommitHandler,
    MemoryManifestStore,
    commit_handler_for,
    register_commit_handler,
)
from alance.commit.dynamodb import DynamoDBCommitHandler
from alance.commit.handler import manifest_path
from alance.errors import (
    CommitConflictError,
    InvalidInputError,
)
from alance.format.manifest import ManifestNamingScheme
from alance.io.uri import open_store
from alance.testing.commit_handlers import CommitHandlerConformance, HandlerSetup, race
from tests.dynamodb_rig import DdbTarget, create_table, rows

TIMEOUT = 60
RACERS = 8


Setup = HandlerSetup


SETUPS = ["put-local", "put-memory", "put-moto", "put-seaweedfs", "ddb-moto",
          "external-memory", "lock-file-moto", "lock-asyncio-local"]


@pytest.fixture(params=SETUPS)
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Setup:
    """Each of alance's handlers with a store it is meant for."""
    name = request.param
    local = str(tmp_path / "ds.lance")
    if name == "put-local":
        return Setup(name, local, {}, ConditionalPutCommitHandler)
    if name == "put-memory":
        return Setup(name, f"memory://{tmp_path.name}/ds", {}, ConditionalPutCommitHandler,
                     pylance_can_read=False)
    if name in ("put-moto", "put-seaweedfs"):
        s3 = request.getfixturevalue("moto_target" if name == "put-moto" else "seaweed_target")
        return Setup(name, s3.uri("ds"), s3.storage_options, ConditionalPutCommitHandler)
    if name == "ddb-moto":
        s3 = request.getfixturevalue("moto_target")
        target = DdbTarget(s3, create_table(s3.endpoint), s3.endpoint)
        return Setup(name, target.uri("ds"), target.storage_options,
                     lambda: DynamoDBCommitHandler.from_uri(target.uri("ds"),
                                                            target.storage_options))
    if name == "external-memory":
        external = MemoryManifestStore()  # shared by every handler of this setup
        return Setup(name, local, {}, lambda: ExternalManifestCommitHandler(external))
    if name == "lock-file-moto":
        s3 = request.getfixturevalue("moto_target")
        lock = FileCommitLock(tmp_path / "commit.lock")
        return Setup(name, s3.uri("ds"), s3.storage_options, lambda: LockCommitHandler(lock))
    assert name == "lock-asyncio-local"
    asyncio_lock = AsyncioCommitLock()
    return Setup(name, local, {}, lambda: LockCommitHandler(asyncio_lock))


class TestHandlers(CommitHandlerConformance):
    """alance's own handlers, through the shipped suite (:mod:`alance.testing.commit_handlers`)."""

    @pytest.fixture
    def handler_setup(self, setup: Setup) -> HandlerSetup:
        return setup


async def test_race_detector_catches_a_lock_that_excludes_nothing(tmp_path: Path) -> None:
    """Negative control: the race test above does detect a handler without exclusion."""

    @contextlib.asynccontextmanager
    async def no_lock() -> AsyncIterator[None]:
        yield

    setup = Setup("no-lock", str(tmp_path / "ds"), {}, lambda: LockCommitHandler(
        lambda version: no_lock()))
    winners, _ = await race(setup, 1, ManifestNamingScheme.V2)
    assert len(winners) > 1


async def test_lock_factory_may_report_a_conflict(tmp_path: Path) -> None:
    def refuse(version: int) -> Any:
        raise CommitConflictError(f"version {version} is taken (said the lock)")

    store = open_store(str(tmp_path / "ds"))
    with pytest.raises(CommitConflictError, match="said the lock"):
        await LockCommitHandler(refuse).commit(store, 1, b"x", ManifestNamingScheme.V2)
    assert not await store.exists(manifest_path(1, ManifestNamingScheme.V2))


async def test_blocking_lock_is_taken_off_the_event_loop(tmp_path: Path) -> None:
    import threading

    lock = threading.Lock()
    uri = str(tmp_path / "ds")
    ds = await alance.write_dataset(rows(0, 3), uri, commit_handler=LockCommitHandler(
        lambda version: lock))
    assert ds.version == 1 and not lock.locked()


# -- selection -----------------------------------------------------------------------------------
class CountingHandler(ConditionalPutCommitHandler):
    """A handler that counts its commits (for the dotted-name tests)."""

    commits = 0

    async def commit(self, *args: Any, **kwargs: Any) -> Any:
        type(self).commits += 1
        return await super().commit(*args, **kwargs)


COUNTING = CountingHandler()


def counting_factory(uri: str, options: Any) -> CommitHandler:
    """A factory ``(uri, storage_options) -> handler``."""
    assert isinstance(uri, str) and isinstance(options, dict)
    return COUNTING


def test_handler_chosen_by_scheme() -> None:
    assert type(commit_handler_for("/tmp/x")) is ConditionalPutCommitHandler
    assert type(commit_handler_for("memory://x/y")) is ConditionalPutCommitHandler
    assert type(commit_handler_for("s3://b/x")) is ConditionalPutCommitHandler
    ddb = commit_handler_for("s3+ddb://b/x?ddbTableName=T", {"dynamodb_endpoint": "http://h:1",
                                                             "aws_region": "eu-west-1"})
    assert isinstance(ddb, DynamoDBCommitHandler)
    assert ddb.external.table_name == "T"  # type: ignore[attr-defined]
    assert ddb.external.settings.endpoint == "http://h:1"  # type: ignore[attr-defined]
    assert ddb.external.settings.region == "eu-west-1"  # type: ignore[attr-defined]


def test_explicit_handler_overrides_scheme() -> None:
    mine = CountingHandler()
    assert commit_handler_for("s3+ddb://b/x?ddbTableName=T", None, mine) is mine


@pytest.mark.parametrize("spec", [
    "tests.commit.test_commit_conformance:COUNTING",
    "tests.commit.test_commit_conformance.COUNTING",
    "tests.commit.test_commit_conformance:counting_factory",
])
async def test_dotted_name_selects_handler(spec: str, tmp_path: Path) -> None:
    before = CountingHandler.commits
    ds = await alance.write_dataset(rows(0, 3), str(tmp_path / "ds"), commit_handler=spec)
    await alance.write_dataset(rows(3, 3), str(tmp_path / "ds"), mode="append",
                               commit_handler=spec)
    assert CountingHandler.commits == before + 2
    assert ds.version == 1


def test_dotted_name_of_a_class_is_instantiated() -> None:
    made = commit_handler_for("/tmp/x", None,
                              "tests.commit.test_commit_conformance:CountingHandler")
    assert type(made) is CountingHandler and made is not COUNTING


@pytest.mark.parametrize("spec", ["nodots", "no.such.module:Handler",
                                  "tests.commit.test_commit_conformance:Missing",
                                  "tests.commit.test_commit_conformance:RACERS",
                                  "tests.commit.test_commit_conformance:Setup"])
def test_bad_dotted_names_are_refused(spec: str) -> None:
    with pytest.raises(InvalidInputError):
        commit_handler_for("/tmp/x", None, spec)


def test_registered_scheme_is_used() -> None:
    made = CountingHandler()
    register_commit_handler("alance-test", lambda uri, options: made)
    assert commit_handler_for("alance-test://x/y") is made
