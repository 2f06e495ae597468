"""The C twin of ``DB.scan``'s read (``dkv.format._native.db_scan``, RFC 0012 step 4) against its
Python, the reference: the same random writes (puts, deletes, seals, flushes, compactions) on
two stores, one scanned through C and the other through Python (``dkv._reads._SCAN`` flipped
around each scan), with a block cache small enough to miss; every scan's records (or error)
compared, scans read whole, in part, or with writes between their records, and after each
step the block cache (bytes, hits, misses, the CLOCK ring), every table's cache state (its
``_ref`` marks, which blocks are cached and their restart hints) and the memtables' sorted
views. Stores restored into a key-group range (clipped tables and segments), ranges at block
and clip boundaries, open ends, empty ranges, tombstones, bad keys, a closed store, ranges
past ``SMALL_MERGE`` (the rest merged in Python), patched methods and subclassed sources,
format-1 tables and an ObjectMissingError in the middle of a scan (raised, or retried on the
new view) are among them."""
from __future__ import annotations

import itertools
import random
import shutil
from pathlib import Path

import pytest

import dkv
from dkv import _merge, _reads, _scanpath
from dkv._memtable import NO_RECORD, Memtable
from dkv._table import Table
from dkv._version import Version
from dkv.errors import ObjectMissingError
from dkv.storage import MemoryStore

from .dkv_helpers import SMALL
from .test_native_get import _known_keys, _open_clipped, _table, key, random_write

pytestmark = pytest.mark.skipif(_reads._SCAN is None, reason="dkv.format._native was not built (no compiler), "
                                                           "or OBJECTSPACE_NATIVE=0")
OPTS = dict(SMALL, background=False, retain=2, block_cache_bytes=6000)
CONFIGS = {
    "small-cache": dict(block_cache_bytes=1500),
    "roomy-cache": dict(block_cache_bytes=1 << 20),
    "big-blocks": dict(block_bytes=2048, memtable_bytes=6000, flush_bytes=12000, table_bytes=12000),
    "small-merge": dict(),          # with SMALL_MERGE at 7: most ranges of several sources go on in Python
}


def _mem(m) -> tuple:
    return ("mem", len(m.data), m._view if m._view is None else (list(m._view[0]), m._view[1]))


def state(db) -> dict:
    """What a scan may change: the block cache's counters and ring, each table's cache state,
    the memtables' sorted views."""
    c = db._cache
    sources, version = db._view
    return {"cache": (c.used, c.hits, c.misses, [(t.path, t.clip_lo, i, cost) for t, i, cost in c._ring]),
            "active": _mem(db._active),
            "sources": [_mem(s) if type(s) is Memtable else _table(s) for s in sources],
            "tables": [_table(t) for t in version.tables()]}


def _on(i: int):
    """The scan path of store i: [0] C, [1] Python."""
    class _Switch:
        def __enter__(self):
            self.saved = _reads._SCAN
            _reads._SCAN = self.saved if i == 0 else None

        def __exit__(self, *exc):
            _reads._SCAN = self.saved
    return _Switch()


class Twin:
    """The same writes on two stores: [0] scanned through C, [1] through Python."""

    def __init__(self, dbs):
        self.dbs = dbs

    def each(self, fn):
        """fn(db) on each store on its path: its result, or its error's type and message."""
        outs = []
        for i, db in enumerate(self.dbs):
            with _on(i):
                try:
                    outs.append(("ok", fn(db)))
                except Exception as e:  # noqa: BLE001 - compared between the two
                    outs.append(("error", type(e).__name__, str(e)))
        return outs

    def scan(self, start=None, end=None, take=None, write=None):
        """Compare a scan of [start, end): whole, its first ``take`` records, or with
        ``write(db)`` made after half of them."""
        def run(db):
            it = db.scan(start, end)
            if write is None:
                return list(it) if take is None else list(itertools.islice(it, take))
            out = list(itertools.islice(it, take or 0))
            write(db)
            return out + list(it)
        outs = self.each(run)
        assert outs[0] == outs[1], (start, end, take)
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


def _bound(rng, known, written, lo, hi):
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.45 and known:
        return rng.choice(known)
    if r < 0.6 and written:
        return rng.choice(written)
    if r < 0.75:                            # a group's bound, or next to it
        return (rng.choice([lo, hi, hi - 1, lo + 1]) % 65536).to_bytes(2, "big") + rng.choice([b"", b"\x00"])
    return key(rng.randrange(max(0, lo - 2), min(256, hi + 2)), rng.randrange(40))


