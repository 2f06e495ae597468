"""PersistedLinkedList: a doubly linked list with node handles, stored as singly linked.

Each node has a permanent id (never reused). Its value and its *next* link are two
records, so changing a value rewrites only the value, and inserting or removing a node
rewrites one neighbour's link (the prev links are rebuilt when the list loads). Metadata
is ``[first id, last id, count, next id]``; id 0 means none. The list loads whole (one
range scan per record family) on first use.
"""
from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any

from . import _layout as L
from ._base import F_META, PersistedObject
from ._inplace import IMMUTABLE, keep_changed
from .errors import CorruptionError

_ID = 8
NODE_BYTES = 200        # a LinkedListNode and its dict slot, besides its value (see _cache.py)


class LinkedListNode:
    """A handle on one node: ``value`` (assignable), ``next``, ``prev``, ``list``."""

    __slots__ = ("_list", "_id", "_value", "_prev", "_next", "__weakref__")
    _list: PersistedLinkedList | None
    _prev: LinkedListNode | None
    _next: LinkedListNode | None

    def __init__(self, owner: PersistedLinkedList, nid: int, value: Any) -> None:
        self._list, self._id, self._value = owner, nid, value
        self._prev = self._next = None

    @property
    def value(self) -> Any:
        """The node's value. O(1)."""
        return self._value

    @value.setter
    def value(self, v: Any) -> None:
        """O(1); marks the node's value dirty (not its links)."""
        owner = self._list
        if owner is None:
            raise ValueError("this node was removed from its list")
        if not owner._listed:
            owner._touch()
        self._value = v
        owner._dv.add(self._id)

    @property
    def next(self) -> LinkedListNode | None:
        """The following node, or None at the end. O(1)."""
        return self._next

    @property
    def prev(self) -> LinkedListNode | None:
        """The preceding node, or None at the start. O(1)."""
        return self._prev

    @property
    def position(self) -> int:
        """Where the node is stored: its id, which stays the same while it is in the list
        (see ``objectspace.Unsaved``; ``PersistedLinkedList.node_at`` finds it)."""
        return self._id

    @property
    def list(self) -> PersistedLinkedList | None:
        """The list holding the node, or None once removed."""
        return self._list

    def __repr__(self) -> str:
        return f"<LinkedListNode {self._value!r}>"


