"""Operator metrics where Spark users look: a streaming query's progress and the logs.

Every shard already measures its batch (``run_shard_batch`` returns a metrics dict, kept in
the state too: _metrics.py). Under Spark each shard also hands its batch's figures to Spark
as one extra output row: the operator's ``mapInArrow`` declares a hidden string column
(``METRICS_COLUMN``, the figures as JSON) that is null in every real output row and set in
the one row per shard and batch that carries them. On the driver the plan aggregates that
column with ``DataFrame.observe`` (a sum or max per figure over the shards), then drops the
metrics rows and the column, so a streaming query's progress carries, per batch and operator,
``lastProgress["observedMetrics"]["spark_ops.<name>"]``. Nothing is counted per row: the
figures are the shard's own per-batch counters; per output row Spark checks one null.

``metrics_listener`` registers a StreamingQueryListener that logs one line per batch and
operator on the driver and keeps the latest figures; ``progress_metrics`` reads them from a
progress (``query.lastProgress``) as plain dicts.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("spark_ops.metrics")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
METRICS_COLUMN = "__spark_ops_metrics"
PREFIX = "spark_ops."

# (name in the progress, aggregate over the shards, meaning). Order = order in the progress.
FIELDS = [
    ("shards", "count", "shards that ran the batch"),
    ("rows_in", "sum", "input rows the operator got (late ones included)"),
    ("rows_out", "sum", "rows the operator emitted"),
    ("late_rows_dropped", "sum", "rows behind the watermark, dropped (needs watermark=)"),
    ("timers_fired", "sum", "event- and processing-time timers that fired"),
    ("state_bytes", "sum", "bytes of the shards' stores (memtables + tables) after the batch"),
    ("state_records", "sum", "records in the shards' stores (until compaction: overwritten versions and "
                             "tombstones too)"),
    ("objects_in_memory", "sum", "state objects the shards hold in memory (their object caches)"),
    ("objects_evicted", "sum", "state objects the caches dropped during the batch (each reloads from the store "
                               "on its next use: many a batch mean memory= is short of the keys a batch touches)"),
    ("state_keys", "sum", "keys with state after the batch (exact: counts the saves keep)"),
    ("state_keys_max", "max", "keys with state in the shard that holds the most (skew)"),
    ("state_objects", "sum", "state objects after the batch (exact: counts the saves keep)"),
    ("objects_removed", "sum", "state objects deleted by the batch (by the operator or by TTL)"),
    ("ttl_expired", "sum", "objects, entries and elements TTL removed before the batch ran"),
    ("timers_registered", "sum", "timer registrations the batch made"),
    ("timers_deleted", "sum", "timer deletions the batch made (fired timers included)"),
    ("rows_in_max", "max", "input rows of the busiest shard (skew: rows_in_max x shards / rows_in)"),
    ("memory_bytes", "max", "largest resident memory (RSS) of a process that ran a shard, after the batch"),
    ("memory_budget", "max", "a shard's memory budget (memory=), for memory_bytes to be read against"),
    ("open_ms", "max", "slowest shard's opening or catching up of its state (ms; 0 when kept open)"),
    ("dirty_slots", "sum", "slots (object parts) that changed and were saved"),
    ("checkpoint_bytes", "sum", "bytes the checkpoints wrote: WAL segments, manifests and tables flushed"),
    ("checkpoint_objects", "sum", "files the checkpoints wrote (WAL segments, manifests, tables)"),
    ("commit_ms", "max", "slowest shard's save + checkpoint (ms)"),
    ("output_ms", "max", "slowest shard's turning of its emitted rows into Arrow (ms)"),
    ("duration_ms", "max", "slowest shard's whole batch in its worker or host (ms)"),
    ("watermark", "max", "the batch's watermark (ms since the epoch; null in a first batch)"),
]
NAMES = [f for f, _, _ in FIELDS]


def shard_record(m: dict) -> dict:
    """The exported figures of one shard's batch, from run_shard_batch's metrics dict."""
    return {"shards": 1, "rows_in": m.get("rows", 0), "rows_out": m.get("emitted", 0),
            "late_rows_dropped": m.get("late_rows", 0), "timers_fired": m.get("timers_fired", 0),
            "state_bytes": m.get("state_bytes", 0), "state_records": m.get("state_records", 0),
            "objects_in_memory": m.get("objects_in_memory", 0), "objects_evicted": m.get("objects_evicted", 0),
            "state_keys": m.get("state_keys", 0),
            "state_keys_max": m.get("state_keys", 0), "state_objects": m.get("state_objects", 0),
            "objects_removed": m.get("objects_removed", 0), "ttl_expired": m.get("ttl_expired", 0),
            "timers_registered": m.get("timers_registered", 0), "timers_deleted": m.get("timers_deleted", 0),
            "rows_in_max": m.get("rows", 0), "memory_bytes": m.get("memory_bytes", 0),
            "memory_budget": m.get("memory_budget", 0), "open_ms": m.get("open_ms", 0.0),
            "dirty_slots": m.get("dirty_slots", 0),
            "checkpoint_bytes": m.get("checkpoint_bytes", 0) + m.get("sst_bytes", 0),
            "checkpoint_objects": m.get("checkpoint_objects", 0), "commit_ms": m.get("commit_ms", 0.0),
            "output_ms": m.get("output_ms", 0.0),
            "duration_ms": m.get("duration_ms", 0.0), "watermark": m.get("watermark")}


# -- in the shard (worker or host) ----------------------------------------------------------

def with_null_metrics(batch, schema):
    """An output record batch with the hidden metrics column appended, null in every row
    (a string column: 4 bytes of offsets and a bit per row cross to the JVM)."""
    import pyarrow as pa
    return pa.RecordBatch.from_arrays(list(batch.columns) + [pa.nulls(batch.num_rows, schema.field(-1).type)],
                                      schema=schema)


def metrics_batch(m: dict, schema):
    """The one-row record batch carrying a shard's figures: every output column null, the
    metrics column their JSON."""
    import pyarrow as pa
    cols = [pa.nulls(1, f.type) for f in list(schema)[:-1]]
    cols.append(pa.array([json.dumps(shard_record(m))], schema.field(-1).type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def summary_line(operator: str, m: dict) -> str:
    """One line for a shard's batch (the shard hosts log it at INFO)."""
    r = shard_record(m)
    return (f"spark_ops {operator} shard {m.get('shard')}/{m.get('shards')} batch {m.get('batch')}: "
            f"{r['rows_in']} rows in, {r['rows_out']} out, {r['late_rows_dropped']} late dropped, "
            f"{r['timers_fired']} timers fired, {r['dirty_slots']} dirty slots, checkpoint "
            f"{r['checkpoint_bytes']} B in {r['checkpoint_objects']} objects, commit {r['commit_ms']} ms, "
            f"output {r['output_ms']} ms, batch {r['duration_ms']} ms (open {r['open_ms']} ms), state {r['state_keys']} keys / "
            f"{r['state_objects']} objects ({r['objects_removed']} removed, {r['ttl_expired']} expired) / "
            f"{r['state_bytes']} B / {r['state_records']} records / {r['objects_in_memory']} objects in memory, "
            f"memory {r['memory_bytes'] >> 20} MiB of a {r['memory_budget'] >> 20} MiB budget")


