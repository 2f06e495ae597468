"""Damaged bytes are reported, never returned as data.

One byte is flipped (FaultInjectingStore.flip_byte) at every position of a small WAL
segment and of a manifest, and at sampled positions of an SST (every footer byte, the
metadata segment, data blocks): opening or reading must raise dkv.CorruptionError, or
(only where the byte is not data, e.g. the manifest's reserved field) give the exact
contents. dkv.verify names the damaged file.
"""
from __future__ import annotations

import os

import pytest

import dkv
from dkv.format import manifest as mf
from dkv.format import sst
from dkv.storage import FaultInjectingStore, MemoryStore
from .dkv_helpers import SMALL, clone, contents, data_files, manifests


def _small_store(inline: bool = False):
    """A store whose only checkpoint holds a few records in one WAL segment (a file, or
    ``inline`` in the manifest), no SST."""
    store = MemoryStore()
    model = {b"a": b"1", b"bb": b"", b"ccc": b"three", b"dead": None}
    with dkv.open(store, inline_segment_bytes=4096 if inline else 0) as db:
        for k, v in model.items():
            db.put(k, b"x") if v is None else db.put(k, v)
        db.delete(b"dead")
        db.checkpoint(1).wait()
    return store, {k: v for k, v in model.items() if v is not None}


def _read_all(store, keys) -> dict:
    with dkv.open(store, read_only=True) as db:
        data = contents(db)
        for k in keys:
            assert db.get(k) == data.get(k)
        return data


def _flip(store, name, offset):
    damaged = clone(store)
    FaultInjectingStore(damaged).flip_byte(name, offset)
    return damaged


def test_every_byte_of_a_wal_segment():
    store, model = _small_store()
    [wal] = [n for n in data_files(store) if n.endswith(".wal")]
    size = store.size(wal)
    assert 18 < size < 200
    for offset in range(size):
        with pytest.raises(dkv.CorruptionError):
            _read_all(_flip(store, wal, offset), model)


def test_every_byte_of_an_inline_wal_segment():
    """The same segment carried inline: each damaged byte (under a valid manifest checksum,
    so only the segment's own checks can tell) is a CorruptionError naming the manifest."""
    from dataclasses import replace
    store, model = _small_store(inline=True)
    [name] = manifests(store)
    m = mf.decode(store.get(name), name)
    [seg] = m.wal
    assert seg.inline and 18 < len(seg.data) < 200
    for offset in range(len(seg.data)):
        data = bytearray(seg.data)
        data[offset] ^= 0x5A
        damaged = clone(store)
        damaged.put(name, mf.encode(replace(m, wal=[replace(seg, data=bytes(data))])))
        with pytest.raises(dkv.CorruptionError, match=name):
            _read_all(damaged, model)


def _manifest_store():
    """A manifest with SSTs in two levels and WAL ranges (a bit of every field)."""
    store = MemoryStore()
    model = {}
    with dkv.open(store, background=False, **dict(SMALL, table_bytes=300)) as db:
        for i in range(400):
            k, v = b"k%03d" % (i % 250), b"v%d" % i * 3
            db.put(k, v)
            model[k] = v
        db.compact()
        db.put(b"tail", b"t")
        model[b"tail"] = b"t"
        db.checkpoint(1).wait()
    return store, model


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "zstd"])
def test_every_byte_of_a_manifest(compressed):
    if compressed:
        store, model = _manifest_store()
    else:
        store, model = _small_store()
    [name] = manifests(store)
    data = store.get(name)
    assert (data[5] & mf.FLAG_ZSTD) == (1 if compressed else 0)
    undetected = []
    for offset in range(len(data)):
        damaged = _flip(store, name, offset)
        try:
            got = _read_all(damaged, model)
        except dkv.CorruptionError:
            continue
        assert got == model, f"wrong data after flipping manifest byte {offset}"
        undetected.append(offset)
    # Only the reserved u16 of the header is not covered by a check; it carries no data.
    assert set(undetected) <= {6, 7}, undetected


def _sst_store():
    store = MemoryStore()
    model = {}
    with dkv.open(store, background=False, **dict(SMALL, table_bytes=1 << 20)) as db:
        for i in range(200):
            k, v = b"k%04d" % i, b"value-%d" % i
            db.put(k, v)
            model[k] = v
        db.compact(full=True)
        db.checkpoint(1).wait()
    ssts = [n for n in data_files(store) if n.endswith(".sst")]
    assert len(ssts) == 1, ssts
    return store, model, ssts[0]


