"""Value codecs: msgpack with an ext-type registry (never pickle), and raw bytes.

The msgpack codec stores None, bool, int, float, str, bytes, list and dict natively and
these through ext codes (docs/format/objectspace.md lists the payloads)::

    1 tuple  2 set  3 frozenset  4 datetime  5 date  6 Decimal  7 UUID  8 int beyond 64 bits
    9 time  10 timedelta

User types get codes 16..127 with ``register_type``. Types are matched exactly (a
subclass of dict or int is not silently stored as its base: register it), so nothing is
stored in a form that reads back as something else; numpy and pandas scalars are the
exception, stored as the Python values they stand for (``_twin_of``): what a pandas or numpy
user has in hand is a number or a time, and it reads back as one.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import logging
import struct
import uuid
from collections.abc import Callable
from typing import Any

import msgpack

from dkv import native_enabled

log = logging.getLogger(__name__)

EXT_TUPLE, EXT_SET, EXT_FROZENSET, EXT_DATETIME, EXT_DATE = 1, 2, 3, 4, 5
EXT_DECIMAL, EXT_UUID, EXT_BIGINT, EXT_TIME, EXT_TIMEDELTA = 6, 7, 8, 9, 10
FIRST_USER_CODE, LAST_USER_CODE = 16, 127

_user_by_type: dict[type, tuple[int, object]] = {}
_user_by_code: dict[int, tuple[type, object]] = {}


def register_type(cls: type, code: int, encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> None:
    """Store instances of ``cls`` (exact type) under msgpack ext ``code`` (16..127).

    ``encode(obj)`` returns any storable value (it may nest other registered types);
    ``decode(value)`` rebuilds the object. Register the same codes in every process that
    reads the state. Raises ValueError for a code out of range or already taken.

    >>> class P:
    ...     def __init__(self, x): self.x = x
    >>> register_type(P, 42, lambda p: p.x, P)
    >>> decode(encode(P(3))).x
    3
    >>> unregister_type(P)
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_type needs a class, got {cls!r}")
    if not isinstance(code, int) or not FIRST_USER_CODE <= code <= LAST_USER_CODE:
        raise ValueError(f"user ext codes are {FIRST_USER_CODE}..{LAST_USER_CODE}, got {code!r}")
    if code in _user_by_code and _user_by_code[code][0] is not cls:
        raise ValueError(f"ext code {code} is taken by {_user_by_code[code][0].__qualname__}")
    if cls in _BUILTIN_ENCODERS:
        raise ValueError(f"{cls.__qualname__} is stored natively; it cannot be registered")
    old = _user_by_type.pop(cls, None)
    if old is not None:
        _user_by_code.pop(old[0], None)
    _user_by_type[cls] = (code, encode)
    _user_by_code[code] = (cls, decode)


def unregister_type(cls: type) -> None:
    """Forget a registration (values already stored under its code become unreadable)."""
    entry = _user_by_type.pop(cls, None)
    if entry is not None:
        _user_by_code.pop(entry[0], None)


def _pack_nested(obj) -> bytes:
    return msgpack.packb(obj, default=_default, strict_types=True, use_bin_type=True)


def _tz_seconds(t) -> object:
    off = t.utcoffset()
    return None if off is None else off // _dt.timedelta(microseconds=1)


_BUILTIN_ENCODERS = {
    tuple: lambda o: (EXT_TUPLE, _pack_nested(list(o))),
    set: lambda o: (EXT_SET, _pack_nested(list(o))),
    frozenset: lambda o: (EXT_FROZENSET, _pack_nested(list(o))),
    _dt.datetime: lambda o: (EXT_DATETIME, _pack_nested(
        [o.year, o.month, o.day, o.hour, o.minute, o.second, o.microsecond, _tz_seconds(o), o.fold])),
    _dt.date: lambda o: (EXT_DATE, _pack_nested(o.toordinal())),
    _dt.time: lambda o: (EXT_TIME, _pack_nested(
        [o.hour, o.minute, o.second, o.microsecond, _tz_seconds(o), o.fold])),
    _dt.timedelta: lambda o: (EXT_TIMEDELTA, _pack_nested([o.days, o.seconds, o.microseconds])),
    decimal.Decimal: lambda o: (EXT_DECIMAL, str(o).encode()),
    uuid.UUID: lambda o: (EXT_UUID, o.bytes),
    int: lambda o: (EXT_BIGINT, str(o).encode()),
}


def _ext(code: int, data: bytes):
    # ExtType without its argument checks (ours are always an int code and bytes).
    return tuple.__new__(msgpack.ExtType, (code, data))


_UTC = _dt.timezone.utc
_DT_HEAD = struct.Struct(">BBHBBBBB").pack    # fixarray(9), uint16 year, month .. second
_U16 = struct.Struct(">BH").pack
_U32 = struct.Struct(">BI").pack


