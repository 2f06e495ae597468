"""Stored values changed in place (``d[k].append(x)``): ObjectSpace(inplace="save" | "raise" | None).

For every kind whose values are cached: "save" writes the change at the next checkpoint,
"raise" refuses the save naming object and slot and leaves store, batch and objects as
they were, None loses it (today's behaviour, and the library default). Then the edge cases
(assigned back, deleted, changed between save and on_saved, partly cached, moved slots,
evicted and reloaded, failed checkpoint, nested values, tuples, user types) and a
reference-model run of random operations with in-place changes against builtin twins.
"""
from __future__ import annotations

import copy
import gc
import random
from collections import deque

import pytest

from dkv.batch import WriteBatch
from objectspace import EncodingError, InPlaceChangeError, ObjectSpace, ObjectSpaceError, register_type, unregister_type
from objectspace._inplace import IMMUTABLE
from .os_helpers import RecordingDB, new_location, open_db


@pytest.fixture
def loc(tmp_path):
    return new_location("memory", tmp_path)


# -- one spec per kind: a stored object whose item at "the slot" is a list ------------------------
# make(space) creates it (and checkpoints it when the slot must move first); cell(obj) is the
# cached list at the slot; read(obj) the whole content as plain Python; back(obj) assigns
# the slot's value back (None: the kind has no way).

def _make_queue(sp):
    q = sp.create_queue("o", ["gone", 0, [1], "x"])
    sp.checkpoint()
    assert q.popleft() == "gone"        # the slots no longer start at 0
    return q


def _stack_back(s):
    top, mid = s.pop(), s.pop()
    s.push(mid)
    s.push(top)


def _make_array(sp):
    a = sp.create_array("o", 3, fill=0)
    a[1], a[2] = [1], "x"
    return a


def _make_stream(sp):
    s = sp.create_stream("o")
    for i, f in enumerate([0, [1], "x"], 1):
        s.add({"f": f}, id=f"{i}-0")
    return s


def _set_node(ll):
    node = ll.first.next
    node.value = node.value


def _set_value(v):
    v.value = v.value


def _set_index(o):
    o[1] = o[1]


def _set_key(d):
    d["k"] = d["k"]


SPECS = {
    "value": dict(make=lambda sp: sp.create_value("o", [1]), cell=lambda o: o.value, read=lambda o: o.value,
                  label="value", back=_set_value),
    "array": dict(make=_make_array, cell=lambda o: o[1], read=list, label="index 1", back=_set_index),
    "list": dict(make=lambda sp: sp.create_list("o", [0, [1], "x"]), cell=lambda o: o[1], read=list,
                 label="index 1", back=_set_index),
    "queue": dict(make=_make_queue, cell=lambda o: o[1], read=list, label="index 1", back=_set_index),
    "stack": dict(make=lambda sp: sp.create_stack("o", [0, [1], "x"]), cell=lambda o: list(o)[1], read=list,
                  label="item 1 below the top", back=_stack_back),
    "linked_list": dict(make=lambda sp: sp.create_linked_list("o", [0, [1], "x"]),
                        cell=lambda o: o.first.next.value, read=list, label="node at position 1", back=_set_node),
    "dict": dict(make=lambda sp: sp.create_dict("o", {"a": 0, "k": [1], "z": "x"}), cell=lambda o: o["k"],
                 read=dict, label="key 'k'", back=_set_key),
    "sorted_dict": dict(make=lambda sp: sp.create_sorted_dict("o", {"a": 0, "k": [1], "z": "x"}),
                        cell=lambda o: o["k"], read=lambda o: list(o.items()), label="key 'k'", back=_set_key),
    "stream": dict(make=_make_stream, cell=lambda o: o.get("2-0")["f"], read=list, label="entry 2-0", back=None),
}
KINDS = list(SPECS)


def _stored(loc, kind):
    """The object's content as a reader of the store's last checkpoint sees it."""
    with ObjectSpace.open(loc, read_only=True) as sp:
        return SPECS[kind]["read"](sp.get("o"))


def _prepared(loc, kind, inplace):
    """A space with the object stored and checkpointed, and the object; the expected content
    before and after ``cell(obj).append(2)``."""
    spec = SPECS[kind]
    sp = ObjectSpace.open(loc, inplace=inplace)
    obj = spec["make"](sp)
    sp.checkpoint()
    before = copy.deepcopy(spec["read"](obj))
    spec["cell"](obj).append(2)
    after = spec["read"](obj)
    assert after != before
    return sp, obj, before, after


