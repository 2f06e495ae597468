"""The inspection library: objects with sizes, slots of every kind, diffs of scripted histories,
stats, JSON forms, instances of a location (plain and spark_ops layouts across a rescale)."""
from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import msgpack
import pytest

import dkv
import objectspace
from objectspace import (ObjectChange, ObjectSpace, SlotChange, diff, diff_pair, find_instances, iter_slots,
                         list_objects, object_info, pair_instances, space_stats, to_jsonable, walk_slots)

INSPECTION_NAMES = ["list_objects", "object_info", "iter_slots", "walk_slots", "diff", "space_stats",
                    "find_instances", "key_groups_of", "spaces_of", "pair_instances", "diff_pair", "to_jsonable",
                    "ObjectInfo", "ObjectChange", "SlotChange", "SpaceStats", "InstanceRef",
                    "FamilyRule", "FamilyMember", "register_family_rule"]


def build_history(location) -> None:
    """Epoch 1: one object of every kind; epoch 2: adds, changes and removes in each; epoch 3: nothing."""
    with ObjectSpace.open(location, clock=lambda: 1000) as sp:
        sp.create_value("v", 1)
        sp.create_array("a", 3, fill=0)
        sp.create_list("l", [1, 2, 3])
        sp.create_queue("q", [1, 2, 3])
        sp.create_stack("s", [1, 2])
        sp.create_linked_list("ll", ["a", "b", "c"])
        sp.create_set("st", {1, 2})
        sp.create_sorted_set("ss", [3, 1])
        sp.create_dict("d", {"a": 1, "b": 2})
        sp.create_sorted_dict("sd", {2: "x"})
        x = sp.create_stream("x")
        x.add({"f": 1})
        x.add({"f": 2})
        x.create_group("g", start="0")
        sp.create_list("k", [1])
        sp.create_value("gone", "bye")
        sp.create_dict(("user", 1, b"z"), {(1, 2): b"raw"})
        sp.create_queue("raw", [b"\x00\x01"], codec="raw")
        sp.checkpoint(1)
        sp.get_value("v").value = 2
        sp.get_array("a")[1] = 5
        lst = sp.get_list("l")
        lst.append(4)
        lst[0] = 9
        q = sp.get_queue("q")
        q.popleft()
        q.append(4)
        sp.get_stack("s").pop()
        ll = sp.get_linked_list("ll")
        ll.add_after(ll.first, "x")
        ll.remove("c")
        st = sp.get_set("st")
        st.discard(1)
        st.add(3)
        d = sp.get_dict("d")
        d["a"] = 10
        del d["b"]
        d["c"] = 3
        x = sp.get_stream("x")
        x.add({"f": 3})
        x.read_group("g", "w1", count=1)
        sp.delete("gone")
        sp.create_dict("new", {"n": 1})
        sp.delete("k")
        sp.create_set("k", [1])
        sp.checkpoint(2)
        sp.checkpoint(3)


EXPECTED_DIFF = {
    # (name, change, slot): (old, new); object-level entries have slot "OBJECT" and (old_length, new_length)
    ("a", "changed", "OBJECT"): (3, 3), ("a", "changed", 1): (0, 5),
    ("d", "changed", "OBJECT"): (2, 2), ("d", "changed", "a"): (1, 10), ("d", "removed", "b"): (2, None),
    ("d", "added", "c"): (None, 3),
    ("gone", "removed", "OBJECT"): (1, None), ("gone", "removed", None): ("bye", None),
    ("k", "removed", "OBJECT"): (1, None), ("k", "removed", 0): (1, None),
    ("k", "added", "OBJECT"): (None, 1), ("k", "added", 1): (None, None),
    ("l", "changed", "OBJECT"): (3, 4), ("l", "changed", 0): (1, 9), ("l", "added", 3): (None, 4),
    ("ll", "changed", "OBJECT"): (3, 3), ("ll", "removed", 2): ("c", None), ("ll", "added", 1): (None, "x"),
    ("new", "added", "OBJECT"): (None, 1), ("new", "added", "n"): (None, 1),
    ("q", "changed", "OBJECT"): (3, 3), ("q", "removed", 0): (1, None), ("q", "added", 2): (None, 4),
    ("s", "changed", "OBJECT"): (2, 1), ("s", "removed", 1): (2, None),
    ("st", "changed", "OBJECT"): (2, 2), ("st", "removed", 1): (None, None), ("st", "added", 3): (None, None),
    ("v", "changed", "OBJECT"): (1, 1), ("v", "changed", None): (1, 2),
    ("x", "changed", "OBJECT"): (2, 3), ("x", "added", "1000-2"): (None, {"f": 3}),
    ("x", "changed", ("group", "g")): ({"last_delivered": "0-0", "pending": 0, "consumers": {}},
                                       {"last_delivered": "1000-0", "pending": 1, "consumers": {"w1": 1000}}),
    ("x", "added", ("pending", "g", "1000-0")): (None, {"consumer": "w1", "delivered_ms": 1000, "deliveries": 1}),
}


