"""mypy over the three packages, held to a ratchet: no file may have more errors than
``scripts/typecheck-baseline.json`` records, and a file not listed must have none.

    python scripts/typecheck.py            # check (make lint runs it; CI fails on a new error)
    python scripts/typecheck.py --update   # after fixing errors: record the lower counts

``--update`` refuses to raise a count: fix the new error, or, if it is mypy's mistake, say
so where it is (``# type: ignore[code]  # why``). mypy's version is pinned in pyproject.toml
(dev extras): another version counts differently. Settings: pyproject.toml [tool.mypy].
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "scripts" / "typecheck-baseline.json"
LINE = re.compile(r"^([\w/.]+\.py):\d+: error: ")


def run_mypy() -> tuple[Counter, str]:
    proc = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode not in (0, 1):       # 2: mypy itself failed (bad config, crash)
        sys.exit(f"typecheck: mypy failed to run (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    counts: Counter = Counter()
    for line in proc.stdout.splitlines():
        m = LINE.match(line)
        if m:
            counts[m.group(1)] += 1
    return counts, proc.stdout


def main(argv: list[str]) -> int:
    counts, output = run_mypy()
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {}
    worse = {f: (baseline.get(f, 0), n) for f, n in sorted(counts.items()) if n > baseline.get(f, 0)}
    better = {f: (n, counts.get(f, 0)) for f, n in sorted(baseline.items()) if counts.get(f, 0) < n}
    if "--update" in argv:
        if worse and baseline:
            print("typecheck: --update does not raise counts; new errors in:", ", ".join(worse))
            return 1
        BASELINE.write_text(json.dumps(dict(sorted(counts.items())), indent=1) + "\n")
        print(f"typecheck: baseline written: {sum(counts.values())} errors in {len(counts)} files")
        return 0
    if worse:
        new = [line for line in output.splitlines() if LINE.match(line) and LINE.match(line).group(1) in worse]
        print("typecheck: more mypy errors than the baseline allows:")
        for f, (was, now) in worse.items():
            print(f"  {f}: {was} -> {now}")
        print("\n".join(new))
        return 1
    total = sum(counts.values())
    note = (f"; {sum(a - b for a, b in better.values())} fewer than the baseline: record them with "
            f"`python scripts/typecheck.py --update`") if better else ""
    print(f"typecheck: {total} mypy errors, none new{note}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
