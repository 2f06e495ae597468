"""Every key objectspace writes is built here (docs/format/objectspace.md has the diagram).

A space prefix ``P`` is any bytes. In a dkv store whose keys start with a key group
(``dkv.key_prefix``), object spaces sit at ``key_prefix(kg, SCHEMA_STATE)``: key group 0
for ``ObjectSpace.open``, one space per key group for spark_ops' operators.

Under a space prefix ``P``::

    P 0x00 <name>                      index entry: msgpack [kind, codec, format version]
    P 0x01 <name> 0x00                 metadata of the object: C1 <version> <kind> <codec>, then
                                       the kind's msgpack (format 2; format 1: the msgpack alone)
    P 0x01 <name> 0x01 <slot|key>      items: 8-byte big-endian slot, or an encoded key
                                       (ndarray: one chunk per slot, see _ndlayout)
    P 0x01 <name> 0x02 <node>          linked list: next-node links (8-byte node ids)
    P 0x01 <name> 0x03 <group>         stream: consumer group records
    P 0x01 <name> 0x04 <group> <id>    stream: pending entries of a group
    P 0x02                             counts record: msgpack [1, objects, scopes] (_counts.py)

``<name>`` is the prefix-free encoding of the object name (``_keycodec.encode_name``), so
one object's namespace never contains another's keys.
"""
from __future__ import annotations

import msgpack

from .errors import CorruptionError, StreamIdError

FORMAT_VERSION = 2
"""Format 2 (RFC 0005 decision 12): a metadata record starts with META_HEAD, the format
version, the object's kind and its codec, so loading an object with metadata is one point
read. Format-1 objects
(metadata without the head) still read, with the index entry first; their next metadata
write rewrites both as format 2."""

META_HEAD = 0xC1
"""The first byte of a format-2 metadata record: a byte msgpack never uses, so it cannot
begin a format-1 record."""
META_HEAD_BYTE = bytes((META_HEAD,))
HEAD_BYTES = 4

SCHEMA_STATE = 0x00
"""The schema byte (the third key byte, after the key group) of object spaces' records."""

INDEX = b"\x00"
OBJECTS = b"\x01"
COUNTS = b"\x02"
META = b"\x00"
ITEMS = b"\x01"
LINKS = b"\x02"
GROUPS = b"\x03"
PEL = b"\x04"

SLOT_BYTES = 8

BLOOM_STRIP = (ITEMS[0], SLOT_BYTES)
"""The dkv ``bloom_strip`` rule for object spaces (RFC 0005 decision 14): the slot records
of a list, queue, stack, array or ndarray (``ITEMS`` then an 8-byte slot) enter a table's
bloom filter once per object, as their items prefix. They are read by range scans; a point
read of one slot still skips the tables that hold none of its object's items. Point reads
of metadata, index and value records keep their own entries."""

KIND_CODES = {
    "value": 1, "array": 2, "list": 3, "queue": 4, "stack": 5, "linked_list": 6,
    "set": 7, "sorted_set": 8, "dict": 9, "sorted_dict": 10, "stream": 11, "ndarray": 12,
}
KIND_NAMES = {code: name for name, code in KIND_CODES.items()}
KINDS_WITHOUT_META = frozenset({"value"})
"""Kinds that write no metadata record (their index entry is all there is to load)."""


def slot_key(items_prefix: bytes, slot: int) -> bytes:
    """Key of an integer slot: fixed-width big-endian, so slots sort numerically."""
    return items_prefix + slot.to_bytes(SLOT_BYTES, "big")


def slot_of(key: bytes) -> int:
    return int.from_bytes(key[-SLOT_BYTES:], "big")


def encode_index(kind: str, codec_code: int) -> bytes:
    return msgpack.packb([KIND_CODES[kind], codec_code, FORMAT_VERSION])


def decode_index(raw: bytes, name) -> tuple[str, int]:
    """(kind, codec code) from an index entry. Raises CorruptionError for unknown kinds or
    a newer format version."""
    return decode_index_version(raw, name)[:2]


def decode_index_version(raw: bytes, name) -> tuple[str, int, int]:
    """(kind, codec code, format version) from an index entry; see decode_index."""
    try:
        kind_code, codec_code, version = msgpack.unpackb(raw)[:3]
        if type(kind_code) is not int or type(codec_code) is not int or type(version) is not int:
            raise TypeError("kind, codec and version must be ints")
    except Exception as e:  # noqa: BLE001 - any decoding failure is corruption
        raise CorruptionError(f"index entry of {name!r} is unreadable: {raw!r:.40}") from e
    if version > FORMAT_VERSION:
        raise CorruptionError(f"object {name!r} has format version {version}; this objectspace "
                              f"reads up to {FORMAT_VERSION} (upgrade objectspace)")
    kind = KIND_NAMES.get(kind_code)
    if kind is None:
        raise CorruptionError(f"object {name!r} has unknown kind code {kind_code}")
    return kind, codec_code, version


pack_meta = msgpack.Packer().pack
"""msgpack bytes of a metadata list (small ints only); a record is meta_head() + these."""

_HEADS: dict = {}


def meta_head(kind: str, codec_code: int) -> bytes:
    """The HEAD_BYTES a format-2 metadata record starts with: META_HEAD, version, kind, codec."""
    head = _HEADS.get((kind, codec_code))
    if head is None:
        head = _HEADS[kind, codec_code] = bytes((META_HEAD, FORMAT_VERSION, KIND_CODES[kind], codec_code))
    return head


