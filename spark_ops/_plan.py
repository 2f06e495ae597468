"""Spark glue on the driver: turn an Operator into a DataFrame transformation.

``apply_operator`` checks its arguments and adds two columns to the driver's plan — the
key group ``pmod(hash(key), G)`` and a routing token that sends each key-group range to
its shard's partition — then ``repartition(n, token).mapInArrow(fn)``, where ``fn`` is
what runs in the Python workers (``_worker.partition_function``).

No column carries the batch timestamp: in a streaming plan ``current_timestamp()`` becomes
a literal that differs in every batch, and a literal is compiled into the generated code,
so Spark would compile the stage anew each batch (~30 ms) and run it unoptimised by the
JIT (RFC 0001, §2.5). Processing time comes from the shards' own clocks instead: the
previous batch's, or in a first batch the clock of the first shard to start it (kept in
the state, so every shard and a re-run read the same; see _watermark.py).
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from . import _host, _identity, _initial, _listener, _progress, _statevar
from ._runtime import ShardSpec
from ._shards import TOKEN, route
from ._units import duration_ms, memory_bytes
from ._worker import partition_function

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation
    from pyspark.sql.types import StructType

    from ._units import Duration, Memory
    from .operator import Operator


def _resolve_state(state: str) -> str:
    if "://" in state:
        return state.rstrip("/")
    return os.path.abspath(os.path.expanduser(state))


def _as_schema(schema):
    from pyspark.sql.types import StructType, _parse_datatype_string
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, str):
        return _parse_datatype_string(schema)
    raise TypeError(f"output_schema must be a StructType or a DDL string, got {type(schema).__name__}")


def check_columns(df, key, event_time=None) -> list:
    """The key column names, after checking that they and ``event_time`` exist."""
    keys = [key] if isinstance(key, str) else list(key)
    if not keys or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"key must name one column or a list of columns, got {key!r}")
    missing = [c for c in keys + [event_time] if c is not None and c not in df.columns]
    if missing:
        raise ValueError(f"column(s) {missing} not in the input; it has {df.columns}")
    return keys


def apply_operator(df: DataFrame, operator: Operator, key: str | Sequence[str], *,
                   output_schema: str | StructType | None = None, event_time: str | None = None,
                   watermark: Duration | None = None, order_by: str | Sequence[str] | None = None,
                   state: str = "./state", name: str | None = None, partitions: int | None = None,
                   key_groups: int = 256, dkv_options: dict | None = None, isolate: bool | None = None,
                   inputs: list | None = None, input_column: str | None = None, shard_host: bool | None = None,
                   memory: Memory | None = None, metrics: str | bool | Observation | None = None,
                   initial_state: DataFrame | None = None, retire: str | Iterable[str] | None = None) -> DataFrame:
    """Run ``operator`` (an ``Operator``) over ``df`` keyed by ``key`` (a column or a list),
    emitting rows of ``output_schema`` (a DDL string or a StructType; default the operator's
    ``output_schema`` attribute).

    state: the state root (a folder or ``s3://bucket/prefix``); each query keeps its state
    under ``<state>/<query id>/<name>``. partitions: the shard count (default the session's
    ``spark.sql.shuffle.partitions``; for a batch DataFrame at most the session's parallelism,
    see ``default_shards``); change it between restarts to rescale. key_groups:
    fixed when the state is created. watermark: the allowed event-time delay, e.g.
    "10 seconds" (needs ``event_time``): rows behind the watermark are dropped. Without it
    the watermark still advances with the event times seen (so event-time timers fire) but
    no row is dropped as late. order_by: column(s) ordering a key's rows within
    a batch (default the event-time column). isolate: end with an exchange so that the
    output can be unioned or coalesced in the same stage; the default (None) adds it only
    without shard hosts — with them, a merged stage is detected and fails the batch with
    an error that says to pass isolate=True (see docs/spark_ops.md). Returns a
    DataFrame with ``output_schema``. A batch (non-streaming) DataFrame is the whole input:
    its state lives for the run only and every timer fires at its end. inputs /
    input_column: for operators over several unioned inputs, the input names and the
    column naming each row's input; the watermark then follows the slowest input.
    shard_host: keep each shard's open state in a helper process per executor and shard
    (default: on unless the environment sets SPARK_OPS_SHARD_HOST=0), so a shard stays hot
    whichever Python worker Spark runs its task in; see docs/spark_ops.md. memory: what
    each shard keeps in memory at most (objects, memtables, block cache), e.g. "512m"
    (the default) or "64m"; state beyond it lives in the store and is read back on demand.
    metrics: the operator's per-batch figures as observed metrics (see _progress.py). By
    default a stream's progress carries them, ``query.lastProgress["observedMetrics"]
    ["spark_ops.<name>"]``; a string names them otherwise; for a batch DataFrame pass a
    ``pyspark.sql.Observation`` and read ``observation.get`` after the action; False: none.
    initial_state: a batch DataFrame with the key column(s) (of the input's types) whose
    rows seed the state, as Spark's ``initialState``: in a query's first batch — when the
    operator has no state — each shard calls ``operator.on_initial_state(key, row, ctx)``
    for the rows of its keys before its first input row; a restart from a checkpoint
    ignores it (and logs so). It is staged under ``state`` by a Spark job when this
    function runs (RFC 0008). name: the operator's identity in its query's state (default:
    its class name, lowercased): a restart finds the state by it, so give a name= that stays
    when the class is renamed. retire: names of operators that the query's state holds and
    its code no longer has, whose state is to be dropped (RFC 0010; a query whose state holds
    an operator its code lacks stops at its start with an error that says so).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    from .operator import Operator, has_initial_state_handler

    if not isinstance(operator, Operator):
        raise TypeError(f"operator must be an instance of spark_ops.Operator, got "
                        f"{operator!r:.80} ({type(operator).__name__})")
    keys = check_columns(df, key, event_time)
    if watermark is not None and event_time is None:
        raise ValueError("watermark= needs event_time= (the event-time column)")
    if event_time is not None:
        kind = df.schema[event_time].dataType.typeName()
        if kind not in ("timestamp", "long", "integer"):
            raise TypeError(f"event_time column {event_time!r} must be a timestamp or a number of ms, not {kind}")
    if initial_state is not None:
        if not has_initial_state_handler(operator):
            raise TypeError(f"initial_state= needs {type(operator).__name__}.on_initial_state(key, row, ctx), "
                            f"which loads an initial row into the state; {type(operator).__name__} does not "
                            f"define it")
        _initial.check_keys(initial_state, df, keys)
    if output_schema is None:
        output_schema = getattr(operator, "output_schema", None)
        if output_schema is None:
            raise TypeError(f"apply_operator needs output_schema= (a DDL string such as \"user string, total "
                            f"double\", or a StructType), or {type(operator).__name__}.output_schema set")
    schema = _as_schema(output_schema)
    n = default_shards(df, key_groups) if partitions is None else partitions
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or key_groups < n or key_groups > 1 << 16:
        raise ValueError(f"need 1 <= partitions <= key_groups <= 65536, got partitions={n}, key_groups={key_groups}")
    order = [order_by] if isinstance(order_by, str) else list(order_by or ([event_time] if event_time else []))
    missing = [c for c in order if c not in df.columns]
    if missing:
        raise ValueError(f"order_by column(s) {missing} not in the input; it has {df.columns}")
    for c in keys + order:
        if _unorderable(df.schema[c].dataType):
            raise TypeError(f"column {c!r} ({df.schema[c].dataType.simpleString()}) cannot be a key or "
                            f"order_by column: rows are ordered by them, and arrays and maps have no order")
    named = name is not None
    name = check_name(name or type(operator).__name__.lower())
    retire = _retire_list(retire, name)
    _statevar.declarations(operator)    # bad state_vars fail here, on the driver
    spec = ShardSpec(state=_resolve_state(state), operator=operator, key_arity=len(keys), event_time=event_time,
                     delay_ms=duration_ms(watermark, "watermark") if watermark is not None else 0,
                     drop_late=watermark is not None,
                     key_groups=key_groups, shards=n, dkv_options=dict(dkv_options or {}),
                     inputs=list(inputs) if inputs else None, input_column=input_column,
                     memory=None if memory is None else memory_bytes(memory), name=name if named else None,
                     retire=retire)
    function_name = None
    if df.isStreaming:
        # The driver checks the query's operators when a run starts, finding this one by
        # its function's name in the plan (RFC 0010).
        tag = _listener.remember(spec.state, name, _identity.identity(operator, name, named), retire,
                                 spec.dkv_options)
        function_name = _listener.function_name(tag)
        _listener.ensure_listener(df.sparkSession)
    if initial_state is not None:
        spec.initial = _initial.stage(initial_state, keys, key_groups=key_groups, shards=n, root=spec.state,
                                      name=name, dkv_options=spec.dkv_options, event_time=event_time, order=order)
    # Top-level timestamp columns: their rows' datetimes are made from the exact instants of
    # the Arrow columns (microseconds, whatever the session time zone; _worker._python_values).
    instants = frozenset(c.name for c in df.schema.fields if isinstance(c.dataType, TimestampType))
    columns = df.columns
    df = spark_watermark(df, event_time, spec.delay_ms)
    routed = route(df, keys, key_groups, n)
    hosts = _host.enabled(shard_host)
    if isolate is None:
        isolate = not hosts
    from pyspark.sql.pandas.types import to_arrow_schema
    out_arrow = to_arrow_schema(schema, timezone="UTC")
    target = _progress.observe_target(df, name, metrics)
    full = _progress.output_schema(schema) if target is not None else None
    fn = partition_function(spec, name, keys, columns, order, out_arrow, instants, hosts, isolate,
                            None if full is None else to_arrow_schema(full, timezone="UTC"), function_name)
    # Nothing may sit between the exchange and the shards: over an empty shuffle (a batch
    # without rows) adaptive execution would replace a projection by an empty relation, and
    # then no task would run — and no timer fire (RFC 0001, §1.2).
    out = routed.repartition(n, F.col(TOKEN)).mapInArrow(fn, schema if full is None else full)
    if target is not None:
        # One row per shard and batch carries its figures: observed, then dropped (_progress.py).
        out = _progress.observe(out, name, target)
    if not isolate:
        return out
    # A shard is identified by its task's partition number, which holds only while the
    # operator runs in its own stage: an exchange after it keeps a later union or
    # coalesce from renumbering the partitions it runs in. Partitioning that exchange by
    # the shard keeps each shard's rows together and in emission order.
    shard_col = "__spark_ops_out_shard"
    return out.withColumn(shard_col, F.spark_partition_id()).repartition(n, shard_col).drop(shard_col)


def spark_watermark(df, event_time: str | None, delay_ms: int):
    """``df`` with Spark's own watermark on the event-time column (``withWatermark``), so
    that the query's progress has its ``eventTime`` block (max, min, avg event time and the
    watermark: what standard dashboards plot). It changes no row: only Spark's stateful
    operators drop rows behind it, and spark_ops keeps its own watermark, which is Spark's
    (the largest event time of the batches before, minus the delay). Left out for a batch
    DataFrame, an event time of ms (Spark watermarks timestamps only), a Spark Connect
    client (no local plan to look at), and a plan with a watermark of its own."""
    if event_time is None or not df.isStreaming:
        return df
    from pyspark.sql.types import TimestampType
    if not isinstance(df.schema[event_time].dataType, TimestampType):
        return df
    try:
        plan = df._jdf.queryExecution().logical().toString()
    except Exception:       # noqa: BLE001 - Spark Connect: no JVM DataFrame here
        return df
    if "EventTimeWatermark" in plan:
        return df
    return df.withWatermark(event_time, f"{max(0, delay_ms)} milliseconds")


def check_name(name) -> str:
    """An operator name: letters, digits, '_', '.' and '-', not starting with '_' (names that
    start with '_' are the query's own: ``_query``)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9.-][A-Za-z0-9_.-]*", name):
        raise ValueError(f"operator name {name!r} may use letters, digits, '_', '.' and '-' only, and may not "
                         f"start with '_'")
    return name


def _retire_list(retire, name: str) -> tuple:
    if retire is None:
        return ()
    names = [retire] if isinstance(retire, str) else list(retire)
    for n in names:
        check_name(n)
    if name in names:
        raise ValueError(f"retire={names!r} names this operator ({name!r}) itself: retire= lists operators the "
                         f"query no longer has")
    return tuple(sorted(set(names)))


def default_shards(df, key_groups: int = 1 << 16) -> int:
    """The shard count when ``partitions=`` is not given: ``spark.sql.shuffle.partitions`` for a
    stream (its state layout depends on it, so it must not change between restarts), and for a
    batch DataFrame — whose state lives for the run only — that capped by the session's
    parallelism (its cores) and by ``key_groups``: more shards than tasks can run at once only
    add tasks, state stores and latency (a 1,000-row frame in 200 shards took ~7 s instead of
    under one). Read from the session, no Spark job and no row count; see docs/spark_ops.md."""
    session = df.sparkSession
    n = int(session.conf.get("spark.sql.shuffle.partitions"))
    if df.isStreaming:
        return n
    cores = _parallelism(session)
    if cores is not None and cores >= 1:
        n = min(n, cores)
    return max(1, min(n, key_groups))


def _parallelism(session) -> int | None:
    """The session's default parallelism without running a job: classic sessions ask the
    SparkContext; a Spark Connect client has none and reads ``spark.default.parallelism`` when
    the server sets it, else the N of a ``local[N]`` master (``local[*]``: this machine's CPUs)."""
    try:
        return int(session.sparkContext.defaultParallelism)
    except Exception:           # Spark Connect: no SparkContext on the client
        pass
    conf = session.conf
    for key in ("spark.default.parallelism", "spark.sql.leafNodeDefaultParallelism"):
        try:
            value = conf.get(key, None)
        except Exception:
            value = None
        if value:
            return int(value)
    try:
        master = conf.get("spark.master", None) or ""
    except Exception:
        master = ""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1) or 1)
    return None


def _unorderable(data_type) -> bool:
    """Arrays and maps (also inside structs) have no order to sort rows by."""
    from pyspark.sql.types import ArrayType, MapType, StructType
    if isinstance(data_type, (ArrayType, MapType)):
        return True
    return isinstance(data_type, StructType) and any(_unorderable(f.dataType) for f in data_type.fields)
