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

pytestmark = pytest.mark.s3


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
