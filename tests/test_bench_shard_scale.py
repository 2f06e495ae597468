"""benchmarks/shard_scale.py: the same workload handed to the shard as events (the runtime's
own entry) and as a shard host's Spark task (Arrow rows through run_task) emits what the
model says, the same items either way."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import shard_scale  # noqa: E402


def _run(tmp_path, *extra):
    ns = shard_scale.options(keys=600, count=5, batches=4, warmup=1, dir=str(tmp_path), quiet=True,
                             host="--host" in extra)
    return shard_scale.run(ns)


def test_a_host_task_and_the_events_emit_the_same_items(tmp_path):
    events_run, host_run = _run(tmp_path / "events"), _run(tmp_path / "host", "--host")
    events, host = events_run["summary"], host_run["summary"]
    assert events["output_ok"] and host["output_ok"]
    assert events["emitted_items"] == host["emitted_items"] == events["expected_items"] > 0
    assert host["shard_keys"] == events["shard_keys"]
    # a host's batches report the shard's own figures (the record it wrote), as the events' do
    for field in ("dirty_slots", "objects_evicted"):
        got = [b[field] for b in host_run["batches"]]
        assert got == [b[field] for b in events_run["batches"]] and None not in got, field


def test_the_host_table_holds_the_events_rows():
    mine = shard_scale.shard_keys(50, 0, 2, 256)
    for batch in (0, 1):
        ev = shard_scale.BatchEvents(batch, mine, 5, 2, True, 100)
        rows = [(kg, parts[0], row["ts"], row["seq"]) for chunk in ev for kg, parts, _, row in chunk]
        t = shard_scale.BatchTable(ev).table()
        from spark_ops._shards import KG
        got = list(zip(t.column(KG).to_pylist(), t.column("user").to_pylist(), t.column("ts").to_pylist(),
                       t.column("seq").to_pylist()))
        assert got == rows and len(t) == len(ev)
