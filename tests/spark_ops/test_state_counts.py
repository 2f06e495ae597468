"""The per-batch state figures (state_keys, state_objects, objects_removed, ttl_expired,
timers, memory) against a model of the operator and against a scan of the state, through
restarts, rescales and re-runs of a batch."""
from __future__ import annotations

import random

import pytest

from objectspace import find_instances, list_objects, spaces_of
from spark_ops import Operator
from spark_ops.testing import OperatorHarness


class KeysAndObjects(Operator):
    """Per row: ``add`` writes the key's value ``v`` (and, for a multiple of 3, a dict ``d``),
    ``drop`` deletes both, ``timer`` registers a processing-time timer."""

    def on_event(self, key, row, ctx):
        if row["op"] == "add":
            ctx.value("v").value = row["n"]
            if row["n"] % 3 == 0:
                ctx.dict("d")[row["n"]] = 1
        elif row["op"] == "drop":
            ctx.delete_state("v")
            ctx.delete_state("d")
        else:
            ctx.register_processing_timer(10**12 + row["n"])


def batch_figures(h: OperatorHarness, shards: int) -> dict:
    per_shard = h.metrics[-shards:]
    return {k: sum(m[k] for m in per_shard) for k in ("state_keys", "state_objects", "objects_removed",
                                                        "timers_registered")} | \
        {"state_keys_max": max(m["state_keys"] for m in per_shard)}


def scanned(state: str) -> tuple[int, int]:
    """(keys, objects) counted from scratch: every object of the operator's shards at their
    newest checkpoints, listed."""
    keys, objects = set(), 0
    for ref in find_instances(state):
        with ref.open() as db:
            for kg, sp in spaces_of(db, key_group_range=db.key_group_range):
                for info in list_objects(sp):
                    objects += 1
                    keys.add(info.name[:-1])
    return len(keys), objects


@pytest.mark.parametrize("seed", range(4))
def test_state_figures_match_the_model_and_a_scan(tmp_path, seed):
    rng = random.Random(seed)
    state = str(tmp_path / "state")
    shards = 2
    h = OperatorHarness(KeysAndObjects(), key="k", state=state, partitions=shards, key_groups=16)
    model: dict = {}            # key -> set of object names
    for b in range(12):
        rows, removed, timers = [], 0, 0
        after = {k: set(v) for k, v in model.items()}
        for _ in range(rng.randrange(1, 40)):
            k, r = f"k{rng.randrange(25)}", rng.random()
            if r < 0.65:
                n = rng.randrange(100)
                rows.append({"k": k, "op": "add", "n": n})
                after.setdefault(k, set()).add("v")
                if n % 3 == 0:
                    after[k].add("d")
            elif r < 0.85:
                rows.append({"k": k, "op": "drop", "n": 0})
                after.pop(k, None)
            else:
                rows.append({"k": k, "op": "timer", "n": rng.randrange(5)})
                timers += 1
        # deletions the batch writes: objects stored before it and gone after it
        removed = sum(len(model.get(k, set()) - after.get(k, set())) for k in set(model) | set(after))
        h.run_batch(rows)
        model = {k: v for k, v in after.items() if v}
        fig = batch_figures(h, shards)
        keys, objects = len(model), sum(map(len, model.values()))
        assert (fig["state_keys"], fig["state_objects"]) == (keys, objects), (b, fig)
        assert fig["objects_removed"] == removed, (b, fig)
        assert fig["timers_registered"] == timers
        assert fig["state_keys_max"] <= keys
        h.close()
        assert scanned(state) == (keys, objects)
        if b == 4:
            h.rescale(3)
            shards = 3
        elif b == 7:
            h.rerun_batch(h.batch_id - 1)       # the last batch again: the same figures
            h.run_batch(rows)
            assert batch_figures(h, shards)["state_objects"] == objects


def test_objects_removed_counts_deletions_and_ttl_expirations(tmp_path):
    class Timed(Operator):
        def on_event(self, key, row, ctx):
            if row["op"] == "set":
                ctx.value("t", ttl="1 second").value = 1
                ctx.value("keep").value = 1
            else:
                ctx.delete_state("keep")

    h = OperatorHarness(Timed(), key="k", partitions=1, key_groups=8)
    h.run_batch([{"k": f"k{i}", "op": "set"} for i in range(5)], processing_time=1_000)
    m = h.metrics[-1]
    assert (m["state_keys"], m["state_objects"], m["objects_removed"]) == (5, 10, 0)
    # two keys lose "keep" by the operator; every "t" expires before the batch runs
    h.run_batch([{"k": "k0", "op": "del"}, {"k": "k1", "op": "del"}], processing_time=5_000)
    m = h.metrics[-1]
    assert m["ttl_expired"] == 5
    assert (m["state_keys"], m["state_objects"], m["objects_removed"]) == (3, 3, 7)
    assert m["memory_bytes"] > 0 and m["memory_budget"] > 0 and m["open_ms"] >= 0