def split_meta(raw: bytes, name) -> tuple[str, int, list]:
    """(kind, codec code, metadata) of a format-2 metadata record (one that starts with
    META_HEAD): the object as one read gives it, its index entry unread. Raises
    CorruptionError for a newer format version, a kind that has no metadata or is
    unknown, or unreadable metadata."""
    _check_head(raw, name)
    kind = KIND_NAMES.get(raw[2])
    if kind is None or kind in KINDS_WITHOUT_META:
        raise CorruptionError(f"metadata of {name!r} names kind code {raw[2]}, which has no metadata")
    return kind, raw[3], _meta_list(raw, HEAD_BYTES, name, kind)


def unpack_meta(raw: bytes | None, name, kind: str, codec_code: int | None = None):
    """The metadata list of a record of either format (a head must name ``kind``, and
    ``codec_code`` when given: the index entry's)."""
    if raw is None:
        raise CorruptionError(f"{kind} {name!r} has an index entry but no metadata record")
    if raw[:1] != META_HEAD_BYTE:
        return _meta_list(raw, 0, name, kind)
    _check_head(raw, name)
    if raw[2] != KIND_CODES[kind]:
        raise CorruptionError(f"metadata of {kind} {name!r} names kind code {raw[2]}")
    if codec_code is not None and raw[3] != codec_code:
        raise CorruptionError(f"metadata of {kind} {name!r} names codec {raw[3]}, its index entry {codec_code}")
    return _meta_list(raw, HEAD_BYTES, name, kind)


def _check_head(raw: bytes, name) -> None:
    """A format-2 head is whole and of a version this objectspace reads."""
    if len(raw) <= HEAD_BYTES or raw[1] < 2:
        raise CorruptionError(f"metadata of {name!r} is unreadable: {raw!r:.40}")
    if raw[1] > FORMAT_VERSION:
        raise CorruptionError(f"object {name!r} has format version {raw[1]}; this objectspace "
                              f"reads up to {FORMAT_VERSION} (upgrade objectspace)")


def _meta_list(raw: bytes, start: int, name, kind: str) -> list:
    """The msgpack list of a metadata record from ``start`` (after its head, if any)."""
    try:
        meta = msgpack.unpackb(memoryview(raw)[start:] if start else raw)
    except Exception as e:  # noqa: BLE001 - any decoding failure is corruption
        raise CorruptionError(f"metadata of {kind} {name!r} is unreadable: {raw!r:.40}") from e
    if type(meta) is not list:
        raise CorruptionError(f"metadata of {kind} {name!r} is unreadable (not a list): {raw!r:.40}")
    return meta


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key above every key starting with prefix (None if there is none)."""
    p = prefix.rstrip(b"\xff")
    if not p:
        return None
    return p[:-1] + bytes((p[-1] + 1,))


# -- stream entry ids: "<ms>-<seq>" strings <-> (ms, seq) <-> 16-byte big-endian keys --------

MAX_SEQ = (1 << 64) - 1


def parse_id(s, *, default_seq: int = 0) -> tuple[int, int]:
    """(ms, seq) of an id string "ms-seq" (or "ms", taking default_seq): decimal digits only,
    each part at most 2**64 - 1 (else StreamIdError)."""
    if isinstance(s, str):
        ms, sep, seq = s.partition("-")
        if not (ms.isdigit() and ms.isascii() and (not sep or (seq.isdigit() and seq.isascii()))):
            raise StreamIdError(f"invalid stream id {s!r}")
        ms = int(ms)
        seq = int(seq) if sep else default_seq
    elif isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], int) and isinstance(s[1], int):
        ms, seq = s
    else:
        raise StreamIdError(f"stream ids are strings like '1700000000000-0', got {s!r}")
    if not (0 <= ms <= MAX_SEQ and 0 <= seq <= MAX_SEQ):
        raise StreamIdError(f"invalid stream id {s!r}")
    return ms, seq


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


def id_key(ms: int, seq: int) -> bytes:
    return ms.to_bytes(8, "big") + seq.to_bytes(8, "big")


def key_id(ek: bytes) -> str:
    return f"{int.from_bytes(ek[:8], 'big')}-{int.from_bytes(ek[8:16], 'big')}"


def range_bound(s, *, end: bool) -> bytes | None:
    """ek bound for range(): "-"/"+" the smallest/greatest id (open when at their own end),
    "(id" exclusive, "ms" covers every seq of ms. Returned as [lo, hi) bytes: lo inclusive,
    hi exclusive; None = unbounded. An exclusive bound past the id space ("(" and the
    greatest id as a start, the smallest as an end) raises StreamIdError, as in Redis."""
    if s == "-":
        return _ZERO_HI if end else None
    if s == "+":
        return None if end else _MAX_KEY
    exclusive = isinstance(s, str) and len(s) > 1 and s.startswith("(")
    if exclusive:
        s = s[1:]
    ms, seq = parse_id(s, default_seq=MAX_SEQ if end else 0)
    if exclusive and (ms, seq) == ((0, 0) if end else (MAX_SEQ, MAX_SEQ)):
        raise StreamIdError(f"invalid {'end' if end else 'start'} id for the interval: ({format_id(ms, seq)}")
    k = id_key(ms, seq)
    return k if end == exclusive else k + b"\x00"


_MAX_KEY = id_key(MAX_SEQ, MAX_SEQ)
_ZERO_HI = id_key(0, 0) + b"\x00"
