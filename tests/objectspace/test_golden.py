"""Golden write logs: the exact puts and deletes each scenario sends to the store.

Lines are rendered by os_helpers.render (keys decoded, values msgpack-decoded); the
reference document's array example is also pinned byte for byte. These logs are the
review surface for "a differential save writes only dirty slots plus changed metadata".
"""
from __future__ import annotations

import pytest

from objectspace import ObjectSpace
from .os_helpers import RecordingDB, commit, new_location, open_db, render

P = b"app/"


@pytest.fixture
def env():
    rec = RecordingDB(open_db(new_location()))
    yield rec, ObjectSpace(rec, prefix=P)
    rec.db.close()


def log(rec, **kinds) -> list[str]:
    return render(rec.take(), P, kinds)


def test_reference_array_example_full_then_differential(env):
    rec, space = env
    a = space.create_array("foo", 8, fill=0)
    a[3] = 42
    a[5] = 43
    commit(space, full=True)
    assert log(rec, foo="array") == [
        "put index foo = array codec=1 v2",
        "put foo meta = [8]",
        "put foo item 0 = 0", "put foo item 1 = 0", "put foo item 2 = 0", "put foo item 3 = 42",
        "put foo item 4 = 0", "put foo item 5 = 43", "put foo item 6 = 0", "put foo item 7 = 0",
        "put counts = 1 objects, 0 scopes",         # the space's counts record: a new object
    ]
    a[1] = 7
    commit(space)
    assert rec.take() == [("put", b"app/\x01Pfoo\x00\x01\x01" + (1).to_bytes(8, "big"), b"\x07")]


def test_reference_array_example_bytes(env):
    rec, space = env
    a = space.create_array("foo", 8, fill=0)
    a[3] = 42
    commit(space, full=True)
    raw = rec.take()
    # name "foo" = 0x50 "foo" 0x00 0x01; index 0x00, object namespace 0x01, meta 0x00, items 0x01
    assert raw[0] == ("put", b"app/\x00Pfoo\x00\x01", b"\x93\x02\x01\x02")     # [kind 2, codec 1, v2]
    assert raw[1] == ("put", b"app/\x01Pfoo\x00\x01\x00", b"\xc1\x02\x02\x01\x91\x08")     # head C1 version kind codec, meta [8]
    assert raw[5] == ("put", b"app/\x01Pfoo\x00\x01\x01\x00\x00\x00\x00\x00\x00\x00\x03", b"\x2a")


def test_list_insert_and_remove_in_the_middle(env):
    rec, space = env
    lst = space.create_list("l", ["a", "b", "c", "d", "e"])
    commit(space)
    rec.take()
    lst.insert(2, "X")
    commit(space)
    assert log(rec, l="list") == [
        "put l meta = [6]",
        "put l item 2 = 'X'", "put l item 3 = 'c'", "put l item 4 = 'd'", "put l item 5 = 'e'",
    ]
    lst.remove("b")
    commit(space)
    assert log(rec, l="list") == [
        "put l meta = [5]",
        "delete l item 5",
        "put l item 1 = 'X'", "put l item 2 = 'c'", "put l item 3 = 'd'", "put l item 4 = 'e'",
    ]


def test_queue_enqueue_dequeue(env):
    rec, space = env
    q = space.create_queue("q", [1, 2])
    commit(space)
    assert log(rec, q="queue") == [
        "put index q = queue codec=1 v2", "put q meta = [0, 2]", "put q item 0 = 1", "put q item 1 = 2",
        "put counts = 1 objects, 0 scopes",
    ]
    q.enqueue(3)
    assert q.dequeue() == 1
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [1, 3]", "delete q item 0", "put q item 2 = 3"]


