"""Where an operator's state lives, and which dkv instance a shard opens for a batch.

State root: ``<state>/<query id>/<operator name>/`` holding

    config                          key-group count and operator class (written once)
    identity.json                   the operator's identity as of its latest run (_identity.py)
    runs/<seq>-<run id>             the Spark runs that used the state (_runs.py)
    layouts/L<B0:012>-n<n:05>       one marker per shard layout; B0 = its first batch
    L<B0:012>-n<n:05>/p<s:05>/...   the dkv instance of shard s of that layout
    wm/<batch:012>/<n>-<s>-...      per shard and batch: watermark basis and batch time in
                                    the name, metrics (JSON) in the body (see _watermark.py)
    wm/<batch:012>/first            a first batch's processing time (written once)
    metrics/<batch:012>/p<s:05>     metrics as the first state layout kept them (0.1.0 before
                                    commit 4e7f175: a wm/ record's body was then empty)

and beside the operators ``<state>/<query id>/_query/``: the query's ledger of operators and
the driver's verdict on each run (_identity.py; names starting with ``_`` are not operators').
In each shard's dkv instance, each key group holds its objects (schema byte 0), timers (1),
TTL records (2) and the record of its state variables (3, _vars.py).

A layout is a shard count in use from some batch on. Shard ``s`` opening batch ``b``:

* Each layout's progress is the newest checkpoint epoch < b of its instances.
* If the current layout (same n, started at or before b) is the most advanced, the shard
  resumes its own instance at its newest checkpoint < b, which must be b - 1 (else batches
  ran without this state: EpochGapError).
* Otherwise (first run, a new partition count, or a re-run after a rescale) a new layout
  starting at b is used: the shard's instance starts from the most advanced layout's
  instances, restricted to the shard's key groups — files shared, nothing copied.

objectspace's inspection (``python -m objectspace``, ``objectspace.find_instances``, the
``objectspace`` data source) learns this naming from ``FAMILY_RULE``: an operator's shards
are one family, each layout one generation of it.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import dkv
import objectspace

from ._shards import shard_range
from .errors import EpochGapError

log = logging.getLogger(__name__)
_LAYOUT = re.compile(r"^L(\d{12})-n(\d{5})$")
_SHARD = re.compile(r"^(?:(?P<owner>.+)/)?L(?P<first>\d{12})-n(?P<shards>\d{5})/p\d{5}$")


@dataclass(frozen=True)
class Layout:
    first_batch: int
    shards: int

    @property
    def name(self) -> str:
        return f"L{self.first_batch:012d}-n{self.shards:05d}"

    def instance(self, shard: int) -> str:
        return f"{self.name}/p{shard:05d}"


@dataclass
class OpenPlan:
    """How to open a shard's dkv instance for a batch."""
    layout: Layout
    instance: str
    checkpoint: int | None = None        # resume at this epoch
    sources: list | None = None          # or start from these (instance, epoch) pairs
    fresh: bool = False                  # or start empty


def read_config(store, groups: int, operator: str) -> int:
    """The key-group count fixed when the state was created (created now if absent)."""
    body = json.dumps({"key_groups": groups, "operator": operator, "format": 1}).encode()
    if store.put_if_absent("config", body):
        return groups
    try:
        cfg = json.loads(store.get("config"))
        return int(cfg["key_groups"])
    except (ValueError, KeyError, TypeError) as e:
        raise dkv.CorruptionError(f"{store.location}/config is damaged: {e}") from None


def layouts(store) -> list[Layout]:
    out = []
    for name, _ in store.list("layouts/"):
        m = _LAYOUT.match(name.rsplit("/", 1)[-1])
        if m:
            out.append(Layout(int(m.group(1)), int(m.group(2))))
    return sorted(out, key=lambda l: (l.first_batch, l.shards))


def latest_before(store, instance: str, batch: int) -> int | None:
    epochs = [c.epoch for c in dkv.list_checkpoints(store, instance) if c.epoch < batch]
    return max(epochs) if epochs else None


