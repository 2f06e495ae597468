"""ObjectSpace: naming, lookup, errors, listing, prefixes, lifecycle."""
from __future__ import annotations

import gc
import re

import pytest

import dkv
import objectspace
from objectspace import (AlreadyExistsError, KindMismatchError, ObjectDeletedError, ObjectNotFoundError,
                         ObjectSpace, ObjectSpaceError)
from .os_helpers import HAVE_DKV, NoIO, commit

KINDS = ["value", "array", "list", "queue", "stack", "linked_list", "set", "sorted_set", "dict",
         "sorted_dict", "stream", "ndarray"]


def create(space, kind, name):
    if kind == "array":
        return space.create_array(name, 3)
    if kind == "ndarray":
        return space.create_ndarray(name, (3, 2), "int64")
    return getattr(space, f"create_{kind}")(name)


def test_public_names_are_pinned():
    assert sorted(objectspace.__all__) == sorted([
        "ObjectSpace", "DEFAULT_PREFIX", "SCHEMA_STATE", "BLOOM_STRIP", "ObjectCache",
        "PersistedValue", "PersistedArray", "PersistedList", "PersistedQueue", "PersistedStack",
        "PersistedLinkedList", "LinkedListNode", "PersistedSet", "PersistedSortedSet",
        "PersistedDict", "PersistedSortedDict", "PersistedStream", "PersistedNDArray", "PendingEntry",
        "register_type", "unregister_type", "encode_key", "decode_key", "encode_name",
        # what a save will write (docs/objectspace.md)
        "Unsaved", "item_position", "stream_id", "stream_position",
        "ObjectSpaceError", "AlreadyExistsError", "ObjectNotFoundError", "KindMismatchError",
        "EncodingError", "ObjectDeletedError", "CorruptionError", "StreamIdError", "InPlaceChangeError",
        # inspection (objectspace/_inspect)
        "list_objects", "object_info", "iter_slots", "walk_slots", "diff", "space_stats",
        "find_instances", "key_groups_of", "spaces_of", "pair_instances", "diff_pair", "to_jsonable",
        "ObjectInfo", "ObjectChange", "SlotChange", "SpaceStats", "InstanceRef",
        "FamilyRule", "FamilyMember", "register_family_rule",
    ])
    for name in objectspace.__all__:
        assert getattr(objectspace, name) is not None


def test_error_hierarchy():
    assert issubclass(AlreadyExistsError, (ObjectSpaceError, ValueError))
    assert issubclass(ObjectNotFoundError, ObjectSpaceError) and issubclass(ObjectNotFoundError, KeyError)
    assert issubclass(KindMismatchError, ObjectSpaceError) and issubclass(KindMismatchError, TypeError)
    assert issubclass(objectspace.EncodingError, TypeError)


def test_constructor_is_o1_and_does_no_io():
    spaces = [ObjectSpace(NoIO(), prefix=dkv.keys.key_prefix(kg, objectspace.SCHEMA_STATE) + b"op-7")
              for kg in range(256)]
    assert len(spaces) == 256


@pytest.mark.parametrize("kind", KINDS)
def test_create_get_and_errors(space, db, kind):
    obj = create(space, kind, "x")
    assert obj.kind == kind and obj.name == "x"
    assert getattr(space, f"get_{kind}")("x") is obj
    with pytest.raises(AlreadyExistsError):
        create(space, kind, "x")
    other = "queue" if kind != "queue" else "dict"
    with pytest.raises(KindMismatchError, match=f"'x' is a {kind}, not a {other}"):
        getattr(space, f"get_{other}")("x")
    with pytest.raises(ObjectNotFoundError):
        getattr(space, f"get_{kind}")("nope")
    with pytest.raises(KeyError):
        getattr(space, f"get_{kind}")("nope")
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    assert getattr(again, f"get_{kind}")("x").kind == kind
    with pytest.raises(KindMismatchError, match=f"is a {kind}"):
        getattr(again, f"get_{other}")("x")
    assert repr(obj).startswith("<Persisted") and "'x'" in repr(obj) and f"kind={kind}" in repr(obj)


def test_repr_shows_length_and_dirty_slots(space):
    q = space.create_queue("q", [1, 2, 3])
    assert repr(q) == "<PersistedQueue 'q' kind=queue len=3 dirty=5>"   # 3 slots + index + meta
    commit(space)
    q.append(4)
    assert repr(q) == "<PersistedQueue 'q' kind=queue len=4 dirty=2>"


def test_get_or_create(space):
    q = space.get_or_create_queue("q", [1])
    assert space.get_or_create_queue("q", [2]) is q
    assert list(q) == [1]
    with pytest.raises(KindMismatchError):
        space.get_or_create_dict("q")
    assert space.get_or_create_array("a", 2, fill=7)[1] == 7


