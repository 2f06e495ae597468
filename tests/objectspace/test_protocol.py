"""The save protocol: save / commit / on_saved, the dirty-pending-clean flags, failed and
ambiguous commits, host batches, full saves and checkpoints."""
from __future__ import annotations

import pytest

from dkv.batch import WriteBatch
from objectspace import ObjectSpace
from .os_helpers import RecordingDB, commit, new_location, open_db, render

P = b"app/"


def lines(rec, **kinds):
    return render(rec.take(), P, kinds)


def test_edits_after_save_stay_dirty_across_on_saved(rspace, rec):
    q = rspace.create_queue("q", [1])
    batch = rspace.save()
    q.append(2)                      # after save, before the commit: dirty again
    rec.write(batch)
    rspace.on_saved()                # clears only what the batch carried
    assert rspace.dirty
    rec.take()
    commit(rspace)
    assert lines(rec, q="queue") == ["put q meta = [0, 2]", "put q item 1 = 2"]
    assert not rspace.dirty


def test_failed_commit_carries_everything_into_the_next_save(rspace, rec):
    d = rspace.create_dict("d", {"a": 1})
    commit(rspace)
    rec.take()
    d["b"] = 2
    del d["a"]
    rspace.save()                    # the host's commit fails: no write, no on_saved
    d["c"] = 3
    rspace.save()                    # fails again
    d["b"] = 20
    commit(rspace)
    assert lines(rec, d="dict") == ["put d meta = [2]", "delete d item 'a'", "put d item 'b' = 20",
                                    "put d item 'c' = 3"]
    assert dict(ObjectSpace(rec.db, prefix=P).get_dict("d").items()) == {"b": 20, "c": 3}


def test_ambiguous_commit_rewrites_metadata_that_went_back(rspace, rec):
    """The batch reached the store but on_saved never came (e.g. the checkpoint upload
    failed): metadata that returned to its old value must still be written."""
    s = rspace.create_set("s", ["a"])
    commit(rspace)
    s.add("b")
    rec.write(rspace.save())         # committed, but not confirmed
    s.discard("b")                   # count back to 1
    rec.take()
    commit(rspace)
    assert lines(rec, s="set") == ["put s meta = [1]", "delete s item 'b'"]
    assert set(ObjectSpace(rec.db, prefix=P).get_set("s")) == {"a"}


def test_ambiguous_commit_then_shrink_deletes_the_slots_it_may_have_written(rspace, rec):
    lst = rspace.create_list("l", [1])
    commit(rspace)
    lst.extend([2, 3])
    rec.write(rspace.save())         # committed, not confirmed
    lst.pop()
    lst.pop()
    commit(rspace)
    again = ObjectSpace(rec.db, prefix=P).get_list("l")
    assert list(again) == [1]
    assert len(list(rec.db.scan_prefix(again._items))) == 1


def test_save_appends_to_the_hosts_batch(rspace):
    rspace.create_value("v", 1)
    batch = WriteBatch()
    batch.put(b"timer/1", b"t")
    assert rspace.save(batch=batch) is batch
    assert [k for k, _ in batch][0] == b"timer/1" and len(batch) == 4     # + index, value, counts


def test_many_spaces_save_into_one_atomic_batch(db):
    spaces = [ObjectSpace(db, prefix=bytes([0, kg, 0]) + b"op") for kg in range(8)]
    for i, s in enumerate(spaces):
        s.create_queue("q", [i])
    batch = WriteBatch()
    for s in spaces:
        s.save(batch=batch)
    db.write(batch)
    for s in spaces:
        s.on_saved()
    assert [list(ObjectSpace(db, prefix=s.prefix).get_queue("q")) for s in spaces] == [[i] for i in range(8)]


def test_on_saved_without_save_is_a_no_op(space):
    q = space.create_queue("q")
    space.on_saved()
    assert space.dirty and q._dirty_count() == 2
    commit(space)
    space.on_saved()
    assert not space.dirty


