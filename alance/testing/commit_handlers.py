"""A conformance suite for commit handlers (:class:`~alance.commit.handler.CommitHandler`).

Subclass :class:`CommitHandlerConformance` in a pytest module and give it a ``handler_setup``
fixture: a :class:`HandlerSetup` naming a dataset location (URI and storage options) and how
to make a handler for it. Every test then runs against it::

    class TestMyHandler(CommitHandlerConformance):
        @pytest.fixture
        def handler_setup(self, tmp_path):
            return HandlerSetup("mine", str(tmp_path / "ds"), {}, MyHandler)

What a handler must give:

* racing commits of one version: exactly one winner, every other a ``CommitConflictError``,
  and the winner's bytes are what that version resolves to;
* ``list_versions`` / ``latest`` / ``resolve`` agreeing, in both manifest naming schemes, with
  typed errors for missing versions and missing datasets;
* concurrent appends through the whole stack: every version present, no row lost (and, when
  pylance is installed and can reach the location, pylance reads the same rows).

Needs pytest and pytest-asyncio (``asyncio_mode = "auto"``). alance's own handlers
(conditional put on local, memory and two S3 servers, DynamoDB, the external-store protocol,
locks) run it in ``tests/test_commit_conformance.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

import alance
from alance.commit.handler import CommitHandler, manifest_path
from alance.errors import CommitConflictError, DatasetNotFoundError, NotFoundError
from alance.format.manifest import ManifestNamingScheme
from alance.io.store import DatasetStore
from alance.io.uri import open_store

__all__ = ["CommitHandlerConformance", "HandlerSetup", "race"]

#: Seconds any one test may take before it is failed (a hung handler must not hang the run).
TIMEOUT = 60
#: Handlers racing for one version.
RACERS = 8


@dataclass
class HandlerSetup:
    """A dataset location and the handler under test."""

    name: str
    uri: str
    options: dict[str, Any]
    make: Callable[[], CommitHandler]
    #: Whether pylance can open this location (it has no view of in-process stores).
    pylance_can_read: bool = True

    def store(self) -> DatasetStore:
        """The dataset's store."""
        return open_store(self.uri, self.options)


async def race(setup: HandlerSetup, version: int, scheme: ManifestNamingScheme,
               racers: int = RACERS) -> tuple[list[int], list[BaseException]]:
    """``racers`` handlers commit ``version`` at once; returns (winner indexes, errors)."""
    store = setup.store()

    async def one(i: int) -> int:
        await setup.make().commit(store, version, b"manifest of racer %d" % i, scheme)
        return i

    results = await asyncio.gather(*(one(i) for i in range(racers)), return_exceptions=True)
    winners = [r for r in results if isinstance(r, int)]
    errors = [r for r in results if isinstance(r, BaseException)]
    return winners, errors


def _rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


class CommitHandlerConformance:
    """What every commit handler must do (see the module docstring)."""

    @pytest.fixture
    def handler_setup(self) -> HandlerSetup:
        """The location and handler under test: override it."""
        raise NotImplementedError("give the suite a `handler_setup` fixture")

    async def test_racing_commits_have_one_winner(self, handler_setup: HandlerSetup) -> None:
        setup = handler_setup
        store, handler = setup.store(), setup.make()
        async with asyncio.timeout(TIMEOUT):
            for version in (1, 2):
                winners, errors = await race(setup, version, ManifestNamingScheme.V2)
                assert len(winners) == 1, f"{len(winners)} winners for version {version}"
                assert all(isinstance(e, CommitConflictError) for e in errors), errors
                location = await handler.resolve(store, version)
                assert await store.get(location.path) == b"manifest of racer %d" % winners[0]
            assert (await handler.latest(store)).version == 2
            assert [loc.version for loc in await handler.list_versions(store)] == [1, 2]

    @pytest.mark.parametrize("scheme", list(ManifestNamingScheme), ids=lambda s: s.value)
    async def test_versions_resolve_consistently(self, handler_setup: HandlerSetup,
                                                 scheme: ManifestNamingScheme) -> None:
        setup = handler_setup
        store, handler = setup.store(), setup.make()
        async with asyncio.timeout(TIMEOUT):
            with pytest.raises(DatasetNotFoundError):
                await handler.latest(store)
            with pytest.raises(DatasetNotFoundError):
                await handler.resolve(store, 1)
            for version in range(1, 5):
                loc = await handler.commit(store, version, b"v%d" % version, scheme)
                assert (loc.version, loc.path) == (version, manifest_path(version, scheme))
                assert (await handler.latest(store)).version == version
            listed = await setup.make().list_versions(store)
            assert [(loc.version, loc.path, loc.naming_scheme) for loc in listed] == [
                (v, manifest_path(v, scheme), scheme) for v in range(1, 5)]
            for version in range(1, 5):
                loc = await setup.make().resolve(store, version)
                assert loc.naming_scheme is scheme
                assert await store.get(loc.path) == b"v%d" % version
            with pytest.raises(NotFoundError) as missing:
                await handler.resolve(store, 9)
            assert not isinstance(missing.value, DatasetNotFoundError)
            other = next(s for s in ManifestNamingScheme if s is not scheme)
            with pytest.raises(CommitConflictError):  # taken, whatever the naming scheme
                await handler.commit(store, 4, b"again", other)
            assert await store.get(manifest_path(4, scheme)) == b"v4"

    async def test_concurrent_appends_keep_every_row(self, handler_setup: HandlerSetup) -> None:
        setup = handler_setup
        writers, per_writer = 4, 3
        async with asyncio.timeout(TIMEOUT):
            await alance.write_dataset(_rows(0, 5), setup.uri, storage_options=setup.options,
                                       commit_handler=setup.make())

            async def writer(w: int) -> None:
                for k in range(per_writer):
                    await alance.write_dataset(_rows(1000 * (w + 1) + 10 * k, 5), setup.uri,
                                               mode="append", storage_options=setup.options,
                                               commit_handler=setup.make())

            await asyncio.gather(*(writer(w) for w in range(writers)))
            ds = await alance.open_dataset(setup.uri, storage_options=setup.options,
                                           commit_handler=setup.make())
        expected = sorted([*range(5), *(1000 * (w + 1) + 10 * k + j for w in range(writers)
                                        for k in range(per_writer) for j in range(5))])
        versions = [v["version"] for v in await ds.versions()]
        assert ds.version == 1 + writers * per_writer, (ds.version, versions)
        assert versions == list(range(1, ds.version + 1))
        assert _ids(await ds.to_table()) == expected
        if setup.pylance_can_read and importlib.util.find_spec("lance") is not None:
            import lance

            theirs = await asyncio.to_thread(lance.dataset, setup.uri,
                                             storage_options=setup.options or None)
            assert theirs.version == ds.version
            assert _ids(theirs.to_table()) == expected
