"""Memtable: the in-memory sorted map that writes go through to.

A dict gives O(1) puts and gets; the sorted order that scans and flushes need is built
lazily (a SortedList made on the first scan and kept up to date while scans keep coming;
dropped once a quarter of the keys were added without a scan), so a write-only memtable
never pays for ordering. Each entry is ``key -> (seq, value)`` with
``value is None`` for a tombstone. Size accounting counts each key once, so overwriting a
key does not grow the memtable.
"""
from __future__ import annotations

from sortedcontainers import SortedList

ENTRY_OVERHEAD = 48  # bytes charged per key besides key and value, roughly dict + tuple cost


class Memtable:
    __slots__ = ("data", "_sorted", "_adds", "nbytes", "max_seq")

    def __init__(self) -> None:
        self.data: dict[bytes, tuple[int, bytes | None]] = {}
        self._sorted: SortedList | None = None
        self._adds = 0     # keys added to the sorted view since the last scan used it
        self.nbytes = 0
        self.max_seq = 0   # set when sealed: every record here has seq <= max_seq

    def put(self, key: bytes, rec: tuple) -> None:
        """Insert or overwrite. O(1), O(log n) once the sorted view exists."""
        data = self.data
        old = data.get(key)
        data[key] = rec
        value = rec[1]
        if old is None:
            self.nbytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
            if self._sorted is not None:
                self._sorted.add(key)
                self._adds += 1
                if self._adds > 4096 and self._adds * 4 > len(data):
                    self._sorted = None     # unused lately: rebuilding later costs less
        else:
            self.nbytes += (0 if value is None else len(value)) - (0 if old[1] is None else len(old[1]))

    def apply(self, ops, seq: int, wal: dict) -> int:
        """Put every (key, value-or-None) of ``ops`` with the sequence numbers after ``seq``,
        recording each in ``wal`` too; returns the last sequence number. put() inlined, as a
        batch is the hot path of a commit."""
        data, add, grow = self.data, (None if self._sorted is None else self._sorted.add), 0
        n0 = len(data)
        for key, value in ops:
            seq += 1
            rec = (seq, value)
            wal[key] = rec
            old = data.get(key)
            data[key] = rec
            if old is None:
                grow += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
                if add is not None:
                    add(key)
            else:
                grow += (0 if value is None else len(value)) - (0 if old[1] is None else len(old[1]))
        self.nbytes += grow
        if add is not None:
            self._adds += len(data) - n0
            if self._adds > 4096 and self._adds * 4 > len(data):
                self._sorted = None
        return seq

    def __len__(self) -> int:
        return len(self.data)

    def sorted_keys(self) -> SortedList:
        if self._sorted is None:
            self._sorted = SortedList(self.data)
        self._adds = 0
        return self._sorted

    def columns_sorted(self) -> tuple[list, list, list]:
        """Keys in order and their values and seqs, as three lists (for a flush)."""
        data = self.data
        keys = sorted(data)
        recs = list(map(data.__getitem__, keys))
        return keys, [r[1] for r in recs], [r[0] for r in recs]

    def scan_blocks(self, start: bytes | None, end: bytes | None, chunk: int = 4096):
        """Yield ``(keys, values, seqs)`` chunks for keys in ``[start, end)``, ascending.

        Each chunk is copied when it is reached, so writes made while iterating (e.g.
        deleting each key seen) are safe and never break the iteration.
        """
        data = self.data
        if not data:
            return
        keys = self.sorted_keys()
        lo = 0 if start is None else keys.bisect_left(start)
        while True:
            hi = len(keys) if end is None else keys.bisect_left(end)
            if lo >= hi:
                return
            part = keys[lo:min(hi, lo + chunk)]
            recs = [data[k] for k in part]
            yield part, [r[1] for r in recs], [r[0] for r in recs]
            if lo + chunk >= hi:
                return
            # Resume after the last key of this chunk (the list may have grown meanwhile).
            lo = keys.bisect_right(part[-1])
