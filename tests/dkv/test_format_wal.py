"""WAL segment format (dkv/format/wal.py, docs/format/wal.md): round trips and every header field."""
from __future__ import annotations

import random
import struct
import zlib

import msgpack
import pytest
import zstandard

import dkv
from dkv.format import wal


def _records(n: int, seed: int = 0):
    rng = random.Random(seed)
    keys = sorted({b"key-%05d" % rng.randrange(10 * n + 1) for _ in range(n)})
    values = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 50)) for _ in keys]
    seqs = [rng.randrange(1, 1 << 64) for _ in keys]
    return keys, values, seqs


@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_round_trip(n):
    keys, values, seqs = _records(n)
    seg = wal.decode(wal.encode(keys, values, seqs))
    assert (seg.keys, seg.values, seg.seqs) == (keys, values, seqs)
    assert seg.max_seq == (max(seqs) if seqs else 0)


def test_header_fields_are_pinned():
    keys, values, seqs = [b"a", b"b", b"c"], [b"1", None, b""], [5, 6, (1 << 64) - 1]
    data = wal.encode(keys * 1, values, seqs)
    assert wal.MAGIC == b"DKVW" and wal.VERSION == 1 and wal.HEADER_SIZE == 18
    magic, ver, flags, count, body_len, crc = struct.unpack_from("<4sBBIII", data)
    assert (magic, ver, count, body_len) == (b"DKVW", 1, 3, len(data) - 18)
    body = data[18:]
    assert crc == zlib.crc32(body, zlib.crc32(data[4:14]))
    raw = zstandard.ZstdDecompressor().decompress(body) if flags & wal.FLAG_ZSTD else body
    # The body is one msgpack record batch: [keys, values (nil = tombstone), seqs].
    assert msgpack.unpackb(raw, raw=True) == [keys, values, seqs]


def test_compressed_only_when_it_helps():
    repetitive = wal.encode([b"k%04d" % i for i in range(200)], [b"v" * 100] * 200, list(range(200)))
    assert repetitive[5] == wal.FLAG_ZSTD
    noise = random.Random(3).randbytes(64)
    incompressible = wal.encode([b"k"], [noise], [1])
    assert incompressible[5] == 0
    assert wal.decode(incompressible).values == [noise]


@pytest.mark.parametrize("cut", [0, 3, 17, 18, 40])
def test_truncated_is_corruption(cut):
    data = wal.encode(*_records(30))
    with pytest.raises(dkv.CorruptionError):
        wal.decode(data[:cut])


def test_wrong_version_and_count_are_corruption():
    keys, values, seqs = _records(5)
    data = bytearray(wal.encode(keys, values, seqs))
    for offset, value in ((4, 2), (6, 9)):           # version; record count
        bad = bytearray(data)
        bad[offset] = value
        # Fix the checksum so only the field itself is wrong.
        body = bytes(bad[18:])
        bad[14:18] = struct.pack("<I", zlib.crc32(body, zlib.crc32(bytes(bad[4:14]))))
        with pytest.raises(dkv.CorruptionError):
            wal.decode(bytes(bad))


def test_every_byte_flip_is_detected():
    data = wal.encode(*_records(6))
    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0xFF
        with pytest.raises(dkv.CorruptionError):
            wal.decode(bytes(bad), "seg")


def test_error_names_the_segment():
    with pytest.raises(dkv.CorruptionError, match="wal/0001.wal"):
        wal.decode(b"nonsense" * 4, "WAL segment wal/0001.wal")
