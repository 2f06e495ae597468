"""Rescale by key groups: instances merged into one and one split into two.

Keys start with a 2-byte big-endian key group (dkv.key_prefix). A new instance opened
with ``sources=[(instance, epoch), ...]`` and ``key_group_range=(first, end)`` must hold
exactly the sources' checkpoint contents restricted to its range, share their SSTs
(the new manifest names the sources' files; no SST is written while opening and taking
the first checkpoint), refuse writes outside its range, and leave the sources intact.
"""
from __future__ import annotations

import random

import pytest

import dkv
from dkv.storage import LoggingStore, MemoryStore
from .dkv_helpers import SMALL, contents, data_files, manifest_files, read_manifest

OPTS = dict(SMALL, background=False, retain=2)
SCHEMA = 0x00           # the schema byte after the key group: any byte (objectspace's state uses 0)


def key(group: int, i: int) -> bytes:
    return dkv.key_prefix(group, SCHEMA) + b"%04d" % i


def in_groups(model: dict, lo: int, hi: int) -> dict:
    return {k: v for k, v in model.items() if lo <= dkv.key_group_of(k) < hi}


def _populate(db, model, groups, seed, rounds=3):
    """Records in SSTs at several levels, and the newest ones only in the WAL."""
    rng = random.Random(seed)
    for r in range(rounds):
        for i in range(120):
            g = rng.randrange(*groups)
            k = key(g, rng.randrange(20))
            if rng.random() < 0.85:
                v = b"%d-%d-%d" % (seed, r, i)
                db.put(k, v)
                model[k] = v
            else:
                db.delete(k)
                model.pop(k, None)
        db.checkpoint(r + 1).wait()
    for g in (groups[0], groups[1] - 1):            # the edges of the range
        for k, v in ((key(g, 99), b"edge"), (g.to_bytes(2, "big"), b"bare group prefix")):
            db.put(k, v)
            model[k] = v
    db.checkpoint(rounds + 1).wait()
    k = key(groups[0], 98)                          # after the last flush: only in the WAL
    db.put(k, b"wal only")
    model[k] = b"wal only"
    db.checkpoint(rounds + 2).wait()
    return rounds + 2


def _ssts_written(log) -> list:
    return [c.key for c in log.calls if c.kind in ("put", "put_if_absent") and "/sst/" in "/" + c.key]


def test_merge_two_instances_into_one(any_store):
    model_a, model_b = {}, {}
    with dkv.open(any_store, instance="a", key_group_range=(0, 128), **OPTS) as a:
        ea = _populate(a, model_a, (0, 128), seed=1)
    with dkv.open(any_store, instance="b", key_group_range=(128, 256), **OPTS) as b:
        eb = _populate(b, model_b, (128, 256), seed=2, rounds=2)
    sources_files = set()
    for ns, e in (("a", ea), ("b", eb)):
        [info] = [c for c in dkv.list_checkpoints(any_store, ns) if c.epoch == e]
        sources_files |= manifest_files(read_manifest(any_store, info.name))

    log = LoggingStore(any_store)
    c = dkv.open(log, instance="c", sources=[("a", ea), ("b", eb)], key_group_range=(0, 256), **OPTS)
    merged = {**model_a, **model_b}
    assert contents(c) == merged
    name = c.checkpoint(1).wait()
    assert _ssts_written(log) == [], "a rescale shares SSTs, it never copies them"
    m = read_manifest(any_store, name)
    tables = {t.path for t in m.tables()}
    assert tables and all(p.startswith(("a/sst/", "b/sst/")) for p in tables)
    assert manifest_files(m) <= sources_files | {n for n in data_files(any_store, "c/")}
    assert {r.ns for r in m.wal} >= {"a", "b"}

    with pytest.raises(ValueError, match="outside"):
        c.put(key(256, 1), b"x")
    # c goes on: writes, compactions into its own files, checkpoints.
    for i in range(200):
        k = key(i % 256, 500 + i % 7)
        c.put(k, b"c%d" % i)
        merged[k] = b"c%d" % i
    c.compact(full=True)
    c.checkpoint(2).wait()
    c.close()
    with dkv.open(any_store, instance="c", **OPTS) as c:
        assert contents(c) == merged
        assert c.groups == (0, 256)
    # The sources are untouched.
    with dkv.open(any_store, instance="a", read_only=True) as a:
        assert contents(a) == model_a
    with dkv.open(any_store, instance="b", read_only=True) as b:
        assert contents(b) == model_b


