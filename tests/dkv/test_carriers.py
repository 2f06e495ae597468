"""RFC 0011: a manifest carries only its own new inline WAL segments and names earlier ones
in the manifests that carry them (their *carriers*).

Garbage collection keeps a carrier past retention while a retained manifest (or the live
state) names it and deletes it once none does; a carrier is no checkpoint (not listed, not
openable, with an error that says why); a damaged or missing carrier is reported, never
read as data; crash points, refresh, rescale and fencing keep every listed checkpoint
openable.
"""
from __future__ import annotations

import json
import random

import pytest

import dkv
from dkv import _paths, cli
from dkv.format import manifest as mf
from dkv.storage import LoggingStore, MemoryStore
from .dkv_helpers import Journal, contents, manifests, read_manifest

INLINE = dict(inline_segment_bytes=4096)


def _names(store) -> list[int]:
    return sorted(_paths.parse_manifest_name(n)[0] for n in manifests(store))


def _small_checkpoints(db, model: dict, epochs, keys: int = 5, tag: bytes = b"") -> None:
    for e in epochs:
        for i in range(keys):
            k = b"k%02d" % ((e * 3 + i) % 40)
            v = tag + b"v%d-%d" % (e, i)
            db.put(k, v)
            model[k] = v
        db.checkpoint(e).wait()


def _snapshot_run(store, epochs, **opts):
    model, snaps = {}, {}
    db = dkv.open(store, background=False, retain=2, **INLINE, **opts)
    for e in epochs:
        _small_checkpoints(db, model, [e])
        snaps[e] = dict(model)
    return db, model, snaps


# -- the format in use ------------------------------------------------------------------------

def test_each_segment_is_written_once_and_later_manifests_name_its_carrier():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 5))
    m4 = read_manifest(store, db.checkpoints()[-1].name)
    # Its own segment inline; segments 1..3 named in manifests 1..3 (one carried run).
    assert [(r.first, r.last, r.data is not None, r.carried) for r in m4.wal] == \
        [(1, 3, False, ((1, 1), (2, 1), (3, 1))), (4, 4, True, None)]
    assert store.get(db.checkpoints()[-1].name)[4] == 3, "version 3: it has a carried run"
    # Each segment's bytes are in exactly one manifest.
    for e in range(1, 5):
        m = read_manifest(store, _paths.manifest_name("", e, 1))
        assert [r.first for r in m.wal if r.data is not None] == [e]
    assert not [n for n, _ in store.list("wal/")], "no WAL file"
    db.close()
    with dkv.open(store, read_only=True) as ro:
        assert contents(ro) == model


def _golden_scenario():
    log = LoggingStore(MemoryStore())
    db = dkv.open(log, background=False, retain=2, **INLINE)
    model: dict = {}
    _small_checkpoints(db, model, range(1, 4))
    return log, db, model


def test_golden_checkpoint_with_carried_segments():
    """A small checkpoint whose manifest names three carriers is still one object, and the
    garbage collection after it deletes no manifest: 1 left retention but carries segment 1,
    which the retained manifests name."""
    from .test_golden import check_golden, render
    log, db, model = _golden_scenario()
    log.clear()
    _small_checkpoints(db, model, [4])
    lines = render(log.calls)
    check_golden("checkpoint_carried", lines)
    assert lines[0] == "put_if_absent manifest/00000000000000000004-0000000001.manifest"
    assert not [line for line in lines if line.startswith(("put ", "delete "))]
    assert [c.epoch for c in db.checkpoints()] == [3, 4]
    assert _names(log.inner) == [1, 2, 3, 4]
    db.close()


def test_golden_open_reads_each_carrier_once():
    from .test_golden import check_golden, render
    log, db, model = _golden_scenario()
    _small_checkpoints(db, model, [4])
    db.close()
    log.clear()
    with dkv.open(log, background=False) as db:
        lines = render(log.calls)
        assert contents(db) == model
    check_golden("open_carried", lines)
    gets = [line.split()[1] for line in lines if line.startswith("get manifest/")]
    assert gets == [_paths.manifest_name("", e, 1) for e in (4, 1, 2, 3)]
    assert not [line for line in lines if "wal/" in line]


# -- garbage collection -----------------------------------------------------------------------

