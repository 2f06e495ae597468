"""Fault injection: fail each storage call of a flush, a compaction and a checkpoint in turn.

For every call the operation makes (found by a dry run through a LoggingStore) and every
fault mode, a fresh run fails exactly that call, carries on (the next checkpoints), and
then the store is reopened on the unwrapped storage:

* ``error``, ``torn`` and ``landed`` (the call reports failure; ``landed`` after storing
  the write whole): recovery gives exactly the last checkpoint whose ``wait()`` returned,
  with its exact contents; a checkpoint whose ``wait()`` raised leaves the next one able
  to succeed, carrying its records. (One whose claims could not be listed after its
  manifest was created raised with its outcome unknown: it stays and counts, RFC 0011
  Risks; the next checkpoints supersede it.)
* ``lost`` and ``corrupt`` (storage lies: it reports success): recovery either raises a
  DkvError (CorruptionError, ObjectMissingError) on open or read, or gives the exact
  contents of the checkpoint it opens — never wrong data.

``crash_after(n)`` loses every write after the n-th (a process dying with uploads in
flight): recovery gives the newest checkpoint whose manifest was written before.
"""
from __future__ import annotations

import logging
import random

import pytest

import dkv
from dkv.storage import FaultInjectingStore, LoggingStore, MemoryStore
from dkv.storage.wrappers import WRITE_KINDS
from .dkv_helpers import SMALL, contents


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")


class Run:
    """One deterministic run (background=False) and what it has completed."""

    def __init__(self, store, opts: dict) -> None:
        self.opts = opts
        self.db = dkv.open(store, background=False, **opts)
        self.model: dict = {}
        self.snaps: dict = {}
        self.done: list = []       # epochs whose wait() returned
        self.failed: list = []     # epochs whose wait() raised
        self.epoch = 0

    def fill(self, seed: int, n: int, space: int = 60) -> None:
        rng = random.Random(seed)
        for i in range(n):
            key = b"k%03d" % rng.randrange(space)
            if rng.random() < 0.8:
                value = b"v%d-%d-" % (seed, i) + rng.randbytes(rng.randrange(1, 40))
                self.db.put(key, value)
                self.model[key] = value
            else:
                self.db.delete(key)
                self.model.pop(key, None)

    def checkpoint(self) -> bool:
        self.epoch += 1
        cp = self.db.checkpoint(self.epoch)
        self.snaps[self.epoch] = dict(self.model)
        try:
            cp.wait()
        except dkv.DkvError:
            self.failed.append(self.epoch)
            return False
        self.done.append(self.epoch)
        return True


def _setup_flush(run):
    run.fill(1, 40)
    run.checkpoint()
    run.fill(2, 30)


def _setup_compaction(run):
    run.fill(1, 150)
    run.checkpoint()
    run.fill(2, 60)
    run.db.flush()


def _setup_checkpoint(run):
    run.fill(1, 100)
    run.checkpoint()
    run.fill(2, 100)
    run.checkpoint()
    run.fill(3, 100)


SCENARIOS = {
    # A memtable big enough that only the explicit flush writes an SST.
    "flush": (dict(memtable_bytes=1 << 20, block_bytes=256, retain=2), _setup_flush, lambda run: run.db.flush()),
    # Several L0 tables (automatic compaction off), merged by one full compaction.
    "compaction": (dict(SMALL, compaction=False, retain=2), _setup_compaction,
                   lambda run: run.db.compact(full=True)),
    # retain=2 so the checkpoint's garbage collection deletes a manifest and its files.
    "checkpoint": (dict(SMALL, retain=2), _setup_checkpoint, lambda run: run.checkpoint()),
}


def _op_calls(name: str) -> list:
    """The storage calls the scenario's operation makes (dry run, no faults)."""
    opts, setup, op = SCENARIOS[name]
    log = LoggingStore(MemoryStore())
    run = Run(log, opts)
    setup(run)
    mark = len(log.calls)
    op(run)
    return [c for c in log.calls[mark:] if c.kind != "size"]   # FaultInjectingStore does not count size()


# (kind, object folder, mode) -> reason, for calls whose fault exposes a reported, unfixed bug.
KNOWN_BUGS: dict = {}


def _cases():
    for name in SCENARIOS:
        for i, call in enumerate(_op_calls(name)):
            modes = ("error", "torn", "landed", "lost", "corrupt") if call.kind in WRITE_KINDS else ("error",)
            for mode in modes:
                bug = KNOWN_BUGS.get((call.kind, call.key.split("/")[0], mode))
                marks = [pytest.mark.xfail(strict=True, reason=bug)] if bug else []
                yield pytest.param(name, i, call.kind, call.key, mode, marks=marks,
                                   id=f"{name}-{i}-{call.kind}-{call.key.split('/')[0]}-{mode}")


