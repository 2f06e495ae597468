"""The event-time watermark and processing time of a batch, the same on every shard.

Spark keeps its watermark on the driver; tasks never see it. So every shard records, at
the end of batch ``b``, the largest event time it has seen so far (its *basis*) and the
batch timestamp, in the **name** of a tiny object::

    wm/<b:012>/<n:05>-<shard:05>-<basis ms>-<batch time ms>

At the start of ``b + 1`` a shard lists ``wm/<b>/`` — one LIST gives every shard's record —
and takes ``watermark = max(basis) - delay`` and ``processing time = max(batch time)``.
Every shard runs every batch, so the list is complete (the ``n`` in the names checks it),
and the records of ``b`` are final once ``b + 1`` runs: a re-run sees the same values.
This matches Spark's rule that batch ``b`` uses the watermark computed from batches < b.
"""
from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)
NONE = -(1 << 62)
_REC = re.compile(r"^(\d{5})-(\d{5})-((?:-?\d+|x)(?::(?:-?\d+|x))*)-(-?\d+)$")
KEEP_BATCHES = 20


def _fmt(basis: list) -> str:
    return ":".join("x" if b == NONE else str(b) for b in basis)


def record_name(batch: int, n: int, shard: int, basis: list, batch_time: int) -> str:
    return f"wm/{batch:012d}/{n:05d}-{shard:05d}-{_fmt(basis)}-{batch_time}"


def read(store, batch: int, inputs: int = 1) -> tuple[list, int, bool]:
    """(max basis per input, max batch time, complete) recorded for ``batch``; NONE where
    nothing is recorded. An operator with several inputs keeps one basis per input."""
    basis = [NONE] * inputs
    btime = NONE
    shards: set = set()
    total = None
    for name, _ in store.list(f"wm/{batch:012d}/"):
        m = _REC.match(name.rsplit("/", 1)[-1])
        if not m:
            continue
        values = [NONE if v == "x" else int(v) for v in m.group(3).split(":")]
        if len(values) != inputs:
            continue
        total = int(m.group(1))
        shards.add(int(m.group(2)))
        basis = [max(a, b) for a, b in zip(basis, values)]
        btime = max(btime, int(m.group(4)))
    complete = total is not None and len(shards) >= total
    return basis, btime, complete


def watermark(basis: list, delay_ms: int) -> int | None:
    """The watermark from per-input bases: the slowest input's (Spark's default policy,
    ``multipleWatermarkPolicy=min``); None until every input has an event time."""
    if not basis or any(b == NONE for b in basis):
        return None
    return min(basis) - delay_ms


def write(store, batch: int, n: int, shard: int, basis: list, batch_time: int) -> None:
    store.put(record_name(batch, n, shard, basis, batch_time), b"")


def collect(store, batch: int, shard: int) -> None:
    """Delete this shard's records older than KEEP_BATCHES batches (best effort)."""
    old = batch - KEEP_BATCHES
    if old < 0 or old % 5:
        return
    for name, _ in store.list("wm/"):
        parts = name.split("/")
        try:
            b = int(parts[1])
        except (IndexError, ValueError):
            continue
        m = _REC.match(parts[-1])
        if b <= old and m and int(m.group(2)) == shard:
            store.delete(name)
