"""A query's code changes and its state follows (RFC 0010), on a real local Spark query.

One streaming query (a file source, one checkpoint location, one state root) is restarted
after each change of its code. Every outcome is either the state carried over exactly (a
Python model checks every output row) or an error raised before any state is written, whose
message names the operator or variable and the way out.
"""
from __future__ import annotations

import copy
import logging
import shutil
import sys

import dkv
import pytest

import spark_ops
from spark_ops import Operator, StateVar, apply_operator
from spark_ops.cli import main as cli

from .spark_helpers import at, read_sink, read_stream, run_stream, write_batch_files

pytestmark = pytest.mark.spark

# The operators below are classes of this module, which Spark's workers cannot import: ship them by value.
from pyspark import cloudpickle  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SCHEMA = "k string, kind string, n long, total double"
DELAY = 5000


def _alert_rows(key, s):
    return {"k": key, "n": len(s), "total": float(sum(_amount(v) for v in s.values()))}


def _amount(v):
    return v["amount"] if isinstance(v, dict) else v


class SpendAlert(Operator):
    """Per user: the amounts seen (a sorted dict by value), a row per event, and an alert
    DELAY ms of event time after the user's first event."""

    def on_event(self, key, row, ctx):
        s = ctx.sorted_dict("spends", ttl="1 hour")
        if not s:
            ctx.register_event_timer(ctx.event_time + DELAY)
        s[row["v"]] = float(row["v"])
        ctx.emit({**_alert_rows(key, s), "kind": "row"})

    def on_timer(self, key, timer, ctx):
        ctx.emit({**_alert_rows(key, ctx.sorted_dict("spends", ttl="1 hour")), "kind": "alert"})


class SpendingAlert(SpendAlert):
    """SpendAlert after a refactor renamed its class."""


def _shape_v2(value, version):
    return {"amount": value, "merchant": None}


class WindowAlert(Operator):
    """The variable renamed to ``window`` (declared), its values upgraded to dicts."""
    state_vars = {"window": StateVar("sorted_dict", ttl="1 hour", renamed_from="spends", version=2,
                                     upgrade=_shape_v2)}

    def on_event(self, key, row, ctx):
        s = ctx.state("window")
        if not s:
            ctx.register_event_timer(ctx.event_time + DELAY)
        s[row["v"]] = {"amount": float(row["v"]), "merchant": row["k"]}
        assert all(isinstance(v, dict) for v in s.values())
        ctx.emit({**_alert_rows(key, s), "kind": "row"})

    def on_timer(self, key, timer, ctx):
        ctx.emit({**_alert_rows(key, ctx.state("window")), "kind": "alert"})


class Model:
    """What the operators above emit: a row per event, an alert once the watermark (the
    largest event time of the batches before) passes a key's first event + DELAY."""

    def __init__(self) -> None:
        self.spends: dict = {}
        self.timers: dict = {}
        self.watermark = None

    def batch(self, rows: list) -> list:
        out = []
        for r in sorted(rows, key=lambda r: (r["k"], r["ts"])):
            s = self.spends.setdefault(r["k"], {})
            ts = int((r["ts"] - at(0)).total_seconds() * 1000)
            if not s:
                self.timers[r["k"]] = ts + DELAY
            s[r["v"]] = float(r["v"])
            out.append({"k": r["k"], "kind": "row", "n": len(s), "total": float(sum(s.values()))})
        if self.watermark is not None:
            for k, t in sorted(self.timers.items(), key=lambda kv: (kv[1], kv[0])):
                if t <= self.watermark:
                    s = self.spends[k]
                    out.append({"k": k, "kind": "alert", "n": len(s), "total": float(sum(s.values()))})
                    del self.timers[k]
        times = [int((r["ts"] - at(0)).total_seconds() * 1000) for r in rows]
        if times:
            self.watermark = max(times + ([self.watermark] if self.watermark is not None else []))
        return out


def _canon(rows: list) -> list:
    return sorted((r["k"], r["kind"], r["n"], r["total"]) for r in rows)


