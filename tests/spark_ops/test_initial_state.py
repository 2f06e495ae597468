"""initial_state= (issue 19, item 2; RFC 0008): rows that seed an operator's state in a query's
first batch, through Operator.on_initial_state. Loaded once — a re-run of the first batch loads
it into the empty state it starts from again, never on top of a checkpoint —, ignored (and
logged) on a restart from a checkpoint, routed to the key groups of the keys' events (so a
rescale after the load finds it), and usable to bootstrap from another query's state read
through the state data source. The harness tests and the batch-DataFrame and error tests run
in ``make test``; the streaming ones are slow."""
from __future__ import annotations

import json
import logging

import pytest

import spark_ops
from spark_ops import Operator, apply_operator
from spark_ops.operators import Buffer, CombineLatest
from spark_ops.testing import OperatorHarness

from .spark_helpers import at, read_sink, read_stream, run_stream, write_batch_files

OUT = "k string, src string, n long"


def make_counter(fail_flag: str | None = None) -> Operator:
    """Per key a count: initial rows add their ``n``, input rows add 1. Every call emits the
    new count; an initial row also registers a processing-time timer that emits "timer".
    With ``fail_flag`` (a path), the first batch fails once, after loading, while the flag
    file does not exist (and creates it): a crash in the middle of the first batch."""

    class Counter(Operator):
        def on_initial_state(self, key, row, ctx):
            n = ctx.value("n", default=0)
            n.value += row["n"]
            ctx.emit({"k": key, "src": "init", "n": n.value})
            ctx.register_processing_timer(ctx.processing_time)      # due in this very batch

        def on_event(self, key, row, ctx):
            n = ctx.value("n", default=0)
            n.value += 1
            ctx.emit({"k": key, "src": "event", "n": n.value})

        def on_timer(self, key, timer, ctx):
            ctx.emit({"k": key, "src": "timer", "n": ctx.value("n").value})

        def close(self, ctx):
            import os
            if fail_flag is not None and ctx.batch_id == 0 and not os.path.exists(fail_flag):
                open(fail_flag, "w").close()
                raise RuntimeError("injected failure in the first batch, after the initial load")

    return Counter()


class NoInitial(Operator):
    def on_event(self, key, row, ctx):
        pass


def _counts(rows) -> dict:
    """The last count per key (rows in emission order)."""
    out: dict = {}
    for r in rows:
        out[r["k"]] = r["n"]
    return out


# -- the harness ----------------------------------------------------------------------------


def test_harness_loads_the_initial_state_once_and_rescales():
    initial = [{"k": "a", "n": 10}, {"k": "b", "n": 5}, {"k": "a", "n": 1}, {"k": None, "n": 99}]
    h = OperatorHarness(make_counter(), key="k", partitions=2, key_groups=16, initial_state=initial)
    out = h.run_batch([{"k": "a"}, {"k": "c"}], batch_time=7)
    # a key's initial rows in input order, before its input rows; timers registered while loading fire
    a = [(r["src"], r["n"]) for r in out if r["k"] == "a"]
    assert a == [("init", 10), ("init", 11), ("event", 12), ("timer", 12)]
    assert _counts(out) == {"a": 12, "b": 5, "c": 1}
    assert sum(m.get("initial_rows", 0) for m in h.metrics) == 3       # the null key is left out
    # batch 1 does not load it again
    assert _counts(h.run_batch([{"k": "a"}, {"k": "b"}])) == {"a": 13, "b": 6}
    # a re-run of batch 0 starts from no state and loads it again: the same output, nothing doubled
    h.rerun_batch(0)
    again = h.run_batch([{"k": "a"}, {"k": "c"}], batch_time=7)
    assert sorted(map(str, again)) == sorted(map(str, out))
    assert _counts(h.run_batch([{"k": "a"}, {"k": "b"}])) == {"a": 13, "b": 6}
    # rescale after the load: the state is where the keys' events go (and a re-run of the
    # batch at the new shard count gives the same)
    for n, want in ((3, 14), (1, 15), (4, 16)):
        h.rescale(n)
        got = _counts(h.run_batch([{"k": "a"}, {"k": "b"}, {"k": "c"}]))
        assert got == {"a": want, "b": want - 7, "c": want - 12}
        h.rerun_batch(h.batch_id - 1)
        assert _counts(h.run_batch([{"k": "a"}, {"k": "b"}, {"k": "c"}])) == got


