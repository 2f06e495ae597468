"""Format 2 (metadata records name their object's kind and codec, RFC 0005 decision 12)
against format 1: old records still read, move to format 2 on their next metadata write,
and bad heads are reported as corruption."""
from __future__ import annotations

import msgpack
import pytest

from objectspace import CorruptionError, KindMismatchError, ObjectSpace
from objectspace import _layout as L
from objectspace._keycodec import encode_name
from .os_helpers import RecordingDB, commit, render

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
        "put counts = 3 objects, 0 scopes",                 # a store from before the counts record gets it
    ]
    again = ObjectSpace(RecordingDB(old_store), prefix=P)
    rec2 = again._db
    assert list(again.get_queue("q")) == ["a", "b", "c"]
    assert [r[0] for r in rec2.reads] == ["get", "scan"]     # one read for the handle now
    assert again.get_dict("d") == {"k": 1} and again.get_value("v").value == 8


def test_a_format1_object_rewrites_its_index_entry_once(old_store):
    rec = RecordingDB(old_store)
    space = ObjectSpace(rec, prefix=P)
    q = space.get_queue("q")
    for i in range(3):
        q.append(i)
        commit(space)
    lines = render([r for r in rec.take() if r[0] != "checkpoint"], P, {"q": "queue"})
    assert [line for line in lines if line.startswith("put index")] == ["put index q = queue codec=1 v2"]
    assert lines[-2:] == ["put q meta = [0, 5]", "put q item 4 = 2"]


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


@pytest.mark.parametrize("record, match", [
    (b"\xc1\x02\x63\x01\x92\x00\x01", "names kind code 99, which has no metadata"),   # unknown kind
    (b"\xc1\x02\x01\x01\x92\x00\x01", "names kind code 1, which has no metadata"),    # a value's
    (b"\xc1\x03\x04\x01\x92\x00\x01", "format version 3; this objectspace reads up to 2"),
    (b"\xc1\x01\x04\x01\x92\x00\x01", "metadata of 'q' is unreadable"),               # version 1 has no head
    (b"\xc1", "metadata of 'q' is unreadable"),                                        # cut short
    (b"\xc1\x02\x04\x01", "metadata of 'q' is unreadable"),                            # a head alone
    (b"\xc1\x02\x04\x01\x92\x00", "metadata of queue 'q' is unreadable"),               # truncated body
    (b"\xc1\x02\x04\x01\x05", "metadata of queue 'q' is unreadable"),                    # not a list
    (b"\xc1\x02\x04\x01\x91\x00", "metadata of queue 'q' is unreadable"),                # a list too short
    (b"\x91\x00", "metadata of queue 'q' is unreadable"),                                # the same in format 1
])
def test_a_bad_metadata_record_is_reported_as_corruption(space, record, match):
    space.create_queue("q", [1])
    commit(space)
    space._db.put(P + L.OBJECTS + encode_name("q") + L.META, record)
    space._db.checkpoint(2)
    for get in (lambda s: s.get_queue("q"), lambda s: s.get("q"), lambda s: s.get_or_create_queue("q")):
        with pytest.raises(CorruptionError, match=match):
            get(ObjectSpace(space._db, prefix=P))


@pytest.mark.parametrize("index", [[4, 1, "2"], [[4], 1, 2], [4, None, 2]])
def test_an_index_entry_with_fields_of_the_wrong_type_is_corruption(db, index):
    db.put(P + L.INDEX + encode_name("v"), msgpack.packb(index))
    with pytest.raises(CorruptionError, match="index entry of 'v' is unreadable"):
        ObjectSpace(db, prefix=P).get_value("v")


def test_a_head_whose_codec_contradicts_the_index_entry_is_corruption_where_both_are_read(space):
    """One read trusts the head (the index entry is not read); the index path, a full save
    and the inspection tools read both and report the contradiction."""
    space.create_queue("q", [1])
    commit(space)
    nkey = encode_name("q")
    space._db.put(P + L.OBJECTS + nkey + L.META, L.meta_head("queue", 2) + msgpack.packb([0, 1]))
    with pytest.raises(CorruptionError, match="names codec 2, its index entry 1"):
        ObjectSpace(space._db, prefix=P)._load("q", nkey, space._db.get(P + L.INDEX + nkey), None, None)


def test_a_head_that_contradicts_the_index_entry_is_corruption(db):
    nkey = encode_name("q")
    db.put(P + L.INDEX + nkey, msgpack.packb([L.KIND_CODES["queue"], 1, 2]))
    db.put(P + L.OBJECTS + nkey + L.META, L.meta_head("dict", 1) + msgpack.packb([0]))
    with pytest.raises(CorruptionError, match="metadata of queue 'q' names kind code 9"):
        ObjectSpace(db, prefix=P)._load("q", nkey, db.get(P + L.INDEX + nkey), None, None)


def test_the_layout_and_the_kinds_agree_on_which_kinds_write_no_metadata():
    """The format's KINDS_WITHOUT_META (lookups, loads, inspection) and each kind's own
    has_meta (what its saves write) name the same kinds, and every kind has a code."""
    from objectspace._kinds import KIND_CLASSES
    assert {k for k, cls in KIND_CLASSES.items() if not cls.has_meta} == L.KINDS_WITHOUT_META
    assert set(KIND_CLASSES) == set(L.KIND_CODES)


def test_spaces_write_tables_whose_filters_hold_an_entry_per_object_not_per_slot(tmp_path):
    """ObjectSpace.open sets dkv's bloom_strip to BLOOM_STRIP (RFC 0005 decision 14): the
    slots of a queue or list share their object's filter entry, and every read still finds
    its record (range scans, a big list's point reads of single slots, dicts, values)."""
    import random

    from dkv.format import sst
    from objectspace import BLOOM_STRIP
    path = str(tmp_path / "s")
    model = {}
    with ObjectSpace.open(path, cache_items=8, max_replay_bytes=1) as s:
        assert s._db.opts.bloom_strip == BLOOM_STRIP
        for i in range(60):
            s.create_queue(f"q{i}", [i * 100 + j for j in range(20)])
            model[f"q{i}"] = [i * 100 + j for j in range(20)]
        s.create_list("big", list(range(500)))
        s.create_dict("d", {(k, k + 1): k for k in range(50)})       # 8-byte encoded keys: stripped too
        s.create_value("v", "x")
        s.checkpoint()
        for i in range(0, 60, 3):
            s.get_queue(f"q{i}").popleft()
            model[f"q{i}"].pop(0)
        s.checkpoint()
    versions = {sst.footer_version(p.read_bytes()) for p in (tmp_path / "s").rglob("*.sst")}
    assert versions == {3}
    metas = []
    for p in (tmp_path / "s").rglob("*.sst"):
        data = p.read_bytes()
        off, length, crc = sst.parse_footer(data, p.name)
        metas.append(sst.parse_meta(data[off:off + length], crc, p.name, 3))
    records = sum(m.count for m in metas)
    entries = sum(len(m.bloom.bits) * 8 // 10 for m in metas)
    assert entries * 5 < records
    rng = random.Random(5)
    with ObjectSpace.open(path, cache_items=8) as s:
        for name, items in model.items():
            assert list(s.get_queue(name)) == items
        big = s.get_list("big")
        for i in rng.sample(range(500), 40):        # point reads of single slots (500 > cache_items)
            assert big[i] == i
        assert dict(s.get_dict("d")) == {(k, k + 1): k for k in range(50)}
        assert (3, 9) not in s.get_dict("d")
        assert s.get_value("v").get() == "x"
