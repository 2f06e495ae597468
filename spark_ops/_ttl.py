"""State TTL: ``ctx.<kind>(name, ttl=...)`` state that expires when not written for ``ttl``.

Processing-time based and refreshed on write, as Spark's ``TTLConfig``. Records live in
the shard's dkv instance under their own schema byte, in the key group of the state they
time, so they move with it on a rescale and are checkpointed with it (RFC 0009)::

    index:  key group (2) | SCHEMA_TTL (1) | 0x00 | expiry ms + 2**63 (8, big-endian) | msgpack([nkey, ek])  -> b""
    stamp:  key group (2) | SCHEMA_TTL (1) | 0x01 | nkey | ek                                             -> expiry (8)

``nkey`` is the object's encoded name in its key group's object space (key parts + name),
``ek`` the encoded key of a dict entry or set element, or empty for the object itself. The
index is ordered by expiry, so the expiry pass of a batch is a scan per key group that stops
at the first record not yet due: its cost is what expired (plus a seek per key group, and
none at all while a lower bound on every stored expiry says nothing is due). A stamp says
the current expiry of an object or entry: an index record whose stamp says otherwise is
stale and only deleted.

What expires (see docs/spark_ops.md, *State TTL*): every object has an object stamp,
refreshed whenever the object is written (created, assigned, appended to, popped, ...);
when it comes due the whole object is deleted. A dict, sorted dict, set or sorted set also
has a stamp per entry (element), refreshed when that entry is written; an entry that comes
due is removed on its own. The pass runs at the start of a batch, with the batch's
processing time, before ``open``: whatever expired by then is gone before the operator can
read it, and its removal is part of the batch's checkpoint.

Writes are found where the objects are saved (``before_save``, called by the runtime before
every save of the spaces): only the objects looked up with ``ttl=`` since the last save are
checked, against the space's list of written objects, so operators without ttl pay nothing.
"""
from __future__ import annotations

import msgpack

import dkv
from objectspace import ObjectNotFoundError, decode_key, encode_name

from ._units import duration_ms

SCHEMA_TTL = 0x02
"""The schema byte of TTL records (after objectspace.SCHEMA_STATE 0x00 and timers' 0x01)."""
_INDEX, _STAMP = 0, 1
_OFFSET = 1 << 63
_INFINITY = 1 << 63
PER_ENTRY = frozenset({"dict", "sorted_dict", "set", "sorted_set"})
"""Kinds whose entries (elements) expire one by one; every other kind expires as a whole."""

_PARSED: dict = {}


def ttl_ms(value) -> int:
    """The ttl in ms from ms, a timedelta or a string like "1 hour" (memoised: an operator
    passes the same ttl on every event). ValueError for a negative, zero or unparsable ttl,
    TypeError for another type."""
    memo = (type(value), value)
    try:
        return _PARSED[memo]
    except (KeyError, TypeError):       # TypeError: unhashable (duration_ms says what is wrong)
        pass
    ms = duration_ms(value, "ttl")
    if ms <= 0:
        raise ValueError(f"ttl must be positive, got {value!r}")
    if len(_PARSED) < 1024:
        _PARSED[memo] = ms
    return ms


def _pre(kg: int, sub: int) -> bytes:
    return dkv.key_prefix(kg, SCHEMA_TTL) + bytes((sub,))


def index_key(kg: int, expiry: int, nkey: bytes, ek: bytes) -> bytes:
    return _pre(kg, _INDEX) + (expiry + _OFFSET).to_bytes(8, "big") + msgpack.packb([nkey, ek])


def stamp_key(kg: int, nkey: bytes, ek: bytes = b"") -> bytes:
    return _pre(kg, _STAMP) + nkey + ek


def _pack(expiry: int) -> bytes:
    return (expiry + _OFFSET).to_bytes(8, "big")


def _unpack(raw: bytes) -> int:
    return int.from_bytes(raw, "big") - _OFFSET


def parse_index_key(raw: bytes) -> tuple[int, int, bytes, bytes]:
    """(key group, expiry, nkey, ek) of an index record."""
    kg = (raw[0] << 8) | raw[1]
    expiry = int.from_bytes(raw[4:12], "big") - _OFFSET
    nkey, ek = msgpack.unpackb(raw[12:])
    return kg, expiry, nkey, ek


def scan_expiries(db, kg: int):
    """(expiry, name, entry key or None) of the TTL index of key group ``kg``, in expiry
    order (for inspection and tests)."""
    p = _pre(kg, _INDEX)
    for raw, _ in db.scan(p, dkv.prefix_end(p)):
        _, expiry, nkey, ek = parse_index_key(raw)
        yield expiry, decode_key(nkey), (decode_key(ek) if ek else None)


