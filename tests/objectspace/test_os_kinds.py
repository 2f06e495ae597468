"""The Python face of each kind: ABCs, verbs and the behaviours the model tests do not pin."""
from __future__ import annotations

import collections
import collections.abc as abc

import pytest

from objectspace import ObjectSpace
from os_helpers import commit


@pytest.mark.parametrize("kind,base", [
    ("array", abc.Sequence), ("list", abc.MutableSequence), ("queue", abc.Sequence),
    ("stack", abc.Collection), ("linked_list", abc.Collection), ("set", abc.MutableSet),
    ("sorted_set", abc.MutableSet), ("dict", abc.MutableMapping), ("sorted_dict", abc.MutableMapping),
    ("stream", abc.Collection),
])
def test_registers_the_right_abc(space, kind, base):
    obj = space.create_array("x", 1) if kind == "array" else getattr(space, f"create_{kind}")("x")
    assert isinstance(obj, base)


def test_value(space, db):
    v = space.create_value("v")
    assert v.value is None
    v.set([1, 2])
    commit(space)
    assert ObjectSpace(db, prefix=space.prefix).get_value("v").get() == [1, 2]


def test_array(space):
    a = space.create_array("a", 4, fill="-")
    a[1:3] = ["x", "y"]
    assert list(a) == ["-", "x", "y", "-"] and a[-1] == "-" and a.index("y") == 2
    with pytest.raises(ValueError, match="cannot resize"):
        a[0:2] = [1]
    with pytest.raises(IndexError):
        a[4] = 1
    assert list(reversed(a)) == ["-", "y", "x", "-"]


def test_list_mixins_and_slices(space):
    lst = space.create_list("l", [5, 3, 1])
    lst += [4]
    lst.sort()
    assert list(lst) == [1, 3, 4, 5]
    lst[1:3] = ["a", "b", "c"]
    assert list(lst) == [1, "a", "b", "c", 5]
    del lst[::2]
    assert list(lst) == ["a", "c"]
    lst.reverse()
    assert lst.pop(0) == "c" and lst.count("a") == 1 and "a" in lst and list(reversed(lst)) == ["a"]


def test_queue_and_stack_verbs(space):
    q = space.create_queue("q")
    q.enqueue(1)
    q.extend([2, 3])
    assert q.peek() == 1 and q[1] == 2 and q[-1] == 3 and len(q) == 3
    assert q.dequeue() == 1 and q.pop() == 3 and list(q) == [2]
    q.clear()
    with pytest.raises(IndexError):
        q.popleft()
    with pytest.raises(IndexError):
        q.peek()
    s = space.create_stack("s", [1, 2])
    s.push(3)
    assert list(s) == [3, 2, 1] and s.peek() == 3 and 2 in s
    assert [s.pop(), s.pop(), s.pop()] == [3, 2, 1]
    with pytest.raises(IndexError):
        s.pop()


def test_mutation_during_iteration_raises(space):
    q = space.create_queue("q", [1, 2, 3])
    with pytest.raises(RuntimeError):
        for _ in q:
            q.append(0)
    d = space.create_sorted_dict("d", {1: 1, 2: 2})
    with pytest.raises(RuntimeError):
        for k in d:
            d[k + 10] = 0


def test_linked_list_nodes(space, db):
    ll = space.create_linked_list("ll", ["b"])
    a = ll.add_first("a")
    c = ll.add_last("c")
    b = a.next
    ll.add_before(b, "a2")
    ll.add_after(b, "b2")
    assert list(ll) == ["a", "a2", "b", "b2", "c"]
    assert b.prev.value == "a2" and c.next is None and a.prev is None and ll.first is a and ll.last is c
    b.value = "B"
    ll.remove(b)
    assert b.list is None and list(ll) == ["a", "a2", "b2", "c"]
    with pytest.raises(ValueError):
        ll.add_after(b, "x")              # a removed node
    other = space.create_linked_list("other", ["z"])
    with pytest.raises(ValueError):
        ll.remove(other.first)
    assert ll.find("b2").value == "b2" and ll.find("nope") is None and ll.find_last("a").value == "a"
    assert ll.remove_first() == "a" and ll.remove_last() == "c"
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix).get_linked_list("ll")
    assert list(again) == ["a2", "b2"] and again.last.prev.value == "a2"


def test_set_operators_return_plain_sets(space):
    s = space.create_set("s", [1, 2, 3])
    assert s & {2, 3, 4} == {2, 3} and s | {9} == {1, 2, 3, 9} and s - {1} == {2, 3}
    assert s == {1, 2, 3} and s <= {1, 2, 3, 4} and s.isdisjoint({7})
    s |= {4}
    assert 4 in s and len(s) == 4


def test_sorted_set_verbs(space):
    ss = space.create_sorted_set("ss", [5, 1, 3])
    assert list(ss) == [1, 3, 5] and ss[0] == 1 and ss[-1] == 5 and ss[0:2] == [1, 3]
    assert ss.index(3) == 1 and ss.bisect_left(4) == 2 and ss.bisect(5) == 3
    assert list(ss.irange(2, None)) == [3, 5] and list(ss.islice(1, None, reverse=True)) == [5, 3]
    assert ss.pop() == 5 and ss.pop(0) == 1 and list(ss) == [3]
    del ss[0]
    assert len(ss) == 0
    with pytest.raises(IndexError):
        ss.pop()


def test_keys_of_mixed_types_sort_by_type(space):
    ss = space.create_sorted_set("ss", ["b", 2, None, (1,), 1.5, b"x", True])
    assert list(ss) == [None, True, 2, 1.5, b"x", "b", (1,)]
    assert len(space.create_set("s", [1, 1.0, True])) == 3


