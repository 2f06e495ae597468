"""ObjectSpace: named persisted objects over a dkv store, saved as differential write batches.

>>> import dkv
>>> from objectspace import ObjectSpace
>>> space = ObjectSpace(dkv.open("memory://space-doc"), prefix=b"app/")
>>> a = space.create_array("foo", 8, fill=0); a[3] = 42
>>> batch = space.save()        # the host commits the batch, then confirms:
>>> space._db.write(batch); space.on_saved()
>>> space.get_array("foo")[3]
42
"""
from __future__ import annotations

import logging
import os
import sys
import time
import weakref
from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import dkv
from dkv.batch import WriteBatch
from dkv.keys import key_prefix

from . import _counts, _savepath
from . import _layout as L
from ._layout import SCHEMA_STATE
from ._base import F_REPLACE
from ._cache import ObjectCache
from ._codec import CODECS_BY_CODE, codec_named
from ._inplace import check_mode, find_changes, inplace_error
from ._keycodec import decode_key, encode_name
from ._kinds import KIND_CLASSES, KindMethods
from ._listing import ListingMixin
from ._naming import NamingMixin
from .errors import AlreadyExistsError, CorruptionError, KindMismatchError, ObjectNotFoundError, ObjectSpaceError

if TYPE_CHECKING:
    from ._base import PersistedObject
    from ._types import Name

log = logging.getLogger(__name__)

DEFAULT_PREFIX = key_prefix(0, SCHEMA_STATE)
DEFAULT_CACHE_BYTES = 256 << 20


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _without(records: list, ranges: list) -> list:
    """``records`` without the index ranges ``[start, end)`` (ascending, disjoint)."""
    out, at = [], 0
    for start, end in ranges:
        out += records[at:start]
        at = end
    return out + records[at:]


NOTEBOOK_REPLAY_BYTES = 256 << 10     # ObjectSpace.open's default max_replay_bytes (RFC 0006)
_UNREAD = object()                    # ObjectSpace._load: the metadata record is not read yet
_SHRINK_FLOOR = 4096                  # a dict of this many bytes is left as it is ...
_SHRINK_PER_ENTRY = 512               # ... or of this many per entry (~6x what it needs)
NOTEBOOK_INLINE_BYTES = 4 << 10       # ObjectSpace.open's default inline_segment_bytes (RFC 0007)

_SAVE = _savepath.native
"""The C save path (objectspace/_savepath.py: one call per save over all touched objects for
collect, promote and confirm), or None: the Python loops below, the reference. Tests flip it."""
_RELOAD = None
"""The C lookup (``objectspace._native.lookup``, set up at the end of this module), or None:
``_lookup``'s Python, the reference. Tests flip it."""


