"""Timers, stored in dkv under the timer schema byte and ordered by due time.

Key layout (one record per timer, empty value)::

    key group (2) | SCHEMA_TIMER (1) | kind (1) | due ms + 2**63 (8, big-endian) | msgpack([key, name])

Within a key group a range scan returns timers in due order, so firing is a scan that
stops at the first timer not yet due. Timers are identified by (key, due time, name), as
in Flink; registering the same timer twice keeps one.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import msgpack

import dkv

SCHEMA_TIMER = 0x01
"""The schema byte (the third key byte, after the key group) of timer records; object
spaces' records use objectspace.SCHEMA_STATE (0x00) in the same key groups."""
EVENT_TIME, PROCESSING_TIME = 0, 1
KIND_NAMES = {EVENT_TIME: "event", PROCESSING_TIME: "processing"}
"""Timer.kind of each kind byte."""
_OFFSET = 1 << 63
_INFINITY = 1 << 63


@dataclass(frozen=True, order=True)
class Timer:
    """A timer that fired: due ``time`` (ms since the Unix epoch), its ``name`` and kind
    (``"event"`` time or ``"processing"`` time)."""
    time: int
    name: str = ""
    kind: str = "event"


def _prefix(kg: int, kind: int) -> bytes:
    return dkv.key_prefix(kg, SCHEMA_TIMER) + bytes((kind,))


def timer_key(kg: int, kind: int, due: int, key: tuple, name: str) -> bytes:
    return _prefix(kg, kind) + (due + _OFFSET).to_bytes(8, "big") + msgpack.packb([list(key), name])


def parse_timer_key(raw: bytes) -> tuple[int, int, int, tuple, str]:
    """(key group, kind, due, key, name)."""
    kg = dkv.key_group_of(raw)
    kind = raw[3]
    due = int.from_bytes(raw[4:12], "big") - _OFFSET
    key, name = msgpack.unpackb(raw[12:], use_list=True)
    return kg, kind, due, tuple(key), name


class TimerService:
    """Registers, deletes and pops due timers of one shard's key groups in one dkv instance."""

    def __init__(self, db, key_group_range: range) -> None:
        self.db = db
        self.key_group_range = key_group_range
        self.registered = 0
        self.deleted = 0
        # Per kind, a lower bound on the due time of every stored timer (None: unknown). A
        # batch whose watermark is below it fires nothing and need not scan 2 x groups
        # ranges (which also makes the memtable keep a sorted view of every key).
        self._next: dict[int, int | None] = {EVENT_TIME: None, PROCESSING_TIME: None}

    def head_ranges(self) -> list:
        """The key ranges ``due``'s first scans read: each key group's timers of each kind."""
        return self._ranges(EVENT_TIME) + self._ranges(PROCESSING_TIME)

    def due_ranges(self, kind: int, limit: int) -> list:
        """The key ranges of the timers ``due(kind, limit)`` returns: none when every stored
        timer of ``kind`` is known to be later than ``limit``, else each key group's timers
        of that kind up to ``limit`` (``due`` reads on to the first later one, most often in
        the same block)."""
        if self._none_due(kind, limit):
            return []
        top = max(0, int(limit) + 1 + _OFFSET)
        return [(lo, lo + top.to_bytes(8, "big") if top < 1 << 64 else hi) for lo, hi in self._ranges(kind)]

    def _none_due(self, kind: int, limit: int) -> bool:
        """Every stored timer of ``kind`` is known to be later than ``limit``."""
        nxt = self._next[kind]
        return nxt is not None and limit < nxt

    def _ranges(self, kind: int) -> list:
        """Each key group's range of timers of ``kind``, in key group order."""
        out = []
        for kg in self.key_group_range:
            p = _prefix(kg, kind)
            out.append((p, dkv.prefix_end(p)))
        return out

    def forget(self) -> None:
        """The store changed underneath (another process wrote it): scan next time."""
        self._next = {EVENT_TIME: None, PROCESSING_TIME: None}

    def register(self, kg: int, kind: int, due: int, key: tuple, name: str = "") -> None:
        due = int(due)
        self.db.put(timer_key(kg, kind, due, key, name), b"")
        self.registered += 1
        nxt = self._next[kind]
        if nxt is not None and due < nxt:
            self._next[kind] = due

    def delete(self, kg: int, kind: int, due: int, key: tuple, name: str = "") -> None:
        self.db.delete(timer_key(kg, kind, int(due), key, name))
        self.deleted += 1

    def of_key(self, kg: int, key: tuple) -> list[Timer]:
        """The timers registered for ``key`` (its parts) in key group ``kg``, both kinds, in
        time order (then name, then kind). Scans the key group's timers: O(timers of kg)."""
        out = []
        for kind in (EVENT_TIME, PROCESSING_TIME):
            p = _prefix(kg, kind)
            for raw, _ in self.db.scan(p, dkv.prefix_end(p)):
                _, _, due, parts, name = parse_timer_key(raw)
                if parts == key:
                    out.append(Timer(due, name, KIND_NAMES[kind]))
        return sorted(out)

    def due(self, kind: int, limit: int) -> list[tuple[int, int, tuple, str]]:
        """All timers of ``kind`` with due time <= ``limit``, as (due, kg, key, name), in
        due order (ties by key group, then key). Does not delete them."""
        if self._none_due(kind, limit):
            return []
        runs = []
        later = _INFINITY             # the earliest due time beyond limit
        for kg, (lo, hi) in zip(self.key_group_range, self._ranges(kind)):
            run = []
            for raw, _ in self.db.scan(lo, hi):
                _, _, due, key, name = parse_timer_key(raw)
                if due > limit:
                    later = min(later, due)
                    break
                run.append((due, kg, key, name))
            if run:
                runs.append(run)
        # What is returned may stay stored (the caller deletes what it fires): count it.
        self._next[kind] = min([later] + [run[0][0] for run in runs])
        return list(heapq.merge(*runs, key=lambda t: (t[0], t[1], repr(t[2]), t[3])))


def scan_timers(db, groups: tuple = (0, 1 << 16)):
    """(key group, kind, due, key parts, name) of every timer stored in ``db`` whose key
    group is in ``groups`` = (first, end): key groups in order, in each event-time timers
    then processing-time ones, each in due order. Reads the timer records only: a seek per
    key group that holds records, plus one record per timer (object state is skipped)."""
    first, end = groups
    start = first.to_bytes(2, "big")
    stop = end.to_bytes(2, "big") if end < 1 << 16 else None
    while True:
        head = next(iter(db.scan(start, stop)), None)
        if head is None:
            return
        key = head[0]
        if len(key) < 3:
            start = key + b"\x00"
            continue
        kg = dkv.key_group_of(key)
        if key[2] < SCHEMA_TIMER:
            start = dkv.key_prefix(kg, SCHEMA_TIMER)
            continue
        if key[2] == SCHEMA_TIMER:
            p = dkv.key_prefix(kg, SCHEMA_TIMER)
            for raw, _ in db.scan(p, dkv.prefix_end(p)):
                _, kind, due, parts, name = parse_timer_key(raw)
                yield kg, kind, due, parts, name
        if kg + 1 >= 1 << 16:
            return
        start = (kg + 1).to_bytes(2, "big")
