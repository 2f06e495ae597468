"""Branch coverage of dkv and objectspace, held to a floor that only rises: neither package's
statement or branch coverage may fall below what ``scripts/coverage-floor.json`` records
(less a small tolerance, below).

    python scripts/coverage_floor.py run [pytest args]   # their suites under coverage (make test)
    python scripts/coverage_floor.py                     # check the last run against the floor (make test)
    python scripts/coverage_floor.py --update            # after adding tests: record the higher figures

``run`` runs ``pytest -m "not slow" tests/dkv tests/objectspace`` under coverage.py
(settings: pyproject.toml [tool.coverage]; data in build/coverage/) and prints the figures;
``make test`` then runs the rest of the suite without coverage, then the check. The floor is
for those two suites whole: pytest arguments given to ``run`` (files, ``-k``) replace them and
make figures to look at, not to check or record.

What is measured, and what is not: dkv and objectspace code that their own suites run, in
pytest's process and its threads. Subprocesses (the writer and kill tests' child processes,
the CLI tests' ``python -m``) are not measured. spark_ops is not measured: under coverage the
whole fast suite took about twice the CPU time (its harness tests run dkv and objectspace
code a great deal), which would take ``make test`` too near its 15 minutes.

``--update`` never lowers a figure: it refuses when the check fails (add the tests, or, if
code was deleted with its tests, say so in the commit and edit the file by hand) and keeps
the higher of the floor and the measured figure for each. Timing decides a few branches
(retries, races, background threads), so a figure may move a little between runs of the same
code: the check allows TOLERANCE percentage points below the floor. coverage.py's version is
pinned in pyproject.toml (dev extras): another version may count differently.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOOR = ROOT / "scripts" / "coverage-floor.json"
DATA = ROOT / "build" / "coverage"
PACKAGES = ("dkv", "objectspace")      # = [tool.coverage.run] source
SUITES = ("tests/dkv", "tests/objectspace")
FIGURES = ("statements", "branches")
TOLERANCE = 0.2         # percentage points


def measure() -> dict:
    """{package: {"statements": %, "branches": %}} from the last run's data."""
    out = DATA / "coverage.json"
    proc = subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", str(out)], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"coverage: no data to report (run `python scripts/coverage_floor.py run` first):\n"
                 f"{proc.stdout}{proc.stderr}")
    totals = {p: [0, 0, 0, 0] for p in PACKAGES}    # statements, covered, branches, covered
    for path, f in json.loads(out.read_text())["files"].items():
        t = totals.get(Path(path).parts[0])
        if t is not None:
            s = f["summary"]
            t[0] += s["num_statements"]
            t[1] += s["covered_lines"]
            t[2] += s["num_branches"]
            t[3] += s["covered_branches"]
    return {p: {"statements": _pct(t[1], t[0]), "branches": _pct(t[3], t[2])} for p, t in totals.items() if t[0]}


def _pct(covered: int, total: int) -> float:
    """Rounded down to hundredths, so a floor written from it is never above what was measured."""
    return math.floor(10000 * covered / total) / 100 if total else 100.0


def compare(floor: dict, now: dict) -> tuple[dict, dict]:
    """(worse, better): {(package, figure): (floor, now)} below floor - TOLERANCE, and above floor."""
    worse, better = {}, {}
    for p in sorted(set(floor) | set(now)):
        for fig in FIGURES:
            was, is_ = floor.get(p, {}).get(fig, 0.0), now.get(p, {}).get(fig, 0.0)
            if is_ < was - TOLERANCE:
                worse[p, fig] = (was, is_)
            elif is_ > was:
                better[p, fig] = (was, is_)
    return worse, better


def show(now: dict, what: str) -> None:
    print(f"coverage of {what} (statements run; branch outcomes taken, each way of a decision counted):")
    for p, f in sorted(now.items()):
        print(f"  {p:<12} statements {f['statements']:6.2f}%   branches {f['branches']:6.2f}%")


def check(update: bool) -> int:
    now = measure()
    floor = json.loads(FLOOR.read_text()) if FLOOR.exists() else {}
    worse, better = compare(floor, now)
    show(now, " and ".join(SUITES))
    if worse:
        print(f"coverage: below the floor ({FLOOR.relative_to(ROOT)}, less {TOLERANCE} points):")
        for (p, fig), (was, is_) in worse.items():
            print(f"  {p} {fig}: {was:.2f}% -> {is_:.2f}%")
        if update:
            print("coverage: --update does not lower the floor")
        return 1
    if update:
        new = {p: {fig: max(floor.get(p, {}).get(fig, 0.0), now.get(p, {}).get(fig, 0.0)) for fig in FIGURES}
               for p in sorted(set(floor) | set(now))}
        FLOOR.write_text(json.dumps(new, indent=1) + "\n")
        print(f"coverage: floor written; raised: {', '.join(f'{p} {fig}' for p, fig in better) or 'none'}")
        return 0
    note = (f"; above it: {', '.join(f'{p} {fig}' for p, fig in better)} (record them with "
            f"`python scripts/coverage_floor.py --update`)" if better else "")
    print(f"coverage: none below the floor{note}")
    return 0


def run(pytest_args: list[str]) -> int:
    subprocess.run([sys.executable, "-m", "coverage", "erase"], cwd=ROOT, check=True)
    proc = subprocess.run([sys.executable, "-m", "coverage", "run", "-m", "pytest", "-m", "not slow",
                           *(pytest_args or SUITES)], cwd=ROOT)
    if proc.returncode == 0:
        show(measure(), " ".join(pytest_args) + " (not the floor's run: not checked)" if pytest_args else
             " and ".join(SUITES))
    return proc.returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["run"]:
        return run(argv[1:])
    if argv not in ([], ["--update"]):
        sys.exit(__doc__)
    return check(update=argv == ["--update"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
