"""Inspection: list, read, diff and measure object spaces from their committed dkv records.

Everything here reads the records a space's db holds (what saves committed; unsaved
changes of an open space are not seen) and decodes them with the layout and codec
modules, so it works on any state, including values of types not registered in this
process (they come back as ``msgpack.ExtType``). Nothing prints: long operations report
through ``progress(done, total or None, what)``.

>>> import dkv
>>> from objectspace import ObjectSpace, list_objects, iter_slots
>>> space = ObjectSpace.open("memory://inspect-doc")
>>> q = space.create_queue("q", [1, 2]); _ = space.checkpoint(1)
>>> [(o.name, o.kind, o.length) for o in list_objects(space)]
[('q', 'queue', 2)]
>>> list(iter_slots(space, "q"))
[(0, 1), (1, 2)]

Finding spaces: a location holds dkv instances. An instance named
``<owner>/L<first batch>-n<shards>/p<shard>`` is a shard of a spark_ops operator's state
(``<owner>`` is ``<query id>/<operator>``); its object spaces sit at the key-group prefixes
``key_prefix(kg, SCHEMA_STATE)``. ``find_instances`` picks, per operator, the shards that
hold a given epoch (across rescales); other instances stand alone.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
import math
import re
import uuid
from dataclasses import dataclass, field
from functools import cached_property
from itertools import islice
from typing import Callable, Iterator, Optional

import msgpack

import dkv
from dkv.keys import SCHEMA_STATE, key_prefix

from . import _codec
from . import _layout as L
from ._keycodec import _dec, decode_key, encode_name, encode_name_scope
from .errors import CorruptionError, ObjectNotFoundError, ObjectSpaceError

log = logging.getLogger(__name__)

Progress = Callable[[int, Optional[int], str], None]
"""``progress(done, total or None when unknown, what)``."""

_POSITIONAL = ("array", "list", "stack", "queue")
_EVERY = 1000     # progress is reported every this many objects or records


# -- values as JSON ------------------------------------------------------------------------

def to_jsonable(v):
    """A JSON-compatible form of a stored value, slot or name, for reading (not a round
    trip): tuples and sets become arrays, datetimes ISO strings, Decimals and UUIDs
    strings, timedeltas seconds; bytes become ``{"$bytes": hex}``, maps with non-str keys
    ``{"$map": [[k, v], ...]}``, NaN/inf ``{"$float": "nan"}``, values of unregistered
    types ``{"$ext": code, "hex": ...}`` and other objects ``{"$repr": repr}``. O(size)."""
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v if math.isfinite(v) else {"$float": repr(v)}
    if t is msgpack.ExtType:
        return {"$ext": v.code, "hex": v.data.hex()}
    if t in (bytes, bytearray, memoryview):
        return {"$bytes": bytes(v).hex()}
    if t in (list, tuple):
        return [to_jsonable(x) for x in v]
    if t in (set, frozenset):
        return sorted((to_jsonable(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
    if t is dict:
        if all(type(k) is str for k in v):
            return {k: to_jsonable(x) for k, x in v.items()}
        return {"$map": [[to_jsonable(k), to_jsonable(x)] for k, x in v.items()]}
    if isinstance(v, (_dt.datetime, _dt.date, _dt.time)):
        return v.isoformat()
    if t is _dt.timedelta:
        return v.total_seconds()
    if t in (decimal.Decimal, uuid.UUID):
        return str(v)
    return {"$repr": repr(v)}


def name_from_json(text: str):
    """An object name from the command line: a plain string, or a JSON array (a tuple name;
    ``{"$bytes": hex}`` for bytes parts). Raises ValueError for a malformed array."""
    if not text.startswith("["):
        return text
    try:
        parts = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"name {text!r} starts with '[' but is not a JSON array: {e}") from None
    out = []
    for p in parts:
        if isinstance(p, dict) and set(p) == {"$bytes"}:
            p = bytes.fromhex(p["$bytes"])
        if type(p) not in (str, int, bytes):
            raise ValueError(f"name parts are strings, ints or {{\"$bytes\": hex}}, got {p!r}")
        out.append(p)
    return tuple(out)


def _ext_hook(code: int, data: bytes):
    if code in (_codec.EXT_TUPLE, _codec.EXT_SET, _codec.EXT_FROZENSET):
        items = _unpack(data)
        return {_codec.EXT_TUPLE: tuple, _codec.EXT_SET: set, _codec.EXT_FROZENSET: frozenset}[code](items)
    try:
        return _codec._ext_hook(code, data)
    except Exception:  # noqa: BLE001 - a type not registered here is shown, not fatal
        return msgpack.ExtType(code, data)


def _unpack(raw: bytes):
    return msgpack.unpackb(raw, ext_hook=_ext_hook, strict_map_key=False, raw=False)


def _value_decoder(codec_code: int, name):
    if codec_code == _codec.RAW.code:
        return bytes
    if codec_code != _codec.MSGPACK.code:
        raise CorruptionError(f"object {name!r} uses unknown codec code {codec_code}")
    return _unpack


# -- objects ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ObjectInfo:
    """One object of a space: its kind, codec, length, and (when measured) its dkv records
    and their bytes (keys + values before compression, index entry included)."""
    name: object
    kind: str
    codec: str
    length: int
    records: Optional[int] = None
    bytes: Optional[int] = None

    def as_json(self) -> dict:
        return {"name": to_jsonable(self.name), "kind": self.kind, "codec": self.codec,
                "length": self.length, "records": self.records, "bytes": self.bytes}


def _length(kind: str, meta) -> int:
    if kind == "value":
        return 1
    if kind == "queue":
        return meta[1] - meta[0]
    if kind in ("linked_list", "stream"):
        return meta[2]
    return meta[0]


def _codec_name(code: int) -> str:
    c = _codec.CODECS_BY_CODE.get(code)
    return c.name if c is not None else f"unknown-{code}"


def _index_entry(db, space_prefix: bytes, nkey: bytes, name):
    raw = db.get(space_prefix + L.INDEX + nkey)
    if raw is None:
        raise ObjectNotFoundError(f"no object named {name!r} in the space")
    return L.decode_index(raw, name)


def _meta(db, ns: bytes, kind: str, name):
    if kind == "value":
        return None
    return L.unpack_meta(db.get(ns + L.META), name, kind)


def list_objects(space, *, scope=None, sizes: bool = True, progress: Progress | None = None) -> Iterator[ObjectInfo]:
    """The objects of ``space`` in name order, as ObjectInfo. ``scope`` lists only names in
    a scope, as ``space.names(prefix=...)``. With ``sizes`` (default) every record is read
    once (two merged range scans, O(records), O(1) memory) to count records and bytes;
    without, O(objects): one index scan and a metadata point read per object."""
    db, p = space.db, space.prefix
    ip, op = p + L.INDEX, p + L.OBJECTS
    sc = encode_name_scope(scope) if scope is not None else b""
    ns_records = db.scan_prefix(op + sc) if sizes else None
    ahead = next(ns_records, None) if sizes else None
    n = 0
    for ikey, iraw in db.scan_prefix(ip + sc):
        nkey = ikey[len(ip):]
        name = decode_key(nkey)
        kind, code = L.decode_index(iraw, name)
        ns = op + nkey
        records = nbytes = None
        if sizes:
            meta_raw, records, nbytes = None, 1, len(ikey) + len(iraw)
            while ahead is not None and ahead[0] < ns:      # records without an index entry
                log.warning("record %r belongs to no object", ahead[0][:60])
                ahead = next(ns_records, None)
            while ahead is not None and ahead[0].startswith(ns):
                k, v = ahead
                if k == ns + L.META:
                    meta_raw = v
                records += 1
                nbytes += len(k) + len(v)
                ahead = next(ns_records, None)
            meta = L.unpack_meta(meta_raw, name, kind) if kind != "value" else None
        else:
            meta = _meta(db, ns, kind, name)
        n += 1
        if progress is not None and n % _EVERY == 0:
            progress(n, None, repr(name))
        yield ObjectInfo(name, kind, _codec_name(code), _length(kind, meta), records, nbytes)


def object_info(space, name) -> ObjectInfo:
    """ObjectInfo of one object without sizes: two point reads. Raises ObjectNotFoundError."""
    nkey = encode_name(name)
    kind, code = _index_entry(space.db, space.prefix, nkey, name)
    meta = _meta(space.db, space.prefix + L.OBJECTS + nkey, kind, name)
    return ObjectInfo(name, kind, _codec_name(code), _length(kind, meta))


class _Decoder:
    """Turns one object's records into (slot, value): index for sequences (from the front;
    stacks from the bottom), the user key for sets and dicts (value None for sets), the
    entry id for streams, ``("group", g)`` and ``("pending", g, id)`` for consumer groups."""

    def __init__(self, db, ns: bytes, name, kind: str, codec_code: int, meta) -> None:
        self.db, self.ns, self.name, self.kind, self.meta = db, ns, name, kind, meta
        self.codec = codec_code
        self.decode = _value_decoder(codec_code, name)
        self.head = meta[0] if kind == "queue" else 0

    @cached_property
    def order(self) -> list:
        """Linked list: node ids in list order (one range scan of the links)."""
        links = {L.slot_of(k): int.from_bytes(v, "big") for k, v in self.db.scan_prefix(self.ns + L.LINKS)}
        out, nid = [], self.meta[0]
        while nid:
            if nid not in links or len(out) > self.meta[2]:
                raise CorruptionError(f"linked list {self.name!r} is broken at node {nid}")
            out.append(nid)
            nid = links[nid]
        return out

    @cached_property
    def position(self) -> dict:
        return {nid: i for i, nid in enumerate(self.order)}

    def value(self, raw: bytes, slot):
        try:
            return self.decode(raw)
        except Exception as e:  # noqa: BLE001 - undecodable bytes are corruption
            raise CorruptionError(f"{self.kind} {self.name!r} slot {slot!r}: unreadable value {raw[:40]!r}") from e

    def record(self, rest: bytes, raw: bytes):
        """(slot, value) of the record at ``ns + rest``; None for metadata and links."""
        t = rest[:1]
        if t == L.ITEMS:
            ek, kind = rest[1:], self.kind
            if kind == "value":
                return None, self.value(raw, None)
            if kind in _POSITIONAL:
                slot = int.from_bytes(ek, "big") - self.head
            elif kind == "linked_list":
                slot = self.position.get(int.from_bytes(ek, "big"))
            elif kind == "stream":
                slot = L.key_id(ek)
            else:
                slot = decode_key(ek)
                if kind in ("set", "sorted_set"):
                    return slot, None
            return slot, self.value(raw, slot)
        if t == L.GROUPS:
            ms, seq, n, consumers = msgpack.unpackb(raw, strict_map_key=False)
            return ("group", decode_key(rest[1:])), {"last_delivered": L.format_id(ms, seq), "pending": n,
                                                      "consumers": consumers}
        if t == L.PEL:
            group, end = _dec(rest, 1)
            consumer, ms, count = msgpack.unpackb(raw)
            return ("pending", group, L.key_id(rest[end:])), {"consumer": consumer, "delivered_ms": ms,
                                                              "deliveries": count}
        return None


def _decoder(db, space_prefix: bytes, name, nkey: bytes | None = None, index=None) -> _Decoder:
    nkey = encode_name(name) if nkey is None else nkey
    kind, code = index or _index_entry(db, space_prefix, nkey, name)
    ns = space_prefix + L.OBJECTS + nkey
    return _Decoder(db, ns, name, kind, code, _meta(db, ns, kind, name))


def _all_slots(dec: _Decoder) -> Iterator[tuple]:
    if dec.kind == "linked_list":
        items = dec.ns + L.ITEMS
        for i, nid in enumerate(dec.order):
            raw = dec.db.get(L.slot_key(items, nid))
            if raw is None:
                raise CorruptionError(f"linked list {dec.name!r} has no value for node {nid}")
            yield i, dec.value(raw, i)
        return
    n = len(dec.ns)
    for k, v in dec.db.scan(dec.ns + L.ITEMS, L.prefix_end(dec.ns)):
        sv = dec.record(k[n:], v)
        if sv is not None:
            yield sv


def iter_slots(space, name, *, offset: int = 0, limit: int | None = None) -> Iterator[tuple]:
    """(slot, value) of every slot of object ``name``, in order: the index for sequences
    (queues from the front, stacks from the bottom, linked lists in list order), the user
    key for sets and dicts (value None for sets), the id for stream entries (then consumer
    groups and pending entries), ``None`` for a value. ``offset``/``limit`` page the
    result; sequences seek to ``offset`` (O(limit)), other kinds skip (O(offset + limit)).
    Raises ObjectNotFoundError."""
    if offset < 0 or (limit is not None and limit < 0):
        raise ValueError("offset and limit must be >= 0")
    dec = _decoder(space.db, space.prefix, name)
    stop = None if limit is None else offset + limit
    if dec.kind in _POSITIONAL:
        items, head = dec.ns + L.ITEMS, dec.head
        end = head + _length(dec.kind, dec.meta)
        hi = end if stop is None else min(end, head + stop)
        if head + offset >= hi:
            return iter(())
        return (dec.record(k[len(dec.ns):], v) for k, v in
                space.db.scan(L.slot_key(items, head + offset), L.slot_key(items, hi)))
    return islice(_all_slots(dec), offset, stop)


def walk_slots(space, *, progress: Progress | None = None) -> Iterator[tuple]:
    """(ObjectInfo, slot, value) for every slot of every object of ``space``, objects in
    name order and slots as ``iter_slots`` gives them. One pass over the records (two
    merged range scans; linked lists add a point read per node). ObjectInfo has no sizes."""
    db, p = space.db, space.prefix
    ip, op = p + L.INDEX, p + L.OBJECTS
    records = db.scan_prefix(op)
    ahead = next(records, None)
    for n, (ikey, iraw) in enumerate(db.scan_prefix(ip), 1):
        nkey = ikey[len(ip):]
        name = decode_key(nkey)
        kind, code = L.decode_index(iraw, name)
        ns = op + nkey
        while ahead is not None and ahead[0] < ns:
            ahead = next(records, None)
        meta = None
        if kind != "value":
            if ahead is None or ahead[0] != ns + L.META:
                raise CorruptionError(f"{kind} {name!r} has an index entry but no metadata record")
            meta = L.unpack_meta(ahead[1], name, kind)
        info = ObjectInfo(name, kind, _codec_name(code), _length(kind, meta))
        dec = _Decoder(db, ns, name, kind, code, meta)
        if kind == "linked_list":
            for slot, v in _all_slots(dec):
                yield info, slot, v
        while ahead is not None and ahead[0].startswith(ns):
            if kind != "linked_list":
                sv = dec.record(ahead[0][len(ns):], ahead[1])
                if sv is not None:
                    yield info, sv[0], sv[1]
            ahead = next(records, None)
        if progress is not None and n % _EVERY == 0:
            progress(n, None, repr(name))


# -- diff ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ObjectChange:
    """An object added, changed or removed between two states (a kind or codec change is a
    removal and an addition). Its SlotChanges follow it in ``diff``'s output."""
    name: object
    change: str
    kind: str
    codec: str
    old_length: Optional[int]
    new_length: Optional[int]

    def as_json(self) -> dict:
        return {"name": to_jsonable(self.name), "change": self.change, "kind": self.kind, "codec": self.codec,
                "old_length": self.old_length, "new_length": self.new_length}


