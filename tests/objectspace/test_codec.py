"""The value codec: msgpack with ext types, user registration, no pickle, and errors that
name the object and slot while leaving the batch and the objects untouched."""
from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pytest

from objectspace import EncodingError, KindMismatchError, ObjectSpace, encode_key, register_type, unregister_type
from objectspace._codec import decode, encode
from .os_helpers import commit

VALUES = [
    None, True, 0, -1, 1 << 63, -(1 << 63) - 1, 1 << 300, 1.5, float("inf"), "é", b"\x00", [1, [2]],
    {"a": {"b": 1}}, (1, "a", (None,)), {1, 2}, frozenset({"x"}), {(1, 2): "tuple key"},
    dt.datetime(2024, 1, 2, 3, 4, 5, 6), dt.datetime(2024, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=-3))),
    dt.date(1999, 12, 31), dt.time(23, 59, 1, 5), dt.timedelta(days=-1, seconds=5),
    decimal.Decimal("1.10"), decimal.Decimal("-Infinity"), uuid.UUID(int=12345),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_round_trip_keeps_value_and_type(value):
    got = decode(encode(value))
    assert got == value
    assert type(got) is type(value)


def test_round_trip_through_the_store(space, db):
    space.create_list("l", VALUES)
    commit(space)
    assert list(ObjectSpace(db, prefix=space.prefix).get_list("l")) == VALUES


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


@pytest.fixture
def point_type():
    register_type(Point, 40, lambda p: [p.x, p.y], lambda v: Point(*v))
    yield Point
    unregister_type(Point)


def test_user_types_by_registration(point_type, space, db):
    space.create_dict("d", {"p": Point(1, (2, 3))})
    commit(space)
    assert ObjectSpace(db, prefix=space.prefix).get_dict("d")["p"] == Point(1, (2, 3))


def test_registration_rules(point_type):
    class Other:
        pass
    with pytest.raises(ValueError, match="taken"):
        register_type(Other, 40, str, str)
    with pytest.raises(ValueError):
        register_type(Other, 5, str, str)        # builtin range
    with pytest.raises(ValueError):
        register_type(tuple, 50, str, str)       # stored natively


def test_subclasses_are_not_silently_stored_as_their_base():
    import collections
    import enum

    class Color(enum.IntEnum):
        RED = 1
    for bad in [Color.RED, collections.OrderedDict(a=1), object()]:
        with pytest.raises(TypeError):
            encode(bad)


def test_no_pickle_in_the_codec():
    import objectspace._codec as codec
    source = open(codec.__file__).read()
    assert "pickle" not in source.replace("never pickle", "")


def test_unencodable_value_names_object_and_slot_and_writes_nothing(space, db):
    good = space.create_queue("good", [1])
    q = space.create_queue("q", [1, 2])
    q.append(object())
    from dkv.batch import WriteBatch
    batch = WriteBatch()
    batch.put(b"host", b"1")
    with pytest.raises(EncodingError) as e:
        space.save(batch=batch)
    assert isinstance(e.value, TypeError)
    assert "queue 'q'" in str(e.value) and "slot 2" in str(e.value)
    assert list(batch) == [(b"host", b"1")]                  # the batch is not half-filled
    q.pop()                                                  # fix the value: everything is still dirty
    good.append(2)
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    assert list(again.get_queue("q")) == [1, 2] and list(again.get_queue("good")) == [1, 2]


def test_unencodable_dict_value_names_the_key(space):
    d = space.create_dict("d")
    d["k"] = {1, object()}
    with pytest.raises(EncodingError, match=r"dict 'd' slot 'k'"):
        space.save()


def test_raw_codec_stores_bytes_as_is(space, db):
    q = space.create_queue("raw", [b"\x01\x02"], codec="raw")
    q.append(b"")
    commit(space)
    again = ObjectSpace(db, prefix=space.prefix)
    assert list(again.get_queue("raw")) == [b"\x01\x02", b""]
    assert again.get_queue("raw", codec="raw").codec == "raw"
    with pytest.raises(KindMismatchError, match="codec 'raw', not 'msgpack'"):
        again.get_queue("raw", codec="msgpack")
    q2 = again.get_queue("raw")
    q2.append("text")
    with pytest.raises(EncodingError):
        again.save()
    with pytest.raises(ValueError, match="unknown codec"):
        space.create_queue("x", codec="pickle")


def test_datetime_fast_path_writes_the_generic_bytes():
    """Naive and UTC datetimes are packed directly; the bytes must equal the generic ext's
    (stored state must not depend on which path wrote it) across msgpack's int widths."""
    import msgpack

    from objectspace import _codec
    generic = _codec._BUILTIN_ENCODERS[dt.datetime]
    zones = [None, dt.timezone.utc, dt.timezone(dt.timedelta(hours=2)), dt.timezone(dt.timedelta(hours=-5))]
    for year in (1, 127, 128, 255, 256, 1970, 9999):
        for us in (0, 127, 128, 255, 256, 65535, 65536, 999999):
            for tz in zones:
                for fold in (0, 1):
                    d = dt.datetime(year, 12, 31, 23, 59, 58, us, tz, fold=fold)
                    assert encode(d) == _codec._pack_nested(msgpack.ExtType(*generic(d))), d
                    back = decode(encode(d))
                    assert back == d and back.fold == fold and back.utcoffset() == d.utcoffset()


