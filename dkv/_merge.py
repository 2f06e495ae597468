"""Merging sorted sources: the newest version of each key wins, tombstones hide.

A source yields chunks ``(keys, values, seqs)`` — parallel lists in ascending key order
(an SST block, a slice of a memtable; ``seqs`` may be one int the whole chunk shares).
Sources are given newest first, in the order a ``get`` consults them (active memtable,
immutable memtables, L0 newest first, then each level): that order, not sequence
numbers, decides which version of a key is newest, because after a rescale the records
of one instance can carry sequence numbers of several (each instance counts its own).
With one source the chunks are walked directly; with several, a key range at a time goes
through a dict, oldest source first, so that the newest source's record is the one left.

``merge_visible`` serves reads; ``merged_ranges`` serves flushes and compactions.
"""
from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from functools import partial
from itertools import chain, compress
from operator import is_not

from .format._env import native_enabled

# The C twin of _merge_runs (dkv.format._native.merge_runs), or None where the module was
# not built or OBJECTSPACE_NATIVE=0 (tests/dkv/test_merge.py holds the two to each other).
_c_merge_runs: Callable[[list, bool], tuple[list, list] | None] | None
try:
    if not native_enabled():
        raise ImportError("native helpers disabled")
    from .format._native import merge_runs as _c_merge_runs
except ImportError:          # pragma: no cover - no compiler when installed
    _c_merge_runs = None

MERGE_RANGE_RECORDS = 4096        # records per source and key range a flush or compaction merges at once
MERGE_TOTAL_RECORDS = 1 << 16     # ... at most this many over all its sources (a flush may merge 64)


# The heap merge in C takes 0.3-0.9x the dict's time for up to 8 runs (a compaction's L0 tables
# and L1, a flush of a few segments), but a key found in many of many runs (a flush of 32
# checkpoint intervals of queue slots and metadata) costs it a pop and a sift per copy, where
# the dict replaces an entry: up to 2x the dict's time at 32 runs (RFC 0012, step 5).
C_MERGE_RUNS = 8
READ_WINDOW = 512                 # records per source a scan merges at once
SMALL_MERGE = 4096                # records over all sources a scan merges in one go
_not_none = partial(is_not, None)


def _pairs(chunks):
    for keys, values, _ in chunks:
        yield keys, values


def _live(keys: list, values: list):
    """The (key, value) pairs of a chunk without its tombstones, in C: ``None in values``
    and ``compress`` run no bytecode per record."""
    if None in values:
        return compress(zip(keys, values), map(_not_none, values))
    return zip(keys, values)


def merge_visible(sources: list):
    """Yield, per chunk, (iterator of (key, value) for its live keys, its last key) across
    ``sources`` (newest first); a chunk's keys are ascending and follow the previous
    chunk's. A reader ``yield from``s each iterator, so no bytecode runs per record. One
    source is walked directly. Several are merged with a dict, oldest source first so that
    the newest record of a key is the one left, which costs C work per record where a heap
    merge costs a tuple and a comparison in Python: a small range (an object's slots, up
    to SMALL_MERGE records over all sources) in one go, a bigger one a key range at a time
    (see ``merged_ranges``). The last key (tombstones included) is where a reader resumes."""
    if not sources:
        return
    if len(sources) == 1:
        for keys, values, _ in sources[0]:
            if keys:
                yield _live(keys, values), keys[-1]
        return
    olds = sources[::-1]
    read: list = []             # chunks read so far, per source, oldest source first
    total = 0
    for src in olds:
        chunks: list = []
        read.append(chunks)
        for chunk in src:
            chunks.append(chunk)
            total += len(chunk[0])
            if total > SMALL_MERGE:         # a big range: the rest a key range at a time
                yield from merge_rest(read, olds)
                return
    merged: dict = {}
    for chunks in read:
        for keys, values, _ in chunks:
            merged.update(zip(keys, values))
    if merged:
        keys = sorted(merged)
        yield _live(keys, list(map(merged.__getitem__, keys))), keys[-1]


def merge_rest(read: list, olds: list):
    """``merge_visible``'s big range, once the records read passed SMALL_MERGE: ``read``, the
    chunks read so far of the first sources of ``olds`` (all of them, oldest first), and the
    rest of each, merged a key range at a time. Also what dkv's C scan hands a big range to
    (dkv/_scanpath.py)."""
    more = [_pairs(chain(c, s)) for c, s in zip(read, olds)] + [_pairs(s) for s in olds[len(read):]]
    for keys, values in merged_ranges(more, True, READ_WINDOW):
        yield zip(keys, values), keys[-1]


