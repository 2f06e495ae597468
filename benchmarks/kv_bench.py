"""dkv against sqlite3, lmdb, rocksdict and a dict, same data, same run; and dkv's checkpoints
under queue churn and over a long run.

    python benchmarks/kv_bench.py                 # everything at full size (N = 1,000,000 keys)
    python benchmarks/kv_bench.py -n 200000 --json bench-output/kv.json
    python benchmarks/kv_bench.py --phases base --values pool --block-cache-mb 16
    python benchmarks/kv_bench.py --phases churn,long --churn-queues 2000 --long-checkpoints 2000

Phases (``--phases``, default all):

base: keys are ~38 bytes with a key-group prefix (100 keys per "user", so a user's keys are
    one ~100-key prefix scan), values 100 bytes: ``--values random`` (default) gives every key
    its own random bytes (incompressible, so SSTs are as large as the data: roughly 110 MiB
    at 1,000,000 keys and ~2.7x that as decoded blocks, more than dkv's default 128 MiB
    block cache), ``--values pool`` draws from 1,024 values. Single puts
    (one call per key), batched puts (1,000 per batch), random gets of existing keys after a
    flush and full compaction (reads hit SSTs), gets of missing keys, prefix scans, a
    checkpoint after overwriting 1% of the keys (dkv), bytes on disk, reopen time at two
    sizes; for dkv the block cache hit rate of the timed gets and scans, and its SST bytes
    against ``block_cache_bytes`` (``--block-cache-mb``).
reopen-full: dkv loads keys until its memtable is just under ``memtable_bytes`` (dkv's
    default, no flush), checkpoints, closes and times reopen + the first get; the peers load
    the same keys and reopen (rocksdict from a copy of its folder with a synced WAL, so it
    replays its WAL as dkv does; its close would flush).
churn: queue churn as spark_ops' buffer makes it: ``--churn-queues`` queues (10,000) each
    append ``--churn-appends`` ~30-byte items (2) per checkpoint and delete all of them when
    full (after ``--churn-life`` = 50 checkpoints); ``--churn-checkpoints`` (300) rounds of
    one write batch + ``checkpoint(epoch).wait()``, with spark_ops' DKV_OPTIONS
    (``--churn-options default``: dkv's defaults). Reports write amplification = bytes written
    to the store folder (dkv's counters: WAL + SST + manifest; cross-checked by walking the
    folder) / bytes of changed records (key + value per put, key per delete), WAL-only
    amplification, SST bytes and objects written per checkpoint, checkpoint time, live SSTs
    and the manifest at the end; the first ``--churn-warmup`` (50) checkpoints are left out.
    rocksdict runs the same rounds twice: a synced WAL per checkpoint (dkv's local
    checkpoint) and a memtable flush per checkpoint (a RocksDB state backend's checkpoint),
    its bytes from its statistics (WAL + flush + compaction writes).
long: ``--long-keys`` (50) keys overwritten per checkpoint for ``--long-checkpoints``
    (10,000) checkpoints on a local folder, with dkv's defaults and spark_ops' DKV_OPTIONS
    (``--long-options``). At checkpoint 10 and every ``--long-every`` (1,000): live WAL
    segments, the checkpoint's time (single and median of the last 100), files in the folder
    and read-only open + first get; then the most live WAL segments seen and the checkpoint
    time's growth (median of the last 100 / median of checkpoints 10-109).

Prints one table per phase with dkv's ratio to each peer (the issue's targets in the titles).
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dkv  # noqa: E402
from _report import fmt, folder_sizes, ratio, table, write_json  # noqa: E402

VALUE_BYTES = 100
KEYS_PER_USER = 100
MiB = 1 << 20
PHASES = ("base", "reopen-full", "churn", "long")
_POOL: list = []


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


def make_values(n: int, kind: str) -> list[bytes]:
    """n values of VALUE_BYTES: each its own random bytes, or drawn from a pool of 1,024."""
    if kind == "random":
        blob = os.urandom(n * VALUE_BYTES)
        return [blob[i:i + VALUE_BYTES] for i in range(0, n * VALUE_BYTES, VALUE_BYTES)]
    if not _POOL:
        _POOL.extend(os.urandom(VALUE_BYTES) for _ in range(1024))  # distinct: blocks do not compress away
    return [_POOL[i & 1023] for i in range(n)]


# -- adapters: the same operations over each store -----------------------------------------

class DkvStore:
    name = "dkv"
    options: dict = {}      # dkv.open options (--block-cache-mb)

    def __init__(self, path, **options):
        self.path = path
        self.db = dkv.open(path, **{**self.options, **options})

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
        s.path, s.db = path, dkv.open(path, **cls.options)
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


def folder_files(root: str) -> dict:
    """path -> size of every file under root (dkv's temporary files left out)."""
    return {p: n for p, n in folder_sizes(root).items() if not os.path.basename(p).startswith(".tmp-")}


def median(xs):
    return statistics.median(xs) if xs else None


# -- base phase: puts, gets, scans, reopen ------------------------------------------------

def run_base(args, root) -> dict:
    rng = random.Random(args.seed)
    keys = make_keys(args.n)
    shuffled = keys[:]
    rng.shuffle(shuffled)
    vals = make_values(len(shuffled), args.values)      # vals[i] belongs to shuffled[i]
    hits = [rng.choice(keys) for _ in range(args.reads)]
    misses = [k[:-1] + b"x" for k in hits]
    prefixes = list({user_prefix(rng.choice(keys)) for _ in range(args.scans)})
    results = {}
    for cls in available_stores(args.stores):
        r = results[cls.name] = {}
        print(f"{cls.name}: loading {args.n:,} keys ...", file=sys.stderr)
        path = os.path.join(root, cls.name + "-single")
        os.makedirs(path)
        s = cls(path)
        dt, _ = timed(lambda: [s.put(k, v) for k, v in zip(shuffled, vals)])
        r["single_put_ops"] = args.n / dt
        s.close()
        shutil.rmtree(path)

        path = os.path.join(root, cls.name)
        os.makedirs(path)
        s = cls(path)
        batches = [list(zip(shuffled[i:i + 1000], vals[i:i + 1000])) for i in range(0, args.n, 1000)]
        dt, _ = timed(lambda: [s.put_batch(b) for b in batches])  # noqa: F821 - deleted after the call
        del batches
        r["batch_put_ops"] = args.n / dt
        dt, _ = timed(s.settle)
        r["settle_s"] = dt
        if cls.reopen is not None:
            r["disk_bytes"] = sum(folder_files(path).values())
        if cls is DkvStore:
            st = s.db.stats()
            r["sst_bytes_live"] = sum(lv["bytes"] for lv in st["levels"])
            r["block_cache_bytes"] = s.db.opts.block_cache_bytes
        for k in hits[: len(hits) // 4]:     # warm caches the same way for everyone
            s.get(k)
        c0 = cache_counts(s)
        dt, found = timed(lambda: sum(s.get(k) is not None for k in hits))
        assert found == len(hits), f"{cls.name} lost keys"
        r["get_ops"] = len(hits) / dt
        c1 = cache_counts(s)
        if c1 is not None:
            r["cache_used_bytes_after_gets"] = s.db.stats()["block_cache"]["bytes"]
        dt, found = timed(lambda: sum(s.get(k) is not None for k in misses))
        assert found == 0
        r["get_missing_ops"] = len(misses) / dt
        c2 = cache_counts(s)
        dt, nkeys = timed(lambda: sum(s.scan_prefix(p) for p in prefixes))
        r["scan_keys_per_s"] = nkeys / dt
        r["scan_keys"] = nkeys
        c3 = cache_counts(s)
        if c0 is not None:
            for name, a, b in (("get", c0, c1), ("get_missing", c1, c2), ("scan", c2, c3)):
                h, m = b[0] - a[0], b[1] - a[1]
                r[f"cache_{name}_hits"], r[f"cache_{name}_misses"] = h, m
                r[f"cache_{name}_hit_rate"] = h / (h + m) if h + m else None
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
            results[cls.name][f"reopen_ms_{size}"] = reopen_time(cls, root, make_keys(size), args.values)
    return results


def cache_counts(s):
    """(hits, misses) of dkv's block cache; None for the other stores."""
    if not isinstance(s, DkvStore):
        return None
    c = s.db.stats()["block_cache"]
    return c["hits"], c["misses"]


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


def reopen_time(cls, root, keys, values_kind) -> float:
    path = os.path.join(root, f"{cls.name}-reopen-{len(keys)}")
    os.makedirs(path)
    s = cls(path)
    vals = make_values(len(keys), values_kind)
    for i in range(0, len(keys), 1000):
        s.put_batch(list(zip(keys[i:i + 1000], vals[i:i + 1000])))
    del vals
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


# -- reopen with a full memtable ----------------------------------------------------------

FULL_FILL = 0.99      # load the memtable to this fraction of memtable_bytes


def run_reopen_full(args, root) -> dict:
    """Load keys into dkv until its memtable is just under memtable_bytes (no flush), take a
    checkpoint, close, and time open + the first get. The peers load the same keys and
    reopen: rocksdict from a copy of its folder taken before close (its close flushes the
    memtable; the copy, taken after a synced WAL, makes it replay the WAL like dkv must)."""
    limit = dkv.Options().memtable_bytes
    keys = make_keys(limit // VALUE_BYTES)      # more than fit: each entry is > VALUE_BYTES
    vals = make_values(len(keys), args.values)
    out: dict = {}
    loaded = None
    for cls in available_stores(args.stores):
        if cls.reopen is None:
            continue
        path = os.path.join(root, cls.name + "-full")
        os.makedirs(path)
        r = out[cls.name] = {}
        if cls is DkvStore:
            s = DkvStore(path, memtable_bytes=limit)
            loaded = fill_memtable(s.db, keys, vals, limit)
            st = s.db.stats()
            assert st["sealed_memtables"] == 0 and not any(lv["tables"] for lv in st["levels"]), st
            r["keys"] = loaded
            r["memtable_bytes"] = st["memtable_bytes"]
            r["memtable_limit"] = limit
            r["fill"] = st["memtable_bytes"] / limit
            t = time.perf_counter()
            cp = s.db.checkpoint(1)
            cp.wait()
            r["checkpoint_ms"] = (time.perf_counter() - t) * 1000
            r["checkpoint_bytes"] = cp.bytes_written
            s.close()
            reopen_path = path
        else:
            if loaded is None:          # dkv not selected: load as many keys as dkv would
                loaded = int(limit * FULL_FILL) // (len(keys[0]) + 48 + VALUE_BYTES)
            s = cls(path)
            for i in range(0, loaded, 1000):
                s.put_batch(list(zip(keys[i:min(i + 1000, loaded)], vals[i:min(i + 1000, loaded)])))
            r["keys"] = loaded
            if cls is RocksdictStore:
                r["sst_files_before_close"] = len(s.db.live_files())
                s.db.flush_wal(True)
                reopen_path = path + "-copy"
                shutil.copytree(path, reopen_path)
                s.close()
            else:
                s.close()
                reopen_path = path
        dt, s2 = timed(lambda: cls.reopen(reopen_path))
        t = time.perf_counter()
        got = s2.get(keys[loaded // 2])
        dt += time.perf_counter() - t
        assert got == vals[loaded // 2], f"{cls.name}: wrong value after reopen"
        r["reopen_full_ms"] = dt * 1000
        s2.close()
        shutil.rmtree(path)
        if reopen_path != path:
            shutil.rmtree(reopen_path)
    return out


def fill_memtable(db, keys, vals, limit) -> int:
    """Put keys until dkv's active memtable holds just under FULL_FILL * limit bytes."""
    target = int(limit * FULL_FILL)
    i = 0
    while i < len(keys):
        used = db.stats()["memtable_bytes"]
        per_key = used / i if i else len(keys[0]) + 48 + VALUE_BYTES
        room = int((target - used) / (per_key * 1.02))
        if room <= 0:
            break
        n = min(room, 1000, len(keys) - i)
        b = dkv.WriteBatch()
        b.extend(zip(keys[i:i + n], vals[i:i + n]))
        db.write(b)
        i += n
    return i


# -- queue churn --------------------------------------------------------------------------

class ChurnModel:
    """P queues, each appending A items per checkpoint and, like a buffer of A*L items,
    deleting all of its items at the start of the round after it fills (so an item lives
    1..L checkpoints). Queues start with a staggered virtual fill, so about P/L of them
    empty in every round from the first one; their first cycle is shorter (fewer deletes
    during the first L rounds: the warm-up). Deterministic for a seed."""

    def __init__(self, queues: int, appends: int, life: int, seed: int) -> None:
        self.appends, self.cap = appends, appends * life
        self.rng = random.Random(seed)
        self.prefixes = [((q * 2654435761) % 65536).to_bytes(2, "big") + b"\x00" + b"q%08d/items/" % q
                         for q in range(queues)]
        self.fill = [((q * 7919) % life) * appends for q in range(queues)]
        self.head = [0] * queues
        self.tail = [0] * queues

    def round(self):
        """One checkpoint interval's (key, value-or-None) ops and their raw bytes."""
        ops = []
        raw = 0
        rb = self.rng.randbytes
        A, cap, fill, head, tail = self.appends, self.cap, self.fill, self.head, self.tail
        for q, p in enumerate(self.prefixes):
            t = tail[q]
            if fill[q] >= cap:
                for slot in range(head[q], t):
                    k = p + slot.to_bytes(8, "big")
                    ops.append((k, None))
                    raw += len(k)
                head[q] = t
                fill[q] = 0
            for slot in range(t, t + A):
                k = p + slot.to_bytes(8, "big")
                v = b"\x93\xcf" + rb(24) + b"\xa4view"       # ~30 bytes, msgpack-like
                ops.append((k, v))
                raw += len(k) + len(v)
            tail[q] = t + A
            fill[q] += A
        return ops, raw


class ChurnDkv:
    def __init__(self, name, path, options):
        self.name, self.path = name, path
        self.db = dkv.open(path, **options)

    def write(self, ops):
        b = dkv.WriteBatch()
        b.extend(ops)
        self.db.write(b)

    def checkpoint(self, epoch):
        self.db.checkpoint(epoch).wait()

    def counters(self) -> dict:
        st = self.db.stats()
        return {"wal": st.get("wal_bytes", 0), "sst": st.get("sst_bytes", 0),
                "manifest": st.get("manifest_bytes", 0),
                "files": st.get("wal_files", 0) + st.get("sst_files", 0) + st.get("manifest_files", 0),
                "compactions": st.get("compactions", 0), "wal_segments": st["wal_segments"]}

    def end_state(self) -> dict:
        from dkv.format import manifest as mf
        folder = os.path.join(self.path, "manifest")
        last = sorted(f for f in os.listdir(folder) if f.endswith(".manifest"))[-1]
        with open(os.path.join(folder, last), "rb") as f:
            data = f.read()
        sizes = [t.size for t in mf.decode(data).tables()]
        st = self.db.stats()
        return {"live_ssts": len(sizes), "live_sst_median_bytes": median(sizes), "live_sst_bytes": sum(sizes),
                "manifest_bytes": len(data), "wal_segments": st["wal_segments"],
                "levels": [(lv["tables"], lv["bytes"]) for lv in st["levels"]]}

    def close(self):
        self.db.close()


class ChurnRocks:
    """rocksdict (raw mode, statistics on, memtable as large as dkv's). A checkpoint is
    either a synced WAL (``flush_per_cp=False``: the analogue of dkv's local checkpoint) or a
    memtable flush to an L0 SST (a RocksDB state backend's incremental checkpoint)."""

    def __init__(self, name, path, memtable_bytes, flush_per_cp):
        from rocksdict import Options, Rdict
        self.name, self.path, self.flush_per_cp = name, path, flush_per_cp
        self.opt = Options(raw_mode=True)
        self.opt.enable_statistics()
        self.opt.set_write_buffer_size(memtable_bytes)
        self.db = Rdict(path, self.opt)

    def write(self, ops):
        from rocksdict import WriteBatch
        wb = WriteBatch(raw_mode=True)
        for k, v in ops:
            if v is None:
                wb.delete(k)
            else:
                wb.put(k, v)
        self.db.write(wb)

    def checkpoint(self, epoch):
        if self.flush_per_cp:
            self.db.flush(True)
        else:
            self.db.flush_wal(True)

    def counters(self) -> dict:
        want = {"rocksdb.wal.bytes": "wal", "rocksdb.flush.write.bytes": "flush",
                "rocksdb.compact.write.bytes": "compact"}
        out = {"wal": 0, "flush": 0, "compact": 0}
        for line in self.opt.get_statistics().splitlines():
            name, _, rest = line.partition(" COUNT : ")
            if name in want:
                out[want[name]] = int(rest)
        out["sst"] = out["flush"] + out["compact"]
        out["manifest"] = 0           # not in RocksDB's statistics: the folder walk has it
        return out

    def end_state(self) -> dict:
        sizes = [f["size"] for f in self.db.live_files()]
        manifests = [f for f in os.listdir(self.path) if f.startswith("MANIFEST-")]
        return {"live_ssts": len(sizes), "live_sst_median_bytes": median(sizes), "live_sst_bytes": sum(sizes),
                "manifest_bytes": sum(os.path.getsize(os.path.join(self.path, f)) for f in manifests)}

    def close(self):
        self.db.close()


def _walk_delta(path, before):
    """(bytes created or grown, files created) since ``before``; RocksDB's text LOG files left out."""
    after = {p: n for p, n in folder_files(path).items() if not os.path.basename(p).startswith("LOG")}
    grown = sum(n - before.get(p, 0) for p, n in after.items() if n > before.get(p, 0))
    return after, grown, sum(1 for p in after if p not in before)


def run_churn(args, root) -> dict:
    from spark_ops._budget import DKV_OPTIONS
    options = dict(DKV_OPTIONS) if args.churn_options == "spark" else {}
    memtable = options.get("memtable_bytes", dkv.Options().memtable_bytes)
    stores = []
    if not args.stores or "dkv" in args.stores:
        stores.append(("dkv", lambda p: ChurnDkv("dkv", p, options)))
    if not args.stores or "rocksdict" in args.stores:
        try:
            import rocksdict  # noqa: F401
            stores.append(("rocksdict-wal", lambda p: ChurnRocks("rocksdict-wal", p, memtable, False)))
            stores.append(("rocksdict-flush", lambda p: ChurnRocks("rocksdict-flush", p, memtable, True)))
        except ImportError:
            print("rocksdict: not installed; churn runs dkv only", file=sys.stderr)
    C, W = args.churn_checkpoints, min(args.churn_warmup, args.churn_checkpoints - 1)
    if C < 200:
        print(f"churn: {C} checkpoints (the issue asks for at least 200)", file=sys.stderr)
    out = {"queues": args.churn_queues, "appends": args.churn_appends, "life": args.churn_life,
           "checkpoints": C, "warmup": W, "options": args.churn_options, "dkv_options": options,
           "rocksdict_write_buffer_bytes": memtable, "stores": {}}
    for name, make in stores:
        print(f"churn: {name}, {args.churn_queues:,} queues x {C} checkpoints ...", file=sys.stderr)
        path = os.path.join(root, "churn-" + name)
        os.makedirs(path)
        model = ChurnModel(args.churn_queues, args.churn_appends, args.churn_life, args.seed)
        s = make(path)
        seen = {p: n for p, n in folder_files(path).items() if not os.path.basename(p).startswith("LOG")}
        prev = s.counters()
        rounds = []
        base = prev          # counters at the end of the warm-up
        for epoch in range(1, C + 1):
            ops, raw = model.round()
            gc.disable()
            t0 = time.perf_counter()
            s.write(ops)
            t1 = time.perf_counter()
            s.checkpoint(epoch)
            t2 = time.perf_counter()
            gc.enable()
            cur = s.counters()
            seen, grown, created = _walk_delta(path, seen)
            rounds.append({"epoch": epoch, "raw": raw, "ops": len(ops), "puts": sum(v is not None for _, v in ops),
                           "write_ms": (t1 - t0) * 1000, "checkpoint_ms": (t2 - t1) * 1000,
                           "wal": cur["wal"] - prev["wal"], "sst": cur["sst"] - prev["sst"],
                           "manifest": cur["manifest"] - prev["manifest"],
                           "files": (cur["files"] - prev["files"]) if "files" in cur else created,
                           "walk_bytes": grown, "walk_files": created,
                           **({"wal_segments": cur["wal_segments"]} if "wal_segments" in cur else {})})
            prev = cur
            if epoch == W:
                base = cur
            del ops
        steady = rounds[W:]
        raw = sum(x["raw"] for x in steady)
        counted = sum(x["wal"] + x["sst"] + x["manifest"] for x in steady)
        walked = sum(x["walk_bytes"] for x in steady)
        n = len(steady)
        r = out["stores"][name] = {
            "steady_checkpoints": n, "raw_bytes": raw, "written_bytes": counted, "walk_bytes": walked,
            "write_amp": counted / raw, "write_amp_walk": walked / raw,
            "wal_amp": sum(x["wal"] for x in steady) / raw,
            "sst_bytes_per_cp": sum(x["sst"] for x in steady) / n,
            "manifest_bytes_per_cp": sum(x["manifest"] for x in steady) / n,
            "objects_per_cp": sum(x["files"] for x in steady) / n, "objects_per_cp_max": max(x["files"] for x in steady),
            "walk_files_per_cp": sum(x["walk_files"] for x in steady) / n,
            "checkpoint_ms": sum(x["checkpoint_ms"] for x in steady) / n,
            "checkpoint_ms_median": median([x["checkpoint_ms"] for x in steady]),
            "checkpoint_ms_max": max(x["checkpoint_ms"] for x in steady),
            "write_ms": sum(x["write_ms"] for x in steady) / n,
            "ops_per_cp": sum(x["ops"] for x in steady) / n,
            **s.end_state(), "rounds": rounds}
        if "compactions" in prev:
            r["compactions"] = prev["compactions"] - base["compactions"]
        if "wal_segments" in prev:
            r["wal_segments_max"] = max(x["wal_segments"] for x in rounds)
        s.close()
        shutil.rmtree(path)
    return out


# -- long run: few overwritten keys, many checkpoints -------------------------------------

def run_long(args, root) -> dict:
    from spark_ops._budget import DKV_OPTIONS
    out = {"checkpoints": args.long_checkpoints, "keys": args.long_keys, "runs": {}}
    for label in args.long_options:
        options = dict(DKV_OPTIONS) if label == "spark" else {}
        out["runs"][label] = long_run(args, root, label, options)
    return out


def long_run(args, root, label, options) -> dict:
    N, K = args.long_checkpoints, args.long_keys
    print(f"long: {label} options, {K} keys x {N:,} checkpoints ...", file=sys.stderr)
    path = os.path.join(root, "long-" + label)
    db = dkv.open(path, **options)
    keys = [((i * 2654435761) % 65536).to_bytes(2, "big") + b"\x00" + b"long-%06d" % i for i in range(K)]
    rng = random.Random(args.seed)
    marks = sorted({m for m in (10, *range(args.long_every, N + 1, args.long_every), N) if m <= N})
    times, syncs, points = [], [], []
    max_wal, max_wal_at = 0, 0
    last = None
    for epoch in range(1, N + 1):
        b = dkv.WriteBatch()
        for k in keys:
            b.put(k, rng.randbytes(VALUE_BYTES))
        db.write(b)
        last = b
        t0 = time.perf_counter()
        cp = db.checkpoint(epoch)
        t1 = time.perf_counter()
        cp.wait()
        t2 = time.perf_counter()
        times.append((t2 - t0) * 1000)
        syncs.append((t1 - t0) * 1000)
        st = db.stats()
        if st["wal_segments"] > max_wal:
            max_wal, max_wal_at = st["wal_segments"], epoch
        if epoch in marks:
            files = folder_files(path)
            want = next(v for k, v in last if k == keys[0])
            gc.disable()
            t = time.perf_counter()
            ro = dkv.open(path, read_only=True, **options)
            got = ro.get(keys[0])
            reopen_ms = (time.perf_counter() - t) * 1000
            gc.enable()
            assert got == want, "read-only handle returned a stale value"
            ro.close()
            points.append({"checkpoint": epoch, "wal_segments": st["wal_segments"],
                           "checkpoint_ms": times[-1], "checkpoint_ms_median100": median(times[-100:]),
                           "sync_ms": syncs[-1], "sync_ms_median100": median(syncs[-100:]),
                           "files": len(files), "folder_bytes": sum(files.values()),
                           "sst_tables": sum(lv["tables"] for lv in st["levels"]),
                           "reopen_get_ms": reopen_ms})
            print(f"long {label}: checkpoint {epoch:,}: {st['wal_segments']} WAL segments, "
                  f"{times[-1]:.1f} ms, reopen+get {reopen_ms:.1f} ms", file=sys.stderr)
    db.close()
    shutil.rmtree(path)
    early = median(times[9:109])
    late = median(times[-100:])
    return {"options": options, "points": points, "max_wal_segments": max_wal, "max_wal_segments_at": max_wal_at,
            "checkpoint_ms_10th": times[9] if N >= 10 else None, "checkpoint_ms_last": times[-1],
            "checkpoint_ms_median_10_109": early, "checkpoint_ms_median_last100": late,
            "last_over_10th": (late / early) if early else None,
            "last_over_10th_single": (times[-1] / times[9]) if N >= 10 and times[9] else None,
            "reopen_get_ms_last": points[-1]["reopen_get_ms"] if points else None,
            "checkpoint_ms": [round(x, 3) for x in times], "sync_ms": [round(x, 3) for x in syncs]}


# -- report -------------------------------------------------------------------------------

def report(out: dict, args) -> None:
    results = out.get("results")
    if results:
        report_base(results, args)
    if out.get("reopen_full"):
        report_reopen_full(out["reopen_full"])
    if out.get("churn"):
        report_churn(out["churn"])
    if out.get("long"):
        report_long(out["long"])


def report_base(results: dict, args) -> None:
    ours = results.get("dkv", {})
    targets = {"single_put_ops": "target vs rocksdict >= 1", "get_ops": "target vs rocksdict >= 0.5",
               "scan_keys_per_s": "target vs rocksdict >= 1"}
    phases = [("single_put_ops", "single puts/s", True), ("batch_put_ops", "batched puts/s", True),
              ("get_ops", "gets/s (existing keys, after flush)", True),
              ("get_missing_ops", "gets/s (missing keys)", True),
              ("scan_keys_per_s", "prefix-scan keys/s (~100-key prefixes)", True),
              ("disk_bytes", "bytes on disk after flush + full compaction", False)]
    phases += [(f"reopen_ms_{n}", f"reopen ms at {n:,} keys", False) for n in sorted(set(args.reopen_sizes + [args.n]))]
    for key, title, higher in phases:
        rows = []
        for name, r in results.items():
            rows.append({"store": name, "value": r.get(key),
                         "dkv ratio": None if name == "dkv" else ratio(ours.get(key), r.get(key), higher)})
        note = f"; {targets[key]}" if key in targets else ""
        table(rows, ["store", "value", "dkv ratio"],
              title=f"{title}, {args.values} values  (dkv ratio > 1 = dkv better{note})")
    if "checkpoint_bytes" in ours:
        print(f"\ncheckpoint after overwriting 1% of keys: {ours['checkpoint_bytes']:,} bytes written for "
              f"{ours['checkpoint_changed_raw_bytes']:,} bytes of changed records "
              f"({ours['checkpoint_bytes_ratio']:.2f}x); synchronous phase {ours['checkpoint_sync_ms']:.1f} ms, "
              f"durable after {ours['checkpoint_total_ms']:.0f} ms")
    if "sst_bytes_live" in ours:
        sst, cache = ours["sst_bytes_live"], ours["block_cache_bytes"]
        used = ours["cache_used_bytes_after_gets"]
        print(f"\ndkv SSTs after full compaction: {sst / MiB:,.1f} MiB on disk against a block cache of "
              f"{cache / MiB:,.1f} MiB ({sst / cache:.2f}x: {'SSTs exceed the cache' if sst > cache else 'they fit'}); "
              f"the cache charges decoded blocks: {used / MiB:,.1f} MiB cached after the gets"
              f"{' (full: the data does not fit)' if used >= 0.95 * cache else ''}")
        rows = [{"phase": label, "hits": ours.get(f"cache_{p}_hits"), "misses": ours.get(f"cache_{p}_misses"),
                 "hit rate": ours.get(f"cache_{p}_hit_rate")}
                for p, label in (("get", "gets (existing keys)"), ("get_missing", "gets (missing keys)"),
                                 ("scan", "prefix scans"))]
        table(rows, ["phase", "hits", "misses", "hit rate"], title="dkv block cache during the timed phases")


def report_reopen_full(res: dict) -> None:
    ours = res.get("dkv", {})
    if ours:
        print(f"\nreopen with a full memtable: dkv loaded {ours['keys']:,} keys, memtable "
              f"{ours['memtable_bytes'] / MiB:.1f} MiB of {ours['memtable_limit'] / MiB:.0f} MiB "
              f"({ours['fill']:.1%}), checkpoint {ours['checkpoint_ms']:.0f} ms / {ours['checkpoint_bytes']:,} bytes")
    rows = [{"store": name, "keys": r.get("keys"), "reopen + first get ms": r.get("reopen_full_ms"),
             "dkv ratio": None if name == "dkv" else ratio(ours.get("reopen_full_ms"), r.get("reopen_full_ms"), False)}
            for name, r in res.items()]
    table(rows, ["store", "keys", "reopen + first get ms", "dkv ratio"],
          title="reopen + first get with a full memtable, no flush  (dkv ratio > 1 = dkv better; target dkv <= 100 ms)")
    if "rocksdict" in res:
        print("rocksdict reopens a copy of its folder taken after a synced WAL, before close (its close flushes): "
              f"WAL replay; SSTs before the copy: {res['rocksdict'].get('sst_files_before_close')}")


def report_churn(res: dict) -> None:
    stores = res["stores"]
    ours = stores.get("dkv", {})
    W = res["warmup"]
    print(f"\nqueue churn: {res['queues']:,} queues x {res['appends']} appends per checkpoint, each queue emptied "
          f"after {res['appends'] * res['life']} items ({res['life']} checkpoints), {res['checkpoints']} checkpoints; "
          f"steady figures leave out the first {W} (warm-up). dkv options: {res['options']} {res['dkv_options']}; "
          f"rocksdict: write buffer {res['rocksdict_write_buffer_bytes'] / MiB:.0f} MiB, -wal = synced WAL per "
          f"checkpoint, -flush = memtable flushed per checkpoint")
    rows = []
    for name, r in stores.items():
        rows.append({"store": name, "raw KB/cp": r["raw_bytes"] / r["steady_checkpoints"] / 1024,
                     "write amp": r["write_amp"], "walk amp": r["write_amp_walk"], "WAL amp": r["wal_amp"],
                     "SST KB/cp": r["sst_bytes_per_cp"] / 1024,
                     "dkv ratio": None if name == "dkv" else ratio(ours.get("write_amp"), r["write_amp"], False)})
    table(rows, ["store", "raw KB/cp", "write amp", "walk amp", "WAL amp", "SST KB/cp", "dkv ratio"],
          title="queue churn: bytes written / bytes of changed records  (dkv ratio > 1 = dkv better; target dkv <= 2)")
    rows = []
    for name, r in stores.items():
        rows.append({"store": name, "objects/cp": r["objects_per_cp"], "objects/cp max": r["objects_per_cp_max"],
                     "cp ms": r["checkpoint_ms"], "cp ms median": r["checkpoint_ms_median"],
                     "cp ms max": r["checkpoint_ms_max"], "write ms": r["write_ms"],
                     "live SSTs": r["live_ssts"], "median SST KB": (r["live_sst_median_bytes"] or 0) / 1024,
                     "manifest B": r["manifest_bytes"],
                     "dkv ratio (cp ms)": None if name == "dkv" else ratio(ours.get("checkpoint_ms"), r["checkpoint_ms"], False)})
    table(rows, ["store", "objects/cp", "objects/cp max", "cp ms", "cp ms median", "cp ms max", "write ms",
                 "live SSTs", "median SST KB", "manifest B", "dkv ratio (cp ms)"],
          title="queue churn: objects (files) written and time per checkpoint, live SSTs and manifest at the end")
    if ours:
        print(f"dkv: {ours.get('compactions', 0)} compactions in the steady part; levels (tables, bytes) at the end "
              f"{ours.get('levels')}; live WAL segments {ours.get('wal_segments')} at the end, at most "
              f"{ours.get('wal_segments_max')}. Objects per checkpoint: dkv's counters (folder walk: "
              f"{ours['walk_files_per_cp']:.2f}).")
    print("rocksdict: write amp from its statistics (WAL + flush + compaction writes; its MANIFEST only in the walk), "
          "objects = new files in the folder walk. Walk amp counts files present at each walk: files created and "
          "deleted in between are missed (rocksdict-flush's WAL, deleted by the flush, so its walk amp is low).")


def report_long(res: dict) -> None:
    for label, r in res["runs"].items():
        rows = [{"checkpoint": p["checkpoint"], "live WAL segs": p["wal_segments"], "cp ms": p["checkpoint_ms"],
                 "cp ms median100": p["checkpoint_ms_median100"], "sync ms": p["sync_ms"], "files": p["files"],
                 "folder KB": p["folder_bytes"] / 1024, "SSTs": p["sst_tables"], "reopen+get ms": p["reopen_get_ms"]}
                for p in r["points"]]
        table(rows, ["checkpoint", "live WAL segs", "cp ms", "cp ms median100", "sync ms", "files", "folder KB",
                     "SSTs", "reopen+get ms"],
              title=f"long run, dkv {label} options {r['options']}: {res['keys']} overwritten keys per checkpoint, "
                    f"{res['checkpoints']:,} checkpoints (cp ms = checkpoint() + wait(); median of the 100 ending there)")
        print(f"max live WAL segments {r['max_wal_segments']} (at checkpoint {r['max_wal_segments_at']:,}; target <= 32); "
              f"checkpoint time last/10th {fmt(r['last_over_10th'])}x (medians: last 100 "
              f"{fmt(r['checkpoint_ms_median_last100'])} ms / checkpoints 10-109 {fmt(r['checkpoint_ms_median_10_109'])} ms; "
              f"single {fmt(r['last_over_10th_single'])}x; target <= 1.5); reopen + first get at the end "
              f"{fmt(r['reopen_get_ms_last'])} ms (target <= 20)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=1_000_000, help="keys (default 1,000,000)")
    p.add_argument("--values", choices=("random", "pool"), default="random",
                   help="random: every key its own 100 random bytes (default); pool: 1,024 distinct values")
    p.add_argument("--block-cache-mb", type=float, default=None, help="dkv's block cache (default: dkv's default)")
    p.add_argument("--reads", type=int, default=200_000, help="gets per phase")
    p.add_argument("--scans", type=int, default=2_000, help="prefix scans")
    p.add_argument("--reopen-sizes", type=lambda s: [int(x) for x in s.split(",") if x], default=[100_000],
                   help="extra sizes for the reopen measurement (comma-separated); -n is always measured")
    p.add_argument("--stores", type=lambda s: s.split(","), default=None, help="subset, e.g. dkv,rocksdict")
    p.add_argument("--phases", type=lambda s: [x for x in s.split(",") if x], default=list(PHASES),
                   help=f"comma-separated subset of {','.join(PHASES)} (default: all)")
    p.add_argument("--churn-queues", type=int, default=10_000, help="queues in the churn phase")
    p.add_argument("--churn-appends", type=int, default=2, help="appends per queue per checkpoint")
    p.add_argument("--churn-life", type=int, default=50,
                   help="checkpoints a queue takes to fill (it empties at appends x life items)")
    p.add_argument("--churn-checkpoints", type=int, default=300, help="checkpoints of the churn phase")
    p.add_argument("--churn-warmup", type=int, default=50, help="first checkpoints left out of the steady figures")
    p.add_argument("--churn-options", choices=("spark", "default"), default="spark",
                   help="dkv options of the churn phase: spark_ops' DKV_OPTIONS (default) or dkv's defaults")
    p.add_argument("--long-checkpoints", type=int, default=10_000, help="checkpoints of the long run")
    p.add_argument("--long-keys", type=int, default=50, help="keys overwritten per checkpoint in the long run")
    p.add_argument("--long-every", type=int, default=1_000, help="report the long run every this many checkpoints")
    p.add_argument("--long-options", type=lambda s: [x for x in s.split(",") if x], default=["default", "spark"],
                   help="option sets of the long run: default (dkv's), spark (spark_ops' DKV_OPTIONS) or both")
    p.add_argument("--dir", default=None, help="scratch folder (default: the system temp folder)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    bad = set(args.phases) - set(PHASES)
    if bad:
        p.error(f"unknown phase(s) {', '.join(sorted(bad))}; known: {', '.join(PHASES)}")
    if set(args.long_options) - {"default", "spark"}:
        p.error("--long-options takes default, spark or default,spark")
    if args.block_cache_mb is not None:
        DkvStore.options["block_cache_bytes"] = int(args.block_cache_mb * MiB)
    root = tempfile.mkdtemp(prefix="kvbench-", dir=args.dir)
    out = {"n": args.n, "values": args.values, "phases": args.phases, "dkv_options": dict(DkvStore.options)}
    try:
        if "base" in args.phases:
            out["results"] = run_base(args, root)
        if "reopen-full" in args.phases:
            out["reopen_full"] = run_reopen_full(args, root)
        if "churn" in args.phases:
            out["churn"] = run_churn(args, root)
        if "long" in args.phases:
            out["long"] = run_long(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(out, args)
    if args.json:
        write_json(args.json, out)


if __name__ == "__main__":
    main()