def as_table(changes) -> dict:
    out = {}
    for c in changes:
        if isinstance(c, ObjectChange):
            out[(c.name, c.change, "OBJECT")] = (c.old_length, c.new_length)
        else:
            out[(c.name, c.change, c.slot)] = (c.old, c.new)
    return out


@pytest.fixture
def history(tmp_path) -> str:
    loc = str(tmp_path / "space")
    build_history(loc)
    return loc


def at(loc, epoch):
    return ObjectSpace(dkv.open(loc, checkpoint=epoch, read_only=True))


def test_exports_are_pinned():
    assert set(INSPECTION_NAMES) <= set(objectspace.__all__)
    for name in INSPECTION_NAMES:
        assert getattr(objectspace, name) is not None


def test_diff_of_a_scripted_history_across_kinds(history):
    a, b = at(history, 1), at(history, 2)
    changes = list(diff(a, b))
    assert as_table(changes) == EXPECTED_DIFF
    # each object's header comes first, objects in name order (str names first)
    headers = [c for c in changes if isinstance(c, ObjectChange)]
    order = list(dict.fromkeys(h.name for h in headers))
    assert order == sorted(order, key=objectspace.encode_key)
    for i, c in enumerate(changes):
        if isinstance(c, SlotChange):
            owner = next(h for h in reversed(changes[:i]) if isinstance(h, ObjectChange))
            assert owner.name == c.name and owner.kind == c.kind
    # the reverse diff swaps added and removed
    back = as_table(diff(b, a))
    assert back[("gone", "added", None)] == (None, "bye") and back[("new", "removed", "n")] == (1, None)
    assert back[("q", "added", 0)] == (None, 1) and back[("q", "removed", 2)] == (4, None)
    assert list(diff(at(history, 2), at(history, 3))) == []
    assert as_table(diff(None, at(history, 1)))[("gone", "added", None)] == (None, "bye")


def test_progress_callbacks(history, monkeypatch):
    from objectspace._inspect import changes as diff_module
    from objectspace._inspect import records
    monkeypatch.setattr(diff_module, "EVERY", 1)
    monkeypatch.setattr(records, "EVERY", 1)
    seen = []
    list(diff(at(history, 1), at(history, 2), progress=lambda d, t, w: seen.append((d, t, w))))
    assert seen and all(t is None for _, t, _ in seen) and seen[-1][0] > seen[0][0]
    listed = []
    list(list_objects(at(history, 2), progress=lambda d, t, w: listed.append(d)))
    assert listed == list(range(1, 16))


def test_list_objects_counts_every_record(history):
    sp = at(history, 2)
    infos = list(list_objects(sp))
    assert [i.name for i in infos] == list(sp.names())
    by = {i.name: i for i in infos}
    assert by["q"].kind == "queue" and by["q"].length == 3 and by["raw"].codec == "raw"
    for info in infos:
        ns = sp.prefix + b"\x01" + objectspace.encode_key(info.name)
        recs = list(sp.db.scan_prefix(ns))
        idx = sp.db.get(sp.prefix + b"\x00" + objectspace.encode_key(info.name))
        assert info.records == len(recs) + 1
        assert info.bytes == sum(len(k) + len(v) for k, v in recs) + len(ns) + len(idx)   # the index key is as long as ns
    lean = list(list_objects(sp, sizes=False))
    assert [(i.name, i.kind, i.length) for i in lean] == [(i.name, i.kind, i.length) for i in infos]
    assert all(i.bytes is None for i in lean)
    assert [i.name for i in list_objects(sp, scope=("user",))] == [("user", 1, b"z")]
    assert object_info(sp, "x").length == 3
    with pytest.raises(objectspace.ObjectNotFoundError):
        object_info(sp, "nope")


def live(sp, name):
    obj = sp.get(name)
    kind = obj.kind
    if kind == "value":
        return [(None, obj.value)]
    if kind == "stack":
        return list(enumerate(reversed(list(obj))))
    if kind in ("set", "sorted_set"):
        return sorted((k, None) for k in obj)
    if kind in ("dict", "sorted_dict"):
        return sorted(obj.items())
    if kind == "stream":
        return list(obj)
    return list(enumerate(obj))


