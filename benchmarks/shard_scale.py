"""One spark_ops shard at big state, without Spark: what the state layer costs per event.

    scripts/env.sh python benchmarks/shard_scale.py --keys 100000 --batches 40
    scripts/env.sh python benchmarks/shard_scale.py --keys 1000000 --count 20 --memory 64m
    scripts/env.sh python benchmarks/shard_scale.py --keys 100000 --batches 40 --operator memory

Runs the runtime's own ``run_shard_batch`` (what a shard host runs for a Spark task) for
shard 0 of ``--shards`` on the buffer operator, with the workload of spark_vs_tws.py: a
staggered warm-up batch (key i gets ``i % count`` events, so buffers fill at different
batches), then ``--events-per-key`` events per key per batch. State goes to a local folder.
Python's cyclic GC runs as in a shard host (off during a batch, the heap frozen after each,
a full collection every 200). Per batch it records the shard's time (the part of a Spark
batch the state layer costs),
durable bytes and objects written (a listing of the folder), the checkpoint's own metrics,
and this process's RSS. The steady figures leave out the warm-up batches.
``--host`` hands each batch to the shard the way a Spark task reaches it: the rows as one
Arrow table (through the host's frame format), ordered and converted to events a chunk at a
time by ``spark_ops._worker.run_task``, the output sent on in parts; the RSS figures then
include what the Spark path adds (the task's rows, their order, the conversions). In one
process: the task's table and its order are counted here, where a shard host on Spark holds
one chunk of them and the worker the rest (spark_ops._taskrows).
``--operator memory`` runs the same buffer with its state in a dict of lists in this process
(benchmarks/_memory_buffer.py; not durable, not exactly-once): the runtime floor, what the
shard costs without the state layer; buffer's time minus it is the state layer's.

This is a development tool for the state layer: quick to run, and free of Spark's noise.
The numbers that count against the peers come from spark_vs_tws.py.
"""
from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _memory_buffer import MemoryBuffer  # noqa: E402
from _report import folder_sizes, grown, status_kb  # noqa: E402
from spark_ops import _host, _host_heap, _opened  # noqa: E402
from spark_ops._runtime import ShardSpec, keys_descending, run_shard_batch  # noqa: E402
from spark_ops._shards import shard_of  # noqa: E402
from spark_ops.operators._buffer import Buffer  # noqa: E402

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def key_group(i: int, groups: int) -> int:
    return (i * 2654435761 >> 7) % groups


def shard_keys(keys: int, shard: int, shards: int, groups: int) -> list[tuple[int, str]]:
    """(key group, key index) of the keys shard ``shard`` owns, in processing order."""
    out = []
    for i in range(keys):
        kg = key_group(i, groups)
        if shard_of(kg, shards, groups) == shard:
            out.append((kg, i))
    out.sort(key=lambda e: (e[0], f"u{e[1]:07d}"))
    return out


class BatchEvents:
    """One batch's (key group, key parts, event ms, row) events in processing order (key
    group, key, time; the keys descending in odd batches, as spark_ops orders them:
    _runtime.keys_descending), made a chunk of keys at a time when iterated, as a shard host
    makes them from its task's Arrow rows (spark_ops._worker.EventChunks)."""

    def __init__(self, batch: int, mine: list, count: int, per_key: int, prefill: bool, seq0: int,
                 chunk: int = 1 << 14) -> None:
        self.batch, self.mine, self.count, self.per_key, self.prefill, self.seq0 = batch, mine, count, per_key, prefill, seq0
        self.chunk = chunk
        self.total = sum((i % count) if (prefill and batch == 0) else per_key for _, i in mine)

    def __len__(self) -> int:
        return self.total

    def distinct_keys(self, beyond: int) -> int:
        """The keys its events hold, as EventChunks.distinct_keys tells the shard (meet_keys)."""
        return sum(1 for _, i in self.mine if i % self.count) if self.prefill and self.batch == 0 else len(self.mine)

    def keys(self) -> list:
        """(key group, key index) of the shard's keys in this batch's processing order."""
        return self.mine[::-1] if keys_descending(self.batch) else self.mine

    def __iter__(self):
        seq = self.seq0
        base = T0 + dt.timedelta(seconds=self.batch)
        stamps = [base + dt.timedelta(milliseconds=j) for j in range(max(self.count, self.per_key))]
        events = []
        for kg, i in self.keys():
            n = (i % self.count) if (self.prefill and self.batch == 0) else self.per_key
            user = f"u{i:07d}"
            for j in range(n):
                seq += 1
                events.append((kg, (user,), None, {"user": user, "ts": stamps[j], "seq": seq}))
            if len(events) >= self.chunk:
                yield events
                events = []
        if events:
            yield events


