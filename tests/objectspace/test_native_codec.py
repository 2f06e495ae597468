"""The C value codec (objectspace/_native.c, RFC 0012) against the Python one, its reference
(objectspace/_codec.py): the same bytes for every value, the same value (type for type) or
the same error for every input, and a store written through either one the same byte for
byte (a subprocess each: the codec is chosen at import, OBJECTSPACE_NATIVE=0 keeps the
Python one)."""
from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import random
import textwrap
import uuid

import pytest

from objectspace import _codec, register_type, unregister_type

from .native_helpers import assert_same_store_on_both_paths

needs_c = pytest.mark.skipif(_codec._c_encode is None, reason="objectspace._native was not built (no compiler), "
                                                               "or OBJECTSPACE_NATIVE=0")
UTC = dt.timezone.utc

INTS = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1,
        2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**70, -1, -31, -32, -33, -127, -128, -129, -32767, -32768,
        -32769, -2**31 + 1, -2**31, -2**31 - 1, -2**63, -2**63 - 1, -2**80]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, -1e-300, 5e-324, math.inf, -math.inf, math.nan, 0.1]
LENGTHS = [0, 1, 15, 16, 31, 32, 33, 255, 256, 257, 65535, 65536]
MICROS = [0, 1, 127, 128, 255, 256, 65535, 65536, 999999]


class Color(enum.IntEnum):
    RED = 1


class MyDict(dict):
    pass


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


def _text(rng, n):
    if rng.random() < 0.5:
        return "".join(rng.choice("abcxyz_019") for _ in range(n))
    alphabet = "aé€😀\u0800ß"         # 1-, 2-, 3- and 4-byte UTF-8: the byte length is not n
    return "".join(rng.choice(alphabet) for _ in range(n))


def _datetime(rng):
    tz = rng.choice([None, None, UTC, UTC, dt.timezone(dt.timedelta(hours=2)),
                     dt.timezone(dt.timedelta(hours=-5, minutes=-30))])
    year = rng.choice([2024, 1970, 9999, 256, 255, 1, 100])
    d = dt.datetime(year, rng.randint(1, 12), rng.randint(1, 28), rng.randrange(24), rng.randrange(60),
                    rng.randrange(60), rng.choice(MICROS), tzinfo=tz, fold=rng.choice([0, 0, 1]))
    return d


def _leaf(rng):
    pick = rng.randrange(16)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.choice(INTS)
    if pick == 2:
        return rng.randrange(-2**64, 2**64)
    if pick == 3:
        return rng.choice(FLOATS) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6)
    if pick == 4:
        return _text(rng, rng.choice(LENGTHS[:9]) if rng.random() < 0.9 else rng.choice(LENGTHS))
    if pick == 5:
        return rng.randbytes(rng.choice(LENGTHS[:9]) if rng.random() < 0.9 else rng.choice(LENGTHS))
    if pick in (6, 7, 8):
        return _datetime(rng)
    if pick == 9:
        return rng.choice([(1, "a"), {1, 2}, frozenset({"x"}), dt.date(2024, 2, 29), dt.time(12, 30, 1, 5),
                           dt.timedelta(days=-1, seconds=5), decimal.Decimal("1.10"),
                           uuid.UUID(int=12345), bytearray(b"ba"), memoryview(b"mv")])
    if pick == 10:
        return Point(rng.randrange(10), "p")      # registered below
    if pick == 11:
        return rng.choice(["\ud800", Color.RED, MyDict(a=1), object()])   # errors, both ways alike
    if pick == 12:
        return dt.datetime(2024, 5, 1, 12, 0, 0, rng.choice(MICROS), tzinfo=UTC)   # the common row field
    return rng.choice([0, 1, "", "user", b""])


def _value(rng, depth=0):
    if depth > 3 or rng.random() < 0.45:
        return _leaf(rng)
    n = rng.choice([0, 1, 2, 3, 15, 16, 17]) if rng.random() < 0.97 else rng.choice([65535, 65536])
    if rng.random() < 0.5:
        return [_value(rng, depth + 1) if i < 40 else i for i in range(n)]
    out = {}
    for i in range(n):
        if i >= 40:         # the tail of a big map: cheap keys and values
            out[i] = i
            continue
        k = rng.choice([_text(rng, rng.randrange(8)), rng.choice(INTS), i, None, 1.5, b"k",
                        dt.datetime(2024, 1, 1, tzinfo=UTC)])
        out[k] = _value(rng, depth + 1)
    return out


