"""Fencing a stale driver: two runs of one streaming query on the same state.

A driver that is still running after its replacement started (a "zombie": paused, cut off
from the cluster manager, or started twice by a scheduler) shares the replacement's
checkpoint location and state. dkv fences writers shard by shard, and a fenced shard
reopens and runs its batch again (_runtime) — so without more, the two drivers' shards
would take the state from each other in turn, and a stale driver re-running an old batch
would rewind the state under the new one.

Every start of a query is a new Spark *run* (``query.runId``; tasks see it in their job
description and job group). The first task of a run to reach the operator's state registers
the run there, as ``runs/<seq>-<run id>`` with the next sequence number; every task of every
later batch lists ``runs/`` before it opens the shard's state, and a task whose run is not
the newest fails with ``StaleRunError``, which names both runs, without touching the state.
Spark fails the stale driver's batch with that error and its query stops; the newer run goes
on. The check costs one LIST of a few small objects per shard and batch. A stale task that
passed its check just before the newer run registered can still run that one batch; dkv's
writer fencing then makes one of the two shards run it again, with the same input and so the
same result.
"""
from __future__ import annotations

import json
import os
import re
import socket
import time

from .errors import SparkOpsError

RUNS = "runs/"
_NAME = re.compile(r"runs/(\d{12})-([0-9a-fA-F-]{36})$")
_RUN_IN_DESCRIPTION = re.compile(r"runId = ([0-9a-fA-F-]{36})")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


class StaleRunError(SparkOpsError, RuntimeError):
    """This run of a streaming query was replaced by a newer run on the same state."""


def run_id(task_context) -> str | None:
    """The Spark run id of a streaming task (None outside a stream)."""
    desc = task_context.getLocalProperty("spark.job.description") or ""
    m = _RUN_IN_DESCRIPTION.search(desc)
    if m:
        return m.group(1)
    group = task_context.getLocalProperty("spark.jobGroup.id") or ""
    return group if _UUID.match(group) else None


def _runs(store) -> list:
    """``[(seq, run id)]`` registered in the state, oldest first."""
    out = []
    for name, _ in store.list(RUNS):
        m = _NAME.match(name)
        if m:
            out.append((int(m.group(1)), m.group(2)))
    return sorted(out)


_FIRST: dict = {}            # (root, run) -> the batch the run registered at


def check(store, root: str, run: str, batch: int, shard: int) -> int:
    """Register ``run`` in the operator's state (``store``, at ``root``) if it is not yet,
    then raise StaleRunError if a newer run is registered. Returns the batch the run
    registered at (its first batch on this operator). One LIST; a PUT the first time (a GET
    once per process when another task registered it)."""
    runs = _runs(store)
    mine = [r for r in runs if r[1] == run]
    if not mine:
        seq = (runs[-1][0] + 1) if runs else 1
        body = json.dumps({"run": run, "registered": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                           "host": socket.gethostname(), "pid": os.getpid(), "batch": batch}).encode()
        store.put(f"{RUNS}{seq:012d}-{run}", body)
        runs = _runs(store)         # another run may have registered at the same moment
        mine = [r for r in runs if r[1] == run]
        _FIRST.setdefault((root, run), batch)
    me = mine[0]
    newer = [r for r in runs if r > me and r[1] != run]
    if newer:
        seq, other = newer[-1]
        try:
            info = json.loads(store.get(f"{RUNS}{seq:012d}-{other}"))
            since = f", registered {info.get('registered')} from host {info.get('host')} at batch {info.get('batch')}"
        except Exception:       # noqa: BLE001 - the names say enough
            since = ""
        raise StaleRunError(
            f"spark_ops: this run ({run}) of the streaming query is stale: a newer run ({other}{since}) "
            f"uses the same state {root}; a second driver was started on the same checkpoint and state "
            f"while this one still ran. Shard {shard} of batch {batch} stops here without touching the "
            f"state; stop this driver (the newer run continues)")
    first = _FIRST.get((root, run))
    if first is None:
        try:
            first = int(json.loads(store.get(f"{RUNS}{me[0]:012d}-{run}"))["batch"])
        except Exception:       # noqa: BLE001 - an unreadable registration: count from this batch
            first = batch
        _FIRST[(root, run)] = first
    return first
