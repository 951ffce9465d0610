"""alance on a real Spark standalone cluster: a master and a worker started from the installed
PySpark (``alance.spark.standalone``), executors on this Python, drivers in their own
processes. Write/read, an executor SIGKILLed mid-write, a failed job, speculative task
attempts, and a write and read through S3 (a moto server) from the executors.

No test depends on how fast the machine is: waits are for events (marker files, processes),
with generous limits. Clusters are stopped and driver processes killed even when a test
fails."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import pytest

import alance.sync as al
from alance.spark.standalone import LocalCluster, cluster_env
from tests.s3_servers import S3Target

pytestmark = pytest.mark.slow

DRIVER = str(Path(__file__).with_name("cluster_driver.py"))
#: Driver processes of the running test (killed at its end if still running).
_DRIVERS: list[subprocess.Popen[str]] = []


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, cores=2, memory="2g") as c:
        yield c


@pytest.fixture(autouse=True)
def _kill_leftover_drivers() -> Iterator[None]:
    """A driver still running when its test ends (a failed assertion, a timeout) is killed
    with everything it started (its JVM), so it cannot hold the cluster's cores."""
    yield
    while _DRIVERS:
        proc = _DRIVERS.pop()
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _driver(cluster: LocalCluster, scenario: str, uri: str, markers: Path,
            options: dict[str, str] | None = None) -> subprocess.Popen[str]:
    env = cluster_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2]),
                                         env.get("PYTHONPATH", "")])
    args = [sys.executable, DRIVER, cluster.url, scenario, uri, str(markers)]
    if options is not None:
        args.append(json.dumps(options))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    _DRIVERS.append(proc)
    return proc


def _result(proc: subprocess.Popen[str], timeout: float = 300) -> dict:
    out, err = proc.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert lines, f"driver failed (rc {proc.returncode}):\n{err[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _files(uri: str) -> set[str]:
    root = Path(uri)
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] not in ("_versions", "_transactions")}


def test_cluster_write_and_read(cluster: LocalCluster, tmp_path: Path) -> None:
    uri = str(tmp_path / "c.lance")
    got = _result(_driver(cluster, "write_read", uri, tmp_path))
    ids = np.arange(200_000)
    assert got["agg"] == [200_000, int(ids.sum()), int((ids % 7).sum())]
    assert got["filtered"] == int((ids % 7 == 3).sum())
    ds = al.open_dataset(uri)
    assert ds.version == 1 and len(ds.get_fragments()) == 4
    assert lance.dataset(uri).to_table().sort_by("id").equals(ds.to_table().sort_by("id"))


def test_cluster_executor_killed_mid_write(cluster: LocalCluster, tmp_path: Path) -> None:
    uri = str(tmp_path / "k.lance")
    proc = _driver(cluster, "kill", uri, tmp_path)
    deadline = time.monotonic() + 180
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    time.sleep(1.0)  # tasks are writing files now
    victims = cluster.executor_pids()
    assert victims, "no executor process found"
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    assert _result(proc)["done"] is True
    ds = al.open_dataset(uri)
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    assert ds.version == 1
    assert len(ids) == 120_000 and np.array_equal(np.sort(ids), np.arange(120_000))
    referenced = {f"data/{f.path}" for frag in ds.fragment_protos() for f in frag.files}
    assert lance.dataset(uri).count_rows() == 120_000
    # files of the killed attempts are not part of the table (a killed task may leave one)
    assert referenced <= _files(uri)


def test_cluster_failed_job_leaves_dataset_unchanged(cluster: LocalCluster,
                                                     tmp_path: Path) -> None:
    uri = str(tmp_path / "f.lance")
    al.write_dataset(pa.table({"id": pa.array(range(10), pa.int64())}), uri)
    before = _files(uri)
    assert _result(_driver(cluster, "fail", uri, tmp_path))["failed"] is True
    ds = al.open_dataset(uri)
    assert ds.version == 1 and ds.count_rows() == 10
    deadline = time.monotonic() + 20  # tasks Spark is still cancelling
    while _files(uri) != before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _files(uri) == before


def test_cluster_speculative_attempts_write_each_row_once(tmp_path: Path) -> None:
    # Two workers on two loopback addresses: Spark never runs a speculative copy of a task
    # on a host where an attempt of it already runs. Partition 0's first attempt writes a
    # file, then waits until a speculative copy has passed all its rows; whichever attempt
    # Spark lets commit, the other's files must not reach the table.
    uri = str(tmp_path / "s.lance")
    markers = tmp_path / "markers"
    markers.mkdir()
    with LocalCluster(workers=2, cores=1, memory="1g", distinct_hosts=True) as cluster:
        got = _result(_driver(cluster, "speculate", uri, markers), timeout=900)
    assert got["done"] is True
    assert (markers / "attempt-0-1").exists(), sorted(p.name for p in markers.iterdir())
    ds = al.open_dataset(uri)
    assert ds.version == 1  # one commit
    ids = ds.to_table(columns=["id"])["id"].to_numpy()
    assert len(ids) == 80_000 and np.array_equal(np.sort(ids), np.arange(80_000))
    assert lance.dataset(uri).count_rows() == 80_000
    referenced = {f"data/{f.path}" for frag in ds.fragment_protos() for f in frag.files}
    assert referenced <= _files(uri)

    # The losing attempt's files are deleted (by the commit, or by the attempt once it sees
    # the job committed); a worker killed between finishing a file and that check may leave
    # one behind.
    def stray() -> set[str]:
        return {f for f in _files(uri) if f.startswith("data/")} - referenced

    deadline = time.monotonic() + 60  # an attempt Spark is still stopping
    while len(stray()) > 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(stray()) <= 1, sorted(stray())


def test_cluster_s3_write_and_read_from_executors(cluster: LocalCluster, moto_target: S3Target,
                                                  tmp_path: Path) -> None:
    # The executors reach moto (127.0.0.1) with the endpoint and credentials given as
    # options of the read and the write.
    uri = moto_target.uri("cluster/events.lance")
    opts = moto_target.storage_options
    ids = np.arange(60_000)
    got = _result(_driver(cluster, "s3", uri, tmp_path, opts))
    assert got == {"count": 60_000, "missing": 0, "extra": 0,
                   "filtered": int((ids % 13 == 5).sum())}
    expected = pa.table({"id": ids, "k": ids % 13,
                         "name": pa.array([f"s3-{i}" for i in ids.tolist()]), "x": ids / 8})
    ds = al.open_dataset(uri, storage_options=opts)
    assert ds.version == 1 and len(ds.get_fragments()) == 4
    for table in (ds.to_table().sort_by("id"),
                  lance.dataset(uri, storage_options=opts).to_table().sort_by("id")):
        assert table.column_names == expected.column_names
        for name in expected.column_names:
            assert table[name].combine_chunks().equals(expected[name].combine_chunks()), name
