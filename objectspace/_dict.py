"""PersistedDict (MutableMapping) and PersistedSortedDict (plus sortedcontainers' verbs).

Each entry is one record: key = the order-preserving encoding of the dict key, value =
the encoded value. ``d[k]`` reads one record without loading the dict. Keys are None,
bool, int, float, bytes, str or tuples of them (``1``, ``1.0`` and ``True`` are distinct).
Values are stored when assigned; a stored value changed in place (``d[k].append(x)``) is
written by a space opened with ``inplace="save"`` (``ObjectSpace.open``'s default) and
refused by ``inplace="raise"``; with ``inplace=None`` it is not seen: assign it again.

They behave as a ``dict`` does (CPython's mapping tests run against them: see
tests/objectspace/test_cpython_suites.py): equal to any mapping with equal items,
unhashable, ``keys()`` and ``items()`` set-like views. A key that cannot be stored cannot
be present: ``k in d`` is False and ``d[k]`` raises KeyError (an unhashable key raises
TypeError, as in a dict). Results that are new collections (``copy()``, ``d | other``,
``fromkeys``) are plain dicts: a persisted one would need a name.
"""
from __future__ import annotations

import itertools
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, MutableMapping, ValuesView
from typing import Any

from ._base import ABSENT, F_META, MISSING, plain
from ._inplace import IMMUTABLE, hint_assign, keep_changed
from ._keycodec import decode_key
from ._keyed import KeyedObject
from .errors import EncodingError

_NO_DEFAULT = object()


class PersistedDict(KeyedObject, MutableMapping):
    """A persisted dict. ``d[k]``, ``d[k] = v``, ``del d[k]``, ``k in d`` are O(1) (one
    point read when not cached) and mark one entry dirty (plus the count when the size
    changes). Iteration is O(n) in unspecified order."""

    kind = "dict"
    __slots__ = ()
    _twin_name = "dict"
    _mutable_entries = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """``d.__init__(...)`` updates d, as ``dict.__init__`` does. O(k). (Dicts are made
        by a space: ``space.create_dict(name, items)``.)"""
        try:
            self._space
        except AttributeError:
            raise TypeError(f"a {type(self).__name__} is made by a space: "
                            f"space.create_{self.kind}(name, items)") from None
        self.update(*args, **kwargs)

    def copy(self) -> dict:
        """A plain ``dict`` (a sorted dict's in key order), its values copied as in
        PersistedObject.copy. O(n)."""
        self._check()
        return {k: plain(v) for k, v in self.items()}

    @classmethod
    def fromkeys(cls, iterable: Iterable[Any], value: Any = None) -> dict:
        """A plain ``dict`` with the keys of iterable, each mapped to value, as
        ``dict.fromkeys``: a persisted dict needs a name and a space, so to keep it write
        ``space.create_dict(name, PersistedDict.fromkeys(keys))``. O(k)."""
        return dict.fromkeys(iterable, value)

    def __or__(self, other):
        """``d | other`` (a mapping): a plain dict. O(n + m)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        new = self.copy()
        new.update(other)
        return new

    def __ror__(self, other):
        """``other | d``: a plain dict. O(n + m)."""
        if not isinstance(other, Mapping):
            return NotImplemented
        new = dict(other)
        new.update(self.copy())
        return new

    def __ior__(self, other):
        """``d |= other`` updates d. O(m)."""
        self.update(other)
        return self

    def _absent(self, key) -> None:
        """A key that cannot be stored is not in the dict: raise TypeError if it is
        unhashable (as a dict does), else return (the caller answers "absent")."""
        hash(key)

    def _enc_entry(self, ek, entry) -> bytes:
        return self._encode(entry[1], entry[0])

    def _dec_entry(self, ek, raw):
        return decode_key(ek), self._codec.decode(raw)

    def __getitem__(self, key):
        """O(1) (one point read when not cached)."""
        if self._dead:
            self._raise_dead()
        t = self._t
        try:
            ek = self._ek(key)
        except (EncodingError, ValueError):
            self._absent(key)
            raise KeyError(key) from None
        e = t.vals.get(ek, MISSING)
        if e is MISSING or e is ABSENT:
            e = t.lookup(ek)
            if e is MISSING:
                raise KeyError(key)
        return e[1]

    def get(self, key: Any, default: Any = None) -> Any:
        """O(1)."""
        if self._dead:
            self._raise_dead()
        try:
            ek = self._ek(key)
        except (EncodingError, ValueError):
            self._absent(key)
            return default
        e = self._t.lookup(ek)
        return default if e is MISSING else e[1]

    def __contains__(self, key) -> bool:
        """O(1) (one point read when not cached)."""
        if self._dead:
            self._raise_dead()
        try:
            ek = self._ek(key)
        except (EncodingError, ValueError):
            self._absent(key)
            return False
        return self._t.lookup(ek) is not MISSING

    def __setitem__(self, key, value) -> None:
        """O(1); one entry dirty (+ count if new)."""
        ek = self._ek(key)
        if not self._listed:
            self._touch()
        if self._t.put(ek, (key, value)):
            self._flags |= F_META

    def __delitem__(self, key) -> None:
        """O(1); deletes one record at save (nothing if added since the last save)."""
        try:
            ek = self._ek(key)
        except (EncodingError, ValueError):
            self._absent(key)
            raise KeyError(key) from None
        if not self._listed:
            self._touch()
        if self._t.remove(ek) is MISSING:
            raise KeyError(key)
        self._flags |= F_META

    def pop(self, key: Any, default: Any = _NO_DEFAULT) -> Any:
        """Remove key and return its value (default if absent, else KeyError). O(1)."""
        try:
            ek = self._ek(key)
        except (EncodingError, ValueError):
            self._absent(key)
            if default is _NO_DEFAULT:
                raise KeyError(key) from None
            return default
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

    def items(self) -> ItemsView[Any, Any]:
        """A set-like view of the (key, value) pairs, as ``dict.items()``. Iterating is one
        pass, O(n); ``(k, v) in view`` O(1); ``view & other`` and the other set operators
        give plain sets."""
        return _ItemsView(self)

    def values(self) -> ValuesView[Any]:
        """A view of the values, as ``dict.values()``. Iterating is one pass, O(n)."""
        return _ValuesView(self)

    def clear(self) -> None:
        """O(1) now; the next save deletes the stored entries (one range scan)."""
        self._clear()

    def _inplace_values(self, immutable: frozenset) -> list:
        return self._t.clean_entries(immutable, True)

    @staticmethod
    def _inplace_watched(entry) -> bool:
        """Whether a cached entry's value could change in place."""
        return type(entry[1]) not in IMMUTABLE

    def _inplace_key(self, ek: bytes) -> bytes:
        return self._t.prefix + ek

    def _inplace_evicting(self, eks: list) -> set:
        vals = self._t.vals
        return keep_changed(self, [(ek, vals[ek][1]) for ek in eks if vals[ek] is not ABSENT])

    def _inplace_mark(self, ek: bytes) -> None:
        self._touch()
        self._t.dirty.add(ek)

    def _inplace_where(self, eks: list) -> list:
        keys = [self._t.vals[ek][0] for ek in eks]
        return [(f"key {key!r:.80}", hint_assign("d", key)) for key in keys]

    def _entries(self, lo=None, hi=None, reverse=False):
        if self._dead:
            self._raise_dead()
        return (e for _, e in self._t.iterate(lo, hi, reverse))


