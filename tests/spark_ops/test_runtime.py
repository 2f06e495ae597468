"""The runtime's rules, through OperatorHarness (no Spark): watermark, timers, late rows, keys,
re-runs, rescale without copying state, fencing of a stale worker, metrics."""
from __future__ import annotations

import datetime as dt
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

import dkv
from dkv.format import manifest as mf
from spark_ops import Context, Operator, _opened, read_metrics
from spark_ops.operators import Buffer, Delay, Timeout
from spark_ops.testing import OperatorHarness

from .models import BufferModel, by_key, run_model

HERE = Path(__file__).parent


class Probe(Operator):
    """Emits what each shard sees: one ``open`` row per shard and batch, one row per event and
    per timer. Registers an event timer at ts + 1000 for every row, and a processing-time
    timer when the row asks for one."""

    def open(self, ctx):
        ctx.emit({"kind": "open", "shard": ctx.shard, "batch": ctx.batch_id, "wm": ctx.watermark,
                  "pt": ctx.processing_time})

    def on_event(self, key, row, ctx):
        ctx.emit({"kind": "event", "key": key, "v": row.get("v"), "shard": ctx.shard})
        if ctx.event_time is not None:
            ctx.register_event_timer(ctx.event_time + 1000, name="e")
        if row.get("at") is not None:
            ctx.register_processing_timer(row["at"], name="p")

    def on_timer(self, key, timer, ctx):
        ctx.emit({"kind": "timer", "key": key, "time": timer.time, "name": timer.name, "tkind": timer.kind,
                  "shard": ctx.shard, "wm": ctx.watermark, "pt": ctx.processing_time})

    def close(self, ctx):
        ctx.emit({"kind": "close", "shard": ctx.shard, "batch": ctx.batch_id})


def kinds(out, kind):
    return [r for r in out if r["kind"] == kind]


# ------------------------------------------------------------------------- watermark and timers


def test_watermark_is_the_same_on_every_shard_and_lags_one_batch():
    h = OperatorHarness(Probe(), key="k", event_time="ts", watermark="2 seconds", partitions=4, key_groups=16)
    seen = []
    for b, rows in enumerate([[{"k": "a", "ts": 5_000}], [{"k": "b", "ts": 9_000}, {"k": "c", "ts": 1_000}], [],
                              [{"k": "d", "ts": 4_000}]]):
        out = h.run_batch(rows)
        opens = kinds(out, "open")
        assert sorted(o["shard"] for o in opens) == [0, 1, 2, 3]       # every shard runs every batch
        assert len({o["wm"] for o in opens}) == 1, opens
        seen.append(opens[0]["wm"])
    # batch b: max event time of batches < b, minus the delay; none in batch 0
    assert seen == [None, 3_000, 7_000, 7_000]


def test_event_timers_fire_in_shards_that_get_no_rows():
    h = OperatorHarness(Probe(), key="k", event_time="ts", partitions=4, key_groups=16)
    keys = [f"key{i}" for i in range(12)]
    out = h.run_batch([{"k": k, "ts": 1_000 + i} for i, k in enumerate(keys)])
    shards_of = {r["key"]: r["shard"] for r in kinds(out, "event")}
    assert len(set(shards_of.values())) >= 3
    h.run_batch([{"k": "key0", "ts": 50_000}])                 # watermark of the next batch: 50 s
    out = h.run_batch([])
    fired = {r["key"]: r for r in kinds(out, "timer")}
    assert set(fired) == set(keys)                              # every key's timer, in every shard
    assert all(fired[k]["shard"] == shards_of[k] for k in keys)
    assert all(fired[k]["time"] == 2_000 + i for i, k in enumerate(keys))
    # each shard fires its timers in due order
    for s in range(4):
        times = [r["time"] for r in kinds(out, "timer") if r["shard"] == s]
        assert times == sorted(times)


def test_hooks_run_open_events_timers_close_in_that_order():
    h = OperatorHarness(Probe(), key="k", event_time="ts", partitions=1)
    h.run_batch([{"k": "a", "ts": 1_000, "v": 1}])
    out = h.run_batch([{"k": "b", "ts": 5_000, "v": 2}], watermark=3_000)
    assert [r["kind"] for r in out] == ["open", "event", "timer", "close"]
    assert out[2]["key"] == "a" and out[2]["time"] == 2_000 and out[2]["wm"] == 3_000


def test_processing_time_timers_fire_when_the_previous_batch_time_passes_them():
    h = OperatorHarness(Probe(), key="k", partitions=2)
    out = h.run_batch([{"k": "a", "at": 1_500, "v": 0}, {"k": "b", "at": 3_000, "v": 1}], batch_time=1_000)
    assert {o["pt"] for o in kinds(out, "open")} == {1_000} and not kinds(out, "timer")   # its own clock
    out = h.run_batch([], batch_time=2_000)          # processing time of this batch: 1 000 (the previous)
    assert {o["pt"] for o in kinds(out, "open")} == {1_000} and not kinds(out, "timer")
    out = h.run_batch([], batch_time=3_000)          # processing time 2 000: a's timer
    assert [(r["key"], r["tkind"], r["time"]) for r in kinds(out, "timer")] == [("a", "processing", 1_500)]
    out = h.run_batch([], batch_time=4_000)          # processing time 3 000: b's timer (due <= time)
    assert [(r["key"], r["time"]) for r in kinds(out, "timer")] == [("b", 3_000)]
    assert not kinds(h.run_batch([], batch_time=9_000), "timer")      # fired once