def plan_open(store, batch: int, shard: int, n: int, groups: int, operator: str | None = None) -> OpenPlan:
    """Decide how shard ``shard`` of ``n`` opens its state for ``batch``.

    Per key group of the shard, the source is the instance holding that group's newest
    checkpoint before ``batch`` (ties: the newer layout — a crashed attempt of another
    layout may have written the same epoch for some groups). If every group's source is
    this shard's own instance in a layout of the same shard count, the shard resumes it;
    otherwise a new layout starting at ``batch`` takes each group from its source.
    """
    lo, hi = shard_range(shard, n, groups)
    candidates = []            # (first, end, epoch, layout first batch, instance, layout)
    known = layouts(store)
    for lay in known:
        if lay.first_batch > batch:
            continue
        for s in range(lay.shards):
            a, b = shard_range(s, lay.shards, groups)
            if b <= lo or a >= hi:
                continue
            epoch = latest_before(store, lay.instance(s), batch)
            if epoch is not None:
                candidates.append((a, b, epoch, lay.first_batch, lay.instance(s), lay))
    pieces: list[list] = []    # [first, end, instance, epoch, layout] runs of key groups
    for kg in range(lo, hi):
        best = max((c for c in candidates if c[0] <= kg < c[1]), key=lambda c: (c[2], c[3]), default=None)
        src = [None, None, None] if best is None else [best[4], best[2], best[5]]
        if pieces and pieces[-1][2:] == src:
            pieces[-1][1] = kg + 1
        else:
            pieces.append([kg, kg + 1, *src])
    missing = [p for p in pieces if p[2] is None]
    if missing:
        if len(missing) == len(pieces) and not any(l.first_batch < batch for l in known):
            new = Layout(batch, n)       # the first batch of this operator's state
            store.put_if_absent(f"layouts/{new.name}", b"")
            return OpenPlan(new, new.instance(shard), fresh=True)
        oldest = min((c.epoch for l in known for s in range(l.shards)
                      for c in dkv.list_checkpoints(store, l.instance(s))), default=None)
        raise dkv.CheckpointNotFoundError(
            f"batch {batch} needs the state of key groups {[(p[0], p[1]) for p in missing]} as of a batch "
            f"before it, but no such checkpoint is left in {store.location} (the oldest is {oldest}; older "
            f"ones were removed by retention, or a batch this old cannot be re-run)")
    behind = [p[3] for p in pieces if p[3] < batch - 1]
    if behind:
        raise _gap(store, batch, max(p[3] for p in pieces), operator)
    if len(pieces) == 1:
        _, _, instance, epoch, lay = pieces[0]
        if lay.shards == n and instance == lay.instance(shard):
            return OpenPlan(lay, instance, checkpoint=epoch)
    new = Layout(batch, n)
    store.put_if_absent(f"layouts/{new.name}", b"")
    sources = [(instance, epoch, (a, b)) for a, b, instance, epoch, _ in pieces]
    log.info("shard %d/%d at batch %d starts layout %s from %s", shard, n, batch, new.name, sources)
    return OpenPlan(new, new.instance(shard), sources=sources)


def _gap(store, batch: int, last: int, operator: str | None = None) -> EpochGapError:
    """The error of a shard whose newest checkpoint (``last``) is older than ``batch - 1``."""
    loc = store.location.rstrip("/")
    name = operator or loc.rsplit("/", 1)[-1]
    skipped = f"batch {last + 1}" if last + 1 == batch - 1 else f"batches {last + 1} to {batch - 1}"
    return EpochGapError(
        f"spark_ops: the state of operator {name!r} ({loc}) was last checkpointed in batch {last}, but this is "
        f"batch {batch}: {skipped} ran without this state (under other code: the operator under another name, or "
        f"without it). Continuing would skip their input, so the shard stops before it reads or writes anything. "
        f"If those batches ran this operator under another name, keep running it under that name (name=); to "
        f"drop this state and start the operator empty, retire and purge it (python -m spark_ops retire, then "
        f"purge); to run those batches again with this state, restore the query's checkpoint from before batch "
        f"{last + 1}")


def shard_member(location: str, instance: str):
    """objectspace's view of instance ``instance`` found under ``location`` when it is an
    operator's shard (``[<query id>/<operator>/]L<first batch>-n<shards>/p<shard>``), else
    None: the family is ``<query id>/<operator>`` ("" when ``location`` is the operator's
    own folder), the generation its layout (first batch, shards), and the labels name the
    operator and the query."""
    m = _SHARD.match(instance)
    if m is None:
        return None
    owner = m["owner"] or ""
    operator = owner.rsplit("/", 1)[-1] if owner else location.rstrip("/").rsplit("/", 1)[-1]
    query_id = owner.rsplit("/", 1)[0] if "/" in owner else None
    return objectspace.FamilyMember(owner, (int(m["first"]), int(m["shards"])),
                                    {"operator": operator, "query_id": query_id})


def _expiries(db, key_group: int):
    from ._expiries import Expiries      # inspection only
    return Expiries(db, key_group)


FAMILY_RULE = objectspace.FamilyRule("spark_ops", shard_member, labels=("operator", "query_id"),
                                     expiries=_expiries)
"""Registered when spark_ops is imported, and offered to ``python -m objectspace`` through the
``objectspace.family_rules`` entry point (pyproject.toml); its ``expiries`` shows state TTL."""
