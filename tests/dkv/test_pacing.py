"""Paced background writes (option ``pace``): a flush spreads its tables over several
checkpoint intervals instead of landing in one, waiting callers are never stuck behind the
pacing, and a writer that catches up (refresh) while its paced flush is half-written ends
with the same, complete state."""
from __future__ import annotations

import logging
import random
import subprocess
import sys
import time

import pytest

import dkv
from dkv._pacer import MIN_GRANT
from dkv.storage import LoggingStore, MemoryStore
from .dkv_helpers import contents


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")


PACED = dict(memtable_bytes=200_000, flush_segments=4, table_bytes=8_000, pace=2.0, compaction=False,
             wal_zstd_level=1)


def fill(db, model, rng, n, space=100_000):
    for _ in range(n):
        k, v = b"\x00\x01k%07d" % rng.randrange(space), rng.randbytes(40)
        db.put(k, v)
        model[k] = v


def _sst_bytes(store: LoggingStore) -> int:
    return sum(c.nbytes for c in store.calls if c.kind == "put" and "/sst/" in "/" + c.key)


def _settle(db, seconds=0.3):
    """Give the flush thread time to spend what it was granted (pacing is about bytes,
    not time: waiting longer must not let it write more)."""
    time.sleep(seconds)


def _intervals(pace: float):
    """39 checkpoint intervals of 300 writes each: (store, db, model, SST bytes written in each
    interval, WAL bytes of each checkpoint)."""
    store = LoggingStore(MemoryStore())
    rng, model = random.Random(1), {}
    db = dkv.open(store, **{**PACED, "pace": pace})
    per_interval, wal = [], []
    for epoch in range(1, 40):
        fill(db, model, rng, 300)
        store.clear()
        cp = db.checkpoint(epoch)
        cp.wait()
        if pace:
            _settle(db)
        else:
            db.wait_idle()
        per_interval.append(_sst_bytes(store))
        wal.append(cp.wal_bytes)
    return store, db, model, per_interval, wal


def test_a_paced_flush_spreads_over_checkpoints_and_keeps_every_record():
    store, db, model, per_interval, wal = _intervals(PACED["pace"])
    flushing = [b for b in per_interval if b]
    assert len(flushing) >= 4, per_interval           # the flushes took several intervals each
    # each interval writes about pace x its WAL bytes: at most one grant, plus one table past
    # it (and one racing the measurement)
    allowance = PACED["pace"] * max(max(wal), MIN_GRANT) + 2 * PACED["table_bytes"]
    assert max(per_interval) <= allowance, (per_interval, wal)
    assert db.stats()["pacing"]["waits"] > 0
    assert contents(db) == model
    last = db.checkpoints()[-1].epoch
    db.close()
    with dkv.open(store.inner, checkpoint=last, read_only=True) as r:
        assert contents(r) == model
    dkv.verify(store.inner)


def test_unpaced_the_same_flush_lands_in_one_interval():
    store, db, model, per_interval, wal = _intervals(0.0)
    # the bound the paced run keeps is broken: a whole memtable lands in one interval
    assert max(per_interval) > PACED["pace"] * max(max(wal), MIN_GRANT) + 2 * PACED["table_bytes"], (per_interval, wal)
    assert contents(db) == model
    db.close()


@pytest.mark.parametrize("how", ["flush", "wait_idle", "compact", "flushing checkpoint", "stalled writes"])
def test_waiting_callers_hurry_the_pacer(how):
    """No checkpoint ever grants tokens here: each way of waiting must still finish."""
    rng, model = random.Random(2), {}
    db = dkv.open(MemoryStore(), **{**PACED, "max_sealed_memtables": 1, "compaction": True})
    fill(db, model, rng, 4000 if how == "stalled writes" else 2500)   # seals (and stalls) on its own
    if how == "flush":
        db.flush()
        assert db.stats()["sealed_memtables"] == 0
    elif how == "wait_idle":
        db.wait_idle()
        assert not db.stats()["flush_pending"]
    elif how == "compact":
        db.flush()
        db.compact(full=True)
        assert db.stats()["levels"][0]["tables"] == 0
    elif how == "flushing checkpoint":
        db.checkpoint(1, flush=True).wait()
        assert db.stats()["sealed_memtables"] == 0
    assert contents(db) == model
    db.close()


