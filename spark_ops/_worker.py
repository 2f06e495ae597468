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
                        instants: frozenset, shard_host: bool, isolated: bool, metrics_schema=None,
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
objects (its row dict, key and tuple, and the column lists they come from): a host holds
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
                yield _events(chunk.slice(start, step), self.keys, self.columns, self.event_time, to_parts,
                              self.instants)[0]

    def distinct_keys(self, beyond: int) -> int:
        """How many keys the rows hold, counted only if there are more than ``beyond``
        (TaskRows.distinct_keys)."""
        return self.rows.distinct_keys(beyond)

    def heartbeat(self):
        """The largest event time (ms) of rows with a null key, or None (TaskRows.heartbeat)."""
        return self.rows.heartbeat()


def _naive_timestamps(ty):
    """``ty`` with every timestamp nested in it made a plain (UTC) one of microseconds, and
    durations microseconds too (the values are UTC instants either way, and then become
    naive UTC datetimes and timedeltas, as Python's types hold microseconds), and
    dictionary-encoded columns their values' type."""
    import pyarrow as pa
    if pa.types.is_timestamp(ty):
        return pa.timestamp("us")
    if pa.types.is_duration(ty):
        return pa.duration("us")
    if pa.types.is_dictionary(ty):
        return _naive_timestamps(ty.value_type)
    if pa.types.is_struct(ty):
        return pa.struct([f.with_type(_naive_timestamps(f.type)) for f in ty])
    if pa.types.is_map(ty):
        return pa.map_(ty.key_field.with_type(_naive_timestamps(ty.key_type)),
                       ty.item_field.with_type(_naive_timestamps(ty.item_type)))
    if pa.types.is_list(ty):
        return pa.list_(ty.value_field.with_type(_naive_timestamps(ty.value_type)))
    if pa.types.is_large_list(ty):
        return pa.large_list(ty.value_field.with_type(_naive_timestamps(ty.value_type)))
    if pa.types.is_fixed_size_list(ty):
        return pa.list_(ty.value_field.with_type(_naive_timestamps(ty.value_type)), ty.list_size)
    return ty


def _micros(col):
    """A timestamp column's instants as microseconds since the epoch: a numpy int64 array
    without nulls, else a list with None for them."""
    import pyarrow as pa
    if col.type.unit != "us":
        col = col.cast(pa.timestamp("us", tz=col.type.tz))
    col = col.cast(pa.int64())
    return col.to_numpy() if not col.null_count else col.to_pylist()


def _python_values(col, instant: bool) -> list:
    """A column's values as plain Python values, which state can store: a top-level
    timestamp column (``instant``) as timezone-aware UTC datetimes, timestamps nested in
    structs, arrays and maps as naive UTC datetimes, structs and maps as dicts, arrays as
    lists; a null is None, an int stays an int."""
    if instant:
        return _utc_datetimes(_micros(col))
    plain = _naive_timestamps(col.type)
    if plain != col.type:
        import pyarrow.compute as pc
        col = pc.cast(col, plain, safe=False)       # nanoseconds, if any, cut to microseconds
    # maps_as_pydicts costs pyarrow its fast path (a scalar at a time): only where maps are
    return col.to_pylist(maps_as_pydicts="strict") if _has_map(plain) else col.to_pylist()


def _has_map(ty) -> bool:
    """True when an Arrow type is or holds a map."""
    import pyarrow as pa
    if pa.types.is_map(ty):
        return True
    if pa.types.is_struct(ty):
        return any(_has_map(f.type) for f in ty)
    if pa.types.is_list(ty) or pa.types.is_large_list(ty) or pa.types.is_fixed_size_list(ty):
        return _has_map(ty.value_type)
    return False


