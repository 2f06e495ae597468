"""The C lookup of a handle (``objectspace._native.lookup``, RFC 0012 step 3) against
``ObjectSpace._lookup``'s Python, its reference: the same random operations on two spaces
in one process, one looking its objects up (and reloading them) through C and the other
through Python (``space._RELOAD``, ``space._SAVE`` and ``_cache._EVICT`` flipped around each
call), under budgets that evict handles, so most lookups are reloads; every result and error, every
live object's state, the weak map and the cache's LRU order, costs and evictions compared
after each step. Names the C encoder takes are held to ``encode_name`` one by one."""
from __future__ import annotations

import random
import uuid

import pytest

import dkv
from dkv.batch import WriteBatch
from objectspace import ObjectSpace, _savepath
from objectspace import _layout as L
from objectspace import space as space_mod
from objectspace._keycodec import encode_name

from .native_helpers import Twin, no_gc  # noqa: F401 - an autouse fixture

native = _savepath.native
pytestmark = pytest.mark.skipif(space_mod._RELOAD is None, reason="objectspace._native was not built (no compiler), "
                                                                   "or OBJECTSPACE_NATIVE=0")


NAMES = ["q", "l", ("k", 1, "q"), ("k", -300, "l"), ("k", b"\x00b", "s"), ("k", 2**70, "a"), "v", "d",
         ("k", "x\x00y", "q"), ("k", "\udc80", "l"), ("bq",), ("k", 0, "q"), ("ab", 2**63 - 1), ("ab", -2**63)]
KINDS = ["queue", "list", "stack", "array", "value", "dict"]


def op(tw, rng):
    name = rng.choice(NAMES)
    kind = rng.choice(KINDS)
    r = rng.random()
    if r < 0.35:
        codec = rng.choice([None, None, "msgpack", "raw"])
        tw.run(lambda sp: getattr(sp, f"get_{kind}")(name, **({} if codec is None else {"codec": codec})))
    elif r < 0.6:
        def goc(sp):
            if kind == "array":
                return sp.get_or_create_array(name, 4, fill=0)
            if kind == "value":
                return sp.get_or_create_value(name, 1)
            if kind == "queue" and name == ("bq",):
                return sp.get_or_create_queue(name, [1], maxlen=3)
            return getattr(sp, f"get_or_create_{kind}")(name)
        tw.run(goc)
    elif r < 0.8:
        def write(sp):
            obj = sp._lookup(name, None)
            if obj.kind in ("queue", "list"):
                obj.append(rng_val)
            elif obj.kind == "stack":
                obj.push(rng_val)
            elif obj.kind == "array":
                obj[1] = rng_val
            elif obj.kind == "dict":
                obj["k"] = rng_val
            else:
                obj.value = rng_val
            return obj
        rng_val = rng.randrange(100)
        tw.run(write)
    elif r < 0.86:
        tw.run(lambda sp: sp.delete(name))
    elif r < 0.9:
        tw.run(lambda sp: sp.exists(name))
    else:
        tw.save()


CONFIGS = {"roomy": dict(cache_bytes=256 << 20), "pressed": dict(cache_bytes=3000, cache_items=4),
           "few-objects": dict(cache_bytes=256 << 20, cache_objects=2)}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(5))
def test_random_lookups_and_reloads_are_the_same_on_both_paths(config, seed):
    rng = random.Random(seed * 7 + len(config))
    tw = Twin("native-reload", **CONFIGS[config])
    try:
        for _ in range(400):
            op(tw, rng)
            tw.same()
        tw.save()
        tw.same()
        assert list(tw.dbs[0].scan()) == list(tw.dbs[1].scan())
    finally:
        tw.close()


def test_reloads_happen_through_c_and_evict():
    tw = Twin("native-reload", cache_bytes=4000, cache_objects=None)
    try:
        names = [("u", i, "items") for i in range(40)]
        for nm in names:
            tw.run(lambda sp: sp.get_or_create_queue(nm).append(1))
        tw.save()
        for _ in range(3):
            for nm in names:
                tw.run(lambda sp: sp.get_or_create_queue(nm))
                tw.same()
        assert tw.spaces[0]._cache.evictions == tw.spaces[1]._cache.evictions > 0
    finally:
        tw.close()


@pytest.mark.parametrize("name", NAMES + [("a", True), ("a", 1.5), "", (), ("a", ()), ("a", None), 5, b"x",
                                          ("a", 255), ("a", 256), ("a", -1), ("a", -256), ("a", -257),
                                          ("a", 2**64), ("a", -2**64)])
