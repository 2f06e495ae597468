"""DB.prefetch: the blocks that reads of some key ranges will need, read ahead at once.

A store reopened on S3 (a restart, a new machine) holds nothing locally: each table's
first read fetches its tail (bloom filter and index), and each block a read needs is a
round trip, one after another as the reads come. A caller that knows which keys it will
read (a batch's keys, before the batch) names their ranges here, and the round trips
overlap instead: the tails of every table the ranges touch, in parallel; then, per table,
the runs of blocks the ranges cover, which the store reads concurrently by range or, where
that would cost more than the table (``CachedStore``'s rent-or-buy rule), fetches whole
into its local folder. Ranged blocks go into the block cache, as reads would put them; the
tables whose runs would take one prefetch past half the cache's budget are left to the reads.

It changes what is in memory, never what a read returns: a block's bytes are checked as a
read checks them (a corrupt one raises), and a table the reads never reach costs its tail.
"""
from __future__ import annotations

from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor

from .batch import check_key
from .errors import ObjectMissingError

PARALLEL = 8
"""Tables read at once (each table's ranges are read concurrently by the store too)."""


def ranges_of(ranges) -> list[tuple[bytes, bytes | None]]:
    """``ranges`` (``(lo, hi)`` pairs of keys; ``hi`` None: no end) checked, sorted and
    merged where they overlap or touch."""
    out: list = []
    pairs = []
    try:
        for lo, hi in ranges:
            if type(lo) is not bytes or not lo:
                lo = check_key(lo)
            if hi is not None and (type(hi) is not bytes or not hi):
                hi = check_key(hi)
            pairs.append((lo, hi))
    except (TypeError, ValueError) as e:
        raise type(e)(f"prefetch takes (lo, hi) pairs of bytes keys (hi None: no end): {e}") from None
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


def prefetch(version, cache, ranges) -> dict:
    """Read ahead what reads of ``ranges`` will need from the tables of ``version``
    (see the module's docstring). Returns what it did: tables it looked at, ranged
    requests and the bytes they cached, tables whose reads are local (held, or fetched
    whole now), and tables left to the reads (gone meanwhile, or past the cache's room)."""
    ranges = ranges_of(ranges)
    stats = {"tables": 0, "requests": 0, "cached_bytes": 0, "local_tables": 0, "left_tables": 0}
    los = [lo for lo, _ in ranges]
    work = []
    for table in version.tables():
        # (A WAL segment's blocks are in memory; a table the store said it reads locally
        # stays so: the store's local folder is not emptied under a running process.)
        if table.read_ahead and not table.held:
            mine = _touching(table, ranges, los) if ranges else []
            if mine:
                work.append((table, mine))
    stats["tables"] = len(work)
    if not work:
        return stats
    room = cache.budget // 2

    def tail(item):
        try:
            return item[0], item[0].wanted(item[1])
        except ObjectMissingError:      # compacted away and collected meanwhile: the reads see the new tables
            return item[0], None

    def read(item):
        table, runs = item
        try:
            return table.read_ahead_runs(runs)
        except ObjectMissingError:
            return False

    with ThreadPoolExecutor(min(PARALLEL, len(work))) as pool:
        plans = list(pool.map(tail, work))
        todo, planned = [], 0
        for table, runs in plans:
            if runs:
                planned += table.runs_bytes(runs)
            if runs is None or planned > room:
                stats["left_tables"] += 1
            elif runs:
                todo.append((table, runs))
        for done in pool.map(read, todo):
            if done is None:
                stats["local_tables"] += 1
            elif done is False:
                stats["left_tables"] += 1
            else:
                stats["requests"] += done[0]
                stats["cached_bytes"] += done[1]
    return stats
