"""Format 2 (metadata records name their object's kind and codec, RFC 0005 decision 12)
against format 1: old records still read, move to format 2 on their next metadata write,
and bad heads are reported as corruption."""
from __future__ import annotations

import msgpack
import pytest

from objectspace import CorruptionError, KindMismatchError, ObjectSpace
from objectspace import _layout as L
from objectspace._keycodec import encode_name
from os_helpers import RecordingDB, commit, render

P = b"app/"


def _put_format1(db, name, kind: str, meta, items: dict) -> None:
    """Records as objectspace format 1 wrote them: index [kind, codec, 1], metadata
    without a head."""
    nkey = encode_name(name)
    db.put(P + L.INDEX + nkey, msgpack.packb([L.KIND_CODES[kind], 1, 1]))
    ns = P + L.OBJECTS + nkey
    if meta is not None:
        db.put(ns + L.META, msgpack.packb(meta))
    for k, v in items.items():
        db.put(ns + L.ITEMS + k, msgpack.packb(v))


def _slot(i: int) -> bytes:
    return i.to_bytes(L.SLOT_BYTES, "big")


@pytest.fixture
def old_store(db):
    _put_format1(db, "q", "queue", [0, 2], {_slot(0): "a", _slot(1): "b"})
    _put_format1(db, "d", "dict", [1], {b"\x50k\x00\x01": 1})
    _put_format1(db, "v", "value", None, {b"": 7})
    db.checkpoint(1)
    return db


def test_format1_objects_read_and_move_to_format2_on_their_next_metadata_write(old_store):
    rec = RecordingDB(old_store)
    space = ObjectSpace(rec, prefix=P)
    q = space.get_queue("q")
    assert [r[0] for r in rec.reads] == ["get", "get"]        # metadata without a head, then the index
    assert list(q) == ["a", "b"] and space.get_dict("d") == {"k": 1} and space.get_value("v").value == 7
    q.append("c")
    space.get_value("v").value = 8
    rec.take()
    commit(space)
    assert render(rec.take(), P, {"q": "queue", "v": "value"}) == [
        "put index q = queue codec=1 v2", "put q meta = [0, 3]", "put q item 2 = 'c'",
        "put v value = 8",                                  # no metadata: stays as it is
    ]
    again = ObjectSpace(RecordingDB(old_store), prefix=P)
    rec2 = again._db
    assert list(again.get_queue("q")) == ["a", "b", "c"]
    assert [r[0] for r in rec2.reads] == ["get", "scan"]     # one read for the handle now
    assert again.get_dict("d") == {"k": 1} and again.get_value("v").value == 8


def test_a_format1_object_unchanged_writes_nothing(old_store):
    rec = RecordingDB(old_store)
    space = ObjectSpace(rec, prefix=P)
    assert len(space.get_queue("q")) == 2
    commit(space)
    assert [r for r in rec.take() if r[0] != "checkpoint"] == []


def test_a_format1_reader_refuses_format2_objects_by_their_index_entry(space, monkeypatch):
    space.create_queue("q", [1])
    commit(space)
    monkeypatch.setattr(L, "FORMAT_VERSION", 1)
    fresh = ObjectSpace(space._db, prefix=P)
    with pytest.raises(CorruptionError, match=r"format version 2; this objectspace reads up to 1"):
        fresh._load("q", encode_name("q"), space._db.get(P + L.INDEX + encode_name("q")), None, None)


def test_kind_mismatch_is_found_from_the_metadata_alone(space):
    space.create_queue("q", [1])
    commit(space)
    fresh = ObjectSpace(space._db, prefix=P)
    with pytest.raises(KindMismatchError, match="'q' is a queue, not a dict"):
        fresh.get_dict("q")
    assert list(fresh.get_queue("q")) == [1]


@pytest.mark.parametrize("fmt", [1, 2])
def test_asking_for_a_value_by_the_name_of_a_kind_with_metadata_is_a_mismatch(space, fmt):
    """A value has no metadata, so its lookup reads the index entry first: the object found
    there is checked, its metadata read (a queue), and the mismatch named."""
    if fmt == 1:
        _put_format1(space._db, "q", "queue", [0, 1], {_slot(0): "a"})
        space._db.checkpoint(1)
    else:
        space.create_queue("q", ["a"])
        commit(space)
    fresh = ObjectSpace(space._db, prefix=P)
    with pytest.raises(KindMismatchError, match="'q' is a queue, not a value"):
        fresh.get_value("q")
    with pytest.raises(KindMismatchError, match="'q' is a queue, not a value"):
        fresh.get_or_create_value("q", 1)
    assert list(fresh.get_queue("q")) == ["a"]


@pytest.mark.parametrize("head, match", [
    (b"\xc1\x63\x01", "metadata of 'q' is unreadable"),           # unknown kind code
    (b"\xc1", "metadata of 'q' is unreadable"),                   # cut short
])
def test_a_bad_metadata_head_is_reported_as_corruption(space, head, match):
    space.create_queue("q", [1])
    commit(space)
    space._db.put(P + L.OBJECTS + encode_name("q") + L.META, head + msgpack.packb([0, 1]) if len(head) > 1 else head)
    space._db.checkpoint(2)
    with pytest.raises(CorruptionError, match=match):
        ObjectSpace(space._db, prefix=P).get_queue("q")


def test_a_head_that_contradicts_the_index_entry_is_corruption(db):
    nkey = encode_name("q")
    db.put(P + L.INDEX + nkey, msgpack.packb([L.KIND_CODES["queue"], 1, 2]))
    db.put(P + L.OBJECTS + nkey + L.META, L.meta_head("dict", 1) + msgpack.packb([0]))
    with pytest.raises(CorruptionError, match="metadata of queue 'q' names kind code 9"):
        ObjectSpace(db, prefix=P)._load("q", nkey, db.get(P + L.INDEX + nkey), None, None)