def _deep(n, leaf):
    v = leaf
    for i in range(n):
        v = [v] if i % 2 else {"k": v}
    return v


@pytest.fixture(autouse=True, scope="module")
def _registered():
    register_type(Point, 42, lambda p: [p.x, p.y], lambda v: Point(*v))
    yield
    unregister_type(Point)


def same(a, b) -> bool:
    """Equal, type for type (bool is not int, tuple is not list), NaN equal to NaN, dict keys
    in the same order, datetimes with the same tzinfo."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is dict:
        return list(map(type, a)) == list(map(type, b)) and list(a) == list(b) and \
            all(same(a[k], b[k]) for k in a)
    if type(a) is dt.datetime:
        return a == b and a.tzinfo == b.tzinfo and a.fold == b.fold
    return a == b


def outcome(f, x):
    try:
        return "ok", f(x)
    except Exception as e:  # noqa: BLE001 - the outcome is compared, whatever it is
        return "error", (type(e), str(e))


def same_outcome(a, b) -> bool:
    if a[0] != b[0]:
        return False
    return a[1] == b[1] if a[0] == "error" else (same(a[1], b[1]) if type(a[1]) is not bytes else a[1] == b[1])


@needs_c
def test_the_codec_in_use_is_the_c_one():
    assert _codec.encode is _codec._c_encode and _codec.decode is _codec._c_decode
    assert _codec.MSGPACK.encode is _codec._c_encode


@needs_c
@pytest.mark.parametrize("value", [None, True, False, *INTS, *FLOATS, "", "a" * 31, "é" * 16, b"", b"x" * 255,
                                   [], {}, [1, [2, [3]]], {"a": {"b": None}},
                                   *(dt.datetime(2024, 1, 2, 3, 4, 5, us) for us in MICROS),
                                   *(dt.datetime(2024, 1, 2, 3, 4, 5, us, tzinfo=UTC, fold=1) for us in MICROS),
                                   dt.datetime(255, 1, 1), dt.datetime(1, 1, 1, tzinfo=UTC),
                                   dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(0))),
                                   {"user": "u0000001", "ts": dt.datetime(2024, 1, 1, tzinfo=UTC), "seq": 7}],
                         ids=repr)
def test_the_same_bytes_and_values_for_each_kind_of_value(value):
    assert same_outcome(outcome(_codec._c_encode, value), outcome(_codec.py_encode, value))
    data = _codec.py_encode(value)
    assert same_outcome(outcome(_codec._c_decode, data), outcome(_codec.py_decode, data))
    assert same(_codec._c_decode(data), value) or (type(value) is float and math.isnan(value))


def _seeds(n: int, fast: int) -> list:
    """Seeds 0..n-1, those from ``fast`` on marked slow (``make test-all`` runs them all)."""
    return [s if s < fast else pytest.param(s, marks=pytest.mark.slow) for s in range(n)]


@needs_c
@pytest.mark.parametrize("seed", _seeds(30, 6))
def test_random_values_encode_to_the_same_bytes_and_decode_to_the_same_values(seed):
    rng = random.Random(seed)
    for _ in range(40):
        v = _value(rng)
        c, p = outcome(_codec._c_encode, v), outcome(_codec.py_encode, v)
        assert same_outcome(c, p), (v, c, p)
        if p[0] == "ok":
            assert same_outcome(outcome(_codec._c_decode, p[1]), outcome(_codec.py_decode, p[1])), v


@needs_c
def test_nesting_past_the_c_limit_goes_to_python():
    for n in (63, 64, 65, 66, 120, 600):
        v = _deep(n, dt.datetime(2024, 1, 1, tzinfo=UTC))
        c, p = outcome(_codec._c_encode, v), outcome(_codec.py_encode, v)
        assert same_outcome(c, p), n
        if p[0] == "ok":        # compared through their encodings: same() would recurse too deep
            dc, dp = outcome(_codec._c_decode, p[1]), outcome(_codec.py_decode, p[1])
            assert dc[0] == dp[0] == "ok" and _codec.py_encode(dc[1]) == _codec.py_encode(dp[1]) == p[1], n
    loop: list = []
    loop.append(loop)
    assert outcome(_codec._c_encode, loop) == outcome(_codec.py_encode, loop)


@needs_c
@pytest.mark.parametrize("seed", _seeds(20, 4))
def test_damaged_or_foreign_bytes_give_the_same_value_or_the_same_error(seed):
    rng = random.Random(1000 + seed)
    for _ in range(30):
        ok, data = outcome(_codec.py_encode, _value(rng))
        if ok != "ok":
            continue
        data = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            if data and rng.random() < 0.7:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif rng.random() < 0.5:
                del data[rng.randrange(len(data) + 1):]
            else:
                data += rng.randbytes(rng.randrange(1, 4))
        for raw in (bytes(data), rng.randbytes(rng.randrange(0, 12))):
            assert same_outcome(outcome(_codec._c_decode, raw), outcome(_codec.py_decode, raw)), raw


@needs_c
def test_datetime_payloads_the_c_codec_does_not_build_go_to_python():
    ext = _codec.EXT_DATETIME
    import msgpack

    def ext_of(payload):
        return msgpack.packb(msgpack.ExtType(ext, msgpack.packb(payload)))
    for payload in ([2024, 1, 1, 0, 0, 0, 0, None, 0], [2024, 1, 1, 0, 0, 0, 0, 0, 1], [2024, 1, 1, 0, 0, 0, 0, 0.0, 0],
                    [2024, 1, 1, 0, 0, 0, 0, 7_200_000_000, 0], [2024, 13, 1, 0, 0, 0, 0, None, 0],
                    [2024, 1, 1, 0, 0, 0, 0, None, 2], [True, 1, 1, 0, 0, 0, 0, None, 0], [2024, 1, 1],
                    [2024.0, 1, 1, 0, 0, 0, 0, None, 0], [2**40, 1, 1, 0, 0, 0, 0, None, 0], "x"):
        raw = ext_of(payload)
        assert same_outcome(outcome(_codec._c_decode, raw), outcome(_codec.py_decode, raw)), payload


@needs_c
def test_the_caches_of_keys_and_datetimes_never_change_a_value():
    """The C decoder keeps the str keys and datetimes it built last in small caches (256 slots
    each): thousands of distinct ones, read back twice in another order, collide and evict."""
    rng = random.Random(3)
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    rows = [{f"k{i}": i, _text(rng, rng.randrange(1, 25)): t0 + dt.timedelta(microseconds=rng.randrange(10**12)),
             "ts": dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i, microseconds=rng.choice(MICROS))}
            for i in range(3000)]
    raws = [_codec.py_encode(r) for r in rows]
    for order in (range(3000), rng.sample(range(3000), 3000)):
        for i in order:
            assert same(_codec._c_decode(raws[i]), rows[i]) and same(_codec._c_decode(raws[i]), _codec.py_decode(raws[i]))


@needs_c
def test_decode_takes_what_unpackb_takes():
    data = _codec.py_encode({"a": [1, 2.5, "x"]})
    for raw in (memoryview(data), bytearray(data), "not bytes", None):
        assert same_outcome(outcome(_codec._c_decode, raw), outcome(_codec.py_decode, raw)), raw


# -- a store written through each codec ----------------------------------------------------

_WRITER = textwrap.dedent('''
    import datetime as dt, random, sys
    from objectspace import ObjectSpace, _codec
    assert (_codec.encode is _codec.py_encode) == (sys.argv[2] == "python")
    rng = random.Random(5)
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    # background=False: flushes run in the writing thread, so which SSTs a manifest finds in
    # flight (its "reserved" numbers) does not depend on thread timing
    space = ObjectSpace.open(sys.argv[1], inline_segment_bytes=0, flush_segments=3, background=False)
    for cp in range(8):
        for k in range(150):
            q = space.get_or_create_queue(("user", k))
            for j in range(2):
                q.append({"user": f"u{k:05d}", "ts": t0 + dt.timedelta(milliseconds=rng.randrange(10**7)),
                          "seq": rng.randrange(1 << 40), "v": rng.choice([1.5, None, "é", b"b", [1, 2]])})
            while len(q) > 5:
                q.popleft()
        d = space.get_or_create_dict("misc")
        d[f"k{cp}"] = [(1, 2), {3}, dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))), 2**70]
        space.checkpoint()
    for k in range(0, 150, 7):
        assert len(list(space.get_queue(("user", k)))) == 5
    space.close()
''')


@needs_c
def test_a_store_written_through_either_codec_is_the_same_byte_for_byte(tmp_path):
    assert_same_store_on_both_paths(_WRITER, tmp_path)
