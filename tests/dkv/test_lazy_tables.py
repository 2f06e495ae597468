"""SSTs on S3 read lazily (issue 34, Restart): a table that a restart touches little is read
by range; one it reads much is fetched whole into the local cache, once its ranged reads
would cost its size (CachedStore's rent-or-buy, ``range_read_cost``). Over the moto server,
through the fault proxy, which counts the GETs."""
from __future__ import annotations

import random
import uuid

import pytest

import dkv
from dkv.storage import CachedStore, S3Store

pytestmark = pytest.mark.s3


def _s3(proxy, s3_server, prefix: str) -> S3Store:
    return S3Store(s3_server.bucket, prefix, endpoint_url=proxy.endpoint, region_name="us-east-1",
                   max_attempts=4, read_timeout=60, retry_delay=0.01)


def _gets(proxy) -> int:
    return sum(1 for kind, *_ in proxy.log if kind == "GET")


def test_a_table_read_little_is_read_by_range_then_fetched_whole(s3_fault_proxy, s3_server, tmp_path):
    proxy = s3_fault_proxy
    inner = _s3(proxy, s3_server, "lazy-" + uuid.uuid4().hex)
    data = random.Random(1).randbytes(512 * 1024)
    inner.put("t.sst", data)
    store = CachedStore(inner, str(tmp_path / "cache"), 1 << 30, cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=64 * 1024)
    proxy.log.clear()
    # Each 4 KiB read is charged 4 KiB + 64 KiB; a read is rented while the charges before
    # it and its bytes stay under the object's 512 KiB: eight reads...
    for i in range(8):
        lo = i * 60_000
        assert store.get("t.sst", lo, lo + 4096) == data[lo:lo + 4096]
    assert _gets(proxy) == 8 and store.ranged_reads == 8 and store.ranged_bytes == 8 * 4096
    assert store.cached_bytes == 0
    # ... and the ninth buys: the object is fetched whole (one GET, within a part), and every
    # later read is local.
    assert store.get("t.sst", 500_000, 500_100) == data[500_000:500_100]
    assert _gets(proxy) == 9 and store.cached_bytes == len(data)
    assert store.get("t.sst", 0, 10) == data[:10] and store.get("t.sst") == data
    assert _gets(proxy) == 9 and store.ranged_reads == 8


def test_a_range_that_is_the_whole_object_is_kept(s3_fault_proxy, s3_server, tmp_path):
    proxy = s3_fault_proxy
    inner = _s3(proxy, s3_server, "lazy-" + uuid.uuid4().hex)
    inner.put("small.sst", b"s" * 3000)
    inner.put("wal.seg", b"w" * 3000)
    store = CachedStore(inner, str(tmp_path / "cache"), 1 << 30, cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=1 << 20)
    proxy.log.clear()
    assert store.get("small.sst", 0, 64 * 1024) == b"s" * 3000     # a table's tail read past its size
    assert store.cached_bytes == 3000 and store.ranged_reads == 0
    assert store.get("small.sst", 100, 200) == b"s" * 100
    assert store.get("wal.seg", 10, 20) == b"w" * 10 and store.get("wal.seg", 10, 20) == b"w" * 10
    assert _gets(proxy) == 3                # not cacheable: every read goes to S3, as before
    store.delete("small.sst")
    assert store.cached_bytes == 0 and inner.size("small.sst") is None


def _state(location, n: int, seed: int = 7) -> dict:
    """A store of n keys in several SSTs at a checkpoint; the model of its contents."""
    rng = random.Random(seed)
    model = {}
    db = dkv.open(location, table_bytes=512 * 1024, memtable_bytes=1 << 20, block_bytes=1024,
                  background=False)
    for i in range(n):
        key = b"user-%06d" % i
        model[key] = rng.randbytes(rng.randrange(20, 120))
        db.put(key, model[key])
    db.checkpoint(1, flush=True).wait()
    db.close()
    return model


