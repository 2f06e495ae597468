"""A shard's memory budget: how ``memory=`` is split between dkv and the object cache, the
dkv options every shard opens its store with, and the shares a shard moves to once its
keys outgrow its cache (used by ShardState in _shardstate.py; RFC 0005, RFC 0012 steps 7-8)."""
from __future__ import annotations

from objectspace import BLOOM_STRIP

DEFAULT_MEMORY = 512 << 20
# Big tables (few objects per checkpoint, small manifests), 64 KiB blocks (they compress
# ~1.4x better than 16 KiB ones; reads of a shard's state are mostly scans), one sorted run
# below L0 (level_base_bytes past any shard's state: every compaction is L0 + L1 -> L1,
# which drops tombstones), and up to 32 checkpoint intervals in memory before a flush, so
# that the values of queue slots appended and popped within them never reach an SST (RFC 0005).
# Slot records share one bloom entry per object (objectspace.BLOOM_STRIP): a shard's filters
# then grow with its objects, not its records (17 MB -> 1 MB at 500,000 buffers of 20).
# A shard seals a memtable every few hundred thousand events at big state, faster than the
# upload thread encodes them while the operator holds the GIL: a write that seals encodes
# the memtable itself (each sealed memtable is a dict of memtable_bytes, ~10x its segment),
# rather than one or four waiting for the upload thread (RFC 0012, *Steps 8 and 12*).
TABLE_BYTES = 8 << 20
DKV_OPTIONS = dict(retain=3, pace=1.5, table_bytes=TABLE_BYTES, block_bytes=64 << 10, level_base_bytes=1 << 30,
                   flush_segments=32, bloom_strip=BLOOM_STRIP, max_sealed_memtables=0)


def budget(memory: int) -> tuple[dict, int]:
    """A shard's memory budget split: dkv options (active memtable, immutable memtables,
    block cache) and the object cache's bytes. Half goes to the clean objects the operator
    uses (those it dirtied between early saves are another eighth, SPILL_SHARE), half to
    dkv; a flush or compaction builds one output table in memory: table_bytes is at most an
    eighth too. Once a shard's keys outgrow the smaller cache share (a batch meets more
    keys than it holds handles, or the cache holds more handles than that or dropped whole
    objects: ShardState.mind_shares, meet_keys), the objects' shares shrink to a quarter
    and a thirty-second (OUTGROWN_CACHE_SHARE, OUTGROWN_SPILL_SHARE), and the cache to a
    sixteenth while the store flushes (FLUSHING_CACHE_SHARE), or to a sixty-fourth for good
    once a batch meets far more keys than a quarter holds (FAR_CACHE_SHARE): objects that
    reload and die by the hundred thousand a batch cost the process far more than their
    bytes. The measurements behind each share are in RFC 0012, *Steps 7, 8 and 11*."""
    share = max(1 << 20, memory // 8)
    return (dict(memtable_bytes=share, flush_bytes=2 * share, block_cache_bytes=share,
                 table_bytes=min(TABLE_BYTES, share)), memory // 2)


SPILL_SHARE = 8
"""A shard saves early once the objects its events dirtied would fill memory // SPILL_SHARE
(their estimate: two items an event)."""
OUTGROWN_CACHE_SHARE = 4
OUTGROWN_SPILL_SHARE = 32
"""The object cache's and the early saves' shares (memory // these) once a shard's keys
outgrew its cache. What the events between two early saves hold (the rows, the dirty
handles, the write batch that saves them) costs the process ~2.5x its estimate then: each
halving (an eighth, a sixteenth, a thirty-second) took 80-90 MB off a host's peak at
1,000,000 keys and memory="512m" (RFC 0012, *Step 7*)."""

FAR_OUTGROWN = 1.5
FAR_CACHE_SHARE = 64
"""The object cache's share (memory // FAR_CACHE_SHARE) once a batch meets more than
FAR_OUTGROWN times the keys the outgrown share holds handles (ObjectCache.handles_within,
at the cheapest kind's cost): the cache could keep two thirds of a batch's keys at most
(half at twice the keys, a third at three times), the ones the previous batch ended with
(the keys come in alternating order), and keeping them costs the process more than
reloading them. One shard in benchmarks/shard_scale.py, the default
budget, ms a steady batch and the steady peak with the cache at a quarter and at a
sixty-fourth: 150,000 keys a shard (0.8x what a quarter holds) 2,961 and 727 MB against
3,317 and 396 (the larger cache pays: it keeps every key); 300,000 (1.6x) 7,038 and 668
against 6,882 and 526; 500,000 (2.6x) 12,082-12,753 and 727 against 11,260 and 577 (RFC 0012,
*Step 11*). Kept at a sixty-fourth, not less, for keys that come back within a batch or two."""

FAR_BLOCK_CACHE_SHARE = 32
"""The store's block cache (memory // this, a quarter of its share in budget()) once a batch
meets far more keys than the object cache holds (FAR_OUTGROWN): each key's state is then
read from the store once a batch, keys in order, so each block a batch reads is met by a
run of consecutive keys and never again in the batch (RFC 0012, *Step 11*), and a larger
cache only holds memory. Spark at 1,000,000 keys and memory="64m": a host's steady peak
221.6 MB against 231 with the cache at an eighth, at the same speed (RFC 0012, *Step 13*)."""
FAR_BLOCK_CACHE_MEMORY = 128 << 20
"""Budgets up to this shrink the block cache so (FAR_BLOCK_CACHE_SHARE); larger ones keep it.
At 1,000,000 keys and the default "512m" the smaller cache cost the batch 1.10x its time
(17,027 against 15,511-15,519 ms) for a peak the budget did not need (361.6 MB against
415.1, where 1.25x the budget allows ~770); at "64m" it cost no time and took ~10 of the
~28 MB the target needed (RFC 0012, *Step 13*)."""

FLUSHING_CACHE_SHARE = 16
"""The object cache's share (memory // this) while the store of a shard whose keys outgrew
the cache flushes: a flush holds its sources until it publishes, the writer's memtables wait
longer for their encoding meanwhile, and the flush's own buffers come on top (~110-160 MB
over a batch without one at 1,000,000 keys and memory="512m"); the clean objects give
back three quarters of their share until it ends, and the flush's allocations reuse their
memory. A host's peak with a flush in the batch: 820-844 MB with the cache at a quarter,
774 at an eighth, 759 at a sixteenth (RFC 0012, *Step 8*)."""


def spill_events(memory: int, share: int, item_bytes: int) -> int:
    """Events between early saves: the dirty objects they make fit in memory // share."""
    return max(1000, memory // share // (2 * item_bytes))


def batch_keys(events, beyond: int) -> int:
    """How many keys ``events`` (run_shard_batch's) hold, counted only if they have more
    than ``beyond`` rows (else their row count, an upper bound); 0 when not known (an
    iterable of lists other than the worker's EventChunks is not iterated twice)."""
    if isinstance(events, list):
        return len(events) if len(events) <= beyond else len({e[1] for e in events})
    count = getattr(events, "distinct_keys", None)
    return 0 if count is None else count(beyond)
