"""Writers, fencing, rewinds, read-only openers, retention and garbage collection."""
from __future__ import annotations

import logging
import random

import pytest

import dkv
from dkv.format import manifest as mf
from dkv.storage import FaultInjectingStore, MemoryStore
from .dkv_helpers import SMALL, Hooked, contents, data_files, manifest_files, manifests, read_manifest


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")


def _fill(db, model, seed, n=60, space=50):
    rng = random.Random(seed)
    for i in range(n):
        k = b"k%03d" % rng.randrange(space)
        if rng.random() < 0.85:
            v = b"%d-%d" % (seed, i) + rng.randbytes(rng.randrange(0, 30))
            db.put(k, v)
            model[k] = v
        else:
            db.delete(k)
            model.pop(k, None)


def _epochs(infos) -> list:
    return [c.epoch for c in infos]


# -- two writers -------------------------------------------------------------------------

def test_newer_writer_fences_the_older(any_store):
    w1 = dkv.open(any_store, **SMALL)
    model = {}
    _fill(w1, model, 1)
    w1.checkpoint(1).wait()
    base = dict(model)

    w2 = dkv.open(any_store, **SMALL)
    assert contents(w2) == base
    _fill(w1, {}, 2)                         # the zombie may still write in memory ...
    with pytest.raises(dkv.FencedError):     # ... but never commit
        w1.checkpoint(2).wait()
    with pytest.raises(dkv.FencedError):
        w1.checkpoint(3).wait()
    assert len(manifests(any_store)) == 1

    _fill(w2, model, 3)
    w2.checkpoint(2).wait()
    assert _epochs(w2.checkpoints()) == [1, 2]
    w1.close()
    w2.close()
    with dkv.open(any_store, read_only=True) as r:
        assert contents(r) == model
        assert [(c.epoch, c.writer) for c in r.checkpoints()] == [(1, 1), (2, 2)]


def test_the_fenced_error_names_the_store_and_the_instance(tmp_path):
    """Not "instance ''": the location, and the root instance as such (issue: new-user pass)."""
    loc = str(tmp_path / "db")
    for ns, named in (("", f"the root instance of {loc}: "), ("q/p0", f"instance 'q/p0' of {loc}: ")):
        w1 = dkv.open(loc, instance=ns, background=False)
        w1.put(b"k", b"1")
        w1.checkpoint(1).wait()
        w2 = dkv.open(loc, instance=ns, background=False)
        w1.put(b"k", b"2")
        with pytest.raises(dkv.FencedError) as e:
            w1.checkpoint(2).wait()
        assert str(e.value).startswith(named + "writer epoch 1 was fenced by writer epoch 2; this writer must stop")
        assert "''" not in str(e.value)
        w1.close()
        w2.close()


def test_fenced_writer_with_uploads_in_flight_background():
    store = MemoryStore()
    w1 = dkv.open(store, background=True, **SMALL)
    _fill(w1, {}, 1, n=200)
    w2 = dkv.open(store, background=True, **SMALL)
    cps = [w1.checkpoint(e) for e in (1, 2, 3)]
    for cp in cps:
        with pytest.raises(dkv.FencedError):
            cp.wait()
    w1.close()
    assert manifests(store) == []
    model = {}
    _fill(w2, model, 2)
    w2.checkpoint(1).wait()
    w2.close()
    with dkv.open(store, read_only=True) as r:
        assert contents(r) == model


def _zombie_race(retain: int):
    """w1 passes its fencing check; w2 opens (claims) before w1's manifest create lands."""
    base = MemoryStore()
    hooked = Hooked(base)
    w1 = dkv.open(hooked, retain=retain, background=False, memtable_bytes=300)
    for i in range(30):
        w1.put(b"a%02d" % i, b"x" * 20)
    w1.checkpoint(1).wait()
    state1 = contents(w1)
    for i in range(30):
        w1.put(b"a%02d" % i, b"y" * 20)
    w1.compact(full=True)
    opened = {}

    def before(kind, key):
        if kind == "put_if_absent" and key.startswith("manifest/") and "w2" not in opened:
            opened["w2"] = dkv.open(base, retain=retain, background=False, memtable_bytes=300)

    hooked.before = before
    zombie = w1.checkpoint(2)
    return base, state1, opened["w2"], zombie


def test_zombie_commit_after_a_new_claim_is_not_valid():
    base, state1, w2, _ = _zombie_race(retain=3)
    assert _epochs(dkv.list_checkpoints(base)) == [1]
    assert contents(w2) == state1
    w2.put(b"new", b"1")
    w2.checkpoint(2).wait()
    with dkv.open(base, read_only=True) as r:
        assert contents(r) == {**state1, b"new": b"1"}


