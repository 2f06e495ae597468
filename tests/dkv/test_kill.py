"""Killed processes: a child process writes to a local folder with background threads and
is killed (SIGKILL) at a random moment; the store then opens at a checkpoint at least as
new as the last one the child reported complete, with exactly that checkpoint's contents.
"""
from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import dkv
from .dkv_helpers import SMALL, contents

CHILD = textwrap.dedent("""
    import random, sys
    import dkv
    path, seed, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    opts = dict(memtable_bytes=2000, table_bytes=3000, block_bytes=256, l0_trigger=3,
                level_base_bytes=6000, level_ratio=3, retain=2, background=True)
    rng = random.Random(seed)
    db = dkv.open(path, **opts)
    start = db.checkpoints()[-1].epoch if db.checkpoints() else 0
    for epoch in range(start + 1, start + rounds + 1):
        for i in range(60):
            k = b"k%03d" % rng.randrange(120)
            if rng.random() < 0.8:
                db.put(k, b"%d-%d-%d" % (seed, epoch, i))
            else:
                db.delete(k)
        db.checkpoint(epoch, flush=epoch % 5 == 0).wait()
        print(epoch, flush=True)
""")


def _snapshots(seed: int, rounds: int, start: int = 0, base: dict | None = None) -> dict:
    """The child's contents at each epoch, recomputed from the same random sequence."""
    rng = random.Random(seed)
    model = dict(base or {})
    snaps = {start: dict(model)}
    for epoch in range(start + 1, start + rounds + 1):
        for i in range(60):
            k = b"k%03d" % rng.randrange(120)
            if rng.random() < 0.8:
                model[k] = b"%d-%d-%d" % (seed, epoch, i)
            else:
                model.pop(k, None)
        snaps[epoch] = dict(model)
    return snaps


def _run_and_kill(path: str, seed: int, rounds: int, kill_after: int, rng: random.Random) -> int:
    """Start the child, SIGKILL it after it reported ``kill_after`` checkpoints (plus a random
    delay); return the last epoch it reported complete (0 for none)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, path, str(seed), str(rounds)],
                            stdout=subprocess.PIPE, text=True)
    last = 0
    try:
        for _ in range(kill_after):
            line = proc.stdout.readline()
            if not line:
                break
            last = int(line)
        time.sleep(rng.random() * 0.05)
        proc.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=60)
        for line in rest.split():
            last = int(line)    # reported before the kill landed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return last


def _kill_and_recover(tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    path = str(tmp_path / "db")
    rounds = 12
    snaps = _snapshots(seed, rounds)
    reported = _run_and_kill(path, seed, rounds, rng.randrange(1, rounds), rng)
    with dkv.open(path, read_only=True, **SMALL) as db:
        cps = [c.epoch for c in db.checkpoints()]
        got = cps[-1] if cps else 0
        assert got >= reported, f"checkpoint {reported} completed, the store opened at {got}"
        assert contents(db) == snaps[got]
        for e in cps:
            with dkv.open(path, checkpoint=e, read_only=True, **SMALL) as old:
                assert contents(old) == snaps[e]
    # A new writer recovers there and goes on; a second kill leaves a consistent store again.
    snaps2 = _snapshots(seed + 1, 6, start=got, base=snaps[got])
    reported2 = _run_and_kill(path, seed + 1, 6, rng.randrange(1, 6), rng)
    with dkv.open(path, read_only=True, **SMALL) as db:
        got2 = db.checkpoints()[-1].epoch
        assert got2 >= max(reported2, got)
        assert contents(db) == snaps2[got2]


@pytest.mark.parametrize("seed", range(2))
def test_kill_during_background_work(tmp_path, seed):
    _kill_and_recover(tmp_path, seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 120))
def test_kill_during_background_work_long(tmp_path, seed):
    _kill_and_recover(tmp_path, seed)