def test_processing_time_never_goes_back_when_a_clock_does():
    """A shard's clock that steps back (NTP) does not move processing time back."""
    h = OperatorHarness(Probe(), key="k", partitions=2)
    h.run_batch([], batch_time=5_000)
    h.run_batch([], batch_time=3_000)               # the clock stepped back 2 s
    out = h.run_batch([], batch_time=6_000)
    assert {o["pt"] for o in kinds(out, "open")} == {5_000}
    out = h.run_batch([])
    assert {o["pt"] for o in kinds(out, "open")} == {6_000}


def test_the_first_batch_has_a_processing_time_kept_for_every_shard_and_re_runs(tmp_path):
    """No batch before the first one left records: its processing time is its own clock,
    the same on every shard (those without rows too) and again when it is re-run."""
    h = OperatorHarness(Probe(), key="k", partitions=4, key_groups=16, state=str(tmp_path))
    out = h.run_batch([{"k": "a", "v": 0}], batch_time=7_000)
    assert len({r["shard"] for r in kinds(out, "event")}) == 1          # three shards without rows
    assert [(o["shard"], o["pt"]) for o in kinds(out, "open")] == [(s, 7_000) for s in range(4)]
    h.rerun_batch(0)                                # as after a crash: another clock, the same time
    out = h.run_batch([{"k": "a", "v": 0}], batch_time=9_000)
    assert {o["pt"] for o in kinds(out, "open")} == {7_000}
    out = h.run_batch([], batch_time=10_000)
    assert {o["pt"] for o in kinds(out, "open")} == {9_000}             # the re-run's clock: it ran then
    assert [m["processing_time"] for m in h.metrics] == [7_000] * 8 + [9_000] * 4
    # Without batch_time the harness's clock reads 0: a number all the same.
    assert {o["pt"] for o in kinds(OperatorHarness(Probe(), key="k").run_batch([]), "open")} == {0}


def test_late_rows_are_dropped_and_counted():
    h = OperatorHarness(Probe(), key="k", event_time="ts", watermark=1_000, partitions=2)
    h.run_batch([{"k": "a", "ts": 10_000, "v": 0}])
    out = h.run_batch([{"k": "a", "ts": 8_999, "v": 1}, {"k": "b", "ts": 9_000, "v": 2}, {"k": "c", "ts": 500, "v": 3}])
    assert sorted(r["v"] for r in kinds(out, "event")) == [2]          # watermark 9 000: < 9 000 is late
    assert sum(m["late_rows"] for m in h.metrics if m["batch"] == 1) == 2


def test_rows_with_a_null_key_are_dropped():
    h = OperatorHarness(Probe(), key=["k", "j"], partitions=2)
    out = h.run_batch([{"k": "a", "j": None, "v": 0}, {"k": None, "j": 1, "v": 1}, {"k": "a", "j": 1, "v": 2}])
    assert [(r["key"], r["v"]) for r in kinds(out, "event")] == [(("a", 1), 2)]


@pytest.mark.parametrize("key", ["text", 42, -7, 2.5, True, b"\x00raw", dt.datetime(2024, 5, 6, 7, 8, 9, 123000),
                                 dt.date(2024, 2, 29), ("a", 1)])
def test_timers_hand_back_the_key_exactly(key):
    cols = ["k", "j"] if isinstance(key, tuple) else ["k"]
    row = dict(zip(cols, key if isinstance(key, tuple) else (key,))) | {"ts": 1_000}
    h = OperatorHarness(Probe(), key=cols, event_time="ts", partitions=2)
    h.run_batch([row])
    h.restart()                                  # the key comes back from dkv, not from memory
    out = h.run_batch([], watermark=5_000)
    (fired,) = kinds(out, "timer")
    assert fired["key"] == key and type(fired["key"]) is type(key)


# ------------------------------------------------------------------------- re-runs, restarts


def test_rerun_of_the_first_batch_after_a_rescale_gives_the_same_output():
    """Spark may re-run a batch under the restarted query's plan: rescale, crash, re-run."""
    rows = lambda b: [{"k": k, "v": b} for k in "abcdefg"]   # noqa: E731
    h = OperatorHarness(Buffer(count=3, key_columns=("k",)), key="k", partitions=2, key_groups=16)
    expected = run_model(BufferModel(["k"], count=3), [rows(b) for b in range(12)], keys=["k"])
    for b in range(3):
        assert by_key(h.run_batch(rows(b)), "k") == by_key(expected[b], "k")
    for n in (3, 1, 2):
        b = h.batch_id
        h.rescale(n)
        first = h.run_batch(rows(b))
        h.rerun_batch(b)
        assert by_key(h.run_batch(rows(b)), "k") == by_key(first, "k") == by_key(expected[b], "k")
        h.rescale(n + 1)
        h.rerun_batch(b)                         # and again under yet another layout
        assert by_key(h.run_batch(rows(b)), "k") == by_key(expected[b], "k")
        assert by_key(h.run_batch(rows(b + 1)), "k") == by_key(expected[b + 1], "k")


