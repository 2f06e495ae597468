"""PersistedQueue (a persisted ``collections.deque``) and PersistedStack (LIFO).

A queue's items live in slots head..tail-1 and its metadata is ``[head, tail]`` (``[head,
tail, maxlen]`` for a bounded queue): an append writes one slot and the metadata, a
popleft deletes one slot and writes the metadata, so a differential save of k appends
writes k items plus one small record. ``appendleft`` takes slot head-1; when the queue
starts at slot 0 (every queue is created there), the first ``appendleft`` moves the items
up once (O(n), every item rewritten) to leave room below them, at least as much room as
there are items, so appending on the left is O(1) amortised. 8-byte slots last 2**64
appends.
"""
from __future__ import annotations

import operator
from collections import deque
from collections.abc import Collection, Iterable, Sequence
from typing import Any
from operator import eq, ge, gt, le, lt, ne

from ._base import F_META, MISSING, plain
from ._slots import SlotSequence, repeat_in_place

_ROOM = 64      # least room left below the items when they move up for appendleft


def _queue_index(i) -> int:
    try:
        return operator.index(i)
    except TypeError:
        raise TypeError(f"queue indices must be integers, not {type(i).__name__}") from None


def check_maxlen(maxlen):
    """None or an int >= 0 (TypeError, ValueError otherwise), as deque checks it."""
    if maxlen is None:
        return None
    maxlen = operator.index(maxlen)
    if maxlen < 0:
        raise ValueError("maxlen must be non-negative")
    return maxlen


