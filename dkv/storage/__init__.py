"""Object storage behind dkv: the ObjectStore interface, its implementations and wrappers."""
from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any, TypeAlias
from urllib.parse import urlparse

from ..errors import LocationError
from .base import ObjectStore
from .cache import CachedStore
from .local import LocalDirStore
from .memory import MemoryStore
from .wrappers import Call, FaultInjectingStore, InjectedFault, LoggingStore, PrefixStore

__all__ = [
    "ObjectStore", "LocalDirStore", "MemoryStore", "S3Store", "CachedStore", "PrefixStore",
    "LoggingStore", "FaultInjectingStore", "InjectedFault", "Call", "open_store",
]

if TYPE_CHECKING:      # at run time __getattr__ imports it when first used
    from .s3 import S3Store


def __getattr__(name: str) -> type[S3Store]:
    # S3Store (boto3's world: http.client, ssl, email) is imported when first used, so that
    # a notebook's `import objectspace` on a local folder does not pay ~20 ms for it.
    if name == "S3Store":
        from .s3 import S3Store
        return S3Store
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


S3_OPTIONS = ("endpoint_url", "region_name", "aws_access_key_id", "aws_secret_access_key",
              "aws_session_token", "max_attempts", "connect_timeout", "read_timeout", "part_bytes")
"""The options ``open_store`` passes to S3Store (and ``dkv.open`` takes as dkv options): the
one list, so that what S3Store takes can be passed from ``dkv.open`` and ``ObjectSpace.open``."""
STORE_OPTIONS = ("fsync", "cache_dir", "cache_bytes", "range_read_cost") + S3_OPTIONS
"""Every option of ``open_store`` besides ``create`` (``client``: a ready boto3 client, for tests)."""
RANGE_READ_COST = 4 << 20
"""S3's default ``range_read_cost``: a GET's first-byte latency (~20 ms) at the ~200 MB/s
that a whole object's parallel parts (``part_bytes``, 8 at once) get from S3."""
Location: TypeAlias = "str | os.PathLike[str] | ObjectStore"
"""What ``open_store`` (and ``dkv.open``) take: a path, a URL or an ObjectStore."""


def open_store(location: Location, *, create: bool = True, **options: Any) -> ObjectStore:
    """An ObjectStore for ``location``: an ObjectStore, a path, ``file://``, ``memory://name``
    or ``s3://bucket/prefix``. S3 options: ``S3_OPTIONS`` (see S3Store), ``client``, and
    cache_dir and cache_bytes (local cache of SSTs; default a temp folder, 1 GiB), and
    range_read_cost (what a ranged GET is worth in bytes: an SST is read by range until its
    reads would cost its size, then fetched whole into the cache; default ``RANGE_READ_COST``,
    0: whole at its first read).

    Opening a store writes nothing: a local folder is made by the first write. With
    ``create=False`` a ``memory://`` name not in use is not kept either (read-only opens)."""
    if isinstance(location, ObjectStore):
        return location
    if isinstance(location, os.PathLike):
        location = os.fspath(location)
    if not isinstance(location, str) or not location:
        raise TypeError(f"location must be a path, a URL or an ObjectStore, got {location!r}")
    url = urlparse(location)
    if url.scheme == "memory":
        return MemoryStore.named((url.netloc + url.path).strip("/") or "default", create=create)
    if url.scheme == "s3":
        from .s3 import S3Store
        s3_opts = {k: options[k] for k in (*S3_OPTIONS, "client") if options.get(k) is not None}
        store = S3Store(url.netloc, url.path, **s3_opts)
        cache_dir = options.get("cache_dir") or os.path.join(tempfile.gettempdir(), "dkv-cache")
        cost = options.get("range_read_cost")
        return CachedStore(store, cache_dir, options.get("cache_bytes") or (1 << 30),
                           cacheable=lambda key: key.endswith(".sst"),
                           range_read_cost=RANGE_READ_COST if cost is None else cost)
    if url.scheme == "file":
        return LocalDirStore(url.path, fsync=options.get("fsync", True))
    if url.scheme and len(url.scheme) > 1:
        raise LocationError(f"unsupported location scheme {url.scheme!r} in {location!r} "
                         "(use a path, file://, memory:// or s3://)")
    return LocalDirStore(location, fsync=options.get("fsync", True))
