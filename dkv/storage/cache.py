"""CachedStore: a local folder that keeps whole copies of immutable remote objects.

SSTs in S3 are read in small ranges (a footer, a metadata segment, single blocks). Over
the network each range is a round trip, so an SST that is read much is fetched whole into a
local cache folder and later reads are ``pread`` calls. The folder has a byte budget; the
least recently used files are evicted. Only keys accepted by ``cacheable`` are cached (dkv
passes SSTs); everything else goes straight through.

When to fetch whole is a rent-or-buy choice, in time. With ``range_read_cost`` = 0 an
object is fetched whole at its first read. Otherwise ``range_read_cost`` is what a round
trip is worth in bytes (a GET's first-byte latency times the bandwidth of a whole fetch's
parallel parts), so a ranged read costs that plus its bytes, and a whole fetch that plus
the object's size. A range of an object not held locally is read from the remote store
(renting) until the reads so far and this one would cost the object's size; then the
object is fetched whole (buying). The rule spends at most about twice the time of the
better choice made in hindsight: a table that a restart only probes (its tail: the bloom
filter says no) or reads a few blocks of stays remote, one it reads much is fetched after
a few reads, and a restart that touches every key fetches every table. ``prefetch`` applies the rule to the
reads a caller knows it will make (a batch's keys), all at once: read concurrently by range,
or the object fetched whole.
"""
from __future__ import annotations

import builtins
import hashlib
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

from .base import ObjectStore, clip_range
from .wrappers import _Forwarding

log = logging.getLogger(__name__)


BUYS_AT_ONCE = 2
"""Whole fetches that ``prefetch`` runs at once (each in parallel parts already): each holds
its object in memory until it is written to the folder."""


