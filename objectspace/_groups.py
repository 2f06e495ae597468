"""Consumer groups of a PersistedStream (Redis XGROUP / XREADGROUP / XACK / XPENDING / XCLAIM).

A group record ``groups/<encoded name>`` holds ``[last delivered ms, seq, pending count,
{consumer: last seen ms}]``; its pending entries list (PEL) is a Table at
``pel/<encoded name>/<id>`` of ``[consumer, delivery ms, delivery count]``. Groups load
whole on the first group operation; a PEL loads on demand like any table.
"""
from __future__ import annotations

from typing import NamedTuple

import msgpack

from . import _layout as L
from ._base import MISSING
from ._keycodec import decode_key, encode_key
from ._layout import format_id, id_key, key_id, parse_id, range_bound
from ._table import Table
from .errors import AlreadyExistsError, ObjectNotFoundError


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


def _check_group_name(name) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"group and consumer names are non-empty str, got {name!r}")


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

    def create_group(self, name: str, start="$") -> None:
        """Create a consumer group (XGROUP CREATE). start: "$" (only new entries), "0"
        (everything) or an id. Raises AlreadyExistsError if the group exists."""
        _check_group_name(name)
        groups = self._load_groups()
        if name in groups:
            raise AlreadyExistsError(f"stream {self._name!r} already has a group {name!r}")
        last = self._last if start == "$" else parse_id(start)
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

    def set_group_id(self, name: str, id) -> None:
        """Move a group's last delivered id (XGROUP SETID)."""
        g = self._group(name)
        g.last = self._last if id == "$" else parse_id(id)
        self._dirty_group(g)

    def groups(self) -> list:
        """[{name, consumers, pending, last_delivered_id}] (XINFO GROUPS)."""
        return [{"name": g.name, "consumers": len(g.consumers), "pending": g.pel.count,
                 "last_delivered_id": format_id(*g.last)} for g in self._load_groups().values()]

    # -- reading ----------------------------------------------------------------------------

    def read_group(self, group: str, consumer: str, count: int | None = None, id: str = ">",
                   *, noack: bool = False) -> list:
        """XREADGROUP. id ">": entries after the group's last delivered id, at most count;
        each enters the pending list (delivery count 1) unless noack. Any other id: this
        consumer's pending entries after it (fields None if the entry was deleted).
        O(k) plus one dirty record per delivered entry and the group record."""
        _check_group_name(consumer)
        g = self._group(group)
        now = self._space._clock()
        self._dirty_group(g)
        g.consumers[consumer] = now
        out = []
        if count is not None and count <= 0:
            return out
        if id == ">":
            for ek, fields in self._t.iterate(id_key(*g.last) + b"\x00"):
                out.append((key_id(ek), fields))
                if count is not None and len(out) >= count:
                    break
            for ident, _ in out:
                if not noack:
                    g.pel.put(id_key(*parse_id(ident)), [consumer, now, 1])
            if out:
                g.last = parse_id(out[-1][0])
            return out
        lo = id_key(*parse_id(id)) + b"\x00"
        for ek, entry in g.pel.iterate(lo):
            if entry[0] == consumer:
                e = self._t.lookup(ek)
                out.append((key_id(ek), None if e is MISSING else e))
                if count is not None and len(out) >= count:
                    break
        return out

    def ack(self, group: str, *ids) -> int:
        """Remove ids from the group's pending list (XACK); returns how many were pending. O(k)."""
        g = self._group(group)
        n = 0
        for i in ids:
            if g.pel.remove(id_key(*parse_id(i))) is not MISSING:
                n += 1
        if n:
            self._dirty_group(g)
        return n

    def pending(self, group: str) -> dict:
        """Summary (XPENDING): {"pending": n, "min": id, "max": id, "consumers": {name: n}}. O(n)."""
        g = self._group(group)
        consumers: dict = {}
        first = last = None
        for ek, entry in g.pel.iterate():
            first = first or key_id(ek)
            last = ek
            consumers[entry[0]] = consumers.get(entry[0], 0) + 1
        return {"pending": g.pel.count, "min": first, "max": key_id(last) if last else None,
                "consumers": consumers}

    def pending_range(self, group: str, start="-", end="+", count: int | None = None,
                      consumer: str | None = None, min_idle: int = 0) -> list:
        """[PendingEntry(id, consumer, idle_ms, deliveries)] in id order (extended XPENDING)."""
        g = self._group(group)
        now = self._space._clock()
        out = []
        for ek, (who, at, n) in g.pel.iterate(range_bound(start, end=False), range_bound(end, end=True)):
            if (consumer is None or who == consumer) and now - at >= min_idle:
                out.append(PendingEntry(key_id(ek), who, now - at, n))
                if count is not None and len(out) >= count:
                    break
        return out

    def claim(self, group: str, consumer: str, min_idle: int, ids=None, *, count: int | None = None,
              justid: bool = False) -> list:
        """Give pending entries idle for at least min_idle ms to consumer (XCLAIM; with
        ids=None every such entry in id order, at most count, like XAUTOCLAIM). Claimed
        entries get delivery time now and, unless justid, one more delivery. Entries deleted
        from the stream leave the pending list. Returns [(id, fields)] (ids only if justid)."""
        _check_group_name(consumer)
        g = self._group(group)
        now = self._space._clock()
        if ids is None:
            eks = [ek for ek, entry in g.pel.iterate() if now - entry[1] >= min_idle]
        else:
            eks = [id_key(*parse_id(i)) for i in ids]
        self._dirty_group(g)
        g.consumers.setdefault(consumer, now)
        out = []
        for ek in eks:
            if count is not None and len(out) >= count:
                break
            entry = g.pel.lookup(ek)
            if entry is MISSING or now - entry[1] < min_idle:
                continue
            fields = self._t.lookup(ek)
            if fields is MISSING:
                g.pel.remove(ek)
                continue
            g.pel.put(ek, [consumer, now, entry[2] + (0 if justid else 1)])
            out.append(key_id(ek) if justid else (key_id(ek), fields))
        return out

    def consumers(self, group: str) -> list:
        """[{name, pending, idle_ms}] (XINFO CONSUMERS). O(pending)."""
        g = self._group(group)
        now = self._space._clock()
        counts = self.pending(group)["consumers"]
        return [{"name": c, "pending": counts.get(c, 0), "idle_ms": now - seen}
                for c, seen in g.consumers.items()]

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
