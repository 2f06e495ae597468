"""State TTL records and their read side (RFC 0009): the layout of the TTL records, shared
with the write side (``_ttl.TtlService``), and ``scan_expiries`` and ``Expiries``, which read
them for inspection (the family rule's ``expiries`` in ``_layout``, the state data source) and
tests.

Records live in the shard's dkv instance under their own schema byte, in the key group of the
state they time, so they move with it on a rescale and are checkpointed with it::

    index:  key group (2) | SCHEMA_TTL (1) | 0x00 | expiry ms + 2**63 (8, big-endian) | msgpack([nkey, ek])  -> b""
    stamp:  key group (2) | SCHEMA_TTL (1) | 0x01 | nkey | ek                                             -> expiry (8)

``nkey`` is the object's encoded name in its key group's object space (key parts + name),
``ek`` the encoded key of a dict entry or set element, empty for the object itself, or
``0xFF | hi`` for a *span* of a sequence's elements (its stamp's value is then ``expiry (8)
| lo``): positions ``lo..hi`` (slots of a queue, list or stack, node ids of a linked list,
entry ids of a stream as 128-bit ints) written by one save, so one span per object and save
whatever the number of elements appended. Spans of an object never overlap. The index is
ordered by expiry. A stamp says the current expiry of an object or entry: an index record
whose stamp says otherwise is stale (the expiry pass only deletes it).
"""
from __future__ import annotations

from bisect import bisect_left

import msgpack

import dkv
from objectspace import decode_key, encode_name, item_position, stream_id

SCHEMA_TTL = 0x02
"""The schema byte of TTL records (after objectspace.SCHEMA_STATE 0x00 and timers' 0x01)."""
_INDEX, _STAMP = 0, 1
_OFFSET = 1 << 63
SPAN = b"\xff"          # first byte of a span's ek: never the first byte of an encoded key


def _pre(kg: int, sub: int) -> bytes:
    return dkv.key_prefix(kg, SCHEMA_TTL) + bytes((sub,))


def index_key(kg: int, expiry: int, nkey: bytes, ek: bytes) -> bytes:
    return _pre(kg, _INDEX) + (expiry + _OFFSET).to_bytes(8, "big") + msgpack.packb([nkey, ek])


def stamp_key(kg: int, nkey: bytes, ek: bytes = b"") -> bytes:
    return _pre(kg, _STAMP) + nkey + ek


def _pack(expiry: int) -> bytes:
    return (expiry + _OFFSET).to_bytes(8, "big")


def _unpack(raw: bytes) -> int:
    return int.from_bytes(raw[:8], "big") - _OFFSET


def _show_pos(pos: int, width: int):
    return stream_id(pos) if width == 16 else pos


def parse_index_key(raw: bytes) -> tuple[int, int, bytes, bytes]:
    """(key group, expiry, nkey, ek) of an index record."""
    kg = dkv.key_group_of(raw)
    expiry = int.from_bytes(raw[4:12], "big") - _OFFSET
    nkey, ek = msgpack.unpackb(raw[12:])
    return kg, expiry, nkey, ek


def scan_expiries(db, kg: int):
    """(expiry, name, entry) of the TTL index of key group ``kg``, in expiry order (for
    inspection and tests): entry None for the object, the key of a dict entry or set
    element, ``("span", lo, hi)`` for a span of a sequence's positions (slots, node ids,
    or stream ids as "ms-seq"; lo None when the record is stale)."""
    p = _pre(kg, _INDEX)
    for raw, _ in db.scan(p, dkv.prefix_end(p)):
        _, expiry, nkey, ek = parse_index_key(raw)
        if ek[:1] == SPAN:
            w = len(ek) - 1
            cur = db.get(stamp_key(kg, nkey, ek))
            lo = _show_pos(int.from_bytes(cur[8:], "big"), w) if cur and _unpack(cur) == expiry else None
            entry = ("span", lo, _show_pos(int.from_bytes(ek[1:], "big"), w))
        else:
            entry = decode_key(ek) if ek else None
        yield expiry, decode_key(nkey), entry


class Expiries:
    """Read side for inspection: the expiry (ms) of the objects and elements of key group
    ``kg`` of a shard's db, null (None) when not timed. One seek tells whether the key group
    has TTL records at all; per object one range scan of its stamps (memoised for the
    object last asked about), so reading the objects in name order costs O(stamps)."""

    def __init__(self, db, kg: int) -> None:
        self.db, self.kg = db, kg
        p = _pre(kg, _STAMP)
        self.any = next(iter(db.scan(p, dkv.prefix_end(p))), None) is not None
        self._name = self._nkey = None
        self._obj = None
        self._entries: dict = {}
        self._spans: list = []      # (hi, lo, expiry) sorted by hi

    def _load(self, name) -> None:
        if name == self._name and type(name) is type(self._name):
            return
        nkey = encode_name(name)
        self._name = name
        if nkey == self._nkey:
            return
        self._nkey, self._obj, self._entries, self._spans = nkey, None, {}, []
        p = stamp_key(self.kg, nkey)
        for sk, raw in self.db.scan(p, dkv.prefix_end(p)):
            ek = sk[len(p):]
            e = _unpack(raw)
            if not ek:
                self._obj = e
            elif ek[:1] == SPAN:
                self._spans.append((int.from_bytes(ek[1:], "big"), int.from_bytes(raw[8:], "big"), e))
            else:
                self._entries[ek] = e

    def object(self, name) -> int | None:
        """When object ``name`` expires as a whole (None: no ttl)."""
        if not self.any:
            return None
        self._load(name)
        return self._obj

    def item(self, name, item_key: bytes | None, kind: str) -> int | None:
        """When the element stored at ``item_key`` (the item record's key after the object's
        items prefix: a slot, node id, stream id or encoded entry key; None for records that
        are not elements) of object ``name`` of ``kind`` goes: its entry's or span's expiry,
        else the object's."""
        if not self.any:
            return None
        self._load(name)
        if item_key is not None:
            e = self._entries.get(item_key)
            if e is not None:
                return e
            pos = item_position(kind, item_key) if self._spans else None
            if pos is not None:
                i = bisect_left(self._spans, (pos,))
                if i < len(self._spans) and self._spans[i][1] <= pos:
                    return self._spans[i][2]
        return self._obj