def test_harness_restart_on_existing_state_ignores_it_and_logs(caplog):
    h = OperatorHarness(make_counter(), key="k", initial_state=[{"k": "a", "n": 10}])
    h.run_batch([{"k": "a"}])
    h.close()
    # a new start of the same query (same state) with an initial state: ignored, and said so
    h2 = OperatorHarness(make_counter(), key="k", state=h.spec.state, initial_state=[{"k": "a", "n": 100}])
    h2.batch_id = 1
    with caplog.at_level(logging.WARNING, logger="spark_ops._runtime"):
        assert _counts(h2.run_batch([{"k": "a"}])) == {"a": 12}
        h2.run_batch([{"k": "a"}])
    ignored = [r for r in caplog.records if "initial_state ignored" in r.getMessage()]
    assert len(ignored) == 2                    # once per shard and start, not per batch
    assert all("batch 1" in r.getMessage() for r in ignored)
    assert all("initial_rows" not in m for m in h2.metrics)


def test_harness_crash_in_the_first_batch_loads_it_once(tmp_path):
    flag = str(tmp_path / "failed")
    h = OperatorHarness(make_counter(flag), key="k", partitions=2, key_groups=16,
                        initial_state=[{"k": k, "n": 10} for k in "abcdef"])
    with pytest.raises(RuntimeError, match="injected"):
        h.run_batch([{"k": "a"}])               # shard 0 committed batch 0, shard 1 failed (or the other way)
    h.rerun_batch(0)
    out = h.run_batch([{"k": "a"}])
    assert _counts(out) == {"a": 11, **{k: 10 for k in "bcdef"}}
    assert _counts(h.run_batch([{"k": k} for k in "abcdef"])) == {"a": 12, **{k: 11 for k in "bcdef"}}


def test_harness_errors():
    with pytest.raises(TypeError, match="NoInitial.on_initial_state"):
        OperatorHarness(NoInitial(), key="k", initial_state=[{"k": "a"}])
    with pytest.raises(KeyError, match=r"initial_state row 1 has no key column\(s\) \['k'\]"):
        OperatorHarness(make_counter(), key="k", initial_state=[{"k": "a", "n": 1}, {"n": 2}])


def test_harness_built_ins_buffer_and_combine_latest():
    # buffer: initial rows are input rows that came first
    h = OperatorHarness(Buffer(count=3, key_columns=("k",)), key="k", event_time="ts",
                        initial_state=[{"k": "a", "ts": 1, "v": 1}, {"k": "a", "ts": 2, "v": 2},
                                       {"k": "b", "ts": 1, "v": 3}])
    out = h.run_batch([{"k": "a", "ts": 10, "v": 4}])
    assert out == [{"k": "a", "items": [{"k": "a", "ts": 1, "v": 1}, {"k": "a", "ts": 2, "v": 2},
                                        {"k": "a", "ts": 10, "v": 4}]}]
    assert h.run_batch([{"k": "b", "ts": 11, "v": 5}, {"k": "b", "ts": 12, "v": 6}]) == [
        {"k": "b", "items": [{"k": "b", "ts": 1, "v": 3}, {"k": "b", "ts": 11, "v": 5}, {"k": "b", "ts": 12, "v": 6}]}]
    # duration windows: an initial row joins the window of its event time
    h = OperatorHarness(Buffer(duration_ms=100, key_columns=("k",)), key="k", event_time="ts",
                        initial_state=[{"k": "a", "ts": 50, "v": 0}])
    assert h.run_batch([{"k": "a", "ts": 60, "v": 1}]) == []
    assert h.run_batch([{"k": "a", "ts": 250, "v": 2}]) == []      # the watermark lags one batch
    assert [r["items"] for r in h.run_batch([])] == [
        [{"k": "a", "ts": 50, "v": 0}, {"k": "a", "ts": 60, "v": 1}]]
    # combine_latest: initial rows are shaped as its output; a null struct means "none yet"
    src = "__spark_ops_source"
    h = OperatorHarness(CombineLatest(["x", "y"], ("k",)), key="k",
                        initial_state=[{"k": "a", "x": {"p": 1}, "y": {"q": 2}}, {"k": "b", "x": {"p": 3}, "y": None}])
    assert h.run_batch([]) == []                # loading emits nothing
    out = h.run_batch([{"k": "a", src: "y", "x": None, "y": {"q": 5}}, {"k": "b", src: "y", "x": None, "y": {"q": 6}}])
    assert sorted(out, key=lambda r: r["k"]) == [{"k": "a", "x": {"p": 1}, "y": {"q": 5}},
                                                 {"k": "b", "x": {"p": 3}, "y": {"q": 6}}]


