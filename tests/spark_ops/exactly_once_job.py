"""The streaming job of the exactly-once test, run from the root as
``python -m tests.spark_ops.exactly_once_job <workdir>`` in its own process group so the test
(or the job itself) can SIGKILL driver, JVM and Python workers at once.

<workdir>/src holds one JSON file per batch. The query runs ``session_window(gap)`` (state,
timers, watermark) until the source is drained (availableNow), with state in <workdir>/state and
Spark's checkpoint in <workdir>/cp. (One operator: an operator's output cannot be unioned yet,
bug 10.) The
foreachBatch sink writes <workdir>/out/<batch id>.pkl (replaced when a batch runs again) and
keeps every attempt's copy under <workdir>/attempts/.

<workdir>/partitions (if present) sets the operator's shard count for this run: a restart may
rescale, and the batch it re-runs then runs under the new layout.

<workdir>/plan.json lists kill points ``[point, batch id]``; each fires once (a marker file in
<workdir>/kills is created first) and kills the whole process group:
  pre          in a task of the map stage, before any shard of the batch has run
  post         in a task right after one shard's operator returned (its state is checkpointed,
               other shards' may not be; Spark has not committed the batch)
  sink-before  in foreachBatch before the output is written (all state checkpointed)
  sink-after   in foreachBatch after the output is written, before Spark's commit
  stall        not a kill: in a task of the map stage, the job stops there (a paused, stale
               driver) until <workdir>/release exists, then goes on
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from .spark_helpers import file_sink, read_stream

GAP_MS, DELAY = 1501, "500 ms"


def build(spark, work: Path, plan: list, pgid: int):
    import spark_ops

    kills = str(work / "kills")
    points = {(p, b) for p, b in plan}

    def kill_once(point: str, bid: int) -> None:
        if (point, bid) not in points:
            return
        try:
            fd = os.open(os.path.join(kills, f"{point}-{bid}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.close(fd)
        if point == "stall":
            while not os.path.exists(os.path.join(str(work), "release")):
                time.sleep(0.05)
            return
        os.killpg(pgid, signal.SIGKILL)

    def tap(point: str):
        def fn(frames):
            from pyspark import TaskContext

            bid = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
            kill_once(point, bid)
            if point == "pre":
                kill_once("stall", bid)
            yield from frames
        return fn

    df = read_stream(spark, work / "src")
    df = df.mapInPandas(tap("pre"), df.schema)
    partitions = int((work / "partitions").read_text()) if (work / "partitions").exists() else 2
    out = spark_ops.session_window(df, "k", GAP_MS, event_time="ts", watermark=DELAY, state=str(work / "state"),
                                   partitions=partitions)
    out = out.mapInPandas(tap("post"), out.schema)

    sink = file_sink(work / "out")
    attempts = work / "attempts"
    attempts.mkdir(exist_ok=True)

    def on_batch(batch_df, bid):
        kill_once("sink-before", bid)
        batch_df = batch_df.persist()
        sink(batch_df, bid)
        file_sink(attempts / f"{bid}-{os.getpid()}")(batch_df, bid)
        batch_df.unpersist()
        kill_once("sink-after", bid)

    return out.writeStream.foreachBatch(on_batch).option("checkpointLocation", str(work / "cp")) \
        .trigger(availableNow=True)


def main() -> None:
    from pyspark.sql import SparkSession

    work = Path(sys.argv[1])
    (work / "kills").mkdir(exist_ok=True)
    plan = json.loads((work / "plan.json").read_text())
    spark = (SparkSession.builder.master("local[2]").appName("exactly-once")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").config("spark.driver.memory", "512m")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    query = build(spark, work, plan, os.getpgid(0)).start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
