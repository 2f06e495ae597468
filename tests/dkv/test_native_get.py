"""The C twin of ``DB.get`` (``dkv.format._native.db_get``, RFC 0012 step 3) against its
Python, the reference: the same random writes (puts, deletes, seals, flushes, compactions)
on two stores, one read through C and the other through Python (``dkv._reads._GET`` flipped
around each call), with a block cache small enough to miss; every get's value or error
compared, and after each step the block cache (bytes, hits, misses, the CLOCK ring) and
every table's cache state (its ``_ref`` marks, which blocks are cached and their restart
hints). Stores restored from another instance with a key-group range (clipped tables and
segments), tombstones, missing keys, keys at block boundaries and at the clip bounds, bloom
filters with a strip rule, bad keys, a closed store, patched methods and an
ObjectMissingError of the levels (raised or retried) are among them."""
from __future__ import annotations

import random

import pytest

import dkv
from dkv import _getpath, _reads
from dkv._memtable import NO_RECORD, Memtable
from dkv._table import Table
from dkv._version import Version
from dkv.errors import ObjectMissingError
from dkv.storage import MemoryStore

from .dkv_helpers import SMALL

pytestmark = pytest.mark.skipif(_reads._GET is None, reason="dkv.format._native was not built (no compiler), "
                                                          "or OBJECTSPACE_NATIVE=0")
OPTS = dict(SMALL, background=False, retain=2, block_cache_bytes=6000)
CONFIGS = {
    "small-cache": dict(block_cache_bytes=1500),
    "roomy-cache": dict(block_cache_bytes=1 << 20),
    "strip": dict(bloom_strip=(1, 2)),
    "big-blocks": dict(block_bytes=2048, memtable_bytes=6000, flush_bytes=12000, table_bytes=12000),
}


def key(group: int, i: int) -> bytes:
    return dkv.key_prefix(group, 0) + b"%03d" % i + (b"\x01" + bytes([i % 7, i % 5]) if i % 3 == 0 else b"")


def _blk(b):
    return None if b is None else list(b)


def _table(t) -> tuple:
    blocks = None if t._blocks is None else [_blk(b) for b in t._blocks]
    return (t.path, t.clip_lo, t.clip_hi, t._meta is not None, bytes(t._ref) if t._meta is not None else None, blocks)


def state(db) -> dict:
    """What a get may change: the block cache's counters and ring, each table's cache state."""
    c = db._cache
    sources, version = db._view
    return {"cache": (c.used, c.hits, c.misses, [(t.path, t.clip_lo, i, cost) for t, i, cost in c._ring]),
            "sources": [("mem", len(s.data)) if type(s) is Memtable else _table(s) for s in sources],
            "tables": [_table(t) for t in version.tables()],
            "probe": db._probe[0] is sources}


class Twin:
    """The same writes on two stores: [0] read through C, [1] through Python."""

    def __init__(self, dbs):
        self.dbs = dbs

    def get(self, k):
        outs = []
        for i, db in enumerate(self.dbs):
            saved = _reads._GET
            _reads._GET = saved if i == 0 else None
            try:
                outs.append(("ok", db.get(k)))
            except Exception as e:  # noqa: BLE001 - compared between the two
                outs.append(("error", type(e).__name__, str(e)))
            finally:
                _reads._GET = saved
        assert outs[0] == outs[1], k
        return outs[0]

    def write(self, fn):
        for db in self.dbs:
            fn(db)

    def same(self):
        a, b = (state(db) for db in self.dbs)
        assert a == b

    def close(self):
        for db in self.dbs:
            db.close()


def _open_plain(opts):
    return Twin([dkv.open(MemoryStore(), **opts) for _ in range(2)])


def _open_clipped(opts, groups, rng_seed):
    """Two stores restored from an instance over groups 0..256 into ``groups``: their tables
    and segments are clipped views of the source's."""
    dbs = []
    for _ in range(2):
        store = MemoryStore()
        rng = random.Random(rng_seed)
        with dkv.open(store, instance="a", key_group_range=(0, 256), **opts) as a:
            for r in range(3):
                for _ in range(150):
                    k = key(rng.randrange(256), rng.randrange(40))
                    if rng.random() < 0.85:
                        a.put(k, b"a%d" % rng.randrange(10**6))
                    else:
                        a.delete(k)
                a.checkpoint(r + 1).wait()
            for g in range(256):
                a.put(g.to_bytes(2, "big"), b"bare %d" % g)    # keys equal to a group's bound
            a.checkpoint(4).wait()
            for _ in range(40):                                 # only in the WAL: clipped Deltas
                a.put(key(rng.randrange(256), rng.randrange(40)), b"wal")
            for g in range(0, 256, 3):
                a.put(g.to_bytes(2, "big"), b"wal bare %d" % g)
            a.checkpoint(5).wait()
        dbs.append(dkv.open(store, instance="b", sources=[("a", 5)], key_group_range=groups, **opts))
    return Twin(dbs)