def test_an_instance_made_from_the_root_instance_reopens(any_store):
    """``sources=[("", n)]``: the new instance's manifest names the root instance's files
    as the root names them ("sst/…", owner ""), which its own folder would match too; a
    reopen finds them where they are (it looked in the instance's folder, and failed)."""
    model = {}
    with dkv.open(any_store, key_group_range=(0, 256), **OPTS) as root:
        e = _populate(root, model, (0, 256), seed=5)
    half = {k: v for k, v in model.items() if dkv.key_group_of(k) < 128}
    with dkv.open(any_store, instance="half", key_group_range=(0, 128), sources=[("", e)], **OPTS) as h:
        assert contents(h) == half
        h.checkpoint().wait()
    for read_only in (True, False):
        with dkv.open(any_store, instance="half", read_only=read_only, **OPTS) as h:
            assert contents(h) == half
    with dkv.open(any_store, read_only=True) as root:
        assert contents(root) == model


def test_split_one_instance_into_two():
    root = MemoryStore()
    model = {}
    with dkv.open(root, instance="a", key_group_range=(0, 256), **OPTS) as a:
        e = _populate(a, model, (0, 256), seed=3)
        # A key exactly on the split boundary and one just below it.
        for k in (b"\x00\x80", b"\x00\x7f\xff\xff"):
            a.put(k, b"boundary")
            model[k] = b"boundary"
        e += 1
        a.checkpoint(e).wait()

    log = LoggingStore(root)
    halves = {}
    for ns, groups in (("c", (0, 128)), ("d", (128, 256))):
        db = dkv.open(log, instance=ns, sources=[("a", e)], key_group_range=groups, **OPTS)
        part = in_groups(model, *groups)
        assert contents(db) == part
        for k, v in part.items():
            assert db.get(k) == v
        name = db.checkpoint(1).wait()
        m = read_manifest(root, name)
        assert m.groups == groups
        assert all(t.path.startswith("a/sst/") for t in m.tables())
        assert all(t.groups == groups for t in m.tables()), "the share of each file is recorded"
        halves[ns] = (db, part, groups)
    assert _ssts_written(log) == []
    assert set(halves["c"][1]) | set(halves["d"][1]) == set(model)

    c, part_c, _ = halves["c"]
    d, part_d, _ = halves["d"]
    # Each half owns only its range: writes outside raise, reads outside find nothing.
    with pytest.raises(ValueError, match="outside"):
        c.put(key(200, 1), b"x")
    with pytest.raises(ValueError, match="outside"):
        d.delete(key(5, 1))
    with pytest.raises(ValueError):
        with c.batch() as b:
            b.put(key(1, 1), b"ok")
            b.put(key(129, 1), b"not mine")
    assert c.get(key(1, 1)) == part_c.get(key(1, 1)), "a rejected batch applies nothing"
    for k in list(part_d)[:20]:
        assert c.get(k) is None
    assert list(c.scan_prefix(dkv.key_prefix(200, SCHEMA))) == []

    # The halves diverge independently.
    for i in range(150):
        c.put(key(i % 128, 700), b"c%d" % i)
        part_c[key(i % 128, 700)] = b"c%d" % i
        d.put(key(128 + i % 128, 700), b"d%d" % i)
        part_d[key(128 + i % 128, 700)] = b"d%d" % i
    for db, part in ((c, part_c), (d, part_d)):
        db.checkpoint(2).wait()
        assert contents(db) == part
        db.close()
    with dkv.open(root, instance="a", read_only=True) as a:
        assert contents(a) == model


