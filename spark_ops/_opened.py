"""The shard states a process keeps open between batches (a shard host, or a worker that
runs its shards itself), keyed by (state location, shard, shards): kept after a batch,
taken by the next, and closed when their query seems to have stopped."""
from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger(__name__)

_SHARDS: dict = {}
_LOCK = threading.Lock()
_closed = 0

STALE_SECONDS = 60.0
"""A kept shard state that is not the one used last is closed once idle this long and
four times the interval between its last two batches (see ``evict_idle``)."""


def take(key: tuple):
    """The state kept under ``key``, no longer kept (None if there is none)."""
    with _LOCK:
        return _SHARDS.pop(key, None)


def keep(key: tuple, st) -> None:
    """Keep ``st`` open after a batch, noting when it ran and the interval since its last."""
    now = time.monotonic()
    if st.last_used:
        st.interval = now - st.last_used
    st.last_used = now
    with _LOCK:
        _SHARDS[key] = st


def close(st) -> None:
    """Close a shard state, kept or not, and count it (``closed_count``)."""
    global _closed
    _closed += 1
    st.close()


def closed_count() -> int:
    """How many shard states this process has closed: a shard host collects its heap's
    cycles after a request or an idle check that closed one (spark_ops/_host_heap.py)."""
    return _closed


def drop_cached(state_location: str | None = None) -> None:
    """Close kept shard states (all, or those of one state root)."""
    with _LOCK:
        keys = [k for k in _SHARDS if state_location is None or k[0] == state_location]
        items = [_SHARDS.pop(k) for k in keys]
    for st in items:
        close(st)


def evict_idle(seconds: float, now: float | None = None) -> int:
    """Close kept shard states not used for ``seconds``, and those whose query seems to
    have stopped: while a process holds several, each but the one used last is closed once
    idle for STALE_SECONDS and for four times the interval between its last two batches.
    A query that stops (a notebook's run replaced by the next, a benchmark's rounds) leaves
    its states open in the shard hosts, each up to its memory budget: after a minute they
    go, instead of after ``seconds`` (the host's idle time, 600 by default). A query whose
    batches come every few minutes keeps its state between them. Returns how many closed."""
    now = time.monotonic() if now is None else now
    with _LOCK:
        last = max(_SHARDS, key=lambda k: _SHARDS[k].last_used, default=None)
        keys = [k for k, st in _SHARDS.items()
                if now - st.last_used > seconds
                or (k != last and now - st.last_used > max(STALE_SECONDS, 4 * st.interval))]
        items = [(k, _SHARDS.pop(k)) for k in keys]
    for (state, shard, _), st in items:
        log.info("closed shard %d of %s: idle for %.0f s", shard, state, now - st.last_used)
        close(st)
    return len(items)
