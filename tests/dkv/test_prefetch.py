"""DB.prefetch (issue 34, Restart): the blocks that reads of named key ranges will need,
read ahead at once: tails in parallel, block runs concurrently by range, or a table fetched
whole where that costs less. Reads return the same with or without it; a prefetch only
moves when the bytes arrive. A remote store is played by a MemoryStore that reads ranges
ahead and logs its calls; the S3 tests talk to the moto server through the fault proxy."""
from __future__ import annotations

import random
import uuid

import pytest

import dkv
from dkv.errors import ClosedError, CorruptionError
from dkv.storage import CachedStore, MemoryStore, S3Store
from .dkv_helpers import RemoteMemory


def _key(i: int, group: int = 1) -> bytes:
    return group.to_bytes(2, "big") + b"\x01user-%06d" % i


def _state(store, n: int, groups: int = 1, seed: int = 5, instance: str = "") -> dict:
    """n keys (in ``groups`` key groups) in several tables of two levels, checkpointed."""
    rng = random.Random(seed)
    model = {}
    db = dkv.open(store, instance=instance, table_bytes=96 * 1024, memtable_bytes=256 * 1024, block_bytes=1024,
                  l0_trigger=4, background=False)
    for i in range(n):
        key = _key(i, i % groups)
        model[key] = rng.randbytes(rng.randrange(20, 90))
        db.put(key, model[key])
        if i == n // 2:
            db.checkpoint(flush=True).wait()
            db.compact(full=True)
    for i in range(0, n, 7):            # newer versions of some keys, in L0 over the compacted level
        key = _key(i, i % groups)
        model[key] = b"new-%d" % i
        db.put(key, model[key])
    db.checkpoint(flush=True).wait()
    levels = db.stats()["levels"]
    db.close()
    assert levels[0]["tables"] >= 1 and sum(lv["tables"] for lv in levels) >= 3, levels
    return model


def _range(key: bytes) -> tuple[bytes, bytes]:
    return key, key + b"\x00"


def test_reads_after_a_prefetch_need_no_request_and_return_the_same():
    store = RemoteMemory()
    model = _state(store, 6000)
    db = dkv.open(store, read_only=True)
    few = random.Random(2).sample(sorted(model), 12)
    store.reads.clear()
    done = db.prefetch([_range(k) for k in few])
    prefetched = [r for r in store.table_reads() if r[0] == "prefetch"]
    assert done["tables"] >= 2 and done["requests"] == sum(len(r[2]) for r in prefetched) > 0
    assert done["cached_bytes"] > 0 and done["local_tables"] == done["left_tables"] == 0 and not done["cache_full"]
    store.reads.clear()
    assert [db.get(k) for k in few] == [model[k] for k in few]
    assert [v for _, v in db.scan(few[0], few[0] + b"\xff")] == [
        model[k] for k in sorted(model) if few[0] <= k < few[0] + b"\xff"]
    assert store.table_reads() == []        # every block those reads needed came with the prefetch
    # A second prefetch of the same keys finds their blocks in memory and reads nothing.
    again = db.prefetch([_range(k) for k in few])
    assert again["requests"] == again["cached_bytes"] == 0 and store.table_reads() == []
    db.close()


@pytest.mark.parametrize("cache", [64 * 1024, 64 << 20])
def test_reads_after_random_prefetches_match_the_model_also_in_clipped_tables(cache):
    """With a cache that holds everything, the reads after each prefetch make no request
    (the blocks chosen are the ones the reads need, in clipped tables, at boundaries, with
    open ends); with a small one, they still read right."""
    rng = random.Random(11)
    store = RemoteMemory()
    model = _state(store, 5000, groups=4, instance="whole")
    keys = sorted(model)
    # Half the key groups: the tables are clipped views of files that hold all four.
    mine = [k for k in keys if 1 <= dkv.key_group_of(k) < 3]
    epoch = dkv.list_checkpoints(store, "whole")[-1].epoch
    half = dkv.open(store, instance="half", key_group_range=(1, 3), sources=[("whole", epoch)])
    half.checkpoint().wait()
    half.close()
    for _ in range(12):
        db = dkv.open(store, instance="half", read_only=True, block_cache_bytes=cache)
        assert any(t.clip_lo is not None for t in db._view[1].tables())     # (what this test is about)
        picks = rng.sample(keys, 20)
        lo, hi = sorted(rng.sample(keys, 2))
        scan = (lo, None if rng.random() < 0.3 else hi)
        db.prefetch([_range(k) for k in picks] + [scan])
        store.reads.clear()
        for k in picks:
            if 1 <= dkv.key_group_of(k) < 3:
                assert db.get(k) == model[k]
        got = list(db.scan(*scan))
        assert got == [(k, model[k]) for k in mine if scan[0] <= k and (scan[1] is None or k < scan[1])]
        if cache > 1 << 20:
            assert store.table_reads() == []
        db.close()


