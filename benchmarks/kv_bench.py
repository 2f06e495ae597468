"""dkv against sqlite3, lmdb, rocksdict and a dict, same data, same run.

    python benchmarks/kv_bench.py                 # N = 1,000,000 keys
    python benchmarks/kv_bench.py -n 200000 --json bench-output/kv.json

Keys are ~38 bytes with a key-group prefix (100 keys per "user", so a user's keys are one
~100-key prefix scan), values 100 random bytes. Phases: single puts (one call per key),
batched puts (1,000 per batch), random gets of existing keys after a flush and full
compaction (reads hit SSTs), gets of missing keys, prefix scans, a checkpoint after
overwriting 1% of the keys (dkv), and reopen time at two sizes. Prints one table per
phase with each store's rate and dkv's ratio to it.
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dkv  # noqa: E402
from _report import ratio, table, write_json  # noqa: E402

VALUE_BYTES = 100
KEYS_PER_USER = 100


def make_keys(n: int) -> list[bytes]:
    users = (n + KEYS_PER_USER - 1) // KEYS_PER_USER
    out = []
    for u in range(users):
        prefix = ((u * 2654435761) % 65536).to_bytes(2, "big") + b"\x00" + b"user-%08d/" % u
        for i in range(min(KEYS_PER_USER, n - u * KEYS_PER_USER)):
            out.append(prefix + b"item-%016d" % i)
    return out


def user_prefix(key: bytes) -> bytes:
    return key[: key.index(b"/") + 1]


# -- adapters: the same operations over each store -----------------------------------------

class DkvStore:
    name = "dkv"

    def __init__(self, path):
        self.path = path
        self.db = dkv.open(path)

    def put(self, k, v):
        self.db.put(k, v)

    def put_batch(self, items):
        b = dkv.WriteBatch()
        for k, v in items:
            b.put(k, v)
        self.db.write(b)

    def get(self, k):
        return self.db.get(k)

    def scan_prefix(self, p):
        return sum(1 for _ in self.db.scan_prefix(p))

    def settle(self):
        self.db.flush()
        self.db.compact(full=True)

    def close(self):
        self.db.close()

    @classmethod
    def reopen(cls, path):
        s = cls.__new__(cls)
        s.path, s.db = path, dkv.open(path)
        return s


class SqliteStore:
    name = "sqlite3"

    def __init__(self, path):
        self.path = path
        self._connect()
        self.conn.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        self.conn.execute("BEGIN")

    def _connect(self):
        self.conn = sqlite3.connect(os.path.join(self.path, "db.sqlite"), isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")

    def put(self, k, v):
        self.conn.execute("INSERT OR REPLACE INTO kv VALUES (?, ?)", (k, v))

    def put_batch(self, items):
        self.conn.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?)", items)

    def get(self, k):
        row = self.conn.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        return None if row is None else row[0]

    def scan_prefix(self, p):
        end = dkv.prefix_end(p)
        return sum(1 for _ in self.conn.execute("SELECT k, v FROM kv WHERE k >= ? AND k < ?", (p, end)))

    def settle(self):
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self):
        if self.conn.in_transaction:
            self.conn.execute("COMMIT")
        self.conn.close()

    @classmethod
    def reopen(cls, path):
        s = cls.__new__(cls)
        s.path = path
        s._connect()
        return s


class LmdbStore:
    name = "lmdb"

    def __init__(self, path):
        import lmdb
        self.path = path
        self.env = lmdb.open(path, map_size=1 << 34, sync=True, writemap=False)
        self.txn = self.env.begin(write=True)

    def put(self, k, v):
        self.txn.put(k, v)

    def put_batch(self, items):
        self.txn.cursor().putmulti(items)

    def get(self, k):
        return self.txn.get(k)

    def scan_prefix(self, p):
        n = 0
        cur = self.txn.cursor()
        if cur.set_range(p):
            for k, _ in cur:
                if not k.startswith(p):
                    break
                n += 1
        return n

    def settle(self):
        self.txn.commit()
        self.txn = self.env.begin(write=False, buffers=False)

    def close(self):
        try:
            self.txn.commit()
        except Exception:
            pass
        self.env.close()

    @classmethod
    def reopen(cls, path):
        import lmdb
        s = cls.__new__(cls)
        s.path = path
        s.env = lmdb.open(path, map_size=1 << 34, readonly=True)
        s.txn = s.env.begin()
        return s


class RocksdictStore:
    name = "rocksdict"

    def __init__(self, path):
        from rocksdict import Rdict
        self.path = path
        self.db = Rdict(path)

    def put(self, k, v):
        self.db[k] = v

    def put_batch(self, items):
        from rocksdict import WriteBatch
        wb = WriteBatch()
        for k, v in items:
            wb.put(k, v)
        self.db.write(wb)

    def get(self, k):
        return self.db.get(k)

    def scan_prefix(self, p):
        n = 0
        for k, _ in self.db.items(from_key=p):
            if not k.startswith(p):
                break
            n += 1
        return n

    def settle(self):
        self.db.flush()
        self.db.compact_range(None, None)

    def close(self):
        self.db.close()

    @classmethod
    def reopen(cls, path):
        from rocksdict import Rdict
        s = cls.__new__(cls)
        s.path, s.db = path, Rdict(path)
        return s


class DictStore:
    name = "dict"

    def __init__(self, path):
        self.d = {}
        self.sorted = None

    def put(self, k, v):
        self.d[k] = v

    def put_batch(self, items):
        self.d.update(items)

    def get(self, k):
        return self.d.get(k)

    def scan_prefix(self, p):
        import bisect
        if self.sorted is None:
            self.sorted = sorted(self.d)
        i = bisect.bisect_left(self.sorted, p)
        n = 0
        while i < len(self.sorted) and self.sorted[i].startswith(p):
            n += 1
            i += 1
        return n

    def settle(self):
        self.sorted = sorted(self.d)

    def close(self):
        pass

    reopen = None


def available_stores(names):
    out = []
    for cls in (DkvStore, SqliteStore, LmdbStore, RocksdictStore, DictStore):
        if names and cls.name not in names:
            continue
        try:
            if cls is LmdbStore:
                import lmdb  # noqa: F401
            if cls is RocksdictStore:
                import rocksdict  # noqa: F401
        except ImportError:
            print(f"{cls.name}: not installed (pip install 'objectspace[bench]'); skipped", file=sys.stderr)
            continue
        out.append(cls)
    return out


def timed(fn, *args):
    gc.collect()
    gc.disable()
    try:
        t = time.perf_counter()
        out = fn(*args)
        return time.perf_counter() - t, out
    finally:
        gc.enable()


def run(args) -> dict:
    rng = random.Random(args.seed)
    keys = make_keys(args.n)
    pool = [os.urandom(VALUE_BYTES) for _ in range(1024)]   # distinct values: blocks do not compress away
    value = pool[0]
    shuffled = keys[:]
    rng.shuffle(shuffled)
    hits = [rng.choice(keys) for _ in range(args.reads)]
    misses = [k[:-1] + b"x" for k in hits]
    prefixes = list({user_prefix(rng.choice(keys)) for _ in range(args.scans)})
    root = tempfile.mkdtemp(prefix="kvbench-", dir=args.dir)
    results = {}
    for cls in available_stores(args.stores):
        r = results[cls.name] = {}
        print(f"{cls.name}: loading {args.n:,} keys ...", file=sys.stderr)
        path = os.path.join(root, cls.name + "-single")
        os.makedirs(path)
        s = cls(path)
        dt, _ = timed(lambda: [s.put(k, pool[i & 1023]) for i, k in enumerate(shuffled)])
        r["single_put_ops"] = args.n / dt
        s.close()
        shutil.rmtree(path)

        path = os.path.join(root, cls.name)
        os.makedirs(path)
        s = cls(path)
        batches = [[(k, pool[j & 1023]) for j, k in enumerate(shuffled[i:i + 1000], i)] for i in range(0, args.n, 1000)]
        dt, _ = timed(lambda: [s.put_batch(b) for b in batches])
        r["batch_put_ops"] = args.n / dt
        dt, _ = timed(s.settle)
        r["settle_s"] = dt
        for k in hits[: len(hits) // 4]:     # warm caches the same way for everyone
            s.get(k)
        dt, found = timed(lambda: sum(s.get(k) is not None for k in hits))
        assert found == len(hits), f"{cls.name} lost keys"
        r["get_ops"] = len(hits) / dt
        dt, found = timed(lambda: sum(s.get(k) is not None for k in misses))
        assert found == 0
        r["get_missing_ops"] = len(misses) / dt
        dt, nkeys = timed(lambda: sum(s.scan_prefix(p) for p in prefixes))
        r["scan_keys_per_s"] = nkeys / dt
        r["scan_keys"] = nkeys
        if cls is DkvStore:
            r.update(checkpoint_phase(s, keys, rng))
        s.close()
        if cls.reopen is not None:
            dt, s2 = timed(lambda: cls.reopen(path))
            s2.get(hits[0])
            r[f"reopen_ms_{args.n}"] = dt * 1000
            s2.close()
        shutil.rmtree(path)
    for size in args.reopen_sizes:
        for cls in available_stores(args.stores):
            if cls.reopen is None:
                continue
            results[cls.name][f"reopen_ms_{size}"] = reopen_time(cls, root, make_keys(size), pool)
    shutil.rmtree(root, ignore_errors=True)
    return results


def checkpoint_phase(s: DkvStore, keys, rng) -> dict:
    s.db.checkpoint(1).wait()
    changed = rng.sample(keys, max(1, len(keys) // 100))
    raw = 0
    for k in changed:
        v = os.urandom(VALUE_BYTES)
        s.db.put(k, v)
        raw += len(k) + len(v)
    t = time.perf_counter()
    cp = s.db.checkpoint(2)
    sync_ms = (time.perf_counter() - t) * 1000
    cp.wait()
    total_ms = (time.perf_counter() - t) * 1000
    return {"checkpoint_changed_raw_bytes": raw, "checkpoint_bytes": cp.bytes_written,
            "checkpoint_bytes_ratio": cp.bytes_written / raw, "checkpoint_sync_ms": sync_ms,
            "checkpoint_total_ms": total_ms}


def reopen_time(cls, root, keys, pool) -> float:
    path = os.path.join(root, f"{cls.name}-reopen-{len(keys)}")
    os.makedirs(path)
    s = cls(path)
    for i in range(0, len(keys), 1000):
        s.put_batch([(k, pool[j & 1023]) for j, k in enumerate(keys[i:i + 1000])])
    s.settle()
    if cls is DkvStore:
        s.db.checkpoint(1).wait()
    s.close()
    dt, s2 = timed(lambda: cls.reopen(path))
    t = time.perf_counter()
    s2.get(keys[len(keys) // 2])
    dt += time.perf_counter() - t
    s2.close()
    shutil.rmtree(path)
    return dt * 1000


def report(results: dict, args) -> None:
    ours = results.get("dkv", {})
    phases = [("single_put_ops", "single puts/s", True), ("batch_put_ops", "batched puts/s", True),
              ("get_ops", "gets/s (existing keys, after flush)", True),
              ("get_missing_ops", "gets/s (missing keys)", True),
              ("scan_keys_per_s", "prefix-scan keys/s (~100-key prefixes)", True)]
    phases += [(f"reopen_ms_{n}", f"reopen ms at {n:,} keys", False) for n in sorted(set(args.reopen_sizes + [args.n]))]
    for key, title, higher in phases:
        rows = []
        for name, r in results.items():
            rows.append({"store": name, "value": r.get(key),
                         "dkv ratio": None if name == "dkv" else ratio(ours.get(key), r.get(key), higher)})
        table(rows, ["store", "value", "dkv ratio"], title=f"{title}  (dkv ratio > 1 = dkv better)")
    if "checkpoint_bytes" in ours:
        print(f"\ncheckpoint after overwriting 1% of keys: {ours['checkpoint_bytes']:,} bytes written for "
              f"{ours['checkpoint_changed_raw_bytes']:,} bytes of changed records "
              f"({ours['checkpoint_bytes_ratio']:.2f}x); synchronous phase {ours['checkpoint_sync_ms']:.1f} ms, "
              f"durable after {ours['checkpoint_total_ms']:.0f} ms")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=1_000_000, help="keys (default 1,000,000)")
    p.add_argument("--reads", type=int, default=200_000, help="gets per phase")
    p.add_argument("--scans", type=int, default=2_000, help="prefix scans")
    p.add_argument("--reopen-sizes", type=lambda s: [int(x) for x in s.split(",") if x], default=[100_000],
                   help="extra sizes for the reopen measurement (comma-separated); -n is always measured")
    p.add_argument("--stores", type=lambda s: s.split(","), default=None, help="subset, e.g. dkv,rocksdict")
    p.add_argument("--dir", default=None, help="scratch folder (default: the system temp folder)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    results = run(args)
    report(results, args)
    if args.json:
        write_json(args.json, {"n": args.n, "results": results})


if __name__ == "__main__":
    main()
