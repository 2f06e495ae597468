"""Bloom filters with a strip rule (dkv option ``bloom_strip``, SST format version 3):
keys whose last n bytes follow a tag byte enter a filter as their prefix, once per run.

The rule must never cost a key: every get, through memtables, sealed segments, L0 and
deeper tables, old tables without the rule and new ones with it, answers as a dict would.
"""
from __future__ import annotations

import random

import pytest

import dkv
from dkv.format import bloom, sst
from dkv.storage import LocalDirStore, MemoryStore
from .dkv_helpers import Harness, run_random

RULE = (1, 8)


def slot_key(obj: int, slot: int) -> bytes:
    return b"o%03d\x01" % obj + slot.to_bytes(8, "big")


def meta_key(obj: int) -> bytes:
    return b"o%03d\x00" % obj


def object_key(rng: random.Random, space: int = 80) -> bytes:
    """Keys shaped as objectspace's: a metadata key, or one of an object's slots."""
    obj = rng.randrange(max(1, space // 8))
    if rng.random() < 0.25:
        return meta_key(obj)
    return slot_key(obj, rng.randrange(12))


# -- the filter ---------------------------------------------------------------------------

def test_entry_strips_only_keys_of_the_rule():
    assert bloom.entry(slot_key(3, 7), RULE) == b"o003\x01"
    assert bloom.entry(meta_key(3), RULE) == meta_key(3)
    assert bloom.entry(b"\x01" + bytes(8), RULE) == b"\x01"
    assert bloom.entry(bytes(9), RULE) == bytes(9)          # the byte before the 8 is not the tag
    assert bloom.entry(b"\x01" + bytes(7), RULE) == b"\x01" + bytes(7)     # too short
    assert bloom.entry(slot_key(3, 7), None) == slot_key(3, 7)


def test_a_run_of_slots_is_one_entry_and_c_matches_python():
    keys = sorted([slot_key(o, s) for o in range(50) for s in range(20)] + [meta_key(o) for o in range(50)])
    hashed = bloom.hashes(keys, RULE)
    assert len(hashed) == 8 * 100       # 50 metadata keys and 50 slot runs
    if bloom._c_hashes is not None:
        saved, bloom._c_hashes = bloom._c_hashes, None
        try:
            assert bloom.hashes(keys, RULE) == hashed
        finally:
            bloom._c_hashes = saved
    f = bloom.Bloom(bloom.build(keys, strip=RULE), RULE)
    assert all(f.may_contain(k) for k in keys)
    assert all(f.checker()(k) for k in keys)
    assert all(f.may_contain(slot_key(o, 99)) for o in range(50))     # an object's prefix: yes
    absent = [slot_key(o, 0) for o in range(1000, 3000)] + [meta_key(o) for o in range(1000, 3000)]
    false = sum(f.checker()(k) for k in absent)
    assert false < 0.05 * len(absent)


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_candidates_probe_each_filter_by_its_own_rule(native, monkeypatch):
    keys = sorted([slot_key(1, s) for s in range(5)] + [meta_key(1)])
    plain = bloom.Bloom(bloom.build(keys))
    stripped = bloom.Bloom(bloom.build(keys, strip=RULE), RULE)
    other = bloom.Bloom(bloom.build([meta_key(9)]))
    if not native:
        monkeypatch.setattr(bloom, "_c_candidates", None)
    filters = (plain.probe(), None, stripped.probe(), other.probe())
    assert len(stripped.probe()) == 4
    assert bloom.candidates(slot_key(1, 3), filters) == [0, 1, 2]
    got = bloom.candidates(slot_key(1, 77), filters)
    assert 1 in got and 2 in got        # None holds anything; the stripped filter holds the object
    assert got == sorted(got)
    assert bloom.candidates(meta_key(1), filters)[:3] == [0, 1, 2]
    assert 3 in bloom.candidates(meta_key(9), filters)


@pytest.mark.parametrize("bad", [(256, 8), (1, 0), (-1, 8), (1,), "ab", (1.0, 8), (True, 8)])
def test_a_bad_rule_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="bloom_strip"):
        dkv.open("memory://strip-bad", bloom_strip=bad)


# -- the table ----------------------------------------------------------------------------

def _table(keys: list, strip) -> tuple[bytes, sst.SstMeta]:
    b = sst.SstBuilder(512, strip=strip)
    for k in keys:
        b.add(k, b"v" + k, 1)
    data = b.finish()
    off, length, crc = sst.parse_footer(data, "t")
    return data, sst.parse_meta(data[off:off + length], crc, "t", sst.footer_version(data))


def test_a_stripped_table_is_version_3_and_names_its_rule():
    keys = sorted([slot_key(o, s) for o in range(200) for s in range(20)] + [meta_key(o) for o in range(200)])
    plain_data, plain = _table(keys, None)
    data, meta = _table(keys, RULE)
    assert sst.footer_version(plain_data) == 2 and plain.bloom.strip is None
    assert sst.footer_version(data) == 3 and meta.bloom.strip == RULE
    assert len(meta.bloom.bits) * 10 < len(plain.bloom.bits)       # 400 entries, not 4,200
    assert all(meta.bloom.checker()(k) for k in keys)


def test_a_damaged_rule_is_corruption_not_a_missed_key():
    from dkv.format._codec import compress, crc32, pack_obj, unpack_obj, decompress
    keys = sorted(slot_key(o, s) for o in range(3) for s in range(4))
    data, _ = _table(keys, RULE)
    off, length, crc = sst.parse_footer(data, "t")
    m = unpack_obj(decompress(data[off:off + length], "t"), "t")
    for bad in ([1], [300, 8], "x", None):
        m["bs"] = bad
        raw = compress(pack_obj(m), 1)
        with pytest.raises(dkv.CorruptionError, match="bloom strip rule|missing a field"):
            sst.parse_meta(raw, crc32(raw), "t", 3)
    del m["bs"]
    raw = compress(pack_obj(m), 1)
    with pytest.raises(dkv.CorruptionError, match="missing a field"):
        sst.parse_meta(raw, crc32(raw), "t", 3)


# -- the store ----------------------------------------------------------------------------

def _fill(db, objects: int, slots: int) -> dict:
    model = {}
    with db.batch() as b:
        for o in range(objects):
            model[meta_key(o)] = b"m%d" % o
            b.put(meta_key(o), model[meta_key(o)])
            for s in range(slots):
                model[slot_key(o, s)] = b"s%d.%d" % (o, s)
                b.put(slot_key(o, s), model[slot_key(o, s)])
    return model


def test_a_store_reads_every_key_with_and_without_the_rule(tmp_path):
    """Tables and segments written with the rule, reopened without it and with it; tables
    without it (written before) and with it (after) side by side in one store."""
    path = str(tmp_path / "db")
    db = dkv.open(path, memtable_bytes=4096, background=False)
    model = _fill(db, 40, 10)                      # plain tables
    db.checkpoint(1).wait()
    db.flush()
    db.close()
    db = dkv.open(path, memtable_bytes=4096, background=False, bloom_strip=RULE)
    more = {}                                       # stripped tables and segments beside them
    with db.batch() as b:
        for o in range(40, 80):
            for k, v in ((meta_key(o), b"m"), *((slot_key(o, s), b"s") for s in range(10))):
                b.put(k, v)
                more[k] = v
        for s in range(0, 10, 2):                   # deletes of slots in the plain tables
            b.delete(slot_key(3, s))
            more[slot_key(3, s)] = None
    model.update(more)
    db.checkpoint(2).wait()
    db.flush()
    db.put(slot_key(90, 1), b"segment only")         # a sealed segment's filter, stripped
    model[slot_key(90, 1)] = b"segment only"
    db.checkpoint(3).wait()
    versions = {sst.footer_version(p.read_bytes()) for p in (tmp_path / "db").rglob("*.sst")}
    assert versions == {2, 3}

    def check(d):
        for k, v in model.items():
            assert d.get(k) == v, k
        for o in (5, 45, 90, 500):
            assert d.get(slot_key(o, 77)) is None
            assert d.get(meta_key(o) + b"x") is None
    check(db)
    db.close()
    for opts in ({}, {"bloom_strip": RULE}):
        with dkv.open(path, **opts) as d:
            check(d)
    with dkv.open(path, bloom_strip=RULE, background=False) as d:
        d.compact(full=True)
        check(d)
    live = {p.name: sst.footer_version(p.read_bytes()) for p in (tmp_path / "db").rglob("*.sst")}
    assert 3 in live.values()


@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
@pytest.mark.parametrize("seed", range(3))
def test_random_with_the_rule(seed, background):
    """The reference model over objectspace-shaped keys with the rule on."""
    h = Harness(MemoryStore(), retain=3, background=background, bloom_strip=RULE,
                max_replay_bytes=(0, 3000)[seed % 2])
    run_random(h, random.Random(300 + seed), 1500, keys=object_key)
    h.close()


def test_random_local_dir_with_the_rule(tmp_path):
    h = Harness(LocalDirStore(str(tmp_path / "db"), fsync=False), retain=2, background=True, bloom_strip=RULE)
    run_random(h, random.Random(310), 800, keys=object_key)
    h.close()
