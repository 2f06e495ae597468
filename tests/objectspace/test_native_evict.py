"""The C twin of ``ObjectCache._evict`` (``objectspace._native.evict``, RFC 0012 step 3) against
its Python, the reference: the same random operations on two spaces in one process, one
with the C lookup, save path and eviction, the other all Python (``space._RELOAD``,
``space._SAVE`` and ``_cache._EVICT`` flipped around each call), over many objects of every
kind under small budgets and count limits (so lookups, saves and the budget changes made
here evict often), with dirty, dead and item-holding objects in the LRU; after each step
every live object's state and the cache's (LRU and heavy order, costs, ``nbytes``,
``evictions``) compared. Objects of other kinds, patched hooks, spaces with ``inplace``,
a subclassed cache, attributes of other types and a broken cost map go to Python, and end
the same."""
from __future__ import annotations

import random
import uuid

import pytest

import dkv
from objectspace import ObjectSpace, _cache, _savepath
from objectspace import space as space_mod
from objectspace._cache import ObjectCache
from objectspace._queue import PersistedQueue

from .native_helpers import Twin, no_gc  # noqa: F401 - an autouse fixture

native = _savepath.native
pytestmark = pytest.mark.skipif(_cache._EVICT is None or space_mod._RELOAD is None,
                                reason="objectspace._native was not built (no compiler), or OBJECTSPACE_NATIVE=0")


KINDS = ["queue", "queue", "bqueue", "list", "stack", "array", "dict", "value", "set"]


def _name(rng):
    i = rng.randrange(30)
    return ("o", i), KINDS[i % len(KINDS)]


def _get(sp, name, kind):
    if kind == "array":
        return sp.get_or_create_array(name, 4, fill=0)
    if kind == "value":
        return sp.get_or_create_value(name, 0)
    if kind == "bqueue":
        return sp.get_or_create_queue(name, maxlen=6)
    return getattr(sp, f"get_or_create_{kind}")(name)


def _write(obj, kind, v):
    if kind in ("queue", "bqueue", "list"):
        obj.append(v)
    elif kind == "stack":
        obj.push(v)
    elif kind == "array":
        obj[v % 4] = v
    elif kind == "dict":
        obj[str(v % 5)] = v
    elif kind == "set":
        obj.add(v % 7)
    else:
        obj.value = v


def _read(obj, kind):
    if kind in ("queue", "bqueue", "list", "stack", "array"):
        return list(obj)
    if kind == "dict":
        return sorted(obj.items())
    if kind == "set":
        return sorted(obj)
    return obj.value


def op(tw, rng):
    name, kind = _name(rng)
    r = rng.random()
    if r < 0.3:
        tw.run(lambda sp: _get(sp, name, kind))
    elif r < 0.55:
        v = rng.randrange(1000)
        tw.run(lambda sp: _write(_get(sp, name, kind), kind, v))
    elif r < 0.7:
        tw.run(lambda sp: _read(_get(sp, name, kind), kind))        # loads items: heavy objects
    elif r < 0.74:
        tw.run(lambda sp: sp.delete(name))
    elif r < 0.8:
        budget, cap = rng.choice([500, 2000, 5000, 20000]), rng.choice([None, None, 2, 5, 12])

        def squeeze(sp):        # an eviction under another budget, then the space's own again
            cache = sp._cache
            was = cache.budget, cache.max_objects
            cache.budget, cache.max_objects = budget, cap
            try:
                cache._evict()
            finally:
                cache.budget, cache.max_objects = was
        tw.run(squeeze)
    elif r < 0.83:
        def pop(sp):
            obj = _get(sp, name, kind)
            if kind in ("queue", "bqueue") and len(obj):
                return obj.popleft()
            return None
        tw.run(pop)
    else:
        tw.save()


CONFIGS = {"pressed": dict(cache_bytes=4000, cache_items=4), "few-objects": dict(cache_bytes=1 << 20, cache_objects=3),
           "tiny": dict(cache_bytes=300, cache_items=2), "inplace": dict(cache_bytes=3000, inplace="save")}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3))