def test_get_or_create_reads_metadata_and_index_once_for_a_new_name(rspace, rec):
    rspace.get_or_create_queue(("user", 1))
    assert [r[0] for r in rec.reads] == ["get", "get"]     # no metadata record: is the name another kind's?


def test_get_or_create_of_a_stored_object_is_one_read(rspace, rec):
    rspace.get_or_create_queue(("user", 1)).append(1)
    rspace.checkpoint(1)
    again = ObjectSpace(rec, prefix=rspace.prefix)
    rec.reads.clear()
    assert list(again.get_or_create_queue(("user", 1))) == [1]
    assert [r[0] for r in rec.reads] == ["get", "scan"]     # metadata (kind, codec, head, tail); the item


def test_tuple_names_and_scopes(space, db):
    for user in ["u1", "u2", "u10"]:
        space.create_queue((user, "items"))
        space.create_dict((user, "state"))
    space.create_value("plain")
    space.create_value("tmp-1")
    assert space.names(prefix=("u1",)) == [("u1", "items"), ("u1", "state")]
    commit(space)
    space.create_list(("u1", "extra"))      # not yet committed: listed too
    space.delete(("u1", "state"))           # deleted, not yet committed: not listed
    assert space.names(prefix=("u1",)) == [("u1", "extra"), ("u1", "items")]
    assert space.names(prefix="tmp-") == ["tmp-1"]
    assert space.names()[:2] == ["plain", "tmp-1"]      # str names sort before tuple names
    assert len(space) == 8
    assert ("u2", "items") in space and ("u1", "state") not in space
    commit(space)
    assert ObjectSpace(db, prefix=space.prefix).names(prefix=("u1",)) == [("u1", "extra"), ("u1", "items")]


def test_names_with_awkward_bytes_stay_apart(space, db):
    names = ["a", "a\x00", "a\x00b", "a\xff", ("a",), ("a", b"\x00"), ("a", 1), ("a", -1), "\x00"]
    for i, n in enumerate(names):
        space.create_value(n, i)
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    for i, n in enumerate(names):
        assert again.get_value(n).value == i
    space.delete("a")
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    assert "a" not in again and again.get_value("a\x00").value == 1


def test_two_spaces_share_one_db(db):
    s1 = ObjectSpace(db, prefix=b"\x00\x01\x00op1")
    s2 = ObjectSpace(db, prefix=b"\x00\x02\x00op1")
    s1.create_queue("q", [1])
    s2.create_queue("q", [2])
    commit(s1)
    commit(s2)
    assert list(ObjectSpace(db, prefix=b"\x00\x01\x00op1").get_queue("q")) == [1]
    assert list(ObjectSpace(db, prefix=b"\x00\x02\x00op1").get_queue("q")) == [2]
    s1.delete("q")
    commit(s1)
    assert list(ObjectSpace(db, prefix=b"\x00\x02\x00op1").get_queue("q")) == [2]


def test_delete(space, db):
    q = space.create_queue("q", [1])
    commit(space)
    space.delete("q")
    assert "q" not in space
    with pytest.raises(ObjectDeletedError):
        q.append(2)
    with pytest.raises(ObjectDeletedError):
        list(q)
    with pytest.raises(ObjectNotFoundError):
        space.delete("q")
    commit(space)
    assert list(db.scan_prefix(space.prefix)) == []


def test_delete_of_an_unsaved_object_writes_nothing(rspace, rec):
    rspace.create_queue("q", [1])
    rspace.delete("q")
    commit(rspace)
    assert rec.log == []


def test_delete_without_loading(space, db):
    space.create_list("l", range(50))
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    again.delete("l")
    commit(again)
    assert list(db.scan_prefix(space.prefix)) == []


def test_same_handle_while_referenced_and_dropped_when_clean(db):
    space = ObjectSpace(db, prefix=b"p/", cache_objects=0)
    q = space.create_queue("q", [1])
    assert space.get_queue("q") is q
    commit(space)
    del q
    gc.collect()
    assert len(space._live) == 0                # clean and unreferenced: dropped
    q = space.get_queue("q")
    q.append(2)
    del q
    gc.collect()
    assert len(space._live) == 1                # dirty objects are kept until saved
    commit(space)
    gc.collect()
    assert len(space._live) == 0
    assert list(space.get_queue("q")) == [1, 2]


def test_recent_objects_stay_cached(db):
    space = ObjectSpace(db, prefix=b"p/", cache_objects=2)
    for n in "abc":
        space.create_value(n, n)
    commit(space)
    gc.collect()
    assert set(space._live.keys()) == {space.get_value("b")._nkey, space.get_value("c")._nkey}