def test_names_encode_as_encode_name_does(name):
    sp = ObjectSpace(dkv.open(f"memory://native-reload-{uuid.uuid4().hex}"))
    try:
        want = encode_name(name)
    except Exception as e:  # noqa: BLE001
        want = type(e)
    got = native.lookup(sp, name, "queue", None, None)
    assert type(got) is tuple
    if got[0] is not None:
        assert got[0] == want
    else:           # handed to Python, which encodes it (or raises)
        with pytest.raises(Exception) if want is not bytes and isinstance(want, type) else _nothing():
            sp.get_or_create_queue(name)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


@pytest.mark.parametrize("meta", [b"\xc1\x02\x04\x01\x92\x00", b"\xc1\x02\x04\x01\x91\x05", b"\xc1\x02\x04\x01\x90",
                                  b"\xc1\x02\x04\x01\x92\x00\x01\x00", b"\xc1\x02\x04\x01\x93\x00\x01\xa1x",
                                  b"\xc1\x02\x04\x07\x92\x00\x01", b"\xc1\x03\x04\x01\x92\x00\x01",
                                  b"\xc1\x02\x63\x01\x92\x00\x01", b"\xc1\x02\x01\x01\x92\x00\x01", b"\xc1\x02",
                                  b"\xc1\x02\x04\x01\x94\x00\x01\x02\x03", b"\xc1\x02\x04\x01\x92\xcf" + b"\xff" * 8 + b"\x01",
                                  b"\xc1\x02\x04\x01\x92\xd3\x80" + b"\x00" * 7 + b"\x01", b"\xc1\x02\x03\x01\x91\xc0",
                                  b"\xc1\x02\x04\x01\x93\x00\x02\x05", b"\xc1\x02\x05\x01\x91\xcd\x01\x00",
                                  b"\x92\x00\x01", b"\xc1\x02\x04\x01\x92\x00"])
def test_metadata_records_read_the_same_or_raise_the_same(meta):
    tw = Twin("native-reload")
    try:
        for sp in tw.spaces:
            b = WriteBatch()
            b.put(sp._index_prefix + encode_name("q"), L.encode_index("queue", 1))
            b.put(sp._obj_prefix + encode_name("q") + L.META, meta)
            sp._db.write(b)
        for kind in (None, "queue", "list", "stack"):
            def look(sp):
                obj = sp._lookup("q", kind)
                return (type(obj).__name__, obj._head, obj._tail, getattr(obj, "_maxlen", "-"), obj._mhead)
            outs = []
            for i, sp in enumerate(tw.spaces):
                saved = space_mod._RELOAD
                space_mod._RELOAD = saved if i == 0 else None
                try:
                    outs.append(look(sp))
                except Exception as e:  # noqa: BLE001
                    outs.append((type(e).__name__, str(e)))
                finally:
                    space_mod._RELOAD = saved
                sp._live.data.clear()
            assert outs[0] == outs[1]
    finally:
        tw.close()


def test_a_patched_hook_or_a_subclass_goes_to_python(monkeypatch):
    from objectspace._queue import PersistedQueue
    sp = ObjectSpace(dkv.open(f"memory://native-reload-{uuid.uuid4().hex}"))
    sp.create_queue("q", [1])
    b = sp.save()
    sp._db.write(b)
    sp.on_saved()
    sp._live.data.clear()
    sp._cache.forget_space(sp)
    calls = []
    orig = PersistedQueue._load.__func__
    monkeypatch.setattr(PersistedQueue, "_load", classmethod(lambda cls, *a: calls.append(1) or orig(cls, *a)))
    assert list(sp.get_queue("q")) == [1] and calls == [1]
    monkeypatch.undo()
    sp._live.data.clear()
    assert type(native.lookup(sp, "q", "queue", None, None)) is PersistedQueue

    class Space(ObjectSpace):
        pass
    sub = Space(sp._db)
    assert native.lookup(sub, "q", "queue", None, None) == (None, space_mod._UNREAD)
    assert list(sub.get_queue("q")) == [1]


def test_a_closed_space_and_a_deleted_name_raise_as_python_does():
    tw = Twin("native-reload")
    try:
        tw.run(lambda sp: sp.create_queue("q", [1]))
        tw.save()
        tw.run(lambda sp: sp.delete("q"))
        tw.run(lambda sp: sp.get_queue("q"))
        for sp in tw.spaces:
            sp.close()
        assert tw.run(lambda sp: sp.get_queue("q"))[0] == "error"
    finally:
        tw.close()


def test_the_weak_map_is_checked_at_setup():
    import collections
    import weakref
    assert _savepath._weakmap_fits(weakref.WeakValueDictionary, weakref.KeyedRef)

    class Deque(weakref.WeakValueDictionary):
        def __init__(self):
            super().__init__()
            self._pending_removals = collections.deque()

    class Ordered(weakref.WeakValueDictionary):
        def __init__(self):
            super().__init__()
            self.data = collections.OrderedDict()

    class NoRemove(weakref.WeakValueDictionary):
        def __init__(self):
            super().__init__()
            del self._remove

    class Slots(weakref.ref):
        __slots__ = ("key", "extra")

    class Sub(weakref.KeyedRef):
        __slots__ = ()

    for wvd in (Deque, Ordered, NoRemove, dict):
        assert not _savepath._weakmap_fits(wvd, weakref.KeyedRef), wvd
    for kr in (Slots, Sub, weakref.ref):
        assert not _savepath._weakmap_fits(weakref.WeakValueDictionary, kr), kr


