"""Golden logs: the exact storage calls of a flush, a compaction, a checkpoint and an open.

Each scenario runs with fixed inputs and background=False through a LoggingStore; its
calls are rendered one per line and compared with ``tests/dkv/golden/<name>.txt``. The
files make the order of durable writes reviewable in a diff; the ordering rules they
show are also asserted explicitly below, so a regenerated file cannot hide a broken rule.

Regenerate after an intended change with ``DKV_UPDATE_GOLDEN=1 pytest tests/dkv/test_golden.py``
and review the diff.
"""
from __future__ import annotations

import difflib
import os
import random
import threading
from pathlib import Path

import pytest

import dkv
from dkv.storage import LoggingStore, MemoryStore
from .dkv_helpers import manifest_files, read_manifest

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("DKV_UPDATE_GOLDEN") == "1"


def render(calls) -> list[str]:
    """One line per call: kind, key, "(range)" for ranged reads, "!" when it reported False.
    Byte counts and offsets are left out: they depend on the zstd version, not on the order."""
    lines = []
    for c in calls:
        line = f"{c.kind} {c.key}"
        if c.range is not None:
            line += " (range)"
        if not c.ok:
            line += " !"
        lines.append(line)
    return lines


def check_golden(name: str, lines: list[str]) -> None:
    path = GOLDEN / f"{name}.txt"
    text = "\n".join(lines) + "\n"
    if UPDATE or not path.exists():
        if not UPDATE:
            pytest.fail(f"{path} is missing; create it with DKV_UPDATE_GOLDEN=1 and review it")
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
        return
    want = path.read_text()
    if want != text:
        diff = "\n".join(difflib.unified_diff(want.splitlines(), lines, f"golden/{name}.txt", "now", lineterm=""))
        pytest.fail(f"storage calls of '{name}' changed (DKV_UPDATE_GOLDEN=1 to accept):\n{diff}")


def _fill(db, n: int, start: int = 0, width: int = 20) -> None:
    for i in range(start, start + n):
        db.put(b"key%04d" % i, (b"value%04d" % i).ljust(width, b"."))


def _index(lines, pred) -> list[int]:
    return [i for i, line in enumerate(lines) if pred(line)]


def test_golden_flush():
    log = LoggingStore(MemoryStore())
    db = dkv.open(log, background=False, memtable_bytes=1 << 20, block_bytes=256)
    _fill(db, 40)
    log.clear()
    db.flush()
    lines = render(log.calls)
    check_golden("flush", lines)
    assert lines == ["put sst/0000000001-000000000001.sst"]   # one SST, nothing else durable


def test_golden_compaction():
    log = LoggingStore(MemoryStore())
    db = dkv.open(log, background=False, memtable_bytes=1500, flush_segments=1, block_bytes=512, table_bytes=2500,
                  l0_trigger=3, retain=1)
    _fill(db, 20)
    db.checkpoint(1).wait()
    log.clear()
    _fill(db, 40, start=20)       # two more flushes: three L0 tables trigger a compaction
    lines = render(log.calls)
    check_golden("compaction", lines)

    puts = _index(lines, lambda l: l.startswith("put sst/"))
    deletes = _index(lines, lambda l: l.startswith("delete "))
    assert len(puts) == 3 and deletes
    inputs = [lines[i].split()[1] for i in puts[:2]] + ["sst/0000000001-000000000001.sst"]
    # Outputs are written before any input is deleted, and inputs are read before.
    assert max(puts) < min(deletes)
    for name in inputs:
        assert any(l.startswith(f"get {name}") for l in lines[:puts[2]]), name
    # Checkpoint 1 is retained: nothing it references may go.
    kept = manifest_files(read_manifest(log.inner, db.checkpoints()[-1].name))
    for i in deletes:
        assert lines[i].split()[1] not in kept
    db.close()


def _scenario_writes(db):
    """Checkpoint 1 holds a segment too big to go inline (a WAL file), checkpoint 2 a
    flush; then 5 small changes, for checkpoint 3 (inline in its manifest, RFC 0007)."""
    rng = random.Random(7)
    for i in range(200):        # incompressible values: a segment of ~9 KB
        db.put(b"big%04d" % i, rng.randbytes(40))
    db.checkpoint(1).wait()
    _fill(db, 10, start=10)
    db.flush()
    db.checkpoint(2).wait()
    _fill(db, 5, start=20)