def test_iter_slots_matches_the_objects_and_pages(history):
    with ObjectSpace.open(history, checkpoint=2, discard_newer=True) as live_sp:
        sp = at(history, 2)
        for name in sp.names():
            got = list(iter_slots(sp, name))
            entries = [sv for sv in got if not isinstance(sv[0], tuple) or sp.get(name).kind != "stream"]
            expect = live(live_sp, name)
            if sp.get(name).kind in ("set", "dict"):
                entries = sorted(entries)
            assert entries == expect, name
            for off, lim in ((0, 1), (1, 2), (2, 10), (len(got), 3)):
                assert list(iter_slots(sp, name, offset=off, limit=lim)) == got[off:off + lim], (name, off, lim)
        assert list(iter_slots(sp, "x"))[-2:] == [
            (("group", "g"), {"last_delivered": "1000-0", "pending": 1, "consumers": {"w1": 1000}}),
            (("pending", "g", "1000-0"), {"consumer": "w1", "delivered_ms": 1000, "deliveries": 1})]
        walked = [(i.name, s, v) for i, s, v in walk_slots(sp)]
        assert walked == [(n, s, v) for n in sp.names() for s, v in iter_slots(sp, n)]
    with pytest.raises(objectspace.ObjectNotFoundError):
        list(iter_slots(sp, "nope"))
    with pytest.raises(ValueError):
        list(iter_slots(sp, "q", offset=-1))


def test_stats(history):
    st = space_stats(at(history, 2), top=3)
    js = st.as_json()
    assert js["objects"] == 15 and js["kinds"]["dict"]["objects"] == 3
    assert js["records"] == sum(i.records for i in list_objects(at(history, 2)))
    assert len(js["largest"]) == 3 and js["largest"][0]["bytes"] >= js["largest"][-1]["bytes"]
    assert json.loads(json.dumps(js)) == js


class Point:
    def __init__(self, x):
        self.x = x


def test_values_as_json_and_unregistered_types(tmp_path):
    when = dt.datetime(2024, 1, 2, 3, 4, 5)
    u = uuid.UUID(int=7)
    assert to_jsonable((1, b"\x00", {1, 2}, {"a": when}, {1: 2}, float("nan"), decimal.Decimal("1.5"), u,
                        dt.timedelta(seconds=3), msgpack.ExtType(42, b"\x01"))) == [
        1, {"$bytes": "00"}, [1, 2], {"a": "2024-01-02T03:04:05"}, {"$map": [[1, 2]]}, {"$float": "nan"}, "1.5",
        str(u), 3.0, {"$ext": 42, "hex": "01"}]
    loc = str(tmp_path / "ext")
    objectspace.register_type(Point, 42, lambda p: p.x, Point)
    try:
        with ObjectSpace.open(loc) as sp:
            sp.create_list("pts", [Point(1), (Point(2), 3)])
            sp.checkpoint(1)
    finally:
        objectspace.unregister_type(Point)
    sp = at(loc, 1)
    (s0, v0), (s1, v1) = iter_slots(sp, "pts")
    assert v0 == msgpack.ExtType(42, msgpack.packb(1)) and v1[1] == 3 and isinstance(v1[0], msgpack.ExtType)


def test_repr_html_shows_kind_length_dirt_and_first_items():
    with ObjectSpace.open("memory://inspect-html") as sp:
        q = sp.create_queue("events", range(15))
        sp.checkpoint(1)
        q.append("<b>")
        html = q._repr_html_()
        assert "PersistedQueue" in html and "length 16" in html and "unsaved" in html
        assert "&lt;b&gt;" not in html and "… 6 more" in html and "<td>9</td>" in html
        sp.checkpoint(2)
        assert "saved" in q._repr_html_() and "unsaved" not in q._repr_html_()
        s = sp.create_set("tags", {"a"})
        assert "<th>element</th>" in s._repr_html_()
        sp.delete("tags")
        assert "deleted" in s._repr_html_()


# -- locations: plain folders and spark_ops layouts ----------------------------------------------

def test_find_instances_plain(history):
    (ref,) = find_instances(history)
    assert ref.instance == "" and ref.epoch == 3 and ref.epochs == (1, 2, 3) and ref.member is None
    assert ref.labels == {}
    assert find_instances(history, epoch=1)[0].epoch == 1
    with pytest.raises(dkv.CheckpointNotFoundError, match="retained epochs: \\[1, 2, 3\\]"):
        find_instances(history, epoch=9)
    with pytest.raises(objectspace.ObjectSpaceError):
        find_instances(history, instance="nope")


