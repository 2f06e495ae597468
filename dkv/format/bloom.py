"""Bloom filter over SST keys: ~10 bits per key, about 1% false positives.

Probe positions use double hashing over two CRC-32s of the key (CRC is in C via zlib
and stable across processes, unlike Python's ``hash``): ``(h1 + i*h2) mod m``.
Serialized as one byte ``k`` followed by the bit array (bit ``p`` is bit ``p & 7`` of
byte ``p >> 3``).

A filter may have a strip rule ``(tag, n)`` (dkv's ``bloom_strip`` option): a key whose
last ``n`` bytes follow the byte ``tag`` enters it as its prefix without those bytes, so a
run of such keys (the slots of one collection, read by range scans) takes one entry instead
of one each, and a get of such a key probes the prefix: it still skips every table that
holds none of the collection. Writer and reader apply the same rule (a table names its
own), so the rule never causes a false negative, whatever keys match it.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Collection
from itertools import repeat
from typing import Any
from zlib import crc32

from ._env import native_enabled

# The C twins, or None where the module was not built (types: _native.pyi).
_c_build: Callable[[list[bytes], int, int], bytes] | None
_c_check: Callable[..., bool] | None
_c_hashes: Callable[..., bytes] | None
_c_build_hashed: Callable[[bytes | bytearray, int, int], bytes] | None
_c_candidates: Callable[[bytes, tuple[tuple[bytes, int] | tuple[bytes, int, int, int] | None, ...]], list[int]] | None

try:        # the C twins (dkv/format/_native.c): the same bits, ~20x faster
    from functools import partial as _partial

    if not native_enabled():        # OBJECTSPACE_NATIVE=0: the reference, with the C one built
        raise ImportError("native helpers disabled")
    from ._native import bloom_build as _c_build
    from ._native import bloom_build_hashed as _c_build_hashed
    from ._native import bloom_candidates as _c_candidates
    from ._native import bloom_check as _c_check
    from ._native import bloom_hashes as _c_hashes
except ImportError:     # pragma: no cover - no compiler when installed
    _c_build = _c_check = _c_hashes = _c_build_hashed = _c_candidates = None
_np: Any = False     # numpy once _numpy() looked (None: not installed)


def _numpy() -> Any:
    """numpy when installed (it builds large filters ~5x faster than pure Python, with the
    same bits), imported only when the C codec is missing: importing it costs ~100 ms,
    a third of a notebook's `import objectspace`."""
    global _np
    if _np is False:
        try:
            import numpy as _np
        except ImportError:     # pragma: no cover - numpy comes with the spark and bench extras
            _np = None
    return _np

SEED2 = 0x9E3779B9
_PAIR = struct.Struct("<II")
BITS_PER_KEY = 10


def _shape(n: int, bits_per_key: int) -> tuple[int, int]:
    """(m, k) of a filter over n keys."""
    m = max(64, max(1, n) * bits_per_key)
    # k = 5 at 10 bits/key gives ~0.9% false positives (k = 7, the optimum, gives 0.8%)
    # for two fewer probes on every lookup.
    return (m + 7) & ~7, max(1, min(30, round(bits_per_key * 0.5)))


def entry(key: bytes, strip: tuple[int, int] | None) -> bytes:
    """What stands for ``key`` in a filter with strip rule ``strip`` (None: the key)."""
    if strip is not None:
        tag, n = strip
        if len(key) > n and key[-n - 1] == tag:
            return key[:-n]
    return key


def check_strip(strip: Any, what: str = "bloom_strip") -> tuple[int, int] | None:
    """``strip`` as a (tag, n) tuple, or None; ValueError naming ``what`` if it is neither."""
    if strip is None:
        return None
    try:
        tag, n = strip
        ok = all(type(v) is int for v in (tag, n)) and 0 <= tag <= 255 and 1 <= n <= 255
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what} must be None or (tag, n) with a tag byte 0..255 and a length "
                         f"1..255, got {strip!r}")
    return (tag, n)


def hashes(keys: list[bytes], strip: tuple[int, int] | None = None) -> bytes:
    """The two CRC-32s of each key's entry (h1, h2 | 1; little-endian u32s, 8 bytes an
    entry): what a builder keeps instead of the keys, for ``build_hashed``. With a strip
    rule, a run of sorted keys with one entry gives it once."""
    if _c_hashes is not None:
        return _c_hashes(keys) if strip is None else _c_hashes(keys, *strip)
    out, prev = [], None
    for key in keys:
        key = entry(key, strip)
        if strip is not None:
            if key == prev:
                continue
            prev = key
        out.append(_PAIR.pack(crc32(key), crc32(key, SEED2) | 1))
    return b"".join(out)


