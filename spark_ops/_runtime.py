"""The shard runtime: open a shard's state for a batch, run an operator, checkpoint.

Pure Python (no Spark): the Python workers (``_worker.py``) and the test harness
(``testing.py``) both call ``run_shard_batch``. A shard's open state is cached per
process and reused by the next batch when it is still at epoch ``batch - 1``; otherwise
it is reopened (shards move between Python workers from batch to batch).
"""
from __future__ import annotations

import json
import logging
import threading
import time

import dkv

from . import _layout, _rows, _watermark
from ._progress import resident_bytes
from ._keys import user_key
from ._opened import _SHARDS, close, keep, take  # noqa: F401 - _SHARDS: tests look at the kept states
from ._shardstate import OUT_CHUNK, ShardSpec, ShardState, _inplace_note, _operator_name  # noqa: F401 - re-exported
from ._timers import EVENT_TIME, PROCESSING_TIME, Timer
from .operator import Context

log = logging.getLogger(__name__)

END_OF_TIME = (1 << 62)
TIMER_ROUNDS = 1000
"""Rounds of firing due timers in one batch: on_timer may register timers due at once."""
CHUNK_EVENTS = 1 << 14      # events per chunk of a batch (a list is cut so; see _chunked)


def keys_descending(batch: int) -> bool:
    """Whether batch ``batch`` meets its keys in descending order (key group, then key; a
    key's own rows stay in their order): the odd batches do, the even ones ascend. Each batch
    so starts with the keys the previous one ended with, which the object cache still holds:
    a shard whose keys outgrow its budget reloads only the ones that do not fit, where the
    same order every batch would have its least recently used cache drop each key just before
    its next use and reload them all (RFC 0012, *Keys in alternating order*). Derived from the
    batch id, so a batch run again meets its keys in the same order."""
    return batch % 2 == 1


_IGNORED: set = set()


def _initial_ident(spec: ShardSpec) -> str:
    return str(getattr(spec.initial, "ident", None) or id(spec.initial))


def _initial_ignored(store, spec: ShardSpec, shard: int, batch: int) -> None:
    """Say once per start (initial-state source), state and shard that ``initial_state=`` is
    not loaded: the operator's state existed when this start's first batch ran (a restart
    from a checkpoint). A shard of a start that did load it (its marker exists) says
    nothing. At most one existence check per process, start and shard."""
    ident = _initial_ident(spec)
    key = (spec.state, shard, ident)
    if key in _IGNORED:
        return
    _IGNORED.add(key)
    if store.exists(f"initial/{ident}"):
        return
    log.warning("spark_ops: initial_state ignored by shard %d at batch %d of %s: the operator's state exists "
                "(restored from a checkpoint); an initial state is loaded only in a query's first batch, "
                "when the operator has no state", shard, batch, spec.state)


_STORES: dict = {}
_CONFIG: dict = {}
_LOCK = threading.Lock()


def _store(location: str, dkv_options: dict):
    opts = {k: v for k, v in dkv_options.items() if k in dkv.STORE_OPTIONS}
    key = (location, tuple(sorted(opts.items())))
    with _LOCK:
        s = _STORES.get(key)
        if s is None:
            s = _STORES[key] = dkv.open_store(location, **opts)
        return s


_RERUNS: set = set()


def _note_rerun(spec: ShardSpec, st: ShardState, batch: int, shard: int, run: str | None) -> None:
    """A batch this process already ran in this run of the query runs again: a task retry,
    or (every batch, on every shard) a foreachBatch whose function runs two actions on the
    operator's output. Said once per state and run at WARNING, each time at INFO."""
    if run is None or st.vars._run != run:
        return
    key = (spec.state, run)
    level = logging.INFO if key in _RERUNS else logging.WARNING
    _RERUNS.add(key)
    log.log(level, "spark_ops: shard %d of %s runs batch %d again in the same run of the query (%s): if it happens "
            "in every batch, a foreachBatch function runs two actions (collect, count, write...) on the operator's "
            "output, which runs the operator twice; persist() the batch DataFrame first (and unpersist() it "
            "after), as Spark's guide says for foreachBatch", shard, spec.state, batch, run)


