"""In-place changes to stored values: what a save looks for with ``ObjectSpace(inplace=...)``.

A persisted collection caches the values it decoded or was given and hands out those very
objects, so ``d["k"].append(2)`` changes the cached list without marking a slot dirty: a
save writes nothing, the change is lost at the next reopen, and while the space is open
its cache and its store disagree. With ``inplace="save"`` (or ``"raise"``) every save
first compares the clean cached values of the live objects with what the store holds for
their slots; the ones that differ are marked written (or reported, before anything changes).

What is compared: the value's encoding now and the record in the store. The codec is
deterministic for a given value (msgpack of a fixed structure: dicts in insertion order,
which decoding keeps; floats always 64-bit; ext payloads fixed), so equal bytes mean an
unchanged value. Bytes that differ are checked once more by decoding the record and
encoding that again: a set's elements are packed in its iteration order, which depends on
how the set was built, so a record written by another process (or by this one, from a set
built in another order) may decode to a set that packs differently although it holds the
same elements; the record decoded here packs as the cached value does exactly when the
two are the same value.

Cost: only the values that are clean, cached and of a type that could change in place
(not None, bool, numbers, str, bytes, dates, times, Decimal, UUID) are encoded, one
encoding each per save (~0.3 us for a small list). Reading their records at every save
would cost a point read each (~1 us, ~10 us on a cold block cache), so each object keeps
a digest of the encoding it found equal to the store (``obj._isums``: slot ->
``hash(bytes)``); a value that encodes to its digest again needs no read. The digests are
rebuilt at every save from the slots that are clean then: a slot is written only after a
save that saw it dirty or pending (which drops its digest), so a digest always stands for
the bytes still in the store. A value without a digest (read since the last save) is
compared with its record: point reads, or one range scan of the object when most of it is
needed. A collision of the 64-bit digest would hide one change (2**-64 per changed value).

Values leave memory between saves too: an object larger than ``cache_items`` drops clean
values as others load, and the space's cache drops whole objects. A value changed in place
and dropped would take the change with it, so in these spaces every eviction compares
what it drops (``keep_changed``): changed values stay, marked written ("save") or kept for
the save to report ("raise"). Iteration hands out cached values as a read does: an object
of at most ``cache_items`` loads whole, a larger one caches what it streams (with the
digest of each record, so that evicting it reads nothing).

What stays out of reach: a value that was dropped from memory unchanged and is changed
afterwards is a copy the object no longer holds (the caller kept it across reads of many
other items of an object larger than ``cache_items``, or across the space's cache dropping
the object); reverse iteration of a sorted dict or stream larger than ``cache_items``
materialises its range first, so it may hand out values already dropped. Assign such
values back.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import uuid
from operator import itemgetter

from ._codec import MSGPACK
from .errors import EncodingError, InPlaceChangeError

MODES = (None, "save", "raise")

# Values of these types cannot change in place: they are not encoded at a save. Exact
# types, as the codec matches them (a subclass could not be stored).
IMMUTABLE = frozenset({type(None), bool, int, float, complex, str, bytes, _dt.datetime, _dt.date,
                       _dt.time, _dt.timedelta, decimal.Decimal, uuid.UUID})

_first = itemgetter(0)
_SCAN_AT = 32           # needed records from which one range scan of the object may beat point reads
_SHOWN = 5              # changes an InPlaceChangeError lists one by one


def check_mode(inplace):
    """``inplace`` if it is one of MODES, else ValueError naming them."""
    if inplace is None or (isinstance(inplace, str) and inplace in MODES):
        return inplace
    raise ValueError(f"inplace must be None, 'save' or 'raise', got {inplace!r}")


def find_changes(objects, db) -> tuple[list, list]:
    """``(changes, digests)``: the ``(object, slot)`` of every clean cached value of
    ``objects`` whose encoding differs from its stored record, and the ``(object, new
    digests)`` to install once the save goes on. Changes nothing. O(clean cached values
    that could be mutable), plus a read for those without a matching digest. Raises
    EncodingError (naming object and slot) for a value changed into one that cannot be
    stored."""
    changes, digests = [], []
    for obj in objects:
        if obj._dead or obj._codec is not MSGPACK:      # raw: bytes only, immutable
            continue
        pairs = obj._inplace_values(IMMUTABLE)
        if not pairs and obj._isums is None:
            continue
        changed, new = _compare(obj, pairs, db, True)
        changes.extend((obj, slot) for slot in changed)
        digests.append((obj, new or None))
    return changes, digests


def _compare(obj, pairs: list, db, strict: bool) -> tuple[list, dict]:
    """``(slots whose value differs from its record, digests of the others)`` of ``pairs``
    (slot, value) of ``obj``. A value that cannot be encoded raises EncodingError when
    ``strict``, else counts as changed."""
    encode, old = obj._codec.encode, obj._isums or {}
    try:
        hashes = [hash(encode(v)) for _, v in pairs]
    except Exception:  # noqa: BLE001 - find the value, then report it or count it as changed
        return _compare_slowly(obj, pairs, db, strict)
    get = old.get
    if len(pairs) == len(old) and list(map(get, map(_first, pairs))) == hashes:
        return [], old          # the common case: nothing changed since the last save
    new = dict(zip(map(_first, pairs), hashes))
    need = [slot for slot, h in new.items() if get(slot) != h]
    changed = []
    if need:
        for slot in need:
            del new[slot]
        values = dict(pairs)
        stored = _read(obj, db, [obj._inplace_key(slot) for slot in need])
        decode = obj._codec.decode
        for slot, raw in zip(need, stored):
            enc = encode(values[slot])
            if raw is not None and (raw == enc or _same(encode, decode, raw, enc)):
                new[slot] = hash(enc)
            else:
                changed.append(slot)
    return changed, new


def _compare_slowly(obj, pairs: list, db, strict: bool) -> tuple[list, dict]:
    """_compare when some value cannot be encoded: that one is reported (``strict``) or
    counted as changed, the others compared."""
    ok, bad = [], []
    for slot, value in pairs:
        try:
            obj._codec.encode(value)
        except Exception as e:  # noqa: BLE001 - report it with the object and slot
            if strict:
                raise _unencodable(obj, slot, e) from e
            bad.append(slot)
        else:
            ok.append((slot, value))
    changed, new = _compare(obj, ok, db, strict)
    return changed + bad, new


def keep_changed(obj, pairs: list) -> set:
    """Of ``pairs`` (slot, value), clean values ``obj`` is about to drop from memory, the
    slots whose value was changed in place: the caller keeps those. Dropped, the change
    would be lost with the value (the slot reloads from the store), so with "save" they
    are marked written now; with "raise" the object is listed, which keeps it and them in
    memory until a save reports them. O(len(pairs)) encodings, plus a read for each value
    without a digest (see the module docstring). A value changed into one that cannot be
    stored is kept too (the save reports it)."""
    if obj._codec is not MSGPACK:
        return set()
    watched = [(slot, v) for slot, v in pairs if type(v) not in IMMUTABLE]
    if not watched:
        return set()
    space = obj._space
    changed = set(_compare(obj, watched, space._db, False)[0])
    sums = obj._isums
    if sums:                    # the values go: so do their digests (memory stays bounded)
        for slot, _ in pairs:
            if slot not in changed:
                sums.pop(slot, None)
    if not changed:
        return changed
    if space._inplace == "save":
        for slot in changed:
            obj._inplace_mark(slot)
    else:
        obj._touch()
    return changed


def _same(encode, decode, raw: bytes, enc: bytes) -> bool:
    try:
        return encode(decode(raw)) == enc
    except Exception:  # noqa: BLE001 - an unreadable record is not the value
        return False


def _read(obj, db, keys: list) -> list:
    """The stored records at ``keys`` (None where absent), in order: one range scan of the
    object's items when they are at least a quarter of them, else a point read each."""
    if len(keys) >= _SCAN_AT and len(keys) * 4 >= len(obj):
        found = dict.fromkeys(keys)
        for key, raw in db.scan_prefix(obj._items):
            if key in found:
                found[key] = raw
        return [found[k] for k in keys]
    get = db.get
    return [get(k) for k in keys]


