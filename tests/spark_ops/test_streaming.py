"""Every built-in operator in a real streaming query (file source, one file per micro-batch,
availableNow, foreachBatch sink) against its reference model: the same rows per batch and, per
key, in the same order. Then each operator on a batch (non-streaming) DataFrame."""
from __future__ import annotations

import zlib

import pytest

import spark_ops
from .models import (BufferModel, CombineLatestModel, DelayModel, SessionModel, TimeoutModel, bag_by_key, run_model,
                    union_row)
from .spark_helpers import SCHEMA, at, random_events, read_sink, read_stream, run_stream, write_batch_files

pytestmark = pytest.mark.spark


def _flush(batches, key="zz", ms=10_000_000):
    """Two last batches whose row moves the watermark past everything (timers fire in the last one)."""
    return batches + [[{"k": key, "ts": at(ms), "v": -1}], []]


# name: (build(df, state), model, event_time, watermark delay ms, data seed and shape)
CASES = {
    "buffer count": (lambda df, st: spark_ops.buffer(df, "k", count=3, state=st),
                     lambda: BufferModel(["k"], count=3), None, 0, dict(late=False)),
    "buffer count skip<count": (lambda df, st: spark_ops.buffer(df, "k", count=3, skip=1, event_time="ts",
                                                                watermark="5 seconds", state=st),
                                lambda: BufferModel(["k"], count=3, skip=1), "ts", 5000, dict()),
    "buffer count skip>count": (lambda df, st: spark_ops.buffer(df, "k", count=2, skip=3, state=st),
                                lambda: BufferModel(["k"], count=2, skip=3), None, 0, dict(late=False)),
    "buffer duration": (lambda df, st: spark_ops.buffer(df, "k", duration="1500 ms", event_time="ts",
                                                        watermark="1 second", state=st),
                        lambda: BufferModel(["k"], duration_ms=1500), "ts", 1000, dict(flush=True)),
    "buffer duration or count": (lambda df, st: spark_ops.buffer(df, "k", count=2, duration="2 seconds",
                                                                 event_time="ts", state=st),
                                 lambda: BufferModel(["k"], count=2, duration_ms=2000), "ts", 0, dict(flush=True)),
    "delay": (lambda df, st: spark_ops.delay(df, "k", "1200 ms", event_time="ts", watermark="500 ms", state=st),
              lambda: DelayModel(1200), "ts", 500, dict(flush=True)),
    "timeout": (lambda df, st: spark_ops.timeout(df, "k", "1500 ms", event_time="ts", state=st),
                lambda: TimeoutModel(["k"], 1500), "ts", 0, dict(flush=True, keys="abc")),
    "session gap": (lambda df, st: spark_ops.session_window(df, "k", "901 ms", event_time="ts",
                                                            watermark="1 second", state=st),
                    lambda: SessionModel(["k"], 901), "ts", 1000, dict(flush=True, keys="abc", even=True)),
    "session max duration": (lambda df, st: spark_ops.session_window(df, "k", 701, event_time="ts",
                                                                     max_duration="2 seconds", items=False, state=st),
                             lambda: SessionModel(["k"], 701, 2000, items=False), "ts", 0,
                             dict(flush=True, keys="ab", even=True)),
}


# Cases built without watermark=: no row is dropped as late (the watermark only fires timers).
NO_WATERMARK = {"buffer count", "buffer count skip>count", "buffer duration or count", "timeout",
                "session max duration"}


def _data(seed, shape):
    shape = dict(shape)
    flush = shape.pop("flush", False)
    batches = random_events(seed, 5, **shape)
    return _flush(batches) if flush else batches


@pytest.mark.parametrize("case", list(CASES))
def test_streaming_operator_matches_model(utc_spark, tmp_path, case):
    _check_case(utc_spark, tmp_path, case)


def test_without_shard_hosts_the_python_worker_runs_the_shard(utc_spark, tmp_path, monkeypatch):
    """SPARK_OPS_SHARD_HOST=0 (read when the query is built): the in-worker path, same output."""
    monkeypatch.setenv("SPARK_OPS_SHARD_HOST", "0")
    _check_case(utc_spark, tmp_path, "session gap")