def test_queue_item_enqueued_and_dequeued_between_two_saves_is_never_written(env):
    """Reference defect: the item that lived only between two saves must not reach the store."""
    rec, space = env
    q = space.create_queue("q", [1])
    commit(space)
    rec.take()
    q.append(2)
    q.append(3)
    assert q.popleft() == 1
    assert q.popleft() == 2
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [2, 3]", "delete q item 0", "put q item 2 = 3"]
    q.append(4)
    assert q.popleft() == 3
    assert q.popleft() == 4
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [4, 4]", "delete q item 2"]
    assert list(ObjectSpace(rec.db, prefix=P).get_queue("q")) == []
    assert [k for k, _ in rec.db.scan_prefix(P + b"\x01")] == [P + b"\x01Pq\x00\x01\x00"]   # meta only


def test_stack_pop_then_push(env):
    rec, space = env
    s = space.create_stack("s", [1, 2, 3])
    commit(space)
    rec.take()
    assert s.pop() == 3
    s.push(9)
    commit(space)
    assert log(rec, s="stack") == ["put s item 2 = 9"]     # the length is back to 3: no metadata


@pytest.mark.parametrize("kind", ["stack", "list"])
def test_shrinking_leaves_no_stale_tail_slots(env, kind):
    """Reference defect: a list or stack that shrinks must delete its old tail slots."""
    rec, space = env
    obj = getattr(space, f"create_{kind}")("s", [1, 2, 3, 4])
    commit(space)
    rec.take()
    obj.pop()
    obj.pop()
    obj.pop()
    getattr(obj, "push" if kind == "stack" else "append")(7)
    commit(space)
    assert log(rec, s=kind) == ["put s meta = [2]", "delete s item 2", "delete s item 3", "put s item 1 = 7"]
    keys = [k for k, _ in rec.db.scan_prefix(P + b"\x01Ps\x00\x01\x01")]
    assert [int.from_bytes(k[-8:], "big") for k in keys] == [0, 1]


def test_list_clear_deletes_every_stored_slot(env):
    rec, space = env
    lst = space.create_list("l", [1, 2, 3])
    commit(space)
    rec.take()
    lst.clear()
    lst.append(5)
    commit(space)
    assert log(rec, l="list") == ["put l meta = [1]", "delete l item 1", "delete l item 2", "put l item 0 = 5"]


def test_linked_list_insert_and_remove(env):
    rec, space = env
    ll = space.create_linked_list("ll", ["a", "b", "c"])
    commit(space)
    assert log(rec, ll="linked_list") == [
        "put index ll = linked_list codec=1 v2", "put ll meta = [1, 3, 3, 4]",
        "put ll item 1 = 'a'", "put ll item 2 = 'b'", "put ll item 3 = 'c'",
        "put ll link 1 = 2", "put ll link 2 = 3", "put ll link 3 = 0", "put counts = 1 objects, 0 scopes",
    ]
    ll.add_after(ll.find("a"), "X")
    commit(space)
    assert log(rec, ll="linked_list") == [
        "put ll meta = [1, 3, 4, 5]", "put ll item 4 = 'X'", "put ll link 1 = 4", "put ll link 4 = 2",
    ]
    ll.remove("b")
    commit(space)
    assert log(rec, ll="linked_list") == [
        "put ll meta = [1, 3, 3, 5]", "delete ll item 2", "delete ll link 2", "put ll link 4 = 3",
    ]
    ll.find("X").value = "Y"
    commit(space)
    assert log(rec, ll="linked_list") == ["put ll item 4 = 'Y'"]


def test_set_remove_then_add(env):
    rec, space = env
    s = space.create_set("s", ["a", "b"])
    commit(space)
    rec.take()
    s.remove("a")
    s.add("a")
    commit(space)
    assert log(rec, s="set") == ["put s item 'a'"]
    s.add("c")
    s.discard("c")      # added and removed between saves: nothing reaches the store
    commit(space)
    assert log(rec, s="set") == []


