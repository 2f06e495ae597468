"""Checkpoint options: flush=True and wait_for_flushes make checkpoints that reference SSTs
instead of WAL segments (cheaper recovery, and no record uploaded twice)."""
import pytest

import dkv
from dkv.storage import LoggingStore, MemoryStore


def fill(db, model, n, start=0):
    for i in range(start, start + n):
        k, v = b"\x00\x01k%05d" % (i % 700), b"v%d" % i
        db.put(k, v)
        model[k] = v


@pytest.mark.parametrize("background", [False, True])
def test_wait_for_flushes_references_the_sst_and_uploads_no_wal_for_it(background):
    store = LoggingStore(MemoryStore())
    model = {}
    db = dkv.open(store, memtable_bytes=20_000, flush_segments=2, wait_for_flushes=True, background=background)
    fill(db, model, 120)                          # below the memtable size: WAL only
    db.checkpoint(1).wait()
    store.clear()
    fill(db, model, 400, start=120)               # seals the memtable mid-way: two segments, a flush
    cp = db.checkpoint(2)
    cp.wait()
    kinds = [c.kind + " " + c.key.split("/")[0] for c in store.calls if c.kind in ("put", "put_if_absent")]
    assert "put sst" in kinds
    with dkv.open(store.inner, read_only=True) as r:
        assert dict(r.scan()) == model
    # What the flush covered went out as an SST only: the WAL written holds just the rest.
    assert cp.records < 400
    db.close()


def test_without_the_option_the_checkpoint_does_not_wait():
    store = MemoryStore()
    model = {}
    db = dkv.open(store, memtable_bytes=20_000, background=False)
    fill(db, model, 520)
    db.checkpoint(1).wait()
    with dkv.open(store, read_only=True) as r:
        assert dict(r.scan()) == model
    db.close()