def test_zombie_commit_after_a_new_claim_is_fenced_and_deletes_nothing():
    base, state1, w2, zombie = _zombie_race(retain=1)
    with pytest.raises(dkv.FencedError) as fenced:
        zombie.wait()
    assert not fenced.value.checkpoint_kept         # withdrawn: the new writer did not start from it
    assert _epochs(dkv.list_checkpoints(base)) == [1]
    assert contents(w2) == state1
    w2.put(b"new", b"1")
    w2.checkpoint(2).wait()
    with dkv.open(base, read_only=True) as r:
        assert contents(r) == {**state1, b"new": b"1"}


# -- rewinding to an older checkpoint ----------------------------------------------------------

@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_writer_reopened_at_older_epoch_abandons_later_ones(background):
    store = MemoryStore()
    snaps, model = {}, {}
    with dkv.open(store, retain=10, background=background, **SMALL) as db:
        for e in range(1, 6):
            _fill(db, model, e)
            db.checkpoint(e).wait()
            snaps[e] = dict(model)
    db = dkv.open(store, checkpoint=3, retain=10, background=background, discard_newer=True, **SMALL)
    assert contents(db) == snaps[3]
    assert _epochs(db.checkpoints()) == [1, 2, 3]
    assert _epochs(dkv.list_checkpoints(store)) == [1, 2, 3]     # at once: the claim decides
    with pytest.raises(dkv.CheckpointNotFoundError):
        dkv.open(store, checkpoint=5, read_only=True)
    with pytest.raises(ValueError):
        db.checkpoint(3)
    # Re-run epochs 4 and 5 with different data.
    model = dict(snaps[3])
    for e in (4, 5):
        _fill(db, model, 100 + e)
        db.checkpoint(e).wait()
        snaps[e] = dict(model)
    db.close()
    assert len(manifests(store)) == 5, "the abandoned manifests are collected"
    for e in range(1, 6):
        with dkv.open(store, checkpoint=e, read_only=True) as r:
            assert contents(r) == snaps[e]


def test_rewind_then_crash_before_any_checkpoint_stays_rewound():
    store = MemoryStore()
    with dkv.open(store) as db:
        for e in (1, 2, 3):
            db.put(b"k", b"%d" % e)
            db.checkpoint(e).wait()
    db = dkv.open(store, checkpoint=1, discard_newer=True)     # claims, then the process dies
    del db
    with dkv.open(store) as db:
        assert db.get(b"k") == b"1"
        assert _epochs(db.checkpoints()) == [1]


def test_checkpoint_epochs_must_increase():
    with dkv.open(MemoryStore()) as db:
        db.checkpoint(0).wait()
        db.checkpoint(5).wait()
        for bad in (5, 4, 0):
            with pytest.raises(ValueError, match="greater"):
                db.checkpoint(bad)
        for bad in (-1, True, 1.5, "6"):
            with pytest.raises(ValueError):
                db.checkpoint(bad)
        db.checkpoint(6).wait()
        assert _epochs(db.checkpoints()) == [0, 5, 6]
        assert db.last_checkpoint == 6
        cp = db.checkpoint()            # no epoch: the next one
        assert cp.epoch == 7 and cp.wait() and db.last_checkpoint == 7


def test_checkpoint_without_an_epoch_takes_the_next_and_last_checkpoint_says_which(tmp_path):
    """A notebook runs the same cell twice: checkpoint() numbers itself, across reopens."""
    for run in (1, 2):
        with dkv.open(str(tmp_path), fsync=False) as db:
            assert db.last_checkpoint == (None if run == 1 else 1)
            db.put(b"k", b"%d" % run)
            assert db.checkpoint().wait() and db.last_checkpoint == run
            with pytest.raises(ValueError, match=r"greater than the last checkpoint's \(%d\).*checkpoint\(\) "
                               r"without an epoch" % run):
                db.checkpoint(run)
    with dkv.open(str(tmp_path), checkpoint=1, read_only=True) as old:
        assert old.last_checkpoint == 1 and old.get(b"k") == b"1"
    with dkv.open(str(tmp_path), read_only=True) as new:
        assert new.last_checkpoint == 2 and new.get(b"k") == b"2"
    with dkv.open(MemoryStore()) as fresh:
        assert fresh.last_checkpoint is None
        assert fresh.checkpoint().epoch == 1        # a new store starts at 1


def test_epochs_increase_across_reopen():
    store = MemoryStore()
    with dkv.open(store) as db:
        db.checkpoint(7).wait()
    with dkv.open(store) as db:
        with pytest.raises(ValueError):
            db.checkpoint(7)
        db.checkpoint(8).wait()


# -- read-only openers ---------------------------------------------------------------------

