"""Front coding of sorted records: each key is stored as the length of the prefix it shares
with the previous key plus the rest (each value likewise, against the previous value).

Sorted keys of one object differ in their last bytes only (``.../items/<slot>``), and zstd
spends about two bytes on every key it has to match whole; front-coded, the same keys
compress to a fifth of a byte each (a spark_ops buffer batch: 482 KB of keys -> 68 KB), and
values of one kind shrink by a third. Layout (little-endian varints)::

    varint n, varint keys_len (bytes of the key stream that follows)
    n x key:    varint shared, varint suffix_len, suffix bytes
    n x value:  varint shared, varint code, suffix bytes    (code 0: tombstone; else
                                                               suffix_len = code - 1)

``shared`` counts against the previous key, or the previous non-tombstone value. Knowing
where the values start, a reader can take the records of a key range (``decode`` with
``lo``/``hi``) or one key (``find``) and build Python objects for those only. The C module
``_native`` (built with the package when a compiler is there) writes and reads the same
bytes ~25x faster; this module is its reference and fallback.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Literal, overload

from ._env import native_enabled

# The C twins, or None where the module was not built (types: _native.pyi).
_c_encode: Callable[[list[bytes], list[bytes | None]], bytes] | None
_c_decode: Callable[..., tuple[list[bytes], list[bytes | None], int]] | None
_c_find: Callable[..., tuple[bool, bytes | None]] | None
_c_index: Callable[..., bytes] | None

try:
    if not native_enabled():        # OBJECTSPACE_NATIVE=0: the reference, with the C one built
        raise ImportError("native helpers disabled")
    from ._native import decode as _c_decode
    from ._native import encode as _c_encode
    from ._native import find as _c_find
    from ._native import index as _c_index
except ImportError:          # pragma: no cover - no compiler when installed
    _c_encode = _c_decode = _c_find = _c_index = None


def _varint(out: bytearray, v: int) -> None:
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _shared(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n           # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def py_encode(keys: list[bytes], values: list[bytes | None]) -> bytes:
    if len(keys) != len(values):
        raise ValueError("keys and values differ in length")
    ks = bytearray()
    prev = b""
    for k in keys:
        if type(k) is not bytes:
            raise TypeError("keys must be bytes")
        s = _shared(prev, k)
        _varint(ks, s)
        _varint(ks, len(k) - s)
        ks += k[s:]
        prev = k
    out = bytearray()
    _varint(out, len(keys))
    _varint(out, len(ks))
    out += ks
    prev = b""
    for v in values:
        if v is None:
            out += b"\x00\x00"
            continue
        if type(v) is not bytes:
            raise TypeError("values must be bytes or None")
        s = _shared(prev, v)
        _varint(out, s)
        _varint(out, len(v) - s + 1)
        out += v[s:]
        prev = v
    return bytes(out)


def _read_varint(buf: bytes, pos: int, end: int, max_shift: int = 56) -> tuple[int, int]:
    """(value, position after it) of the varint at pos; ValueError when it runs past end."""
    v = shift = 0
    while True:
        if pos >= end or shift > max_shift:
            raise ValueError("front-coded records are malformed")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7


@overload
def _walk(data: bytes, pos: int, lo: bytes | None, hi: bytes | None,
          exact: Literal[False]) -> tuple[list[bytes], list[bytes | None], int]: ...
@overload
def _walk(data: bytes, pos: int, lo: bytes | None, hi: bytes | None,
          exact: Literal[True]) -> tuple[bool, bytes | None]: ...
def _walk(data: bytes, pos: int, lo: bytes | None, hi: bytes | None,
          exact: bool) -> tuple[list[bytes], list[bytes | None], int] | tuple[bool, bytes | None]:
    buf = bytes(data)
    n, pos = _read_varint(buf, pos, len(buf))
    klen, pos = _read_varint(buf, pos, len(buf))
    if n > len(buf) or klen > len(buf) - pos:
        raise ValueError("front-coded records are malformed")
    kend = pos + klen
    keys: list[bytes] = []
    i0 = i1 = n
    found = False
    prev = b""
    i = 0
    while i < n:
        sh, pos = _read_varint(buf, pos, kend)
        slen, pos = _read_varint(buf, pos, kend)
        if sh > len(prev) or slen > kend - pos:
            raise ValueError("front-coded records are malformed")
        key = prev = prev[:sh] + buf[pos:pos + slen]
        pos += slen
        if i0 == n:
            if lo is not None and key < lo:
                i += 1
                continue
            i0 = i
            if exact:
                found = key == lo
                i1 = i + 1 if found else i
                break
        if hi is not None and key >= hi:
            i1 = i
            break
        keys.append(key)
        i += 1
    if i == n and pos != kend:
        raise ValueError("front-coded records are malformed")
    values: list[bytes | None] = []
    prev = b""
    vp = kend
    for i in range(i1):
        sh, vp = _read_varint(buf, vp, len(buf))
        code, vp = _read_varint(buf, vp, len(buf))
        if code == 0:
            if sh:
                raise ValueError("front-coded records are malformed")
            if i >= i0:
                values.append(None)
            continue
        slen = code - 1
        if sh > len(prev) or slen > len(buf) - vp:
            raise ValueError("front-coded records are malformed")
        prev = prev[:sh] + buf[vp:vp + slen]
        vp += slen
        if i >= i0:
            values.append(prev)
    if exact:
        return (True, values[0]) if found else (False, None)
    return keys, values, (vp if i1 == n else -1)


def py_decode(data: bytes, pos: int = 0, lo: bytes | None = None, hi: bytes | None = None,
              hints: bytes | None = None) -> tuple[list[bytes], list[bytes | None], int]:
    """(keys, values, end) of the records at ``pos`` whose keys are in [lo, hi); ``end`` is
    where the records end, -1 when ``hi`` stopped the walk before it. ``hints`` (the C
    module's restart index of the same records) only speeds the C walk."""
    return _walk(data, pos, lo, hi, False)


def py_find(data: bytes, key: bytes, pos: int = 0, hints: bytes | None = None) -> tuple[bool, bytes | None]:
    """(found, value) of ``key`` (value None for a tombstone, or when not found). ``hints``
    (the C module's restart index of the same records) only speeds the C walk."""
    return _walk(data, pos, key, None, True)


encode = _c_encode or py_encode
decode = _c_decode or py_decode
find = _c_find or py_find
# index(data, pos, every) -> restart hints for find: after every `every`-th record, where the
# walk can resume (in memory only; None without the C module). A cached block builds them
# on its first lookup, so a get, or a scan starting inside the block, walks at most `every`
# records before its first key instead of half the block.
index = _c_index
HINT_EVERY = 16
