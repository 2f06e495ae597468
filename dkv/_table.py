"""Reading SSTs: lazily opened tables and a shared block cache with a byte budget.

A Table fetches nothing until it is first read; then one ranged read of the file's tail
(TAIL_READ, or a thirty-second of a big table) gets the footer and (usually) the metadata
segment — bloom filter and sparse index — which stay in memory. Data blocks are fetched by
range on demand and kept decoded in a slot of their table, so a cache hit is one list index. The BlockCache only does the
accounting and eviction (CLOCK: a block read since the last sweep gets a second chance).
"""
from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections import deque

from .errors import CorruptionError
from .format import sst
from .format._codec import block_head
from .format._front import decode as front_decode
from .format._front import HINT_EVERY
from .format._front import find as front_find
from .format._front import index as front_index
from .format.manifest import ALL_KEY_GROUPS, TableRef
from ._memtable import NO_RECORD

TAIL_READ = 64 * 1024
TAIL_SHARE = 32
"""A table's first read takes its last max(TAIL_READ, size // TAIL_SHARE) bytes: the footer
and, in one request, the metadata segment (bloom filter and index, ~1-3% of a table) of big
tables too, which a read of TAIL_READ alone misses (a second round trip on S3)."""


def _maybe(key: bytes) -> bool:
    """The membership test of a table without a bloom filter."""
    return True


class BlockCache:
    """Byte budget over the decoded blocks of every table of a DB; evicts with CLOCK."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._ring: deque = deque()      # (table, block number, cost), oldest first
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def resize(self, budget: int) -> None:
        """A new byte budget; a smaller one evicts (CLOCK) at once."""
        with self._lock:
            self.budget = budget
            self._make_room()

    def admit(self, table: "Table", i: int, cost: int) -> None:
        with self._lock:
            self.misses += 1
            self._ring.append((table, i, cost))
            self.used += cost
            self._make_room()

    def admit_blocks(self, table: "Table", costs: list) -> None:
        """``admit`` for the (block number, cost) pairs of one read: one lock for them."""
        if not costs:
            return
        with self._lock:
            self.misses += len(costs)
            self._ring.extend((table, j, c) for j, c in costs)
            self.used += sum(c for _, c in costs)
            self._make_room()

    def _make_room(self) -> None:
        """Caller holds the lock: evict (CLOCK) until the budget holds."""
        if self.used > self.budget:
            ring = self._ring
            while self.used > self.budget and len(ring) > 1:
                t, j, c = ring.popleft()
                if t._blocks is None:        # table dropped: its blocks are gone already
                    self.used -= c
                elif t._ref[j]:
                    t._ref[j] = 0
                    ring.append((t, j, c))
                else:
                    t._blocks[j] = None
                    self.used -= c

    def drop(self, table: "Table") -> None:
        with self._lock:
            kept = deque()
            for entry in self._ring:
                if entry[0] is table:
                    self.used -= entry[2]
                else:
                    kept.append(entry)
            self._ring = kept


def decoded_bytes(keys: list, values: list) -> int:
    """What a decoded block holds in memory: a bytes object per key and value (33 bytes
    each besides the data), two list slots and the position dict built on its second read
    (~60 bytes a record), measured with tracemalloc. O(n) in C."""
    return 400 + 140 * len(keys) + sum(map(len, keys)) + sum(len(v) for v in values if v is not None)


RAW_ENTRY = 200      # a cached raw block: the bytes object and its cache bookkeeping


def raw_cost(raw: bytes) -> int:
    """What a cached raw block costs: its bytes, bookkeeping and the restart hints its
    second lookup builds (about an eighth of it)."""
    return RAW_ENTRY + len(raw) + len(raw) // 8


class _BlockName:
    """"SST <path> block <i>" in an error message, formatted only if one is raised (a get
    that misses the block cache would otherwise format it for nothing)."""

    __slots__ = ("path", "i")

    def __init__(self, path: str, i: int) -> None:
        self.path, self.i = path, i

    def __str__(self) -> str:
        return f"SST {self.path} block {self.i}"


_ONCE = "once"      # in a cached block's hints slot: looked up once, no hints built yet


def _hints(blk: list):
    """Restart hints of a cached front-coded block ``[raw, pos, seq]``, for a lookup that
    starts inside it. None on the block's first lookup: building them walks the whole
    block, while the lookup alone walks half of it on average, and a block read for a
    get that missed the cache is mostly used once (at a 15% hit rate, ~8% of a get went
    to hints nobody used). Built on its second lookup, and kept with the block."""
    if len(blk) == 3:
        blk.append(_ONCE)
        return None
    hints = blk[3]
    if hints is _ONCE:
        hints = blk[3] = front_index(blk[0], blk[1], HINT_EVERY) if front_index is not None else None
    return hints

READ_AHEAD = 256 << 10   # bytes of following blocks a scan fetches with a block it misses
RECORDS_WINDOW = 1 << 20  # bytes of blocks a compaction reads of a table at once


def _list_get(blk: list, key: bytes):
    """(seq, value) of key in a decoded format-1 block, or NO_RECORD."""
    pos = blk[3]
    if pos is None:
        pos = blk[3] = dict(zip(blk[0], range(len(blk[0]))))
    j = pos.get(key)
    if j is None:
        return NO_RECORD
    seqs = blk[2]
    return (seqs if type(seqs) is int else seqs[j]), blk[1][j]


def list_chunk(blk: list, start: bytes | None, end: bytes | None) -> tuple:
    """(the (keys, values, seqs) of a decoded format-1 block in [start, end), or None when it
    has none; whether the range ends inside it): ``Table.scan_blocks``' step over such a
    block, which dkv's C scan calls too (dkv/_scanpath.py)."""
    keys, values, seqs, _ = blk
    j = 0 if start is None else bisect_left(keys, start)
    k = len(keys) if end is None else bisect_left(keys, end)
    chunk = None
    if j == 0 and k == len(keys):
        chunk = keys, values, seqs
    elif j < k:
        chunk = keys[j:k], values[j:k], (seqs if type(seqs) is int else seqs[j:k])
    return chunk, k < len(keys)