def test_dict_clear_then_add(env):
    rec, space = env
    d = space.create_dict("d", {"a": 1, "b": 2})
    commit(space)
    rec.take()
    d.clear()
    d["c"] = 3
    d["a"] = 9
    commit(space)
    assert log(rec, d="dict") == ["delete d item 'b'", "put d item 'a' = 9", "put d item 'c' = 3"]


def test_delete_then_recreate_same_name_before_a_save(env):
    """Reference defect: the new object must survive and no key of the old one may remain."""
    rec, space = env
    space.create_dict("x", {"a": 1, "b": 2})
    commit(space)
    rec.take()
    space.delete("x")
    space.create_queue("x", [5])
    commit(space)
    assert log(rec, x="dict") == [
        "delete x item 'a'", "delete x item 'b'",
        "put index x = queue codec=1 v2", "put x meta = [0, 1]", "put x item 0 = 5",
    ]
    again = ObjectSpace(rec.db, prefix=P)
    assert list(again.get_queue("x")) == [5]
    assert len(list(rec.db.scan_prefix(P))) == 4     # index, meta, item, and the counts record


def test_full_checkpoint_writes_clean_objects(env):
    """Reference defect: a full save must carry objects that have no changes."""
    rec, space = env
    space.create_value("v", 1)
    space.create_queue("q", ["x"])
    commit(space)
    rec.take()
    commit(space, full=True)
    assert log(rec, v="value", q="queue") == [
        "put index q = queue codec=1 v2", "put q meta = [0, 1]", "put q item 0 = 'x'",
        "put index v = value codec=1 v2", "put v value = 1",
    ]


def test_differential_save_of_an_append_is_item_plus_one_meta_record(env):
    rec, space = env
    q = space.create_queue(("user-42", "items"))
    commit(space)
    rec.take()
    q.append({"e": 1})
    commit(space)
    lines = render(rec.take(), P, {("user-42", "items"): "queue"})
    assert lines == ["put ('user-42', 'items') meta = [0, 1]", "put ('user-42', 'items') item 0 = {'e': 1}"]


def test_stream_add_and_group_records(env):
    rec, space = env
    clock = iter(range(1000, 2000, 10))
    space._clock = lambda: next(clock)
    st = space.create_stream("st")
    st.add({"a": 1})
    st.create_group("g", "0")
    commit(space)
    assert log(rec, st="stream") == [
        "put index st = stream codec=1 v2", "put st meta = [1000, 0, 1]",
        "put st entry 1000-0 = {'a': 1}", "put st group 'g' = [0, 0, 0, {}]", "put counts = 1 objects, 0 scopes",
    ]
    st.read_group("g", "c1")
    commit(space)
    assert log(rec, st="stream") == [
        "put st group 'g' = [1000, 0, 1, {'c1': 1010}]", "put st pel 'g' 1000-0 = ['c1', 1010, 1]",
    ]
    st.ack("g", "1000-0")
    commit(space)
    assert log(rec, st="stream") == ["put st group 'g' = [1000, 0, 0, {'c1': 1010}]", "delete st pel 'g' 1000-0"]


def test_queue_appendleft_moves_the_items_up_once_then_writes_one_slot(env):
    """A queue starts at slot 0: the first appendleft moves its n items up (n puts, n
    deletes); later ones write one slot each, and a popped slot is reused."""
    rec, space = env
    q = space.create_queue("q", [1, 2])
    commit(space)
    rec.take()
    q.appendleft(0)
    commit(space)
    assert log(rec, q="queue") == [
        "put q meta = [63, 66]", "delete q item 0", "delete q item 1",
        "put q item 63 = 0", "put q item 64 = 1", "put q item 65 = 2",
    ]
    q.appendleft(-1)
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [62, 66]", "put q item 62 = -1"]
    assert q.popleft() == -1
    q.appendleft("again")
    commit(space)
    assert log(rec, q="queue") == ["put q item 62 = 'again'"]      # the metadata is as committed
    assert list(ObjectSpace(rec.db, prefix=P).get_queue("q")) == ["again", 0, 1, 2]


