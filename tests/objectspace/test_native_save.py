"""The C save path of slot sequences (objectspace/_savepath.py, RFC 0012 step 2) against the
Python one, its reference: the same space twice in one process, the same random operations
on both, one saved and confirmed through the C functions and the other through the Python
loops (``space._SAVE`` and ``_cache._EVICT`` flipped around each call); every save's records (in order), every
error, every object's state and the object cache's are compared after each step. A store
written through either path is compared byte for byte in test_native_codec.py."""
from __future__ import annotations

import datetime as dt
import gc
import random
import textwrap
import uuid

import pytest

import dkv
from dkv.batch import WriteBatch
from objectspace import ObjectSpace, _cache, _savepath
from objectspace import space as space_mod
from objectspace._queue import PersistedQueue
from objectspace._slots import NO_SLOTS, SlotSequence
from objectspace._keycodec import encode_name
from objectspace.errors import EncodingError

from .native_helpers import assert_same_store_on_both_paths

needs_c = pytest.mark.skipif(_savepath.native is None, reason="objectspace._native was not built (no compiler), "
                                                               "or OBJECTSPACE_NATIVE=0")
pytestmark = needs_c


@pytest.fixture(autouse=True)
def _no_gc():
    """Handles in reference cycles would leave the two spaces' maps of live objects at the
    collector's whim: it runs only between tests."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
SEQ_KINDS = ("queue", "bqueue", "list", "stack", "array")
NAMES = [("q", 0), ("q", 1), ("bq", 0), ("l", 0), ("l", 1), ("s", 0), ("a", 0), ("d", 0), ("set", 0), ("v", 0),
         ("q", 2), ("l", 2)]
KIND_OF = {"q": "queue", "bq": "bqueue", "l": "list", "s": "stack", "a": "array", "d": "dict", "set": "set",
           "v": "value"}
BASE = ("_flags", "_pflags", "_listed", "_dead", "_msaved", "_mlast", "_old", "_pname", "_name", "_items", "_ns")
SLOTS = ("_head", "_tail", "_lo", "_hi", "_snap", "_complete", "_version")


class Bad:
    """A value no codec stores: the save raises EncodingError."""

    def __eq__(self, other):
        return type(other) is Bad

    __hash__ = None


def value(rng):
    pick = rng.randrange(10)
    if pick < 3:
        return {"user": f"u{rng.randrange(100):03d}", "ts": T0 + dt.timedelta(seconds=rng.randrange(10**6)),
                "seq": rng.randrange(1 << 40)}
    if pick < 5:
        return rng.randrange(-1000, 1000)
    if pick == 5:
        return rng.choice(["", "é" * rng.randrange(40), b"b" * rng.randrange(3), None, 1.5, [1, [2]]])
    if pick == 6:
        return (1, "tuple")              # the Python codec's ext
    if pick == 7:
        return 2 ** 70 + rng.randrange(9)
    if pick == 8:
        return dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))   # zoned: the Python codec
    return rng.random()


class Twin:
    """The same space twice: [0] saved through C, [1] through Python."""

    def __init__(self, **opts):
        self.opts = opts
        self.dbs = [dkv.open(f"memory://native-save-{uuid.uuid4().hex}") for _ in range(2)]
        self.open()

    def open(self):
        opts = {k: v for k, v in self.opts.items() if k != "drop_saved"}
        self.spaces = [ObjectSpace(db, prefix=b"p/", **opts) for db in self.dbs]
        for sp in self.spaces:
            sp._cache.drop_saved = self.opts.get("drop_saved", False)

    def run(self, fn):
        """fn(space) on each space with its save path; their outcomes (a value or an error)."""
        outs = []
        for i, sp in enumerate(self.spaces):
            saved = space_mod._SAVE, _cache._EVICT
            space_mod._SAVE, _cache._EVICT = (_savepath.native, saved[1]) if i == 0 else (None, None)
            try:
                outs.append(("ok", fn(sp)))
            except Exception as e:  # noqa: BLE001 - compared between the two
                outs.append(("error", type(e).__name__, str(e)))
            finally:
                space_mod._SAVE, _cache._EVICT = saved
        assert outs[0] == outs[1]
        return outs[0]

    def close(self):
        for sp in self.spaces:
            sp.close()
        for db in self.dbs:
            db.close()


def void(_):
    return None


def get(sp, name):
    kind = KIND_OF[name[0]]
    getter = {"bqueue": "queue"}.get(kind, kind)
    return getattr(sp, f"get_{getter}")(name)


def create(sp, name, items):
    kind = KIND_OF[name[0]]
    if kind == "queue":
        return sp.create_queue(name, items)
    if kind == "bqueue":
        return sp.create_queue(name, items, maxlen=5)
    if kind == "array":
        return sp.create_array(name, len(items) or 3, fill=items[0] if items else 0)
    if kind == "dict":
        return sp.create_dict(name, {str(i): v for i, v in enumerate(items)})
    if kind == "set":
        return sp.create_set(name, [i for i in range(len(items))])
    if kind == "value":
        return sp.create_value(name, items)
    return getattr(sp, f"create_{kind}")(name, items)


def state(sp):
    """What the save path touches, of every live object and the space and its cache."""
    objs = {}
    for nkey, obj in sorted(sp._live.items()):
        st = {"type": type(obj).__name__, **{f: getattr(obj, f) for f in BASE}}
        if isinstance(obj, SlotSequence):
            st.update({f: getattr(obj, f) for f in SLOTS})
            st["vals"] = sorted(obj._vals.items())
            st["dirty"] = ("none" if obj._dirty is NO_SLOTS else type(obj._dirty).__name__, sorted(obj._dirty))
            st["pending"] = ("none" if obj._pending is NO_SLOTS else type(obj._pending).__name__,
                             sorted(obj._pending))
            st["same_sets"] = obj._dirty is obj._pending
        objs[nkey] = st
    cache = sp._cache
    return {"objs": objs, "touched": list(sp._touched), "graves": list(sp._graves),
            "lru": [o._nkey for o in cache._lru.values()], "heavy": [o._nkey for o in cache._heavy.values()],
            "cost": sorted((o._nkey, cache._cost[k]) for k, o in cache._lru.items()),
            "nbytes": cache.nbytes, "item_bytes": cache.item_bytes, "evictions": cache.evictions,
            "counts": sp._counts}


def same_state(tw):
    a, b = (state(sp) for sp in tw.spaces)
    assert a == b


def mutate(tw, rng, name, exists):
    """One random change of object ``name`` on both spaces."""
    kind = KIND_OF[name[0]]
    if not exists:
        items = [value(rng) for _ in range(rng.randrange(6))]
        if kind == "value":
            items = value(rng)
        tw.run(lambda sp: void(create(sp, name, items)))
        return
    r = rng.random()
    if r < 0.04:
        tw.run(lambda sp: sp.delete(name))
        return
    v = value(rng)
    n = rng.randrange(1, 4)
    if kind in ("queue", "bqueue"):
        op = rng.choice(["append", "append", "append", "popleft", "popleft", "pop", "appendleft", "extend",
                         "clear", "insert", "del", "set", "rotate", "reverse", "read", "iter"])
    elif kind == "list":
        op = rng.choice(["append", "append", "pop", "insert", "del", "set", "extend", "clear", "read", "iter",
                         "reverse"])
    elif kind == "stack":
        op = rng.choice(["push", "push", "pop", "clear", "read"])
    elif kind == "array":
        op = rng.choice(["set", "set", "fill", "read", "iter"])
    elif kind == "dict":
        op = rng.choice(["dset", "ddel"])
    elif kind == "set":
        op = rng.choice(["sadd", "sdel"])
    else:
        op = "vset"

    def apply(sp):
        o = get(sp, name)
        size = len(o) if kind not in ("value",) else 0
        i = rng_i % size if size else 0
        if op == "append":
            o.append(v)
        elif op == "push":
            o.push(v)
        elif op == "popleft":
            if size:
                o.popleft()
        elif op == "pop":
            if size:
                o.pop()
        elif op == "appendleft":
            o.appendleft(v)
        elif op == "extend":
            o.extend([v] * n)
        elif op == "clear":
            o.clear()
        elif op == "insert":
            o.insert(i, v)
        elif op == "del":
            if size:
                del o[i]
        elif op == "set":
            if size:
                o[i] = v
        elif op == "rotate":
            o.rotate(n)
        elif op == "reverse":
            o.reverse()
        elif op == "read":
            return repr(o[i]) if size and kind != "stack" else (repr(o.peek()) if size else None)
        elif op == "iter":
            return repr(list(o))
        elif op == "fill":
            o.fill(v)
        elif op == "dset":
            o[str(n)] = v
        elif op == "ddel":
            o.pop(str(n), None)
        elif op == "sadd":
            o.add(n)
        elif op == "sdel":
            o.discard(n)
        elif op == "vset":
            o.value = v
        return None

    rng_i = rng.randrange(1 << 30)
    tw.run(apply)


def save_step(tw, rng, mode):
    """A save of both spaces and what follows it: the records compared, then committed and
    confirmed, committed only (unconfirmed), or dropped (a failed commit)."""
    full = mode == "full"
    batches = []

    def save(sp):
        b = sp.save(full=full)
        batches.append(list(b))
        return len(b)
    out = tw.run(save)
    if out[0] == "error":
        return out
    assert batches[0] == batches[1]
    if mode in ("confirm", "full", "reopen", "unconfirmed"):
        for sp, b in zip(tw.spaces, batches):
            wb = WriteBatch()
            wb.extend(b)
            sp._db.write(wb)
    if mode in ("confirm", "full", "reopen"):
        tw.run(lambda sp: sp.on_saved())
    same_state(tw)
    if mode == "reopen" and not any(sp.dirty for sp in tw.spaces):
        for sp in tw.spaces:
            sp.close()
        tw.open()
    return out


def bad_save(tw, rng, names):
    """A value no codec stores, appended to a sequence: the save raises the same error on
    both paths and leaves the batch and every object as they were; then it is popped."""
    seqs = [nm for nm in names if KIND_OF[nm[0]] in ("queue", "list", "stack")]
    if not seqs:
        return
    name = rng.choice(seqs)
    tw.run(lambda sp: (get(sp, name).push if KIND_OF[name[0]] == "stack" else get(sp, name).append)(Bad()))
    before = [state(sp) for sp in tw.spaces]
    batches = []

    def save(sp):
        b = WriteBatch()
        b.put(b"x", b"y")
        batches.append(b)
        sp.save(batch=b)
    out = tw.run(save)
    assert out[0] == "error" and out[1] == "EncodingError" and "cannot save" in out[2], out
    assert [list(b) for b in batches] == [[(b"x", b"y")]] * 2
    for b, sp in zip(before, tw.spaces):
        after = state(sp)
        for nkey, st in after["objs"].items():
            st.pop("_mlast", None)
            b["objs"][nkey].pop("_mlast", None)
        assert after == b
    tw.run(lambda sp: void(get(sp, name).pop()))


def live_names(tw):
    sp = tw.spaces[0]
    return [nm for nm in NAMES if sp._exists(encode_name(nm))]


CONFIGS = {
    "roomy": dict(cache_bytes=256 << 20),
    "pressed": dict(cache_bytes=12_000, cache_items=8),          # saved items not kept, handles evicted
    "few-items": dict(cache_bytes=256 << 20, cache_items=3),     # _evict() after a save
    "inplace": dict(cache_bytes=30_000, inplace="save"),
    "few-objects": dict(cache_bytes=256 << 20, cache_objects=3),
    "drop-saved": dict(cache_bytes=256 << 20, drop_saved=True),  # a roomy cache told to keep no saved items
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_save_the_same_records_and_states_on_both_paths(config, seed):
    rng = random.Random(seed * 101 + len(config))
    tw = Twin(**CONFIGS[config])
    try:
        for step in range(140):
            names = live_names(tw)
            for _ in range(rng.randrange(1, 8)):
                name = rng.choice(NAMES)
                mutate(tw, rng, name, name in names)
                names = live_names(tw)
            same_state(tw)
            if rng.random() < 0.06:
                bad_save(tw, rng, names)
            mode = rng.choices(["confirm", "unconfirmed", "failed", "full", "reopen"], [60, 12, 10, 5, 13])[0]
            save_step(tw, rng, mode)
        save_step(tw, rng, "confirm")
        assert [list(db.scan()) for db in tw.dbs][0] == list(tw.dbs[1].scan())
    finally:
        tw.close()


def test_many_objects_in_one_save():
    """Hundreds of queues dirtied a few slots each (the workload of spark_ops' buffer), some
    with more dirty slots than the C collector sorts in place."""
    rng = random.Random(7)
    tw = Twin(cache_bytes=64 << 10)
    try:
        for rnd in range(12):
            def work(sp):
                for k in range(300):
                    q = sp.get_or_create_queue(("user", k))
                    for _ in range(2 if k % 7 else 12):
                        q.append({"user": f"u{k}", "ts": T0 + dt.timedelta(seconds=rnd * 300 + k), "seq": rnd})
                    while len(q) > 9:
                        q.popleft()
            tw.run(work)
            save_step(tw, rng, "confirm" if rnd % 4 else "unconfirmed")
    finally:
        tw.close()


def test_a_patched_hook_sends_the_objects_to_python(monkeypatch):
    """A kind's hook replaced after setup (here the queue's metadata) is what saves: the C
    collector hands such objects to their Python collector."""
    db = dkv.open(f"memory://native-save-{uuid.uuid4().hex}")
    sp = ObjectSpace(db, prefix=b"p/")
    q = sp.create_queue("q", [1, 2])
    sp._db.write(sp.save())
    sp.on_saved()
    q.append(3)
    monkeypatch.setattr(PersistedQueue, "_meta", lambda self: [self._head, self._tail, 99])
    records = dict(sp.save())
    assert records[sp._obj_prefix + q._nkey + b"\x00"].endswith(bytes([0x93, 0, 3, 99]))
    monkeypatch.undo()
    sp.on_saved()
    q.append(4)
    records = dict(sp.save())
    assert records[sp._obj_prefix + q._nkey + b"\x00"].endswith(bytes([0x92, 0, 4]))
    db.close()


def test_the_save_path_in_use_is_the_c_one():
    assert space_mod._SAVE is _savepath.native is not None
    assert {cls.__name__ for cls, *_ in _savepath._KINDS} == {"PersistedList", "PersistedStack", "PersistedArray",
                                                              "PersistedQueue"}


def test_an_encoding_error_names_the_object_and_slot_on_both_paths():
    rng = random.Random(3)
    tw = Twin()
    try:
        tw.run(lambda sp: void(sp.create_queue("q", [1, 2, 3])))
        save_step(tw, rng, "confirm")
        tw.run(lambda sp: void([sp.get_queue("q").append(x) for x in (4, Bad(), {"a": Bad()})]))
        out = tw.run(lambda sp: sp.save())
        assert out[:2] == ("error", "EncodingError")
        assert EncodingError.__name__ in out[1] and "queue 'q' slot" in out[2]
    finally:
        tw.close()


# -- a store written through each path --------------------------------------------------------

_CHURN = textwrap.dedent('''
    import datetime as dt, random, sys
    from objectspace import ObjectSpace, space as space_mod
    assert (space_mod._SAVE is None) == (sys.argv[2] == "python")
    rng = random.Random(11)
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    space = ObjectSpace.open(sys.argv[1], inline_segment_bytes=0, flush_segments=3, background=False,
                             cache_bytes=200_000, cache_items=16)
    def row(k):
        return {"user": f"u{k:05d}", "ts": t0 + dt.timedelta(milliseconds=rng.randrange(10**7)),
                "seq": rng.randrange(1 << 40), "v": rng.choice([1.5, None, "é", b"b", [1, 2], (1, 2)])}
    for cp in range(10):
        for k in range(120):
            kind = k % 5
            if kind == 0:
                q = space.get_or_create_queue(("q", k), maxlen=None if k % 2 else 7)
                for _ in range(rng.randrange(4)):
                    q.append(row(k))
                if rng.random() < 0.3:
                    q.appendleft(row(k))
                while len(q) > 6:
                    q.popleft()
            elif kind == 1:
                lst = space.get_or_create_list(("l", k))
                lst.append(row(k))
                if len(lst) > 3 and rng.random() < 0.5:
                    del lst[rng.randrange(len(lst))]
                if len(lst) and rng.random() < 0.3:
                    lst[rng.randrange(len(lst))] = row(k)
                if rng.random() < 0.05:
                    lst.clear()
            elif kind == 2:
                s = space.get_or_create_stack(("s", k))
                s.push(row(k))
                if rng.random() < 0.4:
                    s.pop()
            elif kind == 3:
                a = space.get_or_create_array(("a", k), 6, fill=0)
                a[rng.randrange(6)] = row(k)
            else:
                d = space.get_or_create_dict(("d", k))
                d[str(rng.randrange(5))] = row(k)
            if rng.random() < 0.01:
                space.delete(("q", k - kind))
        if cp % 3 == 2:
            space.save()            # a save whose batch is never committed: the next carries it
        space.checkpoint()
    space.close()
''')


def test_a_store_of_churning_sequences_is_the_same_byte_for_byte_on_both_paths(tmp_path):
    assert_same_store_on_both_paths(_CHURN, tmp_path)
