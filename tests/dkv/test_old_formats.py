"""Stores written by an earlier dkv (SST format 1, WAL format 2) still open, read, verify and
take new writes. The fixture golden/store-v1 was written by the dkv of commit 5e62afb
(golden/store-v1.json holds what its last checkpoint holds)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import dkv
from dkv.format import manifest as mf

GOLDEN = Path(__file__).parent / "golden"


def _old_store(tmp_path) -> tuple[str, dict]:
    path = tmp_path / "store"
    shutil.copytree(GOLDEN / "store-v1", path)
    model = {bytes.fromhex(k): bytes.fromhex(v) for k, v in json.loads((GOLDEN / "store-v1.json").read_text()).items()}
    return str(path), model


def test_the_fixture_is_in_the_old_formats():
    ssts = sorted((GOLDEN / "store-v1" / "sst").iterdir())
    wals = sorted((GOLDEN / "store-v1" / "wal").iterdir())
    assert ssts and wals
    assert all(p.read_bytes()[-16:-14] == b"\x01\x00" for p in ssts), "SST footers say version 1"
    assert all(p.read_bytes()[4] == 2 for p in wals), "WAL headers say version 2"


def test_an_old_store_reads_exactly(tmp_path):
    path, model = _old_store(tmp_path)
    with dkv.open(path, read_only=True) as db:
        assert dict(db.scan()) == model
        for k, v in model.items():
            assert db.get(k) == v
    report = dkv.verify(path)
    assert report["sst_files"] >= 1 and report["wal_segments"] >= 1


def test_an_old_store_takes_new_writes_and_compacts(tmp_path):
    path, model = _old_store(tmp_path)
    with dkv.open(path, memtable_bytes=2000, flush_segments=2, block_bytes=256, table_bytes=2500) as db:
        epoch = db.checkpoints()[-1].epoch
        for i in range(300):
            k = b"\x00\x01key%03d" % (i % 170)
            if i % 7 == 0:
                db.delete(k)
                model.pop(k, None)
            else:
                db.put(k, b"new%d" % i)
                model[k] = b"new%d" % i
            if i % 50 == 49:
                epoch += 1
                db.checkpoint(epoch).wait()
        db.compact(full=True)
        epoch += 1
        name = db.checkpoint(epoch).wait()
        assert dict(db.scan()) == model
    with dkv.open(path, read_only=True) as db:
        assert dict(db.scan()) == model
    m = mf.decode(Path(path, name).read_bytes())
    for t in m.tables():          # the compaction rewrote every old table in the new format
        assert Path(path, t.path).read_bytes()[-16:-14] == b"\x02\x00"
    dkv.verify(path)
