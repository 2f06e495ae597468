"""dkv: an embedded LSM key-value store on a local folder or S3 with cheap checkpoints.

>>> import dkv
>>> with dkv.open("memory://doc") as db:
...     db.put(b"k", b"v")
...     cp = db.checkpoint(1); _ = cp.wait()
...     db.get(b"k")
b'v'
"""
from __future__ import annotations

import warnings
from typing import Any as _Any

__version__ = "0.4.0"
"""The version of dkv, objectspace and spark_ops (one distribution); pyproject.toml reads it
here. The formats on disk have versions of their own: docs/versions.md."""

from ._admin import collect_garbage, instances, list_checkpoints, retire, verify
from ._checkpoint import Checkpoint
from ._db import DB
from ._reads import prefix_end
from ._locate import check_create as _check_create
from ._options import Options
from ._timeline import CheckpointInfo
from .batch import WriteBatch
from .format import native_enabled
from .errors import (CheckpointNotFoundError, ClosedError, CorruptionError, DkvError, FencedError,
                     LocationError, NewerCheckpointsError, NotAStoreError, ObjectMissingError, ReadOnlyError,
                     StorageError)
from .keys import key_group_of, key_prefix
from .storage import Location as _Location
from .storage import STORE_OPTIONS, ObjectStore, open_store

__all__ = [
    "open", "DB", "WriteBatch", "Checkpoint", "CheckpointInfo", "Options", "ObjectStore", "open_store",
    "STORE_OPTIONS",
    "DkvError", "CorruptionError", "FencedError", "ClosedError", "ReadOnlyError", "StorageError",
    "CheckpointNotFoundError", "ObjectMissingError", "NotAStoreError", "NewerCheckpointsError", "LocationError",
    "instances", "list_checkpoints", "retire", "collect_garbage", "verify",
    "key_prefix", "key_group_of", "prefix_end", "native_enabled",
]


def open(location: _Location, checkpoint: int | None = None, *, read_only: bool = False, instance: str = "",
         sources: list | None = None, key_group_range: tuple | range | None = None, create: bool | str = True,
         discard_newer: bool = False, key_groups: tuple | None = None, **options: _Any) -> DB:  # noqa: A001
    """Open (or create) a dkv store.

    location: a folder path, ``file://…``, ``memory://name``, ``s3://bucket/prefix`` or an
        ObjectStore. checkpoint: open the state exactly as of that checkpoint epoch (the
        latest when None). A writer opened at an older checkpoint continues from it, which
        drops the later checkpoints: it raises NewerCheckpointsError (naming them) unless
        ``discard_newer=True`` says to roll back. read_only: inspect without claiming the store
        (safe while a writer goes on); it creates nothing, and a location (or instance)
        that holds no store raises NotAStoreError. instance: a named instance within the
        location (several share one root, e.g. one per shard); an instance can be opened
        from any folder above or at it (its files are found where its writer put them).
        sources: ``[(instance, epoch), ...]`` to start this instance from others'
        checkpoints (rescale), restricted to ``key_group_range``; their files are shared,
        not copied. key_group_range: the key groups ``(first, end)`` (or a ``range``) this
        instance owns, all of them by default (``key_groups=``, its name before 0.4, is
        still taken, with a DeprecationWarning: spark_ops' ``key_groups`` is a count).
    create: what a writer may do where there is no store yet. True (default): create one
        in a missing or empty folder (an S3 prefix with no objects; a folder holding only
        other dkv instances counts as empty), and raise NotAStoreError in a folder of
        other files; False: raise unless a store is there; "force": create one even among
        other files. Ignored when read_only; any other value (1, "yes") is a ValueError.
    options: see ``dkv.Options`` (memtable_bytes, block_cache_bytes, retain, ...).
    """
    if key_groups is not None:
        if key_group_range is not None:
            raise TypeError("pass key_group_range only (key_groups is its old name)")
        warnings.warn("dkv.open(key_groups=) is now key_group_range= (a (first, end) range of key groups)",
                      DeprecationWarning, stacklevel=2)
        key_group_range = key_groups
    _check_create(create)           # before open_store, which may make the folder
    opts = Options.from_kwargs(options)
    store = open_store(location, create=not read_only and create is not False, **opts.store_options())
    owned = store is not location       # made here from a path or URL: closed with the DB
    try:
        db = DB(store, ns=instance, checkpoint=checkpoint, read_only=read_only, sources=sources,
                key_group_range=key_group_range, options=opts, create=create, discard_newer=discard_newer)
    except BaseException:
        if owned:
            store.close()
        raise
    db._owns_store = owned
    return db
