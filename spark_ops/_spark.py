"""Spark glue: turn an Operator into a DataFrame transformation.

``apply_operator`` adds two columns on the driver's plan — the key group
``pmod(hash(key), G)`` and a routing token that sends each key-group range to its shard's
partition — then ``repartition(n, token).mapInArrow(...)``. In each task the rows are
sorted by key and event time and handed to ``run_shard_batch``; the emitted rows go back
to Spark as one Arrow record batch built where the shard ran.

No column carries the batch timestamp: in a streaming plan ``current_timestamp()`` becomes
a literal that differs in every batch, and a literal is compiled into the generated code,
so Spark would compile the stage anew each batch (~30 ms) and run it unoptimised by the
JIT (RFC 0001, §2.5). Processing time comes from the shards' own clocks instead: the
previous batch's, or in a first batch the clock of the first shard to start it (kept in
the state, so every shard and a re-run read the same; see _watermark.py).
"""
from __future__ import annotations

import datetime as _dt
import logging
import os
import re
import time
import uuid

from . import _host
from ._output import rows_to_arrow
from ._runtime import ShardSpec, run_shard_batch
from ._shards import tokens

log = logging.getLogger(__name__)

KG, TOKEN, US = "__spark_ops_kg", "__spark_ops_token", "__spark_ops_us"
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_UNITS = {"ms": 1, "millisecond": 1, "milliseconds": 1, "s": 1000, "sec": 1000, "second": 1000,
          "seconds": 1000, "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
          "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000, "day": 86_400_000, "days": 86_400_000}


def duration_ms(value, what: str = "duration") -> int:
    """Milliseconds from an int (ms), a timedelta or a string like "10 seconds"."""
    if isinstance(value, bool):
        raise TypeError(f"{what} must be ms, a timedelta or a string like '10 seconds', got {value!r}")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, _dt.timedelta):
        ms = int(value.total_seconds() * 1000)
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*", value)
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what} {value!r} is not like '10 seconds', '5 minutes' or '250 ms'")
        ms = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise TypeError(f"{what} must be ms, a timedelta or a string like '10 seconds', got {value!r}")
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {value!r}")
    return ms


