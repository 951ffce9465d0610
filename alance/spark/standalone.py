"""A Spark standalone cluster on this machine (1 master, N workers), for tests and benchmarks.

Started from the installed PySpark (``spark-class org.apache.spark.deploy.master.Master`` /
``...worker.Worker``) on 127.0.0.1, with executors running this Python (``PYSPARK_PYTHON``)::

    with LocalCluster(workers=1, cores=2) as cluster:
        spark = SparkSession.builder.master(cluster.url).getOrCreate()
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> str:
    """The installed PySpark's directory (it holds ``bin/spark-class`` and the jars)."""
    import pyspark

    return str(Path(pyspark.__file__).parent)


def cluster_env() -> dict[str, str]:
    """The environment for the cluster's processes and drivers."""
    env = dict(os.environ)
    env.update({"SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
                "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                "SPARK_NO_DAEMONIZE": "1"})
    return env


class LocalCluster:
    """A standalone master and ``workers`` workers, stopped (by process id) on exit.

    ``distinct_hosts``: worker ``i`` (and its executors) listens on ``127.0.0.{i + 2}``
    instead of 127.0.0.1, so Spark sees one host per worker (it never runs a speculative
    copy of a task on a host where an attempt of it already runs).
    """

    def __init__(self, workers: int = 1, cores: int = 2, memory: str = "2g",
                 timeout: float = 90.0, distinct_hosts: bool = False) -> None:
        self.workers, self.cores, self.memory, self.timeout = workers, cores, memory, timeout
        self.distinct_hosts = distinct_hosts
        self.dir = Path(tempfile.mkdtemp(prefix="alance-spark-cluster-"))
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []

    def worker_host(self, i: int) -> str:
        """The address worker ``i`` and its executors listen on."""
        return f"127.0.0.{i + 2}" if self.distinct_hosts else "127.0.0.1"

    def _start(self, name: str, *args: str, host: str = "127.0.0.1",
               ) -> subprocess.Popen[bytes]:
        log = open(self.dir / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process
        env = cluster_env()
        env["SPARK_LOCAL_IP"] = host
        proc = subprocess.Popen([str(Path(spark_home()) / "bin" / "spark-class"), *args],
                                stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def _wait_for(self, name: str, text: str) -> None:
        deadline = time.monotonic() + self.timeout
        path = self.dir / f"{name}.log"
        while time.monotonic() < deadline:
            if path.exists() and text in path.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Spark {name} did not start: {path.read_text(errors='replace')}")

    def start(self) -> LocalCluster:
        """Start the master, then the workers; returns once every worker has registered.
        Whatever was started is stopped again if starting fails (or is interrupted)."""
        try:
            return self._start_all()
        except BaseException:
            self.stop()
            raise

    def _start_all(self) -> LocalCluster:
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(_free_port()))
        self._wait_for("master", "I have been elected leader")
        for i in range(self.workers):
            work = self.dir / f"work{i}"
            work.mkdir()
            host = self.worker_host(i)
            self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                        "--host", host, "--cores", str(self.cores), "--memory",
                        self.memory, "--webui-port", str(_free_port()), "--work-dir",
                        str(work), host=host)
        for i in range(self.workers):
            self._wait_for(f"worker{i}", "Successfully registered with master")
        return self

    def executor_pids(self) -> list[int]:
        """Process ids of the executors the workers launched (children of the workers)."""
        workers = {p.pid for p in self.procs[1:]}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid in workers and b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(int(entry.name))
        return found

    def stop(self) -> None:
        """Stop the workers and the master (SIGTERM to each process group we started)."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