class PersistedQueue(SlotSequence, Sequence):
    """A persisted ``collections.deque``: the deque's verbs with a deque's semantics.

    append/popleft/pop O(1) (one slot dirty or deleted at save, plus the metadata);
    appendleft O(1) amortised; ``q[i]`` O(1); ``insert``, ``del q[i]`` O(min(i, n-i));
    ``rotate(k)`` O(min(k, n-k)); iteration O(n), streaming from the store when the queue
    is larger than the cache. IndexError on an empty queue. ``maxlen`` is given when the
    queue is created (``space.create_queue(name, items, maxlen=...)``) and stored with it;
    it is read-only, as a deque's (``q.__init__(items, maxlen)`` remakes the queue).

    Like a deque it is unhashable, equals a deque or another PersistedQueue with equal
    items (never a list) and orders like one, and its iterators raise RuntimeError once
    the queue changes (an item added, removed or moved). Results that are new collections
    (``q + other``, ``q * n``, ``copy()``) are plain deques: a persisted one would need a
    name.
    """

    kind = "queue"
    __slots__ = ("_maxlen",)
    _inplace_var = "q"
    _twin_name = "deque"
    __hash__ = None     # mutable, like deque

    def __init__(self, iterable: Iterable[Any] = (), maxlen: int | None = None) -> None:
        """``q.__init__(items, maxlen)`` empties the queue and fills it again, as
        ``deque.__init__`` does (O(n): the stored items are deleted at save, the new ones
        written). (Queues are made by a space: ``space.create_queue(name, items)``.)"""
        try:
            self._space
        except AttributeError:
            raise TypeError("a PersistedQueue is made by a space: space.create_queue(name, items)") from None
        maxlen = check_maxlen(maxlen)
        items = list(iterable) if iterable is not self else self._all_values()
        self.clear()
        self._set_maxlen(maxlen)
        self.extend(items)

    def _set_maxlen(self, maxlen) -> None:
        if maxlen != self._maxlen:
            self._maxlen = maxlen
            self.__class__ = PersistedQueue if maxlen is None else _BoundedQueue
            if not self._listed:
                self._touch()
            self._flags |= F_META

    @property
    def maxlen(self) -> int | None:
        """The bound of the queue (None: unbounded), as ``deque.maxlen``. Read-only."""
        return self._maxlen

    def copy(self) -> deque:
        """A plain ``collections.deque`` of the items, oldest first, with the same maxlen
        (see PersistedObject.copy: it shares nothing with the queue). O(n)."""
        self._check()
        return deque(map(plain, self), self._maxlen)

    @classmethod
    def _fresh(cls, space, name, nkey, codec, maxlen=None):
        self = cls.__new__(cls if maxlen is None else _BoundedQueue)
        self._init_base(space, name, nkey, codec, fresh=True)
        self._init_slots(0, 0, fresh=True)
        self._maxlen = maxlen
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        bounded = len(meta) > 2
        self = cls.__new__(_BoundedQueue if bounded else cls)
        self._init_base(space, None, nkey, codec, fresh=False)     # the name: from nkey (see _base._name)
        self._init_slots(meta[0], meta[1], fresh=False)
        self._maxlen = meta[2] if bounded else None
        return self

    def _meta(self) -> list:
        return [self._head, self._tail]

    # -- the right end --------------------------------------------------------------------

    def append(self, value: Any) -> None:
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

    def extend(self, values: Iterable[Any]) -> None:
        """Append each value. O(k) for k values. ``q.extend(q)`` doubles the queue."""
        if values is self:
            values = self._all_values()
        append = self.append
        for v in values:
            append(v)

    def pop(self) -> Any:
        """Remove and return the tail item (deque.pop). O(1)."""
        if self._tail <= self._head:
            raise IndexError("pop from an empty queue")
        return self._pop_tail()

    # -- the left end ---------------------------------------------------------------------

    def popleft(self) -> Any:
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

    def appendleft(self, value: Any) -> None:
        """Add at the head. O(1) amortised: one slot dirty plus the metadata; when the
        queue starts at slot 0, its n items first move up (O(n), n slots rewritten and n
        deleted at save), leaving room for at least n more."""
        h = self._head
        if not h:
            self._room_left(1)
            h = self._head
        elif not self._listed:
            self._touch()
        h -= 1
        self._vals[h] = value
        self._dirty.add(h)
        if h < self._lo:
            self._lo = h        # the store may hold this slot once a save carries it
        self._head = h
        self._flags |= F_META
        self._version += 1

    def extendleft(self, values: Iterable[Any]) -> None:
        """appendleft each value (so they end in reverse order). O(k) amortised."""
        if values is self:
            values = self._all_values()
        appendleft = self.appendleft
        for v in values:
            appendleft(v)

    def peek(self) -> Any:
        """The head without removing it. O(1). Raises IndexError when empty."""
        if self._head == self._tail:
            raise IndexError("peek at an empty queue")
        return self._get_slot(self._head)

    # -- the middle -----------------------------------------------------------------------

    def rotate(self, n: int = 1) -> None:
        """Rotate n steps to the right (negative: to the left), as ``deque.rotate``.
        O(min(k, len - k)) for k = n mod len: that many items move from one end to the
        other (one slot written and one deleted at save per item)."""
        n = operator.index(n)
        size = self._tail - self._head
        if size <= 1:
            return
        k = n % size
        if not k:
            return
        if k <= size - k:
            for _ in range(k):
                self.appendleft(self.pop())
        else:
            for _ in range(size - k):
                self.append(self.popleft())

    def insert(self, i: int, value: Any) -> None:
        """Insert value before position i (as ``list.insert``). O(min(i, n-i)): the items
        on the shorter side of i shift one slot, each rewritten."""
        i = operator.index(i)
        n = self._tail - self._head
        if i < 0:
            i = max(0, i + n)
        i = min(i, n)
        if i < n - i:                       # shift the first i items one slot left
            if not self._head:
                self._room_left(1)
            elif not self._listed:
                self._touch()
            h = self._head
            self._load_range(h, h + i)
            vals, dirty = self._vals, self._dirty
            for s in range(h - 1, h + i - 1):
                vals[s] = vals[s + 1]
                dirty.add(s)
            vals[h + i - 1] = value
            dirty.add(h + i - 1)
            self._head = h - 1
            if h - 1 < self._lo:
                self._lo = h - 1
        else:                               # shift the last n-i items one slot right
            if not self._listed:
                self._touch()
            h, t = self._head, self._tail
            self._load_range(h + i, t)
            vals, dirty = self._vals, self._dirty
            for s in range(t, h + i, -1):
                vals[s] = vals[s - 1]
                dirty.add(s)
            vals[h + i] = value
            dirty.add(h + i)
            self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    def __delitem__(self, i) -> None:
        """``del q[i]``: O(min(i, n-i)): the items on the shorter side of i shift one slot,
        each rewritten, and the slot they leave is deleted at save."""
        j = self._slot_at(_queue_index(i)) - self._head
        if not self._listed:
            self._touch()
        h, t = self._head, self._tail
        vals, dirty = self._vals, self._dirty
        if j < t - h - 1 - j:               # shift the first j items one slot right
            self._load_range(h, h + j)
            for s in range(h + j, h, -1):
                vals[s] = vals[s - 1]
                dirty.add(s)
            self._drop_slot(h)
            self._head = h + 1
        else:                               # shift the items after j one slot left
            self._load_range(h + j + 1, t)
            for s in range(h + j, t - 1):
                vals[s] = vals[s + 1]
                dirty.add(s)
            self._drop_slot(t - 1)
            self._tail = t - 1
        self._flags |= F_META
        self._version += 1

    def remove(self, value: Any) -> None:
        """Remove the first item equal to value (ValueError if none), as ``deque.remove``:
        a comparison that changes the queue raises IndexError. O(n) to find it, then
        O(min(i, n-i)) like ``del q[i]``."""
        version = self._version
        for j, v in enumerate(self._iter_slots(self._head, self._tail, version)):
            found = v is value or v == value
            if self._version != version:
                raise IndexError(f"{self.kind} mutated during remove()")
            if found:
                del self[j]
                return
        raise ValueError(f"{self.kind}.remove(x): x not in {self.kind}")

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """Position of the first item equal to value in [start, stop) (ValueError if none;
        RuntimeError if a comparison changes the queue). O(n)."""
        n = self._tail - self._head
        start = operator.index(start)
        stop = n if stop is None else operator.index(stop)
        if start < 0:
            start = max(0, start + n)
        if stop < 0:
            stop = max(0, stop + n)
        stop = min(stop, n)
        if start >= stop:
            raise ValueError(f"{value!r:.80} is not in {self.kind}")
        version = self._version
        h = self._head
        for j, v in enumerate(self._iter_slots(h + start, h + stop, version), start):
            found = v is value or v == value
            if self._version != version:
                raise RuntimeError(f"{self.kind} mutated during iteration")
            if found:
                return j
        raise ValueError(f"{value!r:.80} is not in {self.kind}")

    def reverse(self) -> None:
        """Reverse in place. O(n); dirties the slots whose item changed."""
        items = self._all_values()
        items.reverse()
        self._touch()
        vals, dirty = self._vals, self._dirty
        for s, v in zip(range(self._head, self._tail), items):
            if vals[s] is not v:
                vals[s] = v
                dirty.add(s)

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

    def _room_left(self, k: int) -> None:
        """Make room for k slots below the head: the items move up to start at slot
        max(k, n, _ROOM). O(n): every item rewritten, the old slots deleted at save."""
        items = self._all_values()
        if not self._listed:
            self._touch()
        h, t = self._head, self._tail
        new_h = max(k, len(items), _ROOM, h)
        if new_h == h:
            return
        vals, dirty = self._vals, self._dirty
        for s in range(h, t):
            self._drop_slot(s)
        for s, v in enumerate(items, new_h):
            vals[s] = v
            dirty.add(s)
        self._head, self._tail = new_h, new_h + len(items)
        self._flags |= F_META
        self._version += 1

    # -- indexing -------------------------------------------------------------------------

    def _slot_at(self, i: int) -> int:
        n = self._tail - self._head
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("queue index out of range")
        return self._head + i

    def __getitem__(self, i):
        """``q[0]`` is the head, ``q[-1]`` the tail. O(1). A slice gives a list."""
        if type(i) is int and 0 <= i < self._tail - self._head and not self._dead:
            v = self._vals.get(self._head + i, MISSING)
            if v is not MISSING:
                return v
        if self._dead:
            self._raise_dead()
        if isinstance(i, slice):
            return [self._get_slot(self._head + j) for j in range(*i.indices(len(self)))]
        return self._get_slot(self._slot_at(_queue_index(i)))

    def __setitem__(self, i: int, value) -> None:
        """Replace the i-th item. O(1); one slot dirty."""
        self._set_slot(self._slot_at(_queue_index(i)), value)

    def __iter__(self):
        """Head to tail. O(n). Raises RuntimeError once the queue changes (as a deque's
        iterator does), even after it reached the end."""
        if self._dead:
            self._raise_dead()
        return self._iter_slots(self._head, self._tail, self._version)

    def __reversed__(self):
        """Tail to head. O(n) (loads the queue)."""
        if self._dead:
            self._raise_dead()
        return reversed(self._all_values())

    # -- comparisons and operators --------------------------------------------------------
    # Comparable with deques and PersistedQueues only, as a deque is with deques only.

    def __eq__(self, other):
        """O(n), stops at the first difference (or at once when the lengths differ)."""
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, eq)
        return NotImplemented

    def __ne__(self, other):
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, ne)
        return NotImplemented

    def __lt__(self, other):
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, lt)
        return NotImplemented

    def __le__(self, other):
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, le)
        return NotImplemented

    def __gt__(self, other):
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, gt)
        return NotImplemented

    def __ge__(self, other):
        if isinstance(other, (deque, PersistedQueue)):
            return self._richcmp(other, ge)
        return NotImplemented

    def __add__(self, other):
        """``q + other`` (a deque or PersistedQueue): a plain deque with q's maxlen. O(n + m)."""
        if isinstance(other, (deque, PersistedQueue)):
            d = deque(self._all_values(), self._maxlen)
            d.extend(other)
            return d
        return NotImplemented

    def __radd__(self, other):
        """``deque + q``: a plain deque with the left deque's maxlen. O(n + m)."""
        if isinstance(other, deque):
            d = deque(other, other.maxlen)
            d.extend(self._all_values())
            return d
        return NotImplemented

    def __iadd__(self, values):
        """``q += values`` extends in place. O(k)."""
        self.extend(values)
        return self

    def __mul__(self, n):
        """``q * n``: a plain deque with q's maxlen. O(len * n); writes nothing."""
        try:
            n = operator.index(n)
        except TypeError:
            return NotImplemented
        return deque(self._all_values() * max(n, 0), self._maxlen)

    __rmul__ = __mul__

    __imul__ = repeat_in_place