@pytest.mark.parametrize("kind", KINDS)
def test_save_writes_an_in_place_change(loc, kind):
    sp, obj, before, after = _prepared(loc, kind, "save")
    assert sp.inplace == "save" and not sp.dirty
    sp.checkpoint()
    assert not sp.dirty
    assert SPECS[kind]["read"](obj) == after
    sp.close()
    assert _stored(loc, kind) == after


@pytest.mark.parametrize("kind", KINDS)
def test_raise_names_object_and_slot_and_writes_nothing(loc, kind):
    spec = SPECS[kind]
    sp, obj, before, after = _prepared(loc, kind, "raise")
    last = sp.last_checkpoint
    batch = WriteBatch()
    with pytest.raises(InPlaceChangeError) as info:
        sp.save(batch=batch)
    e = info.value
    assert isinstance(e, ObjectSpaceError) and isinstance(e, ValueError)
    msg = str(e)
    assert f"{kind} 'o' {spec['label']} was changed in place" in msg and 'inplace="save"' in msg
    assert e.changes == [("o", kind, spec["label"])]
    assert len(batch) == 0 and not sp.dirty and sp._last_saved == ((), (), None)
    with pytest.raises(InPlaceChangeError):
        sp.checkpoint()
    assert sp.last_checkpoint == last
    assert _stored(loc, kind) == before
    if spec["back"] is not None:            # the way out the message gives
        assert "assign it back" in msg or "push them back" in msg
        spec["back"](obj)
        sp.checkpoint()
        assert _stored(loc, kind) == after
    else:
        assert "copy of the fields" in msg
    sp.close()


@pytest.mark.parametrize("kind", KINDS)
def test_none_loses_an_in_place_change(loc, kind):
    """The library default (ObjectSpace(db, prefix)): no detection, the change is not written."""
    sp, obj, before, after = _prepared(loc, kind, None)
    assert sp.inplace is None
    sp.checkpoint()
    assert SPECS[kind]["read"](obj) == after         # the cache holds it ...
    sp.close()
    assert _stored(loc, kind) == before              # ... the store does not


def test_defaults_and_bad_values(loc):
    db = open_db(loc)
    assert ObjectSpace(db).inplace is None
    for bad in ("yes", True, 1, ["save"]):
        with pytest.raises(ValueError, match="None, 'save' or 'raise'"):
            ObjectSpace(db, inplace=bad)
    db.close()
    with pytest.raises(ValueError, match="None, 'save' or 'raise'"):
        ObjectSpace.open(loc, inplace="write")
    with ObjectSpace.open(loc) as sp:
        assert sp.inplace == "save"
        sp.checkpoint()
    with ObjectSpace.open(loc, read_only=True) as sp:
        assert sp.inplace is None           # it never saves


def test_none_never_looks(loc, monkeypatch):
    from objectspace import _inplace

    def boom(*a):
        raise AssertionError("inplace=None must not look at cached values")
    monkeypatch.setattr(_inplace, "find_changes", boom)
    with ObjectSpace.open(loc, inplace=None) as sp:
        d = sp.create_dict("d", {"k": [1]})
        sp.checkpoint()
        d["k"].append(2)
        sp.checkpoint()


def test_immutable_values_are_not_encoded(loc):
    with ObjectSpace.open(loc) as sp:
        import datetime
        import decimal
        d = sp.create_dict("d", {1: 1, 2: "s", 3: None, 4: 1.5, 5: b"b", 6: True,
                                 7: datetime.datetime(2024, 1, 1), 8: decimal.Decimal("1.5"), 9: [1], 10: (1,)})
        sp.checkpoint()
        assert sorted(d._t.vals[ek][0] for ek, _ in d._inplace_values(IMMUTABLE)) == [9, 10]
        raw = sp.create_list("r", [b"x"], codec="raw")
        sp.checkpoint()
        assert raw._isums is None


