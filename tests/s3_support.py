"""A moto S3 server process and the fault proxy, for the tests (tests/conftest.py) and for the
soak (benchmarks/soak.py), which imports it as ``tests.s3_support``."""
from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto(log_path: str | None = None, timeout: float = 30) -> tuple[subprocess.Popen, str]:
    """moto's standalone S3 server as a subprocess on a free 127.0.0.1 port, once it answers;
    returns the process and its endpoint URL."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(log_path, "ab") if log_path else tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=1).read()
            return proc, endpoint
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server did not start; see {log.name}") from None
            time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def fault_proxy_class():
    """tests/dkv/s3_fault_proxy.py's FaultProxy."""
    from .dkv.s3_fault_proxy import FaultProxy
    return FaultProxy