# Each runs in a fresh interpreter (reload_setup runs once, at import): a weak map or
# KeyedRef that the C code does not know leaves the lookup to Python, which then works.
_PATCHES = {
    "deque-pending": """
class W(weakref.WeakValueDictionary):
    def __init__(self, *a):
        super().__init__(*a)
        self._pending_removals = collections.deque()
weakref.WeakValueDictionary = W
""",
    # passes _weakmap_fits; the C probe finds that a dead handle's entry stays
    "remove-does-nothing": """
class W(weakref.WeakValueDictionary):
    def __init__(self, *a):
        super().__init__(*a)
        self._remove = lambda wr: None
weakref.WeakValueDictionary = W
""",
    # passes _weakmap_fits (patched out); KeyedRef's layout fails the C check (not a direct ref subclass)
    "keyedref-not-a-direct-ref": """
class B(weakref.ref):
    __slots__ = ()
class K(B):
    __slots__ = ("key",)
    def __new__(type, ob, callback, key):
        self = B.__new__(type, ob, callback)
        self.key = key
        return self
    def __init__(self, ob, callback, key):
        super().__init__(ob, callback)
weakref.KeyedRef = K
import objectspace._savepath as sp
sp._weakmap_fits = lambda *a: True
""",
}


@pytest.mark.parametrize("patch", list(_PATCHES))
def test_a_weak_map_unlike_cpythons_leaves_the_lookup_to_python(patch):
    import subprocess
    import sys
    import textwrap
    code = "import collections, gc, weakref\n" + _PATCHES[patch] + textwrap.dedent("""
        import dkv
        from objectspace import ObjectSpace, space
        assert space._RELOAD is None, space._RELOAD
        sp = ObjectSpace(dkv.open("memory://x"), cache_objects=2)
        for i in range(5):
            sp.get_or_create_queue(("q", i)).append(i)
        b = sp.save(); sp._db.write(b); sp.on_saved()
        for _ in range(2):
            assert [list(sp.get_queue(("q", i))) for i in range(5)] == [[i] for i in range(5)]
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


_BROKEN = {"space": ["_closed", "_live", "_graves", "_obj_prefix", "_db", "_cache"],
           "cache": ["_lru", "_cost", "nbytes", "max_objects", "budget", "item_bytes"],
           "live": ["data", "_pending_removals", "_remove"]}


@pytest.mark.parametrize("where,attr", [(w, a) for w, attrs in _BROKEN.items() for a in attrs])
def test_a_missing_attribute_raises_as_python_does(where, attr):
    """Nothing the C lookup reads leaves it with an AttributeError of its own: it hands over
    (or calls the Python method), and the result or error is the Python lookup's."""
    tw = Twin("native-reload", cache_bytes=256 << 20, cache_objects=2)
    try:
        for nm in ("a", "b", "c"):
            tw.run(lambda sp: sp.get_or_create_queue(nm).append(1))
        tw.save()
        for sp in tw.spaces:
            delattr({"space": sp, "cache": sp._cache, "live": sp._live}[where], attr)
        for nm in ("c", "a", "b", "a"):        # alive, then reloads (cache_objects=2 evicts)
            tw.run(lambda sp: sp._lookup(nm, "queue"))
            tw.run(lambda sp: sp.get_or_create_queue(nm))
    finally:
        for sp in tw.spaces:
            sp._closed = True           # (close() may need what was deleted)
        for db in tw.dbs:
            db.close()


def test_pending_removals_and_foreign_entries_go_through_the_maps_methods():
    tw = Twin("native-reload", cache_bytes=256 << 20)
    try:
        for nm in ("a", "b"):
            tw.run(lambda sp: sp.get_or_create_queue(nm).append(1))
        tw.save()
        for sp in tw.spaces:
            sp._live._pending_removals.append(b"no such key")     # _commit_removals ignores it
        tw.run(lambda sp: sp.get_queue("a"))
        tw.same()
        for sp in tw.spaces:
            assert not sp._live._pending_removals
            sp._live.data[encode_name("b")] = lambda: None       # not a KeyedRef: Python's get calls it
        assert native.lookup(tw.spaces[0], "b", "queue", None, None) == (encode_name("b"), space_mod._UNREAD)
        tw.run(lambda sp: sp.get_queue("b"))
        tw.same()
    finally:
        tw.close()