def test_encoding_of_a_decoded_value_is_its_record(point_type):
    """What the comparison rests on: a record decoded and encoded again gives the same
    bytes (sets aside: their packing order depends on how the set was built, see
    test_evicted_and_reloaded_values_are_not_changes)."""
    import datetime as dt
    import decimal
    import uuid
    from objectspace._codec import decode, encode
    tz = dt.timezone(dt.timedelta(hours=-3, minutes=-30))
    values = [None, True, 0, -1, 2**63, -(2**70), 1.5, float("nan"), -0.0, float("inf"), "", "é" * 40, b"\x00" * 300,
              [], {}, (), [1, [2, (3, {"a": b"x"})]], {"b": 1, "a": 2, 3: [4]}, {(1, "x"): None},
              dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.datetime(9, 1, 1, tzinfo=tz),
              dt.datetime(2024, 1, 1, fold=1, tzinfo=dt.timezone.utc), dt.date(1, 1, 1), dt.time(1, 2, 3, 4, tz),
              dt.timedelta(days=-1, microseconds=7), decimal.Decimal("-1.2300E+5"), decimal.Decimal("NaN"),
              uuid.UUID(int=12345), frozenset(), Point(1, [2, {"p": Point(3, 4)}]), {"k": [1.0, 1, True]}]
    for v in values:
        raw = encode(v)
        assert encode(decode(raw)) == raw, v
        assert encode(decode(encode(decode(raw)))) == raw, v


# -- edge cases ----------------------------------------------------------------------------------

def _puts(rec, key_part: bytes) -> int:
    return sum(1 for op in rec.log if op[0] == "put" and op[1].endswith(key_part))


@pytest.mark.parametrize("inplace", ["save", "raise"])
def test_read_changed_and_assigned_back_is_written_once(loc, inplace):
    db = open_db(loc)
    rec = RecordingDB(db)
    sp = ObjectSpace(rec, inplace=inplace)
    d = sp.create_dict("d", {"k": [1]})
    sp.checkpoint()
    v = d["k"]
    v.append(2)
    d["k"] = v
    rec.take()
    sp.checkpoint()
    assert [op[0] for op in rec.take() if op[0] != "checkpoint"] == ["put"]
    sp.checkpoint()
    assert [op[0] for op in rec.take() if op[0] != "checkpoint"] == []
    sp.close()
    db.close()
    with ObjectSpace.open(loc) as sp2:
        assert sp2.get_dict("d")["k"] == [1, 2]


@pytest.mark.parametrize("inplace", ["save", "raise"])
def test_changed_then_deleted_in_the_same_save(loc, inplace):
    with ObjectSpace.open(loc, inplace=inplace) as sp:
        d = sp.create_dict("d", {"k": [1]})
        keep = sp.create_list("l", [[1]])
        sp.checkpoint()
        d["k"].append(2)
        keep[0] = keep[0] + [2]
        sp.delete("d")
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert "d" not in sp and sp.get_list("l")[0] == [1, 2]


def test_change_between_save_and_on_saved(loc):
    with ObjectSpace.open(loc, inplace="save") as sp:
        d = sp.create_dict("d", {"k": [1], "j": [1]})
        sp.checkpoint()
        d["j"] = [5]                     # dirty: written by this save
        batch = sp.save()
        d["j"].append(6)                 # pending now: the batch holds [5]
        d["k"].append(2)                 # clean: the batch holds nothing for it
        sp.db.write(batch)
        sp.on_saved()
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_dict("d").copy() == {"k": [1, 2], "j": [5, 6]}
    with ObjectSpace.open(loc, inplace="raise") as sp:
        d = sp.get_dict("d")
        d["j"] = [7]
        batch = sp.save()
        d["j"].append(8)
        sp.db.write(batch)
        sp.on_saved()
        with pytest.raises(InPlaceChangeError, match="key 'j'"):
            sp.save()


