"""PersistedStream: Redis Streams semantics (ids, ranges, trimming, consumer groups)."""
from __future__ import annotations

import pytest

from objectspace import AlreadyExistsError, ObjectNotFoundError, ObjectSpace, PendingEntry, StreamIdError
from .os_helpers import commit


class Clock:
    def __init__(self, now: int = 1000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def st(db, clock):
    return ObjectSpace(db, prefix=b"s/", clock=clock).create_stream("st")


def test_auto_ids_follow_the_clock_and_never_go_back(st, clock):
    assert st.add({"a": 1}) == "1000-0"
    assert st.add({"a": 2}) == "1000-1"
    clock.now = 999                       # the clock went backwards
    assert st.add({"a": 3}) == "1000-2"
    clock.now = 1005
    assert st.add([("a", 4)]) == "1005-0"
    assert st.last_generated_id == "1005-0" and len(st) == 4


def test_explicit_ids(st):
    assert st.add({"f": 1}, "5-1") == "5-1"
    assert st.add({"f": 1}, "5-*") == "5-2"
    assert st.add({"f": 1}, "7-*") == "7-0"
    assert st.add({"f": 1}, "8") == "8-0"
    for bad in ["8-0", "7-5", "0-0", "x-1", "1-2-3", ""]:
        with pytest.raises(StreamIdError):
            st.add({"f": 1}, bad)
    with pytest.raises(ValueError):
        st.add({})


def test_ranges(st):
    for i in range(1, 6):
        st.add({"i": i}, f"{i}-0")
    assert [i for i, _ in st.range()] == ["1-0", "2-0", "3-0", "4-0", "5-0"]
    assert [i for i, _ in st.range("2", "4")] == ["2-0", "3-0", "4-0"]
    assert [i for i, _ in st.range("(2-0", "(4-0")] == ["3-0"]
    assert [i for i, _ in st.range("-", "+", count=2)] == ["1-0", "2-0"]
    assert [i for i, _ in st.rev_range("-", "+", count=2)] == ["5-0", "4-0"]
    assert st.range("4", "2") == [] and st.range(count=0) == []
    assert st.get("3-0") == {"i": 3} and st.get("9-9") is None and "3-0" in st


def test_trim_and_delete(st):
    for i in range(1, 11):
        st.add({"i": i}, f"{i}-0")
    assert st.trim(maxlen=7) == 3 and st.first_id == "4-0"
    assert st.trim(minid="6-0") == 2 and st.first_id == "6-0"
    assert st.delete("6-0", "99-0") == 1 and st.delete(["7-0"]) == 1
    assert st.delete("10-0") == 1 and st.last_id == "9-0" and st.last_generated_id == "10-0"
    with pytest.raises(StreamIdError):
        st.add({"x": 1}, "10-0")          # ids never go back, even after deleting the top
    assert st.add({"x": 1}, "11-0", maxlen=2) == "11-0" and [i for i, _ in st] == ["9-0", "11-0"]
    with pytest.raises(ValueError):
        st.trim()
    st.clear()
    assert len(st) == 0 and st.first_id is None and st.last_id is None


def test_consumer_group_flow(st, clock):
    for i in range(1, 5):
        st.add({"i": i}, f"{i}-0")
    st.create_group("g", "0")
    with pytest.raises(AlreadyExistsError):
        st.create_group("g")
    assert [i for i, _ in st.read_group("g", "alice", count=2)] == ["1-0", "2-0"]
    assert [i for i, _ in st.read_group("g", "bob")] == ["3-0", "4-0"]
    assert st.read_group("g", "bob") == []
    assert st.pending("g") == {"pending": 4, "min": "1-0", "max": "4-0", "consumers": {"alice": 2, "bob": 2}}
    assert st.ack("g", "1-0", "1-0", "9-0") == 1
    clock.now += 50
    assert st.pending_range("g", consumer="alice") == [PendingEntry("2-0", "alice", 50, 1)]
    # history: the consumer's own pending entries, delivered again (count + 1, as in Redis)
    assert st.read_group("g", "bob", id="0") == [("3-0", {"i": 3}), ("4-0", {"i": 4})]
    assert [p.deliveries for p in st.pending_range("g", consumer="bob")] == [2, 2]
    st.delete("4-0")
    assert st.read_group("g", "bob", id="3-0") == [("4-0", None)]
    # claim: idle entries move, their delivery count grows, deleted ones leave the PEL
    assert st.claim("g", "carol", min_idle=100) == []
    clock.now += 100
    assert st.claim("g", "carol", min_idle=100, ids=["2-0"]) == [("2-0", {"i": 2})]
    assert st.claim("g", "carol", min_idle=100) == [("3-0", {"i": 3})]
    assert st.pending_range("g") == [PendingEntry("2-0", "carol", 0, 2), PendingEntry("3-0", "carol", 0, 3)]
    assert st.claim("g", "dave", 0, ids=["3-0"], justid=True) == ["3-0"]
    assert st.pending_range("g", "3", "3")[0].deliveries == 3
    assert {c["name"]: c["pending"] for c in st.consumers("g")} == {"alice": 0, "bob": 0, "carol": 1, "dave": 1}
    assert st.delete_consumer("g", "carol") == 1
    assert st.groups() == [{"name": "g", "consumers": 3, "pending": 1, "last_delivered_id": "4-0"}]


def test_groups_start_at_dollar_and_noack(st):
    st.add({"i": 1}, "1-0")
    st.create_group("late", "$")
    st.add({"i": 2}, "2-0")
    assert st.read_group("late", "c", noack=True) == [("2-0", {"i": 2})]
    assert st.pending("late")["pending"] == 0
    st.set_group_id("late", "0")
    assert [i for i, _ in st.read_group("late", "c")] == ["1-0", "2-0"]
    with pytest.raises(ObjectNotFoundError):
        st.read_group("nope", "c")
    assert st.destroy_group("late") and not st.destroy_group("late")


def test_groups_persist_and_recreated_groups_start_clean(db, clock):
    space = ObjectSpace(db, prefix=b"s/", clock=clock)
    st = space.create_stream("st")
    for i in range(1, 4):
        st.add({"i": i}, f"{i}-0")
    st.create_group("g", "0")
    st.read_group("g", "c")
    commit(space)
    again = ObjectSpace(db, prefix=b"s/", clock=clock).get_stream("st")
    assert again.pending("g")["pending"] == 3 and again.groups()[0]["last_delivered_id"] == "3-0"
    st.destroy_group("g")
    st.create_group("g", "$")
    commit(space)
    again = ObjectSpace(db, prefix=b"s/", clock=clock).get_stream("st")
    assert again.pending("g")["pending"] == 0
    assert len(list(db.scan_prefix(again._ns + b"\x04"))) == 0
