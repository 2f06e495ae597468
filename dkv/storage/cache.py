"""CachedStore: a local folder that keeps whole copies of immutable remote objects.

SSTs in S3 are read in small ranges (a footer, a metadata segment, single blocks). Over
the network each range is a round trip, so the first read of an SST fetches the whole
object into a local cache folder and later reads are ``pread`` calls. The folder has a
byte budget; the least recently used files are evicted. Only keys accepted by
``cacheable`` are cached (dkv passes SSTs); everything else goes straight through.
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


class CachedStore(_Forwarding):
    def __init__(self, inner: ObjectStore, cache_dir: str, budget_bytes: int = 1 << 30,
                 cacheable: Callable[[str], bool] = lambda key: True) -> None:
        super().__init__(inner)
        self.cache_dir = cache_dir
        self.budget = budget_bytes
        self.cacheable = cacheable
        os.makedirs(cache_dir, exist_ok=True)
        self._files: OrderedDict[str, int] = OrderedDict()   # local path -> size, LRU order
        self._bytes = 0
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Event] = {}
        self.hits = self.misses = 0

    def parent(self) -> tuple[ObjectStore, str] | None:
        up = self.inner.parent()
        if up is None:
            return None
        return CachedStore(up[0], self.cache_dir, self.budget, self.cacheable), up[1]

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
