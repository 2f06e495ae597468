"""PersistedQueue (FIFO, deque-like) and PersistedStack (LIFO).

A queue's items live in slots head..tail-1 and its metadata is ``[head, tail]``: an append
writes one slot and the metadata, a popleft deletes one slot and writes the metadata, so a
differential save of k appends writes k items plus one small record. Slots are never
reused (head and tail only grow), and 8-byte slots last 2**64 appends.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Collection, Sequence

from ._base import F_META, MISSING, plain
from ._slots import SlotSequence


class PersistedQueue(SlotSequence, Sequence):
    """A persisted FIFO queue with the deque verbs it needs.

    append/enqueue O(1) (one slot dirty + metadata); popleft/dequeue O(1) (one slot
    deleted at save + metadata); ``q[i]`` O(1); iteration O(n), streaming from the store
    when the queue is larger than the cache. IndexError on an empty queue.
    """

    kind = "queue"
    __slots__ = ()
    _twin_name = "deque"

    def copy(self) -> deque:
        """A plain ``collections.deque`` of the items, oldest first (see PersistedObject.copy)."""
        self._check()
        return deque(map(plain, self))

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=False)
        self._init_slots(meta[0], meta[1], fresh=False)
        return self

    def _meta(self) -> list:
        return [self._head, self._tail]

    def append(self, value) -> None:
        """Add at the tail. O(1); one slot dirty plus the metadata."""
        if not self._listed:
            self._touch()
        t = self._tail
        self._vals[t] = value
        self._dirty.add(t)
        self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    enqueue = append

    def extend(self, values) -> None:
        """Append each value. O(k)."""
        for v in list(values):
            self.append(v)

    def popleft(self):
        """Remove and return the head. O(1); the slot is deleted at save (unless it was
        appended since the last save: then it is never written at all)."""
        h = self._head
        if h == self._tail:
            raise IndexError("pop from an empty queue")
        if not self._listed:
            self._touch()
        v = self._vals.pop(h, MISSING)
        if v is MISSING:
            v = self._fetch(h)
            self._vals.pop(h, None)
        self._dirty.discard(h)
        self._pending.discard(h)
        self._head = h + 1
        self._flags |= F_META
        self._version += 1
        return v

    dequeue = popleft

    def pop(self):
        """Remove and return the tail item (deque.pop). O(1)."""
        t = self._tail - 1
        if t < self._head:
            raise IndexError("pop from an empty queue")
        if not self._listed:
            self._touch()
        v = self._get_slot(t)
        self._drop_slot(t)
        self._tail = t
        self._flags |= F_META
        self._version += 1
        return v

    def peek(self):
        """The head without removing it. O(1). Raises IndexError when empty."""
        if self._head == self._tail:
            raise IndexError("peek at an empty queue")
        return self._get_slot(self._head)

    def clear(self) -> None:
        """Remove everything. O(1) now; the save deletes the stored slots."""
        if not self._listed:
            self._touch()
        self._vals = {}
        self._dirty = set()
        self._pending = set()
        self._head = self._tail
        self._complete = True
        self._flags |= F_META
        self._version += 1

    def _slot_at(self, i: int) -> int:
        n = self._tail - self._head
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("queue index out of range")
        return self._head + i

    def __getitem__(self, i):
        """``q[0]`` is the head, ``q[-1]`` the tail. O(1)."""
        if type(i) is int and 0 <= i < self._tail - self._head and not self._dead:
            v = self._vals.get(self._head + i, MISSING)
            if v is not MISSING:
                return v
        if self._dead:
            self._raise_dead()
        if isinstance(i, slice):
            return [self._get_slot(self._head + j) for j in range(*i.indices(len(self)))]
        return self._get_slot(self._slot_at(i.__index__()))

    def __setitem__(self, i: int, value) -> None:
        """Replace the i-th item. O(1); one slot dirty."""
        self._set_slot(self._slot_at(i.__index__()), value)

    def __iter__(self):
        """Head to tail. O(n)."""
        if self._dead:
            self._raise_dead()
        return self._iter_slots(self._head, self._tail)

    def __reversed__(self):
        """Tail to head. O(n) (loads the queue)."""
        if self._dead:
            self._raise_dead()
        return reversed(self._all_values())


class PersistedStack(SlotSequence, Collection):
    """A persisted LIFO stack; iteration goes from the top down.

    push O(1) (one slot dirty + length), pop O(1) (slot deleted at save unless pushed
    since the last save), peek O(1). IndexError on an empty stack.
    """

    kind = "stack"
    __slots__ = ()

    def push(self, value) -> None:
        """Put value on top. O(1); one slot dirty plus the length."""
        if not self._listed:
            self._touch()
        t = self._tail
        self._vals[t] = value
        self._dirty.add(t)
        self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    def extend(self, values) -> None:
        """Push each value in order (the last ends on top). O(k)."""
        for v in list(values):
            self.push(v)

    def pop(self):
        """Remove and return the top. O(1)."""
        t = self._tail - 1
        if t < 0:
            raise IndexError("pop from an empty stack")
        if not self._listed:
            self._touch()
        v = self._get_slot(t)
        self._drop_slot(t)
        self._tail = t
        self._flags |= F_META
        self._version += 1
        return v

    def peek(self):
        """The top without removing it. O(1)."""
        if not self._tail:
            raise IndexError("peek at an empty stack")
        return self._get_slot(self._tail - 1)

    def clear(self) -> None:
        """Remove everything. O(1) now; the save deletes the stored slots."""
        if not self._listed:
            self._touch()
        self._vals = {}
        self._dirty = set()
        self._pending = set()
        self._tail = 0
        self._complete = True
        self._flags |= F_META
        self._version += 1

    def __iter__(self):
        """Top to bottom. O(n) (loads the stack)."""
        if self._dead:
            self._raise_dead()
        return reversed(self._all_values())

    def __contains__(self, value) -> bool:
        return any(v is value or v == value for v in self)