# -- Spark: errors and a batch DataFrame ---------------------------------------------------


@pytest.mark.spark
def test_bad_initial_state_gets_a_clear_error(utc_spark, tmp_path):
    df = utc_spark.createDataFrame([("a", 1)], "k string, v long")
    kw = dict(output_schema=OUT, state=str(tmp_path / "state"), partitions=2, key_groups=16)
    good = utc_spark.createDataFrame([("a", 1)], "k string, n long")
    with pytest.raises(ValueError, match="initial_state has no key column 'k'; it has \\['key', 'n'\\]"):
        apply_operator(df, make_counter(), "k", initial_state=good.withColumnRenamed("k", "key"), **kw)
    with pytest.raises(TypeError, match="initial_state key column 'k' is int but the input's is string"):
        apply_operator(df, make_counter(), "k", **kw,
                       initial_state=utc_spark.createDataFrame([(1, 1)], "k int, n long"))
    with pytest.raises(TypeError, match="NoInitial.on_initial_state"):
        apply_operator(df, NoInitial(), "k", initial_state=good, **kw)
    with pytest.raises(TypeError, match="must be a \\(batch\\) Spark DataFrame"):
        apply_operator(df, make_counter(), "k", initial_state=[{"k": "a", "n": 1}], **kw)
    stream = utc_spark.readStream.format("rate").load().selectExpr("cast(value as string) as k", "value as n")
    with pytest.raises(ValueError, match="must be a batch DataFrame"):
        apply_operator(df, make_counter(), "k", initial_state=stream, **kw)
    # the built-ins: buffer wants input rows, combine_latest rows shaped as its output
    with pytest.raises(ValueError, match="initial_state has no column 'v'"):
        spark_ops.buffer(df, "k", count=2, initial_state=good, state=kw["state"])
    with pytest.raises(TypeError, match="initial_state column 'v' is string but the input's is bigint"):
        spark_ops.buffer(df, "k", count=2, state=kw["state"],
                         initial_state=utc_spark.createDataFrame([("a", "x")], "k string, v string"))
    with pytest.raises(ValueError, match="column 'z' names no input"):
        spark_ops.combine_latest({"x": df, "y": df}, "k", state=kw["state"],
                                 initial_state=utc_spark.createDataFrame([("a", 1)], "k string, z long"))
    with pytest.raises(TypeError, match="column 'x' is struct<v:string> but input 'x'"):
        spark_ops.combine_latest({"x": df, "y": df}, "k", state=kw["state"],
                                 initial_state=utc_spark.createDataFrame([("a", ("s",))],
                                                                         "k string, x struct<v:string>"))


@pytest.mark.spark
def test_batch_dataframe_with_initial_state(utc_spark, tmp_path):
    df = utc_spark.createDataFrame([("a",), ("a",), ("c",)], "k string")
    initial = utc_spark.createDataFrame([("a", 10), ("b", 5), ("d", 7)], "k string, n long")
    out = apply_operator(df, make_counter(), "k", output_schema=OUT, initial_state=initial,
                         state=str(tmp_path / "state"), partitions=2, key_groups=16)
    rows = [r.asDict() for r in out.collect()]
    # every key of the initial state is loaded, those without input rows too (in shards without rows)
    assert _counts(sorted(rows, key=lambda r: (r["k"], r["n"]))) == {"a": 12, "b": 5, "c": 1, "d": 7}
    assert sorted((r["k"], r["n"]) for r in rows if r["src"] == "init") == [("a", 10), ("b", 5), ("d", 7)]
    assert sorted(r["k"] for r in rows if r["src"] == "timer") == ["a", "b", "d"]
    # the stage: one Arrow object per shard, under the state root
    staged = list((tmp_path / "state" / "_initial" / "counter").rglob("*.arrow"))
    assert 1 <= len(staged) <= 2