def _shard_state(spec: ShardSpec, store, groups: int, batch: int, shard: int, fresh: bool,
                 run: str | None = None) -> ShardState:
    st = take((spec.state, shard, spec.shards))
    if st is not None and not fresh and st.layout.shards == spec.shards:
        if st.epoch == batch - 1:
            return st
        if st.epoch >= batch:
            _note_rerun(spec, st, batch, shard, run)
        try:
            if st.epoch < batch - 1 and st.catch_up(store, spec, batch):
                return st
        except Exception as e:  # noqa: BLE001 - any doubt: reopen from storage
            log.info("shard %d could not catch up (%s); reopening", shard, e)
    if st is not None:
        close(st)
    return ShardState(store, spec, groups, batch, shard)


def run_shard_batch(spec: ShardSpec, batch: int, shard: int, events, *, batch_time: int | None = None,
                    watermark: int | None = None, processing_time: int | None = None,
                    end_of_input: bool = False, heartbeat_time: int | None = None,
                    prepare_ms: float | None = None, convert=None, sink=None, run: str | None = None
                    ) -> tuple[list, dict]:
    """Run one shard of one batch. ``events``: (key group, key parts, event ms or None, row)
    sorted in processing order, as a list or as a re-iterable of lists (chunks a caller
    converts when reached). Returns (emitted rows, metrics), or with ``convert`` (a
    function of a list of rows) (the list of its results, metrics): emitted rows are
    converted as they pile up, the rest while the checkpoint uploads. With ``sink`` too,
    each part converted during the batch goes to ``sink(part)`` at once (a shard host
    sends it on: the output is not held) and the returned list holds the rest; a batch
    fenced after a part went out then fails instead of running again.

    The watermark and processing time come from the previous batch's records unless given
    (the test harness gives them); without such records (a first batch) the processing
    time is the ``batch_time`` of the first shard to run the batch (_watermark.first_time).
    ``batch_time``: this batch's time (ms; None: 0), recorded as the next batch's
    processing time — never below this batch's (a clock that stepped back does not move
    processing time back). ``end_of_input``: no more rows will come (a batch
    DataFrame), so after the rows every timer fires. ``heartbeat_time``: the largest event
    time of rows without a key (dropped), which advances every input's watermark.
    ``prepare_ms``: what the caller spent turning its rows into ``events`` (a metric).
    ``run``: the run of the query's code this batch belongs to (a Spark run id; the state
    records which variables each run used)."""
    t0 = time.perf_counter()
    store = _store(spec.state, spec.dkv_options)
    groups = _CONFIG.get(spec.state)
    if groups is None:
        groups = _CONFIG[spec.state] = _layout.read_config(store, spec.key_groups, type(spec.operator).__name__)
    if groups != spec.key_groups:
        raise ValueError(f"the state in {spec.state} was created with key_groups={groups}; the key-group "
                         f"count cannot change (got key_groups={spec.key_groups}); pass key_groups={groups}")
    inputs = spec.inputs or [None]
    if batch > 0:
        basis, prev_time, _ = _watermark.read(store, batch - 1, len(inputs))
    else:
        basis, prev_time = [_watermark.NONE] * len(inputs), _watermark.NONE
    if watermark is None:
        watermark = _watermark.watermark(basis, spec.delay_ms)
    floor = prev_time       # processing time never goes back (see the record below)
    if processing_time is None:
        if prev_time != _watermark.NONE:
            processing_time = prev_time
        else:               # the first batch: the first shard's clock, kept for the others and re-runs
            processing_time = floor = _watermark.first_time(store, batch, batch_time or 0)
    new_basis = list(basis)
    if heartbeat_time is not None:
        new_basis = [max(b, heartbeat_time) for b in new_basis]
    for attempt in range(3):
        t_open = time.perf_counter()
        st = _shard_state(spec, store, groups, batch, shard, fresh=attempt > 0, run=run)
        open_ms = (time.perf_counter() - t_open) * 1000
        try:
            st.sink, st.sent = (sink if convert is not None else None), 0
            st.meet_keys(events)
            try:
                emitted, metrics, finish = _process(st, spec, batch, shard, _chunked(events), watermark,
                                                    processing_time, end_of_input, new_basis, convert, run)
            finally:
                # The rows are the caller's now: a shard kept open between batches must not hold
                # the last ones (up to OUT_CHUNK rows, each with a whole buffer) until the next.
                st.sink, st.emitted = None, []
            n_emitted = metrics.pop("emitted")
            # While the checkpoint uploads: the caller's conversion of the rest of the output.
            before = st.output_s
            if convert is not None:
                emitted = st.converted + ([st.timed(convert, emitted)] if emitted or not st.converted else [])
                st.converted = []
                metrics["output_ms"] = round(st.output_s * 1000, 1)
            metrics.update(finish(st.output_s - before))
            break
        except dkv.FencedError as e:
            # Another worker ran this shard meanwhile: reopen at batch - 1 and run again,
            # unless output went to the sink already (the task fails; Spark runs it again).
            close(st)
            if attempt == 2 or st.sent:
                raise
            log.warning("shard %d batch %d fenced (%s); running the batch again", shard, batch, e)
        except BaseException:
            # The operator's error, or a state that refused the batch: the state is dropped
            # (the next batch reopens it from its checkpoint), and closed, not left to the GC.
            close(st)
            raise
    keep((spec.state, shard, spec.shards), st)
    metrics.update(batch=batch, shard=shard, shards=spec.shards, emitted=n_emitted,
                   watermark=watermark, processing_time=processing_time,
                   open_ms=round(open_ms, 1), duration_ms=round((time.perf_counter() - t0) * 1000, 1))
    if prepare_ms is not None:
        metrics["prepare_ms"] = round(prepare_ms, 1)
    # One object per shard and batch: the watermark basis and batch time in its name (read by
    # the next batch's shards with one LIST), the metrics in its body. Written after the
    # checkpoint, before the task reports success (a re-run writes the same name again).
    _watermark.write(store, batch, spec.shards, shard, new_basis,
                     max(floor, batch_time if batch_time is not None else 0),   # never backwards
                     json.dumps(metrics).encode())
    log.info("spark_ops shard %d batch %d: %s", shard, batch, metrics)
    return emitted, metrics