def _checkpoint_scenario():
    log = LoggingStore(MemoryStore())
    db = dkv.open(log, background=False, memtable_bytes=1 << 20, block_bytes=256, retain=2, inline_segment_bytes=4096)
    _scenario_writes(db)
    return log, db


def test_golden_checkpoint():
    log, db = _checkpoint_scenario()
    m1 = read_manifest(log.inner, db.checkpoints()[0].name)
    assert [r.inline for r in m1.wal] == [False], "checkpoint 1's segment is a file"
    log.clear()
    db.checkpoint(3).wait()
    lines = render(log.calls)
    check_golden("checkpoint", lines)

    wal = _index(lines, lambda l: l.startswith("put wal/"))
    fence = _index(lines, lambda l: l == "list writer/")
    create = _index(lines, lambda l: l.startswith("put_if_absent manifest/"))
    deletes = _index(lines, lambda l: l.startswith("delete "))
    # A small checkpoint is one object: its segment travels inside the manifest.
    assert not wal and len(create) == 1
    m3 = read_manifest(log.inner, db.checkpoints()[-1].name)
    assert [r.inline for r in m3.wal] == [True] and m3.wal[0].first == 3
    assert not _index(lines, lambda l: l.startswith("put sst/")), "a checkpoint never copies an SST"
    # The manifest, then the claims are listed (a newer claim made before the create
    # fences this writer), and only then garbage collection.
    assert any(create[0] < f < min(deletes) for f in fence), "claims listed after the create, before GC"
    # Manifests go before the files they reference.
    gone_manifests = [i for i in deletes if "manifest/" in lines[i]]
    gone_files = [i for i in deletes if "manifest/" not in lines[i]]
    assert gone_manifests and gone_files and max(gone_manifests) < min(gone_files)
    for i in gone_files:
        assert lines[i].split()[1] in manifest_files(m1)
    db.close()


def test_checkpoint_uploaded_by_its_waiter_makes_the_same_calls_in_the_same_order():
    """The notebook path: a small checkpoint waited for at once on a background store is
    uploaded on the caller's thread, garbage collection after it on the upload thread; the
    storage calls are those of golden/checkpoint.txt, in the same order."""
    log = LoggingStore(MemoryStore())
    db = dkv.open(log, memtable_bytes=1 << 20, block_bytes=256, retain=2, inline_segment_bytes=4096)
    _scenario_writes(db)
    db.wait_idle()
    log.clear()
    busy = threading.Event()
    db._uploader.submit(busy.wait)      # the upload thread is held up: the waiter uploads
    db.checkpoint(3).wait()
    busy.set()
    db.wait_idle()
    assert render(log.calls) == (GOLDEN / "checkpoint.txt").read_text().splitlines()
    db.close()


def test_golden_open():
    log, db = _checkpoint_scenario()
    db.checkpoint(3).wait()
    db.close()
    log.clear()
    db = dkv.open(log, background=False)
    lines = render(log.calls)
    check_golden("open", lines)
    assert not _index(lines, lambda l: "sst/" in l), "opening reads no SST (O(manifest))"
    claim = _index(lines, lambda l: l.startswith("put_if_absent writer/"))
    manifest_read = _index(lines, lambda l: l.startswith("get manifest/"))
    assert len(claim) == 1 and len(manifest_read) == 1 and manifest_read[0] < claim[0]
    # The first claim tried landed: no other writer came between, so the listing plus the
    # claim is the timeline, not listed again (RFC 0006).
    assert claim[0] == len(lines) - 1
    assert all(l.split()[0] in ("get", "list", "size", "put_if_absent") for l in lines)
    assert not _index(lines, lambda l: "wal/" in l), "the live segment is inline: no read of it"
    db.close()

    log.clear()
    with dkv.open(log, checkpoint=2, read_only=True):
        pass
    lines = render(log.calls)
    check_golden("open_read_only", lines)
    assert all(l.split()[0] in ("get", "list", "size") for l in lines), "a read-only open writes nothing"