def test_rerun_without_its_checkpoint_raises_instead_of_starting_empty(tmp_path):
    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", partitions=1, key_groups=4,
                        state=str(tmp_path))
    for b in range(6):
        h.run_batch([{"k": "a", "v": b}])
    # retain=3: the clean-up after checkpoint 5 (which drops epoch 2) runs on the upload
    # thread after wait() returned and may not be done; the one after checkpoint 4 is.
    epochs = [c.epoch for c in dkv.list_checkpoints(str(tmp_path), "L000000000000-n00001/p00000")]
    assert epochs in ([3, 4, 5], [2, 3, 4, 5])
    h.rerun_batch(1)                             # needs epoch 0, which dkv no longer retains
    with pytest.raises(dkv.DkvError):
        h.run_batch([{"k": "a", "v": 1}])


def test_changing_key_groups_on_restart_is_a_clear_error(tmp_path):
    rows = [{"k": k, "v": 0} for k in "abcdefgh"]
    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", partitions=2, key_groups=32, state=str(tmp_path))
    h.run_batch(rows)
    h.close()
    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", partitions=2, key_groups=16, state=str(tmp_path))
    h.batch_id = 1
    with pytest.raises(ValueError, match=r"key_groups.*32|32.*key_groups"):
        h.run_batch(rows)


def test_harness_rejects_more_partitions_than_key_groups():
    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", partitions=2, key_groups=4)
    h.run_batch([{"k": "a", "v": 0}])
    with pytest.raises(ValueError, match="partitions"):
        h.rescale(5)
        h.run_batch([{"k": "a", "v": 1}])


def test_state_survives_in_a_local_folder_across_harnesses(tmp_path):
    """A new process (here: a new harness after dropping the cache) continues from the folder."""
    batches = [[{"k": k, "v": b} for k in "abc"] for b in range(6)]
    expected = run_model(BufferModel(["k"], count=4, skip=3), batches, keys=["k"])
    h = OperatorHarness(Buffer(count=4, skip=3, key_columns=("k",)), key="k", state=str(tmp_path), partitions=2)
    for b in range(3):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")
    h.close()
    h = OperatorHarness(Buffer(count=4, skip=3, key_columns=("k",)), key="k", state=str(tmp_path), partitions=3)
    h.batch_id = 3
    for b in range(3, 6):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")


# ------------------------------------------------------------------------- rescale shares files


def _manifest_paths(root: Path, instance: str) -> set[str]:
    """Objects referenced by the newest manifest of ``instance`` (documented manifest format)."""
    (info,) = dkv.list_checkpoints(str(root), instance)[-1:]
    m = mf.decode((root / info.name).read_bytes(), info.name)
    return {t.path for t in m.tables()} | {f"{r.ns}/wal" for r in m.wal}


def test_rescale_references_the_old_layouts_files_without_copying(tmp_path):
    batches = [[{"k": f"k{i}", "v": b, "pad": "x" * 200} for i in range(30)] for b in range(6)]
    expected = run_model(BufferModel(["k"], count=6), batches, keys=["k"])
    h = OperatorHarness(Buffer(count=6, key_columns=("k",)), key="k", partitions=2, key_groups=16,
                        state=str(tmp_path), dkv_options=dict(memtable_bytes=8 << 10, flush_segments=2))
    for b in range(4):
        h.run_batch(batches[b])
    h.rescale(3)
    assert h.run_batch(batches[4]) == []
    h.close()
    layouts = sorted(p.name for p in (tmp_path / "layouts").iterdir())
    assert layouts == ["L000000000000-n00002", "L000000000004-n00003"]
    old_files = {p.read_bytes() for p in (tmp_path / layouts[0]).rglob("*") if p.is_file() and "/sst/" in str(p)}
    assert old_files, "the old layout should have flushed SSTs (small memtable)"
    for s in range(3):
        refs = _manifest_paths(tmp_path, f"{layouts[1]}/p{s:05d}")
        assert any(r.startswith(layouts[0] + "/") for r in refs), refs   # the old layout's files, in place
    copies = [p for p in (tmp_path / layouts[1]).rglob("*") if p.is_file() and p.read_bytes() in old_files]
    assert not copies, f"state files copied into the new layout: {copies}"
    # and every key's state is there: the sixth row completes each buffer
    h = OperatorHarness(Buffer(count=6, key_columns=("k",)), key="k", partitions=1, key_groups=16,
                        state=str(tmp_path))
    h.batch_id = 5
    out = h.run_batch(batches[5])
    assert len(out) == 30 and by_key(out, "k") == by_key(expected[5], "k")


def test_rescale_keeps_every_key_state_through_2_3_1(tmp_path):
    rng = random.Random(7)
    batches = [[{"k": rng.choice("abcdefghij"), "v": b * 10 + i} for i in range(6)] for b in range(12)]
    expected = run_model(BufferModel(["k"], count=4, skip=3), batches, keys=["k"])
    h = OperatorHarness(Buffer(count=4, skip=3, key_columns=("k",)), key="k", partitions=2, key_groups=32,
                        state=str(tmp_path))
    for b, rows in enumerate(batches):
        if b in (4, 8):
            h.rescale({4: 3, 8: 1}[b])
        assert by_key(h.run_batch(rows), "k") == by_key(expected[b], "k"), f"batch {b}"