def chunk_parts(chunk) -> tuple:
    """A chunk's ``(keys, values, seqs)``, unpacked as ``merge_visible`` unpacks it (dkv's C
    scan calls it for a chunk that is not a tuple of three, for the same error)."""
    keys, values, seqs = chunk
    return keys, values, seqs


def merged_ranges(sources: list, drop_tombstones: bool, range_records: int = MERGE_RANGE_RECORDS):
    """Yield (keys, values) of the merge of ``sources`` — iterators of sorted (keys, values)
    chunks, oldest first: a later source's record for a key wins — a key range at a time,
    ascending. Each range is merged with a dict and one sort (C speed: the dict's insertion
    order is the sources' sorted runs, which timsort merges), so memory holds one range,
    not the whole merge. For flushes and compactions (reads use ``merge_visible``)."""
    # Memory holds about range_records per source: many sources take smaller ranges.
    range_records = min(range_records, max(64, MERGE_TOTAL_RECORDS // max(1, len(sources))))
    cursors = [_Cursor(chunks) for chunks in sources]
    while True:
        live = [c for c in cursors if not c.done]
        if not live:
            return
        # The range ends where the source with the fewest keys ahead would have given
        # range_records records; every source contributes its keys below that bound.
        bounds = [b for b in (c.bound(range_records) for c in live) if b is not None]
        bound = min(bounds) if bounds else None
        keys, values = merge_runs([c.take(bound) for c in live], drop_tombstones)
        if keys:
            yield keys, values


def merge_runs(runs: list, drop_tombstones: bool) -> tuple[list, list]:
    """(keys, values) of ``runs`` — (keys, values) pairs of lists in ascending key order,
    oldest first — merged: each key once, ascending, with the newest run's value (and
    without tombstones when ``drop_tombstones``). In C (a heap over the runs, memcmp)
    when there are at most C_MERGE_RUNS runs of bytes in order, else ``_merge_runs``."""
    if _c_merge_runs is not None and len(runs) <= C_MERGE_RUNS:
        out = _c_merge_runs(runs, drop_tombstones)
        if out is not None:
            return out
    return _merge_runs(runs, drop_tombstones)


def _merge_runs(runs: list, drop_tombstones: bool) -> tuple[list, list]:
    """``merge_runs`` in Python, the reference: a dict updated oldest run first (the newest
    record of a key is the one left), then one sort (C speed: timsort merges the runs)."""
    merged: dict = {}
    for ks, vs in runs:
        merged.update(zip(ks, vs))
    if drop_tombstones:
        merged = {k: v for k, v in merged.items() if v is not None}
    keys = sorted(merged)
    return keys, list(map(merged.__getitem__, keys))


class _Cursor:
    """A position in a source's sorted chunks, with the chunks ahead of it buffered."""

    __slots__ = ("_chunks", "_more", "keys", "values", "i", "done")

    def __init__(self, chunks) -> None:
        self._chunks = chunks
        self._more = True
        self.keys: list = []
        self.values: list = []
        self.i = 0
        self.done = False
        self._pull(1)

    def _pull(self, n: int) -> None:
        """Buffer chunks until n records lie ahead (or the source ends)."""
        if self.i and self.i * 2 >= len(self.keys):
            self.keys, self.values, self.i = self.keys[self.i:], self.values[self.i:], 0
        while self._more and len(self.keys) - self.i < n:
            nxt = next(self._chunks, None)
            if nxt is None:
                self._more = False
            else:
                self.keys += nxt[0]
                self.values += nxt[1]
        self.done = not self._more and self.i >= len(self.keys)

    def bound(self, n: int):
        """The key n records ahead, or None when fewer than n are left."""
        self._pull(n + 1)
        j = self.i + n
        return self.keys[j] if j < len(self.keys) else None

    def take(self, bound) -> tuple[list, list]:
        """Records with key < bound (all that are left when bound is None)."""
        i = self.i
        j = len(self.keys) if bound is None else bisect_left(self.keys, bound, i)
        self.i = j
        out = self.keys[i:j], self.values[i:j]
        self.done = not self._more and j >= len(self.keys)
        return out
