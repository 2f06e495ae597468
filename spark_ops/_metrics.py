"""Per-batch, per-shard metrics the runtime records next to the state."""
from __future__ import annotations

import json

import dkv


def read_metrics(state: str, query_id: str | None = None, operator: str | None = None) -> list[dict]:
    """Every metrics record under ``state`` (optionally one query and operator), oldest
    batch first: rows, emitted, dirty_slots, checkpoint_bytes, wal_bytes, manifest_bytes,
    sst_bytes, timers_fired, late_rows, state_bytes, watermark, duration_ms, ...

    ``pandas.DataFrame(read_metrics(path))`` makes it a table; ``spark.createDataFrame``
    makes it a Spark one."""
    store = dkv.open_store(state)
    prefix = "" if query_id is None else f"{query_id}/" + ("" if operator is None else f"{operator}/")
    out = []
    for name, _ in store.list(prefix):
        parts = name.split("/")
        if len(parts) < 4 or parts[-3] != "metrics":
            continue
        if operator is not None and parts[-4] != operator:
            continue
        rec = json.loads(store.get(name))
        rec["query_id"], rec["operator"] = parts[-5] if len(parts) >= 5 else None, parts[-4]
        out.append(rec)
    out.sort(key=lambda r: (r.get("query_id") or "", r["operator"], r["batch"], r["shard"]))
    return out