# ------------------------------------------------------------------------- a stale worker is fenced


class Worker:
    def __init__(self, state: str, count: int, partitions: int):
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.spark_ops.harness_worker", state, str(count),
                                      str(partitions)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=str(HERE.parent.parent))

    def run(self, batch: int, rows: list) -> list:
        self.proc.stdin.write(json.dumps({"cmd": "run", "batch": batch, "rows": rows}) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        assert "error" not in reply, reply["error"]
        return reply["out"]

    def close(self):
        self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
        self.proc.stdin.close()
        self.proc.wait(30)


def test_shards_hopping_between_workers_with_reruns_match_the_model(tmp_path):
    """Two worker processes keep their own caches; each batch runs in one of them (as shards hop
    between Spark's Python workers) and some batches run again in the other one (a retry). A
    worker whose cached state is stale must notice (epoch check, or fencing) and reopen."""
    rng = random.Random(11)
    batches = [[{"k": rng.choice("abcd"), "v": b * 10 + i} for i in range(3)] for b in range(14)]
    expected = run_model(BufferModel(["k"], count=2), batches, keys=["k"])
    workers = [Worker(str(tmp_path), 2, 2), Worker(str(tmp_path), 2, 2)]
    try:
        plan = [0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0]
        for b, w in enumerate(plan):
            out = workers[w].run(b, batches[b])
            assert by_key(out, "k") == by_key(expected[b], "k"), f"batch {b} in worker {w}"
            if b % 3 == 2:      # the other worker runs the same batch again; its attempt wins
                again = workers[1 - w].run(b, batches[b])
                assert by_key(again, "k") == by_key(expected[b], "k"), f"re-run of batch {b}"
    finally:
        for w in workers:
            w.close()


# ------------------------------------------------------------------------- metrics


def test_metrics_are_recorded_per_batch_and_shard(tmp_path):
    h = OperatorHarness(Delay(1_000), key="k", event_time="ts", partitions=2, state=str(tmp_path))
    h.run_batch([{"k": k, "ts": 1_000} for k in "abcdef"])
    h.run_batch([{"k": "a", "ts": 9_000}])
    h.run_batch([])
    recs = read_metrics(str(tmp_path))
    assert [(r["batch"], r["shard"]) for r in recs] == [(b, s) for b in range(3) for s in range(2)]
    assert sum(r["rows"] for r in recs) == 7
    assert sum(r["timers_fired"] for r in recs if r["batch"] == 2) == 6
    assert sum(r["emitted"] for r in recs if r["batch"] == 2) == 6
    for r in recs:
        for field in ("dirty_slots", "checkpoint_bytes", "state_bytes", "late_rows", "duration_ms", "commit_ms",
                      "save_ms", "write_ms", "checkpoint_ms"):
            assert isinstance(r[field], (int, float)) and r[field] >= 0, (field, r)
        # the commit's parts add up to (about: rounding) the commit, and it is part of the duration
        assert r["save_ms"] + r["write_ms"] + r["checkpoint_ms"] <= r["commit_ms"] + 0.3 <= r["duration_ms"] + 0.3
    assert all(r["checkpoint_bytes"] > 0 for r in recs if r["batch"] == 0 and r["rows"])
    # One object per shard and batch holds both the watermark (name) and the metrics (body).
    names = sorted(n for n, _ in dkv.open_store(str(tmp_path)).list(""))
    assert not [n for n in names if "metrics" in n.split("/")]
    from spark_ops import _watermark
    assert len([n for n in names if _watermark.parse_name(n)]) == len(recs) == 6


def test_metrics_written_by_older_versions_still_read(tmp_path):
    """States written before the metrics moved into the watermark records kept them as
    metrics/<batch>/p<s>-n<n> objects, and their watermark records had empty bodies."""
    import json
    h = OperatorHarness(Delay(1_000), key="k", event_time="ts", partitions=2, state=str(tmp_path))
    h.run_batch([{"k": "a", "ts": 1_000}])
    store = dkv.open_store(str(tmp_path))
    wm = next(n for n, _ in store.list("") if "wm" in n.split("/"))
    root = wm[:wm.index("wm/")]
    store.put(f"{root}metrics/{7:012d}/p00001-n00002", json.dumps({"batch": 7, "shard": 1, "rows": 3}).encode())
    store.put(f"{root}wm/{8:012d}/00002-00000-5-0", b"")
    recs = read_metrics(str(tmp_path))
    assert [(r["batch"], r["shard"]) for r in recs] == [(0, 0), (0, 1), (7, 1)]
    assert recs[-1]["rows"] == 3 and recs[-1]["operator"] == recs[0]["operator"]


class CrashingBuffer(Buffer):
    """Buffer that raises in ``close`` of one (batch, shard) once: that shard's batch fails before its
    checkpoint while the shards before it have checkpointed (a crash in the middle of a batch)."""

    crash_at = None

    def close(self, ctx):
        if self.crash_at == (ctx.batch_id, ctx.shard):
            self.crash_at = None
            raise RuntimeError("simulated crash")


def test_crash_in_the_first_batch_after_a_rescale_then_back_and_forth(tmp_path):
    """Rescale 2 -> 3, crash in batch 3 after shards 0 and 1 of the new layout checkpointed; restart
    with 2 partitions (batch 3 runs again), then with 3 again at batch 4."""
    batches = [[{"k": k, "v": b} for k in "abcdefghijkl"] for b in range(8)]
    expected = run_model(BufferModel(["k"], count=3), batches, keys=["k"])
    op = CrashingBuffer(count=3, key_columns=("k",))
    h = OperatorHarness(op, key="k", partitions=2, key_groups=16, state=str(tmp_path))
    for b in range(3):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")
    h.rescale(3)
    op.crash_at = (3, 2)
    with pytest.raises(RuntimeError, match="simulated crash"):
        h.run_batch(batches[3])
    h.rescale(2)
    h.rerun_batch(3)
    assert by_key(h.run_batch(batches[3]), "k") == by_key(expected[3], "k")
    h.rescale(3)
    for b in range(4, 8):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k"), f"batch {b}"


def test_two_crashes_across_a_rescale_resume_every_shard_at_the_same_batch(tmp_path):
    """3 shards; batch 6 crashes in shard 1 (shard 0 has checkpointed it); restart with 1 shard runs 6,
    then batch 7 crashes; restart with 3 shards runs 7: every shard must start from batch 6."""
    batches = [[{"k": k, "v": b} for k in "abcdefghijkl"] for b in range(10)]
    expected = run_model(BufferModel(["k"], count=4, skip=3), batches, keys=["k"])
    op = CrashingBuffer(count=4, skip=3, key_columns=("k",))
    h = OperatorHarness(op, key="k", partitions=3, key_groups=16, state=str(tmp_path))
    for b in range(6):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")
    op.crash_at = (6, 1)
    with pytest.raises(RuntimeError):
        h.run_batch(batches[6])
    h.rescale(1)
    h.rerun_batch(6)
    assert by_key(h.run_batch(batches[6]), "k") == by_key(expected[6], "k")
    op.crash_at = (7, 0)
    with pytest.raises(RuntimeError):
        h.run_batch(batches[7])
    h.rescale(3)
    h.rerun_batch(7)
    for b in range(7, 10):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k"), f"batch {b}"


def test_operators_emit_timezone_aware_utc_datetimes():
    """Output timestamps are instants: timezone-aware UTC datetimes (Context.to_datetime)."""
    utc = dt.timezone.utc
    h = OperatorHarness(Timeout(1_000, ("k",)), key="k", event_time="ts", partitions=1)
    h.run_batch([{"k": "a", "ts": dt.datetime(2024, 1, 1, 0, 0, 1)}])        # naive input: UTC
    (out,) = h.run_batch([], watermark=dt.datetime(2024, 1, 1, 1, tzinfo=utc))
    assert out["last_event"] == dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=utc)
    assert out["timeout_at"] == dt.datetime(2024, 1, 1, 0, 0, 2, tzinfo=utc)
    assert out["last_event"].utcoffset() == dt.timedelta(0)


