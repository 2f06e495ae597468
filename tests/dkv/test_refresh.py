"""DB.refresh: catching up to checkpoints another writer of the same instance wrote."""
import random

import pytest

import dkv
from dkv.storage import MemoryStore


def fill(db, model, rng, n=50, keys=80, touched=None):
    for _ in range(n):
        k = b"\x00\x01k%03d" % rng.randrange(keys)
        if touched is not None:
            touched.add(k)
        if rng.random() < 0.2:
            db.delete(k)
            model.pop(k, None)
        else:
            v = b"v%d" % rng.randrange(10**6)
            db.put(k, v)
            model[k] = v


@pytest.mark.parametrize("background", [False, True])
def test_refresh_applies_only_the_other_writers_segments(background):
    store, rng, model = MemoryStore(), random.Random(1), {}
    a = dkv.open(store, background=background)
    fill(a, model, rng)
    a.checkpoint(1).wait()
    b = dkv.open(store, background=background)          # another worker takes the shard over
    touched = set()
    for e in (2, 3):
        fill(b, model, rng, touched=touched)
        b.checkpoint(e).wait()
    changed = a.refresh(3)
    assert changed is not None and set(changed) == touched
    assert dict(a.scan()) == model
    fill(a, model, rng)                                  # a is the writer again ...
    a.checkpoint(4).wait()
    with pytest.raises(dkv.FencedError):                 # ... and b is fenced
        b.put(b"\x00\x01zz", b"1")
        b.checkpoint(5).wait()
    b.close()
    a.close()
    with dkv.open(store, read_only=True) as r:
        assert dict(r.scan()) == model
        assert [c.epoch for c in r.checkpoints()] == [1, 2, 3, 4]


def test_refresh_declines_after_the_other_writer_flushed():
    store, rng, model = MemoryStore(), random.Random(2), {}
    a = dkv.open(store, background=False, memtable_bytes=2000)
    fill(a, model, rng, n=5)
    a.checkpoint(1).wait()
    b = dkv.open(store, background=False, memtable_bytes=2000, flush_segments=1)
    fill(b, model, rng, n=200)                           # b flushes: its SSTs differ from a's
    b.checkpoint(2).wait()
    assert a.refresh(2) is None
    a.close()
    b.close()


def test_refresh_declines_with_uncommitted_writes_and_rejects_bad_epochs():
    store = MemoryStore()
    a = dkv.open(store, background=False)
    a.put(b"\x00\x01a", b"1")
    a.checkpoint(1).wait()
    a.put(b"\x00\x01b", b"2")                            # not checkpointed
    assert a.refresh(5) is None
    a.checkpoint(2).wait()
    assert a.refresh(2) is None                           # not newer than what a has
    with pytest.raises(dkv.CheckpointNotFoundError):
        a.refresh(9)
    a.close()
    with pytest.raises(dkv.ClosedError):
        a.refresh(3)
