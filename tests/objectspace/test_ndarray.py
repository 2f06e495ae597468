"""The ndarray kind: a reference model against a plain numpy array (random reads, writes,
resizes, with saves, failed commits, checkpoints, reopens and crashes in between, through
test_models' harness), bad input and its messages, what a write and a read cost in
records, and how the inspection CLI shows one."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from objectspace import EncodingError, KindMismatchError, ObjectSpace, PersistedNDArray
from objectspace._ndlayout import default_chunks
from objectspace.cli import main
from .os_drivers import DRIVERS, Driver
from .os_helpers import RecordingDB, commit, new_location, open_db, render
from .test_models import Run

# (shape, chunks, dtype, fill) per seed: several dimensions, chunks that do not divide the
# shape, a non-zero fill value.
CONFIGS = [
    ((7,), (3,), "int32", 0),
    ((5, 4), (2, 3), "float64", 0.0),
    ((4, 3, 5), (3, 2, 2), "int16", -1),
    ((6, 5), (4, 2), "bool", False),
    ((0, 3), (2, 2), "complex64", 1 + 1j),
    ((9, 2), (2, 1), "uint8", 7),
]


class Model:
    """The twin: a numpy array in a box, so that a resize can replace it."""

    def __init__(self, a, fill) -> None:
        self.a, self.fill = a, fill


def rand_scalar(rng, dtype):
    k = np.dtype(dtype).kind
    if k == "b":
        return rng.random() < 0.5
    if k == "u":
        return rng.randint(0, 255)
    if k == "i":
        return rng.randint(-100, 100)
    if k == "f":
        return round(rng.uniform(-50, 50), 2)
    return complex(rng.randint(-9, 9), rng.randint(-9, 9))


def rand_index(rng, shape):
    """A basic index: ints (sometimes out of bounds), slices with steps, an Ellipsis, a new
    axis, occasionally one index too many."""
    ndim = len(shape)
    n_real = ndim if rng.random() < 0.6 else rng.randint(0, ndim + (1 if rng.random() < 0.05 else 0))
    parts = []
    for axis in range(n_real):
        n = shape[axis] if axis < ndim else 1
        r = rng.random()
        if r < 0.35:
            parts.append(rng.randint(-n - (rng.random() < 0.1), max(0, n - 1) + (rng.random() < 0.1)))
        else:
            def bound():
                return None if rng.random() < 0.3 else rng.randint(-n - 2, n + 2)
            parts.append(slice(bound(), bound(), rng.choice([None, 1, 2, 3, -1, -2])))
    if rng.random() < 0.25:
        parts.insert(rng.randint(0, len(parts)), Ellipsis)
    if rng.random() < 0.1:
        parts.insert(rng.randint(0, len(parts)), None)
    if len(parts) == 1 and rng.random() < 0.5:
        return parts[0]
    return tuple(parts)


def same_result(got, want) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), (type(got), want)
        assert got.shape == want.shape and got.dtype == want.dtype
        assert np.array_equal(got, want), (got, want)
    else:
        assert type(got) is type(want) and got == want, (got, want)


def same(model_fn, obj_fn):
    try:
        want = model_fn()
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            obj_fn()
        return
    same_result(obj_fn(), want)


class NDArrayDriver(Driver):
    kind = "ndarray"

    def __init__(self) -> None:
        self.n = 0

    def create(self, space, name, rng):
        shape, chunks, dtype, fill = CONFIGS[rng.randrange(len(CONFIGS))]
        obj = space.create_ndarray(name, shape, dtype, chunks=chunks, fill_value=fill)
        return obj, Model(np.full(shape, fill, dtype=dtype), fill)

    def copy(self, model):
        return Model(model.a.copy(), model.fill)

    def check(self, obj, model) -> None:
        assert obj.shape == model.a.shape and obj.dtype == model.a.dtype and len(obj) == len(model.a)
        same_result(obj.to_numpy(), model.a)

    def step(self, rng, obj, model):
        a = model.a
        r = rng.random()
        if r < 0.3:                                     # one cell, by ints
            idx = tuple(rng.randint(-n, n - 1) for n in a.shape) if a.size else (0,) * a.ndim
            v = rand_scalar(rng, a.dtype)
            if rng.random() < 0.6:
                same(lambda: a.__setitem__(idx, v), lambda: obj.__setitem__(idx, v))
            same(lambda: a[idx], lambda: obj[idx])
        elif r < 0.55:                                  # read a selection
            idx = rand_index(rng, a.shape)
            same(lambda: a[idx], lambda: obj[idx])
        elif r < 0.8:                                   # write a selection
            idx = rand_index(rng, a.shape)
            try:
                view = a[idx].shape if isinstance(a[idx], np.ndarray) else ()
            except Exception:  # noqa: BLE001 - a bad index: both must raise the same
                view = ()
            q = rng.random()
            if q < 0.3 or not view:
                value = rand_scalar(rng, a.dtype)
            elif q < 0.55:
                value = np.array([rand_scalar(rng, a.dtype) for _ in range(math.prod(view))],
                                 dtype=a.dtype).reshape(view)
            elif q < 0.8:
                value = [rand_scalar(rng, a.dtype) for _ in range(view[-1])]       # broadcast a row
            else:
                value = np.zeros(view[:-1] + (view[-1] + 1,), dtype=a.dtype)       # does not fit
            same(lambda: a.__setitem__(idx, value), lambda: obj.__setitem__(idx, value))
        elif r < 0.9:                                   # resize the first axis
            n = max(0, a.shape[0] + rng.randint(-4, 4))
            grown = np.full((n,) + a.shape[1:], model.fill, dtype=a.dtype)
            k = min(n, a.shape[0])
            grown[:k] = a[:k]
            obj.resize(n)
            model.a = grown
        elif r < 0.94:
            rows = np.array([rand_scalar(rng, a.dtype) for _ in range(math.prod(a.shape[1:]) * 2)],
                            dtype=a.dtype).reshape((2,) + a.shape[1:])
            obj.append(rows)
            model.a = np.concatenate([a, rows])
        elif r < 0.96:
            obj.clear()
            a[...] = model.fill
        elif r < 0.98:
            v = rand_scalar(rng, a.dtype)
            obj.fill(v)
            a[...] = v
        else:
            same_result(np.asarray(obj), a)
            assert [np.asarray(row).tolist() for row in obj] == [row.tolist() for row in a]


@pytest.fixture
def ndarray_kind(monkeypatch):
    monkeypatch.setitem(DRIVERS, "ndarray", NDArrayDriver)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("cache_items, cache_bytes", [(4096, 256 << 20), (2, 256 << 20), (4096, 6000)],
                         ids=["cached", "tiny-cache", "tiny-budget"])
def test_reference_model(ndarray_kind, seed, cache_items, cache_bytes):
    """800 steps x 3 seeds x 3 cache settings (about a second in all). With two chunks of
    cache, or a 6,000-byte budget, partial writes and reads go to the store."""
    stats = Run("ndarray", seed, new_location(), cache_items, cache_bytes).run(800)
    assert stats["saves"] and stats["checkpoints"] and stats["crashes"] and stats["ops"] > 600


def test_reference_model_on_a_folder(ndarray_kind, tmp_path):
    assert Run("ndarray", 7, new_location("dir", tmp_path), 3).run(300)["reopens"]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 15))
def test_reference_model_long(ndarray_kind, seed, tmp_path):
    where = "dir" if seed % 4 == 0 else "memory"
    Run("ndarray", seed, new_location(where, tmp_path), [4096, 2, 64][seed % 3],
        [256 << 20, 256 << 20, 20_000][seed % 3]).run(5000)


# -- semantics ------------------------------------------------------------------------------------

def test_reads_writes_and_reopen(space, db):
    a = space.create_ndarray("a", (3, 4), "int32", chunks=(2, 2), fill_value=-1)
    assert isinstance(a, PersistedNDArray) and a.fill_value == -1 and a.fill_value.dtype == np.int32
    a[1, 1:3] = 7
    a[-1] = [1, 2, 3, 4]
    a[:, 0] = np.array([[9], [8], [7]])[:, 0]
    assert a[1:, ::2].tolist() == [[8, 7], [7, 3]]
    assert a[..., -1].tolist() == [-1, -1, 4] and a[None, 0].shape == (1, 4)
    assert a[2, 3] == 4 and isinstance(a[2, 3], np.int32)
    assert a.shape == (3, 4) and a.ndim == 2 and a.size == 12 and a.nbytes == 48 and len(a) == 3
    assert a.chunks == (2, 2) and a.nchunks == 4 and a.dtype == np.int32
    commit(space)
    b = ObjectSpace(db, prefix=space.prefix).get_ndarray("a")
    assert np.array_equal(np.asarray(b), a.to_numpy()) and b.fill_value == -1
    assert np.asarray(b, dtype=float).dtype == np.float64
    assert b.copy().tolist() == a.to_numpy().tolist()
    with pytest.raises(KindMismatchError, match="'a' is a ndarray, not a list"):
        ObjectSpace(db, prefix=space.prefix).get_list("a")


def test_uncommitted_changes_vanish_after_a_crash(location):
    db = open_db(location)
    space = ObjectSpace(db)
    a = space.create_ndarray("a", (10,), "float64", chunks=(4,))
    a[2] = 1.5
    space.checkpoint(1)
    a[3] = 2.5
    a.resize(20)
    a[15] = 3.0
    space.save()                       # saved but never committed, then the process dies
    db.close()
    db = open_db(location, 1)
    again = ObjectSpace(db).get_ndarray("a")
    assert again.shape == (10,) and again[2] == 1.5 and again[3] == 0.0
    db.close()


def test_resize_keeps_the_cells_it_keeps_and_fills_the_new_ones(space, db):
    a = space.create_ndarray("a", (10, 3), "int64", chunks=(4, 2), fill_value=5)
    a[...] = np.arange(30).reshape(10, 3)
    commit(space)
    a.resize(6)                        # the middle of a chunk row: its cells 6, 7 are dropped
    a.resize(12)
    want = np.full((12, 3), 5)
    want[:6] = np.arange(18).reshape(6, 3)
    assert np.array_equal(a.to_numpy(), want)
    commit(space)
    assert np.array_equal(ObjectSpace(db, prefix=space.prefix).get_ndarray("a").to_numpy(), want)
    a.resize(0)
    commit(space)
    b = ObjectSpace(db, prefix=space.prefix).get_ndarray("a")
    assert b.shape == (0, 3) and list(db.scan_prefix(space.prefix + b"\x01")) != []
    assert sum(1 for k, _ in db.scan_prefix(b._items)) == 0          # every chunk deleted
    b.append([1, 2, 3])
    b.append(np.ones((2, 3)))
    assert b.to_numpy().tolist() == [[1, 2, 3], [1, 1, 1], [1, 1, 1]]


def test_get_or_create_keeps_an_existing_array(space):
    a = space.get_or_create_ndarray("a", (4,), "uint8")
    a[0] = 200
    b = space.get_or_create_ndarray("a", (9, 9), "float64")
    assert b is a and b.shape == (4,) and b[0] == 200


# -- bad input --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, message", [
    (object, r"cannot store dtype object \(Python objects\) for ndarray 'x'"),
    ("U5", r"cannot store dtype <U5 \(str\)"),
    ("S3", r"cannot store dtype \|S3 \(bytes\)"),
    ([("a", "i4"), ("b", "f8")], r"cannot store dtype .*\(structured\)"),
    ("datetime64[ns]", r"cannot store dtype datetime64\[ns\] \(datetime64\)"),
    (np.longdouble, r"cannot store dtype float128 \(extended precision"),
    ("nonsense", r"dtype 'nonsense' for ndarray 'x' is not a numpy dtype"),
])
def test_dtypes_that_cannot_be_stored(space, dtype, message):
    if dtype is np.longdouble and np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("long double is double on this platform")
    with pytest.raises(EncodingError, match=message) as e:
        space.create_ndarray("x", (3,), dtype)
    assert isinstance(e.value, TypeError) and "x" not in space


@pytest.mark.parametrize("kwargs, error, message", [
    ({"shape": (-1, 2)}, ValueError, r"ndarray 'x' shape must be >= 0, got \(-1, 2\)"),
    ({"shape": (2.5,)}, TypeError, r"ndarray 'x' shape must be ints, got float 2.5"),
    ({"shape": ()}, ValueError, r"ndarray 'x' needs 1 to 32 dimensions, got shape \(\)"),
    ({"chunks": (2, 0)}, ValueError, r"ndarray 'x' chunks must be >= 1, got \(2, 0\)"),
    ({"chunks": (2, 2, 2)}, ValueError, r"chunks \(2, 2, 2\) must have one size per dimension of shape \(4, 3\)"),
    ({"chunks": (1 << 14, 1 << 14)}, ValueError, r"at most 67108864 are allowed"),
    ({"fill_value": 1.5}, ValueError, r"fill_value 1.5 of ndarray 'x' cannot be held by dtype int32"),
    ({"fill_value": "0"}, ValueError, r"fill_value '0' of ndarray 'x' cannot be held by dtype int32"),
    ({"dtype": "uint8", "fill_value": 300}, ValueError, r"fill_value 300 .* cannot be held by dtype uint8"),
    ({"dtype": "float32", "fill_value": 1j}, ValueError, r"fill_value 1j .* cannot be held by dtype float32"),
])
def test_bad_parameters(space, kwargs, error, message):
    args = {"shape": (4, 3), "dtype": "int32", **kwargs}
    with pytest.raises(error, match=message):
        space.create_ndarray("x", args.pop("shape"), args.pop("dtype"), **args)
    assert "x" not in space


@pytest.mark.parametrize("index, message", [
    (3, r"index 3 is out of bounds for axis 0 with size 3 \(ndarray 'a' of shape \(3, 4\)\)"),
    (-4, r"index -4 is out of bounds for axis 0 with size 3"),
    ((0, 4), r"index 4 is out of bounds for axis 1 with size 4"),
    ((slice(None), -5), r"index -5 is out of bounds for axis 1 with size 4"),
    ((0, 0, 0), r"too many indices for ndarray 'a': it is 2-dimensional, but 3 were indexed"),
    ((Ellipsis, 0, Ellipsis), r"an index can only have a single ellipsis"),
    ([0, 1], r"ndarray 'a' takes basic indices only \(ints, slices, \.\.\., None\), not list"),
    (1.0, r"takes basic indices only .*, not float"),
    (True, r"takes basic indices only .*, not bool"),
])
def test_bad_indices(space, index, message):
    a = space.create_ndarray("a", (3, 4), "int32")
    with pytest.raises(IndexError, match=message):
        a[index]
    with pytest.raises(IndexError, match=message):
        a[index] = 1
    assert a._dirty_count() == 2        # index entry and metadata: no chunk


def test_bad_assignments_change_nothing(space):
    a = space.create_ndarray("a", (3, 4), "int8", chunks=(2, 2))
    commit(space)
    with pytest.raises(ValueError, match=r"cannot assign to ndarray 'a'\[0:2\] \(selection of shape \(2, 4\)\): "
                                         r"could not broadcast input array from shape \(3,\) into shape \(2, ?4\)"):
        a[0:2] = [1, 2, 3]
    with pytest.raises(ValueError, match=r"cannot assign to ndarray 'a'\[1, ...\]"):
        a[1, ...] = np.ones((2, 4))
    with pytest.raises(OverflowError, match=r"cannot assign 300 to ndarray 'a'\[0, 0\] of dtype int8"):
        a[0, 0] = 300
    with pytest.raises(ValueError, match=r"cannot assign to ndarray 'a'\[:, 1\]"):
        a[:, 1] = "abc"
    with pytest.raises(ValueError, match=r"cannot append to ndarray 'a' of shape \(3, 4\)"):
        a.append(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"ndarray 'a' cannot have length -1"):
        a.resize(-1)
    assert a.shape == (3, 4) and a._dirty_count() == 0 and not a.to_numpy().any()


# -- what it costs -----------------------------------------------------------------------------------

def test_one_cell_written_after_a_checkpoint_writes_one_chunk(rspace, rec):
    a = rspace.create_ndarray("a", (256, 256), "float64", chunks=(32, 32))
    a[...] = 1.0
    rspace.checkpoint(1)
    assert len([r for r in rec.take() if r[0] == "put"]) == 3 + 64       # index, metadata, counts, 64 chunks
    a[100, 200] = 2.5
    assert a._dirty_count() == 1
    rspace.checkpoint(2)
    slot = (100 // 32) * 8 + 200 // 32
    log = rec.take()
    assert [line.split(" = ")[0] for line in render(log, rspace.prefix, {"a": "ndarray"})] == [
        f"put a item {slot}", "checkpoint 2"]
    assert len(log[0][2]) == 3 + 32 * 32 * 8          # msgpack bin 16 header, the chunk's bytes


def test_writes_touch_only_their_chunks_and_fill_is_sparse(rspace, rec):
    a = rspace.create_ndarray("a", (100, 100), "int32", chunks=(10, 10))
    rspace.checkpoint(1)
    puts = [r for r in rec.take() if r[0] == "put"]
    assert len(puts) == 3                               # a new array stores no chunk (index, meta, counts)
    a[5:15, 5] = 3                                      # two chunks
    rspace.checkpoint(2)
    log = [line for line in render(rec.take(), rspace.prefix, {"a": "ndarray"}) if "item" in line]
    assert [line.split(" = ")[0] for line in log] == ["put a item 0", "put a item 10"]
    a[5:15, 5] = 0                                      # back to the fill value: the chunks go
    rspace.checkpoint(3)
    assert render(rec.take(), rspace.prefix, {"a": "ndarray"}) == ["delete a item 0", "delete a item 10",
                                                                    "checkpoint 3"]
    a[99, 99] = 1
    a.resize(90)                                        # written and dropped before a save
    rspace.checkpoint(4)
    assert render(rec.take(), rspace.prefix, {"a": "ndarray"}) == ["put a meta = [[90, 100], '<i4', [10, 10], "
                                                                    "b'\\x00\\x00\\x00\\x00']", "checkpoint 4"]


def test_a_slice_reads_only_the_chunks_it_covers(db):
    space = ObjectSpace(db)
    a = space.create_ndarray("a", (64, 64), "int16", chunks=(8, 8))
    a[...] = np.arange(64 * 64, dtype=np.int16).reshape(64, 64)
    space.checkpoint(1)
    rec = RecordingDB(db)
    cold = ObjectSpace(rec).get_ndarray("a")
    assert [r[0] for r in rec.reads] == ["get"]       # metadata (names kind and codec)
    rec.reads.clear()
    assert cold[3, 60] == 3 * 64 + 60
    assert [r[0] for r in rec.reads] == ["get"]
    rec.reads.clear()
    part = cold[10:20, 26:30]                                 # chunks (1, 3) and (2, 3)
    assert np.array_equal(part, a.to_numpy()[10:20, 26:30])
    assert [r[0] for r in rec.reads] == ["get", "get"]
    rec.reads.clear()
    cold[16:24, :]                                            # a whole chunk row: one range scan
    assert [r[0] for r in rec.reads] == ["scan"]
    rec.reads.clear()
    cold[40:48, 0:8] = 1                                      # covers a chunk whole: nothing read
    cold[40, 9] = 1                                           # part of one: that chunk read
    assert [r[0] for r in rec.reads] == ["get"]


def test_default_chunks_are_about_64_kib():
    assert default_chunks((1000,), 8) == (8192,)
    assert default_chunks((0, 100), 8) == (81, 100)
    assert default_chunks((10, 512, 512), 4) == (1, 128, 128)
    for shape, itemsize in [((7, 3000, 5), 8), ((1 << 20,), 1), ((3, 3), 16)]:
        assert math.prod(default_chunks(shape, itemsize)) * itemsize <= 64 << 10


def test_numpy_is_not_imported_with_objectspace():
    code = ("import sys, objectspace\n"
            "s = objectspace.ObjectSpace.open('memory://lazy'); s.create_queue('q', [1]); s.checkpoint()\n"
            "assert 'numpy' not in sys.modules, 'numpy imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- inspection ----------------------------------------------------------------------------------------

def test_cli_shows_an_ndarray(tmp_path, capsys):
    loc = str(tmp_path / "space")
    with ObjectSpace.open(loc) as space:
        m = space.create_ndarray("m", (3, 5), "int32", chunks=(2, 2))
        m[1, 1:4] = 7
        m[-1] = np.arange(5)
        big = space.create_ndarray("big", (100_000,), "float32")
        big[5] = 1.5
        space.checkpoint()
    assert main(["show", loc, "m"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ndarray m (shape (3, 5), dtype int32, chunks (2, 2), fill 0; 5 of 6 chunks stored) "
        "in (root) @ epoch 1, key group 0",
        "CHUNK  VALUE",
        "[0,0]  [[0,0],[0,7]]",
        "[0,1]  [[0,0],[7,7]]",
        "[1,0]  [[0,1]]",
        "[1,1]  [[2,3]]",
        "[1,2]  [[4]]",
        "values:",
        "[[0 0 0 0 0]",
        " [0 7 7 7 0]",
        " [0 1 2 3 4]]",
    ]
    assert main(["show", loc, "big", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ndarray"] == {"shape": [100_000], "dtype": "float32", "chunks": [16384], "fill_value": 0.0,
                              "chunk_grid": [7], "stored_chunks": 1, "values": None}
    assert out["items"][0]["slot"] == [0] and out["items"][0]["value"][:6] == [0, 0, 0, 0, 0, 1.5]
    assert main(["ls", loc]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[:4] for r in rows] == [["big", "ndarray", "msgpack", "100000"], ["m", "ndarray", "msgpack", "3"]]


def test_notebook_rendering(space):
    a = space.create_ndarray("a", (2, 3), "int64")
    a[1] = 4
    html = a._repr_html_()
    assert "shape (2, 3)" in html and "int64" in html and "[4 4 4]" in html
    assert "kind=ndarray shape=(2, 3) dtype=int64" in repr(a)


def test_cli_diff_lists_the_chunks_that_changed(tmp_path, capsys):
    loc = str(tmp_path / "space")
    with ObjectSpace.open(loc) as space:
        m = space.create_ndarray("m", (3, 5), "int32", chunks=(2, 2))
        m[1, 1:4] = 7
        space.checkpoint()
        m[0, 0] = 5
        m[1, 1:4] = 0                  # chunk [0, 1] is all fill again: deleted
        m.resize(4)
        space.checkpoint()
    assert main(["diff", loc, "--from", "1", "--to", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "~ ndarray m (changed, length 3 -> 4)",
        "    ~ [0,0]: [[0,0],[0,7]] -> [[5,0],[0,0]]",
        "    - [0,1]: [[0,0],[7,7]]",
        "epoch 1 -> 2: objects +0 ~1 -0, slots +0 ~1 -1",
    ]


def test_chunks_do_not_inflate_the_item_cost_the_cache_learns(space):
    d = space.create_dict("d", {i: {"a": i} for i in range(100)})
    commit(space)
    before = space._cache.item_bytes
    a = space.create_ndarray("a", (1000, 512), "float64")
    a[::16, 0] = 1.0                   # 63 chunks of 64 KiB in the next save
    d[5] = 1
    commit(space)
    assert space._cache.item_bytes < 2 * before
