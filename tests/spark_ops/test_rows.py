"""A task's Arrow rows into the runtime's events (spark_ops/_worker.py), without Spark: the
processing order is the same whichever order the shuffle delivered the rows in."""
from __future__ import annotations

import datetime as dt
import itertools
import random
import re

import pyarrow as pa
import pytest

from spark_ops._keys import to_parts
from spark_ops import _output, _runtime, _worker
from spark_ops._output import rows_to_arrow
from spark_ops._shards import TOKEN
from spark_ops._taskrows import TaskRows, _sort_order
from spark_ops._worker import KG, EventChunks, _events, task_table

UTC = dt.timezone.utc
INSTANTS = {"ts": "__spark_ops_us0"}


def _table(rows: list, key_type=pa.string()) -> pa.Table:
    return pa.table({
        "k": pa.array([r["k"] for r in rows], key_type),
        "ts": pa.array([r["ts"] for r in rows], pa.timestamp("us", tz="UTC")),
        "v": pa.array([r["v"] for r in rows], pa.float64()),
        "s": pa.array([r["s"] for r in rows], pa.string()),
        "nested": pa.array([{"a": r["v"]} for r in rows], pa.struct([("a", pa.float64())])),
        KG: pa.array([r["kg"] for r in rows], pa.int32()),
        TOKEN: pa.array([0] * len(rows), pa.int64()),
    })


def _rows(seed: int, n: int = 300, nan: bool = True) -> list:
    rng = random.Random(seed)
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for _ in range(n):
        k = rng.choice("abcdefg")
        out.append({"k": k, "kg": ord(k) % 3, "ts": None if rng.random() < 0.1 else t0 + dt.timedelta(milliseconds=rng.randrange(5)),
                    "v": rng.choice([None, float("nan") if nan else 3.0, 1.0, 2.0, 0.5]), "s": rng.choice([None, "x", "y", "é"])})
    return out


def _events_of(table, keys=("k",), descending=False):
    cols = ["k", "ts", "v", "s", "nested"]
    rows = table.take(_sort_order(table, list(keys), cols, ["ts"], descending))
    return _events(rows, list(keys), cols, "ts", to_parts, INSTANTS)[0]


def test_odd_batches_meet_the_keys_descending_and_each_keys_rows_in_order():
    """_runtime.keys_descending: key groups and keys descend in odd batches, a key's rows
    still by event time (nulls first); the same rows as the ascending order, key by key."""
    assert [_runtime.keys_descending(b) for b in range(4)] == [False, True, False, True]
    rows = _rows(3)
    up, down = _events_of(_table(rows)), _events_of(_table(rows), descending=True)
    keys_up = [k for k, _ in itertools.groupby((kg, parts) for kg, parts, _, _ in up)]
    keys_down = [k for k, _ in itertools.groupby((kg, parts) for kg, parts, _, _ in down)]
    assert len(keys_up) > 3 and keys_down == keys_up[::-1] == sorted(keys_up, reverse=True)

    def by_key(events):
        out: dict = {}
        for kg, parts, ts, row in events:
            out.setdefault((kg, parts), []).append((-1 if ts is None else ts, row["s"]))
        return out
    assert by_key(down) == by_key(up)
    assert all(ts == sorted(ts) for ts in ([t for t, _ in v] for v in by_key(down).values()))


def test_events_come_in_key_and_event_time_order_whatever_the_delivery_order():
    rows = _rows(1)
    first = _events_of(_table(rows))
    for seed in range(2, 6):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        again = _events_of(_table(shuffled))
        # one order: rows that tie on every sortable column are identical but for `nested`,
        # which follows `v`; compare everything but that object
        assert [(e[0], e[1], e[2], e[3]["v"] if e[3]["v"] == e[3]["v"] else "nan", e[3]["s"]) for e in again] == \
               [(e[0], e[1], e[2], e[3]["v"] if e[3]["v"] == e[3]["v"] else "nan", e[3]["s"]) for e in first]
    order = [(kg, parts, -1 if ts is None else ts) for kg, parts, ts, _ in first]
    assert order == sorted(order)       # key group, key, then event time (nulls first)
    assert len(first) == len(rows)


