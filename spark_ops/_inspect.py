"""Registered timers of an operator's state, read from its shards' checkpoints (read-only).

The objects of a state folder are objectspace's to show (``python -m objectspace``, the
``objectspace`` data source); its timers are spark_ops' (the timer records sit beside the
object spaces in each shard's dkv instance, under ``SCHEMA_TIMER``), so spark_ops reads
them, on the instances objectspace's ``find_instances`` finds with spark_ops' family rule:
``python -m spark_ops timers`` and ``option("timers", True)`` of the data source.
"""
from __future__ import annotations

import datetime as _dt
import os
from typing import Any, Iterator

import dkv
import objectspace

from ._keys import from_parts
from .errors import NoStateError
from ._timers import KIND_NAMES, scan_timers

ALL_KEY_GROUPS = (0, 1 << 16)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _same_key(a, b) -> bool:
    """A timer's key and the one asked for (a list from JSON stands for a tuple)."""
    if isinstance(b, list):
        b = tuple(b)
    return a == b and type(a) is type(b) or (isinstance(a, (int, float)) and not isinstance(a, bool)
                                              and isinstance(b, (int, float)) and a == b)


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


_NO_KEY = object()


def read_timers(location: str | os.PathLike[str] | dkv.ObjectStore, *, epoch: int | None = None,
                instance: str | None = None, operator: str | None = None, key_group: int | None = None,
                kind: str | None = None, key: Any = _NO_KEY, **dkv_options: Any) -> list[dict]:
    """The timers registered in the state at ``location`` (a state root, a query's,
    operator's or shard's folder; a path or URL) as of checkpoint ``epoch`` (default: each
    operator's newest), as dicts ``operator, query_id, instance, epoch, key_group, kind,
    time, time_utc, key, name``, in time order. ``instance``, ``operator``, ``key_group``
    ``kind`` (``"event"``/``"processing"``) and ``key`` (the operator key, as ``ctx.key``
    gives it: a tuple for several key columns) select. Raises as
    ``objectspace.find_instances`` does for a location without state."""
    if kind not in (None, "event", "processing"):
        raise ValueError(f"kind is 'event' or 'processing', got {kind!r}")
    out = []
    for ref in objectspace.find_instances(location, epoch=epoch, instance=instance, **dkv_options):
        labels = ref.labels
        if operator is not None and labels.get("operator") != operator:
            continue
        for kg, k, time, tkey, name in instance_timers(ref, key_group=key_group, **dkv_options):
            if (kind is None or k == kind) and (key is _NO_KEY or _same_key(tkey, key)):
                key_ = tkey
                out.append({"operator": labels.get("operator"), "query_id": labels.get("query_id"),
                            "instance": ref.instance, "epoch": ref.epoch, "key_group": kg, "kind": k,
                            "time": time, "time_utc": utc(time), "key": key_, "name": name})
    out.sort(key=lambda r: (r["time"], r["operator"] or "", r["key_group"], repr(r["key"]), r["name"], r["kind"]))
    return out


# -- operators and their state variables (RFC 0010) -----------------------------------------

def _root_store(location, dkv_options: dict):
    import dkv
    return dkv.open_store(location, create=False, **{k: v for k, v in dkv_options.items()
                                                      if k in dkv.STORE_OPTIONS})


def _queries(location, query: str | None, dkv_options: dict) -> list:
    from ._identity import queries
    if query is not None:
        return [query]
    found = queries(_root_store(location, dkv_options))
    if not found:
        raise NoStateError(f"no spark_ops query state under {location!r} (a state root holds <query id>/<operator>/ "
                         f"folders)")
    return found


def read_operators(location: str | dkv.ObjectStore, *, query: str | None = None, **dkv_options: Any) -> list[dict]:
    """The operators of each query under the state root ``location`` (or of ``query``), as
    dicts ``query_id, operator, status ("active"/"retired"), class, name_from, last_batch,
    joined, retired, state_vars`` (the declarations of its latest run; None: it declares
    nothing). Read-only."""
    from ._identity import QueryDir, last_batch, read_ledger, recorded_identity
    root = location if isinstance(location, str) else location.location
    out = []
    for q in _queries(location, query, dkv_options):
        qd = QueryDir(root, q, dkv_options)
        for name, rec in sorted(read_ledger(qd, write=False).items()):
            ostore = qd.operator(name)
            ident = recorded_identity(ostore) or rec
            out.append({"query_id": q, "operator": name, "status": "retired" if rec.get("retired") else "active",
                        "class": ident.get("class"), "name_from": ident.get("from"),
                        "last_batch": last_batch(ostore), "joined": (rec.get("joined") or {}).get("time"),
                        "retired": rec.get("retired"), "state_vars": ident.get("state_vars")})
    return out


