"""Initial state (``initial_state=``): rows that seed an operator's state in a query's first
batch, as Spark's ``transformWithStateInPandas(..., initialState=...)``. See RFC 0008.

The driver *stages* the initial-state DataFrame before the query starts: one small Spark
job routes its rows exactly as the input's (same key-group hash, same tokens, same shard
count) and each of its tasks writes its partition as one Arrow IPC object under the state
root, ``_initial/<operator name>/<stage id>/p<partition>.arrow``; the job's result (the
objects and the key groups each holds) travels to the shards in the ``ShardSpec``. A shard
that opens its state empty — a query's first batch, or a re-run of it — reads the objects
of its key groups and calls ``on_initial_state`` before its first row, so the load is part
of the batch's checkpoint. A shard that resumes a checkpoint never reads them.

``check_keys`` and ``input_rows`` are the driver's checks; ``HarnessRows`` is the same
source for the test harness (rows in memory).
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

STAGE = "_initial"
KEEP_MS = 7 * 24 * 3600 * 1000      # stages older than this are removed by the next staging of the operator
_RESULT = "object string, first int, last int, rows long"


def _type(field_) -> str:
    return field_.dataType.simpleString()


def check_frame(initial, what: str = "initial_state"):
    """``initial`` must be a batch DataFrame (a classic or a Spark Connect one)."""
    if not all(hasattr(initial, a) for a in ("schema", "columns", "isStreaming", "mapInArrow")):
        raise TypeError(f"{what} must be a (batch) Spark DataFrame, got {type(initial).__name__}")
    if initial.isStreaming:
        raise ValueError(f"{what} must be a batch DataFrame, not a streaming one: it is read once, "
                         f"before the query's first batch")


def check_keys(initial, df, keys: list, what: str = "initial_state") -> None:
    """Every key column is in ``initial`` with the input's type: a key's group is the hash of
    its values, and Spark hashes an int and a long (or a string and a binary) differently,
    so a key of another type would land in another key group than its events."""
    check_frame(initial, what)
    for k in keys:
        if k not in initial.columns:
            raise ValueError(f"{what} has no key column {k!r}; it has {initial.columns}")
        got, want = _type(initial.schema[k]), _type(df.schema[k])
        if got != want:
            raise TypeError(f"{what} key column {k!r} is {got} but the input's is {want}: keys are routed by "
                            f"a hash of their type, so they must match (cast it, e.g. "
                            f"F.col({k!r}).cast({want!r}))")


def input_rows(initial, df, keys: list, what: str = "initial_state"):
    """For the built-ins whose initial rows are input rows that came before the stream
    (buffer, delay, timeout, session_window): ``initial`` with the input's columns, in the
    input's order and of the input's types (other columns are left out)."""
    check_keys(initial, df, keys, what)
    for f in df.schema.fields:
        if f.name not in initial.columns:
            raise ValueError(f"{what} has no column {f.name!r}: its rows are input rows, so it needs the "
                             f"input's columns {df.columns}")
        if _type(initial.schema[f.name]) != _type(f):
            raise TypeError(f"{what} column {f.name!r} is {_type(initial.schema[f.name])} but the input's is "
                            f"{_type(f)}: its rows are input rows (cast it)")
    return initial.select(*df.columns)


def stage(initial, keys: list, *, key_groups: int, shards: int, root: str, name: str, dkv_options: dict,
          event_time: str | None, order: list) -> "StagedRows":
    """Run the staging job (see the module's doc) and return what the shards need to read it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    import dkv

    from ._shards import KG, TOKEN, route

    reserved = [c for c in initial.columns if c.startswith("__spark_ops_")]
    if reserved:
        raise ValueError(f"initial_state column(s) {reserved} use the reserved prefix __spark_ops_")
    ident = f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}"
    prefix = f"{STAGE}/{name}/"
    store_opts = {k: v for k, v in dkv_options.items() if k in dkv.STORE_OPTIONS}

    def write(iterator):
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark import TaskContext

        from ._runtime import _store
        part = TaskContext.get().partitionId()
        store = _store(root, store_opts)
        if part == 0:
            _forget_old(store, prefix, ident)
        batches = [b for b in iterator if b.num_rows]
        if not batches:
            return
        table = pa.Table.from_batches(batches).drop_columns([TOKEN])
        span = pc.min_max(table.column(KG))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
            w.write_table(table)
        obj = f"{prefix}{ident}/p{part:05d}.arrow"
        store.put(obj, sink.getvalue().to_pybytes())     # a retried task writes the same name again
        yield pa.RecordBatch.from_pylist([{"object": obj, "first": span["min"].as_py(), "last": span["max"].as_py(),
                                           "rows": table.num_rows}], schema=_result_schema())

    routed = route(initial, keys, key_groups, shards)
    parts = [(r["object"], r["first"], r["last"], r["rows"])
             for r in routed.repartition(shards, F.col(TOKEN)).mapInArrow(write, _RESULT).collect()]
    columns = list(initial.columns)
    instants = frozenset(f.name for f in initial.schema.fields if isinstance(f.dataType, TimestampType))
    et = event_time if event_time in columns and initial.schema[event_time].dataType.typeName() in (
        "timestamp", "long", "integer") else None
    total = sum(p[3] for p in parts)
    log.info("spark_ops: staged %d initial-state rows of operator %s in %s/%s%s (%d objects)", total, name, root,
             prefix, ident, len(parts))
    return StagedRows(root=root, dkv_options=store_opts, parts=sorted(parts), keys=list(keys), columns=columns,
                      order=[c for c in order if c in columns], event_time=et, instants=instants, ident=ident,
                      rows=total)


