"""State TTL: ``ctx.<kind>(name, ttl=...)`` state that expires when not written for ``ttl``.

Processing-time based and refreshed on write, as Spark's ``TTLConfig``. Records live in
the shard's dkv instance under their own schema byte, in the key group of the state they
time, so they move with it on a rescale and are checkpointed with it (RFC 0009; their
layout, and the read side for inspection, ``scan_expiries`` and ``Expiries``, are in
``_expiries``). The index is ordered by expiry, so the expiry pass of a batch is a scan per
key group that stops at the first record not yet due: its cost is what expired (plus a seek
per key group, and none at all while a lower bound on every stored expiry says nothing is
due). A stamp says the current expiry of an object or entry: an index record whose stamp
says otherwise is stale and only deleted.

What expires (see docs/spark_ops.md, *State TTL*): every object has an object stamp,
refreshed whenever the object is written (created, assigned, appended to, popped, ...);
when it comes due the whole object is deleted. A dict, sorted dict, set or sorted set also
has a stamp per entry (element), refreshed when that entry is written; an entry that comes
due is removed on its own. A queue, list, stack, linked list or stream has spans of
element positions instead (RFC 0009, *Per-element TTL for sequences*): a position written
(an element appended, inserted, assigned, or moved by the kind) gets the save's expiry; a
span that comes due removes the elements still at its positions. The pass runs at the
start of a batch, with the batch's
processing time, before ``open``: whatever expired by then is gone before the operator can
read it, and its removal is part of the batch's checkpoint.

Writes are found where the objects are saved (``before_save``, called by the runtime before
every save of the spaces): only the objects looked up with ``ttl=`` since the last save are
checked, against what the save will write (objectspace's public ``unsaved_objects()`` and
``PersistedObject.unsaved()``, positions as ``positions()`` gives them), so operators
without ttl pay nothing.
"""
from __future__ import annotations

from bisect import bisect_left

import dkv
from objectspace import ObjectNotFoundError, decode_key, encode_key, encode_name, stream_id

from ._expiries import _INDEX, _OFFSET, SPAN, _pack, _pre, _unpack, index_key, parse_index_key, stamp_key
from ._units import duration_ms

_INFINITY = 1 << 63
PER_ENTRY = frozenset({"dict", "sorted_dict", "set", "sorted_set"})
"""Kinds whose entries (elements) expire one by one, with a stamp per entry."""
SLOT_KINDS = frozenset({"queue", "list", "stack"})
PER_ELEMENT = SLOT_KINDS | {"linked_list", "stream"}
"""Kinds whose elements expire one by one, stamped by spans of positions."""
PER_OBJECT = frozenset({"value", "array", "ndarray"})
"""Kinds that expire as a whole object only."""
_WIDTH = {"stream": 16}  # bytes of a position (8 for slots and node ids)

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


def _intervals(positions: list) -> list:
    """Maximal runs ``(lo, hi)`` of consecutive ints in sorted ``positions``."""
    out = []
    for x in positions:
        if out and out[-1][1] == x - 1:
            out[-1][1] = x
        else:
            out.append([x, x])
    return out