def test_a_restart_that_touches_few_keys_reads_blocks_and_one_that_touches_all_fetches_tables(
        s3_fault_proxy, s3_server, tmp_path):
    proxy = s3_fault_proxy
    inner = _s3(proxy, s3_server, "restart-" + uuid.uuid4().hex)
    model = _state(CachedStore(inner, str(tmp_path / "writer"), cacheable=lambda k: k.endswith(".sst")), 40_000)
    tables = {k: s for k, s in inner.list() if k.endswith(".sst")}
    assert len(tables) >= 4 and min(tables.values()) > 256 * 1024, tables

    # A fresh machine (an empty cache folder) reads five keys: a few ranged GETs per table.
    store = CachedStore(inner, str(tmp_path / "fresh"), cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=16 * 1024)
    db = dkv.open(store, read_only=True)
    proxy.log.clear()
    few = random.Random(3).sample(sorted(model), 5)
    assert [db.get(k) for k in few] == [model[k] for k in few]
    assert store.cached_bytes == 0 and 0 < store.ranged_reads <= _gets(proxy)
    assert store.ranged_bytes < sum(tables.values()) / 4
    # Reading every key fetches each table whole once its ranged reads would cost its size;
    # a table then costs at most its size in ranged reads first (about twice its bytes in all).
    assert all(db.get(k) == v for k, v in model.items())
    assert store.cached_bytes == sum(tables.values())
    assert store.ranged_bytes + 16 * 1024 * store.ranged_reads < 2 * sum(tables.values())
    db.close()

    # range_read_cost=0: each table whole at its first read, as before.
    eager = CachedStore(inner, str(tmp_path / "eager"), cacheable=lambda k: k.endswith(".sst"))
    db = dkv.open(eager, read_only=True)
    assert [db.get(k) for k in few] == [model[k] for k in few]
    assert eager.ranged_reads == 0 and eager.cached_bytes > store.ranged_bytes
    db.close()


def test_the_option_reaches_the_store_of_an_s3_url_and_bad_values_are_named(s3_server, tmp_path):
    from dkv.storage import RANGE_READ_COST, open_store
    url = f"s3://{s3_server.bucket}/opt-{uuid.uuid4().hex}"
    assert open_store(url, cache_dir=str(tmp_path / "c")).range_read_cost == RANGE_READ_COST == 4 << 20
    assert open_store(url, cache_dir=str(tmp_path / "c"), range_read_cost=0).range_read_cost == 0
    model = _state(url, 3000)
    db = dkv.open(url, read_only=True, cache_dir=str(tmp_path / "c"), range_read_cost=4096)
    key = sorted(model)[1234]
    assert db.get(key) == model[key]
    db.close()
    for bad in (-1, 1.5, True, "1m"):
        with pytest.raises(ValueError, match=r"range_read_cost must be an int >= 0, got"):
            dkv.open(url, range_read_cost=bad)


def test_ranged_reads_of_remote_objects_answer_as_the_store_does(s3_server, tmp_path):
    """The ranges of the storage contract, each read by range from S3 (nothing local yet),
    answer the same bytes as a slice: clipped at the end, empty past it."""
    inner = S3Store(s3_server.bucket, "lazy-contract-" + uuid.uuid4().hex)
    data = bytes(range(256)) * 4
    n = len(data)
    cases = [(0, 1), (10, 20), (n - 1, n), (None, 5), (5, None), (n - 4, n + 100), (n + 10, n + 20), (n, None),
             (7, 7)]
    for i, (start, end) in enumerate(cases):
        inner.put(f"o{i}.sst", data)
        store = CachedStore(inner, str(tmp_path / f"c{i}"), cacheable=lambda k: k.endswith(".sst"),
                            range_read_cost=10 * n)
        assert store.get(f"o{i}.sst", start, end) == data[start:end], (start, end)
        assert store.get(f"o{i}.sst") == data
    inner.put("empty.sst", b"")
    store = CachedStore(inner, str(tmp_path / "e"), cacheable=lambda k: k.endswith(".sst"), range_read_cost=10)
    assert store.get("empty.sst", 0, 10) == b"" and store.get("empty.sst") == b""


