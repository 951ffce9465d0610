"""Concurrent appends through the conditional-put commit handler: tasks and OS processes.

Every append writes a batch of a distinct size ``n`` whose ids are ``n * 1000 + 0..n-1``, so the
new fragment of each version tells, from the manifest alone, which append made it. After the
race the history must be a clean chain: versions 1..N, one manifest each, each version exactly
its predecessor plus one appended fragment, every append present once, every transaction file
referenced by exactly one manifest, and no stray data or manifest files.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa

import alance
from alance.errors import CommitConflictError
from alance.format.manifest import (
    ManifestFile,
    decode_latest_version_hint,
    decode_manifest_file,
    decode_transaction_file,
    parse_manifest_file_name,
)
from alance.io.uri import open_store

BASE_ROWS = 50  # the size of version 1; appends use sizes 1..8


def batch_of(n: int) -> pa.Table:
    """The rows one append of size ``n`` writes (ids unique across all appends)."""
    ids = np.arange(n, dtype=np.int64) + n * 1000
    return pa.table({
        "id": pa.array(ids),
        "size": pa.array(np.full(n, n, dtype=np.int32)),
        "s": pa.array([f"row-{i}" for i in ids]),
    })


def ids_of(n: int) -> set[int]:
    return set(range(n * 1000, n * 1000 + n))


class CountingHandler(alance.ConditionalPutCommitHandler):
    """The conditional-put handler, counting the races it loses."""

    def __init__(self) -> None:
        self.conflicts = 0

    async def latest(self, store):  # type: ignore[no-untyped-def]
        found = await super().latest(store)
        # Let the other tasks look too: small local writes and listings never wait, so
        # without a pause here each task's append would run to its end before the next began.
        await asyncio.sleep(0)
        return found

    async def commit(self, store, version, manifest, naming_scheme):  # type: ignore[no-untyped-def]
        try:
            return await super().commit(store, version, manifest, naming_scheme)
        except CommitConflictError:
            self.conflicts += 1
            raise


async def _manifests(uri: str) -> dict[int, ManifestFile]:
    """Every committed manifest under ``_versions/``, decoded, by version (checks the dir)."""
    store = open_store(uri)
    listing = await store.list("_versions")
    names = [m.path.rsplit("/", 1)[-1] for m in listing]
    parsed = {n: parse_manifest_file_name(n) for n in names}
    stray = {n for n, p in parsed.items() if p is None} - {"latest_version_hint.json"}
    assert not stray, f"unexpected files in _versions/: {stray}"
    versions = [p[0] for p in parsed.values() if p is not None]
    assert len(versions) == len(set(versions)), f"a version has two manifests: {names}"
    out: dict[int, ManifestFile] = {}
    for name, p in parsed.items():
        if p is None:
            continue
        mf = decode_manifest_file(await store.get(f"_versions/{name}"))
        assert mf.manifest.version == p[0], f"{name} holds version {mf.manifest.version}"
        out[p[0]] = mf
    if "latest_version_hint.json" in names:
        hint = decode_latest_version_hint(await store.get("_versions/latest_version_hint.json"))
        assert hint in out, f"version hint {hint} names no committed version"
    return out


async def verify_history(uri: str, sizes: list[int]) -> None:
    """Check the dataset at ``uri``: version 1 of BASE_ROWS rows plus one append per size."""
    n_versions = 1 + len(sizes)
    expected_versions = list(range(1, n_versions + 1))

    # -- manifests on the store ------------------------------------------------------------------
    manifests = await _manifests(uri)
    assert sorted(manifests) == expected_versions, sorted(manifests)

    ds = await alance.open_dataset(uri)
    assert ds.version == n_versions
    assert await ds.latest_version() == n_versions
    assert [v["version"] for v in await ds.versions()] == expected_versions

    # -- each version = previous version + exactly one appended fragment -----------------------
    first = manifests[1].manifest
    assert sum(f.physical_rows for f in first.fragments) == BASE_ROWS
    new_sizes = []
    counts = {1: BASE_ROWS}
    for v in expected_versions[1:]:
        prev, cur = manifests[v - 1].manifest, manifests[v].manifest
        assert len(cur.fragments) == len(prev.fragments) + 1, f"version {v}"
        for a, b in zip(prev.fragments, cur.fragments[:-1], strict=True):
            assert a.id == b.id and a.physical_rows == b.physical_rows
            assert [f.path for f in a.files] == [f.path for f in b.files], f"version {v}"
        added = cur.fragments[-1]
        assert added.id > max(f.id for f in prev.fragments)
        new_sizes.append(int(added.physical_rows))
        counts[v] = counts[v - 1] + int(added.physical_rows)
        assert manifests[v].transaction is not None
        assert manifests[v].transaction.WhichOneof("operation") == "append"
    assert sorted(new_sizes) == sorted(sizes), "an append is missing or duplicated"

    # time travel agrees with the manifests
    for v in expected_versions:
        old = await ds.checkout_version(v)
        assert old.version == v
        assert await old.count_rows() == counts[v]

    # -- transaction files: each referenced by exactly one manifest ----------------------------
    store = open_store(uri)
    txn_files = {m.path.rsplit("/", 1)[-1] for m in await store.list("_transactions")}
    refs = Counter(mf.manifest.transaction_file for mf in manifests.values())
    assert all(refs.values()) and set(refs) == txn_files, (refs, txn_files)
    assert max(refs.values()) == 1, f"a transaction file is shared: {refs}"
    for mf in manifests.values():
        on_disk = decode_transaction_file(
            await store.get(f"_transactions/{mf.manifest.transaction_file}"))
        assert mf.transaction is not None and on_disk.uuid == mf.transaction.uuid

    # -- data files: exactly the ones the latest manifest references ---------------------------
    data_files = {m.path.rsplit("/", 1)[-1] for m in await store.list("data")}
    referenced = [f.path for frag in manifests[n_versions].manifest.fragments for f in frag.files]
    assert len(referenced) == len(set(referenced))
    assert data_files == set(referenced), "orphaned or missing data files"

    # -- rows (read path) ----------------------------------------------------------------------
    want = ids_of(BASE_ROWS)
    for n in sizes:
        want |= ids_of(n)
    got = (await ds.to_table(columns=["id"])).column("id").to_pylist()
    assert len(got) == len(want) and set(got) == want, "rows missing or duplicated"
    for v, n in zip(expected_versions[1:], new_sizes, strict=True):  # each version's rows
        old = await ds.checkout_version(v)
        table = await old.to_table(columns=["id", "size"])
        assert table.num_rows == counts[v]
        assert n in set(table.column("size").to_pylist())

    if "://" not in uri:  # pylance as the oracle
        theirs = lance.dataset(uri)
        assert theirs.version == n_versions
        assert len(theirs.versions()) == n_versions
        their_ids = theirs.to_table(columns=["id"]).column("id").to_pylist()
        assert sorted(their_ids) == sorted(got)


async def test_concurrent_task_appends(uri: str) -> None:
    """8 asyncio tasks append to one dataset at once (local disk and memory://)."""
    await alance.write_dataset(batch_of(BASE_ROWS), uri)
    handler = CountingHandler()
    sizes = list(range(1, 9))
    start = asyncio.Event()

    async def append(n: int) -> int:
        await start.wait()
        ds = await alance.write_dataset(batch_of(n), uri, mode="append", commit_handler=handler)
        return ds.version

    tasks = [asyncio.create_task(append(n)) for n in sizes]
    await asyncio.sleep(0)
    start.set()
    versions = await asyncio.gather(*tasks)
    assert sorted(versions) == list(range(2, 10)), "two writers returned the same version"
    assert handler.conflicts > 0, "the appends did not actually race"
    await verify_history(uri, sizes)


CHILD = textwrap.dedent("""
    import sys
    import numpy as np, pyarrow as pa
    import alance
    from alance import sync as al
    from alance.errors import CommitConflictError

    class Counting(alance.ConditionalPutCommitHandler):
        conflicts = 0
        async def commit(self, *args, **kwargs):
            try:
                return await super().commit(*args, **kwargs)
            except CommitConflictError:
                Counting.conflicts += 1
                raise

    uri, sizes = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
    print("ready", flush=True)
    sys.stdin.readline()  # start signal: every process released at once
    versions = []
    for n in sizes:
        ids = np.arange(n, dtype=np.int64) + n * 1000
        table = pa.table({"id": ids, "size": np.full(n, n, dtype=np.int32),
                          "s": [f"row-{i}" for i in ids]})
        ds = al.write_dataset(table, uri, mode="append", commit_handler=Counting())
        versions.append(ds.version)
    print("done", ",".join(map(str, versions)), Counting.conflicts, flush=True)
""")


async def test_concurrent_process_appends(tmp_path: Path) -> None:
    """4 OS processes append (twice each) to one local dataset at once."""
    uri = str(tmp_path / "ds.lance")
    await alance.write_dataset(batch_of(BASE_ROWS), uri)
    repo = str(Path(alance.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (repo, os.environ.get("PYTHONPATH")) if p))
    plan = [[2 * p + 1, 2 * p + 2] for p in range(4)]  # sizes 1..8, two appends per process
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, uri, ",".join(map(str, sizes))],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
        for sizes in plan
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            line = await asyncio.to_thread(proc.stdout.readline)
            assert line.strip() == "ready", (line, proc.stderr.read() if proc.stderr else "")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = [await asyncio.to_thread(proc.communicate, timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    returned: list[int] = []
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, _exit_message(proc.returncode, out, err)
        _, versions, _conflicts = out.split()
        returned += [int(v) for v in versions.split(",")]
    assert sorted(returned) == list(range(2, 10)), "two writers returned the same version"
    await verify_history(uri, [n for sizes in plan for n in sizes])


def _exit_message(code: int, out: str, err: str) -> str:
    if code == -6 and "done" in out:
        return ("the child finished its work, then died of SIGABRT at interpreter exit: an "
                "obstore (tokio) thread was still delivering a result into Python while the "
                "interpreter finalised")
    return f"exit code {code}: {err[-3000:]}"


EXIT_CHILD = textwrap.dedent("""
    import asyncio, sys, tempfile
    import pyarrow as pa
    import alance

    async def main():
        base = tempfile.mkdtemp(dir=sys.argv[1])
        t = pa.table({"id": pa.array([1, 2], pa.int64())})
        await asyncio.gather(*[alance.write_dataset(t, f"{base}/d{i}.lance") for i in range(16)])
        print("done", flush=True)

    asyncio.run(main())  # the script ends right after its last write
""")


def test_processes_exit_cleanly_after_writes(tmp_path: Path) -> None:
    """A script whose last action is a burst of writes must exit with status 0.

    The crash this guards against is a race at interpreter exit (a few percent of runs per
    process), so 20 short processes run, 4 at a time.
    """
    repo = str(Path(alance.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=repo)
    failures = []
    for _ in range(5):
        procs = [subprocess.Popen([sys.executable, "-c", EXIT_CHILD, str(tmp_path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env) for _ in range(4)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0:
                failures.append(_exit_message(proc.returncode, out, err))
    assert not failures, f"{len(failures)} of 20 processes failed: {failures[0]}"


def test_backoff_pauses_grow_with_slow_attempts() -> None:
    """Writers whose attempts take long pause longer than the fixed cap: pausing less than an
    attempt lasts only collides again."""
    from alance.dataset.commit.loop import BACKOFF_CAP, backoff_delay

    fast = [backoff_delay(12) for _ in range(200)]
    slow = [backoff_delay(12, attempt_seconds=2.0) for _ in range(200)]
    assert max(fast) <= BACKOFF_CAP
    assert max(slow) > BACKOFF_CAP and max(slow) <= 4.0
    assert max(backoff_delay(0, attempt_seconds=2.0) for _ in range(50)) <= 0.005


async def test_rebasable_commits_outlast_their_retry_count(uri: str) -> None:
    """Appends that keep losing races to each other go on past ``max_retries`` (until the
    commit deadline) instead of failing: sixteen concurrent appends allowed one retry each
    all land, each exactly once."""
    await alance.write_dataset(pa.table({"w": pa.array([-1], pa.int64())}), uri)

    async def append(w: int) -> None:
        await alance.write_dataset(pa.table({"w": pa.array([w], pa.int64())}), uri,
                                   mode="append", max_retries=1)

    await asyncio.gather(*(append(w) for w in range(16)))
    ds = await alance.open_dataset(uri)
    assert ds.version == 17
    assert sorted((await ds.to_table())["w"].to_pylist()) == list(range(-1, 16))
