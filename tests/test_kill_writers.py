"""Writers killed with SIGKILL at random points, on local disk and on S3 (moto over HTTP).

A child process appends batches of random sizes and deletes whole batches, printing a line
before each commit starts and after it returns. The parent kills it (``kill -9``) at a random
moment after a random number of commits, several rounds on one dataset. Then every version of
the history is read by alance and by pylance, which must agree, and in every version each batch
is either whole or absent (nothing partial is ever visible). The latest version holds every
append the child saw return and none of the batches whose delete it saw return. A new writer
then commits on top, and both engines read its rows.

The fast variant runs a few rounds with the suite; the ``soak`` variant many more (``make
soak``; ``ALANCE_SOAK_ROUNDS``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest

from alance import sync as al
from tests.s3_servers import S3Target

FAST_ROUNDS = 3
SOAK_ROUNDS = int(os.environ.get("ALANCE_SOAK_ROUNDS", "25"))

CHILD = textwrap.dedent("""
    import asyncio, json, random, sys
    import pyarrow as pa
    import alance

    spec = json.loads(sys.argv[1])

    def batch(b, n):
        return pa.table({"b": pa.array([b] * n, pa.int64()),
                         "i": pa.array(range(n), pa.int64()),
                         "s": pa.array([f"{b}:{i}" for i in range(n)])})

    def say(**what):
        print(json.dumps(what), flush=True)

    async def main():
        uri, opts = spec["uri"], spec["options"]
        rng = random.Random(spec["seed"])
        alive = list(spec["alive"])
        for step in range(spec["steps"]):
            b = spec["first_batch"] + step
            if alive and rng.random() < 0.25:
                k = rng.choice(alive)
                say(start="delete", batch=k)
                ds = await alance.open_dataset(uri, storage_options=opts)
                await ds.delete(f"b = {k}")
                alive.remove(k)
                say(done="delete", batch=k)
            else:
                n = rng.choice([1, 7, rng.randint(1, 5000)])
                say(start="append", batch=b, rows=n)
                await alance.write_dataset(batch(b, n), uri, mode="append",
                                           storage_options=opts)
                alive.append(b)
                say(done="append", batch=b)

    asyncio.run(main())
""")


def batch(b: int, n: int) -> pa.Table:
    return pa.table({"b": pa.array([b] * n, pa.int64()), "i": pa.array(range(n), pa.int64()),
                     "s": pa.array([f"{b}:{i}" for i in range(n)])})


class Journal:
    """What the killed writers said: batch sizes, appends and deletes that returned."""

    def __init__(self) -> None:
        self.sizes: dict[int, int] = {0: 10}
        self.appended: set[int] = {0}
        self.deleted: set[int] = set()
        # Deletes that started but were not seen to return: the kill may have come after
        # their commit landed, so these batches may be gone or not.
        self.maybe_deleted: set[int] = set()
        self.next_batch = 1
        self.kills = 0

    def alive(self) -> list[int]:
        return sorted(self.appended - self.deleted)

    def note(self, line: str) -> bool:
        """Record one line; True when it reports a returned commit."""
        what = json.loads(line)
        if what.get("start") == "append":
            self.sizes[what["batch"]] = what["rows"]
        if what.get("done") == "append":
            self.appended.add(what["batch"])
        if what.get("start") == "delete":
            self.maybe_deleted.add(what["batch"])
        if what.get("done") == "delete":
            self.deleted.add(what["batch"])
            self.maybe_deleted.discard(what["batch"])
        return "done" in what


def kill_one_writer(uri: str, options: dict[str, str], journal: Journal,
                    rng: random.Random) -> None:
    """Start a writer, let it return ``k`` commits, wait a random moment, SIGKILL it."""
    steps = 12
    spec = {"uri": uri, "options": options, "seed": rng.randrange(2**32), "steps": steps,
            "first_batch": journal.next_batch, "alive": journal.alive()}
    journal.next_batch += steps
    commits = rng.randrange(0, 6)
    child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(spec)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert child.stdout is not None
    seen = 0
    while seen < commits:
        line = child.stdout.readline()
        if not line:
            break
        seen += journal.note(line)
    time.sleep(rng.uniform(0, 0.4))  # somewhere inside the next commit (or between two)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    # (read through the same text stream: communicate() would skip what readline() buffered)
    rest, err = child.stdout.read(), child.stderr.read() if child.stderr else ""
    child.stdout.close()
    for line in rest.splitlines():
        journal.note(line)
    if child.returncode == -signal.SIGKILL:
        journal.kills += 1
    else:  # it finished all its steps before the kill
        assert child.returncode == 0, err[-3000:]


def check_history(uri: str, options: dict[str, str], journal: Journal, since: int) -> int:
    """Every version after ``since``, read by both engines: whole batches only; the latest
    as journaled. Returns the latest version."""
    latest = al.open_dataset(uri, storage_options=options)
    versions = [v["version"] for v in latest.versions()]
    assert versions == list(range(1, latest.version + 1)), versions
    counts: dict[str, list[Any]] = {"b": []}
    for v in versions[max(0, since - 1):]:
        mine = al.open_dataset(uri, version=v, storage_options=options).to_table()
        theirs = lance.dataset(uri, version=v, storage_options=options).to_table()
        mine, theirs = (t.sort_by([("b", "ascending"), ("i", "ascending")])
                        for t in (mine, theirs))
        assert mine.equals(theirs), f"version {v}: alance and pylance differ"
        counts = mine.group_by("b").aggregate([("i", "count")]).to_pydict()
        for b, n in zip(counts["b"], counts["i_count"], strict=True):
            assert b in journal.sizes, f"version {v}: rows of a batch never started ({b})"
            assert n == journal.sizes[b], f"version {v}: batch {b} has {n} of " \
                                          f"{journal.sizes[b]} rows"
        assert mine.num_rows == sum(journal.sizes[b] for b in counts["b"])
    present = set(counts["b"])
    returned = journal.appended - journal.deleted - journal.maybe_deleted
    assert returned <= present, f"appends that returned are missing: {returned - present}"
    assert not (journal.deleted & present), "a delete that returned is not in effect"
    return latest.version


def run_kills(uri: str, options: dict[str, str], rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    al.write_dataset(batch(0, 10), uri, storage_options=options)
    journal = Journal()
    checked = 0
    for _ in range(rounds):
        kill_one_writer(uri, options, journal, rng)
        checked = check_history(uri, options, journal, since=checked)
    # a new writer commits on top of whatever the killed ones left
    b = journal.next_batch
    al.write_dataset(batch(b, 5), uri, mode="append", storage_options=options)
    journal.sizes[b] = 5
    journal.appended.add(b)
    checked = check_history(uri, options, journal, since=checked)
    print(f"\nkill -9: {rounds} writers ({journal.kills} killed mid-run), "
          f"{checked} versions read by both engines, all held")


@pytest.fixture(params=["local", "s3"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "local":
        return str(tmp_path / "ds.lance"), {}
    s3: S3Target = request.getfixturevalue("moto_target")
    return s3.uri("ds.lance"), dict(s3.storage_options)


def test_killed_writers_leave_whole_versions(where: tuple[str, dict[str, str]]) -> None:
    run_kills(*where, rounds=FAST_ROUNDS, seed=1)


@pytest.mark.soak
def test_killed_writers_leave_whole_versions_soak(where: tuple[str, dict[str, str]]) -> None:
    run_kills(*where, rounds=SOAK_ROUNDS, seed=random.randrange(2**32))
