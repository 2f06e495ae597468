"""PersistedDict (MutableMapping) and PersistedSortedDict (plus sortedcontainers' verbs).

Each entry is one record: key = the order-preserving encoding of the dict key, value =
the encoded value. ``d[k]`` reads one record without loading the dict. Keys are None,
bool, int, float, bytes, str or tuples of them (``1``, ``1.0`` and ``True`` are distinct).
Values are stored when assigned; mutating a stored value in place is not seen: assign
it again.
"""
from __future__ import annotations

import itertools
from collections.abc import MutableMapping

from ._base import ABSENT, F_META, MISSING, plain
from ._keycodec import decode_key
from ._keyed import KeyedObject

_NO_DEFAULT = object()


class PersistedDict(KeyedObject, MutableMapping):
    """A persisted dict. ``d[k]``, ``d[k] = v``, ``del d[k]``, ``k in d`` are O(1) (one
    point read when not cached) and mark one entry dirty (plus the count when the size
    changes). Iteration is O(n) in unspecified order."""

    kind = "dict"
    __slots__ = ()
    _twin_name = "dict"

    def copy(self) -> dict:
        """A plain ``dict`` (a sorted dict's in key order), its values copied as in
        PersistedObject.copy. O(n)."""
        self._check()
        return {k: plain(v) for k, v in self.items()}

    def _enc_entry(self, ek, entry) -> bytes:
        return self._encode(entry[1], entry[0])

    def _dec_entry(self, ek, raw):
        return decode_key(ek), self._codec.decode(raw)

    def __getitem__(self, key):
        """O(1) (one point read when not cached)."""
        if self._dead:
            self._raise_dead()
        t = self._t
        ek = self._ek(key)
        e = t.vals.get(ek, MISSING)
        if e is MISSING or e is ABSENT:
            e = t.lookup(ek)
            if e is MISSING:
                raise KeyError(key)
        return e[1]

    def get(self, key, default=None):
        """O(1)."""
        if self._dead:
            self._raise_dead()
        e = self._t.lookup(self._ek(key))
        return default if e is MISSING else e[1]

    def __contains__(self, key) -> bool:
        if self._dead:
            self._raise_dead()
        return self._t.lookup(self._ek(key)) is not MISSING

    def __setitem__(self, key, value) -> None:
        """O(1); one entry dirty (+ count if new)."""
        ek = self._ek(key)
        if not self._listed:
            self._touch()
        if self._t.put(ek, (key, value)):
            self._flags |= F_META

    def __delitem__(self, key) -> None:
        """O(1); deletes one record at save (nothing if added since the last save)."""
        ek = self._ek(key)
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is MISSING:
            raise KeyError(key)
        self._flags |= F_META

    def pop(self, key, default=_NO_DEFAULT):
        """Remove key and return its value (default if absent, else KeyError). O(1)."""
        ek = self._ek(key)
        if not self._listed:
            self._touch()
        e = self._t.remove(ek)
        if e is MISSING:
            if default is _NO_DEFAULT:
                raise KeyError(key)
            return default
        self._flags |= F_META
        return e[1]

    def __iter__(self):
        if self._dead:
            self._raise_dead()
        return (e[0] for _, e in self._t.iterate())

    def items(self):
        """(key, value) pairs, one pass. O(n)."""
        return _ItemsView(self)

    def values(self):
        """The values, one pass. O(n)."""
        return _ValuesView(self)

    def clear(self) -> None:
        """O(1) now; the next save deletes the stored entries (one range scan)."""
        self._clear()

    def _entries(self, lo=None, hi=None, reverse=False):
        if self._dead:
            self._raise_dead()
        return (e for _, e in self._t.iterate(lo, hi, reverse))


class _ItemsView:
    __slots__ = ("_d",)

    def __init__(self, d) -> None:
        self._d = d

    def __iter__(self):
        return self._d._entries()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, item) -> bool:
        k, v = item
        return self._d.get(k, _NO_DEFAULT) == v

    def __reversed__(self):
        return self._d._entries(reverse=True)


class _ValuesView(_ItemsView):
    __slots__ = ()

    def __iter__(self):
        return (v for _, v in self._d._entries())

    def __contains__(self, value) -> bool:
        return any(v is value or v == value for v in self)

    def __reversed__(self):
        return (v for _, v in self._d._entries(reverse=True))


class PersistedSortedDict(PersistedDict):
    """A persisted dict iterated in key order (see ``_keycodec``), with
    sortedcontainers.SortedDict's verbs. Positional operations are O(log n) on a dict of
    at most ``cache_items`` entries (loaded whole on first use), O(n) scans beyond."""

    kind = "sorted_dict"
    sorted_kind = True
    __slots__ = ()

    def __reversed__(self):
        return (e[0] for e in self._entries(reverse=True))

    def irange(self, minimum=None, maximum=None, inclusive=(True, True), reverse=False):
        """Keys between minimum and maximum (None: unbounded). A range scan: O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return (e[0] for e in self._entries(lo, hi, reverse))

    def irange_items(self, minimum=None, maximum=None, inclusive=(True, True), reverse=False):
        """(key, value) pairs of irange. O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return self._entries(lo, hi, reverse)

    def bisect_left(self, key) -> int:
        """Number of keys < key. O(log n) when loaded, else a range scan."""
        return self._t.rank(self._ek(key))

    def bisect_right(self, key) -> int:
        """Number of keys <= key. O(log n) when loaded, else a range scan."""
        return self._t.rank(self._ek(key) + b"\x00")

    bisect = bisect_right

    def index(self, key) -> int:
        """Position of key in key order. Raises ValueError when absent."""
        ek = self._ek(key)
        if self._t.lookup(ek) is MISSING:
            raise ValueError(f"{key!r} is not in the sorted dict")
        return self._t.rank(ek)

    def peekitem(self, index: int = -1) -> tuple:
        """(key, value) at position index (the last by default). IndexError when empty."""
        t = self._t
        return t.lookup(t.nth(index))

    def popitem(self, index: int = -1) -> tuple:
        """Remove and return the item at position index (the last by default)."""
        if not self._t.count:
            raise KeyError("popitem(): sorted dict is empty")
        k, v = self.peekitem(index)
        del self[k]
        return k, v

    def keys(self):
        """Keys in order (a list view is not kept: this iterates). O(n)."""
        return _KeysView(self)

    def islice(self, start=None, stop=None, reverse=False):
        """Keys at positions [start, stop)."""
        t = self._t
        t.ensure_complete()
        if t.order is not None:
            vals = t.vals
            return (vals[ek][0] for ek in t.order.islice(start, stop, reverse))
        start, stop, _ = slice(start, stop).indices(t.count)
        it = itertools.islice(t.iterate(), start, stop)
        if reverse:
            it = reversed(list(it))
        return (e[0] for _, e in it)


class _KeysView(_ItemsView):
    __slots__ = ()

    def __iter__(self):
        return iter(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    def __reversed__(self):
        return reversed(self._d)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list(self._d.islice())[i]
        return self._d.peekitem(i)[0]
