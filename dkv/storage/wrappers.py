"""Store wrappers for tests and operations: a call log, fault injection, and a prefix view."""
from __future__ import annotations

import builtins
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from ..errors import StorageError
from .base import ObjectStore

WRITE_KINDS = ("put", "put_if_absent")
_T = TypeVar("_T")


class _Forwarding(ObjectStore):
    """Forwards the six methods. ``put_unreferenced``, ``put_if_absent_deferred``, ``sync``,
    ``get_many`` and ``prefetch`` keep the base defaults (built on this wrapper's ``put``,
    ``put_if_absent`` and ``get``), so a logging or fault-injecting wrapper sees them as the
    calls they are, durable at once; a view that only renames keys (PrefixStore) forwards
    them to keep the inner store's way of doing them."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.inner.get(key, start, end)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(key, data)

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def size(self, key: str) -> int | None:
        return self.inner.size(key)

    def close(self) -> None:
        self.inner.close()


class PrefixStore(_Forwarding):
    """A view of ``inner`` where every key is under ``prefix/`` (one dkv instance of a root)."""

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        super().__init__(inner)
        self.concurrent_reads = inner.concurrent_reads     # its prefetch is the inner store's
        self.local_reads = inner.local_reads
        self.prefix = prefix.strip("/") + "/"
        self.location = f"{inner.location.rstrip('/')}/{self.prefix.rstrip('/')}"

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        return self.inner.get(self.prefix + key, start, end)

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(self.prefix + key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent(self.prefix + key, data)

    def put_unreferenced(self, key: str, data: bytes) -> None:
        self.inner.put_unreferenced(self.prefix + key, data)

    def put_if_absent_deferred(self, key: str, data: bytes) -> bool:
        return self.inner.put_if_absent_deferred(self.prefix + key, data)

    def sync(self, key: str) -> None:
        self.inner.sync(self.prefix + key)

    def get_many(self, keys: Iterable[str]) -> builtins.list[bytes]:
        return self.inner.get_many([self.prefix + key for key in keys])

    def get_sized(self, key: str, start: int | None = None, end: int | None = None) -> tuple[bytes, int | None]:
        return self.inner.get_sized(self.prefix + key, start, end)

    def prefetch(self, key: str, ranges: builtins.list[tuple[int, int]],
                 size: int | None = None) -> builtins.list[bytes] | None:
        return self.inner.prefetch(self.prefix + key, ranges, size)

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        n = len(self.prefix)
        return [(k[n:], s) for k, s in self.inner.list(self.prefix + prefix)]

    def delete(self, key: str) -> None:
        self.inner.delete(self.prefix + key)

    def size(self, key: str) -> int | None:
        return self.inner.size(self.prefix + key)

    def parent(self) -> tuple[ObjectStore, str]:
        up, _, name = self.prefix.rstrip("/").rpartition("/")
        return (PrefixStore(self.inner, up) if up else self.inner), name


@dataclass
class Call:
    """One storage call: kind, key, bytes moved and the byte range for ranged gets."""
    kind: str
    key: str
    nbytes: int = 0
    range: tuple[int | None, int | None] | None = None
    ok: bool = True

    def __str__(self) -> str:
        rng = "" if self.range is None else f" [{self.range[0]}:{self.range[1]}]"
        return f"{self.kind} {self.key}{rng}" + ("" if self.ok else " !")


class LoggingStore(_Forwarding):
    """Records every call in ``calls`` (a list of Call), for golden logs and byte accounting."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def _log(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        data = self.inner.get(key, start, end)
        self._log(Call("get", key, len(data), None if start is None and end is None else (start, end)))
        return data

    def put(self, key: str, data: bytes) -> None:
        self.inner.put(key, data)
        self._log(Call("put", key, len(data)))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        ok = self.inner.put_if_absent(key, data)
        self._log(Call("put_if_absent", key, len(data), ok=ok))
        return ok

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        out = self.inner.list(prefix)
        self._log(Call("list", prefix))
        return out

    def delete(self, key: str) -> None:
        self.inner.delete(key)
        self._log(Call("delete", key))

    def size(self, key: str) -> int | None:
        out = self.inner.size(key)
        self._log(Call("size", key))
        return out

    def bytes_written(self) -> int:
        return sum(c.nbytes for c in self.calls if c.kind in WRITE_KINDS and c.ok)

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()


