"""Registered timers of an operator's state, read from its shards' checkpoints (read-only).

The objects of a state folder are objectspace's to show (``python -m objectspace``, the
``objectspace`` data source); its timers are spark_ops' (the timer records sit beside the
object spaces in each shard's dkv instance, under ``SCHEMA_TIMER``), so spark_ops reads
them, on the instances objectspace's ``find_instances`` finds with spark_ops' family rule:
``python -m spark_ops timers`` and ``option("timers", True)`` of the data source.
"""
from __future__ import annotations

import datetime as _dt
from typing import Iterator

import objectspace

from ._keys import from_parts
from ._timers import KIND_NAMES, scan_timers

ALL_KEY_GROUPS = (0, 1 << 16)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def user_key(parts: tuple):
    """The operator key of stored key parts: a scalar for one key column, else a tuple."""
    key = from_parts(parts)
    return key[0] if len(key) == 1 else key


def utc(ms: int) -> str:
    """``ms`` since the Unix epoch as an ISO 8601 UTC time (out of range: the number)."""
    try:
        return (_EPOCH + _dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return str(ms)


def instance_timers(ref, *, key_group: int | None = None, groups: tuple = ALL_KEY_GROUPS,
                    **dkv_options) -> Iterator[tuple]:
    """(key group, kind, time, key, name) of every timer of one instance (an
    ``objectspace.InstanceRef``) at its epoch: kind ``"event"`` or ``"processing"``, time in
    ms since the Unix epoch, key as the operator sees it. ``key_group`` keeps one."""
    if key_group is not None:
        groups = (max(groups[0], key_group), min(groups[1], key_group + 1))
        if groups[0] >= groups[1]:
            return
    with ref.open(**dkv_options) as db:
        for kg, kind, due, parts, name in scan_timers(db, groups):
            yield kg, KIND_NAMES.get(kind, str(kind)), due, user_key(parts), name


def read_timers(location, *, epoch: int | None = None, instance: str | None = None, operator: str | None = None,
                key_group: int | None = None, kind: str | None = None, **dkv_options) -> list[dict]:
    """The timers registered in the state at ``location`` (a state root, a query's,
    operator's or shard's folder; a path or URL) as of checkpoint ``epoch`` (default: each
    operator's newest), as dicts ``operator, query_id, instance, epoch, key_group, kind,
    time, time_utc, key, name``, in time order. ``instance``, ``operator``, ``key_group``
    and ``kind`` (``"event"``/``"processing"``) select. Raises as
    ``objectspace.find_instances`` does for a location without state."""
    if kind not in (None, "event", "processing"):
        raise ValueError(f"kind is 'event' or 'processing', got {kind!r}")
    out = []
    for ref in objectspace.find_instances(location, epoch=epoch, instance=instance, **dkv_options):
        labels = ref.labels
        if operator is not None and labels.get("operator") != operator:
            continue
        for kg, k, time, key, name in instance_timers(ref, key_group=key_group, **dkv_options):
            if kind is None or k == kind:
                out.append({"operator": labels.get("operator"), "query_id": labels.get("query_id"),
                            "instance": ref.instance, "epoch": ref.epoch, "key_group": kg, "kind": k,
                            "time": time, "time_utc": utc(time), "key": key, "name": name})
    out.sort(key=lambda r: (r["time"], r["operator"] or "", r["key_group"], repr(r["key"]), r["name"], r["kind"]))
    return out