# -- Spark: streaming ---------------------------------------------------------------------


def _rows(batch):
    return [{"k": k, "ts": at(i), "v": i} for i, k in enumerate(batch)]


@pytest.mark.spark
@pytest.mark.slow
def test_streaming_initial_state_restart_ignores_it_and_rescale_keeps_it(utc_spark, tmp_path):
    state, src, cp, out = tmp_path / "state", tmp_path / "src", tmp_path / "cp", tmp_path / "out"
    initial = utc_spark.createDataFrame([(k, 10 * (i + 1)) for i, k in enumerate("abcdefgh")], "k string, n long")
    write_batch_files(src, [_rows("ab"), _rows("a")])
    q = run_stream(apply_operator(read_stream(utc_spark, src), make_counter(), "k", output_schema=OUT,
                                  initial_state=initial, state=str(state), partitions=2, key_groups=16), out, cp)
    got = read_sink(out)
    assert sorted(got) == [0, 1]
    first = {"a": 11, "b": 21, **{k: 10 * (i + 1) for i, k in enumerate("abcdefgh") if k not in "ab"}}
    assert _counts(sorted(got[0], key=lambda r: (r["k"], r["n"]))) == first
    assert _counts(got[1]) == {"a": 12}
    assert sum(r.get("initial_rows", 0) for r in spark_ops.read_metrics(str(state))) == 8
    # restart with another shard count and another initial state: ignored (the state exists),
    # and every key's count is where its events go now
    other = utc_spark.createDataFrame([(k, 1000) for k in "abcdefgh"], "k string, n long")
    write_batch_files(src, [_rows("abcdefgh")], start=2)
    q2 = run_stream(apply_operator(read_stream(utc_spark, src), make_counter(), "k", output_schema=OUT,
                                   initial_state=other, state=str(state), partitions=3, key_groups=16), out, cp)
    assert str(q2.id) == str(q.id)
    got = read_sink(out)
    assert _counts(got[2]) == {**{k: v + 1 for k, v in first.items()}, "a": 13}
    assert not [r for r in got[2] if r["src"] != "event"]
    metrics = spark_ops.read_metrics(str(state))
    assert {r["shards"] for r in metrics if r["batch"] == 2} == {3}
    assert not [r for r in metrics if r["batch"] > 0 and "initial_rows" in r]


@pytest.mark.spark
@pytest.mark.slow
def test_a_crash_in_the_first_batch_loads_the_initial_state_once(utc_spark, tmp_path):
    state, src, cp, out = tmp_path / "state", tmp_path / "src", tmp_path / "cp", tmp_path / "out"
    flag = str(tmp_path / "failed")
    initial = utc_spark.createDataFrame([(k, 10) for k in "abcdef"], "k string, n long")
    write_batch_files(src, [_rows("ab")])

    def start():
        return run_stream(apply_operator(read_stream(utc_spark, src), make_counter(flag), "k", output_schema=OUT,
                                         initial_state=initial, state=str(state), partitions=2, key_groups=16),
                          out, cp)
    with pytest.raises(Exception, match="injected"):
        start()
    start()                         # the restart runs batch 0 again: the state it starts from is empty
    got = read_sink(out)
    assert _counts(sorted(got[0], key=lambda r: (r["k"], r["n"]))) == {"a": 11, "b": 11, **{k: 10 for k in "cdef"}}
    write_batch_files(src, [_rows("abcdef")], start=1)
    start()
    assert _counts(read_sink(out)[1]) == {"a": 12, "b": 12, **{k: 11 for k in "cdef"}}


def make_totals() -> Operator:
    class Totals(Operator):
        """A running total of ``v`` per key; its initial state: a ``total`` per key."""

        def on_initial_state(self, key, row, ctx):
            ctx.value("total", default=0).value = row["total"]

        def on_event(self, key, row, ctx):
            total = ctx.value("total", default=0)
            total.value += row["v"]
            ctx.emit({"k": key, "total": total.value})

    return Totals()


