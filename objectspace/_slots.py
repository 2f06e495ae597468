"""SlotSequence: the storage engine of array, list, stack and queue.

Items live in integer slots ``head .. tail-1`` (keys: 8-byte big-endian, so a range scan
returns them in order). In memory, ``_vals`` maps slot -> value for the slots that are
loaded, dirty or pending; clean slots may be evicted past the space's ``cache_items``.
Objects no larger than ``cache_items`` are loaded whole by one range scan on first read.

Deletions need no per-slot bookkeeping: the store may hold slots ``[_lo, _hi)``; a save
deletes the part of that range outside ``[head, tail)``. An item appended and popped
between two saves is never written and never deleted; a list that shrinks deletes its
old tail slots.

A clean object holds no sets of dirty and pending slots (both are ``NO_SLOTS``, one shared
empty frozenset): two empty sets are 432 bytes, a third of a handle, and at 1,000,000 keys
most handles in memory are clean. ``_touch``, which every change calls before it marks a
slot, gives an object its sets; a load, the cache dropping a clean object's items, and a
save confirmed under memory pressure (after which the object is unlisted) take them back,
never an object that is listed or being saved.
"""
from __future__ import annotations

import operator
from operator import eq as _eq, ne as _ne

from . import _layout as L
from ._base import F_META, F_REPLACE, MISSING, PersistedObject
from ._inplace import IMMUTABLE, hint_assign, keep_changed
from .errors import CorruptionError

_slot_key = L.slot_key
NO_SLOTS = frozenset()      # the dirty and pending slots of a clean object (see the docstring)
_WALK = None
"""The C twin of _iter_slots' walks of items from the store (``objectspace._native.walk``, RFC
0012 step 4; set with the save path by objectspace/_savepath.py), or None."""


def _pair(record) -> tuple:
    """A scan's record unpacked as the walks below unpack it (the C walk calls it for a record
    that is not a tuple of two, for the same error)."""
    key, raw = record
    return key, raw


def repeat_in_place(self, n):
    """``seq *= n`` of a list or queue, in place: O(len * n) slots appended (n <= 0 clears:
    O(1) now)."""
    try:
        n = operator.index(n)
    except TypeError:
        return NotImplemented
    if n <= 0:
        self.clear()
    elif n > 1:
        items = self._all_values()
        for _ in range(n - 1):
            self.extend(items)
    return self