def _known_keys(db) -> list:
    """Keys at block boundaries: every block's first key of every table, and its neighbours."""
    sources, version = db._view
    out = []
    for t in list(version.tables()) + [s for s in sources if type(s) is not Memtable]:
        t.meta()
        for k in t._first:
            out += [k, k[:-1], k + b"\x00"]
    return [k for k in out if k]


def random_write(tw, rng: random.Random, step: int, r: float, g: int, k: bytes, groups: tuple, written: list) -> bool:
    """The write a random run's draw ``r`` makes on both stores of ``tw`` (a put or delete of
    ``k`` in group ``g`` if the store owns it, a checkpoint, flush or compaction): True, or
    False when ``r`` draws a read (the caller's). Shared by the get and scan twins' runs."""
    lo, hi = groups
    if r < 0.3:
        if lo <= g < hi:
            v = b"v%d-%d" % (step, rng.randrange(1000)) * rng.randrange(1, 4)
            tw.write(lambda db: db.put(k, v))
            written.append(k)
    elif r < 0.4:
        if lo <= g < hi:
            tw.write(lambda db: db.delete(k))
    elif r < 0.43:
        tw.write(lambda db: db.checkpoint().wait())
    elif r < 0.45:
        tw.write(lambda db: db.flush())
    elif r < 0.46:
        full = rng.random() < 0.3
        tw.write(lambda db: db.compact(full=full))
    else:
        return False
    return True


def _random_run(tw: Twin, rng: random.Random, steps: int, groups=(0, 4)):
    lo, hi = groups
    written: list = []
    for step in range(steps):
        r = rng.random() if step % 3 else rng.random() * 0.4      # a third more writes
        g = rng.randrange(max(0, lo - 2), min(256, hi + 2))
        k = key(g, rng.randrange(40))
        if not random_write(tw, rng, step, r, g, k, groups, written):
            if r < 0.6:
                known = [_known_keys(db) for db in tw.dbs][0]      # (both: it reads the tables' metadata)
                if known:
                    tw.get(rng.choice(known))
            elif r < 0.63:
                edge = rng.choice([lo, hi, hi - 1, lo + 1]) % 65536
                tw.get(edge.to_bytes(2, "big"))
                tw.get(edge.to_bytes(2, "big") + b"\x00")
            elif r < 0.85 and written:
                tw.get(rng.choice(written))     # written, overwritten or deleted since
            else:
                tw.get(k)
        tw.same()


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3))
def test_random_gets_are_the_same_on_both_paths(config, seed):
    tw = _open_plain(dict(OPTS, **CONFIGS[config]))
    try:
        _random_run(tw, random.Random(seed), 500)
    finally:
        tw.close()


@pytest.mark.parametrize("groups", [(64, 192), (0, 100), (100, 256)])
def test_gets_of_clipped_tables_are_the_same_on_both_paths(groups):
    tw = _open_clipped(OPTS, groups, 11)
    try:
        sources, version = tw.dbs[0]._view
        clipped = [t for t in list(version.tables()) + list(sources) if type(t) is not Memtable and
                   (t.clip_lo is not None or t.clip_hi is not None)]
        assert clipped, "the restored instance reads clipped tables"
        rng = random.Random(sum(groups))
        for g in range(256):                # every group, its bounds and keys in it
            tw.get(g.to_bytes(2, "big"))
            tw.get(key(g, rng.randrange(40)))
            tw.same()
        _random_run(tw, rng, 300, groups)
    finally:
        tw.close()


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("seed", range(3, 13))
def test_long_random_gets_are_the_same_on_both_paths(config, seed):
    tw = _open_plain(dict(OPTS, **CONFIGS[config]))
    try:
        _random_run(tw, random.Random(seed), 3000)
    finally:
        tw.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_long_random_gets_of_clipped_tables_are_the_same_on_both_paths(seed):
    rng = random.Random(seed)
    lo = rng.randrange(0, 200)
    groups = (lo, rng.randrange(lo + 1, 257))
    tw = _open_clipped(dict(OPTS, **CONFIGS[rng.choice(list(CONFIGS))]), groups, seed)
    try:
        _random_run(tw, rng, 1500, groups)
    finally:
        tw.close()


def test_the_c_get_answers_without_handing_over():
    db = dkv.open(MemoryStore(), **OPTS)
    try:
        for i in range(300):
            db.put(key(i % 50, i), b"x%d" % i)
        db.checkpoint().wait()
        db.flush()
        for i in range(0, 300, 2):
            db.put(key(i % 50, i), b"y%d" % i)
        db.checkpoint().wait()
        db.delete(key(1, 1))
        db.get(b"refresh the probe")
        assert db._view[0] and db._view[1].l0
        for i in range(300):
            want = None if i == 1 else b"y%d" % i if i % 2 == 0 else b"x%d" % i
            assert _getpath.db_get(db, key(i % 50, i)) == want
        assert _getpath.db_get(db, b"missing") is None
        for bad in ("str", b"", None, 5, bytearray(b"k")):
            assert _getpath.db_get(db, bad) is NO_RECORD        # DB.get's Python decides
    finally:
        db.close()
    assert _getpath.db_get(db, b"k") is NO_RECORD