def test_gc_keeps_carriers_while_retained_manifests_name_them_then_deletes_them():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 7))
    assert [c.epoch for c in db.checkpoints()] == [5, 6]
    assert _names(store) == [1, 2, 3, 4, 5, 6], "1..4 stay as carriers of live segments"
    assert [c.name for c in db._carriers] == [_paths.manifest_name("", e, 1) for e in (1, 2, 3, 4)]
    db.flush()                              # the segments go into an SST: nothing to carry
    _small_checkpoints(db, model, [7])
    assert _names(store) == [1, 2, 3, 4, 5, 6, 7], "manifest 6 is retained and still names 1..5"
    _small_checkpoints(db, model, [8])
    assert _names(store) == [7, 8], "no retained manifest names a carrier: all collected"
    assert db._carriers == []
    db.close()
    with dkv.open(store, read_only=True) as ro:
        assert contents(ro) == model


def test_a_carrier_is_no_checkpoint_and_opening_it_says_why(tmp_path, capsys):
    path = str(tmp_path / "db")
    db, model, snaps = _snapshot_run(path, range(1, 6), fsync=False)
    assert [c.epoch for c in db.checkpoints()] == [4, 5]
    db.close()
    assert [c.epoch for c in dkv.list_checkpoints(path)] == [4, 5]
    with dkv.open(path, read_only=True) as ro:
        assert [c.epoch for c in ro.checkpoints()] == [4, 5]
    for e in (1, 2, 3):
        with pytest.raises(dkv.CheckpointNotFoundError, match="kept only for the inline WAL segments"):
            dkv.open(path, checkpoint=e, read_only=True)
        with pytest.raises(dkv.CheckpointNotFoundError, match="kept only for the inline WAL segments"):
            dkv.verify(path, checkpoint=e)
    with pytest.raises(dkv.CheckpointNotFoundError, match=r"retained epochs: \[4, 5\]"):
        dkv.open(path, checkpoint=9, read_only=True)
    for e in (4, 5):            # every listed checkpoint opens whole, and verifies
        with dkv.open(path, checkpoint=e, read_only=True) as ro:
            assert contents(ro) == snaps[e]
        report = dkv.verify(path, checkpoint=e)
        assert report["inline_segments"] == e and report["carriers"] == e - 1
    assert cli.main(["checkpoints", path]) == 0
    out = capsys.readouterr().out
    assert "3 older manifests kept only for the WAL segments they carry" in out
    assert cli.main(["info", path, "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["inline_segments"], info["carried_segments"], info["carriers"]) == (1, 4, 4)


# -- damage -----------------------------------------------------------------------------------

def _rewrite(store, name: str, change) -> None:
    m = read_manifest(store, name)
    m.wal = [change(r) for r in m.wal]
    store.delete(name)
    store.put(name, mf.encode(m))


@pytest.mark.parametrize("where", [0, 10, 30, -1])
def test_a_damaged_carried_segment_is_reported_never_read(where):
    """The carrier's manifest checks out, the segment it carries does not: the open of a
    later checkpoint raises CorruptionError naming the carrier and the segment."""
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 5))
    db.close()
    carrier = _paths.manifest_name("", 2, 1)

    def damage(r):
        if r.data is None:
            return r
        data = bytearray(r.data)
        data[where] ^= 0x5A
        return mf.WalRange(r.ns, r.writer, r.first, r.last, r.skip_through, r.groups, bytes(data))
    _rewrite(store, carrier, damage)
    with pytest.raises(dkv.CorruptionError, match=f"manifest {carrier}: its inline .*0000000001-000000000002"):
        dkv.open(store, read_only=True)
    with pytest.raises(dkv.CorruptionError, match=carrier):
        dkv.verify(store)


def test_a_damaged_carrier_manifest_is_reported():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 5))
    db.close()
    carrier = _paths.manifest_name("", 1, 1)
    data = bytearray(store.get(carrier))
    data[-3] ^= 0x01
    store.delete(carrier)
    store.put(carrier, bytes(data))
    newest = _paths.manifest_name("", 4, 1)
    with pytest.raises(dkv.CorruptionError, match=f"manifest {newest}: {carrier}"):
        dkv.open(store, read_only=True)


def test_a_carrier_that_lacks_the_segment_is_reported():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 5))
    db.close()
    carrier = _paths.manifest_name("", 3, 1)
    _rewrite(store, carrier, lambda r: r if r.data is None else
             mf.WalRange(r.ns, r.writer, r.first + 100, r.first + 100, r.skip_through, r.groups, r.data))
    with pytest.raises(dkv.CorruptionError, match="which does not hold it"):
        dkv.open(store, read_only=True)
    with pytest.raises(dkv.CorruptionError, match="which does not hold it"):
        dkv.verify(store)


