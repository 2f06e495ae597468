"""Merging sorted sources: newest version of each key wins, tombstones hide.

A source yields chunks ``(keys, values, seqs)`` — parallel lists in ascending key order
(an SST block, a slice of a memtable; ``seqs`` may be one int the whole chunk shares).
With one source the chunks are walked directly;
with several, records ``(key, -seq, src, value)`` go through a heap merge so that within
a key the newest record (smallest ``-seq``) comes first and is the one kept. ``src``
only breaks ties so tuples never compare values.
"""
from __future__ import annotations

import heapq
from itertools import repeat
from operator import neg


def _records(chunks, src: int):
    for keys, values, seqs in chunks:
        if type(seqs) is int:
            yield from zip(keys, repeat(-seqs), repeat(src), values)
        else:
            yield from zip(keys, map(neg, seqs), repeat(src), values)


def merge_visible(sources: list):
    """Yield (key, value) for live keys across ``sources``."""
    if not sources:
        return
    if len(sources) == 1:
        for keys, values, _ in sources[0]:
            for kv in zip(keys, values):
                if kv[1] is not None:
                    yield kv
        return
    last = None
    for key, _, _, value in heapq.merge(*[_records(s, i) for i, s in enumerate(sources)]):
        if key == last:
            continue
        last = key
        if value is not None:
            yield key, value


def merge_records(sources: list, drop_tombstones: bool):
    """Yield (key, seq, value) — the newest record per key — for compaction."""
    last = None
    for key, nseq, _, value in heapq.merge(*[_records(s, i) for i, s in enumerate(sources)]):
        if key == last:
            continue
        last = key
        if value is None and drop_tombstones:
            continue
        yield key, -nseq, value
