"""PersistedStream: an append-only log of field maps with Redis Streams semantics.

Entry ids are ``"<ms>-<seq>"`` strings, strictly increasing; ``add(fields)`` with
``id="*"`` takes the space clock's milliseconds. Entries are stored at
``items/<ms:8 bytes><seq:8 bytes>`` (big-endian, so ranges are range scans); metadata is
``[last ms, last seq, count]``. Consumer groups are in ``_groups``.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._base import ABSENT, F_META, MISSING, PersistedObject
from ._groups import GroupsMixin
from ._inplace import keep_changed
from ._layout import MAX_SEQ, format_id, id_key, key_id, parse_id, range_bound
from ._keyed import ENTRY_BYTES
from ._table import Table
from ._unsaved import split
from .errors import StreamIdError

if TYPE_CHECKING:
    from ._types import StreamId

class PersistedStream(GroupsMixin, PersistedObject, Collection):
    """A persisted stream. add O(1) (one entry + metadata dirty); range/rev_range are range
    scans O(k); trim/delete O(removed); len O(1). Iteration yields (id, fields), oldest first.
    """

    kind = "stream"
    _handle_bytes = 2100
    _mutable_entries = True
    __slots__ = ("_t", "_last", "_groups", "_dead_groups")
    _t: Table

    @classmethod
    def _fresh(cls, space, name, nkey, codec):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=True)
        self._t = Table(self, self._items, 0, True, True, self._enc_entry, self._dec_entry)
        self._last = (0, 0)
        self._init_groups(fresh=True)
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls()
        self._init_base(space, name, nkey, codec, fresh=False)
        self._t = Table(self, self._items, meta[2], False, True, self._enc_entry, self._dec_entry)
        self._last = (meta[0], meta[1])
        self._init_groups(fresh=False)
        return self

    def _enc_entry(self, ek, fields) -> bytes:
        return self._encode(fields, key_id(ek))

    def _dec_entry(self, ek, raw):
        return self._codec.decode(raw)

    def _meta(self) -> list:
        return [self._last[0], self._last[1], self._t.count]

    def __len__(self) -> int:
        return self._t.count

    def _dirty_count(self) -> int:
        return self._t.dirty_count() + self._groups_dirty_count() + super()._dirty_count()

    def positions(self) -> list:
        """The positions of the entries (their ids as ints, ``objectspace.stream_position``),
        oldest first. O(n): reads every entry."""
        self._check()
        return [int.from_bytes(ek, "big") for ek, _ in self._t.iterate()]

    def _unsaved_parts(self) -> tuple:
        t = self._t
        written, removed = split(t)
        pos = int.from_bytes
        return [pos(ek, "big") for ek in written], [pos(ek, "big") for ek in removed], t.clr or t.pclr

    # -- adding -----------------------------------------------------------------------------

    def _next_id(self, id) -> tuple[int, int]:
        last_ms, last_seq = self._last
        if id == "*":
            if last_seq < MAX_SEQ:
                ms = self._space._clock()
                return (ms, 0) if ms > last_ms else (last_ms, last_seq + 1)
            if last_ms < MAX_SEQ:
                ms = self._space._clock()
                return (ms, 0) if ms > last_ms else (last_ms + 1, 0)
            raise StreamIdError("the stream has used the greatest id "
                                f"({format_id(MAX_SEQ, MAX_SEQ)}): it cannot take another entry")
        if isinstance(id, str) and id.endswith("-*"):
            ms = id[:-2]
            if not (ms.isdigit() and ms.isascii()) or int(ms) > MAX_SEQ:
                raise StreamIdError(f"invalid stream id {id!r}")
            ms = int(ms)
            if ms == last_ms and last_seq < MAX_SEQ:
                new = (ms, last_seq + 1)
            else:
                new = (ms, 1 if ms == 0 else 0)
        else:
            new = parse_id(id)
        if new == (0, 0):
            raise StreamIdError("the stream id must be greater than 0-0")
        if new <= self._last:
            raise StreamIdError(f"the id {format_id(*new)} is equal or smaller than the stream's "
                                f"last id {format_id(*self._last)}")
        return new

    def add(self, fields: Mapping[Any, Any] | Iterable[tuple[Any, Any]], id: StreamId = "*", *,
            maxlen: int | None = None, minid: StreamId | None = None) -> str:
        """Append an entry and return its id (XADD). O(1): one entry dirty plus metadata.

        fields: a non-empty mapping (or sequence of pairs). id: "*" (clock), "ms-*" or an
        explicit "ms-seq" greater than the last id (else StreamIdError). maxlen/minid (at
        most one) trim after adding. Every argument is checked before anything changes.
        """
        fields = dict(fields.items() if isinstance(fields, Mapping) else fields)
        if not fields:
            raise ValueError("a stream entry needs at least one field")
        if maxlen is not None or minid is not None:
            bound = self._trim_bound(maxlen, minid)
        new = self._next_id(id)
        if not self._listed:
            self._touch()
        self._t.put(id_key(*new), fields)
        self._last = new
        self._flags |= F_META
        if maxlen is not None or minid is not None:
            self._trim(bound)
        return format_id(*new)

    # -- reading ----------------------------------------------------------------------------

    def range(self, start: StreamId = "-", end: StreamId = "+", count: int | None = None) -> list:
        """[(id, fields)] with start <= id <= end, oldest first, at most count (XRANGE).
        "-"/"+" are open ends, "(id" is exclusive, "ms" covers every id of that ms."""
        self._check()
        lo, hi = range_bound(start, end=False), range_bound(end, end=True)
        return self._take(self._t.iterate(lo, hi), count)

    def rev_range(self, start: StreamId = "-", end: StreamId = "+", count: int | None = None) -> list:
        """Like range, newest first (XREVRANGE, with the bounds in range's order)."""
        self._check()
        lo, hi = range_bound(start, end=False), range_bound(end, end=True)
        return self._take(self._t.iterate(lo, hi, reverse=True), count)

    @staticmethod
    def _take(it, count) -> list:
        out = []
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int):
                raise TypeError(f"count must be an int, got {count!r}")
            if count <= 0:
                return out
        for ek, fields in it:
            out.append((key_id(ek), fields))
            if count is not None and len(out) >= count:
                break
        return out

    def __iter__(self):
        """(id, fields), oldest first. O(n), streaming from the store when large."""
        self._check()
        return ((key_id(ek), f) for ek, f in self._t.iterate())

    def __contains__(self, id) -> bool:
        return self._t.lookup(id_key(*parse_id(id))) is not MISSING

    def get(self, id: StreamId) -> dict[Any, Any] | None:
        """The fields of entry id, or None. O(1)."""
        e = self._t.lookup(id_key(*parse_id(id)))
        return None if e is MISSING else e

    @property
    def first_id(self) -> str | None:
        """Id of the oldest entry, or None. O(1) (a one-entry scan when not loaded)."""
        for ek, _ in self._t.iterate():
            return key_id(ek)
        return None

    @property
    def last_id(self) -> str | None:
        """Id of the newest entry, or None. O(1) unless the newest entry was deleted."""
        if not self._t.count:
            return None
        ek = id_key(*self._last)
        if self._t.lookup(ek) is not MISSING:
            return key_id(ek)
        for ek, _ in self._t.iterate(reverse=True):
            return key_id(ek)
        return None

    @property
    def last_generated_id(self) -> str:
        """The greatest id ever added (new ids must be greater), "0-0" for a new stream."""
        return format_id(*self._last)

    # -- removing ---------------------------------------------------------------------------

    def delete(self, *ids: StreamId | Iterable[StreamId]) -> int:
        """Delete entries by id (XDEL); returns how many existed. O(k). Every id is checked
        before any is deleted."""
        if len(ids) == 1 and not isinstance(ids[0], (str, tuple)):
            ids = tuple(ids[0])
        keys = [id_key(*parse_id(i)) for i in ids]
        if not self._listed:
            self._touch()
        n = 0
        for ek in keys:
            if self._t.remove(ek) is not MISSING:
                n += 1
        if n:
            self._flags |= F_META
        return n

    def trim(self, maxlen: int | None = None, minid: StreamId | None = None) -> int:
        """Delete the oldest entries so that at most maxlen remain, or those with an id below
        minid (XTRIM); returns how many were deleted. O(deleted)."""
        self._check()
        return self._trim(self._trim_bound(maxlen, minid))

    @staticmethod
    def _trim_bound(maxlen, minid):
        """The checked trim argument: an int (maxlen) or the key of minid."""
        if (maxlen is None) == (minid is None):
            raise ValueError("trim takes exactly one of maxlen= and minid=")
        if maxlen is not None:
            if isinstance(maxlen, bool) or not isinstance(maxlen, int):
                raise TypeError(f"maxlen must be an int, got {maxlen!r}")
            if maxlen < 0:
                raise ValueError("maxlen must be >= 0")
            return maxlen
        return id_key(*parse_id(minid))

    def _trim(self, bound) -> int:
        if isinstance(bound, int):
            doomed = [ek for ek, _ in self._take_n(self._t.count - bound)]
        else:
            doomed = [ek for ek, _ in self._t.iterate(None, bound)]
        if not doomed:
            return 0
        if not self._listed:
            self._touch()
        for ek in doomed:
            self._t.remove(ek)
        self._flags |= F_META
        return len(doomed)

    def _take_n(self, n: int) -> list:
        if n <= 0:
            return []
        out = []
        for item in self._t.iterate():
            out.append(item)
            if len(out) >= n:
                break
        return out

    def clear(self) -> None:
        """Delete every entry (groups stay; the last id is kept). O(1) now."""
        if not self._listed:
            self._touch()
        self._t.clear()
        self._flags |= F_META

    # -- save -------------------------------------------------------------------------------

    def _collect_items(self, out: list, full: bool) -> None:
        self._t.collect(out, full)
        self._collect_groups(out, full)

    def _inplace_values(self, immutable: frozenset) -> list:
        return self._t.clean_entries(immutable, False)

    @staticmethod
    def _inplace_watched(entry) -> bool:
        return True         # fields: a dict

    def _inplace_key(self, ek: bytes) -> bytes:
        return self._t.prefix + ek

    def _inplace_evicting(self, eks: list) -> set:
        vals = self._t.vals
        return keep_changed(self, [(ek, vals[ek]) for ek in eks if vals[ek] is not ABSENT])

    def _inplace_mark(self, ek: bytes) -> None:
        self._touch()
        self._t.dirty.add(ek)

    def _inplace_where(self, eks: list) -> list:
        return [(f"entry {key_id(ek)}", "undo the change and change a copy of the fields instead "
                 "(dict(fields)): stream entries are not meant to change") for ek in eks]

    def _mem_estimate(self, item_bytes: int) -> int:
        pels = sum(len(g.pel.vals) for g in (self._groups or {}).values())
        return self._handle_bytes + len(self._t.vals) * (item_bytes + ENTRY_BYTES) + pels * ENTRY_BYTES * 2

    def _evict_clean(self) -> None:
        self._t.evict(0)
        for g in (self._groups or {}).values():
            g.pel.evict(0)

    def _promote(self) -> None:
        super()._promote()
        self._t.promote()
        self._promote_groups()

    def _confirm(self) -> bool:
        super()._confirm()
        clean = self._t.confirm()
        return self._confirm_groups() and clean and not self._flags
