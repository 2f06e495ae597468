"""Manifest format (dkv/format/manifest.py, docs/format/manifest.md): every field round-trips
and the encoding is pinned (header, one-letter body keys, optional fields left out)."""
from __future__ import annotations

import struct
import zlib

import msgpack
import pytest
import zstandard

import dkv
from dkv.format import manifest as mf
from dkv.format import wal


def _table(i: int, groups=mf.ALL_KEY_GROUPS) -> mf.TableRef:
    return mf.TableRef(f"sst/0000000001-{i:012d}.sst", 1000 + i, b"a%d" % i, b"z%d" % i, i, i + 10, 50 + i, groups)


def _segment() -> bytes:
    return wal.encode([b"k1", b"k2"], [b"v1", None], 9, 3, 32 * 1024)


def _full(n_tables: int = 3) -> mf.Manifest:
    return mf.Manifest(
        epoch=42, writer=7, last_seq=123456,
        levels=[[_table(1), _table(2)], [], [_table(i) for i in range(3, 3 + n_tables)]],
        wal=[mf.WalRange("", 7, 3, 5, 100), mf.WalRange("other", 2, 1, 1, 0, (10, 20)),
             mf.WalRange("", 7, 6, 6, 100, data=_segment()), mf.WalRange("other", 2, 2, 2, 0, (10, 20), b"\x00seg")],
        retained=[40, 41, 42], parent=41, groups=(0, 128), created_ms=1_700_000_000_000)


@pytest.mark.parametrize("n_tables", [0, 1, 40])
def test_round_trip_every_field(n_tables):
    m = _full(n_tables)
    got = mf.decode(mf.encode(m))
    assert got == m
    assert list(got.tables()) == [t for lv in m.levels for t in lv]


def test_minimal_manifest_is_small_and_round_trips():
    m = mf.Manifest(epoch=1, writer=1, last_seq=0)
    data = mf.encode(m)
    assert len(data) < 40
    got = mf.decode(data)
    assert got == mf.Manifest(epoch=1, writer=1, last_seq=0, created_ms=0)
    assert got.parent is None and got.groups == mf.ALL_KEY_GROUPS and got.levels == [] and got.wal == []


def test_header_and_body_keys_are_pinned():
    m = _full(1)
    data = mf.encode(m)
    assert mf.MAGIC == b"DKVM" and mf.VERSION == 3 and mf.HEADER_SIZE == 16 and mf.COMPRESS_OVER == 512
    magic, ver, flags, reserved, body_len, crc = struct.unpack_from("<4sBBHII", data)
    # Without a carried run the manifest is version 2: what older readers read.
    assert (magic, ver, reserved, body_len) == (b"DKVM", 2, 0, len(data) - 16)
    body = data[16:]
    assert crc == zlib.crc32(body)
    raw = zstandard.ZstdDecompressor().decompress(body) if flags & mf.FLAG_ZSTD else body
    b = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    assert set(b) == {"e", "w", "s", "t", "p", "l", "r", "k", "g"}
    assert (b["e"], b["w"], b["s"], b["t"], b["p"], b["k"], b["g"]) == (42, 7, 123456, 1_700_000_000_000, 41, [40, 41, 42], [0, 128])
    # Tables: [path, size, min_key, max_key, min_seq, max_seq, count] (+ groups when partial).
    assert b["l"][0][0] == ["sst/0000000001-000000000001.sst", 1001, b"a1", b"z1", 1, 11, 51]
    assert b["l"][1] == []
    # WAL ranges: [instance, writer, first, last, skip_through] (+ groups when partial);
    # inline segments: [instance, writer, segment, skip_through, bytes] (+ groups).
    assert b["r"] == [["", 7, 3, 5, 100], ["other", 2, 1, 1, 0, 10, 20],
                      ["", 7, 6, 100, _segment()], ["other", 2, 2, 0, b"\x00seg", 10, 20]]


def test_partial_groups_of_a_table_are_recorded():
    t = _table(1, (5, 9))
    assert t.to_list()[-2:] == [5, 9]
    assert mf.TableRef.from_list(t.to_list()) == t
    assert len(_table(1).to_list()) == 7


def test_compression_threshold():
    small, big = mf.encode(_full(0)), mf.encode(_full(40))
    assert small[5] & mf.FLAG_ZSTD == 0
    assert big[5] & mf.FLAG_ZSTD


@pytest.mark.parametrize("mutate", ["magic", "version", "length", "crc", "short", "body"])
def test_damage_is_corruption(mutate):
    data = bytearray(mf.encode(_full(2)))
    if mutate == "magic":
        data[0:4] = b"XKVM"
    elif mutate == "version":
        data[4] = 4
    elif mutate == "length":
        data = data[:-1]
    elif mutate == "crc":
        data[12] ^= 1
    elif mutate == "short":
        data = data[:10]
    else:
        data[-1] ^= 0x55
    with pytest.raises(dkv.CorruptionError, match="manifest/x"):
        mf.decode(bytes(data), "manifest/x")