class SlotSequence(PersistedObject):
    _handle_bytes = 720
    __slots__ = ("_vals", "_dirty", "_pending", "_head", "_tail", "_lo", "_hi", "_snap",
                 "_complete", "_version")

    def _init_slots(self, head: int, tail: int, fresh: bool) -> None:
        self._vals: dict = {}
        if fresh:
            self._dirty: set = set()
            self._pending: set = set()
        else:
            self._dirty = self._pending = NO_SLOTS
        self._head = head
        self._tail = tail
        self._lo = head                    # the store may hold slots [_lo, _hi)
        self._hi = head if fresh else tail
        self._snap: tuple | None = None    # (head, tail) from a promote to its confirm
        self._complete = fresh or head == tail
        self._version = 0

    def _touch(self) -> None:
        """PersistedObject._touch, giving a clean object its sets of slots first."""
        if self._dirty is NO_SLOTS:
            self._dirty = set()
            self._pending = set()
        PersistedObject._touch(self)

    # Kinds that keep only a length (list, stack, array) share these; queue overrides them.
    @classmethod
    def _fresh(cls, space, name, nkey, codec):
        self = cls.__new__(cls)     # not cls(): a kind's __init__ re-initialises, as list's does
        self._init_base(space, name, nkey, codec, fresh=True)
        self._init_slots(0, 0, fresh=True)
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls.__new__(cls)
        self._init_base(space, None, nkey, codec, fresh=False)     # the name: from nkey (see _base._name)
        self._init_slots(0, meta[0], fresh=False)
        return self

    def _meta(self) -> list:
        return [self._tail]

    def _index(self, i: int) -> int:
        """Slot of position i (negative from the end). IndexError outside [0, len)."""
        n = self._tail
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"{self.kind} index out of range")
        return i

    def __len__(self) -> int:
        return self._tail - self._head

    def _dirty_count(self) -> int:
        return len(self._dirty | self._pending) + super()._dirty_count()

    # -- reads ------------------------------------------------------------------------------

    def _get_slot(self, s: int):
        """Value of slot s (head <= s < tail). O(1) in memory, else one point read or, for
        an object of at most cache_items, one range scan that loads it whole."""
        v = self._vals.get(s, MISSING)
        if v is MISSING:
            v = self._fetch(s)
        return v

    def _fetch(self, s: int):
        if self._tail - self._head <= self._space._cache_items:
            self._load_range(self._head, self._tail)
            self._complete = True
            return self._vals[s]
        raw = self._space._db.get(_slot_key(self._items, s))
        if raw is None:
            raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
        v = self._codec.decode(raw)
        if len(self._vals) >= self._space._cache_items:
            self._evict()           # before caching v: the caller gets the value the slot keeps
        self._vals[s] = v
        return v

    def _load_range(self, a: int, b: int) -> None:
        """Load slots [a, b) that are not in memory. O(b - a) with one range scan."""
        vals = self._vals
        if self._complete or all(s in vals for s in range(a, b)):
            return
        ip, decode = self._items, self._codec.decode
        for key, raw in self._space._db.scan(_slot_key(ip, a), _slot_key(ip, b)):
            s = L.slot_of(key)
            if s not in vals:
                vals[s] = decode(raw)
        missing = [s for s in range(a, b) if s not in vals]
        if missing:
            raise CorruptionError(f"{self.kind} {self._name!r} is missing slots {missing[:5]}")

    def _iter_slots(self, a: int, b: int, version: int | None = None, cont=None, watch: bool = True):
        """Values of slots a..b-1 in order, streaming from the store for slots not in memory
        (they are not cached, unless the space has ``inplace`` set and ``watch`` is true:
        see _iter_keeping). ``version`` is the sequence's version when the iterator was
        made (callers pass it so that a change between ``iter()`` and the first ``next()``
        counts). When the sequence changes structurally meanwhile (an item added, removed
        or moved), the iterator raises RuntimeError, as a deque's does, even if it had
        reached the end; with ``cont`` it goes on with ``cont(number of values given)``
        instead, as a list's does. An item assigned meanwhile is seen. O(b - a)."""
        if version is None:
            version = self._version
        s = a
        keep = watch and self._space._inplace is not None
        if keep and not self._complete and self._tail - self._head <= self._space._cache_items:
            self._load_range(self._head, self._tail)    # as a read does: values handed out stay cached
            self._complete = True
        vals = self._vals
        if self._complete:
            try:
                for s in range(a, b):
                    if self._version != version:
                        break
                    yield vals[s]
                else:
                    s = b
            except KeyError:            # evicted by a save since the iterator started
                while s < b and self._version == version:
                    yield self._get_slot(s)
                    s += 1
            if self._version == version:
                return
        elif keep:
            s = yield from self._iter_keeping(s, b, version)
            if self._version == version:
                return
        elif _WALK is not None and (walk := _WALK(self, vals, s, b, version)) is not None:
            # The two branches below in C, value by value as they give them (None: not the
            # common case); at the end, the slot it stopped at and whether the store lacks it.
            s, missing = yield from walk
            if missing:
                raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
            if self._version == version:
                if s < b:
                    raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
                return
        elif not vals:      # nothing cached (the common case after eviction): one scan
            slot_of = L.slot_of
            ip, decode = self._items, self._codec.decode
            for key, raw in self._space._db.scan(_slot_key(ip, a), _slot_key(ip, b)):
                if self._version != version:
                    break
                if slot_of(key) != s:
                    raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
                yield decode(raw) if not vals or s not in vals else vals[s]
                s += 1
            else:
                if self._version == version:
                    if s < b:
                        raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
                    return
        else:
            s = yield from self._iter_merged(s, b, version)
            if self._version == version:
                return
        if cont is None:
            raise RuntimeError(f"{self.kind} mutated during iteration")
        yield from cont(s - a)

    def _iter_merged(self, s: int, b: int, version: int, keep=None):
        """Values of slots s..b-1, from memory where cached, else from one range scan;
        ``keep(s, value, raw)`` is called for each value read from the store. Returns the
        slot it stopped at (b, or where the sequence changed)."""
        vals, ip, decode = self._vals, self._items, self._codec.decode
        scan = None
        while s < b:
            if self._version != version:
                break
            v = vals.get(s, MISSING)
            if v is MISSING:
                if scan is None:
                    scan = self._space._db.scan(_slot_key(ip, s), _slot_key(ip, b))
                for key, raw in scan:
                    got = L.slot_of(key)
                    if got == s:
                        v = decode(raw)
                        break
                    if got > s:
                        raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
                else:
                    raise CorruptionError(f"{self.kind} {self._name!r} is missing slot {s}")
                if keep is not None:
                    keep(s, v, raw)
            yield v
            s += 1
        return s

    def _iter_keeping(self, s: int, b: int, version: int):
        """_iter_slots of a space with ``inplace`` set, for a sequence larger than
        cache_items: the values read from the store that could change in place are cached
        as they are handed out (a value changed in the loop body is then seen by the save,
        or by the eviction that would drop it), with the digest of their record (see
        _inplace.py), so evicting them reads nothing. Returns the slot it stopped at."""
        vals, limit = self._vals, self._space._cache_items
        sums = self._isums
        if sums is None:
            sums = self._isums = {}

        def keep(slot, v, raw):
            if type(v) not in IMMUTABLE:
                if len(vals) >= limit:
                    self._evict()
                vals[slot] = v
                sums[slot] = hash(raw)         # its digest: evicting it reads nothing
        return (yield from self._iter_merged(s, b, version, keep))

    def _richcmp(self, other, op):
        """``op`` (operator.eq, lt, ...) of this sequence and ``other`` as lists compare:
        item by item (identity first), then by length. O(n); streams both."""
        n, m = len(self), len(other)
        if n != m and (op is _eq or op is _ne):
            return op is _ne
        for x, y in zip(self, other):
            if x is y or x == y:
                continue
            if op is _eq:
                return False
            if op is _ne:
                return True
            return op(x, y)
        return op(n, m)

    def _mem_estimate(self, item_bytes: int) -> int:
        return self._handle_bytes + len(self._vals) * item_bytes

    def _evict_clean(self) -> None:
        self._evict(0)
        if not self._listed:            # the cache drops only clean objects: the sets go too
            self._dirty = self._pending = NO_SLOTS

    def _evict(self, limit: int | None = None) -> None:
        """Drop clean cached slots down to ``limit`` (half of cache_items). O(len(_vals))."""
        if (self._flags | self._pflags) & F_REPLACE:
            return
        space = self._space
        if limit is None:
            limit = space._cache_items // 2
        if not limit and not self._dirty and not self._pending and space._inplace is None:
            self._vals.clear()          # in place: a running iterator holds this dict
            self._complete = self._head == self._tail
            return
        pinned = self._dirty | self._pending
        vals = self._vals
        doomed = [s for s in vals if s not in pinned][: max(0, len(vals) - limit)]
        if space._inplace is not None and doomed:
            kept = keep_changed(self, [(s, vals[s]) for s in doomed])
            if kept:
                doomed = [s for s in doomed if s not in kept]
        for s in doomed:
            del vals[s]
        self._complete = self._head == self._tail

    # -- writes -----------------------------------------------------------------------------

    def _set_slot(self, s: int, value) -> None:
        """Assign slot s. O(1); marks one slot dirty."""
        if not self._listed:
            self._touch()
        self._vals[s] = value
        self._dirty.add(s)

    def _pop_tail(self):
        """Remove and return the last item (the caller checked there is one). O(1)."""
        t = self._tail - 1
        if not self._listed:
            self._touch()
        v = self._get_slot(t)
        self._drop_slot(t)
        self._tail = t
        self._flags |= F_META
        self._version += 1
        return v

    def _drop_slot(self, s: int) -> None:
        """Forget slot s in memory (it left [head, tail)); the save deletes it if stored."""
        self._vals.pop(s, None)
        self._dirty.discard(s)
        self._pending.discard(s)

    def _replace_all(self, new: list) -> None:
        """Make the sequence ``new`` (head 0). Marks dirty only slots whose object changed;
        O(n)."""
        self._touch()
        vals, dirty = self._vals, self._dirty
        old_n = self._tail
        for s, v in enumerate(new):
            if vals.get(s, MISSING) is not v:
                vals[s] = v
                dirty.add(s)
        for s in range(len(new), old_n):
            self._drop_slot(s)
        if len(new) != old_n:
            self._tail = len(new)
            self._flags |= F_META
            self._version += 1

    def _all_values(self) -> list:
        """Every value in order, loading what is missing. O(n)."""
        self._load_range(self._head, self._tail)
        self._complete = True
        vals = self._vals
        return [vals[s] for s in range(self._head, self._tail)]

    # -- in-place changes (see _inplace.py) --------------------------------------------------

    _inplace_var = "seq"        # the name hints give the object: ``lst[2] = lst[2]``

    def _inplace_values(self, immutable: frozenset) -> list:
        vals = self._vals
        if not vals:
            return []
        pinned = self._dirty | self._pending if self._pending else self._dirty
        h, t = self._head, self._tail
        return [(s, v) for s, v in vals.items()
                if type(v) not in immutable and s not in pinned and h <= s < t]

    def _inplace_key(self, s: int) -> bytes:
        return _slot_key(self._items, s)

    def _inplace_mark(self, s: int) -> None:
        self._set_slot(s, self._vals[s])

    def _inplace_where(self, slots: list) -> list:
        h, var = self._head, self._inplace_var
        return [(f"index {s - h}", hint_assign(var, s - h)) for s in slots]

    # -- save -------------------------------------------------------------------------------

    def positions(self) -> range:
        """The positions (slots) of the elements, in order: element ``i`` is at
        ``positions()[i]`` (see ``objectspace.Unsaved``). O(1)."""
        self._check()
        return range(self._head, self._tail)

    def _unsaved_parts(self) -> tuple:
        head, tail, lo, hi = self._head, self._tail, self._lo, self._hi
        d = self._dirty | self._pending if self._pending else self._dirty
        written = sorted(s for s in d if head <= s < tail)
        removed = [*range(lo, min(head, hi)), *range(max(tail, lo), hi)] if lo < head or tail < hi else ()
        return written, removed, False

    def _collect_items(self, out: list, full: bool) -> None:
        ip, head, tail, lo, hi = self._items, self._head, self._tail, self._lo, self._hi
        if lo < head or tail < hi:     # stored slots outside [head, tail): delete them
            for s in range(lo, min(head, hi)):
                out.append((_slot_key(ip, s), None))
            for s in range(max(tail, lo), hi):
                out.append((_slot_key(ip, s), None))
        if full:
            enc = self._encode
            for s, v in zip(range(head, tail), self._iter_slots(head, tail, watch=False)):
                out.append((_slot_key(ip, s), enc(v, s - head)))
            return
        dirty = self._dirty
        if self._pending:
            dirty = dirty | self._pending
        vals, encode = self._vals, self._codec.encode
        try:
            for s in (sorted(dirty) if len(dirty) > 1 else dirty):
                if head <= s < tail:
                    out.append((ip + s.to_bytes(8, "big"), encode(vals[s])))
        except Exception:  # noqa: BLE001 - find the slot and report it with the object's name
            for s in dirty:
                if head <= s < tail:
                    self._encode(vals[s], s - head)
            raise

    def _promote(self) -> None:
        self._pflags |= self._flags
        self._flags = 0
        if self._pending:
            self._pending |= self._dirty
            self._dirty.clear()
        else:
            self._pending, self._dirty = self._dirty, self._pending
        self._snap = (self._head, self._tail)
        if self._tail > self._hi:
            self._hi = self._tail

    def _confirm(self) -> bool:
        if self._pflags & F_META:
            self._msaved = self._mlast
        self._mlast = None
        self._pflags = 0
        self._pending.clear()
        if self._snap is not None:
            self._lo, self._hi = self._snap
            self._snap = None
        pressed = self._space._cache.pressed()
        if pressed:
            self._evict(0)      # under memory pressure, saved items are not kept (write-around)
            if not self._old:
                self._msaved = None     # nor the committed metadata: a save that marks it changed
                                        # writes it then, even when it came back to what is stored
        elif len(self._vals) > self._space._cache_items:
            self._evict()
        if self._flags or self._dirty:
            return False
        if pressed:             # clean, and on_saved unlists it: its sets go too
            self._dirty = self._pending = NO_SLOTS
        return True
