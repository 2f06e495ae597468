"""Helpers for the streaming tests: a file source with one file per micro-batch, a foreachBatch
sink that keeps one file per batch id (overwritten when Spark re-runs the batch), random data.

Also imported by the subprocess scripts of the crash and cluster tests, so it depends on
nothing but the standard library, pyspark and spark_ops.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import random
from pathlib import Path

BASE = dt.datetime(2024, 1, 1)
SCHEMA = "k string, ts timestamp, v long"


def at(ms: int) -> dt.datetime:
    """The event time ``ms`` after 2024-01-01 (naive UTC, as Spark returns it in a UTC session)."""
    return BASE + dt.timedelta(milliseconds=ms)


def _jsonable(row: dict) -> dict:
    return {k: (v.isoformat(timespec="milliseconds") if isinstance(v, dt.datetime) else v) for k, v in row.items()}


def write_batch_files(src, batches, start: int = 0) -> None:
    """One JSON-lines file per batch (an empty file for an empty batch); the file source admits
    files by modification time, so mtimes increase with the batch number."""
    src = Path(src)
    src.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches):
        b = start + i
        path = src / f"batch-{b:04d}.json"
        tmp = src / f".batch-{b:04d}.tmp"
        tmp.write_text("".join(json.dumps(_jsonable(r)) + "\n" for r in rows))
        os.utime(tmp, (1_700_000_000 + b, 1_700_000_000 + b))
        os.replace(tmp, path)


def read_stream(spark, src, schema: str = SCHEMA):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(src))


def to_python(value):
    """Spark Rows (nested too) as plain dicts and lists."""
    if hasattr(value, "asDict"):
        return {k: to_python(v) for k, v in value.asDict(recursive=False).items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    return value


def file_sink(out):
    """A foreachBatch function writing ``out/<batch id>.pkl`` (atomically, overwriting a re-run's)
    and appending the batch id to ``out/runs.log`` (to count re-runs)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def sink(batch_df, batch_id):
        rows = [to_python(r) for r in batch_df.collect()]
        tmp = out / f".{batch_id}.{os.getpid()}.tmp"
        tmp.write_bytes(pickle.dumps(rows))
        os.replace(tmp, out / f"{batch_id}.pkl")
        with open(out / "runs.log", "a") as fh:
            fh.write(f"{batch_id}\n")

    return sink


def read_sink(out) -> dict[int, list]:
    """Batch id -> rows, from ``file_sink``'s files."""
    return {int(p.stem): pickle.loads(p.read_bytes()) for p in Path(out).glob("*.pkl")}


def run_stream(df, out, checkpoint):
    """Run ``df`` with the file sink until the source is drained (availableNow); return the query."""
    q = (df.writeStream.foreachBatch(file_sink(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return q


def random_events(seed, n_batches: int, *, keys="abcde", max_rows: int = 6, step: int = 1000, late: bool = True,
                  even: bool = False):
    """Rows {k, ts, v} per batch: event times advance ``step`` ms per batch with jitter (some late rows
    when ``late``); a key never has two rows with the same event time, and each key's rows in a
    batch are written in event-time order (Spark orders ties by the other columns; the models by
    input order: this makes the two agree)."""
    rng = random.Random(seed)
    used: set = set()
    v = 0
    batches = []
    for b in range(n_batches):
        rows = []
        for _ in range(rng.randint(1, max_rows)):
            k = rng.choice(keys)
            ms = max(0, b * step + rng.randrange(-2 * step if late else 0, step))
            if even:
                ms -= ms % 2
            while (k, ms) in used:
                ms += 2
            used.add((k, ms))
            rows.append({"k": k, "ts": at(ms), "v": v})
            v += 1
        rows.sort(key=lambda r: (r["k"], r["ts"]))
        batches.append(rows)
    return batches