def _random_run(tw: Twin, rng: random.Random, steps: int, groups=(0, 4)):
    lo, hi = groups
    written: list = []
    for step in range(steps):
        r = rng.random() if step % 3 else rng.random() * 0.4      # a third more writes
        g = rng.randrange(max(0, lo - 2), min(256, hi + 2))
        k = key(g, rng.randrange(40))
        if not random_write(tw, rng, step, r, g, k, groups, written):
            known = _known_keys(tw.dbs[0]) + _known_keys(tw.dbs[1])    # (both: it reads the tables' metadata)
            a, b = _bound(rng, known, written, lo, hi), _bound(rng, known, written, lo, hi)
            if a is not None and b is not None and a > b and rng.random() < 0.8:
                a, b = b, a
            how = rng.random()
            if how < 0.6:
                tw.scan(a, b)
            elif how < 0.8:
                tw.scan(a, b, take=rng.randrange(4))
            else:                           # a write (or a seal) between its records
                wk, wv = key(rng.randrange(lo, hi), rng.randrange(40)), b"w%d" % step
                seal = rng.random() < 0.3

                def write(db):
                    db.put(wk, wv)
                    if seal:
                        db.checkpoint().wait()
                tw.scan(a, b, take=rng.randrange(4), write=write)
                written.append(wk)
        tw.same()


@pytest.fixture
def config(request, monkeypatch):
    name = request.param
    if name == "small-merge":
        monkeypatch.setattr(_merge, "SMALL_MERGE", 7)
    return name


@pytest.mark.parametrize("config", list(CONFIGS), indirect=True)
@pytest.mark.parametrize("seed", range(3))
def test_random_scans_are_the_same_on_both_paths(config, seed):
    tw = _open_plain(dict(OPTS, **CONFIGS[config]))
    try:
        _random_run(tw, random.Random(seed), 1200)
    finally:
        tw.close()


@pytest.mark.parametrize("groups", [(64, 192), (0, 100), (100, 256)])
def test_scans_of_clipped_tables_are_the_same_on_both_paths(groups):
    tw = Twin(_open_clipped(OPTS, groups, 11).dbs)
    try:
        rng = random.Random(sum(groups))
        tw.scan()
        tw.same()
        for g in range(0, 256, 5):          # groups, their bounds and keys in them
            a = g.to_bytes(2, "big")
            tw.scan(a, (g + 5).to_bytes(2, "big"))
            tw.scan(a + b"\x00", key(g, rng.randrange(40)))
            tw.scan(None, a, take=3)
            tw.same()
        _random_run(tw, rng, 600, groups)
    finally:
        tw.close()


@pytest.mark.slow
@pytest.mark.parametrize("config", list(CONFIGS), indirect=True)
@pytest.mark.parametrize("seed", range(3, 11))
def test_long_random_scans_are_the_same_on_both_paths(config, seed):
    tw = _open_plain(dict(OPTS, **CONFIGS[config]))
    try:
        _random_run(tw, random.Random(seed), 6000)
    finally:
        tw.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_long_random_scans_of_clipped_tables_are_the_same_on_both_paths(seed, monkeypatch):
    rng = random.Random(seed)
    lo = rng.randrange(0, 200)
    groups = (lo, rng.randrange(lo + 1, 257))
    name = rng.choice(list(CONFIGS))
    if name == "small-merge":
        monkeypatch.setattr(_merge, "SMALL_MERGE", 7)
    tw = Twin(_open_clipped(dict(OPTS, **CONFIGS[name]), groups, seed).dbs)
    try:
        _random_run(tw, rng, 3000, groups)
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
    for i in range(0, n, 11):
        tw.write(lambda db: db.delete(key(i % 30, i % 97)))
    tw.write(lambda db: db.checkpoint().wait())


def test_the_c_scan_answers_without_handing_over():
    db = dkv.open(MemoryStore(), **OPTS)
    try:
        tw = Twin([db])
        _fill(tw)
        db.put(key(1, 1), b"active")
        assert db._view[0] and db._view[1].l0 and db._active.data
        it = _scanpath.db_scan(db, key(1, 0), key(2, 0))
        assert it is not NO_RECORD
        with _on(1):
            want = list(db.scan(key(1, 0), key(2, 0)))
        assert list(it) == want and (key(1, 1), b"active") in want
        assert list(_scanpath.db_scan(db, None, None)) == [r for r in db.scan()]

        class Mem(Memtable):
            __slots__ = ()
        m = Mem()
        m.data.update(db._active.data)
        db._active = m
        assert _scanpath.db_scan(db, None, None) is NO_RECORD     # DB._scan's Python, whole
        db._view = list(db._view)
        assert _scanpath.db_scan(db, None, None) is NO_RECORD
    finally:
        db.close()


