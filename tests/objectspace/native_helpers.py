"""The store-level check of the C twins (RFC 0012): the same writes through the C path and
the Python path (``OBJECTSPACE_NATIVE=0``), each in a subprocess since the path is chosen at
import, make the same files byte for byte."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from dkv.format import manifest as mf

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _write(script: str, path: pathlib.Path, path_kind: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED="0",
               OBJECTSPACE_NATIVE="0" if path_kind == "python" else "1")
    subprocess.run([sys.executable, "-c", script, str(path), path_kind], check=True, env=env, timeout=300)


def _files(root: pathlib.Path) -> dict:
    """Every file's bytes; a manifest's with its wall-clock stamp (created_ms) zeroed, the
    one field two runs of the same writes differ in."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if p.suffix == ".manifest":
                m = mf.decode(data)
                m.created_ms = 0
                data = mf.encode(m)
            out[str(p.relative_to(root))] = data
    return out


def assert_same_store_on_both_paths(script: str, tmp_path: pathlib.Path) -> None:
    """Run ``script`` (argv: the store's folder, then ``c`` or ``python``) on each path and
    compare every file of the two stores (WAL segments and SSTs must be among them)."""
    _write(script, tmp_path / "c", "c")
    _write(script, tmp_path / "python", "python")
    c, p = _files(tmp_path / "c"), _files(tmp_path / "python")
    assert list(c) == list(p)
    assert any(name.endswith(".sst") for name in c) and any(name.endswith(".wal") for name in c)
    assert [name for name in c if c[name] != p[name]] == []