def test_random_evictions_are_the_same_on_both_paths(config, seed):
    rng = random.Random(seed * 31 + len(config))
    tw = Twin("native-evict", False, **CONFIGS[config])
    try:
        for _ in range(400):
            op(tw, rng)
            tw.same()
        tw.save()
        tw.same()
        assert tw.spaces[0]._cache.evictions > 0
    finally:
        tw.close()


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3, 15))
def test_long_random_evictions_are_the_same_on_both_paths(config, seed):
    rng = random.Random(seed * 31 + len(config))
    tw = Twin("native-evict", False, **CONFIGS[config])
    try:
        for _ in range(2500):
            op(tw, rng)
            tw.same()
    finally:
        tw.close()


def _filled(**opts):
    tw = Twin("native-evict", False, **dict(dict(cache_bytes=1 << 20), **opts))
    rng = random.Random(5)
    for i in range(40):
        name, kind = ("o", i), KINDS[i % len(KINDS)]
        for v in range(rng.randrange(1, 5)):
            tw.run(lambda sp: _write(_get(sp, name, kind), kind, v))
    tw.save()
    for i in range(0, 40, 3):                   # dirty again: listed, in the LRU
        name, kind = ("o", i), KINDS[i % len(KINDS)]
        tw.run(lambda sp: _write(_get(sp, name, kind), kind, 99))
    tw.same()
    return tw


def _squeeze(tw, budget, cap=None):
    def squeeze(sp):
        sp._cache.budget, sp._cache.max_objects = budget, cap
        sp._cache._evict()
    return tw.run(squeeze)


def test_evicting_with_dirty_handles_in_the_lru():
    tw = _filled()
    try:
        assert any(o._listed for o in tw.spaces[0]._cache._lru.values())
        for budget, cap in [(30000, None), (20000, 25), (8000, None), (1000, 4), (0, None)]:
            _squeeze(tw, budget, cap)
            tw.same()
        assert all(o._listed for o in tw.spaces[0]._cache._lru.values())     # only the dirty ones stay
    finally:
        tw.close()


def test_a_patched_evict_clean_is_called_in_its_place(monkeypatch):
    tw = _filled()
    try:
        calls = []
        orig = PersistedQueue._evict_clean
        monkeypatch.setattr(PersistedQueue, "_evict_clean", lambda self: calls.append(self._nkey) or orig(self))
        seen = []
        for sp in tw.spaces:
            calls.clear()
            saved = _cache._EVICT
            _cache._EVICT = saved if sp is tw.spaces[0] else None
            try:
                sp._cache.budget = 3000
                sp._cache._evict()
            finally:
                _cache._EVICT = saved
            seen.append(list(calls))
        assert seen[0] == seen[1] and seen[0]
        tw.same()
    finally:
        tw.close()


def test_a_subclassed_cache_or_odd_attributes_go_to_python():
    class Cache(ObjectCache):
        pass
    assert native.evict(Cache(1000)) is False
    c = ObjectCache(1000)
    assert native.evict(c) is True         # nothing to evict: done
    for attr, v in [("nbytes", 1.5), ("budget", None), ("max_objects", "x"), ("_lru", {}), ("_cost", [])]:
        c2 = ObjectCache(1000)
        setattr(c2, attr, v)
        assert native.evict(c2) is False, attr
    c3 = ObjectCache(1000)
    del c3._heavy
    assert native.evict(c3) is False


@pytest.mark.parametrize("broken", ["cost", "heavy-cost", "nbytes-float", "no-evictions", "listed-missing"])
def test_errors_and_odd_values_are_pythons(broken):
    tw = _filled()
    try:
        def breaking(sp):
            cache = sp._cache
            keys = list(cache._lru)
            gone = None
            if broken == "cost":
                gone = keys[2]
            elif broken == "heavy-cost":
                gone = next(iter(cache._heavy))
            if gone is not None:
                del cache._cost[gone]
            elif broken == "nbytes-float":
                cache.nbytes = float(cache.nbytes)
            elif broken == "no-evictions":
                del cache.evictions
            else:
                obj = cache._lru[keys[1]]
                cache._lru[keys[1]] = type("Odd", (), {"_dead": False})()     # no _listed
                cache._lru.move_to_end(keys[1], last=False)
                del obj
            cache.budget = 2000
            try:
                cache._evict()
            except KeyError as e:       # (the key is an id(): it differs between the spaces)
                return "KeyError", e.args == (gone,)
        out = tw.run(breaking)          # (the same outcome on both paths)
        if broken in ("cost", "heavy-cost"):
            assert out == ("ok", ("KeyError", True))
        elif broken == "no-evictions":
            assert out[:2] == ("error", "AttributeError")
        for sp in tw.spaces:                # (a key the error left without a cost: compared as -1)
            for k in sp._cache._lru:
                sp._cache._cost.setdefault(k, -1)
            if broken == "listed-missing":
                sp._cache._lru = type(sp._cache._lru)((k, o) for k, o in sp._cache._lru.items() if hasattr(o, "_nkey"))
            if broken == "no-evictions":
                sp._cache.evictions = None
        tw.same()
    finally:
        for sp in tw.spaces:
            sp._closed = True
        for db in tw.dbs:
            db.close()


