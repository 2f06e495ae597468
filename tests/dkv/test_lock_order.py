"""The lock order of dkv.DB (written down in DB.__init__), checked as it runs.

With ``DKV_CHECK_LOCKS=1`` at open, a DB's six locks are ``dkv._locks.CheckedLock``s that
raise ``LockOrderError`` (and record it in ``_locks.violations``, in case a background
thread swallows it) when a thread takes a lock while holding one that comes after it in
``_wlock > _upload_lock > _gc_lock > _lock > _claim_lock > _cond``. The checks are per
acquire, not per collision: a path that takes two locks the wrong way round fails the
first time it runs, whether or not another thread was there to deadlock with. So these
tests need no timing: threads run fixed amounts of work and are joined.
"""
from __future__ import annotations

import random
import re
import threading

import pytest

import dkv
from dkv import _locks
from dkv.storage import LocalDirStore, MemoryStore
from .dkv_helpers import SMALL

ALL = {name for name, _ in _locks.ORDER}


@pytest.fixture
def checking(monkeypatch):
    """DBs opened in the test check their lock order; the test sees only its own violations."""
    monkeypatch.setenv(_locks.ENV, "1")
    monkeypatch.setattr(_locks, "violations", [])
    monkeypatch.setattr(_locks, "taken", set())
    monkeypatch.setattr(_locks, "nested", set())
    return _locks


def run_threads(targets) -> None:
    """Start every target at once (a barrier), join them all, re-raise the first failure."""
    errors: list = []
    barrier = threading.Barrier(len(targets))

    def run(fn):
        try:
            barrier.wait()
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
    threads = [threading.Thread(target=run, args=(fn,), name=f"test-{i}") for i, fn in enumerate(targets)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)     # only against a hang: a deadlock fails the test instead of the run
    assert not any(t.is_alive() for t in threads), "a thread is stuck: deadlock?"
    if errors:
        raise errors[0]


def writer(db, n: int, who: int, seed: int, model: dict):
    """``n`` puts, deletes and batches on keys only this writer writes; ``model`` follows."""
    def work():
        rng = random.Random(seed)
        for i in range(n):
            k = b"w%d-%03d" % (who, rng.randrange(150))
            r = rng.random()
            if r < 0.15:
                db.delete(k)
                model.pop(k, None)
            elif r < 0.25:
                k2 = b"w%d-%03d" % (who, rng.randrange(150))
                with db.batch() as b:
                    b.put(k, b"b%d" % i)
                    b.delete(k2)
                model[k] = b"b%d" % i
                model.pop(k2, None)
            else:
                v = b"v%d-%d" % (i, rng.randrange(10**6))
                db.put(k, v)
                model[k] = v
    return work


def reader(db, n: int, seed: int):
    def work():
        rng = random.Random(seed)
        for i in range(n):
            db.get(b"w%d-%03d" % (rng.randrange(2), rng.randrange(150)))
            if i % 50 == 0:
                for _ in db.scan_prefix(b"w%d" % rng.randrange(2)):
                    pass
    return work


def checkpointer(db, n: int, maintenance: bool = True):
    """``n`` checkpoints: waited at once (small ones upload on this thread) or later; with
    ``maintenance``, flushing ones too (pinned after the flush, on the flush thread), and
    flush(), compact() and wait_idle() between. (Without background threads those run the
    flush or compaction on the calling thread, outside the write lock: one thread at a time.)"""
    def work():
        later = []
        for i in range(n):
            cp = db.checkpoint(flush=maintenance and i % 4 == 3)
            if i % 2:
                cp.wait()
            else:
                later.append(cp)
            if maintenance and i % 5 == 4:
                db.compact()
            if maintenance and i % 7 == 6:
                db.flush()
            if maintenance and i % 6 == 5:
                db.wait_idle()
        for cp in later:
            assert cp.wait()
    return work


def follower(store, opts: dict, n: int):
    """Read-only opens of the newest checkpoint while the writer goes on (a checkpoint may
    leave retention under one: then its files may go, which is what a reader expects)."""
    def work():
        for _ in range(n):
            try:
                with dkv.open(store, read_only=True, **opts) as r:
                    for _ in r.scan():
                        pass
            except (dkv.ObjectMissingError, dkv.CheckpointNotFoundError, dkv.NotAStoreError):
                pass
    return work


@pytest.mark.parametrize("background,pace,sealed", [(True, 0.0, 1), (True, 1.5, 1), (False, 0.0, 1), (True, 1.5, 0)],
                         ids=["background", "paced", "inline", "writers-encode"])
