"""Shared pieces of the formats: checksums, zstd (thread-local contexts) and record batches.

A *record batch* is how WAL segments and SST blocks store records: one msgpack array of
three parallel arrays ``[keys, values, seqs]``; ``values[i]`` is nil for a tombstone.
msgpack's C codec makes this far faster in Python than a hand-rolled record loop.
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


def pack_records(keys: list, values: list, seqs: list) -> bytes:
    return msgpack.packb((keys, values, seqs), use_bin_type=True)


def unpack_records(data: bytes, what: str) -> tuple[list, list, list]:
    try:
        keys, values, seqs = msgpack.unpackb(data, raw=True, use_list=True)
    except Exception as e:
        raise CorruptionError(f"{what}: record batch does not decode ({e})") from None
    if not (len(keys) == len(values) == len(seqs)):
        raise CorruptionError(f"{what}: record batch arrays have different lengths")
    return keys, values, seqs


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
