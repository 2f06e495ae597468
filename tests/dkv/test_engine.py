"""The engine between the API and storage: memtables, flushes, compactions, the read path,
the block cache, and the background threads."""
from __future__ import annotations

import logging
import random
import sys
import threading
import time

import pytest

import dkv
from dkv.storage import InjectedFault, LoggingStore, MemoryStore, ObjectStore
from .dkv_helpers import SMALL, contents, expected_scan


def _levels(db) -> list:
    return [lv["tables"] for lv in db.stats()["levels"]]


def test_reads_through_every_layer():
    """Values live in the active memtable, L0 tables and deeper levels at once; the newest
    version wins and a tombstone in a newer layer hides an older value."""
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, compaction=False, table_bytes=600))
    model = {}
    for i in range(300):                      # generation 1 -> several L0 tables
        model[b"k%03d" % i] = b"g1-%d" % i
        db.put(b"k%03d" % i, model[b"k%03d" % i])
    db.compact(full=True)                     # -> the last level
    assert _levels(db)[0] == 0 and sum(_levels(db)[1:]) >= 2
    for i in range(0, 300, 3):                # generation 2 in L0
        model[b"k%03d" % i] = b"g2-%d" % i
        db.put(b"k%03d" % i, model[b"k%03d" % i])
    for i in range(1, 300, 7):
        db.delete(b"k%03d" % i)
        model.pop(b"k%03d" % i)
    db.flush()
    assert _levels(db)[0] >= 1
    for i in range(2, 300, 11):               # generation 3 in the active memtable
        model[b"k%03d" % i] = b"g3-%d" % i
        db.put(b"k%03d" % i, model[b"k%03d" % i])
    db.delete(b"k000")
    model.pop(b"k000")
    assert db.stats()["memtable_records"] > 0
    for i in range(-5, 310):
        k = b"k%03d" % i
        assert db.get(k) == model.get(k), k
    assert contents(db) == model
    assert list(db.scan(b"k100", b"k150")) == expected_scan(model, b"k100", b"k150")
    assert list(db.scan_prefix(b"k29")) == expected_scan(model, b"k29", b"k2:")
    db.close()


def test_full_compaction_drops_tombstones_and_shadowed_versions():
    store = MemoryStore()
    db = dkv.open(store, background=False, **SMALL)
    model = {}
    for gen in range(5):
        for i in range(100):
            k = b"k%03d" % i
            if (i + gen) % 4 == 0:
                db.delete(k)
                model.pop(k, None)
            else:
                db.put(k, b"%d" % gen)
                model[k] = b"%d" % gen
    db.flush()
    db.compact(full=True)
    db.checkpoint(1).wait()
    assert _levels(db)[0] == 0
    report = dkv.verify(store)
    assert report["wal_segments"] == 0
    assert report["records"] == len(model), "one record per live key: no tombstone, no old version"
    assert contents(db) == model
    db.close()


def test_compaction_off_keeps_l0_and_reads_stay_right():
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, compaction=False))
    model = {}
    for i in range(400):
        model[b"k%03d" % (i % 150)] = b"%d" % i
        db.put(b"k%03d" % (i % 150), b"%d" % i)
    assert len(_levels(db)) == 1 and _levels(db)[0] >= SMALL["l0_trigger"]
    assert contents(db) == model
    db.close()


def test_automatic_compaction_builds_levels():
    db = dkv.open(MemoryStore(), background=False, **SMALL)
    model = {}
    rng = random.Random(1)
    for i in range(3000):
        k = b"k%04d" % rng.randrange(1500)
        model[k] = b"%d" % i
        db.put(k, model[k])
    levels = _levels(db)
    assert levels[0] < SMALL["l0_trigger"] and len(levels) >= 3, levels
    assert db.stats()["compactions"] > 0
    assert contents(db) == model
    db.close()