def test_a_tasks_batches_become_one_chunk_per_column_with_the_same_events(monkeypatch):
    rows = _rows(7, n=250, nan=False)     # (NaN is not equal to itself in Table.equals)
    whole = _table(rows)
    batches = whole.to_batches(max_chunksize=40)      # as Spark delivers them: many small batches
    assert len(batches) > 5
    table = task_table(iter(batches))
    assert table.equals(whole) and all(c.num_chunks == 1 for c in table.columns)
    monkeypatch.setattr(_worker, "TASK_CHUNK_ROWS", 100)
    few = task_table(iter(batches))     # a big task: a chunk per TASK_CHUNK_ROWS rows (and the rest)
    assert few.equals(whole) and [len(c) for c in few.column("k").chunks] == [120, 120, 10]
    cols = ["k", "ts", "v", "s", "nested"]

    def events(t):
        chunks = EventChunks(TaskRows(t, ["k"], cols, ["ts"], "ts", size=64), ["k"], cols, "ts", INSTANTS)
        return [(kg, parts, ts, r["v"] if r["v"] == r["v"] else "nan", r["s"]) for ch in chunks
                for kg, parts, ts, r in ch]
    assert events(table) == events(few) == events(pa.Table.from_batches(batches))
    assert task_table([]) is None and task_table(iter(batches[:0])) is None


def test_a_chunk_becomes_events_a_slice_of_event_rows_at_a_time(monkeypatch):
    """A chunk of a task's rows (one ask of the worker) becomes Python events EVENT_ROWS
    rows at a time: lists of at most that many, the same events in the same order as the
    whole chunk at once."""
    rows = _rows(11, n=300)
    table = _table(rows)
    cols = ["k", "ts", "v", "s", "nested"]

    def lists(event_rows, whole_chunks=False):
        monkeypatch.setattr(_worker, "EVENT_ROWS", event_rows)
        chunks = EventChunks(TaskRows(table, ["k"], cols, ["ts"], "ts", size=128), ["k"], cols, "ts", INSTANTS)
        chunks.whole_chunks = whole_chunks      # a batch that prefetches (run_shard_batch) takes them whole
        return list(chunks)

    def flat(parts):        # repr: NaNs (in "v" and nested) compare equal as text
        return [repr(event) for ch in parts for event in ch]
    whole, sliced = lists(1 << 20), lists(50)
    assert len(whole) == 3 and max(map(len, whole)) > 50      # a list a chunk (128, 128, 44 rows)
    assert len(sliced) == 7 and max(map(len, sliced)) <= 50    # 50, 50, 28 a chunk of 128, then 44
    assert flat(sliced) == flat(whole) and len(flat(whole)) > 0
    prefetching = lists(50, whole_chunks=True)
    assert [len(ch) for ch in prefetching] == [len(ch) for ch in whole] and flat(prefetching) == flat(whole)


def test_a_tasks_keys_are_counted_only_where_its_rows_could_be_more():
    """TaskRows.distinct_keys (ShardState.meet_keys asks it): the keys of the key column
    (null keys are dropped rows, not counted), the most of any column's for several key
    columns (a lower bound: the shard's own triggers see the rest), or just the row count
    where that is no more than the bound asked about."""
    t = pa.table({"a": pa.array([1, 1, 2, 2, 2, 3, None], pa.int64()),
                  "b": pa.array(["x", "y", "x", "x", "x", "x", None])})
    assert TaskRows(t, ["a"], ["a", "b"], [], None).distinct_keys(3) == 3
    assert TaskRows(t, ["b"], ["a", "b"], [], None).distinct_keys(3) == 2
    assert TaskRows(t, ["b", "a"], ["a", "b"], [], None).distinct_keys(3) == 3   # 4 in fact
    assert TaskRows(t, ["a", "b"], ["a", "b"], [], None).distinct_keys(7) == 7
    assert TaskRows(None, ["a"], ["a"], [], None).distinct_keys(0) == 0
    # a key Arrow cannot count (a struct) counts 0: the shard's own triggers decide then
    s = t.append_column("s", pa.array([{"x": i % 2} for i in range(7)]))
    assert TaskRows(s, ["s"], ["s"], [], None).distinct_keys(3) == 0
    assert TaskRows(s, ["s", "a"], ["s", "a"], [], None).distinct_keys(3) == 3


