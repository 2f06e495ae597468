"""Registered timers, wherever state is shown (issue 19, item 5): ``ctx.list_timers()`` for
the current key (as Spark's ``listTimers``), ``python -m spark_ops timers`` on a state folder,
and ``option("timers", True)`` of the ``objectspace`` data source on a real Spark run."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import spark_ops
import spark_ops.cli
from spark_ops import Operator, Timer
from spark_ops.testing import OperatorHarness

DAY = 86_400_000
FAR = 4_000_000_000_000          # a processing time no test reaches (year 2096)


class Listing(Operator):
    """Per row: registers the timers the row asks for ("ev:<ms>:<name>", "pt:<ms>:<name>"),
    deletes ("-ev:..." / "-pt:..."), then emits what ctx.list_timers() shows. On a timer:
    emits the list too (the firing timer is no longer in it)."""

    def on_event(self, key, row, ctx):
        for op in row.get("ops", []):
            what, ms, name = op.split(":")
            fn = {"ev": ctx.register_event_timer, "pt": ctx.register_processing_timer,
                  "-ev": ctx.delete_event_timer, "-pt": ctx.delete_processing_timer}[what]
            fn(int(ms), name)
        ctx.emit({"k": key, "at": "event", "timers": ctx.list_timers()})

    def on_timer(self, key, timer, ctx):
        ctx.emit({"k": key, "at": f"timer {timer.name}", "timers": ctx.list_timers()})


def test_list_timers_is_the_current_keys_timers_in_time_order():
    h = OperatorHarness(Listing(), key="k", partitions=2, key_groups=16)
    out = h.run_batch([{"k": "a", "ops": ["ev:500:late", "pt:300:p", "ev:100:early", "ev:300:b", "ev:300:a"]},
                       {"k": "b", "ops": ["ev:200:other"]},
                       {"k": "a", "ops": ["ev:100:early"]}])          # the same timer again: kept once
    by = {(r["k"], i): r["timers"] for i, r in enumerate(out)}
    a = [t for (k, _), t in by.items() if k == "a"]
    want = [Timer(100, "early", "event"), Timer(300, "a", "event"), Timer(300, "b", "event"),
            Timer(300, "p", "processing"), Timer(500, "late", "event")]
    assert a[-1] == want and a[0] == want                  # registered this batch: seen at once
    assert [t for (k, _), t in by.items() if k == "b"] == [[Timer(200, "other", "event")]]
    # across batches (read back from the checkpoint after a restart), deletes seen at once
    h.restart()
    out = h.run_batch([{"k": "a", "ops": ["-ev:300:a", "-pt:300:p"]}, {"k": "c"}])
    got = {r["k"]: r["timers"] for r in out}
    assert got == {"a": [Timer(100, "early", "event"), Timer(300, "b", "event"), Timer(500, "late", "event")],
                   "c": []}
    # in on_timer: the timers left, the firing one gone
    out = h.run_batch([], watermark=300)
    fired = [(r["k"], r["at"], r["timers"]) for r in out]
    want = [("a", "timer early", [Timer(300, "b", "event"), Timer(500, "late", "event")]),
            ("a", "timer b", [Timer(500, "late", "event")]), ("b", "timer other", [])]
    assert sorted(fired) == sorted(want)                # (a and b may sit on different shards)
    assert [f for f in fired if f[0] == "a"] == want[:2]
    h.close()


def test_list_timers_outside_a_key_is_an_error():
    class InOpen(Operator):
        def open(self, ctx):
            ctx.list_timers()

        def on_event(self, key, row, ctx):
            pass

    h = OperatorHarness(InOpen(), key="k", partitions=1)
    with pytest.raises(RuntimeError, match="current key"):
        h.run_batch([{"k": "a"}])


def test_tuple_and_typed_keys_list_their_own_timers():
    class Two(Operator):
        def on_event(self, key, row, ctx):
            ctx.register_event_timer(row["t"], "x")
            ctx.emit({"k": key, "timers": ctx.list_timers()})

    h = OperatorHarness(Two(), key=("u", "d"), partitions=1, key_groups=1)   # every key in one key group
    out = h.run_batch([{"u": 1, "d": 2.5, "t": 10}, {"u": 1, "d": True, "t": 20}, {"u": b"1", "d": 2.5, "t": 30}])
    assert {r["k"]: [t.time for t in r["timers"]] for r in out} == {(1, 2.5): [10], (1, True): [20], (b"1", 2.5): [30]}


# -- python -m spark_ops timers, on a state folder the harness wrote -----------------------------

OP = "q1/listing"


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("timers") / "state")
    h = OperatorHarness(Listing(), key="k", partitions=2, key_groups=16, state=f"{root}/{OP}")
    h.run_batch([{"k": "a", "ops": ["ev:5000:idle", "pt:%d:flush" % FAR]}, {"k": "b", "ops": ["ev:1000:idle"]},
                 {"k": "c", "ops": ["ev:3000:idle"]}])
    h.run_batch([{"k": "c", "ops": ["-ev:3000:idle", "ev:7000:idle"]}])
    h.close()
    return root


def cli(capsys, *argv, ok=True):
    rc = spark_ops.cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    assert (rc == 0) == ok, out.err
    return json.loads(out.out) if ok and "--json" in argv else (out.out if ok else out.err)


def test_cli_lists_timers_from_each_folder(state, capsys):
    want = [("b", "event", 1000, "idle"), ("a", "event", 5000, "idle"), ("c", "event", 7000, "idle"),
            ("a", "processing", FAR, "flush")]
    for loc in (state, f"{state}/{OP}"):
        rows = cli(capsys, "timers", loc, "--json")
        assert [(r["key"], r["kind"], r["time"], r["name"]) for r in rows] == want
        assert {(r["operator"], r["epoch"]) for r in rows} == {("listing", 1)}
        assert {r["query_id"] for r in rows} == {"q1" if loc == state else None}     # as objectspace labels it
    assert spark_ops.read_timers(f"{state}/{OP}") == rows        # the CLI's rows, from Python
    assert spark_ops.read_timers(state, kind="event", operator="listing")[0]["key"] == "b"
    with pytest.raises(ValueError, match="kind"):
        spark_ops.read_timers(state, kind="later")
    # at the older checkpoint: c's first timer
    old = cli(capsys, "timers", state, "--epoch", 0, "--json")
    assert ("c", 3000) in {(r["key"], r["time"]) for r in old} and len(old) == 4
    assert [r["key"] for r in cli(capsys, "timers", state, "--kind", "processing", "--json")] == ["a"]
    kg = rows[0]["key_group"]
    assert {r["key_group"] for r in cli(capsys, "timers", state, "--key-group", kg, "--json")} == {kg}
    assert cli(capsys, "timers", state, "--operator", "other", "--json") == []
    # one key's timers: a plain word, or JSON
    for key in ("a", '"a"'):
        assert [(r["key"], r["time"]) for r in cli(capsys, "timers", state, "--key", key, "--json")] == [
            ("a", 5000), ("a", FAR)]
    assert cli(capsys, "timers", state, "--key", "zz", "--json") == []
    assert [r["time"] for r in spark_ops.read_timers(state, key="c")] == [7000]
    text = cli(capsys, "timers", state)
    assert "OPERATOR" in text and "1970-01-01T00:00:01.000Z" in text and "4 timers" in text
    assert "no dkv store" in cli(capsys, "timers", f"{state}/nothing", ok=False)


def test_cli_process_end_to_end(state):
    proc = subprocess.run([sys.executable, "-m", "spark_ops", "timers", state, "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)) == 4


# -- the data source and the CLI on a real Spark run --------------------------------------------

def timers_operator():
    """Per row: an event-time timer a day after it (named by the row's value) and one
    processing-time timer per key far ahead; none fires in the test."""

    class Reminders(spark_ops.Operator):
        def on_event(self, key, row, ctx):
            ctx.register_event_timer(ctx.event_time + DAY, name=str(row["v"]))
            ctx.register_processing_timer(FAR, name="flush")
            ctx.emit({"k": key, "n": len(ctx.list_timers())})
    return Reminders()


@pytest.mark.spark
def test_data_source_and_cli_show_the_timers_of_a_streaming_query(utc_spark, tmp_path, capsys):
    from .spark_helpers import at, read_stream, run_stream, write_batch_files
    spark_ops.register_datasource(utc_spark)
    batches = [[{"k": "a", "ts": at(0), "v": 1}, {"k": "b", "ts": at(1), "v": 2}],
               [{"k": "a", "ts": at(2), "v": 3}]]
    write_batch_files(tmp_path / "src", batches)
    state = str(tmp_path / "state")
    out = spark_ops.apply_operator(read_stream(utc_spark, tmp_path / "src"), timers_operator(), key="k",
                                   event_time="ts", output_schema="k string, n long", state=state, partitions=2,
                                   key_groups=16)
    q = run_stream(out, tmp_path / "out", tmp_path / "cp")
    base = int(at(0).replace(tzinfo=__import__("datetime").timezone.utc).timestamp() * 1000)
    want = {("a", "event", base + DAY, "1"), ("b", "event", base + 1 + DAY, "2"), ("a", "event", base + 2 + DAY, "3"),
            ("a", "processing", FAR, "flush"), ("b", "processing", FAR, "flush")}
    df = utc_spark.read.format("objectspace").option("timers", True).load(state)
    assert df.columns == ["operator", "query_id", "instance", "epoch", "key_group", "key", "kind", "time", "name"]
    rows = df.collect()
    assert {(json.loads(r.key), r.kind, r.time, r.name) for r in rows} == want
    assert {(r.operator, r.query_id, r.epoch) for r in rows} == {("reminders", str(q.id), 1)}
    first = utc_spark.read.format("objectspace").option("timers", "true").option("epoch", 0).load(state)
    assert {(json.loads(r.key), r.time) for r in first.collect() if r.kind == "event"} == {
        ("a", base + DAY), ("b", base + 1 + DAY)}
    with pytest.raises(Exception, match="no change feed"):
        utc_spark.read.format("objectspace").option("timers", True).option("changes_from", 0).load(state).collect()
    got = cli(capsys, "timers", state, "--json")
    assert {(r["key"], r["kind"], r["time"], r["name"]) for r in got} == want
    assert [r["time"] for r in got] == sorted(r["time"] for r in got)