# -- in the shard: memory --------------------------------------------------------------------

def resident_bytes() -> int:
    """This process's resident memory (RSS) in bytes: /proc/self/statm on Linux (one small
    read), else the peak resident size getrusage reports (0 where neither exists)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        try:
            import resource
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            return peak if sys.platform == "darwin" else peak * 1024
        except (ImportError, OSError):
            return 0



# -- on the driver ----------------------------------------------------------------------------

def output_schema(schema):
    """The operator's mapInArrow schema: the user's output schema + the metrics column."""
    from pyspark.sql.types import StringType, StructField, StructType
    if METRICS_COLUMN in schema.names:
        raise ValueError(f"the output schema may not have a column named {METRICS_COLUMN!r}")
    return StructType(list(schema.fields) + [StructField(METRICS_COLUMN, StringType(), True)])


def _aggregates():
    """The observed figures. One aggregate, ``collect_list`` of the metrics column (nulls
    skipped: per output row one update that sees a null), and each figure computed from the
    shards' records at the end, so the per-row cost does not grow with the figures."""
    from pyspark.sql import functions as F
    records = F.collect_list(F.col(METRICS_COLUMN))
    out = []
    for name, how, _ in FIELDS:
        if how == "count":
            out.append(F.size(records).cast("long").alias(name))
            continue
        kind = "double" if name.endswith("_ms") else "long"
        values = F.transform(records, _field(name, kind))
        if how == "sum":
            out.append(F.aggregate(values, F.lit(0).cast(kind), lambda acc, x: acc + F.coalesce(x, F.lit(0).cast(kind)))
                       .alias(name))
        else:
            out.append(F.array_max(values).alias(name))
    return out


def _field(name: str, kind: str):
    """x -> the figure ``name`` of a shard's record (a one-argument function, as transform wants)."""
    from pyspark.sql import functions as F
    return lambda x: F.get_json_object(x, f"$.{name}").cast(kind)


def observe(out, name: str, target):
    """``out`` (the operator's mapInArrow output with the metrics column) observed under
    ``target`` (a name, or a pyspark Observation for a batch DataFrame), without the metrics
    rows and the column."""
    from pyspark.sql import functions as F
    observed = out.observe(target, *_aggregates())
    return observed.filter(F.col(METRICS_COLUMN).isNull()).drop(METRICS_COLUMN)


def _is_observation(obj) -> bool:
    from pyspark.sql.observation import Observation
    if isinstance(obj, Observation):
        return True
    try:
        from pyspark.sql.connect.observation import Observation as ConnectObservation
    except Exception:  # noqa: BLE001 - no Connect client installed
        return False
    return isinstance(obj, ConnectObservation)