def _with_body(body: bytes, version: int = 2) -> bytes:
    return struct.pack("<4sBBHII", b"DKVM", version, 0, 0, len(body), zlib.crc32(body)) + body


def test_inline_segments_round_trip_and_are_told_apart_from_ranges():
    m = _full(0)
    got = mf.decode(mf.encode(m))
    assert [r.inline for r in got.wal] == [False, False, True, True]
    assert got.wal[2].data == _segment() and got.wal[2].first == got.wal[2].last == 6
    assert wal.decode(got.wal[2].data).keys == [b"k1", b"k2"]
    assert mf.inline_bytes(got) == len(_segment()) + 4
    assert "data" not in repr(got.wal[2]) or len(repr(got.wal[2])) < 200


def _with_carried() -> mf.Manifest:
    m = _full(0)
    m.wal = [mf.WalRange("", 7, 3, 5, 100),
             mf.WalRange("", 7, 6, 9, 100, carried=((40, 7), (40, 7), (41, 7), (44, 7))),
             mf.WalRange("other", 2, 2, 2, 0, (10, 20), carried=((38, 6),)),
             mf.WalRange("", 7, 10, 10, 100, data=_segment())]
    return m


def test_carried_runs_round_trip_and_are_pinned():
    """RFC 0011: [instance, writer, first, skip_through, [carrier writer, first carrier
    epoch, epoch deltas...]] (+ groups); the header says version 3."""
    m = _with_carried()
    data = mf.encode(m)
    assert data[4] == 3
    got = mf.decode(data)
    assert got == m
    assert [r.inline for r in got.wal] == [False, True, True, True]
    assert [r.carried is not None for r in got.wal] == [False, True, True, False]
    assert mf.carriers(got) == {(40, 7), (41, 7), (44, 7), (38, 6)}
    assert mf.inline_bytes(got) == len(_segment())
    assert mf.carried_segment(got, "", 7, 10).data == _segment() and mf.carried_segment(got, "", 7, 9) is None
    raw = data[16:]
    raw = zstandard.ZstdDecompressor().decompress(raw) if data[5] & mf.FLAG_ZSTD else raw
    b = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    assert b["r"][1] == ["", 7, 6, 100, [7, 40, 0, 1, 3]]
    assert b["r"][2] == ["other", 2, 2, 0, [6, 38], 10, 20]


@pytest.mark.parametrize("run", [[7], [7, -1], [7, 40, -2], [7, "x"], [7, 40, True]])
def test_malformed_carried_run_is_corruption(run):
    body = msgpack.packb({"e": 3, "w": 1, "s": 9, "r": [["", 1, 1, 0, run]]})
    with pytest.raises(dkv.CorruptionError, match="malformed"):
        mf.decode(_with_body(body, version=3))


def test_a_carried_run_needs_version_3():
    body = msgpack.packb({"e": 3, "w": 1, "s": 9, "r": [["", 1, 1, 0, [1, 2]]]})
    assert mf.decode(_with_body(body, version=3)).wal[0].carried == ((2, 1),)
    with pytest.raises(dkv.CorruptionError, match="malformed"):
        mf.decode(_with_body(body, version=2))


def test_a_carried_run_of_several_carrier_writers_is_refused():
    r = mf.WalRange("", 7, 6, 7, 0, carried=((40, 7), (41, 8)))
    with pytest.raises(ValueError):
        r.to_list()


def test_version_1_manifests_still_read():
    """A version 1 body is a version 2 body without inline segments (the fixture
    golden/store-v1 in test_old_formats.py opens whole)."""
    body = msgpack.packb({"e": 3, "w": 1, "s": 9, "t": 5, "r": [["", 1, 1, 2, 0]], "k": [3]})
    got = mf.decode(_with_body(body, version=1))
    assert got.wal == [mf.WalRange("", 1, 1, 2, 0)] and got.retained == [3]
    bad = msgpack.packb({"e": 3, "w": 1, "s": 9, "r": [["", 1, 1, 0, b"seg"]]})
    with pytest.raises(dkv.CorruptionError, match="malformed"):
        mf.decode(_with_body(bad, version=1))


@pytest.mark.parametrize("body", [msgpack.packb({"w": 1, "s": 2}), msgpack.packb({"e": 1, "w": "x", "s": 2, "l": [[1]]}),
                                  b"\xc1"], ids=["missing-key", "bad-table", "not-msgpack"])
def test_valid_checksum_but_malformed_body_is_corruption(body):
    with pytest.raises(dkv.CorruptionError):
        mf.decode(_with_body(body))


def test_body_that_is_not_a_map_is_corruption():
    with pytest.raises(dkv.CorruptionError):
        mf.decode(_with_body(msgpack.packb([1, 2])))
