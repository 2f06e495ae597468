"""PersistedValue (one slot) and PersistedArray (fixed length, Sequence with assignment)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._base import F_VALUE, MISSING, PersistedObject, plain
from ._inplace import keep_changed
from ._slots import SlotSequence
from .errors import CorruptionError


class PersistedValue(PersistedObject):
    """A single persisted slot, like a box: ``v.value`` reads, ``v.value = x`` writes.

    Storage: no metadata; the value is one record. Reading is O(1) after the first read
    (one point read); assigning is O(1) and marks the one slot dirty.
    """

    kind = "value"
    _handle_bytes = 700
    has_meta = False
    __slots__ = ("_value",)
    _value: Any

    @classmethod
    def _fresh(cls, space, name, nkey, codec):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=True)
        self._flags |= F_VALUE
        self._value = None
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=False)
        self._value = MISSING
        return self

    @property
    def value(self) -> Any:
        """The stored value. O(1); the first read of a loaded value is one point read."""
        if self._dead:
            self._raise_dead()
        v = self._value
        if v is MISSING:
            raw = self._space._db.get(self._items)
            if raw is None:
                raise CorruptionError(f"value {self._name!r} has an index entry but no value record")
            v = self._value = self._codec.decode(raw)
        return v

    @value.setter
    def value(self, v: Any) -> None:
        if not self._listed:
            self._touch()
        self._value = v
        self._flags |= F_VALUE

    def get(self) -> Any:
        """Same as ``.value``."""
        return self.value

    def set(self, v: Any) -> None:
        """Same as ``.value = v``. O(1); marks the slot dirty."""
        self.value = v

    def exists(self) -> bool:
        """True when the value is set: not deleted and holding something other than None,
        as Spark's ``ValueState.exists`` (a value created without one, e.g. spark_ops'
        ``ctx.value(name)``, or cleared, does not exist; one created with a default
        does). O(1); no I/O unless the value was loaded from the store and not read yet
        (then one point read, as ``.value``)."""
        return not self._dead and self.value is not None

    def clear(self) -> None:
        """Unset the value (``.value = None``): ``exists()`` is False after it, as after
        Spark's ``ValueState.clear``. The object stays in its space (``space.delete`` removes
        it). O(1); marks the slot dirty."""
        self.value = None

    def _repr_len(self):
        return 1

    _twin_name = "copy of its value"

    def copy(self) -> Any:
        """A plain copy of the value (lists, dicts, sets and tuples in it copied too)."""
        return plain(self.value)

    def _mem_estimate(self, item_bytes: int) -> int:
        return self._handle_bytes + (0 if self._value is MISSING else item_bytes)

    def _evict_clean(self) -> None:
        if not (self._flags | self._pflags) & F_VALUE:
            v = self._value
            if self._space._inplace is not None and v is not MISSING and keep_changed(self, [(None, v)]):
                return
            self._value = MISSING

    def _inplace_values(self, immutable: frozenset) -> list:
        v = self._value
        if v is MISSING or type(v) in immutable or (self._flags | self._pflags) & F_VALUE:
            return []
        return [(None, v)]

    def _inplace_key(self, slot) -> bytes:
        return self._items

    def _inplace_mark(self, slot) -> None:
        self._touch()
        self._flags |= F_VALUE

    def _inplace_where(self, slots: list) -> list:
        return [("value", "assign it back: v.value = v.value")]

    def _collect_items(self, out: list, full: bool) -> None:
        if full or (self._flags | self._pflags) & F_VALUE:
            out.append((self._items, self._encode(self.value, "value")))

    def _meta(self) -> list:
        return []


class PersistedArray(SlotSequence, Sequence):
    """A fixed-length sequence with item assignment (like a list that cannot grow).

    ``a[i]`` is O(1) (one point read when not cached); ``a[i] = x`` is O(1) and marks one
    slot dirty. Creating an array of length n marks n slots dirty (every slot is stored).
    Raises IndexError out of range; slice assignment must keep the length (ValueError).
    """

    kind = "array"
    __slots__ = ()
    _inplace_var = "a"

    @classmethod
    def _fresh(cls, space, name, nkey, codec, length: int = 0, fill_value=None):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=True)
        self._init_slots(0, length, fresh=True)
        self._vals = dict.fromkeys(range(length), fill_value)
        self._dirty = set(range(length))
        return self

    def __getitem__(self, i):
        """O(1) per item; a slice of k items is O(k)."""
        if type(i) is int and 0 <= i < self._tail and not self._dead:
            v = self._vals.get(i, MISSING)
            if v is not MISSING:
                return v
        if self._dead:
            self._raise_dead()
        if isinstance(i, slice):
            return [self._get_slot(s) for s in range(*i.indices(self._tail))]
        return self._get_slot(self._index(i.__index__()))

    def __setitem__(self, i, value) -> None:
        """O(1) per item; marks each assigned slot dirty."""
        if isinstance(i, slice):
            slots = range(*i.indices(self._tail))
            values = list(value)
            if len(values) != len(slots):
                raise ValueError(f"cannot resize an array: slice of {len(slots)} "
                                 f"assigned {len(values)} values")
            for s, v in zip(slots, values):
                self._set_slot(s, v)
            return
        self._set_slot(self._index(i.__index__()), value)

    def __iter__(self):
        """O(n); streams slots not in memory from the store."""
        if self._dead:
            self._raise_dead()
        return self._iter_slots(0, self._tail)

    def fill(self, value: Any) -> None:
        """Assign value to every slot. O(n); marks n slots dirty."""
        for s in range(self._tail):
            self._set_slot(s, value)
