"""Machinery shared by the Spark benchmarks: session, deterministic sources, a measuring runner.

A *contender* is a function `build(inputs, ctx) -> DataFrame` plus a role (ours, peer or
floor). The runner feeds it a file stream source that admits exactly one pre-written parquet
file per micro-batch, runs the query with `trigger(availableNow=True)` and measures, per batch:
- time: `triggerExecution` from Spark's query progress, minus the runner's own listing time;
- rows in (progress `numInputRows`) and rows out (counted by the sink);
- state bytes: the sink lists every file under the contender's state locations after the
  batch has run and attributes growth since the previous listing to this batch, so background
  uploads (RocksDB snapshots) show up as spikes in the batch during which they landed.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z, the event time of batch 0


# ---------------------------------------------------------------- scenarios and sources


@dataclass(frozen=True)
class Scenario:
    """A workload: its source schema, how batches are generated, how the source is split into inputs."""

    name: str
    key: str
    schema: str                                   # DDL of the source files
    generate: Callable[[int, int, int], pa.Table]  # (batch, keys, events per key) -> rows
    split: Callable                               # streaming DataFrame -> inputs handed to build()


def _key_column(keys: int, events_per_key: int) -> list[str]:
    return [f"u{i:06d}" for _ in range(events_per_key) for i in range(keys)]


def buffer_events(batch: int, keys: int, events_per_key: int) -> pa.Table:
    """`events_per_key` events for each of `keys` users; seq is global and increasing."""
    n = keys * events_per_key
    j = [r // keys for r in range(n)]
    return pa.table({
        "user": pa.array(_key_column(keys, events_per_key), pa.string()),
        "ts": pa.array([T0_US + batch * 1_000_000 + jj * 1_000 for jj in j], pa.timestamp("us", tz="UTC")),
        "seq": pa.array([batch * n + r for r in range(n)], pa.int64()),
    })


INPUTS = ("a", "b", "c")


def quote_events(batch: int, keys: int, events_per_key: int) -> pa.Table:
    """Events for combine_latest: event j of a batch goes to input INPUTS[(2*batch + j) % 3]."""
    n = keys * events_per_key
    j = [r // keys for r in range(n)]
    return pa.table({
        "sym": pa.array(_key_column(keys, events_per_key), pa.string()),
        "src": pa.array([INPUTS[(events_per_key * batch + jj) % len(INPUTS)] for jj in j], pa.string()),
        "ts": pa.array([T0_US + batch * 1_000_000 + jj * 1_000 for jj in j], pa.timestamp("us", tz="UTC")),
        "seq": pa.array([batch * n + r for r in range(n)], pa.int64()),
        "price": pa.array([float(batch * 100 + (r % 97)) for r in range(n)], pa.float64()),
    })


def split_by_src(df) -> dict:
    """One streaming source, three keyed inputs (same files, filtered), like three topics."""
    from pyspark.sql import functions as F

    return {name: df.filter(F.col("src") == name).drop("src") for name in INPUTS}


SCENARIOS = {
    "buffer": Scenario("buffer", "user", "user string, ts timestamp, seq long", buffer_events, lambda df: df),
    "combine_latest": Scenario("combine_latest", "sym", "sym string, src string, ts timestamp, seq long, price double",
                               quote_events, split_by_src),
}


def write_source(scenario: Scenario, directory: Path, batches: int, keys: int, events_per_key: int) -> int:
    """Write one parquet file per batch (idempotent); returns the bytes of one batch file."""
    directory.mkdir(parents=True, exist_ok=True)
    size = 0
    for b in range(batches):
        path = directory / f"batch-{b:05d}.parquet"
        if not path.exists():
            tmp = directory / f".batch-{b:05d}.tmp"
            pq.write_table(scenario.generate(b, keys, events_per_key), tmp)
            os.replace(tmp, path)
        # the file source admits files in modification-time order: make it the batch order
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
        size = path.stat().st_size
    return size


# ---------------------------------------------------------------- contenders


@dataclass
class RunContext:
    """What a contender's build function may use."""

    keys: int
    count: int             # buffer size
    partitions: int        # shards / shuffle partitions
    state_dir: Path        # where a contender with its own store keeps state (ours)
    key: str               # key column name of the scenario


@dataclass(frozen=True)
class Contender:
    name: str
    scenario: str
    role: str                                       # "ours" | "peer" | "floor"
    build: Callable                                 # (inputs, RunContext) -> DataFrame
    unavailable: Callable[[], str | None] = lambda: None  # a reason, or None when it can run


# ---------------------------------------------------------------- measuring