def test_a_missing_carrier_is_reported():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 5))
    db.close()
    carrier = _paths.manifest_name("", 2, 1)
    store.delete(carrier)
    with pytest.raises(dkv.ObjectMissingError, match=f"the manifest {carrier} that carries"):
        dkv.open(store, read_only=True)


# -- crash points -----------------------------------------------------------------------------

def test_every_crash_point_keeps_every_listed_checkpoint_openable():
    """Every prefix of a run's durable mutations (inline on, flushes now and then, retain 2):
    each listed checkpoint opens whole with its contents, the newest present is listed,
    and a writer opened there goes on and its checkpoints open too."""
    journal = Journal()
    rng = random.Random(3)
    model, snaps = {}, {}
    db = dkv.open(journal, background=False, retain=2, **INLINE)
    for e in range(1, 13):
        for _ in range(rng.randrange(1, 6)):
            k = b"k%02d" % rng.randrange(30)
            if rng.random() < 0.8:
                model[k] = b"v%d" % rng.randrange(1000)
                db.put(k, model[k])
            else:
                db.delete(k)
                model.pop(k, None)
        db.checkpoint(e, flush=e % 5 == 0).wait()
        snaps[e] = dict(model)
    db.close()
    for n in range(1, len(journal.log) + 1):
        store = journal.replay(n)
        present = _names(store)
        listed = [c.epoch for c in dkv.list_checkpoints(store)]
        if not present:             # the claim alone
            assert listed == []
            continue
        assert listed and listed[-1] == max(present), (n, listed, present)
        for e in listed:
            with dkv.open(store, checkpoint=e, read_only=True) as ro:
                assert contents(ro) == snaps[e], (n, e)
        with dkv.open(store, retain=2, background=False, **INLINE) as w:
            w.put(b"after", b"%d" % n)
            w.checkpoint(100).wait()
            w.put(b"after2", b"%d" % n)
            w.checkpoint(101).wait()
        with dkv.open(store, read_only=True) as ro:
            assert contents(ro) == {**snaps[listed[-1]], b"after": b"%d" % n, b"after2": b"%d" % n}
        for c in dkv.list_checkpoints(store):
            dkv.open(store, checkpoint=c.epoch, read_only=True).close()


# -- other writers ----------------------------------------------------------------------------

def test_a_new_writer_names_its_predecessors_carriers_and_collects_them_when_unneeded():
    store = MemoryStore()
    db, model, _ = _snapshot_run(store, range(1, 4))
    db.close()
    w2 = dkv.open(store, background=False, retain=2, **INLINE)
    _small_checkpoints(w2, model, [4, 5])
    m5 = read_manifest(store, w2.checkpoints()[-1].name)
    assert mf.carriers(m5) == {(1, 1), (2, 1), (3, 1), (4, 2)}
    assert _names(store) == [1, 2, 3, 4, 5]
    w2.flush()
    _small_checkpoints(w2, model, [6, 7])
    assert _names(store) == [6, 7]
    w2.close()
    with dkv.open(store, read_only=True) as ro:
        assert contents(ro) == model


def test_a_fenced_writer_deletes_no_carrier_the_new_writer_names():
    store = MemoryStore()
    model: dict = {}
    w1 = dkv.open(store, background=False, retain=2, **INLINE)
    _small_checkpoints(w1, model, range(1, 5))
    w2 = dkv.open(store, background=False, retain=2, **INLINE)      # fences w1
    w2_model = dict(model)
    with pytest.raises(dkv.FencedError):
        _small_checkpoints(w1, {}, [5], tag=b"zombie")
    _small_checkpoints(w2, w2_model, [5, 6])
    assert mf.carriers(read_manifest(store, w2.checkpoints()[-1].name)) >= {(1, 1), (2, 1)}
    w1.close()
    w2.close()
    with dkv.open(store, read_only=True) as ro:
        assert contents(ro) == w2_model


def test_refresh_catches_up_to_another_writers_carried_segments():
    store = MemoryStore()
    model: dict = {}
    w1 = dkv.open(store, background=False, retain=3, **INLINE)
    _small_checkpoints(w1, model, range(1, 4))
    w2 = dkv.open(store, background=False, retain=3, **INLINE)
    _small_checkpoints(w2, model, [4, 5])
    changed = w1.refresh(5)
    assert changed is not None and contents(w1) == model
    _small_checkpoints(w1, model, [6])
    m6 = read_manifest(store, w1.checkpoints()[-1].name)
    assert mf.carriers(m6) == {(1, 1), (2, 1), (3, 1), (4, 2), (5, 2)}
    w1.close()
    w2.close()
    with dkv.open(store, read_only=True) as ro:
        assert contents(ro) == model