def _check_case(utc_spark, tmp_path, case):
    build, model, event_time, delay, shape = CASES[case]
    batches = _data(zlib.crc32(case.encode()), shape)
    write_batch_files(tmp_path / "src", batches)
    run_stream(build(read_stream(utc_spark, tmp_path / "src"), str(tmp_path / "state")), tmp_path / "out",
               tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    expected = run_model(model(), batches, keys=["k"], event_time=event_time, delay_ms=delay,
                         drop_late=case not in NO_WATERMARK)
    assert sorted(got) == list(range(len(batches)))
    assert sum(map(len, expected)) > 0, "the data should make the operator emit"
    for b in range(len(batches)):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"
    # what the runtime reports per batch and shard (read_metrics: the user's metrics table)
    recs = spark_ops.read_metrics(str(tmp_path / "state"))
    assert sorted((r["batch"], r["shard"]) for r in recs) == [(b, s) for b in range(len(batches)) for s in range(2)]
    assert sum(r["rows"] for r in recs) == sum(map(len, batches))
    assert sum(r["emitted"] for r in recs) == sum(map(len, expected))
    assert all(r["checkpoint_bytes"] > 0 for r in recs if r["rows"])
    timed = case.startswith(("buffer duration", "delay", "timeout", "session"))
    assert (sum(r["timers_fired"] for r in recs) > 0) == timed


def _inputs(seed, inputs, n_batches, *, one_per_key):
    """Rows {k, ts, v} per input and batch; a key's event times are distinct across inputs."""
    import random

    rng = random.Random(seed)
    used, v = set(), 0
    per_input = {name: [] for name in inputs}
    for b in range(n_batches):
        for name in inputs:
            rows = []
            keys = rng.sample("abc", rng.randint(0, 3)) if one_per_key else [rng.choice("abc") for _ in range(rng.randint(0, 4))]
            for k in keys:
                ms = b * 1000 + rng.randrange(0, 1000)
                while (k, ms) in used:
                    ms += 1
                used.add((k, ms))
                rows.append({"k": k, "ts": at(ms), "v": v})
                v += 1
            per_input[name].append(sorted(rows, key=lambda r: (r["k"], r["ts"])))
    return per_input


@pytest.mark.parametrize("inputs", [["a", "b"], ["x", "y", "z"]])
def test_streaming_combine_latest_matches_model(utc_spark, tmp_path, inputs):
    """Each input is its own file source (one file per batch). With three inputs, event time
    orders a key's rows; with two, at most one row per key and input per batch (Spark cannot
    order two rows of one input without an ordering column)."""
    with_et = len(inputs) == 3
    per_input = _inputs(len(inputs), inputs, 5, one_per_key=not with_et)
    for name, batches in per_input.items():
        write_batch_files(tmp_path / name, batches)
    dfs = {name: read_stream(utc_spark, tmp_path / name) for name in inputs}
    out = spark_ops.combine_latest(dfs, key="k", event_time="ts" if with_et else None,
                                   watermark="1 hour" if with_et else None, state=str(tmp_path / "state"))
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    union = [[union_row(["k"], name, inputs, r) | {"__et": r["ts"]} for name in inputs for r in per_input[name][b]]
             for b in range(5)]
    expected = run_model(CombineLatestModel(["k"], inputs), union, keys=["k"],
                         event_time="__et" if with_et else None, delay_ms=3_600_000,
                         order_by=["__et", "__spark_ops_source"] if with_et else ["__spark_ops_source"])
    assert sorted(got) == list(range(5))
    assert sum(map(len, expected)) > 0
    for b in range(5):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"


# ------------------------------------------------------------------------- batch DataFrames


def _static(spark, rows):
    return spark.createDataFrame([(r["k"], r["ts"], r["v"]) for r in rows], SCHEMA)


class _EndOfInput:
    """A batch DataFrame is one batch; the end of the input is modelled as the watermark
    reaching +infinity, so every timer fires (windows, delays, timeouts, sessions close)."""

    def __init__(self, model):
        self.model = model

    def run(self, rows, event_time):
        out = run_model(self.model, [rows], keys=["k"], event_time=event_time)[0]
        return out + (self.model.on_watermark(1 << 62) if event_time else [])


BATCH_CASES = {
    "buffer count": (lambda df: spark_ops.buffer(df, "k", count=2, skip=1, state="unused"),
                     lambda: BufferModel(["k"], count=2, skip=1), None, False),
    "buffer duration": (lambda df: spark_ops.buffer(df, "k", duration="2 seconds", event_time="ts"),
                        lambda: BufferModel(["k"], duration_ms=2000), "ts", True),
    "delay": (lambda df: spark_ops.delay(df, "k", "1 second", event_time="ts"), lambda: DelayModel(1000), "ts", True),
    "timeout": (lambda df: spark_ops.timeout(df, "k", "1 second", event_time="ts"),
                lambda: TimeoutModel(["k"], 1000), "ts", True),
    "session": (lambda df: spark_ops.session_window(df, "k", 1501, event_time="ts"),
                lambda: SessionModel(["k"], 1501), "ts", True),
}


@pytest.mark.parametrize("case", list(BATCH_CASES))
def test_batch_dataframe_matches_model(utc_spark, case):
    build, model, event_time, _ = BATCH_CASES[case]
    rows = [r for batch in random_events(7, 4, late=False, even=True) for r in batch]
    rows.sort(key=lambda r: (r["k"], r["ts"]))
    got = [r.asDict(recursive=True) for r in build(_static(utc_spark, rows)).collect()]
    expected = _EndOfInput(model()).run(rows, event_time)
    assert expected
    assert bag_by_key(got, "k") == bag_by_key(expected, "k")


def test_batch_dataframe_combine_latest(utc_spark):
    a = utc_spark.createDataFrame([("k1", 1), ("k2", 2)], "k string, x long")
    b = utc_spark.createDataFrame([("k1", "p"), ("k1", "q"), ("k3", "r")], "k string, y string")
    out = spark_ops.combine_latest({"a": a, "b": b}, key="k").collect()
    rows = sorted((r["k"], r["a"]["x"], r["b"]["y"]) for r in out)
    # per key the rows of "a" come before those of "b" (order by input name); k1's two rows of b
    # have no defined order between them, but each combines with a's latest
    assert rows == [("k1", 1, "p"), ("k1", 1, "q")]


def test_batch_dataframe_runs_twice_with_the_same_result(utc_spark):
    """A batch DataFrame keeps no state between actions: collecting twice gives the same rows."""
    rows = [r for batch in random_events(3, 3, late=False) for r in batch]
    df = spark_ops.buffer(_static(utc_spark, rows), "k", count=2)
    first = sorted(str(r) for r in df.collect())
    assert first and first == sorted(str(r) for r in df.collect())


def test_combine_latest_watermark_follows_the_slowest_input(utc_spark, tmp_path):
    """Input "fast" is at 100 s, "slow" at 10 s; with a 1 s delay per input, batch 1's watermark is
    min(100, 10) - 1 = 9 s, so slow's row at 11 s is on time and combines with fast's latest."""
    write_batch_files(tmp_path / "fast", [[{"k": "a", "ts": at(100_000), "v": 1}], []])
    write_batch_files(tmp_path / "slow", [[{"k": "a", "ts": at(10_000), "v": 2}], [{"k": "a", "ts": at(11_000), "v": 3}]])
    dfs = {n: read_stream(utc_spark, tmp_path / n) for n in ("fast", "slow")}
    out = spark_ops.combine_latest(dfs, key="k", event_time="ts", watermark="1 second", state=str(tmp_path / "state"))
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    assert [(r["fast"]["v"], r["slow"]["v"]) for r in got[0]] == [(1, 2)]
    assert [(r["fast"]["v"], r["slow"]["v"]) for r in got[1]] == [(1, 3)]


def test_operator_output_composes_with_union(utc_spark):
    rows = [r for batch in random_events(5, 2, late=False) for r in batch]
    df = _static(utc_spark, rows)
    first = spark_ops.buffer(df, "k", count=1, isolate=True)
    second = spark_ops.buffer(df, "k", count=1, name="second", isolate=True)
    assert len(first.union(second).collect()) == 2 * len(rows)
    other = utc_spark.createDataFrame([("x", [])], first.schema).repartition(2)
    assert len(other.union(first).collect()) == 1 + len(rows)


@pytest.mark.parametrize("merge", ["union", "coalesce"])
def test_a_merged_stage_without_isolation_fails_with_a_clear_error(utc_spark, tmp_path, merge):
    """Without the closing exchange (the default with shard hosts) a union or coalesce after
    the operator runs in its stage and renumbers its partitions: every batch must fail and
    say to pass isolate=True, never run a shard as another. Streaming, as only there a
    shard's state outlives the task (one key, so the other shard's partition is empty)."""
    write_batch_files(tmp_path / "src", [[{"k": "a", "ts": at(0), "v": 1}], [{"k": "a", "ts": at(1000), "v": 2}]])
    out = spark_ops.buffer(read_stream(utc_spark, tmp_path / "src"), "k", count=1, state=str(tmp_path / "st"))
    if merge == "union":
        other = spark_ops.buffer(read_stream(utc_spark, tmp_path / "src"), "k", count=1, name="other",
                                 state=str(tmp_path / "st"))
        merged = other.union(out)
    else:
        merged = out.coalesce(1)
    with pytest.raises(Exception, match="pass isolate=True"):
        run_stream(merged, tmp_path / "out", tmp_path / "cp")


@pytest.fixture
def los_angeles(spark):
    before = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    yield spark
    spark.conf.set("spark.sql.session.timeZone", before)


def test_event_order_across_a_dst_change_in_a_non_utc_session(los_angeles):
    """08:30Z and 09:10Z on 2024-11-03 are 01:30 PDT and 01:10 PST in Los Angeles: the later event has
    the earlier local wall-clock time. Event order is the instants' order."""
    df = los_angeles.sql("select 'a' k, timestamp'2024-11-03 08:30:00Z' ts, 1L v "
                         "union all select 'a', timestamp'2024-11-03 09:10:00Z', 2L")
    out = spark_ops.buffer(df, "k", count=2, event_time="ts").collect()
    assert [[i["v"] for i in r["items"]] for r in out] == [[1, 2]]


def test_a_keys_output_rows_keep_their_emission_order(utc_spark):
    """buffer(count=1) over one key's rows emits them one by one in event order; the output of one
    partition reaches foreachBatch/collect in the order the operator emitted it."""
    rows = [{"k": "a", "ts": at(i * 10), "v": i} for i in range(20)]
    out = spark_ops.buffer(_static(utc_spark, rows), "k", count=1, event_time="ts").collect()
    assert [r["items"][0]["v"] for r in out] == list(range(20))


def test_a_heartbeat_keeps_timers_firing_on_an_idle_stream(utc_spark, tmp_path):
    """docs/spark_ops.md: union a heartbeat with a null key. Its rows are dropped, but their
    event times advance the watermark, so keys still time out while no keyed row arrives."""
    batches = [[{"k": "a", "ts": at(1_000), "v": 1}, {"k": "b", "ts": at(2_000), "v": 2}],
               [{"k": None, "ts": at(60_000), "v": None}], [{"k": None, "ts": at(61_000), "v": None}]]
    write_batch_files(tmp_path / "src", batches)
    out = spark_ops.timeout(read_stream(utc_spark, tmp_path / "src"), "k", "5 seconds", event_time="ts",
                            state=str(tmp_path / "state"))
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    assert got[0] == [] and got[1] == []
    assert sorted((r["k"], r["timeout_at"]) for r in got[2]) == [("a", at(6_000)), ("b", at(7_000))]
    recs = spark_ops.read_metrics(str(tmp_path / "state"))
    assert sum(r["rows"] for r in recs) == 2 and sum(r["timers_fired"] for r in recs) == 2


def test_a_batch_emitting_more_than_a_part_streams_it_from_the_shard_host(utc_spark, tmp_path):
    """Each shard emits more than OUT_CHUNK rows in a batch (2,000 of them, count=1): the host
    sends the output in parts while the batch runs, and the sink gets every row once."""
    from spark_ops._runtime import OUT_CHUNK
    n = 4000
    assert n // 2 > OUT_CHUNK
    batches = [[{"k": f"k{i:04d}", "ts": at(b * 10_000 + i), "v": b * n + i} for i in range(n)] for b in range(2)]
    write_batch_files(tmp_path / "src", batches)
    run_stream(spark_ops.buffer(read_stream(utc_spark, tmp_path / "src"), "k", count=1, state=str(tmp_path / "state")),
               tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    expected = run_model(BufferModel(["k"], count=1), batches, keys=["k"])
    assert sorted(got) == [0, 1]
    for b in range(2):
        assert len(got[b]) == n
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"
