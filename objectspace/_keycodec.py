"""Order-preserving, prefix-free encoding of keys and object names (see docs/format/objectspace.md).

``encode_key(a) < encode_key(b)`` (bytewise) exactly when ``a < b`` for two values of the
same type; across types the order is by type::

    None < False < True < int < float < bytes < str < tuple

Every encoding is self-delimiting, so no encoded key is a prefix of another; that is what
lets a tuple's elements be concatenated and what keeps one object's keys out of another's
namespace. Types are kept apart: ``1``, ``1.0`` and ``True`` are three different keys
(Python treats them as one); ``-0.0`` is stored as ``0.0`` (Python treats them as one);
NaN is rejected because it has no place in any order.

Layout (tag byte first)::

    0x10 None            0x18 False   0x19 True
    0x20 int   one length byte: 0x80 zero, 0x80+L for L payload bytes (L < 127), 0xFF + 8-byte L;
               negatives 0x7F-L (L < 127) or 0x00 + 8-byte (2**64-1-L), payload (256**L-1-|n|)
    0x30 float 8 bytes: IEEE 754 bits, sign bit flipped (positive) or all bits inverted (negative)
    0x40 bytes 0x50 str (UTF-8): bytes with 0x00 escaped as 0x00 0xFF, then 0x00 0x01
    0x60 tuple elements, then 0x00

The two-byte terminator is what makes strings prefix-free: inside the payload every 0x00
is followed by 0xFF, so the first 0x00 0x01 ends it (with a one-byte 0x00 terminator,
``"a"`` would encode as a prefix of ``"a\x00"``).
"""
from __future__ import annotations

import struct
from typing import Any

from .errors import EncodingError

T_END = 0x00
T_NONE, T_FALSE, T_TRUE = 0x10, 0x18, 0x19
T_INT, T_FLOAT, T_BYTES, T_STR, T_TUPLE = 0x20, 0x30, 0x40, 0x50, 0x60

_NONE, _FALSE, _TRUE = bytes((T_NONE,)), bytes((T_FALSE,)), bytes((T_TRUE,))
_ZERO = bytes((T_INT, 0x80))
_STR, _BYTES, _FLOAT, _TUPLE = bytes((T_STR,)), bytes((T_BYTES,)), bytes((T_FLOAT,)), bytes((T_TUPLE,))
_END = b"\x00"
_STR_END = b"\x00\x01"
_D = struct.Struct(">d")
_Q = struct.Struct(">Q")
_MASK64 = (1 << 64) - 1
_SIGN = 1 << 63


def _escape(b: bytes) -> bytes:
    return (b.replace(b"\x00", b"\x00\xff") if b"\x00" in b else b) + _STR_END


_POS = [bytes((T_INT, 0x80 + length)) for length in range(127)]


def _enc_int(n: int) -> bytes:
    if n > 0:
        length = (n.bit_length() + 7) >> 3
        if length < 127:
            return _POS[length] + n.to_bytes(length, "big")
        return bytes((T_INT, 0xFF)) + length.to_bytes(8, "big") + n.to_bytes(length, "big")
    if n == 0:
        return _ZERO
    m = -n
    length = (m.bit_length() + 7) >> 3
    payload = ((1 << (8 * length)) - 1 - m).to_bytes(length, "big")
    if length < 127:
        return bytes((T_INT, 0x7F - length)) + payload
    return bytes((T_INT, 0x00)) + (_MASK64 - length).to_bytes(8, "big") + payload


def _enc_float(x: float) -> bytes:
    if x != x:
        raise ValueError("NaN cannot be used as a key: it has no place in any order")
    if x == 0.0:
        x = 0.0   # -0.0 == 0.0 in Python, so they are one key
    bits = _Q.unpack(_D.pack(x))[0]
    bits = bits ^ _MASK64 if bits & _SIGN else bits | _SIGN
    return _FLOAT + _Q.pack(bits)


def _enc(k, out: list) -> None:
    t = type(k)
    if t is str:
        out.append(_STR + _escape(k.encode("utf-8", "surrogatepass")))
    elif t is int:
        out.append(_enc_int(k))
    elif t is tuple:
        out.append(_TUPLE)
        for e in k:
            _enc(e, out)
        out.append(_END)
    elif t is bytes:
        out.append(_BYTES + _escape(k))
    elif t is float:
        out.append(_enc_float(k))
    elif k is None:
        out.append(_NONE)
    elif t is bool:
        out.append(_TRUE if k else _FALSE)
    elif (twin := _key_twin(t)) is not None:       # a numpy scalar: the key it stands for
        _enc(twin(k), out)
    else:
        raise EncodingError(f"{t.__name__} cannot be a key: keys are None, bool, int, float, "
                            "bytes, str or tuples of them")


def _key_twin(t: type):
    """The Python key type a numpy bool, integer, float, str or bytes scalar stands for
    (``d[np.int64(3)]`` is ``d[3]``, as in a dict); None for anything else."""
    from ._codec import _twin_of
    twin = _twin_of(t)
    return twin if twin in (bool, int, float, str, bytes) else None


_SHORT_STRS: dict = {}    # str -> encoding (only str keys: 1 == 1.0 == True are distinct keys)


