"""How many objects a space holds, and in how many scopes: kept by its saves, read in O(1).

A space's **counts record**, ``P 02`` (docs/format/objectspace.md), holds msgpack
``[1, objects, scopes]``: the stored objects, and the distinct *scopes* among their names
(the scope of a tuple name of two or more parts is the name without its last part:
``("user-42", "items")`` is in scope ``("user-42",)``; a str name has none). spark_ops
names a key's objects ``key parts + (variable,)``, so its scopes are the keys with state.

A save that creates or deletes objects computes the new counts against what the store
holds before its batch (never against what memory believes, so a save whose write failed
and is made again counts right) and writes the record in the same batch. What it costs:

* an object created and saved for the first time: nothing (its lookup found no index
  entry); one point read for an object whose earlier save was not confirmed, or that
  replaces a deleted one;
* a deleted object: one point read (its deletion already scans its records);
* each scope that gained or lost an object: one range scan of its index entries, which
  stops at the first one that stays.

A store without the record (written before it existed) is counted once with a scan of the
index, and the space's next save writes it.
"""
from __future__ import annotations

import msgpack

from . import _layout as L
from ._base import F_INDEX, F_REPLACE
from ._keycodec import decode_key, encode_name_scope
from .errors import CorruptionError

RECORD_VERSION = 1


def key(prefix: bytes) -> bytes:
    return prefix + L.COUNTS


def encode(objects: int, scopes: int) -> bytes:
    return msgpack.packb([RECORD_VERSION, objects, scopes])


def decode(raw: bytes, prefix: bytes) -> tuple[int, int]:
    where = f"the space at prefix {prefix!r}"
    try:
        version, objects, scopes = msgpack.unpackb(raw)
    except Exception as e:      # noqa: BLE001 - any malformed record is corruption
        raise CorruptionError(f"the counts record of {where} is not [version, objects, scopes]: {raw!r}") from e
    if version != RECORD_VERSION or not isinstance(objects, int) or not isinstance(scopes, int) \
            or objects < 0 or scopes < 0 or scopes > objects:
        raise CorruptionError(f"the counts record of {where} is corrupt: {[version, objects, scopes]!r}")
    return objects, scopes


def after_save(db, prefix: bytes, objs: list, graves: list, out: list, known: tuple | None) -> tuple | None:
    """``(objects, scopes, True)`` after a save of the touched ``objs`` and the deletions
    ``graves`` whose records are in ``out``, with the counts record's put (or delete, when
    the space is empty) appended to ``out`` when they change or the store has no record.
    ``known``: the counts as of the last confirmed save (None: unknown); returned as they
    are when the save creates and deletes nothing."""
    created = []
    for obj in objs:
        flags = obj._flags | obj._pflags
        if flags & F_INDEX:     # never saved or unconfirmed: certain only for the first
            created.append((obj._nkey, obj._name, not (obj._pflags & F_INDEX or flags & F_REPLACE)))
    deleted = [g.nkey for g in graves]
    if not created and not deleted and (not out or (known is not None and known[2])):
        return known        # nothing to count (a store without the record gets it with a write)
    objects, scopes, recorded = stored(db, prefix)
    d_objects, d_scopes = change(db, prefix, created, deleted, objects)
    objects, scopes = objects + d_objects, scopes + d_scopes
    if not objects:             # an empty space keeps no record (none: count the index, one seek)
        if recorded:
            out.append((key(prefix), None))
    elif d_objects or d_scopes or not recorded:
        out.append((key(prefix), encode(objects, scopes)))
    return objects, scopes, True


def scope_of(name):
    """The scope of an object name: a tuple name without its last part (None: no scope)."""
    return name[:-1] if type(name) is tuple and len(name) >= 2 else None


def stored(db, prefix: bytes) -> tuple[int, int, bool]:
    """``(objects, scopes, recorded)`` of the space at ``prefix`` as the store holds it: its
    counts record (one point read), or, without one, a scan of its index (``recorded``
    False)."""
    raw = db.get(key(prefix))
    if raw is not None:
        return (*decode(raw, prefix), True)
    return (*scan(db, prefix), False)


def scan(db, prefix: bytes) -> tuple[int, int]:
    """Count the index: O(objects). Names of one scope and depth are contiguous in the
    index (encoded names are prefix-free), so one last scope per depth is enough."""
    ip = prefix + L.INDEX
    n = len(ip)
    objects = scopes = 0
    last: dict = {}
    for k, _ in db.scan_prefix(ip):
        objects += 1
        scope = scope_of(decode_key(k[n:]))
        if scope is not None and last.get(len(scope)) != scope:
            last[len(scope)] = scope
            scopes += 1
    return objects, scopes


WALK_FACTOR = 4
"""A save whose scopes to look at are at least 1/WALK_FACTOR of the space's objects reads
the whole index once instead of one range scan per scope (a space filling up: spark_ops'
first batches, where every key is new)."""


def change(db, prefix: bytes, created: list, deleted: list, objects: int) -> tuple[int, int]:
    """``(objects, scopes)`` gained by a batch that writes the index entries of ``created``
    (``(nkey, name, certain)``: ``certain`` when the store is known to lack the entry) and
    deletes those of ``deleted`` (nkeys), against the store as it is before the batch, which
    holds ``objects`` objects."""
    ip = prefix + L.INDEX
    born = [(nkey, name) for nkey, name, certain in created if certain or db.get(ip + nkey) is None]
    gone = [nkey for nkey in deleted if db.get(ip + nkey) is not None]
    if not born and not gone:
        return 0, 0
    born_scopes = {s for s in (scope_of(name) for _, name in born) if s is not None}
    affected = set(born_scopes)
    for nkey in gone:
        s = scope_of(decode_key(nkey))
        if s is not None:
            affected.add(s)
    gone_set = set(gone)
    scopes = 0
    if len(affected) * WALK_FACTOR >= objects:
        before, stays = _walk(db, ip, affected, gone_set)
        for scope in affected:
            scopes += (scope in stays or scope in born_scopes) - (scope in before)
        return len(born) - len(gone), scopes
    for scope in affected:
        before, stays = _probe(db, ip, scope, gone_set)
        scopes += (stays or scope in born_scopes) - before
    return len(born) - len(gone), scopes


def _walk(db, ip: bytes, affected: set, gone: set) -> tuple[set, set]:
    """The scopes of ``affected`` that the store holds objects of, and those that keep one
    the batch does not delete: one scan of the whole index."""
    n = len(ip)
    before, stays = set(), set()
    for k, _ in db.scan_prefix(ip):
        nkey = k[n:]
        scope = scope_of(decode_key(nkey))
        if scope in affected:
            before.add(scope)
            if nkey not in gone:
                stays.add(scope)
    return before, stays


def _probe(db, ip: bytes, scope: tuple, gone: set) -> tuple[bool, bool]:
    """Whether the store holds an object of ``scope`` (exactly: deeper names under it are
    in other scopes), and whether one that the batch does not delete."""
    n, depth = len(ip), len(scope) + 1
    before = False
    for k, _ in db.scan_prefix(ip + encode_name_scope(scope)):
        nkey = k[n:]
        if len(decode_key(nkey)) != depth:
            continue
        before = True
        if nkey not in gone:
            return True, True
    return before, False
