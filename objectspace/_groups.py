"""Consumer groups of a PersistedStream (Redis XGROUP / XREADGROUP / XACK / XPENDING / XCLAIM).

A group record ``groups/<encoded name>`` holds ``[last delivered ms, seq, pending count,
{consumer: last seen ms}]``; its pending entries list (PEL) is a Table at
``pel/<encoded name>/<id>`` of ``[consumer, delivery ms, delivery count]``. Groups load
whole on the first group operation; a PEL loads on demand like any table.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

import msgpack

from . import _layout as L
from ._base import MISSING
from ._keycodec import decode_key, encode_key
from ._layout import format_id, id_key, key_id, parse_id, range_bound
from ._table import Table
from .errors import AlreadyExistsError, ObjectNotFoundError

if TYPE_CHECKING:
    from ._types import StreamId


class PendingEntry(NamedTuple):
    """One entry of a group's pending entries list."""
    id: str
    consumer: str
    idle_ms: int
    deliveries: int


class _Group:
    __slots__ = ("name", "gk", "last", "consumers", "pel", "dirty", "pending")

    def __init__(self, stream, name: str, last, consumers: dict, pel_count: int, fresh: bool) -> None:
        self.name, self.last, self.consumers = name, last, consumers
        self.gk = encode_key(name)
        self.pel = Table(stream, stream._ns + L.PEL + self.gk, pel_count, fresh, True,
                         _enc_pel, _dec_pel)
        self.dirty, self.pending = fresh, False

    def record(self) -> bytes:
        return msgpack.packb([self.last[0], self.last[1], self.pel.count, self.consumers])


def _enc_pel(ek, entry) -> bytes:
    return msgpack.packb(entry)


def _dec_pel(ek, raw):
    return msgpack.unpackb(raw)


def _id_of(ek: bytes) -> tuple[int, int]:
    return int.from_bytes(ek[:8], "big"), int.from_bytes(ek[8:16], "big")


def _check_group_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"group and consumer names are non-empty str, got {name!r}")


def _check_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, got {value!r}")
    return value


def _id_keys(ids) -> list:
    """The keys of ids (one id string, or an iterable of ids), every one checked first."""
    if isinstance(ids, str):
        ids = (ids,)
    return [id_key(*parse_id(i)) for i in ids]