@pytest.mark.parametrize("inplace", ["save", "raise"])
def test_partly_cached_dict_and_digests(loc, inplace):
    """More entries than cache_items: the entries read are checked with point reads the
    first time, then by their digests (no read at all while nothing changes)."""
    db = open_db(loc)
    rec = RecordingDB(db)
    sp = ObjectSpace(rec, cache_items=8, inplace=inplace)
    d = sp.create_dict("d", {i: [i] for i in range(100)})
    sp.checkpoint()
    sp.on_saved()
    got = [d[i] for i in (3, 50, 97)]
    assert not d._t.complete
    rec.reads.clear()
    sp.checkpoint()
    first = [r for r in rec.reads if r[0] == "get"]
    assert len(first) == len([ek for ek, _ in d._inplace_values(IMMUTABLE)]) >= 3
    rec.reads.clear()
    sp.checkpoint()
    assert rec.reads == []              # digests: nothing read when nothing changed
    got[1].append("x")
    if inplace == "raise":
        with pytest.raises(InPlaceChangeError, match="key 50"):
            sp.checkpoint()
        d[50] = d[50]
    rec.take()
    sp.checkpoint()
    assert _puts(rec, d._ek(50)) == 1
    sp.close()
    db.close()
    with ObjectSpace.open(loc) as sp:
        d = sp.get_dict("d")
        assert d[50] == [50, "x"] and d[3] == [3] and len(d) == 100


def test_queue_after_popleft_and_appendleft(loc):
    with ObjectSpace.open(loc, inplace="save") as sp:
        q = sp.create_queue("q", [[i] for i in range(5)])
        sp.checkpoint()
        q.popleft()
        q.appendleft(["new"])          # moves every item up (all dirty)
        sp.checkpoint()
        q[2].append("a")
        q.popleft()
        q[0].append("b")
        sp.checkpoint()
        want = [list(v) for v in q]
    with ObjectSpace.open(loc) as sp:
        assert list(sp.get_queue("q")) == want == [[1, "b"], [2, "a"], [3], [4]]


def _drifting_set():
    """A set whose iteration order differs from a set built from its elements afresh."""
    s = set(range(200))
    for i in range(200):
        if i not in (2, 9):
            s.discard(i)
    assert list(s) != list(set(list(s)))
    return s


def test_evicted_and_reloaded_values_are_not_changes(loc):
    """A value evicted and decoded again (or decoded into a set whose packing order
    differs from the record's) is not a change: no write, no error."""
    with ObjectSpace.open(loc) as sp:
        sp.create_value("s", {"s": _drifting_set()})
        sp.create_list("l", [[i] for i in range(50)])
        sp.checkpoint()
    db = open_db(loc)
    rec = RecordingDB(db)
    sp = ObjectSpace(rec, cache_items=4, inplace="raise")
    v = sp.get_value("s")
    assert v.value == {"s": {2, 9}}
    lst = sp.get_list("l")
    for i in range(50):
        assert lst[i] == [i]             # evicts as it goes (cache_items=4)
    sp.checkpoint()
    lst._evict_clean()
    assert lst[7] == [7] and lst[8] == [8]
    rec.take()
    sp.checkpoint()
    assert [op for op in rec.log if op[0] == "put"] == []
    lst[8].append(0)
    with pytest.raises(InPlaceChangeError, match="index 8"):
        sp.checkpoint()
    sp.close()
    db.close()


def test_failed_checkpoint_keeps_the_change(loc):
    db = open_db(loc)

    class Failing(RecordingDB):
        fail = 1

        def write(self, batch):
            if self.fail:
                self.fail -= 1
                raise OSError("disk full")
            super().write(batch)

    fdb = Failing(db)
    sp = ObjectSpace(fdb, inplace="save")
    d = sp.create_dict("d", {"k": [1]})
    fdb.fail = 0
    sp.checkpoint()
    d["k"].append(2)
    fdb.fail = 1
    with pytest.raises(OSError) as info:
        sp.checkpoint()
    assert "go with the next successful checkpoint" in " ".join(info.value.__notes__)
    assert sp.dirty
    sp.checkpoint()
    assert not sp.dirty
    sp.close()
    db.close()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_dict("d")["k"] == [1, 2]


ITER_KINDS = {
    "dict": (lambda sp, n: sp.create_dict("o", {i: [i] for i in range(n)}), lambda o: o.values(), dict),
    "sorted_dict": (lambda sp, n: sp.create_sorted_dict("o", {i: [i] for i in range(n)}), lambda o: o.values(),
                    dict),
    "list": (lambda sp, n: sp.create_list("o", [[i] for i in range(n)]), iter, list),
    "queue": (lambda sp, n: sp.create_queue("o", [[i] for i in range(n)]), iter, list),
    "stream": (lambda sp, n: _fill_stream(sp.create_stream("o"), n), lambda o: (f["f"] for _, f in o),
               lambda o: [f for _, f in o]),
}