def test_a_rescaled_instance_carries_its_sources_inline_segments_once():
    store = MemoryStore()
    model: dict = {}
    a = dkv.open(store, instance="a", background=False, retain=2, **INLINE)
    _small_checkpoints(a, model, range(1, 5))
    a.close()
    b = dkv.open(store, instance="b", sources=[("a", 4)], background=False, retain=2, **INLINE)
    _small_checkpoints(b, model, [1])
    m1 = read_manifest(store, b.checkpoints()[-1].name)
    assert [(r.ns, r.first) for r in m1.wal if r.data is not None] == [("a", 1), ("a", 2), ("a", 3), ("a", 4), ("b", 1)]
    _small_checkpoints(b, model, [2])
    m2 = read_manifest(store, b.checkpoints()[-1].name)
    assert mf.carriers(m2) == {(1, b._writer)}
    assert [r.ns for r in m2.wal if r.data is not None] == ["b"]
    b.close()
    dkv.retire(store, "a")
    dkv.collect_garbage(store)
    assert not [n for n, _ in store.list("a/")
                if not n.endswith("retired")], "a's manifests go: b carries what it needs"
    with dkv.open(store, instance="b", read_only=True) as ro:
        assert contents(ro) == model


def test_a_writer_that_rewinds_lists_no_carrier_as_a_checkpoint():
    store = MemoryStore()
    db, model, snaps = _snapshot_run(store, range(1, 7))
    db.close()
    assert [c.epoch for c in dkv.list_checkpoints(store)] == [5, 6]
    w = dkv.open(store, checkpoint=5, discard_newer=True, background=False, retain=2, **INLINE)
    assert [c.epoch for c in w.checkpoints()] == [5]
    assert contents(w) == snaps[5]
    m = dict(snaps[5])
    _small_checkpoints(w, m, [6])
    assert [c.epoch for c in dkv.list_checkpoints(store)] == [5, 6]
    w.close()
    for e, want in ((5, snaps[5]), (6, m)):
        with dkv.open(store, checkpoint=e, read_only=True) as ro:
            assert contents(ro) == want



def test_a_rewind_lists_no_manifest_that_left_retention_in_the_abandoned_timeline():
    """Epoch 1 leaves retention at writer 2's checkpoint 3 and stays as a carrier (2 names
    it), its table collected. A rewind to 2 invalidates 3, making 2's `k` ([1, 2]) the
    newest word: 1 must not count as a checkpoint again (seed 3002 of the long inline runs
    opened it and found its table gone), neither for a reader nor for the next writer,
    until and after the rewinding writer's first manifest."""
    store = MemoryStore()
    opts = dict(background=False, retain=2, **INLINE)
    a = dkv.open(store, **opts)
    a.put(b"a", b"1")
    a.flush()                                   # table T1
    a.put(b"b", b"2")
    a.checkpoint(1, flush=False).wait()         # [T1] + segment 1 inline
    a.compact(full=True)                        # T1 -> T2
    a.put(b"c", b"3")
    a.checkpoint(2, flush=False).wait()         # [T2], names 1 as the carrier of segment 1
    snap2 = contents(a)
    a.close()
    b = dkv.open(store, **opts)
    b.put(b"d", b"4")
    b.checkpoint(3, flush=False).wait()         # k = [2, 3]: 1 is a carrier, T1 is collected
    b.close()
    table1 = next(iter(read_manifest(store, _paths.manifest_name("", 1, 1)).tables())).path
    assert _names(store) == [1, 2, 3] and not store.exists(table1)

    rewind = dkv.open(store, checkpoint=2, discard_newer=True, **opts)
    assert [c.epoch for c in rewind.checkpoints()] == [2]
    rewind.close()                              # no manifest of its own: 2's `k` is the newest
    assert [c.epoch for c in dkv.list_checkpoints(store)] == [2]
    with pytest.raises(dkv.CheckpointNotFoundError, match="no checkpoint any more"):
        dkv.open(store, checkpoint=1, read_only=True)
    w = dkv.open(store, **opts)                 # the next writer
    assert [c.epoch for c in w.checkpoints()] == [2]
    assert contents(w) == snap2
    w.checkpoint(3).wait()                      # k = [2, 3]; the abandoned 3 is collected
    assert [c.epoch for c in w.checkpoints()] == [2, 3]
    w.close()
    assert [c.epoch for c in dkv.list_checkpoints(store)] == [2, 3]
    for e in (2, 3):
        with dkv.open(store, checkpoint=e, read_only=True) as ro:
            assert contents(ro) == snap2