def _result_schema():
    import pyarrow as pa
    return pa.schema([("object", pa.string()), ("first", pa.int32()), ("last", pa.int32()), ("rows", pa.int64())])


def _forget_old(store, prefix: str, keep: str) -> None:
    """Remove stages of this operator older than KEEP_MS: a stage serves the first batch of
    the start that made it only (a later start stages again)."""
    cutoff = int(time.time() * 1000) - KEEP_MS
    old = []
    for name, _ in store.list(prefix):
        stage_id = name[len(prefix):].split("/", 1)[0]
        try:
            made = int(stage_id.split("-", 1)[0])
        except ValueError:
            continue
        if stage_id != keep and made < cutoff:
            old.append(name)
    if old:
        store.delete_many(old)


@dataclass
class StagedRows:
    """An initial state staged by ``stage`` (picklable: it travels in the ShardSpec)."""
    root: str                       # the state root the stage objects live under
    dkv_options: dict
    parts: list                     # (object, first key group, last key group, rows)
    keys: list
    columns: list                   # the initial frame's columns: a row dict's keys
    order: list = field(default_factory=list)
    event_time: str | None = None
    instants: frozenset = frozenset()     # the top-level timestamp columns (see _worker._events)
    ident: str = ""
    rows: int = 0

    def chunks(self, lo: int, hi: int):
        """The events (key group, key parts, event ms, row) of key groups ``[lo, hi)``, in
        processing order, as lists (the runtime's chunks)."""
        wanted = [obj for obj, first, last, _ in self.parts if first < hi and last >= lo]
        if not wanted:
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        from ._runtime import _store
        from ._shards import KG
        from ._taskrows import TaskRows
        from ._worker import EventChunks
        store = _store(self.root, self.dkv_options)
        tables = [pa.ipc.open_stream(pa.py_buffer(store.get(obj))).read_all() for obj in wanted]
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        kg = table.column(KG)
        table = table.filter(pc.and_(pc.greater_equal(kg, lo), pc.less(kg, hi)))
        rows = TaskRows(table, self.keys, self.columns, self.order, self.event_time)
        yield from EventChunks(rows, self.keys, self.columns, self.event_time, self.instants)


class HarnessRows:
    """The initial state of an OperatorHarness: events in memory, grouped as a shard reads them."""

    def __init__(self, events: list) -> None:
        self.events = events        # (key group, key parts, event ms, row), in processing order
        self.ident = f"harness-{uuid.uuid4().hex[:12]}"

    def chunks(self, lo: int, hi: int):
        mine = [e for e in self.events if lo <= e[0] < hi]
        return [mine] if mine else []
