"""Lazy loading: get_<kind> reads the index entry and metadata only; items come on demand
through a bounded cache; objects larger than the cache iterate without being loaded."""
from __future__ import annotations

import pytest

from objectspace import ObjectSpace
from objectspace._keycodec import encode_name
from .os_helpers import RecordingDB, commit

P = b"app/"
N = 20_000
CACHE = 64


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """One db holding big objects of several kinds (built once for the module)."""
    from .os_helpers import new_location, open_db
    db = open_db(new_location())
    space = ObjectSpace(db, prefix=P)
    space.create_queue("q", range(N))
    space.create_list("l", range(N))
    space.create_dict("d", {i: str(i) for i in range(N)})
    space.create_sorted_dict("sd", {i: i * i for i in range(0, 2 * N, 2)})
    space.create_sorted_set("ss", range(0, 3 * N, 3))
    st = space.create_stream("st")
    for i in range(1, N + 1):
        st.add({"i": i}, f"{i}-0")
    commit(space)
    yield db
    db.close()


def cold(db, cache=CACHE):
    rec = RecordingDB(db)
    return rec, ObjectSpace(rec, prefix=P, cache_items=cache)


@pytest.mark.parametrize("kind,name", [("queue", "q"), ("list", "l"), ("dict", "d"), ("sorted_dict", "sd"),
                                       ("sorted_set", "ss"), ("stream", "st")])
def test_get_reads_its_metadata_only(big, kind, name):
    """One point read: a format-2 metadata record names the object's kind and codec."""
    rec, space = cold(big)
    obj = getattr(space, f"get_{kind}")(name)
    assert rec.reads == [("get", space._obj_prefix + encode_name(name) + b"\x00")]
    assert len(obj) == N


def test_queue_point_reads_and_streaming_iteration(big):
    rec, space = cold(big)
    q = space.get_queue("q")
    rec.reads.clear()
    assert q[12345] == 12345 and q[-1] == N - 1
    assert [r[0] for r in rec.reads] == ["get", "get"]
    assert sum(1 for _ in q) == N
    assert len(q._vals) <= CACHE
    assert q.popleft() == 0 and q.peek() == 1
    q.append(N)
    assert list(q)[-3:] == [N - 2, N - 1, N]


def test_dict_point_reads(big):
    rec, space = cold(big)
    d = space.get_dict("d")
    rec.reads.clear()
    assert d[777] == "777" and 778 in d and -1 not in d and d.get(-2) is None
    assert [r[0] for r in rec.reads] == ["get"] * 4
    d[N + 5] = "new"                 # a new key: one point read to learn it is new
    del d[3]
    assert len(d) == N
    items = dict(d.items())           # merged with the store scan, not loaded
    assert len(items) == N and items[N + 5] == "new" and 3 not in items
    assert len(d._t.vals) <= CACHE


def test_sorted_kinds_range_scan_without_loading(big):
    rec, space = cold(big)
    sd = space.get_sorted_dict("sd")
    rec.reads.clear()
    assert list(sd.irange(100, 110)) == [100, 102, 104, 106, 108, 110]
    assert [r[0] for r in rec.reads] == ["scan"]
    assert list(sd.irange(100, 110, inclusive=(False, False), reverse=True)) == [108, 106, 104, 102]
    assert sd.peekitem(0) == (0, 0) and sd.peekitem(-1) == (2 * N - 2, (2 * N - 2) ** 2)
    assert sd.index(4) == 2 and sd.bisect_left(5) == 3
    ss = space.get_sorted_set("ss")
    assert ss[10] == 30 and ss.bisect_right(30) == 11 and list(ss.islice(1, 3)) == [3, 6]
    assert len(sd._t.vals) <= CACHE and len(ss._t.vals) <= CACHE


def test_list_tail_operations_without_loading(big):
    rec, space = cold(big)
    lst = space.get_list("l")
    assert lst.pop() == N - 1
    lst.append("x")
    assert lst[-1] == "x" and lst[5] == 5
    lst.insert(N - 2, "y")            # shifts two slots only
    assert lst[-3:] == ["y", N - 2, "x"]
    assert len(lst._vals) <= CACHE + 4


def test_stream_range_scan(big):
    rec, space = cold(big)
    st = space.get_stream("st")
    rec.reads.clear()
    assert st.range("100", "102") == [("100-0", {"i": 100}), ("101-0", {"i": 101}), ("102-0", {"i": 102})]
    assert [r[0] for r in rec.reads] == ["scan"]
    assert st.rev_range("-", "+", count=1) == [(f"{N}-0", {"i": N})]
    assert st.first_id == "1-0" and st.last_id == f"{N}-0"


def test_small_objects_load_whole_with_one_scan(space, db):
    space.create_dict("d", {i: i for i in range(10)})
    commit(space)
    rec, cold_space = cold(db, cache=4096)
    d = cold_space.get_dict("d")
    rec.reads.clear()
    assert [d[i] for i in range(10)] == list(range(10))
    assert [r[0] for r in rec.reads] == ["scan_prefix"]


def test_clean_items_are_evicted_past_the_cache(db):
    space = ObjectSpace(db, prefix=P, cache_items=50)
    d = space.create_dict("d")
    for i in range(500):
        d[i] = i
    assert len(d._t.vals) == 500      # dirty entries are pinned
    commit(space)
    assert len(d._t.vals) <= 50       # clean ones go
    assert d[499] == 499 and len(d) == 500
    q = space.create_queue("q", range(500))
    commit(space)
    assert len(q._vals) <= 50 and list(q) == list(range(500))


@pytest.mark.slow
def test_a_million_element_queue_opens_at_once(tmp_path):
    from .os_helpers import new_location, open_db
    db = open_db(new_location())
    space = ObjectSpace(db, prefix=P)
    space.create_queue("q", range(1_000_000))
    commit(space)
    rec, again = cold(db)
    q = again.get_queue("q")
    assert len(rec.reads) == 1 and q[999_999] == 999_999
    assert sum(1 for _ in q) == 1_000_000 and len(q._vals) <= CACHE
    db.close()