class Query:
    """One streaming query restarted with new code: its source, checkpoint and state."""

    def __init__(self, spark, tmp_path) -> None:
        self.spark, self.tmp = spark, tmp_path
        self.src, self.cp, self.state, self.out = (tmp_path / "src", tmp_path / "cp", str(tmp_path / "state"),
                                                   tmp_path / "out")
        self.model = Model()
        self.batches = 0
        self.seen = 0

    def add(self, rows: list) -> None:
        write_batch_files(self.src, [rows], start=self.batches)
        self.batches += 1

    def run(self, operator, **kw):
        df = apply_operator(read_stream(self.spark, self.src), operator, "k", output_schema=SCHEMA,
                            event_time="ts", state=self.state, **kw)
        return run_stream(df, self.out, self.cp)

    def new_output(self) -> dict:
        got = read_sink(self.out)
        new = {b: rows for b, rows in got.items() if b >= self.seen}
        self.seen = max(got, default=-1) + 1
        return new

    def checkpoints(self) -> dict:
        store = dkv.open_store(self.state)
        return {i: [c.epoch for c in dkv.list_checkpoints(store, i)] for i in dkv.instances(store)}


def _rows(b: int, keys="abc") -> list:
    return [{"k": k, "ts": at(b * 2000 + i), "v": b * 10 + i} for i, k in enumerate(keys)]


def _fails(q: Query, operator, *patterns, **kw) -> str:
    """Run the query with ``operator`` and expect it to stop with a StateMismatchError whose
    message has ``patterns``, having written no state."""
    before = q.checkpoints()
    with pytest.raises(Exception) as e:
        q.run(operator, **kw)
    msg = str(e.value)
    assert "StateMismatchError" in msg, msg[:2000]
    for p in patterns:
        assert p in msg, (p, msg[:3000])
    assert q.checkpoints() == before, "state was written before the error"
    return msg


def test_renaming_an_operator_class_in_a_running_query(utc_spark, tmp_path, capsys):
    q = Query(utc_spark, tmp_path)
    for b in range(2):
        q.add(_rows(b))
    q.run(SpendAlert())
    expected = [q.model.batch(_rows(b)) for b in range(2)]
    got = q.new_output()
    assert [_canon(got[b]) for b in range(2)] == [_canon(e) for e in expected]

    q.add(_rows(2))
    msg = _fails(q, SpendingAlert(), "'spendalert' (class", "SpendAlert), last checkpoint: batch 1",
                 "This run has instead: 'spendingalert'", "name='spendalert'", "retire=['spendalert']",
                 "python -m spark_ops retire")
    assert "spendingalert" not in [k for k in q.checkpoints()], msg

    q.run(SpendingAlert(), name="spendalert")                   # the way out: keep its identity
    assert _canon(q.new_output()[2]) == _canon(q.model.batch(_rows(2)))
    q.add(_rows(3))
    q.run(SpendAlert())                                         # revert the rename
    assert _canon(q.new_output()[3]) == _canon(q.model.batch(_rows(3)))
    assert all(eps[-2:] == [2, 3] for eps in q.checkpoints().values())     # no batch skipped
    assert cli(["operators", q.state]) == 0
    listing = capsys.readouterr().out
    assert "spendalert" in listing and "active" in listing and "test_evolution_spark.SpendAlert" in listing