@pytest.mark.parametrize("bad", ["str", b"", None, 5, bytearray(b"k"), memoryview(b"k"), b"x" * 70000])
def test_bad_keys_and_a_closed_store_raise_as_python_does(bad):
    tw = _open_plain(OPTS)
    try:
        for i in range(200):
            tw.write(lambda db: db.put(key(3, i % 40), b"v%d" % i))
        tw.get(bad)
        tw.same()
        for db in tw.dbs:
            db.close()
        tw.get(bad)
        tw.get(key(3, 1))
    finally:
        tw.close()


def _fill(tw, n=400):
    for i in range(n):
        tw.write(lambda db: db.put(key(i % 30, i % 97), b"v%d" % i))
        if i % 100 == 99:
            tw.write(lambda db: db.checkpoint().wait())
    tw.write(lambda db: db.flush())
    for i in range(0, n, 3):
        tw.write(lambda db: db.put(key(i % 30, i % 97), b"w%d" % i))
    tw.write(lambda db: db.checkpoint().wait())


def _each(tw, fn):
    """fn(db) on [0] through C and on [1] through Python, one after the other (not compared)."""
    outs = []
    for i, db in enumerate(tw.dbs):
        saved = _reads._GET
        _reads._GET = saved if i == 0 else None
        try:
            outs.append(fn(db))
        finally:
            _reads._GET = saved
    return outs


def test_patched_methods_are_called_in_their_place(monkeypatch):
    tw = _open_plain(OPTS)
    try:
        _fill(tw)
        calls = []

        def counted(name, f):
            def wrapper(self, k):
                calls.append((name, getattr(self, "path", None), k))
                return f(self, k)
            return wrapper
        monkeypatch.setattr(Table, "get", counted("get", Table.get))
        monkeypatch.setattr(Table, "get_probed", counted("get_probed", Table.get_probed))
        monkeypatch.setattr(Version, "get", counted("version", Version.get))
        for k in [key(g, i) for g in range(0, 30, 3) for i in range(0, 97, 5)]:
            def get(db):
                calls.clear()
                try:
                    return db.get(k), list(calls)
                except Exception as e:  # noqa: BLE001
                    return type(e).__name__, str(e), list(calls)
            c, py = _each(tw, get)
            assert c == py
            tw.same()
        assert any(name == "version" for name, _, _ in c[1]) or c[1] == []
    finally:
        tw.close()


def test_an_unusual_source_or_memtable_goes_to_its_own_methods():
    tw = _open_plain(OPTS)
    try:
        _fill(tw)
        seen = []

        class Table2(Table):
            __slots__ = ()

            def get(self, k):
                seen.append(k)
                return Table.get(self, k)

        for db in tw.dbs:
            sources, version = db._view
            l0 = []
            for t in version.l0:
                t2 = Table2(t.ref, t._store, t._cache)
                l0.append(t2)
            db._view = (sources, Version(tuple(l0), version.levels))
        for g in range(30):
            for i in range(0, 97, 7):
                tw.get(key(g, i))
                tw.same()
        assert seen
        # a Memtable subclass as the active memtable: DB.get's Python, whole
        class Mem(Memtable):
            __slots__ = ()
        for db in tw.dbs:
            m = Mem()
            m.data.update(db._active.data)
            db._active = m
        assert _getpath.db_get(tw.dbs[0], key(1, 1)) is NO_RECORD
        tw.get(key(1, 1))
    finally:
        tw.close()


@pytest.mark.parametrize("changed", [False, True])
def test_an_object_missing_error_of_the_levels_is_raised_or_retried(monkeypatch, changed):
    tw = _open_plain(dict(OPTS, block_cache_bytes=1))
    try:
        _fill(tw)
        fails = []
        orig = Table._fetch

        def fetch(self, i):
            if not fails and type(self) is Table:
                fails.append(self.path)
                db = current[0]
                if changed:     # as a compaction would: a new view with the same data
                    sources, version = db._view
                    db._view = (sources, Version(version.l0, version.levels))
                raise ObjectMissingError(f"gone: {self.path}")
            return orig(self, i)
        monkeypatch.setattr(Table, "_fetch", fetch)
        current = [None]
        raised = 0
        for g in range(30):
            k = key(g, 0)

            def get(db):
                current[0] = db
                fails.clear()
                try:
                    return "ok", db.get(k), list(fails)
                except ObjectMissingError as e:
                    return "error", str(e), list(fails)
            c, py = _each(tw, get)
            assert c == py
            raised += bool(c[2])
            if c[2]:
                assert (c[0] == "ok") == changed, c
            tw.same()
        assert raised
    finally:
        tw.close()
