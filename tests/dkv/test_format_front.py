"""Front coding (dkv/format/_front.py and its C twin _native.c): the same bytes from both,
round trips, the layout, and malformed input refused by both."""
from __future__ import annotations

import random

import pytest

from dkv.format import _front

needs_c = pytest.mark.skipif(_front._c_encode is None, reason="the C codec was not built (no compiler)")


def _records(rng, n):
    keys = sorted({rng.randbytes(rng.choice([1, 3, 12, 40, 200, 300])) for _ in range(n)})
    values = [None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 9, 130, 1000])) for _ in keys]
    return keys, values


def test_the_layout():
    data = _front.py_encode([b"item/01", b"item/02", b"items"], [b"abc", None, b"abd"])
    keys = bytes([0, 7]) + b"item/01" + bytes([6, 1]) + b"2" + bytes([4, 1]) + b"s"
    assert data == (bytes([3, len(keys)]) + keys + bytes([0, 4]) + b"abc" + bytes([0, 0]) + bytes([2, 2]) + b"d")
    assert _front.py_decode(data) == ([b"item/01", b"item/02", b"items"], [b"abc", None, b"abd"], len(data))


@pytest.mark.parametrize("seed", range(40))
def test_python_round_trip(seed):
    rng = random.Random(seed)
    keys, values = _records(rng, rng.choice([0, 1, 5, 200]))
    data = _front.py_encode(keys, values)
    assert _front.py_decode(b"xy" + data, 2) == (keys, values, len(data) + 2)


@needs_c
@pytest.mark.parametrize("seed", range(40))
def test_c_writes_and_reads_the_bytes_of_python(seed):
    rng = random.Random(seed)
    keys, values = _records(rng, rng.choice([0, 1, 5, 200, 3000]))
    data = _front.py_encode(keys, values)
    assert _front._c_encode(keys, values) == data
    assert _front._c_decode(data) == (keys, values, len(data))
    assert _front._c_decode(memoryview(b"ab" + data), 2) == (keys, values, len(data) + 2)


def _decoders():
    return [_front.py_decode] + ([_front._c_decode] if _front._c_decode else [])


@pytest.mark.parametrize("seed", range(10))
def test_damaged_bytes_are_refused_or_decode_to_something_else_never_crash(seed):
    rng = random.Random(seed)
    keys, values = _records(rng, 50)
    data = bytearray(_front.py_encode(keys, values))
    for _ in range(200):
        bad = bytearray(data)
        bad[rng.randrange(len(bad))] = rng.randrange(256)
        cut = bytes(bad[:rng.randrange(len(bad) + 1)]) if rng.random() < 0.3 else bytes(bad)
        outcomes = set()
        for decode in _decoders():
            try:
                outcomes.add(repr(decode(cut)))
            except ValueError:
                outcomes.add("ValueError")
        assert len(outcomes) == 1, "the C and Python decoders disagree on damaged input"