class GroupsMixin:
    """Consumer-group verbs of PersistedStream (its slots hold the state)."""

    __slots__ = ()

    def _init_groups(self, fresh: bool) -> None:
        self._groups = {} if fresh else None     # name -> _Group; None until loaded
        self._dead_groups: dict = {}             # gk -> pending?

    def _load_groups(self) -> dict:
        if self._groups is None:
            groups, gp = {}, self._ns + L.GROUPS
            for k, raw in self._space._db.scan_prefix(gp):
                name = decode_key(k[len(gp):])
                ms, seq, n, consumers = msgpack.unpackb(raw, strict_map_key=False)
                groups[name] = _Group(self, name, (ms, seq), consumers, n, fresh=False)
            self._groups = groups
        return self._groups

    def _group(self, name) -> _Group:
        self._check()
        g = self._load_groups().get(name)
        if g is None:
            raise ObjectNotFoundError(f"stream {self._name!r} has no consumer group {name!r}")
        return g

    def _dirty_group(self, g: _Group) -> None:
        if not self._listed:
            self._touch()
        g.dirty = True

    # -- groups -----------------------------------------------------------------------------

    def create_group(self, name: str, start: StreamId = "$") -> None:
        """Create a consumer group (XGROUP CREATE). start: "$" (only new entries), "0"
        (everything) or an id. Raises AlreadyExistsError if the group exists."""
        _check_group_name(name)
        last = self._last if start == "$" else parse_id(start)
        groups = self._load_groups()
        if name in groups:
            raise AlreadyExistsError(f"stream {self._name!r} already has a group {name!r}")
        g = _Group(self, name, last, {}, 0, fresh=True)
        if self._dead_groups.pop(g.gk, None) is not None:
            g.pel.clr = True    # the old group's pending entries must go
        groups[name] = g
        self._dirty_group(g)

    def destroy_group(self, name: str) -> bool:
        """Delete a group and its pending entries (XGROUP DESTROY); False if absent."""
        self._check()
        g = self._load_groups().pop(name, None)
        if g is None:
            return False
        if not self._listed:
            self._touch()
        self._dead_groups[g.gk] = False
        return True

    def set_group_id(self, name: str, id: StreamId) -> None:
        """Move a group's last delivered id (XGROUP SETID): "$" is the stream's last id,
        "-" and "+" the smallest and greatest ids."""
        g = self._group(name)
        if id == "$":
            last = self._last
        elif id == "-":
            last = (0, 0)
        elif id == "+":
            last = (L.MAX_SEQ, L.MAX_SEQ)
        else:
            last = parse_id(id)
        g.last = last
        self._dirty_group(g)

    def groups(self) -> list:
        """[{name, consumers, pending, last_delivered_id}] by name (XINFO GROUPS)."""
        groups = self._load_groups()
        return [{"name": g.name, "consumers": len(g.consumers), "pending": g.pel.count,
                 "last_delivered_id": format_id(*g.last)} for g in (groups[n] for n in sorted(groups))]

    # -- reading ----------------------------------------------------------------------------

    def read_group(self, group: str, consumer: str, count: int | None = None, id: str = ">",
                   *, noack: bool = False) -> list:
        """XREADGROUP. id ">": entries after the group's last delivered id, at most count
        (None, 0 or less: all, as Redis's COUNT 0); each enters the pending list (delivery
        count 1) unless noack. Any other id: this consumer's pending entries after it, each
        delivered once more (delivery count + 1, delivery time now; fields None and nothing
        counted if the entry was deleted). The consumer is created (or its seen time
        refreshed) when something is read, and always by a read with an id, as in Redis.
        O(k) plus one dirty record per delivered entry and the group record."""
        _check_group_name(consumer)
        g = self._group(group)
        if count is not None and _check_int(count, "count") <= 0:
            count = None
        if id == ">":
            got = []
            for item in self._t.iterate(id_key(*g.last) + b"\x00"):
                got.append(item)
                if count is not None and len(got) >= count:
                    break
            if not got:
                return []
            now = self._space._clock()
            self._dirty_group(g)
            g.consumers[consumer] = now
            if not noack:
                put = g.pel.put
                for ek, _ in got:
                    put(ek, [consumer, now, 1])
            g.last = _id_of(got[-1][0])
            return [(key_id(ek), fields) for ek, fields in got]
        lo = id_key(*parse_id(id)) + b"\x00"
        now = self._space._clock()
        self._dirty_group(g)
        g.consumers[consumer] = now
        got = []
        for ek, entry in g.pel.iterate(lo):
            if entry[0] == consumer:
                got.append((ek, entry))
                if count is not None and len(got) >= count:
                    break
        out = []
        for ek, entry in got:
            fields = self._t.lookup(ek)
            if fields is MISSING:
                out.append((key_id(ek), None))
            else:
                g.pel.put(ek, [consumer, now, entry[2] + 1])
                out.append((key_id(ek), fields))
        return out

    def ack(self, group: str, *ids: StreamId) -> int:
        """Remove ids from the group's pending list (XACK); returns how many were pending.
        O(k). Every id is checked before any is acknowledged."""
        keys = _id_keys(ids)
        g = self._group(group)
        n = 0
        for ek in keys:
            if g.pel.remove(ek) is not MISSING:
                n += 1
        if n:
            self._dirty_group(g)
        return n

    def pending(self, group: str) -> dict:
        """Summary (XPENDING): {"pending": n, "min": id, "max": id, "consumers": {name: n}}
        (consumers with pending entries, by name). O(n)."""
        g = self._group(group)
        consumers: dict = {}
        first = last = None
        for ek, entry in g.pel.iterate():
            first = first or key_id(ek)
            last = ek
            consumers[entry[0]] = consumers.get(entry[0], 0) + 1
        return {"pending": g.pel.count, "min": first, "max": key_id(last) if last else None,
                "consumers": {c: consumers[c] for c in sorted(consumers)}}

    def pending_range(self, group: str, start: StreamId = "-", end: StreamId = "+", count: int | None = None,
                      consumer: str | None = None, min_idle: int = 0) -> list:
        """[PendingEntry(id, consumer, idle_ms, deliveries)] in id order, at most count (None:
        all; 0 or less: none, as Redis's COUNT), of consumer only if given, idle at least
        min_idle ms (extended XPENDING)."""
        g = self._group(group)
        lo, hi = range_bound(start, end=False), range_bound(end, end=True)
        if count is not None and _check_int(count, "count") <= 0:
            return []
        _check_int(min_idle, "min_idle")
        now = self._space._clock()
        out = []
        for ek, (who, at, n) in g.pel.iterate(lo, hi):
            if (consumer is None or who == consumer) and (min_idle <= 0 or now - at >= min_idle):
                out.append(PendingEntry(key_id(ek), who, max(now - at, 0), n))
                if count is not None and len(out) >= count:
                    break
        return out

    def claim(self, group: str, consumer: str, min_idle: int, ids: StreamId | Iterable[StreamId] | None = None, *,
              count: int | None = None,
              justid: bool = False) -> list:
        """Give pending entries idle for at least min_idle ms to consumer (XCLAIM); returns
        [(id, fields)] (ids only if justid). Claimed entries get delivery time now and,
        unless justid, one more delivery; the consumer is created, or its seen time
        refreshed, only when it claims something. A pending entry deleted from the stream
        leaves the pending list when met, however idle, and is not returned.

        ids=None claims like XAUTOCLAIM from the start of the pending list, without its
        cursor: every idle enough entry in id order, at most count (>= 1; None: all);
        deleted entries met on the way leave the pending list without counting toward
        count, so an empty result means nothing is left to claim. With ids, at most count
        of those ids are claimed."""
        _check_group_name(consumer)
        g = self._group(group)
        _check_int(min_idle, "min_idle")
        if count is not None and _check_int(count, "count") < 1:
            raise ValueError("count must be >= 1 (or None: no limit)")
        keys = None if ids is None else _id_keys(ids)
        now = self._space._clock()
        pel, t = g.pel, self._t
        out, changed = [], False
        if not self._listed:
            self._touch()
        if keys is None:     # XAUTOCLAIM: decide in one pass over the PEL, then change it
            claims, drops = [], []
            for ek, entry in pel.iterate():
                if count is not None and len(claims) >= count:
                    break
                fields = t.lookup(ek)
                if fields is MISSING:
                    drops.append(ek)
                elif min_idle <= 0 or now - entry[1] >= min_idle:
                    claims.append((ek, entry, fields))
            for ek in drops:
                pel.remove(ek)
            changed = bool(drops)
        else:
            claims = []
        for ek in keys or ():
            if count is not None and len(out) >= count:
                break
            entry = pel.lookup(ek)
            if entry is MISSING:
                continue
            fields = t.lookup(ek)
            if fields is MISSING:
                pel.remove(ek)
                changed = True
            elif min_idle <= 0 or now - entry[1] >= min_idle:
                pel.put(ek, [consumer, now, entry[2] + (0 if justid else 1)])
                out.append(key_id(ek) if justid else (key_id(ek), fields))
        for ek, entry, fields in claims:
            pel.put(ek, [consumer, now, entry[2] + (0 if justid else 1)])
            out.append(key_id(ek) if justid else (key_id(ek), fields))
        if out or changed:
            g.dirty = True
        if out:
            g.consumers[consumer] = now
        return out

    def consumers(self, group: str) -> list:
        """[{name, pending, idle_ms}] by name (XINFO CONSUMERS). O(pending)."""
        g = self._group(group)
        now = self._space._clock()
        counts = self.pending(group)["consumers"]
        return [{"name": c, "pending": counts.get(c, 0), "idle_ms": max(now - g.consumers[c], 0)}
                for c in sorted(g.consumers)]

    def create_consumer(self, group: str, consumer: str) -> bool:
        """Add a consumer to a group (XGROUP CREATECONSUMER); False if it exists (its seen
        time is left alone)."""
        _check_group_name(consumer)
        g = self._group(group)
        if consumer in g.consumers:
            return False
        self._dirty_group(g)
        g.consumers[consumer] = self._space._clock()
        return True

    def delete_consumer(self, group: str, consumer: str) -> int:
        """Remove a consumer and its pending entries (XGROUP DELCONSUMER); returns how many
        pending entries it had."""
        g = self._group(group)
        doomed = [ek for ek, entry in g.pel.iterate() if entry[0] == consumer]
        for ek in doomed:
            g.pel.remove(ek)
        if g.consumers.pop(consumer, None) is not None or doomed:
            self._dirty_group(g)
        return len(doomed)

    # -- save -------------------------------------------------------------------------------

    def _groups_dirty_count(self) -> int:
        n = len(self._dead_groups)
        for g in (self._groups or {}).values():
            n += (g.dirty or g.pending) + g.pel.dirty_count()
        return n

    def _collect_groups(self, out: list, full: bool) -> None:
        gp, pp, db = self._ns + L.GROUPS, self._ns + L.PEL, self._space._db
        for gk in self._dead_groups:
            out.append((gp + gk, None))
            out.extend((k, None) for k, _ in db.scan_prefix(pp + gk))
        groups = self._load_groups() if full else (self._groups or {})
        for g in groups.values():
            if full or g.dirty or g.pending:
                out.append((gp + g.gk, g.record()))
            g.pel.collect(out, full)

    def _promote_groups(self) -> None:
        for gk in self._dead_groups:
            self._dead_groups[gk] = True
        for g in (self._groups or {}).values():
            g.pending = g.pending or g.dirty
            g.dirty = False
            g.pel.promote()

    def _confirm_groups(self) -> bool:
        for gk in [gk for gk, pending in self._dead_groups.items() if pending]:
            del self._dead_groups[gk]
        clean = not self._dead_groups
        for g in (self._groups or {}).values():
            g.pending = False
            clean = g.pel.confirm() and not g.dirty and clean
        return clean