def test_without_watermark_no_row_is_dropped_but_event_timers_still_fire():
    """Decision (bug file #15): event_time= without watermark= drops nothing as late (as Spark
    without withWatermark); the watermark still advances with the event times seen (delay 0),
    so event-time timers fire."""
    from spark_ops.operators import Buffer, Timeout

    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", event_time="ts", partitions=1, key_groups=4)
    assert h.run_batch([{"k": "a", "ts": 5000}]) == []
    out = h.run_batch([{"k": "b", "ts": 1000}, {"k": "b", "ts": 1001}])      # behind key a's time
    assert [[r["ts"] for r in o["items"]] for o in out] == [[1000, 1001]]
    assert h.metrics[-1]["late_rows"] == 0

    t = OperatorHarness(Timeout(100, ("k",)), key="k", event_time="ts", partitions=1, key_groups=4)
    t.run_batch([{"k": "a", "ts": 1000}])
    t.run_batch([{"k": "z", "ts": 2000}])
    assert [r["k"] for r in t.run_batch([])] == ["a"]      # watermark 2000 passed a's timer at 1100
    strict = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", event_time="ts", watermark=0,
                             partitions=1, key_groups=4)
    strict.run_batch([{"k": "a", "ts": 5000}])
    assert strict.run_batch([{"k": "b", "ts": 1000}, {"k": "b", "ts": 1001}]) == []
    assert strict.metrics[-1]["late_rows"] == 2


@pytest.mark.parametrize("heartbeat", [True, False], ids=["heartbeat", "idle"])
def test_a_heartbeat_row_without_a_key_advances_the_watermark_and_fires_timers(heartbeat):
    """Rows whose key is null are dropped, but their event times move the watermark: an idle
    stream with a heartbeat still times keys out; without one, nothing fires."""
    h = OperatorHarness(Timeout(5_000, ("k",)), key="k", event_time="ts", partitions=2, key_groups=16)
    assert h.run_batch([{"k": "a", "ts": 1_000}, {"k": "b", "ts": 2_000}]) == []
    beat = [{"k": None, "ts": 60_000}] if heartbeat else []
    assert h.run_batch(beat) == []                   # the watermark lags one batch
    out = h.run_batch([])
    if heartbeat:
        assert sorted((r["k"], r["timeout_at"]) for r in out) == [("a", Context.to_datetime(6_000)),
                                                                    ("b", Context.to_datetime(7_000))]
    else:
        assert out == []
    assert sum(m["rows"] for m in h.metrics) == 2     # the heartbeat row is not an event


