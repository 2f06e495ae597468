"""The object cache (objectspace/_cache.py): a byte budget over clean objects and their
items, shared by spaces; dirty objects are never dropped; dropped ones reload exactly."""
from __future__ import annotations

import datetime as dt
import gc
import tracemalloc

import pytest

import dkv
from objectspace import ObjectCache, ObjectSpace
from objectspace._cache import LEAST_HANDLE_BYTES

TS = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def _row(i, j):
    return {"user": "u%07d" % i, "ts": TS, "seq": i * 1000 + j}


def _fill(spaces, n_objects, items, start=0):
    for i in range(n_objects):
        q = spaces[i % len(spaces)].get_or_create_queue(("u%07d" % i, "items"))
        for j in range(start, start + items):
            q.append(_row(i, j))


def _commit(db, spaces, epoch):
    wb = dkv.WriteBatch()
    for sp in spaces:
        sp.save(batch=wb)
    db.write(wb)
    db.checkpoint(epoch).wait()
    for sp in spaces:
        sp.on_saved()


def test_a_small_budget_is_kept_and_what_it_dropped_reloads_exactly():
    db = dkv.open("memory://cache-budget", background=False)
    cache = ObjectCache(512 << 10)
    spaces = [ObjectSpace(db, prefix=bytes([0, kg, 0]), cache=cache) for kg in range(4)]
    for epoch in range(1, 6):
        _fill(spaces, 2000, 5, start=epoch * 5)
        _commit(db, spaces, epoch)
        assert cache.nbytes <= cache.budget, cache
    assert cache.evictions > 0, "2,000 queues of 25 rows do not fit in 512 KiB"
    for i in range(0, 2000, 97):
        q = spaces[i % 4].get_queue(("u%07d" % i, "items"))
        assert list(q) == [_row(i, j) for j in range(5, 30)]
    db.close()


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_drop_saved_keeps_no_items_after_a_save_and_they_read_back_exactly(native, monkeypatch):
    """ObjectCache.drop_saved: a roomy cache whose objects keep, after a save, none of their
    items (as under pressure: write-around), on the C save path and the Python one; the
    handles stay, and what was saved reads back exactly."""
    from objectspace import _cache as cache_mod, space as space_mod
    if not native:
        monkeypatch.setattr(space_mod, "_SAVE", None)
        monkeypatch.setattr(cache_mod, "_EVICT", None)
    db = dkv.open(f"memory://drop-saved-{native}", background=False)
    cache = ObjectCache(256 << 20)
    spaces = [ObjectSpace(db, prefix=bytes([0, kg, 0]), cache=cache) for kg in range(2)]
    _fill(spaces, 200, 5)
    _commit(db, spaces, 1)
    held = cache.nbytes
    assert not cache.pressed() and all(len(sp.get_queue(("u%07d" % i, "items"))._vals) == 5
                                       for i, sp in ((i, spaces[i % 2]) for i in range(200)))
    cache.drop_saved = True
    assert cache.pressed()
    _fill(spaces, 200, 5, start=5)
    _commit(db, spaces, 2)
    queues = [spaces[i % 2].get_queue(("u%07d" % i, "items")) for i in range(200)]
    assert all(len(q._vals) == 0 for q in queues), "a save under drop_saved keeps no items"
    assert cache.nbytes < held and cache.evictions == 0     # the handles stay
    assert list(queues[7]) == [_row(7, j) for j in range(10)]
    assert list(queues[7][i] for i in range(10)) == [_row(7, j) for j in range(10)]
    db.close()


