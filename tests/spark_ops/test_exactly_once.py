"""Exactly once under SIGKILL: the streaming job (exactly_once_job.py) runs in a subprocess that
is killed — driver, JVM and Python workers together — at chosen and at random points, and is
restarted from the same checkpointLocation until the source is drained. The final output (one
file per batch id, replaced on re-run) must equal the models' exactly: nothing missing, nothing
duplicated; and every attempt that got as far as the sink wrote the same rows for its batch.
Each restart also changes the operator's partition count (2, 3, 1, 2, 4, 3, ...), so re-runs of
a killed batch run under a new shard layout."""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .models import SessionModel, bag_by_key, run_model
from .spark_helpers import at, random_events, read_sink, write_batch_files

pytestmark = [pytest.mark.spark, pytest.mark.slow]

HERE = Path(__file__).parent
GAP_MS, DELAY_MS = 1501, 500
PARTITIONS = [2, 3, 1, 2, 4, 3]
# "post" (after the operator's checkpoints, before Spark's commit) is planned in batches that
# emit rows (3, 5, 7 here): Spark does not run the stage after the operator's exchange when a
# batch emitted nothing at all, so a tap there would never fire.
PLAN = [["pre", 1], ["post", 3], ["sink-before", 3], ["sink-after", 4], ["post", 5], ["pre", 7], ["sink-after", 8]]


def _expected(batches):
    return run_model(SessionModel(["k"], GAP_MS), batches, keys=["k"], event_time="ts", delay_ms=DELAY_MS)


def _run_attempt(work: Path, rng: random.Random, kill_randomly: bool, log) -> int:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.Popen([sys.executable, "-m", "tests.spark_ops.exactly_once_job", str(work)],
                            cwd=str(HERE.parent.parent), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    runs = work / "out" / "runs.log"
    seen = runs.read_text().count("\n") if runs.exists() else 0
    deadline = time.monotonic() + 600
    kill_at = None
    while proc.poll() is None:
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("the job did not finish within 10 minutes")
        if kill_randomly and kill_at is None and runs.exists() and runs.read_text().count("\n") > seen:
            kill_at = time.monotonic() + rng.uniform(0.0, 2.5)   # somewhere in the following batch(es)
        if kill_at is not None and time.monotonic() >= kill_at:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            break
        time.sleep(0.05)
    try:            # whatever is left of the group (the job's own kill takes everyone)
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.returncode


def test_killed_and_restarted_query_outputs_every_batch_exactly_once(tmp_path):
    rng = random.Random(2024)
    batches = random_events(51, 9, keys="abcd", even=True) + [[{"k": "zz", "ts": at(10_000_000), "v": -1}], []]
    write_batch_files(tmp_path / "src", batches)
    (tmp_path / "plan.json").write_text(json.dumps(PLAN))
    kills, attempts = 0, 0
    with open(tmp_path / "job.log", "ab") as log:
        while True:
            attempts += 1
            assert attempts <= 20, "too many attempts"
            # every restart may rescale: the batch it re-runs then runs under another layout
            (tmp_path / "partitions").write_text(str(PARTITIONS[(attempts - 1) % len(PARTITIONS)]))
            rc = _run_attempt(tmp_path, rng, kill_randomly=attempts in (2, 5), log=log)
            if rc == 0:
                break
            assert rc == -signal.SIGKILL, f"job failed with {rc}; see {tmp_path / 'job.log'}:\n" + \
                (tmp_path / "job.log").read_text(errors="replace")[-3000:]
            kills += 1
    assert kills >= 5
    assert sorted(p.name for p in (tmp_path / "kills").iterdir()) == sorted(f"{p}-{b}" for p, b in PLAN)

    got = read_sink(tmp_path / "out")
    expected = _expected(batches)
    assert sorted(got) == list(range(len(batches))), "a batch id is missing"
    for b in range(len(batches)):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"
    assert sum(map(len, expected)) >= 5

    # batches killed after the sink ran were run again, with the same output
    runs = [int(x) for x in (tmp_path / "out" / "runs.log").read_text().split()]
    assert {4, 8} <= {b for b in runs if runs.count(b) > 1}
    for d in (tmp_path / "attempts").iterdir():
        b = int(d.name.split("-")[0])
        for bid, rows in read_sink(d).items():
            assert bid == b
            assert bag_by_key(rows, "k") == bag_by_key(expected[b], "k"), f"attempt {d.name}"


def _start_job(work: Path, log) -> subprocess.Popen:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return subprocess.Popen([sys.executable, "-m", "tests.spark_ops.exactly_once_job", str(work)],
                            cwd=str(HERE.parent.parent), env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def test_a_stale_driver_is_fenced_and_the_new_one_outputs_exactly_once(tmp_path):
    """Two real driver processes on one checkpoint and state: driver A stops in the middle of
    batch 4 (a paused, stale driver); driver B starts on the same checkpoint and state,
    re-runs batch 4 and drains the source; then A resumes. A's batch 4 fails with
    StaleRunError before it touches the state, and A's query stops; B's output is every
    batch exactly once."""
    batches = random_events(52, 8, keys="abcd", even=True) + [[{"k": "zz", "ts": at(10_000_000), "v": -1}], []]
    write_batch_files(tmp_path / "src", batches)
    (tmp_path / "plan.json").write_text(json.dumps([["stall", 4]]))
    stalled = tmp_path / "kills" / "stall-4"
    with open(tmp_path / "a.log", "ab") as log_a, open(tmp_path / "b.log", "ab") as log_b:
        a = _start_job(tmp_path, log_a)
        b = None
        try:
            deadline = time.monotonic() + 600
            while not stalled.exists():
                assert a.poll() is None, "driver A ended before batch 4:\n" + (tmp_path / "a.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "driver A did not reach batch 4 in 10 minutes"
                time.sleep(0.1)
            b = _start_job(tmp_path, log_b)
            assert b.wait(600) == 0, "driver B failed:\n" + (tmp_path / "b.log").read_text(errors="replace")[-3000:]
            (tmp_path / "release").touch()          # the stale driver resumes
            rc_a = a.wait(600)
        finally:
            _kill_group(a)
            if b is not None:
                _kill_group(b)
    text_a = (tmp_path / "a.log").read_text(errors="replace")
    assert rc_a != 0, "the stale driver went on:\n" + text_a[-3000:]
    assert "StaleRunError" in text_a and "of the streaming query is stale: a newer run" in text_a, text_a[-5000:]
    assert "stop this driver (the newer run continues)" in text_a

    got = read_sink(tmp_path / "out")
    expected = _expected(batches)
    assert sorted(got) == list(range(len(batches)))
    for bid in range(len(batches)):
        assert bag_by_key(got[bid], "k") == bag_by_key(expected[bid], "k"), f"batch {bid}"
    assert sum(map(len, expected)) >= 5
    # every batch reached the sink once: A for 0-3, B for 4 on; A's batch 4 never did
    runs = [int(x) for x in (tmp_path / "out" / "runs.log").read_text().split()]
    assert sorted(runs) == list(range(len(batches)))
    # both runs are registered in the operator's state, A's first
    registered = sorted((tmp_path / "state").glob("*/session_window/runs/*"))
    assert len(registered) == 2
