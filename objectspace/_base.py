"""PersistedObject: what every kind shares — identity, dirty/pending flags, the save hooks.

The save protocol keeps three states per slot (after the reference design): *dirty*
(changed since the last save), *pending* (carried by a save whose commit is not yet
confirmed) and clean. ``save`` collects dirty and pending records, then moves dirty into
pending (``_promote``); ``on_saved`` clears pending (``_confirm``). A failed commit is
never confirmed, so the next save carries its records again.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast

from . import _layout as L
from ._cache import OBJECT_BYTES
from ._keycodec import decode_key
from ._unsaved import Unsaved
from .errors import EncodingError, ObjectDeletedError

if TYPE_CHECKING:
    from ._types import Name
    from .space import ObjectSpace

log = logging.getLogger(__name__)


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


MISSING = _Sentinel("MISSING")   # not known in memory
ABSENT = _Sentinel("ABSENT")     # known not to exist (a deletion, or a cached miss)

F_INDEX = 1      # the index entry must be written
F_META = 2       # the metadata record must be written
F_REPLACE = 4    # a previous object of this name may have left keys: delete the stale ones
F_VALUE = 8      # value kind: the value slot must be written


_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes, frozenset})


def plain(value):
    """``value`` sharing nothing with stored state: lists, dicts, sets and tuples copied
    (recursively), persisted objects made plain copies (their ``copy()``), anything else
    as it is (immutable: numbers, strings, datetimes, Decimals, ...)."""
    t = type(value)
    if t in _ATOMS:
        return value
    if t is list:
        return [plain(v) for v in value]
    if t is dict:
        return {k: plain(v) for k, v in value.items()}
    if t is tuple:
        return tuple([plain(v) for v in value])
    if t is set:
        return set(value)           # its elements are hashable, so immutable as a rule
    if isinstance(value, PersistedObject):
        return value.copy()
    if t is bytearray:
        return bytearray(value)
    return value


class PersistedObject:
    """Base of every persisted kind. Get instances from an ObjectSpace, never construct them."""

    kind = "object"
    has_meta = True
    # What a loaded handle holds besides its items: the object, its name and keys, its empty
    # containers, the space's and the cache's entries for it. Each kind sets its own, measured
    # with tracemalloc (tests/objectspace/test_cache.py holds them to it).
    _handle_bytes = OBJECT_BYTES
    __slots__ = ("_space", "_pname", "_nkey", "_items", "_codec", "_flags", "_pflags",
                 "_listed", "_dead", "_msaved", "_mlast", "_mhead", "_old", "_isums", "__weakref__")

    def _init_base(self, space, name, nkey: bytes, codec, fresh: bool) -> None:
        self._space = space
        self._pname = name      # None: decoded from _nkey when asked (see _name)
        self._nkey = nkey
        self._items = space._obj_prefix + nkey + L.ITEMS
        self._codec = codec
        self._flags = (F_INDEX | F_META) if fresh else 0
        self._pflags = 0
        self._listed = False
        self._dead = False
        self._msaved = None     # packed metadata known to be committed (None: unknown)
        self._mlast = None      # packed metadata of the last collect
        self._mhead = L.meta_head(self.kind, codec.code)
        self._old = False       # loaded from a format-1 index entry (see _collect)
        self._isums = None      # inplace spaces: slot -> digest of its stored encoding (see _inplace.py)

    @property
    def _name(self) -> Name:
        """The name, as given, or decoded from its key (``_nkey``) for the handles that keep
        none: lists, queues, stacks and arrays loaded from the store, whose name is read only
        for messages and ``name``, while at 1,000,000 keys it would be ~110 bytes of a ~800-byte
        handle (a Spark operator's names are tuples of the key and the object's name)."""
        n = self._pname
        return decode_key(self._nkey) if n is None else n

    @property
    def _ns(self) -> bytes:
        """The prefix of every key of the object: the space's object prefix and the name's
        key. Derived from ``_items`` (the same with ``ITEMS`` after it), not kept: at 1,000,000
        keys a handle's every byte counts (RFC 0012, *A smaller handle*)."""
        return self._items[:-1]

    # -- identity ---------------------------------------------------------------------------

    @property
    def name(self) -> Name:
        """The object's name in its space."""
        return self._name

    @property
    def encoded_name(self) -> bytes:
        """The name as the space stores it (``objectspace.encode_name(name)``), the key of
        ``ObjectSpace.unsaved_objects()``. O(1)."""
        return self._nkey

    @property
    def space(self) -> ObjectSpace:
        """The ObjectSpace holding this object."""
        return self._space

    @property
    def codec(self) -> str:
        """Name of the element codec ("msgpack" or "raw")."""
        return self._codec.name

    def __repr__(self) -> str:
        state = " deleted" if self._dead else ""
        try:
            n = self._repr_len()
        except Exception:  # noqa: BLE001 - repr must not fail
            n = "?"
        return (f"<{type(self).__name__} {self._name!r} kind={self.kind} len={n} "
                f"dirty={self._dirty_count()}{state}>")

    def _repr_len(self):
        return len(self)

    _REPR_ITEMS = 10

    def _repr_html_(self) -> str:
        """Notebook rendering: kind, name, codec, length, dirty slots and the first items
        (read through the object, unsaved changes included). Never raises."""
        import html
        from itertools import islice
        esc = html.escape
        try:
            n = self._repr_len()
        except Exception:  # noqa: BLE001 - rendering must not fail
            n = "?"
        dirty = self._dirty_count()
        state = ("deleted" if self._dead else f"{dirty} unsaved record{'s' if dirty != 1 else ''}" if dirty
                 else "saved")
        head = (f"<b>{esc(type(self).__name__)}</b> <code>{esc(repr(self._name))}</code> "
                f"&middot; {esc(self.kind)} &middot; {esc(self._codec.name)} &middot; length {n} &middot; {state}")
        if self._dead:
            return f"<div>{head}</div>"
        try:
            from ._live import live_slots
            shown = list(islice(live_slots(self), self._REPR_ITEMS))
        except Exception as e:  # noqa: BLE001
            return f"<div>{head}<br><i>items unavailable: {esc(str(e))}</i></div>"

        def cell(v) -> str:
            text = repr(v)
            return esc(text if len(text) <= 80 else text[:79] + "…")
        if self.kind in ("set", "sorted_set"):
            cols, rows = "<th>element</th>", "".join(f"<tr><td>{cell(s)}</td></tr>" for s, _ in shown)
        elif self.kind == "value":
            cols, rows = "<th>value</th>", "".join(f"<tr><td>{cell(v)}</td></tr>" for _, v in shown)
        else:
            cols = "<th>slot</th><th>value</th>"
            rows = "".join(f"<tr><td>{cell(s)}</td><td>{cell(v)}</td></tr>" for s, v in shown)
        more = ""
        if isinstance(n, int) and n > len(shown):
            more = f"<div>… {n - len(shown)} more</div>"
        table = f"<table><thead><tr>{cols}</tr></thead><tbody>{rows}</tbody></table>" if shown else ""
        return f"<div class=\"objectspace\">{head}{table}{more}</div>"

    def __reduce__(self):
        raise TypeError(f"{type(self).__name__} is a handle on stored state: it cannot be pickled or copied "
                        f"with the copy module; .copy() gives a plain {self._twin_name}")

    _twin_name = "list"

    def copy(self) -> Any:
        """A plain copy of what the object holds, in iteration order: the builtin twin of
        the kind (list, deque, set or dict; a value's copy is its value), sharing nothing
        with the object — lists, dicts, sets and tuples inside are copied and persisted
        objects inside become plain copies too. So it can be changed, pickled or given to
        ``json.dumps`` (which takes lists and dicts, not deques, sets or tuples as such).
        O(n): loads every item."""
        self._check()
        return list(map(plain, cast("Iterable[Any]", self)))     # the kinds that keep this copy iterate

    def exists(self) -> bool:
        """True while the object is in its space: created (saved yet or not) or loaded from
        the store, and not deleted. False once ``space.delete`` deleted it (a new object
        of the same name is another handle), and once the handle stopped working for
        another reason (its space was refreshed or closed: get the object again). An
        empty collection exists. O(1), no I/O. A value also needs a value that is not
        None (see ``PersistedValue.exists``)."""
        return not self._dead

    @property
    def valid(self) -> bool:
        """True while the handle works: False once the object was deleted, or its space was
        refreshed or closed (get the object again). Unlike ``exists()``, a value that holds
        None is valid. O(1), no I/O."""
        return not self._dead

    # -- what a save will write (public: see _unsaved.py) ------------------------------------

    def unsaved(self) -> Unsaved | None:
        """What the next save of the space writes for this object (an ``objectspace.Unsaved``:
        the entries or positions written and removed), or None when it writes nothing for
        it. Changes that a save wrote and no checkpoint has confirmed yet count: every save
        writes them again until one is confirmed. O(changes); no I/O. ObjectDeletedError
        once the object was deleted (the save then deletes all of it)."""
        if self._dead:
            self._raise_dead()
        if not self._listed:
            return None
        written, removed, cleared = self._unsaved_parts()
        return Unsaved(self.kind, tuple(written), tuple(removed), cleared)

    def _unsaved_parts(self) -> tuple:
        """(written, removed, cleared) for ``unsaved``; the object as a whole by default."""
        return (), (), False

    # -- dirtiness --------------------------------------------------------------------------

    def _touch(self) -> None:
        """Put this object on the space's list of objects to save. O(1)."""
        if self._dead:
            self._raise_dead()
        if not self._listed:
            self._space._touched[self._nkey] = self
            self._listed = True

    def _raise_dead(self):
        raise ObjectDeletedError(f"{self.kind} {self._name!r} was deleted from its space "
                                 "(or the space was closed); get it again")

    def _check(self) -> None:
        if self._dead:
            self._raise_dead()

    def _encode(self, value, slot) -> bytes:
        """Encode one value; failures name the object and slot. O(size of value)."""
        try:
            return self._codec.encode(value)
        except EncodingError:
            raise
        except (TypeError, ValueError, OverflowError) as e:
            raise EncodingError(f"cannot save {self.kind} {self._name!r} slot {slot!r}: {e}") from e

    def _dirty_count(self) -> int:
        """Number of records the next differential save would write for this object."""
        return bin(self._flags | self._pflags).count("1")

    # -- save hooks (overridden per kind) ---------------------------------------------------

    def _collect(self, out: list, full: bool) -> None:
        """Append (key, bytes-or-None) records to ``out``. Pure: changes no state."""
        flags = self._flags | self._pflags
        replace_at = len(out)
        if full or flags & F_INDEX:
            out.append((self._space._index_prefix + self._nkey, L.encode_index(self.kind, self._codec.code)))
        if self.has_meta and (full or flags & F_META):
            # Metadata that returned to its committed value is not written again (a set
            # whose element was removed and re-added), unless a save is unconfirmed.
            packed = self._mlast = self._mhead + L.pack_meta(self._meta())
            if full or packed != self._msaved or self._pflags & F_META:
                if self._old and self._msaved is None and not (full or flags & F_INDEX):
                    # Format-1 object: metadata with its head moves it to format 2, and
                    # the index entry says so (a format-1 reader then refuses it); once
                    # committed (_msaved set), that is done.
                    out.append((self._space._index_prefix + self._nkey, L.encode_index(self.kind, self._codec.code)))
                out.append((self._ns + L.META, packed))
        self._collect_items(out, full)
        if flags & F_REPLACE:
            self._collect_stale(out, replace_at)

    def _collect_stale(self, out: list, at: int) -> None:
        """Deletes for keys of a previous object of this name that this one does not write.
        O(stored keys of the namespace); inserted before this object's puts."""
        seen = {k for k, _ in out[at:]}
        stale = [(k, None) for k, _ in self._space._db.scan_prefix(self._ns) if k not in seen]
        out[at:at] = stale

    def _collect_items(self, out: list, full: bool) -> None:
        raise NotImplementedError

    def _meta(self) -> list:
        raise NotImplementedError

    def _promote(self) -> None:
        """After the save's records are in the batch: dirty becomes pending."""
        self._pflags |= self._flags
        self._flags = 0

    def _confirm(self) -> bool:
        """After the host's commit: pending becomes clean. Returns True when fully clean."""
        if self._pflags & F_META:
            self._msaved = self._mlast
        self._pflags = 0
        return not self._flags

    # -- in-place changes (see _inplace.py; only spaces with ``inplace`` set call these) ------

    def _inplace_values(self, immutable: frozenset) -> list:
        """``(slot, value)`` of the values held in memory whose slot is clean (neither dirty
        nor pending) and whose type is not in ``immutable``: what could have changed in place
        since it was stored. O(cached items); no I/O. Kinds whose items are immutable (sets:
        keys; ndarrays: numbers) have none."""
        return []

    def _inplace_key(self, slot) -> bytes:
        """The store key of the record of ``slot``."""
        raise NotImplementedError

    def _inplace_mark(self, slot) -> None:
        """Mark ``slot`` written, as an assignment of its value would. O(1)."""
        raise NotImplementedError

    def _inplace_where(self, slots: list) -> list:
        """``(slot as the user names it, how to write it)`` of each of ``slots``, for messages."""
        raise NotImplementedError

    # -- memory (see _cache.py) ---------------------------------------------------------------

    def _mem_estimate(self, item_bytes: int) -> int:
        """Estimated bytes this object holds in memory (handle and cached items). O(1)."""
        return self._handle_bytes

    def _evict_clean(self) -> None:
        """Forget cached items that are saved (they reload from the store). O(cached)."""

    def _kill(self) -> None:
        """The object was deleted from the space: the handle stops working."""
        self._dead = True
        self._listed = False