def test_a_smaller_budget_drops_objects_at_once_and_they_reload_exactly():
    db = dkv.open("memory://cache-resize", background=False)
    cache = ObjectCache(8 << 20)
    spaces = [ObjectSpace(db, prefix=bytes([0, kg, 0]), cache=cache) for kg in range(2)]
    _fill(spaces, 1000, 3)
    _commit(db, spaces, 1)
    assert cache.evictions == 0 and len(cache) == 1000
    before = cache.nbytes
    cache.resize(before // 4)           # below what the handles alone take: items, then handles go
    assert cache.budget == before // 4 and cache.nbytes <= cache.budget * 4 // 5, cache
    assert 0 < cache.evictions and len(cache) < 1000
    cache.resize(64 << 20)              # larger: nothing is dropped, nothing comes back
    assert cache.budget == 64 << 20 and cache.nbytes <= before // 4
    for i in range(0, 1000, 37):
        assert list(spaces[i % 2].get_queue(("u%07d" % i, "items"))) == [_row(i, j) for j in range(3)]
    for bad in (-1, 1.5, "8m"):
        with pytest.raises(ValueError, match="cache_bytes must be an int >= 0"):
            cache.resize(bad)
    db.close()


def test_dirty_objects_are_never_dropped():
    db = dkv.open("memory://cache-dirty", background=False)
    cache = ObjectCache(1)                     # everything clean goes at once
    space = ObjectSpace(db, cache=cache)
    d = space.create_dict("d")
    d.update({f"k{i}": i for i in range(100)})
    space.get_or_create_queue("q").extend(range(50))
    cache.use(space.get_or_create_value("v"))   # pressure while d and q are dirty
    assert dict(d) == {f"k{i}": i for i in range(100)} and len(space.get_queue("q")) == 50
    space.checkpoint(1)
    assert cache.nbytes <= 1 or len(cache) <= 1
    assert dict(space.get_dict("d")) == {f"k{i}": i for i in range(100)}
    assert list(space.get_queue("q")) == list(range(50))
    db.close()


def test_the_estimate_follows_real_memory(tmp_path):
    """Python memory held by clean objects (tracemalloc) is within 2x of what the cache
    counts for them, for queues of rows, dicts and values."""
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    cache = ObjectCache(1 << 40)
    space = ObjectSpace(db, cache=cache)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(1500):
        q = space.get_or_create_queue(("q", i))
        q.extend(_row(i, j) for j in range(10))
        d = space.get_or_create_dict(("d", i))
        d.update({f"k{j}": {"ts": TS, "seq": j, "price": 1.5} for j in range(5)})
        space.get_or_create_value(("v", i)).value = _row(i, 0)
    space.checkpoint(1)
    db.flush()                                 # the records leave the memtable
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert 0.5 < cache.nbytes / used < 2.0, (cache.nbytes, used)
    db.close()


def test_budget_must_be_an_int():
    with pytest.raises(ValueError, match="cache_bytes"):
        ObjectCache(-1)
    with pytest.raises(ValueError, match="cache_bytes"):
        ObjectSpace(dkv.open("memory://cache-bad"), cache_bytes=1.5)


def test_spaces_give_back_what_their_objects_held_once_saved_and_dropped(tmp_path):
    """A host keeps many spaces whose objects pass through in turn: once a space's 20,000
    touched objects are saved and dropped by a small cache, the space holds no more than a
    small fraction of what it held for them (Python dicts do not shrink as entries leave;
    before the space copied them, ~1.2 MB stayed behind per 20,000 objects)."""
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    space = ObjectSpace(db, cache=ObjectCache(1 << 16))
    space.get_or_create_value("warm").value = 1
    space.checkpoint(1)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(20_000):
        space.get_or_create_queue(("q", i)).append(i)
    space.checkpoint(2)
    db.flush()                                 # the records leave the memtable
    gc.collect()
    left = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert left < 300_000, left
    assert [list(space.get_queue(("q", i))) for i in (0, 19_999)] == [[0], [19_999]]
    db.close()


def test_a_fenced_checkpoint_says_the_changes_cannot_follow(tmp_path):
    """Opening a store again in a notebook without closing the first space fences it: its
    checkpoint's error says the changes cannot go with a later checkpoint of this space."""
    first = ObjectSpace.open(str(tmp_path))
    first.get_or_create_queue("q").append(1)
    first.checkpoint()
    second = ObjectSpace.open(str(tmp_path))
    first.get_queue("q").append(2)
    with pytest.raises(dkv.FencedError) as info:
        first.checkpoint()
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "another writer opened this store" in notes and "next successful" not in notes
    assert list(second.get_queue("q")) == [1]
    second.close()


# Every way a list, queue, stack or array changes, each applied to a handle that was just
# loaded or whose items the cache just dropped (a clean handle shares one empty frozenset
# for its dirty and pending slots; its first change gives it its own sets).
_CHANGES = {
    "list": [lambda h, m: (h.append(7), m.append(7)), lambda h, m: h.__setitem__(0, "x") or m.__setitem__(0, "x"),
             lambda h, m: (h.insert(1, "i"), m.insert(1, "i")), lambda h, m: (h.pop(), m.pop()),
             lambda h, m: h.__delitem__(0) or m.__delitem__(0), lambda h, m: (h.reverse(), m.reverse()),
             lambda h, m: h.__setitem__(slice(0, 2), ["a", "b", "c"]) or m.__setitem__(slice(0, 2), ["a", "b", "c"]),
             lambda h, m: (h.sort(key=str), m.sort(key=str)), lambda h, m: (h.clear(), m.clear()),
             lambda h, m: (h.extend([1, 2, 3]), m.extend([1, 2, 3]))],
    "queue": [lambda h, m: (h.append(7), m.append(7)), lambda h, m: (h.appendleft(6), m.appendleft(6)),
              lambda h, m: (h.popleft(), m.popleft()), lambda h, m: (h.pop(), m.pop()),
              lambda h, m: h.__setitem__(1, "x") or m.__setitem__(1, "x"), lambda h, m: (h.insert(1, "i"), m.insert(1, "i")),
              lambda h, m: h.__delitem__(1) or m.__delitem__(1), lambda h, m: (h.reverse(), m.reverse()),
              lambda h, m: (h.rotate(2), m.rotate(2)), lambda h, m: (h.clear(), m.clear()),
              lambda h, m: (h.extend([1, 2, 3, 4]), m.extend([1, 2, 3, 4]))],
    "stack": [lambda h, m: (h.push(7), m.append(7)), lambda h, m: (h.pop(), m.pop()),
              lambda h, m: (h.extend([8, 9]), m.extend([8, 9])), lambda h, m: (h.clear(), m.clear()),
              lambda h, m: (h.push(1), m.append(1))],
    "array": [lambda h, m: h.__setitem__(0, "x") or m.__setitem__(0, "x"),
              lambda h, m: h.__setitem__(-1, 5) or m.__setitem__(-1, 5),
              lambda h, m: h.__setitem__(slice(1, 3), ["p", "q"]) or m.__setitem__(slice(1, 3), ["p", "q"])],
}


@pytest.mark.parametrize("kind", sorted(_CHANGES))
def test_a_clean_handle_holds_no_slot_sets_and_any_change_after_a_load_or_a_drop_is_saved(kind, tmp_path):
    from collections import deque

    from objectspace._slots import NO_SLOTS
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    space = ObjectSpace(db, cache=ObjectCache(1))       # every saved object's items are dropped
    start = [0, 1, 2, 3, 4]
    if kind == "array":
        h = space.create_array("a", 5)
        for i, v in enumerate(start):
            h[i] = v
    else:
        h = getattr(space, f"create_{kind}")("a", start)
    model = deque(start) if kind == "queue" else list(start)
    seen = (lambda m: list(reversed(m))) if kind == "stack" else list     # a stack iterates from the top
    epoch = 1
    space.checkpoint(epoch)
    for reload in (False, True):
        for change in _CHANGES[kind]:
            if reload:              # a handle loaded from the store
                space.close()
                space = ObjectSpace(db, cache=ObjectCache(1))
            h = getattr(space, f"get_{kind}")("a")
            assert h._dirty is NO_SLOTS and h._pending is NO_SLOTS, "a clean handle made its own sets"
            change(h, model)
            assert list(h) == seen(model)
            epoch += 1
            space.checkpoint(epoch)
            assert h._dirty is NO_SLOTS, "a saved handle whose items were dropped kept its sets"
            assert list(getattr(ObjectSpace(db), f"get_{kind}")("a")) == seen(model)
    db.close()


_MAKE = {
    "value": lambda sp, n: sp.create_value(n, {"a": 1}),
    "array": lambda sp, n: sp.create_array(n, 4, 0),
    "list": lambda sp, n: sp.create_list(n, [1, 2, 3]),
    "queue": lambda sp, n: sp.create_queue(n, [1, 2, 3]),
    "stack": lambda sp, n: sp.create_stack(n, [1, 2, 3]),
    "linked_list": lambda sp, n: sp.create_linked_list(n, [1, 2, 3]),
    "set": lambda sp, n: sp.create_set(n, {1, 2, 3}),
    "sorted_set": lambda sp, n: sp.create_sorted_set(n, {"a": 1.0, "b": 2.0}),
    "dict": lambda sp, n: sp.create_dict(n, {"a": 1, "b": 2}),
    "sorted_dict": lambda sp, n: sp.create_sorted_dict(n, {"a": 1, "b": 2}),
    "stream": lambda sp, n: sp.create_stream(n),
    "ndarray": lambda sp, n: sp.create_ndarray(n, (4, 4), "float64"),
}


def test_each_kind_counts_what_a_loaded_handle_holds(tmp_path):
    """A handle loaded from the store, its items not read: the cache's estimate is within
    25% of the Python memory it and its bookkeeping take (tracemalloc), for every kind.
    The store's own reads (decoded blocks) are warmed up first and not counted."""
    n = 500
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    space = ObjectSpace(db)
    for kind, make in _MAKE.items():
        for i in range(n):
            make(space, (kind, i))
    space.checkpoint(1)
    db.flush()
    ratios = {}
    for kind in _MAKE:
        warm = ObjectSpace(db, cache=ObjectCache(1 << 40))
        [getattr(warm, f"get_{kind}")((kind, i)) for i in range(n)]
        fresh = ObjectSpace(db, cache=ObjectCache(1 << 40))
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        handles = [getattr(fresh, f"get_{kind}")((kind, i)) for i in range(n)]
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - before - 8 * len(handles)
        tracemalloc.stop()
        ratios[kind] = round(fresh._cache.nbytes / used, 2)
    assert all(0.8 <= r <= 1.25 for r in ratios.values()), ratios
    db.close()


def test_no_handle_costs_less_than_handles_within_counts(tmp_path):
    """ObjectCache.handles_within(nbytes), "the most object handles a budget holds", is an
    upper bound: every kind's loaded handle costs the cache LEAST_HANDLE_BYTES or more, and
    the cheapest kind costs exactly that (a kind made cheaper must lower the figure)."""
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    space = ObjectSpace(db)
    for kind, make in _MAKE.items():
        make(space, (kind, 0))
    space.checkpoint(1)
    costs = {}
    for kind in _MAKE:
        cache = ObjectCache(1 << 40)
        getattr(ObjectSpace(db, cache=cache), f"get_{kind}")((kind, 0))
        costs[kind] = cache.nbytes
    assert min(costs.values()) == LEAST_HANDLE_BYTES, costs
    assert ObjectCache.handles_within(10 * LEAST_HANDLE_BYTES - 1) == 9
    assert ObjectCache(1 << 20).handles_within(0) == 0
    db.close()


def test_a_read_that_drops_items_inside_a_change_or_a_save_leaves_the_slot_sets_alone(tmp_path):
    """With cache_items=1 a read drops every other cached slot, even between a change's
    _touch and its marking of a slot (pop, popleft, rotate) or while a save is in flight: the
    object is listed then and must keep its own sets (the review of b229ee7 found both)."""
    db = dkv.open(str(tmp_path), background=False, fsync=False)

    def fresh():
        return ObjectSpace(db, cache_items=1, cache=ObjectCache(1 << 30))

    space = fresh()
    space.create_list("l", [0, 1, 2, 3])
    space.create_queue("q", [0, 1, 2, 3])
    space.create_stack("s", [0, 1, 2, 3])
    space.checkpoint(1)
    space = fresh()
    lst, q, st = space.get_list("l"), space.get_queue("q"), space.get_stack("s")
    lst[0]
    assert lst.pop() == 3
    q[3]
    assert q.popleft() == 0
    q[1]
    q.rotate(1)
    st.peek()
    assert st.pop() == 3
    assert (list(lst), list(q), list(st)) == ([0, 1, 2], [3, 1, 2], [2, 1, 0])
    lst.pop()                                   # a save in flight, then reads
    db.write(space.save())
    lst[0], lst[1]
    assert lst._listed and type(lst._dirty) is set
    lst[0] = "x"                                # changed again before the save is confirmed
    space.on_saved()
    space.checkpoint(3)
    again = ObjectSpace(db)
    assert (list(again.get_list("l")), list(again.get_queue("q")), list(again.get_stack("s"))) == \
        (["x", 1], [3, 1, 2], [2, 1, 0])
    db.close()


def test_a_reloaded_list_queue_stack_or_array_keeps_no_name_and_gives_it(tmp_path):
    """Handles loaded from the store of the kinds the C reload builds keep no name object
    (``_pname`` None: ~110 bytes of a Spark operator's handle); ``name``, ``repr`` and the
    messages decode it from the name's key, the same value and types as given."""
    names = ["q", ("u1", "items"), (b"\x00\xff", -5, 2 ** 70, "é\U0001f600"), ("x\x00y",)]
    db = dkv.open(str(tmp_path), background=False, fsync=False)
    space = ObjectSpace(db)
    for i, name in enumerate(names):
        for kind in ("list", "queue", "stack", "array"):
            _MAKE[kind](space, (kind, i) if kind != "queue" else name)
    space.checkpoint(1)
    fresh = ObjectSpace(db)
    for i, name in enumerate(names):
        q = fresh.get_queue(name)
        assert q._pname is None and q.name == name and type(q.name) is type(name)
        if isinstance(name, tuple):
            assert [type(p) for p in q.name] == [type(p) for p in name]
        assert repr(name) in repr(q)
        with pytest.raises(IndexError):
            q[10]
        for kind in ("list", "stack", "array"):
            obj = getattr(fresh, f"get_{kind}")((kind, i))
            assert obj._pname is None and obj.name == (kind, i)
    made = fresh.create_queue("new", [1])       # a handle made here keeps the name it was given
    assert made._pname == "new" and made.name == "new"
    db.close()