def _latest_run_start(ostore) -> int | None:
    import json
    runs = sorted(k for k, _ in ostore.list("runs/"))
    if not runs:
        return None
    try:
        return int(json.loads(ostore.get(runs[-1]))["batch"])
    except Exception:       # noqa: BLE001 - an unreadable registration says nothing
        return None


def read_vars(location: str | dkv.ObjectStore, *, query: str | None = None, operator: str | None = None,
              **dkv_options: Any) -> list[dict]:
    """The state variables of each operator under the state root ``location`` at its newest
    checkpoint, as dicts ``query_id, operator, variable, kinds, version, objects, bytes,
    met, status, declared``: ``objects`` and ``bytes`` are what dropping the variable would
    free (a scan of every shard's objects); ``met`` the first batch of the latest run that
    used it; ``status`` "declared", "in use" (by the latest run of an operator that declares
    nothing), "not used by the latest run (since batch N)" (an orphan: code that no longer
    uses it), "renamed to X in batch N" or "dropped in batch N" (tombstones). Read-only."""
    from objectspace import find_instances, list_objects, spaces_of

    from ._identity import QueryDir, read_ledger, recorded_identity
    from ._vars import decode_record, record_key
    root = location if isinstance(location, str) else location.location
    out = []
    for q in _queries(location, query, dkv_options):
        qd = QueryDir(root, q, dkv_options)
        for name in sorted(read_ledger(qd, write=False)):
            if operator is not None and name != operator:
                continue
            ostore = qd.operator(name)
            ident = recorded_identity(ostore) or {}
            declared = ident.get("state_vars")
            start = _latest_run_start(ostore)
            vars_: dict = {}
            gone: dict = {}
            try:
                refs = find_instances(f"{qd.location}/{name}", **dkv_options)
            except Exception:       # noqa: BLE001 - an operator without a checkpoint holds nothing yet
                refs = []
            for ref in refs:
                with ref.open(**dkv_options) as db:
                    lo, hi = db.key_group_range
                    for kg in range(lo, hi):
                        rec = decode_record(db.get(record_key(kg)), f"of key group {kg}")
                        if rec is None:
                            continue
                        for var, entry in rec["vars"].items():
                            v = vars_.setdefault(var, {"kinds": set(), "version": 1, "objects": 0, "bytes": 0,
                                                       "met": None})
                            v["kinds"].update(entry[0])
                            v["version"] = max(v["version"], entry[1])
                            met = entry[3] if len(entry) > 3 else None
                            if met is not None and (v["met"] is None or met > v["met"]):
                                v["met"] = met
                        for var, (to, at) in rec["gone"].items():
                            gone[var] = (to, at)
                    for kg, sp in spaces_of(db, key_group_range=(lo, hi)):
                        for info in list_objects(sp):
                            n = info.name
                            if isinstance(n, tuple) and n and isinstance(n[-1], str):
                                v = vars_.setdefault(n[-1], {"kinds": set(), "version": 1, "objects": 0,
                                                             "bytes": 0, "met": None})
                                v["kinds"].add(info.kind)
                                v["objects"] += 1
                                v["bytes"] += info.bytes or 0
            retired = (read_ledger(qd, write=False).get(name) or {}).get("retired")
            for var, v in sorted(vars_.items()):
                if retired:
                    status = "operator retired"
                elif declared is not None:
                    d = declared.get(var)
                    status = "declared" if d and not d.get("dropped") else "not declared (the latest code drops it)"
                elif v["met"] is not None and start is not None and v["met"] >= start:
                    status = "in use"
                elif v["met"] is None:
                    status = "no record of use (state older than that record)"
                else:
                    status = f"not used by the latest run (since batch {start}; last used in batch {v['met']})"
                out.append({"query_id": q, "operator": name, "variable": var, "kinds": sorted(v["kinds"]),
                            "version": v["version"], "objects": v["objects"], "bytes": v["bytes"], "met": v["met"],
                            "status": status, "declared": (declared or {}).get(var)})
            for var, (to, at) in sorted(gone.items()):
                if var not in vars_:
                    out.append({"query_id": q, "operator": name, "variable": var, "kinds": [], "version": None,
                                "objects": 0, "bytes": 0, "met": None,
                                "status": f"renamed to {to!r} in batch {at}" if to else f"dropped in batch {at}",
                                "declared": (declared or {}).get(var)})
    return out
