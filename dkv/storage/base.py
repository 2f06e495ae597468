"""The ObjectStore interface: the only way dkv touches persistent storage.

Six methods over immutable objects named by ``/``-separated relative keys. dkv never
overwrites an object: every file name is unique, and manifests are created with
``put_if_absent`` so two writers cannot both commit the same name. Two more have defaults
built on the six that a store may do better: ``put_unreferenced`` (WAL segments and SSTs,
which nothing reads before a manifest names them), ``put_if_absent_deferred`` with
``sync`` (writer claims), ``get_many``, ``get_sized`` and ``prefetch`` (ranges read ahead).
"""
from __future__ import annotations

import abc
import builtins
from collections.abc import Iterable


class ObjectStore(abc.ABC):
    """Storage for immutable objects. Implementations must be safe to call from several threads."""

    location: str = ""
    concurrent_reads: int = 1
    """How many reads ``prefetch`` makes at once (their round trips overlap)."""
    local_reads: bool = False
    """A ranged read costs about what a copy in memory costs (a local folder: the OS's page
    cache holds what was read or written lately). dkv then reads a WAL segment back from
    the store once its checkpoint wrote it, rather than keeping its bytes in memory until a
    flush merges it."""

    @abc.abstractmethod
    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (the whole object by default).

        Raises ObjectMissingError if it does not exist, StorageError if storage fails.
        A range past the end is clipped, as in HTTP ranges.
        """

    @abc.abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` durably; when this returns the object is complete."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if no object has that name. True if created, False if it existed."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[tuple[str, int]]:
        """``(key, size)`` of every object whose key starts with ``prefix``, sorted by key."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing object is not an error."""

    @abc.abstractmethod
    def size(self, key: str) -> int | None:
        """Size in bytes of ``key``, or None if it does not exist."""

    # Conveniences built on the six methods; implementations may do better.
    def put_unreferenced(self, key: str, data: bytes) -> None:
        """``put`` for an object that nothing refers to until this call has returned (dkv's
        WAL segments and SSTs: a manifest names them only after their upload). Durable and
        complete when it returns, like ``put``; but if it fails, or the process or machine
        dies before it returns, ``key`` may hold a partial object, which its writer's
        retry overwrites and garbage collection deletes. A store whose ``put`` is atomic
        anyway (S3, memory) keeps this default; a local folder writes the file in place
        and saves the temporary file, the rename and one journal commit (RFC 0006)."""
        self.put(key, data)

    def put_if_absent_deferred(self, key: str, data: bytes) -> bool:
        """``put_if_absent`` whose object every reader sees at once, but which is durable
        only once ``sync(key)`` has returned: a crash of the machine before then may lose
        it, or leave it empty. For a writer's claim (RFC 0006), which must survive a power
        loss only once the writer has written something. A store whose writes are
        durable when they return keeps this default."""
        return self.put_if_absent(key, data)

    def sync(self, key: str) -> None:  # noqa: B027 - a no-op unless a store defers durability
        """Make an object created by ``put_if_absent_deferred`` durable (a no-op where it
        already is)."""

    def get_sized(self, key: str, start: int | None = None, end: int | None = None) -> tuple[bytes, int | None]:
        """``get``, and the object's size when the read tells it at no extra cost (S3: the
        answer's Content-Range), else None."""
        return self.get(key, start, end), None

    def get_many(self, keys: Iterable[str]) -> builtins.list[bytes]:
        """``get`` of every key, in order. A remote store fetches them concurrently."""
        return [self.get(key) for key in keys]

    def prefetch(self, key: str, ranges: builtins.list[tuple[int, int]],
                 size: int | None = None) -> builtins.list[bytes] | None:
        """Ahead of reads of ``ranges`` (``[start, end)`` pairs) of an object whose size the
        caller may know (``size``): the ranges' bytes, read concurrently, where reading them
        now by range is the cheaper way; or None where a read of the object is cheap
        anyway (a local file, memory, a remote object held, or now fetched, whole in a
        local copy), and the caller reads when it needs to. The default: None."""
        return None

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def close(self) -> None:  # noqa: B027 - a no-op for stores that hold nothing
        """Release connections or handles. The store is unusable afterwards."""

    def parent(self) -> "tuple[ObjectStore, str] | None":
        """The store of the folder that holds this one, and this folder's name in it; None
        when there is none (a file system or bucket root, a memory store, a wrapper that
        cannot say). dkv goes up to open an instance whose manifests name their files
        relative to an enclosing folder (a spark_ops shard opened at its own folder)."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.location}>"


def check_object_key(key: str) -> str:
    """Reject keys that could escape the store root or are not plain relative names."""
    if not isinstance(key, str) or not key:
        raise ValueError(f"object key must be a non-empty str, got {key!r}")
    if key.startswith("/") or "\\" in key or any(p in ("", ".", "..") for p in key.split("/")):
        raise ValueError(f"object key {key!r} must be a relative path without '.', '..' or empty parts")
    return key


def clip_range(data_len: int, start: int | None, end: int | None) -> tuple[int, int]:
    """Normalise an optional ``[start, end)`` range against an object of ``data_len`` bytes."""
    lo = 0 if start is None else max(0, start)
    hi = data_len if end is None else min(end, data_len)
    return lo, max(lo, hi)