class _BoundedQueue(PersistedQueue):
    """A PersistedQueue with a maxlen (a separate class, so the unbounded queue's append
    pays nothing for the bound): appending to a full queue drops an item from the other
    end, as a bounded deque does."""

    __slots__ = ()

    def _meta(self) -> list:
        return [self._head, self._tail, self._maxlen]

    def append(self, value) -> None:
        """Add at the tail, first dropping the head when full. O(1)."""
        m = self._maxlen
        if self._tail - self._head >= m:
            if not m:
                return
            self.popleft()
        PersistedQueue.append(self, value)

    enqueue = append

    def appendleft(self, value) -> None:
        """Add at the head, first dropping the tail when full. O(1) amortised."""
        m = self._maxlen
        if self._tail - self._head >= m:
            if not m:
                return
            self.pop()
        PersistedQueue.appendleft(self, value)

    def insert(self, i: int, value) -> None:
        """As PersistedQueue.insert; IndexError when the queue is full (as a deque)."""
        if self._tail - self._head >= self._maxlen:
            raise IndexError(f"{self.kind} already at its maximum size")
        PersistedQueue.insert(self, i, value)


_BoundedQueue.__name__ = "PersistedQueue"      # its repr: a bounded queue is a PersistedQueue


class PersistedStack(SlotSequence, Collection):
    """A persisted LIFO stack; iteration goes from the top down.

    push O(1) (one slot dirty + length), pop O(1) (slot deleted at save unless pushed
    since the last save), peek O(1). IndexError on an empty stack.
    """

    kind = "stack"
    __slots__ = ()

    def push(self, value: Any) -> None:
        """Put value on top. O(1); one slot dirty plus the length."""
        if not self._listed:
            self._touch()
        t = self._tail
        self._vals[t] = value
        self._dirty.add(t)
        self._tail = t + 1
        self._flags |= F_META
        self._version += 1

    def extend(self, values: Iterable[Any]) -> None:
        """Push each value in order (the last ends on top). O(k)."""
        for v in list(values):
            self.push(v)

    def pop(self) -> Any:
        """Remove and return the top. O(1)."""
        if self._tail <= 0:
            raise IndexError("pop from an empty stack")
        return self._pop_tail()

    def peek(self) -> Any:
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

    def _inplace_where(self, slots: list) -> list:
        out = []
        for s in slots:
            depth = self._tail - 1 - s
            out.append(("top item", "assign it back: s.push(s.pop())") if not depth else
                       (f"item {depth} below the top", f"pop it and the {depth} item(s) above it, then push "
                        f"them back (a stack rewrites an item only from its top)"))
        return out