def test_queue_rotate_insert_and_del_rewrite_the_shorter_side(env):
    rec, space = env
    q = space.create_queue("q", "abcdef")
    q.popleft()                     # room on the left: nothing moves up
    commit(space)
    rec.take()
    q.rotate(1)                     # f moves from the tail to the head
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [0, 5]", "delete q item 5", "put q item 0 = 'f'"]
    q.rotate(-2)                    # f and b move from the head to the tail
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [2, 7]", "delete q item 0", "delete q item 1",
                                   "put q item 5 = 'f'", "put q item 6 = 'b'"]
    assert list(q) == ["c", "d", "e", "f", "b"]
    q.insert(1, "X")                # shifts c left: two slots
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [1, 7]", "put q item 1 = 'c'", "put q item 2 = 'X'"]
    del q[-2]                       # shifts b left: one slot written, one deleted
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [1, 6]", "delete q item 6", "put q item 5 = 'b'"]
    assert list(ObjectSpace(rec.db, prefix=P).get_queue("q")) == ["c", "X", "d", "e", "b"]


def test_bounded_queue_stores_its_maxlen(env):
    rec, space = env
    q = space.create_queue("q", [1, 2, 3], maxlen=2)
    commit(space)
    assert log(rec, q="queue") == [
        "put index q = queue codec=1 v2", "put q meta = [1, 3, 2]", "put q item 1 = 2", "put q item 2 = 3",
        "put counts = 1 objects, 0 scopes",
    ]
    q.append(4)
    commit(space)
    assert log(rec, q="queue") == ["put q meta = [2, 4, 2]", "delete q item 1", "put q item 3 = 4"]
    again = ObjectSpace(rec.db, prefix=P).get_queue("q")
    assert again.maxlen == 2 and list(again) == [3, 4]
    again.appendleft(0)
    assert list(again) == [0, 3]


def test_queue_leaves_no_stale_slots_through_failed_saves(env):
    """Random deque verbs with saves that are sometimes never committed (or committed and
    never confirmed): after a last confirmed save, the store holds exactly the live slots."""
    import random
    rec, space = env
    rng = random.Random(17)
    q = space.create_queue("q", range(5))
    for step in range(400):
        r = rng.random()
        if r < 0.2:
            q.appendleft(step)
        elif r < 0.4:
            q.append(step)
        elif r < 0.55 and q:
            q.popleft()
        elif r < 0.65 and q:
            q.pop()
        elif r < 0.75:
            q.rotate(rng.randint(-4, 4))
        elif r < 0.82:
            q.insert(rng.randint(0, len(q)), step)
        elif r < 0.88 and q:
            del q[rng.randrange(len(q))]
        elif r < 0.94:
            commit(space)
        elif r < 0.97:
            space.save()            # never written, never confirmed
        else:
            rec.db.write(space.save())      # written, never confirmed: carried again
    commit(space)
    stored = sorted(int.from_bytes(k[-8:], "big") for k, _ in rec.db.scan_prefix(P + b"\x01Pq\x00\x01\x01"))
    assert stored == list(range(q._head, q._tail))
    assert list(ObjectSpace(rec.db, prefix=P).get_queue("q")) == list(q)


def test_queue_slot_taken_on_the_left_by_an_unconfirmed_save_is_deleted_later(env):
    """appendleft writes below the slots the store held; a save carries it but is never
    confirmed (its batch did reach the store); popleft takes the item away: the next save
    must delete that slot."""
    rec, space = env
    q = space.create_queue("q", [1, 2])
    q.popleft()
    commit(space)                   # the store holds slot 1
    q.appendleft(0)                 # slot 0
    rec.db.write(space.save())      # committed, never confirmed
    assert q.popleft() == 0
    commit(space)
    stored = [int.from_bytes(k[-8:], "big") for k, _ in rec.db.scan_prefix(P + b"\x01Pq\x00\x01\x01")]
    assert stored == [1]