def _chunked(events):
    """Events as an iterator of lists: a list is cut in slices; anything else must be an
    iterable of lists that can be iterated again (a fenced shard runs its batch again)."""
    if isinstance(events, list):
        n = CHUNK_EVENTS
        return (events[i:i + n] for i in range(0, len(events), n))
    it = iter(events)
    if it is events:
        raise TypeError("run_shard_batch takes a list of events or a re-iterable of event lists, not a "
                        "one-pass iterator")
    return it


def _process(st: ShardState, spec: ShardSpec, batch: int, shard: int, chunks, watermark, ptime,
             end_of_input: bool = False, basis: list | None = None, convert=None, run: str | None = None):
    """Run the operator over the event chunks, fire timers, start the commit. ``basis``
    (the watermark basis per input) is raised to the event times seen. With ``convert``,
    emitted rows are converted (into ``st.converted``) whenever OUT_CHUNK of them wait."""
    op = spec.operator
    st.emitted = []
    st.converted = []
    st.output_s = 0.0
    emitted = 0
    late = rows = 0
    # Declared state variables: the state is brought to the code's declarations first
    # (renames, kind migrations, upgrades, drops; RFC 0010), then what expired by this
    # batch's processing time goes, both before the operator runs.
    st.ttl.ptime = ptime
    deletions, registered, deleted = st.deletions(), st.timers.registered, st.timers.deleted
    evictions = st.cache.evictions
    prefetch, st.cold = st.cold, False
    if prefetch:
        st.prefetch_heads()
        if hasattr(chunks, "whole_chunks"):     # EventChunks: a prefetch per ask of the worker
            chunks.whole_chunks = True
    if st.vars.begin(batch, run, op):
        st.objects.clear()          # a new run meets its objects anew (see VarRegistry.begin)
    migrated = st.vars.prepare(batch)
    expired = st.ttl.expire(ptime) if ptime is not None else 0
    ctx = Context(st)
    ctx.batch_id, ctx.watermark, ctx.processing_time, ctx.shard = batch, watermark, ptime, shard
    op.open(ctx)
    initial_rows = -1
    if st.initial_pending:                      # once, before the batch's first row (RFC 0008)
        st.initial_pending = False
        if spec.initial is not None:
            initial_rows, emitted = _load_initial(st, spec, ctx, convert)
    elif spec.initial is not None:
        _initial_ignored(_store(spec.state, spec.dkv_options), spec, shard, batch)
    arity = spec.key_arity
    drop_below = watermark if watermark is not None and spec.drop_late else None
    on_event = op.on_event
    on_rows = _rows.rows_handler(op)        # decided once: on_rows (a key's rows at once) or on_event per row
    by_key = _rows.KeyRows(op, on_rows, ctx, arity) if on_rows is not None else None
    last_parts, key = None, None
    index = {name: i for i, name in enumerate(spec.inputs)} if spec.input_column else None
    since_spill = 0
    for events in chunks:
        rows += len(events)
        if prefetch:
            st.prefetch(events)
        if basis is not None:
            _raise_basis(basis, events, index, spec.input_column)
        n, pos = len(events), 0
        while pos < n:
            # Early saves come every spill_events events, also inside a chunk.
            take = min(n - pos, st.spill_events - since_spill)
            part = events if take == n else events[pos:pos + take]
            if by_key is not None:      # gathered per key; on_rows runs when a key's rows end
                late += by_key.feed(part, drop_below)
                part = ()
            for kg, parts, ts, row in part:
                if drop_below is not None and ts is not None and ts < drop_below:
                    late += 1       # as in Spark: rows behind the watermark are dropped
                    continue
                if parts != last_parts:     # a key's rows come together: convert its key once
                    last_parts, key = parts, user_key(parts, arity)
                ctx.key_group, ctx._parts, ctx.key, ctx.event_time = kg, parts, key, ts
                on_event(key, row, ctx)
            pos += take
            since_spill += take
            if since_spill >= st.spill_events:
                # Keys come in order, so the objects of the events so far are done with: saved
                # now, they leave memory within the budget instead of at the end of the batch.
                st.spill()
                since_spill = 0
        emitted += st.convert_emitted(convert)
        events = part = None        # not kept while the next chunk is made
    if by_key is not None:
        by_key.flush()                  # the last key's rows
    ctx.event_time = None
    fired = 0
    if end_of_input:
        watermark = ptime = ctx.watermark = ctx.processing_time = END_OF_TIME
    limits = ((EVENT_TIME, watermark), (PROCESSING_TIME, ptime))
    if prefetch:
        st.prefetch_timers(limits)
    for kind, limit in limits:
        if limit is None:
            continue
        for _ in range(TIMER_ROUNDS):       # firing may register timers that are due already
            due = st.timers.due(kind, limit)
            if not due:
                break
            for t, kg, parts, name in due:
                st.timers.delete(kg, kind, t, parts, name)
                ctx.key_group, ctx._parts, ctx.key = kg, parts, user_key(parts, arity)
                op.on_timer(ctx.key, Timer(t, name, "event" if kind == EVENT_TIME else "processing"), ctx)
                fired += 1
        else:
            log.warning("%s shard %d batch %d: on_timer registered %s-time timers that were due at once for "
                        "%d rounds in a row (a timer registered at or before the %s fires in the same batch); "
                        "the ones still due fire in the next batch", type(op).__name__, shard, batch,
                        "event" if kind == EVENT_TIME else "processing", TIMER_ROUNDS,
                        "watermark" if kind == EVENT_TIME else "processing time")
    op.close(ctx)
    finish = st.commit(batch)
    st.forget_dropped()
    state_bytes, state_records = _state_figures(st.db)
    objects, keys = st.counts()
    metrics: dict = {"rows": rows, "late_rows": late, "timers_fired": fired, "state_bytes": state_bytes,
                     "state_records": state_records, "objects_in_memory": len(st.cache),
                     "objects_evicted": st.cache.evictions - evictions,
                     "state_objects": objects, "state_keys": keys, "objects_removed": st.deletions() - deletions,
                     "timers_registered": st.timers.registered - registered,
                     "timers_deleted": st.timers.deleted - deleted,
                     "memory_bytes": resident_bytes(), "memory_budget": st.memory,
                     "emitted": emitted + len(st.emitted)}
    if initial_rows >= 0:
        metrics["initial_rows"] = initial_rows
    if expired:
        metrics["ttl_expired"] = expired
    if migrated:
        metrics["migrated"] = migrated
    if prefetch:
        metrics["prefetch"] = st.prefetch_figures()
    return st.emitted, metrics, finish