@pytest.mark.slow
def test_each_change_of_an_operators_code_across_restarts(utc_spark, tmp_path, caplog, capsys):
    """The matrix of issue 31: a declared rename with an upgrade of the values' shape, a
    rollback to the previous code, a variable dropped without and with a declaration, a
    changed kind with a migration, an operator added to the query and one removed (retired,
    purged), each across a restart of one query."""
    q = Query(utc_spark, tmp_path)
    for b in range(2):
        q.add(_rows(b))
    q.run(SpendAlert(), name="alerts")
    got = q.new_output()
    for b in range(2):
        assert _canon(got[b]) == _canon(q.model.batch(_rows(b)))

    # The variable renamed and its values' shape changed, both declared: carried over. (A
    # copy of the query's checkpoint is kept before the deploy, as the guide says.)
    shutil.copytree(q.cp, tmp_path / "cp-before-window")
    before_window = copy.deepcopy(q.model)
    q.add(_rows(2))
    q.run(WindowAlert(), name="alerts")
    assert _canon(q.new_output()[2]) == _canon(q.model.batch(_rows(2)))

    # Rolling back to the previous code: refused, naming the rename.
    q.add(_rows(3))
    _fails(q, SpendAlert(), "'spends'", "renamed 'spends' to 'window' in batch 2", "older than its state",
           name="alerts")
    q.run(WindowAlert(), name="alerts")
    assert _canon(q.new_output()[3]) == _canon(q.model.batch(_rows(3)))

    # A real rollback: the checkpoint copy restored, the previous code re-runs batches 2 and 3
    # from the state of batch 1 (retained), from before the migration.
    shutil.rmtree(q.cp)
    shutil.copytree(tmp_path / "cp-before-window", q.cp)
    q.run(SpendAlert(), name="alerts")
    again = read_sink(q.out)
    rolled = copy.deepcopy(before_window)
    assert [_canon(again[b]) for b in (2, 3)] == [_canon(rolled.batch(_rows(b))) for b in (2, 3)]
    # ... and the migration again, forward.
    q.add(_rows(4))
    q.run(WindowAlert(), name="alerts")
    got = read_sink(q.out)
    assert _canon(got[4]) == _canon(q.model.batch(_rows(4)))
    q.seen = 5

    # A variable removed from the declarations without saying so: refused; dropped: gone.
    class NoWindow(Operator):
        state_vars = {"n": StateVar("value", default=0)}

        def on_event(self, key, row, ctx):
            n = ctx.state("n")
            n.value += 1
            ctx.emit({"k": key, "kind": "count", "n": n.value, "total": 0.0})

    q.add(_rows(5))
    _fails(q, NoWindow(), "'window' (sorted_dict) is in the state but not in state_vars", "StateVar.dropped()",
           name="alerts")
    NoWindow.state_vars = {"n": StateVar("value", default=0), "window": StateVar.dropped()}
    q.run(NoWindow(), name="alerts")
    got = q.new_output()[5]
    assert sorted((r["k"], r["kind"], r["n"]) for r in got) == [("a", "count", 1), ("b", "count", 1),
                                                                ("c", "count", 1)]

    # A variable whose kind changed: refused without a migration; a value becomes a dict of
    # its history through migrate=.
    class Counts(Operator):
        state_vars = {"n": StateVar("dict"), "window": StateVar.dropped()}

        def on_event(self, key, row, ctx):
            d = ctx.state("n")
            d[str(row["v"])] = 1
            ctx.emit({"k": key, "kind": "count", "n": len(d), "total": float(d.get("before", 0))})

    q.add(_rows(6))
    _fails(q, Counts(), "'n' is stored as a value and declared a dict: add migrate=", name="alerts")
    Counts.state_vars = {"n": StateVar("dict", migrate=lambda old: {"before": old}), "window": StateVar.dropped()}
    q.run(Counts(), name="alerts")
    got = q.new_output()[6]
    assert sorted((r["k"], r["n"], r["total"]) for r in got) == [("a", 2, 1.0), ("b", 2, 1.0), ("c", 2, 1.0)]

    # An operator added to the query starts empty, and says so; the first keeps its state.
    class Total(Operator):
        def on_event(self, key, row, ctx):
            t = ctx.value("t", default=0.0)
            t.value += row["n"]
            ctx.emit({"k": key, "kind": "total", "n": 0, "total": t.value})

    def chained(first):
        df = apply_operator(read_stream(utc_spark, q.src), first, "k", output_schema=SCHEMA, event_time="ts",
                            state=q.state, name="alerts")
        return apply_operator(df, Total(), "k", output_schema=SCHEMA, state=q.state, name="total")

    q.add(_rows(7))
    with caplog.at_level(logging.WARNING, logger="spark_ops._identity"):
        run_stream(chained(Counts()), q.out, q.cp)
    assert "operator 'total' is new to query" in caplog.text and "starts with empty state" in caplog.text
    got = q.new_output()[7]
    assert sorted((r["k"], r["total"]) for r in got) == [("a", 3.0), ("b", 3.0), ("c", 3.0)]

    # The operator removed again: refused until retired; retired, it stays until purged.
    q.add(_rows(8))
    _fails(q, Counts(), "'total' (class", "last checkpoint: batch 7", "retire=['total']", name="alerts")
    q.run(Counts(), name="alerts", retire=["total"])
    assert sorted((r["k"], r["n"]) for r in q.new_output()[8]) == [("a", 4), ("b", 4), ("c", 4)]
    assert cli(["operators", q.state, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"status": "retired"' in out and '"operator": "total"' in out
    assert cli(["vars", q.state]) == 0
    out = capsys.readouterr().out
    assert "dropped in batch 5" in out and "declared" in out
    assert cli(["purge", q.state, "total"]) == 0
    capsys.readouterr()
    assert not [i for i in q.checkpoints() if "/total/" in i]
    # The state data source lists the same variables.
    spark_ops.register_datasource(utc_spark)
    vars_ = utc_spark.read.format("objectspace").option("variables", True).load(q.state).collect()
    assert {(r.operator, r.variable): r.status for r in vars_}[("alerts", "n")] == "declared"


def test_an_undeclared_variable_rename_leaves_an_orphan_that_the_tools_show(utc_spark, tmp_path, capsys):
    q = Query(utc_spark, tmp_path)
    q.add(_rows(0))
    q.run(SpendAlert())

    class Renamed(SpendAlert):
        def on_event(self, key, row, ctx):
            s = ctx.sorted_dict("window")
            s[row["v"]] = float(row["v"])
            ctx.emit({**_alert_rows(key, s), "kind": "row"})

        def on_timer(self, key, timer, ctx):
            pass

    q.add(_rows(1))
    q.run(Renamed(), name="spendalert")
    assert cli(["vars", q.state, "--json"]) == 0
    import json
    rows = {r["variable"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["spends"]["objects"] == 3 and rows["spends"]["bytes"] > 0
    assert rows["spends"]["status"].startswith("not used by the latest run (since batch 1")
    assert rows["window"]["status"] == "in use" and rows["window"]["objects"] == 3


@pytest.mark.slow
def test_the_offline_path_rekeys_a_stopped_querys_state(utc_spark, tmp_path):
    """A change the declarations cannot express (the key column changes): the stopped query's
    state is read through the state data source, transformed per key with Spark, and seeds a
    new query (a new checkpoint) through initial_state=; a model checks the new query's rows."""
    from pyspark.sql import functions as F
    q = Query(utc_spark, tmp_path)
    for b in range(2):
        q.add(_rows(b, keys="aAb"))
    q.run(SpendAlert())
    # Offline: the old amounts by user, re-keyed case-insensitively (a and A are one user now).
    spark_ops.register_datasource(utc_spark)
    old = (utc_spark.read.format("objectspace").load(q.state).filter("operator = 'spendalert' AND object = 'spends'")
           .select(F.upper(F.get_json_object("key", "$")).alias("k"), F.col("slot").cast("long").alias("v"),
                   F.col("value").cast("double").alias("amount")))
    model: dict = {}
    for r in old.collect():
        model.setdefault(r.k, {})[r.v] = r.amount
    assert sorted(model) == ["A", "B"] and len(model["A"]) == 4

    class UpperAlert(Operator):
        def on_initial_state(self, key, row, ctx):
            ctx.sorted_dict("spends")[row["v"]] = row["amount"]

        def on_event(self, key, row, ctx):
            s = ctx.sorted_dict("spends")
            s[row["v"]] = float(row["v"])
            ctx.emit({**_alert_rows(key, s), "kind": "row"})

    src2 = tmp_path / "src2"
    write_batch_files(src2, [[{"k": "A", "ts": at(10_000), "v": 100}, {"k": "B", "ts": at(10_001), "v": 101}]])
    new = apply_operator(read_stream(utc_spark, src2), UpperAlert(), "k", output_schema=SCHEMA, event_time="ts",
                         state=str(tmp_path / "state-v2"), initial_state=old)
    run_stream(new, tmp_path / "out2", tmp_path / "cp2")
    got = read_sink(tmp_path / "out2")[0]
    for k, v in (("A", 100), ("B", 101)):
        model[k][v] = float(v)
    assert _canon(got) == _canon([{"k": k, "kind": "row", "n": len(model[k]), "total": sum(model[k].values())}
                                  for k in ("A", "B")])
