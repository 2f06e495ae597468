"""The public surface: exported names, errors, bad input, locations, closed and read-only stores."""
from __future__ import annotations

import os

import pytest

import dkv
from dkv.storage import LocalDirStore, MemoryStore


def test_exports_are_pinned():
    assert sorted(dkv.__all__) == sorted([
        "open", "DB", "WriteBatch", "Checkpoint", "CheckpointInfo", "Options", "ObjectStore", "open_store",
        "DkvError", "CorruptionError", "FencedError", "ClosedError", "ReadOnlyError", "StorageError",
        "CheckpointNotFoundError", "ObjectMissingError", "NotAStoreError", "NewerCheckpointsError", "LocationError",
        "instances", "list_checkpoints", "retire", "collect_garbage", "verify",
        "key_prefix", "key_group_of", "prefix_end", "native_enabled", "STORE_OPTIONS",
    ])
    for name in dkv.__all__:
        assert hasattr(dkv, name), name


def test_error_hierarchy():
    for err in (dkv.CorruptionError, dkv.FencedError, dkv.ClosedError, dkv.ReadOnlyError,
                dkv.StorageError, dkv.CheckpointNotFoundError, dkv.ObjectMissingError):
        assert issubclass(err, dkv.DkvError)
    assert issubclass(dkv.CheckpointNotFoundError, LookupError)
    assert issubclass(dkv.StorageError, OSError)
    assert issubclass(dkv.ObjectMissingError, FileNotFoundError)


@pytest.fixture
def db():
    with dkv.open(MemoryStore()) as db:
        yield db


@pytest.mark.parametrize("bad", ["text", 1, None, 1.5, ["a"], object()])
def test_non_bytes_keys_are_type_errors(db, bad):
    calls = [lambda: db.put(bad, b"v"), lambda: db.get(bad), lambda: db.delete(bad), lambda: db.scan_prefix(bad)]
    if bad is not None:     # None is a valid open end of a scan
        calls += [lambda: db.scan(bad), lambda: db.scan(None, bad)]
    for call in calls:
        with pytest.raises(TypeError, match="bytes") as info:
            call()
        assert type(bad).__name__ in str(info.value)


def test_empty_key_is_a_value_error(db):
    for call in (lambda: db.put(b"", b"v"), lambda: db.get(b""), lambda: db.delete(b"")):
        with pytest.raises(ValueError, match="empty"):
            call()


@pytest.mark.parametrize("bad", ["text", 1, None])
def test_non_bytes_values_are_type_errors(db, bad):
    with pytest.raises(TypeError, match="values must be bytes"):
        db.put(b"k", bad)
    assert db.get(b"k") is None


def test_bytes_like_keys_and_values_are_accepted(db):
    db.put(bytearray(b"k1"), memoryview(b"v1"))
    db.put(memoryview(b"k2"), bytearray(b"v2"))
    assert db.get(b"k1") == b"v1" and db.get(bytearray(b"k2")) == b"v2"
    assert type(db.get(b"k2")) is bytes


def test_batch_rejects_bad_entries_before_writing(db):
    with pytest.raises(TypeError):
        with db.batch() as b:
            b.put(b"a", b"1")
            b.put("b", b"2")
    assert db.get(b"a") is None
    with pytest.raises(RuntimeError):
        with db.batch() as b:
            b.put(b"a", b"1")
            raise RuntimeError("user code fails inside the batch")
    assert db.get(b"a") is None, "a batch is applied only on a clean exit"
    with pytest.raises(TypeError, match="WriteBatch"):
        db.write([(b"a", b"1")])


def test_write_batch_semantics(db):
    b = dkv.WriteBatch()
    b.put(b"k", b"1")
    b.delete(b"k")
    b.put(b"j", b"22")
    b.delete(b"gone")
    assert len(b) == 4 and b.nbytes == 1 + 1 + 1 + 1 + 2 + 4
    assert list(b) == [(b"k", b"1"), (b"k", None), (b"j", b"22"), (b"gone", None)]
    db.put(b"gone", b"x")
    db.write(b)
    assert db.get(b"k") is None and db.get(b"j") == b"22" and db.get(b"gone") is None
    b.clear()
    assert len(b) == 0 and b.nbytes == 0


def test_unknown_option_lists_the_known_ones():
    with pytest.raises(TypeError) as info:
        dkv.open(MemoryStore(), memtable_size=10)
    msg = str(info.value)
    assert "memtable_size" in msg and "memtable_bytes" in msg and "retain" in msg


@pytest.mark.parametrize("opts", [dict(memtable_bytes=0), dict(retain=0), dict(l0_trigger=1),
                                  dict(block_bytes=-5), dict(retain=True), dict(level_ratio="10")])