def build_hashed(hashed: bytes | bytearray, bits_per_key: int = BITS_PER_KEY) -> bytes:
    """``build`` over the keys whose ``hashes`` are ``hashed`` (the same bytes)."""
    m, k = _shape(len(hashed) // 8, bits_per_key)
    if _c_build_hashed is not None:
        return bytes((k,)) + _c_build_hashed(hashed, m, k)
    bits = bytearray(m >> 3)
    for h1, h2 in _PAIR.iter_unpack(hashed):
        for i in range(k):
            p = (h1 + i * h2) % m
            bits[p >> 3] |= 1 << (p & 7)
    return bytes((k,)) + bytes(bits)


def build(keys: Collection[bytes], bits_per_key: int = BITS_PER_KEY, strip: tuple[int, int] | None = None) -> bytes:
    """Serialized filter over ``keys`` (sorted when ``strip`` is given). O(n * k)."""
    if strip is not None:
        return build_hashed(hashes(keys if type(keys) is list else list(keys), strip), bits_per_key)
    n = max(1, len(keys))
    m, k = _shape(len(keys), bits_per_key)
    if _c_build is not None and type(keys) is list:
        return bytes((k,)) + _c_build(keys, m, k)
    if n >= 256 and _numpy() is not None:
        return bytes((k,)) + _build_np(keys, m, k)
    bits = bytearray(m >> 3)
    for key in keys:
        h1 = crc32(key)
        h2 = crc32(key, SEED2) | 1
        for i in range(k):
            p = (h1 + i * h2) % m
            bits[p >> 3] |= 1 << (p & 7)
    return bytes((k,)) + bytes(bits)


def _build_np(keys: Collection[bytes], m: int, k: int) -> bytes:
    """The bit array of ``build``, computed with numpy (same positions, same bytes)."""
    n = len(keys)
    _np = _numpy()
    h1 = _np.fromiter(map(crc32, keys), dtype=_np.uint64, count=n)
    h2 = _np.fromiter(map(crc32, keys, repeat(SEED2)), dtype=_np.uint64, count=n) | _np.uint64(1)
    steps = _np.arange(k, dtype=_np.uint64)
    pos = (h1[:, None] + steps[None, :] * h2[:, None]) % _np.uint64(m)     # < 2**37: no overflow
    bits = _np.zeros(m, dtype=_np.uint8)
    bits[pos.ravel()] = 1
    out: bytes = _np.packbits(bits, bitorder="little").tobytes()
    return out


class Bloom:
    """A parsed filter (with its strip rule, None or (tag, n)). ``may_contain`` is O(k)
    and never gives a false negative."""

    __slots__ = ("k", "m", "bits", "strip")

    def __init__(self, data: bytes, strip: tuple[int, int] | None = None) -> None:
        self.k = data[0]
        self.bits = data[1:]
        self.m = len(self.bits) * 8
        self.strip = strip

    def may_contain(self, key: bytes) -> bool:
        key = entry(key, self.strip)
        bits, m = self.bits, self.m
        h1 = crc32(key)
        h2 = crc32(key, SEED2) | 1
        for i in range(self.k):
            p = (h1 + i * h2) % m
            if not bits[p >> 3] & (1 << (p & 7)):
                return False
        return True

    def may_contain_5(self, key: bytes) -> bool:
        """may_contain unrolled for k == 5 (the default): about 40% faster in CPython."""
        key = entry(key, self.strip)
        bits, m = self.bits, self.m
        h = crc32(key)
        d = crc32(key, SEED2) | 1
        p = h % m
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (h + d) % m
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (h + 2 * d) % m
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (h + 3 * d) % m
        if not bits[p >> 3] & (1 << (p & 7)):
            return False
        p = (h + 4 * d) % m
        return bool(bits[p >> 3] & (1 << (p & 7)))

    def probe(self) -> tuple[bytes, int] | tuple[bytes, int, int, int] | None:
        """This filter as ``candidates`` takes it (None when its bits are not bytes)."""
        if type(self.bits) is not bytes:
            return None
        return (self.bits, self.k) if self.strip is None else (self.bits, self.k, *self.strip)

    def checker(self) -> Callable[[bytes], bool]:
        """The fastest membership function for this filter."""
        if _c_check is not None and type(self.bits) is bytes:
            if self.strip is not None:
                return _partial(_c_check, self.bits, self.k, *self.strip)
            return _partial(_c_check, self.bits, self.k)
        return self.may_contain_5 if self.k == 5 else self.may_contain


def candidates(key: bytes, filters: tuple[tuple[bytes, int] | tuple[bytes, int, int, int] | None, ...]) -> list[int]:
    """Positions i of ``filters`` (each None, or ``probe()`` of a Bloom: ``(bits, k)``, or
    ``(bits, k, tag, n)`` with a strip rule) whose filter may hold ``key`` (None: may hold
    anything), in order. One call for all: the key is hashed once (twice with strip rules),
    and in C no filter costs a Python call."""
    if _c_candidates is not None:
        return _c_candidates(key, filters)
    out = []
    for i, f in enumerate(filters):
        if f is not None:
            bits, k = f[:2]
            e = entry(key, f[2:] or None)
            h1, h2 = crc32(e), crc32(e, SEED2) | 1
            m = len(bits) * 8
            if not all(bits[p >> 3] & (1 << (p & 7)) for p in ((h1 + j * h2) % m for j in range(k))):
                continue
        out.append(i)
    return out