def test_a_family_rule_makes_generations_of_instances(tmp_path, monkeypatch):
    """A package's naming rule (here a toy one; spark_ops registers its operators') makes
    families of instances: find_instances reads the generation that held each epoch, and
    pair_instances matches old and new members by their key-group ranges."""
    from objectspace._inspect import locations
    monkeypatch.setattr(locations, "_RULES", {})
    monkeypatch.setattr(locations, "_ENTRY_POINTS_LOADED", True)      # this rule only, no entry points

    def member(location, instance):
        gen, _, part = instance.partition("/")
        if not (gen.startswith("gen") and part):
            return None
        return objectspace.FamilyMember("toy", (int(gen[3:]),), {"part": part})
    objectspace.register_family_rule(objectspace.FamilyRule("toy", member, labels=("part",)))
    root = str(tmp_path / "toy")
    key = dkv.key_prefix(7, objectspace.SCHEMA_STATE) + b"k"
    with dkv.open(root, instance="gen0/all") as db:
        for epoch in (0, 1):
            db.put(key, b"%d" % epoch)
            db.checkpoint(epoch).wait()
    for part, groups in (("low", (0, 8)), ("high", (8, 1 << 16))):
        with dkv.open(root, instance=f"gen2/{part}", sources=[("gen0/all", 1)], key_group_range=groups) as db:
            db.checkpoint(2).wait()
    with dkv.open(root, instance="alone") as db:
        db.checkpoint(5).wait()
    refs = find_instances(root)
    assert [(r.instance, r.epoch) for r in refs] == [("alone", 5), ("gen2/high", 2), ("gen2/low", 2)]
    assert refs[1].as_json() == {"instance": "gen2/high", "epoch": 2, "part": "high"}
    assert refs[0].as_json() == {"instance": "alone", "epoch": 5, "part": None} and refs[0].member is None
    assert [r.instance for r in find_instances(root, epoch=1)] == ["gen0/all"]
    pairs = pair_instances(root, 1, 2)
    assert [(o.instance, n.instance, g) for o, n, g in pairs] == [("gen0/all", "gen2/high", (8, 1 << 16)),
                                                                 ("gen0/all", "gen2/low", (0, 8))]


@pytest.fixture
def operator_state(tmp_path):
    """An operator's state after 3 batches, rescaled from 2 to 3 shards before the last."""
    from spark_ops import Operator
    from spark_ops.testing import OperatorHarness

    class Count(Operator):
        def on_event(self, key, row, ctx):
            n = ctx.value("n", 0)
            n.value += 1
            ctx.list("seen").append(row["v"])

    root = str(tmp_path / "state" / "count")
    h = OperatorHarness(Count(), key="k", state=root, partitions=2, key_groups=8)
    h.run_batch([{"k": "a", "v": 1}, {"k": "b", "v": 2}])
    h.run_batch([{"k": "a", "v": 3}, {"k": "c", "v": 4}])
    h.rescale(3)
    h.run_batch([{"k": "c", "v": 5}, {"k": "d", "v": 6}])
    h.close()
    return str(tmp_path / "state")


def state_of(refs) -> dict:
    out = {}
    for ref in refs:
        with ref.open() as db:
            for kg, sp in objectspace.spaces_of(db):
                for info, slot, v in walk_slots(sp):
                    out[(info.name, slot)] = v
    return out


def test_find_instances_follows_the_layout_of_each_epoch(operator_state):
    latest = find_instances(operator_state)
    assert [r.instance for r in latest] == [f"count/L000000000002-n00003/p0000{s}" for s in range(3)]
    assert {r.labels["operator"] for r in latest} == {"count"} and all(r.epoch == 2 for r in latest)
    assert {r.member.family for r in latest} == {"count"} and {r.labels["query_id"] for r in latest} == {None}
    old = find_instances(operator_state, epoch=1)
    assert [r.member.generation for r in old] == [(0, 2), (0, 2)]     # (first batch, shards) of the layout
    assert state_of(old) == {(("a", "n"), None): 2, (("a", "seen"), 0): 1, (("a", "seen"), 1): 3,
                             (("b", "n"), None): 1, (("b", "seen"), 0): 2,
                             (("c", "n"), None): 1, (("c", "seen"), 0): 4}
    new = state_of(latest)
    assert new[(("c", "n"), None)] == 2 and new[(("d", "seen"), 0)] == 6 and len(new) == 10
    # the operator's own folder works too (owner "")
    sub = find_instances(operator_state + "/count", instance="L000000000002-n00003")
    assert len(sub) == 3 and sub[0].labels["operator"] == "count" and sub[0].member.family == ""


def test_diff_across_a_rescale_equals_the_difference_of_the_states(operator_state):
    for e1, e2 in ((0, 2), (1, 2), (0, 1), (2, 0)):
        pairs = pair_instances(operator_state, e1, e2)
        changes = {}
        for old, new, groups in pairs:
            for kg, c in diff_pair(old, new, groups):
                if isinstance(c, SlotChange):
                    changes[(c.name, c.slot)] = (c.change, c.old, c.new)
        a, b = state_of(find_instances(operator_state, epoch=e1)), state_of(find_instances(operator_state, epoch=e2))
        expect = {}
        for k in set(a) | set(b):
            if k not in a:
                expect[k] = ("added", None, b[k])
            elif k not in b:
                expect[k] = ("removed", a[k], None)
            elif a[k] != b[k]:
                expect[k] = ("changed", a[k], b[k])
        assert changes == expect, (e1, e2)