_SIZES = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def memory_bytes(value, what: str = "memory") -> int:
    """Bytes from an int or a string like "512m", "2g" or "64 MiB" (powers of 1024)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what} must be bytes (an int) or a string like '512m', got {value!r}")
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if not m or m.group(2).lower() not in _SIZES:
            raise ValueError(f"{what} {value!r} is not like '512m', '2g' or '64 MiB'")
        value = int(float(m.group(1)) * _SIZES[m.group(2).lower()])
    if value < 8 << 20:
        raise ValueError(f"{what} must be at least 8 MiB, got {value:,} bytes")
    return value


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


def apply_operator(df, operator, key, *, output_schema, event_time: str | None = None, watermark=None,
                   order_by=None, state: str = "./state", name: str | None = None, partitions: int | None = None,
                   key_groups: int = 256, dkv_options: dict | None = None, isolate: bool | None = None,
                   inputs: list | None = None, input_column: str | None = None, shard_host: bool | None = None,
                   memory=None):
    """Run ``operator`` (an ``Operator``) over ``df`` keyed by ``key`` (a column or a list).

    state: the state root (a folder or ``s3://bucket/prefix``); each query keeps its state
    under ``<state>/<query id>/<name>``. partitions: the shard count (default the session's
    ``spark.sql.shuffle.partitions``); change it between restarts to rescale. key_groups:
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
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    from .operator import Operator

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
    schema = _as_schema(output_schema)
    n = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions")) if partitions is None else partitions
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
    name = name or type(operator).__name__.lower()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"operator name {name!r} may use letters, digits, '_', '.' and '-' only")
    spec = ShardSpec(state=_resolve_state(state), operator=operator, key_arity=len(keys), event_time=event_time,
                     delay_ms=duration_ms(watermark, "watermark") if watermark is not None else 0,
                     drop_late=watermark is not None,
                     groups=key_groups, shards=n, dkv_options=dict(dkv_options or {}),
                     inputs=list(inputs) if inputs else None, input_column=input_column,
                     memory=None if memory is None else memory_bytes(memory))
    toks = tokens(n)
    shard = F.expr(f"((`{KG}` + 1) * {n} - 1) div {key_groups}")
    # Timestamps reach pandas as naive wall-clock times, ambiguous around DST changes; their
    # exact instants are read from the Arrow columns as microseconds (see _arrow_to_pandas).
    instants = {c.name: f"{US}{i}" for i, c in enumerate(df.schema.fields) if isinstance(c.dataType, TimestampType)}
    routed = (df.withColumn(KG, F.pmod(F.hash(*[F.col(k) for k in keys]), F.lit(key_groups)))
                .withColumn(TOKEN, F.element_at(F.array(*[F.lit(t).cast("long") for t in toks]),
                                                (shard + 1).cast("int"))))
    columns = df.columns
    hosts = _host.enabled(shard_host)
    if isolate is None:
        isolate = not hosts
    from pyspark.sql.pandas.types import to_arrow_schema
    out_arrow = to_arrow_schema(schema, timezone="UTC")
    fn = _partition_function(spec, name, keys, columns, order, out_arrow, instants, hosts, isolate)
    # Nothing may sit between the exchange and the shards: over an empty shuffle (a batch
    # without rows) adaptive execution would replace a projection by an empty relation, and
    # then no task would run — and no timer fire (RFC 0001, §1.2).
    out = routed.repartition(n, F.col(TOKEN)).mapInArrow(fn, schema)
    if not isolate:
        return out
    # A shard is identified by its task's partition number, which holds only while the
    # operator runs in its own stage: an exchange after it keeps a later union or
    # coalesce from renumbering the partitions it runs in. Partitioning that exchange by
    # the shard keeps each shard's rows together and in emission order.
    shard_col = "__spark_ops_out_shard"
    return out.withColumn(shard_col, F.spark_partition_id()).repartition(n, shard_col).drop(shard_col)


def _unorderable(data_type) -> bool:
    """Arrays and maps (also inside structs) have no order to sort rows by."""
    from pyspark.sql.types import ArrayType, MapType, StructType
    if isinstance(data_type, (ArrayType, MapType)):
        return True
    return isinstance(data_type, StructType) and any(_unorderable(f.dataType) for f in data_type.fields)