def test_close_and_interpreter_exit_do_not_wait_for_pacing(tmp_path):
    code = f"""
import random, dkv
db = dkv.open({str(tmp_path)!r}, memtable_bytes=100_000, table_bytes=4_000, pace=1.0, fsync=False)
rng = random.Random(3)
for i in range(3000):
    db.put(b"k%07d" % rng.randrange(10**6), rng.randbytes(40))
db.checkpoint(1).wait()
print("sealed", db.stats()["sealed_memtables"])
# left open on purpose: the paced flush waits for tokens that never come
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("sealed ")
    db = dkv.open(str(tmp_path), memtable_bytes=100_000, pace=1.0)
    assert len(contents(db)) > 2900
    db.close()


def _half_flushed(seed):
    """A paced writer whose flush is half-written, waiting for tokens:
    (store, db, model, rng, last epoch)."""
    rng, model = random.Random(seed), {}
    store = MemoryStore()
    db = dkv.open(store, **PACED)
    epoch = 0
    while not (db.stats()["flush_pending"] and db._writing):
        fill(db, model, rng, 400)
        epoch += 1
        db.checkpoint(epoch).wait()
        _settle(db, 0.1)
    return store, db, model, rng, epoch


def _checkpoint_on(db, model, rng, epoch):
    """Write and checkpoint on, so the grants let the flush finish; then wait for it."""
    for _ in range(30):
        fill(db, model, rng, 100)
        epoch += 1
        db.checkpoint(epoch).wait()
        _settle(db, 0.05)
    db.wait_idle()


def _check_all(store, db, model):
    """The writer, a reopened reader and verify() all agree with the model."""
    assert contents(db) == model
    db.close()
    with dkv.open(store, read_only=True) as r:
        assert contents(r) == model
    dkv.verify(store)


@pytest.mark.parametrize("between", [1, 2], ids=["one-writer-between", "two-writers-between"])
@pytest.mark.parametrize("seed", range(3))
def test_refresh_while_a_paced_flush_is_half_written(seed, between):
    """Writer A's flush is half-written (waiting for tokens) when writer B takes over the
    instance (a Spark shard moving to another worker). A's checkpoint reserves its tables in
    flight, so B leaves them alone and A, catching up by refresh, goes on with its flush. With
    a third writer C between (opened from B's checkpoint), C collects them: A's refresh
    notices and writes them again, or declines and A reopens. Either way nothing is lost."""
    store, a, model, rng, epoch = _half_flushed(seed)
    in_flight = set(a._written_unpublished())
    for _ in range(between):
        b = dkv.open(store, **PACED)              # takes over: A is fenced
        for _ in range(rng.randrange(1, 4)):
            fill(b, model, rng, 200)
            epoch += 1
            b.checkpoint(epoch).wait()
        b.close()
    survived = {n for n in in_flight if store.exists(n)}
    changed = a.refresh(epoch)
    if between == 1:
        assert survived == in_flight, "B kept the tables A's checkpoint reserved"
        assert changed is not None and a._gen == 0, "A goes on with its flush"
    else:
        assert survived != in_flight, "C, opened from B's checkpoint, collected A's orphans"
        assert changed is None or a._gen == 1
    if changed is None:
        a.close()
        a = dkv.open(store, **PACED)
    _checkpoint_on(a, model, rng, epoch)
    _check_all(store, a, model)


def test_a_paced_flush_counts_as_one_l0_run_also_after_a_reopen():
    """The L0 compaction trigger counts sorted runs: the many small tables of one paced flush
    are one run, before and after a reopen (else a reopen would start a needless compaction)."""
    rng, model = random.Random(5), {}
    store = MemoryStore()
    db = dkv.open(store, **{**PACED, "flush_segments": 100})
    epoch = 0
    for epoch in range(1, 6):
        fill(db, model, rng, 300)
        db.checkpoint(epoch).wait()
    db.flush()                              # one flush, cut in paced-size tables
    version = db._view[1]
    assert len(version.l0) >= 5 and version.l0_runs() == 1
    db.checkpoint(epoch + 1).wait()         # references the flushed tables
    db.close()
    with dkv.open(store, read_only=True) as r:
        assert len(r._view[1].l0) >= 5 and r._view[1].l0_runs() == 1
        assert contents(r) == model


def test_a_replaced_writer_pauses_its_paced_flush_until_it_catches_up():
    """When another writer takes the instance over (the shard runs in another Spark worker),
    the old writer's paced flush stops writing tables — they would duplicate the new writer's
    work — and goes on after a refresh makes it current again."""
    store, a, model, rng, epoch = _half_flushed(9)
    b = dkv.open(store, **PACED)
    fill(b, model, rng, 100)
    epoch += 1
    b.checkpoint(epoch).wait()
    b.close()
    old_writer = a._writer

    def a_tables():
        return {n for n, _ in store.list("sst/") if n.split("/")[-1].startswith("%010d-" % old_writer)}

    time.sleep(0.3)                      # a table being written when B claimed may land
    before = a_tables()
    a._pacer.grant(10 << 20)             # plenty of allowance: only the fence holds it back
    time.sleep(1.2)
    assert a_tables() == before, "a fenced writer wrote flush tables"
    assert a.stats()["flush_pending"]
    assert a.refresh(epoch) is not None
    _checkpoint_on(a, model, rng, epoch)
    assert not a.stats()["flush_pending"]
    _check_all(store, a, model)