class InjectedFault(StorageError):
    """The error a FaultInjectingStore raises on purpose."""


@dataclass
class _Rule:
    kind: str              # a method name, "write" (put or put_if_absent) or "any"
    nth: int               # fire on the nth matching call (1-based) ...
    mode: str              # error | torn | landed | lost | corrupt
    key_prefix: str = ""
    repeat: bool = False   # ... and on every matching call after it
    seen: int = field(default=0)


class FaultInjectingStore(_Forwarding):
    """Fails chosen calls: ``fail("put", nth=3, mode="torn")``.

    Modes: ``error`` raises before anything is stored; ``torn`` stores a prefix of the
    data, then raises (a write cut off mid-way on a store without atomic puts); ``landed``
    stores the write whole, then raises (an answer lost after the write, a timeout); ``lost``
    returns success but stores nothing (an upload lost in a crash); ``corrupt`` stores the
    data with one byte flipped and returns success. ``crash_after(n)`` loses every write
    after the next n (a process dying with writes in flight). ``flip_byte`` damages an
    object already stored.
    """

    def __init__(self, inner: ObjectStore, seed: int = 0) -> None:
        super().__init__(inner)
        self.rules: list[_Rule] = []
        self.counts: dict[str, int] = {}
        self.fired: list[str] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def fail(self, kind: str, nth: int = 1, mode: str = "error", key_prefix: str = "",
             repeat: bool = False) -> "FaultInjectingStore":
        if mode not in ("error", "torn", "landed", "lost", "corrupt"):
            raise ValueError(f"unknown fault mode {mode!r}")
        self.rules.append(_Rule(kind, nth, mode, key_prefix, repeat))
        return self

    def crash_after(self, writes: int) -> "FaultInjectingStore":
        """Every write after the next ``writes`` writes is silently lost."""
        return self.fail("write", nth=writes + 1, mode="lost", repeat=True)

    def clear(self) -> None:
        self.rules.clear()

    def _match(self, kind: str, key: str) -> str | None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            for rule in self.rules:
                if rule.kind not in (kind, "any") and not (rule.kind == "write" and kind in WRITE_KINDS):
                    continue
                if not key.startswith(rule.key_prefix):
                    continue
                rule.seen += 1
                if rule.seen == rule.nth or (rule.repeat and rule.seen > rule.nth):
                    self.fired.append(f"{rule.mode} {kind} {key}")
                    return rule.mode
        return None

    def _write(self, kind: str, key: str, data: bytes, fn: Callable[[str, bytes], _T]) -> _T | bool:
        mode = self._match(kind, key)
        if mode is None:
            return fn(key, data)
        if mode == "error":
            raise InjectedFault(f"injected error on {kind} {key}")
        if mode == "torn":
            self.inner.put(key, bytes(data[: max(0, len(data) // 2)]))
            raise InjectedFault(f"injected torn write on {kind} {key}")
        if mode == "landed":
            fn(key, data)
            raise InjectedFault(f"injected error after {kind} {key} was stored")
        if mode == "lost":
            return True
        damaged = bytearray(data)
        if damaged:
            i = self._rng.randrange(len(damaged))
            damaged[i] ^= 0xFF
        return fn(key, bytes(damaged))

    def put(self, key: str, data: bytes) -> None:
        self._write("put", key, data, self.inner.put)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._write("put_if_absent", key, data, self.inner.put_if_absent)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if self._match("get", key) is not None:
            raise InjectedFault(f"injected error on get {key}")
        return self.inner.get(key, start, end)

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        if self._match("list", prefix) is not None:
            raise InjectedFault(f"injected error on list {prefix}")
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        if self._match("delete", key) is not None:
            raise InjectedFault(f"injected error on delete {key}")
        self.inner.delete(key)

    def flip_byte(self, key: str, offset: int | None = None) -> int:
        """Flip one byte of a stored object (at ``offset``, or a random one). Returns the offset."""
        data = bytearray(self.inner.get(key))
        i = self._rng.randrange(len(data)) if offset is None else offset % len(data)
        data[i] ^= 0xFF
        self.inner.delete(key)
        self.inner.put(key, bytes(data))
        return i