@pytest.mark.spark
@pytest.mark.slow
def test_bootstrap_from_another_querys_state_through_the_data_source(utc_spark, tmp_path):
    from pyspark.sql import functions as F
    src = tmp_path / "src"
    write_batch_files(src, [[{"k": "a", "ts": at(0), "v": 1}, {"k": "b", "ts": at(1), "v": 2}],
                            [{"k": "a", "ts": at(2), "v": 3}, {"k": "c", "ts": at(3), "v": 4}]])
    old_state = str(tmp_path / "old")
    run_stream(apply_operator(read_stream(utc_spark, src), make_totals(), "k", output_schema="k string, total long",
                              state=old_state, partitions=2, key_groups=16), tmp_path / "out1", tmp_path / "cp1")
    # the old query's totals, read through the state data source, seed a new query (new checkpoint,
    # another shard count and key-group count: the keys are routed by the new query's layout)
    spark_ops.register_datasource(utc_spark)
    totals = (utc_spark.read.format("objectspace").load(old_state).filter("object = 'total'")
              .select(F.get_json_object("key", "$").alias("k"), F.col("value").cast("long").alias("total")))
    assert sorted(map(tuple, totals.collect())) == [("a", 4), ("b", 2), ("c", 4)]
    src2 = tmp_path / "src2"
    write_batch_files(src2, [[{"k": "a", "ts": at(10), "v": 10}, {"k": "c", "ts": at(11), "v": 20},
                              {"k": "d", "ts": at(12), "v": 30}]])
    new = apply_operator(read_stream(utc_spark, src2), make_totals(), "k", output_schema="k string, total long",
                         initial_state=totals, state=str(tmp_path / "new"), partitions=3, key_groups=32)
    run_stream(new, tmp_path / "out2", tmp_path / "cp2")
    assert sorted((r["k"], r["total"]) for r in read_sink(tmp_path / "out2")[0]) == [("a", 14), ("c", 24), ("d", 30)]
    # and b, without a row yet, has its total in the new state
    state_rows = (utc_spark.read.format("objectspace").load(str(tmp_path / "new")).filter("object = 'total'")
                  .collect())
    assert sorted((json.loads(r.key), json.loads(r.value)) for r in state_rows) == [
        ("a", 14), ("b", 2), ("c", 24), ("d", 30)]


@pytest.mark.spark
@pytest.mark.slow
def test_buffer_and_combine_latest_with_initial_state_in_a_stream(utc_spark, tmp_path):
    schema = "k string, ts timestamp, v long"
    src = tmp_path / "src"
    write_batch_files(src, [[{"k": "a", "ts": at(10), "v": 3}, {"k": "b", "ts": at(11), "v": 4}]])
    pending = utc_spark.createDataFrame([("a", at(1), 1), ("a", at(2), 2), ("b", at(3), 9)], schema)
    out = spark_ops.buffer(read_stream(utc_spark, src), "k", count=3, initial_state=pending,
                           state=str(tmp_path / "state"), partitions=2, key_groups=16)
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    assert [[(i["ts"], i["v"]) for i in r["items"]] for r in read_sink(tmp_path / "out")[0]] == [
        [(at(1), 1), (at(2), 2), (at(10), 3)]]
    # combine_latest seeded with the latest x and y rows of key a (and x of b)
    sx, sy = tmp_path / "sx", tmp_path / "sy"
    write_batch_files(sx, [[]])
    write_batch_files(sy, [[{"k": "a", "ts": at(20), "v": 7}, {"k": "b", "ts": at(21), "v": 8}]])
    struct = "struct<k:string,ts:timestamp,v:bigint>"
    seed = utc_spark.createDataFrame([("a", ("a", at(5), 5), ("a", at(6), 6)), ("b", ("b", at(7), 70), None)],
                                     f"k string, x {struct}, y {struct}")
    out = spark_ops.combine_latest({"x": read_stream(utc_spark, sx), "y": read_stream(utc_spark, sy)}, "k",
                                   initial_state=seed, state=str(tmp_path / "state2"), partitions=2, key_groups=16)
    run_stream(out, tmp_path / "out2", tmp_path / "cp2")
    got = sorted(read_sink(tmp_path / "out2")[0], key=lambda r: r["k"])
    assert [(r["k"], r["x"]["v"], r["y"]["v"]) for r in got] == [("a", 5, 7), ("b", 70, 8)]
