"""ObjectSpace.rename and ObjectSpace.catalog: an object moves to a new name with everything it
holds, through checkpoints and reopens; the catalog lists names and kinds from the index."""
from __future__ import annotations

import numpy as np
import pytest

from objectspace import AlreadyExistsError, ObjectDeletedError, ObjectNotFoundError, ObjectSpace, ObjectSpaceError


def _fill(sp):
    sp.create_value(("u", "v"), {"a": [1, 2]})
    sp.create_array(("u", "arr"), 3, fill=7)
    sp.create_list(("u", "l"), range(5000))           # more than cache_items: loads lazily
    q = sp.create_queue(("u", "q"), [1, 2, 3])
    q.popleft()
    sp.create_stack(("u", "st"), "abc")
    sp.create_linked_list(("u", "ll"), [1, 2])
    sp.create_set(("u", "s"), {1, 2})
    sp.create_sorted_set(("u", "ss"), [3, 1])
    sp.create_dict(("u", "d"), {"x": 1, "y": [2]})
    sp.create_sorted_dict(("u", "sd"), {2: "b", 1: "a"})
    s = sp.create_stream(("u", "str"))
    s.add({"f": 1}, id="1-1")
    s.add({"f": 2}, id="2-1")
    s.create_group("g", "0")
    s.read_group("g", "c1", count=1)
    nd = sp.create_ndarray(("u", "nd"), (4, 4), "int64", chunks=(2, 2))
    nd[1, 1] = 5


def _snapshot(sp, name):
    obj = sp.get(name)
    if obj.kind == "value":
        return obj.value
    if obj.kind == "stream":
        return obj.range(), [(g["name"], g["pending"]) for g in obj.groups()]
    if obj.kind == "ndarray":
        return obj[...].tolist()
    return obj.copy()


NAMES = ["v", "arr", "l", "q", "st", "ll", "s", "ss", "d", "sd", "str", "nd"]


def test_rename_keeps_everything_through_a_checkpoint_and_a_reopen(tmp_path):
    path = str(tmp_path / "s")
    with ObjectSpace.open(path, cache_items=64) as sp:
        _fill(sp)
        sp.checkpoint()
        before = {n: _snapshot(sp, ("u", n)) for n in NAMES}
        kinds = dict(sp.catalog())
        old = sp.get(("u", "d"))
        for n in NAMES:
            sp.rename(("u", n), ("w", n))
        with pytest.raises(ObjectDeletedError):
            old["x"]
        assert {n: _snapshot(sp, ("w", n)) for n in NAMES} == before
        assert not any(("u", n) in sp for n in NAMES)
        assert dict(sp.catalog()) == {("w", n[1]): k for n, k in kinds.items()}
        sp.checkpoint()
    with ObjectSpace.open(path) as sp:
        assert {n: _snapshot(sp, ("w", n)) for n in NAMES} == before
        assert sp.names() == sorted(sp.names()) and len(sp.names()) == len(NAMES)
    with ObjectSpace.open(path, checkpoint=1, read_only=True) as sp:
        assert {n: _snapshot(sp, ("u", n)) for n in NAMES} == before       # the old checkpoint as it was


def test_rename_refuses_what_it_cannot_do_and_changes_nothing():
    with ObjectSpace.open("memory://rename-errors") as sp:
        sp.create_value("a", 1)
        sp.create_value("b", 2)
        with pytest.raises(ObjectSpaceError, match="unsaved changes"):
            sp.rename("a", "c")
        sp.checkpoint()
        with pytest.raises(ObjectNotFoundError):
            sp.rename("zz", "c")
        with pytest.raises(AlreadyExistsError):
            sp.rename("a", "b")
        sp.get_value("b").value = 3
        sp.rename("a", "a")                         # the same name: nothing to do
        assert sp.get_value("a").value == 1 and sp.get_value("b").value == 3
        sp.checkpoint()
        sp.delete("b")
        with pytest.raises(ObjectSpaceError, match="unsaved changes"):      # b's deletion is not saved yet
            sp.rename("a", "b")


def test_catalog_merges_unsaved_objects_and_deletions():
    with ObjectSpace.open("memory://catalog") as sp:
        sp.create_value("a", 1)
        sp.create_queue("b")
        sp.checkpoint()
        sp.delete("a")
        sp.create_dict("c")
        assert list(sp.catalog()) == [("b", "queue"), ("c", "dict")]
        sp.create_set("a")                          # a deleted name made again, as another kind
        assert dict(sp.catalog()) == {"a": "set", "b": "queue", "c": "dict"}
        assert list(sp.catalog(prefix="b")) == [("b", "queue")]
        assert np.array_equal([k for _, k in sp.catalog()], ["set", "queue", "dict"])