@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_read_only_while_the_writer_goes_on(any_store, background):
    model = {}
    w = dkv.open(any_store, retain=20, background=background, **SMALL)
    _fill(w, model, 1, n=150)
    w.checkpoint(1).wait()
    snap1 = dict(model)
    claims = len(any_store.list("writer/"))
    ro = dkv.open(any_store, read_only=True, **SMALL)
    ro_at = dkv.open(any_store, checkpoint=1, read_only=True, **SMALL)
    assert len(any_store.list("writer/")) == claims, "a read-only open claims nothing"
    for e in range(2, 6):
        _fill(w, model, e, n=150)
        w.compact()
        w.checkpoint(e).wait()
        assert contents(ro) == snap1
        assert contents(ro_at) == snap1
    assert _epochs(ro.checkpoints()) == [1]
    for method, args in [("put", (b"a", b"b")), ("delete", (b"a",)), ("checkpoint", (9,)), ("flush", ())]:
        with pytest.raises(dkv.ReadOnlyError):
            getattr(ro, method)(*args)
    with pytest.raises(dkv.ReadOnlyError):
        with ro.batch() as b:
            b.put(b"a", b"b")
    ro.close()
    ro_at.close()
    w.close()
    with dkv.open(any_store, read_only=True) as r:
        assert contents(r) == model


# -- retention and garbage collection ------------------------------------------------------

@pytest.mark.parametrize("retain", [1, 2, 4])
@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_retention_keeps_exactly_n_and_collects_the_rest(retain, background):
    store = MemoryStore()
    snaps, model = {}, {}
    db = dkv.open(store, retain=retain, background=background, **SMALL)
    for e in range(1, 11):
        _fill(db, model, e, n=80)
        if e % 3 == 0:
            db.compact(full=e % 2 == 0)
        db.checkpoint(e).wait()
        snaps[e] = dict(model)
        db.wait_idle()
        want = list(range(max(1, e - retain + 1), e + 1))
        assert _epochs(db.checkpoints()) == want
        assert _epochs(dkv.list_checkpoints(store)) == want
        assert len(manifests(store)) == len(want)
    db.close()
    # A flush that finished after the last checkpoint leaves an SST only the closed writer
    # knew. The checkpoint reserves it (its writer might still publish it: a Spark shard
    # that comes back refreshes), so the next writer keeps it; the one after collects it.
    for e in (11, 12):
        with dkv.open(store, retain=retain, **SMALL) as db:
            db.checkpoint(e).wait()
            snaps[e] = snaps[10]
    # Every retained checkpoint opens and holds its exact contents ...
    referenced = set()
    for info in dkv.list_checkpoints(store):
        referenced |= manifest_files(read_manifest(store, info.name))
        with dkv.open(store, checkpoint=info.epoch, read_only=True) as r:
            assert contents(r) == snaps[info.epoch]
    # ... and nothing else is kept: no write after the last checkpoint, so no live-only file.
    assert data_files(store) == referenced


def test_gc_of_files_shared_by_retained_checkpoints():
    """A file referenced by an older retained checkpoint survives a compaction that
    replaces it, and goes once that checkpoint is no longer retained."""
    store = MemoryStore()
    model = {}
    db = dkv.open(store, retain=2, background=False, **dict(SMALL, compaction=False))
    _fill(db, model, 1, n=150)
    db.flush()
    db.checkpoint(1).wait()
    tables_1 = {f for f in manifest_files(read_manifest(store, manifests(store)[0])) if f.endswith(".sst")}
    assert tables_1
    db.compact(full=True)
    assert tables_1 <= data_files(store), "checkpoint 1 is retained: its SSTs stay"
    db.checkpoint(2).wait()
    assert tables_1 <= data_files(store)
    db.checkpoint(3).wait()
    assert not tables_1 & data_files(store), "checkpoint 1 left retention: its SSTs go"
    with dkv.open(store, checkpoint=2, read_only=True) as r:
        assert contents(r) == model
    db.close()


def test_failed_manifest_delete_is_retried_before_its_files_go():
    inner = MemoryStore()
    fs = FaultInjectingStore(inner)
    db = dkv.open(fs, retain=1, background=False, memtable_bytes=300)
    db.put(b"a", b"1")
    db.checkpoint(1).wait()
    fs.fail("delete", key_prefix="manifest/")
    db.put(b"b", b"2")
    db.checkpoint(2).wait()
    for i in range(20):
        db.put(b"c%02d" % i, b"x" * 30)
    db.checkpoint(3).wait()
    db.close()
    present = data_files(inner)
    for name in manifests(inner):
        assert manifest_files(read_manifest(inner, name)) <= present, name
    assert _epochs(dkv.list_checkpoints(inner)) == [3]


def test_close_finishes_checkpoint_uploads():
    store = MemoryStore()
    db = dkv.open(store, background=True, **SMALL)
    model = {}
    _fill(db, model, 1, n=300)
    cps = [db.checkpoint(1)]
    _fill(db, model, 2, n=50)
    cps.append(db.checkpoint(2))
    db.close()
    assert all(cp.done() for cp in cps)
    assert [cp.wait() for cp in cps] == manifests(store)
    with dkv.open(store, read_only=True) as r:
        assert contents(r) == model