class _ItemsView(ItemsView):
    """ItemsView (set-like: ==, &, |, -, ^, <= with any set) that iterates in one pass."""

    __slots__ = ()

    def __iter__(self):
        return self._mapping._entries()

    def __reversed__(self):
        return self._mapping._entries(reverse=True)


class _ValuesView(ValuesView):
    __slots__ = ()

    def __iter__(self):
        return (v for _, v in self._mapping._entries())

    def __reversed__(self):
        return (v for _, v in self._mapping._entries(reverse=True))


class PersistedSortedDict(PersistedDict):
    """A persisted dict iterated in key order (see ``_keycodec``), with
    sortedcontainers.SortedDict's verbs. Positional operations are O(log n) on a dict of
    at most ``cache_items`` entries (loaded whole on first use), O(n) scans beyond."""

    kind = "sorted_dict"
    sorted_kind = True
    __slots__ = ()

    def __reversed__(self):
        return (e[0] for e in self._entries(reverse=True))

    def irange(self, minimum: Any = None, maximum: Any = None, inclusive: tuple[bool, bool] = (True, True),
               reverse: bool = False) -> Iterator[Any]:
        """Keys between minimum and maximum (None: unbounded). A range scan: O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return (e[0] for e in self._entries(lo, hi, reverse))

    def irange_items(self, minimum: Any = None, maximum: Any = None, inclusive: tuple[bool, bool] = (True, True),
                     reverse: bool = False) -> Iterator[tuple[Any, Any]]:
        """(key, value) pairs of irange. O(k)."""
        lo, hi = self._bounds(minimum, maximum, inclusive)
        return self._entries(lo, hi, reverse)

    def bisect_left(self, key: Any) -> int:
        """Number of keys < key. O(log n) when loaded, else a range scan."""
        return self._t.rank(self._ek(key))

    def bisect_right(self, key: Any) -> int:
        """Number of keys <= key. O(log n) when loaded, else a range scan."""
        return self._t.rank(self._ek(key) + b"\x00")

    bisect = bisect_right

    def index(self, key: Any) -> int:
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

    def keys(self) -> KeysView[Any]:
        """A set-like view of the keys in order, indexable (``d.keys()[i]``), as
        SortedDict.keys(). Iterating is O(n)."""
        return _SortedKeysView(self)

    def islice(self, start: int | None = None, stop: int | None = None, reverse: bool = False) -> Iterator[Any]:
        """Keys at positions [start, stop)."""
        t = self._t
        t.ensure_complete()
        if t.order is not None:
            vals = t.vals
            return (vals[ek][0] for ek in t.order.islice(start, stop, reverse))
        start, stop, _ = slice(start, stop).indices(t.count)
        it: Iterator[Any] = itertools.islice(t.iterate(), start, stop)
        if reverse:
            it = reversed(list(it))
        return (e[0] for _, e in it)


class _SortedKeysView(KeysView):
    """The keys of a sorted dict: set-like (KeysView) and indexable in key order, as
    sortedcontainers' SortedKeysView."""

    __slots__ = ()

    def __reversed__(self):
        return reversed(self._mapping)

    def __getitem__(self, i):
        """Key at position i (O(log n) when loaded); a slice gives a list."""
        if isinstance(i, slice):
            return list(self._mapping.islice())[i]
        return self._mapping.peekitem(i)[0]
