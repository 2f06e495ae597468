"""SST (sorted string table): immutable sorted records with a bloom filter and sparse index.

Layout (docs/format/sst.md)::

    +----------------+----------------+-----+------------------+----------------------+
    | data block 0   | data block 1   | ... | metadata segment | footer (32 bytes)    |
    +----------------+----------------+-----+------------------+----------------------+

    data block   zstd frame of a record batch (about block_bytes before compression, no padding), or
                 the batch itself when zstd would not save an eighth; its CRC-32 is kept
                 in the sparse index. Version 2: front-coded keys and values (_front.py)
                 then the msgpack of the seqs, one integer when every record of the block
                 has the same sequence number. Version 1: msgpack [keys, values, seqs]
    metadata     zstd frame of a msgpack map: counts, min/max key, sequence range,
                 bloom filter (optional in version 2), sparse index (first key, offset,
                 length, crc of each block)
    footer       meta_offset u64 | meta_length u32 | meta_crc u32 | version u16 |
                 flags u16 | footer_crc u32 | magic "DKVSST\\x00\\x01" (8)

``SstBuilder`` produces the bytes; ``parse_footer``/``parse_meta``/``decode_block`` read
them. No I/O here: the engine decides what to fetch.
"""
from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from ..errors import CorruptionError
from . import bloom
from ._codec import (check_crc, compress, crc32, decompress, pack_block, pack_obj, running_sizes, unpack_block,
                     unpack_obj, unpack_records)

MAGIC = b"DKVSST\x00\x01"
VERSION = 2         # 1: a list of seqs in every block and always a bloom filter
STRIP_VERSION = 3   # version 2 with a bloom filter of stripped entries (its rule in "bs")
READABLE = (1, 2, 3)
_FOOTER = struct.Struct("<QIIHHI8s")
FOOTER_SIZE = _FOOTER.size  # 32
BLOCK_SIZE = 16 << 10       # target uncompressed bytes per data block
RECORD_OVERHEAD = 12        # rough per-record msgpack cost, for block sizing


@dataclass
class SstMeta:
    count: int
    tombstones: int
    min_key: bytes
    max_key: bytes
    min_seq: int
    max_seq: int
    raw_bytes: int
    bloom: bloom.Bloom | None     # None: the table has no filter
    first_keys: list[bytes]       # sparse index: first key of each block
    offsets: list[int]
    lengths: list[int]
    crcs: list[int | None]    # None: checked with the whole of its bytes (a WAL segment read as a table)
    version: int = VERSION