def _recover(store, opts):
    """(epoch, contents, every retained checkpoint's contents) or the DkvError raised."""
    try:
        with dkv.open(store, read_only=True, **opts) as db:
            cps = [c.epoch for c in db.checkpoints()]
            data = contents(db)
        older = {}
        for e in cps:
            with dkv.open(store, checkpoint=e, read_only=True, **opts) as db:
                older[e] = contents(db)
        return (cps[-1] if cps else None), data, older
    except dkv.DkvError as e:
        return e


@pytest.mark.parametrize("name,nth,kind,key,mode", list(_cases()))
def test_fault_in_each_call(name, nth, kind, key, mode):
    opts, setup, op = SCENARIOS[name]
    inner = MemoryStore()
    fs = FaultInjectingStore(inner, seed=nth)
    run = Run(fs, opts)
    setup(run)
    fs.fail("any", nth=nth + 1, mode=mode)
    try:
        op(run)
    except dkv.DkvError:
        pass
    assert len(fs.fired) == 1 and fs.fired[0] == f"{mode} {kind} {key}", fs.fired   # the dry run's call
    fs.clear()

    # Carry on: the next checkpoint must succeed and carry everything written so far.
    if name != "checkpoint":
        assert not run.failed
    assert run.checkpoint(), f"the checkpoint after a {mode} fault failed"
    run.fill(9, 20)
    assert run.checkpoint()

    got = _recover(inner, opts)
    last = run.done[-1]
    if mode in ("error", "torn", "landed"):
        assert not isinstance(got, Exception), f"recovery failed after a {mode} {kind} {key}: {got!r}"
        epoch, data, older = got
        assert epoch == last
        assert data == run.snaps[last]
        for e, d in older.items():
            assert d == run.snaps[e], f"retained checkpoint {e} differs"
        # And a writer can pick up from there.
        with dkv.open(inner, **opts) as db:
            assert contents(db) == run.snaps[last]
            db.put(b"again", b"1")
            db.checkpoint(last + 1).wait()
    elif not isinstance(got, Exception):
        epoch, data, older = got
        assert epoch is not None and epoch <= last
        if mode == "corrupt":
            assert epoch == last
        assert data == run.snaps[epoch], "wrong data after a lying store"
        for e, d in older.items():
            assert d == run.snaps[e], f"retained checkpoint {e} differs"


@pytest.mark.parametrize("inline", [False, True], ids=["segment-file", "inline"])
def test_failed_checkpoint_records_go_with_the_next_one(inline):
    """The WAL segment upload of checkpoint 2 fails (or, for a segment carried inline, its
    manifest's create): checkpoint 3 must hold its records."""
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(memtable_bytes=1 << 20, inline_segment_bytes=4096 if inline else 0))
    run.fill(1, 30)
    assert run.checkpoint()
    run.fill(2, 30)
    if inline:
        fs.fail("put_if_absent", mode="error", key_prefix="manifest/")
    else:
        fs.fail("put", mode="error", key_prefix="wal/")
    assert not run.checkpoint()
    assert [c.epoch for c in run.db.checkpoints()] == [1]
    run.db.put(b"late", b"x")
    run.model[b"late"] = b"x"
    assert run.checkpoint()
    with dkv.open(inner, read_only=True) as db:
        assert [c.epoch for c in db.checkpoints()] == [1, 3]
        assert contents(db) == run.snaps[3]
    with dkv.open(inner, checkpoint=1, read_only=True) as db:
        assert contents(db) == run.snaps[1]


def test_failed_manifest_create_then_next_checkpoint():
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(SMALL))
    run.fill(1, 120)
    assert run.checkpoint()
    run.fill(2, 120)
    fs.fail("put_if_absent", mode="error", key_prefix="manifest/")
    assert not run.checkpoint()
    run.fill(3, 50)
    assert run.checkpoint()
    with dkv.open(inner, read_only=True) as db:
        assert contents(db) == run.snaps[3]


def test_a_manifest_create_that_raised_after_storing_it_completes_the_checkpoint():
    """The create of manifest 2 stores it whole, then reports an error (a lost answer): the
    writer reads it back, keeps it (a newer writer may have opened from it, RFC 0011 Risks)
    and lets the claims decide, so the checkpoint completes."""
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(SMALL, inline_segment_bytes=4096))
    run.fill(1, 30)
    assert run.checkpoint()
    run.fill(2, 30)
    fs.fail("put_if_absent", mode="landed", key_prefix="manifest/")
    assert run.checkpoint()
    assert fs.fired == ["landed put_if_absent manifest/00000000000000000002-0000000001.manifest"]
    assert [c.epoch for c in run.db.checkpoints()] == [1, 2]
    with dkv.open(inner, read_only=True) as db:
        assert [c.epoch for c in db.checkpoints()] == [1, 2]
        assert contents(db) == run.snaps[2]


