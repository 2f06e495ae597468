"""WAL segment: the records written between two checkpoints, one object per segment.

Layout (docs/format/wal.md)::

    +--------+-----+-------+-------+---------+----------+-------+------------------------------+
    | "DKVW" | ver | flags | count | max_seq | body_len |  crc  | body                         |
    |   4    |  1  |   1   |  u32  |   u64   |   u32    |  u32  |                              |
    +--------+-----+-------+-------+---------+----------+-------+------------------------------+

    body, flag BLOCKED clear:  one record batch (a zstd frame when flag ZSTD)
    body, flag BLOCKED set:    index_len u32 | index (zstd frame of msgpack
                               [first_keys, last_key, lengths]) | block 0 | block 1 | ...
                               each block a record batch, a zstd frame unless compression
                               would not save an eighth
    record batch (version 3):  front-coded keys and values (_front.py)
    record batch (version 2):  msgpack [keys, values]

All integers little-endian; ``crc`` is the CRC-32 of ver..body_len followed by the body. A
segment holds at most one record per key, sorted by key; every record replays with
``max_seq``. Version 3 front-codes records and adds blocked bodies (version 2 segments,
unblocked msgpack batches, still read): a segment in blocks can serve reads in memory a
block at a time, the way an SST does, so the engine keeps recent segments as read sources
instead of replaying them into a memtable.
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..errors import CorruptionError
from ._codec import (compress, crc32, decompress, pack_block, pack_obj, running_sizes, unpack_block, unpack_obj,
                     unpack_pair)
from ._env import native_enabled

# The C twin of _block_ends, or None (no C module, or OBJECTSPACE_NATIVE=0).
_c_block_ends: Callable[[list[bytes], list[bytes | None], int], list[int] | None] | None
try:
    if not native_enabled():
        raise ImportError("native helpers disabled")
    from ._native import block_ends as _c_block_ends
except ImportError:          # pragma: no cover - no compiler when installed
    _c_block_ends = None

MAGIC = b"DKVW"
VERSION = 3          # 2: unblocked bodies only; 1 had per-record sequence numbers
READABLE = (2, 3)
FLAG_ZSTD = 1
FLAG_BLOCKED = 2
_HEADER = struct.Struct("<4sBBIQII")
HEADER_SIZE = _HEADER.size  # 26
_U32 = struct.Struct("<I")
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BLOCK_BYTES = 64 << 10      # target raw bytes of a block of a blocked segment


@dataclass
class WalSegment:
    keys: list[bytes]
    values: list[bytes | None]     # None = tombstone
    max_seq: int


@dataclass
class SegmentIndex:
    """Where the blocks of a parsed segment are (offsets into the segment's bytes)."""
    version: int
    count: int
    max_seq: int
    first_keys: list[bytes | None]     # [None]: an unblocked segment (its key is in the block)
    last_key: bytes | None
    offsets: list[int]
    lengths: list[int]

    @property
    def min_key(self) -> bytes | None:
        return self.first_keys[0] if self.first_keys else None


def _raw_size(keys: list[bytes], values: list[bytes | None], i: int, j: int) -> int:
    return sum(map(len, keys[i:j])) + sum(len(v) for v in values[i:j] if v is not None) + 4 * (j - i)


def _frame(raw: bytes, level: int) -> bytes:
    """A zstd frame of the batch, or byte 0 and the batch when zstd would not save an eighth."""
    body = compress(raw, level)
    return b"\x00" + raw if len(body) > len(raw) - len(raw) // 8 else body


def encode(keys: list[bytes], values: list[bytes | None], max_seq: int, level: int = 3,
           block_bytes: int = BLOCK_BYTES) -> bytes:
    """Encode records (already sorted by key, unique) into segment bytes: one record batch
    when they fit in a block, else blocks of about ``block_bytes`` raw bytes."""
    n = len(keys)
    if n and _raw_size(keys, values, 0, min(n, 64)) * n // min(n, 64) > 2 * block_bytes:
        return _encode_blocked(keys, values, max_seq, level, block_bytes)
    body = _frame(pack_block(keys, values), level)
    return _with_header(0 if body[:1] == b"\x00" else FLAG_ZSTD, n, max_seq, body)


def block_ends(keys: list[bytes], values: list[bytes | None], block_bytes: int) -> list[int]:
    """Where the blocks of a blocked segment end: each takes records up to the one that
    brings its raw size (key, value and 4 bytes a record) to ``block_bytes`` (at least one
    record). In C when the records are lists of bytes (and None), else ``_block_ends``."""
    if _c_block_ends is not None:
        ends = _c_block_ends(keys, values, block_bytes)
        if ends is not None:
            return ends
    return _block_ends(keys, values, block_bytes)


def _block_ends(keys: list[bytes], values: list[bytes | None], block_bytes: int) -> list[int]:
    """``block_ends`` in Python, the reference: the running size summed in C
    (``running_sizes``) and each end found by bisection, as SstBuilder cuts its blocks."""
    n = len(keys)
    cum = running_sizes(keys, values, 4)
    ends, i, base = [], 0, 0
    while i < n:
        j = min(n, bisect_left(cum, base + block_bytes, i) + 1)    # records up to the one that fills the block
        ends.append(j)
        base = cum[j - 1]
        i = j
    return ends


def _encode_blocked(keys: list[bytes], values: list[bytes | None], max_seq: int, level: int, block_bytes: int) -> bytes:
    frames, first, i = [], [], 0
    for j in block_ends(keys, values, block_bytes):
        first.append(keys[i])
        frames.append(_frame(pack_block(keys[i:j], values[i:j]), level))
        i = j
    index = compress(pack_obj([first, keys[-1], [len(f) for f in frames]]), level)
    body = b"".join([_U32.pack(len(index)), index] + frames)
    return _with_header(FLAG_ZSTD | FLAG_BLOCKED, len(keys), max_seq, body)


def _with_header(flags: int, count: int, max_seq: int, body: bytes) -> bytes:
    fields = struct.pack("<BBIQI", VERSION, flags, count, max_seq, len(body))
    return MAGIC + fields + _U32.pack(crc32(body, crc32(fields))) + body


def count(data: bytes) -> int:
    """The record count in a segment's header (unchecked)."""
    return cast(int, _HEADER.unpack_from(data)[3])


def parse(data: bytes, what: str = "WAL segment") -> SegmentIndex:
    """Check a segment (header, length, checksum) and locate its blocks without decoding
    records. An unblocked segment is one block. Raises CorruptionError on any mismatch."""
    if len(data) < HEADER_SIZE:
        raise CorruptionError(f"{what}: {len(data)} bytes is shorter than the header")
    magic, ver, flags, count, max_seq, blen, crc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(f"{what}: bad magic {magic!r}")
    if ver not in READABLE:
        raise CorruptionError(f"{what}: WAL format version {ver}, this dkv reads versions {READABLE}")
    if len(data) - HEADER_SIZE != blen:
        raise CorruptionError(f"{what}: body is {len(data) - HEADER_SIZE} bytes, header says {blen} (torn write?)")
    if crc32(memoryview(data)[HEADER_SIZE:], crc32(memoryview(data)[4:HEADER_SIZE - 4])) != crc:
        raise CorruptionError(f"{what}: checksum mismatch")
    if not flags & FLAG_BLOCKED:
        if count == 0:
            return SegmentIndex(ver, 0, max_seq, [], None, [], [])
        return SegmentIndex(ver, count, max_seq, [None], None, [HEADER_SIZE], [blen])   # keys: from the block
    if blen < 4 or ver < 3:
        raise CorruptionError(f"{what}: blocked body too short for its index")
    (ilen,) = _U32.unpack_from(data, HEADER_SIZE)
    start = HEADER_SIZE + 4 + ilen
    if start > len(data):
        raise CorruptionError(f"{what}: block index runs past the end")
    try:
        first, last, lengths = unpack_obj(decompress(data[HEADER_SIZE + 4:start], what), what)
    except (TypeError, ValueError):
        raise CorruptionError(f"{what}: block index is malformed") from None
    if len(first) != len(lengths) or start + sum(lengths) != len(data) or not first:
        raise CorruptionError(f"{what}: block index does not match the body")
    offsets, off = [], start
    for ln in lengths:
        offsets.append(off)
        off += ln
    return SegmentIndex(ver, count, max_seq, first, last, offsets, lengths)


def block_raw(frame: bytes, what: str, version: int = VERSION) -> bytes:
    """A block's record batch. Version 3: a zstd frame, or byte 0 then the batch; version 2:
    a zstd frame or the msgpack batch (which never starts with the zstd magic)."""
    if frame[:4] == ZSTD_MAGIC:
        return decompress(frame, what)
    if version >= 3:
        if frame[:1] != b"\x00":
            raise CorruptionError(f"{what}: a block is neither a zstd frame nor a stored batch")
        return frame[1:]
    return frame


def decode_block(frame: bytes, what: str, version: int = VERSION) -> tuple[list[bytes], list[bytes | None], int]:
    """(keys, values, raw size) of one block."""
    raw = block_raw(frame, what, version)
    if version < 3:
        keys, values = unpack_pair(raw, what)
    else:
        keys, values, _ = unpack_block(raw, what, False)
    return keys, values, len(raw)


def decode(data: bytes, what: str = "WAL segment") -> WalSegment:
    """Parse, verify and decode every record of a segment. Raises CorruptionError on any
    mismatch (magic, length, checksum, zstd frame, array lengths, count)."""
    index = parse(data, what)
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for off, ln in zip(index.offsets, index.lengths):
        k, v, _ = decode_block(data[off:off + ln], what, index.version)
        keys += k
        values += v
    if len(keys) != index.count:
        raise CorruptionError(f"{what}: {len(keys)} records, header says {index.count}")
    return WalSegment(keys, values, index.max_seq)
