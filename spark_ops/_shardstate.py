"""A shard's open state between batches: its spec (``ShardSpec``, what the driver sends
every task) and ``ShardState`` (its dkv instance, object spaces, object cache and memory
shares, timers, TTL and state variables), which ``_runtime.run_shard_batch`` opens, runs
a batch on and commits, and ``_opened`` keeps per process between batches."""
from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import dkv
from dkv.keys import key_prefix
from objectspace import SCHEMA_STATE, InPlaceChangeError, ObjectCache, ObjectSpace

from . import _layout
from ._budget import (DEFAULT_MEMORY, DKV_OPTIONS, FAR_BLOCK_CACHE_MEMORY, FAR_BLOCK_CACHE_SHARE, FAR_CACHE_SHARE, FAR_OUTGROWN,
                      FLUSHING_CACHE_SHARE, OUTGROWN_CACHE_SHARE, OUTGROWN_SPILL_SHARE, SPILL_SHARE, batch_keys,
                      budget, spill_events)
from ._shards import shard_range
from ._timers import TimerService
from ._ttl import TtlService
from ._vars import VarRegistry

log = logging.getLogger("spark_ops._runtime")

MEMO_OBJECTS = 1 << 17
_PREFETCHED = {"ms": 0.0, "tables": 0, "requests": 0, "cached_bytes": 0, "local_tables": 0, "left_tables": 0,
               "cache_full": False}
OUT_CHUNK = 1 << 10         # emitted rows converted at once when the caller converts (a row may hold a whole buffer)


@dataclass
class ShardSpec:
    """Everything a shard needs, picklable (it travels to the Python workers)."""
    state: str                     # location of the operator's state root
    operator: object               # the Operator instance
    key_arity: int = 1
    event_time: str | None = None  # event-time column (ms since epoch after conversion)
    delay_ms: int = 0              # watermark delay
    key_groups: int = 256          # how many key groups the keys hash into (fixed with the state)
    shards: int = 2
    dkv_options: dict = field(default_factory=dict)
    memory: int | None = None       # the shard's memory budget in bytes (None: DEFAULT_MEMORY)
    drop_late: bool = True          # rows behind the watermark are dropped (watermark= given)
    inputs: list | None = None      # several inputs: one watermark basis each (min wins) ...
    input_column: str | None = None  # ... told apart by this column of each row
    initial: object | None = None   # initial-state rows for a first batch (see _initial.py): .chunks(lo, hi)
    name: str | None = None         # the operator's name (its identity; None: its class name, lowercased)
    retire: tuple = ()              # operators of the query whose state is to be dropped (RFC 0010)
    inplace: str | None = None      # objectspace's check of changes inside stored values (the harness: "raise")


