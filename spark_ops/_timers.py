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

EVENT_TIME, PROCESSING_TIME = 0, 1
_OFFSET = 1 << 63


@dataclass(frozen=True, order=True)
class Timer:
    """A timer that fired: due ``time`` (ms since the Unix epoch), its ``name`` and kind
    (``"event"`` time or ``"processing"`` time)."""
    time: int
    name: str = ""
    kind: str = "event"


def _prefix(kg: int, kind: int) -> bytes:
    return dkv.key_prefix(kg, dkv.SCHEMA_TIMER) + bytes((kind,))


def timer_key(kg: int, kind: int, due: int, key: tuple, name: str) -> bytes:
    return _prefix(kg, kind) + (due + _OFFSET).to_bytes(8, "big") + msgpack.packb([list(key), name])


def parse_timer_key(raw: bytes) -> tuple[int, int, int, tuple, str]:
    """(key group, kind, due, key, name)."""
    kg = (raw[0] << 8) | raw[1]
    kind = raw[3]
    due = int.from_bytes(raw[4:12], "big") - _OFFSET
    key, name = msgpack.unpackb(raw[12:], use_list=True)
    return kg, kind, due, tuple(key), name


class TimerService:
    """Registers, deletes and pops due timers of one shard's key groups in one dkv instance."""

    def __init__(self, db, groups: range) -> None:
        self.db = db
        self.groups = groups
        self.registered = 0
        self.deleted = 0

    def register(self, kg: int, kind: int, due: int, key: tuple, name: str = "") -> None:
        self.db.put(timer_key(kg, kind, int(due), key, name), b"")
        self.registered += 1

    def delete(self, kg: int, kind: int, due: int, key: tuple, name: str = "") -> None:
        self.db.delete(timer_key(kg, kind, int(due), key, name))
        self.deleted += 1

    def due(self, kind: int, limit: int) -> list[tuple[int, int, tuple, str]]:
        """All timers of ``kind`` with due time <= ``limit``, as (due, kg, key, name), in
        due order (ties by key group, then key). Does not delete them."""
        runs = []
        stop = (limit + 1 + _OFFSET).to_bytes(8, "big") if limit + 1 + _OFFSET < (1 << 64) else None
        for kg in self.groups:
            p = _prefix(kg, kind)
            run = []
            for raw, _ in self.db.scan(p, p + stop if stop else dkv.prefix_end(p)):
                _, _, due, key, name = parse_timer_key(raw)
                run.append((due, kg, key, name))
            if run:
                runs.append(run)
        return list(heapq.merge(*runs, key=lambda t: (t[0], t[1], repr(t[2]), t[3])))