def _load_initial(st: ShardState, spec: ShardSpec, ctx: Context, convert) -> tuple[int, int]:
    """Call ``on_initial_state`` for each initial-state row of the shard's key groups (in
    key-group, key and order), as part of this batch: its state changes, timers and output
    are committed with the batch's checkpoint. Returns the number of rows and of emitted
    rows already converted (into ``st.converted``)."""
    handler = spec.operator.on_initial_state
    arity = spec.key_arity
    n = since_spill = converted = 0
    last_parts, key = None, None
    for events in spec.initial.chunks(st.key_group_range.start, st.key_group_range.stop):
        for kg, parts, ts, row in events:
            if parts != last_parts:
                last_parts, key = parts, user_key(parts, arity)
            ctx.key_group, ctx._parts, ctx.key, ctx.event_time = kg, parts, key, ts
            handler(key, row, ctx)
        n += len(events)
        since_spill += len(events)
        if since_spill >= st.spill_events:
            st.spill()
            since_spill = 0
        converted += st.convert_emitted(convert)
    ctx.key_group, ctx._parts, ctx.key, ctx.event_time = -1, (), None, None
    # A marker that this start loaded it (later batches of the start say nothing; see
    # _initial_ignored). Only for the log: a failed batch that leaves it behind loses nothing.
    ident = _initial_ident(spec)
    _IGNORED.add((spec.state, st.shard, ident))
    _store(spec.state, spec.dkv_options).put(f"initial/{ident}", b"")
    log.info("shard %d loaded %d initial-state rows in batch %d", st.shard, n, ctx.batch_id)
    return n, converted


def _raise_basis(basis: list, events: list, index, column) -> None:
    """The largest event time per input (the watermark basis) over ``events``."""
    if index is None:
        times = [ts for _, _, ts, _ in events if ts is not None]
        if times and max(times) > basis[0]:
            basis[0] = max(times)
        return
    for _, _, ts, row in events:
        if ts is not None:
            i = index.get(row.get(column))
            if i is not None and ts > basis[i]:
                basis[i] = ts


def _state_figures(db) -> tuple[int, int]:
    """(bytes, records) of the store: memtables and tables, from dkv's stats (no I/O).
    Until a compaction merges them, overwritten versions and tombstones count too."""
    s = db.stats()
    return (s["memtable_bytes"] + s["immutable_bytes"] + sum(lv["bytes"] for lv in s["levels"]),
            s["memtable_records"] + s["immutable_records"] + sum(lv["records"] for lv in s["levels"]))
