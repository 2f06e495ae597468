"""Long-running state shapes: queue churn across flush windows, and thousands of overwrite
checkpoints. What they prove:

* records whose put and delete fall in one flush window never reach an SST as a value
  (exactly which tombstones an SST carries is asserted too), and the storage calls of a
  window are one WAL segment per checkpoint, then one SST for the whole window;
* however many checkpoints a store takes, the live WAL segments (those the newest manifest
  names, hence those a reopen reads) and the WAL files in its folder stay bounded;
* a table being built holds its compressed blocks at their own size, and at most
  ``table_bytes / 8`` records (its bloom hashes), however well the records compress.

(Old SST/WAL formats are covered by test_old_formats.py.)
"""
from __future__ import annotations

import os
import random

import pytest

import dkv
from dkv import _paths
from dkv.format import manifest as mf
from dkv.format import sst
from dkv.storage import LocalDirStore, LoggingStore
from .dkv_helpers import Journal, contents, manifest_files


def sst_records(data: bytes, what: str = "sst") -> list[tuple[bytes, bytes | None, int]]:
    """Every (key, value-or-None, seq) of an SST's bytes, decoded with the format helpers."""
    off, length, crc = sst.parse_footer(data, what)
    meta = sst.parse_meta(data[off:off + length], crc, what, sst.footer_version(data))
    out = []
    for i, (boff, blen, bcrc) in enumerate(zip(meta.offsets, meta.lengths, meta.crcs)):
        keys, values, seqs, _ = sst.decode_block(data[boff:boff + blen], bcrc, f"{what} block {i}", meta.version)
        seqs = [seqs] * len(keys) if type(seqs) is int else seqs
        out.extend(zip(keys, values, seqs))
    assert len(out) == meta.count and sum(v is None for _, v, _ in out) == meta.tombstones
    assert [k for k, _, _ in out] == sorted({k for k, _, _ in out}), "keys ascending, each once"
    return out


# ------------------------------------------------------------------------ queue churn


FLUSH_SEGMENTS = 8      # a flush window: this many checkpoint intervals (one sealed memtable each)
LAG = 3                 # a key is deleted LAG checkpoints after its put (LAG < FLUSH_SEGMENTS)
PER_CHECKPOINT = 20     # keys appended per checkpoint
WINDOWS = 4             # full flush windows, then a partial one ...
TAIL = 5                # ... of TAIL checkpoints, flushed by db.flush()


def qkey(i: int) -> bytes:
    return b"q/%08d" % i


def qval(i: int) -> bytes:
    return (b"slot-%08d-" % i).ljust(40, b"#")


def churn_ops(c: int) -> tuple[list[int], list[int]]:
    """(slots appended, slots deleted) at checkpoint interval c (1-based)."""
    added = list(range(c * PER_CHECKPOINT, (c + 1) * PER_CHECKPOINT))
    old = c - LAG
    deleted = list(range(old * PER_CHECKPOINT, (old + 1) * PER_CHECKPOINT)) if old >= 1 else []
    return added, deleted


def put_names(calls) -> list[str]:
    return [c.key for c in calls if c.kind in ("put", "put_if_absent")]