# Python code that runs inside an eviction (found in review): a stored value's finalizer that
# writes to its own queue while the cached items are cleared, and a user's weakref callback
# on a handle that looks another object up while the loop runs. Each scenario runs through C
# and through Python; the two must end alike.

def _paths(scenario):
    outs = []
    for c_path in (True, False):
        saved = space_mod._RELOAD, space_mod._SAVE, _cache._EVICT
        if not c_path:
            space_mod._RELOAD, space_mod._SAVE, _cache._EVICT = None, None, None
        try:
            outs.append(scenario())
        finally:
            space_mod._RELOAD, space_mod._SAVE, _cache._EVICT = saved
    return outs


class _WritesOnDel:
    armed = False
    space = None

    def __init__(self, v):
        self.v = v

    def __del__(self):
        if _WritesOnDel.armed:
            _WritesOnDel.armed = False
            _WritesOnDel.space.get_or_create_queue("q").append(_WritesOnDel(99))


def _commit(db, sp):
    db.write(sp.save())
    sp.on_saved()


def test_a_write_made_while_the_items_are_cleared_is_kept():
    from objectspace import register_type, unregister_type
    register_type(_WritesOnDel, 41, lambda b: b.v, _WritesOnDel)

    def scenario():
        db = dkv.open(f"memory://native-evict-{uuid.uuid4().hex}")
        sp = _WritesOnDel.space = ObjectSpace(db, prefix=b"p/", cache_bytes=1 << 20, cache_items=100)
        q = sp.get_or_create_queue("q")
        for i in range(3):
            q.append(_WritesOnDel(i))
        _commit(db, sp)
        c = sp._cache
        c.budget = 0
        c._evict()          # every handle goes
        c.budget = 1 << 20
        del q
        q = sp.get_or_create_queue("q")
        assert [q[i].v for i in range(len(q))] == [0, 1, 2]     # its items loaded: a heavy object
        _WritesOnDel.armed = True
        c.budget = 1
        c._evict()          # clears q's items: a finalizer appends to q
        c.budget = 1 << 20
        after = (q._listed, len(q), sorted(q._dirty), q._complete)
        _commit(db, sp)
        del q
        c.budget = 0
        c._evict()
        c.budget = 1 << 20
        return after, [x.v for x in sp.get_or_create_queue("q")]

    try:
        c_out, py_out = _paths(scenario)
    finally:
        _WritesOnDel.armed = False
        unregister_type(_WritesOnDel)
    assert py_out == ((True, 4, [3], False), [0, 1, 2, 99])
    assert c_out == py_out


def test_a_handle_dies_where_the_python_loop_drops_it():
    import weakref

    def scenario():
        db = dkv.open(f"memory://native-evict-{uuid.uuid4().hex}")
        sp = ObjectSpace(db, prefix=b"p/", cache_bytes=1 << 20)
        for i in range(12):
            sp.get_or_create_queue(("q", i)).append(i)
        _commit(db, sp)
        c = sp._cache
        c.budget = 0
        c._evict()
        c.budget = 1 << 20
        live = [sp.get_or_create_queue(("q", i)) for i in range(8)]
        more = iter(range(8, 12))

        def looks_up(_ref):     # reloads another object: the cache's _add, maybe its _evict
            for i in more:
                sp.get_or_create_queue(("q", i))
                return

        refs = [weakref.ref(q, looks_up) for q in live]
        del live
        c.budget = c.nbytes // len(c._lru) * 8 - 1
        c._evict()
        assert len(refs) == 8
        return c.nbytes, c.evictions, [o.name for o in c._lru.values()]

    c_out, py_out = _paths(scenario)
    assert c_out == py_out
    assert py_out[2] == [("q", 10), ("q", 11)]
