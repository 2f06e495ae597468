"""User keys as object-name parts: str and int pass through, other types get a tagged
bytes form that converts back exactly (so a timer can hand the key back to the operator)."""
from __future__ import annotations

import datetime as _dt
import math
import struct

_EPOCH = _dt.datetime(1970, 1, 1)


def to_parts(key: tuple) -> tuple:
    out = []
    for v in key:
        t = type(v)
        if t is str or t is int:
            out.append(v)
        elif v is None:
            out.append(b"n")
        elif t is bool:
            out.append(b"?" + bytes((v,)))
        elif isinstance(v, (bytes, bytearray, memoryview)):
            out.append(b"b" + bytes(v))
        elif isinstance(v, float):
            if math.isnan(v):
                raise ValueError("a key value cannot be NaN")
            out.append(b"f" + struct.pack(">d", v))
        elif isinstance(v, _dt.datetime):
            out.append(b"t" + _micros(v).to_bytes(8, "big", signed=True))
        elif isinstance(v, _dt.date):
            out.append(b"d" + v.toordinal().to_bytes(4, "big"))
        elif hasattr(v, "item") and not isinstance(v, (list, tuple, dict)):   # numpy scalars
            out.extend(to_parts((v.item(),)))
        else:
            raise TypeError(f"key values must be str, int, float, bool, bytes, date, datetime or None; "
                            f"got {type(v).__name__}: {v!r:.60}")
    return tuple(out)


def _micros(v: _dt.datetime) -> int:
    if v.tzinfo is not None:
        v = v.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    d = v - _EPOCH
    return (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds


_PLAIN_PARTS = frozenset({str, int})


def from_parts(parts) -> tuple:
    out = []
    for p in parts:
        if not isinstance(p, (bytes, bytearray)):
            out.append(p)
            continue
        tag, body = p[:1], bytes(p[1:])
        if tag == b"n":
            out.append(None)
        elif tag == b"?":
            out.append(bool(body[0]))
        elif tag == b"b":
            out.append(body)
        elif tag == b"f":
            out.append(struct.unpack(">d", body)[0])
        elif tag == b"t":
            out.append(_EPOCH + _dt.timedelta(microseconds=int.from_bytes(body, "big", signed=True)))
        elif tag == b"d":
            out.append(_dt.date.fromordinal(int.from_bytes(body, "big")))
        else:
            raise ValueError(f"unknown key part tag {tag!r}")
    return tuple(out)


def user_key(parts, arity: int):
    """The key as operators see it: a scalar for one key column, else a tuple."""
    if arity == 1 and type(parts[0]) in _PLAIN_PARTS:     # a str or int key: the part itself
        return parts[0]
    key = from_parts(parts)
    return key[0] if arity == 1 else key
