"""A shard host's heap policy: the cyclic GC kept off the requests, and the C heap's free
pages given back after each (see ``_tidy_heap``)."""
from __future__ import annotations

import gc
import sys

FULL_GC_EVERY = 200


def _tidy_heap(served: int, closed: bool = False) -> None:
    """Keep Python's cyclic GC off the requests: a host holds millions of long-lived
    objects (every key's buffered rows), a full collection walks them all (~0.3 s at 10k
    keys) in whichever batch it happens to hit, and a request allocates ~100k containers,
    enough for several collections of its own. The automatic GC is off (``serve``); after
    each request the survivors are frozen, and every FULL_GC_EVERY requests, between
    batches, one full collection reclaims the cycles that died since (a request makes
    none on the normal path; an error's traceback does), and so does one after a cached
    state was closed (``closed``: its objects were frozen with the rest, and the cycles
    among them would keep its memory until the next one)."""
    if closed or served % FULL_GC_EVERY == 0:
        gc.unfreeze()
        gc.collect()
    gc.freeze()
    _trim()


def _load_trim():
    try:
        import ctypes
        import ctypes.util
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):      # not glibc
        return None


_MALLOC_TRIM = _load_trim() if sys.platform.startswith("linux") else None


def _trim() -> None:
    """Give the C heap's free pages back to the system after a request (glibc keeps them):
    a batch's transient buffers (Arrow input, output rows, a flush's merge) would otherwise
    stay counted against the host for good."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
