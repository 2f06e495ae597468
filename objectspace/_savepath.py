"""The save path of slot sequences in C (RFC 0012 step 2): ``ObjectSpace.save`` and
``on_saved`` hand all their touched objects to one C call each (objectspace/_native.c:
``collect``, ``promote``, ``confirm``) instead of calling three Python methods per object.

The state stays where it is, in the objects' ``__slots__``; the C functions read and write
it through the offsets of the classes' member descriptors, given here once. They do what
``PersistedObject._collect`` with ``SlotSequence._collect_items``, ``SlotSequence._promote``,
``SlotSequence._confirm`` with ``on_saved``'s bookkeeping, and ``ObjectCache.clean`` do, for
the objects of the kinds registered below in their common case, and call those Python
methods for every other object, in its place in the order. So the Python methods stay the
reference and what runs without the C module or with ``OBJECTSPACE_NATIVE=0``
(tests/objectspace/test_native_save.py holds both paths to the same records and states).

A kind is registered only while its hooks are the ones the C code stands in for; a hook
changed later (a subclass is never registered; a monkeypatched method changes its type's
version tag) sends that kind's objects to Python.
"""
from __future__ import annotations

import types
import weakref

from ._base import PersistedObject
from . import _cache
from ._cache import ObjectCache
from ._codec import Codec, _native_codec
from ._list import PersistedList
from ._queue import PersistedQueue, PersistedStack, _BoundedQueue
from ._slots import NO_SLOTS, SlotSequence
from ._value import PersistedArray

# (kind, shape of its metadata list: 1 [tail], 2 [head, tail], 3 [head, tail, maxlen], the _meta it stands for)
_KINDS = ((PersistedList, 1, SlotSequence._meta), (PersistedStack, 1, SlotSequence._meta),
          (PersistedArray, 1, SlotSequence._meta), (PersistedQueue, 2, PersistedQueue._meta),
          (_BoundedQueue, 3, _BoundedQueue._meta))
_HOOKS = {"_collect": PersistedObject._collect, "_collect_items": SlotSequence._collect_items,
          "_promote": SlotSequence._promote, "_confirm": SlotSequence._confirm, "_evict": SlotSequence._evict,
          "_mem_estimate": SlotSequence._mem_estimate, "_evict_clean": SlotSequence._evict_clean}


def _fields() -> dict:
    out = {}
    for cls in (PersistedObject, SlotSequence, PersistedQueue, Codec):
        for name in cls.__dict__.get("__slots__", ()):
            if name != "__weakref__":
                out[name] = cls.__dict__[name]
    return out


_registered: list = []       # (class, metadata shape) the C save path handles


def _load():
    native = _native_codec
    if native is None or not hasattr(native, "save_setup"):
        return None
    kinds = [(cls, shape) for cls, shape, meta in _KINDS
             if cls.__dictoffset__ == 0 and cls._meta is meta and cls.has_meta
             and all(getattr(cls, name) is f for name, f in _HOOKS.items())]
    native.save_setup(_fields(), kinds, ObjectCache, Codec, native.encode, NO_SLOTS)
    _registered.extend(kinds)
    _cache._EVICT = getattr(native, "evict", None)      # ObjectCache._evict's C twin (RFC 0012 step 3; an older build has none)
    if hasattr(native, "walk_setup"):       # _iter_slots' walks of items from the store (step 4)
        from . import _layout, _slots
        native.walk_setup(_slots.__dict__, _layout, _layout.slot_key, _layout.slot_of, _slots._pair)
        _slots._WALK = native.walk
    return native


native = _load()
"""objectspace._native with the save path set up, or None (no C module, or OBJECTSPACE_NATIVE=0)."""


def _load_reload(space_type: type, unread: object):
    """The reload of a handle in C (RFC 0012 step 3): ``ObjectSpace._lookup`` for names that
    encode in C and objects in memory or of the kinds registered above with format-2
    metadata (``_native.lookup``; anything else is handed back to the Python lookup with what
    was read). Set up with the classes it builds, the space's class (its lookup hooks are
    checked as the kinds' are: ``space_type``, given by objectspace/space.py with its
    ``unread`` sentinel) and the weak map's classes; None without the save path, or when the
    weak map is not the one the C code reads and writes (``_weakmap_fits`` here; the C
    checks of KeyedRef's layout and a probe of a fresh map in ``reload_setup``)."""
    if native is None or not hasattr(native, "reload_setup"):
        return None
    from . import _layout as L
    from ._codec import CODECS_BY_CODE
    from ._kinds import KIND_CLASSES
    registered = {cls for cls, _ in _registered}
    kinds = []
    for cls, bounded in ((PersistedList, None), (PersistedStack, None), (PersistedArray, None),
                         (PersistedQueue, _BoundedQueue)):
        if cls in registered and (bounded is None or bounded in registered) and KIND_CLASSES.get(cls.kind) is cls:
            kinds.append((L.KIND_CODES[cls.kind], cls.kind, cls, bounded))
    wvd, keyed_ref = weakref.WeakValueDictionary, weakref.KeyedRef
    if not _weakmap_fits(wvd, keyed_ref):
        return None
    # False: the C checks of KeyedRef's layout, or its probe of a map, failed (see _native.c)
    if not native.reload_setup(space_type, KIND_CLASSES, CODECS_BY_CODE, kinds, wvd, keyed_ref, unread):
        return None
    return native.lookup


def _weakmap_fits(wvd: type, keyed_ref: type) -> bool:
    """Whether a fresh ``wvd()`` is the WeakValueDictionary the C lookup reads and writes
    without its methods (the same in CPython 3.10 to 3.13, Lib/weakref.py): its entries in a
    dict ``data`` of KeyedRefs, removals deferred while iterating in a list
    ``_pending_removals`` (``get`` and ``__setitem__`` commit them first; C hands over
    unless it is empty), ``_remove`` the callable each KeyedRef is made with, and KeyedRef a
    ``weakref.ref`` with one ``__slots__`` member, ``key``. Anything else: the Python lookup."""
    try:
        m = wvd()
        attrs = vars(m)
    except Exception:  # noqa: BLE001 - any failure means "not the map C knows"
        return False
    return (type(attrs.get("data")) is dict and not attrs["data"]
            and type(attrs.get("_pending_removals")) is list and not attrs["_pending_removals"]
            and callable(attrs.get("_remove"))
            and keyed_ref.__bases__ == (weakref.ref,)
            and keyed_ref.__dict__.get("__slots__") in (("key",), "key")
            and isinstance(keyed_ref.__dict__.get("key"), types.MemberDescriptorType))