def _partition_function(spec: ShardSpec, name: str, keys: list, columns: list, order: list, out_schema,
                        instants: dict, shard_host: bool, isolated: bool):
    n = spec.shards

    def run(iterator):
        from pyspark import TaskContext

        started = int(time.time() * 1000)     # the next batch's processing time (RFC 0001, §2.5)
        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        query = ctx.getLocalProperty("sql.streaming.queryId")
        shard = ctx.partitionId()
        batches = [b for b in iterator if b.num_rows]
        table = None
        if batches:
            import pyarrow as pa
            import pyarrow.compute as pc
            table = pa.Table.from_batches(batches)
        final = batch is None
        if table is not None:
            found = {((kg + 1) * n - 1) // spec.groups for kg in pc.unique(table.column(KG)).to_pylist()}
            if final and len(found) == 1:
                shard = found.pop()     # a batch DataFrame's state is the task's own: only rows count
            elif found != {shard}:
                raise RuntimeError(f"spark_ops: task {shard} got rows of shards {sorted(found)}: the operator's "
                                   f"stage was merged with another (union/coalesce) — pass isolate=True")
        elif final:
            return                      # nothing to do: no rows, and no state beyond this task
        elif shard >= n:
            raise RuntimeError(f"spark_ops: task partition {shard} is not a shard of {n}: the operator's "
                               f"stage was merged with another (union/coalesce) — pass isolate=True")
        if final:       # a batch (non-streaming) DataFrame: state lives for this task only
            local = ShardSpec(**{**spec.__dict__, "state": f"memory://spark-ops-batch-{uuid.uuid4().hex}"})
            batch_id = 0
        else:
            local = ShardSpec(**{**spec.__dict__, "state": f"{spec.state}/{query}/{name}"})
            batch_id = int(batch)
        args = (local, batch_id, shard, table, keys, columns, order, instants, final, out_schema, started)
        emitted = None
        if shard_host and not final:
            if not isolated and not _host.first_run_in_task(local.state, shard, ctx.taskAttemptId()):
                # Several partitions ran in this one task (a coalesce after the operator,
                # in its stage): this one is not shard `shard`, whatever its number says.
                raise RuntimeError(f"spark_ops: partition {shard} ran twice in one Spark task: the "
                                   f"operator's stage was merged with another (coalesce/union) — "
                                   f"pass isolate=True")
            try:
                emitted = _host.call(shard, run_task, args)
            except _host.HostError as e:
                if not isolated:    # only a host can tell a merged stage apart: fail the task
                    raise
                log.warning("spark_ops: running shard %d in this worker: %s", shard, e)
            except Exception as e:
                if getattr(e, "_spark_ops_remote", False):
                    # The operator's own error, from the host: its note says where it was
                    # raised; the frames of the call to the host would only hide that.
                    raise e.with_traceback(None) from None
                raise
        if emitted is None:
            emitted = run_task(*args)
        yield from emitted
    return run


def run_task(spec: ShardSpec, batch_id: int, shard: int, table, keys, columns, order, instants, final: bool,
             out_schema=None, batch_time: int | None = None):
    """One shard's task after Spark's part: the rows in order, the operator, the checkpoint.
    Runs in the task's Python worker or in the shard's host (see _host). ``table``: the
    task's rows (an Arrow table; None without rows). Returns the emitted rows: a list of
    dicts, or with ``out_schema`` (an Arrow schema) a list of record batches. The rows
    become Python events a slice at a time (EventChunks), and the output Arrow batches as
    it grows, so a batch of millions of rows runs in bounded memory."""
    t0 = time.perf_counter()
    table = _sort_rows(table, keys, columns, order)
    events = EventChunks(table, keys, columns, spec.event_time, instants)
    heartbeat = events.heartbeat()
    convert = None if out_schema is None else (lambda rows: rows_to_arrow(rows, out_schema))
    emitted, _ = run_shard_batch(spec, batch_id, shard, events, batch_time=batch_time, end_of_input=final,
                                 heartbeat_time=heartbeat, prepare_ms=(time.perf_counter() - t0) * 1000,
                                 convert=convert)
    if final:
        from ._runtime import drop_cached
        drop_cached(spec.state)
    return emitted


class EventChunks:
    """A task's sorted rows as event lists of at most ``size`` rows (run_shard_batch's
    chunks), converted when reached; iterable again (a fenced shard runs its batch again)."""

    def __init__(self, table, keys, columns, event_time, instants, size: int = 1 << 14) -> None:
        self.table, self.keys, self.columns, self.event_time = table, keys, columns, event_time
        self.instants, self.size = instants, size

    def __iter__(self):
        from ._keys import to_parts
        table = self.table
        if table is None or not table.num_rows:
            return
        for start in range(0, table.num_rows, self.size):
            pdf = _arrow_to_pandas(table.slice(start, self.size), self.instants)
            yield _events(pdf, self.keys, self.columns, self.event_time, to_parts, self.instants)[0]

    def heartbeat(self):
        """The largest event time (ms) of rows with a null key (they are dropped, but
        advance the watermark), or None."""
        table, et = self.table, self.event_time
        if table is None or not table.num_rows or et is None:
            return None
        import pyarrow.compute as pc
        nulls = None
        for k in self.keys:
            m = pc.is_null(table.column(k))
            nulls = m if nulls is None else pc.or_(nulls, m)
        if not pc.any(nulls).as_py():
            return None
        import pyarrow as pa
        col = table.filter(nulls).column(et)
        if pa.types.is_timestamp(col.type):          # its exact instants, in µs
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
            top = pc.max(col).as_py()
            return None if top is None else top // 1000
        top = pc.max(col).as_py()
        return None if top is None else int(top)


def _naive_timestamps(ty):
    """``ty`` with every zoned timestamp made a plain (UTC) one: the values are UTC
    instants either way, and pandas then gives naive UTC datetimes."""
    import pyarrow as pa
    if pa.types.is_timestamp(ty):
        return pa.timestamp(ty.unit) if ty.tz is not None else ty
    if pa.types.is_struct(ty):
        return pa.struct([f.with_type(_naive_timestamps(f.type)) for f in ty])
    if pa.types.is_map(ty):
        return pa.map_(ty.key_field.with_type(_naive_timestamps(ty.key_type)),
                       ty.item_field.with_type(_naive_timestamps(ty.item_type)))
    if pa.types.is_list(ty):
        return pa.list_(ty.value_field.with_type(_naive_timestamps(ty.value_type)))
    if pa.types.is_large_list(ty):
        return pa.large_list(ty.value_field.with_type(_naive_timestamps(ty.value_type)))
    return ty


def _arrow_to_pandas(table, instants: dict):
    """A task's rows (an Arrow table, or None) as one pandas DataFrame (None without rows), as
    mapInPandas would give them except that timestamps nested in structs, arrays and maps
    are naive UTC datetimes, whatever the session time zone, and maps are dicts. Each
    top-level timestamp column ``c`` also comes as microseconds since the epoch in
    column ``instants[c]`` (its exact instants)."""
    if table is None or not table.num_rows:
        return None
    import pyarrow as pa
    for c, helper in instants.items():
        col = table.column(c)
        if col.type.unit != "us":
            col = col.cast(pa.timestamp("us", tz=col.type.tz))
        table = table.append_column(helper, col.cast(pa.int64()))
    plain = pa.schema([f.with_type(_naive_timestamps(f.type)) for f in table.schema])
    if plain != table.schema:
        table = table.cast(plain)
    return table.to_pandas(maps_as_pydicts="strict")


def _sort_rows(table, keys, columns, order):
    """A task's rows (Arrow) in processing order: by key group, key, the ``order`` columns,
    then every other column of a plain type, so that ties break the same way on every run
    (the shuffle delivers rows in no fixed order); nulls first (then NaNs)."""
    if table is None or not table.num_rows:
        return table
    import pyarrow as pa
    import pyarrow.compute as pc
    ties = [c for c in columns if c not in keys and c not in order and not pa.types.is_nested(table.schema.field(c).type)]
    by = [KG] + list(keys) + list(order) + ties
    try:
        idx = pc.sort_indices(table, options=_sort_options(by))
    except (pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:     # apply_operator checks the types
        raise TypeError(f"spark_ops: cannot order the rows by {by[1:len(keys) + len(order) + 1]}: {e}") from e
    return table.take(idx)


def _sort_options(by: list):
    """Ascending on every column, nulls first (pyarrow >= 25 takes the null placement per
    column; older versions once for all)."""
    import pyarrow.compute as pc
    try:
        return pc.SortOptions(sort_keys=[(c, "ascending", "at_start") for c in by])
    except (TypeError, ValueError):
        return pc.SortOptions(sort_keys=[(c, "ascending") for c in by], null_placement="at_start")


def _events(pdf, keys, columns, event_time, to_parts, instants):
    """Rows (``pdf``, in processing order: see _sort_rows) as (key group, key parts, event
    ms, row dict), and the largest event time (ms) of rows with a null key, or None. Those
    rows (a heartbeat) are dropped, but their event times advance the watermark."""
    if pdf is None:
        return [], None
    heartbeat = None
    if any(pdf[k].hasnans for k in keys):
        keyed = pdf[keys].notna().all(axis=1)
        if event_time is not None:
            col = pdf.loc[~keyed, instants.get(event_time, event_time)]
            if col.notna().any():
                heartbeat = int(col.max()) // (1000 if event_time in instants else 1)
        pdf = pdf[keyed]
    values = {c: (_utc_datetimes(pdf[instants[c]]) if c in instants else _python_values(pdf[c])) for c in columns}
    if event_time is None:
        ts = [None] * len(pdf)
    elif event_time in instants:
        micros = pdf[instants[event_time]]
        ts = ((micros.to_numpy() // 1000).tolist() if micros.dtype.kind in "iu"      # no nulls
              else [None if v != v else int(v) // 1000 for v in micros.tolist()])
    else:
        ts = [None if v is None or v != v else int(v) for v in pdf[event_time].tolist()]
    kgs = pdf[KG].tolist()
    parts = _plain_key if all(_native_key(pdf[k]) for k in keys) else to_parts
    keyvals = [(v,) for v in values[keys[0]]] if len(keys) == 1 else list(zip(*[values[k] for k in keys]))
    rows = list(map(_row_maker(columns), *[values[c] for c in columns])) if columns else [{}] * len(kgs)
    if parts is not _plain_key:
        keyvals = list(map(parts, keyvals))
    return list(zip(kgs, keyvals, ts, rows)), heartbeat


def _plain_key(kv: tuple) -> tuple:
    """Key parts of str/int keys: the key itself (see _keys.to_parts)."""
    return kv


def _native_key(series) -> bool:
    """True when a key column holds only str or only int values (they are key parts as is)."""
    import pandas as pd
    if series.dtype.kind in "iu":
        return True
    return series.dtype.kind == "O" and pd.api.types.infer_dtype(series, skipna=False) == "string"


def _utc_datetimes(micros) -> list:
    """Timezone-aware UTC datetimes from microseconds since the Unix epoch (None for nulls).
    Equal instants become one shared object (a batch's rows often share timestamps): fewer
    objects to build and hold, and objectspace encodes a shared datetime once."""
    import numpy as np
    import pandas as pd
    if micros.dtype.kind in "iu":       # no nulls: convert in C
        unique, inverse = np.unique(micros.to_numpy(), return_inverse=True)
        objs = pd.DatetimeIndex(pd.to_datetime(unique, unit="us", utc=True)).to_pydatetime()
        return objs[inverse].tolist()
    cache: dict = {}
    return [None if v != v else cache.get(v) or cache.setdefault(v, _EPOCH_UTC + _dt.timedelta(microseconds=int(v)))
            for v in micros.tolist()]


def _row_maker(columns: list):
    """A function building a row dict from column values, faster than dict(zip(...))."""
    args = ", ".join(f"_{i}" for i in range(len(columns)))
    body = ", ".join(f"{c!r}: _{i}" for i, c in enumerate(columns))
    return eval(f"lambda {args}: {{{body}}}", {})  # noqa: S307 - column names are repr()-quoted


def _python_values(series) -> list:
    """A column as plain Python values (datetimes, lists, dicts), which state can store."""
    kind = series.dtype.kind
    if kind == "M":
        return [None if v is None or v != v else v.to_pydatetime() for v in series.tolist()]
    if kind == "m":
        return [None if v is None or v != v else v.to_pytimedelta() for v in series.tolist()]
    values = series.tolist()
    if kind == "O":
        import pandas as pd
        if pd.api.types.infer_dtype(series, skipna=True) in ("string", "bytes", "empty", "boolean", "integer"):
            return values     # plain Python values already (the common case: strings)
        return [_plain(v) for v in values]
    return values


_PASS = frozenset({str, int, float, bool, type(None), bytes, _dt.datetime, _dt.date, _dt.time, _dt.timedelta})


def _plain(v):
    """``v`` with pandas/numpy values (Timestamp, ndarray, numpy scalars) made plain Python
    ones, in nested lists and dicts (struct and array columns) too. Values that are plain
    already pass with one type lookup: struct columns hold many of them."""
    t = type(v)
    if t in _PASS:
        return v
    if t is dict:
        return {k: x if type(x) in _PASS else _plain(x) for k, x in v.items()}
    if t is list or t is tuple:
        return [x if type(x) in _PASS else _plain(x) for x in v]
    import numpy as np
    import pandas as pd
    if isinstance(v, np.ndarray):
        # tolist() gives Python scalars for every dtype but object (whose items may nest)
        # and datetime64[ns] (ints: datetimes hold microseconds)
        if v.dtype.kind == "M":
            v = v.astype("datetime64[us]")
        return v.tolist() if v.dtype.kind != "O" else [_plain(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if v is pd.NaT:
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if isinstance(v, np.generic):
        return v.item()
    return v