def build_everything(space):
    space.create_value("v", {"x": 1})
    space.create_array("a", 3, fill=0)[1] = 5
    space.create_list("l", [1, 2, 3]).pop(0)
    q = space.create_queue("q", [1, 2, 3])
    q.popleft()
    space.create_stack("s", [1, 2])
    space.create_linked_list("ll", ["x", "y"]).remove("x")
    space.create_set("set", [1, 2])
    space.create_sorted_set("ss", ["b", "a"])
    space.create_dict("d", {"k": [1]})
    space.create_sorted_dict("sd", {2: "b", 1: "a"})
    st = space.create_stream("st")
    st.add({"f": 1}, "5-1")
    st.create_group("g", "0")
    st.read_group("g", "c")


def snapshot(space) -> dict:
    out = {}
    for name in space.names():
        obj = space.get(name)
        if obj.kind == "value":
            out[name] = obj.value
        elif obj.kind in ("dict", "sorted_dict"):
            out[name] = dict(obj.items())
        elif obj.kind == "stream":
            out[name] = (list(obj), obj.pending("g"), obj.groups())
        else:
            out[name] = list(obj)
    return out


def test_full_save_is_a_complete_image(space, db):
    build_everything(space)
    commit(space)
    want = snapshot(ObjectSpace(db, prefix=P))
    space.get_queue("q").append(9)          # one dirty object, the others clean and not loaded
    want["q"] = want["q"] + [9]
    cold = ObjectSpace(db, prefix=P)
    cold.get_queue("q").append(9)
    image = cold.save(full=True)
    other = open_db(new_location())
    other.write(image)
    assert snapshot(ObjectSpace(other, prefix=P)) == want
    other.close()


def test_full_save_carries_deletions(space, db):
    d = space.create_dict("d", {"a": 1, "b": 2})
    s = space.create_stack("s", [1, 2, 3])
    space.create_value("gone", 1)
    commit(space)
    del d["a"]
    s.pop()
    space.delete("gone")
    commit(space, full=True)
    again = ObjectSpace(db, prefix=P)
    assert dict(again.get_dict("d").items()) == {"b": 2} and list(again.get_stack("s")) == [2, 1]
    assert "gone" not in again
    assert len(list(db.scan_prefix(again.get_dict("d")._items))) == 1


class FailingCheckpoints:
    def __init__(self, db) -> None:
        self.db, self.fail = db, True

    def checkpoint(self, epoch):
        if self.fail:
            raise OSError("upload failed")
        return self.db.checkpoint(epoch)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_failed_checkpoint_confirms_nothing(db):
    proxy = FailingCheckpoints(db)
    space = ObjectSpace(proxy, prefix=P)
    q = space.create_queue("q", [1])
    with pytest.raises(OSError):
        space.checkpoint(1)
    assert space.dirty
    q.append(2)
    proxy.fail = False
    space.checkpoint(1)
    assert not space.dirty
    assert list(ObjectSpace(db, prefix=P).get_queue("q")) == [1, 2]


def test_checkpoint_returns_the_manifest_and_reopens(location):
    db = open_db(location)
    space = ObjectSpace(db, prefix=P)
    space.create_sorted_set("ss", [3, 1, 2])
    name = space.checkpoint(1)
    assert isinstance(name, str) and name
    space.get_sorted_set("ss").add(0)
    db.close()
    db = open_db(location, checkpoint=1)
    assert list(ObjectSpace(db, prefix=P).get_sorted_set("ss")) == [1, 2, 3]
    db.close()


def test_checkpoint_with_nothing_dirty_writes_nothing(rspace, rec):
    rspace.create_value("v", 1)
    rspace.checkpoint(1)
    rec.take()
    rspace.checkpoint(2)
    assert rec.take() == [("checkpoint", 2)]


def test_hot_path_save_writes_two_records_per_append(db):
    rec = RecordingDB(db)
    space = ObjectSpace(rec, prefix=P)
    queues = [space.create_queue(("user", i)) for i in range(200)]
    commit(space)
    rec.take()
    for q in queues:
        q.append({"event": 1})
    commit(space)
    log = rec.take()
    assert len(log) == 400 and all(op == "put" for op, *_ in log)