def test_bad_option_values(opts):
    with pytest.raises(ValueError, match=next(iter(opts))):
        dkv.open(MemoryStore(), **opts)


def test_locations(tmp_path):
    with pytest.raises(ValueError, match="scheme"):
        dkv.open("ftp://host/path")
    for bad in (123, "", None):
        with pytest.raises(TypeError):
            dkv.open(bad)
    # Paths, pathlib, file:// and memory:// all work and reopen the same data.
    for loc in (str(tmp_path / "p"), tmp_path / "q", f"file://{tmp_path}/r"):
        with dkv.open(loc) as db:
            db.put(b"k", b"v")
            db.checkpoint(1).wait()
        with dkv.open(loc, read_only=True) as db:
            assert db.get(b"k") == b"v"
    assert isinstance(dkv.open_store(tmp_path / "p"), LocalDirStore)
    MemoryStore.forget("api-test")
    with dkv.open("memory://api-test") as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    with dkv.open("memory://api-test", read_only=True) as db:
        assert db.get(b"k") == b"v"
    MemoryStore.forget("api-test")
    with pytest.raises(dkv.NotAStoreError, match="memory://api-test"):
        dkv.open("memory://api-test", read_only=True)     # a read-only open creates nothing
    with dkv.open("memory://api-test") as db:
        assert db.get(b"k") is None
    MemoryStore.forget("api-test")


def test_closed_store_raises_closed_error():
    db = dkv.open(MemoryStore())
    db.put(b"k", b"v")
    db.close()
    db.close()      # idempotent
    calls = [lambda: db.put(b"k", b"v"), lambda: db.get(b"k"), lambda: db.delete(b"k"),
             lambda: db.scan(), lambda: db.scan_prefix(b"k"), lambda: db.checkpoint(1),
             lambda: db.flush(), lambda: db.write(dkv.WriteBatch())]
    for call in calls:
        with pytest.raises(dkv.ClosedError):
            call()
    with pytest.raises(dkv.ClosedError):
        with db.batch() as b:
            b.put(b"k", b"v")
    with dkv.open(MemoryStore()) as db2:
        pass
    with pytest.raises(dkv.ClosedError):
        db2.get(b"k")
    assert "closed" in repr(db2)


def test_read_only_store_raises_read_only_error():
    store = MemoryStore()
    with dkv.open(store) as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    with dkv.open(store, read_only=True) as ro:
        assert ro.get(b"k") == b"v"
        calls = [lambda: ro.put(b"k", b"v"), lambda: ro.delete(b"k"), lambda: ro.checkpoint(2),
                 lambda: ro.flush(), lambda: ro.compact(), lambda: ro.write(dkv.WriteBatch())]
        for call in calls:
            with pytest.raises(dkv.ReadOnlyError):
                call()
        assert "read-only" in repr(ro)


def test_missing_checkpoint():
    store = MemoryStore()
    with pytest.raises(dkv.CheckpointNotFoundError):
        dkv.open(store, checkpoint=3)
    with pytest.raises(dkv.NotAStoreError, match="checkpoint 3"):      # no store at all
        dkv.open(store, checkpoint=3, read_only=True)
    with dkv.open(store) as db:
        for e in (1, 2, 3):
            db.checkpoint(e).wait()
    with pytest.raises(dkv.CheckpointNotFoundError, match=r"\[1, 2, 3\]"):
        dkv.open(store, checkpoint=9, read_only=True)
    with pytest.raises(LookupError):
        dkv.open(store, checkpoint=0)


def test_bad_instance_and_key_groups():
    for bad in ("a/../b", "a//b", "./a"):
        with pytest.raises(ValueError):
            dkv.open(MemoryStore(), instance=bad)
    for groups in ((5, 5), (10, 2), (-1, 4), (0, 70000), (1, 2, 3), range(0, 10, 2)):
        with pytest.raises(ValueError, match="key_group_range"):
            dkv.open(MemoryStore(), key_group_range=groups)


def test_key_group_range_names_and_the_old_name():
    """key_group_range is a (first, end) range of key groups (a range object too); its old
    name key_groups= still works with a DeprecationWarning (spark_ops' key_groups is a count)."""
    with dkv.open(MemoryStore(), instance="s0", key_group_range=range(16, 32)) as db:
        assert db.key_group_range == (16, 32) == db.key_groups and db.instance == "s0"
    with pytest.warns(DeprecationWarning, match="key_group_range"):
        with dkv.open(MemoryStore(), key_groups=(0, 8)) as db:
            assert db.key_group_range == (0, 8)
    with pytest.raises(TypeError, match="key_group_range only"):
        dkv.open(MemoryStore(), key_groups=(0, 8), key_group_range=(0, 8))