class PersistedLinkedList(PersistedObject, Collection):
    """A persisted linked list. add_* and remove are O(1) given a node; find is O(n)."""

    kind = "linked_list"
    _handle_bytes = 2400
    __slots__ = ("_first", "_last", "_count", "_next_id", "_nodes", "_meta0", "_dv", "_pv",
                 "_dl", "_pl", "_gone", "_pgone", "_born", "_version")

    @classmethod
    def _fresh(cls, space, name, nkey, codec):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=True)
        self._init_nodes(1, {})
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=False)
        self._init_nodes(meta[3], None if meta[2] else {})
        self._meta0 = meta
        return self

    def _init_nodes(self, next_id: int, nodes) -> None:
        self._first = self._last = None
        self._count = 0
        self._next_id = next_id
        self._nodes = nodes            # id -> node; None until loaded
        self._meta0 = None
        self._dv, self._pv, self._dl, self._pl = set(), set(), set(), set()
        self._gone, self._pgone, self._born = set(), set(), set()
        self._version = 0

    def _ensure(self) -> dict:
        """Load every node (one range scan for values, one for links). O(n), once."""
        if self._nodes is not None:
            return self._nodes
        first_id, last_id, count, _ = self._meta0
        db, decode = self._space._db, self._codec.decode
        vals = {L.slot_of(k): decode(raw) for k, raw in db.scan_prefix(self._items)}
        links = {L.slot_of(k): int.from_bytes(raw, "big") for k, raw in db.scan_prefix(self._ns + L.LINKS)}
        nodes, prev, nid = {}, None, first_id
        while nid:
            if nid not in vals or nid not in links or len(nodes) >= count:
                raise CorruptionError(f"linked list {self._name!r} is broken at node {nid}")
            node = nodes[nid] = LinkedListNode(self, nid, vals[nid])
            node._prev = prev
            if prev is None:
                self._first = node
            else:
                prev._next = node
            prev, nid = node, links[nid]
        if len(nodes) != count or (prev._id if prev else 0) != last_id:
            raise CorruptionError(f"linked list {self._name!r} holds {len(nodes)} nodes, metadata says {count}")
        self._last, self._count, self._nodes = prev, count, nodes
        return nodes

    def _meta(self) -> list:
        if self._nodes is None:
            return list(self._meta0)
        f, la = self._first, self._last
        return [f._id if f else 0, la._id if la else 0, self._count, self._next_id]

    def __len__(self) -> int:
        return self._meta0[2] if self._nodes is None else self._count

    def _dirty_count(self) -> int:
        return (len(self._dv | self._pv) + len(self._dl | self._pl) + len(self._gone | self._pgone)
                + super()._dirty_count())

    # -- navigation -------------------------------------------------------------------------

    @property
    def first(self) -> LinkedListNode | None:
        """The first node or None. O(1) once loaded."""
        self._check()
        self._ensure()
        return self._first

    @property
    def last(self) -> LinkedListNode | None:
        """The last node or None. O(1) once loaded."""
        self._check()
        self._ensure()
        return self._last

    def nodes(self) -> Iterator[LinkedListNode]:
        """Nodes first to last. O(n)."""
        self._check()
        self._ensure()
        version, node = self._version, self._first
        while node is not None:
            if self._version != version:
                raise RuntimeError("linked list mutated during iteration")
            yield node
            node = node._next

    def __iter__(self):
        """Values first to last. O(n)."""
        return (node._value for node in self.nodes())

    def __reversed__(self):
        self._ensure()
        node, out = self._last, []
        while node is not None:
            out.append(node._value)
            node = node._prev
        return iter(out)

    def __contains__(self, value) -> bool:
        return self.find(value) is not None

    def find(self, value: Any) -> LinkedListNode | None:
        """The first node whose value equals value, or None. O(n)."""
        for node in self.nodes():
            if node._value is value or node._value == value:
                return node
        return None

    def find_last(self, value: Any) -> LinkedListNode | None:
        """The last node whose value equals value, or None. O(n)."""
        self._ensure()
        node = self._last
        while node is not None and not (node._value is value or node._value == value):
            node = node._prev
        return node

    # -- edits ------------------------------------------------------------------------------

    def _own(self, node) -> None:
        if not isinstance(node, LinkedListNode) or node._list is not self:
            raise ValueError(f"{node!r} is not a node of linked list {self._name!r}")

    def _insert_after(self, prev, value):
        if not self._listed:
            self._touch()
        self._ensure()
        nid = self._next_id
        self._next_id = nid + 1
        node = LinkedListNode(self, nid, value)
        self._nodes[nid] = node
        nxt = prev._next if prev is not None else self._first
        node._prev, node._next = prev, nxt
        if prev is None:
            self._first = node
        else:
            prev._next = node
            self._dl.add(prev._id)
        if nxt is None:
            self._last = node
        else:
            nxt._prev = node
        self._dv.add(nid)
        self._dl.add(nid)
        self._born.add(nid)
        self._count += 1
        self._flags |= F_META
        self._version += 1
        return node

    def add_first(self, value: Any) -> LinkedListNode:
        """Insert at the front. O(1): the new node's two records plus metadata."""
        return self._insert_after(None, value)

    def add_last(self, value: Any) -> LinkedListNode:
        """Insert at the end. O(1): the new node, the old last node's link, metadata."""
        self._ensure()
        return self._insert_after(self._last, value)

    append = add_last

    def add_after(self, node: LinkedListNode, value: Any) -> LinkedListNode:
        """Insert after node. O(1): the new node, node's link, metadata."""
        self._own(node)
        return self._insert_after(node, value)

    def add_before(self, node: LinkedListNode, value: Any) -> LinkedListNode:
        """Insert before node. O(1): the new node, its predecessor's link, metadata."""
        self._own(node)
        return self._insert_after(node._prev, value)

    def remove(self, node_or_value: Any) -> None:
        """Remove a node, or the first node equal to a value (O(n) to find it; ValueError
        if none). O(1) given a node: deletes its two records, rewrites one link."""
        node: LinkedListNode | None
        if isinstance(node_or_value, LinkedListNode):
            node = node_or_value
            self._own(node)
        else:
            node = self.find(node_or_value)
            if node is None:
                raise ValueError(f"{node_or_value!r} is not in linked list {self._name!r}")
        if not self._listed:
            self._touch()
        prev, nxt = node._prev, node._next
        if prev is None:
            self._first = nxt
        else:
            prev._next = nxt
            self._dl.add(prev._id)
        if nxt is None:
            self._last = prev
        else:
            nxt._prev = prev
        nid = node._id
        del self._nodes[nid]
        self._dv.discard(nid)
        self._dl.discard(nid)
        self._pv.discard(nid)
        self._pl.discard(nid)
        if nid in self._born:
            self._born.discard(nid)
        else:
            self._gone.add(nid)
        node._list = node._prev = node._next = None
        self._count -= 1
        self._flags |= F_META
        self._version += 1

    def remove_first(self) -> Any:
        """Remove the first node and return its value. O(1). IndexError when empty."""
        node = self.first
        if node is None:
            raise IndexError("remove from an empty linked list")
        self.remove(node)
        return node._value

    def remove_last(self) -> Any:
        """Remove the last node and return its value. O(1). IndexError when empty."""
        node = self.last
        if node is None:
            raise IndexError("remove from an empty linked list")
        self.remove(node)
        return node._value

    def clear(self) -> None:
        """Remove every node. O(n)."""
        for node in list(self.nodes()):
            self.remove(node)

    # -- save -------------------------------------------------------------------------------

    def positions(self) -> list:
        """The positions (node ids) of the nodes, in list order (see ``objectspace.Unsaved``).
        O(n): loads every node."""
        self._check()
        return [node._id for node in self.nodes()]

    def node_at(self, position: int) -> LinkedListNode | None:
        """The node at ``position`` (its ``LinkedListNode.position``), or None when no node
        of the list is there. O(1) once loaded (the first call loads every node)."""
        self._check()
        return self._ensure().get(position)

    def _unsaved_parts(self) -> tuple:
        nodes = self._nodes or {}
        written = sorted(n for n in self._dv | self._pv if n in nodes)
        return written, sorted(self._gone | self._pgone), False

    def _collect_items(self, out: list, full: bool) -> None:
        ip, lp, enc = self._items, self._ns + L.LINKS, self._encode
        for nid in sorted(self._gone | self._pgone):
            k = nid.to_bytes(_ID, "big")
            out.append((ip + k, None))
            out.append((lp + k, None))
        if full:
            nodes = list(self.nodes())
            vids = lids = [n._id for n in nodes]
        else:
            vids = sorted(self._dv | self._pv)
            lids = sorted(self._dl | self._pl)
        nodes = self._nodes or {}
        for nid in vids:
            if nid in nodes:
                out.append((ip + nid.to_bytes(_ID, "big"), enc(nodes[nid]._value, nid)))
        for nid in lids:
            if nid in nodes:
                nxt = nodes[nid]._next
                out.append((lp + nid.to_bytes(_ID, "big"), (nxt._id if nxt else 0).to_bytes(_ID, "big")))

    def _inplace_values(self, immutable: frozenset) -> list:
        nodes = self._nodes
        if not nodes:
            return []
        dv, pv = self._dv, self._pv
        return [(nid, node._value) for nid, node in nodes.items()
                if type(node._value) not in immutable and nid not in dv and nid not in pv]

    def _inplace_key(self, nid: int) -> bytes:
        return self._items + nid.to_bytes(_ID, "big")

    def _inplace_mark(self, nid: int) -> None:
        self._touch()
        self._dv.add(nid)

    def _inplace_where(self, nids: list) -> list:
        at = {node._id: i for i, node in enumerate(self.nodes())}
        return [(f"node at position {at.get(nid)}", "assign it back: node.value = node.value (the node at that "
                 "position)") for nid in nids]

    def _mem_estimate(self, item_bytes: int) -> int:
        return self._handle_bytes + (len(self._nodes) * (item_bytes + NODE_BYTES) if self._nodes else 0)

    # _evict_clean keeps the nodes: a caller's LinkedListNode handles must stay the list's
    # own. The cache drops its reference to the list; unreferenced, list and nodes go, so
    # values changed in place must keep the list (see _inplace.keep_changed).

    def _evict_clean(self) -> None:
        if self._space._inplace is not None and self._nodes:
            keep_changed(self, self._inplace_values(IMMUTABLE))

    def _promote(self) -> None:
        super()._promote()
        self._pv |= self._dv
        self._pl |= self._dl
        self._pgone |= self._gone
        self._dv, self._dl, self._gone, self._born = set(), set(), set(), set()

    def _confirm(self) -> bool:
        super()._confirm()
        self._pv.clear()
        self._pl.clear()
        self._pgone.clear()
        return not (self._flags or self._dv or self._dl or self._gone)
