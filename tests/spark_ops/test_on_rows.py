"""A handler per key and batch (issue 19, item 6): ``Operator.on_rows(key, rows, ctx)`` gets a
key's rows of the batch as one pandas DataFrame (as Spark's ``handleInputRows``), and every
state handle that ctx gives has ``exists()`` (as Spark's handles)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from spark_ops import Operator, _runtime, apply_operator
from spark_ops.testing import OperatorHarness

from .models import bag_by_key, by_key
from .spark_helpers import at, read_sink, read_stream, run_stream, write_batch_files
from .test_custom_operator import IDLE_MS, SCHEMA, _data, make_operator, model


def make_rows_operator() -> Operator:
    """CountRecentIdle of test_custom_operator written with on_rows (and yield): the same
    output row per input row, the same idle timer. Built in a function so cloudpickle ships it."""

    def _ms(t) -> int:
        """A frame's timestamp cell (naive: UTC) as ms since the epoch."""
        import pandas
        t = pandas.Timestamp(t)
        return (t if t.tzinfo is not None else t.tz_localize("UTC")).value // 1_000_000

    class CountRecentIdleRows(Operator):
        def on_rows(self, key, rows, ctx):
            import pandas
            assert isinstance(rows, pandas.DataFrame) and list(rows.index) == list(range(len(rows)))
            times = [_ms(t) for t in rows["ts"]]
            assert times == sorted(times) and ctx.event_time == max(times) and ctx.key == key
            n = ctx.value("n", default=0)
            recent = ctx.queue("recent")
            last = ctx.value("last")
            if last.exists():
                ctx.delete_event_timer(last.value + IDLE_MS, name="idle")
            for v, ms in zip(rows["v"], times):
                n.value += 1
                recent.append(int(v))
                while len(recent) > 3:
                    recent.popleft()
                last.value = ms if not last.exists() else max(last.value, ms)
                yield {"k": key, "kind": "row", "n": n.value, "recent": list(recent), "at": ctx.to_datetime(ms)}
            ctx.register_event_timer(last.value + IDLE_MS, name="idle")

        def on_timer(self, key, timer, ctx):
            ctx.emit({"k": key, "kind": "idle", "n": ctx.value("n", default=0).value,
                      "recent": list(ctx.queue("recent")), "at": ctx.to_datetime(timer.time)})
            for name in ("n", "recent", "last"):
                ctx.delete_state(name)

    return CountRecentIdleRows()


class RecordRows(Operator):
    """Keeps what on_rows got (the harness runs in this process) and emits one row per call."""

    def __init__(self):
        self.calls = []

    def on_rows(self, key, rows, ctx):
        self.calls.append((ctx.batch_id, key, ctx.key_group, ctx.event_time, rows.copy()))
        ctx.emit({"k": key, "n": len(rows)})


class RecordEvents(Operator):
    def __init__(self):
        self.calls = []

    def on_event(self, key, row, ctx):
        self.calls.append((ctx.batch_id, key, ctx.key_group, ctx.event_time, row))


def _grouped(calls):
    """on_event's calls grouped as on_rows gets them: one entry per batch and consecutive key."""
    out = []
    for batch, key, kg, ts, row in calls:
        if out and out[-1][:3] == (batch, key, kg):
            out[-1][3].append(ts)
            out[-1][4].append(row)
        else:
            out.append((batch, key, kg, [ts], [row]))
    return [(b, k, kg, max((t for t in ts if t is not None), default=None), rows) for b, k, kg, ts, rows in out]