@pytest.mark.parametrize("values", ["random", "compressible"])
def test_a_prefetch_fills_at_most_half_the_block_cache_and_leaves_the_rest_to_the_reads(values):
    """The bound is in the cache's cost (decoded bytes), whatever the blocks compress to."""
    store = RemoteMemory()
    db = dkv.open(store, table_bytes=96 * 1024, block_bytes=1024, max_replay_bytes=1)
    rng = random.Random(3)
    model = {}
    for i in range(6000):
        model[_key(i)] = rng.randbytes(60) if values == "random" else b'{"page": "/home", "n": %d}' % (i % 10)
        db.put(_key(i), model[_key(i)])
    db.checkpoint()
    db.close()
    db = dkv.open(store, read_only=True, block_cache_bytes=64 * 1024)
    keys = sorted(model)
    done = db.prefetch([(keys[0], None)])
    assert done["cache_full"] and 0 < done["cached_bytes"] <= 32 * 1024
    assert db.stats()["block_cache"]["bytes"] == done["cached_bytes"]
    assert all(db.get(k) == model[k] for k in keys[::37])
    db.close()


def test_a_local_store_reads_nothing_ahead():
    store = MemoryStore()
    model = _state(store, 4000)
    db = dkv.open(store, read_only=True)
    key = sorted(model)[1000]
    done = db.prefetch([_range(key)])
    assert done["local_tables"] >= 1 and done["requests"] == done["cached_bytes"] == 0
    assert db.get(key) == model[key]
    db.close()