def test_records_deleted_before_a_flush_never_reach_an_sst():
    journal = Journal()                 # keeps the bytes of every object ever put
    log = LoggingStore(journal)         # and the order of every call
    # One sealed memtable per checkpoint (memtable_bytes far above an interval's records), a
    # flush every FLUSH_SEGMENTS of them (flush_bytes never reached), inline (background=False)
    # and no compaction, so every SST written is exactly one flush window's merge.
    opts = dict(background=False, compaction=False, memtable_bytes=1 << 20, flush_segments=FLUSH_SEGMENTS,
                flush_bytes=1 << 30, block_bytes=512, retain=2)
    db = dkv.open(log, **opts)          # every segment a file (the default): the order of the puts is the point
    model: dict = {}
    windows: list[dict] = [{}]          # per flush window: key -> final value in it (None: deleted)
    cps = WINDOWS * FLUSH_SEGMENTS + TAIL
    puts_per_checkpoint = []
    for c in range(1, cps + 1):
        added, deleted = churn_ops(c)
        for i in added:
            db.put(qkey(i), qval(i))
            model[qkey(i)] = qval(i)
            windows[-1][qkey(i)] = qval(i)
        for i in deleted:
            db.delete(qkey(i))
            del model[qkey(i)]
            windows[-1][qkey(i)] = None
        n = len(log.calls)
        db.checkpoint(c).wait()
        puts_per_checkpoint.append(put_names(log.calls[n:]))
        if c % FLUSH_SEGMENTS == 0:
            windows.append({})
    n = len(log.calls)
    db.flush()                          # the partial last window
    flush_puts = put_names(log.calls[n:])
    n = len(log.calls)
    db.checkpoint(cps + 1).wait()
    last_puts = put_names(log.calls[n:])

    # -- the storage calls: a WAL segment per checkpoint until the window is full; the
    # checkpoint that fills it flushes (inside its seal) and uploads the SST instead.
    sst_names = []
    for c, puts in enumerate(puts_per_checkpoint, start=1):
        manifest = _paths.manifest_name("", c, 1)
        if c % FLUSH_SEGMENTS:
            assert puts == [_paths.wal_name("", 1, c), manifest], (c, puts)
        else:
            assert len(puts) == 2 and puts[0].startswith("sst/") and puts[1] == manifest, (c, puts)
            sst_names.append(puts[0])
    assert len(flush_puts) == 1 and flush_puts[0].startswith("sst/"), flush_puts
    sst_names.append(flush_puts[0])
    assert last_puts == [_paths.manifest_name("", cps + 1, 1)], "nothing left to upload but the manifest"
    assert sst_names == [_paths.sst_name("", 1, t) for t in range(1, WINDOWS + 2)]
    all_puts = put_names(log.calls)
    assert [p for p in all_puts if p.startswith("sst/")] == sst_names, "no other SST was ever written"
    # No SST before its window was full: the k-th SST comes after the WAL segment of the
    # window's last-but-one interval and before the manifest of its last one.
    for k, name in enumerate(sst_names[:WINDOWS]):
        last = (k + 1) * FLUSH_SEGMENTS
        assert all_puts.index(_paths.wal_name("", 1, last - 1)) < all_puts.index(name) \
            < all_puts.index(_paths.manifest_name("", last, 1))

    # -- every SST, decoded: exactly its window's merge. The first flush has no older table
    # under it, so it drops tombstones (nothing to hide); later flushes keep the tombstone of
    # every key deleted in their window, also of keys put in that same window: the flush
    # merge does not look for older versions (_flush.py _write_flush; RFC 0005 §3 leaves
    # dropping them for later). No such key is ever an SST value.
    data = {name: data for kind, name, data in journal.log if kind == "put" and name.startswith("sst/")}
    assert set(data) == set(sst_names)
    assert {n for n, _ in journal.inner.list("sst/")} == set(sst_names), "no compaction: every SST is still there"
    for w, (name, window) in enumerate(zip(sst_names, windows)):
        recs = sst_records(data[name], name)
        want = {k: v for k, v in window.items() if not (w == 0 and v is None)}
        assert {k: v for k, v, _ in recs} == want, name
        assert len({s for _, _, s in recs}) == 1, "a flush writes every record with the window's sequence number"
        assert (sum(v is None for _, v, _ in recs) > 0) == (w > 0)
    # Slots put and deleted within one window (appended in its first FLUSH_SEGMENTS - LAG
    # intervals): none is a value in any SST.
    born_and_died = {qkey(i) for c in range(1, cps + 1) for i in churn_ops(c)[0]
                     if (c - 1) // FLUSH_SEGMENTS == (c + LAG - 1) // FLUSH_SEGMENTS and c + LAG <= cps}
    assert len(born_and_died) == (FLUSH_SEGMENTS - LAG) * PER_CHECKPOINT * WINDOWS + (TAIL - LAG) * PER_CHECKPOINT
    for name in sst_names:
        for k, v, _ in sst_records(data[name], name):
            if k in born_and_died:
                assert v is None, f"{k!r} was put and deleted within one flush window but {name} holds a value"
    # What the SSTs hold, newest first, is the model: every live key with its value.
    merged: dict = {}
    for name in sst_names:
        merged.update({k: v for k, v, _ in sst_records(data[name], name)})
    assert {k: v for k, v in merged.items() if v is not None} == model
    assert contents(db) == model
    db.close()
    # -- reopen: exactly the model, and (a checkpoint after a full flush) no WAL to read.
    log.clear()
    with dkv.open(log, **opts) as db2:
        assert contents(db2) == model
        for k in list(model)[:50]:
            assert db2.get(k) == model[k]
        for i in range(PER_CHECKPOINT, (cps + 1 - LAG) * PER_CHECKPOINT, 7):
            assert db2.get(qkey(i)) is None
        assert not [c for c in log.calls if c.key.startswith("wal/") and c.kind == "get"]


# ------------------------------------------------------------------- overwrite checkpoints

# Default Options (16 flush segments in files, 256 inline, 64 MiB flush bytes, 5 retained
# checkpoints, background threads). Each checkpoint seals one memtable (50 small records never
# reach memtable_bytes), so segment ids follow epochs. The bounds:
#   * live segments (the newest manifest's WAL entries, what a reopen reads): a flush is queued
#     once FLUSH live segments are files or FLUSH_INLINE are inline in manifests, and a seal
#     waits (_flush.py _wait_for_background) while more than twice that many are live, so a
#     checkpoint pins at most 2 * FLUSH files and 2 * FLUSH_INLINE inline segments;
#   * WAL segments the retained manifests name (after wait_idle, i.e. garbage collection
#     done): the union of what the RETAIN retained manifests name. Manifest e names
#     segments [a_e, e] with a_e non-decreasing, so the union is [a_(e-RETAIN+1), e]:
#     live(e-RETAIN+1) + RETAIN - 1. The WAL files in the folder are exactly those of them
#     that are not inline (RFC 0007); the manifests, the retained ones and the carriers of
#     the inline ones (RFC 0011): one each at most;
#   * a manifest: its own new segments (at most INLINE_MANIFEST_BYTES), about a byte per
#     carried segment, its table list and ranges, however many checkpoints run.
FLUSH = dkv.Options().flush_segments
FLUSH_INLINE = dkv.Options().flush_inline_segments
RETAIN = dkv.Options().retain
LIVE_BOUND = 2 * FLUSH + 2 * FLUSH_INLINE
FILE_BOUND = LIVE_BOUND + RETAIN - 1


def wal_names(m: mf.Manifest) -> set:
    """The WAL segment files a manifest names."""
    return {n for n in manifest_files(m) if n.startswith("wal/")}


def segment_names(m: mf.Manifest) -> set:
    """Every WAL segment a manifest names, in a file or inline."""
    return {_paths.wal_name(r.ns, r.writer, i) for r in m.wal for i in range(r.first, r.last + 1)}


def carrier_names(m: mf.Manifest) -> set:
    return {_paths.manifest_name("", e, w) for e, w in mf.carriers(m)}


INLINE = 4096          # inline_segment_bytes of these runs (RFC 0007; off by default)


def run_overwrites(path: str, checkpoints: int, keys: int = 50, value_bytes: int = 0, **options) -> dict:
    """``value_bytes``: incompressible values of that size instead of short counters."""
    rnd = random.Random(5)
    db = dkv.open(path, fsync=False, inline_segment_bytes=INLINE, **options)
    model: dict = {}
    peak_live = peak_files = peak_manifest = peak_manifests = 0
    beyond_live = False         # a checkpoint where retained manifests still named flushed segments
    decoded: dict = {}          # retained manifests by name, decoded once
    wal_dir = os.path.join(path, "wal")
    for c in range(1, checkpoints + 1):
        for i in range(keys):
            k = b"k%03d" % i
            v = rnd.randbytes(value_bytes) if value_bytes else b"v%06d-%03d" % (c, i)
            db.put(k, v)
            model[k] = v
        db.checkpoint(c).wait()
        # The peaks are read off every checkpoint's manifest (not only the samples below),
        # so whether they are reached does not depend on when a background flush ran.
        cps = db.checkpoints()
        decoded = {i.name: decoded.get(i.name) or mf.decode(open(os.path.join(path, i.name), "rb").read(), i.name)
                   for i in cps}
        live = segment_names(decoded[cps[-1].name])
        named = set().union(*(segment_names(m) for m in decoded.values()))
        peak_live = max(peak_live, len(live))
        beyond_live = beyond_live or len(named) > len(live)
        if c % 100 == 0:
            db.wait_idle()          # the garbage collection queued after the checkpoint is done
            cps = db.checkpoints()
            assert [i.epoch for i in cps] == list(range(c - RETAIN + 1, c + 1))
            assert [i.epoch for i in dkv.list_checkpoints(path)] == [i.epoch for i in cps]
            raw = [open(os.path.join(path, i.name), "rb").read() for i in cps]
            retained = [mf.decode(data, i.name) for data, i in zip(raw, cps)]
            live = segment_names(retained[-1])
            files = {"wal/" + f for f in os.listdir(wal_dir)} if os.path.isdir(wal_dir) else set()
            assert len(live) <= LIVE_BOUND, (c, len(live))
            # The engine's own live list is that, or less once a flush queued by this
            # checkpoint's seal has finished.
            assert db.stats()["wal_segments"] <= len(live)
            # Garbage collection is exact: the folder holds the files retained manifests name,
            # and the manifests: the retained ones and the carriers they name (RFC 0011).
            assert files == set().union(*(wal_names(m) for m in retained)), c
            named = set().union(*(segment_names(m) for m in retained))
            assert len(named) <= FILE_BOUND, (c, len(named))
            carriers = set().union(*(carrier_names(m) for m in retained))
            listed = {"manifest/" + f for f in os.listdir(os.path.join(path, "manifest"))}
            assert listed == {i.name for i in cps} | carriers, c
            assert len(listed) <= FILE_BOUND + 1, (c, len(listed))
            # A manifest stays small however long the writer runs (RFC 0007, 0011).
            assert all(mf.inline_bytes(m) <= db.INLINE_MANIFEST_BYTES for m in retained)
            assert max(map(len, raw)) <= db.INLINE_MANIFEST_BYTES + 1024 + LIVE_BOUND, (c, list(map(len, raw)))
            peak_files = max(peak_files, len(files))
            peak_manifest = max(peak_manifest, *map(len, raw))
            peak_manifests = max(peak_manifests, len(listed))
    assert contents(db) == model
    db.close()
    # The bounds were approached, not just never reached: a flush is queued only once the
    # count is reached, so the checkpoint before it pins one less at least; and the
    # checkpoints right after a flush still retain manifests naming flushed segments.
    bound = FLUSH_INLINE if peak_files == 0 else FLUSH
    assert peak_live >= min(bound - 1, checkpoints - 1) and beyond_live, (peak_live, beyond_live)
    newest = max(os.listdir(os.path.join(path, "manifest")))
    m = mf.decode(open(os.path.join(path, "manifest", newest), "rb").read())
    want = wal_names(m) | carrier_names(m)
    log = LoggingStore(LocalDirStore(path, fsync=False))
    with dkv.open(log, fsync=False) as db2:
        assert contents(db2) == model
        read = [c.key for c in log.calls if c.kind == "get" and c.key.startswith(("wal/", "manifest/"))]
        assert read[0] == "manifest/" + newest
        assert set(read[1:]) == want and len(read) - 1 == len(want) <= LIVE_BOUND, \
            "a reopen reads the newest manifest, the live segment files and the carriers of the inline ones, once each"
    return {"peak_live": peak_live, "peak_files": peak_files, "peak_manifest": peak_manifest,
            "peak_manifests": peak_manifests}


def test_live_wal_segments_stay_bounded_through_thousands_of_overwrite_checkpoints(tmp_path):
    peaks = run_overwrites(str(tmp_path / "db"), 3000)
    assert peaks["peak_files"] == 0, "segments this small all travel inline"
    # Each manifest carries its own segment and names the earlier ones (RFC 0011): a
    # segment of 50 short records and a byte or so per carried one.
    assert peaks["peak_manifest"] < 2000, peaks
    assert peaks["peak_manifests"] > FLUSH_INLINE // 2, peaks


def test_segments_near_the_inline_limit_each_travel_in_their_own_manifest(tmp_path):
    """Segments of ~2.7 KiB: each goes inline in the manifest of its checkpoint only (RFC
    0011; RFC 0007 carried them again until four filled a manifest's budget and the oldest
    went out as files): no WAL file, manifests of one segment each, and a reopen reads the
    model."""
    peaks = run_overwrites(str(tmp_path / "db"), 600, keys=20, value_bytes=120)
    assert peaks["peak_files"] == 0 and 2048 < peaks["peak_manifest"] < 4096 + 1024, peaks


def test_new_segments_beyond_a_manifests_budget_go_out_as_files(tmp_path):
    """A checkpoint whose interval sealed several small memtables (memtable_bytes reached)
    carries the newest of them inline up to INLINE_MANIFEST_BYTES; the older ones are
    written out as files. Bounds and exact collection as above."""
    peaks = run_overwrites(str(tmp_path / "db"), 200, keys=150, value_bytes=120, memtable_bytes=4000)
    assert peaks["peak_files"] > 0 and peaks["peak_manifest"] > dkv.DB.INLINE_MANIFEST_BYTES // 2, peaks


@pytest.mark.slow
def test_live_wal_segments_stay_bounded_through_ten_thousand_overwrite_checkpoints(tmp_path):
    run_overwrites(str(tmp_path / "db"), 10_000)


# ------------------------------------------------------------------------ reads beyond the cache


def test_a_scan_that_misses_the_cache_fetches_a_run_of_blocks_with_one_read(tmp_path):
    """A scan over uncached blocks of one SST reads them with one ranged GET (read-ahead,
    bounded by the scan's end), not one GET per block; a get still reads one block; what
    both return equals the model."""
    import random
    from dkv import _table
    rnd = random.Random(7)
    model = {b"u/%06d" % i: rnd.randbytes(100) for i in range(3000)}
    db = dkv.open(str(tmp_path), fsync=False, background=False, block_bytes=1024)
    for k, v in model.items():
        db.put(k, v)
    db.flush()
    db.checkpoint(1).wait()
    db.close()
    store = LoggingStore(LocalDirStore(str(tmp_path)))
    db = dkv.open(store, block_bytes=1024, block_cache_bytes=1 << 20)
    db.get(b"u/000000")                        # footer, metadata and the first block
    sst_name = next(c.key for c in store.calls if c.key.endswith(".sst"))
    meta = next(t for t in db._view[1].tables())._meta
    store.calls.clear()
    lo, hi = b"u/001000", b"u/001400"           # 400 records of ~110 bytes: ~43 blocks of 1 KiB
    got = list(db.scan(lo, hi))
    assert got == sorted((k, v) for k, v in model.items() if lo <= k < hi)
    reads = [c for c in store.calls if c.kind == "get" and c.key == sst_name]
    first = [i for i, k in enumerate(meta.first_keys) if k < hi]
    needed = [i for i in first if i + 1 == len(meta.first_keys) or meta.first_keys[i + 1] > lo]
    assert len(needed) > 30
    assert len(reads) == -(-sum(meta.lengths[i] for i in needed) // _table.READ_AHEAD) == 1, reads
    span = reads[0].range
    assert span == (meta.offsets[needed[0]], meta.offsets[needed[-1]] + meta.lengths[needed[-1]])
    store.calls.clear()
    assert list(db.scan(lo, hi)) == got          # now cached: no read at all
    assert not [c for c in store.calls if c.kind == "get"]
    assert db.get(b"u/002500") == model[b"u/002500"]
    reads = [c for c in store.calls if c.kind == "get" and c.key == sst_name]
    assert len(reads) == 1 and reads[0].range[1] - reads[0].range[0] < 2048   # one block
    db.close()


def test_a_compaction_reads_a_sorted_run_a_table_and_a_window_at_a_time(tmp_path, monkeypatch):
    """A compaction of L0 into a level of many tables: the level's tables are read one after
    another (a table's reads end before the next one's start, in key order), never a whole
    table bigger than two windows at once, and the result equals the model (overwrites and
    deletes in L0 win over the level's records)."""
    import random
    from dkv import _table
    monkeypatch.setattr(_table, "RECORDS_WINDOW", 4096)
    rnd = random.Random(3)
    opts = dict(fsync=False, background=False, block_bytes=1024, table_bytes=16 << 10, l0_trigger=100)
    db = dkv.open(str(tmp_path), **opts)
    model = {}
    for i in range(4000):
        model[b"k/%06d" % i] = rnd.randbytes(60)
        db.put(b"k/%06d" % i, model[b"k/%06d" % i])
    db.flush()
    db.compact(full=True)                      # one sorted run of ~16 KiB tables
    level = db._view[1].levels[-1]
    assert len(level) >= 10 and not db._view[1].l0
    for r in range(3):                         # three L0 runs over the same keys
        for i in rnd.sample(range(4000), 600):
            k = b"k/%06d" % i
            if rnd.random() < 0.3:
                model.pop(k, None)
                db.delete(k)
            else:
                model[k] = rnd.randbytes(60)
                db.put(k, model[k])
        db.flush()
    assert len(db._view[1].l0) >= 3
    db.checkpoint(1).wait()
    db.close()
    store = LoggingStore(LocalDirStore(str(tmp_path)))
    db = dkv.open(store, **{**opts, "l0_trigger": 2})
    big = {t.path: t.ref.size for t in db._view[1].levels[-1]}
    store.calls.clear()
    db.compact()
    assert contents(db) == model
    reads = [c for c in store.calls if c.kind == "get" and c.key in big]
    order = list(dict.fromkeys(c.key for c in reads))
    assert order == sorted(big, key=lambda p: next(t.min_key for t in level if t.path == p)), \
        "the level's tables are read in key order"
    last = {p: max(i for i, c in enumerate(reads) if c.key == p) for p in order}
    first = {p: min(i for i, c in enumerate(reads) if c.key == p) for p in order}
    assert all(last[a] < first[b] for a, b in zip(order, order[1:])), "one table of the run at a time"
    for c in reads:
        assert c.range is not None, f"{c.key}: the whole table in one read"
        if c.range[1] == big[c.key] and c.range[1] - c.range[0] <= _table.TAIL_READ:
            continue                            # the footer and metadata
        assert c.range[1] - c.range[0] <= 4096 + 2 * 1024, c
    db.close()
    db = dkv.open(str(tmp_path), **opts)
    assert contents(db) == model
    db.close()


# ------------------------------------------------------------------------ what a build holds


def test_a_compressed_block_holds_only_its_own_bytes():
    """A zstd frame of a compressible 64 KiB block keeps a few hundred bytes of memory, not
    the block's compress bound: an SST being built holds every frame until it finishes."""
    import tracemalloc

    from dkv.format._codec import compress, decompress
    blocks = [b"".join(b"slot-%08d-%04d" % (j, i) for j in range(3000))[:65536] for i in range(64)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        frames = [compress(b) for b in blocks]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    size = sum(map(len, frames))
    assert size < 64 * 8192, "these blocks compress well"
    assert held < size + 64 * 200, f"{len(frames)} frames of {size} bytes hold {held} bytes"
    assert [decompress(f, "frame") for f in frames] == blocks


def test_a_table_holds_at_most_a_record_per_eight_of_its_bytes(tmp_path):
    """Tiny records compress so well that table_bytes alone would put all of them in one
    table (and its build would hold 8 bytes of bloom hashes per key): a flush splits them
    at table_bytes / 8 records (at least 65,536), and every record reads back."""
    db = dkv.open(str(tmp_path), table_bytes=256 << 10, background=False, compaction=False)
    n = 150_000
    for start in range(0, n, 10_000):
        with db.batch() as wb:
            for i in range(start, start + 10_000):
                wb.put(b"k%08d" % i, b"v")
    db.flush()
    counts = [t.ref.count for t in db._view[1].tables()]
    assert len(counts) == 3 and max(counts) <= 65_536 and sum(counts) == n, counts
    assert all(db.get(b"k%08d" % i) == b"v" for i in range(0, n, 997))
    assert sum(1 for _ in db.scan()) == n
    db.close()