def test_on_rows_gets_each_keys_rows_at_once_as_on_event_sees_them(monkeypatch):
    """Several keys, rows given out of order, late rows, a field that is sometimes None or missing,
    and chunks of 3 events (a key's rows span chunks): on_rows is called once per key and batch
    with the rows on_event would get one by one, in the same order, and ctx.event_time is the
    largest event time of them."""
    monkeypatch.setattr(_runtime, "CHUNK_EVENTS", 3)
    batches = [
        [{"k": "b", "ts": at(300), "v": 1, "note": None}, {"k": "a", "ts": at(200), "v": 2, "note": "x"},
         {"k": "a", "ts": at(100), "v": 3, "note": "y"}, {"k": "b", "ts": at(100), "v": 4},
         {"k": "c", "ts": at(5000), "v": 5, "note": "z"}, {"k": "a", "ts": at(150), "v": 6, "note": None}],
        [{"k": "a", "ts": at(10), "v": 7}, {"k": "a", "ts": at(6000), "v": 8, "note": "w"},       # at(10): late
         {"k": "b", "ts": at(6001), "v": 9}, {"k": "b", "ts": at(5999), "v": 10}],
    ]
    rec, ev = RecordRows(), RecordEvents()
    hr = OperatorHarness(rec, key="k", event_time="ts", watermark="1 second", partitions=2)
    he = OperatorHarness(ev, key="k", event_time="ts", watermark="1 second", partitions=2)
    outs = [hr.run_batch(rows) for rows in batches]
    for rows in batches:
        he.run_batch(rows)
    want = []
    for b, k, kg, ts, rows in _grouped(ev.calls):
        cols = list(dict.fromkeys(c for r in rows for c in r))      # a row without "note": None there
        want.append((b, k, kg, ts, [{c: r.get(c) for c in cols} for r in rows]))
    got = [(b, k, kg, ts, list(frame.to_dict("records"))) for b, k, kg, ts, frame in rec.calls]
    assert got == want
    assert sorted((b, k) for b, k, *_ in rec.calls) == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b")]
    assert sorted(r["n"] for r in outs[0]) == [1, 2, 3] and sorted(r["n"] for r in outs[1]) == [1, 2]
    for b, k, kg, _, frame in rec.calls:
        assert kg == hr.key_group((k,))
        assert list(frame.columns) == (["k", "ts", "v", "note"] if (b, k) != (1, "b") else ["k", "ts", "v"])
        assert str(frame["v"].dtype) == "int64" and (frame["k"] == k).all()
    frame_a0 = rec.calls[[(b, k) for b, k, *_ in rec.calls].index((0, "a"))][4]
    assert frame_a0["v"].tolist() == [3, 6, 2] and frame_a0["note"].tolist() == ["y", None, "x"]
    assert frame_a0["note"].dtype == object
    late = [m["late_rows"] for m in hr.metrics]
    assert late == [m["late_rows"] for m in he.metrics] and sum(late) == 1


def test_a_key_spanning_early_saves_is_handed_over_once(monkeypatch):
    """The shard saves early every spill_events events (here 3, in chunks of 4): a key's rows
    still come in one call, and what earlier keys changed is saved and checkpointed."""
    monkeypatch.setattr(_runtime, "CHUNK_EVENTS", 4)
    calls = []

    class Sum(Operator):
        def on_rows(self, key, rows, ctx):
            calls.append((key, rows["v"].tolist()))
            s = ctx.value("sum", default=0)
            s.value += int(rows["v"].sum())
            ctx.emit({"k": key, "sum": s.value})

    h = OperatorHarness(Sum(), key="k", partitions=1, key_groups=16)     # a's key group before b's
    h.run_batch([{"k": "a", "v": 0}])
    for st in _runtime._SHARDS.values():
        if st is not None and st.db is not None:
            st.spill_events = 3
    spills, spill = [], _runtime.ShardState.spill
    monkeypatch.setattr(_runtime.ShardState, "spill", lambda self: (spills.append(len(calls)), spill(self))[1])
    rows = [{"k": "a", "v": i} for i in range(1, 11)] + [{"k": "b", "v": 100}]
    calls.clear()
    assert sorted(h.run_batch(rows), key=lambda r: r["k"]) == [{"k": "a", "sum": 55}, {"k": "b", "sum": 100}]
    assert sorted(calls) == [("a", list(range(1, 11))), ("b", [100])]
    # batch 1 meets its keys descending (_runtime.keys_descending): b's one row, then a's with
    # three early saves while they were gathered
    assert calls[0] == ("b", [100]) and spills[:3] == [1, 1, 1]
    h.restart()
    assert h.run_batch([{"k": "a", "v": 1}]) == [{"k": "a", "sum": 56}]


def test_on_rows_with_state_timers_and_yield_matches_on_event_and_the_model():
    batches = _data()
    expected = model(batches, 700)
    assert any(r["kind"] == "idle" for rows in expected for r in rows)
    hr = OperatorHarness(make_rows_operator(), key="k", event_time="ts", watermark="700 ms", partitions=3)
    he = OperatorHarness(make_operator(), key="k", event_time="ts", watermark="700 ms", partitions=3)
    for b, rows in enumerate(batches):
        if b == 3:
            hr.rescale(2)
            he.rescale(2)
        if b == 5:
            hr.restart()        # state reopened from the checkpoint: exists() reads it back
        got = hr.run_batch(rows)
        assert by_key(got, "k") == by_key(he.run_batch(rows), "k") == by_key(expected[b], "k"), f"batch {b}"
    assert [m["late_rows"] for m in hr.metrics] == [m["late_rows"] for m in he.metrics]
    assert [m["timers_fired"] for m in hr.metrics] == [m["timers_fired"] for m in he.metrics]


