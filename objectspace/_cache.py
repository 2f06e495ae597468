"""ObjectCache: the memory budget of clean objects, in bytes, shared by one or more spaces.

An object that is clean (nothing unsaved) stays in memory after use, with the items it
loaded or wrote, until the budget is spent; then the least recently saved or looked-up
objects are dropped (their handles reload from the store on next use, one point read).
Sizes are estimates: a handle's cost, measured for its kind, plus a cost per cached item,
learned from the encoded size of the records the spaces save (a 40-byte msgpack row is a
~400-byte Python dict). Dirty objects are never dropped: spark_ops saves them early when a
batch is large (see spark_ops/_runtime.py), and a notebook bounds them by checkpointing.

    >>> cache = ObjectCache(64 << 20)          # share it: ObjectSpace(db, prefix, cache=cache)
"""
from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._base import PersistedObject
    from .space import ObjectSpace

OBJECT_BYTES = 1200       # a handle: the object, its name and key bytes, its containers (each kind
                          # sets its own _handle_bytes, measured; this is the default)
LEAST_HANDLE_BYTES = 700  # the cheapest kind's handle (a value's; tests/objectspace/test_cache.py checks it)
ITEM_BYTES = 100          # per cached item, besides the value's own estimate
DEFAULT_ITEM = 400        # per-item cost before any save has been seen
SAMPLE = 32               # records sampled per save to learn the item cost

_EVICT = None
"""``objectspace._native.evict``, the C twin of ``ObjectCache._evict`` (set by objectspace/_savepath.py
with the save path), or None: it returns False, having done nothing, for a cache it does not
handle (a subclass, attributes of other types), and ``_evict``'s Python runs."""


class ObjectCache:
    """LRU of clean objects under a byte budget (and an optional count limit).

    ``use(obj)``: O(1), the object was just looked up. ``clean(obj)``: O(1) amortised, the
    object was just saved and confirmed (its estimate is refreshed). Eviction runs inside
    both when the budget is exceeded, down to 80% of it.
    """

    def __init__(self, nbytes: int = 256 << 20, max_objects: int | None = None) -> None:
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"cache_bytes must be an int >= 0, got {nbytes!r}")
        self.budget = nbytes
        self.max_objects = max_objects
        self._lru: OrderedDict = OrderedDict()      # id(obj) -> obj
        self._heavy: OrderedDict = OrderedDict()    # the same, for objects holding items
        self._cost: dict = {}                       # id(obj) -> estimated bytes
        self.nbytes = 0
        self.item_bytes = DEFAULT_ITEM
        self.evictions = 0
        #: True: every object a save confirms keeps none of its items in memory, as when the
        #: budget is nearly spent (``pressed``: write-around), however much of it is left —
        #: for an owner that knows the items it writes do not fit anyway (spark_ops sets it
        #: at a shard's first pressure: RFC 0012, *Step 16*). Objects no save confirms (only
        #: read) are not affected.
        self.drop_saved = False

    def __len__(self) -> int:
        return len(self._lru)

    def __repr__(self) -> str:
        return (f"<ObjectCache {len(self._lru)} objects, ~{self.nbytes >> 10} KiB of {self.budget >> 10} KiB, "
                f"{self.evictions} evicted>")

    def resize(self, nbytes: int) -> None:
        """A new byte budget; a smaller one drops least recently used objects (and items)
        at once, down to 80% of it, as an eviction does."""
        if not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"cache_bytes must be an int >= 0, got {nbytes!r}")
        self.budget = nbytes
        if self.nbytes > nbytes:
            self._evict()

    @staticmethod
    def handles_within(nbytes: int) -> int:
        """The most object handles a budget of ``nbytes`` holds (handles of the cheapest
        kind, without items): more objects than this cannot all stay cached in it."""
        return nbytes // LEAST_HANDLE_BYTES

    def pressed(self) -> bool:
        """True when the budget is nearly spent, or ``drop_saved`` is set: objects a save
        confirms then keep none of their items in memory (write-around)."""
        return self.drop_saved or self.nbytes * 5 >= self.budget * 4

    def learn(self, records: list) -> None:
        """Refine the per-item cost from (key, encoded value) records a save produced."""
        n = len(records)
        if not n:
            return
        step = max(1, n // SAMPLE)
        sizes = [len(v) for _, v in records[::step] if v is not None]
        if sizes:
            est = ITEM_BYTES + 8 * sum(sizes) // len(sizes)
            self.item_bytes = (3 * self.item_bytes + est) // 4

    def use(self, obj: PersistedObject) -> None:
        key = id(obj)
        if key in self._cost:
            self._lru.move_to_end(key)
            self._account(key, obj)
        elif not obj._listed:           # dirty objects are held by their space, not here
            self._add(key, obj)

    def clean(self, obj: PersistedObject) -> None:
        key = id(obj)
        if key in self._cost:
            self._lru.move_to_end(key)
            self._account(key, obj)
        else:
            self._add(key, obj)

    def _add(self, key, obj) -> None:
        self._lru[key] = obj
        cost = self._cost[key] = obj._mem_estimate(self.item_bytes)
        if cost > obj._handle_bytes:
            self._heavy[key] = obj
        self.nbytes += cost
        if self.nbytes > self.budget or (self.max_objects is not None and len(self._lru) > self.max_objects):
            self._evict()

    def _account(self, key, obj) -> None:
        cost = obj._mem_estimate(self.item_bytes)
        self.nbytes += cost - self._cost[key]
        self._cost[key] = cost
        if cost > obj._handle_bytes:
            self._heavy[key] = obj
            self._heavy.move_to_end(key)
        if self.nbytes > self.budget:
            self._evict()

    def forget(self, obj: PersistedObject) -> None:
        key = id(obj)
        if self._lru.pop(key, None) is not None:
            self._heavy.pop(key, None)
            self.nbytes -= self._cost.pop(key)

    def forget_space(self, space: ObjectSpace) -> None:
        for key in [k for k, o in self._lru.items() if o._space is space]:
            del self._lru[key]
            self._heavy.pop(key, None)
            self.nbytes -= self._cost.pop(key)

    def _evict(self) -> None:
        """Down to 80% of the budget: first the cached items of the least recently used
        objects (their handles stay: a handle is small, and reloading one costs a point
        read and a new handle, more than an item), then, if that is not enough, the handles."""
        if _EVICT is not None and _EVICT(self):     # the common case in C (RFC 0012 step 3)
            return
        target = self.budget * 4 // 5
        cap = self.max_objects
        lru, heavy, cost, item_bytes = self._lru, self._heavy, self._cost, self.item_bytes
        while heavy and self.nbytes > target:
            key, obj = heavy.popitem(last=False)
            if obj._listed or obj._dead:
                continue            # dirty: its items stay (a later clean() puts it back)
            c = cost[key]
            obj._evict_clean()
            new = cost[key] = obj._mem_estimate(item_bytes)
            self.nbytes += new - c
        while lru and (self.nbytes > target or (cap is not None and len(lru) > cap)):
            key, obj = lru.popitem(last=False)
            heavy.pop(key, None)
            self.nbytes -= cost.pop(key)
            self.evictions += 1
            if not obj._listed and not obj._dead:
                obj._evict_clean()
