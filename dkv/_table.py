"""Reading SSTs: lazily opened tables and a shared block cache with a byte budget.

A Table fetches nothing until it is first read; then one ranged read of the file's tail
gets the footer and (usually) the metadata segment — bloom filter and sparse index —
which stay in memory. Data blocks are fetched by range on demand and kept decoded in the
BlockCache, least recently used out first.
"""
from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict

from .format import sst
from .format.manifest import ALL_KEY_GROUPS, TableRef

TAIL_READ = 64 * 1024
_MISSING = object()


class BlockCache:
    """Decoded data blocks keyed by (path, block number); evicts LRU past ``budget`` bytes."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._blocks: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        block = self._blocks.get(key)
        if block is not None:
            self.hits += 1
            try:
                self._blocks.move_to_end(key)
            except KeyError:
                pass
        return block

    def put(self, key, block, cost: int) -> None:
        with self._lock:
            self.misses += 1
            if key in self._blocks:
                return
            self._blocks[key] = block
            self.used += cost
            while self.used > self.budget and len(self._blocks) > 1:
                _, old = self._blocks.popitem(last=False)
                self.used -= old[3]

    def drop(self, path: str) -> None:
        with self._lock:
            for key in [k for k in self._blocks if k[0] == path]:
                self.used -= self._blocks.pop(key)[3]


def group_bounds(groups: tuple) -> tuple[bytes | None, bytes | None]:
    """Key range ``[lo, hi)`` of a key-group range; None for an open end."""
    if tuple(groups) == ALL_KEY_GROUPS:
        return None, None
    lo, hi = groups
    return (lo.to_bytes(2, "big") if lo > 0 else None), (hi.to_bytes(2, "big") if hi < (1 << 16) else None)


class Table:
    """One SST as seen by one checkpoint (with its key-group clip). Thread-safe, lazy."""

    __slots__ = ("ref", "path", "min_key", "max_key", "_store", "_cache", "_meta", "_lock", "clip_lo", "clip_hi")

    def __init__(self, ref: TableRef, store, cache: BlockCache) -> None:
        self.ref = ref
        self.path = ref.path
        self._store = store
        self._cache = cache
        self._meta = None
        self._lock = threading.Lock()
        self.clip_lo, self.clip_hi = group_bounds(ref.groups)
        # The effective key range: the file's range narrowed to the owned key groups.
        self.min_key = ref.min_key if self.clip_lo is None else max(ref.min_key, self.clip_lo)
        self.max_key = ref.max_key

    def owns(self, key: bytes) -> bool:
        return (self.clip_lo is None or key >= self.clip_lo) and (self.clip_hi is None or key < self.clip_hi)

    def meta(self) -> sst.SstMeta:
        meta = self._meta
        if meta is None:
            with self._lock:
                if self._meta is None:
                    self._meta = self._load_meta()
                meta = self._meta
        return meta

    def _load_meta(self) -> sst.SstMeta:
        size = self.ref.size
        start = max(0, size - TAIL_READ)
        tail = self._store.get(self.path, start, size)
        if len(tail) != size - start:
            from .errors import CorruptionError
            raise CorruptionError(f"SST {self.path}: expected {size} bytes, found {start + len(tail)}")
        off, length, crc = sst.parse_footer(tail, f"SST {self.path}")
        if off + length + sst.FOOTER_SIZE != size:
            from .errors import CorruptionError
            raise CorruptionError(f"SST {self.path}: footer points outside the file")
        if off >= start:
            raw = tail[off - start: off - start + length]
        else:
            raw = self._store.get(self.path, off, off + length)
        return sst.parse_meta(raw, crc, f"SST {self.path}")

    def block(self, i: int):
        """Decoded block i as (keys, values, seqs, cost)."""
        key = (self.path, i)
        blk = self._cache.get(key)
        if blk is None:
            meta = self.meta()
            off, ln = meta.offsets[i], meta.lengths[i]
            frame = self._store.get(self.path, off, off + ln)
            keys, values, seqs = sst.decode_block(frame, meta.crcs[i], f"SST {self.path} block {i}")
            blk = (keys, values, seqs, 200 + ln * 3 + 90 * len(keys))
            self._cache.put(key, blk, blk[3])
        return blk

    def get(self, key: bytes):
        """(seq, value) for key (value None = tombstone), or _MISSING. O(k + log n)."""
        if self.clip_lo is not None and not self.owns(key):
            return _MISSING
        meta = self._meta or self.meta()
        if not meta.bloom.may_contain(key):
            return _MISSING
        i = bisect_right(meta.first_keys, key) - 1
        if i < 0:
            return _MISSING
        keys, values, seqs, _ = self.block(i)
        j = bisect_left(keys, key)
        if j < len(keys) and keys[j] == key:
            return seqs[j], values[j]
        return _MISSING

    def scan(self, start: bytes | None, end: bytes | None, src: int):
        """Yield (key, -seq, src, value) for keys in [start, end) ∩ owned groups, ascending."""
        if self.clip_lo is not None and (start is None or start < self.clip_lo):
            start = self.clip_lo
        if self.clip_hi is not None and (end is None or end > self.clip_hi):
            end = self.clip_hi
        if start is not None and end is not None and start >= end:
            return
        meta = self.meta()
        first = meta.first_keys
        i = 0 if start is None else max(0, bisect_right(first, start) - 1)
        n = len(first)
        while i < n:
            if end is not None and first[i] >= end:
                return
            keys, values, seqs, _ = self.block(i)
            j = 0 if start is None else bisect_left(keys, start)
            k = len(keys) if end is None else bisect_left(keys, end)
            for x in range(j, k):
                yield keys[x], -seqs[x], src, values[x]
            if k < len(keys):
                return
            i += 1
