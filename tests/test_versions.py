"""One version for the three packages, found where docs/versions.md says, with a changelog
section and a row of format versions that match what the code writes and reads."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import dkv
import objectspace
import spark_ops
from dkv.format import manifest, sst, wal
from objectspace import _counts, _layout

ROOT = Path(__file__).resolve().parent.parent


def test_the_three_packages_have_one_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+", dkv.__version__)
    assert objectspace.__version__ == spark_ops.__version__ == dkv.__version__


def test_the_build_reads_the_version_from_dkv():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', text, re.M), "pyproject.toml must not set a version of its own"
    assert re.search(r'^version = \{ attr = "dkv.__version__" \}', text, re.M)
    expand = pytest.importorskip("setuptools.config.expand")
    assert expand.read_attr("dkv.__version__", root_dir=ROOT) == dkv.__version__    # what a build writes


def test_the_changelog_names_this_version_newest_first():
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert releases and releases[0] == dkv.__version__
    assert releases == sorted(releases, key=lambda v: tuple(map(int, v.split("."))), reverse=True)


def _row(version: str) -> list[str]:
    rows = [line for line in (ROOT / "docs" / "versions.md").read_text().splitlines()
            if re.match(r"\| \d+\.\d+\.\d+ \|", line)]
    assert rows and rows[0].startswith(f"| {version} |"), "the newest row of docs/versions.md is this version's"
    return [c.strip() for c in rows[0].strip("|").split("|")]


def _span(versions) -> str:
    lo, hi = min(versions), max(versions)
    return f"r {lo}" if lo == hi else f"r {lo}–{hi}"


def test_the_versions_page_says_what_this_version_writes_and_reads():
    _, man, table, log, objects, _spark = _row(dkv.__version__)
    assert man.startswith(f"w 2, or {manifest.VERSION} ") and man.endswith(_span(manifest.READS))
    assert table.startswith(f"w {sst.VERSION}, or {sst.STRIP_VERSION} ") and table.endswith(_span(sst.READABLE))
    assert log == f"w {wal.VERSION}; {_span(wal.READABLE)}"
    assert objects == (f"w {_layout.FORMAT_VERSION}, counts record {_counts.RECORD_VERSION}; "
                       f"{_span(range(1, _layout.FORMAT_VERSION + 1))}")
