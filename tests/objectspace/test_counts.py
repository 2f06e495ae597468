"""The counts record: objects and scopes kept by the saves, checked against a scan.

A reference model (the set of live names) drives random creations, deletions, re-creations
and renames of tuple names of mixed depth, with checkpoints, saves that are never
committed, saves written but never confirmed, reopens and crashes (a reopen from the last
checkpoint) in between; after each step the space's ``counts()`` must equal the names the
store holds, counted from scratch.
"""
from __future__ import annotations

import random

import msgpack
import pytest

import dkv
from objectspace import ObjectSpace
from objectspace import _counts
from objectspace import _layout as L
from objectspace.errors import CorruptionError

P = b"app/"


def truth(names) -> dict:
    names = list(names)
    scopes = {n[:-1] for n in names if type(n) is tuple and len(n) >= 2}
    return {"objects": len(names), "scopes": len(scopes)}


def stored_names(db) -> list:
    return list(ObjectSpace(db, prefix=P).names())


def test_counts_of_a_new_space_are_zero_and_it_writes_no_record(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        assert sp.counts() == {"objects": 0, "scopes": 0}
        sp.checkpoint()
        assert sp.db.get(_counts.key(sp.prefix)) is None


def test_counts_follow_creations_deletions_and_scopes(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        sp.create_queue(("u1", "items"))
        sp.create_value(("u1", "gap"), 0)
        sp.create_dict(("u2", "seen"))
        sp.create_value("plain", 1)             # a str name has no scope
        sp.create_list(("u1", "a", "deep"))     # scope ("u1", "a"), not ("u1",)
        assert sp.counts() == {"objects": 0, "scopes": 0}       # unsaved creations are not counted
        sp.checkpoint()
        assert sp.counts() == {"objects": 5, "scopes": 3}
        sp.delete(("u1", "items"))
        sp.checkpoint()
        assert sp.counts() == {"objects": 4, "scopes": 3}       # ("u1",) still has "gap"
        sp.delete(("u1", "gap"))
        sp.checkpoint()
        assert sp.counts() == {"objects": 3, "scopes": 2}       # ("u1", "a") keeps its own scope
        sp.rename(("u2", "seen"), ("u3", "seen"))
        assert sp.counts() == {"objects": 3, "scopes": 2}
        sp.checkpoint()
    with ObjectSpace.open(str(tmp_path / "s"), read_only=True) as again:
        assert again.counts() == {"objects": 3, "scopes": 2}
        assert truth(again.names()) == again.counts()


def test_the_record_goes_when_the_space_is_empty_again(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        sp.create_value(("k", "v"), 1)
        sp.checkpoint()
        assert msgpack.unpackb(sp.db.get(_counts.key(sp.prefix))) == [1, 1, 1]
        sp.delete(("k", "v"))
        sp.checkpoint()
        assert sp.db.get(_counts.key(sp.prefix)) is None
        assert sp.counts() == {"objects": 0, "scopes": 0}


def test_a_store_without_the_record_is_counted_by_a_scan_and_gets_it_with_its_next_write(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        for i in range(5):
            sp.create_value((f"k{i % 3}", f"v{i}"), i)
        sp.checkpoint()
        # as a store written before the counts record existed
        sp.db.delete(_counts.key(sp.prefix))
        sp.db.checkpoint().wait()
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        assert sp.counts() == {"objects": 5, "scopes": 3}
        sp.checkpoint()             # nothing changed: nothing written, not even the record
        assert sp.db.get(_counts.key(sp.prefix)) is None
        sp.get_value(("k0", "v0")).value = 10
        sp.checkpoint()             # a write: the record comes with it
        assert msgpack.unpackb(sp.db.get(_counts.key(sp.prefix))) == [1, 5, 3]


def test_a_damaged_record_is_corruption_not_a_count(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        sp.create_value(("k", "v"), 1)
        sp.checkpoint()
        sp.db.put(_counts.key(sp.prefix), msgpack.packb([1, 1, 5]))     # more scopes than objects
        sp.db.checkpoint().wait()
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        with pytest.raises(CorruptionError, match="counts record"):
            sp.counts()


def _random_name(rng):
    k = f"k{rng.randrange(6)}"
    shape = rng.random()
    if shape < 0.1:
        return f"s{rng.randrange(4)}"                       # no scope
    if shape < 0.25:
        return (k, f"sub{rng.randrange(2)}", f"v{rng.randrange(3)}")     # a deeper scope
    return (k, f"v{rng.randrange(4)}")


@pytest.mark.parametrize("walk", [0, _counts.WALK_FACTOR, 10**9], ids=["probes", "default", "walks"])
@pytest.mark.parametrize("seed", range(8))
def test_counts_match_a_scan_through_failures_reopens_and_crashes(tmp_path, seed, walk, monkeypatch):
    """With a range scan per scope (probes), one scan of the index (walks), or the choice."""
    monkeypatch.setattr(_counts, "WALK_FACTOR", walk)
    rng = random.Random(seed)
    path = str(tmp_path / "s")
    db = dkv.open(path)
    sp = ObjectSpace(db, prefix=P)
    live: set = set()           # the model: names after the last confirmed save
    pending: set = set()        # names as the space holds them now
    durable: set = set()        # names as of the last checkpoint
    epoch = 0
    for step in range(160):
        op = rng.random()
        name = _random_name(rng)
        if op < 0.45:
            if name not in pending:
                sp.create_value(name, step)
                pending.add(name)
            else:
                sp.get_value(name).value = step
        elif op < 0.65:
            if name in pending:
                sp.delete(name)
                pending.discard(name)
        elif op < 0.72:
            # a rename needs both names without unsaved changes: on a clean space only
            new = _random_name(rng)
            if not sp.dirty and name in pending and new not in pending:
                sp.rename(name, new)
                pending.discard(name)
                pending.add(new)
                live = set(pending)         # a rename writes at once (durable at the next checkpoint)
        elif op < 0.80:
            sp.save()                       # never written: the next save carries it again
        elif op < 0.86:
            batch = sp.save()               # written, never confirmed
            db.write(batch)
        elif op < 0.95:
            epoch += 1
            sp.checkpoint(epoch)
            live, durable = set(pending), set(pending)
        elif epoch:
            # a crash: what the last checkpoint did not cover is gone; reopen from it
            db.close()
            db = dkv.open(path, checkpoint=epoch)
            sp = ObjectSpace(db, prefix=P)
            live, pending = set(durable), set(durable)
        if not sp.dirty:
            assert sp.counts() == truth(live) == truth(stored_names(db)), (seed, step)
    epoch += 1
    sp.checkpoint(epoch)
    assert sp.counts() == truth(pending) == truth(stored_names(db))
    assert _counts.scan(db, P) == tuple(truth(pending).values())
    objects, scopes, recorded = _counts.stored(db, P)
    assert (objects, scopes) == tuple(truth(pending).values()) and (recorded or not pending)
    db.close()


def test_counts_record_sits_outside_the_index_and_the_objects(tmp_path):
    """Listing, loading and deleting objects never meet the record (P 02 sorts after P 01)."""
    assert L.COUNTS > L.OBJECTS > L.INDEX
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        sp.create_value(("k", "v"), 1)
        sp.checkpoint()
        assert list(sp.names()) == [("k", "v")]
        sp.delete(("k", "v"))
        sp.create_value(("k", "w"), 2)
        sp.checkpoint()
        assert list(sp.names()) == [("k", "w")] and sp.counts() == {"objects": 1, "scopes": 1}
