"""Two real writer processes on one local dkv store (issue 18): a writer that goes on after a
newer one opened the same store (a zombie) is fenced at its next checkpoint with a
FencedError that says what happened, and the store holds exactly what the newer writer
committed. The writers are real OS processes (writer_process.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import dkv
from .dkv_helpers import contents

HERE = Path(__file__).parent


def _start(store: Path, name: str, control: Path, seed: int) -> subprocess.Popen:
    out = open(control / f"{name}.out", "wb")
    try:
        return subprocess.Popen([sys.executable, "-m", "tests.dkv.writer_process", str(store), name, str(control),
                                 str(seed)], stdout=out, stderr=subprocess.STDOUT, cwd=str(HERE.parent.parent))
    finally:
        out.close()


def _output(control: Path, name: str) -> str:
    return (control / f"{name}.out").read_text(errors="replace")


def _wait_for(control: Path, name: str, proc: subprocess.Popen, commits: int) -> None:
    deadline = time.monotonic() + 120
    while _output(control, name).count("committed ") < commits:
        assert proc.poll() is None, f"writer {name} ended early:\n{_output(control, name)}"
        assert time.monotonic() < deadline, f"writer {name} made no progress:\n{_output(control, name)}"
        time.sleep(0.02)


def _load(path: Path) -> dict:
    return {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads(path.read_text()).items()}


def test_two_writer_processes_the_older_is_fenced(tmp_path):
    store, control = tmp_path / "db", tmp_path / "control"
    control.mkdir()
    a = _start(store, "A", control, 1)
    b = None
    try:
        _wait_for(control, "A", a, 3)
        b = _start(store, "B", control, 2)       # A keeps writing and checkpointing meanwhile
        _wait_for(control, "B", b, 3)
        rc_a = a.wait(120)                       # A's next checkpoint is fenced
        (control / "stop-B").touch()
        rc_b = b.wait(120)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
    out_a = _output(control, "A")
    assert rc_b == 0, _output(control, "B")
    assert rc_a == 3, out_a
    fenced = [line for line in out_a.splitlines() if line.startswith("FENCED ")]
    assert len(fenced) == 1, out_a
    assert "writer epoch 1 was fenced by writer epoch 2" in fenced[0]
    assert "this writer must stop (reopen to continue from the latest checkpoint)" in fenced[0]

    base_epoch = int(_output(control, "B").splitlines()[0].split()[-1])
    committed_a = [int(line.split()[1]) for line in out_a.splitlines() if line.startswith("committed ")]
    # A's fenced checkpoint stays only when its manifest was made before B opened, which
    # then started from it (A's create, B's claim and listing, A's listing of the claims):
    # A is told it is fenced and that the checkpoint stays.
    kept_a = [int(line.split()[1]) for line in out_a.splitlines() if line.startswith("kept ")]
    assert kept_a in ([], [base_epoch]), out_a
    if kept_a:
        assert "itself stays: the newer writer started from it" in fenced[0]
        committed_a += kept_a
    committed_b = [int(line.split()[1]) for line in _output(control, "B").splitlines() if line.startswith("committed ")]
    assert committed_a and committed_b[0] == base_epoch + 1 and committed_b == sorted(committed_b)
    if base_epoch in committed_a:       # B started from A's last checkpoint, as A committed it
        assert _load(control / "B.base.json") == _load(control / f"A.{base_epoch}.json")
    with dkv.open(str(store), read_only=True) as r:
        infos = r.checkpoints()
        assert contents(r) == _load(control / f"B.{committed_b[-1]}.json")
    # A committed nothing after B's claim; every checkpoint kept reads back as its writer left it
    assert [c.epoch for c in infos if c.writer == 2] == committed_b
    assert all(c.epoch <= base_epoch for c in infos if c.writer == 1)
    for c in infos:
        with dkv.open(str(store), checkpoint=c.epoch, read_only=True) as r:
            assert contents(r) == _load(control / f"{'A' if c.writer == 1 else 'B'}.{c.epoch}.json"), c
