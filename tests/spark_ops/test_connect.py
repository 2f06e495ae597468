"""spark_ops through Spark Connect: buffer, combine_latest and a custom Operator with timers,
over batch and streaming DataFrames of a Connect client session.

The server is what ``SparkSession.builder.remote("local[2]")`` starts (a local[2] session with
the Connect plugin), run in a process of its own on a free port: in this process the test-wide
classic session already owns the JVM (one SparkContext per JVM), and ``remote("local[...]")``
would then connect to a server nobody started (and always on port 15002). The client here is a
plain ``sc://localhost:<port>`` session, as against any Connect server. The quick
batch test runs in ``make test``; the others are marked slow.
"""
from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import spark_ops
from spark_ops import Operator, apply_operator
from spark_ops._plan import default_shards

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SERVER = r'''
import sys
from pyspark.sql import SparkSession
# What SparkSession.builder.remote("local[2]") starts (pyspark.sql.connect.session's
# _start_connect_server: a local session with the Connect plugin), on a port of our own
# (remote("local[...]") always serves 15002) and with the token in SPARK_CONNECT_AUTHENTICATE_TOKEN.
spark = (SparkSession.builder.master("local[2]")
         .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
         .config("spark.sql.artifact.isolation.enabled", "true")
         .config("spark.sql.artifact.isolation.alwaysApplyClassloader", "true")
         .config("spark.connect.grpc.binding.port", sys.argv[1])
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", "1g").config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
spark.range(1).collect()
print("READY", flush=True)
sys.stdin.read()            # until the test closes our stdin
spark.stop()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect(tmp_path_factory):
    """A Spark Connect client session on a local[2] Connect server (spark.sql.shuffle.partitions
    left at Spark's 200). Skips, saying why, when the server cannot start here."""
    base = tmp_path_factory.mktemp("connect")
    port, token = _free_port(), str(uuid.uuid4())
    env = dict(os.environ, SPARK_CONNECT_AUTHENTICATE_TOKEN=token, PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    log = open(base / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], cwd=base, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = ""
        deadline = time.monotonic() + 180
        # poll(), not select(): after a long suite this process's descriptors may be past 1024
        poller = select.poll()
        poller.register(proc.stdout, select.POLLIN)
        while time.monotonic() < deadline and proc.poll() is None:
            if poller.poll(1000):
                line = proc.stdout.readline()
            if line.startswith("READY"):
                break
        if not line.startswith("READY"):
            log.flush()
            tail = (base / "server.log").read_text()[-1500:]
            pytest.skip(f"the Spark Connect server did not start (exit code {proc.poll()}): {tail}")
        # The Connect session class itself: the generic builder refuses a remote session while
        # the suite's classic one runs in this process (SESSION_ALREADY_EXIST). What that
        # builder also does is mark the process as a Connect client, for pyspark.sql.functions.
        from pyspark.sql.connect.session import SparkSession as ConnectSession
        mode_before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        session = ConnectSession.builder.remote(f"sc://localhost:{port}/;token={token}").getOrCreate()
        try:
            yield session
        finally:
            session.stop()
            # The builder marks the process as a Connect client (pyspark.sql.functions would then
            # build Connect columns in later tests of the classic session): undo that.
            if mode_before is None:
                os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        log.close()


def _rows(df):
    return [r.asDict(recursive=True) for r in df.collect()]


def test_buffer_on_a_batch_dataframe_through_connect(connect, tmp_path):
    """Exact output; a 7-row batch frame runs in as many shards as the server has cores (2), not
    in its 200 shuffle partitions."""
    df = connect.createDataFrame([("a", 1), ("b", 10), ("a", 2), ("a", 3), ("b", 11), ("a", 4), ("a", 5)],
                                 "k string, v long")
    assert df.isStreaming is False and connect.conf.get("spark.sql.shuffle.partitions") == "200"
    assert default_shards(df) == 2
    got = _rows(spark_ops.buffer(df, "k", count=2, order_by="v", state=str(tmp_path / "state")))
    items = sorted((r["k"], [i["v"] for i in r["items"]]) for r in got)
    assert items == [("a", [1, 2]), ("a", [3, 4]), ("b", [10, 11])]
    assert all(set(i) == {"k", "v"} and i["k"] == r["k"] for r in got for i in r["items"])


@pytest.mark.slow
def test_combine_latest_on_batch_dataframes_through_connect(connect, tmp_path):
    a = connect.createDataFrame([("k1", 1, 1), ("k2", 2, 1)], "k string, x long, t long")
    b = connect.createDataFrame([("k1", "p", 2), ("k1", "q", 3), ("k3", "r", 1)], "k string, y string, t long")
    got = _rows(spark_ops.combine_latest({"a": a, "b": b}, key="k", event_time="t", state=str(tmp_path / "state")))
    assert sorted((r["k"], r["a"]["x"], r["b"]["y"]) for r in got) == [("k1", 1, "p"), ("k1", 1, "q")]


def make_timer_operator() -> Operator:
    """Built in a function so cloudpickle ships the class by value (the server cannot import tests).

    Per key: counts its rows and registers a processing-time timer just after the batch's
    processing time (so it fires one batch later in a stream, and at the end of a batch
    DataFrame's input); the timer emits the count so far and the batch it was registered in."""

    class CountThenFire(Operator):
        def on_event(self, key, row, ctx):
            n = ctx.value("n", default=0)
            n.value += 1
            ctx.register_processing_timer((ctx.processing_time or 0) + 1, name=str(ctx.batch_id))

        def on_timer(self, key, timer, ctx):
            assert timer.kind == "processing"
            ctx.emit({"k": key, "n": ctx.value("n", default=0).value, "registered": int(timer.name),
                      "fired": ctx.batch_id})

    return CountThenFire()


TIMER_SCHEMA = "k string, n long, registered long, fired long"


@pytest.mark.slow
def test_custom_operator_with_processing_timers_on_a_batch_dataframe_through_connect(connect, tmp_path):
    df = connect.createDataFrame([("a", 1), ("b", 2), ("a", 3), ("c", 4), ("a", 5)], "k string, v long")
    got = _rows(apply_operator(df, make_timer_operator(), "k", output_schema=TIMER_SCHEMA,
                               state=str(tmp_path / "state")))
    # a batch DataFrame is the whole input: every timer fires at its end, once per key (one
    # timer name per batch), after all of the key's rows
    assert sorted((r["k"], r["n"]) for r in got) == [("a", 3), ("b", 1), ("c", 1)]


def make_rows_operator() -> Operator:
    """An on_rows operator (a key's rows of the batch as one pandas DataFrame), built in a
    function so cloudpickle ships the class by value: per key, the rows' count and sum of v,
    in the order on_rows got them, and a running total kept in state."""

    class SumRows(Operator):
        def on_rows(self, key, rows, ctx):
            total = ctx.value("total", default=0)
            total.value += int(rows["v"].sum())
            ctx.emit({"k": key, "n": len(rows), "vs": [int(v) for v in rows["v"]], "total": total.value})

    return SumRows()


@pytest.mark.slow
def test_on_rows_operator_on_a_batch_dataframe_through_connect(connect, tmp_path):
    """on_rows through a Connect session: one call per key with all its rows, in order_by order."""
    df = connect.createDataFrame([("a", 3), ("b", 20), ("a", 1), ("a", 2), ("b", 10)], "k string, v long")
    got = _rows(apply_operator(df, make_rows_operator(), "k", order_by="v",
                               output_schema="k string, n long, vs array<long>, total long",
                               state=str(tmp_path / "state")))
    assert sorted((r["k"], r["n"], list(r["vs"]), r["total"]) for r in got) == [("a", 3, [1, 2, 3], 6),
                                                                               ("b", 2, [10, 20], 30)]


def _write_batches(src: Path, batches) -> None:
    """One JSON-lines file per micro-batch (an empty file for an empty batch), mtimes increasing."""
    import json
    src.mkdir(parents=True, exist_ok=True)
    for b, rows in enumerate(batches):
        path = src / f"batch-{b:04d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))


def _run_to_memory(connect, df, name, checkpoint):
    q = (df.writeStream.format("memory").queryName(name).outputMode("append")
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    assert q.exception() is None
    return _rows(connect.table(name))


def _stream(connect, src, schema="k string, v long"):
    return connect.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(src))


@pytest.mark.slow
def test_buffer_and_timers_on_a_stream_through_connect(connect, tmp_path):
    """A file source, one file per micro-batch, a checkpoint location, the memory sink; explicit
    partitions= (a stream's shard count is fixed by its state, whatever the input's size)."""
    batches = [[{"k": "a", "v": 1}, {"k": "a", "v": 2}, {"k": "b", "v": 1}],
               [{"k": "a", "v": 3}, {"k": "b", "v": 2}],
               [{"k": "a", "v": 4}],
               []]
    _write_batches(tmp_path / "src", batches)
    src = _stream(connect, tmp_path / "src")
    assert src.isStreaming and default_shards(src) == 200       # streams keep spark.sql.shuffle.partitions
    buffered = spark_ops.buffer(src, "k", count=2, order_by="v", state=str(tmp_path / "state"), partitions=2)
    got = _run_to_memory(connect, buffered, "so_connect_buffer", tmp_path / "cp-buffer")
    assert sorted((r["k"], [i["v"] for i in r["items"]]) for r in got) == [("a", [1, 2]), ("a", [3, 4]),
                                                                          ("b", [1, 2])]

    timed = apply_operator(_stream(connect, tmp_path / "src"), make_timer_operator(), "k",
                           output_schema=TIMER_SCHEMA, state=str(tmp_path / "state"), name="timers", partitions=2)
    got = _run_to_memory(connect, timed, "so_connect_timers", tmp_path / "cp-timers")
    # each key's timer of batch b fires in batch b + 1 (processing time: when the previous batch
    # ran) — or b + 2 for batch 0, when both batches' clocks fall in the same millisecond
    fired = sorted((r["k"], r["registered"]) for r in got)
    assert fired == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert all(r["fired"] == r["registered"] + 1 or (r["registered"], r["fired"]) == (0, 2) for r in got), got
    counts = {(r["k"], r["registered"]): r["n"] for r in got}
    assert counts[("a", 2)] == 4 and counts[("b", 1)] == 2


@pytest.mark.slow
def test_combine_latest_on_streams_through_connect(connect, tmp_path):
    _write_batches(tmp_path / "left", [[{"k": "a", "v": 1}], [{"k": "a", "v": 2}], []])
    _write_batches(tmp_path / "right", [[], [{"k": "a", "v": 10}], [{"k": "a", "v": 20}]])
    dfs = {"left": _stream(connect, tmp_path / "left"), "right": _stream(connect, tmp_path / "right")}
    out = spark_ops.combine_latest(dfs, key="k", state=str(tmp_path / "state"), partitions=2)
    got = _run_to_memory(connect, out, "so_connect_combine", tmp_path / "cp")
    pairs = sorted((r["left"]["v"], r["right"]["v"]) for r in got)
    # every new row, once both inputs have one, combines with the other input's latest (in a
    # batch, a key's rows of "left" come before those of "right": ordered by input name)
    assert pairs == [(2, 10), (2, 20)] and all(r["k"] == "a" for r in got)


@pytest.mark.slow
def test_operator_metrics_through_connect(connect, tmp_path):
    """A stream's lastProgress carries the operator's figures through Connect too, and a batch
    DataFrame's go to a (Connect) Observation."""
    from pyspark.sql import Observation
    _write_batches(tmp_path / "src", [[{"k": "a", "v": 1}, {"k": "a", "v": 2}, {"k": "b", "v": 1}],
                                      [{"k": "a", "v": 3}]])
    out = spark_ops.buffer(_stream(connect, tmp_path / "src"), "k", count=2, order_by="v",
                           state=str(tmp_path / "state"), partitions=2)
    q = (out.writeStream.format("memory").queryName("so_connect_metrics")
         .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q.awaitTermination()
    progress = sorted(q.recentProgress, key=lambda p: p["batchId"])
    figures = [spark_ops.progress_metrics(p)["buffer"] for p in progress]
    assert [(m["rows_in"], m["rows_out"], m["shards"]) for m in figures] == [(3, 1, 2), (1, 0, 2)]
    assert spark_ops.progress_metrics(q.lastProgress)["buffer"]["rows_in"] == 1

    obs = Observation("connect_batch")
    df = connect.createDataFrame([("a", 1), ("a", 2), ("b", 3)], "k string, v long")
    assert len(spark_ops.buffer(df, "k", count=2, order_by="v", state=str(tmp_path / "s2"), metrics=obs).collect()) == 1
    assert (obs.get["rows_in"], obs.get["rows_out"]) == (3, 1)
