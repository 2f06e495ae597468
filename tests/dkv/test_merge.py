"""The merge of sorted runs that flushes and compactions make (dkv/_merge.py ``merge_runs``):
its C twin (``dkv.format._native.merge_runs``, a heap over the runs) against the Python
reference (a dict updated oldest run first, then a sort), on random runs; and what the C
one hands back to the Python one (None) rather than merge: runs not of its shape."""
from __future__ import annotations

import copy
import random
import sys

import pytest

from dkv import _merge

native = pytest.importorskip("dkv.format._native")
c_merge = getattr(native, "merge_runs", None)
pytestmark = pytest.mark.skipif(c_merge is None, reason="dkv's C module has no merge_runs")


def _runs(rng: random.Random) -> list:
    universe = [rng.randbytes(rng.randrange(0, 6)) for _ in range(rng.choice([3, 30, 400]))]
    universe += [u + b"\x00" for u in universe[:5]] + [b""]      # prefixes of one another
    runs = []
    for _ in range(rng.choice([0, 1, 2, 3, 8, 40])):
        keys = sorted(set(rng.sample(universe, rng.randrange(0, len(universe) // 2 + 1))))
        tomb = rng.choice([0.0, 0.3, 1.0])
        runs.append((keys, [None if rng.random() < tomb else rng.randbytes(rng.randrange(0, 4)) for _ in keys]))
    return runs


@pytest.mark.parametrize("seed", range(60))
def test_the_heap_merges_as_the_dict(seed):
    rng = random.Random(seed)
    runs = _runs(rng)
    for drop in (False, True):
        want = _merge._merge_runs(runs, drop)
        got = c_merge(runs, drop)
        assert got == want
        assert all(a is b for a, b in zip(got[0] + got[1], _identity(runs, got, drop)))
        assert _merge.merge_runs(runs, drop) == want      # through C up to C_MERGE_RUNS runs, else Python


def _identity(runs, got, drop):
    """The objects the merge must return: each key's object from the newest run holding
    it (as the dict keeps the first key object inserted but the last value: equal keys
    are equal bytes, so only the values' identity is checked past equality)."""
    newest = {}
    for ks, vs in runs:
        for k, v in zip(ks, vs):
            newest[k] = v
    return list(got[0]) + [newest[k] for k in got[0]]


def test_the_newest_run_wins_and_tombstones_hide():
    old = ([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    new = ([b"b", b"c", b"d"], [None, b"C", None])
    assert c_merge([old, new], False) == ([b"a", b"b", b"c", b"d"], [b"1", None, b"C", None])
    assert c_merge([old, new], True) == ([b"a", b"c"], [b"1", b"C"])
    assert c_merge([new, old], True) == ([b"a", b"b", b"c"], [b"1", b"2", b"3"])
    assert c_merge([], True) == ([], []) and c_merge([([], [])], False) == ([], [])


@pytest.mark.parametrize("runs", [
    [([b"b", b"a"], [b"1", b"2"])],                     # out of order
    [([b"a", b"a"], [b"1", b"2"])],                     # a key twice
    [([b"a", "b"], [b"1", b"2"])],                      # a key that is not bytes
    [([b"a", bytearray(b"b")], [b"1", b"2"])],
    [([b"a"], [b"1"]), ([b"b"], [1])],                  # a value that is neither bytes nor None
    [([b"a"], [b"1", b"2"])],                           # lengths differ
    [((b"a",), [b"1"])],                                # not lists
    [[[b"a"], [b"1"]]],                                 # a run that is not a tuple
    [([b"a"], [b"1"], 7)],
], ids=["order", "twice", "str", "bytearray", "value", "lengths", "tuple-keys", "list-run", "triple"])
def test_runs_of_another_shape_go_to_the_python_merge(runs):
    before = copy.deepcopy(runs)
    assert c_merge(runs, False) is None
    assert runs == before
    try:
        want = _merge._merge_runs(runs, False)
    except (TypeError, ValueError) as e:
        with pytest.raises(type(e)):
            _merge.merge_runs(runs, False)
    else:
        assert _merge.merge_runs(runs, False) == want


def test_no_reference_leaks():
    rng = random.Random(7)
    runs = _runs(random.Random(3)) or [([b"k"], [b"v"])]
    objs = [x for ks, vs in runs for x in ks + vs]
    counts = [sys.getrefcount(x) for x in objs]
    for _ in range(50):
        c_merge(runs, rng.random() < 0.5)
    assert [sys.getrefcount(x) for x in objs] == counts


def test_flush_and_compaction_merge_through_it(tmp_path, monkeypatch):
    """A flush and a full compaction of overlapping writes give the same store through the
    C merge and the Python one (the twin patched out): the same records and the same SST
    files, byte for byte (their names are random)."""
    import dkv
    stores, ssts, merged = {}, {}, []

    def counted(runs, drop):
        out = c_merge(runs, drop)
        merged.append(out is not None)
        return out
    for name, twin in (("c", counted), ("python", None)):
        monkeypatch.setattr(_merge, "_c_merge_runs", twin)
        rng = random.Random(11)
        db = dkv.open(str(tmp_path / name), background=False, memtable_bytes=4096, fsync=False)
        for _ in range(6):
            for _ in range(300):
                k = b"k%04d" % rng.randrange(800)
                if rng.random() < 0.2:
                    db.delete(k)
                else:
                    db.put(k, rng.randbytes(rng.randrange(1, 30)))
            db.checkpoint().wait()
            db.flush()
        db.compact(full=True)
        stores[name] = dict(db.scan())
        db.close()
        ssts[name] = sorted(f.read_bytes() for f in (tmp_path / name / "sst").iterdir())
    assert stores["c"] == stores["python"] and stores["c"]
    assert ssts["c"] == ssts["python"] and len(ssts["c"]) >= 2
    assert sum(merged) >= 6         # ranges the C merge took (a range of over C_MERGE_RUNS runs: the dict)