def test_checkpoint_handle_reports_bytes():
    store = MemoryStore()
    with dkv.open(store, inline_segment_bytes=4096) as db:
        for i in range(100):
            db.put(b"k%03d" % i, b"v" * 10)
        cp = db.checkpoint(1)
        name = cp.wait()
        assert name == manifests(store)[0] and cp.epoch == 1 and cp.done()
        assert cp.records == 100
        # a segment this small travels inside the manifest (RFC 0007): no file of its own
        assert not data_files(store) and cp.inline_segments == 1
        assert cp.wal_bytes == mf.inline_bytes(read_manifest(store, name)) > 0
        assert cp.bytes_written == cp.wal_bytes + cp.manifest_bytes == store.size(name)
        db.put(b"k000", b"changed")
        cp2 = db.checkpoint(2)
        cp2.wait()
        assert cp2.records == 1, "a checkpoint uploads only what changed"
        cp3 = db.checkpoint(3)
        cp3.wait()
        assert cp3.records == 0 and cp3.wal_bytes == 0
        assert db.checkpoints()[-1].name == cp3.name


# -- refresh: a writer catches up to checkpoints another writer wrote ---------------------------

@pytest.mark.parametrize("memtable_bytes", [1 << 20, 3000], ids=["no-flush", "flushes"])
@pytest.mark.parametrize("seed", range(3))
def test_refresh_alternating_writers(seed, memtable_bytes):
    _alternate(seed, memtable_bytes)


@pytest.mark.slow
@pytest.mark.parametrize("memtable_bytes", [1 << 20, 3000], ids=["no-flush", "flushes"])
@pytest.mark.parametrize("seed", range(100, 140))
def test_refresh_alternating_writers_long(seed, memtable_bytes):
    _alternate(seed, memtable_bytes)


def _alternate(seed, memtable_bytes):
    """Two workers take turns on one instance (a shard moving between Spark workers). The
    returning one refreshes (or reopens when refresh declines) and must equal the model;
    the one it replaced is fenced."""
    rng = random.Random(seed)
    store = MemoryStore()
    opts = dict(SMALL, memtable_bytes=memtable_bytes, retain=3, background=rng.random() < 0.5)
    if memtable_bytes > 1 << 19:            # no flush at all: nothing but WAL segments
        opts.update(flush_segments=1 << 20, flush_bytes=1 << 30)
    dbs = [dkv.open(store, **opts), None]
    model, epoch, turn, refreshed = {}, 0, 0, 0
    state = [{}, None]        # what each DB holds (a fenced DB's files may be collected: not read)
    for step in range(30):
        db = dbs[turn]
        for _ in range(rng.randrange(1, 3)):
            _fill(db, model, 1000 * seed + step, n=rng.randrange(5, 40))
            epoch += 1
            db.checkpoint(epoch).wait()
        state[turn] = dict(model)
        if rng.random() < 0.6:
            other = 1 - turn
            before = state[other]
            changed = dbs[other].refresh(epoch) if dbs[other] is not None else None
            if changed is None:
                if dbs[other] is not None:
                    dbs[other].close()
                dbs[other] = dkv.open(store, **opts)
            else:
                refreshed += 1
                moved = {k for k in set(before) | set(model) if before.get(k) != model.get(k)}
                assert moved <= set(changed), "refresh reports every key whose value changed"
            assert contents(dbs[other]) == model
            assert dbs[other].checkpoints()[-1].epoch == epoch
            with pytest.raises(dkv.FencedError):
                db.checkpoint(epoch + 1).wait()
            turn = other
    for db in dbs:
        if db is not None:
            db.close()
    with dkv.open(store, read_only=True) as r:
        assert contents(r) == model
    if memtable_bytes > 1 << 19:
        assert refreshed > 0, "without flushes, refresh should catch up instead of declining"


def test_refresh_declines_with_uncommitted_work_and_checks_its_input():
    store = MemoryStore()
    a = dkv.open(store)
    a.put(b"k", b"1")
    a.checkpoint(1).wait()
    b = dkv.open(store)
    b.put(b"k", b"2")
    b.checkpoint(2).wait()
    a.put(b"dirty", b"x")
    assert a.refresh(2) is None, "uncommitted writes: the caller must reopen"
    with pytest.raises(dkv.ReadOnlyError):
        dkv.open(store, read_only=True).refresh(2)
    c = dkv.open(store, checkpoint=1, read_only=True)
    c.close()
    with pytest.raises(dkv.ClosedError):
        c.refresh(2)
    a.close()
    a = dkv.open(store, checkpoint=2, read_only=True)
    a.close()
    b.close()