def test_overwrites_do_not_grow_the_memtable():
    db = dkv.open(MemoryStore(), background=False)
    db.put(b"key", b"x" * 100)
    size = db.stats()["memtable_bytes"]
    for _ in range(1000):
        db.put(b"key", b"y" * 100)
    assert db.stats()["memtable_bytes"] == size
    db.put(b"key", b"z" * 10)
    assert db.stats()["memtable_bytes"] == size - 90
    assert db.stats()["memtable_records"] == 1
    db.close()


def test_memtable_sorted_view_made_anew_after_many_unscanned_writes():
    """A scan, then more new keys than the view holds through put() and write() without one
    (the next scan makes the view anew rather than merging), then scans again: each sees
    exactly the dict's keys in order, a scan started before included. Writers never touch
    the view: it says how many of the dict's keys it holds."""
    rng = random.Random(3)
    db = dkv.open(MemoryStore(), background=False, memtable_bytes=64 << 20)
    model = {}
    for i in range(50):
        model[b"a%05d" % i] = b"v"
        db.put(b"a%05d" % i, b"v")
    it = db.scan()
    first = next(it)
    for round_ in range(3):
        wb = dkv.WriteBatch()
        for _ in range(2 * len(model) + 100):
            k = b"k%07d" % rng.randrange(10 ** 7)
            model[k] = b"%d" % round_
            if rng.random() < 0.5:
                wb.put(k, model[k])
            else:
                db.put(k, model[k])
        db.write(wb)
        view = db._active._view
        assert view is not None and view[1] < len(db._active.data) - view[1]   # writes left it as it was
        assert list(db.scan()) == sorted(model.items())
        assert db._active._view[1] == len(db._active.data)
        db.put(b"z%d" % round_, b"after")
        model[b"z%d" % round_] = b"after"
    assert first == (b"a00000", b"v") and len(list(it)) >= 49     # the early scan still works


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_scan_while_deleting_every_key_seen(background):
    db = dkv.open(MemoryStore(), background=background, **SMALL)
    model = {b"k%04d" % i: b"v%d" % i for i in range(600)}
    for k, v in model.items():
        db.put(k, v)
    seen = []
    for k, v in db.scan():
        assert v == model[k]
        seen.append(k)
        db.delete(k)
    assert seen == sorted(model)
    assert contents(db) == {}
    db.close()


def test_scan_resumes_when_compaction_collects_its_files():
    """A scan started on tables that a compaction replaces (and garbage collection deletes)
    continues on the new tables and returns every record once."""
    store = LoggingStore(MemoryStore())
    db = dkv.open(store, background=False, **dict(SMALL, block_cache_bytes=1, compaction=False))
    model = {b"a%04d" % i: b"v%d" % i for i in range(400)}
    for k, v in model.items():
        db.put(k, v)
    db.flush()
    it = db.scan_prefix(b"a")
    first = [next(it) for _ in range(100)]
    for i in range(400):
        db.put(b"z%04d" % i, b"other")
    db.compact(full=True)
    assert any(c.kind == "delete" and c.key.endswith(".sst") for c in store.calls), "inputs were collected"
    rest = list(it)
    assert first + rest == sorted(model.items())
    db.close()


def test_tiny_block_cache_stays_within_budget_and_correct():
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, block_cache_bytes=4000))
    model = {b"k%04d" % i: b"v" * 30 for i in range(800)}
    for k, v in model.items():
        db.put(k, v)
    db.compact(full=True)
    rng = random.Random(2)
    for _ in range(2000):
        k = b"k%04d" % rng.randrange(900)
        assert db.get(k) == model.get(k)
    assert contents(db) == model
    cache = db.stats()["block_cache"]
    assert cache["misses"] > 0
    assert cache["bytes"] <= 4000 + 2000       # the budget plus at most the block being admitted
    db.close()


