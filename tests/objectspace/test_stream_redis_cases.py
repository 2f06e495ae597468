"""The 11 differences from Redis 7.0 that issue 17 found in the stream, one test each, plus
the argument checks: what Redis does, checked without a redis-server (test_stream_redis.py
compares against a real one)."""
from __future__ import annotations

import pytest

from objectspace import ObjectNotFoundError, ObjectSpace, StreamIdError
from .test_stream import clock  # noqa: F401 - the fixture: a settable clock

MAX = (1 << 64) - 1


@pytest.fixture
def st(db, clock):
    return ObjectSpace(db, prefix=b"r/", clock=clock).create_stream("st")


def state(st) -> tuple:
    groups = st.groups()
    return (list(st), st.last_generated_id, groups,
            {g["name"]: (st.pending_range(g["name"]), st.consumers(g["name"])) for g in groups})


def pel(st, group="g") -> list:
    return [(p.id, p.consumer, p.deliveries) for p in st.pending_range(group)]


def seen(st, group="g") -> dict:
    return {c["name"]: c["idle_ms"] for c in st.consumers(group)}


@pytest.fixture
def grouped(st, clock):
    for i in range(1, 4):
        st.add({"i": i}, f"{i}-0")
    st.create_group("g", "0")
    return st


def test_1_reading_history_counts_a_delivery(grouped, clock):
    st = grouped
    st.read_group("g", "a", count=2)
    clock.now += 50
    assert st.read_group("g", "a", id="0") == [("1-0", {"i": 1}), ("2-0", {"i": 2})]
    assert [(p.deliveries, p.idle_ms) for p in st.pending_range("g")] == [(2, 0), (2, 0)]
    st.delete("1-0")
    clock.now += 10
    assert st.read_group("g", "a", id="0") == [("1-0", None), ("2-0", {"i": 2})]
    assert [(p.deliveries, p.idle_ms) for p in st.pending_range("g")] == [(2, 10), (3, 0)]


def test_2_claim_drops_a_deleted_entry_however_idle(grouped, clock):
    st = grouped
    st.read_group("g", "a")
    st.delete("2-0")
    assert st.claim("g", "b", 10_000, ids=["2-0", "3-0"]) == []
    assert pel(st) == [("1-0", "a", 1), ("3-0", "a", 1)]
    st.delete("3-0")
    assert st.claim("g", "b", 10_000) == []                # ids=None (XAUTOCLAIM) too
    assert pel(st) == [("1-0", "a", 1)]


def test_3_claim_creates_the_consumer_only_when_it_claims(grouped, clock):
    st = grouped
    st.read_group("g", "a")
    assert st.claim("g", "b", 10_000) == [] and st.claim("g", "b", 10_000, ids=["1-0"]) == []
    assert seen(st) == {"a": 0}
    assert st.claim("g", "b", 0, ids=["1-0"], justid=True) == ["1-0"]
    assert set(seen(st)) == {"a", "b"}


def test_4_claim_refreshes_the_seen_time(grouped, clock):
    st = grouped
    st.read_group("g", "a", count=1)
    st.create_consumer("g", "b")
    clock.now += 100
    assert seen(st) == {"a": 100, "b": 100}
    assert st.claim("g", "b", 50) == [("1-0", {"i": 1})]
    assert seen(st) == {"a": 100, "b": 0}


def test_5_reading_nothing_new_leaves_the_consumer_alone(grouped, clock):
    st = grouped
    st.read_group("g", "a")
    clock.now += 100
    assert st.read_group("g", "a") == [] and st.read_group("g", "b") == []
    assert seen(st) == {"a": 100}
    assert st.read_group("g", "b", id="0") == []            # a read with an id does create it
    assert seen(st) == {"a": 100, "b": 0}


def test_6_a_bad_id_changes_nothing(grouped):
    st = grouped
    before = state(st)
    with pytest.raises(StreamIdError):
        st.read_group("g", "a", id="bad")
    assert state(st) == before and seen(st) == {}


def test_7_count_0_reads_everything(grouped):
    st = grouped
    assert [i for i, _ in st.read_group("g", "a", count=0)] == ["1-0", "2-0", "3-0"]
    assert [i for i, _ in st.read_group("g", "a", count=0, id="0")] == ["1-0", "2-0", "3-0"]


def test_8_pending_range_count_0_is_empty(grouped):
    st = grouped
    st.read_group("g", "a")
    assert st.pending_range("g", count=0) == [] and st.pending_range("g", count=-1) == []
    assert len(st.pending_range("g", count=1)) == 1


@pytest.mark.parametrize("kw", [{"maxlen": -1}, {"maxlen": 1, "minid": "1-0"}, {"minid": "bad"},
                                {"maxlen": "1"}])
def test_9_add_with_bad_trimming_adds_nothing(grouped, kw):
    st = grouped
    before = state(st)
    with pytest.raises((ValueError, TypeError)):
        st.add({"x": 1}, **kw)
    assert state(st) == before


