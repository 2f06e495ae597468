"""A shard at the smallest memory budget (8 MiB) with state several times larger: the output is
still exactly the model's, every part of the budget holds (checked after every batch and,
from inside the operator, during the batches), and a restart from the state folder goes on.

The budget split (spark_ops/_budget.py ``budget``, docs/spark_ops.md "Memory"), for memory M:
  * object cache (objectspace.ObjectCache of clean objects): M / 2, M / 4 once the shard's
    keys outgrew it (it dropped whole objects), M / 64 once a batch met more than 1.5 times
    the keys M / 4 holds handles (as here: 8,000 keys, ~3,000 handles). Eviction runs whenever its accounted bytes
    pass the budget (down to 80%), so ``cache.nbytes <= cache.budget`` holds after every use
    or save. Dirty objects are not in it: they are the early saves' business
    (``spill_events``: M / 8 of them, M / 32 once the keys outgrew the cache), not the cache's.
  * dkv active memtable: M / 8 (``memtable_bytes``). A write that brings it to that size
    seals it, so between writes it is always below.
  * dkv sealed (immutable) memtables: a flush starts at ``flush_bytes`` = M / 4; the slack
    docs/dkv.md documents ("past twice either, the next seal waits for the flush",
    _flush.py ``_wait_for_background``) lets them reach 2 * flush_bytes = M / 2 while a
    (paced) flush runs, never more when the writer looks.
  * dkv block cache: M / 8 (``block_cache_bytes``); CLOCK eviction on every admission keeps
    ``used <= budget`` as long as one block fits (64 KiB blocks here).
"""
from __future__ import annotations

import hashlib

import msgpack
import pytest

from objectspace import ObjectCache

from spark_ops import _budget, _runtime, _shardstate
from spark_ops._units import memory_bytes
from spark_ops.operator import Operator
from spark_ops.operators import Buffer
from spark_ops.testing import OperatorHarness

from .models import BufferModel, by_key, run_model

MEMORY = "8m"                 # the least memory= allows
KEYS = 8_000
PER_BATCH = 10                # events per key per batch
COUNT = 40                    # buffer size: a key's rows pile up for 4 batches, then go out
BATCHES = 5
RESTART_AFTER = 2             # the workers are replaced after this batch
SAMPLE_EVERY = 1_000          # events between the operator's looks at the budget