@dataclass
class BatchStat:
    batch_id: int
    events: int = 0            # events in the batch's source file
    rows_in: int = 0           # Spark's numInputRows (counts a source once per scan of it)
    rows_out: int = 0
    ms: float = 0.0            # Spark's triggerExecution minus overhead_ms
    overhead_ms: float = 0.0   # the runner's own listing of the state locations
    state_bytes: int = 0
    state_files: int = 0
    state_metrics: dict = field(default_factory=dict)


@dataclass
class RunResult:
    contender: str
    role: str
    scenario: str
    keys: int
    batches: list[BatchStat] = field(default_factory=list)
    skipped: str | None = None
    round: int = 0

    def summary(self, warmup: int) -> dict:
        """Steady-state figures over the batches after `warmup`."""
        steady = [b for b in self.batches if b.batch_id >= warmup]
        if self.skipped or not steady:
            return {"skipped": self.skipped or "no steady batches"}
        secs = sum(b.ms for b in steady) / 1000
        sizes = [b.state_bytes for b in steady]
        return {
            "batches": len(steady),
            "events_per_s": sum(b.events for b in steady) / secs if secs else float("nan"),
            "ms_per_batch": 1000 * secs / len(steady),
            "state_bytes_mean": sum(sizes) / len(sizes),
            "state_bytes_max": max(sizes),
            "state_bytes_median": sorted(sizes)[len(sizes) // 2],
            "rows_out": sum(b.rows_out for b in steady),
        }


def _listing(roots: list[Path]) -> dict[str, int]:
    sizes = {}
    for root in roots:
        for dirpath, _, files in os.walk(root):
            for name in files:
                path = os.path.join(dirpath, name)
                try:
                    sizes[path] = os.path.getsize(path)
                except FileNotFoundError:  # deleted by a background cleanup while listing
                    pass
    return sizes


def run_contender(spark, contender: Contender, scenario: Scenario, source: Path, work: Path,
                  ctx: RunContext, events_per_batch: int) -> RunResult:
    """Run one contender over the prepared source; one RunResult with a BatchStat per batch."""
    from pyspark.sql import functions as F

    result = RunResult(contender.name, contender.role, scenario.name, ctx.keys)
    reason = contender.unavailable()
    if reason:
        result.skipped = reason
        return result
    if work.exists():
        shutil.rmtree(work)
    cp = work / "checkpoint"
    roots = [cp / "state", ctx.state_dir]
    stats: dict[int, BatchStat] = {}
    seen: dict[str, int] = {}

    def sink(batch_df, batch_id):
        rows_out = batch_df.select(F.count(F.lit(1)).alias("n")).collect()[0]["n"]  # runs the plan once
        t0 = time.perf_counter()
        now = _listing(roots)
        grown = {p: s - seen.get(p, 0) for p, s in now.items() if s > seen.get(p, 0)}
        seen.clear()
        seen.update(now)
        stats[batch_id] = BatchStat(batch_id, rows_out=rows_out, state_bytes=sum(grown.values()),
                                    state_files=len(grown), overhead_ms=1000 * (time.perf_counter() - t0))

    df = (spark.readStream.schema(scenario.schema).option("maxFilesPerTrigger", 1)
          .parquet(str(source)))
    out = contender.build(scenario.split(df), ctx)
    query = (out.writeStream.foreachBatch(sink).outputMode("update").option("checkpointLocation", str(cp))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    for progress in query.recentProgress:
        stat = stats.get(progress["batchId"])
        if stat is None:
            continue
        stat.rows_in = progress["numInputRows"]
        stat.events = events_per_batch if stat.rows_in else 0
        stat.ms = progress["durationMs"].get("triggerExecution", 0) - stat.overhead_ms
        ops = progress.get("stateOperators") or []
        if ops:
            stat.state_metrics = {"numRowsTotal": ops[0].get("numRowsTotal"),
                                  "memoryUsedBytes": ops[0].get("memoryUsedBytes"),
                                  **{k: v for k, v in (ops[0].get("customMetrics") or {}).items()
                                     if k in ("rocksdbBytesCopied", "rocksdbFilesCopied", "rocksdbSstFileSize")}}
    result.batches = [stats[b] for b in sorted(stats)]
    return result


# ---------------------------------------------------------------- session


def spark_session(partitions: int, batches: int, log_level: str = "ERROR"):
    """local[2] with `partitions` shuffle partitions and RocksDB (changelog checkpointing) for Spark's state."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]").appName("spark_vs_tws")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.numRecentProgressUpdates", str(max(100, batches + 10)))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level)
    return spark