@dataclass(frozen=True)
class SlotChange:
    """A slot added, changed or removed. Slots are as ``iter_slots`` gives them; queue and
    linked-list positions are those of the older state for removals and of the newer one
    otherwise. ``old``/``new`` are None on the side where the slot is absent."""
    name: object
    kind: str
    change: str
    slot: object
    old: object
    new: object

    def as_json(self) -> dict:
        return {"slot": to_jsonable(self.slot), "change": self.change,
                "old": to_jsonable(self.old), "new": to_jsonable(self.new)}


def _changed(a, b) -> Iterator[tuple]:
    """(key, old, new) for the keys whose values differ between two ascending iterators."""
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            yield x[0], x[1], None
            x = next(a, None)
        elif x is None or y[0] < x[0]:
            yield y[0], None, y[1]
            y = next(b, None)
        else:
            if x[1] != y[1]:
                yield x[0], x[1], y[1]
            x, y = next(a, None), next(b, None)


def _relative(db, prefix: bytes, counter: list | None = None) -> Iterator[tuple]:
    n = len(prefix)
    for k, v in db.scan_prefix(prefix):
        if counter is not None:
            counter[0] += 1
        yield k[n:], v


class _ObjectDiff:
    """Both sides of one object whose records differ."""

    def __init__(self, old, new, nkey: bytes, index: tuple | None) -> None:
        self.name = decode_key(nkey)
        o_raw, n_raw = index if index is not None else (None, None)
        if index is None:     # the index entry is the same on both sides
            o_raw = n_raw = new.db.get(new.prefix + L.INDEX + nkey)
        self.old = self._side(old, nkey, o_raw)
        self.new = self._side(new, nkey, n_raw)

    def _side(self, space, nkey, raw):
        if raw is None:
            return None
        return _decoder(space.db, space.prefix, self.name, nkey, L.decode_index(raw, self.name))

    def _header(self, change: str, dec: _Decoder, old_len, new_len) -> ObjectChange:
        return ObjectChange(self.name, change, dec.kind, _codec_name(dec.codec), old_len, new_len)

    def changes(self, records: Iterator[tuple]) -> Iterator:
        o, n = self.old, self.new
        if o is None and n is None:
            for _ in records:       # records of no object on either side: nothing to report
                pass
            return
        if o is not None and n is not None and (o.kind, o.codec) == (n.kind, n.codec):
            yield self._header("changed", n, _length(o.kind, o.meta), _length(n.kind, n.meta))
            for rest, ov, nv in records:
                sv = (n if nv is not None else o).record(rest, nv if nv is not None else ov)
                if sv is None:
                    continue
                if ov is None:
                    yield SlotChange(self.name, n.kind, "added", sv[0], None, sv[1])
                elif nv is None:
                    yield SlotChange(self.name, o.kind, "removed", sv[0], sv[1], None)
                else:
                    yield SlotChange(self.name, n.kind, "changed", sv[0], o.record(rest, ov)[1], sv[1])
            return
        for _ in records:           # an object added, removed or replaced: list whole sides
            pass
        if o is not None:
            yield self._header("removed", o, _length(o.kind, o.meta), None)
            for slot, v in _all_slots(o):
                yield SlotChange(self.name, o.kind, "removed", slot, v, None)
        if n is not None:
            yield self._header("added", n, None, _length(n.kind, n.meta))
            for slot, v in _all_slots(n):
                yield SlotChange(self.name, n.kind, "added", slot, None, v)


