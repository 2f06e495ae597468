"""KeyedObject: the base of set, sorted_set, dict and sorted_dict — one Table of entries
stored at ``items/<encoded key>``, metadata ``[count]``."""
from __future__ import annotations

from ._base import F_META, PersistedObject

ENTRY_BYTES = 80        # per cached entry: its encoded key and dict slot (see _cache.py)
from ._keycodec import _SHORT_STRS, decode_key, encode_key
from ._table import Table
from ._unsaved import split
from .errors import EncodingError


class KeyedObject(PersistedObject):
    sorted_kind = False
    _mutable_entries = False        # entries are keys: nothing to watch for in-place changes
    _handle_bytes = 1700
    __slots__ = ("_t",)
    _t: Table

    @classmethod
    def _fresh(cls, space, name, nkey, codec):
        self = cls.__new__(cls)     # not cls(): a kind's __init__ re-initialises
        self._init_base(space, name, nkey, codec, fresh=True)
        self._t = Table(self, self._items, 0, True, cls.sorted_kind, self._enc_entry, self._dec_entry)
        return self

    @classmethod
    def _load(cls, space, name, nkey, codec, meta):
        self = cls.__new__(cls)     # not cls(): a kind's __init__ re-initialises
        self._init_base(space, name, nkey, codec, fresh=False)
        self._t = Table(self, self._items, meta[0], False, cls.sorted_kind, self._enc_entry, self._dec_entry)
        return self

    def _meta(self) -> list:
        return [self._t.count]

    def __len__(self) -> int:
        return self._t.count

    def _dirty_count(self) -> int:
        return self._t.dirty_count() + super()._dirty_count()

    def _unsaved_parts(self) -> tuple:
        t = self._t
        written, removed = split(t)
        return written, removed, t.clr or t.pclr

    def _ek(self, key) -> bytes:
        """Encoded key; errors name the object and the key."""
        if type(key) is str:
            ek = _SHORT_STRS.get(key)
            if ek is not None:
                return ek
        try:
            return encode_key(key)
        except EncodingError as e:
            raise EncodingError(f"{self.kind} {self._name!r}: key {key!r:.80}: {e}") from None
        except ValueError as e:
            raise ValueError(f"{self.kind} {self._name!r}: key {key!r:.80}: {e}") from None

    # entries: the key for sets, (key, value) for dicts
    def _enc_entry(self, ek: bytes, entry) -> bytes:
        raise NotImplementedError

    def _dec_entry(self, ek: bytes, raw: bytes):
        raise NotImplementedError

    def _bounds(self, minimum, maximum, inclusive) -> tuple:
        """ek range [lo, hi) for sortedcontainers-style bounds (None = unbounded)."""
        lo = hi = None
        if minimum is not None:
            lo = self._ek(minimum)
            if not inclusive[0]:
                lo += b"\x00"   # keys are prefix-free: this skips exactly minimum
        if maximum is not None:
            hi = self._ek(maximum)
            if inclusive[1]:
                hi += b"\x00"
        return lo, hi

    def _clear(self) -> None:
        """O(1) now; the next save deletes the stored entries with one range scan."""
        if not self._listed:
            self._touch()
        self._t.clear()
        self._flags |= F_META

    # -- save -------------------------------------------------------------------------------

    def _mem_estimate(self, item_bytes: int) -> int:
        return self._handle_bytes + len(self._t.vals) * (item_bytes + ENTRY_BYTES)

    def _evict_clean(self) -> None:
        self._t.evict(0)

    def _inplace_evicting(self, eks: list) -> set:
        """The entries of ``eks`` the table is about to drop that must stay (see
        _inplace.keep_changed). A set's entries are its keys: none."""
        return set()

    def _collect_items(self, out: list, full: bool) -> None:
        self._t.collect(out, full)

    def _promote(self) -> None:
        super()._promote()
        self._t.promote()

    def _confirm(self) -> bool:
        super()._confirm()
        return self._t.confirm() and not self._flags


def decode_set_entry(ek: bytes, raw: bytes):
    return decode_key(ek)