@pytest.mark.parametrize("bad", ["str", b"", 5, bytearray(b"k"), memoryview(b"k")])
def test_bad_keys_and_a_closed_store_raise_as_python_does(bad):
    tw = _open_plain(OPTS)
    try:
        _fill(tw, 200)
        tw.scan(bad, None)
        tw.scan(None, bad)
        tw.scan(key(3, 0), key(2, 0))       # start >= end: nothing
        tw.same()
        its = [iter(db.scan(key(3, 0), key(9, 0))) for db in tw.dbs]
        for db in tw.dbs:
            db.close()
        tw.scan(bad, None)
        tw.scan(key(3, 1), None)
        outs = []
        for i, it in enumerate(its):        # made before the close, read after it
            with _on(i):
                try:
                    outs.append(("ok", list(it)))
                except Exception as e:  # noqa: BLE001
                    outs.append(("error", type(e).__name__, str(e)))
        assert outs[0] == outs[1]
    finally:
        tw.close()


def test_a_range_past_small_merge_goes_on_in_python(monkeypatch):
    tw = _open_plain(dict(OPTS, block_cache_bytes=3000))
    try:
        _fill(tw, 600)
        calls = []
        orig = _merge.merge_rest

        def counted(read, olds):
            calls.append((len(read), len(olds)))
            return orig(read, olds)
        monkeypatch.setattr(_merge, "merge_rest", counted)
        monkeypatch.setattr(_merge, "SMALL_MERGE", 20)
        for a, b, take in [(None, None, None), (key(2, 0), key(20, 0), None), (key(2, 0), None, 30),
                           (None, key(5, 50), 3)]:
            calls.clear()
            c, py = tw.each(lambda db: (calls.clear(), list(itertools.islice(db.scan(a, b), take)), list(calls)))
            assert c == py
            assert c[1][2], "the range went on in merge_rest"
            tw.same()
    finally:
        tw.close()


@pytest.mark.parametrize("patched", ["Table.block", "Table.scan_blocks", "Memtable.sorted_keys", "Version.sources"])
def test_patched_methods_are_called_in_their_place(monkeypatch, patched):
    tw = _open_plain(dict(OPTS, block_cache_bytes=2000))
    try:
        _fill(tw)
        tw.write(lambda db: db.put(key(4, 4), b"active"))
        calls = []
        cls, name = {"Table": Table, "Memtable": Memtable, "Version": Version}[patched.split(".")[0]], \
            patched.split(".")[1]
        f = getattr(cls, name)

        def wrapper(self, *a):
            calls.append((getattr(self, "path", None), a))
            return f(self, *a)
        monkeypatch.setattr(cls, name, wrapper)
        for a, b in [(None, None), (key(3, 0), key(7, 0)), (key(9, 12), key(9, 40)), (key(20, 0), None)]:
            def scan(db):
                calls.clear()
                return list(db.scan(a, b)), list(calls)
            c, py = tw.each(scan)
            assert c == py
            tw.same()
        assert c[1][1]
    finally:
        tw.close()


def test_a_method_patched_during_a_scan_is_called_from_then_on(monkeypatch):
    tw = _open_plain(dict(OPTS, block_cache_bytes=1))
    try:
        _fill(tw, 600)
        tw.write(lambda db: db.flush())
        tw.write(lambda db: db.compact(full=True))      # one source: read block by block
        calls = []

        def scan(db):
            calls.clear()
            it = db.scan()
            head = list(itertools.islice(it, 3))
            f, g = Table.block, Table.read_ahead

            def block(self, i):
                calls.append(i)
                return f(self, i)
            monkeypatch.setattr(Table, "block", block)
            monkeypatch.setattr(Table, "read_ahead", False)
            try:
                return head + list(it), list(calls)
            finally:
                monkeypatch.setattr(Table, "block", f)
                monkeypatch.setattr(Table, "read_ahead", g)
        c, py = tw.each(scan)
        assert c == py and c[1][1]
        tw.same()
    finally:
        tw.close()


def test_a_memtable_past_a_chunk_scans_the_same():
    """More than Memtable.scan_blocks' chunk (4,096 keys) in range: the scan resumes after each
    chunk on the sorted view as it is then (writes between chunks included), in the active
    memtable and in a sealed one not yet encoded."""
    tw = _open_plain(dict(OPTS, memtable_bytes=1 << 22))
    try:
        for i in range(9000):
            tw.write(lambda db: db.put(b"m%05d" % i, b"v%d" % i))
        tw.scan()
        tw.scan(b"m00100", b"m08000", take=4100, write=lambda db: db.put(b"m04500x", b"new"))
        tw.scan(None, None, take=4096, write=lambda db: [db.put(b"m%05dy" % i, b"y") for i in range(4000, 4200)])
        tw.same()
        for db in tw.dbs:                   # a sealed memtable in the view, newest first
            sealed = Memtable()
            for i in range(0, 9000, 2):
                sealed.put(b"m%05d" % i, None if i % 4 else b"sealed")
            sealed.max_seq = 10
            sources, version = db._view
            db._view = ((sealed,) + sources, version)
            db._active = Memtable()
        tw.scan()
        tw.scan(b"m00100", None, take=3)
        tw.write(lambda db: db.put(b"m00002", b"active"))
        tw.scan(b"m00000", b"m06000", take=4200, write=lambda db: db._view[0][0].put(b"m05000z", b"z"))
        tw.same()
    finally:
        tw.close()