def observe_target(df, name: str, metrics):
    """What ``apply_operator(..., metrics=...)`` observes the output under, or None (no
    metrics rows at all). None/True: ``spark_ops.<name>`` for a stream, nothing for a batch
    DataFrame (nobody could read a named observation of one from Python); a string: that
    name; a pyspark ``Observation``: it (batch DataFrames only; Spark does not support an
    Observation on a stream); False: nothing."""
    if metrics is False:
        return None
    if metrics is None or metrics is True:
        return PREFIX + name if df.isStreaming else None
    if isinstance(metrics, str):
        if not metrics:
            raise ValueError("metrics= names the observed metrics: give a non-empty string")
        return metrics
    if _is_observation(metrics):
        if df.isStreaming:
            raise ValueError("metrics=Observation(...) works on a batch DataFrame only (Spark does not "
                             "observe streams into an Observation); a stream's metrics are in "
                             "query.lastProgress['observedMetrics'] under 'spark_ops.<name>'")
        return metrics
    raise TypeError(f"metrics= takes None, True, False, a name or a pyspark Observation, not "
                    f"{type(metrics).__name__}")


def _plain(row) -> dict:
    """An observed metric's row as a dict. A classic session's progress gives a Row of the
    figures; a Spark Connect client's (4.x) a Row of ``values`` and ``schema`` (the row as
    the server's JSON has it): both become ``{figure: value}``."""
    if row is None:
        return {}
    d = row.asDict() if hasattr(row, "asDict") else dict(row)
    if set(d) == {"values", "schema"} and isinstance(d["schema"], dict) and "fields" in d["schema"]:
        return {f["name"]: v for f, v in zip(d["schema"]["fields"], d["values"])}
    return d


def progress_metrics(progress: Any) -> dict:
    """The spark_ops operators' figures in a streaming progress (``query.lastProgress``, a
    listener's ``event.progress``, or its JSON as a dict): ``{operator name: {figure: value}}``
    for every observed metric named ``spark_ops.<name>``. Empty without any."""
    if progress is None:
        return {}
    try:
        observed = progress["observedMetrics"]
    except (KeyError, TypeError):
        observed = getattr(progress, "observedMetrics", None)
    out = {}
    for key, row in dict(observed or {}).items():
        if key.startswith(PREFIX):
            out[key[len(PREFIX):]] = _plain(row)
    return out


def format_metrics(operator: str, batch, m: dict) -> str:
    """One line for an operator's batch (the listener logs it)."""
    def g(k):
        v = m.get(k)
        return 0 if v is None else v
    return (f"spark_ops {operator} batch {batch}: {g('rows_in')} rows in, {g('rows_out')} out, "
            f"{g('late_rows_dropped')} late dropped, {g('timers_fired')} timers fired, {g('dirty_slots')} dirty "
            f"slots, checkpoint {g('checkpoint_bytes')} B in {g('checkpoint_objects')} objects, commit "
            f"{g('commit_ms')} ms (slowest of {g('shards')} shards), output {g('output_ms')} ms, state {g('state_keys')} keys / "
            f"{g('state_objects')} objects ({g('objects_removed')} removed, {g('ttl_expired')} expired) / "
            f"{g('state_bytes')} B, memory {g('memory_bytes') >> 20} MiB (budget {g('memory_budget') >> 20} MiB "
            f"a shard), open {g('open_ms')} ms")


def metrics_listener(spark: SparkSession, *, log_level: int = logging.INFO, keep: int = 1000,
                     callback: Callable[[str | None, int, str, dict], object] | None = None) -> Any:
    """Register (and return) a StreamingQueryListener that, for every progress of every
    streaming query of ``spark``, logs one line per spark_ops operator on the
    ``spark_ops.metrics`` logger (at ``log_level``; None: no log), calls
    ``callback(query_name, batch_id, operator, figures)`` if given, and keeps the last
    ``keep`` progresses' figures in ``listener.history`` (a list of dicts with query_id,
    query_name, batch_id, operator and the figures); ``listener.latest(operator)`` is the
    newest. Remove it with ``spark.streams.removeListener(listener)``.

    On Spark Connect a listener runs on the server, not in this process: its history and
    callback are the server's; read ``query.lastProgress`` with ``progress_metrics`` instead."""
    from pyspark.sql.streaming import StreamingQueryListener

    class SparkOpsMetricsListener(StreamingQueryListener):
        def __init__(self) -> None:
            self.history: list = []
            self._lock = threading.Lock()

        def onQueryStarted(self, event) -> None:
            pass

        def onQueryProgress(self, event) -> None:
            p = event.progress
            figures = progress_metrics(p)
            for op, m in figures.items():
                if log_level is not None:
                    log.log(log_level, "%s", format_metrics(op, p.batchId, m))
                rec = {"query_id": str(p.id), "query_name": p.name, "batch_id": p.batchId, "operator": op, **m}
                with self._lock:
                    self.history.append(rec)
                    del self.history[:-keep]
                if callback is not None:
                    callback(p.name, p.batchId, op, m)

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            pass

        def latest(self, operator: str | None = None) -> dict | None:
            with self._lock:
                for rec in reversed(self.history):
                    if operator is None or rec["operator"] == operator:
                        return rec
            return None

    listener = SparkOpsMetricsListener()
    spark.streams.addListener(listener)
    return listener
