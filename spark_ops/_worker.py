"""What runs in Spark's Python workers: a task's Arrow rows become the runtime's events,
the shard runs its batch, and the emitted rows go back to Spark as Arrow.

``partition_function`` makes the function that ``mapInArrow`` runs in each task (the plan
is built on the driver in _plan.py; Spark ships this function to the workers). In a task
the rows are sorted by key group, key and the order columns (key groups and keys descending
in odd batches: _runtime.keys_descending) and handed to
``run_shard_batch``, in the task's worker or in the shard's host (_host.py), which runs
``run_task`` exactly as the worker would; the emitted rows go back to Spark as Arrow
record batches built where the shard ran.
"""
from __future__ import annotations

import datetime as _dt
import logging
import time
import uuid

from . import _host, _host_server, _identity, _progress, _runs
from ._output import rows_to_arrow
from ._runtime import ShardSpec, _store, keys_descending, run_shard_batch
from ._shards import KG
from ._taskrows import RemoteRows, TaskRows

log = logging.getLogger(__name__)

"""The key-group column the plan adds (_plan.py) and the tasks read."""
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def partition_function(spec: ShardSpec, name: str, keys: list, columns: list, order: list, out_schema,
                        instants: dict, shard_host: bool, isolated: bool, metrics_schema=None,
                        function_name: str | None = None):
    """``metrics_schema``: the Arrow schema of the output with the hidden metrics column
    (see _progress.py), or None to hand Spark the output rows only. ``function_name``: what
    the function is called (the plan shows it; the driver's check finds the operator by it)."""
    n = spec.shards

    def run(iterator):
        from pyspark import TaskContext

        started = int(time.time() * 1000)     # the next batch's processing time (RFC 0001, §2.5)
        ctx = TaskContext.get()
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        query = ctx.getLocalProperty("sql.streaming.queryId")
        run = _runs.run_id(ctx) if batch is not None else None
        shard = ctx.partitionId()
        table = task_table(iterator)
        final = batch is None
        if table is not None:
            import pyarrow.compute as pc
            found = {((kg + 1) * n - 1) // spec.key_groups for kg in pc.unique(table.column(KG)).to_pylist()}
            if final and len(found) == 1:
                shard = found.pop()     # a batch DataFrame's state is the task's own: only rows count
            elif found != {shard}:
                raise RuntimeError(f"spark_ops: task {shard} got rows of shards {sorted(found)}: the operator's "
                                   f"stage was merged with another (union/coalesce) — pass isolate=True")
        elif final and spec.initial is None:
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
        rows = TaskRows(table, keys, columns, order, spec.event_time, keys_descending(batch_id))
        del table       # the rows hold it
        args = (local, batch_id, shard, rows, keys, columns, order, instants, final, out_schema, started,
                metrics_schema, name, run)
        ran = False
        if shard_host and not final:
            if not isolated and not _host.first_run_in_task(local.state, shard, ctx.taskAttemptId()):
                # Several partitions ran in this one task (a coalesce after the operator,
                # in its stage): this one is not shard `shard`, whatever its number says.
                raise RuntimeError(f"spark_ops: partition {shard} ran twice in one Spark task: the "
                                   f"operator's stage was merged with another (coalesce/union) — "
                                   f"pass isolate=True")
            sent = 0
            try:
                # The host sends the output as it converts it (run_task's sink): each part
                # goes on to Spark while the batch runs, and neither process holds it all.
                # The host asks the rows a chunk at a time as it reaches them (RemoteRows):
                # it holds a chunk of the task, not the task.
                remote = (*args[:3], rows.remote(), *args[4:])
                for part in _host.call_parts(shard, run_task, remote, rows=rows):
                    sent += 1
                    yield part
                ran = True
            except _host.HostError as e:
                if not isolated or sent:    # only a host can tell a merged stage apart; or output
                    raise                   # went out already: fail the task (Spark runs it again)
                log.warning("spark_ops: running shard %d in this worker: %s", shard, e)
            except Exception as e:
                if getattr(e, "_spark_ops_remote", False):
                    # The operator's own error, from the host: its note says where it was
                    # raised; the frames of the call to the host would only hide that.
                    raise e.with_traceback(None) from None
                raise
        if not ran:
            yield from run_task(*args)
    if function_name:
        run.__name__ = run.__qualname__ = function_name
    return run


TASK_CHUNK_ROWS = 1 << 20     # rows of a task's table per chunk (task_table)


def task_table(batches):
    """A task's record batches (an iterable of Spark's, maxRecordsPerBatch rows each) as one
    table of few chunks, TASK_CHUNK_ROWS rows each (None without rows). The rows are ordered,
    then taken a chunk at a time (TaskRows): over ~100 chunks per column, Arrow's sort and
    takes cost ~35-70 MB more at their peak at 1,000,000 keys, and the takes 20x the time,
    than over one. The batches are copied a chunk's worth at a time as they come,
    so the worker holds its rows and one chunk more, not two copies of the task."""
    import pyarrow as pa
    parts: list = []
    pending: list = []
    n = 0
    for b in batches:
        if not b.num_rows:
            continue
        pending.append(b)
        n += b.num_rows
        if n >= TASK_CHUNK_ROWS:
            parts.append(pa.Table.from_batches(pending).combine_chunks())
            pending, n = [], 0
    if pending:
        parts.append(pa.Table.from_batches(pending).combine_chunks())
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)