class BatchTable:
    """The rows of BatchEvents as the Arrow table a shard host's task gets (the key-group
    column the plan adds, then the input's columns), made when ``table()`` is called: in
    record batches of ``chunk`` rows, as Spark hands a task's rows to mapInArrow (its
    spark.sql.execution.arrow.maxRecordsPerBatch, 10,000 by default)."""

    def __init__(self, events: BatchEvents, chunk: int = 10_000) -> None:
        self.events, self.chunk = events, chunk

    def __len__(self) -> int:
        return len(self.events)

    def table(self):
        import numpy as np
        import pyarrow as pa

        from spark_ops._shards import KG
        e = self.events
        mine = e.keys()
        kgs = np.array([kg for kg, _ in mine], dtype=np.int32)
        idx = np.array([i for _, i in mine], dtype=np.int64)
        n = (idx % e.count) if (e.prefill and e.batch == 0) else np.full(len(idx), e.per_key, dtype=np.int64)
        rows = np.repeat(np.arange(len(idx)), n)
        j = np.arange(len(rows)) - np.repeat(np.cumsum(n) - n, n)      # event j of its key
        users = pa.array([f"u{i:07d}" for i in idx.tolist()], pa.string()).take(pa.array(rows))
        micros = int(T0.timestamp()) * 1_000_000 + e.batch * 1_000_000 + j * 1_000
        whole = pa.table({KG: pa.array(kgs[rows]), "user": users,
                          "ts": pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                          "seq": pa.array(e.seq0 + 1 + np.arange(len(rows)), pa.int64())})
        # Each batch in buffers of its own (slices would share the whole table's, and a
        # frame would carry all of it once per slice).
        parts = [whole.take(pa.array(np.arange(s, min(s + self.chunk, len(rows)))))
                 for s in range(0, len(rows), self.chunk)]
        return pa.concat_tables(parts) if parts else whole


def host_frame(rows: BatchTable):
    """What a shard host receives for a task: the worker makes Spark's record batches one
    table (task_table) and sends it in a frame, which the host reads into buffers of its own."""
    from spark_ops import _frames, _worker
    data, buffers = _frames.dumps((_worker.task_table(rows.table().to_batches()),))
    return bytearray(data), [bytearray(memoryview(b).cast("B")) for b in buffers]


def run_as_host(spec, batch: int, frame, out_schema, sink) -> tuple[list, dict]:
    """One batch as a shard host runs a task: the table rebuilt over the bytes of its
    ``frame`` (host_frame), then ``run_task``, its parts to ``sink``. The metrics are the
    record the shard wrote for the batch (what ``spark_ops.read_metrics`` reads)."""
    import spark_ops
    from spark_ops import _frames, _host_server, _worker
    (table,) = _frames.loads(frame)
    _host_server._PARTS = sink
    try:
        emitted = _worker.run_task(spec, batch, 0, table, ["user"], ["user", "ts", "seq"], [], frozenset({"ts"}),
                                   False, out_schema, batch * 1000)
    finally:
        _host_server._PARTS = None
    mine = [m for m in spark_ops.read_metrics(spec.state) if m.get("batch") == batch and m.get("shard") == 0]
    return emitted, mine[-1] if mine else {}


def rss_mb() -> float:
    return (status_kb("self", "VmRSS") or 0) / 1024


def peak_rss_mb() -> float:
    return (status_kb("self", "VmHWM") or 0) / 1024