def _fill_stream(s, n):
    for i in range(n):
        s.add({"f": [i]}, id=f"{i + 1}-0")


@pytest.mark.parametrize("inplace", ["save", "raise"])
@pytest.mark.parametrize("n", [6, 50])
@pytest.mark.parametrize("kind", list(ITER_KINDS))
def test_values_changed_while_iterating(loc, kind, n, inplace):
    """Iteration hands out the values it caches, small object (loaded whole) or one larger
    than cache_items (cached as it goes, evicting as it goes): each changed in the loop
    body is written, or reported."""
    make, values, read = ITER_KINDS[kind]
    with ObjectSpace.open(loc, inplace=None) as sp:
        make(sp, n)
        sp.checkpoint()
    with ObjectSpace.open(loc, inplace=inplace, cache_items=8) as sp:
        o = sp.get("o")
        for v in values(o):
            v.append("x")
        if inplace == "raise":
            with pytest.raises(InPlaceChangeError) as info:
                sp.checkpoint()
            assert len(info.value.changes) == n
        else:
            sp.checkpoint()
    with ObjectSpace.open(loc, read_only=True) as sp:
        got = read(sp.get("o"))
        got = list(got.values()) if isinstance(got, dict) else got
        want = [[i] for i in range(n)] if inplace == "raise" else [[i, "x"] for i in range(n)]
        assert [g["f"] if isinstance(g, dict) else g for g in got] == want


def test_cache_dropping_an_object_keeps_its_change(loc):
    """The cache drops the handle (cache_objects=1): a value changed in place keeps it."""
    with ObjectSpace.open(loc, cache_objects=1) as sp:
        sp.create_value("a", [1])
        sp.create_value("b", [1])
        sp.checkpoint()
        sp.get_value("a").value.append(2)
        sp.get_value("b").value.append(3)       # the cache drops "a" for "b"
        gc.collect()
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_value("a").value == [1, 2] and sp.get_value("b").value == [1, 3]


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


@pytest.fixture
def point_type():
    register_type(Point, 97, lambda p: [p.x, p.y], lambda a: Point(*a))
    yield Point
    unregister_type(Point)


@pytest.mark.parametrize("inplace", ["save", "raise"])
def test_nested_tuples_and_user_types(loc, inplace, point_type):
    values = {"nested": [{"a": [1]}], "tuple": ([1], 2), "point": Point(1, [2])}
    with ObjectSpace.open(loc, inplace=inplace) as sp:
        d = sp.create_dict("d", values)
        sp.checkpoint()
        d["nested"][0]["a"].append(2)
        d["tuple"][0].append(2)
        d["point"].x = 5
        d["point"].y.append(3)
        if inplace == "raise":
            with pytest.raises(InPlaceChangeError) as info:
                sp.checkpoint()
            assert sorted(c[2] for c in info.value.changes) == ["key 'nested'", "key 'point'", "key 'tuple'"]
            assert str(info.value).startswith("3 stored values were changed in place")
            for k in values:
                d[k] = d[k]
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_dict("d").copy() == {"nested": [{"a": [1, 2]}], "tuple": ([1, 2], 2), "point": Point(5, [2, 3])}


def test_many_changes_are_listed_then_counted(loc):
    with ObjectSpace.open(loc, inplace="raise") as sp:
        lst = sp.create_list("l", [[i] for i in range(9)])
        sp.checkpoint()
        for v in lst:
            v.append(0)
        with pytest.raises(InPlaceChangeError) as info:
            sp.checkpoint()
        assert len(info.value.changes) == 9 and "and 4 more" in str(info.value)


def test_change_into_an_unstorable_value(loc):
    with ObjectSpace.open(loc, inplace="save") as sp:
        d = sp.create_dict("d", {"k": [1]})
        sp.checkpoint()
        d["k"].append(object())
        batch = WriteBatch()
        with pytest.raises(EncodingError, match="dict 'd' key 'k'.*changed in place"):
            sp.save(batch=batch)
        assert len(batch) == 0 and not sp.dirty
        d["k"].pop()
        sp.checkpoint()