def test_retire_and_collect_shared_files():
    root = MemoryStore()
    model = {}
    with dkv.open(root, instance="a", **OPTS) as a:
        e = _populate(a, model, (0, 256), seed=4)
    halves = {}
    for ns, groups in (("c", (0, 128)), ("d", (128, 256))):
        db = dkv.open(root, instance=ns, sources=[("a", e)], key_group_range=groups, **OPTS)
        db.checkpoint(1).wait()
        halves[ns] = (db, in_groups(model, *groups))
    dkv.retire(root, "a")
    with pytest.raises(dkv.FencedError, match=r"instance 'a' of memory://\S* was retired by a rescale"):
        dkv.open(root, instance="a")
    with dkv.open(root, instance="a", read_only=True) as a:
        assert contents(a) == model

    a_files = data_files(root, "a/")
    report = dkv.collect_garbage(root)
    assert report["retired_instances"] == ["a"] and set(report["live_instances"]) == {"c", "d"}
    assert report["kept_shared_files"] > 0
    still = data_files(root, "a/")
    assert still and still <= a_files
    for db, part in halves.values():
        assert contents(db) == part

    # Once neither half references a's files (replayed WAL records flushed, a full
    # compaction, old checkpoints out of retention), collect_garbage removes them all.
    for ns, (db, part) in halves.items():
        db.flush()
        db.compact(full=True)
        for epoch in (2, 3, 4):
            db.checkpoint(epoch).wait()
        db.close()
    report = dkv.collect_garbage(root)
    assert data_files(root, "a/") == set()
    assert report["kept_shared_files"] == 0
    for ns, (_, part) in halves.items():
        for info in dkv.list_checkpoints(root, ns):
            with dkv.open(root, instance=ns, checkpoint=info.epoch, read_only=True) as db:
                assert contents(db) == part


def test_rescale_twice_chains_shared_files():
    """2 -> 1 -> 2: the second rescale shares files the first one shared."""
    root = MemoryStore()
    model = {}
    eps = {}
    for ns, groups, seed in (("a", (0, 100), 5), ("b", (100, 300), 6)):
        with dkv.open(root, instance=ns, key_group_range=groups, **OPTS) as db:
            eps[ns] = _populate(db, model, groups, seed, rounds=2)
    with dkv.open(root, instance="m", sources=[("a", eps["a"]), ("b", eps["b"])], key_group_range=(0, 300), **OPTS) as m:
        m.put(key(50, 1), b"m")
        model[key(50, 1)] = b"m"
        m.checkpoint(1).wait()
    log = LoggingStore(root)
    for ns, groups in (("x", (0, 150)), ("y", (150, 300))):
        with dkv.open(log, instance=ns, sources=[("m", 1)], key_group_range=groups, **OPTS) as db:
            assert contents(db) == in_groups(model, *groups)
            db.checkpoint(1).wait()
    assert _ssts_written(log) == []


def test_sources_must_exist_and_not_be_read_only():
    root = MemoryStore()
    with dkv.open(root, instance="a") as a:
        a.put(key(1, 1), b"v")
        a.checkpoint(1).wait()
    with pytest.raises(dkv.CheckpointNotFoundError):
        dkv.open(root, instance="c", sources=[("a", 2)])
    with pytest.raises(dkv.CheckpointNotFoundError):
        dkv.open(root, instance="c", sources=[("nope", None)])
    with pytest.raises(ValueError):
        dkv.open(root, instance="c", sources=[("a", 1)], read_only=True)
    assert dkv.instances(root) == ["a"]