class ObjectSpace(ListingMixin, NamingMixin, KindMethods):
    """Named persisted objects under one key prefix of a dkv store.

    ``ObjectSpace(db, prefix=...)`` is O(1) and does no I/O; many spaces may share one db
    when no prefix is a prefix of another. ``cache_bytes`` is the memory budget of clean
    objects and the items they keep (estimated bytes; least recently used ones are
    dropped and reload on next use); several spaces can share one budget with
    ``cache=ObjectCache(nbytes)``. ``cache_items`` bounds the clean items one object keeps
    (and is the size up to which an object loads whole on first read); ``cache_objects``
    is how many clean objects stay in memory at most; ``clock`` returns milliseconds
    (stream ids and idle times).

    ``inplace`` is what a save does about stored values changed in place (``d[k].append(x)``
    changes the cached value, and no slot records it): None (the default here) does not
    look, so such a change is lost; ``"save"`` (``ObjectSpace.open``'s default) writes the
    values whose encoding differs from their stored record, as if assigned; ``"raise"``
    makes the save raise InPlaceChangeError naming them, before anything is written. Any
    other value is a ValueError. The cost is at every save, O(values held in memory that
    could be mutable): each is encoded once; and an eviction of such values from memory
    compares them first, so that a changed one stays (see ``_inplace.py``).

    Save protocol: ``batch = save()``; commit the batch to the same db; ``on_saved()``. A
    space is not thread-safe.
    """

    def __init__(self, db: dkv.DB, prefix: bytes = DEFAULT_PREFIX, *, cache_items: int = 4096,
                 cache_objects: int | None = 4096, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 cache: ObjectCache | None = None, clock: Callable[[], int] | None = None,
                 inplace: str | None = None) -> None:
        if not isinstance(prefix, (bytes, bytearray)):
            raise TypeError(f"prefix must be bytes, got {type(prefix).__name__}")
        if cache_items < 1 or (cache_objects is not None and cache_objects < 0):
            raise ValueError("cache_items must be >= 1 and cache_objects >= 0")
        self._inplace = check_mode(inplace)
        prefix = bytes(prefix)
        self._db = db
        self._prefix = prefix
        self._index_prefix = prefix + L.INDEX
        self._obj_prefix = prefix + L.OBJECTS
        self._cache_items = cache_items
        self._cache = cache if cache is not None else ObjectCache(cache_bytes, cache_objects)
        self._clock = clock or _now_ms
        self._live: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._touched: dict = {}        # nkey -> object with dirty or pending changes
        self._graves: dict = {}         # nkey -> _Grave
        self._last_saved: tuple = ((), (), None)
        self._counts: tuple | None = None   # (objects, scopes, recorded) as of the last confirmed save
        self._counts_gen = 0                # bumped when the store changed outside save (see _counts.py)
        self._deletions = 0
        self._sized: list = []          # (start, end) in a save's records of objects sized by their own bytes
        self._known_absent: tuple[Any, bytes] | None = None
        self._owns_db = False
        self._closed = False

    @classmethod
    def open(cls, location: str | os.PathLike[str] | dkv.ObjectStore, *, prefix: bytes = DEFAULT_PREFIX,
             checkpoint: int | None = None, cache_items: int = 4096, cache_objects: int | None = 4096,
             cache_bytes: int = DEFAULT_CACHE_BYTES, clock: Callable[[], int] | None = None,
             inplace: str | None = "save", **dkv_options: Any) -> "ObjectSpace":
        """Open a dkv store at ``location`` (owned and closed by the space) and a space on it.
        ``checkpoint=epoch`` opens the state as of that checkpoint; a writer continues from
        it, so at an older one it raises dkv.NewerCheckpointsError naming the later
        checkpoints it would drop, unless ``discard_newer=True``. ``read_only=True``
        writes nothing: a location that holds no store raises dkv.NotAStoreError (naming the
        instances at a folder of several, such as a spark_ops state root). A writer creates
        a store only in a missing or empty folder (else NotAStoreError; ``create="force"``
        makes one among other files, ``create=False`` only opens an existing one; any other
        value is a ValueError). Other ``dkv_options`` go to ``dkv.open``; ``max_replay_bytes``
        defaults to ``NOTEBOOK_REPLAY_BYTES`` here (a checkpoint of more changes writes them
        as a table, which a reopen reads lazily, rather than as WAL that a reopen loads whole:
        a notebook that saves 100,000 rows and restarts reads its first row in ~2 ms, not
        ~30 ms; RFC 0006), and ``inline_segment_bytes`` to ``NOTEBOOK_INLINE_BYTES`` (a
        small checkpoint is one file, its manifest, with two fsyncs on a local disk and
        one PUT on S3; RFC 0007; later ones name that manifest, RFC 0011). Pass
        ``inline_segment_bytes=0`` for a separate WAL file per checkpoint.
        ``inplace`` defaults to ``"save"`` here: a notebook's ``d[k].append(x)`` is written
        by the next checkpoint (see the class docstring; ValueError for a value other than
        None, "save" and "raise"). A ``read_only=True`` space never saves, so it does not
        look for such changes (its ``inplace`` is None)."""
        check_mode(inplace)
        if dkv_options.get("read_only"):
            inplace = None
        dkv_options.setdefault("max_replay_bytes", NOTEBOOK_REPLAY_BYTES)
        dkv_options.setdefault("inline_segment_bytes", NOTEBOOK_INLINE_BYTES)
        dkv_options.setdefault("bloom_strip", L.BLOOM_STRIP)
        db = dkv.open(location, checkpoint=checkpoint, **dkv_options)
        space = cls(db, prefix, cache_items=cache_items, cache_objects=cache_objects, cache_bytes=cache_bytes,
                    clock=clock, inplace=inplace)
        space._owns_db = True
        return space

    @property
    def db(self) -> dkv.DB:
        """The dkv store underneath."""
        return self._db

    @property
    def prefix(self) -> bytes:
        """The key prefix of every record of this space."""
        return self._prefix

    @property
    def inplace(self) -> str | None:
        """What a save does about stored values changed in place: None, "save" or "raise"."""
        return self._inplace

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<ObjectSpace prefix={self._prefix!r} touched={len(self._touched)}{state}>"

    def _where(self) -> str:
        """The space for messages: its store's location, and its prefix unless the default."""
        store = getattr(self._db, "store", None)
        loc = getattr(store, "location", None) or repr(self._db)
        ns = getattr(self._db, "ns", "")
        if ns:
            loc = f"{loc} instance {ns!r}"
        return loc if self._prefix == DEFAULT_PREFIX else f"{loc} (prefix {self._prefix!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise ObjectSpaceError("the object space is closed")

    # -- lookup -------------------------------------------------------------------------------

    def _remember(self, obj) -> None:
        self._cache.use(obj)

    def _lookup(self, name, kind: str | None, codec: str | None = None, nkey: bytes | None = None):
        """The object called name, checking kind and codec. O(1) when in memory, else one
        point read (the metadata, which names kind and codec), or two for a kind without
        metadata, a format-1 object or a name not stored (index entry)."""
        meta = _UNREAD
        if _RELOAD is not None:
            # The common case in C (objectspace/_savepath.py); anything else comes back as
            # (nkey or None, the metadata record if it read it) and goes on below.
            obj = _RELOAD(self, name, kind, codec, nkey)
            if type(obj) is not tuple:
                return obj
            nkey, meta = obj
        return self._find(name, kind, codec, nkey, meta)

    def _find(self, name, kind: str | None, codec: str | None, nkey: bytes | None, meta):
        """``_lookup`` in Python; ``meta``: the metadata record if read already, else _UNREAD."""
        if self._closed:
            self._check_open()
        if nkey is None:
            nkey = encode_name(name)
        obj = self._live.get(nkey)
        if obj is None:
            if nkey in self._graves:
                raise ObjectNotFoundError(f"no object named {name!r} in the space")
            if kind not in L.KINDS_WITHOUT_META:
                if meta is _UNREAD:
                    meta = self._db.get(self._obj_prefix + nkey + L.META)
                if meta is not None and meta[:1] == L.META_HEAD_BYTE:
                    found, code, meta = L.split_meta(meta, name)
                    obj = self._build(name, nkey, found, code, kind, codec, meta, False)
            if obj is None:
                raw = self._db.get(self._index_prefix + nkey)
                if raw is None:
                    raise ObjectNotFoundError(f"no object named {name!r} in the space")
                obj = self._load(name, nkey, raw, kind, codec, meta)
            self._live[nkey] = obj
        elif (kind is not None and obj.kind != kind) or (codec is not None and obj._codec.name != codec):
            self._mismatch(name, kind, obj.kind, codec, obj._codec.name)
        self._remember(obj)
        return obj

    def _load(self, name, nkey: bytes, raw: bytes, kind: str | None, codec: str | None, meta=_UNREAD):
        """The object of index entry ``raw``; ``meta``: its metadata record if read already."""
        found, codec_code, version = L.decode_index_version(raw, name)
        if found not in L.KINDS_WITHOUT_META:
            if meta is _UNREAD:
                meta = self._db.get(self._obj_prefix + nkey + L.META)
            meta = L.unpack_meta(meta, name, found, codec_code)
        return self._build(name, nkey, found, codec_code, kind, codec, meta, version < 2)

    def _build(self, name, nkey: bytes, found: str, codec_code: int, kind: str | None, codec: str | None,
               meta, old: bool):
        """The handle of a stored object of kind ``found``, checked against the kind and
        codec asked for; ``old``: a format-1 object (see PersistedObject._collect)."""
        codec_obj = CODECS_BY_CODE.get(codec_code)
        if codec_obj is None:
            raise CorruptionError(f"object {name!r} uses unknown codec code {codec_code}")
        if (kind is not None and found != kind) or (codec is not None and codec_obj.name != codec):
            self._mismatch(name, kind, found, codec, codec_obj.name)
        try:
            obj = KIND_CLASSES[found]._load(self, name, nkey, codec_obj, meta)
        except (TypeError, ValueError, IndexError, KeyError) as e:     # metadata of the wrong shape
            raise CorruptionError(f"metadata of {found} {name!r} is unreadable: {meta!r:.60} ({e})") from e
        if old and found not in L.KINDS_WITHOUT_META:
            obj._old = True
        return obj

    @staticmethod
    def _mismatch(name, want_kind, kind, want_codec, codec):
        if want_kind is not None and want_kind != kind:
            raise KindMismatchError(f"{name!r} is a {kind}, not a {want_kind}")
        raise KindMismatchError(f"{name!r} uses codec {codec!r}, not {want_codec!r}")

    def _exists(self, nkey: bytes) -> bool:
        if self._live.get(nkey) is not None:
            return True
        if nkey in self._graves:
            return False
        return self._db.get(self._index_prefix + nkey) is not None

    def _get_or_create(self, name, kind: str, codec: str, create):
        meta, nkey = _UNREAD, None
        if _RELOAD is not None:         # see _lookup
            obj = _RELOAD(self, name, kind, codec, None)
            if type(obj) is not tuple:
                return obj
            nkey, meta = obj
        if nkey is None:
            nkey = encode_name(name)
        try:
            return self._find(name, kind, codec, nkey, meta)
        except ObjectNotFoundError:
            self._known_absent = (name, nkey)    # spares create() the encoding and a point read
            try:
                return create()
            finally:
                self._known_absent = None

    def _create(self, name, kind: str, codec: str, fill, **params) -> object:
        """A new object of kind, filled by ``fill(obj)``. Raises AlreadyExistsError."""
        self._check_open()
        codec_obj = codec_named(codec)
        known = self._known_absent
        if known is not None and known[0] is name:
            nkey = known[1]
        else:
            nkey = encode_name(name)
            if self._exists(nkey):
                raise AlreadyExistsError(f"an object named {name!r} already exists")
        obj = KIND_CLASSES[kind]._fresh(self, name, nkey, codec_obj, **params)
        grave = self._graves.pop(nkey, None)
        if grave is not None:
            obj._flags |= F_REPLACE
        try:
            if fill is not None:
                fill(obj)
        except BaseException:
            self._touched.pop(nkey, None)
            if grave is not None:
                self._graves[nkey] = grave
            raise
        obj._touch()
        self._live[nkey] = obj
        self._remember(obj)
        return obj

    def get(self, name: Name) -> PersistedObject:
        """The object called name, whatever its kind. Raises ObjectNotFoundError (a KeyError)."""
        return self._lookup(name, None)

    def __contains__(self, name) -> bool:
        """O(1) in memory, else one point read."""
        self._check_open()
        return self._exists(encode_name(name))

    # -- save protocol ----------------------------------------------------------------------------

    def save(self, full: bool = False, batch: WriteBatch | None = None) -> WriteBatch:
        """Turn every dirty object's changes into puts and deletes appended to ``batch`` (a new
        WriteBatch when None) and mark them pending. O(dirty slots); ``full=True`` writes
        every object of the space, clean ones included (O(everything)).

        Every record is encoded before any is added, so an EncodingError (a TypeError naming
        object and slot) leaves the batch and the objects as they were.

        With ``inplace`` set, the clean values held in memory that could be mutable are
        encoded first and compared with the store (see ``_inplace.py``): O(those values),
        plus a read for each one first seen since the previous save. ``"save"`` marks those
        that differ written (they stay marked if the save then fails: they are changes);
        ``"raise"`` raises InPlaceChangeError (a ValueError) naming them, and nothing
        changes.
        """
        self._check_open()
        if self._inplace is not None:
            self._find_inplace()
        out: list = []
        self._sized = []
        objs = list(self._touched.values())
        # Objects touched in descending name order (a spark_ops batch meets its keys so every
        # other time) give their records in ascending order: the store sorts a batch's keys
        # as one run then, not as runs of an object's few records each. The order of the
        # objects themselves (their confirm, the cache's order) stays the touch order.
        coll = objs[::-1] if len(objs) > 1 and objs[0]._nkey > objs[-1]._nkey else objs
        native = _SAVE if not full else None
        if native is not None:
            slow = native.collect(coll, out)    # the objects it handed to their _collect: others write no index entry
        else:
            slow = coll
            for obj in coll:
                obj._collect(out, full)
        graves = list(self._graves.values())
        if graves:
            ip, op = self._index_prefix, self._obj_prefix
            for g in graves:
                out.append((ip + g.nkey, None))
                out.extend((k, None) for k, _ in self._db.scan_prefix(op + g.nkey))
        if full:
            self._collect_clean(out)
        counts = self._count(slow, graves, out)
        if batch is None:
            batch = WriteBatch()
        # The per-item cost is learned from the kinds whose items are values: an ndarray's
        # 64 KiB chunks would make every dict entry of the cache look 64 KiB large.
        self._cache.learn(out if not self._sized else _without(out, self._sized))
        batch.extend(out)
        if native is not None:
            native.promote(objs)
        else:
            for obj in objs:
                obj._promote()
        self._last_saved = (objs, graves, (self._counts_gen, counts))
        return batch

    def _count(self, objs: list, graves: list, out: list) -> tuple:
        """The space's counts after this save, with the counts record appended to ``out``
        when they change (or the store has none yet). See _counts.py."""
        return _counts.after_save(self._db, self._prefix, objs, graves, out, self._counts)

    @property
    def deletions(self) -> int:
        """Object deletions that confirmed saves wrote since this space was made (a
        deletion of an object never saved writes nothing and is not counted)."""
        return self._deletions

    def unsaved_objects(self) -> MappingProxyType:
        """The objects the next save writes something for (``PersistedObject.unsaved`` says
        what), by encoded name (``PersistedObject.encoded_name``): a read-only view that
        follows the space. Deleted objects are not in it (the save deletes them). In a space
        opened with ``inplace=``, values changed in place join it when a save finds them.
        O(1)."""
        self._check_open()
        return MappingProxyType(self._touched)

    def counts(self) -> dict:
        """``{"objects": n, "scopes": m}``: the objects the space holds, and the distinct
        scopes of their names (a tuple name without its last part: a spark_ops key), as of
        the last confirmed save (unsaved creations and deletions are not counted). O(1): the
        saves keep a counts record; a store written before that record existed is counted
        with one scan of its index, once (its next save writes the record)."""
        self._check_open()
        if self._counts is None:
            self._counts = _counts.stored(self._db, self._prefix)
        return {"objects": self._counts[0], "scopes": self._counts[1]}

    def _find_inplace(self, objs: list | None = None) -> None:
        """Mark written (or report: InPlaceChangeError) the clean values of ``objs`` (None:
        every live object) changed in place since they were stored."""
        if objs is None:
            objs = [obj for obj in (ref() for ref in list(self._live.data.values())) if obj is not None]
        changes, digests = find_changes(objs, self._db)
        if changes and self._inplace == "raise":
            raise inplace_error(changes)
        for obj, sums in digests:
            obj._isums = sums
        for obj, slot in changes:
            obj._inplace_mark(slot)

    def _collect_clean(self, out: list) -> None:
        """Full save: records of every stored object that has no changes in memory."""
        ip, touched, graves, live = self._index_prefix, self._touched, self._graves, self._live
        n = len(ip)
        for key, raw in self._db.scan_prefix(ip):
            nkey = key[n:]
            if nkey in touched or nkey in graves:
                continue
            obj = live.get(nkey)
            if obj is None:
                obj = self._load(decode_key(nkey), nkey, raw, None, None)
            obj._collect(out, True)

    def on_saved(self) -> None:
        """Confirm that the batch of the last save() was committed: its records become clean.
        Objects that are clean and unreferenced may then be dropped from memory. O(saved)."""
        objs, graves, counts = self._last_saved
        self._last_saved = ((), (), None)
        if counts is not None and counts[0] == self._counts_gen:
            self._counts = counts[1]
        if _SAVE is not None and objs:
            _SAVE.confirm(objs, self._touched, self._cache, self._cache_items, self._inplace is None)
        else:
            touched, clean = self._touched, self._cache.clean
            for obj in objs:
                if not obj._dead and obj._confirm():
                    if touched.get(obj._nkey) is obj:
                        del touched[obj._nkey]
                    obj._listed = False
                    clean(obj)
        for g in graves:
            if self._graves.get(g.nkey) is g:
                del self._graves[g.nkey]
        self._deletions += len(graves)
        objs = obj = None       # what the cache did not keep leaves _live now, before _shrink
        self._shrink()

    def _shrink(self) -> None:
        """Give back the memory of the dicts of touched and live objects once they hold a
        small part of what they grew to: a Python dict never shrinks as entries leave, and a
        host keeps hundreds of spaces whose objects pass through in turn (at a million keys
        they held ~33 MB). O(1) unless a copy is due; a copy is O(entries left)."""
        touched = self._touched
        if sys.getsizeof(touched) > _SHRINK_FLOOR + _SHRINK_PER_ENTRY * len(touched):
            self._touched = dict(touched)
        live = self._live
        if sys.getsizeof(live.data) > _SHRINK_FLOOR + _SHRINK_PER_ENTRY * len(live.data):
            self._live = weakref.WeakValueDictionary(live)

    def checkpoint(self, epoch: int | None = None, full: bool = False) -> str:
        """save + db.write + db.checkpoint(epoch).wait() + on_saved; returns the manifest name.
        ``epoch`` None takes the next number (``last_checkpoint + 1``, 1 for a new store), as
        a notebook wants. If any step fails, nothing is confirmed: the changes stay in memory,
        the next checkpoint carries them, and the error says so."""
        self._check_open()
        try:
            batch = self.save(full)
            if len(batch):
                self._db.write(batch)
            name = self._db.checkpoint(epoch).wait()
        except Exception as e:
            n = self._unsaved()
            if isinstance(e, dkv.FencedError):
                e.add_note(f"objectspace: another writer opened this store after this space did, so this "
                           f"space can checkpoint no more; its changes to {n} object(s) are lost unless made "
                           f"again through the newer one (one writer per store: close a space before "
                           f"opening the store again)")
            elif n:
                unknown = isinstance(e, dkv.DkvError) and e.outcome_unknown
                what = "the checkpoint may have been taken (its manifest stays)" if unknown else \
                    "nothing was checkpointed"
                e.add_note(f"objectspace: {what}; the changes to {n} object(s) are kept in memory and go "
                           f"with the next successful checkpoint(){' either way' if unknown else ''}")
            raise
        self.on_saved()
        return name

    @property
    def last_checkpoint(self) -> int | None:
        """The number of the newest checkpoint of this space's store (taken here, or the one
        it was opened from); None when there is none."""
        return self._db.last_checkpoint

    def _unsaved(self) -> int:
        """Objects (and deletions) with changes no on_saved() confirmed."""
        return len(self._touched) + len(self._graves)

    @property
    def dirty(self) -> bool:
        """True when some object or deletion has not been confirmed by on_saved()."""
        return bool(self._touched or self._graves)

    def refresh(self) -> None:
        """Forget every cached object because the store changed underneath (e.g. the db
        caught up to a checkpoint another process wrote). Objects load again on next use;
        handles taken before stop working. Raises ObjectSpaceError with unsaved changes."""
        self._check_open()
        if self._touched or self._graves:
            raise ObjectSpaceError("refresh() would drop unsaved changes; save and confirm them first")
        for obj in list(self._live.values()):
            obj._kill()
        self._live = weakref.WeakValueDictionary()
        self._cache.forget_space(self)
        self._counts, self._counts_gen = None, self._counts_gen + 1

    def close(self) -> None:
        """Forget the objects (their handles stop working) and close the db if the space
        opened it. Unsaved changes are lost (logged as a warning)."""
        if self._closed:
            return
        if self._touched or self._graves:
            log.warning("closing the object space of %s with unsaved changes to %d object(s) (lost: nothing after "
                        "the last checkpoint() is kept)", self._where(), self._unsaved())
        for obj in list(self._live.values()):
            obj._kill()
        self._live = weakref.WeakValueDictionary()
        self._cache.forget_space(self)
        self._touched.clear()
        self._graves.clear()
        self._closed = True
        if self._owns_db:
            self._db.close()

    def __enter__(self) -> "ObjectSpace":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        n = self._unsaved() if not self._closed else 0
        if n and exc is not None and hasattr(exc, "add_note"):
            exc.add_note(f"objectspace: leaving the with block drops the unsaved changes to {n} object(s) "
                         f"(nothing after the last checkpoint() is kept)")
        self.close()


_RELOAD = _savepath._load_reload(ObjectSpace, _UNREAD)