def _unencodable(obj, slot, e) -> EncodingError:
    [(label, _)] = obj._inplace_where([slot])
    return EncodingError(f"cannot save {obj.kind} {obj._name!r} {label}: it was changed in place "
                         f"into a value that cannot be stored: {e}")


def inplace_error(changes: list) -> InPlaceChangeError:
    """The error of a save with ``inplace="raise"`` that found ``changes``."""
    by_obj: dict = {}
    for obj, slot in changes:
        by_obj.setdefault(id(obj), (obj, []))[1].append(slot)
    described = [(obj, label, way) for obj, slots in by_obj.values()
                 for label, way in obj._inplace_where(slots)]
    refused = 'a save with inplace="raise" does not write such changes, so nothing was saved'
    other = 'open the space with inplace="save", which writes such changes at every save'
    if len(described) == 1:
        obj, label, way = described[0]
        msg = (f"{obj.kind} {obj._name!r} {label} was changed in place since it was stored; {refused}. "
               f"Either {way}, or {other}.")
    else:
        shown = "; ".join(f"{obj.kind} {obj._name!r} {label} ({way})" for obj, label, way in described[:_SHOWN])
        more = f"; and {len(described) - _SHOWN} more" if len(described) > _SHOWN else ""
        msg = (f"{len(described)} stored values were changed in place; {refused}: "
               f"{shown}{more}. Either do that, or {other}.")
    return InPlaceChangeError(msg, [(obj._name, obj.kind, label) for obj, label, _ in described])


def hint_assign(var: str, index) -> str:
    """How to assign a value back by its index or key, as the error shows it."""
    text = repr(index)
    if len(text) > 60:
        return f"assign it back: {var}[key] = {var}[key]"
    return f"assign it back: {var}[{text}] = {var}[{text}]"