def diff(old, new, *, progress: Progress | None = None) -> Iterator:
    """What changed from space ``old`` to space ``new`` (typically one space's prefix in a
    db opened read-only at two checkpoints): for each object that differs, in name order,
    an ObjectChange followed by its SlotChanges.

    A merge of the two sides' records (O(records of both), O(changed objects) memory);
    added, removed and replaced objects are listed whole. ``progress`` gets the number of
    records read."""
    counter = [0]
    idx = {k: (ov, nv) for k, ov, nv in _changed(_relative(old.db, old.prefix + L.INDEX, counter),
                                                   _relative(new.db, new.prefix + L.INDEX, counter))}
    pending = sorted(idx)
    j = 0
    records = _changed(_relative(old.db, old.prefix + L.OBJECTS, counter),
                       _relative(new.db, new.prefix + L.OBJECTS, counter))
    ahead = next(records, None)
    last = 0
    while ahead is not None or j < len(pending):
        nkey = ahead[0][:_dec(ahead[0], 0)[1]] if ahead is not None else None
        if nkey is None or (j < len(pending) and pending[j] < nkey):
            yield from _ObjectDiff(old, new, pending[j], idx[pending[j]]).changes(iter(()))
            j += 1
            continue
        if j < len(pending) and pending[j] == nkey:
            j += 1
        def same_object():
            nonlocal ahead
            while ahead is not None and ahead[0].startswith(nkey):
                k, ov, nv = ahead
                yield k[len(nkey):], ov, nv
                ahead = next(records, None)
        yield from _ObjectDiff(old, new, nkey, idx.get(nkey)).changes(same_object())
        if progress is not None and counter[0] - last >= _EVERY:
            last = counter[0]
            progress(counter[0], None, repr(decode_key(nkey)))


