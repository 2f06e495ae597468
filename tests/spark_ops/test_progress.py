"""Operator metrics where Spark users look (issue 19 item 3): a streaming query's progress
(``lastProgress["observedMetrics"]["spark_ops.<name>"]``), a listener on the driver, an
Observation for a batch DataFrame, and the shard hosts' one-line INFO summary per batch.

Known small inputs, exact figures: rows in and out, timers fired, late rows dropped behind a
watermark. The batch-DataFrame test runs in ``make test``; the streaming ones are slow."""
from __future__ import annotations

import datetime as dt
import glob
import os
import time
import uuid

import pytest

import spark_ops
from spark_ops import Operator, apply_operator
from spark_ops._progress import METRICS_COLUMN, NAMES

from .spark_helpers import at, read_stream, write_batch_files

pytestmark = pytest.mark.spark


def EchoThenTimer() -> Operator:
    """Emits every row it gets, registers an event timer 5 s after it, emits again when the
    timer fires: rows out = rows kept + timers fired. (Built in a function, so that
    cloudpickle ships the class by value: the workers cannot import the test module.)"""

    class EchoThenTimer(Operator):
        def on_event(self, key, row, ctx):
            ctx.emit({"k": key, "v": row["v"], "what": "row"})
            ctx.register_event_timer(ctx.event_time + 5000)

        def on_timer(self, key, timer, ctx):
            ctx.emit({"k": key, "v": timer.time, "what": "timer"})

    return EchoThenTimer()


SCHEMA = "k string, v long, what string"


def test_batch_dataframe_metrics_in_an_observation(spark, tmp_path):
    """A batch DataFrame's figures go to a pyspark Observation passed as metrics=; without one,
    the plan has no metrics column at all (nobody could read it)."""
    from pyspark.sql import Observation
    df = spark.createDataFrame([("a", 1), ("b", 10), ("a", 2), ("a", 3), ("b", 11)], "k string, v long")
    obs = Observation("buffered")
    out = spark_ops.buffer(df, "k", count=2, order_by="v", state=str(tmp_path / "state"), metrics=obs)
    assert out.columns == ["k", "items"]
    got = sorted((r["k"], [i["v"] for i in r["items"]]) for r in out.collect())
    assert got == [("a", [1, 2]), ("b", [10, 11])]
    m = obs.get
    assert list(m) == NAMES
    assert (m["rows_in"], m["rows_out"], m["late_rows_dropped"], m["timers_fired"]) == (5, 2, 0, 0)
    assert 1 <= m["shards"] <= 2 and m["dirty_slots"] > 0 and m["checkpoint_bytes"] > 0
    assert m["checkpoint_objects"] >= m["shards"] and m["commit_ms"] >= 0
    plain = spark_ops.buffer(df, "k", count=2, state=str(tmp_path / "state2"))
    assert METRICS_COLUMN not in plain.columns and "CollectMetrics" not in _plan(plain)


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def test_bad_metrics_argument(spark, tmp_path):
    from pyspark.sql import Observation
    df = spark.createDataFrame([("a", 1)], "k string, v long")
    with pytest.raises(TypeError, match="metrics= takes"):
        spark_ops.buffer(df, "k", count=2, state=str(tmp_path / "s"), metrics=3)
    (tmp_path / "src-empty").mkdir()
    stream = read_stream(spark, tmp_path / "src-empty")
    with pytest.raises(ValueError, match="batch DataFrame only"):
        spark_ops.buffer(stream, "k", count=2, state=str(tmp_path / "s"), metrics=Observation("x"))


def test_progress_metrics_reads_a_progress_dict():
    p = {"batchId": 3, "observedMetrics": {"spark_ops.buffer": {"rows_in": 4}, "mine": {"n": 1}}}
    assert spark_ops.progress_metrics(p) == {"buffer": {"rows_in": 4}}
    assert spark_ops.progress_metrics(None) == {} and spark_ops.progress_metrics({"batchId": 0}) == {}
    # a Spark Connect client's progress holds each observed row as its values and schema
    connect = {"observedMetrics": {"spark_ops.x": {"values": [2, 5], "schema": {
        "type": "struct", "fields": [{"name": "shards"}, {"name": "rows_in"}]}}}}
    assert spark_ops.progress_metrics(connect) == {"x": {"shards": 2, "rows_in": 5}}


