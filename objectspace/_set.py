"""PersistedSet (MutableSet) and PersistedSortedSet (plus sortedcontainers' verbs).

Each element is one record keyed by its order-preserving encoding (value empty), so
``x in s`` reads one key without loading the set. Elements are None, bool, int, float,
bytes, str or tuples of them (see ``_keycodec``: ``1``, ``1.0`` and ``True`` are distinct).

They behave as a ``set`` does (CPython's set tests run against them: see
tests/objectspace/test_cpython_suites.py), with set's named methods (``union``,
``issubset``, ``intersection_update``, ...). The operators take sets only (``s | 'ab'``
raises TypeError, as for a set); the named methods take any iterable. Results that are new
collections (``s | t``, ``s.union(t)``, ``copy()``, ...) are plain sets: a persisted one
would need a name. A value that cannot be stored cannot be an element: ``x in s`` is False
(an unhashable x raises TypeError, as in a set).
"""
from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, MutableSet, Set
from typing import Any

from ._base import F_META, MISSING
from ._keyed import KeyedObject, decode_set_entry
from .errors import EncodingError


class EmptySortedSetError(IndexError, KeyError):
    """pop from an empty sorted set: an IndexError, as sortedcontainers raises, and a
    KeyError, as a set raises."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PersistedSet(KeyedObject, MutableSet):
    """A persisted set. add/discard/in are O(1) (one point read when not cached) and mark
    one element dirty (plus the count when the size changes); iteration is O(n).
    Iteration order is unspecified."""

    kind = "set"
    __slots__ = ()
    _twin_name = "set"

    __hash__ = None     # mutable, like set

    def __init__(self, iterable: Iterable[Any] = (), /) -> None:
        """``s.__init__(items)`` makes s hold exactly ``items``, as ``set.__init__`` does.
        O(n + k). (Sets are made by a space: ``space.create_set(name, items)``.)"""
        try:
            self._space
        except AttributeError:
            raise TypeError(f"a {type(self).__name__} is made by a space: "
                            f"space.create_{self.kind}(name, items)") from None
        items = list(iterable)
        self.clear()
        self.update(items)

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
        """O(1) (one point read when not cached)."""
        if self._dead:
            self._raise_dead()
        try:
            ek = self._ek(value)
        except (EncodingError, ValueError):
            hash(value)         # unhashable: TypeError, as a set raises; else not an element
            return False
        return self._t.lookup(ek) is not MISSING

    def __iter__(self):
        if self._dead:
            self._raise_dead()
        return (e for _, e in self._t.iterate())

    def add(self, value: Any) -> None:
        """O(1); one element dirty (+ count if new)."""
        ek = self._ek(value)
        if not self._listed:
            self._touch()
        if self._t.put(ek, value):
            self._flags |= F_META

    def discard(self, value: Any) -> None:
        """O(1); deletes one element at save (nothing if it was added since the last save)."""
        try:
            ek = self._ek(value)
        except (EncodingError, ValueError):
            hash(value)
            return
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is not MISSING:
            self._flags |= F_META

    def remove(self, value: Any) -> None:
        """Like discard, but raises KeyError when absent."""
        try:
            ek = self._ek(value)
        except (EncodingError, ValueError):
            hash(value)
            raise KeyError(value) from None
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is MISSING:
            raise KeyError(value)
        self._flags |= F_META

    def update(self, *iterables: Iterable[Any]) -> None:
        """Add every element of the iterables. O(k); one record dirty per new element."""
        for it in iterables:
            for v in list(it):
                self.add(v)

    # -- set's named methods: any iterables; results are plain sets --------------------------

    def union(self, *others: Iterable[Any]) -> set:
        """A plain set of the elements of s and of every iterable. O(n + k)."""
        return set(self).union(*others)

    def intersection(self, *others: Iterable[Any]) -> set:
        """A plain set of the elements of s that are in every iterable. O(k) point reads
        for the first iterable's k elements (O(n) with no iterable: a copy)."""
        if not others:
            return set(self)
        first = others[0]
        out = {v for v in (self.copy() if first is self else first) if v in self}
        if len(others) > 1:
            out.intersection_update(*others[1:])
        return out

    def difference(self, *others: Iterable[Any]) -> set:
        """A plain set of the elements of s that are in none of the iterables. O(n + k)."""
        out = set(self)
        out.difference_update(*others)
        return out

    def symmetric_difference(self, other: Iterable[Any]) -> set:
        """A plain set of the elements in exactly one of s and other. O(n + k)."""
        return set(self).symmetric_difference(other)

    def issubset(self, other: Iterable[Any]) -> bool:
        """True when every element of s is in the iterable other. O(n + k)."""
        if not isinstance(other, (set, frozenset)):
            other = set(other)
        return len(self) <= len(other) and all(v in other for v in self)

    def issuperset(self, other: Iterable[Any]) -> bool:
        """True when every element of the iterable other is in s. O(k) point reads."""
        return all(v in self for v in (self.copy() if other is self else other))

    def isdisjoint(self, other: Iterable[Any]) -> bool:
        """True when no element of the iterable other is in s. O(k) point reads."""
        return not any(v in self for v in (self.copy() if other is self else other))

    def intersection_update(self, *others: Iterable[Any]) -> None:
        """Keep only the elements found in every iterable. O(n + k); one record deleted at
        save per element removed."""
        keep = self.intersection(*others)
        for v in [v for v in self if v not in keep]:
            self.discard(v)

    def difference_update(self, *others: Iterable[Any]) -> None:
        """Remove every element of the iterables. O(k); one record deleted at save per
        element removed."""
        for other in others:
            if other is self:
                self.clear()
                continue
            for v in other:
                self.discard(v)

    def symmetric_difference_update(self, other: Iterable[Any]) -> None:
        """Remove the elements of other that are in s and add the others. O(k); one
        record per element changed."""
        if other is self:
            self.clear()
            return
        if not isinstance(other, (set, frozenset, PersistedSet)):
            other = set(other)
        for v in other:
            if v in self:
                self.discard(v)
            else:
                self.add(v)

    # The operators take sets only, as a set's do (the mixins would take any iterable).

    def __or__(self, other):
        """``s | t``: a plain set. O(n + m)."""
        if not isinstance(other, Set):
            return NotImplemented
        return self.union(other)

    __ror__ = __or__

    def __and__(self, other):
        """``s & t``: a plain set. O(m) point reads."""
        if not isinstance(other, Set):
            return NotImplemented
        return self.intersection(other)

    __rand__ = __and__

    def __sub__(self, other):
        """``s - t``: a plain set. O(n + m)."""
        if not isinstance(other, Set):
            return NotImplemented
        return self.difference(other)

    def __rsub__(self, other):
        """``t - s``: a plain set. O(m) point reads."""
        if not isinstance(other, Set):
            return NotImplemented
        return {v for v in other if v not in self}

    def __xor__(self, other):
        """``s ^ t``: a plain set. O(n + m)."""
        if not isinstance(other, Set):
            return NotImplemented
        return self.symmetric_difference(other)

    __rxor__ = __xor__

    def __ior__(self, other):
        """``s |= t``: update. O(m)."""
        if not isinstance(other, Set):
            return NotImplemented
        self.update(other)
        return self

    def __iand__(self, other):
        """``s &= t``: intersection_update. O(n + m)."""
        if not isinstance(other, Set):
            return NotImplemented
        self.intersection_update(other)
        return self

    def __isub__(self, other):
        """``s -= t``: difference_update. O(m)."""
        if not isinstance(other, Set):
            return NotImplemented
        self.difference_update(other)
        return self

    def __ixor__(self, other):
        """``s ^= t``: symmetric_difference_update. O(m)."""
        if not isinstance(other, Set):
            return NotImplemented
        self.symmetric_difference_update(other)
        return self

    def clear(self) -> None:
        """O(1) now; the next save deletes the stored elements (one range scan)."""
        self._clear()

    def pop(self) -> Any:
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

    def irange(self, minimum: Any = None, maximum: Any = None, inclusive: tuple[bool, bool] = (True, True),
               reverse: bool = False) -> Iterator[Any]:
        """Elements between minimum and maximum (None: unbounded). A range scan: O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return (e for _, e in self._t.iterate(lo, hi, reverse))

    def bisect_left(self, value: Any) -> int:
        """Number of elements < value."""
        return self._t.rank(self._ek(value))

    def bisect_right(self, value: Any) -> int:
        """Number of elements <= value."""
        return self._t.rank(self._ek(value) + b"\x00")

    bisect = bisect_right

    def index(self, value: Any) -> int:
        """Position of value. Raises ValueError when absent."""
        ek = self._ek(value)
        if self._t.lookup(ek) is MISSING:
            raise ValueError(f"{value!r} is not in the sorted set")
        return self._t.rank(ek)

    def count(self, value: Any) -> int:
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

    def pop(self, index: int = -1) -> Any:
        """Remove and return the element at index (the largest by default). Raises
        EmptySortedSetError, an IndexError (as sortedcontainers) and a KeyError (as a set),
        when empty."""
        if not self._t.count:
            raise EmptySortedSetError("pop from an empty sorted set")
        v = self[index]
        self.discard(v)
        return v

    def islice(self, start: int | None = None, stop: int | None = None, reverse: bool = False) -> Iterator[Any]:
        """Elements at positions [start, stop). O(log n + k) when loaded, else O(stop)."""
        t = self._t
        t.ensure_complete()
        if t.order is not None:
            vals = t.vals
            return (vals[ek] for ek in t.order.islice(start, stop, reverse))
        start, stop, _ = slice(start, stop).indices(t.count)
        it: Iterator[Any] = itertools.islice(t.iterate(), start, stop)
        if reverse:
            it = reversed(list(it))
        return (e for _, e in it)