def test_an_unusual_source_goes_to_its_own_methods():
    tw = _open_plain(OPTS)
    try:
        _fill(tw)
        seen = []

        class Table2(Table):
            __slots__ = ()

            def scan_blocks(self, start, end):
                seen.append((start, end))
                yield from Table.scan_blocks(self, start, end)

        for db in tw.dbs:
            sources, version = db._view
            l0 = [Table2(t.ref, t._store, t._cache) for t in version.l0]
            db._view = (sources, Version(tuple(l0), version.levels))
        for g in range(0, 30, 4):
            tw.scan(key(g, 0), key(g + 6, 50))
            tw.scan(key(g, 3), None, take=5)
            tw.same()
        assert seen

        class Table3(Table):                # chunks that are not tuples of two lists
            __slots__ = ()

            def scan_blocks(self, start, end):
                for keys, values, seqs in Table.scan_blocks(self, start, end):
                    yield [tuple(keys), tuple(values), seqs]

        for db in tw.dbs:
            sources, version = db._view
            db._view = (sources, Version((), tuple((Table3(t.ref, t._store, t._cache) for t in lv)
                                                   for lv in version.levels)))
            db._active = Memtable()
        for g in range(0, 30, 4):
            tw.scan(key(g, 0), key(g + 6, 50))
            tw.scan(key(g, 3), None, take=5)
            tw.same()
        tw.write(lambda db: db.flush())
        tw.write(lambda db: db.compact(full=True))
        for db in tw.dbs:                   # one source: a level of them, chunk by chunk
            sources, version = db._view
            assert not sources and not version.l0 and len(version.levels) == 1
            db._view = (sources, Version((), tuple((Table3(t.ref, t._store, t._cache) for t in lv)
                                                   for lv in version.levels)))
        tw.scan()
        tw.scan(key(2, 0), key(4, 0), take=2)
        tw.same()
    finally:
        tw.close()


@pytest.mark.parametrize("changed", [False, True])
@pytest.mark.parametrize("sources", ["one", "several"])
def test_an_object_missing_error_is_raised_or_retried(monkeypatch, changed, sources):
    tw = _open_plain(dict(OPTS, block_cache_bytes=1))
    try:
        _fill(tw, 600)
        if sources == "one":                # one table: the scan gives chunk by chunk
            tw.write(lambda db: db.flush())
            tw.write(lambda db: db.compact(full=True))
            assert not tw.dbs[0]._view[0] and not tw.dbs[0]._active.data
        fails = []
        orig = Table._fetch
        at = [0]

        def fetch(self, i):
            at[0] += 1
            if not fails and type(self) is Table and at[0] >= 3:
                fails.append(self.path)
                db = current[0]
                if changed:     # as a compaction would: a new view with the same data
                    srcs, version = db._view
                    db._view = (srcs, Version(version.l0, version.levels))
                raise ObjectMissingError(f"gone: {self.path}")
            return orig(self, i)
        monkeypatch.setattr(Table, "_fetch", fetch)
        current = [None]
        raised = 0
        for a, b in [(None, None), (key(0, 0), key(29, 0)), (key(5, 10), None)]:
            def scan(db):
                current[0] = db
                fails.clear()
                at[0] = 0
                try:
                    return "ok", list(db.scan(a, b)), list(fails)
                except ObjectMissingError as e:
                    return "error", str(e), list(fails)
            c, py = tw.each(scan)
            assert c == py
            if c[1][2]:
                raised += 1
                assert (c[1][0] == "ok") == changed, c
            tw.same()
        assert raised
    finally:
        tw.close()


def test_format_1_tables_scan_the_same(tmp_path):
    golden = Path(__file__).parent / "golden" / "store-v1"
    dbs = []
    for i in range(2):
        path = tmp_path / f"s{i}"
        shutil.copytree(golden, path)
        dbs.append(dkv.open(str(path), read_only=True, block_cache_bytes=4000))
    tw = Twin(dbs)
    try:
        rng = random.Random(5)
        keys = [k for k, _ in tw.scan()[1]]
        tw.same()
        for _ in range(150):
            a, b = sorted([rng.choice(keys) + rng.choice([b"", b"\x00"]), rng.choice(keys)])
            tw.scan(a if rng.random() < 0.9 else None, b if rng.random() < 0.9 else None,
                    take=rng.choice([None, None, 2]))
            tw.same()
    finally:
        tw.close()
