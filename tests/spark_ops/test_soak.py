"""benchmarks/soak.py run small (issue 18, section 3): a buffer query with its state on S3
(a moto server) through the fault proxy, with the driver, a Python worker and a shard host
SIGKILLed and the S3 endpoint stopped for a few seconds; the output must hold every buffer
exactly once."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.s3, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_small_soak(tmp_path):
    out = tmp_path / "figures.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "soak.py"), "--batches", "30", "--keys", "1000",
                           "--outage", "3", "--work", str(tmp_path / "work"), "--json", str(out)],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=1800)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    f = json.loads(out.read_text())
    assert f["ok"] and f["buffers_missing"] == 0 and f["buffers_twice"] == 0 and f["buffers_expected"] > 1000
    # one output per batch id; a restarted driver may plan two source files into one batch
    assert 15 <= f["batches_output"] <= 30
    assert all(f["kills"][k] >= 1 for k in ("driver", "worker", "host", "outage")), f["kills"]
    assert sum(f["faults"].values()) > 0
    assert f["retries"]["botocore"] + f["retries"]["ours"] > 0
    assert f["rss_mid"]["hosts"]["n"] >= 1 and f["rss_end"]["workers"]["n"] >= 1
    assert 0 < f["state_compacted"]["files"] <= f["state_end"]["files"]
    assert "every buffer exactly once" in proc.stdout
