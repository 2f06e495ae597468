"""The C twin of ``SlotSequence._iter_slots``' walks of items from the store
(``objectspace._native.walk``, RFC 0012 step 4) against its Python, the reference: the same
random operations on two spaces in one process (``Twin``: one walked, scanned, looked up,
saved and evicted through C, the other all Python), over queues, bounded queues, lists,
stacks and arrays under budgets that keep few of their items, read whole, in part, while
they change (items added, removed or assigned between two values), through ``index``,
``remove``, ``in`` and comparisons; after each step every result or error and every object's
and the cache's state (what is cached included) compared, and the two stores' block caches.
Values the C codec hands to Python (tuples, sets, registered types), a raw codec, a missing
or misplaced slot in the store (the same CorruptionError), patched module functions and
hooks, and generator calls (send, throw, close) on an iterator are among them."""
from __future__ import annotations

import sys

import decimal
import itertools
import random

import pytest

import dkv
import objectspace
from dkv import _reads as dkv_reads
from dkv.storage import MemoryStore
from objectspace import ObjectSpace
from objectspace import _codec, _layout, _slots
from objectspace._slots import SlotSequence

from .native_helpers import Twin, no_gc  # noqa: F401 - an autouse fixture

pytestmark = pytest.mark.skipif(_slots._WALK is None or dkv_reads._SCAN is None,
                                reason="the C modules were not built (no compiler), or OBJECTSPACE_NATIVE=0")


class Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return type(other) is Point and other.x == self.x

    def __repr__(self):
        return f"Point({self.x})"


@pytest.fixture(autouse=True, scope="module")
def _registered():
    objectspace.register_type(Point, 77, lambda p: p.x, Point)
    yield
    objectspace.unregister_type(Point)


KINDS = ["queue", "bqueue", "list", "stack", "array", "queue", "list"]


def value(rng):
    r = rng.random()
    if r < 0.5:
        return {"user": "u%d" % rng.randrange(9), "seq": rng.randrange(1000)}
    if r < 0.65:
        return rng.randrange(-5, 300)
    if r < 0.75:
        return (rng.randrange(5), "t")          # the C codec hands tuples to Python
    if r < 0.82:
        return Point(rng.randrange(9))          # a registered type
    if r < 0.88:
        return rng.choice([frozenset({1, 2}), decimal.Decimal("1.5"), {1, rng.randrange(4)}])
    return "s%d" % rng.randrange(50)


def get(sp, name, kind):
    if kind == "array":
        return sp.get_or_create_array(name, 12, fill=0)
    if kind == "bqueue":
        return sp.get_or_create_queue(name, maxlen=9)
    return getattr(sp, f"get_or_create_{kind}")(name)


def add(obj, kind, v):
    if kind in ("queue", "bqueue", "list"):
        obj.append(v)
    elif kind == "stack":
        obj.push(v)
    else:
        obj[hash(str(v)) % len(obj)] = v


def walk_changing(obj, kind, rng_seed, at, how):
    """The values of a walk with a change made after ``at`` of them: an item added, one
    removed, or a later one assigned (what the walk then gives is the kinds' own semantics)."""
    rng = random.Random(rng_seed)
    out = []
    it = iter(obj)
    for v in it:
        out.append(v)
        if len(out) == at:
            n = len(obj)
            if how == "assign" and n > at + 1 and kind != "stack":
                obj[rng.randrange(at, n)] = "assigned"
            elif how == "add":
                add(obj, kind, "added")
            elif how == "pop" and n:
                if kind in ("queue", "bqueue"):
                    obj.popleft()
                elif kind != "array":
                    obj.pop()
    return out


