"""Merging sorted sources: newest version of each key wins, tombstones hide.

Every source yields ``(key, -seq, src, value)`` ascending by key; within a key the
smallest ``-seq`` (the newest record) comes first, so the merge keeps the first record it
sees for a key. ``src`` only breaks ties so tuples never compare values.
"""
from __future__ import annotations

import heapq


def merge_visible(sources: list):
    """Yield (key, value) for live keys across ``sources``."""
    if not sources:
        return
    if len(sources) == 1:
        for key, _, _, value in sources[0]:
            if value is not None:
                yield key, value
        return
    last = None
    for key, _, _, value in heapq.merge(*sources):
        if key == last:
            continue
        last = key
        if value is not None:
            yield key, value


def merge_records(sources: list, drop_tombstones: bool):
    """Yield (key, seq, value) — the newest record per key — for compaction."""
    last = None
    for key, nseq, _, value in heapq.merge(*sources):
        if key == last:
            continue
        last = key
        if value is None and drop_tombstones:
            continue
        yield key, -nseq, value