def run_task(spec: ShardSpec, batch_id: int, shard: int, rows, keys, columns, order, instants, final: bool,
             out_schema=None, batch_time: int | None = None, metrics_schema=None, operator: str | None = None,
             run: str | None = None):
    """One shard's task after Spark's part: the rows in order, the operator, the checkpoint.
    Runs in the task's Python worker or in the shard's host (see _host). ``rows``: the
    task's rows, a TaskRows (or in a host, RemoteRows of the worker's), or an Arrow table
    (None without rows), ordered here. Returns the emitted rows: a list of
    dicts, or with ``out_schema`` (an Arrow schema) a list of record batches. The rows
    become Python events a slice at a time (EventChunks), and the output Arrow batches as
    it grows, so a batch of millions of rows runs in bounded memory. With ``metrics_schema``
    (the output schema + the hidden metrics column) every output batch gets that column,
    null, and one more row carries the shard's figures of the batch (see _progress.py);
    either way a one-line summary is logged at INFO on ``spark_ops.metrics``. ``run``: the
    stream's Spark run id; a run that a newer run of the query replaced on this state fails
    with StaleRunError before it opens the shard (see _runs.py)."""
    t0 = time.perf_counter()
    if run is not None and not final:
        # The run's verdict on its operators, decided by the driver when it started (RFC 0010):
        # a refused run stops here, before it writes anything.
        query_dir, _, name = spec.state.rpartition("/")
        root, _, query = query_dir.rpartition("/")
        qd = _identity.QueryDir(root, query, spec.dkv_options)
        decided = _identity.check_verdict(qd, run)
        first = _runs.check(_store(spec.state, spec.dkv_options), spec.state, run, batch_id, shard)
        if not decided:
            _identity.check_run(qd, run, name, _identity.identity(spec.operator, name, spec.name is not None),
                                batch_id, first, spec.retire)
    if not isinstance(rows, (TaskRows, RemoteRows)):    # an Arrow table (or None): ordered here
        rows = TaskRows(rows, keys, columns, order, spec.event_time, keys_descending(batch_id))
    sorted_ms = rows.sort_ms        # a sort made before this call (in the worker, for a host): prepare_ms has it
    rows.sort()     # before the shard opens: a key that has no order fails here (TaskRows.sort)
    events = EventChunks(rows, keys, columns, spec.event_time, instants)
    heartbeat = events.heartbeat()
    convert = None if out_schema is None else (lambda rows: rows_to_arrow(rows, out_schema))
    send = _host_server.part_sink()        # in a shard host: output parts go to the worker as they are made
    sink = send
    if send is not None and metrics_schema is not None:
        sink = lambda part: send(_progress.with_null_metrics(part, metrics_schema))  # noqa: E731
    emitted, metrics = run_shard_batch(spec, batch_id, shard, events, batch_time=batch_time, end_of_input=final,
                                       heartbeat_time=heartbeat, prepare_ms=(time.perf_counter() - t0) * 1000 + sorted_ms,
                                       convert=convert, sink=sink, run=run)
    if _progress.log.isEnabledFor(logging.INFO):
        _progress.log.info("%s", _progress.summary_line(operator or type(spec.operator).__name__.lower(), metrics))
    if metrics_schema is not None and out_schema is not None:      # per output batch, not per row
        emitted = [_progress.with_null_metrics(b, metrics_schema) for b in emitted]
        emitted.append(_progress.metrics_batch(metrics, metrics_schema))
    if final:
        from ._opened import drop_cached
        drop_cached(spec.state)
    return emitted


EVENT_ROWS = 1 << 12
"""Rows made Python events at once: a chunk of a task's rows (TaskRows.size, one ask of the
worker) becomes event lists of this many rows each. An event costs ~800 bytes as Python
objects (its row dict, key and tuple, and the pandas frame they come from): a host holds
~3 MB of them at a time instead of ~13 MB for a whole chunk, and converting 4,096 rows at a
time is no slower (RFC 0012, *Step 13*)."""


class EventChunks:
    """A task's rows (TaskRows, or a shard host's RemoteRows of them) as event lists of up
    to EVENT_ROWS rows each (run_shard_batch's chunks) in processing order, converted when
    reached; iterable again (a fenced shard runs its batch again)."""

    def __init__(self, rows, keys, columns, event_time, instants) -> None:
        self.rows, self.keys, self.columns, self.event_time, self.instants = rows, keys, columns, event_time, instants
        # A batch that prefetches (its shard opened cold on S3) reads ahead a chunk's keys at
        # once (one round of concurrent ranged reads): its chunks become events whole.
        self.whole_chunks = False

    def __iter__(self):
        from ._keys import to_parts
        rows = self.rows
        for i in range(-(-rows.num_rows // rows.size)):
            chunk = rows.chunk(i)
            step = max(1, chunk.num_rows) if self.whole_chunks else EVENT_ROWS
            for start in range(0, chunk.num_rows, step):
                pdf = _arrow_to_pandas(chunk.slice(start, step), self.instants)
                events = _events(pdf, self.keys, self.columns, self.event_time, to_parts, self.instants)[0]
                pdf = None          # not kept while the events are run and the next slice converts
                yield events

    def distinct_keys(self, beyond: int) -> int:
        """How many keys the rows hold, counted only if there are more than ``beyond``
        (TaskRows.distinct_keys)."""
        return self.rows.distinct_keys(beyond)

    def heartbeat(self):
        """The largest event time (ms) of rows with a null key, or None (TaskRows.heartbeat)."""
        return self.rows.heartbeat()


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


def _events(pdf, keys, columns, event_time, to_parts, instants):
    """Rows (``pdf``, in processing order: see _sort_order) as (key group, key parts, event
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
