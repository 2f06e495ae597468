"""Shared fixtures: a real S3-compatible server process and a real local Spark session."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pytest

S3_BUCKET = "objectspace-test"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """Handle on the moto server process: endpoint URL, bucket, and a way to make fresh prefixes."""

    def __init__(self, endpoint: str, bucket: str):
        self.endpoint = endpoint
        self.bucket = bucket

    def url(self, prefix: str | None = None) -> str:
        """An `s3://bucket/prefix` location that no other test uses."""
        return f"s3://{self.bucket}/{prefix or uuid.uuid4().hex}"

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")


@pytest.fixture(scope="session")
def s3_server():
    """moto's standalone S3 server as a subprocess on 127.0.0.1, spoken to over real HTTP."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=1).read()
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start; see {log.name}")
            time.sleep(0.1)
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": endpoint,
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    server = S3Server(endpoint, S3_BUCKET)
    server.client().create_bucket(Bucket=S3_BUCKET)
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _java_version() -> int | None:
    java = shutil.which("java", path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin") + os.pathsep + os.environ.get("PATH", ""))
    if not java:
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    for token in out.split('"')[1:2]:
        return int(token.split(".")[0])
    return None


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local[2] SparkSession for the whole test run (UI off, 2 shuffle partitions)."""
    version = _java_version()
    if version is None or version < 17:
        pytest.fail(f"Spark 4 needs Java 17+ (found {version}); run the tests through `make test`, "
                    "which installs a JDK into .venv when the machine has none")
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    base = tmp_path_factory.mktemp("spark")
    session = (
        SparkSession.builder.master("local[2]")
        .appName("objectspace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.sql.streaming.checkpointLocation", str(base / "checkpoints"))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