class _CountingDb:
    """A dkv instance that counts range scans (TimerService.due skips them when it can)."""

    def __init__(self, db):
        self.db, self.scans = db, 0

    def scan(self, start, end):
        self.scans += 1
        return self.db.scan(start, end)

    def __getattr__(self, name):
        return getattr(self.db, name)


def test_timer_service_matches_a_model_and_skips_scans_when_nothing_can_be_due():
    from spark_ops._timers import EVENT_TIME, PROCESSING_TIME, TimerService
    rng = random.Random(7)
    db = _CountingDb(dkv.open("memory://timers", instance="t"))
    ts = TimerService(db, range(0, 4))
    model: set = set()
    for step in range(600):
        op = rng.random()
        kind = rng.choice((EVENT_TIME, PROCESSING_TIME))
        if op < 0.45:
            t = (kind, rng.randrange(0, 400), rng.randrange(4), (f"k{rng.randrange(5)}",), rng.choice(("", "x")))
            ts.register(t[2], kind, t[1], t[3], t[4])
            model.add(t)
        elif op < 0.6 and model:
            t = rng.choice(sorted(model))
            ts.delete(t[2], t[0], t[1], t[3], t[4])
            model.discard(t)
        elif op < 0.62:
            ts.forget()         # as after a refresh: the next due() must scan
        else:
            limit = rng.randrange(-10, 420)
            before = db.scans
            got = ts.due(kind, limit)
            want = sorted((d, kg, k, n) for (kd, d, kg, k, n) in model if kd == kind and d <= limit)
            assert sorted(got) == want, f"step {step}"
            assert [g[0] for g in got] == sorted(g[0] for g in got)     # due order
            if rng.random() < 0.7:      # fire them, as the runtime does
                for d, kg, k, n in got:
                    ts.delete(kg, kind, d, k, n)
                    model.discard((kind, d, kg, k, n))
            if not want and db.scans == before:
                continue                # skipped: nothing stored can be due
    # after firing everything up to a limit, asking again up to that limit does not scan
    ts.forget()
    for d, kg, k, n in ts.due(EVENT_TIME, 1000):
        ts.delete(kg, EVENT_TIME, d, k, n)
    assert ts.due(EVENT_TIME, 1000) == []
    before = db.scans
    assert ts.due(EVENT_TIME, 1000) == [] and ts.due(EVENT_TIME, 500) == []
    assert db.scans == before
    ts.register(1, EVENT_TIME, 700, ("late",), "")     # a new timer lowers the bound
    assert ts.due(EVENT_TIME, 800) == [(700, 1, ("late",), "")]


def test_struct_and_array_values_become_plain_python_values():
    """Struct, array and map columns become dicts and lists of plain Python values all the
    way down (the rows an operator sees, and state stores): no numpy scalars, arrays or
    pandas Timestamps; nested timestamps naive UTC, whatever the column's zone."""
    import decimal

    import pyarrow as pa

    from spark_ops._worker import _python_values
    py_ts = dt.datetime(2024, 3, 1, 12, 0, 0, 123456)
    aware = py_ts.replace(tzinfo=dt.timezone.utc)
    zoned = pa.timestamp("us", tz="America/New_York")
    cases = [   # (an Arrow column, what the operator must see)
        (pa.array([{"i": 1, "t": aware, "s": "x", "a": [1.5, 2.5], "inner": {"t2": aware, "n": None}}, None],
                  pa.struct([("i", pa.int32()), ("t", zoned), ("s", pa.string()), ("a", pa.list_(pa.float64())),
                             ("inner", pa.struct([("t2", zoned), ("n", pa.int64())]))])),
         [{"i": 1, "t": py_ts, "s": "x", "a": [1.5, 2.5], "inner": {"t2": py_ts, "n": None}}, None]),
        (pa.array([{"f": 2.5, "b": True, "n": 7, "d": decimal.Decimal("1.10")}],
                  pa.struct([("f", pa.float32()), ("b", pa.bool_()), ("n", pa.int8()), ("d", pa.decimal128(5, 2))])),
         [{"f": 2.5, "b": True, "n": 7, "d": decimal.Decimal("1.10")}]),
        (pa.array([[aware, None], [], None], pa.list_(zoned)), [[py_ts, None], [], None]),
        (pa.array([[1, 2]], pa.large_list(pa.int64())), [[1, 2]]),
        (pa.array([[("k", [3])]], pa.map_(pa.string(), pa.list_(pa.int64()))), [{"k": [3]}]),
        (pa.array([{"m": [("a", aware)]}], pa.struct([("m", pa.map_(pa.string(), zoned))])), [{"m": {"a": py_ts}}]),
        (pa.array([b"raw", None], pa.binary()), [b"raw", None]),
        (pa.array([dt.timedelta(seconds=3)], pa.duration("us")), [dt.timedelta(seconds=3)]),
    ]

    def types(x):
        if isinstance(x, dict):
            return {k: types(y) for k, y in x.items()}
        if isinstance(x, list):
            return [types(y) for y in x]
        return type(x)
    for given, want in cases:
        got = _python_values(pa.chunked_array([given]), False)
        assert got == want and types(got) == types(want), given     # same values, same types all the way down
    # a top-level timestamp column: aware UTC datetimes, equal instants one object
    got = _python_values(pa.chunked_array([pa.array([aware, aware, None], zoned)]), True)
    assert got == [aware, aware, None] and got[0] is got[1] and got[0].tzinfo == dt.timezone.utc


