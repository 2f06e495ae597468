"""Version: an immutable list of SST levels, shared by reads, flushes and checkpoints.

L0 holds flushed tables whose key ranges overlap, newest first. L1..Ln are sorted runs:
within a level, tables are ordered by key and do not overlap, so a get reads at most one
table per level. A flush or compaction never edits a Version; it publishes a new one.
"""
from __future__ import annotations

from bisect import bisect_left
from itertools import chain

from ._compaction import same_run
from ._memtable import NO_RECORD
from ._table import Table


class Version:
    __slots__ = ("l0", "levels", "_maxkeys")

    def __init__(self, l0: tuple = (), levels: tuple = ()) -> None:
        self.l0: tuple[Table, ...] = tuple(l0)
        # Drop trailing empty levels so "the last level" is always meaningful.
        levels = [tuple(sorted(lv, key=lambda t: t.min_key)) for lv in levels]
        while levels and not levels[-1]:
            levels.pop()
        self.levels: tuple[tuple[Table, ...], ...] = tuple(levels)
        self._maxkeys = tuple([t.max_key for t in lv] for lv in self.levels)

    def tables(self):
        yield from self.l0
        for lv in self.levels:
            yield from lv

    def level_bytes(self, i: int) -> int:
        """Bytes in level i (0 = L0)."""
        tables = self.l0 if i == 0 else self.levels[i - 1]
        return sum(t.ref.size for t in tables)

    def get(self, key: bytes):
        """(seq, value) of the newest record for key, or NO_RECORD. Stops at the first hit."""
        for t in self.l0:
            if t.min_key <= key <= t.max_key:
                r = t.get(key)
                if r is not NO_RECORD:
                    return r
        for run, maxkeys in zip(self.levels, self._maxkeys):
            i = bisect_left(maxkeys, key)
            while i < len(run):
                t = run[i]
                if t.min_key > key:
                    break
                r = t.get(key)
                if r is not NO_RECORD:
                    return r
                if t.clip_hi is None or key < t.clip_hi:
                    break
                i += 1      # key sits on a key-group boundary: the next table may own it
        return NO_RECORD

    def sources(self, start: bytes | None, end: bytes | None) -> list:
        """One chunk iterator per L0 table and per level overlapping [start, end); each yields
        (keys, values, seqs) slices in key order."""
        out = []
        for t in self.l0:
            if _overlaps(t, start, end):
                out.append(t.scan_blocks(start, end))
        for run, maxkeys in zip(self.levels, self._maxkeys):
            i = 0 if start is None else bisect_left(maxkeys, start)
            picked = []
            while i < len(run) and (end is None or run[i].min_key < end):
                picked.append(run[i])
                i += 1
            if len(picked) == 1:
                out.append(picked[0].scan_blocks(start, end))
            elif picked:
                out.append(chain.from_iterable(t.scan_blocks(start, end) for t in picked))
        return out

    def replace(self, removed: list, added: list, level: int) -> "Version":
        """A new Version without the ``removed`` tables and with ``added`` in ``level`` (>= 1).
        Tables are matched by identity: after a rescale one file can be two tables (two
        clipped key-group views), and merging one must not drop the other."""
        gone = {id(t) for t in removed}
        l0 = tuple(t for t in self.l0 if id(t) not in gone)
        levels = [list(t for t in lv if id(t) not in gone) for lv in self.levels]
        while len(levels) < level:
            levels.append([])
        levels[level - 1].extend(added)
        return Version(l0, levels)

    def with_l0(self, tables: list) -> "Version":
        """A new Version with ``tables`` (one flush: disjoint key ranges) as the newest of L0."""
        return Version(tuple(tables) + self.l0, self.levels)

    def l0_runs(self) -> int:
        """Sorted runs in L0: the tables of one paced flush count once. A flush publishes its
        tables together in ascending key order; after a reopen (when the flush that wrote
        them is not known) consecutive tables of one writer in ascending, disjoint key
        ranges are taken for one run."""
        runs, prev = 0, None
        for t in self.l0:
            runs += prev is None or not same_run(prev, t)
            prev = t
        return runs


def _overlaps(t: Table, start, end) -> bool:
    return (end is None or t.min_key < end) and (start is None or t.max_key >= start)
