"""Notebook collections: objectspace against what a notebook user would pick instead (ZODB,
diskcache, sqlitedict, shelve), same data, same run, each library's own commit (durable
where the library makes it so: see which below).

    python benchmarks/collections_bench.py                     # defaults: about 1-2 minutes
    python benchmarks/collections_bench.py -n 20000 --commits 50 --peers objectspace,zodb
    python benchmarks/collections_bench.py --dir /mnt/quiet-ext4 --json bench-output/collections.json

Workload: ``-n`` (100,000) small dicts (~90 bytes as msgpack: an id, a name, a score, a
count, two tags) under string keys, each library used as its own docs show it to a notebook
user:

objectspace   ``d = space.get_or_create_dict("records"); d[key] = row; space.checkpoint()``
              on a local folder (dkv's default ``fsync=True``)
zodb          FileStorage, ``root.records = BTrees.OOBTree.BTree()``, ``transaction.commit()``
diskcache     ``Cache(folder)`` with its defaults, 10 keys in one ``cache.transact()``; its
              default sqlite setting (WAL journal, synchronous=NORMAL) does not fsync a commit,
              so a commit it returned can be lost on a power loss
diskcache-full the same with ``sqlite_synchronous=2`` (FULL): a commit is durable
sqlitedict    ``SqliteDict(file)``, ``db.commit()``; sqlitedict sets ``PRAGMA synchronous=OFF``, so
              its commits are not durable either
sqlitedict-full the same after ``PRAGMA synchronous=FULL`` (rollback journal, fsynced)
shelve        ``shelve.open(file)``, ``sh.sync()`` (whatever dbm backend this Python has;
              ``dbm.dumb`` rewrites its whole index at every sync and never fsyncs)

Measured, per library:
(a) commit: update ``--keys-per-commit`` (10) existing keys with new dicts and commit
    durably; median (and p90) over ``--commits`` (200) commits, in rounds of a twentieth
    of them per library, stopping after about ``--commit-seconds`` (6) per library.
(b) reopen + first read: a fresh open + first read in this process (imports warm) right
    after the load (a notebook that saved its data and restarts) and after the commits;
    and in a new Python process, the time from before the library's import to the first
    value read (the interpreter's own start is the same for all and left out); medians of
    ``--reopens`` (5).
(c) bytes written per small commit: the block device's sectors written (``/sys/dev/block/
    <device>/stat``: data, file system journal and metadata), this process's ``write_bytes``
    (``/proc/self/io``: page-cache pages it dirtied, which leaves out the journal) and
    ``wchar`` (bytes passed to write calls). The device counter sees every writer of the
    device: the median over many commits filters what others write (run with ``--dir`` on a
    quiet file system for exact numbers).
(d) cold gets: ``--gets`` (1,000) random existing keys, each read once after a fresh open.
(e) bytes on disk: the sizes of every file in the library's folder after all commits.

Every phase runs the libraries in turn, a round at a time, so that what else the machine
does falls on all of them alike. The last table gives objectspace's ratio to each peer
(>1: objectspace is better), then the targets of issue 16 item 9: a 10-key commit no
slower than ZODB's, reopen + first read within 2x of ZODB's, device bytes per small commit
no more than ZODB's. ``dev_flushes_per_commit`` counts the device's cache flushes (one per
fsync that reaches it): on a disk shared with other writers each one waits for theirs.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from _report import table, write_json  # noqa: E402


# -- the data ---------------------------------------------------------------------------------

def key_of(i: int) -> str:
    return f"user-{i:07d}"


def row(i: int, rnd: random.Random) -> dict:
    return {"id": i, "name": f"user {i}", "score": round(rnd.random() * 100, 2),
            "visits": rnd.randrange(1000), "tags": ["notebook", rnd.choice(("a", "b", "c"))]}


# -- measuring bytes written ------------------------------------------------------------------

def proc_io() -> dict:
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            out[k] = int(v)
    return out


class DeviceCounter:
    """(bytes written, cache flushes) of the block device holding ``path``, all its writers."""

    def __init__(self, path: str) -> None:
        st = os.stat(path)
        self.path = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat"
        if not os.path.exists(self.path):
            self.path = None

    def read(self) -> tuple | None:
        if self.path is None:
            return None
        with open(self.path) as f:
            fields = f.read().split()
        return int(fields[6]) * 512, int(fields[15]) if len(fields) > 15 else 0


def folder_bytes(path: str) -> tuple[int, int]:
    """(file sizes, allocated bytes) of every file under path."""
    size = alloc = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            size += st.st_size
            alloc += st.st_blocks * 512
    return size, alloc


# -- the libraries ----------------------------------------------------------------------------
# Each peer: open(path), load(items) (one commit), update(items) (one commit), get(key),
# close(), and REOPEN: the code a new process runs (with PATH and KEY set) to open and read.

class Peer:
    name = ""
    MODULES: tuple = ()

    @classmethod
    def check(cls) -> None:
        """Raise ImportError when the library is not installed."""
        import importlib
        for m in cls.MODULES:
            importlib.import_module(m)


class ObjectSpacePeer(Peer):
    name = "objectspace"
    MODULES = ("objectspace",)
    REOPEN = ("from objectspace import ObjectSpace\n"
              "space = ObjectSpace.open(PATH)\n"
              "value = space.get_or_create_dict('records')[KEY]\n")

    def open(self, path):
        from objectspace import ObjectSpace
        self.space = ObjectSpace.open(path)
        self.d = self.space.get_or_create_dict("records")

    def load(self, items):
        d = self.d
        for k, v in items:
            d[k] = v

        self.space.checkpoint()

    def update(self, items):
        d = self.d
        for k, v in items:
            d[k] = v
        self.space.checkpoint()

    def get(self, key):
        return self.d[key]

    def close(self):
        self.space.close()


class ObjectSpaceSeparatePeer(ObjectSpacePeer):
    """objectspace with a WAL file per checkpoint (``inline_segment_bytes=0``; the default
    carries small checkpoints inside their manifests, RFC 0007)."""
    name = "objectspace-separate"
    OPTIONS = "inline_segment_bytes=0"
    REOPEN = ObjectSpacePeer.REOPEN.replace("ObjectSpace.open(PATH)", f"ObjectSpace.open(PATH, {OPTIONS})")

    def open(self, path):
        from objectspace import ObjectSpace
        self.space = ObjectSpace.open(path, inline_segment_bytes=0)
        self.d = self.space.get_or_create_dict("records")


class ZodbPeer(Peer):
    name = "zodb"
    MODULES = ("ZODB", "BTrees", "transaction")
    REOPEN = ("import ZODB, ZODB.FileStorage\n"
              "db = ZODB.DB(ZODB.FileStorage.FileStorage(PATH + '/Data.fs'))\n"
              "conn = db.open()\n"
              "value = conn.root.records[KEY]\n")

    def open(self, path):
        import BTrees.OOBTree
        import transaction
        import ZODB
        import ZODB.FileStorage
        os.makedirs(path, exist_ok=True)
        self.transaction = transaction
        self.db = ZODB.DB(ZODB.FileStorage.FileStorage(os.path.join(path, "Data.fs")))
        self.conn = self.db.open()
        root = self.conn.root
        if not hasattr(root, "records"):
            root.records = BTrees.OOBTree.BTree()
            transaction.commit()
        self.records = root.records

    def load(self, items):
        self.update(items)

    def update(self, items):
        records = self.records
        for k, v in items:
            records[k] = v
        self.transaction.commit()

    def get(self, key):
        return self.records[key]

    def close(self):
        self.conn.close()
        self.db.close()


class DiskcachePeer(Peer):
    name = "diskcache"
    MODULES = ("diskcache",)
    settings: dict = {}
    REOPEN = ("import diskcache\n"
              "cache = diskcache.Cache(PATH{settings})\n"
              "value = cache[KEY]\n")

    def open(self, path):
        import diskcache
        self.cache = diskcache.Cache(path, **self.settings)

    def load(self, items):
        self.update(items)

    def update(self, items):
        cache = self.cache
        with cache.transact():
            for k, v in items:
                cache[k] = v

    def get(self, key):
        return self.cache[key]

    def close(self):
        self.cache.close()


class DiskcacheFullPeer(DiskcachePeer):
    name = "diskcache-full"
    settings = {"sqlite_synchronous": 2}


class SqlitedictPeer(Peer):
    name = "sqlitedict"
    MODULES = ("sqlitedict",)
    durable = False
    REOPEN = ("from sqlitedict import SqliteDict\n"
              "db = SqliteDict(PATH + '/data.sqlite')\n"
              "value = db[KEY]\n")

    def open(self, path):
        from sqlitedict import SqliteDict
        os.makedirs(path, exist_ok=True)
        self.db = SqliteDict(os.path.join(path, "data.sqlite"))
        if self.durable:        # sqlitedict sets synchronous=OFF on its connection
            self.db.conn.execute("PRAGMA synchronous=FULL")

    def load(self, items):
        self.update(items)

    def update(self, items):
        db = self.db
        for k, v in items:
            db[k] = v
        db.commit()

    def get(self, key):
        return self.db[key]

    def close(self):
        self.db.close()


class SqlitedictFullPeer(SqlitedictPeer):
    name = "sqlitedict-full"
    durable = True


class ShelvePeer(Peer):
    name = "shelve"
    REOPEN = ("import shelve\n"
              "sh = shelve.open(PATH + '/shelf')\n"
              "value = sh[KEY]\n")

    def open(self, path):
        import shelve
        os.makedirs(path, exist_ok=True)
        self.sh = shelve.open(os.path.join(path, "shelf"))

    def load(self, items):
        self.update(items)

    def update(self, items):
        sh = self.sh
        for k, v in items:
            sh[k] = v
        sh.sync()

    def get(self, key):
        return self.sh[key]

    def close(self):
        self.sh.close()


PEERS = {p.name: p for p in (ObjectSpacePeer, ObjectSpaceSeparatePeer, ZodbPeer, DiskcachePeer, DiskcacheFullPeer, SqlitedictPeer,
                             SqlitedictFullPeer, ShelvePeer)}


def reopen_code(cls) -> str:
    body = cls.REOPEN.replace("{settings}", "".join(f", {k}={v!r}" for k, v in getattr(cls, "settings", {}).items()))
    return ("import sys, time\n"
            "t0 = time.perf_counter()\n"
            "PATH, KEY = sys.argv[1], sys.argv[2]\n"
            + body +
            "assert value is not None\n"
            "print(time.perf_counter() - t0)\n")


# -- one library's run ------------------------------------------------------------------------

def median(xs):
    return statistics.median(xs) if xs else None


def p90(xs):
    return sorted(xs)[int(0.9 * (len(xs) - 1))] if xs else None


def commit_round(peer, r: dict, rnd: random.Random, n: int, commits: int, keys: int, dev: DeviceCounter) -> None:
    """``commits`` small commits; appends each one's time and bytes to ``r``'s lists."""
    for _ in range(commits):
        r["_c"] = r.get("_c", 0) + 1
        items = [(key_of(rnd.randrange(n)), row(n + r["_c"], rnd)) for _ in range(keys)]
        a, da = proc_io(), dev.read()
        t = time.perf_counter()
        peer.update(items)
        r["_times"].append(time.perf_counter() - t)
        b, db = proc_io(), dev.read()
        r["_write_bytes"].append(b["write_bytes"] - a["write_bytes"])
        r["_wchar"].append(b["wchar"] - a["wchar"])
        if da is not None:
            r["_dev"].append(db[0] - da[0])
            r["_flushes"].append(db[1] - da[1])


def reopen_in_new_process(cls, path: str, key: str) -> float:
    out = subprocess.run([sys.executable, "-c", reopen_code(cls), path, key], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    if out.returncode:
        raise RuntimeError(f"{cls.name} reopen failed: {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def run(classes: list, root: str, args) -> list[dict]:
    """Every phase runs the libraries in turn, round after round, so that what else the
    machine does at a moment falls on all of them alike."""
    n = args.n
    rows = {}
    for cls in classes:
        path = os.path.join(root, cls.name)
        r = rows[cls.name] = {"library": cls.name, "_times": [], "_write_bytes": [], "_wchar": [], "_dev": [], "_flushes": []}
        rnd = random.Random(42)
        peer = cls()
        peer.open(path)
        t0 = time.perf_counter()
        peer.load([(key_of(i), row(i, rnd)) for i in range(n)])
        r["load_s"] = time.perf_counter() - t0
        peer.close()
        # A notebook that saved its data and restarts: reopen + the first read (median).
        times = []
        for _ in range(args.reopens):
            t = time.perf_counter()
            peer = cls()
            peer.open(path)
            peer.get(key_of(rnd.randrange(n)))
            times.append(time.perf_counter() - t)
            if len(times) < args.reopens:
                peer.close()
        r["open_after_load_ms"] = median(times) * 1000
        r["_peer"], r["_path"], r["_rnd"], r["_devc"] = peer, path, rnd, DeviceCounter(path)

    per_round = max(1, args.commits // 20)
    deadline = time.perf_counter() + args.commit_seconds * len(classes)
    live = [rows[cls.name] for cls in classes]
    while live:
        for r in list(live):
            a, da = proc_io(), r["_devc"].read()
            commit_round(r["_peer"], r, r["_rnd"], n, per_round, args.keys_per_commit, r["_devc"])
            b, db = proc_io(), r["_devc"].read()
            r["_wb_total"] = r.get("_wb_total", 0) + b["write_bytes"] - a["write_bytes"]
            if da is not None:
                r["_dev_total"] = r.get("_dev_total", 0) + db[0] - da[0]
            done = len(r["_times"]) >= args.commits or (len(r["_times"]) >= 20 and time.perf_counter() > deadline)
            if done:
                live.remove(r)

    for r in rows.values():
        times, k = r["_times"], len(r["_times"])
        r["commits"] = k
        r["commit_ms"] = median(times) * 1000
        r["commit_p90_ms"] = p90(times) * 1000
        r["dev_bytes_per_commit"] = median(r["_dev"])
        r["dev_bytes_mean"] = r["_dev_total"] / k if "_dev_total" in r else None
        r["dev_flushes_per_commit"] = median(r["_flushes"])
        r["write_bytes_per_commit"] = median(r["_write_bytes"])
        r["write_bytes_mean"] = r["_wb_total"] / k
        r["wchar_per_commit"] = median(r["_wchar"])
        r["_peer"].close()
        r["disk_bytes"], r["disk_alloc_bytes"] = folder_bytes(r["_path"])
        r["_probe"] = key_of(r["_rnd"].randrange(n))

    opens: dict = {cls.name: [] for cls in classes}
    procs: dict = {cls.name: [] for cls in classes}
    for _ in range(args.reopens):
        for cls in classes:
            r = rows[cls.name]
            t = time.perf_counter()
            peer = cls()
            peer.open(r["_path"])
            peer.get(r["_probe"])
            opens[cls.name].append(time.perf_counter() - t)
            peer.close()
            procs[cls.name].append(reopen_in_new_process(cls, r["_path"], r["_probe"]))

    for cls in classes:
        r = rows[cls.name]
        r["open_read_ms"] = median(opens[cls.name]) * 1000
        r["reopen_read_ms"] = median(procs[cls.name]) * 1000
        peer = cls()
        peer.open(r["_path"])
        keys = [key_of(r["_rnd"].randrange(n)) for _ in range(args.gets)]
        t = time.perf_counter()
        for key in keys:
            peer.get(key)
        r["cold_get_us"] = (time.perf_counter() - t) / len(keys) * 1e6
        peer.close()
    return [{k: v for k, v in rows[cls.name].items() if not k.startswith("_")} for cls in classes]


# -- report -----------------------------------------------------------------------------------

COLUMNS = ["library", "commit_ms", "commit_p90_ms", "reopen_read_ms", "open_read_ms", "open_after_load_ms",
           "dev_bytes_per_commit", "dev_bytes_mean", "dev_flushes_per_commit", "write_bytes_per_commit",
           "wchar_per_commit", "cold_get_us", "disk_bytes", "load_s"]

# (column, label): every one is a cost, so peer / objectspace > 1 means objectspace costs less
RATIOS = [("commit_ms", "commit"), ("reopen_read_ms", "reopen+read (new process)"),
          ("open_read_ms", "open+read (same process)"), ("open_after_load_ms", "open+read after the load"),
          ("dev_bytes_per_commit", "device bytes/commit"),
          ("dev_flushes_per_commit", "device flushes/commit"), ("wchar_per_commit", "bytes written/commit (files)"),
          ("write_bytes_per_commit", "write_bytes/commit"), ("cold_get_us", "cold get"),
          ("disk_bytes", "bytes on disk")]


def report(results: list[dict], args) -> None:
    table(results, COLUMNS, title=f"{args.n:,} small dicts, commits of {args.keys_per_commit} changed keys "
                                  f"(times: median; bytes: median per commit, dev_bytes_mean: all device writes / commits)")
    ours = next((r for r in results if r["library"] == "objectspace"), None)
    if ours is None:
        return
    rows = []
    for col, label in RATIOS:
        row_ = {"measure": label}
        for r in results:
            if r is ours:
                continue
            a, b = ours.get(col), r.get(col)
            row_[r["library"]] = (b / a) if a and b is not None else None
        rows.append(row_)
    peers = [r["library"] for r in results if r is not ours]
    table(rows, ["measure"] + peers, title="peer / objectspace (>1: objectspace is faster or writes less)")
    zodb = next((r for r in results if r["library"] == "zodb"), None)
    if zodb is not None:
        print("\nissue 16 item 9 targets against ZODB:")
        checks = [("10-key commit no slower than ZODB's", ours["commit_ms"], zodb["commit_ms"], 1.0, "ms"),
                  ("reopen + first read within 2x of ZODB's (same process, after the load)",
                   ours["open_after_load_ms"], zodb["open_after_load_ms"], 2.0, "ms"),
                  ("reopen + first read within 2x of ZODB's (same process, after the commits)",
                   ours["open_read_ms"], zodb["open_read_ms"], 2.0, "ms"),
                  ("reopen + first read within 2x of ZODB's (new process, imports included)",
                   ours["reopen_read_ms"], zodb["reopen_read_ms"], 2.0, "ms"),
                  ("device bytes per small commit <= ZODB's", ours["dev_bytes_per_commit"],
                   zodb["dev_bytes_per_commit"], 1.0, "B")]
        for label, a, b, factor, unit in checks:
            if a is None or b is None:
                print(f"  {label}: not measured")
                continue
            ok = a <= factor * b
            print(f"  {'met    ' if ok else 'NOT MET'}  {label}: {a:,.3g} {unit} vs {b:,.3g} {unit}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=100_000, help="records (small dicts)")
    p.add_argument("--keys-per-commit", type=int, default=10)
    p.add_argument("--commits", type=int, default=200, help="small commits per library (at most --commit-seconds)")
    p.add_argument("--commit-seconds", type=float, default=6.0)
    p.add_argument("--reopens", type=int, default=5, help="reopens (new processes, and fresh opens) per library")
    p.add_argument("--gets", type=int, default=1000, help="cold gets after a fresh open")
    p.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated, from {', '.join(PEERS)}")
    p.add_argument("--dir", default=None, help="folder for the libraries' files (default: a temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the files")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    names = [s for s in args.peers.split(",") if s]
    unknown = [s for s in names if s not in PEERS]
    if unknown:
        p.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    classes = []
    for name in names:
        try:
            PEERS[name].check()
        except ImportError as e:
            print(f"{name}: skipped ({e}; `EXTRAS=s3,spark,dev,bench scripts/setup_env.sh` installs the peers)",
                  file=sys.stderr)
            continue
        classes.append(PEERS[name])
    root = tempfile.mkdtemp(prefix="collections-bench-", dir=args.dir)
    try:
        t0 = time.perf_counter()
        results = run(classes, root, args)
        print(f"ran in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(results, args)
    if args.json:
        write_json(args.json, {"args": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
