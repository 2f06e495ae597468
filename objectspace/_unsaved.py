"""What a save will write: the public face of the save bookkeeping (docs/objectspace.md,
*What a save will write*).

Layers above objectspace (spark_ops' TTL) must know, per object, what the next save of its
space writes — which entries or element positions — without reading the kinds' private
dirty sets, whose shape changes with the kinds. ``PersistedObject.unsaved()`` gives an
``Unsaved`` record; ``ObjectSpace.unsaved_objects()`` the objects that have one.

*Positions* name where a sequence's elements are stored, and stay the same while the
element stays: the slot of a queue, list, stack or array element (index ``i`` is slot
``positions()[0] + i``; a queue's ``popleft`` advances the first slot), the node id of a
linked-list node (permanent: ``LinkedListNode.position``), the id of a stream entry as an
int, ``ms << 64 | seq`` (``stream_position`` and ``stream_id`` convert).
"""
from __future__ import annotations

from dataclasses import dataclass

from ._layout import format_id, parse_id
from .errors import StreamIdError

_SEQ_BITS = 64
_SEQ_MASK = (1 << _SEQ_BITS) - 1


@dataclass(frozen=True)
class Unsaved:
    """What the next save of an object's space writes for it (see ``PersistedObject.unsaved``).

    ``kind``: the object's kind. ``written``: for a dict, sorted dict, set or sorted set the
    encoded keys (``objectspace.encode_key``) of the entries the save writes that hold an
    entry afterwards; for a queue, list, stack, array, linked list or stream the positions
    (ints, ascending) of the elements it writes that hold an element afterwards; empty for a
    value or ndarray (the object as a whole is written). ``removed``: the keys or positions
    it deletes (entries removed, slots left, nodes and stream entries deleted). ``cleared``:
    the object was cleared, so the save also deletes every stored entry it does not write
    (dict and set kinds and streams, which do not list those: they are not in memory). A
    stream's consumer groups are not described; its metadata (length, last id) never is."""

    kind: str
    written: tuple = ()
    removed: tuple = ()
    cleared: bool = False


def stream_position(entry_id: str) -> int:
    """The position (an int, ``ms << 64 | seq``) of stream entry id ``"ms-seq"``. Positions
    order as ids do. StreamIdError for a malformed id."""
    ms, seq = parse_id(entry_id)
    return (ms << _SEQ_BITS) | seq


def stream_id(position: int) -> str:
    """The stream entry id ``"ms-seq"`` of a position (see ``stream_position``)."""
    if not isinstance(position, int) or not 0 <= position < 1 << (2 * _SEQ_BITS):
        raise StreamIdError(f"not a stream position: {position!r}")
    return format_id(position >> _SEQ_BITS, position & _SEQ_MASK)


_POSITION_BYTES = {"queue": 8, "list": 8, "stack": 8, "array": 8, "linked_list": 8, "stream": 16}


def item_position(kind: str, item_key: bytes | None) -> int | None:
    """The position of the element whose record has ``item_key`` (its key after the object's
    items prefix, as ``iter_slots(..., keys=True)`` and ``walk_slots`` give it), for a
    sequence kind; None for other kinds and records that are no element."""
    width = _POSITION_BYTES.get(kind)
    if width is None or item_key is None or len(item_key) != width:
        return None
    return int.from_bytes(item_key, "big")


def split(table) -> tuple[list, list]:
    """(written, removed): the encoded keys of a Table's dirty and pending entries, ascending,
    split by whether they hold an entry now."""
    keys = table.dirty | table.pending if table.pending else table.dirty
    vals, gone = table.vals, table.ABSENT
    written: list = []
    removed: list = []
    for ek in sorted(keys):
        (removed if vals.get(ek, gone) is gone else written).append(ek)
    return written, removed