def _events(table, keys, columns, event_time, to_parts, instants):
    """Rows (an Arrow table in processing order, see _sort_order; or None) as (key group,
    key parts, event ms, row dict), and the largest event time (ms) of rows with a null
    key, or None. Those rows (a heartbeat) are dropped, but their event times advance the
    watermark. ``instants``: the top-level timestamp columns (their rows' datetimes are
    made from their exact instants)."""
    if table is None or not table.num_rows:
        return [], None
    import pyarrow as pa
    import pyarrow.compute as pc
    heartbeat = None
    if any(table.column(k).null_count for k in keys):
        keyed = table.column(keys[0]).is_valid()
        for k in keys[1:]:
            keyed = pc.and_(keyed, table.column(k).is_valid())
        if event_time is not None:
            beats = table.filter(pc.invert(keyed)).column(event_time)
            if beats.null_count < len(beats):
                if event_time in instants:
                    heartbeat = int(max(v for v in _micros(beats) if v is not None)) // 1000
                else:
                    heartbeat = int(pc.max(beats).as_py())
        table = table.filter(keyed)
        if not table.num_rows:
            return [], heartbeat
    for k in keys:
        col = table.column(k)
        if pa.types.is_floating(col.type) and (nans := pc.sum(pc.is_nan(col)).as_py()):
            raise ValueError(f"spark_ops: key column {k!r} holds NaN in {nans} row(s) of this task: a key cannot be "
                             f"NaN (it equals no value, itself included); filter those rows or fill the column "
                             f"(df.where(~F.isnan({k!r})), df.na.fill(...)) before the operator")
    # the event-time column's instants, read once: its events' times and (a row column) its datetimes
    micros = _micros(table.column(event_time)) if event_time in instants else None
    values = {c: _utc_datetimes(micros) if c == event_time and micros is not None
              else _python_values(table.column(c), c in instants) for c in dict.fromkeys([*columns, *keys])}
    n = table.num_rows
    if event_time is None:
        ts = [None] * n
    elif micros is not None:
        ts = ((micros // 1000).tolist() if not isinstance(micros, list)      # no nulls
              else [None if v is None else v // 1000 for v in micros])
    else:
        raw = values[event_time] if event_time in values else table.column(event_time).to_pylist()
        ts = [None if v is None or v != v else int(v) for v in raw]
    kgs = table.column(KG).to_pylist()
    parts = _plain_key if all(_native_key(table.column(k).type) for k in keys) else to_parts
    keyvals = [(v,) for v in values[keys[0]]] if len(keys) == 1 else list(zip(*[values[k] for k in keys]))
    rows = list(map(_row_maker(columns), *[values[c] for c in columns])) if columns else [{}] * n
    if parts is not _plain_key:
        keyvals = list(map(parts, keyvals))
    return list(zip(kgs, keyvals, ts, rows)), heartbeat


def _plain_key(kv: tuple) -> tuple:
    """Key parts of str/int keys: the key itself (see _keys.to_parts)."""
    return kv


def _native_key(ty) -> bool:
    """True when a key column (its Arrow type) holds str or int values (key parts as they are)."""
    import pyarrow as pa
    return pa.types.is_integer(ty) or pa.types.is_string(ty) or pa.types.is_large_string(ty)


def _utc_datetimes(micros) -> list:
    """Timezone-aware UTC datetimes from microseconds since the Unix epoch (a numpy array,
    or a list with None for nulls). Equal instants become one shared object (a batch's rows
    often share timestamps): fewer objects to build and hold, and objectspace encodes a
    shared datetime once."""
    if not isinstance(micros, list):       # no nulls: convert in C
        import numpy as np
        import pandas as pd
        unique, inverse = np.unique(micros, return_inverse=True)
        objs = pd.DatetimeIndex(pd.to_datetime(unique, unit="us", utc=True)).to_pydatetime()
        return objs[inverse].tolist()
    cache: dict = {}
    return [None if v is None else cache.get(v) or cache.setdefault(v, _EPOCH_UTC + _dt.timedelta(microseconds=v))
            for v in micros]


def _row_maker(columns: list):
    """A function building a row dict from column values, faster than dict(zip(...))."""
    args = ", ".join(f"_{i}" for i in range(len(columns)))
    body = ", ".join(f"{c!r}: _{i}" for i, c in enumerate(columns))
    return eval(f"lambda {args}: {{{body}}}", {})  # noqa: S307 - column names are repr()-quoted