class BudgetProbe(Buffer):
    """The built-in buffer, looking at its shard's memory every SAMPLE_EVERY events (through
    the context's shard state: test-only access to what the runtime does not expose)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.samples: list[dict] = []
        self._n = 0

    def on_event(self, key, row, ctx) -> None:
        super().on_event(key, row, ctx)
        self._n += 1
        if self._n % SAMPLE_EVERY == 0:
            self.samples.append(measure(ctx._shard))


def measure(st) -> dict:
    s = st.db.stats()
    return {"cache": st.cache.nbytes, "memtable": s["memtable_bytes"], "immutable": s["immutable_bytes"],
            "block_cache": s["block_cache"]["bytes"]}


def pad(seq: int) -> str:
    """96 characters that do not compress (zstd must not make the state small)."""
    return hashlib.blake2b(seq.to_bytes(8, "little"), digest_size=48).hexdigest()


def make_batches() -> list[list[dict]]:
    names = [f"user{i:05d}" for i in range(KEYS)]
    batches, seq = [], 0
    for _ in range(BATCHES):
        rows = []
        for name in names:
            for _ in range(PER_BATCH):
                seq += 1
                rows.append({"k": name, "seq": seq, "pad": pad(seq)})
        batches.append(rows)
    return batches


def check_budget(where: str, m: dict, limits: dict) -> None:
    for name, limit in limits.items():
        assert m[name] <= limit, f"{where}: {name} holds {m[name]:,} bytes, over its {limit:,}"
    assert m["memtable"] < limits["memtable"], f"{where}: the active memtable was not sealed"


def test_a_small_memory_budget_is_respected_with_many_keys(tmp_path):
    memory = memory_bytes(MEMORY)
    assert memory == 8 << 20
    dkv_budget, cache_budget = _budget.budget(memory)
    limits = {"cache": cache_budget, "memtable": dkv_budget["memtable_bytes"],
              "immutable": 2 * dkv_budget["flush_bytes"], "block_cache": dkv_budget["block_cache_bytes"]}
    assert limits == {"cache": 4 << 20, "memtable": 1 << 20, "immutable": 4 << 20, "block_cache": 1 << 20}

    batches = make_batches()
    expected = run_model(BufferModel(["k"], count=COUNT), batches, keys=["k"])
    # The logical state: rows waiting in buffers after each batch, as msgpack (what the
    # store keeps of them, before compression). Its peak is several times the whole budget.
    row_bytes = len(msgpack.packb(batches[0][0]))
    waiting = [KEYS * (PER_BATCH * (b + 1) % COUNT) * row_bytes for b in range(BATCHES)]
    assert max(waiting) >= 3 * memory, waiting

    op = BudgetProbe(count=COUNT, key_columns=("k",))
    h = OperatorHarness(op, key="k", state=str(tmp_path / "state"), partitions=1, memory=MEMORY)
    shard_key = (h.spec.state, 0, 1)
    states, samples = [], []
    for b, rows in enumerate(batches):
        if b == RESTART_AFTER + 1:
            h.restart()
            assert shard_key not in _runtime._SHARDS
        op.samples.clear()
        out = h.run_batch(rows)
        # (i) exactly the model's rows: per key in order, and nothing else.
        assert len(out) == len(expected[b]), (b, len(out), len(expected[b]))
        assert by_key(out, ["k"]) == by_key(expected[b], ["k"]), b
        # (ii) the budget, after the batch and as the operator saw it during the batch.
        st = _runtime._SHARDS[shard_key]
        states.append(st)
        # the first batch met more than 1.5 times the keys a quarter of the budget holds handles:
        # from then on a sixty-fourth, flush or not
        assert st.outgrown and st.far and st.cache.budget == memory // _budget.FAR_CACHE_SHARE
        assert st.db.stats()["block_cache"]["budget"] == memory // _budget.FAR_BLOCK_CACHE_SHARE
        assert {k: st.db.opts.__dict__[k] for k in dkv_budget} == dkv_budget
        check_budget(f"after batch {b}", measure(st), limits)
        assert len(op.samples) >= len(rows) // SAMPLE_EVERY
        for i, m in enumerate(op.samples):
            check_budget(f"batch {b}, sample {i}", m, limits)
        samples += op.samples
    sst_bytes = sum(lv["bytes"] for lv in states[-1].db.stats()["levels"])
    h.close()

    # The budget was under pressure, not just never reached: the object cache dropped
    # objects in every batch's state, the sealed memtables went past the flush trigger, the
    # block cache filled, and the state outgrew memory into SSTs. (The active memtable is
    # always seen empty: every early save writes more than memtable_bytes, which seals it.)
    assert all(st.cache.evictions > 0 for st in states)
    assert max(m["immutable"] for m in samples) > dkv_budget["flush_bytes"]
    # (far: the block cache holds memory // FAR_BLOCK_CACHE_SHARE, a quarter of its share)
    far_blocks = memory // _budget.FAR_BLOCK_CACHE_SHARE
    assert max(m["block_cache"] for m in samples) > far_blocks // 2
    assert sst_bytes > memory, sst_bytes
    assert sum(len(e) for e in expected) == KEYS * (PER_BATCH * BATCHES // COUNT)
    # (iii) the restart reopened the shard from the state folder at the last checkpoint,
    # and the rows buffered before it came out after it (checked above against the model).
    assert states[RESTART_AFTER + 1] is not states[RESTART_AFTER]
    assert states[RESTART_AFTER + 1].db.opened_from.epoch == RESTART_AFTER
    assert all(states[b] is states[b - 1] for b in range(1, BATCHES) if b != RESTART_AFTER + 1)
    before = KEYS * PER_BATCH * (RESTART_AFTER + 1)       # seq of the last row before the restart
    resumed = expected[RESTART_AFTER + 1]
    assert len(resumed) == KEYS
    assert all(len(r["items"]) == COUNT and r["items"][PER_BATCH * (RESTART_AFTER + 1) - 1]["seq"] <= before
               for r in resumed)


class SaveWatch(Buffer):
    """The built-in buffer, counting its shard's events between two writes to the store
    (an early save or the commit: the buffer writes nothing else)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.runs: list[int] = []
        self._seq = None
        self._since = 0

    def on_event(self, key, row, ctx) -> None:
        seq = ctx._shard.db.stats()["last_seq"]
        if seq != self._seq:
            if self._seq is not None:
                self.runs.append(self._since)
            self._seq, self._since = seq, 0
        super().on_event(key, row, ctx)
        self._since += 1

    def close(self, ctx) -> None:
        self.runs.append(self._since)
        self._seq = None


