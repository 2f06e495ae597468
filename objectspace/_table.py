"""Table: entries addressed by an encoded key — the engine of set, dict, their sorted
kinds, and stream entries and pending lists.

``vals`` maps encoded key -> entry for entries that are cached, dirty or pending, and
``ABSENT`` for deletions (and cached misses). A point read goes to memory, then the
store; a table of at most ``cache_items`` entries is loaded whole by one range scan on
first use (it is then *complete*: memory is authoritative). Iterating a table that is not
complete merges a store range scan with the in-memory changes, so a table larger than
memory iterates without being loaded. Sorted tables keep a SortedList of keys while
complete, for O(log n) positional operations.
"""
from __future__ import annotations

from sortedcontainers import SortedList

from ._base import ABSENT, F_REPLACE, MISSING
from ._layout import prefix_end
from .errors import CorruptionError


class Table:
    __slots__ = ("owner", "prefix", "sorted", "vals", "dirty", "pending", "born", "count",
                 "complete", "order", "clr", "pclr", "version", "encode_entry", "decode_entry")
    ABSENT = ABSENT     # what ``vals`` holds for a deleted entry (for readers of the bookkeeping)

    def __init__(self, owner, prefix: bytes, count: int, fresh: bool, sorted_: bool,
                 encode_entry, decode_entry) -> None:
        self.owner = owner
        self.prefix = prefix
        self.sorted = sorted_
        self.vals: dict = {}
        self.dirty: set = set()
        self.pending: set = set()
        self.born: set = set()      # added since the last save and known absent from the store
        self.count = count
        self.complete = fresh or count == 0
        self.order = SortedList() if sorted_ and self.complete else None
        self.clr = False            # clear(): every stored entry not rewritten must be deleted
        self.pclr = False
        self.version = 0
        self.encode_entry = encode_entry
        self.decode_entry = decode_entry

    # -- reads ------------------------------------------------------------------------------

    def lookup(self, ek: bytes):
        """The entry for ek or MISSING. O(1) in memory, else one point read."""
        e = self.vals.get(ek, MISSING)
        if e is MISSING:
            if self.complete:
                return MISSING
            e = self._fetch(ek)
        return MISSING if e is ABSENT else e

    def _fetch(self, ek: bytes):
        space = self.owner._space
        if self.count <= space._cache_items:
            self.load_all()
            e = self.vals.get(ek, MISSING)
            return ABSENT if e is MISSING else e
        raw = space._db.get(self.prefix + ek)
        e = ABSENT if raw is None else self.decode_entry(ek, raw)
        if len(self.vals) >= space._cache_items:
            self.evict()            # before caching e: the caller gets the entry the table keeps
        self.vals[ek] = e
        return e

    def load_all(self) -> None:
        """Make the table complete with one range scan. O(n)."""
        if self.complete:
            return
        vals, decode, n = self.vals, self.decode_entry, len(self.prefix)
        for key, raw in self.owner._space._db.scan_prefix(self.prefix):
            ek = key[n:]
            if ek not in vals:
                vals[ek] = decode(ek, raw)
        live = [ek for ek, e in vals.items() if e is not ABSENT]
        if len(live) != self.count:
            o = self.owner
            raise CorruptionError(f"{o.kind} {o._name!r}: metadata says {self.count} entries, "
                                  f"the store holds {len(live)}")
        self.complete = True
        if self.sorted:
            self.order = SortedList(live)

    def ensure_complete(self) -> None:
        """Load a table of at most cache_items entries whole (positional ops become O(log n))."""
        if not self.complete and self.count <= self.owner._space._cache_items:
            self.load_all()

    def iterate(self, lo: bytes | None = None, hi: bytes | None = None, reverse: bool = False,
                watch: bool = True):
        """(ek, entry) for lo <= ek < hi, ascending by ek for sorted tables (reverse=True:
        descending, which materialises the range when the table is not complete).
        Raises RuntimeError if the table changes size meanwhile. ``watch=False``: entries
        are not cached for a space with ``inplace`` set (they are not handed out)."""
        version = self.version
        o = self.owner
        keep = watch and o._mutable_entries and o._space._inplace is not None and o._t is self
        if keep and not self.complete and self.count <= o._space._cache_items:
            self.load_all()     # as a point read does: the entries handed out stay cached
        if self.complete:
            vals = self.vals
            if self.order is not None:
                eks = self.order.irange(lo, hi, (True, False), reverse)
            else:
                eks = (ek for ek, e in vals.items() if e is not ABSENT)
            for ek in eks:
                if self.version != version:
                    raise RuntimeError(f"{self.owner.kind} changed size during iteration")
                yield ek, vals[ek]
            return
        it = self._merged_keeping(lo, hi) if keep else self._merged(lo, hi)
        if reverse:
            it = reversed(list(it))
        for item in it:
            if self.version != version:
                raise RuntimeError(f"{self.owner.kind} changed size during iteration")
            yield item

    def _merged(self, lo, hi, keep=None):
        """(ek, entry) of the store's range merged with the entries changed in memory.
        ``keep(ek, entry, raw)``: called for each entry decoded from the store (see
        _merged_keeping)."""
        prefix, vals, decode = self.prefix, self.vals, self.decode_entry
        over = sorted(ek for ek in (self.dirty | self.pending)
                      if (lo is None or ek >= lo) and (hi is None or ek < hi))
        start = prefix + lo if lo is not None else prefix
        end = prefix + hi if hi is not None else prefix_end(prefix)
        n, i, m = len(prefix), 0, len(over)
        for key, raw in self.owner._space._db.scan(start, end):
            ek = key[n:]
            while i < m and over[i] < ek:
                e = vals[over[i]]
                if e is not ABSENT:
                    yield over[i], e
                i += 1
            if i < m and over[i] == ek:
                i += 1
                e = vals[ek]
                if e is not ABSENT:
                    yield ek, e
                continue
            e = vals.get(ek, MISSING)
            if e is MISSING or e is ABSENT:
                e = decode(ek, raw)
                if keep is not None:
                    keep(ek, e, raw)
            yield ek, e
        for ek in over[i:]:
            e = vals[ek]
            if e is not ABSENT:
                yield ek, e

    def _merged_keeping(self, lo, hi):
        """_merged for the entries of a dict or stream of a space with ``inplace`` set:
        the entries read from the store whose value could change in place are cached as
        they are handed out, with the digest of their record (see _iter_keeping in
        _slots.py)."""
        owner, vals = self.owner, self.vals
        limit = owner._space._cache_items
        sums = owner._isums
        if sums is None:
            sums = owner._isums = {}
        watched = owner._inplace_watched

        def keep(ek, e, raw):
            if watched(e):
                if len(vals) >= limit:
                    self.evict()
                vals[ek] = e
                sums[ek] = hash(raw)        # its digest: evicting it reads nothing
        return self._merged(lo, hi, keep)

    def nth(self, i: int) -> bytes:
        """The ek at position i (negative from the end). O(log n) complete, else O(i)."""
        if i < 0:
            i += self.count
        if not 0 <= i < self.count:
            raise IndexError(f"{self.owner.kind} index out of range")
        self.ensure_complete()
        if self.order is not None:
            return self.order[i]
        for j, (ek, _) in enumerate(self.iterate()):
            if j == i:
                return ek
        raise IndexError(f"{self.owner.kind} index out of range")

    def rank(self, ek: bytes) -> int:
        """How many entries sort before ek. O(log n) complete, else O(rank)."""
        self.ensure_complete()
        if self.order is not None:
            return self.order.bisect_left(ek)
        return sum(1 for _ in self.iterate(None, ek))

    # -- writes -----------------------------------------------------------------------------

    def put(self, ek: bytes, entry) -> bool:
        """Set an entry; True if the key is new. O(1) (+ O(log n) sorted); one entry dirty."""
        vals = self.vals
        old = vals.get(ek, MISSING)
        if old is MISSING and not self.complete:
            old = self._fetch(ek)
        vals[ek] = entry
        dirty = self.dirty
        if old is MISSING or old is ABSENT:
            if ek not in dirty and ek not in self.pending:
                self.born.add(ek)
            dirty.add(ek)
            self.count += 1
            self.version += 1
            if self.order is not None:
                self.order.add(ek)
            return True
        dirty.add(ek)
        return False

    def remove(self, ek: bytes):
        """Delete an entry; returns the old entry or MISSING. O(1) (+ O(log n) sorted).
        An entry added since the last save is forgotten without a store delete."""
        vals = self.vals
        old = vals.get(ek, MISSING)
        if old is MISSING and not self.complete:
            old = self._fetch(ek)
        if old is MISSING or old is ABSENT:
            return MISSING
        if ek in self.born:
            self.born.discard(ek)
            self.dirty.discard(ek)
            del vals[ek]
        else:
            vals[ek] = ABSENT
            self.dirty.add(ek)
        self.count -= 1
        self.version += 1
        if self.order is not None:
            self.order.remove(ek)
        return old

    def clear(self) -> None:
        """Remove every entry. O(1) now; the next save scans the stored keys to delete them."""
        self.vals = {}
        self.dirty = set()
        self.pending = set()
        self.born = set()
        self.count = 0
        self.complete = True
        self.order = SortedList() if self.sorted else None
        self.clr = True
        self.version += 1

    def evict(self, limit: int | None = None) -> None:
        """Drop clean cached entries down to ``limit`` (half of cache_items). O(len(vals))."""
        o = self.owner
        if self.clr or self.pclr or (o._flags | o._pflags) & F_REPLACE:
            return
        if limit is None:
            limit = o._space._cache_items // 2
        vals = self.vals
        pinned = self.dirty | self.pending
        excess = len(vals) - limit
        if excess <= 0:
            return
        doomed = [ek for ek in vals if ek not in pinned][:excess]
        if o._mutable_entries and o._space._inplace is not None and o._t is self and doomed:
            kept = o._inplace_evicting(doomed)
            if kept:
                doomed = [ek for ek in doomed if ek not in kept]
        for ek in doomed:
            del vals[ek]
        self.complete = self.count == 0
        self.order = SortedList() if self.sorted and self.complete else None

    # -- save -------------------------------------------------------------------------------

    def clean_entries(self, immutable: frozenset, pairs: bool) -> list:
        """``(ek, value)`` of the cached entries that are neither dirty nor pending and whose
        value's type is not in ``immutable`` (see _inplace.py); ``pairs``: an entry is
        (key, value), else it is the value. O(cached)."""
        vals = self.vals
        if not vals:
            return []
        pinned = self.dirty | self.pending if self.pending else self.dirty
        if pairs:
            return [(ek, e[1]) for ek, e in vals.items()
                    if e is not ABSENT and type(e[1]) not in immutable and ek not in pinned]
        return [(ek, e) for ek, e in vals.items() if e is not ABSENT and type(e) not in immutable and ek not in pinned]

    def dirty_count(self) -> int:
        """Entries the next save writes (for repr)."""
        return len(self.dirty | self.pending) + (self.clr or self.pclr)

    def collect(self, out: list, full: bool) -> None:
        """Append this table's records (pure). O(dirty), or O(n) when full."""
        ip, enc, at = self.prefix, self.encode_entry, len(out)
        if full:
            vals = self.vals
            for ek in sorted(self.dirty | self.pending):
                if vals[ek] is ABSENT:
                    out.append((ip + ek, None))
            for ek, e in self.iterate(watch=False):
                out.append((ip + ek, enc(ek, e)))
        else:
            vals = self.vals
            keys = self.dirty | self.pending if self.pending else self.dirty
            for ek in (sorted(keys) if len(keys) > 1 else keys):
                e = vals[ek]
                out.append((ip + ek, None if e is ABSENT else enc(ek, e)))
        if self.clr or self.pclr:
            seen = {k for k, _ in out[at:]}
            out[at:at] = [(k, None) for k, _ in self.owner._space._db.scan_prefix(ip) if k not in seen]

    def promote(self) -> None:
        """The save's records are in the batch: dirty entries become pending."""
        if self.pending:
            self.pending |= self.dirty
            self.dirty = set()
        else:
            self.pending, self.dirty = self.dirty, self.pending
        if self.born:
            self.born = set()
        self.pclr = self.pclr or self.clr
        self.clr = False

    def confirm(self) -> bool:
        """The pending records are committed. Returns True when nothing is dirty."""
        if self.pending:
            if self.complete:
                vals, dirty = self.vals, self.dirty
                for ek in self.pending:
                    if vals.get(ek) is ABSENT and ek not in dirty:
                        del vals[ek]
            self.pending.clear()
        self.pclr = False
        if len(self.vals) > self.owner._space._cache_items:
            self.evict()
        return not self.dirty and not self.clr
