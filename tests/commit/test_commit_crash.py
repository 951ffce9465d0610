"""Commits survive killed writers, flaky networks and many processes (DynamoDB; and plain S3
conditional puts through the fault proxy).

* A writer process is SIGKILLed right after each step of the external-store commit
  (:data:`alance.commit.external.COMMIT_STEPS`). Readers (alance and pylance, through DynamoDB
  or plain S3) then see either the old or the new version, never anything half-made; the first
  reader through DynamoDB finishes the commit; the next writer commits on top; every committed
  row is present exactly once. A reader killed in the middle of such a repair is survived too.
* A proxy in front of moto fails a fraction of S3 and DynamoDB requests (error answers the
  server never sees, and lost answers to requests the server applied): every append either
  succeeds with its rows present once, or fails with a typed error and its rows absent.
* Several processes append through one DynamoDB table at once: every version, every row.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator

import lance
import pytest

import alance
from alance.commit.handler import manifest_path
from alance.errors import AlanceError
from alance.format.manifest import ManifestNamingScheme
from tests.dynamodb_rig import (
    EXTERNAL_DDB_ENV,
    DdbTarget,
    FaultCounts,
    FaultProxy,
    create_table,
    ddb_target,
    item_versions,
    random_faults,
    rows,
    run_child,
    sorted_ids,
    start_child,
)
from tests.s3_servers import MotoServer, S3Target

__all__ = ["ddb_target"]  # the fixture, imported for pytest

TIMEOUT = 120
#: Processes and appends per process of the many-writers test (8 x 25 = 200 versions);
#: ``ALANCE_TEST_DDB_WRITERS=PxA`` changes them.
PROCESSES, APPENDS = (int(n) for n in os.environ.get("ALANCE_TEST_DDB_WRITERS", "8x25").split("x"))


def final_key(version: int) -> str:
    return manifest_path(version, ManifestNamingScheme.V2)


def staged_keys(target: DdbTarget, name: str) -> list[str]:
    return [k for k in target.keys(name) if ".manifest-" in k]


def paths_by_version(target: DdbTarget, name: str) -> dict[int, str]:
    base = target.base_uri(name) + "/"
    return {int(i["version"]["N"]): i["path"]["S"].removeprefix(base)
            for i in target.items(name)}


async def read_ddb(target: DdbTarget, name: str, who: str) -> tuple[int, list[int]]:
    """Version and sorted ids through DynamoDB, read by alance or pylance."""
    uri, opts = target.uri(name), target.storage_options
    if who == "alance":
        ds = await alance.open_dataset(uri, storage_options=opts)
        return ds.version, sorted_ids(await ds.to_table())
    theirs = await asyncio.to_thread(lance.dataset, uri, storage_options=opts)
    return theirs.version, sorted_ids(await asyncio.to_thread(theirs.to_table))


# -- killed writers --------------------------------------------------------------------------------
CRASH_CASES = [("staged", "pylance"), ("claimed", "alance"), ("claimed", "pylance"),
               ("copied", "pylance"), ("finalized", "alance"), ("cleaned", "pylance")]


@pytest.mark.parametrize("step,first_reader", CRASH_CASES,
                         ids=[f"{s}-{r}" for s, r in CRASH_CASES])
async def test_writer_killed_after_step(ddb_target: DdbTarget, step: str,
                                        first_reader: str) -> None:
    name, uri, opts = "crash", ddb_target.uri("crash"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 50), uri, storage_options=opts)
    done = await asyncio.to_thread(run_child, {
        "uri": uri, "options": opts, "mode": "append", "starts": [1000], "count": 50,
        "crash_after": step})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    assert done.stdout == ""  # it never got to report a commit

    # What the crash left behind.
    committed = step != "staged"
    paths = paths_by_version(ddb_target, name)
    assert sorted(paths) == ([1, 2] if committed else [1])
    if committed:
        is_final = paths[2] == final_key(2)
        assert is_final == (step in ("finalized", "cleaned"))
    keys = ddb_target.keys(name)
    assert (final_key(2) in keys) == (step in ("copied", "finalized", "cleaned"))
    assert bool(staged_keys(ddb_target, name)) == (step != "cleaned")

    # A reader that knows nothing of DynamoDB sees the old or the new version, whole.
    plain = await asyncio.to_thread(lance.dataset, ddb_target.s3_uri(name),
                                    storage_options=ddb_target.s3.storage_options)
    plain_ids = sorted_ids(await asyncio.to_thread(plain.to_table))
    old_ids, new_ids = list(range(50)), sorted([*range(50), *range(1000, 1050)])
    assert (plain.version, plain_ids) in ((1, old_ids), (2, new_ids))

    # Readers through DynamoDB see the commit once it was claimed, and finish it.
    expected = (2, new_ids) if committed else (1, old_ids)
    assert await read_ddb(ddb_target, name, first_reader) == expected
    if committed:
        assert paths_by_version(ddb_target, name)[2] == final_key(2)
        assert final_key(2) in ddb_target.keys(name)
        if step in ("claimed", "copied"):  # the repairing reader removed the staged copy
            assert staged_keys(ddb_target, name) == []
    other = "pylance" if first_reader == "alance" else "alance"
    assert await read_ddb(ddb_target, name, other) == expected

    # The next writer commits on top; nothing committed is lost.
    ds = await alance.write_dataset(rows(5000, 50), uri, mode="append", storage_options=opts)
    assert ds.version == expected[0] + 1
    final_ids = sorted([*expected[1], *range(5000, 5050)])
    for who in ("alance", "pylance"):
        assert await read_ddb(ddb_target, name, who) == (ds.version, final_ids)
    assert sorted(paths_by_version(ddb_target, name).values()) == sorted(
        final_key(v) for v in range(1, ds.version + 1))


async def test_reader_killed_while_repairing(ddb_target: DdbTarget) -> None:
    name, uri, opts = "repair", ddb_target.uri("repair"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 20), uri, storage_options=opts)
    writer = await asyncio.to_thread(run_child, {
        "uri": uri, "options": opts, "mode": "append", "starts": [100], "count": 20,
        "crash_after": "claimed"})
    assert writer.returncode == -signal.SIGKILL
    reader = await asyncio.to_thread(run_child, {
        "uri": uri, "options": opts, "mode": "open", "crash_after": "copied"})
    assert reader.returncode == -signal.SIGKILL, reader.stderr[-2000:]
    assert paths_by_version(ddb_target, name)[2] != final_key(2)  # still not finished
    assert final_key(2) in ddb_target.keys(name)  # but the copy was made
    expected = (2, sorted([*range(20), *range(100, 120)]))
    assert await read_ddb(ddb_target, name, "alance") == expected
    assert paths_by_version(ddb_target, name)[2] == final_key(2)
    assert staged_keys(ddb_target, name) == []
    assert await read_ddb(ddb_target, name, "pylance") == expected


async def append_concurrently(uri: str, options: dict[str, str], writers: int, appends: int,
                              ) -> dict[int, BaseException | int]:
    """``writers`` tasks append ``appends`` 10-row batches each (ids from 1000 * (writer + 1)
    + 100 * k); the version each got, or its typed error, by first id."""
    outcomes: dict[int, BaseException | int] = {}

    async def writer(w: int) -> None:
        for k in range(appends):
            start = 1000 * (w + 1) + 100 * k
            try:
                ds = await alance.write_dataset(rows(start, 10), uri, mode="append",
                                                storage_options=options)
                outcomes[start] = ds.version
            except AlanceError as exc:
                outcomes[start] = exc

    async with asyncio.timeout(TIMEOUT):
        await asyncio.gather(*(writer(w) for w in range(writers)))
    return outcomes


def check_flaky_appends(outcomes: dict[int, BaseException | int], counts: FaultCounts,
                        attempted: int, version: int, ids: list[int]) -> None:
    """What appends through the fault proxy must give: the faults happened; most appends
    succeeded; each reported one is present once; a failed one is present only if its outcome
    was reported unknown; versions are unique and the latest counts every present append."""
    assert counts.errors > 0 and counts.dropped > 0, counts
    succeeded = sorted(s for s, o in outcomes.items() if isinstance(o, int))
    failed = {s: o for s, o in outcomes.items() if not isinstance(o, int)}
    assert len(succeeded) >= attempted // 2, failed  # retries absorb most faults
    assert len(ids) == len(set(ids)), "some append was committed twice"
    present = {i // 100 * 100 for i in ids if i >= 1000}
    for start in succeeded:
        assert start in present, f"append {start} reported success but is missing"
    for start, exc in failed.items():
        if start in present:
            assert "outcome unknown" in str(exc) or "may or may not" in str(exc), exc
    assert version == 1 + len(present)
    versions = [outcomes[s] for s in succeeded]
    assert len(set(versions)) == len(versions), "two appends got the same version"


# -- injected faults --------------------------------------------------------------------------
async def test_faulty_network_commits_succeed_or_fail_cleanly(ddb_target: DdbTarget) -> None:
    name = "faults"
    await alance.write_dataset(rows(0, 10), ddb_target.uri(name),
                               storage_options=ddb_target.storage_options)
    writers, appends = 4, 4
    with FaultProxy(ddb_target.endpoint, random_faults(0.10, 0.04, seed=11)) as proxy:
        flaky = ddb_target.via(proxy.endpoint)

        outcomes = await append_concurrently(flaky.uri(name), flaky.storage_options,
                                             writers, appends)
        counts = proxy.counts
    version, ids = await read_ddb(ddb_target, name, "alance")
    check_flaky_appends(outcomes, counts, writers * appends, version, ids)
    assert await read_ddb(ddb_target, name, "pylance") == (version, ids)
    assert sorted(paths_by_version(ddb_target, name).values()) == sorted(
        final_key(v) for v in range(1, version + 1))


# -- many processes ---------------------------------------------------------------------------
@pytest.fixture
def busy_target(request: pytest.FixtureRequest) -> Iterator[DdbTarget]:
    """A DynamoDB target on a moto server in its own process (this one stays idle while the
    writers run), or the external endpoint when one is configured."""
    if os.environ.get(EXTERNAL_DDB_ENV):
        yield request.getfixturevalue("ddb_target")
        return
    server = MotoServer(mode="subprocess").start()
    try:
        yield DdbTarget(server.target(), create_table(server.endpoint), server.endpoint)
    finally:
        server.stop()


async def test_many_processes_append_through_one_table(busy_target: DdbTarget) -> None:
    """8 processes append 25 times each through one DynamoDB table: every append lands once,
    each with its own version. (A version reported by two writers was seen once under load:
    moto's conditional creates were not atomic; the test server's are now, as DynamoDB's:
    see ``tests.s3_servers.make_moto_dynamodb_atomic``.)"""
    ddb_target = busy_target
    name, uri, opts = "many", ddb_target.uri("many"), ddb_target.storage_options
    await alance.write_dataset(rows(0, 10), uri, storage_options=opts)
    started = time.monotonic()
    procs = [start_child({"uri": uri, "options": opts, "mode": "append", "count": 10,
                          "max_retries": 200,
                          "starts": [100_000 * (p + 1) + 100 * k for k in range(APPENDS)]})
             for p in range(PROCESSES)]
    outputs = await asyncio.gather(*(asyncio.to_thread(p.communicate, timeout=5 * TIMEOUT)
                                     for p in procs))
    elapsed = time.monotonic() - started
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
        assert len(out.splitlines()) == APPENDS
    versions = [json.loads(line)["version"] for out, _ in outputs for line in out.splitlines()]
    total = PROCESSES * APPENDS
    expected = sorted([*range(10), *(100_000 * (p + 1) + 100 * k + j for p in range(PROCESSES)
                                     for k in range(APPENDS) for j in range(10))])
    # rows first: a failure below then says whether anything was lost
    assert await read_ddb(ddb_target, name, "alance") == (total + 1, expected)
    reported = {json.loads(line)["start"]: json.loads(line)["version"]
                for out, _ in outputs for line in out.splitlines()}
    assert sorted(versions) == list(range(2, total + 2)), (  # every commit its own version
        sorted(reported.items(), key=lambda kv: kv[1]),
        [err[-2000:] for _, err in outputs if err])
    assert await read_ddb(ddb_target, name, "pylance") == (total + 1, expected)
    assert item_versions(ddb_target.items(name)) == list(range(1, total + 2))
    print(f"{PROCESSES} processes x {APPENDS} appends through DynamoDB: {elapsed:.1f}s "
          f"({total / elapsed:.1f} commits/s)")


async def test_faulty_network_conditional_put_commits(moto_target: S3Target) -> None:
    """The same through plain S3 (conditional put commits, no DynamoDB): 500/503 answers and
    responses dropped after moto applied the request. Every append reported committed is
    there once, none is there twice, versions are unique, pylance agrees."""
    uri = moto_target.uri("put-faults")
    await alance.write_dataset(rows(0, 10), uri, storage_options=moto_target.storage_options)
    writers, appends = 4, 4
    with FaultProxy(moto_target.endpoint, random_faults(0.10, 0.05, seed=5)) as proxy:
        flaky = {**moto_target.storage_options, "aws_endpoint": proxy.endpoint}

        outcomes = await append_concurrently(uri, flaky, writers, appends)
        counts = proxy.counts
    ds = await alance.open_dataset(uri, storage_options=moto_target.storage_options)
    ids = sorted_ids(await ds.to_table())
    check_flaky_appends(outcomes, counts, writers * appends, ds.version, ids)
    theirs = await asyncio.to_thread(lance.dataset, uri,
                                     storage_options=moto_target.storage_options)
    assert theirs.version == ds.version and sorted_ids(theirs.to_table()) == ids