class SstBuilder:
    """Accumulates records in ascending key order and returns the table's bytes.

    ``add`` is amortised O(1); ``finish`` builds the bloom filter (O(n * k)) unless
    ``bloom=False``; with ``strip`` (tag, n) over entries stripped by that rule (bloom.py),
    and the table is written as version 3 so that a reader that does not know the rule
    refuses it instead of missing keys.
    """

    def __init__(self, block_size: int = BLOCK_SIZE, level: int = 1, bloom: bool = True,
                 strip: tuple[int, int] | None = None) -> None:
        self.block_size = block_size
        self.level = level
        self.bloom = bloom
        self.strip = strip if bloom else None
        self._buf = bytearray()       # the blocks so far: one buffer, so finish adds no copy of them
        self._finished = False
        self._offset = 0
        self._hashes = bytearray()    # the bloom filter's hashes of the keys so far (8 bytes a key)
        self._last: bytes | None = None
        self._bk: list[bytes] = []
        self._bv: list[bytes | None] = []
        self._bs: list[int] = []
        self._bbytes = 0
        self._index: tuple[list[bytes], list[int], list[int], list[int]] = ([], [], [], [])
        self.count = self.tombstones = self.raw_bytes = 0
        self.min_seq: int | None = None
        self.max_seq = 0
        self.on_block: Callable[[int], object] | None = None        # called with each finished block's size (pacing)

    def add(self, key: bytes, value: bytes | None, seq: int) -> None:
        self._bk.append(key)
        self._bv.append(value)
        self._bs.append(seq)
        size = len(key) + (0 if value is None else len(value)) + RECORD_OVERHEAD
        self._bbytes += size
        self.raw_bytes += size
        self.count += 1
        if value is None:
            self.tombstones += 1
        if self.min_seq is None or seq < self.min_seq:
            self.min_seq = seq
        if seq > self.max_seq:
            self.max_seq = seq
        if self._bbytes >= self.block_size:
            self._flush_block()

    def add_sorted(self, keys: list[bytes], values: list[bytes | None], seqs: list[int] | int, start: int = 0,
                   limit: int | None = None) -> int:
        """``add`` for ``keys[start:]`` (ascending) with their values and seqs, a block at a
        time instead of a record at a time; the table's bytes are exactly those of calling
        ``add`` in order. ``seqs`` may be one int shared by every record. With ``limit``,
        stops after the first record that brings ``estimated_size`` to ``limit`` (where a
        caller checking after every ``add`` would start a new table). Returns the index
        after the last record added."""
        n, block = len(keys), self.block_size
        if start >= n:
            return start
        # Running size of the records from start on (each counted as ``add`` counts it),
        # in C; each block's last record is then found by bisection.
        cum = running_sizes(keys[start:], values[start:], RECORD_OVERHEAD)
        i, base = start, 0
        while i < n:
            # This block's records: up to the one that fills it (or the one that reaches
            # the table limit, whichever comes first).
            bbytes = self._bbytes
            t = bisect_left(cum, base + block - bbytes, i - start)
            if limit is not None:       # estimated_size >= limit
                t = min(t, bisect_left(cum, base + 3 * (limit - self._offset) - bbytes, i - start))
            j = min(n, start + t + 1)
            added = cum[j - start - 1] - base
            base += added
            ks, vs = keys[i:j], values[i:j]
            ss = [seqs] * (j - i) if type(seqs) is int else cast("list[int]", seqs)[i:j]
            self._bk += ks
            self._bv += vs
            self._bs += ss
            self._bbytes += added
            self.raw_bytes += added
            self.count += j - i
            self.tombstones += vs.count(None)
            lo, hi = (seqs, seqs) if type(seqs) is int else (min(ss), max(ss))
            if self.min_seq is None or lo < self.min_seq:
                self.min_seq = lo
            if hi > self.max_seq:
                self.max_seq = hi
            i = j
            if self._bbytes >= block:
                self._flush_block()
            if limit is not None and self.estimated_size >= limit:
                return i
        return i

    @property
    def first_key(self) -> bytes:
        fk = self._index[0]
        return fk[0] if fk else self._bk[0]

    @property
    def last_key(self) -> bytes:
        return self._bk[-1] if self._bk else cast(bytes, self._last)    # None only before the first add

    @property
    def estimated_size(self) -> int:
        return self._offset + self._bbytes // 3

    def _flush_block(self) -> None:
        if not self._bk:
            return
        bs = self._bs
        raw = pack_block(self._bk, self._bv, bs[0] if min(bs) == max(bs) else bs)
        frame = compress(raw, self.level)
        if len(frame) > len(raw) - len(raw) // 8:
            frame = raw         # incompressible (e.g. random values): skip decompression on reads
        fk, off, ln, cr = self._index
        fk.append(self._bk[0])
        if self.bloom:      # a hash pair per key, not the keys: a big table's keys stay out of memory
            hashed = bloom.hashes(self._bk, self.strip)
            if self.strip is not None:      # a run of one entry across blocks counts once
                if self._hashes and bloom.entry(self._bk[0], self.strip) == bloom.entry(
                        cast(bytes, self._last), self.strip):       # _last: set with the first block
                    hashed = hashed[8:]
            self._hashes += hashed
        self._last = self._bk[-1]
        off.append(self._offset)
        ln.append(len(frame))
        cr.append(crc32(frame))
        self._buf += frame
        self._offset += len(frame)
        if self.on_block is not None:
            self.on_block(len(frame))
        self._bk, self._bv, self._bs, self._bbytes = [], [], [], 0

    def finish(self) -> bytes:
        return bytes(self.finish_buffer())

    def finish_buffer(self) -> bytearray:
        """``finish`` without its copy: the table's bytes in the buffer its blocks were
        written to, which the builder gives up (a flush's table is built in memory: joining
        its blocks at the end held them twice, ``table_bytes`` more at a flush's peak)."""
        if not self.count:
            raise ValueError("an SST needs at least one record")
        if self._finished:
            raise ValueError("this SstBuilder has finished: its table's bytes were handed over")
        self._finished = True
        self._flush_block()
        fk, off, ln, cr = self._index
        meta = {
            "n": self.count, "t": self.tombstones, "lo": self.first_key, "hi": self.last_key,
            "s0": self.min_seq, "s1": self.max_seq, "rb": self.raw_bytes,
            "ik": fk, "io": off, "il": ln, "ic": cr,
        }
        if self.bloom:
            meta["bf"] = bloom.build_hashed(self._hashes)
        if self.strip is not None:
            meta["bs"] = list(self.strip)
        meta_bytes = compress(pack_obj(meta), 1)
        version = VERSION if self.strip is None else STRIP_VERSION
        footer_head = _FOOTER.pack(self._offset, len(meta_bytes), crc32(meta_bytes), version, 0, 0, MAGIC)
        footer = footer_head[:20] + struct.pack("<I", crc32(footer_head[:20])) + MAGIC
        buf, self._buf = self._buf, bytearray()
        buf += meta_bytes
        buf += footer
        return buf


