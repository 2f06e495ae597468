"""The package builds, installs and passes its tests on a machine without a C compiler.

setup.py's two extensions (``dkv.format._native``, ``objectspace._native``: the C twins of
RFC 0012) are optional: a build that cannot compile them still makes the package, which
then runs its pure-Python reference path. ``OBJECTSPACE_NATIVE=0`` (``make test`` runs
tests/objectspace so) selects that path with the C modules present; this test checks the
other case, where they were never built: the sources (no built module) are made a wheel
with ``CC=false``, the wheel is unpacked beside a copy of the tests, and a slice of the
suite runs there: dkv against a dict and its golden storage logs, every collection against
its builtin twin and CPython's own collection suites, the formats' golden bytes, and the
operators against their models. The native twins' own tests skip there, as they say.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="CC=false stands for no compiler on POSIX only")
ROOT = Path(__file__).resolve().parent.parent
NATIVE_TESTS = "tests/objectspace/test_native_codec.py"
SLICE = ["tests/dkv/test_model.py", "tests/dkv/test_golden.py", "tests/objectspace/test_models.py",
         "tests/objectspace/test_golden.py", "tests/objectspace/test_format.py",
         "tests/objectspace/test_cpython_suites.py", NATIVE_TESTS,
         "tests/spark_ops/test_operators_model.py"]
_SKIP = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.egg-info", ".pytest_cache")


def _no_compiler_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OBJECTSPACE_NATIVE", "PYTHONPATH")}
    env.update(CC="false", CXX="false", LDSHARED="false")     # every compile and link fails
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The wheel built without a compiler, unpacked, with a copy of the tests beside it."""
    tmp = tmp_path_factory.mktemp("nocc")
    src = tmp / "src"
    for pkg in ("dkv", "objectspace", "spark_ops"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=_SKIP)
    for f in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / f, src / f)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                           "--disable-pip-version-check", "-v",
                           "-w", str(tmp / "wheel"), str(src)], env=_no_compiler_env(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    # setuptools says so for each optional extension it could not build
    for ext in ("dkv.format._native", "objectspace._native"):
        assert f'building extension "{ext}" failed' in out, out[-3000:]
    (wheel,) = (tmp / "wheel").glob("objectspace-*.whl")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        z.extractall(site)
    assert not [n for n in names if n.endswith((".so", ".pyd"))], names
    assert {"dkv/__init__.py", "objectspace/__init__.py", "spark_ops/__init__.py", "dkv/py.typed"} <= set(names)
    shutil.copytree(ROOT / "tests", site / "tests", ignore=_SKIP)
    shutil.copy(ROOT / "pyproject.toml", site / "pyproject.toml")     # pytest's settings and markers
    return site


# The checkout's own environment installs the project in editable mode: its import finder would
# find a module the wheel lacks (objectspace._native) in the checkout. A machine that installed
# the wheel has no such finder: the child drops it before anything is imported.
_NO_EDITABLE = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
                "if not getattr(f, '__module__', '').startswith('__editable__')]\n")


def _python(site: Path, code: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _NO_EDITABLE + code], cwd=site, env=_no_compiler_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_the_wheel_imports_without_its_c_modules(installed):
    probe = ("import importlib.util, dkv, objectspace, spark_ops\n"
             "from dkv import _reads\n"
             "from objectspace import space\n"
             "print(dkv.__file__)\n"
             "print(importlib.util.find_spec('dkv.format._native'), importlib.util.find_spec('objectspace._native'))\n"
             "print(_reads._GET, _reads._SCAN, space._RELOAD, space._SAVE)\n")
    proc = _python(installed, probe)
    assert proc.returncode == 0, proc.stderr
    where, specs, twins = proc.stdout.splitlines()
    assert where == str(installed / "dkv" / "__init__.py")       # the unpacked wheel, not the checkout
    assert specs == "None None"                                   # no C module anywhere on the path
    assert twins == "None None None None"                         # every read and save in Python


def test_a_slice_of_the_suite_passes_on_the_pure_python_path(installed):
    report = installed / "slice.xml"
    args = ["-q", "-p", "no:cacheprovider", "-m", "not slow and not spark", f"--junit-xml={report}", *SLICE]
    proc = _python(installed, f"import pytest\nsys.exit(pytest.main({args!r}))", timeout=1200)
    tail = proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    # every file of the slice ran tests there, not only skips; the C twin's own tests all
    # skipped, saying why
    ran: Counter = Counter()
    skipped: Counter = Counter()
    for case in ElementTree.parse(report).iter("testcase"):
        stem = case.get("classname", "").split(".")[2]
        (skipped if any(child.tag == "skipped" for child in case) else ran)[stem] += 1
    assert all(ran[Path(f).stem] for f in SLICE if f != NATIVE_TESTS), ran
    assert skipped[Path(NATIVE_TESTS).stem] and not ran[Path(NATIVE_TESTS).stem], (ran, skipped)
    assert "objectspace._native was not built (no compiler)" in proc.stdout, tail
