"""Manifest: what one checkpoint consists of. Small, written once, never changed.

Layout (docs/format/manifest.md)::

    +--------+-----+-------+----------+----------+----------+---------------------------+
    | "DKVM" | ver | flags | reserved | body_len | body_crc | body (msgpack map; zstd   |
    |   4    |  1  |   1   |    2     |   u32    |   u32    | frame when flags bit 0)   |
    +--------+-----+-------+----------+----------+----------+---------------------------+

Body keys are one or two letters to keep a manifest at ~100 bytes when the level list
is empty: ``e`` epoch, ``w`` writer epoch, ``p`` parent epoch, ``s`` last sequence
number, ``l`` levels (L0 first; each a list of tables), ``r`` WAL ranges to replay,
``k`` retained epochs, ``g`` owned key-group range, ``t`` creation time (ms), ``v``
reserved table numbers (``[writer, first]`` pairs: SSTs of that writer numbered ``first``
or more may still be published by this checkpoint's writer, so a writer that opens this
checkpoint must not collect them as orphans).

Version 2 (RFC 0007): an entry of ``r`` may be an inline segment, a small WAL segment's
encoded bytes carried by the manifest instead of a file. Version 3 (RFC 0011): an entry
may name segments that earlier manifests of the instance carry inline (a carried run),
instead of carrying their bytes again. A manifest is written with the lowest version
that holds its body (3 only with a carried run). Versions 1 and 2 still read.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..errors import CorruptionError
from ._codec import check_crc, compress, crc32, decompress, pack_obj, unpack_obj

MAGIC = b"DKVM"
VERSION = 3             # written only when the body has a carried run; else 2
READS = (1, 2, 3)       # version 1: the same body without inline segments
FLAG_ZSTD = 1
COMPRESS_OVER = 512
_HEADER = struct.Struct("<4sBBHII")
HEADER_SIZE = _HEADER.size  # 16
ALL_KEY_GROUPS = (0, 1 << 16)


@dataclass(frozen=True)
class TableRef:
    """An SST as a checkpoint sees it: its object path (relative to the root), size, key
    and sequence ranges, record count, and the key-group range this instance owns of it."""
    path: str
    size: int
    min_key: bytes
    max_key: bytes
    min_seq: int
    max_seq: int
    count: int
    groups: tuple[int, int] = ALL_KEY_GROUPS

    def to_list(self) -> list[Any]:
        out = [self.path, self.size, self.min_key, self.max_key, self.min_seq, self.max_seq, self.count]
        if self.groups != ALL_KEY_GROUPS:
            out += list(self.groups)
        return out

    @classmethod
    def from_list(cls, v: list[Any]) -> "TableRef":
        groups = (v[7], v[8]) if len(v) > 7 else ALL_KEY_GROUPS
        return cls(v[0], v[1], v[2], v[3], v[4], v[5], v[6], groups)


@dataclass(frozen=True)
class WalRange:
    """WAL segments ``first..last`` of writer ``writer`` in instance ``ns``; replay keeps
    records with ``seq > skip_through`` inside ``groups``. ``data``: the encoded segment
    itself when the manifest carries it inline (then ``first == last`` and there is no
    file; version 2). ``carried``: one ``(epoch, writer)`` per segment ``first..last``,
    the earlier manifest of this instance that carries that segment inline (a carried
    run, version 3; no file either). ``inline``: no file (either of the two)."""
    ns: str
    writer: int
    first: int
    last: int
    skip_through: int = 0
    groups: tuple[int, int] = ALL_KEY_GROUPS
    data: bytes | None = field(default=None, repr=False)
    carried: tuple[tuple[int, int], ...] | None = None

    @property
    def inline(self) -> bool:
        return self.data is not None or self.carried is not None

    def to_list(self) -> list[Any]:
        if self.data is not None:       # [instance, writer, segment, skip_through, bytes]
            out = [self.ns, self.writer, self.first, self.skip_through, self.data]
        elif self.carried is not None:  # [instance, writer, first, skip_through, [cw, e1, d2, ...]]
            cw = self.carried[0][1]
            if len(self.carried) != self.last - self.first + 1 or any(w != cw for _, w in self.carried):
                raise ValueError(f"carried run {self!r}: one carrier per segment, all of one writer")
            epochs = [e for e, _ in self.carried]
            if any(b < a for a, b in zip(epochs, epochs[1:])):
                raise ValueError(f"carried run {self!r}: carrier epochs must not decrease")
            out = [self.ns, self.writer, self.first, self.skip_through,
                   [cw, epochs[0]] + [b - a for a, b in zip(epochs, epochs[1:])]]
        else:
            out = [self.ns, self.writer, self.first, self.last, self.skip_through]
        if self.groups != ALL_KEY_GROUPS:
            out += list(self.groups)
        return out

    @classmethod
    def from_list(cls, v: list[Any]) -> "WalRange":
        groups = (v[5], v[6]) if len(v) > 5 else ALL_KEY_GROUPS
        if isinstance(v[4], (bytes, bytearray)):        # an inline segment
            if not isinstance(v[2], int) or isinstance(v[2], bool):
                raise TypeError(f"inline segment number {v[2]!r}")
            return cls(v[0], v[1], v[2], v[2], v[3], groups, bytes(v[4]))
        if isinstance(v[4], list):                      # a carried run
            run = v[4]
            if len(run) < 2 or not isinstance(v[2], int) or isinstance(v[2], bool):
                raise ValueError(f"carried run {run!r} from {v[2]!r}")
            cw, epoch = run[0], run[1]
            carried = [(epoch, cw)]
            for d in run[2:]:
                if type(d) is not int or d < 0:
                    raise ValueError(f"carried run {run!r}")
                epoch += d
                carried.append((epoch, cw))
            if type(cw) is not int or type(run[1]) is not int or cw < 0 or run[1] < 0:
                raise ValueError(f"carried run {run!r}")
            return cls(v[0], v[1], v[2], v[2] + len(carried) - 1, v[3], groups, None, tuple(carried))
        return cls(v[0], v[1], v[2], v[3], v[4], groups)


@dataclass
class Manifest:
    epoch: int
    writer: int
    last_seq: int
    levels: list[list[TableRef]] = field(default_factory=list)      # L0 newest first
    wal: list[WalRange] = field(default_factory=list)
    retained: list[int] = field(default_factory=list)     # epochs retained when this was written
    parent: int | None = None
    groups: tuple[int, int] = ALL_KEY_GROUPS
    created_ms: int = 0
    reserved: dict[int, int] = field(default_factory=dict)     # writer -> first SST number still in flight

    def tables(self) -> Iterator[TableRef]:
        for level in self.levels:
            yield from level


def encode(m: Manifest) -> bytes:
    body: dict[str, Any] = {"e": m.epoch, "w": m.writer, "s": m.last_seq, "t": m.created_ms}
    if m.parent is not None:
        body["p"] = m.parent
    if any(m.levels):
        body["l"] = [[t.to_list() for t in level] for level in m.levels]
    if m.wal:
        body["r"] = [r.to_list() for r in m.wal]
    if m.retained:
        body["k"] = list(m.retained)
    if tuple(m.groups) != ALL_KEY_GROUPS:
        body["g"] = list(m.groups)
    if m.reserved:
        body["v"] = [[w, n] for w, n in sorted(m.reserved.items())]
    raw = pack_obj(body)
    flags = 0
    if len(raw) > COMPRESS_OVER:
        raw, flags = compress(raw, 3), FLAG_ZSTD
    version = VERSION if any(r.carried is not None for r in m.wal) else 2
    return _HEADER.pack(MAGIC, version, flags, 0, len(raw), crc32(raw)) + raw


def decode(data: bytes, what: str = "manifest") -> Manifest:
    ver, b = _body(data, what)
    try:
        levels = [[TableRef.from_list(t) for t in level] for level in b.get("l", [])]
        return Manifest(
            epoch=b["e"], writer=b["w"], last_seq=b["s"], levels=levels,
            wal=[WalRange.from_list(r) for r in b.get("r", []) if _allowed(r, ver)], retained=b.get("k", []),
            parent=b.get("p"), groups=tuple(b.get("g", ALL_KEY_GROUPS)), created_ms=b.get("t", 0),
            reserved={int(w): int(n) for w, n in b.get("v", [])})
    except (KeyError, TypeError, IndexError, ValueError) as e:
        raise CorruptionError(f"{what}: malformed body ({e!r})") from None


def decode_inline(data: bytes, what: str = "manifest") -> dict[tuple[str, int, int], bytes]:
    """The inline segments of a manifest (what an open needs of a carrier, RFC 0011):
    ``{(instance, writer, segment): bytes}``. Checks the header, checksum and those
    entries; the rest of the body is not turned into objects."""
    ver, b = _body(data, what)
    out = {}
    try:
        for r in b.get("r", []):
            if len(r) > 4 and isinstance(r[4], (bytes, bytearray)) and _allowed(r, ver):
                if not isinstance(r[2], int) or isinstance(r[2], bool):
                    raise TypeError(f"inline segment number {r[2]!r}")
                out[(r[0], r[1], r[2])] = bytes(r[4])
    except (TypeError, IndexError, ValueError) as e:
        raise CorruptionError(f"{what}: malformed body ({e!r})") from None
    return out


def _body(data: bytes, what: str) -> tuple[int, dict[Any, Any]]:
    if len(data) < HEADER_SIZE:
        raise CorruptionError(f"{what}: {len(data)} bytes is shorter than the header")
    magic, ver, flags, _, blen, bcrc = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise CorruptionError(f"{what}: bad magic {magic!r}")
    if ver not in READS:
        raise CorruptionError(f"{what}: unsupported manifest version {ver}")
    raw = data[HEADER_SIZE:]
    if len(raw) != blen:
        raise CorruptionError(f"{what}: body is {len(raw)} bytes, header says {blen} (torn write?)")
    check_crc(raw, bcrc, what)
    if flags & FLAG_ZSTD:
        raw = decompress(raw, what)
    b = unpack_obj(raw, what)
    if not isinstance(b, dict):
        raise CorruptionError(f"{what}: body is a {type(b).__name__}, not a map")
    return ver, b


def _allowed(r: list[Any], ver: int) -> bool:
    if ver < 2 and len(r) > 4 and isinstance(r[4], (bytes, bytearray)):
        raise ValueError("an inline segment in a version 1 manifest")
    if ver < 3 and len(r) > 4 and isinstance(r[4], list):
        raise ValueError(f"a carried run in a version {ver} manifest")
    return True


def inline_bytes(m: Manifest) -> int:
    """Bytes of the WAL segments ``m`` carries inline."""
    return sum(len(r.data) for r in m.wal if r.data is not None)


def carriers(m: Manifest) -> set[tuple[int, int]]:
    """The ``(epoch, writer)`` of every earlier manifest whose inline segments ``m``'s
    carried runs name (RFC 0011): they must outlive ``m``."""
    return {c for r in m.wal if r.carried is not None for c in r.carried}


def carried_segment(m: Manifest, ns: str, writer: int, segment: int) -> WalRange | None:
    """The inline entry of ``m`` for segment ``segment`` of ``writer`` in instance ``ns``."""
    for r in m.wal:
        if r.data is not None and (r.ns, r.writer, r.first) == (ns, writer, segment):
            return r
    return None