def test_a_block_cache_resized_while_open_drops_blocks_at_once_and_reads_the_same():
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, block_cache_bytes=1 << 20))
    model = {b"k%04d" % i: b"v" * 30 for i in range(800)}
    for k, v in model.items():
        db.put(k, v)
    db.compact(full=True)
    assert contents(db) == model
    full = db.stats()["block_cache"]["bytes"]
    assert full > 8000                          # every block read once, all kept
    assert db.stats()["block_cache"]["budget"] == 1 << 20
    db.resize_block_cache(4000)
    assert db.stats()["block_cache"]["budget"] == 4000
    assert db.stats()["block_cache"]["bytes"] <= 4000       # dropped before it returns
    rng = random.Random(3)
    for _ in range(1000):
        k = b"k%04d" % rng.randrange(900)
        assert db.get(k) == model.get(k)
    assert db.stats()["block_cache"]["bytes"] <= 4000 + 2000
    db.resize_block_cache(1 << 20)              # larger again: the blocks read from now on stay
    assert contents(db) == model and db.stats()["block_cache"]["bytes"] > 8000
    for bad in (-1, 1.5, "1m", None):
        with pytest.raises(ValueError, match="resize_block_cache: nbytes must be an int >= 0"):
            db.resize_block_cache(bad)
    assert contents(db) == model
    db.close()


def test_scans_read_ahead_within_a_tiny_block_cache_and_count_every_block():
    # A scan that misses reads the following blocks with the same read and admits them as
    # one run: each counts as a miss, the budget holds, and what the scans return is right.
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, block_cache_bytes=3000))
    model = {b"u%02d/%04d" % (i % 37, i): b"v%d" % i * 8 for i in range(1500)}
    for k, v in model.items():
        db.put(k, v)
    db.compact(full=True)
    blocks = sum(len(t.meta().offsets) for t in db._view[1].levels[-1] or db._view[1].l0)
    for u in range(37):
        p = b"u%02d/" % u
        assert list(db.scan_prefix(p)) == sorted((k, v) for k, v in model.items() if k.startswith(p))
        assert db.stats()["block_cache"]["bytes"] <= 3000 + 3000
    assert list(db.scan()) == sorted(model.items())
    cache = db.stats()["block_cache"]
    assert cache["misses"] >= blocks          # the full scan alone reads every block again
    db.close()


def test_block_checksums_are_zlibs_crc32_whichever_library_computes_them():
    # The formats name zlib's CRC-32; ISA-L's computes the same values (faster), so files
    # written with either read with the other.
    import zlib
    from dkv.format._codec import crc32
    rng = random.Random(5)
    for n in (0, 1, 7, 4096, 65536 + 13):
        data = rng.randbytes(n)
        assert crc32(data) == zlib.crc32(data)
        assert crc32(memoryview(data)[3:], crc32(data[:3])) == zlib.crc32(data)
        assert crc32(data, 12345) == zlib.crc32(data, 12345)


def test_block_cache_counts_hits():
    db = dkv.open(MemoryStore(), background=False, **SMALL)
    for i in range(300):
        db.put(b"k%04d" % i, b"v" * 30)
    db.compact(full=True)
    for _ in range(3):
        for i in range(300):
            db.get(b"k%04d" % i)
    cache = db.stats()["block_cache"]
    assert cache["misses"] > 0 and cache["hits"] >= 300
    db.close()


def test_checkpoint_never_writes_an_sst():
    store = LoggingStore(MemoryStore())
    db = dkv.open(store, background=False, **dict(SMALL, memtable_bytes=1 << 20, inline_segment_bytes=4096))
    for i in range(500):
        db.put(b"k%04d" % i, b"v" * 20)
    db.flush()
    db.checkpoint(1).wait()
    for i in range(5):
        db.put(b"k%04d" % i, b"changed")
    store.clear()
    cp = db.checkpoint(2)
    cp.wait()
    kinds = [(c.kind, c.key.split("/")[0]) for c in store.calls if c.kind in ("put", "put_if_absent")]
    assert kinds == [("put_if_absent", "manifest")], "a small segment travels inside the manifest (RFC 0007)"
    assert cp.records == 5
    assert store.bytes_written() == cp.bytes_written < 1000
    db.close()
    with dkv.open(store.inner, read_only=True) as r:
        assert r.get(b"k0001") == b"changed" and r.get(b"k0400") == b"v" * 20


