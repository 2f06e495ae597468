"""Checks of the C twins (RFC 0012) against their Python: ``Twin``, the same space twice in one
process, one through the C lookup, save path and eviction, one all Python; and the
store-level check, the same writes through the C path and the Python path
(``OBJECTSPACE_NATIVE=0``), each in a subprocess since the path is chosen at import, make the
same files byte for byte."""
from __future__ import annotations

import gc
import os
import pathlib
import subprocess
import sys
import uuid

import pytest

import dkv
from dkv.format import manifest as mf
from dkv import _reads as dkv_reads
from objectspace import ObjectSpace, _cache, _slots
from objectspace import space as space_mod


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


def _switches() -> tuple:
    return space_mod._RELOAD, space_mod._SAVE, _cache._EVICT, _slots._WALK, dkv_reads._SCAN


def _set_switches(values: tuple) -> None:
    space_mod._RELOAD, space_mod._SAVE, _cache._EVICT, _slots._WALK, dkv_reads._SCAN = values


class Twin:
    """The same space twice: [0] looked up, saved, evicted and walked through C, [1] through
    Python (``space._RELOAD``, ``space._SAVE``, ``_cache._EVICT``, ``_slots._WALK`` and dkv's
    ``_reads._SCAN`` flipped around each call).
    ``run(fn)`` calls ``fn`` on both and asserts the same outcome: ("ok", [the result's type
    name if ``typed``,] its name key or itself), or ("error", type, message)."""

    def __init__(self, label: str, typed: bool = True, **opts):
        self.opts, self.typed = opts, typed
        self.dbs = [dkv.open(f"memory://{label}-{uuid.uuid4().hex}") for _ in range(2)]
        self.spaces = [ObjectSpace(db, prefix=b"p/", **opts) for db in self.dbs]

    def run(self, fn):
        outs = []
        for i, sp in enumerate(self.spaces):
            saved = _switches()
            _set_switches(saved if i == 0 else (None,) * len(saved))
            try:
                r = fn(sp)
                outs.append(("ok", *((type(r).__name__,) if self.typed else ()), getattr(r, "_nkey", r)))
            except Exception as e:  # noqa: BLE001 - compared between the two
                outs.append(("error", type(e).__name__, str(e)))
            finally:
                _set_switches(saved)
        assert outs[0] == outs[1]
        return outs[0]

    def same(self):
        from .test_native_save import state     # (it imports this module)
        a, b = (state(sp) for sp in self.spaces)
        assert a == b
        assert list(self.spaces[0]._live.data) == list(self.spaces[1]._live.data)

    def save(self):
        for sp in self.spaces:
            b = sp.save()
            sp._db.write(b)
            sp.on_saved()

    def close(self):
        for sp in self.spaces:
            sp.close()
        for db in self.dbs:
            db.close()


@pytest.fixture(autouse=True)
def no_gc():
    """The differential tests compare the two paths step by step: no collection may run
    (and a weakref callback fire) in one and not the other. Autouse where imported."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()
