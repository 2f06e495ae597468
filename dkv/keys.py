"""Key groups: the 3-byte prefix the layers above dkv put on every key.

A key starts with a **key group** (2 bytes, big-endian, 0..65535) and a **schema byte**
(what kind of record follows; its values are the caller's to choose). Keys are ordered
bytewise, so one key group's records are one contiguous range, which is what lets a
shard's state be scanned, moved and split by key-group range (``dkv.open(...,
key_group_range=(first, end))``).
"""
from __future__ import annotations

MAX_KEY_GROUPS = 1 << 16


def key_prefix(key_group: int, schema: int) -> bytes:
    """The 3-byte prefix of keys in ``key_group`` with ``schema``. O(1).

    >>> key_prefix(258, 1)
    b'\\x01\\x02\\x01'
    """
    if not isinstance(key_group, int) or not 0 <= key_group < MAX_KEY_GROUPS:
        raise ValueError(f"key_group must be an int in [0, {MAX_KEY_GROUPS}), got {key_group!r}")
    if not isinstance(schema, int) or not 0 <= schema < 256:
        raise ValueError(f"schema must be an int in [0, 256), got {schema!r}")
    return key_group.to_bytes(2, "big") + bytes((schema,))


def key_group_of(key: bytes) -> int:
    """The key group a key belongs to (its first two bytes, big-endian). O(1)."""
    if len(key) < 2:
        raise ValueError(f"key {key!r} is shorter than a key group (2 bytes)")
    return (key[0] << 8) | key[1]