class TtlService:
    """The TTL bookkeeping of one open shard state (``ShardState.ttl``)."""

    def __init__(self, st) -> None:
        self.st = st
        self.db = st.db
        self.groups = st.key_groups
        self.ptime: int | None = None
        self.used: dict[int, dict[bytes, int]] = {}     # kg -> nkey -> ttl ms: looked up with ttl since the last save
        self._stamps: dict[bytes, int | None] = {}       # stamp key -> expiry (None: none), this batch
        # A lower bound on every stored expiry (None: unknown, scan), as the timers keep one.
        self._next: int | None = None
        # False once a scan found no TTL record and nothing used ttl since: delete_state skips its seek.
        self.active = True
        self.expired_objects = 0
        self.expired_entries = 0

    def forget(self) -> None:
        """The store changed underneath (another process wrote it): scan next time."""
        self._next = None
        self._stamps.clear()
        self.active = True

    # -- registration and refresh -----------------------------------------------------------

    def register(self, kg: int, obj, ttl) -> None:
        """``obj`` (of key group ``kg``) was asked for with ``ttl``: writes to it until the
        next save refresh its expiry."""
        ms = ttl_ms(ttl)
        reg = self.used.get(kg)
        if reg is None:
            reg = self.used[kg] = {}
            self.active = True
        reg[obj._nkey] = ms

    def before_save(self) -> None:
        """Refresh the expiry of what was written among the objects looked up with ttl since
        the last save (call before the spaces are saved: it reads what is dirty). O(written
        objects + written entries), a point read per entry not met yet this batch."""
        if not self.used:
            return
        ptime = self.ptime if self.ptime is not None else 0
        spaces = self.st.spaces
        for kg, reg in self.used.items():
            sp = spaces.get(kg)
            if sp is None:
                continue
            touched = sp._touched
            for nkey, ttl in reg.items():
                obj = touched.get(nkey)
                if obj is None or obj._dead:
                    continue
                expiry = ptime + ttl
                if obj.kind in PER_ENTRY:
                    self._refresh_entries(kg, nkey, obj, expiry)
                self._set(kg, nkey, b"", expiry)
        self.used = {}

    def _refresh_entries(self, kg: int, nkey: bytes, obj, expiry: int) -> None:
        t = obj._t
        if t.clr:       # cleared since the last save: every stored entry stamp goes
            self._drop_entries(kg, nkey)
        vals = t.vals
        for ek in t.dirty:
            if ek not in vals or decode_key(ek) not in obj:       # removed since the last save
                self._set(kg, nkey, ek, None)
            else:
                self._set(kg, nkey, ek, expiry)

    def _stamp(self, sk: bytes) -> int | None:
        try:
            return self._stamps[sk]
        except KeyError:
            raw = self.db.get(sk)
            v = self._stamps[sk] = None if raw is None else _unpack(raw)
            return v

    def _set(self, kg: int, nkey: bytes, ek: bytes, expiry: int | None) -> None:
        """Make the stamp of (nkey, ek) say ``expiry`` (None: remove it), and the index agree."""
        sk = stamp_key(kg, nkey, ek)
        old = self._stamp(sk)
        if old == expiry:
            return
        db = self.db
        if old is not None:
            db.delete(index_key(kg, old, nkey, ek))
        if expiry is None:
            db.delete(sk)
        else:
            db.put(sk, _pack(expiry))
            db.put(index_key(kg, expiry, nkey, ek), b"")
            if self._next is not None and expiry < self._next:
                self._next = expiry
        self._stamps[sk] = expiry

    def _drop_entries(self, kg: int, nkey: bytes) -> int:
        """Delete every stamp (and its index record) of object ``nkey``, the object's own
        included. O(its stamps)."""
        db, n = self.db, 0
        p = stamp_key(kg, nkey)
        for sk, raw in list(db.scan(p, dkv.prefix_end(p))):
            db.delete(index_key(kg, _unpack(raw), nkey, sk[len(p):]))
            db.delete(sk)
            self._stamps[sk] = None
            n += 1
        return n

    def forget_object(self, kg: int, name) -> None:
        """The operator deleted object ``name`` (ctx.delete_state): its stamps go too. A
        seek, none while no TTL record is known to exist."""
        if self.active:
            nkey = encode_name(name)
            reg = self.used.get(kg)
            if reg is not None:
                reg.pop(nkey, None)
            self._drop_entries(kg, nkey)

    # -- the expiry pass ----------------------------------------------------------------------

    def expire(self, ptime: int) -> int:
        """Remove what expired by processing time ``ptime`` (expiry <= ptime): objects
        deleted, entries removed, their TTL records deleted; the changes are saved into the
        store now (so they are not taken for writes) and the batch's checkpoint commits
        them. Returns the number of objects and entries removed. O(what expired + stale
        index records), one seek per key group unless nothing can be due."""
        self.ptime = ptime
        self._stamps.clear()
        nxt = self._next
        if nxt is not None and ptime < nxt:
            return 0
        db = self.db
        due, later, found = [], _INFINITY, False
        for kg in self.groups:
            p = _pre(kg, _INDEX)
            for raw, _ in db.scan(p, dkv.prefix_end(p)):
                found = True
                expiry = int.from_bytes(raw[4:12], "big") - _OFFSET
                if expiry > ptime:
                    later = min(later, expiry)
                    break
                due.append(raw)
        self._next = later
        if not found and not self.used:
            self.active = False
        if not due:
            return 0
        self.active = True
        removed = 0
        for raw in due:
            removed += self._expire_one(raw)
        self._stamps.clear()
        # Save what the pass changed now: the objects it touched are clean again before the
        # operator runs, so the next save does not take the removals for writes.
        self.st.spill()
        return removed

    def _expire_one(self, raw: bytes) -> int:
        db = self.db
        kg, expiry, nkey, ek = parse_index_key(raw)
        db.delete(raw)
        sk = stamp_key(kg, nkey, ek)
        cur = db.get(sk)
        if cur is None or _unpack(cur) != expiry:
            return 0            # stale: refreshed or removed since
        sp = self.st.space(kg)
        name = decode_key(nkey)
        if not ek:
            self._drop_entries(kg, nkey)
            try:
                sp.delete(name)
            except ObjectNotFoundError:
                return 0
            self.expired_objects += 1
            return 1
        db.delete(sk)
        try:
            obj = sp.get(name)
        except ObjectNotFoundError:
            return 0
        key = decode_key(ek)
        if obj.kind in ("dict", "sorted_dict"):
            obj.pop(key, None)
        elif obj.kind in ("set", "sorted_set"):
            obj.discard(key)
        else:
            return 0
        self.expired_entries += 1
        return 1
