"""ObjectSpace's deletes and renames (a mixin of ObjectSpace, objectspace/space.py).

A delete is O(1) at once: the handle dies and a *grave* remembers the name, whose stored keys
the next save deletes (a name created and deleted between two saves leaves none). A rename
rewrites the object's records under the new name in one write batch, with the index entry
and the counts record.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, cast

from dkv.batch import WriteBatch

from . import _counts
from ._base import F_INDEX, F_REPLACE
from ._keycodec import encode_name
from .errors import AlreadyExistsError, ObjectNotFoundError, ObjectSpaceError

if TYPE_CHECKING:
    import weakref

    import dkv

    from ._cache import ObjectCache
    from ._types import Name


class _Grave:
    """A deleted object whose stored keys the next save must delete."""

    __slots__ = ("nkey",)

    def __init__(self, nkey: bytes) -> None:
        self.nkey = nkey



class NamingMixin:
    """What deletes and renames read of ObjectSpace: ``_db``, ``_prefix``, ``_index_prefix``,
    ``_obj_prefix``, the live handles (``_live``), the objects touched and the names deleted
    since the last save (``_touched``, ``_graves``), the cache, the counts record's memo and
    the in-place setting, and ``_check_open``, ``_exists``, ``_find_inplace``."""

    if TYPE_CHECKING:
        _db: dkv.DB
        _prefix: bytes
        _index_prefix: bytes
        _obj_prefix: bytes
        _live: weakref.WeakValueDictionary
        _touched: dict
        _graves: dict
        _cache: ObjectCache
        _counts: tuple | None
        _counts_gen: int
        _inplace: str | None

        def _check_open(self) -> None: ...

        def _exists(self, nkey: bytes) -> bool: ...

        def _find_inplace(self, objs: list | None = None) -> None: ...

    def delete(self, name: Name) -> None:
        """Delete an object. O(1) now; the next save deletes its stored keys (one range scan).
        The old handle stops working. Raises ObjectNotFoundError."""
        self._check_open()
        nkey = encode_name(name)
        obj = self._live.get(nkey)
        if obj is None:
            if not self._exists(nkey):
                raise ObjectNotFoundError(f"no object named {name!r} in the space")
            self._graves[nkey] = _Grave(nkey)
            return
        flags = obj._flags | obj._pflags
        unsaved = obj._flags & F_INDEX and not obj._pflags & F_INDEX and not flags & F_REPLACE
        obj._kill()
        del self._live[nkey]
        self._touched.pop(nkey, None)
        self._cache.forget(obj)
        if not unsaved:
            self._graves[nkey] = _Grave(nkey)

    def rename(self, old: Name, new: Name) -> None:
        """Give object ``old`` the name ``new``, keeping everything it holds (kind, codec,
        items, metadata, a stream's consumer groups). Its records are rewritten under the new
        name in the store at once (durable with the next checkpoint, like any write); the old
        handle stops working, ``get(new)`` returns a new one. O(records of the object): one
        range scan. The object must have no unsaved changes (save and confirm them first:
        ObjectSpaceError; with ``inplace`` set, values changed in place count, and "raise"
        raises InPlaceChangeError for them), ``old`` must exist (ObjectNotFoundError) and
        ``new`` must not (AlreadyExistsError)."""
        self._check_open()
        okey, nkey = encode_name(old), encode_name(new)
        if okey == nkey:
            return
        if not self._exists(okey):
            raise ObjectNotFoundError(f"no object named {old!r} in the space")
        if self._exists(nkey):
            raise AlreadyExistsError(f"an object named {new!r} already exists")
        if self._inplace is not None and okey not in self._touched and self._live.get(okey) is not None:
            self._find_inplace([self._live[okey]])    # the records copied must hold them
        if okey in self._touched or nkey in self._touched or nkey in self._graves:
            raise ObjectSpaceError(f"rename({old!r}, {new!r}) needs both names without unsaved changes: save "
                                   f"and confirm them first (checkpoint(), or save() and on_saved())")
        obj = self._live.pop(okey, None)
        if obj is not None:
            obj._kill()
            self._cache.forget(obj)
        ip, op = self._index_prefix, self._obj_prefix
        batch = WriteBatch()
        batch.put(ip + nkey, cast(bytes, self._db.get(ip + okey)))     # stored: it exists, unchanged
        batch.delete(ip + okey)
        n = len(op) + len(okey)
        for key, value in self._db.scan_prefix(op + okey):
            batch.put(op + nkey + key[n:], value)
            batch.delete(key)
        objects, scopes, recorded = _counts.stored(self._db, self._prefix)
        if recorded:
            d_objects, d_scopes = _counts.change(self._db, self._prefix, [(nkey, new, True)], [okey], objects)
            if d_scopes:
                batch.put(_counts.key(self._prefix), _counts.encode(objects, scopes + d_scopes))
        self._counts, self._counts_gen = None, self._counts_gen + 1
        self._db.write(batch)