def test_key_groups_helpers():
    assert dkv.key_prefix(258, 1) == b"\x01\x02\x01"
    assert dkv.key_prefix(0, 0) == b"\x00\x00\x00"
    assert dkv.key_prefix(65535, 2) == b"\xff\xff\x02"
    assert not hasattr(dkv, "SCHEMA_TIMER"), "schema bytes are the callers' (objectspace, spark_ops)"
    assert dkv.key_group_of(b"\x01\x02rest") == 258
    for bad in (-1, 65536, "1", 1.0):
        with pytest.raises(ValueError):
            dkv.key_prefix(bad, 0)
    with pytest.raises(ValueError):
        dkv.key_prefix(1, 256)
    with pytest.raises(ValueError):
        dkv.key_group_of(b"\x01")
    # Key groups order like their numbers: one group is one contiguous key range.
    prefixes = [dkv.key_prefix(g, 0) for g in (0, 1, 255, 256, 4096, 65535)]
    assert prefixes == sorted(prefixes)


def test_prefix_end():
    assert dkv.prefix_end(b"ab") == b"ac"
    assert dkv.prefix_end(b"a\xff") == b"b"
    assert dkv.prefix_end(b"\xff\xff") is None
    assert dkv.prefix_end(b"\x00") == b"\x01"


def test_scan_edge_ranges(db):
    for k in (b"\x00", b"a", b"a\x00", b"a\xff", b"b", b"\xff", b"\xff\xff"):
        db.put(k, k)
    assert [k for k, _ in db.scan(b"b", b"a")] == []
    assert [k for k, _ in db.scan(b"a", b"a")] == []
    assert [k for k, _ in db.scan(b"a", b"b")] == [b"a", b"a\x00", b"a\xff"]
    assert [k for k, _ in db.scan_prefix(b"\xff")] == [b"\xff", b"\xff\xff"]
    assert [k for k, _ in db.scan_prefix(b"a")] == [b"a", b"a\x00", b"a\xff"]
    assert [k for k, _ in db.scan(end=b"a")] == [b"\x00"]
    assert [k for k, _ in db.scan(start=b"\xff")] == [b"\xff", b"\xff\xff"]


def test_empty_values_are_not_missing():
    store = MemoryStore()
    with dkv.open(store, background=False, memtable_bytes=200) as db:
        db.put(b"empty", b"")
        for i in range(20):
            db.put(b"x%02d" % i, b"y" * 10)     # flush the empty value into an SST
        assert db.get(b"empty") == b""
        db.compact(full=True)
        assert db.get(b"empty") == b""
        db.checkpoint(1).wait()
    with dkv.open(store, read_only=True) as db:
        assert db.get(b"empty") == b"" and dict(db.scan())[b"empty"] == b""


def test_repr_and_stats(db):
    db.put(b"k", b"v")
    assert "writer" in repr(db)
    s = db.stats()
    assert s["last_seq"] == 1 and s["memtable_records"] == 1 and s["levels"][0]["level"] == 0


def test_instances_and_list_checkpoints():
    root = MemoryStore()
    for ns in ("", "shard-1", "x/shard-2"):
        with dkv.open(root, instance=ns) as db:
            db.put(b"k", ns.encode() or b"root")
            db.checkpoint(4).wait()
    assert dkv.instances(root) == ["", "shard-1", "x/shard-2"]
    for ns in ("", "shard-1", "x/shard-2"):
        [info] = dkv.list_checkpoints(root, ns)
        assert info.epoch == 4 and info.writer == 1 and isinstance(info, dkv.CheckpointInfo)
        with dkv.open(root, instance=ns, read_only=True) as db:
            assert db.get(b"k") == (ns.encode() or b"root")


@pytest.mark.parametrize("path", ["c", "python"])
def test_write_batch_extend_checks_everything_before_adding_anything(path, monkeypatch):
    """The same on both paths: records of exact types are appended by the C helper
    (dkv.format._native.batch_extend, when built), any other list by the Python loop."""
    from dkv import batch as batch_mod
    if path == "python":
        monkeypatch.setattr(batch_mod, "_c_extend", None)
    b = dkv.WriteBatch()
    b.put(b"a", b"1")
    b.extend([(b"b", b"2"), (bytearray(b"c"), None), (b"d", memoryview(b"4"))])
    assert list(b) == [(b"a", b"1"), (b"b", b"2"), (b"c", None), (b"d", b"4")]
    assert b.nbytes == 2 + 2 + 1 + 2
    fast = dkv.WriteBatch()       # tombstones and empty values count as they should
    fast.extend([(b"x", b"12"), (b"y", None), (b"z", b"")])
    assert list(fast) == [(b"x", b"12"), (b"y", None), (b"z", b"")] and fast.nbytes == 5
    fast.extend(list(fast))
    assert len(fast) == 6 and fast.nbytes == 10
    for bad in ([(b"e", b"5"), (b"", b"x")], [(b"e", b"5"), ("str", b"x")], [(b"e", 5)],
                [(b"e", b"5"), (b"f",)], [(b"e", b"5", b"6")], [[b"e", 5]]):
        with pytest.raises((TypeError, ValueError)):
            b.extend(bad)
        assert len(b) == 4 and b.nbytes == 7        # nothing of the bad list was added
    db = dkv.open("memory://extend")
    db.write(b)
    assert list(db.scan()) == [(b"a", b"1"), (b"b", b"2"), (b"d", b"4")]


