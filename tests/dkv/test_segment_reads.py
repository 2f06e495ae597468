"""WAL segments read back from a local folder (ObjectStore.local_reads): once a checkpoint
wrote a sealed memtable's segment as a file, its Delta reads the blocks from the file and
its bytes leave memory; each block read back is checked against the CRC-32 kept when it
left, so a changed file is a CorruptionError, never data (RFC 0012, *Step 13*)."""
from __future__ import annotations

import random

import pytest

import dkv
from dkv._delta import Delta, _Blob
from dkv.errors import CorruptionError
from dkv.storage import LocalDirStore, MemoryStore

from .dkv_helpers import contents, expected_scan

# Segments of many blocks that stay sources until the test flushes them.
OPTS = dict(memtable_bytes=1 << 20, flush_segments=100, flush_bytes=1 << 30, wal_block_bytes=512,
            compaction=False)


def _segments(db) -> list:
    return [s for s in db._view[0] if type(s) is Delta]


def _fill(db, model: dict, rng, n: int, tag: bytes) -> None:
    for i in range(n):
        k = b"k%05d" % rng.randrange(3000)
        if rng.random() < 0.1:
            db.delete(k)
            model.pop(k, None)
        else:
            v = tag + b"-%d-" % i + b"x" * rng.randrange(40)
            db.put(k, v)
            model[k] = v


@pytest.mark.parametrize("background", [False, True])
def test_a_segment_its_checkpoint_wrote_is_read_from_the_folder_with_the_same_records(tmp_path, background):
    store = LocalDirStore(str(tmp_path / "s"), fsync=False)
    assert store.local_reads and not MemoryStore.local_reads
    db = dkv.open(store, background=background, **OPTS)
    rng, model = random.Random(5), {}
    for c in range(3):
        _fill(db, model, rng, 1500, b"c%d" % c)
        db.checkpoint().wait()
    segs = _segments(db)
    assert len(segs) == 3 and all(type(s._store) is not _Blob for s in segs)   # their bytes left memory
    assert len(segs[0].index.offsets) > 10
    _fill(db, model, rng, 200, b"open")     # in the active memtable, over the segments
    for _ in range(1500):
        k = b"k%05d" % rng.randrange(3100)
        assert db.get(k) == model.get(k)
    assert contents(db) == model
    assert list(db.scan(b"k01000", b"k02000")) == expected_scan(model, b"k01000", b"k02000")
    db.flush()                              # the flush reads each segment's blocks from its file
    assert not _segments(db) and contents(db) == model
    db.checkpoint().wait()
    db.close()
    again = dkv.open(store, background=background, **OPTS)
    assert contents(again) == model
    again.close()


def test_a_segment_changed_in_the_folder_is_reported_not_read(tmp_path):
    store = LocalDirStore(str(tmp_path / "s"), fsync=False)
    db = dkv.open(store, background=False, **OPTS)
    rng, model = random.Random(7), {}
    _fill(db, model, rng, 1500, b"a")
    db.checkpoint().wait()
    (seg,) = _segments(db)
    path = tmp_path / "s" / seg.path
    data = bytearray(path.read_bytes())
    i = len(seg.index.offsets) // 2
    data[seg.index.offsets[i] + seg.index.lengths[i] // 2] ^= 0x5A       # one byte inside block i
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match=f"WAL segment .*: block {i} read back does not match"):
        contents(db)
    with pytest.raises(CorruptionError, match=f"block {i} read back"):
        db.flush()
    db.close()


def test_segments_stay_in_memory_where_reads_are_not_local(tmp_path):
    db = dkv.open(MemoryStore(), background=False, **OPTS)
    rng, model = random.Random(9), {}
    _fill(db, model, rng, 800, b"m")
    db.checkpoint().wait()
    (seg,) = _segments(db)
    assert type(seg._store) is _Blob and seg._crcs is None
    assert contents(db) == model
    db.close()


@pytest.mark.parametrize("how", ["reopen", "refresh"])
def test_segments_a_reopen_or_refresh_finds_live_are_read_from_their_files(tmp_path, how):
    """The live segments an open replays (or a writer's refresh adds, after another writer
    took over) leave memory too; they read the same records, and a block of one changed
    afterwards is a CorruptionError."""
    store = LocalDirStore(str(tmp_path / "s"), fsync=False)
    a = dkv.open(store, background=False, **OPTS)
    rng, model = random.Random(11), {}
    _fill(a, model, rng, 1500, b"a")
    a.checkpoint(1).wait()
    b = dkv.open(store, background=False, **OPTS)         # another writer takes over
    _fill(b, model, rng, 1500, b"b")
    b.checkpoint(2).wait()
    if how == "reopen":
        a.close()
        b.close()
        a = dkv.open(store, background=False, **OPTS)
    else:
        assert a.refresh(2) is not None
    segs = _segments(a)
    assert len(segs) == 2 and all(type(s._store) is not _Blob for s in segs)
    seg = segs[0]                           # the newest: the one a refresh added
    path = tmp_path / "s" / seg.path
    good = path.read_bytes()
    data = bytearray(good)
    data[seg.index.offsets[0] + 3] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="block 0 read back does not match"):
        contents(a)
    path.write_bytes(good)
    assert contents(a) == model
    a.close()
    if how == "refresh":
        b.close()


class _ManifestFails(LocalDirStore):
    """A local folder whose next create of a manifest fails (armed by the test)."""
    fail_next = False

    def _put_if_absent(self, key, data, sync=True):
        if self.fail_next and key.endswith(".manifest"):
            self.fail_next = False
            raise dkv.errors.StorageError(f"injected: creating {key} failed")
        return super()._put_if_absent(key, data, sync=sync)


def test_a_segment_is_read_from_its_file_only_once_a_committed_manifest_names_it(tmp_path):
    """A segment uploaded for a checkpoint whose manifest was never created stays in memory:
    no manifest names its file, which a newer writer's collection would take for garbage;
    the next checkpoint that commits names it, and then it is read from the file."""
    store = _ManifestFails(str(tmp_path / "s"), fsync=False)
    db = dkv.open(store, background=False, **OPTS)
    rng, model = random.Random(13), {}
    _fill(db, model, rng, 1500, b"a")
    store.fail_next = True
    with pytest.raises(dkv.errors.StorageError, match="injected"):
        db.checkpoint().wait()
    (seg,) = _segments(db)
    assert type(seg._store) is _Blob and (tmp_path / "s" / seg.path).exists()   # uploaded, named by none
    assert contents(db) == model
    db.checkpoint().wait()
    (seg,) = _segments(db)
    assert type(seg._store) is not _Blob
    assert contents(db) == model
    db.close()