# Batch 0: a@1000, b@2000, a@3000 — watermark none yet; timers at 6000, 7000, 8000.
# Batch 1: a@20000 — watermark 3000 - 1000 = 2000: no timer due; a timer at 25000.
# Batch 2: b@1500 (late: behind 20000 - 1000), b@30000 — watermark 19000: 6000, 7000, 8000 fire.
BATCHES = [[{"k": "a", "ts": at(1000), "v": 1}, {"k": "b", "ts": at(2000), "v": 2}, {"k": "a", "ts": at(3000), "v": 3}],
           [{"k": "a", "ts": at(20000), "v": 4}],
           [{"k": "b", "ts": at(1500), "v": 5}, {"k": "b", "ts": at(30000), "v": 6}]]
EXPECTED = [  # rows_in, rows_out, late_rows_dropped, timers_fired
    (3, 3, 0, 0), (1, 1, 0, 0), (2, 4, 1, 3)]


@pytest.mark.slow
def test_stream_progress_carries_operator_metrics(utc_spark, tmp_path):
    """lastProgress / recentProgress carry, per batch, the figures of a known input (memory
    sink, shard hosts on); the listener logs and keeps the same; each shard host logs a line
    per batch in its metrics log."""
    spark = utc_spark
    write_batch_files(tmp_path / "src", BATCHES)
    name = f"echo_{uuid.uuid4().hex[:8]}"
    listener = spark_ops.metrics_listener(spark)
    try:
        out = apply_operator(read_stream(spark, tmp_path / "src"), EchoThenTimer(), "k", output_schema=SCHEMA,
                             event_time="ts", watermark="1 second", state=str(tmp_path / "state"), name=name)
        assert out.columns == ["k", "v", "what"]
        q = (out.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        assert q.exception() is None
        progress = {p["batchId"]: p for p in q.recentProgress}
        assert sorted(progress) == [0, 1, 2]
        for b, (rows_in, rows_out, late, fired) in enumerate(EXPECTED):
            m = spark_ops.progress_metrics(progress[b])[name]
            assert (m["rows_in"], m["rows_out"], m["late_rows_dropped"], m["timers_fired"]) == \
                (rows_in, rows_out, late, fired), (b, m)
            # timers only, no state objects: nothing in the object spaces changed
            assert m["shards"] == 2 and m["dirty_slots"] == 0 and m["objects_in_memory"] == 0
            assert m["checkpoint_bytes"] > 0
            assert m["checkpoint_objects"] >= 2 and m["state_bytes"] > 0 and m["state_records"] > 0
            assert m["commit_ms"] > 0 and m["duration_ms"] >= m["commit_ms"]
        assert spark_ops.progress_metrics(progress[0])[name]["watermark"] is None
        base = int(at(0).replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
        assert spark_ops.progress_metrics(progress[2])[name]["watermark"] == base + 19000
        last = q.lastProgress["observedMetrics"]["spark_ops." + name]
        assert last["timers_fired"] == 3 and last["late_rows_dropped"] == 1
        rows = spark.table(name).collect()
        assert len(rows) == sum(e[1] for e in EXPECTED)

        deadline = time.monotonic() + 30            # listener events arrive asynchronously
        while time.monotonic() < deadline and len([h for h in listener.history if h["operator"] == name]) < 3:
            time.sleep(0.2)
        mine = [h for h in listener.history if h["operator"] == name]
        assert [(h["batch_id"], h["rows_in"], h["timers_fired"]) for h in mine] == \
            [(b, e[0], e[3]) for b, e in enumerate(EXPECTED)]
        assert listener.latest(name)["late_rows_dropped"] == 1
    finally:
        spark.streams.removeListener(listener)

    from spark_ops._host import host_dir
    logged = []
    for path in glob.glob(os.path.join(host_dir(), "*.metrics.log")):
        with open(path) as f:
            logged += [line for line in f if f"spark_ops {name} shard" in line]
    assert len(logged) == 6, logged                 # 2 shards x 3 batches
    assert sum("1 late dropped" in line for line in logged) == 1, logged


@pytest.mark.slow
def test_stream_metrics_with_foreach_batch_isolate_and_no_hosts(utc_spark, tmp_path):
    """A foreachBatch sink, isolate=True and shards run in the Python workers: the same figures."""
    spark = utc_spark
    write_batch_files(tmp_path / "src", BATCHES)
    seen = {}

    def sink(batch_df, batch_id):
        seen[batch_id] = batch_df.count()

    out = apply_operator(read_stream(spark, tmp_path / "src"), EchoThenTimer(), "k", output_schema=SCHEMA,
                         event_time="ts", watermark="1 second", state=str(tmp_path / "state"), name="echo",
                         isolate=True, shard_host=False)
    q = (out.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    assert seen == {b: e[1] for b, e in enumerate(EXPECTED)}
    got = [spark_ops.progress_metrics(p)["echo"] for p in sorted(q.recentProgress, key=lambda p: p["batchId"])]
    assert [(m["rows_in"], m["rows_out"], m["late_rows_dropped"], m["timers_fired"]) for m in got] == EXPECTED


@pytest.mark.slow
def test_two_operators_and_metrics_off(utc_spark, tmp_path):
    """Two operators in one query report under their own names; metrics=False reports none,
    and a metrics= string renames."""
    spark = utc_spark
    write_batch_files(tmp_path / "src", BATCHES[:1])
    src = read_stream(spark, tmp_path / "src")
    a = spark_ops.buffer(src, "k", count=1, state=str(tmp_path / "state"), name="first", isolate=True)
    b = spark_ops.buffer(src, "k", count=1, state=str(tmp_path / "state"), name="second", metrics="custom",
                         isolate=True)
    c = spark_ops.buffer(src, "k", count=1, state=str(tmp_path / "state"), name="third", metrics=False,
                         isolate=True)
    out = a.unionByName(b).unionByName(c)
    q = (out.writeStream.format("memory").queryName("so_progress_three")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    observed = q.lastProgress["observedMetrics"]
    assert sorted(observed) == ["custom", "spark_ops.first"]
    assert observed["spark_ops.first"]["rows_out"] == 3 and observed["custom"]["rows_in"] == 3
    assert len(spark.table("so_progress_three").collect()) == 9


def test_the_progress_has_sparks_event_time_block_with_the_operators_watermark(utc_spark, tmp_path):
    """Spark's eventTime block (max, min, avg, watermark) was empty, so standard watermark
    dashboards showed nothing (issue 32): Spark's own watermark now sits on the event-time
    column of every input, and it is the operator's (a row behind it still reaches the
    operator, which drops it: no row is dropped by Spark)."""
    from pyspark.sql import functions as F
    spark = utc_spark
    write_batch_files(tmp_path / "a", [[{"k": "a", "ts": at(1000), "v": 1}, {"k": "b", "ts": at(3000), "v": 2}],
                                       [{"k": "a", "ts": at(9000), "v": 3}], [{"k": "a", "ts": at(2000), "v": 4}]])
    write_batch_files(tmp_path / "b", [[{"k": "a", "ts": at(500), "v": 5}], [{"k": "a", "ts": at(600), "v": 6}],
                                       [{"k": "a", "ts": at(700), "v": 7}]])
    out = spark_ops.buffer(read_stream(spark, tmp_path / "a"), "k", count=2, event_time="ts", watermark="1 second",
                           state=str(tmp_path / "s1"))
    q = (out.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp1"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    progress = {p["batchId"]: p for p in q.recentProgress}
    for b in (1, 2):
        et = progress[b]["eventTime"]
        ours = spark_ops.progress_metrics(progress[b])["buffer"]["watermark"]
        assert dt.datetime.fromisoformat(et["watermark"].replace("Z", "+00:00")).timestamp() * 1000 == ours
    assert progress[1]["eventTime"]["max"] == "2024-01-01T00:00:09.000Z"
    assert spark_ops.progress_metrics(progress[2])["buffer"]["late_rows_dropped"] == 1
    # the state figures a dashboard plots: keys a and b hold a buffer each from batch 0 on
    for b in (0, 1, 2):
        m = spark_ops.progress_metrics(progress[b])["buffer"]
        assert (m["state_keys"], m["state_objects"], m["objects_removed"]) == (2, 2, 0), (b, m)
        assert 1 <= m["state_keys_max"] <= 2 and m["rows_in_max"] <= m["rows_in"]
        assert m["memory_bytes"] > 0 and m["memory_budget"] == 512 << 20 and m["open_ms"] >= 0
    # combine_latest: a watermark per input, the slowest wins, as the operator's
    both = spark_ops.combine_latest({"a": read_stream(spark, tmp_path / "a"), "b": read_stream(spark, tmp_path / "b")},
                                    "k", event_time="ts", state=str(tmp_path / "s2"))
    q = (both.select(F.col("k")).writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp2"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    last = q.recentProgress[-1]
    ours = spark_ops.progress_metrics(last)["combine_latest"]["watermark"]
    assert dt.datetime.fromisoformat(last["eventTime"]["watermark"].replace("Z", "+00:00")).timestamp() * 1000 == ours
