"""PersistedList: a MutableSequence whose items live in positional slots 0..n-1.

Appending, popping the last item and assigning one index touch one slot; inserting or
deleting at position i shifts (and rewrites) the n-i slots after it, as a positional
layout must. Whole-list operations (slices, sort, reverse) rewrite only the slots whose
item changed.
"""
from __future__ import annotations

from collections.abc import MutableSequence

from ._base import F_META, MISSING
from ._slots import SlotSequence


class PersistedList(SlotSequence, MutableSequence):
    """A persisted list. Costs are per call; "dirty" counts slots the next save writes.

    >>> import dkv; from objectspace import ObjectSpace
    >>> lst = ObjectSpace(dkv.open("memory://list-doc")).create_list("l", [3, 1, 2])
    >>> lst.sort(); lst.insert(0, 0); list(lst)
    [0, 1, 2, 3]
    """

    kind = "list"
    __slots__ = ()

    # -- reads --------------------------------------------------------------------------------

    def __getitem__(self, i):
        """O(1) (one point read if not cached); a slice is O(its span)."""
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
        return self._get_slot(self._index(i.__index__()))

    def __iter__(self):
        """O(n); streams slots not in memory from the store."""
        if self._dead:
            self._raise_dead()
        return self._iter_slots(0, self._tail)

    def __reversed__(self):
        if self._dead:
            self._raise_dead()
        return reversed(self._all_values())

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
        self._set_slot(self._index(i.__index__()), value)

    def __delitem__(self, i) -> None:
        """Index i: O(n-i), shifts and dirties slots i..n-2, deletes slot n-1 at save."""
        if isinstance(i, slice):
            items = self._all_values()
            del items[i]
            self._replace_all(items)
            return
        i = self._index(i.__index__())
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

    def insert(self, i: int, value) -> None:
        """O(n-i): shifts and dirties slots i..n (appending is O(1))."""
        if not self._listed:
            self._touch()
        n = self._tail
        i = i.__index__()
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

    def append(self, value) -> None:
        """O(1); one slot dirty plus the length."""
        if not self._listed:
            self._touch()
        t = self._tail
        self._vals[t] = value
        self._dirty.add(t)
        self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    def extend(self, values) -> None:
        """O(k) for k values; k slots dirty plus the length."""
        for v in list(values):
            self.append(v)

    def pop(self, i: int = -1):
        """Last item: O(1). Index i: O(n-i) like ``del``. Raises IndexError when empty."""
        if not self._tail:
            raise IndexError("pop from empty list")
        i = self._index(i)
        if i != self._tail - 1:
            v = self[i]
            del self[i]
            return v
        if not self._listed:
            self._touch()
        v = self._get_slot(i)
        self._drop_slot(i)
        self._tail = i
        self._flags |= F_META
        self._version += 1
        return v

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

    def sort(self, *, key=None, reverse: bool = False) -> None:
        """O(n log n); dirties the slots whose item moved."""
        items = self._all_values()
        items.sort(key=key, reverse=reverse)
        self._replace_all(items)

    def reverse(self) -> None:
        """O(n); dirties the slots whose item moved."""
        items = self._all_values()
        items.reverse()
        self._replace_all(items)

    def index(self, value, start: int = 0, stop: int | None = None) -> int:
        """O(n). Raises ValueError when absent."""
        return self._all_values().index(value, start, self._tail if stop is None else stop)

    def count(self, value) -> int:
        """O(n)."""
        return sum(1 for v in self if v is value or v == value)

    def __iadd__(self, values):
        self.extend(values)
        return self