def reset_peak_rss() -> bool:
    """Start a new peak RSS (Linux: writing 5 to clear_refs resets VmHWM); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def run(args) -> dict:
    root = Path(args.dir or tempfile.mkdtemp(prefix="shard-scale-"))
    state = root / "state"
    if state.exists():
        shutil.rmtree(state)
    dkv_options = json.loads(args.dkv_options) if args.dkv_options else {}
    if args.operator == "memory":
        op = MemoryBuffer(count=args.count, key_columns=("user",))
    else:
        op = Buffer(count=args.count, key_columns=("user",))
    spec = ShardSpec(state=str(state), operator=op, key_groups=args.groups, shards=args.shards,
                     dkv_options=dkv_options)
    if args.memory:
        from spark_ops._units import memory_bytes
        spec.memory = memory_bytes(args.memory)
    mine = shard_keys(args.keys, 0, args.shards, args.groups)
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_ops._output import rows_to_arrow
    item = pa.struct([("user", pa.string()), ("ts", pa.timestamp("us", tz="UTC")), ("seq", pa.int64())])
    out_schema = pa.schema([("user", pa.string()), ("items", pa.list_(item))])

    def convert(rows):       # the output to Arrow as it piles up, as in a shard host
        return rows_to_arrow(rows, out_schema)

    tally = [0, 0, True]     # output rows, items, every row full: counted, not kept

    def count(rb):
        tally[0] += rb.num_rows
        tally[1] += pc.sum(pc.list_value_length(rb.column("items"))).as_py() or 0
        tally[2] &= pc.all(pc.equal(pc.list_value_length(rb.column("items")), args.count)).as_py() in (True, None)
    pa.array([0])           # pyarrow imports pandas on a host's first conversion (its check for
    baseline = rss_mb()     # pandas objects): a fixed cost of every host, so part of the baseline
    gc.disable()            # as in a shard host (spark_ops/_host_heap.py): no GC inside a batch
    seen: dict = {}
    batches = []
    seq = 0
    run_peak = 0.0
    emitted_total = 0
    full_rows = True
    profiler = None
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
    for b in range(args.batches):
        events = BatchEvents(b, mine, args.count, args.events_per_key, args.prefill, seq)
        frame = host_frame(BatchTable(events)) if args.host else None     # made before the batch's peak starts
        seq += len(events)
        prof = profiler if profiler is not None and b >= args.warmup else None
        run_peak = max(run_peak, peak_rss_mb())
        per_batch_peak = reset_peak_rss()
        t0 = time.perf_counter()
        if prof is not None:
            prof.enable()
        # A host sends the parts of the output on as the batch makes them (the sink) and the
        # rest with its answer: both are counted here and dropped.
        if args.host:
            emitted, metrics = run_as_host(spec, b, frame, out_schema, count)
            frame = None
        else:
            emitted, metrics = run_shard_batch(spec, b, 0, events, batch_time=b * 1000, convert=convert, sink=count)
        if prof is not None:
            prof.disable()
        ms = (time.perf_counter() - t0) * 1000
        for rb in emitted:
            count(rb)
        emitted = None
        emitted_rows, items, full = tally
        emitted_total += items
        full_rows &= full
        tally[:] = [0, 0, True]
        _host_heap._tidy_heap(b + 1)
        now = folder_sizes(state)
        added = grown(seen, now)
        seen = now
        manifest = sum(s for p, s in added.items() if "/manifest/" in p)
        sst_files = [s for p, s in now.items() if p.endswith(".sst")]
        rec = {"batch": b, "events": len(events), "ms": ms, "bytes": sum(added.values()),
               "objects": len(added), "manifest_bytes": manifest, "emitted": emitted_rows,
               "rss_mb": rss_mb(), "peak_rss_mb": peak_rss_mb() if per_batch_peak else None,
               "live_ssts": len(sst_files),
               "live_sst_mb": sum(sst_files) / 2**20,
               "wal_segments": sum(1 for p in now if p.endswith(".wal")),
               **{k: metrics.get(k) for k in ("dirty_slots", "wal_bytes", "sst_bytes", "save_ms", "write_ms",
                                              "checkpoint_ms", "commit_ms", "state_bytes", "objects_evicted")}}
        batches.append(rec)
        if not args.quiet:
            print(f"batch {b:3d}: {len(events):>9,} ev {ms:8.0f} ms  {rec['bytes'] / 1024:9.1f} KB "
                  f"({rec['bytes'] / max(1, len(events)):6.1f} B/ev) {rec['objects']:4d} obj "
                  f"manifest {manifest:6d} B  ssts {len(sst_files):5d} ({rec['live_sst_mb']:7.1f} MB) "
                  f"wal {rec['wal_segments']:3d}  evicted {rec['objects_evicted'] or 0:7,}  rss {rec['rss_mb']:5.0f} MB"
                  + (f" (peak {rec['peak_rss_mb']:.0f})" if per_batch_peak else ""), file=sys.stderr, flush=True)
    # The model: key i has had (i % count if prefilled) + per_key x steady batches events, and
    # the buffer emitted count items for every full count of them.
    n = args.batches
    expected = sum(args.count * ((((i % args.count) if args.prefill else args.events_per_key)
                                  + args.events_per_key * (n - 1)) // args.count) for _, i in mine)
    if profiler is not None:
        profiler.dump_stats(args.profile)
    _opened.drop_cached()
    steady = [r for r in batches if r["batch"] >= args.warmup]
    ev = sum(r["events"] for r in steady)
    times = [r["ms"] for r in steady]
    summary = {
        "operator": args.operator, "keys": args.keys, "shard_keys": len(mine), "count": args.count,
        "batches": len(steady),
        "ms_per_batch": statistics.mean(times), "median_ms": statistics.median(times), "max_ms": max(times),
        "us_per_event": 1000 * sum(times) / ev, "bytes_per_event": sum(r["bytes"] for r in steady) / ev,
        "objects_per_batch": statistics.mean(r["objects"] for r in steady),
        "manifest_max": max(r["manifest_bytes"] for r in steady),
        "rss_baseline_mb": baseline, "peak_rss_mb": max(run_peak, peak_rss_mb()),
        "steady_peak_rss_mb": max((r["peak_rss_mb"] or 0) for r in steady) or None, "emitted_items": emitted_total,
        "expected_items": expected, "output_ok": emitted_total == expected and full_rows,
    }
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    return {"summary": summary, "batches": batches}


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000, help="keys of the operator (all shards)")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--operator", choices=("buffer", "memory"), default="buffer",
                    help="memory: the same buffer with its state in a dict of lists (the runtime floor)")
    ap.add_argument("--events-per-key", type=int, default=2)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-prefill", dest="prefill", action="store_false")
    ap.add_argument("--memory", default=None, help="the shard's memory budget, e.g. 256m")
    ap.add_argument("--dkv-options", default=None, help="JSON of dkv options for the shard")
    ap.add_argument("--dir", default=None, help="keep the state here (default: a temp dir, removed)")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--profile", default=None, help="cProfile the steady batches into this file (pstats)")
    ap.add_argument("--host", action="store_true",
                    help="each batch as a shard host's Spark task: Arrow rows through spark_ops' run_task")
    ap.add_argument("--quiet", action="store_true")
    return ap


def options(**given) -> argparse.Namespace:
    """The options of a run as the command line's defaults make them, with ``given`` (by
    their attribute names) in their place: for scripts and tests that run ``run()``, so
    that an option added here has its default there too."""
    args = _parser().parse_args([])
    unknown = set(given) - set(vars(args))
    if unknown:
        raise TypeError(f"shard_scale has no options {sorted(unknown)}")
    for name, value in given.items():
        setattr(args, name, value)
    return args


def main(argv=None) -> int:
    if argv is None and any(name not in os.environ for name in _host.HOST_ENV):
        # Allocators set as a shard host's are (spark_ops/_host.py sets them when it starts one).
        for name, value in _host.HOST_ENV.items():
            os.environ.setdefault(name, value)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    args = _parser().parse_args(argv)
    out = run(args)
    s = out["summary"]
    print(f"{s['operator']}{' (runtime floor, state in memory)' if s['operator'] == 'memory' else ''}: "
          f"K={s['keys']:,} ({s['shard_keys']:,} in shard 0), count {s['count']}, {s['batches']} steady batches: "
          f"{s['ms_per_batch']:.0f} ms/batch (median {s['median_ms']:.0f}, max {s['max_ms']:.0f} = "
          f"{s['max_ms'] / s['median_ms']:.2f}x), {s['us_per_event']:.2f} us/event, "
          f"{s['bytes_per_event']:.1f} B/event, {s['objects_per_batch']:.1f} objects/batch, "
          f"manifest max {s['manifest_max']:,} B, RSS peak {s['peak_rss_mb']:.0f} MB"
          + (f" (steady batches {s['steady_peak_rss_mb']:.0f})" if s["steady_peak_rss_mb"] else "")
          + f", baseline {s['rss_baseline_mb']:.0f} MB; output "
          f"{'matches the model' if s['output_ok'] else 'DIFFERS from the model'} "
          f"({s['emitted_items']:,} items emitted, {s['expected_items']:,} expected)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0 if s["output_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
