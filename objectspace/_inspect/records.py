"""Records of one space: values as JSON, listing objects with sizes, reading slots.

Everything reads the records a space's db holds (what saves committed) and decodes them
with the layout and codec modules, so values of types not registered in this process come
back as ``msgpack.ExtType`` instead of failing.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import logging
import math
import uuid
from dataclasses import dataclass
from functools import cached_property
from itertools import islice
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import msgpack

from .. import _codec
from .. import _layout as L
from .. import _ndlayout as N
from .._keycodec import _dec, decode_key, encode_name, encode_name_scope
from ..errors import CorruptionError, ObjectNotFoundError

if TYPE_CHECKING:
    from .._types import Name
    from ..space import ObjectSpace

log = logging.getLogger(__name__)

Progress = Callable[[int, Optional[int], str], None]
"""``progress(done, total or None when unknown, what)``."""

_POSITIONAL = ("array", "list", "stack", "queue")
EVERY = 1000     # progress is reported every this many objects or records


# -- values as JSON ------------------------------------------------------------------------

def to_jsonable(v: Any) -> Any:
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
    if kind == "ndarray":
        return meta[0][0]
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
    if kind in L.KINDS_WITHOUT_META:
        return None
    return L.unpack_meta(db.get(ns + L.META), name, kind)


def list_objects(space: ObjectSpace, *, scope: Name | None = None, sizes: bool = True,
                 progress: Progress | None = None) -> Iterator[ObjectInfo]:
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
            meta = L.unpack_meta(meta_raw, name, kind) if kind not in L.KINDS_WITHOUT_META else None
        else:
            meta = _meta(db, ns, kind, name)
        n += 1
        if progress is not None and n % EVERY == 0:
            progress(n, None, repr(name))
        yield ObjectInfo(name, kind, _codec_name(code), _length(kind, meta), records, nbytes)


def object_info(space: ObjectSpace, name: Name) -> ObjectInfo:
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
        if kind == "ndarray":
            self.nd = N.unpack(meta, name)          # shape, native dtype, little-endian dtype, chunks, fill
            self.grid = N.grid(self.nd[0], self.nd[3])

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

    def chunk(self, s: int, raw: bytes):
        """ndarray: (chunk coordinates, the chunk's cells as nested lists)."""
        shape, native, le, chunks, fill = self.nd
        coords = N.coords_of(s, self.grid)
        cells = N.decode_chunk(self.value(raw, coords), N.extent(coords, shape, chunks), native, le, fill,
                               self.name, s)
        return coords, cells.tolist()

    def record(self, rest: bytes, raw: bytes):
        """(slot, value) of the record at ``ns + rest``; None for metadata and links."""
        t = rest[:1]
        if t == L.ITEMS:
            ek, kind = rest[1:], self.kind
            if kind == "value":
                return None, self.value(raw, None)
            if kind == "ndarray":
                return self.chunk(int.from_bytes(ek, "big"), raw)
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


def _item_key(rest: bytes):
    """The key of an item record after the object's items prefix (None for other records)."""
    return rest[1:] if rest[:1] == L.ITEMS else None


def _all_slots(dec: _Decoder, keys: bool = False) -> Iterator[tuple]:
    if dec.kind == "linked_list":
        items = dec.ns + L.ITEMS
        for i, nid in enumerate(dec.order):
            raw = dec.db.get(L.slot_key(items, nid))
            if raw is None:
                raise CorruptionError(f"linked list {dec.name!r} has no value for node {nid}")
            yield (i, dec.value(raw, i), nid.to_bytes(8, "big")) if keys else (i, dec.value(raw, i))
        return
    n = len(dec.ns)
    for k, v in dec.db.scan(dec.ns + L.ITEMS, L.prefix_end(dec.ns)):
        sv = dec.record(k[n:], v)
        if sv is not None:
            yield (*sv, _item_key(k[n:])) if keys else sv


def iter_slots(space: ObjectSpace, name: Name, *, offset: int = 0, limit: int | None = None,
               keys: bool = False) -> Iterator[tuple]:
    """(slot, value) of every slot of object ``name``, in order: the index for sequences
    (queues from the front, stacks from the bottom, linked lists in list order), the user
    key for sets and dicts (value None for sets), the id for stream entries (then consumer
    groups and pending entries), ``None`` for a value. ``offset``/``limit`` page the
    result; sequences seek to ``offset`` (O(limit)), other kinds skip (O(offset + limit)).
    ``keys=True`` adds a third item: the stored key of the item record after the object's
    items prefix (slot, node id, stream id or encoded key; None for group records), what
    ``FamilyRule.expiries`` readers take. Raises ObjectNotFoundError."""
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
        n = len(dec.ns)
        scan = space.db.scan(L.slot_key(items, head + offset), L.slot_key(items, hi))
        if keys:
            return ((*dec.record(k[n:], v), k[n + 1:]) for k, v in scan)
        return (dec.record(k[n:], v) for k, v in scan)
    return islice(_all_slots(dec, keys), offset, stop)


def walk_slots(space: ObjectSpace, *, progress: Progress | None = None, keys: bool = False) -> Iterator[tuple]:
    """(ObjectInfo, slot, value) for every slot of every object of ``space``, objects in
    name order and slots as ``iter_slots`` gives them (``keys=True``: a fourth item, the
    item key, as ``iter_slots``'). One pass over the records (two merged range scans;
    linked lists add a point read per node). ObjectInfo has no sizes."""
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
        if kind not in L.KINDS_WITHOUT_META:
            if ahead is None or ahead[0] != ns + L.META:
                raise CorruptionError(f"{kind} {name!r} has an index entry but no metadata record")
            meta = L.unpack_meta(ahead[1], name, kind)
        info = ObjectInfo(name, kind, _codec_name(code), _length(kind, meta))
        dec = _Decoder(db, ns, name, kind, code, meta)
        if kind == "linked_list":
            for sv in _all_slots(dec, keys):
                yield (info, *sv)
        while ahead is not None and ahead[0].startswith(ns):
            if kind != "linked_list":
                rest = ahead[0][len(ns):]
                sv = dec.record(rest, ahead[1])
                if sv is not None:
                    yield (info, sv[0], sv[1], _item_key(rest)) if keys else (info, sv[0], sv[1])
            ahead = next(records, None)
        if progress is not None and n % EVERY == 0:
            progress(n, None, repr(name))


def ndarray_summary(space, name, *, max_cells: int = 1000) -> dict:
    """An ndarray's shape, dtype, chunk shape, fill value and stored chunks, and its cells
    as nested lists when it has at most ``max_cells`` (else None), read from the records:
    O(stored chunks). Raises ObjectNotFoundError, or ValueError for another kind."""
    import numpy as np
    dec = _decoder(space.db, space.prefix, name)
    if dec.kind != "ndarray":
        raise ValueError(f"{name!r} is a {dec.kind}, not an ndarray")
    shape, native, le, chunks, fill = dec.nd
    fill_value = np.frombuffer(fill, dtype=le)[0].item()
    out = {"shape": list(shape), "dtype": str(native), "chunks": list(chunks), "fill_value": fill_value,
           "chunk_grid": list(dec.grid), "stored_chunks": 0, "values": None}
    if math.prod(shape) > max_cells:        # count the chunks without decoding them
        out["stored_chunks"] = sum(1 for _ in space.db.scan(dec.ns + L.ITEMS, L.prefix_end(dec.ns + L.ITEMS)))
        return out
    cells = np.full(shape, fill_value, dtype=native)
    for coords, chunk in _all_slots(dec):
        out["stored_chunks"] += 1
        cells[tuple(slice(c * n, c * n + e) for c, n, e in zip(coords, chunks, N.extent(coords, shape, chunks)))] \
            = chunk
    out["values"] = cells.tolist()
    return out
