"""The order-preserving key encoding: order, round trip, prefix-freeness, cross-type order."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from objectspace import EncodingError, decode_key, encode_key
from objectspace._keycodec import encode_name, encode_name_scope

ints = st.integers() | st.integers(min_value=-(1 << 1100), max_value=1 << 1100)
floats = st.floats(allow_nan=False)
# Few letters, with the bytes the escaping is about, so that prefixes and escapes collide often.
texts = st.text(alphabet="a\x00\x01\xff\u00e9", max_size=6) | st.text(max_size=12)
binaries = st.binary(max_size=12) | st.lists(st.sampled_from([b"a", b"\x00", b"\x01", b"\xff"]), max_size=6).map(b"".join)
scalars = st.none() | st.booleans() | ints | floats | binaries | texts
keys = st.recursive(scalars, lambda inner: st.tuples(inner) | st.tuples(inner, inner) | st.lists(inner, max_size=4).map(tuple),
                    max_leaves=8)

SAME_TYPE = [ints, floats, binaries, texts,
             st.tuples(texts, st.integers()), st.lists(st.integers(), max_size=4).map(tuple),
             st.booleans()]


def canon(k):
    """What decode(encode(k)) returns: -0.0 becomes 0.0."""
    if isinstance(k, float) and k == 0.0:
        return 0.0
    if isinstance(k, tuple):
        return tuple(canon(e) for e in k)
    return k


@pytest.mark.parametrize("strategy", SAME_TYPE, ids=["int", "float", "bytes", "str", "tuple", "int-tuple", "bool"])
def test_order_within_a_type_is_python_order(strategy):
    @settings(max_examples=300, deadline=None)
    @given(strategy, strategy)
    def check(a, b):
        ea, eb = encode_key(a), encode_key(b)
        assert (ea < eb) == (a < b)
        assert (ea == eb) == (a == b)
    check()


@settings(max_examples=500, deadline=None)
@given(keys)
def test_round_trip(k):
    got = decode_key(encode_key(k))
    assert got == canon(k)
    assert type(got) is type(k)


@settings(max_examples=300, deadline=None)
@given(keys, keys)
def test_prefix_free(a, b):
    ea, eb = encode_key(a), encode_key(b)
    if ea != eb:
        assert not eb.startswith(ea) and not ea.startswith(eb)


def test_cross_type_order_is_documented_order():
    ordered = [None, False, True, -(1 << 2000), -5, 0, 5, 1 << 2000, -math.inf, -1.5, 0.0, 2.5, math.inf,
               b"", b"\x00", b"a", "", "\x00", "a", "é", (), (None,), (1,), (1, "a"), ("a",)]
    encoded = [encode_key(k) for k in ordered]
    assert encoded == sorted(encoded)


def test_types_are_kept_apart_and_negative_zero_is_zero():
    assert len({encode_key(1), encode_key(1.0), encode_key(True)}) == 3
    assert encode_key(-0.0) == encode_key(0.0)
    assert decode_key(encode_key(-0.0)) == 0.0


def test_nan_is_rejected_with_a_clear_error():
    with pytest.raises(ValueError, match="NaN"):
        encode_key(float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        encode_key(("a", float("nan")))


@pytest.mark.parametrize("bad", [[1], {1: 2}, {1}, object(), 1j])
def test_unsupported_types_raise_encoding_error(bad):
    with pytest.raises(EncodingError) as e:
        encode_key(bad)
    assert isinstance(e.value, TypeError)


def test_malformed_bytes_are_rejected():
    for raw in [b"", b"\x99", b"P" + b"abc", encode_key(1) + b"x"]:
        with pytest.raises(ValueError):
            decode_key(raw)


@settings(max_examples=100, deadline=None)
@given(texts.filter(bool) | st.tuples(texts, st.integers(), binaries),
       texts.filter(bool) | st.tuples(texts, st.integers()) | st.tuples(texts))
def test_names_cannot_reach_each_others_namespace(a, b):
    """No encoded name is a prefix of another, so ``<name>`` followed by anything stays in
    that object's namespace."""
    na, nb = encode_name(a), encode_name(b)
    if a != b:
        assert not nb.startswith(na)


def test_known_prefix_traps():
    for a, b in [("a", "a\x00"), (b"a", b"a\x00"), ("a", "a\x00\x01"), (("a",), ("a", "b")),
                 ("", "\x00"), (("a", ""), ("a", "\x00"))]:
        ea, eb = encode_key(a), encode_key(b)
        assert ea < eb and not eb.startswith(ea), (a, b)


def test_name_scopes():
    assert encode_name(("user-42", "items")).startswith(encode_name_scope(("user-42",)))
    assert not encode_name(("user-420", "items")).startswith(encode_name_scope(("user-42",)))
    assert encode_name("tmp-1").startswith(encode_name_scope("tmp-"))
    assert not encode_name(("tmp-1",)).startswith(encode_name_scope("tmp-"))
    with pytest.raises(TypeError):
        encode_name(("a", 1.5))
    with pytest.raises(TypeError):
        encode_name("")
    with pytest.raises(TypeError):
        encode_name(42)