# -- bounds -----------------------------------------------------------------------------------

def test_inline_segments_flush_by_their_own_count():
    """flush_segments (2 here) counts segments in files; inline ones have their own bound:
    the seal that finds 20 of them live queues the flush."""
    store = LoggingStore(MemoryStore())
    db = dkv.open(store, background=False, retain=2, flush_segments=2, flush_inline_segments=20, **INLINE)
    model: dict = {}
    _small_checkpoints(db, model, range(1, 21))
    assert not [c for c in store.calls if c.kind == "put" and c.key.startswith("sst/")], "20 inline: no flush yet"
    _small_checkpoints(db, model, [21])
    assert len([c for c in store.calls if c.kind == "put" and c.key.startswith("sst/")]) == 1
    _small_checkpoints(db, model, [22, 23])
    assert _names(store.inner) == [22, 23]
    db.close()
    with dkv.open(store.inner, read_only=True) as ro:
        assert contents(ro) == model


def test_a_zombies_manifest_that_a_new_writer_opened_from_stays():
    """The zombie creates manifest 4, a new writer opens from it (its claim starts at 4),
    then the zombie finds the claim and reports FencedError: its manifest carries segment 4
    for the new writer's checkpoints, so it is not withdrawn (RFC 0011)."""
    from dkv.storage import ObjectStore

    class OpenBetween(ObjectStore):
        """Opens a second writer right after the first manifest 4 is created."""
        def __init__(self, inner):
            self.inner, self.location, self.w2 = inner, "between://", None

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def put_if_absent(self, key, data):
            ok = self.inner.put_if_absent(key, data)
            if ok and key == _paths.manifest_name("", 4, 1) and self.w2 is None:
                self.w2 = dkv.open(self.inner, background=False, retain=2, **INLINE)
            return ok

        def get(self, key, start=None, end=None):
            return self.inner.get(key, start, end)

        def put(self, key, data):
            return self.inner.put(key, data)

        def list(self, prefix=""):
            return self.inner.list(prefix)

        def delete(self, key):
            return self.inner.delete(key)

        def size(self, key):
            return self.inner.size(key)

    inner = MemoryStore()
    store = OpenBetween(inner)
    model: dict = {}
    w1 = dkv.open(store, background=False, retain=2, **INLINE)
    _small_checkpoints(w1, model, range(1, 4))
    w1.put(b"k99", b"four")
    model[b"k99"] = b"four"
    with pytest.raises(dkv.FencedError) as fenced:
        w1.checkpoint(4).wait()
    assert fenced.value.checkpoint_kept, fenced.value     # fenced, and told its checkpoint stays
    assert "checkpoint 4 itself stays: the newer writer started from it" in str(fenced.value)
    w2 = store.w2
    assert contents(w2) == model
    _small_checkpoints(w2, model, [5, 6])
    assert (4, 1) in mf.carriers(read_manifest(inner, w2.checkpoints()[-1].name))
    w2.close()
    with dkv.open(inner, read_only=True) as ro:
        assert contents(ro) == model