def test_a_concurrent_workload_takes_the_locks_in_order(checking, tmp_path, background, pace, sealed):
    store = LocalDirStore(str(tmp_path / "db"), fsync=False)
    opts = dict(SMALL, background=background, pace=pace, retain=3, max_sealed_memtables=sealed,
                inline_segment_bytes=200)
    models: list = [{}, {}]
    a = dkv.open(store, **opts)
    assert isinstance(a._lock, _locks.CheckedLock)
    # 1. two writers, a reader, checkpoints (waited at once, later, flushing), flushes,
    #    compactions and garbage collection, and read-only opens, all at once
    run_threads([writer(a, 1200, 0, 1, models[0]), writer(a, 1200, 1, 2, models[1]), reader(a, 1500, 3),
                 checkpointer(a, 24, maintenance=background), follower(store, opts, 6)])
    if not background:
        checkpointer(a, 8)()
    model = {**models[0], **models[1]}
    a.checkpoint(flush=True).wait()
    a.wait_idle()
    # A checkpoint of what wait_idle waited for: a compaction that finished after the last one
    # made tables no checkpoint reserves, which the next writer collects, and refresh() below
    # would then rightly answer None (reopen) instead of the keys (seen under load, ~1 in 20).
    a.checkpoint().wait()
    assert dict(a.scan()) == model
    assert a.stats()["compactions"] > 0
    # 2. another writer takes the instance over for two checkpoints; the first catches up
    #    with refresh() while a reader reads it
    e = a.last_checkpoint
    b = dkv.open(store, **opts)
    for i in (1, 2):
        b.put(b"w9-%03d" % i, b"from b")
        model[b"w9-%03d" % i] = b"from b"
        b.checkpoint(e + i).wait()
    changed: list = []
    run_threads([lambda: changed.append(a.refresh(e + 2)), reader(a, 300, 4)])
    assert sorted(changed[0]) == [b"w9-001", b"w9-002"]
    assert dict(a.scan()) == model
    b.close()
    # 3. the first writer goes on: writes, a full compaction, checkpoints, close
    run_threads([writer(a, 300, 0, 5, model), checkpointer(a, 4, maintenance=background)])
    a.compact(full=True)
    a.checkpoint().wait()
    a.close()
    with dkv.open(store, read_only=True) as r:
        assert dict(r.scan()) == model
    assert checking.violations == []
    assert checking.taken == ALL, f"the workload never took {ALL - checking.taken}"
    assert all(_rank(outer) < _rank(inner) for outer, inner in checking.nested), checking.nested


def _rank(name: str) -> int:
    return [n for n, _ in _locks.ORDER].index(name)


def test_taking_a_lock_out_of_order_is_caught_and_names_both(checking):
    db = dkv.open(MemoryStore(), background=False)
    with db._lock:
        with pytest.raises(_locks.LockOrderError, match=r"_wlock acquired while holding _lock\b"):
            with db._wlock:
                pass
        with pytest.raises(_locks.LockOrderError, match=r"_upload_lock acquired while holding _lock\b"):
            db._upload_lock.acquire()
    with db._cond:
        with pytest.raises(_locks.LockOrderError, match=r"_gc_lock acquired while holding _cond\b"):
            db._gc_lock.acquire()
    assert len(checking.violations) == 3 and "_cond" in checking.violations[-1]
    # nothing was left held: the right order works
    with db._wlock, db._upload_lock, db._gc_lock, db._lock, db._claim_lock, db._cond:
        pass
    db.close()


def test_reentry_waits_and_try_acquires_are_no_violations(checking):
    db = dkv.open(MemoryStore(), background=False)
    with db._wlock, db._lock:
        with db._wlock, db._lock:           # reentrant locks, held already
            pass
        with db._cond:
            assert not db._cond.wait(0)     # gives _cond up and takes it back under _wlock, _lock
        assert db._upload_lock.acquire(blocking=False)    # cannot wait: not checked
        db._upload_lock.release()
    with db._gc_lock:
        with pytest.raises(_locks.LockOrderError, match="_gc_lock acquired again"):
            db._gc_lock.acquire()           # not reentrant: a certain deadlock, caught instead
    assert len(checking.violations) == 1
    db.close()


def test_the_write_lock_on_a_background_thread_is_caught_even_where_it_is_swallowed(checking):
    db = dkv.open(MemoryStore(), background=True)

    def bad():
        with db._wlock:
            pass
    # A job on the flush thread that takes _wlock: a writer stalled on the flush thread
    # holds it. The error goes to the job's future, and to the record.
    with pytest.raises(_locks.LockOrderError, match=r"_wlock acquired on background thread dkv-flush"):
        db._flusher.submit(bad).result()
    assert len(checking.violations) == 1
    db.close()


def test_a_checked_lock_order_matches_the_one_written_in_db_init():
    source = open(dkv._db.__file__, encoding="utf-8").read()
    written = re.search(r"#\s+(_wlock > [_a-z >]+)\n", source)
    assert written is not None
    assert written.group(1).strip() == " > ".join(n for n, _ in _locks.ORDER)


def test_without_the_switch_the_locks_are_threadings_own(monkeypatch):
    monkeypatch.delenv(_locks.ENV, raising=False)
    db = dkv.open(MemoryStore(), background=False)
    assert type(db._lock) is type(threading.RLock()) and type(db._gc_lock) is type(threading.Lock())
    assert type(db._cond) is threading.Condition and type(db._cond._lock) is type(threading.RLock())
    db.close()