def test_background_work_is_visible_after_wait_idle():
    db = dkv.open(MemoryStore(), background=True, **SMALL)
    model = {}
    for i in range(2000):
        model[b"k%04d" % (i % 700)] = b"%d" % i
        db.put(b"k%04d" % (i % 700), model[b"k%04d" % (i % 700)])
    db.wait_idle()
    stats = db.stats()
    assert not stats["flush_pending"]
    assert stats["sealed_memtables"] < SMALL["flush_segments"] and stats["immutable_bytes"] < SMALL["flush_bytes"]
    assert contents(db) == model
    db.close()


def test_concurrent_readers_during_writes_and_compactions():
    """Readers on other threads always see, for each key, a value that was written to it."""
    db = dkv.open(MemoryStore(), background=True, **SMALL)
    written = {b"k%03d" % i: {b"0"} for i in range(200)}
    for k in written:
        db.put(k, b"0")
    stop = threading.Event()
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        try:
            while not stop.is_set():
                k = b"k%03d" % rng.randrange(200)
                v = db.get(k)
                if v not in written[k]:
                    errors.append((k, v))
                for k2, v2 in db.scan(k, k + b"\x01\xff"):
                    if v2 not in written[k2]:
                        errors.append((k2, v2))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(2)]
    for t in threads:
        t.start()
    for i in range(1, 3000):
        k = b"k%03d" % (i % 200)
        written[k].add(b"%d" % i)
        db.put(k, b"%d" % i)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    db.close()


def test_no_lost_updates_under_thread_switch_stress():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)     # switch threads as often as possible to expose races
    try:
        for seed in range(20):
            db = dkv.open(MemoryStore(), background=True, **dict(SMALL, memtable_bytes=300,
                                                                   level_base_bytes=4000, max_sealed_memtables=8))
            model = {}
            rng = random.Random(seed)
            for i in range(500):
                k = b"k%03d" % rng.randrange(200)
                db.put(k, b"%d" % i)
                model[k] = b"%d" % i
            db.wait_idle()
            got = contents(db)
            db.close()
            assert got == model, f"seed {seed}: lost updates"
    finally:
        sys.setswitchinterval(old)


class _GatedSstPuts(ObjectStore):
    """SST puts (once ``armed``) wait for ``go`` and then fail."""

    def __init__(self, armed: bool = True) -> None:
        self.inner = MemoryStore()
        self.location = "gated://"
        self.go = threading.Event()
        self.armed = armed

    def put(self, key, data):
        if self.armed and key.startswith("sst/"):
            self.go.wait()
            raise InjectedFault(f"injected error on put {key}")
        self.inner.put(key, data)

    def get(self, key, start=None, end=None):
        return self.inner.get(key, start, end)

    def put_if_absent(self, key, data):
        return self.inner.put_if_absent(key, data)

    def list(self, prefix=""):
        return self.inner.list(prefix)

    def delete(self, key):
        self.inner.delete(key)

    def size(self, key):
        return self.inner.size(key)


