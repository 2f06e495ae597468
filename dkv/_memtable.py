"""Memtable: the in-memory map that writes go through to, one checkpoint interval at a time.

A dict gives O(1) puts and gets: ``key -> value`` with ``None`` for a tombstone. Records
carry no sequence number of their own: a memtable's records all take the sequence number
it is sealed with (its WAL segment's ``max_seq``), which is all a merge needs, since the
active memtable is newer than every other source. Size accounting counts each key once, so
overwriting a key does not grow the memtable.

The sorted order that scans need is built lazily, by readers only: ``_view`` is the keys in
order as of a scan and how many keys the dict held then. A memtable never removes a key (a
delete is a tombstone value) and a dict keeps insertion order, so the keys added since are
the dict's last ``len(data) - seen``: the next scan sorts them (in the order they were
written, mostly ascending runs a save makes, which timsort merges in linear time) and
merges them into the view, or builds the view anew when more keys came than it holds.
Writers never touch the view: a reader on another thread sees the dict at one instant and
the view it makes is exactly that instant's keys, however writes interleave (RFC 0012,
*Step 10*).
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import islice

ENTRY_OVERHEAD = 48  # bytes charged per key besides key and value, roughly the dict's cost
NO_RECORD = object()
"""The one sentinel of dkv's read path: no record for the key in this source."""


class Memtable:
    __slots__ = ("data", "_view", "nbytes", "max_seq")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes | None] = {}
        self._view: tuple[list, int] | None = None   # (the keys in order, len(data) then)
        self.nbytes = 0
        self.max_seq = 0   # set when sealed: every record here has this sequence number

    def put(self, key: bytes, value: bytes | None) -> None:
        """Insert or overwrite. O(1)."""
        data = self.data
        old = data.get(key, NO_RECORD)
        data[key] = value
        if old is NO_RECORD:
            self.nbytes += len(key) + ENTRY_OVERHEAD + (0 if value is None else len(value))
        else:
            self.nbytes += (0 if value is None else len(value)) - (0 if old is None else len(old))

    def apply(self, ops, nbytes: int) -> None:
        """Put every (key, value-or-None) of ``ops`` in order (``nbytes``: their raw bytes):
        one ``dict.update`` in C; the size grows by the new keys at the batch's average
        record size."""
        data = self.data
        n0 = len(data)
        data.update(ops)
        added = len(data) - n0
        if added:
            self.nbytes += added * ENTRY_OVERHEAD + (nbytes * added) // max(1, len(ops))

    def __len__(self) -> int:
        return len(self.data)

    def sorted_keys(self) -> list:
        """The keys in order: a list that is never changed in place (a merge makes a new
        one), so a scan may hold it while writes go on."""
        view, data = self._view, self.data
        if view is not None and view[1] == len(data):
            return view[0]
        while True:
            n = len(data)
            if view is None or n - view[1] > view[1]:
                keys = sorted(data)     # more keys came than the view holds: anew
                n = len(keys)           # (one instant's keys, whatever n was)
                break
            try:
                new = list(islice(reversed(data), n - view[1]))
            except RuntimeError:        # a writer added keys during the walk
                continue
            if len(data) == n:          # else a writer added keys before the walk: again
                new.reverse()           # as written: mostly ascending runs
                keys = sorted(view[0] + new)    # timsort: the sorted run, then the new keys' runs
                break
        self._view = (keys, n)
        return keys

    def columns_sorted(self) -> tuple[list, list]:
        """Keys in order and their values (for a WAL segment or a flush)."""
        data = self.data
        keys = self.sorted_keys() if self._view is not None else sorted(data)
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
