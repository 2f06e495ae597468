"""A user's operator written with the public API (Operator, ctx.value / ctx.queue / timers / emit),
run by apply_operator in a streaming query and by OperatorHarness: the same output, and the
output of a small model."""
from __future__ import annotations

import pytest

from spark_ops import Operator, Timer, apply_operator
from spark_ops.testing import OperatorHarness

from .models import bag_by_key, by_key, to_dt, to_ms
from .spark_helpers import at, random_events, read_sink, read_stream, run_stream, write_batch_files

SCHEMA = "k string, kind string, n long, recent array<long>, at timestamp"
IDLE_MS = 1500


def make_operator() -> Operator:
    """Built in a function so cloudpickle ships the class by value (workers cannot import tests)."""

    class CountRecentIdle(Operator):
        """Per key: a row count (value), the last three ``v`` (queue), one output row per input
        row, and an ``idle`` row once the watermark passes the key's latest event + IDLE_MS
        (one event timer, moved on every row); the key is then forgotten."""

        def open(self, ctx):
            self.rows_this_batch = 0

        def on_event(self, key, row, ctx):
            n = ctx.value("n", default=0)
            n.value += 1
            recent = ctx.queue("recent")
            recent.append(row["v"])
            while len(recent) > 3:
                recent.popleft()
            last = ctx.value("last")
            if last.value is not None:
                ctx.delete_event_timer(last.value + IDLE_MS, name="idle")
            last.value = ctx.event_time if last.value is None else max(last.value, ctx.event_time)
            ctx.register_event_timer(last.value + IDLE_MS, name="idle")
            self.rows_this_batch += 1
            ctx.emit({"k": key, "kind": "row", "n": n.value, "recent": list(recent),
                      "at": ctx.to_datetime(ctx.event_time)})

        def on_timer(self, key, timer: Timer, ctx):
            assert timer.name == "idle" and timer.kind == "event"
            ctx.emit({"k": key, "kind": "idle", "n": ctx.value("n", default=0).value,
                      "recent": list(ctx.queue("recent")), "at": ctx.to_datetime(timer.time)})
            for name in ("n", "recent", "last"):
                ctx.delete_state(name)

    return CountRecentIdle()


def model(batches, delay_ms):
    """The same operator in plain Python, with the runtime's batch rules (see models.run_model)."""
    state: dict = {}
    basis, out = None, []
    for rows in batches:
        wm = None if basis is None else basis - delay_ms
        emitted = []
        for r in sorted(rows, key=lambda r: (r["k"], to_ms(r["ts"]))):
            ts = to_ms(r["ts"])
            if wm is not None and ts < wm:
                continue
            s = state.setdefault(r["k"], {"n": 0, "recent": [], "last": ts})
            s["n"] += 1
            s["recent"] = (s["recent"] + [r["v"]])[-3:]
            s["last"] = max(s["last"], ts)
            emitted.append({"k": r["k"], "kind": "row", "n": s["n"], "recent": s["recent"], "at": to_dt(ts)})
        if wm is not None:
            for k in [k for k, s in state.items() if s["last"] + IDLE_MS <= wm]:
                s = state.pop(k)
                emitted.append({"k": k, "kind": "idle", "n": s["n"], "recent": s["recent"],
                                "at": to_dt(s["last"] + IDLE_MS)})
        times = [to_ms(r["ts"]) for r in rows]
        if times:
            basis = max(times + ([basis] if basis is not None else []))
        out.append(emitted)
    return out


def _data():
    return random_events(31, 6, keys="abcd") + [[{"k": "zz", "ts": at(10_000_000), "v": -1}], []]


def test_custom_operator_in_the_harness_matches_its_model():
    batches = _data()
    expected = model(batches, 700)
    h = OperatorHarness(make_operator(), key="k", event_time="ts", watermark="700 ms", partitions=3)
    for b, rows in enumerate(batches):
        if b == 3:
            h.rescale(2)
        assert by_key(h.run_batch(rows), "k") == by_key(expected[b], "k"), f"batch {b}"


@pytest.mark.spark
def test_custom_operator_in_a_streaming_query_matches_the_harness(utc_spark, tmp_path):
    batches = _data()
    write_batch_files(tmp_path / "src", batches)
    out = apply_operator(read_stream(utc_spark, tmp_path / "src"), make_operator(), "k", output_schema=SCHEMA,
                         event_time="ts", watermark="700 ms", state=str(tmp_path / "state"), name="idle")
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    h = OperatorHarness(make_operator(), key="k", event_time="ts", watermark="700 ms", partitions=2)
    expected = model(batches, 700)
    assert sorted(got) == list(range(len(batches)))
    assert any(r["kind"] == "idle" for rows in expected for r in rows)
    for b, rows in enumerate(batches):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k") == bag_by_key(h.run_batch(rows), "k"), \
            f"batch {b}"


def make_processing_timer_operator() -> Operator:
    class OneBatchLater(Operator):
        """Registers a processing-time timer just after the batch's processing time (when the
        previous batch ran): it is due once the next batch's processing time (when this batch
        ran) passes it, i.e. exactly one batch later."""

        def on_event(self, key, row, ctx):
            ctx.register_processing_timer((ctx.processing_time or 0) + 1, name=str(ctx.batch_id))

        def on_timer(self, key, timer, ctx):
            assert timer.kind == "processing"
            ctx.emit({"k": key, "registered": int(timer.name), "fired": ctx.batch_id, "pt": ctx.processing_time})

    return OneBatchLater()