def test_compaction_after_split_and_merge_keeps_both_halves_of_a_shared_sst():
    opts = dict(background=False, memtable_bytes=2000, flush_segments=1, block_bytes=256, table_bytes=1 << 20,
                l0_trigger=3, level_base_bytes=1 << 20, level_ratio=3)
    root = MemoryStore()
    model = {}
    with dkv.open(root, instance="a", **opts) as a:
        for g in range(256):
            a.put(key(g, 1), b"a%d" % g)
            model[key(g, 1)] = b"a%d" % g
        a.flush()
        a.compact(full=True)
        a.checkpoint(1).wait()
    for ns, groups in (("c", (0, 128)), ("d", (128, 256))):
        with dkv.open(root, instance=ns, sources=[("a", 1)], key_group_range=groups, **opts) as db:
            db.checkpoint(1).wait()
    e = dkv.open(root, instance="e", sources=[("c", 1), ("d", 1)], key_group_range=(0, 256), **opts)
    assert contents(e) == model
    for i in range(300):                 # only groups 0..4: the compaction overlaps one half
        e.put(key(i % 5, 100 + i), b"e")
        model[key(i % 5, 100 + i)] = b"e"
    assert e.stats().get("compactions", 0) > 0
    assert contents(e) == model
    e.close()



def test_reopened_merge_keeps_every_sources_wal_records():
    opts = dict(background=False, memtable_bytes=2000)
    root = MemoryStore()
    model = {}
    with dkv.open(root, instance="a", key_group_range=(0, 128), **opts) as a:
        for i in range(200):                      # flushes: a's WAL range skips its flushed records
            a.put(key(i % 128, i), b"a%d" % i)
            model[key(i % 128, i)] = b"a%d" % i
        a.put(key(1, 9999), b"wal-only")
        model[key(1, 9999)] = b"wal-only"
        a.checkpoint(1).wait()
    with dkv.open(root, instance="b", key_group_range=(128, 256), **opts) as b:
        for i in range(5):                        # low sequence numbers, in the WAL only
            b.put(key(128 + i, i), b"b%d" % i)
            model[key(128 + i, i)] = b"b%d" % i
        b.checkpoint(1).wait()
    with dkv.open(root, instance="c", sources=[("a", 1), ("b", 1)], key_group_range=(0, 256), **opts) as c:
        assert contents(c) == model
        c.checkpoint(1).wait()
    with dkv.open(root, instance="c", **opts) as c:
        assert contents(c) == model
        c.checkpoint(2).wait()
    with dkv.open(root, instance="c", read_only=True) as c:
        assert contents(c) == model

# -- random rescales ------------------------------------------------------------------------

class Fleet:
    """Instances of one root, each with its key-group range and its reference model."""

    def __init__(self, root, opts, groups: int) -> None:
        self.root, self.opts = root, opts
        self.live: dict = {}      # ns -> [db, (lo, hi), model, epoch]
        self.names = 0
        self.add((0, groups), [], {})

    def add(self, groups, sources, model) -> str:
        ns = f"i{self.names}"
        self.names += 1
        db = dkv.open(self.root, instance=ns, key_group_range=groups, sources=sources or None, **self.opts)
        assert contents(db) == model, f"{ns} {groups} from {sources}"
        db.checkpoint(1).wait()          # successors checkpoint before their sources are retired
        self.live[ns] = [db, groups, model, 1]
        return ns

    def checkpoint(self, ns) -> int:
        entry = self.live[ns]
        entry[3] += 1
        entry[0].checkpoint(entry[3]).wait()
        return entry[3]

    def retire(self, ns) -> tuple:
        db, groups, model, epoch = self.live.pop(ns)
        assert contents(db) == model, f"{ns} before its rescale"
        db.checkpoint(epoch + 1).wait()
        db.close()
        dkv.retire(self.root, ns)
        return groups, model, epoch + 1

    def split(self, ns, rng) -> None:
        lo, hi = self.live[ns][1]
        mid = rng.randrange(lo + 1, hi)
        (lo, hi), model, epoch = self.retire(ns)
        for part in ((lo, mid), (mid, hi)):
            self.add(part, [(ns, epoch)], in_groups(model, *part))

    def merge(self, a, b) -> None:
        (lo, _), model_a, ea = self.retire(a)
        (_, hi), model_b, eb = self.retire(b)
        self.add((lo, hi), [(a, ea), (b, eb)], {**model_a, **model_b})

    def adjacent_pairs(self) -> list:
        by_lo = sorted(self.live, key=lambda ns: self.live[ns][1][0])
        return [(x, y) for x, y in zip(by_lo, by_lo[1:]) if self.live[x][1][1] == self.live[y][1][0]]

    def check(self) -> None:
        for ns, (db, groups, model, _) in self.live.items():
            assert contents(db) == model, ns
            with dkv.open(self.root, instance=ns, read_only=True) as ro:
                assert contents(ro) == model, f"{ns}: latest checkpoint"