# ------------------------------------------------------------------------- output parts to a sink


def _events_for(n: int, groups: int = 8) -> list:
    rows = [(i % groups, (f"k{i:05d}",), None, {"k": f"k{i:05d}", "v": i}) for i in range(n)]
    return sorted(rows, key=lambda e: (e[0], e[1]))


def test_a_sink_gets_the_output_in_parts_while_the_batch_runs(tmp_path):
    """With convert and sink, the rows a chunk of events emitted go to the sink as one
    converted part once OUT_CHUNK of them wait, during the batch (a shard host sends them
    on); the returned list holds the rest, and parts plus rest are the output of the same
    batch run without a sink."""
    from spark_ops import _runtime
    from spark_ops._runtime import OUT_CHUNK, ShardSpec, run_shard_batch
    size = OUT_CHUNK + 76
    events = _events_for(2 * size + 500)
    chunks = tuple(events[i:i + size] for i in range(0, len(events), size))     # as EventChunks gives them
    parts, committed = [], []

    def sink(part):
        parts.append(part)
        committed.append((str(tmp_path / "a"), 0, 1) in _runtime._SHARDS)

    def run(state, sink):
        spec = ShardSpec(state=str(tmp_path / state), operator=Buffer(count=1, key_columns=("k",)), key_groups=8,
                         shards=1)
        return run_shard_batch(spec, 0, 0, chunks, convert=list, sink=sink)[0]
    rest = run("a", sink)
    assert [len(p) for p in parts] == [size, size] and not any(committed)
    assert [len(p) for p in rest] == [500]
    assert [r for p in parts + rest for r in p] == [r for p in run("b", None) for r in p]
    _opened.drop_cached()


def test_output_ms_is_the_outputs_conversion_and_the_commit_leaves_it_out(tmp_path):
    """The output's conversion (in parts during the batch, the rest while the checkpoint
    uploads) is reported as output_ms; commit_ms and checkpoint_ms leave out the part of it
    that ran between the commit's start and its end (a slow conversion used to show as a
    slow checkpoint)."""
    import time as _time

    from spark_ops._runtime import OUT_CHUNK, ShardSpec, run_shard_batch
    calls = []

    def slow(rows):             # 40 ms a conversion, whatever the machine
        calls.append(len(rows))
        _time.sleep(0.04)
        return list(rows)
    spec = ShardSpec(state=str(tmp_path / "s"), operator=Buffer(count=1, key_columns=("k",)), key_groups=8,
                     shards=1)
    events = _events_for(OUT_CHUNK + 10)
    chunks = (events[:OUT_CHUNK], events[OUT_CHUNK:])
    out, m = run_shard_batch(spec, 0, 0, chunks, convert=slow)
    assert calls == [OUT_CHUNK, 10] and sum(map(len, out)) == OUT_CHUNK + 10
    assert m["output_ms"] >= 80
    # the end's conversion (40 ms) ran inside commit..finish, and is not counted there
    assert m["save_ms"] + m["write_ms"] + m["checkpoint_ms"] <= m["commit_ms"] + 0.3
    assert m["commit_ms"] + m["output_ms"] <= m["duration_ms"] + 0.3
    out, m = run_shard_batch(spec, 1, 0, [], convert=slow)      # nothing emitted: one (empty) conversion
    assert m["output_ms"] >= 40 and m["commit_ms"] + m["output_ms"] <= m["duration_ms"] + 0.3
    _opened.drop_cached()


def test_a_batch_fenced_after_a_part_went_out_fails_instead_of_running_again(tmp_path, monkeypatch):
    """A fenced batch runs again (reopened at the previous checkpoint), unless some of its
    output already went to the sink: then the FencedError goes up (the Spark task fails and
    Spark runs it again), so no row is sent twice."""
    from spark_ops import _runtime
    from spark_ops._runtime import ShardSpec, run_shard_batch
    real, calls = _runtime._process, []

    def fenced_once(st, *args):
        calls.append(1)
        if len(calls) == 1:
            if st.sink is not None:
                st.sink(["a part"])
                st.sent += 1
            raise dkv.FencedError("another writer took the shard")
        return real(st, *args)
    monkeypatch.setattr(_runtime, "_process", fenced_once)
    for state, sink in (("no-sink", None), ("sink", [].append)):
        calls.clear()
        spec = ShardSpec(state=str(tmp_path / state), operator=Buffer(count=1, key_columns=("k",)), key_groups=8,
                         shards=1)
        if sink is None:
            out, _ = run_shard_batch(spec, 0, 0, _events_for(10), convert=list, sink=sink)
            assert len(calls) == 2 and sum(map(len, out)) == 10
        else:
            with pytest.raises(dkv.FencedError):
                run_shard_batch(spec, 0, 0, _events_for(10), convert=list, sink=sink)
            assert len(calls) == 1
    _opened.drop_cached()


