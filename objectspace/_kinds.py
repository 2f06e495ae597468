"""create_<kind>, get_<kind> and get_or_create_<kind> for every kind (mixed into ObjectSpace).

create_<kind> raises AlreadyExistsError (a ValueError) when the name exists; get_<kind>
raises ObjectNotFoundError (a KeyError) when it does not and KindMismatchError (a
TypeError) when it is another kind or codec. get costs one point read unless the object
is in memory (its metadata record, which names kind and codec; a value's index entry);
items load on demand.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._dict import PersistedDict, PersistedSortedDict
from ._linked import PersistedLinkedList
from ._list import PersistedList
from ._ndarray import PersistedNDArray
from ._ndlayout import check_params
from ._queue import PersistedQueue, PersistedStack, check_maxlen
from ._set import PersistedSet, PersistedSortedSet
from ._stream import PersistedStream
from ._value import PersistedArray, PersistedValue

if TYPE_CHECKING:
    from numpy.typing import DTypeLike

    from ._types import Name

KIND_CLASSES = {cls.kind: cls for cls in (
    PersistedValue, PersistedArray, PersistedList, PersistedQueue, PersistedStack,
    PersistedLinkedList, PersistedSet, PersistedSortedSet, PersistedDict, PersistedSortedDict,
    PersistedStream, PersistedNDArray)}


def _extend(items):
    items = list(items)
    return (lambda obj: obj.extend(items)) if items else None


def _update(items):
    items = list(items.items() if hasattr(items, "items") else items)

    def fill(obj):
        for k, v in items:
            obj[k] = v
    return fill if items else None


def _add_all(items):
    items = list(items)
    return (lambda obj: obj.update(items)) if items else None


class KindMethods:
    """The per-kind factory methods of ObjectSpace."""

    __slots__ = ()

    # value
    def create_value(self, name: Name, value: Any = None, *, codec: str = "msgpack") -> PersistedValue:
        """A new value holding ``value``; one record."""
        def fill(obj):
            obj.value = value
        return self._create(name, "value", codec, fill)

    def get_value(self, name: Name, *, codec: str | None = None) -> PersistedValue:
        """The value called name: one point read (its index entry) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "value", codec)

    def get_or_create_value(self, name: Name, value: Any = None, *, codec: str = "msgpack") -> PersistedValue:
        """The value called name, created holding ``value`` if absent."""
        return self._get_or_create(name, "value", codec, lambda: self.create_value(name, value, codec=codec))

    # array
    def create_array(self, name: Name, length: int, fill: Any = None, *, codec: str = "msgpack") -> PersistedArray:
        """A new fixed-length array of ``length`` slots set to ``fill`` (all n slots dirty)."""
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            raise ValueError(f"array length must be an int >= 0, got {length!r}")
        return self._create(name, "array", codec, None, length=length, fill_value=fill)

    def get_array(self, name: Name, *, codec: str | None = None) -> PersistedArray:
        """The array called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "array", codec)

    def get_or_create_array(self, name: Name, length: int, fill: Any = None,
                            *, codec: str = "msgpack") -> PersistedArray:
        """The array called name, created with these arguments if absent."""
        return self._get_or_create(name, "array", codec, lambda: self.create_array(name, length, fill, codec=codec))

    # list
    def create_list(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedList:
        """A new list holding ``items`` (each one slot dirty). Raises AlreadyExistsError."""
        return self._create(name, "list", codec, _extend(items))

    def get_list(self, name: Name, *, codec: str | None = None) -> PersistedList:
        """The list called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "list", codec)

    def get_or_create_list(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedList:
        """The list called name, created with these arguments if absent."""
        return self._get_or_create(name, "list", codec, lambda: self.create_list(name, items, codec=codec))

    # queue
    def create_queue(self, name: Name, items: Iterable[Any] = (),
                     *, codec: str = "msgpack", maxlen: int | None = None) -> PersistedQueue:
        """A new queue holding ``items`` (each one slot dirty). Raises AlreadyExistsError.
        ``maxlen`` bounds it as it bounds a deque (appending to a full queue drops an item
        from the other end; only the last ``maxlen`` of ``items`` are kept); it is stored
        with the queue (metadata ``[head, tail, maxlen]``) and read-only, as a deque's."""
        maxlen = check_maxlen(maxlen)
        return self._create(name, "queue", codec, _extend(items), maxlen=maxlen)

    def get_queue(self, name: Name, *, codec: str | None = None) -> PersistedQueue:
        """The queue called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "queue", codec)

    def get_or_create_queue(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack",
                            maxlen: int | None = None) -> PersistedQueue:
        """The queue called name, created with these arguments if absent (a queue that
        exists keeps its own maxlen)."""
        return self._get_or_create(name, "queue", codec,
                                   lambda: self.create_queue(name, items, codec=codec, maxlen=maxlen))

    # stack
    def create_stack(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedStack:
        """A new stack; ``items`` are pushed in order (the last ends on top)."""
        return self._create(name, "stack", codec, _extend(items))

    def get_stack(self, name: Name, *, codec: str | None = None) -> PersistedStack:
        """The stack called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "stack", codec)

    def get_or_create_stack(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedStack:
        """The stack called name, created with these arguments if absent."""
        return self._get_or_create(name, "stack", codec, lambda: self.create_stack(name, items, codec=codec))

    # linked list
    def create_linked_list(self, name: Name, items: Iterable[Any] = (),
                           *, codec: str = "msgpack") -> PersistedLinkedList:
        """A new linked list holding ``items`` (each one slot dirty). Raises AlreadyExistsError."""
        items = list(items)

        def fill(obj):
            for v in items:
                obj.add_last(v)
        return self._create(name, "linked_list", codec, fill if items else None)

    def get_linked_list(self, name: Name, *, codec: str | None = None) -> PersistedLinkedList:
        """The linked list called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "linked_list", codec)

    def get_or_create_linked_list(self, name: Name, items: Iterable[Any] = (),
                                  *, codec: str = "msgpack") -> PersistedLinkedList:
        """The linked list called name, created with these arguments if absent."""
        return self._get_or_create(name, "linked_list", codec,
                                   lambda: self.create_linked_list(name, items, codec=codec))

    # set
    def create_set(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedSet:
        """A new set holding ``items`` (each one slot dirty). Raises AlreadyExistsError."""
        return self._create(name, "set", codec, _add_all(items))

    def get_set(self, name: Name, *, codec: str | None = None) -> PersistedSet:
        """The set called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "set", codec)

    def get_or_create_set(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedSet:
        """The set called name, created with these arguments if absent."""
        return self._get_or_create(name, "set", codec, lambda: self.create_set(name, items, codec=codec))

    # sorted set
    def create_sorted_set(self, name: Name, items: Iterable[Any] = (), *, codec: str = "msgpack") -> PersistedSortedSet:
        """A new sorted set holding ``items`` (each one slot dirty). Raises AlreadyExistsError."""
        return self._create(name, "sorted_set", codec, _add_all(items))

    def get_sorted_set(self, name: Name, *, codec: str | None = None) -> PersistedSortedSet:
        """The sorted set called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "sorted_set", codec)

    def get_or_create_sorted_set(self, name: Name, items: Iterable[Any] = (),
                                 *, codec: str = "msgpack") -> PersistedSortedSet:
        """The sorted set called name, created with these arguments if absent."""
        return self._get_or_create(name, "sorted_set", codec,
                                   lambda: self.create_sorted_set(name, items, codec=codec))

    # dict
    def create_dict(self, name: Name, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (),
                    *, codec: str = "msgpack") -> PersistedDict:
        """A new dict filled from a mapping or (key, value) pairs."""
        return self._create(name, "dict", codec, _update(items))

    def get_dict(self, name: Name, *, codec: str | None = None) -> PersistedDict:
        """The dict called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "dict", codec)

    def get_or_create_dict(self, name: Name, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (),
                           *, codec: str = "msgpack") -> PersistedDict:
        """The dict called name, created with these arguments if absent."""
        return self._get_or_create(name, "dict", codec, lambda: self.create_dict(name, items, codec=codec))

    # sorted dict
    def create_sorted_dict(self, name: Name, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (),
                           *, codec: str = "msgpack") -> PersistedSortedDict:
        """A new sorted dict holding ``items`` (each one slot dirty). Raises AlreadyExistsError."""
        return self._create(name, "sorted_dict", codec, _update(items))

    def get_sorted_dict(self, name: Name, *, codec: str | None = None) -> PersistedSortedDict:
        """The sorted dict called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "sorted_dict", codec)

    def get_or_create_sorted_dict(self, name: Name, items: Mapping[Any, Any] | Iterable[tuple[Any, Any]] = (),
                                  *, codec: str = "msgpack") -> PersistedSortedDict:
        """The sorted dict called name, created with these arguments if absent."""
        return self._get_or_create(name, "sorted_dict", codec,
                                   lambda: self.create_sorted_dict(name, items, codec=codec))

    # stream
    def create_stream(self, name: Name, *, codec: str = "msgpack") -> PersistedStream:
        """A new empty stream (Redis Streams semantics)."""
        return self._create(name, "stream", codec, None)

    def get_stream(self, name: Name, *, codec: str | None = None) -> PersistedStream:
        """The stream called name: one point read (its metadata) unless in memory.
        Raises ObjectNotFoundError (a KeyError) or KindMismatchError (a TypeError)."""
        return self._lookup(name, "stream", codec)

    def get_or_create_stream(self, name: Name, *, codec: str = "msgpack") -> PersistedStream:
        """The stream called name, created with these arguments if absent."""
        return self._get_or_create(name, "stream", codec, lambda: self.create_stream(name, codec=codec))

    # n-dimensional array
    def create_ndarray(self, name: Name, shape: int | Iterable[int], dtype: DTypeLike,
                       chunks: int | Iterable[int] | None = None, fill_value: Any = 0) -> PersistedNDArray:
        """A new chunked numpy-style array of ``shape`` and ``dtype`` (bool, int, uint,
        float up to 64 bits, complex up to 128), every cell ``fill_value``. ``chunks`` is
        the shape of a chunk, the unit saved and loaded (default: about 64 KiB, the
        trailing axes whole when they fit). O(1): nothing is stored but the metadata until
        cells other than the fill value are written. Raises AlreadyExistsError; TypeError /
        ValueError for a bad shape, chunks or fill value; EncodingError (a TypeError) for a
        dtype that cannot be stored (object, str, structured, datetime, float128)."""
        return self._create(name, "ndarray", "msgpack", None, **check_params(name, shape, dtype, chunks, fill_value))

    def get_ndarray(self, name: Name) -> PersistedNDArray:
        """The ndarray called name: one point read (its metadata) unless in memory; chunks
        load as indices cover them. Raises ObjectNotFoundError (a KeyError) or KindMismatchError
        (a TypeError)."""
        return self._lookup(name, "ndarray", None)

    def get_or_create_ndarray(self, name: Name, shape: int | Iterable[int], dtype: DTypeLike,
                              chunks: int | Iterable[int] | None = None, fill_value: Any = 0) -> PersistedNDArray:
        """The ndarray called name, created with these arguments if absent (one that exists
        keeps its own shape, dtype, chunks and fill value)."""
        return self._get_or_create(name, "ndarray", "msgpack", lambda: self.create_ndarray(
            name, shape, dtype, chunks=chunks, fill_value=fill_value))