@pytest.mark.parametrize("data", [b"", b"\x05", b"\x01\x03\x03\x01a", b"\x01\x04\x00\x05ab",
                                  b"\x01\x03\x00\x01a\x01\x00", b"\x01\x09\x00\x01a",
                                  b"\x01\x05\x00\x01ab\x00\x02x",
                                  b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"],
                         ids=["empty", "count-only", "shared-past-previous", "suffix-past-end", "tombstone-shared",
                              "keys-past-end", "keys-longer-than-n", "huge-varint"])
def test_malformed_is_value_error(data):
    for decode in _decoders():
        with pytest.raises(ValueError):
            decode(data)


def test_bad_input_types_are_refused():
    for encode in [_front.py_encode] + ([_front._c_encode] if _front._c_encode else []):
        with pytest.raises(TypeError):
            encode(["str key"], [b"v"])
        with pytest.raises(TypeError):
            encode([b"k"], ["str value"])
        with pytest.raises(ValueError):
            encode([b"k"], [])


@pytest.mark.parametrize("seed", range(30))
def test_ranges_and_finds_build_only_what_they_return(seed):
    rng = random.Random(seed)
    keys, values = _records(rng, rng.choice([0, 1, 7, 300]))
    data = _front.py_encode(keys, values)
    probes = keys[::7] + [rng.randbytes(rng.randrange(1, 20)) for _ in range(5)] + [None]
    for lo in probes:
        for hi in probes[::3]:
            want = [(k, v) for k, v in zip(keys, values) if (lo is None or k >= lo) and (hi is None or k < hi)]
            for decode in _decoders():
                got_k, got_v, end = decode(data, 0, lo, hi)
                assert list(zip(got_k, got_v)) == want
                cut = hi is not None and any(k >= hi and (lo is None or k >= lo) for k in keys)
                assert end == (-1 if cut else len(data))
    for key in keys[::5] + [rng.randbytes(8)]:
        want = (True, values[keys.index(key)]) if key in keys else (False, None)
        for find in [_front.py_find] + ([_front._c_find] if _front._c_find else []):
            assert find(data, key) == want


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_restart_hints_find_exactly_what_a_whole_walk_finds(seed):
    """index() hints (built in memory for a cached block) change how far find() walks, never
    what it answers: every key, every absent key between and around them, tombstones and
    values that share prefixes with tombstones in between."""
    rng = random.Random(seed)
    keys, values = _records(rng, rng.choice([0, 1, 2, 15, 16, 17, 33, 200, 1000]))
    if seed % 3 == 0:       # long shared prefixes, as a queue's slots have
        keys = [b"ns/items/" + i.to_bytes(8, "big") for i in range(len(keys))]
    data = b"hd" + _front.encode(keys, values)
    model = dict(zip(keys, values))
    probes = keys + [k + b"\x00" for k in keys[::3]] + [b"", b"\xff" * 5] + [k[:-1] for k in keys[::7] if k]
    for every in (1, 2, 5, 16, 64):
        hints = _front.index(data, 2, every)
        for k in probes:
            want = (k in model, model.get(k))
            assert _front.find(data, k, 2, hints) == want == _front.find(data, k, 2) == _front.py_find(data, k, 2), (every, k)
    with pytest.raises(TypeError):
        _front.find(data, b"k", 2, "not hints")
    with pytest.raises(ValueError):
        _front.find(data, b"k", 2, b"\xff\xff\xff\x00")        # claims more entries than it holds


@needs_c
@pytest.mark.parametrize("seed", range(30))
def test_restart_hints_make_a_range_decode_start_late_with_the_same_records(seed):
    """decode() given hints starts at the last restart point below ``lo`` (a scan that starts
    inside a cached block): the keys, values and end equal a walk from the first record's,
    for ranges starting on, between, before and after keys, with tombstones and shared value
    prefixes across restart points."""
    rng = random.Random(seed)
    keys, values = _records(rng, rng.choice([0, 1, 2, 15, 16, 17, 33, 200, 1000]))
    if seed % 3 == 0:
        keys = [b"ns/items/" + i.to_bytes(8, "big") for i in range(len(keys))]
    data = b"hd" + _front.encode(keys, values)
    step = max(1, len(keys) // 60)
    los = keys[::step] + [k + b"\x00" for k in keys[::2 * step]] + [b"", b"\xff" * 5] + [k[:-1] for k in keys[::3 * step] if k]
    his = [None] + keys[::len(keys) // 4 or 1] + [b"\xff" * 6]
    for every in (1, 3, 16):
        hints = _front.index(data, 2, every)
        for lo in los:
            for hi in his:
                want = _front.decode(data, 2, lo, hi)
                assert _front.decode(data, 2, lo, hi, hints) == want, (every, lo, hi)
    for lo in los[::10]:            # and the C walk from the first record is the reference's
        assert _front.decode(data, 2, lo, None) == _front.py_decode(data, 2, lo, None)
    with pytest.raises(TypeError):
        _front.decode(data, 2, b"k", None, "not hints")
    with pytest.raises(ValueError):
        _front.decode(data, 2, b"k", None, b"\xff\xff\xff\x00")