@pytest.mark.parametrize("fault", ["list", "create"])
def test_a_zombies_manifest_stays_when_its_fate_is_unknown(fault):
    """The zombie creates manifest 4 and a new writer opens from it (its claim starts at 4);
    then ``list``: the zombie's listing of the claims fails, or ``create``: the create
    reports an error although the manifest was stored. Either way the zombie cannot tell
    from the answers that the new writer names manifest 4 as a carrier, so it must not
    withdraw it (RFC 0011, Risks). The new writer's two checkpoints, and every listed
    checkpoint, open with their data."""
    from dkv.storage import FaultInjectingStore, ObjectStore

    class OpenBetween(ObjectStore):
        """Opens a second writer right after manifest 4 is created, then fails the next
        listing of the claims (``list``) or reports the create failed (``create``)."""
        def __init__(self, inner, faults):
            self.inner, self.faults, self.location, self.w2 = inner, faults, "between://", None

        def __getattr__(self, name):
            return getattr(self.faults, name)

        def put_if_absent(self, key, data):
            ok = self.faults.put_if_absent(key, data)
            if ok and key == _paths.manifest_name("", 4, 1) and self.w2 is None:
                self.w2 = dkv.open(self.inner, background=False, retain=2, **INLINE)
                if fault == "create":
                    raise dkv.StorageError(f"timed out creating {key} (it was stored)")
                self.faults.fail("list", key_prefix=_paths.WRITER_DIR)
            return ok

        def get(self, key, start=None, end=None):
            return self.faults.get(key, start, end)

        def put(self, key, data):
            return self.faults.put(key, data)

        def list(self, prefix=""):
            return self.faults.list(prefix)

        def delete(self, key):
            return self.faults.delete(key)

        def size(self, key):
            return self.faults.size(key)

    inner = MemoryStore()
    faults = FaultInjectingStore(inner)
    store = OpenBetween(inner, faults)
    model: dict = {}
    snaps: dict = {}
    w1 = dkv.open(store, background=False, retain=2, **INLINE)
    for e in range(1, 4):
        _small_checkpoints(w1, model, [e])
        snaps[e] = dict(model)
    w1.put(b"k99", b"four")
    model[b"k99"] = b"four"
    with pytest.raises(dkv.DkvError) as failed:     # create: the claims say it is fenced
        w1.checkpoint(4).wait()
    assert faults.fired == (["error list writer/"] if fault == "list" else []), faults.fired
    snaps[4] = dict(model)
    w2 = store.w2
    assert w2.opened_from.epoch == 4 and contents(w2) == model
    for e in (5, 6):
        _small_checkpoints(w2, model, [e])
        snaps[e] = dict(model)
    assert (4, 1) in mf.carriers(read_manifest(inner, w2.checkpoints()[-1].name))
    listed = [c.epoch for c in dkv.list_checkpoints(inner)]
    assert listed == [5, 6]
    for e in listed:
        with dkv.open(inner, checkpoint=e, read_only=True) as ro:
            assert contents(ro) == snaps[e], e
    w2.close()
    w1.close()
    with dkv.open(inner, read_only=True) as ro:
        assert contents(ro) == model
    # list: its outcome is unknown; create: stored whole, so the claims decided (fenced)
    assert isinstance(failed.value, dkv.StorageError if fault == "list" else dkv.FencedError), failed.value


def test_a_fenced_zombie_that_cannot_read_the_claims_again_keeps_its_manifest_and_says_so():
    """A new writer opens from checkpoint 3 just before the zombie creates manifest 4; the
    zombie's listing of the claims finds it fenced, then reading the claims again (did the
    new writer start from 4?) fails. The manifest stays (an invalid one is ignored and
    collected), and the error says its fate is unknown, not that it stays as a checkpoint."""
    from dkv.storage.wrappers import _Forwarding

    class Between(_Forwarding):
        def __init__(self, inner):
            super().__init__(inner)
            self.w2, self.listings = None, 0

        def put_if_absent(self, key, data):
            if key == _paths.manifest_name("", 4, 1) and self.w2 is None:
                self.w2 = dkv.open(self.inner, background=False, retain=2, **INLINE)
                self.listings = 1
            return self.inner.put_if_absent(key, data)

        def list(self, prefix=""):
            if self.listings and prefix.startswith(_paths.WRITER_DIR):
                self.listings += 1
                if self.listings == 3:          # the second listing after the create
                    raise dkv.StorageError("listing writer/ timed out")
            return self.inner.list(prefix)

    inner = MemoryStore()
    store = Between(inner)
    model: dict = {}
    w1 = dkv.open(store, background=False, retain=2, **INLINE)
    _small_checkpoints(w1, model, range(1, 4))
    w1.put(b"k99", b"four")
    with pytest.raises(dkv.FencedError) as fenced:
        w1.checkpoint(4).wait()
    assert fenced.value.outcome_unknown and not fenced.value.checkpoint_kept, fenced.value
    assert "whether checkpoint 4 stays is unknown" in str(fenced.value)
    assert store.w2.opened_from.epoch == 3
    assert _paths.manifest_name("", 4, 1) in [n for n, _ in inner.list(_paths.MANIFEST_DIR)]
    _small_checkpoints(store.w2, model, [4, 5])
    store.w2.close()
    with dkv.open(inner, read_only=True) as ro:
        assert contents(ro) == model and [c.writer for c in ro.checkpoints()][-2:] == [2, 2]
