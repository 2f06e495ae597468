"""benchmarks/state_profile.py in its cProfile mode, small: it runs shard_scale's workload
(whose options it must keep up with), profiles the steady batches on every thread and folds
them into the components of its report."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import state_profile  # noqa: E402


def test_a_small_profile_and_its_report(tmp_path, capsys):
    out = tmp_path / "prof"
    assert state_profile.main(["--keys", "400", "--count", "5", "--batches", "4", "--warmup", "2",
                               "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert '"output_ok": true' in printed and '"steady_batches": 2' in printed
    assert (out / "main.pstats").is_file() and (out / "summary.json").is_file()
    assert state_profile.main(["--report", str(out)]) == 0
    report = capsys.readouterr().out
    for label, _ in state_profile.COMPONENTS:
        assert label in report
