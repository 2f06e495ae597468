"""ObjectSpace's listing: its names, its catalog, and the key ranges that hold a scope of
them (a mixin of ObjectSpace, objectspace/space.py).

A listing is a range scan of the space's index (one entry per stored object, in encoded name
order) merged with the objects created since the last commit and without those deleted
since, so it answers for the space as the program sees it, not only as it was saved.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from . import _layout as L
from ._base import F_INDEX
from ._keycodec import decode_key, encode_name_scope

if TYPE_CHECKING:
    import weakref

    import dkv

    from ._types import Name


class ListingMixin:
    """What listing reads of ObjectSpace: ``_db``, ``_index_prefix`` and ``_obj_prefix``, the
    live handles (``_live``), the objects touched since the last save (``_touched``), the
    names deleted since (``_graves``), and ``_check_open``."""

    if TYPE_CHECKING:
        _db: dkv.DB
        _index_prefix: bytes
        _obj_prefix: bytes
        _live: weakref.WeakValueDictionary
        _touched: dict
        _graves: dict

        def _check_open(self) -> None: ...

    def __iter__(self):
        """Names in encoded order (str names before tuple names): a merged range scan of the
        index and the objects not yet committed. O(n)."""
        return self._iter_names(None)

    def names(self, prefix: Name | None = None) -> list:
        """Names in the space, or in a scope: ``prefix=("user-42",)`` lists tuple names that
        start with that part, ``prefix="tmp-"`` str names that start with it. A range scan."""
        return list(self._iter_names(prefix))

    def __len__(self) -> int:
        """Number of objects. O(n): counts with a scan of the index."""
        return sum(1 for _ in self._iter_names(None))

    def catalog(self, prefix: Name | None = None) -> Iterator[tuple[Any, str]]:
        """``(name, kind)`` of every object (or of a scope, as ``names(prefix=...)``) in name
        order: one range scan of the index and no other read. O(n)."""
        live = self._live
        for nkey, raw in self._iter_index(prefix):
            name, obj = decode_key(nkey), live.get(nkey)
            yield name, (obj.kind if obj is not None else L.decode_index(raw, name)[0])

    def key_ranges(self, scopes: Iterable[Name], *, index: bool = True) -> list[tuple[bytes, bytes | None]]:
        """The store's key ranges (``(lo, hi)``, ``hi`` None for no end) that hold the objects
        in ``scopes``: each a scope as ``names(prefix=...)`` takes it, a tuple of a name's
        first parts (a whole tuple name is a scope of itself) or a str prefix. ``index``:
        their index entries too, which loading reads for a ``value`` (a kind without
        metadata) and for a name not stored."""
        out = []
        for scope in scopes:
            if type(scope) not in (str, tuple):
                raise TypeError(f"a scope is a str (a name's start) or a tuple (a name's first parts), "
                                f"got {scope!r:.80}")
            nscope = encode_name_scope(scope)
            for head in (self._obj_prefix, self._index_prefix) if index else (self._obj_prefix,):
                lo = head + nscope
                out.append((lo, L.prefix_end(lo)))
        return out

    def prefetch(self, scopes: Iterable[Name], *, index: bool = True) -> dict:
        """Read ahead, at once, what loading the objects in ``scopes`` will read
        (``key_ranges``): for a space just opened on S3, before it reads many objects whose
        names are known, so that their round trips overlap instead of coming one after
        another (``DB.prefetch``, whose account it returns). Objects read the same either way."""
        self._check_open()
        return self._db.prefetch(self.key_ranges(scopes, index=index))

    def _iter_names(self, prefix):
        return (decode_key(nkey) for nkey, _ in self._iter_index(prefix))

    def _iter_index(self, prefix):
        """``(nkey, index entry)`` of the stored objects merged with those not yet committed
        (entry None), without the deleted ones, in encoded order."""
        self._check_open()
        scope = encode_name_scope(prefix) if prefix is not None else b""
        ip = self._index_prefix
        new = sorted(nkey for nkey, obj in self._touched.items()
                     if (obj._flags | obj._pflags) & F_INDEX and nkey.startswith(scope))
        n, i, graves = len(ip), 0, self._graves
        for key, raw in self._db.scan_prefix(ip + scope):
            nkey = key[n:]
            while i < len(new) and new[i] < nkey:
                yield new[i], None
                i += 1
            if i < len(new) and new[i] == nkey:
                i += 1
            if nkey not in graves:
                yield nkey, raw
        for nkey in new[i:]:
            yield nkey, None