def footer_version(tail: bytes) -> int:
    """The format version in a (checked) footer."""
    return cast(int, _FOOTER.unpack(tail[-FOOTER_SIZE:])[3])


def parse_footer(tail: bytes, what: str) -> tuple[int, int, int]:
    """(meta_offset, meta_length, meta_crc) from bytes ending with the footer."""
    if len(tail) < FOOTER_SIZE:
        raise CorruptionError(f"{what}: too short for an SST footer ({len(tail)} bytes)")
    footer = tail[-FOOTER_SIZE:]
    meta_off, meta_len, meta_crc, ver, _flags, fcrc, magic = _FOOTER.unpack(footer)
    if magic != MAGIC:
        raise CorruptionError(f"{what}: bad SST magic {magic!r} (torn or foreign file)")
    check_crc(footer[:20], fcrc, f"{what} footer")
    if ver not in READABLE:
        raise CorruptionError(f"{what}: unsupported SST format version {ver}")
    return meta_off, meta_len, meta_crc


def parse_meta(data: bytes, crc: int, what: str, version: int = VERSION) -> SstMeta:
    check_crc(data, crc, f"{what} metadata")
    m = unpack_obj(decompress(data, what), what)
    try:
        bf = m.get("bf")
        strip = None
        if version >= STRIP_VERSION:
            strip = bloom.check_strip(tuple(m["bs"]), "its bloom strip rule")
        return SstMeta(m["n"], m["t"], m["lo"], m["hi"], m["s0"], m["s1"], m["rb"],
                       None if bf is None else bloom.Bloom(bf, strip), m["ik"], m["io"], m["il"], m["ic"], version)
    except (KeyError, TypeError, IndexError) as e:
        raise CorruptionError(f"{what}: metadata is missing a field ({e})") from None
    except ValueError as e:
        raise CorruptionError(f"{what}: {e}") from None


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def block_raw(frame: bytes, crc: int | None, what: str) -> bytes:
    """A block's record batch: the frame checked and, when it is a zstd frame, decompressed
    (a record batch of either version never starts with the zstd magic)."""
    if crc is not None:
        check_crc(frame, crc, what)
    return decompress(frame, what) if frame[:4] == ZSTD_MAGIC else frame


def decode_block(frame: bytes, crc: int | None, what: str,
                 version: int = VERSION) -> tuple[list[bytes], list[bytes | None], list[int] | int, int]:
    """(keys, values, seqs, uncompressed size) of a block: a zstd frame, or the record batch
    itself when compression would not have saved an eighth (a msgpack array never starts
    with the zstd magic). seqs is one int when the block's records share it. ``crc`` None:
    the caller verified the bytes already."""
    raw = block_raw(frame, crc, what)
    if version < 2:
        keys, values, seqs = unpack_records(raw, what)
    else:
        keys, values, seqs = unpack_block(raw, what, True)
    return keys, values, seqs, len(raw)