def test_torn_manifest_of_a_failed_checkpoint_then_crash():
    """A crash right after a torn manifest create: the last completed checkpoint is 1."""
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(SMALL))
    run.fill(1, 60)
    assert run.checkpoint()
    run.fill(2, 60)
    fs.fail("put_if_absent", mode="torn", key_prefix="manifest/")
    assert not run.checkpoint()
    with dkv.open(inner, read_only=True) as db:
        assert [c.epoch for c in db.checkpoints()] == [1]
        assert contents(db) == run.snaps[1]


# -- crash_after(n) ------------------------------------------------------------------------

def _crash_scenario(run):
    for r in range(5):
        run.fill(10 + r, 80)
        run.checkpoint()
        if r == 2:
            run.db.compact(full=True)


def _write_schedule():
    """Dry run: the kind and key of every call, in order."""
    log = LoggingStore(MemoryStore())
    run = Run(log, dict(SMALL, retain=2))
    _crash_scenario(run)
    return [(c.kind, c.key) for c in log.calls if c.kind != "size"]


def test_crash_after_every_write():
    calls = _write_schedule()
    writes = [i for i, (kind, _) in enumerate(calls) if kind in WRITE_KINDS]
    manifest_at = {i: int(key.split("/")[-1].split("-")[0]) for i, (kind, key) in enumerate(calls)
                   if kind == "put_if_absent" and key.startswith("manifest/")}
    for n in range(1, len(writes) + 1):   # the writer claim (write 1) always lands
        crash_at = writes[n] if n < len(writes) else len(calls)
        expected = max((e for i, e in manifest_at.items() if i < crash_at), default=None)
        # A dead process deletes nothing either: block deletes from the crash on.
        deletes_before = sum(1 for kind, _ in calls[:crash_at] if kind == "delete")
        inner = MemoryStore()
        fs = FaultInjectingStore(inner).crash_after(n)
        fs.fail("delete", nth=deletes_before + 1, mode="error", repeat=True)
        run = Run(fs, dict(SMALL, retain=2))
        try:
            _crash_scenario(run)
        except dkv.DkvError:
            pass     # a read of a lost SST after the crash point: the zombie stops
        got = _recover(inner, dict(SMALL))
        assert not isinstance(got, Exception), f"crash after write {n}: {got!r}"
        epoch, data, older = got
        assert epoch == expected, f"crash after write {n}"
        assert data == (run.snaps[epoch] if epoch else {})
        for e, d in older.items():
            assert d == run.snaps[e]


# -- random faults with background threads -------------------------------------------------

def _fault_fuzz(seed: int) -> None:
    rng = random.Random(seed)
    inner = MemoryStore()
    fs = FaultInjectingStore(inner, seed=seed)
    kind = rng.choice(["put", "put_if_absent", "get", "list", "delete", "write", "any"])
    mode = rng.choice(["error", "torn"]) if kind in ("put", "put_if_absent", "write", "any") else "error"
    prefix = rng.choice(["", "sst/", "wal/", "manifest/"]) if rng.random() < 0.5 else ""
    opts = dict(SMALL, retain=rng.randrange(1, 4), max_sealed_memtables=rng.choice([0, 1, 4]))
    db = dkv.open(fs, background=True, **opts)
    model, snaps, done = {}, {}, []
    unknown = []    # failed after its manifest was created (the claims could not be listed)
    # Repeated faults on manifest creates, claim listings or deletes are double faults around a
    # manifest's withdrawal, a reported open bug (test_*_not_withdrawn_then_crash): not here.
    repeat = rng.random() < 0.3 and kind in ("put", "get")
    fs.fail(kind, nth=rng.randrange(1, 40), mode=mode, key_prefix=prefix, repeat=repeat)
    epoch = 0
    try:
        for _ in range(12):
            for i in range(rng.randrange(10, 80)):
                key = b"k%03d" % rng.randrange(60)
                if rng.random() < 0.8:
                    value = rng.randbytes(rng.randrange(0, 40))
                    db.put(key, value)
                    model[key] = value
                else:
                    db.delete(key)
                    model.pop(key, None)
            epoch += 1
            # flush=True stays off until the reported bug is fixed
            # (test_flush_checkpoint_fails_when_an_earlier_flush_fails): it loses records here.
            cp = db.checkpoint(epoch, flush=False and rng.random() < 0.3)
            snaps[epoch] = dict(model)
            try:
                cp.wait()
                done.append(epoch)
            except dkv.DkvError as e:
                if e.outcome_unknown:
                    unknown.append(epoch)
    except dkv.DkvError:
        pass      # a failed background flush or compaction, reported by a call: stop here
    db.close()
    got = _recover(inner, opts)
    assert not isinstance(got, Exception), f"seed {seed}: {fs.fired}: {got!r}"
    e, data, older = got
    # A checkpoint whose outcome is unknown (RFC 0011, Risks: its manifest is kept) may be
    # the newest; its data is whole.
    assert e == max(done + unknown, default=None), f"seed {seed}: {fs.fired}"
    assert data == (snaps[e] if e else {})
    for x, d in older.items():
        assert d == snaps[x]