def op(tw, rng, names):
    i = rng.randrange(len(names))
    name, kind = names[i]
    r = rng.random()
    if r < 0.35:
        vs = [value(rng) for _ in range(rng.randrange(1, 4))]

        def write(sp):
            obj = get(sp, name, kind)
            for v in vs:
                add(obj, kind, v)
        tw.run(write)
    elif r < 0.55:
        tw.run(lambda sp: list(get(sp, name, kind)))
    elif r < 0.62:
        n = rng.randrange(4)
        tw.run(lambda sp: list(itertools.islice(get(sp, name, kind), n)))
    elif r < 0.7:
        at, how, seed = rng.randrange(1, 5), rng.choice(["assign", "add", "pop"]), rng.randrange(99)
        tw.run(lambda sp: walk_changing(get(sp, name, kind), kind, seed, at, how))
    elif r < 0.75:
        v = value(rng)

        def find(sp):
            obj = get(sp, name, kind)
            return (v in obj, obj.index(v) if kind in ("queue", "list") and v in obj else None,
                    obj == list(obj), obj < [value(random.Random(3))] if kind == "list" else None)
        tw.run(find)
    elif r < 0.8:
        def pop(sp):
            obj = get(sp, name, kind)
            if not len(obj) or kind == "array":
                return None
            return obj.popleft() if kind in ("queue", "bqueue") else obj.pop()
        tw.run(pop)
    elif r < 0.83:
        tw.run(lambda sp: get(sp, name, kind).clear() if kind != "array" else None)
    elif r < 0.9:
        def squeeze(sp):            # evict under a small budget: the items go, the handles may too
            cache = sp._cache
            was = cache.budget
            cache.budget = rng_budget
            try:
                cache._evict()
            finally:
                cache.budget = was
        rng_budget = rng.choice([0, 500, 3000])
        tw.run(squeeze)
    else:
        tw.save()
        if rng.random() < 0.3:
            tw.write_db(lambda db: db.checkpoint().wait())


CONFIGS = {"pressed": dict(cache_bytes=4000, cache_items=4), "tiny": dict(cache_bytes=300, cache_items=2),
           "items": dict(cache_bytes=1 << 20, cache_items=6), "inplace": dict(cache_bytes=3000, inplace="save")}


class WalkTwin(Twin):
    """Twin over stores without background work and with a small block cache, so that the two
    stores' block caches can be compared too."""

    def __init__(self, label: str, typed: bool = True, **opts):
        self.opts, self.typed = opts, typed
        self.dbs = [dkv.open(MemoryStore(), background=False, memtable_bytes=3000, flush_segments=3,
                             flush_bytes=6000, table_bytes=4000, block_bytes=512, block_cache_bytes=5000)
                    for _ in range(2)]
        self.spaces = [ObjectSpace(db, prefix=b"p/", **opts) for db in self.dbs]

    def write_db(self, fn):
        for db in self.dbs:
            fn(db)

    def same(self):
        super().same()
        a, b = ((db._cache.used, db._cache.hits, db._cache.misses) for db in self.dbs)
        assert a == b


def _open(config):
    return WalkTwin("native-walk", False, **CONFIGS[config])


def _run(config, seed, steps):
    rng = random.Random(seed * 17 + len(config))
    names = [(("o", i), KINDS[i % len(KINDS)]) for i in range(14)]
    tw = _open(config)
    try:
        for _ in range(steps):
            op(tw, rng, names)
            tw.same()
    finally:
        tw.close()


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3))
def test_random_walks_are_the_same_on_both_paths(config, seed):
    _run(config, seed, 500)


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3, 13))
def test_long_random_walks_are_the_same_on_both_paths(config, seed):
    _run(config, seed, 3000)


def _filled(kind="queue", n=30, config="pressed", values=None):
    tw = _open(config)
    values = values or [{"i": i, "t": (i, "x")} if i % 4 == 0 else {"i": i} for i in range(n)]

    def fill(sp):
        obj = get(sp, "q", kind)
        for v in values:
            add(obj, kind, v)
    tw.run(fill)
    tw.save()
    tw.run(lambda sp: sp._cache._evict() or None)
    return tw


def _path(i):
    """The switches of Twin's space i (0: C, 1: Python) around a block."""
    from . import native_helpers as nh

    class _Path:
        def __enter__(self):
            self.saved = nh._switches()
            nh._set_switches(self.saved if i == 0 else (None,) * len(self.saved))

        def __exit__(self, *exc):
            nh._set_switches(self.saved)
    return _Path()