def test_10_ack_with_a_bad_id_acks_nothing(grouped):
    st = grouped
    st.read_group("g", "a")
    with pytest.raises(StreamIdError):
        st.ack("g", "1-0", "bad")
    assert len(pel(st)) == 3
    assert st.ack("g", "1-0", "1-0", "9-0") == 1


def test_11_the_top_of_the_id_space(st, clock):
    assert st.add({"x": 1}, f"{MAX}-{MAX - 1}") == f"{MAX}-{MAX - 1}"
    assert st.add({"x": 2}) == f"{MAX}-{MAX}"
    for ident in ("*", f"{MAX}-*", f"{MAX}-{MAX}"):
        with pytest.raises(StreamIdError):
            st.add({"x": 3}, ident)
    assert len(st) == 2


def test_every_verb_checks_its_arguments_first(grouped, clock):
    st = grouped
    st.read_group("g", "a", count=2)
    before = state(st)
    bad = [
        lambda: st.delete("1-0", "x"), lambda: st.trim(maxlen=-1), lambda: st.trim(minid="x"),
        lambda: st.trim(), lambda: st.add({}), lambda: st.add({"x": 1}, "0-0"),
        lambda: st.add({"x": 1}, "5-5-*"), lambda: st.add({"x": 1}, " 9-1"),
        lambda: st.create_group("h", "x"), lambda: st.create_group("g", "0"), lambda: st.create_group("", "0"),
        lambda: st.set_group_id("g", "x"), lambda: st.set_group_id("nope", "0"),
        lambda: st.read_group("nope", "a"), lambda: st.read_group("g", "", count=1),
        lambda: st.read_group("g", "a", count="1"), lambda: st.read_group("g", "a", id="$"),
        lambda: st.ack("nope", "1-0"), lambda: st.claim("g", "b", 0, ids=["1-0", "x"]),
        lambda: st.claim("g", "b", 0, count=0), lambda: st.claim("g", "b", "0"),
        lambda: st.claim("nope", "b", 0), lambda: st.pending_range("g", "x"),
        lambda: st.pending_range("g", count="1"), lambda: st.create_consumer("nope", "b"),
        lambda: st.create_consumer("g", ""), lambda: st.range("(18446744073709551615-18446744073709551615"),
        lambda: st.range("-", "(0-0"), lambda: st.range(count="2"),
    ]
    for call in bad:
        with pytest.raises((ValueError, TypeError, KeyError)):
            call()
        assert state(st) == before, call


def test_range_bounds_are_redis_s(grouped):
    st = grouped
    assert st.range("+", "-") == [] and st.range("-", "-") == [] and st.range("+", "+") == []
    assert [i for i, _ in st.range("(1-0", "(3-0")] == ["2-0"]
    assert [i for i, _ in st.rev_range("2", "+")] == ["3-0", "2-0"]
    assert st.range("-", "+", count=0) == [] and st.range("-", "+", count=-1) == []


def test_set_group_id_takes_dash_and_plus(grouped):
    st = grouped
    st.set_group_id("g", "+")
    assert st.read_group("g", "a") == []
    st.set_group_id("g", "-")
    assert [i for i, _ in st.read_group("g", "a")] == ["1-0", "2-0", "3-0"]


def test_create_consumer(grouped, clock):
    st = grouped
    assert st.create_consumer("g", "a") is True
    clock.now += 5
    assert st.create_consumer("g", "a") is False and seen(st) == {"a": 5}
    with pytest.raises(ObjectNotFoundError):
        st.create_consumer("nope", "a")
    assert st.delete_consumer("g", "a") == 0 and seen(st) == {}


def test_claim_without_ids_counts_only_what_it_claims(grouped, clock):
    st = grouped
    st.read_group("g", "a")
    st.delete("1-0")
    assert st.claim("g", "b", 0, count=1, justid=True) == ["2-0"]   # 1-0 left, not counted
    assert pel(st) == [("2-0", "b", 1), ("3-0", "a", 1)]


def test_groups_and_consumers_come_by_name(st):
    for g in ("zeta", "alpha", "mid"):
        st.create_group(g)
    assert [g["name"] for g in st.groups()] == ["alpha", "mid", "zeta"]
    for c in ("carol", "alice", "bob"):
        st.create_consumer("mid", c)
    assert [c["name"] for c in st.consumers("mid")] == ["alice", "bob", "carol"]


def test_the_fixes_survive_a_reopen(db, clock):
    from .os_helpers import commit
    space = ObjectSpace(db, prefix=b"r/", clock=clock)
    st = space.create_stream("st")
    st.add({"i": 1}, "1-0")
    st.create_group("g", "0")
    st.read_group("g", "a")
    st.read_group("g", "a", id="0")
    commit(space)
    again = ObjectSpace(db, prefix=b"r/", clock=clock, cache_items=1).get_stream("st")
    assert pel(again) == [("1-0", "a", 2)]
    again.read_group("g", "a", id="0")
    assert pel(again) == [("1-0", "a", 3)]
