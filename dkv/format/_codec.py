"""Shared pieces of the formats: checksums, zstd (thread-local contexts) and record batches.

A *record batch* is how blocks store records. Current formats (WAL 3, SST 2) front-code
them (``_front.py``: each key as the prefix it shares with the previous one plus the rest,
values likewise), followed in SST blocks by the msgpack of the sequence numbers (one int
the whole block shares, or a list). Older formats used one msgpack array of parallel arrays,
``[keys, values, seqs]`` in SST blocks (format 1) and ``[keys, values]`` in WAL segments
(format 2), which still read; ``values[i]`` is nil (None) for a tombstone.
"""
from __future__ import annotations

import threading
import zlib
from itertools import accumulate, repeat
from operator import add
from typing import Any, Literal, cast, overload

import msgpack
import zstandard

from ..errors import CorruptionError
from . import _front

try:
    # The same CRC-32 as zlib's (same values, same files), computed with SIMD by ISA-L:
    # ~9x faster on a 4 KB block (0.12 against 1.09 us), and every block read checks one.
    from isal.isal_zlib import crc32 as crc32     # `as`: exported (the formats import it from here)
except ImportError:         # a platform without isal's wheels: zlib's, slower
    crc32 = zlib.crc32
_local = threading.local()


def _ctx(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "c", None)
    if cache is None:
        cache = _local.c = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level, write_checksum=False)
    return comp


def compress(data: bytes, level: int = 3) -> bytes:
    """zstd frame of ``data``, in a bytes object of its own size. python-zstandard returns
    the frame inside an allocation of the input's compress bound (it shrinks the object's
    length, not its memory), so a 2 KB frame of a 64 KB block would hold ~64 KB for as long
    as it lives: an SST being built holds every frame until it finishes, and a sealed
    memtable's segment lives in memory until it is flushed. The copy costs ~0.3 us."""
    return memoryview(_ctx(level).compress(data)).tobytes()


def decompress(data: bytes, what: str) -> bytes:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    try:
        return d.decompress(data)
    except zstandard.ZstdError as e:
        raise CorruptionError(f"{what}: zstd frame is damaged ({e})") from None


def unpack_records(data: bytes, what: str) -> tuple[list[bytes], list[bytes | None], list[int] | int]:
    """(keys, values, seqs) of a msgpack record batch (SST blocks of the first format, which
    nothing writes any more: front-coded blocks replaced it); seqs is a list or one shared
    int."""
    try:
        keys, values, seqs = msgpack.unpackb(data, raw=True, use_list=True)
    except Exception as e:
        raise CorruptionError(f"{what}: record batch does not decode ({e})") from None
    if len(keys) != len(values) or (type(seqs) is not int and len(seqs) != len(keys)):
        raise CorruptionError(f"{what}: record batch arrays have different lengths")
    return keys, values, seqs


def pack_block(keys: list[bytes], values: list[bytes | None], seqs: list[int] | int | None = None) -> bytes:
    """A front-coded record batch. With ``seqs`` (SST blocks) a header comes first: byte 0
    and a varint when every record shares one sequence number, else byte 1, a u32 length
    and the msgpack list of them."""
    raw = _front.encode(keys, values)
    if seqs is None:
        return raw
    if type(seqs) is int:
        head = bytearray(b"\x00")
        _front._varint(head, seqs)
        return bytes(head) + raw
    m: bytes = msgpack.packb(seqs)
    return b"\x01" + len(m).to_bytes(4, "little") + m + raw


def block_head(data: bytes, what: str) -> tuple[list[int] | int, int]:
    """(seqs, position of the records) of an SST block with its seqs header."""
    try:
        if data[0] == 0:
            # One shared sequence number (a flush's or a compaction's): up to three bytes
            # (2**21) read here, longer ones by the general loop (every get that misses
            # the block cache parses one).
            b = data[1]
            if b < 0x80:
                return b, 2
            c = data[2]
            if c < 0x80:
                return (b & 0x7F) | c << 7, 3
            d = data[3]
            if d < 0x80:
                return (b & 0x7F) | (c & 0x7F) << 7 | d << 14, 4
            return _front._read_varint(data, 1, len(data), 63)
        if data[0] == 1:
            n = int.from_bytes(data[1:5], "little")
            seqs = msgpack.unpackb(data[5:5 + n])
            if type(seqs) is not list:
                raise ValueError("seqs are not a list")
            return seqs, 5 + n
        raise ValueError(f"unknown seqs header {data[0]}")
    except (IndexError, ValueError, TypeError, msgpack.ExtraData, msgpack.UnpackException) as e:
        raise CorruptionError(f"{what}: block header does not decode ({e})") from None


@overload
def unpack_block(data: bytes, what: str,
                 with_seqs: Literal[True]) -> tuple[list[bytes], list[bytes | None], list[int] | int]: ...
@overload
def unpack_block(data: bytes, what: str, with_seqs: Literal[False]) -> tuple[list[bytes], list[bytes | None], None]: ...
def unpack_block(data: bytes, what: str,
                 with_seqs: bool) -> tuple[list[bytes], list[bytes | None], list[int] | int | None]:
    """(keys, values, seqs or None) of a front-coded record batch."""
    seqs: list[int] | int | None
    seqs, pos = block_head(data, what) if with_seqs else (None, 0)
    try:
        keys, values, end = _front.decode(data, pos)
    except ValueError as e:
        raise CorruptionError(f"{what}: record batch does not decode ({e})") from None
    if end != len(data):
        raise CorruptionError(f"{what}: record batch does not decode (bytes after the records)")
    if type(seqs) is list and len(seqs) != len(keys):
        raise CorruptionError(f"{what}: record batch has {len(keys)} records but {len(seqs)} seqs")
    return keys, values, seqs


def unpack_pair(data: bytes, what: str) -> tuple[list[bytes], list[bytes | None]]:
    """``[keys, values]`` of a WAL format 2 body (read only: later formats are written)."""
    try:
        keys, values = msgpack.unpackb(data, raw=True, use_list=True)
    except Exception as e:
        raise CorruptionError(f"{what}: body is not a [keys, values] pair ({e})") from None
    if type(keys) is not list or type(values) is not list or len(keys) != len(values):
        raise CorruptionError(f"{what}: body is not a [keys, values] pair of equal lengths")
    return keys, values


def pack_obj(obj: Any) -> bytes:
    return cast(bytes, msgpack.packb(obj, use_bin_type=True))


def unpack_obj(data: bytes, what: str) -> Any:
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    except Exception as e:
        raise CorruptionError(f"{what}: metadata does not decode ({e})") from None


def check_crc(data: bytes, expected: int, what: str) -> None:
    if crc32(data) != expected:
        raise CorruptionError(f"{what}: checksum mismatch")


def running_sizes(keys: list[bytes], values: list[bytes | None], overhead: int) -> list[int]:
    """The running raw size of records (key, value or nothing for a tombstone, and
    ``overhead`` a record), summed in C: how WAL segments and SSTs find where their blocks
    end by bisection instead of a loop over records."""
    sizes = map(len, cast("list[bytes]", values) if None not in values else [b"" if v is None else v for v in values])
    return list(accumulate(map(add, map(add, map(len, keys), sizes), repeat(overhead))))