def group_bounds(groups: tuple) -> tuple[bytes | None, bytes | None]:
    """Key range ``[lo, hi)`` of a key-group range; None for an open end."""
    if tuple(groups) == ALL_KEY_GROUPS:
        return None, None
    lo, hi = groups
    return (lo.to_bytes(2, "big") if lo > 0 else None), (hi.to_bytes(2, "big") if hi < (1 << 16) else None)


class Table:
    """One SST as seen by one checkpoint (with its key-group clip). Thread-safe, lazy."""

    read_ahead = True       # scans fetch runs of blocks (a Delta's blocks are in memory)
    __slots__ = ("ref", "path", "min_key", "max_key", "_store", "_cache", "_meta", "_lock",
                 "clip_lo", "clip_hi", "_blocks", "_ref", "_first", "_bloom", "run", "held")

    def __init__(self, ref: TableRef, store, cache: BlockCache) -> None:
        self.ref = ref
        self.path = ref.path
        self._store = store
        self._cache = cache
        self._meta = None
        self._blocks = None
        self._lock = threading.Lock()
        self.run = None         # the flush that wrote it (its tables share one L0 run)
        self.held = False       # its store read it locally at a prefetch: later ones pass it by (read_ahead_runs)
        self.clip_lo, self.clip_hi = group_bounds(ref.groups)
        # The effective key range: the file's range narrowed to the owned key groups.
        self.min_key = ref.min_key if self.clip_lo is None else max(ref.min_key, self.clip_lo)
        self.max_key = ref.max_key if self.clip_hi is None else min(ref.max_key, self.clip_hi)

    def owns(self, key: bytes) -> bool:
        return (self.clip_lo is None or key >= self.clip_lo) and (self.clip_hi is None or key < self.clip_hi)

    def meta(self) -> sst.SstMeta:
        if self._meta is None:
            with self._lock:
                if self._meta is None:
                    meta = self._load_meta()
                    n = len(meta.first_keys)
                    self._first = meta.first_keys
                    self._bloom = _maybe if meta.bloom is None else meta.bloom.checker()
                    self._ref = bytearray(n)
                    self._blocks = [None] * n
                    self._meta = meta
        return self._meta

    def _load_meta(self) -> sst.SstMeta:
        size = self.ref.size
        start = max(0, size - max(TAIL_READ, size // TAIL_SHARE))
        tail = self._store.get(self.path, start, size)
        if len(tail) != size - start:
            raise CorruptionError(f"SST {self.path}: expected {size} bytes, found {start + len(tail)}")
        return self._parse_meta(tail, start)

    def _parse_meta(self, tail: bytes, start: int) -> sst.SstMeta:
        """The metadata from the file's bytes from ``start`` to its end."""
        size = self.ref.size
        what = f"SST {self.path}"
        off, length, crc = sst.parse_footer(tail, what)
        if off + length + sst.FOOTER_SIZE != size:
            raise CorruptionError(f"{what}: footer points outside the file")
        raw = tail[off - start: off - start + length] if off >= start else self._store.get(self.path, off, off + length)
        return sst.parse_meta(raw, crc, what, sst.footer_version(tail))

    def block(self, i: int):
        """Block i as cached: ``[raw, pos, seq]`` — the decompressed front-coded bytes, where
        its records start, and the sequence number its records share (0 when they do not)
        — or, for format-1 tables, ``[keys, values, seqs, position dict or None]``."""
        blk = self._blocks[i]
        if blk is None:
            return self._fetch(i)
        self._ref[i] = 1
        self._cache.hits += 1
        return blk

    def _fetch(self, i: int):
        """Block i read, checked and cached (a miss)."""
        blk, cost = self._load(i)
        self._blocks[i] = blk
        self._cache.admit(self, i, cost)
        return blk

    def _load(self, i: int) -> tuple[list, int]:
        """(cache entry, its bytes) of block i, fetched and checked."""
        meta = self._meta
        off, ln = meta.offsets[i], meta.lengths[i]
        return self._entry(i, self._store.get(self.path, off, off + ln))

    def _read_ahead(self, i: int, end) -> None:
        """A scan about to miss block i fetches the uncached blocks after it that it will
        need (first key < end), up to READ_AHEAD bytes, with the same read: one request
        instead of one per block. Blocks are back to back, so the run is one range."""
        meta, first, blocks = self._meta, self._first, self._blocks
        n = len(first)
        j, total = i + 1, meta.lengths[i]
        while (j < n and blocks[j] is None and (end is None or first[j] < end)
               and total + meta.lengths[j] <= READ_AHEAD):
            total += meta.lengths[j]
            j += 1
        if j == i + 1:
            return
        base = meta.offsets[i]
        self._install(i, j, self._store.get(self.path, base, base + total))

    def _install(self, i: int, j: int, data: bytes, room=None) -> int:
        """Blocks i..j-1 from ``data`` (their bytes, back to back as in the file), checked
        and cached; those another read cached meanwhile are kept. ``room``: a prefetch's
        share of the cache (``take(cost)`` False: no room left, the block is not kept).
        All are checked before any is kept. Returns the cache cost of those kept."""
        meta, blocks = self.meta(), self._blocks_list()
        base = meta.offsets[i]
        total = meta.offsets[j - 1] + meta.lengths[j - 1] - base
        if len(data) != total:
            raise CorruptionError(f"SST {self.path}: read {len(data)} bytes of blocks {i}..{j - 1}, "
                                  f"expected {total}")
        entries = []
        for k in range(i, j):
            o = meta.offsets[k] - base
            entries.append((k, *self._entry(k, data[o:o + meta.lengths[k]])))
        costs = []
        for k, entry, cost in entries:
            if blocks[k] is None and (room is None or room.take(cost)):
                blocks[k] = entry
                costs.append((k, cost))
        self._cache.admit_blocks(self, costs)
        return sum(c for _, c in costs)

    def _blocks_list(self) -> list:
        """The block slots (the metadata is loaded)."""
        blocks = self._blocks
        assert blocks is not None
        return blocks

    def wanted(self, ranges: list) -> list:
        """Runs ``[i, j)`` of the blocks not in memory that reads of the keys in ``ranges``
        (sorted, disjoint ``(lo, hi)`` pairs, ``hi`` None for no end) would fetch: the
        scans' blocks, a superset of the gets'. Adjacent blocks make one run, up to
        READ_AHEAD bytes, as a scan's read-ahead would. Loads the metadata."""
        meta = self.meta()
        first, blocks, lengths = self._first, self._blocks_list(), meta.lengths
        runs: list = []
        taken = -1                  # the last block index looked at
        run_bytes = 0
        for lo, hi in ranges:
            if self.clip_lo is not None and lo < self.clip_lo:
                lo = self.clip_lo
            if self.clip_hi is not None and (hi is None or hi > self.clip_hi):
                hi = self.clip_hi
            if (hi is not None and lo >= hi) or lo > self.max_key:
                continue
            i = max(0, bisect_right(first, lo) - 1, taken + 1)
            j = len(first) if hi is None else bisect_left(first, hi)
            for k in range(i, j):
                if blocks[k] is not None:
                    continue
                if runs and runs[-1][1] == k and run_bytes + lengths[k] <= READ_AHEAD:
                    runs[-1][1] = k + 1
                    run_bytes += lengths[k]
                else:
                    runs.append([k, k + 1])
                    run_bytes = lengths[k]
            taken = max(taken, j - 1)
        return [(i, j) for i, j in runs]

    def read_ahead_runs(self, runs: list, room=None) -> tuple[int, int] | None:
        """Fetch the block runs of ``wanted`` now, concurrently where the store can
        (ObjectStore.prefetch), and cache them as far as ``room`` (see ``_install``) lets:
        (requests, cache cost of the blocks kept). None where the store reads this table
        locally (it held it, or fetched it whole just now): its reads are cheap, nothing is
        cached ahead, and ``held`` is set (later prefetches pass it by)."""
        if not runs:
            return 0, 0
        meta = self.meta()
        spans = [(meta.offsets[i], meta.offsets[j - 1] + meta.lengths[j - 1]) for i, j in runs]
        data = self._store.prefetch(self.path, spans, self.ref.size)
        if data is None:
            self.held = True
            return None
        if len(data) != len(spans):
            raise CorruptionError(f"SST {self.path}: a prefetch of {len(spans)} ranges answered {len(data)}")
        kept = 0
        for (i, j), chunk in zip(runs, data):
            kept += self._install(i, j, chunk, room)
        return len(spans), kept

    def _entry(self, i: int, frame: bytes) -> tuple[list, int]:
        meta = self._meta
        what = _BlockName(self.path, i)
        if meta.version < 2:
            keys, values, seqs, _ = sst.decode_block(frame, meta.crcs[i], what, meta.version)
            return [keys, values, seqs, None], decoded_bytes(keys, values)
        raw = sst.block_raw(frame, meta.crcs[i], what)
        seqs, pos = block_head(raw, what)
        return [raw, pos, seqs if type(seqs) is int else 0], raw_cost(raw)

    def get(self, key: bytes):
        """(seq, value) for key (value None = tombstone), or NO_RECORD.

        The bloom filter first (one C call: a cached block's walk costs ~10x more, and most
        gets that reach a table miss it: at a million keys a get passes dozens of sealed
        segments), then O(log n) to the block and one walk of it in C (no record but the
        answer becomes a Python object).
        """
        if self.clip_lo is not None and not self.owns(key):
            return NO_RECORD
        if self._meta is None:
            self.meta()
        if not self._bloom(key):
            return NO_RECORD
        return self._find(key)

    def get_probed(self, key: bytes):
        """``get`` for a caller that probed this table's bloom filter already (DB.get
        probes every sealed segment's at once)."""
        if self.clip_lo is not None and not self.owns(key):
            return NO_RECORD
        if self._meta is None:
            self.meta()
        return self._find(key)

    def _find(self, key: bytes):
        i = bisect_right(self._first, key) - 1
        if i < 0:
            return NO_RECORD
        blk = self._blocks[i]
        if blk is None:
            blk = self._fetch(i)
        else:
            self._ref[i] = 1
            self._cache.hits += 1
        if type(blk[0]) is bytes:
            found, value = front_find(blk[0], key, blk[1], _hints(blk))
            return (blk[2], value) if found else NO_RECORD
        return _list_get(blk, key)

    def may_contain(self, key: bytes) -> bool:
        if self._meta is None:
            self.meta()
        return self._bloom(key)

    def scan_blocks(self, start: bytes | None, end: bytes | None):
        """Yield (keys, values, seqs) slices covering [start, end) ∩ owned groups, ascending;
        only the records in range become Python objects."""
        if self.clip_lo is not None and (start is None or start < self.clip_lo):
            start = self.clip_lo
        if self.clip_hi is not None and (end is None or end > self.clip_hi):
            end = self.clip_hi
        if start is not None and end is not None and start >= end:
            return
        if self._meta is None:
            self.meta()
        first = self._first
        i = 0 if start is None else max(0, bisect_right(first, start) - 1)
        n = len(first)
        while i < n:
            if end is not None and first[i] >= end:
                return
            if self._blocks[i] is None and self.read_ahead:
                self._read_ahead(i, end)
            blk = self.block(i)
            if type(blk[0]) is bytes:
                lo = start if start is not None and (i == 0 or start > first[i]) else None
                if lo is None:
                    keys, values, stop = front_decode(blk[0], blk[1], None, end)
                else:                   # the range starts inside the block: resume at a restart hint
                    keys, values, stop = front_decode(blk[0], blk[1], lo, end, _hints(blk))
                if keys:
                    yield keys, values, blk[2]
                if stop < 0:            # end fell inside this block
                    return
            else:
                chunk, stop = list_chunk(blk, start, end)
                if chunk is not None:
                    yield chunk
                if stop:
                    return
            i += 1

    def records(self):
        """(keys, values) per block, in key order, within the owned key groups, decoded
        without the block cache (a compaction reads each block once). A table up to
        2 x RECORDS_WINDOW is one fetch of the whole file; a bigger one is read a window of
        blocks at a time, so a merge of many tables holds a window of each, not the files."""
        lo, hi = self.clip_lo, self.clip_hi
        if self.ref.size <= 2 * RECORDS_WINDOW:
            data = self._store.get(self.path)
            if len(data) != self.ref.size:
                raise CorruptionError(f"SST {self.path}: {len(data)} bytes, the manifest says {self.ref.size}")
            meta, base = self._meta or self._parse_meta(data, 0), 0
        else:
            meta, data, base = self.meta(), b"", 0
        offsets, lengths, n = meta.offsets, meta.lengths, len(meta.offsets)
        for i in range(n):
            if hi is not None and meta.first_keys[i] >= hi:
                return
            off, ln = offsets[i], lengths[i]
            if off + ln > base + len(data):         # past the window: fetch the next one
                j, size = i, 0
                while j < n and (j == i or size + lengths[j] <= RECORDS_WINDOW):
                    size += lengths[j]
                    j += 1
                base, data = off, self._store.get(self.path, off, off + size)
                if len(data) != size:
                    raise CorruptionError(f"SST {self.path}: read {len(data)} bytes of blocks {i}..{j - 1}, "
                                          f"expected {size}")
            keys, values, _, _ = sst.decode_block(data[off - base:off - base + ln], meta.crcs[i],
                                                  f"SST {self.path} block {i}", meta.version)
            if lo is not None or hi is not None:
                a = 0 if lo is None else bisect_left(keys, lo)
                b = len(keys) if hi is None else bisect_left(keys, hi)
                keys, values = keys[a:b], values[a:b]
            if keys:
                yield keys, values

    def release(self) -> None:
        """Forget cached blocks (the file was deleted)."""
        self._cache.drop(self)
        self._blocks = None if self._meta is None else [None] * len(self._first)
