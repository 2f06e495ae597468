"""WriteBatch: an ordered list of puts and deletes applied atomically by ``DB.write``."""
from __future__ import annotations

from operator import itemgetter
from typing import Callable, Iterable, Iterator

from .format import native_enabled

_c_extend: Callable[[list[tuple[bytes, bytes | None]], list], int] | None
_c_bounds: Callable[[list[tuple[bytes, bytes | None]]], tuple[bytes, bytes] | None] | None
try:
    if not native_enabled():        # OBJECTSPACE_NATIVE=0: the Python loop below, the reference
        raise ImportError("native helpers disabled")
    from .format import _native
    _c_extend = _native.batch_extend
    _c_bounds = getattr(_native, "batch_bounds", None)    # (a module built before it: the builtins)
except ImportError:          # pragma: no cover - no compiler when installed
    _c_extend = _c_bounds = None


def check_key(key: object) -> bytes:
    """Validate a user key: non-empty bytes. Returns it as immutable bytes."""
    if isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    if not isinstance(key, bytes):
        raise TypeError(f"dkv keys must be bytes, got {type(key).__name__}: {key!r:.80}")
    if not key:
        raise ValueError("dkv keys must not be empty")
    return key


def check_value(value: object) -> bytes:
    """Validate a value: bytes (empty allowed)."""
    if isinstance(value, (bytearray, memoryview)):
        value = bytes(value)
    if not isinstance(value, bytes):
        raise TypeError(f"dkv values must be bytes, got {type(value).__name__}: {value!r:.80}")
    return value


_first = itemgetter(0)


def key_bounds(ops: list[tuple[bytes, bytes | None]]) -> tuple[bytes, bytes]:
    """The least and the greatest key of a batch's records (not empty): ``min`` and ``max``
    of the keys, in one C pass where the records are of exact types."""
    if _c_bounds is not None:
        bounds = _c_bounds(ops)
        if bounds is not None:
            return bounds
    keys = list(map(_first, ops))      # the keys, min and max: C, no bytecode a record
    return min(keys), max(keys)


class WriteBatch:
    """Puts and deletes to apply atomically, in order (a later op on a key wins).

    Build one with ``dkv.WriteBatch()`` (or ``db.batch()`` as a context manager) and
    apply it with ``db.write(batch)``. Keys and values are checked when added, so a bad
    entry is reported before anything is written. Adding is O(1).

    >>> b = WriteBatch(); b.put(b"k", b"v"); b.delete(b"old"); len(b)
    2
    """

    __slots__ = ("_ops", "_nbytes")

    def __init__(self) -> None:
        self._ops: list[tuple[bytes, bytes | None]] = []
        self._nbytes = 0

    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or not key:
            key = check_key(key)
        if type(value) is not bytes:
            value = check_value(value)
        self._ops.append((key, value))
        self._nbytes += len(key) + len(value)

    def delete(self, key: bytes) -> None:
        key = check_key(key)
        self._ops.append((key, None))
        self._nbytes += len(key)

    def extend(self, ops: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Append (key, value-or-None) pairs in order (None deletes), as put/delete would,
        checked before any is added. O(len(ops))."""
        if _c_extend is not None and type(ops) is list:
            nbytes = _c_extend(self._ops, ops)      # records of exact types, as objectspace's saves make
            if nbytes >= 0:
                self._nbytes += nbytes
                return
        ops = list(ops)
        nbytes = 0
        for i, (key, value) in enumerate(ops):
            if type(key) is not bytes or not key or (value is not None and type(value) is not bytes):
                key = check_key(key)
                if value is not None:
                    value = check_value(value)
                ops[i] = (key, value)
            nbytes += len(key) if value is None else len(key) + len(value)
        self._ops.extend(ops)
        self._nbytes += nbytes

    def clear(self) -> None:
        self._ops.clear()
        self._nbytes = 0

    @property
    def nbytes(self) -> int:
        """Raw bytes of keys and values in the batch."""
        return self._nbytes

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[tuple[bytes, bytes | None]]:
        """(key, value) pairs in order; value None means delete."""
        return iter(self._ops)

    def __repr__(self) -> str:
        return f"<WriteBatch ops={len(self._ops)} bytes={self._nbytes}>"