@pytest.mark.parametrize("cached", [False, True])
@pytest.mark.parametrize("where", ["first", "middle", "last", "two"])
def test_a_missing_slot_raises_the_same_corruption_error(cached, where):
    tw = _filled()
    try:
        def cut(sp):
            obj = get(sp, "q", "queue")
            h, t = obj._head, obj._tail
            slots = {"first": [h], "middle": [h + 11], "last": [t - 1], "two": [h + 3, h + 4]}[where]
            for s in slots:
                sp._db.delete(_layout.slot_key(obj._items, s))
            obj._evict(0)
            if cached:                  # an item in memory: the walk merges
                obj.append("fresh")
            return len(obj._vals)
        tw.run(cut)
        out = tw.run(lambda sp: list(get(sp, "q", "queue")))
        assert out[0] == "error" and out[1] == "CorruptionError", out
        tw.run(lambda sp: list(itertools.islice(get(sp, "q", "queue"), 5)))
        tw.same()
    finally:
        tw.close()


def test_a_record_out_of_place_in_the_range_is_read_the_same():
    tw = _filled()
    try:
        def stray(sp):
            obj = get(sp, "q", "queue")
            # a key inside the range whose last eight bytes are not the next slot
            sp._db.put(_layout.slot_key(obj._items, obj._head + 5) + b"\x00", _codec.encode("stray"))
            obj._evict(0)
        tw.run(stray)
        tw.run(lambda sp: list(get(sp, "q", "queue")))
        tw.run(lambda sp: (get(sp, "q", "queue").append(1), list(get(sp, "q", "queue")))[1])
        tw.same()
    finally:
        tw.close()


@pytest.mark.parametrize("kind", ["queue", "bqueue", "list", "stack", "array"])
def test_every_kind_walks_the_same_with_and_without_cached_items(kind):
    tw = _filled(kind, n=25)
    try:
        tw.run(lambda sp: list(get(sp, "q", kind)))
        tw.run(lambda sp: (add(get(sp, "q", kind), kind, "x"), list(get(sp, "q", kind)))[1])
        tw.run(lambda sp: list(reversed(list(get(sp, "q", kind)))))
        tw.same()
        for how in ("assign", "add", "pop"):
            tw.save()
            tw.run(lambda sp: get(sp, "q", kind)._evict(0))
            tw.run(lambda sp: walk_changing(get(sp, "q", kind), kind, 5, 3, how))
            tw.same()
    finally:
        tw.close()


def test_a_raw_codec_and_a_patched_decode_are_called(monkeypatch):
    tw = _open("pressed")
    try:
        def fill(sp):
            q = sp.get_or_create_queue("raw", codec="raw")
            for i in range(20):
                q.append(b"r%d" % i)
            q2 = sp.get_or_create_queue("mp")
            for i in range(20):
                q2.append({"i": i})
        tw.run(fill)
        tw.save()
        tw.run(lambda sp: sp._cache._evict())
        tw.run(lambda sp: list(sp.get_queue("raw")))
        calls = []
        orig = _codec.MSGPACK.decode
        monkeypatch.setattr(_codec.MSGPACK, "decode", lambda raw: calls.append(raw) or orig(raw))
        for fresh in (False, True):
            tw.run(lambda sp: sp.get_queue("mp")._evict(0))

            def read(sp):
                calls.clear()
                q = sp.get_queue("mp")
                if fresh:
                    q.append({"i": "fresh"})
                return list(q), list(calls)
            out = tw.run(read)
            assert len(out[1][1]) == 20
            tw.same()
    finally:
        tw.close()