_DT_MEMO: dict = {}         # id(datetime) -> (the datetime, its ext); see _encode_datetime
_DT_MEMO_MAX = 4096


def _encode_datetime(o):
    """The datetime ext, memoised by object: rows often share one datetime object (spark_ops
    makes equal timestamps of a batch one object), and the memo holds the object, so its
    id cannot be reused while the entry lives."""
    hit = _DT_MEMO.get(id(o))
    if hit is not None and hit[0] is o:
        return hit[1]
    ext = _build_datetime(o)
    if len(_DT_MEMO) >= _DT_MEMO_MAX:
        _DT_MEMO.clear()
    _DT_MEMO[id(o)] = (o, ext)
    return ext


def _build_datetime(o):
    """The datetime ext, byte for byte what the generic path packs, built directly for the
    common case (naive or UTC, year >= 256): rows full of timestamps are what operators store."""
    tz = o.tzinfo
    if (tz is None or tz is _UTC) and o.year >= 256:
        us = o.microsecond
        if us < 128:
            mid = bytes((us,))
        elif us < 256:
            mid = bytes((0xcc, us))
        elif us < 65536:
            mid = _U16(0xcd, us)
        else:
            mid = _U32(0xce, us)
        tail = (b"\xc0" if tz is None else b"\x00") + (b"\x01" if o.fold else b"\x00")
        return _ext(EXT_DATETIME, _DT_HEAD(0x99, 0xcd, o.year, o.month, o.day, o.hour, o.minute, o.second)
                    + mid + tail)
    return _ext(*_BUILTIN_ENCODERS[_dt.datetime](o))


_EXT_ENCODERS = {t: (lambda enc: lambda o: _ext(*enc(o)))(enc) for t, enc in _BUILTIN_ENCODERS.items()}
_EXT_ENCODERS[_dt.datetime] = _encode_datetime


def _default(obj):
    t = type(obj)
    enc = _EXT_ENCODERS.get(t)
    if enc is not None:
        return enc(obj)
    user = _user_by_type.get(t)
    if user is not None:
        return msgpack.ExtType(user[0], _pack_nested(user[1](obj)))
    twin = _twin_of(t)
    if twin is not None:
        v = twin(obj)
        enc = _EXT_ENCODERS.get(type(v))        # msgpack calls default once per value
        return v if enc is None else enc(v)
    raise TypeError(f"cannot store a value of type {t.__module__}.{t.__qualname__} "
                    "(register it with objectspace.register_type)")


_TWINS: dict = {}       # numpy / pandas type -> converter to the Python value it stands for (or None)


def _twin_of(t: type):
    """How a numpy or pandas scalar is stored: as the Python value it is (np.float64 -> float,
    np.int64 -> int, np.bool_ -> bool, np.str_ -> str, np.datetime64 and pandas.Timestamp ->
    datetime, np.timedelta64 and pandas.Timedelta -> timedelta; NaT -> None). They read back
    as those Python values. None for any other type. Decided once per type."""
    try:
        return _TWINS[t]
    except KeyError:
        pass
    table = {"numpy": _numpy_twins, "pandas": _pandas_twins}.get(t.__module__.split(".", 1)[0])
    twin = next((f for base, f in table() if issubclass(t, base)), None) if table is not None else None
    _TWINS[t] = twin
    return twin


def _numpy_twins() -> tuple:
    """(numpy base class, converter), tried in order: timedelta64 is a signedinteger to
    numpy, so it comes before integer."""
    import numpy as np
    return ((np.bool_, bool), (np.datetime64, _np_datetime), (np.timedelta64, _np_timedelta), (np.integer, int),
            (np.floating, float), (np.str_, str), (np.bytes_, bytes))


def _pandas_twins() -> tuple:
    import pandas as pd
    return ((pd.Timestamp, _pd_timestamp), (pd.Timedelta, _pd_timedelta), (type(pd.NaT), _none))


def _none(_):
    return None


def _np_datetime(v):
    """A numpy datetime64 as a naive datetime (microseconds: finer units are cut), NaT: None."""
    import numpy as np
    if np.isnat(v):
        return None
    out = v.astype("datetime64[us]").item()
    return out if isinstance(out, _dt.datetime) else _dt.datetime(out.year, out.month, out.day)


def _np_timedelta(v):
    import numpy as np
    if np.isnat(v):
        return None
    return v.astype("timedelta64[us]").item()


def _pd_timestamp(v):
    """A pandas Timestamp as the datetime it is (its zone's offset kept; nanoseconds cut)."""
    return _dt.datetime(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond, v.tzinfo, fold=v.fold)


