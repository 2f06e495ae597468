"""Where an operator's state lives, and which dkv instance a shard opens for a batch.

State root: ``<state>/<query id>/<operator name>/`` holding

    config                          key-group count and operator class (written once)
    layouts/L<B0:012>-n<n:05>       one marker per shard layout; B0 = its first batch
    L<B0:012>-n<n:05>/p<s:05>/...   the dkv instance of shard s of that layout
    wm/<batch:012>/<n>-<s>-...      watermark records (see _watermark.py)
    metrics/<batch:012>/p<s:05>     per-shard metrics (JSON)

A layout is a shard count in use from some batch on. Shard ``s`` opening batch ``b``:

* Each layout's progress is the newest checkpoint epoch < b of its instances.
* If the current layout (same n, started at or before b) is the most advanced, the shard
  resumes its own instance at its newest checkpoint < b.
* Otherwise (first run, a new partition count, or a re-run after a rescale) a new layout
  starting at b is used: the shard's instance starts from the most advanced layout's
  instances, restricted to the shard's key groups — files shared, nothing copied.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass

import dkv

log = logging.getLogger(__name__)
_LAYOUT = re.compile(r"^L(\d{12})-n(\d{5})$")


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


def plan_open(store, batch: int, shard: int, n: int, groups: int) -> OpenPlan:
    """Decide how shard ``shard`` of ``n`` opens its state for ``batch`` (see module doc)."""
    known = layouts(store)
    progress: dict[Layout, int] = {}
    for lay in known:
        if lay.first_batch > batch:
            continue
        epochs = [latest_before(store, lay.instance(s), batch) for s in range(lay.shards)]
        epochs = [e for e in epochs if e is not None]
        progress[lay] = max(epochs) if epochs else -1
    best = max(progress, key=lambda l: (progress[l], l.first_batch), default=None)
    current = max((l for l in progress if l.shards == n), key=lambda l: l.first_batch, default=None)
    if current is not None and progress[current] >= 0 and progress[current] == progress[best]:
        epoch = latest_before(store, current.instance(shard), batch)
        if epoch is not None:
            return OpenPlan(current, current.instance(shard), checkpoint=epoch)
    if (best is None or progress[best] < 0) and any(l.first_batch < batch for l in known):
        # State exists from earlier batches, but no checkpoint before this one is left:
        # starting empty would silently lose every key's state.
        oldest = min((c.epoch for l in known for s in range(l.shards)
                      for c in dkv.list_checkpoints(store, l.instance(s))), default=None)
        raise dkv.CheckpointNotFoundError(
            f"batch {batch} needs the operator state of a batch before it, but the oldest checkpoint "
            f"left in {store.location} is {oldest} (older ones were removed by retention); a batch "
            f"this old cannot be re-run")
    new = Layout(batch, n)
    store.put_if_absent(f"layouts/{new.name}", b"")
    if best is None or progress[best] < 0:
        return OpenPlan(new, new.instance(shard), fresh=True)
    sources = []
    for s in range(best.shards):
        epoch = latest_before(store, best.instance(s), batch)
        if epoch is not None:
            sources.append((best.instance(s), epoch))
    log.info("shard %d/%d at batch %d starts layout %s from %s", shard, n, batch, new.name, best.name)
    return OpenPlan(new, new.instance(shard), sources=sources)