@pytest.mark.spark
def test_processing_time_timers_fire_one_batch_later_in_a_streaming_query(utc_spark, tmp_path):
    """Processing time in batch b is the time batch b - 1 ran (its shards' clocks): the same on
    every shard of a batch, increasing from batch to batch, behind this test's clock."""
    import time
    t_start = int(time.time() * 1000)
    batches = random_events(33, 4, keys="abc", late=False) + [[]]
    write_batch_files(tmp_path / "src", batches)
    out = apply_operator(read_stream(utc_spark, tmp_path / "src"), make_processing_timer_operator(), "k",
                         output_schema="k string, registered long, fired long, pt long", state=str(tmp_path / "state"))
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    got = read_sink(tmp_path / "out")
    fired = sorted((r["k"], r["registered"], r["fired"]) for rows in got.values() for r in rows)
    want = sorted({(r["k"], b) for b, rows in enumerate(batches) for r in rows})
    assert [(k, reg) for k, reg, _ in fired] == want
    # Batch 0's processing time is when it started, and batch 1's when its last shard started:
    # equal when both shards started within one millisecond, and then the timer waits a batch.
    assert all(at == reg + 1 or (reg, at) == (0, 2) for _, reg, at in fired), fired
    pts = {}
    for rows in got.values():
        for r in rows:
            pts.setdefault(r["fired"], set()).add(r["pt"])
    assert all(len(v) == 1 for v in pts.values()), pts      # one processing time per batch, all shards
    times = [pts[b].pop() for b in sorted(pts)]
    assert times == sorted(set(times)) and t_start <= times[0] and times[-1] <= int(time.time() * 1000)


def make_idle_alert(idle_ms: int = 5000) -> Operator:
    """docs/spark_ops.md's IdleAlert (its 5 s as a parameter): a processing-time timer set from
    ``ctx.processing_time`` on every row, from the query's first batch on."""

    class IdleAlert(Operator):
        def on_event(self, key, row, ctx):
            due = ctx.value("due")
            if due.value is not None:
                ctx.delete_processing_timer(due.value)        # one pending timer per user
            due.value = ctx.processing_time + idle_ms
            ctx.register_processing_timer(due.value)

        def on_timer(self, key, timer, ctx):
            ctx.emit({"user": key, "idle_since": timer.time - idle_ms})
            ctx.delete_state("due")

    return IdleAlert()


def test_idle_alert_from_the_docs_runs_in_the_harness_from_the_first_batch():
    assert OperatorHarness(make_idle_alert(), key="user").run_batch([{"user": "a"}]) == []   # no TypeError
    h = OperatorHarness(make_idle_alert(), key="user", partitions=2)
    steps = [([{"user": "a"}, {"user": "b"}], 1_000, []),   # processing time 1 000 (its own): both due at 6 000
             ([], 5_000, []),                                # 1 000 (the previous batch's clock)
             ([{"user": "a"}], 8_000, []),                   # 5 000: a is due at 10 000 now
             ([], 9_000, [{"user": "b", "idle_since": 1_000}]),   # 8 000
             ([], 20_000, []),                               # 9 000
             ([], None, [{"user": "a", "idle_since": 5_000}])]    # 20 000
    for b, (rows, clock, want) in enumerate(steps):
        assert h.run_batch(rows, batch_time=clock) == want, f"batch {b}"


@pytest.mark.spark
def test_idle_alert_from_the_docs_runs_on_a_file_source_from_the_first_batch(utc_spark, tmp_path):
    """The query's first batch has a processing time, the same on every shard (a shard without
    rows too); every user gets one alert, in a batch whose processing time passed its timer."""
    import time

    from .spark_helpers import file_sink
    from spark_ops import read_metrics

    idle = 300
    t_start = int(time.time() * 1000)
    users = ["u0", "u1"]                    # two users, four shards: two without rows
    batches = [[{"user": u} for u in users], [{"user": "u0"}]] + [[] for _ in range(5)]
    write_batch_files(tmp_path / "src", batches)
    sink = file_sink(tmp_path / "out")

    def slow_sink(df, batch_id):            # processing time follows the clock: let it move
        sink(df, batch_id)
        time.sleep(idle / 1000)

    out = apply_operator(read_stream(utc_spark, tmp_path / "src", "user string"), make_idle_alert(idle), "user",
                         output_schema="user string, idle_since long", state=str(tmp_path / "state"),
                         partitions=4)
    (out.writeStream.foreachBatch(slow_sink).option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True).start().awaitTermination())
    got = read_sink(tmp_path / "out")
    assert sorted(got) == list(range(len(batches)))
    metrics = read_metrics(str(tmp_path / "state"))
    pt: dict = {}
    for m in metrics:
        pt.setdefault(m["batch"], set()).add(m["processing_time"])
    assert all(len(v) == 1 and None not in v for v in pt.values()), pt     # one value per batch, all shards
    times = [pt[b].pop() for b in sorted(pt)]
    assert t_start <= times[0] and times == sorted(times) and times[-1] <= int(time.time() * 1000)
    assert sorted(m["shard"] for m in metrics if m["batch"] == 0) == [0, 1, 2, 3]
    assert any(m["rows"] == 0 for m in metrics if m["batch"] == 0)
    alerts = {r["user"]: (b, r["idle_since"]) for b, rows in got.items() for r in rows}
    assert sorted(alerts) == users and sum(len(rows) for rows in got.values()) == len(users)
    last_row = {u: 1 if u == "u0" else 0 for u in users}        # the batch of each user's last row
    for u, (b, since) in alerts.items():
        assert since == times[last_row[u]]              # its processing time when its last row came
        assert times[b] >= since + idle > times[b - 1]  # fired in the first batch whose time passed it