def _pd_timedelta(v):
    return _dt.timedelta(microseconds=v.value // 1000)


_TZ: dict = {None: None, 0: _UTC}


def _tz(seconds):
    tz = _TZ.get(seconds)
    if tz is None and seconds is not None:
        tz = _dt.timezone(_dt.timedelta(microseconds=seconds))
        if len(_TZ) < 64:
            _TZ[seconds] = tz
    return tz


_DT_DECODED: dict = {}      # ext bytes -> datetime (immutable, so rows may share one)
_DT_DECODED_MAX = 4096


def _decode_datetime(data: bytes):
    """A datetime ext's value, memoised by its bytes: rows read back together share their
    timestamps more often than not (a batch's events)."""
    o = _DT_DECODED.get(data)
    if o is None:
        y, mo, d, h, mi, s, us, tz, fold = _unpack(data)
        o = _dt.datetime(y, mo, d, h, mi, s, us, _tz(tz), fold=fold)
        if len(_DT_DECODED) >= _DT_DECODED_MAX:
            _DT_DECODED.clear()
        _DT_DECODED[data] = o
    return o


def _ext_hook(code: int, data: bytes):
    if code == EXT_DATETIME:
        return _decode_datetime(data)
    if code == EXT_TUPLE:
        return tuple(_unpack(data))
    if code == EXT_SET:
        return set(_unpack(data))
    if code == EXT_FROZENSET:
        return frozenset(_unpack(data))
    if code == EXT_DATE:
        return _dt.date.fromordinal(_unpack(data))
    if code == EXT_TIME:
        h, mi, s, us, tz, fold = _unpack(data)
        return _dt.time(h, mi, s, us, _tz(tz), fold=fold)
    if code == EXT_TIMEDELTA:
        return _dt.timedelta(*_unpack(data))
    if code == EXT_DECIMAL:
        return decimal.Decimal(data.decode())
    if code == EXT_UUID:
        return uuid.UUID(bytes=data)
    if code == EXT_BIGINT:
        return int(data.decode())
    user = _user_by_code.get(code)
    if user is None:
        raise ValueError(f"unknown msgpack ext code {code}: register its type with objectspace.register_type")
    return user[1](_unpack(data))


def _unpack(raw: bytes):
    return msgpack.unpackb(raw, ext_hook=_ext_hook, strict_map_key=False, raw=False)


_packer = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True)


def py_encode(value) -> bytes:
    """msgpack bytes of a value. O(size). Raises TypeError (unsupported type) or
    OverflowError/ValueError from msgpack; callers wrap them with the object and slot."""
    return _packer.pack(value)


py_decode = _unpack

# The C twin (objectspace/_native.c, RFC 0012): the same bytes and values for rows of plain
# values and naive or UTC datetimes, 4-5x fewer instructions; it hands every other value to
# py_encode / py_decode, so errors and registered types are theirs. OBJECTSPACE_NATIVE=0
# keeps the Python codec (the reference) with the C one built: CI runs the suites both ways.
def _load_native() -> Any:
    if not native_enabled():
        return None
    try:
        from . import _native
    except ImportError:      # pragma: no cover - built without a compiler
        return None
    _native.setup(py_encode, py_decode, EXT_DATETIME)
    return _native


_native_codec = _load_native()
"""The C module (objectspace/_native.c: the codec, and the save path of objectspace/_savepath.py),
or None: not built, or OBJECTSPACE_NATIVE=0."""
_c_encode = _native_codec.encode if _native_codec is not None else None
_c_decode = _native_codec.decode if _native_codec is not None else None

encode = _c_encode or py_encode
"""msgpack bytes of a value: the C codec when built, else ``py_encode``."""
decode = _c_decode or py_decode
"""The value of msgpack bytes: the C codec when built, else ``py_decode``."""


class Codec:
    """A named element codec: ``encode(value) -> bytes`` and ``decode(bytes) -> value``."""

    __slots__ = ("name", "code", "encode", "decode")

    def __init__(self, name: str, code: int, encode, decode) -> None:
        self.name, self.code, self.encode, self.decode = name, code, encode, decode

    def __repr__(self) -> str:
        return f"<Codec {self.name}>"


def _raw_encode(value) -> bytes:
    if type(value) is not bytes:
        raise TypeError(f"the raw codec stores bytes only, got {type(value).__name__}")
    return value


def _raw_decode(raw: bytes) -> bytes:
    return raw


MSGPACK = Codec("msgpack", 1, encode, decode)
RAW = Codec("raw", 2, _raw_encode, _raw_decode)
CODECS_BY_NAME = {c.name: c for c in (MSGPACK, RAW)}
CODECS_BY_CODE = {c.code: c for c in (MSGPACK, RAW)}


def codec_named(name: str) -> Codec:
    """The codec called ``name`` ("msgpack" or "raw"). Raises ValueError for others."""
    try:
        return CODECS_BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown codec {name!r}; known: {', '.join(CODECS_BY_NAME)}") from None