@pytest.mark.skipif(not HAVE_DKV, reason="needs dkv.open")
def test_open_checkpoint_close(location):
    with ObjectSpace.open(location) as space:
        assert space.prefix == dkv.keys.key_prefix(0, objectspace.SCHEMA_STATE) == objectspace.DEFAULT_PREFIX
        space.create_dict("d", {"a": 1})
        space.checkpoint(1)
        space.get_dict("d")["b"] = 2
        space.checkpoint(2)
        space.get_dict("d")["c"] = 3            # never checkpointed: lost
        assert space.dirty
    with ObjectSpace.open(location) as space:
        assert dict(space.get_dict("d").items()) == {"a": 1, "b": 2}
    with ObjectSpace.open(location, checkpoint=1, read_only=True) as space:
        assert dict(space.get_dict("d").items()) == {"a": 1}


@pytest.mark.skipif(not HAVE_DKV, reason="needs dkv.open")
def test_a_writer_at_an_older_checkpoint_never_drops_later_ones_unasked(location):
    """``ObjectSpace.open(path, checkpoint=1)`` without read_only would continue from 1 and
    drop checkpoint 2 on close: it raises, naming what it would drop and both ways out,
    and leaves the store as it was; ``discard_newer=True`` rolls back on purpose."""
    with ObjectSpace.open(location) as space:
        space.create_dict("d", {"a": 1})
        space.checkpoint(1)
        space.get_dict("d")["b"] = 2
        space.checkpoint(2)
    with pytest.raises(dkv.NewerCheckpointsError) as e:
        ObjectSpace.open(location, checkpoint=1)
    msg = str(e.value)
    assert "checkpoint 1" in msg and "later checkpoint(s) 2" in msg
    assert "read_only=True" in msg and "discard_newer=True" in msg
    assert isinstance(e.value, ValueError)
    with ObjectSpace.open(location) as space:           # nothing was dropped
        assert space.last_checkpoint == 2 and dict(space.get_dict("d").items()) == {"a": 1, "b": 2}
    with ObjectSpace.open(location, checkpoint=2) as space:     # the newest: nothing to drop
        assert dict(space.get_dict("d").items()) == {"a": 1, "b": 2}
    with ObjectSpace.open(location, checkpoint=1, discard_newer=True) as space:
        assert dict(space.get_dict("d").items()) == {"a": 1}
        space.checkpoint()
        assert space.last_checkpoint == 2
    with ObjectSpace.open(location) as space:
        assert dict(space.get_dict("d").items()) == {"a": 1}


def test_close_kills_handles(space):
    q = space.create_queue("q")
    space.close()
    with pytest.raises(ObjectDeletedError):
        q.append(1)
    with pytest.raises(ObjectSpaceError, match="closed"):
        space.get_queue("q")


def test_bad_arguments(space):
    with pytest.raises(TypeError):
        ObjectSpace(NoIO(), prefix="str")
    with pytest.raises(ValueError):
        space.create_array("a", -1)
    with pytest.raises(TypeError):
        space.create_queue(["list", "name"])
    with pytest.raises(TypeError):
        space.create_queue(("a", 1.5))


def test_a_notebook_cell_run_twice_numbers_its_checkpoints_itself(tmp_path):
    """The README's snippet, run twice in one process: checkpoint() takes the next number,
    last_checkpoint says which, and the second run's append is kept."""
    from objectspace import ObjectSpace
    for run in (1, 2):
        with ObjectSpace.open(str(tmp_path)) as space:
            assert space.last_checkpoint == (None if run == 1 else 1)
            q = space.get_or_create_queue("events")
            q.append({"user": 42, "run": run})
            space.checkpoint()
            assert space.last_checkpoint == run and len(q) == run
    with ObjectSpace.open(str(tmp_path), read_only=True) as space:
        assert [e["run"] for e in space.get_queue("events")] == [1, 2]
        assert space.last_checkpoint == 2


@pytest.mark.skipif(not hasattr(Exception, "add_note"), reason="exception notes need Python 3.11")
def test_a_failed_checkpoint_keeps_the_changes_and_says_so(tmp_path):
    from objectspace import ObjectSpace
    with ObjectSpace.open(str(tmp_path)) as space:
        d = space.get_or_create_dict("d")
        d["a"] = 1
        space.checkpoint(5)
        d["b"] = 2
        with pytest.raises(ValueError) as err:
            space.checkpoint(5)                     # not greater than the last: refused
        note = "\n".join(getattr(err.value, "__notes__", []))
        assert "greater than the last checkpoint's (5)" in str(err.value)
        assert "changes to 1 object(s) are kept" in note
        assert space.dirty
        space.checkpoint()                          # the next one carries them
        assert space.last_checkpoint == 6 and not space.dirty
    with ObjectSpace.open(str(tmp_path), read_only=True) as space:
        assert dict(space.get_dict("d")) == {"a": 1, "b": 2}


