"""Gets through many sealed segments: what a get costs when its key lives behind dozens of
WAL segments that no flush has merged yet (a store checkpointed often between flushes).

    scripts/env.sh python benchmarks/segment_gets.py
    scripts/env.sh python benchmarks/segment_gets.py --segments 60 --keys 20000

Writes ``--segments`` checkpoints of ``--keys`` keys each (one new slot per key and
checkpoint, as a queue's appends) with spark_ops' dkv options and flushes held off, then
times gets of: keys in a random segment, keys written only in the oldest segments, and
missing keys. Prints microseconds per get (best of three passes). RFC 0005 decision 11.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dkv  # noqa: E402
from spark_ops._budget import DKV_OPTIONS, budget  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", type=int, default=60)
    ap.add_argument("--keys", type=int, default=20_000, help="keys written per segment")
    ap.add_argument("--gets", type=int, default=20_000)
    args = ap.parse_args(argv)
    root = tempfile.mkdtemp(prefix="segment-gets-")
    try:
        opts = {**DKV_OPTIONS, **budget(512 << 20)[0], "flush_segments": 1 << 20, "flush_bytes": 1 << 40}
        db = dkv.open(root, **opts)
        val = os.urandom(40)
        for b in range(args.segments):
            wb = dkv.WriteBatch()
            for q in range(args.keys):
                wb.put(b"\x00\x05q%07d\x00" % q + b.to_bytes(8, "big"), val)
            wb.put(b"\x00\x06m%07d" % b, b"meta")
            db.write(wb)
            db.checkpoint(b).wait()
        rng = random.Random(1)
        cases = {
            "key in a random segment": [b"\x00\x05q%07d\x00" % rng.randrange(args.keys)
                                        + rng.randrange(args.segments).to_bytes(8, "big") for _ in range(args.gets)],
            "key in one of the 5 oldest": [b"\x00\x06m%07d" % rng.randrange(min(5, args.segments))
                                           for _ in range(args.gets)],
            "missing key": [b"\x00\x07x%07d" % i for i in range(args.gets)],
        }
        print(f"{len(db._view[0])} sealed segments, {args.keys:,} keys each")
        for name, keys in cases.items():
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                found = sum(1 for k in keys if db.get(k) is not None)
                best = min(best, (time.perf_counter() - t) / len(keys) * 1e6)
            print(f"  {name:28s} {best:6.2f} us/get  ({found:,} of {len(keys):,} found)")
        db.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