def test_a_corrupt_block_is_reported_by_the_prefetch_and_never_read_as_data():
    store = RemoteMemory()
    model = _state(store, 4000)
    db = dkv.open(store, read_only=True)
    key = sorted(model)[2000]
    db.prefetch([_range(key)])                  # learn which block holds it
    _, path, spans, _ = next(r for r in store.table_reads() if r[0] == "prefetch")
    db.close()
    raw = bytearray(store.get(path))
    lo, hi = spans[0]
    raw[(lo + hi) // 2] ^= 0x40
    store.put(path, bytes(raw))
    db = dkv.open(store, read_only=True)
    with pytest.raises(CorruptionError, match=r"SST .*\.sst"):
        db.prefetch([_range(key)])
    with pytest.raises(CorruptionError):
        list(db.scan())                     # the reads meet the same block: never data
    db.close()


def test_bad_ranges_are_named_and_a_closed_store_refuses():
    db = dkv.open(RemoteMemory())
    for bad, err, match in ((["ab"], TypeError, r"prefetch takes .* \(lo, hi\) pairs .*got 'ab'"),
                            (b"ab", TypeError, r"prefetch takes .*got b'ab'"),
                            (5, TypeError, "prefetch takes .*got 5"),
                            ([("a", b"b")], TypeError, r"prefetch takes .* \(lo, hi\) pairs of bytes keys.*str"),
                            ([(b"b", b"a")], ValueError, r"prefetch range \(b'b', b'a'\) is empty"),
                            ([(b"", b"a")], ValueError, "prefetch")):
        with pytest.raises(err, match=match):
            db.prefetch(bad)
    assert db.prefetch([])["tables"] == 0
    db.close()
    with pytest.raises(ClosedError):
        db.prefetch([(b"a", b"b")])


def test_ranges_are_merged_where_they_overlap_or_touch():
    from dkv._prefetch import ranges_of
    assert ranges_of([(b"c", b"d"), (b"a", b"b"), (b"b", b"bb"), (b"c", None), (b"x", b"y")]) == [
        (b"a", b"bb"), (b"c", None)]


# -- CachedStore's rule for reads made together, and S3 --------------------------------------

def test_cached_store_rents_reads_made_together_until_they_cost_the_object(tmp_path):
    inner = RemoteMemory()
    data = random.Random(1).randbytes(400 * 1024)
    inner.put("t.sst", data)
    store = CachedStore(inner, str(tmp_path / "c"), cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=64 * 1024)
    # 16 ranges of 1 KiB read 8 at a time: 16 KiB + 2 round trips (128 KiB) < 400 KiB: rented.
    spans = [(i * 20_000, i * 20_000 + 1024) for i in range(16)]
    assert store.prefetch("t.sst", spans, len(data)) == [data[lo:hi] for lo, hi in spans]
    assert store.ranged_reads == 16 and store.cached_bytes == 0
    # Charged so far: 144 KiB. 40 more ranges of 4 KiB (160 + 5 x 64 KiB) pass the size: bought.
    more = [(i * 9_000, i * 9_000 + 4096) for i in range(40)]
    assert store.prefetch("t.sst", more, len(data)) is None
    assert store.cached_bytes == len(data) and store.get("t.sst", 5, 9) == data[5:9]
    # Held locally now: nothing to read ahead.
    inner.reads.clear()
    assert store.prefetch("t.sst", spans, len(data)) is None and inner.reads == []
    # range_read_cost=0: fetched whole at the first prefetch; a non-cacheable object is the inner store's.
    eager = CachedStore(inner, str(tmp_path / "e"), cacheable=lambda k: k.endswith(".sst"))
    assert eager.prefetch("t.sst", spans[:1], len(data)) is None and eager.cached_bytes == len(data)
    inner.put("w.seg", b"w" * 100)
    assert eager.prefetch("w.seg", [(0, 10)]) == [b"w" * 10]


def _s3(proxy, s3_server, prefix: str) -> S3Store:
    return S3Store(s3_server.bucket, prefix, endpoint_url=proxy.endpoint, region_name="us-east-1",
                   max_attempts=4, read_timeout=60, retry_delay=0.01)


def _gets(proxy) -> int:
    return sum(1 for kind, *_ in proxy.log if kind == "GET")


@pytest.mark.s3
def test_on_s3_a_prefetch_of_few_keys_rents_blocks_and_one_of_all_keys_fetches_tables(
        s3_fault_proxy, s3_server, tmp_path):
    proxy = s3_fault_proxy
    inner = _s3(proxy, s3_server, "prefetch-" + uuid.uuid4().hex)
    model = _state(CachedStore(inner, str(tmp_path / "writer"), cacheable=lambda k: k.endswith(".sst")), 8000)
    store = CachedStore(inner, str(tmp_path / "fresh"), cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=16 * 1024)
    db = dkv.open(store, read_only=True)
    table_bytes = sum(lv["bytes"] for lv in db.stats()["levels"])
    few = random.Random(3).sample(sorted(model), 6)
    proxy.log.clear()
    done = db.prefetch([_range(k) for k in few])
    assert done["requests"] > 0 and store.ranged_reads > 0 and store.cached_bytes < table_bytes
    before = _gets(proxy)
    assert [db.get(k) for k in few] == [model[k] for k in few]
    assert _gets(proxy) == before           # the reads found their blocks in memory
    # Every key: each table costs more by range than whole, so each is fetched whole, at once.
    keys = sorted(model)
    done = db.prefetch([(keys[0], None)])
    assert done["local_tables"] == done["tables"] and store.cached_bytes == table_bytes
    before = _gets(proxy)
    assert all(db.get(k) == v for k, v in model.items()) and _gets(proxy) == before
    db.close()


@pytest.mark.s3
def test_on_s3_a_prefetch_through_faults_reads_right_or_fails_whole(s3_fault_proxy, s3_server, tmp_path):
    from dkv.errors import StorageError
    proxy = s3_fault_proxy
    inner = _s3(proxy, s3_server, "prefetch-faults-" + uuid.uuid4().hex)
    model = _state(CachedStore(inner, str(tmp_path / "writer"), cacheable=lambda k: k.endswith(".sst")), 4000)
    proxy.uniform(0.3, faults=("503", "500", "429", "reset_before", "reset_after", "short_body"))
    ok = 0
    for attempt in range(4):
        store = CachedStore(inner, str(tmp_path / f"f{attempt}"), cacheable=lambda k: k.endswith(".sst"),
                            range_read_cost=16 * 1024)
        try:
            db = dkv.open(store, read_only=True)
        except StorageError:
            continue
        few = random.Random(attempt).sample(sorted(model), 8)
        try:
            db.prefetch([_range(k) for k in few])
            ok += 1
        except StorageError:
            pass
        proxy.clear()
        assert [db.get(k) for k in few] == [model[k] for k in few]      # never wrong data
        proxy.uniform(0.3, faults=("503", "500", "429", "reset_before", "reset_after", "short_body"))
        db.close()
    proxy.clear()
    assert ok >= 1
