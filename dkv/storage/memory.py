"""MemoryStore: objects in a dict. Named stores (``memory://name``) live for the process."""
from __future__ import annotations

import builtins
import threading

from ..errors import ObjectMissingError
from .base import ObjectStore, check_object_key, clip_range

_NAMED: dict[str, "MemoryStore"] = {}
_NAMED_LOCK = threading.Lock()


class MemoryStore(ObjectStore):
    """A dict of immutable objects; ``named(name)`` returns the same store for the same name.

    Useful for tests and notebooks that do not need the data after the process ends.
    """

    def __init__(self, location: str = "memory://") -> None:
        self.location = location
        self._objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @classmethod
    def named(cls, name: str, create: bool = True) -> "MemoryStore":
        """The store ``memory://name``. ``create=False``: a name not in use gives an empty
        store that is not kept (what a read-only open sees, without making the name)."""
        with _NAMED_LOCK:
            store = _NAMED.get(name)
            if store is None:
                store = cls(f"memory://{name}")
                if create:
                    _NAMED[name] = store
            return store

    @staticmethod
    def forget(name: str) -> None:
        """Drop the named store ``memory://name`` and its objects."""
        with _NAMED_LOCK:
            _NAMED.pop(name, None)

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        try:
            data = self._objects[key]
        except KeyError:
            raise ObjectMissingError(f"{self.location}/{key} does not exist") from None
        if start is None and end is None:
            return data
        lo, hi = clip_range(len(data), start, end)
        return data[lo:hi]

    def put(self, key: str, data: bytes) -> None:
        check_object_key(key)
        data = bytes(data)
        with self._lock:
            self._objects[key] = data

    def put_if_absent(self, key: str, data: bytes) -> bool:
        check_object_key(key)
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = bytes(data)
            return True

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        with self._lock:
            items = [(k, len(v)) for k, v in self._objects.items() if k.startswith(prefix)]
        items.sort()
        return items

    def delete(self, key: str) -> None:
        with self._lock:
            self._objects.pop(key, None)

    def size(self, key: str) -> int | None:
        data = self._objects.get(key)
        return None if data is None else len(data)

