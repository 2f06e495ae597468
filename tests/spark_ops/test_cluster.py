"""One streaming query on a Spark standalone cluster started from the installed PySpark (a master
and two workers on 127.0.0.1, small memory), with operator state in S3 (the moto server), against
the model. The pip PySpark has no sbin/start-master.sh, so the daemons run as
``bin/spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`` subprocesses."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .models import SessionModel, bag_by_key, run_model
from .spark_helpers import at, random_events, read_sink, write_batch_files

# Not marked slow: it runs in ~40 s, and the issue asks for one cluster run in CI when it
# takes under a few minutes.
pytestmark = [pytest.mark.spark, pytest.mark.s3]

HERE = Path(__file__).parent
GAP_MS, DELAY_MS = 1501, 500


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


class Cluster:
    """A master and ``workers`` workers, each in its own process group (stopped with SIGTERM, then KILL)."""

    def __init__(self, tmp: Path, workers: int = 2):
        self.tmp, self.procs = tmp, []
        self.port, self.ui = _port(), _port()
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(tmp / "logs"),
                        SPARK_WORKER_DIR=str(tmp / "work"), PYSPARK_PYTHON=sys.executable)
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                    str(self.port), "--webui-port", str(self.ui))
        for i in range(workers):
            self._start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                        "--cores", "1", "--memory", "1g", "--webui-port", str(_port()),
                        "--work-dir", str(tmp / f"work{i}"), self.url)
        self._wait_for_workers(workers)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name, cls, *args):
        log = open(self.tmp / f"{name}.log", "wb")
        self.procs.append(subprocess.Popen([_spark_class(), cls, *args], env=self.env, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True))

    def _wait_for_workers(self, n: int, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                state = json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2))
                if state.get("aliveworkers", 0) >= n:
                    return
            except OSError:
                pass
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(1)
        raise AssertionError(f"the cluster did not come up with {n} workers; logs in {self.tmp}")

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        for p in reversed(self.procs):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_streaming_query_on_a_standalone_cluster_with_state_in_s3(s3_server, tmp_path):
    batches = random_events(61, 5, keys="abcd", even=True) + [[{"k": "zz", "ts": at(10_000_000), "v": -1}], []]
    write_batch_files(tmp_path / "src", batches)
    state = s3_server.url()
    cluster = Cluster(tmp_path)
    try:
        job = subprocess.run([sys.executable, "-m", "tests.spark_ops.cluster_job", cluster.url, str(tmp_path),
                              s3_server.endpoint, state], cwd=str(HERE.parent.parent), capture_output=True,
                             text=True, timeout=600, env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
        assert job.returncode == 0, job.stdout[-2000:] + job.stderr[-4000:]
    finally:
        cluster.stop()
    got = read_sink(tmp_path / "out")
    expected = run_model(SessionModel(["k"], GAP_MS), batches, keys=["k"], event_time="ts", delay_ms=DELAY_MS)
    assert sorted(got) == list(range(len(batches)))
    assert sum(map(len, expected)) > 0
    for b in range(len(batches)):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"
    tasks = json.loads((tmp_path / "executors.json").read_text())
    ran = {e: n for e, n in tasks.items() if e != "driver" and n > 0}
    assert len(ran) == 2, tasks                     # both workers' executors ran shards
    prefix = state.split("/", 3)[3] + "/"
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=prefix)
            .get("Contents", [])]
    assert any("/session_window/L000000000000-n00002/p00001/manifest/" in k for k in keys)
