"""Diff of two states of a space by a merge of their raw records, and stats."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional

from .. import _layout as L
from .._keycodec import _dec, decode_key
from .records import EVERY, ObjectInfo, Progress, _codec_name, _Decoder, _all_slots, _decoder, _length, \
    list_objects, to_jsonable

if TYPE_CHECKING:
    from ..space import ObjectSpace


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


class _NoDB:
    """The db of a side that does not exist (an operator that had no state yet)."""

    @staticmethod
    def get(key):
        return None

    @staticmethod
    def scan(start=None, end=None):
        return iter(())

    scan_prefix = scan


class _NoSpace:
    db, prefix = _NoDB(), b""


def diff(old: Any, new: Any, *, progress: Progress | None = None) -> Iterator:
    """What changed from space ``old`` to space ``new`` (typically one space's prefix in a
    db opened read-only at two checkpoints; None stands for an empty side): for each
    object that differs, in name order, an ObjectChange followed by its SlotChanges.

    A merge of the two sides' records (O(records of both), O(changed objects) memory);
    added, removed and replaced objects are listed whole. ``progress`` gets the number of
    records read."""
    old = _NoSpace if old is None else old
    new = _NoSpace if new is None else new
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
        if progress is not None and counter[0] - last >= EVERY:
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


def space_stats(space: ObjectSpace, *, top: int = 10, progress: Progress | None = None) -> SpaceStats:
    """Objects, slots, records and bytes of a space, per kind, and its ``top`` largest
    objects. Reads every record once (O(records))."""
    st = SpaceStats(top=top)
    for info in list_objects(space, progress=progress):
        st.add(info)
    return st


