"""Per-batch, per-shard metrics the runtime records next to the state."""
from __future__ import annotations

import json
from typing import Any

import dkv

from . import _watermark


def read_metrics(state: str, query_id: str | None = None, operator: str | None = None,
                 **store_options: Any) -> list[dict]:
    """Every metrics record under ``state`` (a state root given to an operator, or one
    query's or operator's folder below it), oldest batch first. Fields: batch, shard,
    rows, emitted, dirty_slots, checkpoint_bytes, wal_bytes, manifest_bytes, sst_bytes,
    checkpoint_objects (files written), timers_fired, late_rows, state_bytes, state_records,
    objects_in_memory, objects_evicted, state_keys, state_objects, objects_removed, timers_registered,
    timers_deleted, memory_bytes, memory_budget (docs/spark_ops.md, Metrics), watermark, duration_ms (open_ms of it opening or catching
    up the state, commit_ms saving and checkpointing: save_ms + write_ms + checkpoint_ms; output_ms
    turning the emitted rows into Arrow, under Spark), query_id, operator.

    ``pandas.DataFrame(read_metrics(path))`` makes it a table. store_options: for s3://
    locations, endpoint_url, region_name and credentials (else boto3's chain)."""
    store = dkv.open_store(state, **store_options)
    prefix = "" if query_id is None else f"{query_id}/" + ("" if operator is None else f"{operator}/")
    out = []
    for name, _ in store.list(prefix):
        parts = name.split("/")
        if len(parts) < 3 or parts[-3] not in ("wm", "metrics"):
            continue
        if parts[-3] == "wm" and _watermark.parse_name(name) is None:
            continue
        owner = parts[:-3]          # [..., query id, operator] when listing from the state root
        if operator is not None and owner and owner[-1] != operator:
            continue
        body = store.get(name)
        if not body:                # a wm/ record of the first state layout: its metrics are under metrics/
            continue
        rec = json.loads(body)
        rec["operator"] = owner[-1] if owner else None
        rec["query_id"] = owner[-2] if len(owner) >= 2 else query_id
        out.append(rec)
    out.sort(key=lambda r: (r.get("query_id") or "", r.get("operator") or "", r["batch"], r["shard"]))
    return out


def snapshot_bytes(state_root: str, batch: int, **store_options: Any) -> dict:
    """What a whole-state snapshot of an operator's state as of ``batch`` would write:
    every live record of every shard at its newest checkpoint <= ``batch``, raw and
    zstd-compressed (level 3, as our WAL segments). ``state_root`` is
    ``<state>/<query id>/<operator>``. Costs a full read of the state."""
    import zstandard

    from ._layout import layouts, latest_before
    store = dkv.open_store(state_root, **store_options)
    comp = zstandard.ZstdCompressor(level=3).compressobj()
    records = raw = packed = 0
    lays = [l for l in layouts(store) if l.first_batch <= batch]
    if not lays:
        return {"records": 0, "raw_bytes": 0, "zstd_bytes": 0}
    newest = max(lays, key=lambda l: max([latest_before(store, l.instance(s), batch + 1) or -1
                                          for s in range(l.shards)]))
    for s in range(newest.shards):
        epoch = latest_before(store, newest.instance(s), batch + 1)
        if epoch is None:
            continue
        with dkv.open(store, checkpoint=epoch, read_only=True, instance=newest.instance(s),
                      background=False) as db:
            for k, v in db.scan():
                records += 1
                raw += len(k) + len(v)
                packed += len(comp.compress(k + v))
    packed += len(comp.flush())
    return {"records": records, "raw_bytes": raw, "zstd_bytes": packed}