class _SlowSized:
    """An in-memory remote store whose reads tell the size and take a little while (readers
    overlap), counting its requests."""

    def __init__(self, objects: dict) -> None:
        from dkv.storage import MemoryStore
        self.inner = MemoryStore()
        for k, v in objects.items():
            self.inner.put(k, v)
        self.requests = 0

    def wrap(self):
        outer = self
        from dkv.storage.wrappers import _Forwarding

        class Store(_Forwarding):
            def get(self, key, start=None, end=None):
                outer.requests += 1
                import time
                time.sleep(0.002)
                return outer.inner.get(key, start, end)

            def get_sized(self, key, start=None, end=None):
                data = self.get(key, start, end)
                return data, outer.inner.size(key)
        return Store(self.inner)


def test_readers_at_once_share_the_bound_and_a_delete_ends_the_rent(tmp_path):
    import threading
    data = random.Random(5).randbytes(200_000)
    remote = _SlowSized({"t.sst": data, "u.sst": data})
    store = CachedStore(remote.wrap(), str(tmp_path / "c"), cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=10_000)
    errors = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(40):
                lo = rng.randrange(len(data))
                hi = lo + rng.randrange(1, 3000)
                assert store.get("t.sst", lo, hi) == data[lo:hi]
        except Exception as e:      # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # 320 reads: each rented read is charged ~10 KB, so the object (200 KB) was bought after
    # about 20 of them whatever the interleaving, then read locally.
    assert store.cached_bytes == len(data) and "t.sst" not in store._rented
    assert store.ranged_reads < 40 and remote.requests < 45
    # Edge ranges: an empty one asks nothing; a negative start is clipped to 0, as in HTTP.
    before = remote.requests
    assert store.get("u.sst", 7, 7) == b"" and remote.requests == before
    assert store.get("u.sst", -5, 9) == data[:9]
    store.delete("u.sst")
    assert "u.sst" not in store._rented


def test_a_big_tables_first_read_takes_its_metadata_with_its_footer(tmp_path):
    """One request opens a big table: its tail read is a thirty-second of it (TAIL_SHARE),
    which holds the metadata (bloom filter, index) a read of TAIL_READ alone would miss."""
    from dkv._table import TAIL_READ, TAIL_SHARE
    from dkv.storage import LocalDirStore, LoggingStore
    rng = random.Random(9)
    model = {b"user-%07d" % i: rng.randbytes(60) for i in range(120_000)}
    with dkv.open(str(tmp_path / "db"), table_bytes=16 << 20, background=False) as w:
        for k, v in model.items():
            w.put(k, v)
        w.checkpoint(1, flush=True).wait()
        w.compact(full=True)
        w.checkpoint(2).wait()
    store = LoggingStore(LocalDirStore(str(tmp_path / "db")))
    with dkv.open(store, read_only=True) as db:
        sizes = {k: s for k, s in store.inner.list() if k.endswith(".sst")}
        store.calls.clear()
        key = sorted(model)[20_000]
        assert db.get(key) == model[key]
        reads = [c for c in store.calls if c.kind == "get" and c.key.endswith(".sst")]
    table, size = reads[0].key, sizes[reads[0].key]
    assert size // TAIL_SHARE > TAIL_READ
    assert reads[0].range == (size - size // TAIL_SHARE, size)
    assert [c.key for c in reads[1:]] == [table] and reads[1].range[1] <= size - TAIL_READ   # then one block


def test_a_failed_ranged_read_is_not_charged_and_a_missing_object_is_named(tmp_path):
    from dkv.errors import ObjectMissingError
    data = random.Random(7).randbytes(50_000)
    remote = _SlowSized({"t.sst": data})
    store = CachedStore(remote.wrap(), str(tmp_path / "c"), cacheable=lambda k: k.endswith(".sst"),
                        range_read_cost=1000)
    assert store.get("t.sst", 0, 100) == data[:100]
    charged = store._rented["t.sst"][0]
    with pytest.raises(ObjectMissingError):
        store.get("gone.sst", 0, 100)
    remote.inner.delete("t.sst")
    with pytest.raises(ObjectMissingError):
        store.get("t.sst", 100, 200)
    assert store._rented["t.sst"][0] == charged and store.cached_bytes == 0