# -- stats ----------------------------------------------------------------------------------

@dataclass
class SpaceStats:
    """Totals over the objects of one or more spaces: objects, slots, records and bytes,
    per kind, and the largest objects by bytes. ``add`` an ObjectInfo, ``merge`` another."""
    objects: int = 0
    slots: int = 0
    records: int = 0
    bytes: int = 0
    kinds: dict = field(default_factory=dict)
    largest: list = field(default_factory=list)
    top: int = 10

    def add(self, info: ObjectInfo, where: dict | None = None) -> None:
        self.objects += 1
        self.slots += info.length
        self.records += info.records or 0
        self.bytes += info.bytes or 0
        k = self.kinds.setdefault(info.kind, {"objects": 0, "slots": 0, "records": 0, "bytes": 0})
        k["objects"] += 1
        k["slots"] += info.length
        k["records"] += info.records or 0
        k["bytes"] += info.bytes or 0
        if self.top:
            self.largest.append((info.bytes or 0, info, where))
            if len(self.largest) > 4 * self.top:
                self._trim()

    def _trim(self) -> None:
        self.largest.sort(key=lambda t: -t[0])
        del self.largest[self.top:]

    def merge(self, other: "SpaceStats") -> None:
        for name in ("objects", "slots", "records", "bytes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for kind, v in other.kinds.items():
            k = self.kinds.setdefault(kind, {"objects": 0, "slots": 0, "records": 0, "bytes": 0})
            for f in k:
                k[f] += v[f]
        self.largest.extend(other.largest)
        self._trim()

    def as_json(self) -> dict:
        self._trim()
        return {"objects": self.objects, "slots": self.slots, "records": self.records, "bytes": self.bytes,
                "kinds": {k: dict(v) for k, v in sorted(self.kinds.items())},
                "largest": [{**(where or {}), **info.as_json()} for _, info, where in self.largest]}


def space_stats(space, *, top: int = 10, progress: Progress | None = None) -> SpaceStats:
    """Objects, slots, records and bytes of a space, per kind, and its ``top`` largest
    objects. Reads every record once (O(records))."""
    st = SpaceStats(top=top)
    for info in list_objects(space, progress=progress):
        st.add(info)
    return st


# -- finding spaces in a location ----------------------------------------------------------------

_LAYOUT_INSTANCE = re.compile(r"^(?:(?P<owner>.+)/)?L(?P<first>\d{12})-n(?P<shards>\d{5})/p(?P<shard>\d{5})$")


@dataclass(frozen=True)
class InstanceRef:
    """A dkv instance of a location at one checkpoint epoch. ``owner`` is set for the shards
    of a spark_ops operator (``<query id>/<operator>``, "" when the location is the
    operator's own folder); ``epochs`` are its retained checkpoints."""
    location: str
    instance: str
    epoch: int
    epochs: tuple = ()
    owner: Optional[str] = None
    first_batch: Optional[int] = None
    shards: Optional[int] = None
    shard: Optional[int] = None

    @property
    def operator(self) -> Optional[str]:
        if self.owner is None:
            return None
        return self.owner.rsplit("/", 1)[-1] if self.owner else self.location.rstrip("/").rsplit("/", 1)[-1]

    @property
    def query_id(self) -> Optional[str]:
        if not self.owner or "/" not in self.owner:
            return None
        return self.owner.rsplit("/", 1)[0]

    def open(self, **dkv_options):
        """This instance read-only at ``epoch`` (a dkv DB; close it)."""
        return dkv.open(self.location, checkpoint=self.epoch, read_only=True, instance=self.instance,
                        **dkv_options)

    def as_json(self) -> dict:
        return {"instance": self.instance, "epoch": self.epoch, "operator": self.operator,
                "query_id": self.query_id}


def _store_options(dkv_options: dict) -> dict:
    keys = ("endpoint_url", "region_name", "aws_access_key_id", "aws_secret_access_key", "aws_session_token",
            "cache_dir", "cache_bytes", "fsync")
    return {k: v for k, v in dkv_options.items() if k in keys}


def find_instances(location, *, epoch: int | None = None, instance: str | None = None,
                   **dkv_options) -> list[InstanceRef]:
    """The instances under ``location`` that hold ``epoch`` (default: each one's newest;
    for an operator, the newest epoch of its shards), sorted by name.

    ``instance`` selects one instance or every instance under a path (e.g.
    ``<query id>/<operator>``). For an operator's shards, the layout (shard count) that
    ran ``epoch`` is chosen: after a rescale, older layouts are skipped. Costs two
    listings per instance. Raises ObjectSpaceError when nothing matches and
    dkv.CheckpointNotFoundError when nothing holds ``epoch``."""
    store = dkv.open_store(location, **_store_options(dkv_options))
    loc = location if isinstance(location, str) else store.location
    names = dkv.instances(store)
    if instance:
        sel = instance.strip("/")
        names = [n for n in names if n == sel or n.startswith(sel + "/")]
    if not names:
        raise ObjectSpaceError(f"no dkv instance under {loc!r}" + (f" matches {instance!r}" if instance else ""))
    families: dict = {}
    for n in names:
        m = _LAYOUT_INSTANCE.match(n)
        families.setdefault(("op", m["owner"] or "") if m else ("db", n), []).append((n, m))
    out, seen = [], {}
    for (what, owner), members in sorted(families.items()):
        epochs = {n: tuple(c.epoch for c in dkv.list_checkpoints(store, n)) for n, _ in members}
        seen.update(epochs)
        if what == "db":
            n = members[0][0]
            e = epoch if epoch is not None else max(epochs[n], default=None)
            if e is not None and e in epochs[n]:
                out.append(InstanceRef(loc, n, e, epochs[n]))
            continue
        e = epoch if epoch is not None else max((x for es in epochs.values() for x in es), default=None)
        holders = [(int(m["first"]), int(m["shards"]), n, m) for n, m in members if e in epochs[n]]
        if not holders:
            continue
        layout = max(h[:2] for h in holders if h[0] <= e) if any(h[0] <= e for h in holders) else max(
            h[:2] for h in holders)
        for first, shards, n, m in holders:
            if (first, shards) == layout:
                out.append(InstanceRef(loc, n, e, epochs[n], owner, first, shards, int(m["shard"])))
    if not out:
        held = sorted({e for es in seen.values() for e in es})
        raise dkv.CheckpointNotFoundError(f"no instance under {loc!r} holds checkpoint {epoch}; "
                                          f"retained epochs: {held or 'none'}")
    return sorted(out, key=lambda r: r.instance)


def key_groups_of(db, first: int = 0, end: int = 1 << 16) -> list[int]:
    """Key groups in ``[first, end)`` that hold state records (object spaces) in ``db``.
    O(key groups present) seeks."""
    out, start = [], first.to_bytes(2, "big")
    stop = end.to_bytes(2, "big") if end < 1 << 16 else None
    while True:
        k = next(iter(db.scan(start, stop)), None)
        if k is None:
            return out
        key = k[0]
        if len(key) < 3:
            start = key + b"\x00"
            continue
        kg = (key[0] << 8) | key[1]
        if key[2] == SCHEMA_STATE:
            out.append(kg)
            start = key_prefix(kg, SCHEMA_STATE + 1)
        elif kg + 1 < 1 << 16:
            start = (kg + 1).to_bytes(2, "big")
        else:
            return out


__all__ = ["to_jsonable", "ObjectInfo", "list_objects", "object_info", "iter_slots", "walk_slots",
           "ObjectChange", "SlotChange", "diff", "SpaceStats", "space_stats", "InstanceRef",
           "find_instances", "key_groups_of"]