@pytest.mark.parametrize("seed", range(12))
def test_random_faults_background(seed):
    _fault_fuzz(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 1100))
def test_random_faults_background_long(seed):
    _fault_fuzz(seed)


# -- double faults: a failed checkpoint whose manifest cannot be withdrawn -----------------

# By design (docs/rfcs/0002-dkv-checkpoints.md): stores make puts all-or-nothing, so a
# truncated manifest found at open is damage and is reported, never skipped; and a
# checkpoint whose failure could not be withdrawn before a crash is ambiguous, like any
# remote commit whose answer was lost — recovery may find it, with all of its data.

def test_torn_manifest_not_withdrawn_then_crash_is_reported_not_skipped():
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(SMALL))
    run.fill(1, 60)
    assert run.checkpoint()
    run.fill(2, 60)
    fs.fail("put_if_absent", mode="torn", key_prefix="manifest/")
    fs.fail("delete", key_prefix="manifest/", repeat=True)
    assert not run.checkpoint()
    # crash: the writer is gone before any later round could withdraw the manifest
    got = _recover(inner, dict(SMALL))
    assert isinstance(got, dkv.CorruptionError), got
    assert "manifest/00000000000000000002" in str(got)
    with dkv.open(inner, checkpoint=1, read_only=True) as db:      # the older one is intact
        assert dict(db.scan()) == run.snaps[1]


def test_failed_fencing_check_keeps_the_manifest_then_crash_gives_it_whole():
    """Re-decided with RFC 0011 (Risks): this was a double fault (the claims cannot be
    listed, then the withdrawal of the manifest fails) whose outcome was ambiguous, 1 or 2.
    A writer that cannot list the claims no longer withdraws its manifest at all (a newer
    writer may have opened from it and name it as a carrier), so the listing fault alone
    decides it: checkpoint 2 stays, whole, and its error says the outcome is unknown. No
    delete of it is even tried (the delete fault below would fire if one were)."""
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    run = Run(fs, dict(SMALL))
    run.fill(1, 60)
    assert run.checkpoint()
    run.fill(2, 60)
    fs.fail("list", key_prefix="writer/")
    fs.fail("delete", key_prefix="manifest/", repeat=True)
    cp = run.db.checkpoint(2)
    with pytest.raises(dkv.StorageError, match="outcome is unknown") as failed:
        cp.wait()
    assert failed.value.outcome_unknown
    assert fs.fired == ["error list writer/"], fs.fired
    got = _recover(inner, dict(SMALL))
    assert not isinstance(got, Exception), got
    epoch, data, older = got
    assert epoch == 2 and data == run.model
    assert older == {1: run.snaps[1], 2: run.model}


@pytest.mark.parametrize("inline", [False, True], ids=["segment-file", "inline"])
def test_a_checkpoint_whose_claims_cannot_be_listed_counts_for_the_next(inline):
    """Checkpoint 2's listing of the claims fails after its manifest was created: the writer
    goes on as if it committed (RFC 0011, Risks), so checkpoint 3 lists it among its retained
    epochs and names it as the carrier of its inline segment; every listed checkpoint opens."""
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    opts = dict(memtable_bytes=1 << 20, retain=3, inline_segment_bytes=4096 if inline else 0)
    run = Run(fs, opts)
    run.fill(1, 30)
    assert run.checkpoint()
    run.fill(2, 30)
    fs.fail("list", key_prefix="writer/")
    assert not run.checkpoint()
    run.fill(3, 30)
    assert run.checkpoint()
    got = _recover(inner, opts)
    assert not isinstance(got, Exception), got
    epoch, data, older = got
    assert epoch == 3 and data == run.snaps[3]
    assert older == {e: run.snaps[e] for e in (1, 2, 3)}
    if inline:
        from dkv.format import manifest as mf
        from .dkv_helpers import read_manifest
        m3 = read_manifest(inner, run.db.checkpoints()[-1].name)
        assert (2, run.db._writer) in mf.carriers(m3)