def encode_key(k: Any) -> bytes:
    """The order-preserving encoding of ``k``. O(size of k).

    Raises EncodingError (a TypeError) for an unsupported type and ValueError for NaN.

    >>> encode_key(1) < encode_key(2) < encode_key(1.5) < encode_key("a")
    True
    """
    t = type(k)
    if t is str:   # fast path: the common key; short ones (names, fields) are remembered
        ek = _SHORT_STRS.get(k)
        if ek is not None:
            return ek
        try:
            ek = _STR + _escape(k.encode())
        except UnicodeEncodeError:
            pass
        else:
            if len(k) <= 32:
                if len(_SHORT_STRS) >= 4096:
                    _SHORT_STRS.clear()
                _SHORT_STRS[k] = ek
            return ek
    elif t is int:
        return _enc_int(k)
    out: list = []
    _enc(k, out)
    return b"".join(out)


def _unescape(b: bytes, i: int) -> tuple[bytes, int]:
    parts = []
    while True:
        j = b.index(b"\x00", i)
        nxt = b[j + 1]
        if nxt == 0xFF:
            parts.append(b[i:j + 1])
            i = j + 2
            continue
        if nxt != 0x01:
            raise ValueError(f"bad escape 0x00 0x{nxt:02x} at offset {j}")
        parts.append(b[i:j])
        return b"".join(parts), j + 2


def _dec(b: bytes, i: int):
    t = b[i]
    i += 1
    if t == T_STR:
        raw, i = _unescape(b, i)
        return raw.decode("utf-8", "surrogatepass"), i
    if t == T_INT:
        lb = b[i]
        i += 1
        if lb == 0x80:
            return 0, i
        if lb == 0xFF or lb == 0x00:
            length = int.from_bytes(b[i:i + 8], "big")
            i += 8
            if lb == 0x00:
                length = _MASK64 - length
        else:
            length = lb - 0x80 if lb > 0x80 else 0x7F - lb
        payload = int.from_bytes(b[i:i + length], "big")
        i += length
        if lb > 0x80:
            return payload, i
        return -((1 << (8 * length)) - 1 - payload), i
    if t == T_TUPLE:
        items = []
        while b[i] != T_END:
            v, i = _dec(b, i)
            items.append(v)
        return tuple(items), i + 1
    if t == T_BYTES:
        return _unescape(b, i)
    if t == T_FLOAT:
        bits = _Q.unpack_from(b, i)[0]
        bits = bits ^ _SIGN if bits & _SIGN else bits ^ _MASK64
        return _D.unpack(_Q.pack(bits))[0], i + 8
    if t == T_NONE:
        return None, i
    if t == T_FALSE or t == T_TRUE:
        return t == T_TRUE, i
    raise ValueError(f"unknown key tag 0x{t:02x} at offset {i - 1}")


def decode_key(b: bytes, offset: int = 0) -> Any:
    """Inverse of encode_key. O(len(b)). Raises ValueError on bytes that are not a key."""
    try:
        v, end = _dec(b, offset)
    except (IndexError, struct.error) as e:
        raise ValueError(f"truncated key {b!r:.60}") from e
    if end != len(b):
        raise ValueError(f"trailing bytes after key in {b!r:.60}")
    return v


# -- object names ------------------------------------------------------------------------

def check_name(name):
    """Validate an object name: a non-empty str, or a non-empty tuple of str/int/bytes."""
    t = type(name)
    if t is str:
        if name:
            return name
    elif t is tuple and name:
        for part in name:
            if type(part) not in (str, int, bytes):
                raise TypeError(f"object name parts must be str, int or bytes, got "
                                f"{type(part).__name__} in {name!r}")
        return name
    raise TypeError(f"object names are non-empty str or tuples of str/int/bytes, got {name!r}")


def encode_name(name: Any) -> bytes:
    """Prefix-free, order-preserving bytes of an object name (the key encoding of it).
    O(len(name)). Raises TypeError for a name that is not a str or a tuple of str/int/bytes."""
    t = type(name)
    if t is str and name:
        return _STR + _escape(name.encode("utf-8", "surrogatepass"))
    if t is tuple and name:
        out = [_TUPLE]
        for part in name:     # the common per-key scope, e.g. ("user-42", "items"), without recursion
            tp = type(part)
            if tp is str:
                out.append(_STR + _escape(part.encode("utf-8", "surrogatepass")))
            elif tp is int:
                out.append(_enc_int(part))
            elif tp is bytes:
                out.append(_BYTES + _escape(part))
            else:
                check_name(name)
        out.append(_END)
        return b"".join(out)
    check_name(name)
    raise AssertionError("unreachable")


def encode_name_scope(prefix) -> bytes:
    """Bytes every encoded name in a scope starts with (for ``names(prefix=...)``).

    A tuple scope ``("user-42",)`` covers tuple names whose first parts are those; a str
    scope ``"tmp-"`` covers str names starting with it.
    """
    if type(prefix) is str:
        return _STR + prefix.encode("utf-8", "surrogatepass").replace(b"\x00", b"\x00\xff")
    if type(prefix) is tuple:
        if prefix:
            check_name(prefix)
        return encode_key(prefix)[:-1]
    raise TypeError(f"a names() prefix is a str or a tuple, got {prefix!r}")