def test_early_saves_come_every_spill_events_events_at_a_small_budget():
    """ShardState.spill_events: "Events between early saves: the dirty objects they make fit
    in memory // share" (docs/spark_ops.md: a shard saves early whenever the objects it
    dirtied would outgrow an eighth of the budget, a thirty-second once its keys outgrew
    its cache)."""
    op = SaveWatch(count=COUNT, key_columns=("k",))
    h = OperatorHarness(op, key="k", partitions=1, memory=MEMORY)
    rows = [{"k": f"user{i:05d}", "seq": i * PER_BATCH + j, "pad": pad(i * PER_BATCH + j)}
            for i in range(2_000) for j in range(PER_BATCH)]
    h.run_batch(rows)
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    limit = st.spill_events
    h.close()
    assert limit < _runtime.CHUNK_EVENTS
    assert sum(op.runs) == len(rows) and len(op.runs) > 1     # it did save early
    assert max(op.runs) <= limit, f"{max(op.runs):,} events between two saves; spill_events is {limit:,}"


def test_keys_that_outgrow_the_budget_reload_only_what_does_not_fit(tmp_path):
    """Every batch meets every key once, more keys than the object cache holds: with the keys
    in alternating order (_runtime.keys_descending) each batch starts with the keys the
    previous one ended with, still cached, and reloads only the rest (the objects_evicted
    figure). In the same order every batch, the least recently used cache would drop each
    key just before its next use: every key reloaded every batch. (More keys than 1.5 times what
    the cache holds would make it far smaller: the next test.)"""
    keys = 4_000
    fit = ObjectCache.handles_within(memory_bytes(MEMORY) // _budget.OUTGROWN_CACHE_SHARE)
    assert fit < keys <= _budget.FAR_OUTGROWN * fit
    h = OperatorHarness(Buffer(count=4, key_columns=("k",)), key="k", state=str(tmp_path / "state"),
                        partitions=1, memory=MEMORY)
    held, evicted = [], []
    for b in range(4):
        out = h.run_batch([{"k": f"k{i:05d}", "v": b} for i in range(keys)])
        assert len(out) == (keys if b % 4 == 3 else 0)
        m = h.metrics[-1]
        held.append(m["objects_in_memory"])
        evicted.append(m["objects_evicted"])
    fits = min(held[1:])
    assert 1_000 < fits < keys * 3 // 4, held       # the cache holds some of the keys, not all
    # keys that outgrow the cache shrink the objects' shares (spark_ops/_budget.py budget())
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    memory = memory_bytes(MEMORY)
    assert st.outgrown and st.cache.budget == memory // _budget.OUTGROWN_CACHE_SHARE
    assert st.spill_events == _budget.spill_events(memory, _budget.OUTGROWN_SPILL_SHARE, st.cache.item_bytes)
    # batches 1-3 reload about the keys that did not fit, not all of them
    assert all(e <= keys - fits // 2 for e in evicted[1:]), (evicted, held)
    assert all(e > 0 for e in evicted), evicted
    h.close()


def test_keys_far_beyond_the_cache_reload_every_batch_from_a_far_smaller_cache(tmp_path):
    """A batch that meets more than FAR_OUTGROWN times the keys the outgrown cache holds
    handles: the cache holds memory // FAR_CACHE_SHARE (keeping the part of the keys it
    could costs more than reloading them: RFC 0012, *Step 11*), every key reloads every
    batch, and the output is the model's, through a restart."""
    keys = 12_000
    memory = memory_bytes(MEMORY)
    assert keys > _budget.FAR_OUTGROWN * ObjectCache.handles_within(memory // _budget.OUTGROWN_CACHE_SHARE)
    batches = [[{"k": f"k{i:05d}", "v": b} for i in range(keys)] for b in range(5)]
    expected = run_model(BufferModel(["k"], count=3), batches, keys=["k"])
    h = OperatorHarness(Buffer(count=3, key_columns=("k",)), key="k", state=str(tmp_path / "state"),
                        partitions=1, memory=MEMORY)
    for b, rows in enumerate(batches):
        if b == 3:
            h.restart()
        out = h.run_batch(rows)
        assert by_key(out, ["k"]) == by_key(expected[b], ["k"]), b
        st = _runtime._SHARDS[(h.spec.state, 0, 1)]
        assert st.far and st.cache.budget == memory // _budget.FAR_CACHE_SHARE
        assert st.cache.nbytes <= st.cache.budget
        m = h.metrics[-1]
        assert m["objects_in_memory"] < ObjectCache.handles_within(st.cache.budget) < keys // 50
        if b not in (0, 3):             # batches after the first of a process: all but a few reload
            assert m["objects_evicted"] > keys - keys // 50, (b, m["objects_evicted"])
    h.close()


class Reader(Operator):
    """Reads each key's value; writes it only when it is new: the objects it meets are clean,
    so the cache may drop them while the batch runs. Counts, at each event, the handles the
    context's memo holds that the cache dropped, of keys other than the current one."""

    def __init__(self) -> None:
        self.kept: list[int] = []

    def on_event(self, key, row, ctx) -> None:
        v = ctx.value("v")
        if v.value is None:
            v.value = row["v"]
        st, here = ctx._shard, (ctx.key_group, ctx._parts)
        if st.cache.evictions:
            self.kept.append(sum(1 for m, obj in st.objects.items()
                                 if m[:2] != here and id(obj) not in st.cache._cost and not obj._listed))


def test_the_memo_of_handles_keeps_none_the_cache_dropped(tmp_path):
    """Context's memo of handles (by key group, key and name) must not keep objects alive
    that the object cache dropped: past the budget, until the next save (every spill_events
    events) it would. It starts again at its next miss once the cache dropped some."""
    op = Reader()
    h = OperatorHarness(op, key="k", state=str(tmp_path / "state"), partitions=1, memory=MEMORY)
    for b in range(3):
        h.run_batch([{"k": f"k{i:05d}", "v": b} for i in range(12_000)])
    assert len(op.kept) > 10_000 and max(op.kept) == 0, max(op.kept)
    h.close()


def test_an_open_shard_keeps_no_output_rows_between_batches():
    """The rows a batch emitted are the caller's once it returns: a shard kept open for the
    next batch must not hold the last ones (up to OUT_CHUNK rows, each a whole buffer) until
    then, outside every budget (at 100,000 keys and buffers of 100: ~25 MB a host)."""
    h = OperatorHarness(Buffer(count=2, key_columns=("k",)), key="k", partitions=1)
    out = h.run_batch([{"k": f"k{i % 50:03d}", "v": i} for i in range(100)])
    assert len(out) == 50
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    assert st.emitted == [] and st.converted == []
    h.close()


def test_a_shard_whose_keys_fit_keeps_the_larger_shares():
    """Until its cache drops whole objects a shard keeps half of memory= for clean objects and
    an eighth for dirty ones (saving early less often: each early save costs a pass over
    the shard's spaces)."""
    h = OperatorHarness(Buffer(count=3, key_columns=("k",)), key="k", partitions=1, memory=MEMORY)
    for b in range(3):
        h.run_batch([{"k": f"k{i:03d}", "v": b} for i in range(300)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    memory = memory_bytes(MEMORY)
    assert st.cache.evictions == 0 and not st.outgrown
    assert st.cache.budget == _budget.budget(memory)[1] == memory // 2
    opened_with = ObjectCache(1).item_bytes     # the per-item cost a new cache starts from
    assert st.spill_events == _budget.spill_events(memory, _budget.SPILL_SHARE, opened_with)
    assert st.spill_events > _budget.spill_events(memory, _budget.OUTGROWN_SPILL_SHARE, opened_with)
    h.close()


class FirstLook(Buffer):
    """The built-in buffer noting, at its batch's first event, whether its shard runs with
    the smaller shares (test-only access to the shard, as BudgetProbe)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.first: list[tuple[bool, int]] = []
        self._seen = -1

    def on_event(self, key, row, ctx) -> None:
        if ctx.batch_id != self._seen:
            self._seen, st = ctx.batch_id, ctx._shard
            self.first.append((st.outgrown, st.cache.budget))
        super().on_event(key, row, ctx)


@pytest.mark.parametrize("keys, per_key, share", [(3_500, 1, _budget.OUTGROWN_CACHE_SHARE), (1_000, 4, 2),
                                                 (7_000, 1, _budget.FAR_CACHE_SHARE)])
def test_a_batch_that_meets_more_keys_than_the_smaller_cache_holds_starts_with_the_smaller_shares(
        keys, per_key, share):
    """ShardState.meet_keys: more keys in a batch than the smaller cache share holds handles
    (8 MiB: 2 MiB, ~3,000 handles) switch the shares before the first event, more than 1.5
    times that to the far smaller cache; more rows than that but fewer keys do not."""
    memory = memory_bytes(MEMORY)
    fit = ObjectCache.handles_within(memory // _budget.OUTGROWN_CACHE_SHARE)
    assert keys * per_key > fit
    assert (keys > fit, keys > _budget.FAR_OUTGROWN * fit) == (share != 2, share == _budget.FAR_CACHE_SHARE)
    op = FirstLook(count=1_000, key_columns=("k",))
    h = OperatorHarness(op, key="k", partitions=1, memory=MEMORY)
    h.run_batch([{"k": f"k{i:05d}", "v": j} for i in range(keys) for j in range(per_key)])
    assert op.first == [(share != 2, memory // share)]
    h.close()


def test_a_shard_that_outgrew_its_cache_by_its_drops_counts_a_batchs_keys_once_then(monkeypatch):
    """A shard that outgrew its cache by dropping objects (its batches had no more rows than
    the smaller share holds handles, so they were not counted) counts the keys of its next
    batch with more rows than that, once: far more than fit make the cache far smaller."""
    memory = memory_bytes(MEMORY)
    fit = ObjectCache.handles_within(memory // _budget.OUTGROWN_CACHE_SHARE)
    h = OperatorHarness(Buffer(count=1_000, key_columns=("k",)), key="k", partitions=1, memory=MEMORY)
    h.run_batch([{"k": f"k{i:05d}", "v": 0} for i in range(fit)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    st.keys_outgrew_cache()             # as mind_shares does when the cache drops whole objects
    assert st.outgrown and not st.counted and not st.far
    block_cache = _budget.budget(memory)[0]["block_cache_bytes"]
    assert st.db.stats()["block_cache"]["budget"] == block_cache
    counts = []
    real = _budget.batch_keys
    monkeypatch.setattr("spark_ops._shardstate.batch_keys", lambda ev, beyond: counts.append(beyond) or real(ev, beyond))
    h.run_batch([{"k": f"k{i:05d}", "v": 1} for i in range(3 * fit)])
    assert counts == [fit] and st.counted and st.far
    assert st.cache.budget == memory // _budget.FAR_CACHE_SHARE
    # the store's block cache too: each block a batch reads is met once (FAR_BLOCK_CACHE_SHARE)
    assert st.db.stats()["block_cache"]["budget"] == memory // _budget.FAR_BLOCK_CACHE_SHARE < block_cache
    h.run_batch([{"k": f"k{i:05d}", "v": 2} for i in range(3 * fit)])
    assert counts == [fit]              # counted once
    assert st.db.stats()["block_cache"]["bytes"] <= memory // _budget.FAR_BLOCK_CACHE_SHARE + (128 << 10)
    h.close()


def test_a_far_shard_keeps_a_block_cache_its_options_made_smaller_still():
    """The far switch makes the store's block cache smaller, never larger than the
    ``block_cache_bytes`` a user's dkv_options gave."""
    memory = memory_bytes(MEMORY)
    small = memory // _budget.FAR_BLOCK_CACHE_SHARE // 4
    h = OperatorHarness(Buffer(count=1_000, key_columns=("k",)), key="k", partitions=1, memory=MEMORY,
                        dkv_options={"block_cache_bytes": small})
    fit = ObjectCache.handles_within(memory // _budget.OUTGROWN_CACHE_SHARE)
    h.run_batch([{"k": f"k{i:05d}", "v": 0} for i in range(3 * fit)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    assert st.far and st.db.stats()["block_cache"]["budget"] == small
    h.close()


def test_a_far_shard_of_a_larger_budget_keeps_its_block_cache(monkeypatch):
    """Only budgets up to FAR_BLOCK_CACHE_MEMORY shrink the block cache when far (a larger
    one's batch ran slower with it and did not need the memory): the same shard with the
    limit below its budget keeps the cache its options gave."""
    monkeypatch.setattr(_shardstate, "FAR_BLOCK_CACHE_MEMORY", memory_bytes(MEMORY) - 1)
    h = OperatorHarness(Buffer(count=1_000, key_columns=("k",)), key="k", partitions=1, memory=MEMORY)
    fit = ObjectCache.handles_within(memory_bytes(MEMORY) // _budget.OUTGROWN_CACHE_SHARE)
    h.run_batch([{"k": f"k{i:05d}", "v": 0} for i in range(3 * fit)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    assert st.far and st.db.stats()["block_cache"]["budget"] == st.block_cache_bytes
    assert st.cache.budget == memory_bytes(MEMORY) // _budget.FAR_CACHE_SHARE     # the rest of far holds
    h.close()


def test_a_shard_whose_keys_outgrew_the_cache_gives_most_of_it_to_a_flush(monkeypatch):
    """ShardState.mind_shares: once the keys outgrew the cache, it holds memory //
    FLUSHING_CACHE_SHARE while the store flushes (dropping what does not fit at once) and
    memory // OUTGROWN_CACHE_SHARE again after."""
    h = OperatorHarness(Buffer(count=1_000, key_columns=("k",)), key="k", partitions=1, memory=MEMORY)
    h.run_batch([{"k": f"k{i:05d}", "v": 0} for i in range(4_000)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    memory = memory_bytes(MEMORY)
    assert st.outgrown and st.cache.budget == memory // _budget.OUTGROWN_CACHE_SHARE
    held = len(st.cache)
    monkeypatch.setattr(type(st.db), "flush_pending", property(lambda db: True))
    st.mind_shares()
    assert st.cache.budget == memory // _budget.FLUSHING_CACHE_SHARE
    assert st.cache.nbytes <= st.cache.budget and len(st.cache) < held
    monkeypatch.undo()
    st.mind_shares()
    assert st.cache.budget == memory // _budget.OUTGROWN_CACHE_SHARE
    h.close()


def test_a_count_of_the_keys_during_a_flush_leaves_the_flush_its_share(monkeypatch):
    """A shard that outgrew its cache by dropping objects while its store flushes holds a
    sixteenth; counting a batch's keys (more than fit, fewer than far more) keeps that until
    the flush ends, then a quarter. Far more keys make it a sixty-fourth, flush or not."""
    memory = memory_bytes(MEMORY)
    fit = ObjectCache.handles_within(memory // _budget.OUTGROWN_CACHE_SHARE)
    h = OperatorHarness(Buffer(count=1_000, key_columns=("k",)), key="k", partitions=1, memory=MEMORY)
    h.run_batch([{"k": f"k{i:05d}", "v": 0} for i in range(100)])
    st = _runtime._SHARDS[(h.spec.state, 0, 1)]
    monkeypatch.setattr(type(st.db), "flush_pending", property(lambda db: True))
    st.keys_outgrew_cache()             # as mind_shares does when the cache drops whole objects
    assert st.cache.budget == memory // _budget.FLUSHING_CACHE_SHARE
    events = [(0, (f"k{i:05d}",), None, {}) for i in range(fit + fit // 4)]
    st.meet_keys(events)
    assert st.counted and not st.far and st.cache.budget == memory // _budget.FLUSHING_CACHE_SHARE
    monkeypatch.undo()
    st.meet_keys(events)                # counted: no count now, the flush's end noticed
    assert st.cache.budget == memory // _budget.OUTGROWN_CACHE_SHARE
    st.keys_outgrew_cache(far=True)
    monkeypatch.setattr(type(st.db), "flush_pending", property(lambda db: True))
    st.mind_shares()
    assert st.far and st.cache.budget == memory // _budget.FAR_CACHE_SHARE
    monkeypatch.undo()
    h.close()


def test_a_shards_store_on_s3_reads_by_range_until_fetching_is_cheaper_unless_told(tmp_path):
    """A shard's S3 store keeps dkv's rent-or-buy rule (a restarted shard's first batch
    prefetches its keys: RFC 0012, *Restart on S3*) unless the operator's dkv_options say
    otherwise."""
    from dkv.storage import RANGE_READ_COST
    opts = {"cache_dir": str(tmp_path), "region_name": "us-east-1"}
    assert _runtime._store("s3://bucket/shards-a", opts).range_read_cost == RANGE_READ_COST
    assert _runtime._store("s3://bucket/shards-b", {**opts, "range_read_cost": 1 << 20}).range_read_cost == 1 << 20


def test_a_shard_stops_keeping_written_items_at_its_first_pressure(tmp_path):
    """The first time a shard's object cache is nearly full at a save, the items its objects
    write do not fit: from then on every save drops the items of the objects it confirms
    (ObjectCache.drop_saved), where the cache would otherwise fill up with them again between
    two pressures. A shard whose items fit keeps them. Output as the model's either way."""
    def run(memory, keys, batches):
        h = OperatorHarness(Buffer(count=50, key_columns=("k",)), key="k", state=str(tmp_path / memory),
                            partitions=1, memory=memory)
        rows, out, flags = [], [], []
        for b in range(batches):
            batch = [{"k": f"k{i:05d}", "v": b * 10 + j} for i in range(keys) for j in range(3)]
            rows.append(batch)
            out.append(h.run_batch(batch))
            flags.append(_runtime._SHARDS[(h.spec.state, 0, 1)].cache.drop_saved)
        model = run_model(BufferModel(["k"], count=50), rows, keys=["k"])
        h.close()
        return flags, out, model
    flags, out, model = run(MEMORY, 1_500, 10)
    assert not flags[0] and flags[-1] and flags == sorted(flags), flags     # at the first pressure, for good
    assert [by_key(o, ["k"]) for o in out] == [by_key(m, ["k"]) for m in model]
    flags, out, model = run("64m", 200, 4)
    assert not any(flags), flags
    assert [by_key(o, ["k"]) for o in out] == [by_key(m, ["k"]) for m in model]
