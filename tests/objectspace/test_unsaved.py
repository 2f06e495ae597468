"""``PersistedObject.unsaved()`` and ``ObjectSpace.unsaved_objects()`` (issue 33): what the
next save writes, checked against the records the save really puts in its batch, through
random changes of every kind, saves that are confirmed or not (a save writes unconfirmed
changes again), clears and reopens."""
from __future__ import annotations

import random

import pytest

import objectspace
from objectspace import ObjectDeletedError, ObjectSpace, Unsaved, item_position, stream_id, stream_position

SEQUENCES = ("queue", "list", "stack", "linked_list", "stream")
KEYED = ("dict", "sorted_dict", "set", "sorted_set")


def _change(obj, kind: str, rng: random.Random) -> None:
    """One random change of ``obj`` (removals and clears included)."""
    r = rng.random()
    v = rng.randrange(1000)
    if kind == "queue":
        if r < 0.5 or not obj:
            obj.append(v)
        elif r < 0.7:
            obj.popleft()
        elif r < 0.8:
            obj[rng.randrange(len(obj))] = v
        elif r < 0.9:
            obj.pop()
        else:
            obj.appendleft(v)
    elif kind == "list":
        if r < 0.5 or not obj:
            obj.append(v)
        elif r < 0.7:
            obj[rng.randrange(len(obj))] = v
        elif r < 0.85:
            obj.pop()
        elif r < 0.95:
            obj.insert(rng.randrange(len(obj) + 1), v)
        else:
            obj.clear()
    elif kind == "stack":
        if r < 0.6 or not obj:
            obj.push(v)
        else:
            obj.pop()
    elif kind == "linked_list":
        if r < 0.5 or not len(obj):
            obj.add_last(v)
        elif r < 0.65:
            obj.remove_first()
        elif r < 0.8:
            obj.first.value = v
        elif r < 0.95:
            obj.add_first(v)
        else:
            obj.clear()
    elif kind == "stream":
        if r < 0.7 or not len(obj):
            obj.add({"v": v})
        elif r < 0.9:
            first = next(iter(obj))[0]
            obj.delete(first)
        else:
            obj.clear()
    elif kind in ("dict", "sorted_dict"):
        k = rng.randrange(30)
        if r < 0.6:
            obj[k] = v
        elif r < 0.95:
            obj.pop(k, None)
        else:
            obj.clear()
    elif kind in ("set", "sorted_set"):
        k = rng.randrange(30)
        if r < 0.6:
            obj.add(k)
        elif r < 0.95:
            obj.discard(k)
        else:
            obj.clear()
    else:
        obj.value = v


def _create(sp: ObjectSpace, kind: str, name: str):
    if kind == "value":
        return sp.create_value(name, 0)
    return getattr(sp, f"create_{kind}")(name)


def _records(batch, obj) -> tuple[list, list]:
    """(written, removed) of the item records of ``obj`` in ``batch``, as ``Unsaved`` names
    them: positions of sequences, encoded keys of the keyed kinds."""
    items = obj._items          # a test may look inside: the record keys of the object's items
    written, removed = [], []
    for k, v in batch:
        if k.startswith(items):
            ik = k[len(items):]
            pos = item_position(obj.kind, ik)
            (removed if v is None else written).append(ik if pos is None else pos)
    return sorted(written), sorted(removed)


def _check_against_save(sp: ObjectSpace, objs: dict) -> None:
    """Every object's ``unsaved()`` says what the save then writes."""
    listed = dict(sp.unsaved_objects())
    seen = {}
    for name, obj in objs.items():
        u = obj.unsaved()
        assert (u is not None) == (obj.encoded_name in listed), name
        if u is not None:
            assert listed[obj.encoded_name] is obj
            assert isinstance(u, Unsaved) and u.kind == obj.kind
            assert list(u.written) == sorted(u.written) and list(u.removed) == sorted(u.removed)
            assert not set(u.written) & set(u.removed)
        seen[name] = u
    batch = sp.save()
    for name, obj in objs.items():
        u = seen[name]
        written, removed = _records(batch, obj)
        if u is None:
            assert not written and not removed, f"{name}: the save wrote records unsaved() did not announce"
            continue
        if obj.kind == "value":         # written as a whole: no entries or positions
            assert u.written == u.removed == () and not u.cleared
            continue
        assert written == list(u.written), name
        if u.cleared:       # every stored entry not written is deleted as well
            assert set(u.removed) <= set(removed), name
        else:
            assert removed == list(u.removed), name
    if len(batch):
        sp.db.write(batch)


@pytest.mark.parametrize("seed", range(6))
def test_unsaved_says_what_the_save_writes(tmp_path, seed):
    rng = random.Random(seed)
    kinds = (*SEQUENCES, *KEYED, "value")
    sp = ObjectSpace.open(str(tmp_path / "s"))
    objs = {k: _create(sp, k, k) for k in kinds}
    for step in range(60):
        for _ in range(rng.randrange(6)):
            kind = rng.choice(kinds)
            _change(objs[kind], kind, rng)
        _check_against_save(sp, objs)
        r = rng.random()
        if r < 0.4:         # the save is confirmed: its changes are no longer unsaved
            sp.db.checkpoint().wait()
            sp.on_saved()
            for obj in objs.values():
                u = obj.unsaved()
                assert u is None or u.written or u.removed or u.cleared or obj._flags, obj.kind
        elif r < 0.45:      # reopen from a checkpoint: nothing unsaved
            sp.checkpoint()
            sp.close()
            sp = ObjectSpace.open(str(tmp_path / "s"))
            objs = {k: sp.get(k) for k in kinds}
            assert not sp.unsaved_objects()
            assert all(obj.unsaved() is None for obj in objs.values())
        # else: the save stays unconfirmed, and the next one writes its changes again
    sp.close()


def test_positions_and_stream_ids(tmp_path):
    sp = ObjectSpace.open(str(tmp_path / "s"))
    q = sp.create_queue("q", [1, 2, 3])
    q.popleft()
    assert q.positions() == range(1, 3) and q.unsaved().written == (1, 2)
    lst = sp.create_linked_list("l", ["a", "b"])
    node = lst.last
    assert lst.positions() == [lst.first.position, node.position]
    assert lst.node_at(node.position) is node and lst.node_at(10 ** 6) is None
    s = sp.create_stream("s")
    eid = s.add({"x": 1}, id="5-7")
    assert s.positions() == [stream_position(eid)] == [(5 << 64) | 7]
    assert stream_id((5 << 64) | 7) == "5-7" == eid
    with pytest.raises(objectspace.StreamIdError, match="not a stream position"):
        stream_id(-1)
    with pytest.raises(objectspace.StreamIdError, match="invalid stream id"):
        stream_position("5-x")
    assert item_position("dict", b"\x00" * 8) is None and item_position("queue", None) is None
    sp.checkpoint()
    assert not sp.unsaved_objects() and q.unsaved() is None
    d = sp.create_dict("d", {"a": 1})
    assert sp.unsaved_objects()[d.encoded_name] is d and d.encoded_name == objectspace.encode_name("d")
    sp.delete("d")
    assert d.encoded_name not in sp.unsaved_objects() and not d.valid
    with pytest.raises(ObjectDeletedError):
        d.unsaved()
    v = sp.create_value("v", None)
    assert v.valid and not v.exists()
    view = sp.unsaved_objects()
    with pytest.raises(TypeError):
        view[b"x"] = v          # read-only
    sp.close()