def test_tuple_keys_mixed_in_the_input_accumulate_per_key():
    class Seen(Operator):
        def on_rows(self, key, rows, ctx):
            seen = ctx.list("seen")
            seen.extend(int(v) for v in rows["v"])
            ctx.register_processing_timer(1_000, name="flush")
            return pd.DataFrame({"u": [key[0]], "d": [key[1]], "seen": [list(seen)], "calls": [1]})

        def on_timer(self, key, timer, ctx):
            ctx.emit({"u": key[0], "d": key[1], "seen": list(ctx.list("seen")), "calls": 0})
            ctx.delete_state("seen")

    h = OperatorHarness(Seen(), key=["u", "d"], partitions=3, key_groups=32)
    rows = [{"u": u, "d": d, "v": i} for i, (u, d) in enumerate(
        [("x", 1), ("y", 1), ("x", 2), ("x", 1), ("y", 1), ("x", 1), ("z", 7), ("x", 2)])]
    out = h.run_batch(rows, batch_time=0)
    got = {(r["u"], r["d"]): r["seen"] for r in out}
    assert got == {("x", 1): [0, 3, 5], ("y", 1): [1, 4], ("x", 2): [2, 7], ("z", 7): [6]}
    assert len(out) == 4 and all(r["calls"] == 1 for r in out)
    out = h.run_batch([{"u": "x", "d": 1, "v": 8}, {"u": "x", "d": 1, "v": 9}], batch_time=2_000)
    assert [(r["u"], r["d"], r["seen"], r["calls"]) for r in out] == [("x", 1, [0, 3, 5, 8, 9], 1)]
    # processing time lags a batch: batch 2 runs at batch 1's time (2000), past the timers at
    # 1000 (x/1 registered its own again in batch 1: timers are idempotent per key and time)
    out = h.run_batch([], batch_time=4_000)
    assert all(r["calls"] == 0 for r in out) and len(out) == 4
    fired = {(r["u"], r["d"]): r["seen"] for r in out}
    assert fired == {("x", 1): [0, 3, 5, 8, 9], ("y", 1): [1, 4], ("x", 2): [2, 7], ("z", 7): [6]}


def test_on_rows_wins_over_on_event():
    class Both(Operator):
        def on_event(self, key, row, ctx):
            raise AssertionError("on_event must not be called when on_rows is defined")

        def on_rows(self, key, rows, ctx):
            ctx.emit({"k": key, "n": len(rows)})

    h = OperatorHarness(Both(), key="k", partitions=1, key_groups=16)     # a before b
    assert h.run_batch([{"k": "a"}, {"k": "a"}, {"k": "b"}]) == [{"k": "a", "n": 2}, {"k": "b", "n": 1}]

    class Sub(Both):            # a subclass inherits on_rows: still on_rows
        pass

    h = OperatorHarness(Sub(), key="k", partitions=1)
    assert h.run_batch([{"k": "a"}]) == [{"k": "a", "n": 1}]


def test_an_operator_without_on_event_or_on_rows_says_so():
    h = OperatorHarness(Operator(), key="k", partitions=1)
    with pytest.raises(NotImplementedError, match=r"must implement on_event \(or on_rows\)"):
        h.run_batch([{"k": "a"}])


def _returning(value):
    class Returns(Operator):
        def on_rows(self, key, rows, ctx):
            return value() if callable(value) else value
    return Returns()


@pytest.mark.parametrize("value,message", [
    (5, r"Returns\.on_rows returned int 5 for key 'a'; it returns None"),
    ({"k": "a"}, r"returned dict .* \(to emit one row, return \[row\] or call ctx\.emit\(row\)\)"),
    ("abc", r"returned str 'abc'"),
    (lambda: iter([{"k": "a"}, 3]), r"returned an iterable holding int 3 for key 'a'"),
    (lambda: pd.Series([1]), r"returned Series"),
    (lambda: pd.DataFrame([[1, 2]], columns=["k", "k"]), r"duplicate columns \['k', 'k'\]"),
])
def test_bad_returns_are_clear_errors(value, message):
    h = OperatorHarness(_returning(value), key="k", partitions=1)
    with pytest.raises((TypeError, ValueError), match=message):
        h.run_batch([{"k": "a"}])