def test_full_save(loc):
    with ObjectSpace.open(loc, inplace="raise") as sp:
        d = sp.create_dict("d", {"k": [1]})
        sp.checkpoint()
        d["k"].append(2)
        with pytest.raises(InPlaceChangeError):
            sp.checkpoint(full=True)
    with ObjectSpace.open(loc, inplace="save") as sp:
        d = sp.get_dict("d")
        d["k"].append(2)
        sp.checkpoint(full=True)
        d["k"].append(3)
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_dict("d")["k"] == [1, 2, 3]


def test_stream_entry_fields_from_range(loc):
    with ObjectSpace.open(loc, inplace="save") as sp:
        s = sp.create_stream("s")
        s.add({"n": 1}, id="1-0")
        sp.checkpoint()
        (_, fields), = s.range()
        fields["m"] = 2
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert sp.get_stream("s").range() == [("1-0", {"n": 1, "m": 2})]


# -- reference model: random operations with in-place changes, checkpoints and reopens -----------

def _rand_value(rng, depth=0):
    r = rng.random()
    if depth > 2 or r < 0.25:
        return rng.choice([rng.randint(-9, 9), "s%d" % rng.randint(0, 9), None, 1.5])
    if r < 0.55:
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if r < 0.8:
        return {"k%d" % rng.randint(0, 4): _rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    if r < 0.9:
        return tuple(_rand_value(rng, depth + 1) for _ in range(rng.randint(1, 3)))
    return set(rng.sample(range(300), rng.randint(0, 4)))


def _containers(v, path=()):
    """Paths to every mutable container inside v (v itself included)."""
    if isinstance(v, (list, dict, set)):
        yield path
    if isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            yield from _containers(x, path + (i,))
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _containers(x, path + (k,))


def _at(v, path):
    for p in path:
        v = v[p]
    return v


def _mutate(rng, real, model) -> bool:
    """The same random in-place change to ``real`` (a cached value) and ``model`` (its twin)."""
    paths = list(_containers(model))
    if not paths:
        return False
    path = rng.choice(paths)
    a, b = _at(real, path), _at(model, path)
    new = _rand_value(rng, 2)
    if isinstance(b, list):
        if b and rng.random() < 0.3:
            a.pop()
            b.pop()
        else:
            a.append(copy.deepcopy(new))
            b.append(new)
    elif isinstance(b, dict):
        k = "k%d" % rng.randint(0, 5)
        if k in b and rng.random() < 0.3:
            del a[k], b[k]
        else:
            a[k], b[k] = copy.deepcopy(new), new
    else:
        x = rng.randint(0, 400)
        a.add(x)
        b.add(x)
    return True


class Twins:
    """Every kind that caches values, each with a builtin twin holding copies."""

    def __init__(self, rng, loc, cache_items):
        self.rng, self.loc, self.cache_items = rng, loc, cache_items
        self.sp = None
        self.models = {"value": [None], "array": [None] * 6, "list": [], "queue": deque(), "stack": [],
                       "linked_list": [], "dict": {}, "sorted_dict": {}, "stream": []}
        self.saved = copy.deepcopy(self.models)
        self.next_id = 1
        self.open()
        sp = self.sp
        sp.create_value("value")
        sp.create_array("array", 6)
        for kind in ("list", "queue", "stack", "linked_list", "dict", "sorted_dict", "stream"):
            getattr(sp, f"create_{kind}")(kind)

    def open(self):
        self.sp = ObjectSpace.open(self.loc, cache_items=self.cache_items, inplace="save")

    def obj(self, kind):
        return self.sp.get(kind)

    def cell(self, kind):
        """(cached value, its twin) of a random item of ``kind``, or None when empty. Only
        that item is read: a value is watched while it is cached, and reading others could
        evict it first (with cache_items small), leaving the caller a copy."""
        o, m, rng = self.obj(kind), self.models[kind], self.rng
        if not m:
            return None
        i = rng.randrange(len(m))
        if kind == "value":
            return o.value, m[0]
        by_iter = rng.random() < 0.5       # the value as iteration hands it out
        if kind in ("array", "list", "queue"):
            if by_iter:
                for j, v in enumerate(o):
                    if j == i:
                        return v, m[i]
            return o[i], m[i]
        if kind == "stack":
            return list(o)[len(m) - 1 - i], m[i]
        if kind == "linked_list":
            node = o.first
            for _ in range(i):
                node = node.next
            return node.value, m[i]
        if kind in ("dict", "sorted_dict"):
            k = rng.choice(list(m))
            if by_iter:
                return next(v for kk, v in o.items() if kk == k), m[k]
            return o[k], m[k]
        sid, fields = m[i]
        if by_iter:
            return next(f for sid2, f in o if sid2 == sid), fields
        return o.get(sid), fields

    def write(self, kind):
        rng, o, m = self.rng, self.obj(kind), self.models[kind]
        v = _rand_value(rng)
        c = copy.deepcopy(v)
        r = rng.random()
        if kind == "value":
            o.value, m[0] = v, c
        elif kind == "array":
            i = rng.randrange(6)
            o[i], m[i] = v, c
        elif kind == "list":
            if m and r < 0.3:
                i = rng.randrange(len(m))
                del o[i], m[i]
            elif m and r < 0.5:
                i = rng.randrange(len(m))
                o[i], m[i] = v, c
            else:
                i = rng.randint(0, len(m))
                o.insert(i, v)
                m.insert(i, c)
        elif kind == "queue":
            if m and r < 0.35:
                o.popleft(), m.popleft()
            elif r < 0.5:
                o.appendleft(v), m.appendleft(c)
            else:
                o.append(v), m.append(c)
        elif kind == "stack":
            if m and r < 0.4:
                o.pop(), m.pop()
            else:
                o.push(v), m.append(c)
        elif kind == "linked_list":
            if m and r < 0.3:
                o.remove_first(), m.pop(0)
            else:
                o.add_last(v), m.append(c)
        elif kind in ("dict", "sorted_dict"):
            k = rng.randint(0, 12)
            if k in m and r < 0.3:
                del o[k], m[k]
            else:
                o[k], m[k] = v, c
        else:
            if m and r < 0.2:
                o.delete(m[0][0])
                m.pop(0)
            else:
                sid = f"{self.next_id}-0"
                self.next_id += 1
                o.add({"f": v}, id=sid)
                m.append((sid, {"f": c}))

    def check(self):
        for kind, m in self.models.items():
            o = self.obj(kind)
            if kind == "value":
                assert o.value == m[0]
            elif kind == "stack":
                assert list(o) == list(reversed(m))
            elif kind == "stream":
                assert o.range() == m
            elif kind in ("dict", "sorted_dict"):
                assert dict(o.items()) == m
            else:
                assert list(o) == list(m), kind

    def step(self):
        rng, r = self.rng, self.rng.random()
        kind = rng.choice(list(self.models))
        if r < 0.45:
            self.write(kind)
        elif r < 0.85:
            cell = self.cell(kind)
            if cell is not None:
                _mutate(rng, *cell)
        elif r < 0.95:
            self.sp.checkpoint()
            self.saved = copy.deepcopy(self.models)
        else:
            if rng.random() < 0.5:
                self.sp.checkpoint()
                self.saved = copy.deepcopy(self.models)
            self.sp.close()             # without a checkpoint the twins go back to the last one
            self.models = copy.deepcopy(self.saved)
            self.open()
            self.check()


@pytest.mark.parametrize("seed,cache_items", [(1, 4096), (2, 3), (3, 4096), (4, 5)])
def test_reference_model_with_in_place_changes(loc, seed, cache_items):
    run = Twins(random.Random(seed), loc, cache_items)
    for _ in range(600):
        run.step()
    run.sp.checkpoint()
    run.saved = copy.deepcopy(run.models)
    run.check()
    run.sp.close()
    run.open()
    run.check()
    run.sp.close()


@pytest.mark.parametrize("inplace", ["save", "raise"])
def test_rename_does_not_drop_an_in_place_change(loc, inplace):
    with ObjectSpace.open(loc, inplace=inplace) as sp:
        d = sp.create_dict("d", {"k": [1]})
        sp.checkpoint()
        d["k"].append(2)
        with pytest.raises(InPlaceChangeError if inplace == "raise" else ObjectSpaceError, match="'d'"):
            sp.rename("d", "e")
        if inplace == "raise":
            d["k"] = d["k"]
        sp.checkpoint()
        sp.rename("d", "e")
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert "d" not in sp and sp.get_dict("e")["k"] == [1, 2]