class CachedStore(_Forwarding):
    def __init__(self, inner: ObjectStore, cache_dir: str, budget_bytes: int = 1 << 30,
                 cacheable: Callable[[str], bool] = lambda key: True, range_read_cost: int = 0) -> None:
        super().__init__(inner)
        self.concurrent_reads = inner.concurrent_reads
        self.cache_dir = cache_dir
        self.budget = budget_bytes
        self.cacheable = cacheable
        self.range_read_cost = range_read_cost
        self._rented: dict[str, tuple[int, int | None]] = {}   # key -> (charges so far, size): ranged reads
        self.ranged_reads = self.ranged_bytes = 0
        os.makedirs(cache_dir, exist_ok=True)
        self._files: OrderedDict[str, int] = OrderedDict()   # local path -> size, LRU order
        self._bytes = 0
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Event] = {}
        self._buying = threading.Semaphore(BUYS_AT_ONCE)
        self.hits = self.misses = 0

    def parent(self) -> tuple[ObjectStore, str] | None:
        up = self.inner.parent()
        if up is None:
            return None
        return CachedStore(up[0], self.cache_dir, self.budget, self.cacheable, self.range_read_cost), up[1]

    def _local(self, key: str) -> str:
        digest = hashlib.sha1(f"{self.inner.location}/{key}".encode()).hexdigest()
        return os.path.join(self.cache_dir, digest)

    def get_many(self, keys: Iterable[str]) -> builtins.list[bytes]:
        keys = list(keys)
        if any(self.cacheable(k) for k in keys):
            return [self.get(k) for k in keys]
        return self.inner.get_many(keys)      # nothing to cache: the remote store's way

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if not self.cacheable(key):
            return self.inner.get(key, start, end)
        if self.range_read_cost and (start is not None or end is not None):
            data = self._rent(key, start, end)
            if data is not None:
                return data
        for attempt in range(3):
            path = self._ensure(key)
            try:
                with open(path, "rb") as f:
                    if start is None and end is None:
                        return f.read()
                    lo, hi = clip_range(os.fstat(f.fileno()).st_size, start, end)
                    return os.pread(f.fileno(), hi - lo, lo)
            except FileNotFoundError:   # evicted by another thread between ensure and open
                with self._lock:
                    if path in self._files and not os.path.exists(path):
                        self._bytes -= self._files.pop(path)
        return self.inner.get(key, start, end)

    def _rent(self, key: str, start: int | None, end: int | None) -> bytes | None:
        """Bytes ``[start, end)`` read by range from the remote store, or None when the
        object is local (or being fetched) or fetching it whole is now the cheaper way.
        The read's charge is reserved before the request, so readers at once share the
        bound; a whole fetch or a delete meanwhile ends the rent (the entry is not put back)."""
        lo = 0 if start is None else max(0, start)
        if end is not None and end <= lo:
            return b""
        path = self._local(key)
        cost = self.range_read_cost
        with self._lock:
            if path in self._files or path in self._fetching:
                return None
            charged, size = self._rented.get(key, (0, None))
            if size is not None:
                lo2, hi = clip_range(size, lo, end)
                n = hi - lo2
                if charged + n >= size:     # (both choices pay this read's round trip)
                    return None
            else:
                n = 0 if end is None else end - lo
            if len(self._rented) >= 100_000:    # keys never fetched whole nor deleted here
                self._rented.clear()
            self._rented[key] = (charged + n + cost, size)
        try:
            data, total = self.inner.get_sized(key, lo, end)
            if total is None and size is None and data:
                total = self.inner.size(key)    # a store whose reads do not tell the size (S3's do)
        except BaseException:
            self._refund(key, n + cost)     # the read did not happen: its charge goes back
            raise
        with self._lock:
            entry = self._rented.get(key)
            if entry is None:               # fetched whole or deleted meanwhile: nothing to keep
                return data
            known = total if total is not None else entry[1]
            whole = known is not None and lo == 0 and len(data) >= known
            if whole:
                self._rented.pop(key)
            else:
                self._rented[key] = (entry[0] - n + len(data), known)
                self.ranged_reads += 1
                self.ranged_bytes += len(data)
        if whole:
            self._store_local(path, data)   # the range was the whole object: keep it
        return data

    def prefetch(self, key: str, ranges: builtins.list[tuple[int, int]],
                 size: int | None = None) -> builtins.list[bytes] | None:
        """The rule above for a set of reads made at once: the ranges are read from the
        remote store, ``concurrent_reads`` at a time, if they and the ranged reads so far
        cost less than the object's size (the caller's ``size`` until a read told it),
        where reads made together pay one round trip; else the object is fetched whole (in
        parallel parts; BUYS_AT_ONCE such fetches at a time) and None says its reads are
        local now. None too for an object held locally."""
        if not self.cacheable(key):
            return self.inner.prefetch(key, ranges, size)
        path = self._local(key)
        trips = -(-len(ranges) // max(1, self.inner.concurrent_reads))
        need = sum(hi - lo for lo, hi in ranges) + trips * self.range_read_cost
        with self._lock:
            if path in self._files or path in self._fetching:
                return None
            charged, known = self._rented.get(key, (0, None))
            known = size if known is None else known
            rent = bool(self.range_read_cost) and known is not None and charged + need < known
            if rent:
                self._rented[key] = (charged + need, known)
        if not rent:
            with self._buying:
                self._ensure(key)
            return None
        try:
            data = self.inner.prefetch(key, ranges, known)
            if data is None:
                data = [self.inner.get(key, lo, hi) for lo, hi in ranges]
        except BaseException:
            self._refund(key, need)         # the reads did not happen: their charge goes back
            raise
        with self._lock:
            self.ranged_reads += len(ranges)
            self.ranged_bytes += sum(map(len, data))
        return data

    def _refund(self, key: str, charge: int) -> None:
        """Take back the charge of reads that did not happen (unless the rent ended meanwhile)."""
        with self._lock:
            entry = self._rented.get(key)
            if entry is not None:
                self._rented[key] = (entry[0] - charge, entry[1])

    def _ensure(self, key: str) -> str:
        path = self._local(key)
        while True:
            with self._lock:
                if path in self._files and os.path.exists(path):
                    self._files.move_to_end(path)
                    self.hits += 1
                    return path
                pending = self._fetching.get(path)
                if pending is None:
                    pending = self._fetching[path] = threading.Event()
                    break
            pending.wait()
        try:
            self.misses += 1
            self._store_local(path, self.inner.get(key))
            return path
        finally:
            with self._lock:
                self._fetching.pop(path).set()
                self._rented.pop(key, None)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        if self.cacheable(key):   # write-through: our own new SSTs are read back soon
            self._store_local(self._local(key), data)

    def _store_local(self, path: str, data: bytes) -> None:
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        with self._lock:        # rename and accounting together: the two always agree
            os.replace(tmp, path)
            old = self._files.pop(path, None)
            self._bytes += len(data) - (old or 0)
            self._files[path] = len(data)
            self._evict()

    def _evict(self) -> None:
        while self._bytes > self.budget and len(self._files) > 1:
            path, size = self._files.popitem(last=False)
            self._bytes -= size
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        path = self._local(key)
        with self._lock:
            self._rented.pop(key, None)
            size = self._files.pop(path, None)
            if size is not None:
                self._bytes -= size
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    @property
    def cached_bytes(self) -> int:
        return self._bytes
