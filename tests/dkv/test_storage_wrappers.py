"""The test wrappers themselves: LoggingStore records calls, FaultInjectingStore fails the
calls it is told to, in the modes it documents. The fault and golden tests rely on both."""
from __future__ import annotations

import pytest

import dkv
from dkv.storage import FaultInjectingStore, InjectedFault, LoggingStore, MemoryStore


def test_logging_store_records_calls_in_order():
    log = LoggingStore(MemoryStore())
    log.put("a", b"123")
    assert log.put_if_absent("b", b"4") and not log.put_if_absent("b", b"5")
    log.get("a")
    log.get("a", 1, 2)
    log.list("")
    log.size("a")
    log.delete("a")
    assert [str(c) for c in log.calls] == [
        "put a", "put_if_absent b", "put_if_absent b !", "get a", "get a [1:2]", "list ", "size a", "delete a"]
    assert [c.nbytes for c in log.calls[:5]] == [3, 1, 1, 3, 1]
    assert log.bytes_written() == 4
    log.clear()
    assert log.calls == []


@pytest.mark.parametrize("mode", ["error", "torn", "landed", "lost", "corrupt"])
def test_fault_modes_on_writes(mode):
    inner = MemoryStore()
    fs = FaultInjectingStore(inner).fail("put", nth=2, mode=mode)
    data = bytes(range(100))
    fs.put("one", data)
    if mode in ("error", "torn", "landed"):
        with pytest.raises(InjectedFault):
            fs.put("two", data)
    else:
        fs.put("two", data)
    fs.put("three", data)
    assert inner.get("one") == data and inner.get("three") == data
    got = inner.get("two") if inner.exists("two") else None
    expected = {"error": None, "torn": data[:50], "landed": data, "lost": None}
    if mode == "corrupt":
        assert got is not None and len(got) == 100 and sum(a != b for a, b in zip(got, data)) == 1
    else:
        assert got == expected[mode]
    assert fs.fired == [f"{mode} put two"]
    assert issubclass(InjectedFault, dkv.StorageError)


def test_fault_rules_by_kind_prefix_and_repeat():
    fs = FaultInjectingStore(MemoryStore())
    fs.fail("write", nth=1, key_prefix="wal/", repeat=True)
    fs.put("sst/1", b"x")
    assert fs.put_if_absent("manifest/1", b"x")
    for name in ("wal/1", "wal/2"):
        with pytest.raises(InjectedFault):
            fs.put(name, b"x")
    with pytest.raises(InjectedFault):
        fs.put_if_absent("wal/3", b"x")
    fs.clear()
    fs.put("wal/4", b"x")
    fs.fail("get", nth=2)
    fs.get("wal/4")
    with pytest.raises(InjectedFault):
        fs.get("wal/4")
    fs.get("wal/4")
    fs.fail("list").fail("delete")
    with pytest.raises(InjectedFault):
        fs.list("")
    with pytest.raises(InjectedFault):
        fs.delete("wal/4")
    with pytest.raises(ValueError):
        fs.fail("put", mode="explode")


def test_crash_after_loses_every_later_write():
    inner = MemoryStore()
    fs = FaultInjectingStore(inner).crash_after(2)
    fs.put("a", b"1")
    fs.put_if_absent("b", b"2")
    fs.put("c", b"3")
    assert fs.put_if_absent("d", b"4") is True     # reported as done ...
    assert [k for k, _ in inner.list("")] == ["a", "b"]   # ... but never stored


def test_flip_byte():
    inner = MemoryStore()
    inner.put("x", b"\x00" * 10)
    fs = FaultInjectingStore(inner)
    assert fs.flip_byte("x", 3) == 3
    assert inner.get("x") == b"\x00\x00\x00\xff" + b"\x00" * 6
    assert fs.flip_byte("x", 13) == 3                 # offsets wrap around
    assert inner.get("x") == b"\x00" * 10
    i = fs.flip_byte("x")
    assert inner.get("x")[i] == 0xFF
