"""DB.prefetch: the blocks that reads of some key ranges will need, read ahead at once.

A store reopened on S3 (a restart, a new machine) holds nothing locally: each table's
first read fetches its tail (bloom filter and index), and each block a read needs is a
round trip, one after another as the reads come. A caller that knows which keys it will
read (a batch's keys, before the batch) names their ranges here, and the round trips
overlap instead: the tails of every table the ranges touch, in parallel; then, per table,
the runs of blocks the ranges cover, which the store reads concurrently by range or, where
that would cost more than the table (``CachedStore``'s rent-or-buy rule), fetches whole
into its local folder. Ranged blocks go into the block cache, as reads would put them, up to
half of its budget a prefetch (in the cache's cost: decoded bytes); what finds no room is
left to the reads. A storage error leaves a table to the reads, which retry it.

It changes what is in memory, never what a read returns: a block's bytes are checked as a
read checks them (a corrupt one raises), and a table the reads never reach costs its tail.
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor

from .batch import check_key
from .errors import ObjectMissingError, StorageError

log = logging.getLogger(__name__)

PARALLEL = 4
"""Tables read at once. Each table's ranges are read concurrently by the store too (S3: 8
at a time), so at most 32 requests are in flight: the S3 client's connection pool."""


def ranges_of(ranges) -> list[tuple[bytes, bytes | None]]:
    """``ranges`` (``(lo, hi)`` pairs of keys; ``hi`` None: no end) checked, sorted and
    merged where they overlap or touch."""
    out: list = []
    pairs = []
    what = "prefetch takes an iterable of (lo, hi) pairs of bytes keys (hi None: no end)"
    if isinstance(ranges, (bytes, str)) or not hasattr(ranges, "__iter__"):
        raise TypeError(f"{what}, got {ranges!r:.80}")
    try:
        for pair in ranges:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise TypeError(f"got {pair!r:.80}")
            lo, hi = pair
            if type(lo) is not bytes or not lo:
                lo = check_key(lo)
            if hi is not None and (type(hi) is not bytes or not hi):
                hi = check_key(hi)
            pairs.append((lo, hi))
    except (TypeError, ValueError) as e:
        raise type(e)(f"{what}: {e}") from None
    for lo, hi in sorted(pairs, key=lambda p: p[0]):
        if hi is not None and hi <= lo:
            raise ValueError(f"prefetch range ({lo!r}, {hi!r}) is empty: its end is not after its start")
        if out and (out[-1][1] is None or lo <= out[-1][1]):
            if out[-1][1] is not None and (hi is None or hi > out[-1][1]):
                out[-1] = (out[-1][0], hi)
            continue
        out.append((lo, hi))
    return out


def _touching(table, ranges: list, los: list) -> list:
    """The ranges that overlap the table's keys (the ranges are sorted and disjoint)."""
    end = bisect_right(los, table.max_key)
    start = end
    while start > 0 and (ranges[start - 1][1] is None or ranges[start - 1][1] > table.min_key):
        start -= 1
    return ranges[start:end]


class _Room:
    """A prefetch's share of the block cache, in the cache's own cost (decoded bytes)."""

    def __init__(self, budget: int) -> None:
        self.left = budget
        self.full = False
        self._lock = threading.Lock()

    def take(self, cost: int) -> bool:
        with self._lock:
            if cost > self.left:
                self.full = True
                return False
            self.left -= cost
            return True


def prefetch(version, cache, ranges) -> dict:
    """Read ahead what reads of ``ranges`` will need from the tables of ``version``
    (see the module's docstring). Returns what it did: ``tables`` it looked at, ranged
    ``requests`` and the cache cost of the blocks they kept (``cached_bytes``),
    ``local_tables`` whose reads are local (held, or fetched whole now), ``left_tables``
    left to the reads (gone meanwhile, or a storage error: logged), and ``cache_full``
    when blocks were read that the half of the cache a prefetch may fill had no room for."""
    ranges = ranges_of(ranges)
    stats = {"tables": 0, "requests": 0, "cached_bytes": 0, "local_tables": 0, "left_tables": 0,
             "cache_full": False}
    los = [lo for lo, _ in ranges]
    work = []
    for table in version.tables():
        # (A WAL segment's blocks are in memory; a table its store read locally at an
        # earlier prefetch is passed by, even if the local folder dropped it since.)
        if table.read_ahead and not table.held:
            mine = _touching(table, ranges, los) if ranges else []
            if mine:
                work.append((table, mine))
    stats["tables"] = len(work)
    if not work:
        return stats
    room = _Room(cache.budget // 2)

    def read(item):
        table, mine = item
        try:
            return table.read_ahead_runs(table.wanted(mine), room)
        except ObjectMissingError:      # compacted away and collected meanwhile: the reads see the new tables
            return False
        except StorageError as e:       # the reads will try again (and raise if it persists)
            log.warning("dkv prefetch of %s left to the reads: %s", table.path, e)
            return False

    with ThreadPoolExecutor(min(PARALLEL, len(work))) as pool:
        for done in pool.map(read, work):
            if done is None:
                stats["local_tables"] += 1
            elif done is False:
                stats["left_tables"] += 1
            else:
                stats["requests"] += done[0]
                stats["cached_bytes"] += done[1]
    stats["cache_full"] = room.full
    return stats
