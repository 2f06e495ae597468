"""Memtable: the in-memory map that writes go through to, one checkpoint interval at a time.

A dict gives O(1) puts and gets: ``key -> value`` with ``None`` for a tombstone. Records
carry no sequence number of their own: a memtable's records all take the sequence number
it is sealed with (its WAL segment's ``max_seq``), which is all a merge needs, since the
active memtable is newer than every other source. The sorted order that scans need is
built lazily: a sorted list of the keys made on the first scan; keys added later wait in
a pending list, sorted and merged into it (one timsort in C, O(n + p log p)) by the next
scan, so a write costs an append however often scans come, and a write-only memtable
never pays for ordering (the view is dropped once more keys wait than it holds). Size
accounting counts each key once, so overwriting a key does not grow the memtable.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import islice

ENTRY_OVERHEAD = 48  # bytes charged per key besides key and value, roughly the dict's cost
NO_RECORD = object()
"""The one sentinel of dkv's read path: no record for the key in this source."""


class Memtable:
    __slots__ = ("data", "_sorted", "_pending", "nbytes", "max_seq")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes | None] = {}
        self._sorted: list | None = None    # the keys in order, as of the last scan
        self._pending: list = []            # keys added since (while _sorted is kept)
        self.nbytes = 0
        self.max_seq = 0   # set when sealed: every record here has this sequence number

    def put(self, key: bytes, value: bytes | None) -> None:
        """Insert or overwrite. O(1)."""
        data = self.data
        old = data.get(key, NO_RECORD)
        data[key] = value
        if old is NO_RECORD:
            self.nbytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
            if self._sorted is not None:
                self._pending.append(key)
                if len(self._pending) > len(self._sorted):
                    self._drop_view()
        else:
            self.nbytes += (0 if value is None else len(value)) - (0 if old is None else len(old))

    def apply(self, ops, nbytes: int) -> None:
        """Put every (key, value-or-None) of ``ops`` in order (``nbytes``: their raw bytes):
        one ``dict.update`` in C; the size grows by the new keys at the batch's average
        record size. With a sorted view, the new keys join the pending ones in the order
        they came: a dict keeps its keys in insertion order and a memtable never removes
        one, so they are the last ``added`` keys of the dict. A batch's records mostly come
        in runs of ascending keys, which the next scan's sort of the pending keys (timsort)
        merges in linear time; in a set's order (as before) the sort compared each key
        ~log2(n) times: ~290 against ~40 ns a key at 1,000,000 keys (RFC 0012)."""
        data = self.data
        n0 = len(data)
        data.update(ops)
        added = len(data) - n0
        if added:
            self.nbytes += added * ENTRY_OVERHEAD + (nbytes * added) // max(1, len(ops))
            if self._sorted is not None:
                new = list(islice(reversed(data), added))
                new.reverse()
                self._pending += new
                if len(self._pending) > len(self._sorted):
                    self._drop_view()

    def _drop_view(self) -> None:
        """Unused lately: building the view anew at the next scan costs no more."""
        self._sorted = None
        self._pending = []

    def __len__(self) -> int:
        return len(self.data)

    def sorted_keys(self) -> list:
        """The keys in order: a list that is never changed in place (a merge makes a new
        one), so a scan may hold it while writes go on."""
        keys = self._sorted
        if keys is None:
            keys = self._sorted = sorted(self.data)
        elif self._pending:
            keys = self._sorted = sorted(keys + self._pending)   # timsort: sorted run + pending
            self._pending = []
        return keys

    def columns_sorted(self) -> tuple[list, list]:
        """Keys in order and their values (for a WAL segment or a flush)."""
        data = self.data
        keys = self.sorted_keys() if self._sorted is not None else sorted(data)
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
        lo = 0 if start is None else bisect_left(keys, start)
        while True:
            hi = len(keys) if end is None else bisect_left(keys, end, lo)
            if lo >= hi:
                return
            part = keys[lo:min(hi, lo + chunk)]
            yield part, [data[k] for k in part], seq
            if lo + chunk >= hi:
                return
            # Resume after the last key of this chunk (keys may have been added meanwhile).
            keys = self.sorted_keys()
            lo = bisect_right(keys, part[-1])