def test_a_shared_datetime_is_encoded_once_and_never_confused_with_another():
    """The Python codec memoises encodings per datetime object (rows share timestamp
    objects); the memo keeps each object alive, so a new object never inherits an old one's
    bytes. (The C codec, objectspace/_native.c, builds the ext without a memo.)"""
    from objectspace import _codec
    encode, decode = _codec.py_encode, _codec.py_decode
    base = dt.datetime(2024, 5, 1, 12, 0, 0, 123, dt.timezone.utc)
    shared = base + dt.timedelta(0)
    built = []
    build = _codec._build_datetime
    _codec._DT_MEMO.clear()
    try:
        _codec._build_datetime = lambda o: built.append(o) or build(o)
        encoded = [encode({"ts": shared, "i": i}) for i in range(50)]
        assert [decode(e) for e in encoded] == [{"ts": base, "i": i} for i in range(50)]
        assert sum(1 for o in built if o is shared) == 1
        for i in range(_codec._DT_MEMO_MAX * 2):     # many short-lived objects: the memo is bounded
            d = base + dt.timedelta(microseconds=i)
            assert decode(encode(d)) == d
            del d
        assert len(_codec._DT_MEMO) <= _codec._DT_MEMO_MAX
    finally:
        _codec._build_datetime = build
        _codec._DT_MEMO.clear()


# -- numpy and pandas scalars: stored as the Python values they stand for (issue 32) ---------

def test_numpy_and_pandas_scalars_are_stored_as_the_values_they_are(tmp_path):
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    import datetime as dt
    values = {
        "f64": (np.float64(1.5), 1.5, float), "f32": (np.float32(0.25), 0.25, float),
        "i64": (np.int64(-7), -7, int), "u64": (np.uint64(2 ** 64 - 1), 2 ** 64 - 1, int),
        "b": (np.bool_(True), True, bool), "s": (np.str_("x"), "x", str),
        "dt64": (np.datetime64("2024-01-02T03:04:05.123456789"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
                 dt.datetime),
        "td64": (np.timedelta64(1500, "ms"), dt.timedelta(seconds=1.5), dt.timedelta),
        "ts": (pd.Timestamp("2024-01-02 03:04:05.123456789"), dt.datetime(2024, 1, 2, 3, 4, 5, 123456), dt.datetime),
        "td": (pd.Timedelta("1 day 2 ms"), dt.timedelta(days=1, milliseconds=2), dt.timedelta),
        "nat": (pd.NaT, None, type(None)),
        "nested": ([np.float64(1.0), {"a": np.int64(2)}, (np.int8(3),)], [1.0, {"a": 2}, (3,)], list),
    }
    path = str(tmp_path / "s")
    with ObjectSpace.open(path) as sp:
        d = sp.create_dict("d")
        for k, (v, _, _) in values.items():
            d[k] = v
        sp.create_queue("q", [np.float64(2.5), pd.Timestamp("2024-01-01", tz="UTC")])
        sp.checkpoint()
    with ObjectSpace.open(path) as sp:
        d = sp.get_dict("d")
        for k, (_, want, kind) in values.items():
            assert d[k] == want and type(d[k]) is kind, (k, d[k])
        assert list(sp.get_queue("q")) == [2.5, dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)]
    # a zoned Timestamp keeps its instant and offset (a fixed offset, as any datetime: see the guide)
    paris = pd.Timestamp("2024-07-01 12:00", tz="Europe/Paris")
    back = decode(encode(paris))
    assert back == paris.to_pydatetime() and back.utcoffset() == dt.timedelta(hours=2)


def test_numpy_scalars_are_the_keys_they_stand_for():
    np = pytest.importorskip("numpy")
    assert encode_key(np.int64(3)) == encode_key(3)
    assert encode_key((np.str_("a"), np.float64(1.5))) == encode_key(("a", 1.5))
    assert encode_key(np.bool_(False)) == encode_key(False) != encode_key(0)
    with ObjectSpace.open("memory://numpy-keys") as sp:
        d = sp.create_dict("d")
        d[np.int64(3)] = "x"
        sp.checkpoint()
        assert d[3] == "x" and 3 in d and np.int64(3) in d
    with pytest.raises(TypeError, match="complex128"):
        encode(np.complex128(1 + 2j))
    with pytest.raises(TypeError, match="cannot be a key"):
        encode_key(np.datetime64("2024-01-01"))