def _sst_positions(data: bytes) -> list:
    off, length, _ = sst.parse_footer(data, "sst")
    footer = list(range(len(data) - sst.FOOTER_SIZE, len(data)))
    meta = list(range(off, off + length, max(1, length // 25)))
    blocks = list(range(0, off, max(1, off // 40)))
    return sorted(set(footer + meta + blocks + [0, off - 1, off]))


def test_sampled_bytes_of_an_sst():
    store, model, name = _sst_store()
    positions = _sst_positions(store.get(name))
    assert len(positions) > 80
    for offset in positions:
        damaged = _flip(store, name, offset)
        with pytest.raises(dkv.CorruptionError):
            _read_all(damaged, ())
        # Point reads that do not touch the damaged part still answer correctly.
        with dkv.open(damaged, read_only=True) as db:
            for k in list(model)[::17]:
                try:
                    assert db.get(k) == model[k], f"wrong value after flipping SST byte {offset}"
                except dkv.CorruptionError:
                    pass


@pytest.mark.slow
def test_every_byte_of_an_sst():
    store, model, name = _sst_store()
    for offset in range(store.size(name)):
        with pytest.raises(dkv.CorruptionError):
            _read_all(_flip(store, name, offset), ())


@pytest.mark.parametrize("kind", ["sst", "wal", "manifest"])
def test_truncated_objects_are_corruption(kind):
    store, model = _manifest_store()
    names = {"sst": [n for n in data_files(store) if n.endswith(".sst")],
             "wal": [n for n in data_files(store) if n.endswith(".wal")],
             "manifest": manifests(store)}[kind]
    for name in names:
        data = store.get(name)
        for cut in (0, 1, len(data) // 2, len(data) - 1):
            damaged = clone(store)
            damaged.put(name, data[:cut])
            with pytest.raises(dkv.CorruptionError):
                _read_all(damaged, model)


def test_verify_names_the_damaged_file():
    store, model = _manifest_store()
    report = dkv.verify(store)
    assert report["epoch"] == 1 and report["sst_files"] >= 1 and report["wal_segments"] >= 1
    for name in sorted(data_files(store)):
        damaged = _flip(store, name, store.size(name) // 2)
        with pytest.raises(dkv.CorruptionError, match=name.split("/")[-1]):
            dkv.verify(damaged)


def test_corrupt_newest_manifest_older_checkpoint_still_opens():
    store = MemoryStore()
    with dkv.open(store) as db:
        db.put(b"a", b"1")
        db.checkpoint(1).wait()
        db.put(b"a", b"2")
        db.checkpoint(2).wait()
    newest = manifests(store)[-1]
    FaultInjectingStore(store).flip_byte(newest, 20)
    with pytest.raises(dkv.CorruptionError):
        dkv.open(store, read_only=True)
    with dkv.open(store, checkpoint=1, read_only=True) as db:
        assert contents(db) == {b"a": b"1"}


# -- inline segments (RFC 0007): a small segment's bytes inside its manifest ---------------------

def _damaged_inline(tmp_path, where: str):
    """A store whose newest manifest carries an inline segment, then that segment damaged
    (``where``: "body", a byte of its records; "header", its count) under a valid manifest
    checksum, so only the segment's own checks can tell."""
    from dataclasses import replace
    path = str(tmp_path / "db")
    with dkv.open(path, inline_segment_bytes=4096) as db:
        for i in range(10):
            db.put(b"k%02d" % i, b"value %d" % i)
        name = db.checkpoint().wait()
    file = os.path.join(path, name)
    m = mf.decode(open(file, "rb").read(), name)
    assert [r.inline for r in m.wal] == [True]
    seg = bytearray(m.wal[0].data)
    if where == "body":
        seg[-2] ^= 0x40
    else:
        seg[6] ^= 1
    m.wal[0] = replace(m.wal[0], data=bytes(seg))
    os.chmod(file, 0o644)
    with open(file, "wb") as f:
        f.write(mf.encode(m))
    return path, name


@pytest.mark.parametrize("where", ["body", "header"])
def test_a_damaged_inline_segment_is_reported_naming_its_manifest(tmp_path, where):
    path, name = _damaged_inline(tmp_path, where)
    for read_only in (True, False):
        with pytest.raises(dkv.CorruptionError, match=name) as e:
            dkv.open(path, read_only=read_only)
        assert "inline WAL segment wal/" in str(e.value)
    with pytest.raises(dkv.CorruptionError, match=name):
        dkv.verify(path)


def test_a_damaged_manifest_with_an_inline_segment_is_reported(tmp_path):
    path = str(tmp_path / "db")
    with dkv.open(path, inline_segment_bytes=4096) as db:
        db.put(b"k", b"v" * 100)
        name = db.checkpoint().wait()
    file = os.path.join(path, name)
    data = bytearray(open(file, "rb").read())
    data[-5] ^= 0x10                    # inside the segment, covered by the manifest's CRC
    os.chmod(file, 0o644)
    open(file, "wb").write(bytes(data))
    with pytest.raises(dkv.CorruptionError, match=name):
        dkv.open(path, read_only=True)
