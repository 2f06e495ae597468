"""Choosing and running compactions.

Two triggers, as in the DKV design:

1. **L0 count**: when L0 holds ``l0_trigger`` tables, all of L0 is merged with the
   overlapping tables of L1. Afterwards, a level over its target size
   (``level_base_bytes * level_ratio**(i-1)``) is merged into the next level.
2. **Size amplification**: when the bytes above the last level exceed
   ``max_size_amp`` times the last level's bytes, everything is merged into the last
   level, which also drops every tombstone and shadowed version.

Outputs are split into tables of about ``table_bytes`` (see FlushMixin._compact). Input files
are not deleted here: retained checkpoints may still reference them (garbage collection
decides).
"""
from __future__ import annotations

from dataclasses import dataclass

from ._paths import parse_file_name



@dataclass
class Compaction:
    inputs: list        # Tables
    level: int          # output level (>= 1)
    bottom: bool        # output is the last level: tombstones can be dropped
    reason: str


def _overlapping(run, lo: bytes, hi: bytes) -> list:
    return [t for t in run if t.max_key >= lo and t.min_key <= hi]


def pick(version, opts) -> Compaction | None:
    levels = version.levels
    n = len(levels)
    runs = version.l0_runs()
    if runs >= opts.l0_trigger:
        lo = min(t.min_key for t in version.l0)
        hi = max(t.max_key for t in version.l0)
        inputs = list(version.l0) + (_overlapping(levels[0], lo, hi) if n >= 1 else [])
        return Compaction(inputs, 1, n <= 1, f"L0 has {runs} runs")
    if n >= 1:
        last = version.level_bytes(n)
        upper = sum(version.level_bytes(i) for i in range(n))
        if n >= 2 and last > 0 and upper > opts.max_size_amp * last:
            return Compaction(list(version.tables()), n, True,
                              f"size amplification {upper / last:.2f} > {opts.max_size_amp}")
        for i in range(1, n):
            target = opts.level_base_bytes * opts.level_ratio ** (i - 1)
            if version.level_bytes(i) > target:
                src = list(levels[i - 1])
                lo = min(t.min_key for t in src)
                hi = max(t.max_key for t in src)
                out = i + 1
                inputs = src + _overlapping(levels[i], lo, hi)
                return Compaction(inputs, out, out >= n, f"L{i} over {target} bytes")
        if n < opts.max_levels and version.level_bytes(n) > opts.level_base_bytes * opts.level_ratio ** (n - 1):
            return Compaction(list(levels[n - 1]), n + 1, True, f"L{n} over target, opening L{n + 1}")
    return None


def runs_oldest_first(version, tables: list) -> list:
    """A compaction's inputs as sorted runs, oldest first, by their place in ``version``
    (the order reads consult them, newest first: L0 newest first, then each level), not by
    sequence numbers, which after a rescale belong to several instances. A level's tables
    form one run in key order, and so do the tables one flush wrote to L0: a run is read
    a table after another, so a compaction holds one table of it at a time, not all."""
    chosen = {id(t) for t in tables}
    runs = [[t for t in level if id(t) in chosen] for level in reversed(version.levels)]
    l0: list = []           # newest run first
    prev = None
    for t in version.l0:
        if id(t) in chosen:
            if prev is not None and l0 and same_run(prev, t):
                l0[-1].append(t)
            else:
                l0.append([t])
        prev = t
    return [run for run in runs if run] + l0[::-1]


def same_run(prev, t) -> bool:
    """Whether L0 table ``t``, just after ``prev`` in L0, was written by the same flush:
    a flush publishes its tables together in ascending key order; after a reopen (when the
    flush that wrote them is not known) consecutive tables of one writer in ascending,
    disjoint key ranges are taken for one run."""
    if t.run is not None or prev.run is not None:
        return t.run == prev.run
    return t.min_key > prev.max_key and _writer(t) == _writer(prev)


def _writer(t):
    parsed = parse_file_name(t.path)
    return None if parsed is None else parsed[1]
