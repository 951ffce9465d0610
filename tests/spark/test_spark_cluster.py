"""alance on a real Spark standalone cluster: a master and a worker started from the installed
PySpark (``alance.spark.standalone``), executors on this Python, drivers in their own
processes. Write/read, an executor SIGKILLed mid-write, a failed job."""

from __future__ import annotations

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

pytestmark = pytest.mark.slow

DRIVER = str(Path(__file__).with_name("cluster_driver.py"))


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(workers=1, cores=2, memory="2g") as c:
        yield c


def _driver(cluster: LocalCluster, scenario: str, uri: str, markers: Path,
            ) -> subprocess.Popen[str]:
    env = cluster_env()
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2]),
                                         env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, DRIVER, cluster.url, scenario, uri, str(markers)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


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