@pytest.mark.skipif(not HAVE_DKV or not hasattr(Exception, "add_note"), reason="needs dkv, Python 3.11")
def test_a_checkpoint_of_unknown_outcome_says_it_may_have_been_taken():
    """dkv keeps a manifest whose claims it could not list (RFC 0011 Risks): the note does
    not say nothing was checkpointed, and the next checkpoint carries the changes anyway."""
    from dkv.storage import FaultInjectingStore, MemoryStore
    from objectspace import ObjectSpace
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    with ObjectSpace.open(fs, background=False) as space:
        d = space.get_or_create_dict("d")
        d["a"] = 1
        space.checkpoint()
        d["b"] = 2
        fs.fail("list", key_prefix="writer/")
        with pytest.raises(dkv.StorageError) as err:
            space.checkpoint()
        note = "\n".join(getattr(err.value, "__notes__", []))
        assert "may have been taken" in note and "nothing was checkpointed" not in note
        assert space.dirty
        d["c"] = 3
        space.checkpoint()
        assert space.last_checkpoint == 3 and not space.dirty
    with ObjectSpace.open(inner, read_only=True) as space:
        assert dict(space.get_dict("d")) == {"a": 1, "b": 2, "c": 3}


@pytest.mark.skipif(not hasattr(Exception, "add_note"), reason="exception notes need Python 3.11")
def test_an_error_leaving_a_with_block_says_what_it_drops(tmp_path):
    from objectspace import ObjectSpace
    with pytest.raises(KeyError) as err:
        with ObjectSpace.open(str(tmp_path)) as space:
            space.get_or_create_list("l").append(1)
            space.get_or_create_set("s").add(2)
            {}["missing"]
    assert "drops the unsaved changes to 2 object(s)" in "\n".join(err.value.__notes__)
    with pytest.raises(KeyError) as err:            # nothing unsaved: no note
        with ObjectSpace.open(str(tmp_path)) as space:
            {}["missing"]
    assert not getattr(err.value, "__notes__", None)


@pytest.mark.skipif(not HAVE_DKV, reason="needs dkv")
def test_opening_what_is_not_a_store(tmp_path):
    """Issue 16: a read-only open creates nothing and says what it found; a writer creates a
    store only in a missing or empty folder unless told create="force"."""
    missing = tmp_path / "missing"
    with pytest.raises(dkv.NotAStoreError, match=f"no dkv store at {missing}: the folder does not exist"):
        ObjectSpace.open(str(missing), read_only=True)
    assert not missing.exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    with pytest.raises(dkv.NotAStoreError, match=r"todo.txt.*create='force'"):
        ObjectSpace.open(str(tmp_path / "notes"))
    assert sorted(p.name for p in (tmp_path / "notes").iterdir()) == ["todo.txt"]
    with ObjectSpace.open(str(tmp_path / "notes"), create="force") as space:
        space.create_dict("d", {"a": 1})
        space.checkpoint()
    with ObjectSpace.open(str(tmp_path / "notes"), read_only=True) as space:
        assert dict(space.get_dict("d")) == {"a": 1}


@pytest.mark.skipif(not HAVE_DKV, reason="needs dkv")
@pytest.mark.parametrize("bad", ["yes", "true", 1, 0, None])
def test_create_takes_only_the_documented_values(tmp_path, bad):
    """create= is True, False or "force": "yes" (or 1, which a writer would take for False)
    is a ValueError naming it, where a store exists and where none does, and nothing is made."""
    with ObjectSpace.open(str(tmp_path / "s")) as space:
        space.create_dict("d", {"a": 1})
        space.checkpoint()
    for where in ("s", "new"):
        with pytest.raises(ValueError, match=rf"create must be True, False or 'force', got {re.escape(repr(bad))}$"):
            ObjectSpace.open(str(tmp_path / where), create=bad)
    assert not (tmp_path / "new").exists()
    with ObjectSpace.open(str(tmp_path / "s"), create=False) as space:      # the store is as it was
        assert dict(space.get_dict("d")) == {"a": 1}


def test_objects_touched_in_descending_name_order_write_ascending_records(db):
    """A save lists the records of objects touched in descending name order (a spark_ops
    batch meets its keys so every other time) in ascending key order, so the store sorts a
    batch's keys as one run; the objects' confirm keeps the order they were touched in."""
    space = ObjectSpace(db, prefix=b"p/")
    for i in range(30):
        space.create_queue(("q", i), [i])
    commit(space)
    for order in (range(30), reversed(range(30))):
        touched = list(order)
        for i in touched:
            space.get_queue(("q", i)).append(-i)
        keys = [k for k, _ in space.save()]
        assert keys == sorted(keys) and len(keys) == 2 * 30     # a slot and the metadata each
        assert [o.name for o in space._last_saved[0]] == [("q", i) for i in touched]
        space.on_saved()
    assert [list(space.get_queue(("q", i))) for i in (0, 7)] == [[0, 0, 0], [7, -7, -7]]
