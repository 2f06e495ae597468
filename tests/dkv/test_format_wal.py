"""WAL segment format (dkv/format/wal.py): round trips and every header field.

Layout: magic "DKVW" | ver u8 | flags u8 | count u32 | max_seq u64 | body_len u32 | crc u32 |
body. Unblocked body (zstd frame when flags bit 0) = msgpack [keys, values]; values nil =
tombstone. Blocked body (flags bit 1) = index_len u32 | zstd frame of the index msgpack
[first_keys, last_key, lengths] | blocks, each a [keys, values] batch (a zstd frame unless
that would not save an eighth). One record per key, sorted; every record of a segment
replays with the segment's max_seq.
"""
from __future__ import annotations

import random
import struct
import zlib

import msgpack
import pytest
import zstandard

import dkv
from dkv.format import wal

HEADER = "<4sBBIQII"


def _records(n: int, seed: int = 0):
    rng = random.Random(seed)
    keys = sorted({b"key-%05d" % rng.randrange(10 * n + 1) for _ in range(n)})
    values = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 50)) for _ in keys]
    return keys, values, rng.randrange(1, 1 << 64)


@pytest.mark.parametrize("n", [0, 1, 7, 500, 5000])
@pytest.mark.parametrize("block_bytes", [256, wal.BLOCK_BYTES])
def test_round_trip(n, block_bytes):
    keys, values, max_seq = _records(n)
    seg = wal.decode(wal.encode(keys, values, max_seq, block_bytes=block_bytes))
    assert (seg.keys, seg.values, seg.max_seq) == (keys, values, max_seq)


def test_blocked_segments_locate_their_blocks_without_decoding():
    keys, values, max_seq = _records(3000)
    data = wal.encode(keys, values, max_seq, block_bytes=512)
    assert data[5] == wal.FLAG_ZSTD | wal.FLAG_BLOCKED
    index = wal.parse(data)
    assert index.count == len(keys) and index.max_seq == max_seq and len(index.first_keys) > 20
    assert index.min_key == keys[0] and index.last_key == keys[-1]
    got = []
    for first, off, ln in zip(index.first_keys, index.offsets, index.lengths):
        k, v, raw = wal.decode_block(data[off:off + ln], "t")
        assert k[0] == first and raw >= len(k)
        got += zip(k, v)
    assert got == list(zip(keys, values))
    (ilen,) = struct.unpack_from("<I", data, 26)
    assert index.offsets[0] == 26 + 4 + ilen and index.offsets[-1] + index.lengths[-1] == len(data)


def _block_ends_by_record(keys, values, block_bytes):
    """The block cut as a loop over records: a block takes records up to the one that
    brings its raw size (key, value, 4 bytes) to block_bytes (the reference)."""
    ends, n, i = [], len(keys), 0
    while i < n:
        j, size = i, 0
        while j < n and size < block_bytes:
            v = values[j]
            size += len(keys[j]) + (0 if v is None else len(v)) + 4
            j += 1
        ends.append(j)
        i = j
    return ends


@pytest.mark.parametrize("seed", range(40))
def test_block_ends_are_the_loop_over_records(seed):
    rng = random.Random(seed)
    n = rng.choice([0, 1, 2, 5, 50, 700])
    keys = sorted({rng.randbytes(rng.randrange(1, 40)) for _ in range(n)})
    big = rng.random() < 0.3        # records larger than a block
    values = [None if rng.random() < rng.choice([0, 0.3, 1]) else
              rng.randbytes(rng.randrange(0, 3000 if big else 60)) for _ in keys]
    for block_bytes in (1, 4, 33, rng.randrange(1, 2000), 1 << 15):
        ends = wal.block_ends(keys, values, block_bytes)
        assert ends == _block_ends_by_record(keys, values, block_bytes)
        assert wal._block_ends(keys, values, block_bytes) == ends       # the Python twin (with C built)
        assert ends == sorted(set(ends)) and (not keys or ends[-1] == len(keys))


def test_small_segments_stay_one_record_batch():
    keys, values, max_seq = _records(20)
    data = wal.encode(keys, values, max_seq)
    assert not data[5] & wal.FLAG_BLOCKED and wal.parse(data).offsets == [26]


def _v2_segment(keys, values, max_seq) -> bytes:
    """A segment as version 2 wrote it: one zstd frame of msgpack [keys, values]."""
    body = zstandard.ZstdCompressor(level=3).compress(msgpack.packb((keys, values), use_bin_type=True))
    fields = struct.pack("<BBIQI", 2, wal.FLAG_ZSTD, len(keys), max_seq, len(body))
    return b"DKVW" + fields + struct.pack("<I", zlib.crc32(body, zlib.crc32(fields))) + body


def test_version_2_segments_still_read():
    keys, values, max_seq = _records(40)
    data = _v2_segment(keys, values, max_seq)
    seg = wal.decode(data)
    assert (seg.keys, seg.values, seg.max_seq) == (keys, values, max_seq)
    assert wal.parse(data).version == 2