def test_dict_verbs(space):
    d = space.create_dict("d", [("a", 1)])
    assert d.setdefault("b", 2) == 2 and d.pop("a") == 1 and d.pop("zz", None) is None
    with pytest.raises(KeyError):
        d.pop("zz")
    d.update({"c": 3}, e=5)
    assert dict(d) == {"b": 2, "c": 3, "e": 5} and ("c", 3) in d.items() and 5 in d.values()
    assert d == {"b": 2, "c": 3, "e": 5}
    with pytest.raises(ValueError, match="NaN"):
        d[float("nan")] = 1


def test_sorted_dict_verbs(space):
    sd = space.create_sorted_dict("sd", {3: "c", 1: "a", 2: "b"})
    assert list(sd.keys()) == [1, 2, 3] and sd.keys()[0] == 1 and list(sd.values()) == ["a", "b", "c"]
    assert sd.peekitem() == (3, "c") and sd.popitem(0) == (1, "a") and sd.index(3) == 1
    assert list(sd.irange_items(2, 3)) == [(2, "b"), (3, "c")] and list(reversed(sd)) == [3, 2]
    assert list(sd.islice(0, 1)) == [2]
    sd.clear()
    with pytest.raises(KeyError):
        sd.popitem()


def test_values_are_stored_when_assigned(space, db):
    d = space.create_dict("d", {"k": [1]})
    commit(space)
    d["k"].append(2)                      # not seen: reassign to mark dirty
    commit(space)
    assert ObjectSpace(db, prefix=space.prefix).get_dict("d")["k"] == [1]
    d["k"] = d["k"]
    commit(space)
    assert ObjectSpace(db, prefix=space.prefix).get_dict("d")["k"] == [1, 2]


def test_handles_do_not_pickle(space):
    import pickle
    with pytest.raises(TypeError, match="handle"):
        pickle.dumps(space.create_list("l"))


# ------------------------------------------------------------------ plain copies and their limits

TWINS = [  # kind, items, what copy() gives (the builtin twin, in iteration order)
    ("list", [1, [2, 3], {"a": (1, [2])}], [1, [2, 3], {"a": (1, [2])}]),
    ("array", None, [[0], [0]]),
    ("queue", [1, {"x": [1]}], collections.deque([1, {"x": [1]}])),
    ("stack", [1, 2, 3], [3, 2, 1]),                          # iteration order: from the top
    ("linked_list", ["a", ["b"]], ["a", ["b"]]),
    ("set", [3, "x", (1, 2)], {3, "x", (1, 2)}),
    ("sorted_set", [3, 1, 2], {1, 2, 3}),
    ("dict", {"a": [1], "b": {"c": {1, 2}}}, {"a": [1], "b": {"c": {1, 2}}}),
    ("sorted_dict", {"b": 2, "a": [1]}, {"a": [1], "b": 2}),
]


def _make(space, kind, items):
    if kind == "array":
        return space.create_array("x", 2, fill=[0])
    return getattr(space, f"create_{kind}")("x", items)


@pytest.mark.parametrize("kind,items,want", TWINS, ids=[t[0] for t in TWINS])
def test_copy_is_the_plain_twin_sharing_nothing(space, db, kind, items, want):
    import copy as copy_module
    import json
    import pickle
    obj = _make(space, kind, items)
    for o in (obj, _reloaded(space, db, kind)):              # from memory and from the store
        c = o.copy()
        assert type(c) is type(want) and c == want
        if kind == "sorted_dict":
            assert list(c) == ["a", "b"]                     # key order kept
        assert pickle.loads(pickle.dumps(c)) == c
        inner = next((v for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, (list, dict))), None)
        if inner is not None:                                # nested values are copies: the object is untouched
            inner.clear()
            assert o.copy() == want
    # Where "goes wherever a list or dict goes" ends (docs/objectspace.md): the handle itself.
    assert not isinstance(obj, (list, dict, set, collections.deque))
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(obj)
    for dump in (pickle.dumps, copy_module.copy, copy_module.deepcopy):
        with pytest.raises(TypeError, match=r"handle on stored state.*\.copy\(\) gives a plain"):
            dump(obj)
    if kind in ("list", "array", "sorted_dict"):
        json.dumps(obj.copy())                                   # JSON takes lists and dicts ...
    elif kind in ("queue", "stack", "set"):
        json.dumps(list(obj))                                    # ... not deques and sets


def _reloaded(space, db, kind):
    commit(space)
    fresh = ObjectSpace(db, prefix=space.prefix)
    return getattr(fresh, f"get_{kind}")("x")


def test_copy_of_a_value_a_stream_and_nested_handles(space):
    v = space.create_value("v", {"x": [1]})
    c = v.copy()
    c["x"].append(2)
    assert c == {"x": [1, 2]} and v.value == {"x": [1]}
    s = space.create_stream("s")
    sid = s.add({"f": [1]})
    assert s.copy() == [(sid, {"f": [1]})]
    q = space.create_queue("q", [1])
    holder = space.create_list("holder", [q])               # a handle inside (never saved as such)
    assert holder.copy() == [collections.deque([1])]


def test_equality_with_the_twins_follows_the_abcs(space):
    """Mappings and sets compare by content (the ABCs define ==); sequences do not."""
    assert space.create_dict("d", {"a": 1}) == {"a": 1}
    assert space.create_set("s", [1]) == {1}
    lst = space.create_list("l", [1])
    assert lst != [1] and list(lst) == [1] and lst.copy() == [1]


def test_a_deleted_handle_cannot_be_copied(space):
    from objectspace.errors import ObjectDeletedError
    lst = space.create_list("l", [1])
    space.delete("l")
    with pytest.raises(ObjectDeletedError):
        lst.copy()
