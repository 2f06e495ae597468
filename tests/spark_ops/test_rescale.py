"""Rescale a streaming query: stop it, restart from the same checkpointLocation with another
``partitions=`` (2 -> 3 -> 1). Every key's state carries over (output equals the model's) and the
new layouts start from the old layouts' files in place (no state file is copied)."""
from __future__ import annotations

from pathlib import Path

import pytest

import dkv
import spark_ops
from dkv.format import manifest as mf
from .models import BufferModel, bag_by_key, run_model
from .spark_helpers import random_events, read_sink, read_stream, run_stream, write_batch_files

pytestmark = pytest.mark.spark


def _refs(root: Path, instance: str, epoch: int) -> set[str]:
    """Objects the checkpoint ``epoch`` of ``instance`` references (documented manifest format)."""
    (info,) = [c for c in dkv.list_checkpoints(str(root), instance) if c.epoch == epoch]
    m = mf.decode((root / info.name).read_bytes(), info.name)
    return {t.path for t in m.tables()} | {r.ns for r in m.wal}


def test_rescale_2_3_1_keeps_state_and_copies_nothing(utc_spark, tmp_path):
    batches = random_events(41, 9, keys="abcd", max_rows=10, late=False)
    expected = run_model(BufferModel(["k"], count=3, skip=2), batches, keys=["k"])
    state, src = tmp_path / "state", tmp_path / "src"
    runs = [(2, range(0, 3)), (3, range(3, 6)), (1, range(6, 9))]
    query_id = None
    for n, bids in runs:
        write_batch_files(src, [batches[b] for b in bids], start=bids[0])
        out = spark_ops.buffer(read_stream(utc_spark, src), "k", count=3, skip=2, state=str(state), partitions=n,
                               key_groups=16, dkv_options=dict(max_replay_bytes=1, compaction=False))
        q = run_stream(out, tmp_path / "out", tmp_path / "cp")
        query_id = query_id or str(q.id)
        assert str(q.id) == query_id
    got = read_sink(tmp_path / "out")
    assert sorted(got) == list(range(9))
    assert sum(map(len, expected)) >= 8
    for b in range(9):
        assert bag_by_key(got[b], "k") == bag_by_key(expected[b], "k"), f"batch {b}"

    root = state / query_id / "buffer"
    layouts = sorted(p.name for p in (root / "layouts").iterdir())
    assert layouts == ["L000000000000-n00002", "L000000000003-n00003", "L000000000006-n00001"]
    shards = {(r["batch"], r["shards"]) for r in spark_ops.read_metrics(str(state))}
    assert shards == {(b, 2 if b < 3 else 3 if b < 6 else 1) for b in range(9)}

    # the first checkpoint of each new layout references the previous layout's files, in place
    # (every checkpoint above flushes its memtable, so each layout leaves SSTs behind, and compaction
    # is off: a flush of replayed WAL or a compaction may legitimately rewrite the old files first)
    for new, old, first in [(layouts[1], layouts[0], 3), (layouts[2], layouts[1], 6)]:
        n = int(new[-5:])
        refs = set().union(*(_refs(root, f"{new}/p{s:05d}", first) for s in range(n)))
        assert any(r.startswith(old + "/") for r in refs), (new, refs)
    # and nothing under a new layout is a byte copy of an older layout's file
    data = lambda lay: {p.read_bytes() for p in (root / lay).rglob("*")   # noqa: E731
                        if p.is_file() and ("/sst/" in str(p) or "/wal/" in str(p))}
    assert not data(layouts[1]) & data(layouts[0])
    assert not data(layouts[2]) & (data(layouts[0]) | data(layouts[1]))