def test_key_bounds_are_min_and_max_of_the_keys_on_both_paths(monkeypatch):
    """DB.write checks a batch's least and greatest key against the instance's key groups:
    dkv.batch.key_bounds gives min() and max() of the keys, in C (batch_bounds) for records
    of exact types and by the builtins otherwise or without the C helper."""
    import random

    from dkv import batch as batch_mod
    rng = random.Random(7)
    cases = [[(b"k", b"v")], [(b"b", None), (b"a", b""), (b"c", b"1")], [(b"ab", b"1"), (b"a", b"2"), (b"abc", None)],
             [(b"\xff", b"1"), (b"\x00", b"2"), (b"\x00\x00", b"3")]]
    for _ in range(300):
        keys = [bytes(rng.choice(b"\x00\x01ab\xff") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 40))]
        cases.append([(k, rng.choice([None, b"", b"v"])) for k in keys])
    for ops in cases:
        expected = (min(k for k, _ in ops), max(k for k, _ in ops))
        assert batch_mod.key_bounds(ops) == expected
        with monkeypatch.context() as m:
            m.setattr(batch_mod, "_c_bounds", None)
            assert batch_mod.key_bounds(ops) == expected
    if batch_mod._c_extend is not None:     # the C module is in use: so is its bounds pass
        assert batch_mod._c_bounds is not None
    if batch_mod._c_bounds is not None:     # shapes the C pass leaves to the builtins
        assert batch_mod._c_bounds([]) is None
        assert batch_mod._c_bounds([(b"a", b"1"), [b"b", b"2"]]) is None
        assert batch_mod._c_bounds([(b"a", b"1"), (bytearray(b"b"), b"2")]) is None
        assert batch_mod._c_bounds([(b"a", b"1", b"x")]) is None
    assert batch_mod.key_bounds([(b"a", b"1"), [b"c", b"2"], (b"b", None)]) == (b"a", b"c")


def test_a_batch_with_a_key_outside_the_key_groups_writes_nothing():
    """The least or the greatest key of a batch outside the instance's key groups: a
    ValueError that names the key, and nothing of the batch applied."""
    db = dkv.open(MemoryStore(), key_group_range=(2, 4), background=False)
    inside = [dkv.key_prefix(2, 0) + b"x", dkv.key_prefix(3, 1) + b"y"]
    for outside in (dkv.key_prefix(1, 9) + b"z", dkv.key_prefix(4, 0)):
        b = dkv.WriteBatch()
        b.put(inside[0], b"1")
        b.put(outside, b"2")
        b.put(inside[1], b"3")
        with pytest.raises(ValueError, match="outside this instance's key groups"):
            db.write(b)
        assert list(db.scan()) == []
    b = dkv.WriteBatch()
    b.extend([(k, b"v") for k in inside])
    db.write(b)
    assert [k for k, _ in db.scan()] == inside
    db.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc/self/fd (Linux)")
def test_a_store_opened_from_a_path_is_closed_with_its_db_and_one_passed_in_is_not(tmp_path):
    """Each open of a path made a store whose cached file handles outlived the DB: a notebook
    that opened and closed a space 1,000 times ran out of file descriptors (a long test
    suite passed 1,024). A store the caller passes in stays theirs, open."""
    from dkv.storage import LocalDirStore

    def open_files() -> int:
        return len(os.listdir("/proc/self/fd"))

    path = str(tmp_path / "db")
    db = dkv.open(path, fsync=False, background=False, block_bytes=256)
    for i in range(300):
        db.put(b"k%04d" % i, b"v" * 40)
    db.flush()
    db.checkpoint(1).wait()
    db.close()
    before = open_files()
    for _ in range(30):
        with dkv.open(path, read_only=True) as ro:
            assert ro.get(b"k0007") == b"v" * 40 and len(list(ro.scan(b"k01", b"k02"))) == 100
    assert open_files() == before
    store = LocalDirStore(path)
    with dkv.open(store, read_only=True) as ro:
        assert ro.get(b"k0007") == b"v" * 40
    assert store._fds, "the caller's store keeps its handles"
    assert dkv.open(store, read_only=True).get(b"k0299") == b"v" * 40
    store.close()