@pytest.mark.parametrize("patched", ["slot_of", "_slot_key", "_iter_merged"])
def test_patched_functions_are_called_in_their_place(monkeypatch, patched):
    tw = _filled()
    try:
        calls = []
        if patched == "slot_of":
            orig = _layout.slot_of
            monkeypatch.setattr(_layout, "slot_of", lambda k: calls.append(k) or orig(k))
        elif patched == "_slot_key":
            orig = _slots._slot_key
            monkeypatch.setattr(_slots, "_slot_key", lambda ip, s: calls.append(s) or orig(ip, s))
        else:
            orig = SlotSequence._iter_merged
            monkeypatch.setattr(SlotSequence, "_iter_merged",
                                lambda self, *a: (calls.append(a), (yield from orig(self, *a)))[1])
        outs = []
        for cached in (False, True, True):
            tw.run(lambda sp: get(sp, "q", "queue")._evict(0))

            def read(sp):
                calls.clear()
                q = get(sp, "q", "queue")
                if cached:
                    q.append("fresh")
                return list(q), list(calls)
            outs.append(tw.run(read))
            tw.same()
        assert any(o[1][1] for o in outs)
    finally:
        tw.close()


@pytest.mark.parametrize("traced", [False, True])
def test_generator_calls_on_the_iterator_are_the_same(traced):
    """``traced``: under a trace function (coverage.py, a debugger), a generator delegating
    to the C walk calls its ``send`` method where it otherwise uses the type's am_send."""
    tw = _filled()
    before = sys.gettrace()
    if traced:
        sys.settrace(lambda frame, event, arg: None)
    try:
        def calls(sp):
            q = get(sp, "q", "queue")
            out = []
            it = iter(q)
            out.append(next(it))
            out.append(it.send(None))
            out.append(it.send("ignored"))
            it.close()
            out.append(list(it))
            it = iter(q)
            next(it)
            try:
                it.throw(KeyError("thrown"))
            except KeyError as e:
                out.append(("thrown", str(e)))
            out.append(list(it))
            q.append("fresh")
            it = iter(q)
            out += [next(it), next(it)]
            out.append(it.send(3))
            return out
        tw.run(calls)
        tw.same()
    finally:
        sys.settrace(before)
        tw.close()


def test_the_c_walk_is_taken_and_hands_over_the_unusual():
    tw = _filled()
    try:
        sp = tw.spaces[0]
        q = get(sp, "q", "queue")
        q._evict(0)
        assert not q._vals and not q._complete
        w = _slots._WALK(q, q._vals, q._head, q._tail, q._version)
        assert w is not None and type(w).__name__ == "Walk"
        assert _slots._WALK(q, {1: 2}, q._head, q._tail, q._version) is not None        # merged
        assert _slots._WALK(q, [], q._head, q._tail, q._version) is None
        assert _slots._WALK(q, {}, q._head, 1 << 70, q._version) is None
        assert _slots._WALK(q, {}, -1, q._tail, q._version) is None

        class Q(type(q)):
            __slots__ = ()
        q2 = Q.__new__(Q)
        assert _slots._WALK(q2, {}, 0, 1, 0) is None
        # iterated directly, the walk gives the values and then stops with (slot, missing)
        with _path(0):
            want = list(q)
        w = _slots._WALK(q, q._vals, q._head, q._tail, q._version)
        assert list(w) == want
        with pytest.raises(StopIteration) as stop:
            next(w)
        assert stop.value.value == (q._tail, False)
    finally:
        tw.close()


@pytest.mark.parametrize("shape", ["list", "three", "none"])
def test_a_scan_giving_other_records_fails_or_reads_the_same(monkeypatch, shape):
    tw = _filled()
    try:
        for sp in tw.spaces:
            db = sp._db
            orig = db.scan

            def scan(a, b, orig=orig):
                for k, v in orig(a, b):
                    yield [k, v] if shape == "list" else (k, v, 0) if shape == "three" else None
            monkeypatch.setattr(db, "scan", scan)
        for cached in (False, True):
            tw.run(lambda sp: get(sp, "q", "queue")._evict(0))
            tw.run(lambda sp: (cached and get(sp, "q", "queue").append(1), list(get(sp, "q", "queue")))[1])
            tw.same()
    finally:
        tw.close()
