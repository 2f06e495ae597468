"""Shared pieces of the formats: checksums, zstd (thread-local contexts) and record batches.

A *record batch* is how SST blocks store records: one msgpack array of three parallel
arrays ``[keys, values, seqs]``; ``values[i]`` is nil for a tombstone, and ``seqs`` may be
one integer that every record of the batch shares (SST format 2). WAL blocks are the
pair ``[keys, values]``. msgpack's C codec makes this far faster in Python than a
hand-rolled record loop.
"""
from __future__ import annotations

import threading
import zlib

import msgpack
import zstandard

from ..errors import CorruptionError

crc32 = zlib.crc32
_local = threading.local()


def _ctx(level: int):
    cache = getattr(_local, "c", None)
    if cache is None:
        cache = _local.c = {}
    comp = cache.get(level)
    if comp is None:
        comp = cache[level] = zstandard.ZstdCompressor(level=level, write_checksum=False)
    return comp


def compress(data: bytes, level: int = 3) -> bytes:
    return _ctx(level).compress(data)


def decompress(data: bytes, what: str) -> bytes:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    try:
        return d.decompress(data)
    except zstandard.ZstdError as e:
        raise CorruptionError(f"{what}: zstd frame is damaged ({e})") from None


def pack_records(keys: list, values: list, seqs) -> bytes:
    """A record batch; ``seqs`` is a list or one int shared by every record."""
    return msgpack.packb((keys, values, seqs), use_bin_type=True)


def unpack_records(data: bytes, what: str) -> tuple[list, list, list | int]:
    """(keys, values, seqs) of a record batch; seqs is a list or one shared int."""
    try:
        keys, values, seqs = msgpack.unpackb(data, raw=True, use_list=True)
    except Exception as e:
        raise CorruptionError(f"{what}: record batch does not decode ({e})") from None
    if len(keys) != len(values) or (type(seqs) is not int and len(seqs) != len(keys)):
        raise CorruptionError(f"{what}: record batch arrays have different lengths")
    return keys, values, seqs


def pack_pair(keys: list, values: list) -> bytes:
    """A WAL block: ``[keys, values]``."""
    return msgpack.packb((keys, values), use_bin_type=True)


def unpack_pair(data: bytes, what: str) -> tuple[list, list]:
    try:
        keys, values = msgpack.unpackb(data, raw=True, use_list=True)
    except Exception as e:
        raise CorruptionError(f"{what}: body is not a [keys, values] pair ({e})") from None
    if type(keys) is not list or type(values) is not list or len(keys) != len(values):
        raise CorruptionError(f"{what}: body is not a [keys, values] pair of equal lengths")
    return keys, values


def pack_obj(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack_obj(data: bytes, what: str):
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    except Exception as e:
        raise CorruptionError(f"{what}: metadata does not decode ({e})") from None


def check_crc(data: bytes, expected: int, what: str) -> None:
    if crc32(data) != expected:
        raise CorruptionError(f"{what}: checksum mismatch")