class TtlService:
    """The TTL bookkeeping of one open shard state (``ShardState.ttl``)."""

    def __init__(self, st) -> None:
        self.st = st
        self.db = st.db
        self.key_group_range = st.key_group_range
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
        reg[obj.encoded_name] = ms

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
            unsaved = sp.unsaved_objects()
            for nkey, ttl in reg.items():
                obj = unsaved.get(nkey)
                if obj is None:
                    continue
                change = obj.unsaved()
                expiry = ptime + ttl
                kind = change.kind
                if kind in PER_ENTRY:
                    self._refresh_entries(kg, nkey, change, expiry)
                elif kind in PER_ELEMENT:
                    self._refresh_elements(kg, nkey, change, expiry)
                self._set(kg, nkey, b"", expiry)
        self.used = {}

    def _refresh_entries(self, kg: int, nkey: bytes, change, expiry: int) -> None:
        """Stamp the entries the save writes with ``expiry``, unstamp those it removes (all
        of them when the object was cleared). O(written entries), a point read per entry
        not met yet this batch."""
        if change.cleared:      # every stored entry stamp goes
            self._drop_entries(kg, nkey)
        for ek in change.removed:
            self._set(kg, nkey, ek, None)
        for ek in change.written:
            self._set(kg, nkey, ek, expiry)

    def _refresh_elements(self, kg: int, nkey: bytes, change, expiry: int) -> None:
        """Stamp the positions of a sequence that the save writes (slots, node values, stream
        entries) with ``expiry``, as spans. O(written positions) plus a seek per run of them."""
        written = change.written
        if not written:
            return
        if change.kind == "stream":     # entries are only added, with ids above every id before
            self._put_span(kg, nkey, written[0], written[-1], expiry, 16, merge=False)
            return
        for lo, hi in _intervals(written):
            self._put_span(kg, nkey, lo, hi, expiry, 8)

    def _spans(self, kg: int, nkey: bytes, start: int, width: int):
        """(lo, hi, expiry) of the spans of ``nkey`` with hi >= start, in order (lazy)."""
        base = stamp_key(kg, nkey, SPAN)
        n = len(base)
        for sk, raw in self.db.scan(base + start.to_bytes(width, "big"), dkv.prefix_end(base)):
            yield int.from_bytes(raw[8:], "big"), int.from_bytes(sk[n:], "big"), _unpack(raw)

    def _span_ek(self, hi: int, width: int) -> bytes:
        return SPAN + hi.to_bytes(width, "big")

    def _write_span(self, kg: int, nkey: bytes, lo: int, hi: int, expiry: int, width: int) -> None:
        ek = self._span_ek(hi, width)
        self.db.put(stamp_key(kg, nkey, ek), _pack(expiry) + lo.to_bytes(width, "big"))
        self._index(kg, expiry, nkey, ek)

    def _index(self, kg: int, expiry: int, nkey: bytes, ek: bytes) -> None:
        """Put the index record of (nkey, ek) expiring at ``expiry``; keep the lower bound."""
        self.db.put(index_key(kg, expiry, nkey, ek), b"")
        if self._next is not None and expiry < self._next:
            self._next = expiry

    def _delete_span(self, kg: int, nkey: bytes, hi: int, expiry: int, width: int) -> None:
        ek = self._span_ek(hi, width)
        self.db.delete(stamp_key(kg, nkey, ek))
        self.db.delete(index_key(kg, expiry, nkey, ek))

    def _put_span(self, kg: int, nkey: bytes, a: int, b: int, expiry: int, width: int, merge: bool = True) -> None:
        """Positions a..b get ``expiry``: the spans they overlap are cut (their parts outside
        a..b keep their expiry); with ``merge``, a span ending at a-1 with the same expiry
        is extended (appends across two saves of a batch make one span). One seek, then the
        spans overlapping a..b plus one."""
        drop, keep = [], []
        for lo, hi, e in self._spans(kg, nkey, max(a - 1, 0) if merge else a, width):
            if hi < a:                  # ends at a-1: adjacent
                if e == expiry:
                    drop.append((hi, e))
                    a = lo
                continue
            if lo > b:
                break
            drop.append((hi, e))
            if lo < a:
                keep.append((lo, a - 1, e))
            if hi > b:
                keep.append((b + 1, hi, e))
        for hi, e in drop:
            self._delete_span(kg, nkey, hi, e, width)
        keep.append((a, b, expiry))
        for lo, hi, e in keep:
            self._write_span(kg, nkey, lo, hi, e, width)

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
            self._index(kg, expiry, nkey, ek)
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

    def stamp_all(self, kg: int, obj, ttl) -> None:
        """Give ``obj`` and each of its entries (elements) the expiry of a write now: a
        migration moved it under a new name (RFC 0010), which counts as writing all of it.
        O(entries) for a dict or set, one span for a sequence."""
        expiry = (self.ptime or 0) + ttl_ms(ttl)
        nkey, kind = obj.encoded_name, obj.kind
        self.active = True
        if kind in PER_ENTRY:
            for key in list(obj):
                self._set(kg, nkey, encode_key(key), expiry)
        elif kind in SLOT_KINDS and len(obj):
            slots = obj.positions()
            self._put_span(kg, nkey, slots[0], slots[-1], expiry, 8, merge=False)
        elif kind == "linked_list":
            for lo, hi in _intervals(sorted(obj.positions())):
                self._put_span(kg, nkey, lo, hi, expiry, 8, merge=False)
        elif kind == "stream" and len(obj):
            ids = obj.positions()
            self._put_span(kg, nkey, min(ids), max(ids), expiry, 16, merge=False)
        self._set(kg, nkey, b"", expiry)

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

    def head_ranges(self) -> list:
        """The key ranges ``expire``'s first pass reads: each key group's expiry index."""
        out = []
        for kg in self.key_group_range:
            p = _pre(kg, _INDEX)
            out.append((p, dkv.prefix_end(p)))
        return out

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
        for kg in self.key_group_range:
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
        spans: dict = {}            # (kg, nkey) -> [(lo, hi)] of sequence elements due
        for raw in due:
            removed += self._expire_one(raw, spans)
        for (kg, nkey), due_spans in spans.items():
            removed += self._expire_elements(kg, nkey, due_spans)
        self._stamps.clear()
        # Save what the pass changed now: the objects it touched are clean again before the
        # operator runs, so the next save does not take the removals for writes.
        self.st.spill()
        return removed

    def _expire_one(self, raw: bytes, spans: dict) -> int:
        db = self.db
        kg, expiry, nkey, ek = parse_index_key(raw)
        db.delete(raw)
        sk = stamp_key(kg, nkey, ek)
        cur = db.get(sk)
        if cur is None or _unpack(cur) != expiry:
            return 0            # stale: refreshed or removed since
        if ek[:1] == SPAN:      # a span of a sequence: removed per object, after the loop
            db.delete(sk)
            spans.setdefault((kg, nkey), []).append((int.from_bytes(cur[8:], "big"), int.from_bytes(ek[1:], "big")))
            return 0
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

    def _expire_elements(self, kg: int, nkey: bytes, due: list) -> int:
        """Remove the elements at the positions of the due spans (their records are deleted
        already) from the sequence ``nkey``, if it still exists; returns how many."""
        try:
            obj = self.st.space(kg).get(decode_key(nkey))
        except ObjectNotFoundError:
            return 0                # deleted by its own expiry in this pass, or by the operator
        kind = obj.kind
        if kind in SLOT_KINDS:
            n = self._expire_slots(kg, nkey, obj, due)
        elif kind == "linked_list":
            n = self._expire_nodes(obj, due)
        elif kind == "stream":
            n = self._expire_entries(obj, due)
        else:
            return 0
        self.expired_entries += n
        return n

    def _expire_slots(self, kg: int, nkey: bytes, obj, due: list) -> int:
        """Queue, list, stack: the expired slots that start the queue go by ``popleft`` (the
        other elements keep their slots: O(expired)); from the first other expired slot m
        on, the elements are popped and the survivors appended again, and the spans from m
        on are rewritten to follow them (they keep their expiry): O(len - m)."""
        slots = obj.positions()
        h, t = slots.start, slots.stop
        gone = sorted({s for lo, hi in due for s in range(max(lo, h), min(hi, t - 1) + 1)})
        if not gone:
            return 0
        n = len(gone)
        i = 0
        if obj.kind == "queue":
            while i < n and gone[i] == h + i:
                obj.popleft()
                i += 1
        if i == n:
            return n
        m, gone_set = gone[i], set(gone[i:])
        spans = list(self._spans(kg, nkey, m, 8))           # (lo, hi, expiry), hi >= m
        his = [hi for _, hi, _ in spans]
        values = [obj.pop() for _ in range(t - m)]
        values.reverse()                                    # slots m .. t-1
        survivors = []
        for s, v in zip(range(m, t), values):
            if s in gone_set:
                continue
            j = bisect_left(his, s)
            survivors.append((v, spans[j][2] if j < len(spans) and spans[j][0] <= s else None))
        for lo, hi, e in spans:
            self._delete_span(kg, nkey, hi, e, 8)
            if lo < m:
                self._write_span(kg, nkey, lo, m - 1, e, 8)
        put = obj.push if obj.kind == "stack" else obj.append
        run = None                                          # [lo, hi, expiry] being built
        for s, (v, e) in enumerate(survivors, obj.positions().stop):
            put(v)
            if run is not None and run[2] == e and run[1] == s - 1:
                run[1] = s
                continue
            if run is not None and run[2] is not None:
                self._write_span(kg, nkey, *run, 8)
            run = [s, s, e]
        if run is not None and run[2] is not None:
            self._write_span(kg, nkey, *run, 8)
        return n

    @staticmethod
    def _expire_nodes(obj, due: list) -> int:
        """Linked list: node ids are permanent, so the nodes of the due spans that are still
        there are removed, O(1) each; no other node moves."""
        n = 0
        for lo, hi in due:
            for nid in range(lo, hi + 1):
                node = obj.node_at(nid)
                if node is not None:
                    obj.remove(node)
                    n += 1
        return n

    @staticmethod
    def _expire_entries(obj, due: list) -> int:
        """Stream: the entries with ids in the due spans, by a range read and ``delete``."""
        n = 0
        for lo, hi in due:
            ids = [i for i, _ in obj.range(stream_id(lo), stream_id(hi))]
            if ids:
                n += obj.delete(*ids)
        return n
