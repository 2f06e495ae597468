"""PersistedSet (MutableSet) and PersistedSortedSet (plus sortedcontainers' verbs).

Each element is one record keyed by its order-preserving encoding (value empty), so
``x in s`` reads one key without loading the set. Elements are None, bool, int, float,
bytes, str or tuples of them (see ``_keycodec``: ``1``, ``1.0`` and ``True`` are distinct).
"""
from __future__ import annotations

import itertools
from collections.abc import MutableSet

from ._base import F_META, MISSING
from ._keyed import KeyedObject, decode_set_entry


class PersistedSet(KeyedObject, MutableSet):
    """A persisted set. add/discard/in are O(1) (one point read when not cached) and mark
    one element dirty (plus the count when the size changes); iteration is O(n).
    Iteration order is unspecified."""

    kind = "set"
    __slots__ = ()
    _twin_name = "set"

    def copy(self) -> set:
        """A plain ``set`` of the elements (immutable keys, so nothing else to copy). O(n)."""
        self._check()
        return set(self)

    def _enc_entry(self, ek, entry) -> bytes:
        return b""

    _dec_entry = staticmethod(decode_set_entry)

    @classmethod
    def _from_iterable(cls, it):
        return set(it)   # results of s & t, s | t, ... are plain sets

    def __contains__(self, value) -> bool:
        if self._dead:
            self._raise_dead()
        return self._t.lookup(self._ek(value)) is not MISSING

    def __iter__(self):
        if self._dead:
            self._raise_dead()
        return (e for _, e in self._t.iterate())

    def add(self, value) -> None:
        """O(1); one element dirty (+ count if new)."""
        ek = self._ek(value)
        if not self._listed:
            self._touch()
        if self._t.put(ek, value):
            self._flags |= F_META

    def discard(self, value) -> None:
        """O(1); deletes one element at save (nothing if it was added since the last save)."""
        ek = self._ek(value)
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is not MISSING:
            self._flags |= F_META

    def remove(self, value) -> None:
        """Like discard, but raises KeyError when absent."""
        ek = self._ek(value)
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is MISSING:
            raise KeyError(value)
        self._flags |= F_META

    def update(self, *iterables) -> None:
        """Add every element of the iterables. O(k)."""
        for it in iterables:
            for v in list(it):
                self.add(v)

    def clear(self) -> None:
        """O(1) now; the next save deletes the stored elements (one range scan)."""
        self._clear()

    def pop(self):
        """Remove and return an arbitrary element (the smallest for a sorted set)."""
        for _, e in self._t.iterate():
            self.discard(e)
            return e
        raise KeyError("pop from an empty set")


class PersistedSortedSet(PersistedSet):
    """A persisted set kept in key order (see ``_keycodec`` for the order across types),
    with sortedcontainers.SortedSet's verbs. Positional operations are O(log n) on a set of
    at most ``cache_items`` elements (loaded whole on first use), O(n) scans beyond."""

    kind = "sorted_set"
    sorted_kind = True
    __slots__ = ()

    def __reversed__(self):
        return (e for _, e in self._t.iterate(reverse=True))

    def irange(self, minimum=None, maximum=None, inclusive=(True, True), reverse=False):
        """Elements between minimum and maximum (None: unbounded). A range scan: O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return (e for _, e in self._t.iterate(lo, hi, reverse))

    def bisect_left(self, value) -> int:
        """Number of elements < value."""
        return self._t.rank(self._ek(value))

    def bisect_right(self, value) -> int:
        """Number of elements <= value."""
        return self._t.rank(self._ek(value) + b"\x00")

    bisect = bisect_right

    def index(self, value) -> int:
        """Position of value. Raises ValueError when absent."""
        ek = self._ek(value)
        if self._t.lookup(ek) is MISSING:
            raise ValueError(f"{value!r} is not in the sorted set")
        return self._t.rank(ek)

    def count(self, value) -> int:
        """1 if value is in the set, else 0. O(1)."""
        return int(value in self)

    def __getitem__(self, i):
        """s[i] (O(log n) when loaded, else O(i)); a slice returns a list."""
        t = self._t
        if isinstance(i, slice):
            start, stop, step = i.indices(t.count)
            if step == 1:
                return list(self.islice(start, stop))
            return list(self.islice())[i]
        return t.lookup(t.nth(i))

    def __delitem__(self, i) -> None:
        """Remove the element at position i (or a slice of positions)."""
        if isinstance(i, slice):
            for v in self[i]:
                self.discard(v)
            return
        self.discard(self[i])

    def pop(self, index: int = -1):
        """Remove and return the element at index (the largest by default). IndexError when empty."""
        if not self._t.count:
            raise IndexError("pop from an empty sorted set")
        v = self[index]
        self.discard(v)
        return v

    def islice(self, start=None, stop=None, reverse=False):
        """Elements at positions [start, stop). O(log n + k) when loaded, else O(stop)."""
        t = self._t
        t.ensure_complete()
        if t.order is not None:
            vals = t.vals
            return (vals[ek] for ek in t.order.islice(start, stop, reverse))
        start, stop, _ = slice(start, stop).indices(t.count)
        it = itertools.islice(t.iterate(), start, stop)
        if reverse:
            it = reversed(list(it))
        return (e for _, e in it)
