"""The chunked ndarray kind against whole-array snapshots through the same store: slice
reads and single-cell writes + checkpoint.

    python benchmarks/ndarray_bench.py                          # defaults: about 20 seconds
    python benchmarks/ndarray_bench.py --rows 4000 --cols 1024 --writes 50 --reads 200
    python benchmarks/ndarray_bench.py --chunks 64,64 --json bench-output/ndarray.json

Both sides are an ``ObjectSpace.open`` folder store (dkv, ``fsync=False`` as the other
benchmarks: the disk's flush time is the same for both and would hide the difference)
holding a ``--rows`` x ``--cols`` array of ``--dtype`` (random values):

ndarray     ``space.create_ndarray("a", shape, dtype, chunks)``; a write is ``a[i, j] = x``,
            a read ``a[sel]``.
snapshot    the array as one value: ``np.save`` bytes in a raw-codec value
            (``space.create_value("a", codec="raw")``); a write is ``arr[i, j] = x`` then
            ``np.save`` into the value, a read ``np.load`` of the value then ``arr[sel]``.

Measured, per side:
(a) one cell written at random, then ``space.checkpoint()``: median time over ``--writes``,
    and the bytes the checkpoint added to the store folder (new files and growth of existing
    ones: WAL, tables, manifest; flushes and compactions it triggered included).
(b) cold reads: each read takes a new space on the already open store (so nothing is in
    objectspace's memory; dkv's block cache stays warm for both), then reads ``--reads``
    random selections of each shape: one cell, one row, a 64 x 64 block, one column.
    Median time per read and the record bytes read.

The table gives snapshot / ndarray for each (> 1: the ndarray is better). A column read
touches every chunk row: with whole-row chunks (the default for a few hundred columns)
it reads every chunk, the layout's worst case, and is shown as such.
"""
from __future__ import annotations

import argparse
import io
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from _report import folder_sizes, grown, table, write_json  # noqa: E402
from objectspace import ObjectSpace  # noqa: E402


class Side:
    """One store folder, its space and the bytes each checkpoint adds."""

    name = ""

    def __init__(self, root: str, arr, chunks) -> None:
        self.path = os.path.join(root, self.name)
        self.space = ObjectSpace.open(self.path, fsync=False)
        self.shape, self.dtype, self.chunks = arr.shape, arr.dtype, chunks
        self.load(arr)
        self.checkpoint()

    def checkpoint(self) -> int:
        before = folder_sizes(self.path)
        self.space.checkpoint()
        if hasattr(self.space.db, "wait_idle"):     # flushes and compactions count too
            self.space.db.wait_idle()
        after = folder_sizes(self.path)
        return sum(grown(before, after).values())

    def cold(self) -> ObjectSpace:
        return ObjectSpace(self.space.db, prefix=self.space.prefix)

    def close(self) -> None:
        self.space.close()


class NDArraySide(Side):
    name = "ndarray"

    def load(self, arr) -> None:
        self.a = self.space.create_ndarray("a", arr.shape, arr.dtype, chunks=self.chunks)
        self.a[...] = arr
        self.chunks = self.a.chunks

    def write(self, i: int, j: int, v) -> None:
        self.a[i, j] = v

    def read(self, space, sel):
        return space.get_ndarray("a")[sel]


class SnapshotSide(Side):
    name = "snapshot"

    def load(self, arr) -> None:
        self.arr = arr.copy()
        self.v = self.space.create_value("a", self._bytes(), codec="raw")

    def _bytes(self) -> bytes:
        buf = io.BytesIO()
        np.save(buf, self.arr, allow_pickle=False)
        return buf.getvalue()

    def write(self, i: int, j: int, v) -> None:
        self.arr[i, j] = v
        self.v.value = self._bytes()

    def read(self, space, sel):
        return np.load(io.BytesIO(space.get_value("a").value), allow_pickle=False)[sel]


class CountingDB:
    """Counts the record bytes a space reads through it."""

    def __init__(self, db) -> None:
        self.db, self.bytes = db, 0

    def get(self, key):
        v = self.db.get(key)
        self.bytes += len(v) if v is not None else 0
        return v

    def scan(self, start=None, end=None):
        for k, v in self.db.scan(start, end):
            self.bytes += len(v)
            yield k, v

    def scan_prefix(self, prefix):
        for k, v in self.db.scan_prefix(prefix):
            self.bytes += len(v)
            yield k, v