class ShardState:
    """One shard's open dkv instance, its object spaces (one per key group) and timers."""

    def __init__(self, store, spec: ShardSpec, groups: int, batch: int, shard: int) -> None:
        self.store = store
        self.shard = shard
        self.key_groups = groups          # how many key groups (the state's count)
        self.last_used = 0.0            # time.monotonic() at the end of its last batch (0: none yet; _opened.keep)
        self.interval = 0.0             # seconds between its last two batches (0: not known)
        lo, hi = shard_range(shard, spec.shards, groups)
        self.key_group_range = range(lo, hi)
        plan = _layout.plan_open(store, batch, shard, spec.shards, groups, _operator_name(spec))
        memory = self.memory = spec.memory or DEFAULT_MEMORY
        derived, cache_bytes = budget(memory)
        opts = {**DKV_OPTIONS, **derived, **spec.dkv_options}
        self.block_cache_bytes = opts["block_cache_bytes"]      # the store's (keys_outgrew_cache)
        self.cache = ObjectCache(cache_bytes, None)
        self._evictions_seen = 0
        self.outgrown = False           # the cache dropped whole objects: keys_outgrew_cache
        self.far = False                # a batch met far more keys than that: keys_outgrew_cache
        self.counted = False            # a batch's keys were counted past the cache (meet_keys)
        self.spill_events = spill_events(memory, SPILL_SHARE, self.cache.item_bytes)     # see _process
        kw = dict(instance=plan.instance, key_group_range=(lo, hi), **opts)
        if plan.checkpoint is not None:
            # A re-run of a batch drops the checkpoint its failed attempt may have left.
            self.db = dkv.open(store, checkpoint=plan.checkpoint, discard_newer=True, **kw)
        else:
            self.db = dkv.open(store, sources=plan.sources or [], **kw)
        self.layout = plan.layout
        self.instance = plan.instance
        self.epoch = plan.checkpoint if plan.checkpoint is not None else -1
        self.spaces: dict[int, ObjectSpace] = {}
        self.converted: list = []
        self.sink = None            # during a batch with a sink: where converted output goes
        self.sent = 0               # ... and how many parts went there
        self.output_s = 0.0         # the batch's time turning emitted rows into Arrow (output_ms)
        self.timers = TimerService(self.db, self.key_group_range)
        self.ttl = TtlService(self)     # state TTL: expiry index and refresh on write (RFC 0009)
        self.vars = VarRegistry(self, spec.operator, spec.name)    # state variables (RFC 0010)
        self.inplace = spec.inplace
        self.emitted: list = []
        self.objects: dict = {}     # (key group, key parts, name) -> object handle (see Context)
        # Opened empty (no state before this batch): this batch loads the initial state, if
        # any, into what its checkpoint commits (RFC 0008). Cleared once loaded.
        self.initial_pending = plan.fresh
        # Opened on a store whose reads overlap (S3): the first batch names each chunk's keys
        # to a prefetch before it runs them (RFC 0012, *Restart on S3*). Cleared by that batch.
        self.cold = self.db.store.concurrent_reads > 1 and not plan.fresh
        self.prefetched = _PREFETCHED.copy()
        log.debug("shard %d opened %s at epoch %s", shard, plan.instance, self.epoch)

    def catch_up(self, store, spec: ShardSpec, batch: int) -> bool:
        """Bring a cached state left at an older epoch up to ``batch - 1`` by applying only
        what another worker wrote meanwhile (see dkv's DB.refresh). False: reopen instead."""
        plan = _layout.plan_open(store, batch, self.shard, spec.shards, self.key_groups, _operator_name(spec))
        if plan.instance != self.instance or plan.checkpoint is None or plan.checkpoint <= self.epoch:
            return False
        changed = self.db.refresh(plan.checkpoint)
        if changed is None:
            return False
        self.timers.forget()
        self.ttl.forget()
        self.vars.forget()
        for kg in {dkv.key_group_of(k) for k in changed if len(k) >= 2}:
            sp = self.spaces.get(kg)
            if sp is not None:
                sp.refresh()
        log.debug("shard %d caught up from epoch %d to %d (%d keys)", self.shard, self.epoch, plan.checkpoint,
                  len(changed))
        self.cold = self.db.store.concurrent_reads > 1     # the tables the other worker wrote: read ahead
        self.epoch = plan.checkpoint
        return True

    def prefetch_heads(self) -> None:
        """Read ahead, at once, what a batch reads of every key group before its first
        event (each service's first pass: the records of state variables, the TTL index, the
        timers), which would otherwise be a round trip per key group and table, one after
        another."""
        t0 = time.perf_counter()
        self._prefetch(self.vars.head_ranges() + self.ttl.head_ranges() + self.timers.head_ranges(), t0)

    def prefetch_timers(self, limits: tuple) -> None:
        """Read ahead, at once, what firing the due timers will scan (``limits``: (kind,
        limit) pairs, limit None for a kind not fired this batch), after the events: the
        chunks' own read-ahead may have pushed the blocks ``prefetch_heads`` brought out of
        the block cache, and each key group's scan would then wait for its own round trips.
        Blocks still cached are passed by."""
        t0 = time.perf_counter()
        ranges = [r for kind, limit in limits if limit is not None for r in self.timers.due_ranges(kind, limit)]
        if ranges:
            self._prefetch(ranges, t0)

    def prefetch(self, events: list) -> None:
        """Read ahead, at once, what the state of the keys of ``events`` will read (their
        objects' ranges in every key group's space)."""
        t0 = time.perf_counter()
        ranges: list = []
        scopes: dict = {}
        for kg, parts in {(e[0], e[1]) for e in events}:
            scopes.setdefault(kg, []).append(parts)
        for kg, keys in scopes.items():
            ranges += self.space(kg).key_ranges(keys)
        self._prefetch(ranges, t0)

    def _prefetch(self, ranges: list, t0: float) -> None:
        """``DB.prefetch``, added up in ``prefetched`` (the batch's metric ``prefetch``)."""
        done = self.db.prefetch(ranges)
        out = self.prefetched
        for name, value in done.items():
            out[name] = (out[name] or value) if type(value) is bool else out[name] + value
        out["ms"] += (time.perf_counter() - t0) * 1000

    def prefetch_figures(self) -> dict:
        """What this batch's prefetches did (the metric ``prefetch``), and start again."""
        out, self.prefetched = self.prefetched, _PREFETCHED.copy()
        out["ms"] = round(out["ms"], 1)
        return out

    def space(self, kg: int) -> ObjectSpace:
        sp = self.spaces.get(kg)
        if sp is None:
            sp = self.spaces[kg] = ObjectSpace(self.db, key_prefix(kg, SCHEMA_STATE), cache=self.cache,
                                               inplace=self.inplace)
        return sp

    def convert_emitted(self, convert) -> int:
        """Once OUT_CHUNK emitted rows are pending, convert them (``convert``: None keeps them
        as rows) so that a batch that emits much holds them converted, or hands them to the
        batch's sink; returns how many."""
        if convert is None or len(self.emitted) < OUT_CHUNK:
            return 0
        n = len(self.emitted)
        part = self.timed(convert, self.emitted)
        self.emitted = []
        if self.sink is None:
            self.converted.append(part)
        else:
            self.sink(part)
            self.sent += 1
        return n

    def timed(self, convert, rows):
        """``convert(rows)``, its time counted in ``output_s`` (the batch's output_ms)."""
        t0 = time.perf_counter()
        try:
            return convert(rows)
        finally:
            self.output_s += time.perf_counter() - t0

    def spill(self) -> None:
        """Save every space's dirty objects into the store now (not a checkpoint: the
        batch's checkpoint covers them), so they become clean and the object cache may
        drop them. A batch much larger than the budget then runs in bounded memory. If the
        batch fails later, the state is dropped anyway (reopened from the checkpoint)."""
        self.mind_written_items()
        self.ttl.before_save()
        wb = dkv.WriteBatch()
        dirty = [sp for sp in self.spaces.values() if sp.dirty]
        with _inplace_note():
            for sp in dirty:
                sp.save(batch=wb)
        self.vars.save(wb)
        self.db.write(wb)
        for sp in dirty:
            sp.on_saved()
        self.forget_dropped()

    def mind_written_items(self) -> None:
        """Before a save: the first time the object cache is nearly full (``pressed``), the
        items this shard's objects write do not fit in it, and from then on each save drops
        the items of the objects it confirms (``ObjectCache.drop_saved``, for the shard's
        life in the process). Under pressure that is what a save does anyway; kept
        otherwise, the items of the batches between two pressures (up to 80% of the cache)
        would make every save and confirm slower, and the process larger, for items that
        leave before they are read again (RFC 0012, *Step 16*). Objects no save confirms (only
        read) are not affected."""
        cache = self.cache
        if not cache.drop_saved and cache.pressed():
            cache.drop_saved = True
            log.info("shard %d: the object cache is nearly full (%d of %d bytes): saved items are no "
                     "longer kept in memory", self.shard, cache.nbytes, cache.budget)

    def forget_dropped(self) -> None:
        """Empty the memo of object handles when the object cache dropped some: the memo
        must not keep them alive (it holds only live handles otherwise). Then the shard
        checks its object shares (mind_shares)."""
        if self.cache.evictions != self._evictions_seen or len(self.objects) > MEMO_OBJECTS:
            self.objects.clear()
            self._evictions_seen = self.cache.evictions
        self.mind_shares()

    def mind_shares(self) -> None:
        """The first time the cache dropped whole objects, or holds more handles than the
        smaller share fits (decided then, before the allocator's pools grow around them),
        the shard's object shares shrink (keys_outgrew_cache). From then on, the cache
        holds FLUSHING_CACHE_SHARE while the store flushes, and FAR_CACHE_SHARE throughout
        once a batch met far more keys than fit (meet_keys). Checked before each batch
        (meet_keys), after each early save and commit, and when the memo of handles meets
        an object the cache dropped (forget_dropped)."""
        if not self.outgrown and (self.cache.evictions or len(self.cache) > self.handles_fit()):
            self.keys_outgrew_cache()
        elif self.outgrown:
            self._size_cache()

    def _size_cache(self) -> None:
        """The outgrown cache's share: a sixty-fourth once far (a flush or not), else a
        quarter, a sixteenth while the store flushes (the clean objects make room for it)."""
        share = FAR_CACHE_SHARE if self.far else \
            FLUSHING_CACHE_SHARE if self.db.flush_pending else OUTGROWN_CACHE_SHARE
        if self.cache.budget != self.memory // share:
            self.cache.resize(self.memory // share)

    def handles_fit(self) -> int:
        """The most object handles the smaller cache share holds (ObjectCache.handles_within)."""
        return self.cache.handles_within(self.memory // OUTGROWN_CACHE_SHARE)

    def meet_keys(self, events) -> None:
        """Before a batch: one that meets more keys than the smaller cache share holds
        handles (a key has one object at least) outgrows it whatever the shard held, so
        the smaller shares apply from its first event: decided during the batch, the
        allocator's pools would grow around the first shares' early saves first and stay
        (RFC 0012, *Step 7*). The keys are counted only where the rows could be more. An
        operator that keeps state for few of its keys may switch without need: its shares
        are then smaller than they could be, for the shard's life in the process.
        A batch that meets more than FAR_OUTGROWN times the keys the smaller share holds
        makes the cache far smaller still (FAR_CACHE_SHARE): decided by the first count
        of a batch's keys that finds more keys than fit, once for the shard's life in the
        process (a shard that outgrew its cache by its drops is counted at each batch with
        more rows than fit until one has more keys than fit, as a shard that did not
        outgrow it is; then no more). A first such batch with fewer keys than that keeps
        the quarter for good, whatever later batches meet; so does a key of several
        columns whose count, a lower bound, stays under it."""
        if self.outgrown and self.counted:
            self.mind_shares()          # a flush may have ended since the last commit
            return
        fit = self.handles_fit()
        keys = batch_keys(events, fit)
        if keys > fit:
            self.counted = True
            self.keys_outgrew_cache(far=keys > FAR_OUTGROWN * fit)
        elif self.outgrown:
            self.mind_shares()

    def keys_outgrew_cache(self, far: bool = False) -> None:
        """The shard's keys do not fit its object cache: from now on objects are dropped and
        reloaded every batch, which costs the process ~2x their bytes, so the cache gets a
        quarter of the budget (a sixteenth while the store flushes; a sixty-fourth when
        ``far``: a batch meets more than FAR_OUTGROWN times the keys that holds, and the
        store's block cache then FAR_BLOCK_CACHE_SHARE at budgets up to FAR_BLOCK_CACHE_MEMORY)
        and early saves come at a
        thirty-second (budget())."""
        self.outgrown = True
        if far and not self.far:
            self.far = True
            if self.memory <= FAR_BLOCK_CACHE_MEMORY:
                self.db.resize_block_cache(min(self.block_cache_bytes, self.memory // FAR_BLOCK_CACHE_SHARE))
        self.spill_events = spill_events(self.memory, OUTGROWN_SPILL_SHARE, self.cache.item_bytes)
        self._size_cache()

    def commit(self, batch: int):
        """Save dirty slots of every space into one write batch and start checkpoint epoch
        ``batch``; returns ``finish()``, which waits until the checkpoint is durable and
        returns the commit's metrics. Work that needs no durable checkpoint runs in
        between, while the checkpoint uploads: ``finish(aside)`` is told the seconds it
        took, which checkpoint_ms and commit_ms leave out (the output's conversion is
        output_ms, not the checkpoint's). If ``finish()`` raises, this state is
        unusable (its objects count the save as done): the caller drops it, as it drops a
        state after any failure."""
        t0 = time.perf_counter()
        self.mind_written_items()
        self.ttl.before_save()
        wb = dkv.WriteBatch()
        with _inplace_note():
            for sp in self.spaces.values():
                sp.save(batch=wb)
        self.vars.save(wb)
        before = dict(self.db.stats_counters)
        t1 = time.perf_counter()
        self.db.write(wb)
        t2 = time.perf_counter()
        cp = self.db.checkpoint(batch)
        for sp in self.spaces.values():
            sp.on_saved()

        def finish(aside: float = 0.0) -> dict:
            cp.wait()
            t4 = time.perf_counter() - aside
            self.epoch = batch
            after = self.db.stats_counters
            sst = after.get("sst_bytes", 0) - before.get("sst_bytes", 0)
            files = sum(after.get(k, 0) - before.get(k, 0) for k in ("wal_files", "manifest_files", "sst_files"))
            return {"dirty_slots": len(wb), "checkpoint_bytes": cp.bytes_written, "wal_bytes": cp.wal_bytes,
                    "checkpoint_objects": files,
                    "manifest_bytes": cp.manifest_bytes, "sst_bytes": sst, "save_ms": round((t1 - t0) * 1000, 1),
                    "write_ms": round((t2 - t1) * 1000, 1), "checkpoint_ms": round(max(0.0, t4 - t2) * 1000, 1),
                    "commit_ms": round(max(0.0, t4 - t0) * 1000, 1)}
        return finish

    def counts(self) -> tuple[int, int]:
        """(state objects, keys with state) of the shard's key groups as of its last
        confirmed save: objectspace's counts records, O(key groups) (see objectspace
        ``ObjectSpace.counts``)."""
        objects = keys = 0
        for kg in self.key_group_range:
            c = self.space(kg).counts()
            objects += c["objects"]
            keys += c["scopes"]
        return objects, keys

    def deletions(self) -> int:
        """Object deletions the shard's saves wrote since it was opened."""
        return sum(sp.deletions for sp in self.spaces.values())

    def close(self) -> None:
        try:
            self.db.close()
        except Exception as e:  # noqa: BLE001 - a fenced or broken instance is dropped anyway
            log.debug("closing shard state: %s", e)


def _operator_name(spec: ShardSpec) -> str:
    return spec.name or type(spec.operator).__name__.lower()


@contextmanager
def _inplace_note():
    """Say what an in-place change of a stored value means for an operator (the harness
    checks them; Spark's shards do not look, to save the cost at every batch)."""
    try:
        yield
    except InPlaceChangeError as e:
        what = "; ".join(f"the {kind} {name[-1]!r} of key {tuple(name[:-1])!r}, {slot}"
                         if isinstance(name, tuple) and name else f"the {kind} {name!r}, {slot}"
                         for name, kind, slot in e.changes[:5])
        more = f"; and {len(e.changes) - 5} more" if len(e.changes) > 5 else ""
        raise InPlaceChangeError(
            f"spark_ops: the operator changed a stored value in place ({what}{more}), which marks nothing written. "
            f"On Spark such a change is not saved: the value goes back to what was stored when its object is "
            f"read again. Assign the value back after changing it (d[k] = value); the test harness checks "
            f"every save, Spark's shards do not", e.changes) from None