def test_good_returns_are_emitted_in_order():
    frame = pd.DataFrame({"k": ["a", "b"], "x": [1.5, float("nan")], "n": [1, 2]})

    def gen():
        yield {"k": "d"}
        yield frame
        yield ("t", 9.0, 3)

    h = OperatorHarness(_returning(gen), key="k", partitions=1)
    out = h.run_batch([{"k": "a"}])
    assert out == [{"k": "d"}, {"k": "a", "x": 1.5, "n": 1}, {"k": "b", "x": None, "n": 2}, ("t", 9.0, 3)]
    assert type(out[1]["n"]) is int
    h = OperatorHarness(_returning(lambda: frame), key="k", partitions=1)
    assert h.run_batch([{"k": "a"}])[0] == {"k": "a", "x": 1.5, "n": 1}
    h = OperatorHarness(_returning(lambda: [frame.iloc[:0]]), key="k", partitions=1)
    assert h.run_batch([{"k": "a"}]) == []


def test_pandas_is_imported_only_when_on_rows_is_used():
    code = textwrap.dedent("""
        import sys
        from spark_ops import Operator
        from spark_ops.testing import OperatorHarness

        class E(Operator):
            def on_event(self, key, row, ctx):
                ctx.emit({"k": key})

        class R(Operator):
            def on_rows(self, key, rows, ctx):
                ctx.emit({"k": key, "n": len(rows)})

        assert OperatorHarness(E(), key="k").run_batch([{"k": "a"}]) == [{"k": "a"}]
        print("pandas" in sys.modules)
        assert OperatorHarness(R(), key="k").run_batch([{"k": "a"}]) == [{"k": "a", "n": 1}]
        print("pandas" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True"]


# ------------------------------------------------------------------------------------- exists()

KINDS = {
    "value": lambda ctx: ctx.value("value", default=0),
    "array": lambda ctx: ctx.array("array", 2),
    "ndarray": lambda ctx: ctx.ndarray("ndarray", (2, 2), "int32"),
    **{k: (lambda k: lambda ctx: getattr(ctx, k)(k))(k)
       for k in ("queue", "list", "dict", "sorted_dict", "set", "sorted_set", "stack", "linked_list", "stream")},
}


class ExistsProbe(Operator):
    """Emits (step, what, exists()) for the handles of every kind, through ctx."""

    def on_event(self, key, row, ctx):
        step = row["step"]

        def emit(what, value):
            ctx.emit({"step": step, "what": what, "exists": value})

        v = ctx.value("v")                              # no default: a value never set
        if step == "create":
            emit("v unset", v.exists())
            v.value = 0
            emit("v set to 0", v.exists())
            for kind, make in KINDS.items():
                emit(kind, make(ctx).exists())
        elif step == "check":
            emit("v", v.exists())
            emit("unset", ctx.value("unset").exists())
            for kind, make in KINDS.items():
                emit(kind, make(ctx).exists())
        elif step == "clear and delete":
            v.clear()
            emit("v cleared", v.exists())
            v.value = "again"
            emit("v set again", v.exists())
            v.clear()
            for kind, make in KINDS.items():
                h = make(ctx)
                ctx.delete_state(kind)
                emit(kind, h.exists() or ctx.has_state(kind))
        elif step == "after delete":
            emit("v", v.exists())
            for kind in KINDS:
                emit(kind, ctx.has_state(kind))


def test_exists_on_every_handle_ctx_gives_before_and_after_set_clear_delete_and_reopen():
    h = OperatorHarness(ExistsProbe(), key="k", partitions=2)

    def run(step):
        return {r["what"]: r["exists"] for r in h.run_batch([{"k": "a", "step": step}])}

    assert run("create") == {"v unset": False, "v set to 0": True, **dict.fromkeys(KINDS, True)}
    h.restart()                                          # reopened: every handle loads from the store
    assert run("check") == {"v": True, "unset": False, **dict.fromkeys(KINDS, True)}
    assert run("clear and delete") == {"v cleared": False, "v set again": True, **dict.fromkeys(KINDS, False)}
    h.restart()
    assert run("after delete") == {"v": False, **dict.fromkeys(KINDS, False)}


# ----------------------------------------------------------------------------------------- Spark

def make_totals() -> Operator:
    """docs/spark_ops.md's Totals, as it stands there (on_rows returning a DataFrame, exists(),
    list_timers, an event timer)."""

    class Totals(Operator):
        def on_rows(self, key, rows, ctx):
            import pandas as pd
            count, total = ctx.value("count"), ctx.value("total")
            count.value = (count.value if count.exists() else 0) + len(rows)
            total.value = (total.value if total.exists() else 0) + float(rows["amount"].sum())
            for t in ctx.list_timers():                          # one pending timer per user
                ctx.delete_event_timer(t.time)
            ctx.register_event_timer(ctx.event_time + 60_000)    # ctx.event_time: the rows' largest
            return pd.DataFrame({"user": [key], "kind": ["batch"], "count": [count.value],
                                 "total": [total.value], "last": [rows["amount"].iloc[-1]]})

        def on_timer(self, key, timer, ctx):
            ctx.emit({"user": key, "kind": "final", "count": ctx.value("count").value,
                      "total": ctx.value("total").value})
            ctx.delete_state("count"); ctx.delete_state("total")

    return Totals()


TOTALS_SCHEMA = "user string, kind string, count long, total double, last double"
TOTALS_COLUMNS = [c.split()[0] for c in TOTALS_SCHEMA.split(", ")]


def test_the_docs_on_rows_example_in_the_harness():
    h = OperatorHarness(make_totals(), key="user", event_time="ts", watermark="10 seconds")
    assert h.run_batch([{"user": "a", "ts": 2000, "amount": 5.0}, {"user": "a", "ts": 1000, "amount": 2.5}]) == \
        [{"user": "a", "kind": "batch", "count": 2, "total": 7.5, "last": 5.0}]
    assert h.run_batch([], watermark=70_000) == [{"user": "a", "kind": "final", "count": 2, "total": 7.5}]
    out = h.run_batch([{"user": "a", "ts": 80_000, "amount": 1.0}, {"user": "b", "ts": 80_001, "amount": 2.0},
                       {"user": "a", "ts": 100, "amount": 9.0}], watermark=70_000)      # late
    assert sorted(out, key=lambda r: r["user"]) == [
        {"user": "a", "kind": "batch", "count": 1, "total": 1.0, "last": 1.0},
        {"user": "b", "kind": "batch", "count": 1, "total": 2.0, "last": 2.0}]
    assert h.metrics[-1]["late_rows"] + h.metrics[-2]["late_rows"] == 1


@pytest.mark.spark
def test_on_rows_on_a_batch_dataframe_matches_the_harness(utc_spark):
    """The one Spark test of on_rows in `make test`: the docs' Totals on a batch DataFrame (all
    timers fire after the rows) against the harness."""
    rows = [{"user": u, "ts": at(t), "amount": float(a)} for a, (u, t) in enumerate(
        [("a", 30), ("b", 10), ("a", 10), ("c", 5), ("a", 20), ("b", 40), ("a", 5)])]
    df = utc_spark.createDataFrame(rows, "user string, ts timestamp, amount double")
    got = [r.asDict() for r in apply_operator(df, make_totals(), "user", output_schema=TOTALS_SCHEMA,
                                              event_time="ts", partitions=2).collect()]
    h = OperatorHarness(make_totals(), key="user", event_time="ts")
    want = h.run_batch(rows) + h.run_batch([], watermark=10**13)
    assert bag_by_key(got, "user") == bag_by_key([{**dict.fromkeys(TOTALS_COLUMNS), **r} for r in want], "user")
    assert {r["user"]: r["last"] for r in got if r["kind"] == "batch"} == {"a": 0.0, "b": 5.0, "c": 3.0}
    assert {r["user"]: r["count"] for r in got if r["kind"] == "final"} == {"a": 4, "b": 2, "c": 1}


@pytest.mark.spark
@pytest.mark.slow
def test_on_rows_in_a_streaming_query_matches_the_model(utc_spark, tmp_path):
    batches = _data()
    write_batch_files(tmp_path / "src", batches)
    out = apply_operator(read_stream(utc_spark, tmp_path / "src"), make_rows_operator(), "k", output_schema=SCHEMA,
                         event_time="ts", watermark="700 ms", state=str(tmp_path / "state"), name="idle_rows")
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    expected = model(batches, 700)
    assert sorted(got) == list(range(len(batches)))
    for b in range(len(batches)):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"


@pytest.mark.spark
@pytest.mark.slow
def test_a_bad_on_rows_return_fails_the_spark_job_with_the_message(utc_spark):
    df = utc_spark.createDataFrame([("a", 1)], "k string, v long")
    out = apply_operator(df, _returning(7), "k", output_schema="k string", partitions=1)
    with pytest.raises(Exception, match=r"on_rows returned int 7 for key 'a'"):
        out.collect()