def run_rescales(seed: int, steps: int, background: bool = False, root=None) -> None:
    """Random writes, checkpoints, compactions, reopens, splits and merges of the instances
    of ``root`` (a fresh MemoryStore by default; test_s3_faults.py runs it over S3 through
    the fault proxy), each checked against its model."""
    rng = random.Random(seed)
    opts = dict(SMALL, background=background, retain=2)
    fleet = Fleet(MemoryStore() if root is None else root, opts, groups=32)
    for step in range(steps):
        ns = rng.choice(sorted(fleet.live))
        db, (lo, hi), model, _ = fleet.live[ns]
        r = rng.random()
        if r < 0.6:
            for i in range(rng.randrange(10, 80)):
                k = key(rng.randrange(lo, hi), rng.randrange(15))
                if rng.random() < 0.85:
                    v = b"%d-%d-%d" % (seed, step, i)
                    db.put(k, v)
                    model[k] = v
                else:
                    db.delete(k)
                    model.pop(k, None)
            if rng.random() < 0.5:
                fleet.checkpoint(ns)
        elif r < 0.7:
            db.compact(full=rng.random() < 0.5)
            assert contents(db) == model, f"{ns} after a compaction"
        elif r < 0.8 and hi - lo > 1 and len(fleet.live) < 6:
            fleet.split(ns, rng)
        elif r < 0.9 and fleet.adjacent_pairs():
            fleet.merge(*rng.choice(fleet.adjacent_pairs()))
        elif r < 0.95:
            fleet.checkpoint(ns)
            db.close()
            fleet.live[ns][0] = dkv.open(fleet.root, instance=ns, **opts)
        else:
            for n in list(fleet.live):
                fleet.checkpoint(n)
            dkv.collect_garbage(fleet.root)
            fleet.check()
    for n in list(fleet.live):
        fleet.checkpoint(n)
    fleet.check()
    dkv.collect_garbage(fleet.root)
    fleet.check()
    for db, *_ in fleet.live.values():
        db.close()


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 5])
def test_random_rescales(seed):
    run_rescales(seed, 60)


@pytest.mark.slow
@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(100, 120))
def test_random_rescales_long(seed, background):
    run_rescales(seed, 200, background)


def test_sources_with_their_own_key_group_ranges():
    """``(instance, epoch, (first, end))`` takes only those key groups from that source."""
    root = MemoryStore()
    model_a, model_b = {}, {}
    with dkv.open(root, instance="a", **OPTS) as a:
        ea = _populate(a, model_a, (0, 256), seed=7, rounds=2)
    with dkv.open(root, instance="b", **OPTS) as b:
        eb = _populate(b, model_b, (0, 256), seed=8, rounds=2)
    log = LoggingStore(root)
    with dkv.open(log, instance="c", sources=[("a", ea, (0, 100)), ("b", eb, (100, 256))], **OPTS) as c:
        want = {**in_groups(model_a, 0, 100), **in_groups(model_b, 100, 256)}
        assert contents(c) == want
        c.checkpoint(1).wait()
    assert _ssts_written(log) == []
    with dkv.open(root, instance="c", **OPTS) as c:
        assert contents(c) == want
    with pytest.raises(ValueError, match="overlap"):
        dkv.open(root, instance="d", sources=[("a", ea, (0, 120)), ("b", eb, (100, 256))])