def selections(rng: random.Random, shape: tuple, kind: str):
    rows, cols = shape
    if kind == "cell":
        return rng.randrange(rows), rng.randrange(cols)
    if kind == "row":
        return rng.randrange(rows)
    if kind == "block 64x64":
        i, j = rng.randrange(max(1, rows - 63)), rng.randrange(max(1, cols - 63))
        return slice(i, i + 64), slice(j, j + 64)
    return slice(None), rng.randrange(cols)


READS = ("cell", "row", "block 64x64", "column")


def run(args) -> dict:
    gen = np.random.default_rng(1)
    dtype = np.dtype(args.dtype)
    arr = (gen.random((args.rows, args.cols)) * 1000).astype(dtype)
    chunks = tuple(int(c) for c in args.chunks.split(",")) if args.chunks else None
    root = tempfile.mkdtemp(prefix="ndarray-bench-", dir=args.dir)
    results: dict = {"args": vars(args), "array_bytes": arr.nbytes}
    try:
        sides = [NDArraySide(root, arr, chunks), SnapshotSide(root, arr, chunks)]
        results["chunks"] = list(sides[0].chunks)
        for side in sides:
            times, written = [], []
            wr = random.Random(2)
            for _ in range(args.writes):
                i, j = wr.randrange(args.rows), wr.randrange(args.cols)
                t = time.perf_counter()
                side.write(i, j, dtype.type(wr.random() * 1000))
                written.append(side.checkpoint())
                times.append(time.perf_counter() - t)
            results[f"{side.name}/write"] = {"ms": 1000 * statistics.median(times),
                                             "bytes": statistics.median(written)}
            for kind in READS:
                times, nbytes = [], []
                rr = random.Random(3)
                n = args.reads if kind != "column" else max(1, args.reads // 10)
                for _ in range(n):
                    sel = selections(rr, arr.shape, kind)
                    counting = CountingDB(side.space.db)
                    space = ObjectSpace(counting, prefix=side.space.prefix)
                    t = time.perf_counter()
                    got = side.read(space, sel)
                    times.append(time.perf_counter() - t)
                    nbytes.append(counting.bytes)
                    if rr.random() < 0.05:           # both sides read the same cells
                        assert np.array_equal(got, sides[0].a[sel] if side is sides[1] else side.a[sel])
                results[f"{side.name}/{kind}"] = {"ms": 1000 * statistics.median(times),
                                                  "bytes": statistics.median(nbytes)}
        for side in sides:
            side.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return results


def report(r: dict) -> None:
    a = r["args"]
    print(f"array {a['rows']} x {a['cols']} {a['dtype']} ({r['array_bytes']:,} bytes), chunks {tuple(r['chunks'])}, "
          f"{a['writes']} writes, {a['reads']} reads of each shape (columns: a tenth)")
    rows = []
    for op in ("write",) + READS:
        nd, snap = r[f"ndarray/{op}"], r[f"snapshot/{op}"]
        label = "1 cell + checkpoint" if op == "write" else f"read {op} (cold)"
        rows.append({"operation": label, "ndarray ms": nd["ms"], "snapshot ms": snap["ms"],
                     "time ratio": snap["ms"] / nd["ms"] if nd["ms"] else None,
                     "ndarray bytes": int(nd["bytes"]), "snapshot bytes": int(snap["bytes"]),
                     "bytes ratio": snap["bytes"] / nd["bytes"] if nd["bytes"] else None})
    table(rows, ["operation", "ndarray ms", "snapshot ms", "time ratio", "ndarray bytes", "snapshot bytes",
                 "bytes ratio"], title="ndarray against whole-array snapshots (ratios: snapshot / ndarray, "
                                       "> 1: the ndarray is better; bytes: written by a checkpoint, read by a read)")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--cols", type=int, default=512)
    p.add_argument("--dtype", default="float64")
    p.add_argument("--chunks", default="", help="chunk shape, e.g. 64,64 (default: the kind's, about 64 KiB)")
    p.add_argument("--writes", type=int, default=30, help="(a) single-cell writes + checkpoints per side")
    p.add_argument("--reads", type=int, default=100, help="(b) reads of each selection shape per side")
    p.add_argument("--dir", default=None, help="where the store folders go (default: the temp folder)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write the results as JSON to PATH (stdout when no PATH)")
    args = p.parse_args(argv)
    results = run(args)
    if args.json == "-":
        import json
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    else:
        report(results)
        if args.json:
            write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
