"""Memtable: the in-memory map that writes go through to, one checkpoint interval at a time.

A dict gives O(1) puts and gets: ``key -> value`` with ``None`` for a tombstone. Records
carry no sequence number of their own: a memtable's records all take the sequence number
it is sealed with (its WAL segment's ``max_seq``), which is all a merge needs, since the
active memtable is newer than every other source. The sorted order that scans need is
built lazily (a SortedList made on the first scan and kept up to date while scans keep
coming; dropped once a quarter of the keys were added without a scan), so a write-only
memtable never pays for ordering. Size accounting counts each key once, so overwriting a
key does not grow the memtable.
"""
from __future__ import annotations

from sortedcontainers import SortedList

ENTRY_OVERHEAD = 48  # bytes charged per key besides key and value, roughly the dict's cost
_MISSING = object()


class Memtable:
    __slots__ = ("data", "_sorted", "_adds", "nbytes", "max_seq")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes | None] = {}
        self._sorted: SortedList | None = None
        self._adds = 0     # keys added to the sorted view since the last scan used it
        self.nbytes = 0
        self.max_seq = 0   # set when sealed: every record here has this sequence number

    def put(self, key: bytes, value: bytes | None) -> None:
        """Insert or overwrite. O(1), O(log n) once the sorted view exists."""
        data = self.data
        old = data.get(key, _MISSING)
        data[key] = value
        if old is _MISSING:
            self.nbytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
            if self._sorted is not None:
                self._sorted.add(key)
                self._adds += 1
                if self._adds > 4096 and self._adds * 4 > len(data):
                    self._sorted = None     # unused lately: rebuilding later costs less
        else:
            self.nbytes += (0 if value is None else len(value)) - (0 if old is None else len(old))

    def apply(self, ops, nbytes: int) -> None:
        """Put every (key, value-or-None) of ``ops`` in order (``nbytes``: their raw bytes).
        Without a sorted view this is one ``dict.update`` in C; the size grows by the new
        keys at the batch's average record size."""
        data = self.data
        if self._sorted is not None:
            for key, value in ops:
                self.put(key, value)
            return
        n0 = len(data)
        data.update(ops)
        added = len(data) - n0
        if added:
            self.nbytes += added * ENTRY_OVERHEAD + (nbytes * added) // max(1, len(ops))

    def __len__(self) -> int:
        return len(self.data)

    def sorted_keys(self) -> SortedList:
        if self._sorted is None:
            self._sorted = SortedList(self.data)
        self._adds = 0
        return self._sorted

    def columns_sorted(self) -> tuple[list, list]:
        """Keys in order and their values (for a WAL segment or a flush)."""
        data = self.data
        keys = sorted(data) if self._sorted is None else list(self._sorted)
        return keys, list(map(data.__getitem__, keys))

    def scan_blocks(self, start: bytes | None, end: bytes | None, seq: int, chunk: int = 4096):
        """Yield ``(keys, values, seq)`` chunks for keys in ``[start, end)``, ascending.

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
            yield part, [data[k] for k in part], seq
            if lo + chunk >= hi:
                return
            # Resume after the last key of this chunk (the list may have grown meanwhile).
            lo = keys.bisect_right(part[-1])
