"""ObjectSpace.key_ranges and prefetch (issue 34, Restart): the store ranges that loading a
scope's objects reads, and reading them ahead at once. Every read that loading and
iterating an object of any kind makes lies inside its scope's ranges, and only its own;
after a prefetch on a store that is remote, loading those objects reads nothing more."""
from __future__ import annotations

import random

import pytest

import dkv
from objectspace import ObjectSpace
from .os_helpers import RecordingDB, commit, new_location, open_db

P = b"\x00\x07\x01"
KINDS = ("value", "queue", "list", "stack", "dict", "set", "sorted_dict", "sorted_set", "linked_list", "stream")


def _fill(space, scope: tuple) -> None:
    """One object of each kind, named ``scope + (kind,)``, with a few items."""
    for kind in KINDS:
        name = scope + (kind,)
        if kind == "value":
            space.create_value(name, {"n": scope[-1]})
        elif kind in ("dict", "sorted_dict"):
            getattr(space, f"create_{kind}")(name, {i: str(i) for i in range(30)})
        elif kind == "stream":
            st = space.create_stream(name)
            for i in range(1, 30):
                st.add({"i": i}, f"{i}-0")
        else:
            getattr(space, f"create_{kind}")(name, range(30))


def _inside(key: bytes, ranges) -> bool:
    return any(lo <= key and (hi is None or key < hi) for lo, hi in ranges)


@pytest.mark.parametrize("kind", KINDS)
def test_loading_reads_only_inside_its_scopes_ranges(kind):
    db = open_db(new_location())
    space = ObjectSpace(db, prefix=P)
    for user in (1, 10, 100):
        _fill(space, ("user", user))
    commit(space)
    rec = RecordingDB(db)
    cold = ObjectSpace(rec, prefix=P, cache_items=8)
    obj = cold.get(("user", 10, kind))
    items = list(obj.items()) if hasattr(obj, "items") and kind != "stream" else list(obj) if kind != "value" else [obj.value]
    assert items
    mine = cold.key_ranges([("user", 10)])
    others = cold.key_ranges([("user", 1), ("user", 100)])
    without_index = cold.key_ranges([("user", 10)], index=False)
    assert rec.reads
    for read in rec.reads:
        if read[0] == "get":
            assert _inside(read[1], mine) and not _inside(read[1], others), read
            if kind != "value":
                assert _inside(read[1], without_index), read
        else:
            start, end = read[1:] if read[0] == "scan" else (read[1], dkv.prefix_end(read[1]))
            assert _inside(start, mine) and not _inside(start, others), read
            assert end is not None and end <= max(hi for lo, hi in mine if lo <= start), read
    db.close()


def test_a_str_scope_covers_str_names_that_start_with_it():
    space = ObjectSpace(open_db(new_location()), prefix=P)
    (lo, hi), _ = space.key_ranges(["tmp-"])
    space.create_value("tmp-1", 1)
    space.create_value("other", 2)
    commit(space)
    keys = [k for k, _ in space.db.scan(P, dkv.prefix_end(P))]
    assert any(lo <= k < hi for k in keys) and not all(lo <= k < hi for k in keys)
    with pytest.raises(TypeError, match=r"a scope is a str \(a name's start\) or a tuple .*got 3"):
        space.key_ranges([3])


def test_after_a_prefetch_loading_the_objects_reads_nothing_from_the_remote_store():
    from tests.dkv.dkv_helpers import RemoteMemory
    store = RemoteMemory()
    db = dkv.open(store, table_bytes=64 * 1024, block_bytes=1024, max_replay_bytes=1)
    space = ObjectSpace(db, prefix=P)
    rng = random.Random(4)
    for user in range(400):
        space.create_queue(("user", user, "q"), (rng.random() for _ in range(20)))
        space.create_value(("user", user, "n"), user)
    space.checkpoint()
    db.close()
    db = dkv.open(store, read_only=True)
    space = ObjectSpace(db, prefix=P)
    users = rng.sample(range(400), 12)
    done = space.prefetch([("user", u) for u in users])
    assert done["requests"] > 0 and done["tables"] >= 2
    store.reads.clear()
    for u in users:
        assert len(space.get_queue(("user", u, "q"))) == 20 and space.get_value(("user", u, "n")).value == u
    assert store.table_reads() == []
    space.close()
