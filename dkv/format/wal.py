"""WAL segment: the records written since the previous checkpoint, one object per segment.

Layout (docs/format/wal.md)::

    +--------+-----+-------+-------+----------+-------+----------------------------------------+
    | "DKVW" | ver | flags | count | body_len |  crc  | body: zstd frame (flags bit 0) of a    |
    |   4    |  1  |   1   |  u32  |   u32    |  u32  | record batch [keys, values, seqs]      |
    +--------+-----+-------+-------+----------+-------+----------------------------------------+

All integers little-endian; ``crc`` is the CRC-32 of ver..body_len followed by the body. A segment holds at most one record per key (the newest since
the previous segment), sorted by key; replay applies ``seq > skip_through`` records.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import CorruptionError
from ._codec import compress, crc32, decompress, pack_obj, unpack_obj

MAGIC = b"DKVW"
VERSION = 2          # 1 had per-record sequence numbers (a 3-array body)
FLAG_ZSTD = 1
_HEADER = struct.Struct("<4sBBIQII")
HEADER_SIZE = _HEADER.size  # 26


@dataclass
class WalSegment:
    keys: list
    values: list     # None = tombstone
    max_seq: int


def encode(keys: list, values: list, max_seq: int, level: int = 3) -> bytes:
    """Encode records (already sorted by key) into segment bytes."""
    raw = pack_obj((keys, values))
    body = compress(raw, level)
    flags = FLAG_ZSTD
    if len(body) >= len(raw):
        body, flags = raw, 0
    fields = struct.pack("<BBIQI", VERSION, flags, len(keys), max_seq, len(body))
    return MAGIC + fields + struct.pack("<I", crc32(body, crc32(fields))) + body


def decode(data: bytes, what: str = "WAL segment") -> WalSegment:
    """Parse and verify segment bytes. Raises CorruptionError on any mismatch."""
    if len(data) < HEADER_SIZE:
        raise CorruptionError(f"{what}: {len(data)} bytes is shorter than the header")
    magic, ver, flags, count, max_seq, blen, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(f"{what}: bad magic {magic!r}")
    if ver != VERSION:
        raise CorruptionError(f"{what}: WAL format version {ver}, this dkv reads version {VERSION}")
    body = data[HEADER_SIZE:]
    if len(body) != blen:
        raise CorruptionError(f"{what}: body is {len(body)} bytes, header says {blen} (torn write?)")
    if crc32(body, crc32(data[4:HEADER_SIZE - 4])) != crc:
        raise CorruptionError(f"{what}: checksum mismatch")
    raw = decompress(body, what) if flags & FLAG_ZSTD else body
    try:
        keys, values = unpack_obj(raw, what)
    except (TypeError, ValueError):
        raise CorruptionError(f"{what}: body is not a [keys, values] pair") from None
    if len(keys) != count or len(values) != count:
        raise CorruptionError(f"{what}: {len(keys)} keys and {len(values)} values, header says {count}")
    return WalSegment(keys, values, max_seq)