def test_header_fields_are_pinned():
    keys, values = [b"a", b"b", b"c"], [b"1", None, b""]
    data = wal.encode(keys, values, (1 << 64) - 1)
    assert wal.MAGIC == b"DKVW" and wal.VERSION == 3 and wal.HEADER_SIZE == struct.calcsize(HEADER) == 26
    magic, ver, flags, count, max_seq, body_len, crc = struct.unpack_from(HEADER, data)
    assert (magic, ver, count, max_seq, body_len) == (b"DKVW", 3, 3, (1 << 64) - 1, len(data) - 26)
    body = data[26:]
    assert crc == zlib.crc32(body, zlib.crc32(data[4:22]))
    # The body is a zstd frame (flag ZSTD) or byte 0 then the batch stored as it is.
    if flags & wal.FLAG_ZSTD:
        raw = zstandard.ZstdDecompressor().decompress(body)
    else:
        assert body[0] == 0
        raw = body[1:]
    # One front-coded batch: n, the key stream's length, each key as (shared, suffix
    # length, suffix), then each value as (shared, length + 1 or 0 for a tombstone, suffix).
    assert raw == bytes([3, 9, 0, 1]) + b"a" + bytes([0, 1]) + b"b" + bytes([0, 1]) + b"c" + \
        bytes([0, 2]) + b"1" + bytes([0, 0]) + bytes([0, 1])


def test_compressed_only_when_it_helps():
    repetitive = wal.encode([b"k%04d" % i for i in range(200)], [b"v" * 100] * 200, 200)
    assert repetitive[5] == wal.FLAG_ZSTD
    noise = random.Random(3).randbytes(64)
    incompressible = wal.encode([b"k"], [noise], 1)
    assert incompressible[5] == 0
    assert wal.decode(incompressible).values == [noise]


@pytest.mark.parametrize("cut", [0, 3, 17, 25, 26, 40])
def test_truncated_is_corruption(cut):
    data = wal.encode(*_records(30))
    with pytest.raises(dkv.CorruptionError):
        wal.decode(data[:cut])


def _refresh_crc(bad: bytearray) -> bytes:
    body = bytes(bad[26:])
    bad[22:26] = struct.pack("<I", zlib.crc32(body, zlib.crc32(bytes(bad[4:22]))))
    return bytes(bad)


def test_wrong_version_and_count_are_corruption():
    data = wal.encode(*_records(5))
    for offset, value in ((4, 1), (6, 9)):           # version (1: the old layout); record count
        bad = bytearray(data)
        bad[offset] = value
        with pytest.raises(dkv.CorruptionError):     # only the field is wrong: the crc matches
            wal.decode(_refresh_crc(bad))


@pytest.mark.parametrize("body", [msgpack.packb([[b"a"], [b"1"], [3]]), msgpack.packb({"k": 1}),
                                  msgpack.packb([[b"a", b"b"], [b"1"]]), b"\xc1"],
                         ids=["three-arrays", "map", "unequal", "not-msgpack"])
def test_checksummed_but_malformed_body_is_corruption(body):
    fields = struct.pack("<BBIQI", 2, 0, 1, 5, len(body))
    data = b"DKVW" + fields + struct.pack("<I", zlib.crc32(body, zlib.crc32(fields))) + body
    with pytest.raises(dkv.CorruptionError):
        wal.decode(data)


@pytest.mark.parametrize("n, block_bytes", [(6, wal.BLOCK_BYTES), (60, 128)], ids=["one-batch", "blocked"])
def test_every_byte_flip_is_detected(n, block_bytes):
    keys, values, max_seq = _records(n)
    data = wal.encode(keys, values, max_seq, block_bytes=block_bytes)
    assert bool(data[5] & wal.FLAG_BLOCKED) == (block_bytes == 128)
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0xFF
        with pytest.raises(dkv.CorruptionError):
            wal.decode(bytes(bad), "seg")


def test_error_names_the_segment():
    with pytest.raises(dkv.CorruptionError, match="wal/0001.wal"):
        wal.decode(b"nonsense" * 4, "WAL segment wal/0001.wal")


@pytest.mark.parametrize("index", [[[b"a"], b"a", [999]], [[], None, []], {"x": 1}],
                         ids=["lengths-past-the-end", "no-blocks", "not-a-list"])
def test_checksummed_but_malformed_block_index_is_corruption(index):
    frame = zstandard.ZstdCompressor().compress(msgpack.packb(index))
    body = struct.pack("<I", len(frame)) + frame + msgpack.packb([[b"a"], [b"1"]])
    fields = struct.pack("<BBIQI", 3, wal.FLAG_ZSTD | wal.FLAG_BLOCKED, 1, 5, len(body))
    data = b"DKVW" + fields + struct.pack("<I", zlib.crc32(body, zlib.crc32(fields))) + body
    with pytest.raises(dkv.CorruptionError):
        wal.decode(data)


def test_block_ends_of_other_records_go_to_the_python_twin():
    """The C twin cuts lists of bytes (and None) only; anything else is the Python one's."""
    native = pytest.importorskip("dkv.format._native")
    if not hasattr(native, "block_ends"):
        pytest.skip("dkv's C module has no block_ends")
    assert native.block_ends([b"a", b"bb"], [b"x", None], 7) == [2]
    assert native.block_ends([b"a", b"bb"], [b"x", None], 6) == [1, 2]
    assert native.block_ends([], [], 10) == []
    for keys, values in (([b"a", "b"], [b"1", b"2"]), ([b"a"], [1]), ([b"a", b"b"], [b"1"]),
                         ([b"a", bytearray(b"b")], [b"1", None])):
        assert native.block_ends(keys, values, 4) is None
    with pytest.raises(TypeError):
        wal.block_ends([b"a"], [1], 4)          # as the Python twin: len() of an int
    assert wal.block_ends([b"a", bytearray(b"bc")], [b"1", None], 4) == [1, 2]
