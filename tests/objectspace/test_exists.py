"""``exists()`` on every kind (issue 19, item 6): True while the object is created or stored and
not deleted; a value also needs a value other than None (Spark's ``ValueState.exists``)."""
from __future__ import annotations

import pytest

from objectspace import ObjectSpace
from .os_helpers import NoIO

KINDS = ["value", "array", "list", "queue", "stack", "linked_list", "set", "sorted_set", "dict",
         "sorted_dict", "stream", "ndarray"]


def create(space, kind, name):
    if kind == "value":
        return space.create_value(name, 0)         # created holding a value: it exists
    if kind == "array":
        return space.create_array(name, 3)
    if kind == "ndarray":
        return space.create_ndarray(name, (3, 2), "int64")
    return getattr(space, f"create_{kind}")(name)


def get(space, kind, name):
    return getattr(space, f"get_{kind}")(name)


@pytest.mark.parametrize("kind", KINDS)
def test_exists_through_create_save_delete_and_reopen(tmp_path, kind):
    loc = str(tmp_path / "s")
    with ObjectSpace.open(loc) as sp:
        obj = create(sp, kind, "x")
        assert obj.exists()                              # created, not saved yet
        sp.checkpoint()
        assert obj.exists()                              # stored
        gone = create(sp, kind, "gone")
        sp.delete("gone")                                # deleted before it was ever saved
        assert not gone.exists()
    assert not obj.exists()                              # the space was closed: the handle stopped working
    with ObjectSpace.open(loc) as sp:
        obj = get(sp, kind, "x")
        assert obj.exists()                              # loaded from the store
        sp.delete("x")
        assert not obj.exists()
        again = create(sp, kind, "x")                    # a new object of that name: another handle
        assert again.exists() and not obj.exists()
        sp.checkpoint()
        sp.delete("x")
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        assert "x" not in sp and "gone" not in sp


@pytest.mark.parametrize("kind", KINDS)
def test_exists_of_an_object_in_memory_does_no_io(tmp_path, kind):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        obj = create(sp, kind, "x")
        sp.checkpoint()
        db, sp._db = sp._db, NoIO()
        try:
            assert obj.exists()
        finally:
            sp._db = db


def test_an_empty_collection_exists(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        lst = sp.create_list("l", [1])
        lst.clear()
        assert lst.exists() and len(lst) == 0


def test_value_exists_only_when_set_as_sparks_value_state(tmp_path):
    loc = str(tmp_path / "s")
    with ObjectSpace.open(loc) as sp:
        v = sp.create_value("v")                         # created without a value
        assert "v" in sp and not v.exists()
        v.value = 0
        assert v.exists()                                # 0 and "" are values
        v.clear()
        assert v.value is None and not v.exists() and "v" in sp
        v.set("")
        assert v.exists()
        sp.create_value("unset")
        sp.create_value("zero", 0)
        sp.checkpoint()
    with ObjectSpace.open(loc) as sp:
        v = sp.get_value("v")
        assert v.exists() and v.value == ""              # one point read, as .value
        assert not sp.get_value("unset").exists()
        assert sp.get_value("zero").exists()
        v.clear()
        sp.checkpoint()
        sp.delete("zero")
        assert not v.exists()
    with ObjectSpace.open(loc) as sp:
        assert not sp.get_value("v").exists() and "zero" in sp     # the delete was never checkpointed


def test_refresh_stops_old_handles(tmp_path):
    with ObjectSpace.open(str(tmp_path / "s")) as sp:
        d = sp.create_dict("d", {"a": 1})
        sp.checkpoint()
        sp.refresh()
        assert not d.exists()                            # a stale handle: get the object again
        assert sp.get_dict("d").exists()
