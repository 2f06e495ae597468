"""A shard opened on S3 names each chunk's keys to a prefetch in its first batch (issue 34,
Restart; RFC 0012, *Restart on S3*): the state reads of that batch overlap instead of coming
one after another, and the output is what it would be without. Over the moto server, no
Spark (the runtime through OperatorHarness)."""
from __future__ import annotations

import random
import uuid

import pytest

from spark_ops import read_metrics
from spark_ops.operators import Buffer
from spark_ops.testing import OperatorHarness
from .models import BufferModel, by_key, run_model

@pytest.mark.s3
def test_the_first_batch_after_a_restart_on_s3_prefetches_and_gives_the_models_output(s3_server, tmp_path):
    url = f"s3://{s3_server.bucket}/prefetch-{uuid.uuid4().hex[:8]}"
    small = dict(endpoint_url=s3_server.endpoint, table_bytes=512 * 1024, memtable_bytes=256 * 1024,
                 block_bytes=1024, max_replay_bytes=1)
    rng = random.Random(8)
    batches = [[{"k": f"user-{k}", "v": rng.randbytes(40).hex()} for k in range(4000) for _ in range(2)]
               for b in range(3)]
    batches.append([{"k": f"user-{k}", "v": 99} for k in range(0, 4000, 97)])
    batches.append([{"k": f"user-{k}", "v": 100} for k in range(0, 4000, 89)])
    expected = run_model(BufferModel(["k"], count=4, skip=3), batches, keys=["k"])

    def harness(cache: str, **options) -> OperatorHarness:
        return OperatorHarness(Buffer(count=4, skip=3, key_columns=("k",)), key="k", state=url, partitions=2,
                               dkv_options={**small, "cache_dir": str(tmp_path / cache), **options})

    h = harness("first")
    for b in range(3):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")
    h.close()
    # A new machine: a new process's shards and an empty cache folder. (Its tables are
    # smaller than dkv's default range_read_cost, and would be fetched whole at once.)
    h = harness("second", range_read_cost=2048)
    h.batch_id = 3
    for b in (3, 4):
        assert by_key(h.run_batch(batches[b]), "k") == by_key(expected[b], "k")
    h.close()
    metrics = {(m["batch"], m["shard"]): m for m in read_metrics(url, endpoint_url=s3_server.endpoint)}
    for shard in (0, 1):
        first = metrics[(3, shard)]["prefetch"]
        assert first["requests"] > 0 and first["cached_bytes"] > 0 and first["ms"] > 0, first
        assert first["tables"] > 0 and first["left_tables"] == 0 and not first["cache_full"], first
        # Batch 0 opened an empty state (nothing to read ahead); batches 1, 2 and 4 ran on
        # shards kept open, whose caches are warm.
        assert not any("prefetch" in metrics[(b, shard)] for b in (0, 1, 2, 4))


def test_a_prefetch_of_the_due_ranges_reads_what_firing_the_timers_reads():
    """What a restart's first batch reads ahead just before it fires timers
    (``ShardState.prefetch_timers``: the chunks' read-ahead may have pushed the heads out of
    the block cache) is what firing them reads: the timers up to the limit, each key group's
    range ending there (not every later timer), so ``due`` reads at most the block of the
    first later timer of a key group; nothing at all when every timer is due."""
    import dkv
    from objectspace import ObjectSpace
    from spark_ops._runtime import END_OF_TIME
    from spark_ops._timers import EVENT_TIME, PROCESSING_TIME, TimerService, timer_key
    from tests.dkv.dkv_helpers import RemoteMemory

    store, groups, rng = RemoteMemory(), range(0, 48), random.Random(5)
    db = dkv.open(store, table_bytes=16 * 1024, block_bytes=512, max_replay_bytes=1)
    timers, model = TimerService(db, groups), []
    for kg in groups:          # timers between objects' records, as a shard's key groups hold both
        space = ObjectSpace(db, dkv.key_prefix(kg, 0))
        space.create_queue("q", (rng.random() for _ in range(200)))
        space.checkpoint()
        for i in range(40):
            kind, due = rng.choice((EVENT_TIME, PROCESSING_TIME)), rng.randrange(1000)
            timers.register(kg, kind, due, (f"user-{kg}-{i}",), "t")
            model.append((kind, due, kg, (f"user-{kg}-{i}",), "t"))
    db.checkpoint().wait()
    db.compact(full=True)
    db.wait_idle()
    db.close()

    def expected(kind, limit):
        return sorted((due, kg, key, name) for k, due, kg, key, name in model if k == kind and due <= limit)

    for kind, limit in ((EVENT_TIME, 100), (PROCESSING_TIME, END_OF_TIME)):
        db = dkv.open(store, read_only=True)       # a restart: nothing in memory
        timers = TimerService(db, groups)
        ranges = timers.due_ranges(kind, limit)
        assert [lo for lo, _ in ranges] == [lo for lo, _ in timers.head_ranges() if lo[-1] == kind]
        assert all(lo < hi <= timer_key(kg, kind, limit + 1, (), "") for (lo, hi), kg in zip(ranges, groups))
        store.reads.clear()
        done = db.prefetch(ranges)
        assert done["requests"] > 0 and done["tables"] > 1, done
        before = len(store.table_reads())
        fired = timers.due(kind, limit)
        assert sorted(fired) == expected(kind, limit) and [t[:2] for t in fired] == sorted(t[:2] for t in fired)
        later = len(store.table_reads()) - before
        assert later == 0 if limit == END_OF_TIME else later <= len(groups), later
        db.close()
    # Once every stored timer of a kind is known to be later than a limit (those fired stay
    # stored until the caller deletes them), nothing is read for it.
    first = min(due for kind, due, *_ in model if kind == EVENT_TIME)
    db = dkv.open(store, read_only=True)
    timers = TimerService(db, groups)
    timers.due(EVENT_TIME, first)
    assert timers.due_ranges(EVENT_TIME, first - 1) == [] and timers.due(EVENT_TIME, first - 1) == []
    assert timers.due_ranges(EVENT_TIME, first) != []
    db.close()
