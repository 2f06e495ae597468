"""Front coding of sorted records: each key is stored as the length of the prefix it shares
with the previous key plus the rest (each value likewise, against the previous value).

Sorted keys of one object differ in their last bytes only (``.../items/<slot>``), and zstd
spends about two bytes on every key it has to match whole; front-coded, the same keys
compress to a fifth of a byte each (a spark_ops buffer batch: 482 KB of keys -> 68 KB), and
values of one kind shrink by a third. Layout (little-endian varints)::

    varint n
    n x key:    varint shared, varint suffix_len, suffix bytes
    n x value:  varint shared, varint code, suffix bytes    (code 0: tombstone; else
                                                               suffix_len = code - 1)

``shared`` counts against the previous key, or the previous non-tombstone value. The C
module ``_native`` (built with the package when a compiler is there) writes and reads the
same bytes ~25x faster; this module is its reference and fallback.
"""
from __future__ import annotations

try:
    from ._native import decode as _c_decode
    from ._native import encode as _c_encode
except ImportError:          # pragma: no cover - no compiler when installed
    _c_encode = _c_decode = None


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


def py_encode(keys: list, values: list) -> bytes:
    if len(keys) != len(values):
        raise ValueError("keys and values differ in length")
    out = bytearray()
    _varint(out, len(keys))
    prev = b""
    for k in keys:
        if type(k) is not bytes:
            raise TypeError("keys must be bytes")
        s = _shared(prev, k)
        _varint(out, s)
        _varint(out, len(k) - s)
        out += k[s:]
        prev = k
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


def _read_varint(buf, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        if pos >= len(buf) or shift > 56:
            raise ValueError("front-coded records are malformed")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, pos
        shift += 7


def py_decode(data, pos: int = 0) -> tuple[list, list, int]:
    buf = bytes(data)
    n, pos = _read_varint(buf, pos)
    if n > len(buf):
        raise ValueError("front-coded records are malformed")
    out = ([], [])
    for stream in (0, 1):
        items = out[stream]
        prev = b""
        for _ in range(n):
            sh, pos = _read_varint(buf, pos)
            code, pos = _read_varint(buf, pos)
            if stream and code == 0:
                if sh:
                    raise ValueError("front-coded records are malformed")
                items.append(None)
                continue
            slen = code - stream
            if sh > len(prev) or pos + slen > len(buf):
                raise ValueError("front-coded records are malformed")
            prev = prev[:sh] + buf[pos:pos + slen]
            pos += slen
            items.append(prev)
    return out[0], out[1], pos


encode = _c_encode or py_encode
decode = _c_decode or py_decode