def test_a_key_that_has_no_order_is_a_clear_error():
    """A list-typed key (apply_operator refuses it up front; the shard names it too)."""
    rows = [{"k": [i % 3], "kg": 0, "ts": dt.datetime(2024, 1, 1, tzinfo=UTC), "v": float(i), "s": "x"}
            for i in range(5)]
    with pytest.raises(TypeError, match=r"cannot order the rows by \['k', 'ts'\]"):
        _sort_order(_table(rows, key_type=pa.list_(pa.int64())), ["k"], ["k", "ts", "v", "s", "nested"], ["ts"])


# ------------------------------------------------------------------ emitted rows to Arrow

ITEM = pa.struct([("t", pa.timestamp("us", tz="UTC")), ("n", pa.int64())])
OUT = pa.schema([
    ("k", pa.string()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("s", pa.struct([("x", pa.float64()), ("t", pa.timestamp("us", tz="UTC")), ("name", pa.string())])),
    ("items", pa.list_(ITEM)),
    ("tags", pa.list_(pa.string())),
    ("m", pa.map_(pa.string(), pa.int64())),
])
ZONES = [UTC, dt.timezone(dt.timedelta(hours=5, minutes=30)), dt.timezone(-dt.timedelta(hours=8)), None]


def _when(rng):
    """A datetime: aware in some zone or naive (taken as UTC), or None; often one object
    shared with earlier rows, as a shard's rows share timestamps."""
    if rng.random() < 0.1:
        return None
    t = dt.datetime(2024, 3, 1, tzinfo=UTC) + dt.timedelta(microseconds=rng.randrange(10**10))
    zone = rng.choice(ZONES)
    return t.replace(tzinfo=None) if zone is None else t.astimezone(zone)


def _emitted(seed: int, n: int = 200) -> list:
    rng = random.Random(seed)
    shared = [_when(rng) for _ in range(5)]
    when = lambda: rng.choice(shared) if rng.random() < 0.5 else _when(rng)   # noqa: E731
    rows = []
    for i in range(n):
        row = {"k": rng.choice([None, "a", "é", ""]), "at": when()}
        s = rng.random()
        if s < 0.1:
            row["s"] = None
        elif s < 0.8:
            row["s"] = {"x": rng.choice([None, 1.5, float("nan")]), "t": when(), "name": rng.choice(["p", None])}
        elif s < 0.9:
            row["s"] = {"x": 2.0}                               # missing fields are null
        if rng.random() < 0.9:
            row["items"] = rng.choice([None, []] + [[{"t": when(), "n": j} if rng.random() < 0.8 else None
                                                     for j in range(rng.randrange(4))]])
        row["tags"] = rng.choice([None, [], ["x", None]])
        row["m"] = rng.choice([None, {}, {"a": 1}])
        rows.append(row)                                         # (a key that is no column is an error)
    return rows


@pytest.mark.parametrize("seed", range(8))
def test_emitted_rows_convert_as_arrow_converts_them_row_by_row(seed, monkeypatch):
    rows = _emitted(seed)
    monkeypatch.setattr(_output, "_row_by_row", None)      # the columnar way takes all of these
    got = rows_to_arrow(rows, OUT)
    want = pa.RecordBatch.from_pylist(rows, schema=OUT)
    got.validate(full=True)
    assert got.schema == OUT
    assert _nan_free(got.to_pylist()) == _nan_free(want.to_pylist())
    for name in OUT.names:      # the same nulls at every level, not just equal-looking values
        assert got.column(name).is_null().equals(want.column(name).is_null())


def _nan_free(v):
    """``v`` with float NaNs (unequal to themselves) made a comparable marker."""
    if isinstance(v, float) and v != v:
        return "NaN"
    if isinstance(v, dict):
        return {k: _nan_free(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nan_free(x) for x in v]
    return v


@pytest.mark.parametrize("rows", [
    [],
    [("a", dt.datetime(2024, 1, 1), None, None, ["t"], None)],                   # sequences, not dicts
    [{"k": "a", "s": (1.0, dt.datetime(2024, 1, 1, tzinfo=UTC), "n")}],            # a struct as a tuple
    [{"k": "a", "at": 1_700_000_000_000_000}, {"k": "b", "at": dt.datetime(2024, 1, 1)}],   # ints are raw us
    [{"k": "a", "items": [(dt.datetime(2024, 1, 1), 3)]}],                         # list of tuples
])
def test_values_the_columnar_way_does_not_take_still_convert(rows):
    assert rows_to_arrow(rows, OUT).equals(pa.RecordBatch.from_pylist(
        [r if isinstance(r, dict) else dict(zip(OUT.names, r)) for r in rows], schema=OUT))


def test_an_emitted_value_that_does_not_fit_names_its_column():
    good = {"k": "a", "at": dt.datetime(2024, 1, 1, tzinfo=UTC)}
    with pytest.raises(TypeError, match=r"output column 'items'"):
        rows_to_arrow([good, {**good, "items": [{"t": "yesterday", "n": 1}]}], OUT)
    with pytest.raises(TypeError, match=r"output column 'k'"):
        rows_to_arrow([good, {**good, "k": 5}], OUT)


def test_a_null_where_the_output_schema_says_not_null_names_the_field():
    """Arrow builds such a batch without complaint and Spark then fails reading it with
    "Value at index is null"; the shard says which field instead."""
    inner = pa.struct([pa.field("t", pa.timestamp("us", tz="UTC"), nullable=False), ("x", pa.int64())])
    strict = pa.schema([pa.field("k", pa.string(), nullable=False), ("s", inner),
                        ("items", pa.list_(pa.field("element", inner, nullable=False)))])
    t = dt.datetime(2024, 1, 1, tzinfo=UTC)
    good = [{"k": "a", "s": {"t": t}, "items": [{"t": t}]},
            {"k": "b", "s": None, "items": None},                   # null parents: their fields do not count
            {"k": "c", "s": {"t": t, "x": None}, "items": []}]
    assert rows_to_arrow(good, strict).num_rows == 3
    for bad, path in [({"k": None}, "k"), ({"k": "d", "s": {"x": 1}}, "s.t"),
                      ({"k": "d", "items": [None]}, "items[].element"),
                      ({"k": "d", "items": [{"t": t}, {"x": 2}]}, "items[].element.t")]:
        with pytest.raises(TypeError, match=rf"null for {re.escape(repr(path))}, which the output schema declares NOT NULL"):
            rows_to_arrow(good + [bad], strict)



def test_an_emitted_key_that_names_no_column_is_an_error_naming_it():
    """A misspelled key would otherwise be dropped and its column left null."""
    t = dt.datetime(2024, 1, 1, tzinfo=UTC)
    good = [{"k": "a", "at": t}, {"k": "b"}]                    # a missing key is a null
    assert rows_to_arrow(good, OUT).column("at").null_count == 1
    cases = [
        ({"k": "c", "at": t, "tgas": ["x"]},
         r"key\(s\) 'tgas', for which the output schema has no column \(it has k, at, s, items, tags, m\); "
         r"the row has no 's', 'items', 'tags', 'm'"),
        ({"kk": "c"}, r"key\(s\) 'kk', for which the output schema has no column"),        # as long as a good row
        ({"k": "c", "s": {"x": 1.0, "nme": "p"}}, r"key\(s\) 'nme', for which the struct 's' has no field "
                                                 r"\(it has x, t, name\)"),
        ({"k": "c", "items": [{"t": t, "n": 1}, None, {"t": t, "m": 2}]}, r"key\(s\) 'm', for which the struct "
                                                                          r"'items\[\]' has no field"),
    ]
    for bad, match in cases:
        for rows in (good + [bad], [bad] + good, [bad]):
            with pytest.raises(TypeError, match=match):
                rows_to_arrow(rows, OUT)
    # ... also when the batch goes the row-by-row way (a value that does not fit elsewhere)
    with pytest.raises(TypeError, match=r"'tgas'"):
        rows_to_arrow(good + [{"k": 5, "tgas": []}], OUT)
    with pytest.raises(TypeError, match=r"a row of 7 values, but the output schema has 6 columns"):
        rows_to_arrow([("a", t, None, None, None, None, "extra")], OUT)


def test_persisted_dicts_and_lists_are_emitted_as_their_plain_twins():
    from objectspace import ObjectSpace
    t = dt.datetime(2024, 1, 1, tzinfo=UTC)
    with ObjectSpace.open("memory://emit-twins") as space:
        s = space.create_dict("s", {"x": 1.5, "name": "p"})
        m = space.create_dict("m", {"a": 1})
        tags = space.create_queue("tags", ["x", "y"])
        items = space.create_list("items", [{"t": t, "n": 1}])
        row = space.create_dict("row", {"k": "a", "at": t})
        got = rows_to_arrow([{"k": "a", "s": s, "m": m, "tags": tags, "items": items}, row], OUT).to_pylist()
    assert got[0]["s"] == {"x": 1.5, "t": None, "name": "p"} and got[0]["m"] == [("a", 1)]
    assert got[0]["tags"] == ["x", "y"] and got[0]["items"] == [{"t": t, "n": 1}]
    assert got[1]["k"] == "a" and got[1]["at"] == t


def test_a_chunk_of_wide_rows_holds_fewer_of_them(monkeypatch):
    """A chunk has CHUNK_ROWS rows, fewer where they would take more than CHUNK_BYTES (a
    shard host holds about a chunk of its task); every row is in one chunk, in order."""
    from spark_ops import _taskrows
    t = pa.table({KG: pa.array([0] * 100, pa.int32()), "k": pa.array(range(100), pa.int64()),
                  "blob": pa.array([b"x" * 1000] * 100)})
    assert TaskRows(t, ["k"], ["k", "blob"], [], None).size == _taskrows.CHUNK_ROWS
    monkeypatch.setattr(_taskrows, "CHUNK_BYTES", 10_000)
    rows = TaskRows(t, ["k"], ["k", "blob"], [], None)
    assert 5 <= rows.size <= 10
    got = [c.column("k").to_pylist() for c in (rows.chunk(i) for i in range(-(-100 // rows.size)))]
    assert all(len(c) <= rows.size for c in got) and sum(got, []) == list(range(100))


def test_a_key_of_one_column_comes_back_as_it_went_in():
    """user_key (the key operators see) of to_parts' parts: the value itself for one key
    column (str and int keys pass as they are), a tuple for several."""
    from spark_ops._keys import user_key
    t = dt.datetime(2024, 1, 1, 12, 30)
    for v in ("u1", "", 7, -1, 2**70, True, False, None, 1.5, b"\x00b", t, dt.date(2024, 2, 29)):
        got = user_key(to_parts((v,)), 1)
        assert got == v and type(got) is type(v), v
    assert user_key(to_parts(("a", 1, None)), 3) == ("a", 1, None)


def test_a_rows_values_are_plain_python_a_null_is_none_and_an_int_stays_an_int():
    """What on_event gets for each Arrow type a Spark task hands over (mapInArrow's types,
    a session time zone other than UTC): a null is None in every column (an int column
    with nulls keeps ints, a string column does not turn them into NaN), a float NaN stays
    NaN, top-level timestamps are aware UTC datetimes, nested ones naive UTC, maps dicts."""
    import decimal
    import math
    t1 = dt.datetime(2024, 3, 31, 1, 30, 0, 250, tzinfo=UTC)
    berlin = pa.timestamp("us", tz="Europe/Berlin")
    table = pa.table({
        KG: pa.array([1, 1, 1, 2], pa.int32()),
        "k": ["a", "a", None, "b"],
        "n": pa.array([1, None, 7, 2 ** 62], pa.int64()),
        "x": pa.array([1.5, None, 0.0, float("nan")], pa.float64()),
        "s": pa.array(["x", None, "z", "é"], pa.string()),
        "flag": pa.array([True, None, False, False]),
        "ts": pa.array([t1, None, t1 + dt.timedelta(seconds=5), t1], berlin),
        "st": pa.array([{"t": t1, "n": 1}, None, None, {"t": None, "n": None}],
                       pa.struct([("t", berlin), ("n", pa.int64())])),
        "arr": pa.array([[t1, None], None, [], []], pa.list_(berlin)),
        "m": pa.array([[("x", 1)], None, [], [("y", None)]], pa.map_(pa.string(), pa.int64())),
        "day": pa.array([dt.date(2024, 3, 31), None, None, dt.date(1970, 1, 1)], pa.date32()),
        "dec": pa.array([decimal.Decimal("1.25"), None, None, decimal.Decimal("-0.01")], pa.decimal128(10, 2)),
        "bin": pa.array([b"\x00\x01", None, None, b""], pa.binary()),
    })
    cols = [c for c in table.column_names if c != KG]
    events, heartbeat = _events(table, ["k"], cols, "ts", to_parts, {"ts": "helper"})
    # the row with a null key is a heartbeat: dropped, its event time kept
    ms = (t1 - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(milliseconds=1)
    assert heartbeat == ms + 5000 and type(heartbeat) is int
    assert [(kg, parts) for kg, parts, _, _ in events] == [(1, ("a",)), (1, ("a",)), (2, ("b",))]
    first, nulls, last = (row for _, _, _, row in events)
    naive = t1.replace(tzinfo=None)
    assert first == {"k": "a", "n": 1, "x": 1.5, "s": "x", "flag": True, "ts": t1, "st": {"t": naive, "n": 1},
                     "arr": [naive, None], "m": {"x": 1}, "day": dt.date(2024, 3, 31),
                     "dec": decimal.Decimal("1.25"), "bin": b"\x00\x01"}
    assert first["ts"].tzinfo is not None and first["st"]["t"].tzinfo is None
    assert nulls == {"k": "a", **{c: None for c in cols if c != "k"}}
    assert type(last["n"]) is int and last["n"] == 2 ** 62 and math.isnan(last["x"])
    assert last["st"] == {"t": None, "n": None} and last["m"] == {"y": None} and last["arr"] == []
    assert [ts for _, _, ts, _ in events] == [ms, None, ms]


def test_nanoseconds_dictionaries_and_fixed_lists_become_plain_values_too():
    """Types Spark does not hand over but an Arrow table may hold (the harness's tables,
    initial state built elsewhere): nanosecond timestamps and durations (cut to
    microseconds), dictionary-encoded and fixed-size-list columns, still plain values."""
    t1 = dt.datetime(2024, 3, 31, 1, 30, 0, 250, tzinfo=UTC)
    tokyo_ns = pa.timestamp("ns", tz="Asia/Tokyo")
    table = pa.table({
        KG: pa.array([0, 0], pa.int32()),
        "k": ["a", "b"],
        "ns": pa.array([{"t": t1}, {"t": None}], pa.struct([("t", tokyo_ns)])),
        "dur": pa.array([1_500, None], pa.duration("ns")),
        "dict": pa.array([t1, t1], pa.timestamp("us", tz="Asia/Tokyo")).dictionary_encode(),
        "fixed": pa.array([[t1, t1], [None, t1]], pa.list_(pa.timestamp("us", tz="Asia/Tokyo"), 2)),
    })
    cols = [c for c in table.column_names if c != KG]
    rows = [row for _, _, _, row in _events(table, ["k"], cols, None, to_parts, {})[0]]
    naive = t1.replace(tzinfo=None)
    assert rows == [{"k": "a", "ns": {"t": naive}, "dur": dt.timedelta(microseconds=1), "dict": naive,
                     "fixed": [naive, naive]},
                    {"k": "b", "ns": {"t": None}, "dur": None, "dict": naive, "fixed": [None, naive]}]


def test_a_nan_key_is_a_clear_error_naming_its_column():
    """A NaN equals no key, itself included: the task fails naming the column and what to do,
    as the harness refuses it (rows with a null key are heartbeats, dropped)."""
    table = pa.table({KG: pa.array([0, 0, 0], pa.int32()), "price": [1.0, float("nan"), None], "v": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"key column 'price' holds NaN in 1 row.*filter those rows"):
        _events(table, ["price"], ["price", "v"], None, to_parts, {})
