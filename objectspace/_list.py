"""PersistedList: a MutableSequence whose items live in positional slots 0..n-1.

Appending, popping the last item and assigning one index touch one slot; inserting or
deleting at position i shifts (and rewrites) the n-i slots after it, as a positional
layout must. Whole-list operations (slices, sort, reverse) rewrite only the slots whose
item changed.

It behaves as a ``list`` does (CPython's own list tests run against it: see
tests/objectspace/test_cpython_suites.py): it equals a list or another PersistedList with
equal items and orders like one, is unhashable, takes integer indices (TypeError
otherwise), and its iterator goes on after the list grows, as a list iterator does.
``+`` and ``*`` give plain lists (a persisted result would need a name); ``copy()`` a
plain list sharing nothing with the object (see PersistedObject.copy).
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, MutableSequence
from typing import Any
from operator import eq, ge, gt, le, lt, ne

from ._base import F_META, MISSING
from ._slots import SlotSequence, repeat_in_place


def _as_index(i, kind: str) -> int:
    """``i`` as an int (operator.index); TypeError naming the type otherwise."""
    try:
        return operator.index(i)
    except TypeError:
        raise TypeError(f"{kind} indices must be integers or slices, not {type(i).__name__}") from None


class PersistedList(SlotSequence, MutableSequence):
    """A persisted list. Costs are per call; "dirty" counts slots the next save writes.

    >>> import dkv; from objectspace import ObjectSpace
    >>> lst = ObjectSpace(dkv.open("memory://list-doc")).create_list("l", [3, 1, 2])
    >>> lst.sort(); lst.insert(0, 0); list(lst)
    [0, 1, 2, 3]
    >>> lst == [0, 1, 2, 3], lst + [4], lst * 2 == [0, 1, 2, 3] * 2
    (True, [0, 1, 2, 3, 4], True)
    """

    kind = "list"
    __slots__ = ()
    _inplace_var = "lst"
    __hash__ = None     # mutable, like list

    def __init__(self, iterable: Iterable[Any] = (), /) -> None:
        """``lst.__init__(items)`` makes the list hold ``items``, as ``list.__init__`` does.
        O(n); dirties the slots whose item changed. (Lists are made by a space:
        ``space.create_list(name, items)``.)"""
        try:
            self._space
        except AttributeError:
            raise TypeError("a PersistedList is made by a space: space.create_list(name, items)") from None
        self._replace_all(list(iterable))

    # -- reads --------------------------------------------------------------------------------

    def __getitem__(self, i):
        """O(1) (one point read if not cached); a slice is O(its span) and gives a list."""
        if type(i) is int and 0 <= i < self._tail and not self._dead:     # the common case
            v = self._vals.get(i, MISSING)
            if v is not MISSING:
                return v
        if self._dead:
            self._raise_dead()
        if isinstance(i, slice):
            start, stop, step = i.indices(self._tail)
            slots = range(start, stop, step)
            if slots:
                self._load_range(min(slots), max(slots) + 1)
            vals = self._vals
            return [vals[s] for s in slots]
        return self._get_slot(self._index(_as_index(i, "list")))

    def __iter__(self):
        """O(n); streams slots not in memory from the store. Like a list's iterator, it goes
        on after the list changes (reading position by position) and stops at its end."""
        if self._dead:
            self._raise_dead()
        return self._iter_slots(0, self._tail, self._version, self._iter_from)

    def _iter_from(self, i: int):
        """Positions i, i+1, ... of the list as it is when each is read."""
        while i < self._tail:
            if self._dead:
                self._raise_dead()
            yield self._get_slot(i)
            i += 1

    def __reversed__(self):
        """O(n) (loads the list)."""
        if self._dead:
            self._raise_dead()
        return reversed(self._all_values())

    # -- comparisons and operators ------------------------------------------------------------
    # Comparable with list and PersistedList only, as a list is with lists only.

    def __eq__(self, other):
        """O(n), stops at the first difference (or at once when the lengths differ)."""
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, eq)
        return NotImplemented

    def __ne__(self, other):
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, ne)
        return NotImplemented

    def __lt__(self, other):
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, lt)
        return NotImplemented

    def __le__(self, other):
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, le)
        return NotImplemented

    def __gt__(self, other):
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, gt)
        return NotImplemented

    def __ge__(self, other):
        if isinstance(other, (list, PersistedList)):
            return self._richcmp(other, ge)
        return NotImplemented

    def __add__(self, other):
        """``lst + other`` (a list or PersistedList): a plain list. O(n + m); writes nothing."""
        if isinstance(other, (list, PersistedList)):
            return self._all_values() + list(other)
        return NotImplemented

    def __radd__(self, other):
        """``[...] + lst``: a plain list. O(n + m)."""
        if isinstance(other, list):
            return other + self._all_values()
        return NotImplemented

    def __mul__(self, n):
        """``lst * n``: a plain list. O(n * len); writes nothing."""
        try:
            n = operator.index(n)
        except TypeError:
            return NotImplemented
        return self._all_values() * n

    __rmul__ = __mul__

    __imul__ = repeat_in_place

    def __iadd__(self, values):
        """``lst += values`` extends in place. O(k)."""
        self.extend(values)
        return self

    # -- writes -------------------------------------------------------------------------------

    def __setitem__(self, i, value) -> None:
        """Index: O(1), one slot dirty. Slice: O(n), dirties the slots whose item changed."""
        if type(i) is int and 0 <= i < self._tail and self._listed:      # the common case
            self._vals[i] = value
            self._dirty.add(i)
            return
        if isinstance(i, slice):
            items = self._all_values()
            items[i] = value
            self._replace_all(items)
            return
        self._set_slot(self._index(_as_index(i, "list")), value)

    def __delitem__(self, i) -> None:
        """Index i: O(n-i), shifts and dirties slots i..n-2, deletes slot n-1 at save.
        Slice: O(n), dirties the slots whose item changed."""
        if isinstance(i, slice):
            items = self._all_values()
            del items[i]
            self._replace_all(items)
            return
        i = self._index(_as_index(i, "list"))
        if not self._listed:
            self._touch()
        n = self._tail
        self._load_range(i + 1, n)
        vals, dirty = self._vals, self._dirty
        for s in range(i, n - 1):
            vals[s] = vals[s + 1]
            dirty.add(s)
        self._drop_slot(n - 1)
        self._tail = n - 1
        self._flags |= F_META
        self._version += 1

    def insert(self, i: int, value: Any) -> None:
        """O(n-i): shifts and dirties slots i..n (appending is O(1))."""
        i = operator.index(i)
        if not self._listed:
            self._touch()
        n = self._tail
        if i < 0:
            i = max(0, i + n)
        i = min(i, n)
        self._load_range(i, n)
        vals, dirty = self._vals, self._dirty
        for s in range(n, i, -1):
            vals[s] = vals[s - 1]
            dirty.add(s)
        vals[i] = value
        dirty.add(i)
        self._tail = n + 1
        self._flags |= F_META
        self._version += 1

    def append(self, value: Any) -> None:
        """O(1); one slot dirty plus the length."""
        if not self._listed:
            self._touch()
        t = self._tail
        self._vals[t] = value
        self._dirty.add(t)
        self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    def extend(self, values: Iterable[Any]) -> None:
        """O(k) for k values; k slots dirty plus the length. ``lst.extend(lst)`` doubles it."""
        if values is self:
            values = self._all_values()
        append = self.append
        for v in values:
            append(v)

    def pop(self, i: int = -1) -> Any:
        """Last item: O(1). Index i: O(n-i) like ``del``. Raises IndexError when empty."""
        i = operator.index(i)
        if not self._tail:
            raise IndexError("pop from empty list")
        i = self._index(i)
        if i != self._tail - 1:
            v = self[i]
            del self[i]
            return v
        return self._pop_tail()

    def clear(self) -> None:
        """O(1) now; the save deletes the n stored slots."""
        if not self._listed:
            self._touch()
        self._vals = {}
        self._dirty = set()
        self._pending = set()
        self._tail = 0
        self._complete = True
        self._flags |= F_META
        self._version += 1

    def sort(self, *, key: Callable[[Any], Any] | None = None, reverse: bool = False) -> None:
        """O(n log n); dirties the slots whose item moved. Like ``list.sort``, a key (or
        comparison) that changes the list's length raises ValueError; the list then holds
        the sorted items, without what was added meanwhile."""
        items = self._all_values()
        version = self._version
        items.sort(key=key, reverse=reverse)
        self._replace_all(items)
        if self._version != version:
            raise ValueError("list modified during sort")

    def reverse(self) -> None:
        """O(n); dirties the slots whose item moved."""
        items = self._all_values()
        items.reverse()
        self._replace_all(items)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """O(n). Raises ValueError when absent."""
        return self._all_values().index(value, start, self._tail if stop is None else stop)

    def count(self, value: Any) -> int:
        """O(n)."""
        return sum(1 for v in self if v is value or v == value)
