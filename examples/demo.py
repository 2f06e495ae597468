"""The main demo: stateful streaming on local Spark with state that checkpoints only what changed.

Generates click/view events for a few hundred users, one file per micro-batch (users send
at different rates and start at different points of their buffer cycle, as real traffic
would, so the buffers do not all fill and empty in the same batch), and runs three
streaming queries over them, each with its state in ./demo-output/state:

  buffer          groups every user's events into buffers of 20
  combine_latest  the latest click and the latest view of every user
  session_window  gap-based sessions per user (event time): a session ends when the
                  user's next event comes 45 s or more after its last one, or when the
                  watermark passes last + 45 s (an event-time timer), as it does for
                  most users after the pause before the last two batches

After every batch it prints the bytes that batch's checkpoint wrote (WAL segment,
manifest, any SST) next to what a whole-state snapshot would have written, and at the end
saves ./demo-output/checkpoint_bytes.png. After each query it prints the operator's figures
from the query's progress (``query.lastProgress["observedMetrics"]``). Runs in about a minute.

    python examples/demo.py [--users 500] [--batches 30]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
OUT = os.path.abspath("demo-output")


SESSION_GAP = "45 seconds"
WATERMARK = "10 seconds"
LULL_S = 60          # the event-time pause before the last two batches (more than gap + delay)


def write_input(folder: str, users: int, batches: int, seed: int = 7) -> None:
    """One JSON-lines file per batch, event time advancing 30 s a batch.

    Users are not in step, as real traffic is not: each sends 1 to 3 events a batch (2 on
    average), and batch 0 also carries a backlog of 0 to 19 earlier events per user (as if
    the stream had been running), so every user starts at a different point of its
    20-event buffer cycle and buffers fill and empty at different batches.

    Sessions end both ways session_window ends them. Along the way a user who pauses a
    batch and comes back 45 s or more after its last event closes its session with that
    event (``on_event``). At the end (with 4 batches or more) the stream pauses for a
    minute, and in the last two batches only every fifth user sends: the watermark then
    passes the other users' last event + gap, and their event-time timers close their
    sessions in the last batch (``on_timer``).
    """
    rng = random.Random(seed)
    os.makedirs(folder, exist_ok=True)
    t0 = 1_700_000_000
    for b in range(batches):
        path = os.path.join(folder, f"batch-{b:04d}.json")
        lull = LULL_S if batches >= 4 and b >= batches - 2 else 0
        with open(path, "w") as f:
            for u in range(users):
                if u % 10 == 9 and b % 4 == 3:
                    continue            # some users go quiet now and then: sessions close
                if lull and u % 5:
                    continue            # the end: most users have gone, their sessions time out
                n = rng.choice((1, 2, 3))
                backlog = (u * 7) % 20 if b == 0 else 0
                offsets = sorted(rng.randrange(25) for _ in range(backlog)) + \
                    [25 * i // n + rng.randrange(5) for i in range(n)]
                for off in offsets:
                    f.write(json.dumps({"user": f"user-{u:05d}", "kind": rng.choice(["click", "view"]),
                                        "page": f"/p/{rng.randrange(50)}", "ts": t0 + b * 30 + lull + off,
                                        "value": round(rng.random() * 100, 2)}) + "\n")
        os.utime(path, (1_000_000 + b, 1_000_000 + b))   # the file source admits files by mtime


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=500)
    p.add_argument("--batches", type=int, default=30)
    args = p.parse_args(argv)

    from pyspark.sql import SparkSession, functions as F
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    import spark_ops

    shutil.rmtree(OUT, ignore_errors=True)
    write_input(os.path.join(OUT, "input"), args.users, args.batches)
    spark = (SparkSession.builder.master("local[2]").appName("objectspace-demo")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    schema = StructType([StructField("user", StringType()), StructField("kind", StringType()),
                         StructField("page", StringType()), StructField("ts", LongType()),
                         StructField("value", DoubleType())])
    events = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(os.path.join(OUT, "input"))
              .withColumn("ts", F.col("ts").cast("timestamp")))
    state = os.path.join(OUT, "state")
    queries = {
        "buffer": spark_ops.buffer(events, key="user", count=20, state=state),
        "combine_latest": spark_ops.combine_latest(
            {"click": events.filter("kind = 'click'"), "view": events.filter("kind = 'view'")},
            key="user", state=state),
        "session_window": spark_ops.session_window(events, key="user", gap=SESSION_GAP, event_time="ts",
                                                   watermark=WATERMARK, state=state),
    }
    results, progress = {}, {}
    for name, df in queries.items():
        results[name], progress[name] = run_query(spark, name, df, state)
    spark.stop()
    plot(results)
    plot_metrics(progress)
    total_cp = sum(r["checkpoint"] for res in results.values() for r in res)
    total_snap = sum(r["snapshot"] for res in results.values() for r in res)
    print(f"\nall operators, all batches: checkpoints wrote {total_cp:,} bytes; whole-state snapshots "
          f"would have written {total_snap:,} bytes ({total_snap / max(total_cp, 1):.1f}x more)")
    print(f"plots: {os.path.join(OUT, 'checkpoint_bytes.png')}, {os.path.join(OUT, 'metrics.png')}")
    return 0


def run_query(spark, name: str, df, state: str) -> tuple[list[dict], list[dict]]:
    import spark_ops

    rows_out: list[dict] = []
    query_id: list[str] = []

    def per_batch(batch_df, batch_id: int) -> None:
        emitted = batch_df.count()
        root = os.path.join(state, query_id[0], name)
        metrics = [m for m in spark_ops.read_metrics(root) if m["batch"] == batch_id]
        cp = sum(m["checkpoint_bytes"] + m["sst_bytes"] for m in metrics)
        snap = spark_ops.snapshot_bytes(root, batch_id)
        rows_out.append({"batch": batch_id, "emitted": emitted, "checkpoint": cp, "snapshot": snap["zstd_bytes"],
                         "records": snap["records"], "dirty": sum(m["dirty_slots"] for m in metrics)})
        rows_out[-1]["ms"] = max((m["duration_ms"] for m in metrics), default=0)
        print(f"{name:>15} batch {batch_id:>3}: {emitted:>5} rows out, {rows_out[-1]['dirty']:>5} dirty slots, "
              f"checkpoint {cp:>8,} B   whole-state snapshot {snap['zstd_bytes']:>9,} B "
              f"({snap['records']:,} records) [{rows_out[-1]['ms']:.0f} ms in shard]", flush=True)

    t = time.time()
    q = (df.writeStream.foreachBatch(per_batch)
         .option("checkpointLocation", os.path.join(OUT, "checkpoints", name))
         .trigger(availableNow=True).start())
    query_id.append(str(q.id))
    q.awaitTermination()
    print(f"{name}: {len(rows_out)} batches in {time.time() - t:.1f} s", flush=True)
    # The operator's figures per batch, where Spark users look: the query's progress
    # (observed metrics named spark_ops.<operator name>; see docs/spark_ops.md, "Metrics").
    figures = [spark_ops.progress_metrics(p).get(name, {}) for p in q.recentProgress]
    total = {k: sum(f.get(k) or 0 for f in figures) for k in ("rows_in", "rows_out", "late_rows_dropped",
                                                              "timers_fired", "checkpoint_bytes")}
    last = spark_ops.progress_metrics(q.lastProgress).get(name, {})
    print(f"{name}: query progress, all batches: {total['rows_in']:,} rows in, {total['rows_out']:,} out, "
          f"{total['timers_fired']:,} timers fired, {total['late_rows_dropped']:,} late rows dropped, "
          f"checkpoints {total['checkpoint_bytes']:,} B", flush=True)
    if last:
        skew = last["rows_in_max"] * last["shards"] / max(1, last["rows_in"])
        print(f"{name}: state after the last batch: {last['state_keys']:,} keys with state (busiest shard "
              f"{last['state_keys_max']:,}), {last['state_objects']:,} objects ({last['objects_removed']:,} removed, "
              f"{last['ttl_expired']:,} expired by TTL), {last['timers_registered']:,} timers registered; shard "
              f"memory {last['memory_bytes'] / 2**20:.0f} MiB of a {last['memory_budget'] / 2**20:.0f} MiB budget; "
              f"input skew {skew:.2f}x; open {last['open_ms']:.0f} ms", flush=True)
    print(f"{name}: lastProgress['observedMetrics']['spark_ops.{name}'] = {last}\n", flush=True)
    return rows_out, [f for f in figures if f]


def plot(results: dict) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (name, rows) in zip(axes[0], results.items()):
        xs = [r["batch"] for r in rows]
        ax.plot(xs, [r["snapshot"] for r in rows], "o-", label="whole-state snapshot")
        ax.plot(xs, [r["checkpoint"] for r in rows], "s-", label="objectspace checkpoint")
        cp, snap = sum(r["checkpoint"] for r in rows), sum(r["snapshot"] for r in rows)
        ax.set_title(f"{name}: snapshots write {snap / max(cp, 1):.1f}x the bytes")
        ax.set_xlabel("batch")
        ax.set_ylabel("bytes written")
        ax.set_ylim(bottom=0)           # linear from zero, so the gap between the lines shows the ratio
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v / 1e3:,.0f} kB"))
        ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "checkpoint_bytes.png"), dpi=110)


def plot_metrics(progress: dict) -> None:
    """The figures a dashboard would chart, per batch, from each query's progress: keys and
    objects with state, what left it, and shard memory against its budget."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(progress), figsize=(5 * len(progress), 4), squeeze=False)
    for ax, (name, figures) in zip(axes[0], progress.items()):
        xs = range(len(figures))
        for key, style in (("state_keys", "o-"), ("state_objects", "s-"), ("objects_removed", "x:"),
                           ("ttl_expired", "+:"), ("timers_registered", "^:")):
            ax.plot(xs, [f.get(key) or 0 for f in figures], style, label=key, markersize=4)
        ax.set_title(f"{name}: state per batch")
        ax.set_xlabel("batch")
        ax.set_ylabel("count")
        ax.set_ylim(bottom=0)
        mem = ax.twinx()
        mem.plot(xs, [(f.get("memory_bytes") or 0) / 2**20 for f in figures], "k--", label="memory_bytes (MiB)")
        budget = max((f.get("memory_budget") or 0 for f in figures), default=0) / 2**20
        if budget:
            mem.axhline(budget, color="red", linewidth=0.8, label="memory_budget")
        mem.set_ylabel("MiB")
        mem.set_ylim(bottom=0)
        lines = ax.get_legend_handles_labels()
        more = mem.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=7, loc="center left", framealpha=0.6)
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "metrics.png"), dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
