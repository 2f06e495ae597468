"""The event-time watermark and processing time of a batch, the same on every shard.

Spark keeps its watermark on the driver; tasks never see it. So every shard records, at
the end of batch ``b``, the largest event time it has seen so far (its *basis*) and the
batch timestamp, in the **name** of a small object::

    wm/<b:012>/<n:05>-<shard:05>-<basis ms>-<batch time ms>

whose body is the shard's metrics of the batch (JSON, see _metrics.py): one object per
shard and batch for both, written once the checkpoint is done.

At the start of ``b + 1`` a shard lists ``wm/<b>/`` — one LIST gives every shard's record —
and takes ``watermark = max(basis) - delay`` and ``processing time = max(batch time)``.
Every shard runs every batch, so the list is complete (the ``n`` in the names checks it),
and the records of ``b`` are final once ``b + 1`` runs: a re-run sees the same values.
This matches Spark's rule that batch ``b`` uses the watermark computed from batches < b.

A batch with no records before it (a query's first batch, or the first one an operator
runs in after joining a running query) has no watermark, but it does have a processing
time: the clock of the first of its shards to get there, kept in ``wm/<b:012>/first``
(created once, with ``put_if_absent``), so that every shard — those without rows too —
and every re-run of the batch read the same value.
"""
from __future__ import annotations

import logging
import re

log = logging.getLogger(__name__)
NONE = -(1 << 62)
_REC = re.compile(r"^(\d{5})-(\d{5})-((?:-?\d+|x)(?::(?:-?\d+|x))*)-(-?\d+)$")


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


def write(store, batch: int, n: int, shard: int, basis: list, batch_time: int, body: bytes = b"") -> None:
    store.put(record_name(batch, n, shard, basis, batch_time), body)


def first_time(store, batch: int, clock: int) -> int:
    """The processing time of ``batch`` when no batch before it left records: ``clock``
    (this shard's, ms) if this shard is the first to ask, else what the first one kept.
    One conditional PUT (and one GET for the shards that come later), first batch only."""
    name = f"wm/{batch:012d}/first"
    if store.put_if_absent(name, str(int(clock)).encode("ascii")):
        return int(clock)
    raw = store.get(name)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{store.location}/{name} should hold a time in ms, not {raw[:40]!r}") from None


def parse_name(name: str):
    """(batch, shard count, shard) of a record's name, or None when it is not one."""
    parts = name.split("/")
    if len(parts) < 3 or parts[-3] != "wm":
        return None
    m = _REC.match(parts[-1])
    if not m:
        return None
    try:
        return int(parts[-2]), int(m.group(1)), int(m.group(2))
    except ValueError:
        return None