def test_a_stopped_querys_state_is_closed_after_a_minute_while_the_one_in_use_stays(tmp_path):
    """A process keeps each shard state it ran cached for the next batch. While it holds
    several, every state but the one used last is closed once idle for STALE_SECONDS and
    for four times the interval between its last two batches (a query that stopped: its
    memory goes back within a minute, not after the host's idle time); the one used last,
    or a process's only state, stays until ``seconds``. The state reopens from its
    checkpoint and goes on."""
    from spark_ops import _runtime
    from spark_ops._opened import STALE_SECONDS, evict_idle
    from spark_ops._runtime import ShardSpec, run_shard_batch
    _opened.drop_cached()
    specs = {name: ShardSpec(state=str(tmp_path / name), operator=Buffer(count=3, key_columns=("k",)), key_groups=8,
                             shards=1) for name in ("old", "slow", "new")}
    for batch in (0, 1):
        for name in ("old", "slow", "new"):
            run_shard_batch(specs[name], batch, 0, _events_for(3))
    cached = {k[0].rsplit("/", 1)[-1]: st for k, st in _runtime._SHARDS.items()}
    assert set(cached) == {"old", "slow", "new"} and all(st.interval > 0 for st in cached.values())
    t = cached["new"].last_used
    cached["old"].last_used = t - 1
    cached["slow"].last_used, cached["slow"].interval = t - 2, 100.0        # a batch every 100 s
    assert evict_idle(600, now=t + STALE_SECONDS - 5) == 0
    assert evict_idle(600, now=t + STALE_SECONDS + 5) == 1                  # old: idle past a minute
    assert {k[0].rsplit("/", 1)[-1] for k in _runtime._SHARDS} == {"slow", "new"}
    assert evict_idle(600, now=t + 300) == 0                                # slow: 4 x 100 s not yet
    assert evict_idle(600, now=t + 450) == 1                                # ... now; new was used last
    assert evict_idle(600, now=t + 599) == 0 and evict_idle(600, now=t + 601) == 1
    assert not _runtime._SHARDS
    out, _ = run_shard_batch(specs["old"], 2, 0, _events_for(3))             # reopens at its checkpoint
    assert len(out) == 3 and all(len(r["items"]) == 3 for r in out)          # each key's third event
    assert out == run_shard_batch(specs["slow"], 2, 0, _events_for(3))[0]
    _opened.drop_cached()


def test_a_batch_run_twice_in_one_run_is_said_once_at_warning(caplog):
    """foreachBatch with two actions on the operator's output runs every batch twice (issue
    32): the shard says so, once per run at WARNING (then at INFO), naming the way out."""
    import logging

    from spark_ops import _runtime

    class Count(Operator):
        def on_event(self, key, row, ctx):
            n = ctx.value("n", default=0)
            n.value += 1
            ctx.emit({"k": key, "n": n.value})

    spec = _runtime.ShardSpec(state=f"memory://rerun-{id(caplog)}", operator=Count(), key_groups=4, shards=1)
    ev = [(0, ("a",), None, {"k": "a"})]
    with caplog.at_level(logging.INFO, logger="spark_ops._runtime"):
        for batch in range(3):
            first, _ = _runtime.run_shard_batch(spec, batch, 0, ev, run="r1")
            again, _ = _runtime.run_shard_batch(spec, batch, 0, ev, run="r1")      # the second action
            assert first == again == [{"k": "a", "n": batch + 1}]
    said = [r for r in caplog.records if "runs batch" in r.getMessage()]
    assert [r.levelno for r in said] == [logging.WARNING, logging.INFO, logging.INFO]
    assert "persist()" in said[0].getMessage() and "foreachBatch" in said[0].getMessage()


def test_timers_that_keep_registering_due_timers_stop_after_a_bound_and_say_so(caplog, monkeypatch):
    """An on_timer that registers a timer already due fires it in the same batch; one that
    does so forever stops after TIMER_ROUNDS rounds with a warning (it used to stop
    silently), and what is still due fires in the next batch."""
    from spark_ops import _runtime
    monkeypatch.setattr(_runtime, "TIMER_ROUNDS", 5)

    class Forever(Operator):
        def on_event(self, key, row, ctx):
            ctx.register_processing_timer(1)

        def on_timer(self, key, timer, ctx):
            ctx.emit({"key": key, "t": timer.time})
            ctx.register_processing_timer(timer.time + 1)

    h = OperatorHarness(Forever(), key="key", partitions=1, key_groups=8)
    with caplog.at_level("WARNING", logger="spark_ops"):
        out = h.run_batch([{"key": "a"}], processing_time=100)
    assert [r["t"] for r in out] == [1, 2, 3, 4, 5]
    assert "registered processing-time timers that were due at once for 5 rounds" in caplog.text
    assert [r["t"] for r in h.run_batch([], processing_time=100)] == [6, 7, 8, 9, 10]