def test_writer_blocked_on_full_sealed_list_wakes_when_flush_fails(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")
    store = _GatedSstPuts()
    db = dkv.open(store, background=True, memtable_bytes=500, max_sealed_memtables=1)
    outcome = {}

    def writer():
        try:
            for i in range(200):
                db.put(b"k%04d" % i, b"x" * 50)
            outcome["ok"] = True
        except dkv.DkvError as e:
            outcome["error"] = e

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    for _ in range(1000):           # until the writer waits on the full sealed list
        if db.stats()["sealed_memtables"] > 1:
            break
        time.sleep(0.01)
    assert db.stats()["sealed_memtables"] > 1
    store.go.set()                  # now the flush fails
    t.join(30)                      # liveness, not speed: a hang is the failure
    blocked = t.is_alive()
    db.close()                      # wakes a stuck writer either way
    t.join()
    assert not blocked, "the writer is still blocked after the flush failed"
    assert isinstance(outcome.get("error"), dkv.DkvError)


def test_background_flush_failure_is_reported_once_then_retried(caplog):
    """A failed background flush surfaces on the next call, once; the store goes on without a
    reopen and the flush succeeds once storage works again (issue 18: a full disk freed)."""
    caplog.set_level(logging.CRITICAL, logger="dkv")
    store = _GatedSstPuts()
    store.go.set()
    db = dkv.open(store, background=True, memtable_bytes=500, max_sealed_memtables=100)
    db.put(b"a", b"1")
    db.checkpoint(1).wait()
    model = {b"a": b"1"}
    with pytest.raises(dkv.DkvError, match="background work failed.*flush of .*injected error on put sst/") as info:
        for i in range(2000):
            key = b"k%04d" % i
            try:
                db.put(key, b"x" * 50)
            finally:
                if db.get(key) is not None:     # applied, even if the call reported the failure
                    model[key] = b"x" * 50
            if i % 50 == 0:
                db.wait_idle()
    assert isinstance(info.value.__cause__, dkv.DkvError)
    store.armed = False                     # storage works again
    db.put(b"late", b"2")                   # the error was reported once: writes go on
    model[b"late"] = b"2"
    db.checkpoint(2).wait()
    db.flush()                              # the flush that failed, again: it works now
    assert db.stats()["sealed_memtables"] == 0
    db.checkpoint(3).wait()
    assert contents(db) == model
    db.close()
    for epoch, want in [(1, {b"a": b"1"}), (2, model), (3, model)]:
        with dkv.open(store.inner, checkpoint=epoch, read_only=True) as r:
            assert contents(r) == want


def test_flush_checkpoint_fails_when_an_earlier_flush_fails(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")
    store = _GatedSstPuts(armed=False)
    db = dkv.open(store, background=True, memtable_bytes=500)
    db.put(b"base", b"1")
    db.checkpoint(1).wait()
    store.armed = True
    model = {b"base": b"1"}
    i = 0
    while True:                   # until a put seals the memtable: the active one is empty
        db.put(b"k%03d" % i, b"x" * 20)
        model[b"k%03d" % i] = b"x" * 20
        i += 1
        if db.stats()["memtable_records"] == 0:
            break
    cp = db.checkpoint(2, flush=True)
    store.go.set()                # the queued flush fails
    try:
        cp.wait()
        completed = True
    except dkv.DkvError:
        completed = False
    db.close()
    with dkv.open(store.inner, read_only=True) as r:
        if completed:
            assert contents(r) == model, "checkpoint 2 completed without the sealed records"
        else:
            assert [c.epoch for c in r.checkpoints()] == [1]


@pytest.mark.parametrize("n", [10, 1500, 5000])
def test_scans_merge_small_ranges_at_once_and_big_ones_by_key_range(n, monkeypatch):
    """A scan over several sources merges a small range in one go and falls back to the
    key-range merge when the records read pass SMALL_MERGE — wherever in which source the
    threshold falls (a small threshold moves it through every source); the newest record
    wins and tombstones hide either way."""
    from dkv import _merge
    rng = random.Random(n)
    db = dkv.open(MemoryStore(), background=False, **dict(SMALL, compaction=False))
    model = {}
    for gen in range(4):                      # four sealed sources plus the active memtable
        for _ in range(n):
            k = b"q%05d" % rng.randrange(n * 2)
            if rng.random() < 0.2:
                db.delete(k)
                model.pop(k, None)
            else:
                model[k] = b"v%d-%d" % (gen, rng.randrange(1000))
                db.put(k, model[k])
        if gen < 3:
            db.checkpoint()
    for small in (_merge.SMALL_MERGE, 7, n // 2, n * 3):
        monkeypatch.setattr(_merge, "SMALL_MERGE", small)
        assert contents(db) == model
        lo, hi = b"q%05d" % (n // 3), b"q%05d" % n
        assert list(db.scan(lo, hi)) == expected_scan(model, lo, hi)
    db.close()


def test_memtable_keys_added_between_scans_wait_and_join_the_view():
    """Keys written after a scan made the sorted view wait outside it (the dict's last keys),
    through put() and write(), and the next scan sees them merged in order, a scan begun
    before them too once it reaches them; overwrites and deletes of known keys add nothing."""
    rng = random.Random(5)
    db = dkv.open(MemoryStore(), background=False, memtable_bytes=64 << 20)
    model = {}
    for i in range(9000):                      # more than a scan's chunk of 4096
        model[b"b%05d" % i] = b"v"
        db.put(b"b%05d" % i, b"v")
    long_scan = db.scan()
    seen = [next(long_scan)]
    for round_ in range(20):
        assert list(db.scan()) == sorted(model.items())
        wb = dkv.WriteBatch() if round_ % 2 else db     # write() or put()/delete()
        for _ in range(50):
            k = b"%c%05d" % (rng.choice(b"abc"), rng.randrange(12000))
            if rng.random() < 0.2 and k in model:
                del model[k]
                wb.delete(k)
            else:
                model[k] = b"%d" % round_
                wb.put(k, model[k])
        if wb is not db:
            db.write(wb)
        view_keys, held = db._active._view
        assert view_keys == sorted(list(db._active.data)[:held])    # the view: the first `held` keys written
    seen += list(long_scan)
    assert [k for k, _ in seen] == sorted(k for k, _ in seen)
    assert {k for k, _ in seen if k >= b"c"} == {k for k in model if k >= b"c"}
    assert list(db.scan()) == sorted(model.items())
    db.close()


def test_memtable_keys_added_since_the_view_are_the_dicts_last():
    """The keys a scan merges into the view are the dict's last ``len(data) - seen``, in the
    order they were written (a batch's records mostly come in ascending runs, which the sort
    merges in linear time): keys written twice in one batch, or known already, come once or
    not at all, through write() and put() alike."""
    rng = random.Random(11)
    db = dkv.open(MemoryStore(), background=False, memtable_bytes=64 << 20)
    model = {b"m%05d" % i: b"v" for i in range(0, 3000, 3)}
    for k, v in model.items():
        db.put(k, v)
    assert list(db.scan()) == sorted(model.items())
    for round_ in range(6):
        expected = []
        wb = dkv.WriteBatch() if round_ % 2 else db
        for _ in range(400):
            k = b"m%05d" % rng.randrange(3000)
            if k not in model and k not in expected:
                expected.append(k)
            model[k] = b"%d" % round_
            wb.put(k, model[k])
        if wb is not db:
            db.write(wb)
        mem = db._active
        assert list(mem.data)[mem._view[1]:] == expected
        assert list(db.scan()) == sorted(model.items())
        assert mem._view == (sorted(model), len(model))
    db.close()


def test_memtable_view_is_one_instants_keys_while_a_writer_runs():
    """Readers make the sorted view, writers never touch it: with another thread writing
    (put() and write(), switching threads every microsecond), every view a scan makes holds
    each key once, in order, and the keys added since are exactly the rest of the dict."""
    import sys
    import threading
    from dkv._memtable import Memtable

    for native in (True, False):
        mem, stop, errors = Memtable(), threading.Event(), []

        def writer():
            i = 0
            while not stop.is_set() and i < 60000:
                if i % 3:
                    mem.put(b"k%06d" % ((i * 7919) % 100000), b"v")
                else:
                    mem.apply([(b"k%06d" % ((i * 104729 + j) % 100000), b"w") for j in range(5)], 10)
                i += 1

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        t = threading.Thread(target=writer)
        t.start()
        try:
            while t.is_alive():
                keys = mem.sorted_keys() if not native else _native_sorted_keys(mem)
                view = mem._view
                if keys != sorted(set(keys)) or view is None or len(view[0]) != view[1]:
                    errors.append(len(keys))
                    break
        finally:
            stop.set()
            t.join()
            sys.setswitchinterval(old)
        assert not errors
        assert mem.sorted_keys() == sorted(mem.data) and mem._view[1] == len(mem.data)


def _native_sorted_keys(mem):
    """The C twin's sorted_keys where it is built (dkv.format._native, used by DB.scan), else the Python."""
    db = dkv.open(MemoryStore(), background=False)
    try:
        db._active = mem
        return [k for k, _ in db.scan()]
    finally:
        db._active = type(mem)()
        db.close()


def _held_encodings(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """Sealed memtables' encodings wait for the first event (set it to let them go); the
    second is set when one has started."""
    gate, started = threading.Event(), threading.Event()
    real = dkv._delta.encode

    def held_encode(*a, **kw):
        started.set()
        assert gate.wait(30)
        return real(*a, **kw)
    monkeypatch.setattr(dkv._delta, "encode", held_encode)
    return gate, started


def test_sealed_memtables_waiting_for_their_encoding_do_not_count_towards_flush_bytes(monkeypatch):
    """flush_bytes counts the sealed memtables' WAL segments (dkv/_options.py): a memtable
    sealed but not encoded yet (the upload thread behind the writer) is a dict ~10x its
    segment and must not make a flush due by its dict's size, or every seal would flush the
    dicts themselves into a small L0 table."""
    gate, _ = _held_encodings(monkeypatch)
    # (the writer itself waits past 2 * flush_bytes of sealed memtables, encoded or not)
    db = dkv.open(MemoryStore(), memtable_bytes=16 << 10, flush_bytes=64 << 10, flush_segments=100,
                  max_sealed_memtables=8, compaction=False)
    try:
        for i in range(1000):                 # ~5 memtables of 16 KiB that zstd makes ~1 KiB each
            db.put(b"key%06d" % i, b"v" * 40)
        unencoded = db._sealed_unencoded()
        assert unencoded >= 5 and db.stats()["immutable_bytes"] > (64 << 10), db.stats()
        assert not db.stats()["flush_pending"]
        gate.set()
        deadline = time.monotonic() + 30
        while db._sealed_unencoded() and time.monotonic() < deadline:
            time.sleep(0.01)
        s = db.stats()
        assert s["sealed_memtables"] == unencoded and s["immutable_bytes"] < (64 << 10)
        assert not s["flush_pending"] and _levels(db)[0] == 0
        assert db.get(b"key000007") == b"v" * 40
    finally:
        gate.set()
        db.close()



def test_no_sealed_memtable_waits_a_write_that_seals_waits_for_its_encoding(monkeypatch):
    """max_sealed_memtables=0 (spark_ops' shards): a write that seals the memtable encodes it
    before it returns, so no sealed dict is held beside the next memtable; a small checkpoint
    whose upload encodes its own segment (the stealable one) does not wait for that encoding,
    which only comes after it returns."""
    gate, encoding = _held_encodings(monkeypatch)
    db = dkv.open(MemoryStore(), memtable_bytes=4 << 10, max_sealed_memtables=0, compaction=False)
    done = threading.Event()

    def writer():
        for i in range(60):                 # 60 records of ~100 counted bytes: one seal past 4 KiB
            db.put(b"key%06d" % i, b"v" * 40)
        done.set()
    t = threading.Thread(target=writer, daemon=True)
    try:
        t.start()
        assert encoding.wait(30)
        assert not done.wait(0.3), "the write that sealed returned before its encoding"
        assert db._sealed_unencoded() == 1
        gate.set()
        assert done.wait(30)
        assert db._sealed_unencoded() == 0
        db.put(b"small", b"x")              # a checkpoint of one small record: stealable
        taken = []
        ck = threading.Thread(target=lambda: taken.append(db.checkpoint().wait(30)), daemon=True)
        ck.start()
        ck.join(30)                         # liveness: a checkpoint waiting for itself hangs
        assert taken, "the small checkpoint waited for an encoding only its own upload makes"
        assert db.get(b"small") == b"x" and db.get(b"key000007") == b"v" * 40
    finally:
        gate.set()
        t.join(30)
        db.close()


def test_max_sealed_memtables_must_not_be_negative():
    with pytest.raises(ValueError, match="max_sealed_memtables must be a non-negative int, got -1"):
        dkv.open(MemoryStore(), max_sealed_memtables=-1)


def test_no_sealed_memtable_waits_a_checkpoint_does_not_wait_for_its_own_encoding(monkeypatch):
    """With max_sealed_memtables=0 a checkpoint's seal returns before its segment is encoded
    (its upload encodes it, and Checkpoint.wait waits for that): the caller's work between
    checkpoint() and wait() overlaps the encoding, as with sealed memtables allowed."""
    gate, _ = _held_encodings(monkeypatch)
    db = dkv.open(MemoryStore(), memtable_bytes=1 << 20, max_sealed_memtables=0, compaction=False)
    try:
        for i in range(2000):               # past what a stealable checkpoint holds
            db.put(b"key%06d" % i, b"v" * 60)     # ~230 KB counted
        got = []
        t = threading.Thread(target=lambda: got.append(db.checkpoint()), daemon=True)
        t.start()
        t.join(10)
        assert got, "checkpoint() waited for its own segment's encoding"
        assert db._sealed_unencoded() == 1 and not got[0].done()
        gate.set()
        got[0].wait(30)
        assert db._sealed_unencoded() == 0 and db.get(b"key001999") == b"v" * 60
    finally:
        gate.set()
        db.close()


def test_no_sealed_memtable_waits_an_encoding_that_failed_once_does_not_stall_writes(monkeypatch):
    """With max_sealed_memtables=0 a failed encoding (say a MemoryError) reaches the write that
    sealed, which is applied; later writes seal and encode their own memtables without waiting
    for the failed one, and the next checkpoint's upload encodes it: nothing is lost."""
    real, failed = dkv._delta.encode, []

    def flaky_encode(*a, **kw):
        if not failed:
            failed.append(1)
            raise MemoryError("injected: no memory to encode")
        return real(*a, **kw)
    monkeypatch.setattr(dkv._delta, "encode", flaky_encode)
    store = MemoryStore()
    db = dkv.open(store, memtable_bytes=4 << 10, max_sealed_memtables=0, compaction=False)
    model, errors = {}, 0
    done = threading.Event()

    def writer():
        nonlocal errors
        for i in range(200):
            key = b"key%06d" % i
            try:
                db.put(key, b"v" * 40)
            except MemoryError:
                errors += 1
            model[key] = b"v" * 40
        done.set()
    t = threading.Thread(target=writer, daemon=True)
    try:
        t.start()
        assert done.wait(30), "writes stalled behind a memtable whose encoding failed"
        assert errors == 1 and db._sealed_unencoded() == 1
        db.checkpoint().wait(30)
        assert db._sealed_unencoded() == 0
        assert all(db.get(k) == v for k, v in model.items())
    finally:
        db.close()
        t.join(30)
    with dkv.open(store, read_only=True) as r:     # the checkpoint holds every write
        assert dict(r.scan()) == model
