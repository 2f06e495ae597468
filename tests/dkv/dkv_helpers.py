"""Shared test machinery for dkv: small engine options, store wrappers that model crashes,
and the reference-model harness (a dict plus per-checkpoint snapshots) every random test drives.

Imported by the test modules of this folder (``from .dkv_helpers import SMALL``).
"""
from __future__ import annotations

import random
import threading

import dkv
from dkv.format import manifest as mf
from dkv.storage import MemoryStore, ObjectStore

# Options that make a few hundred small records go through seals, flushes of a few immutable
# memtables, L0 compactions and several levels (the defaults need tens of MiB before
# anything leaves the memtables).
SMALL = dict(memtable_bytes=2000, flush_segments=3, flush_bytes=3000, table_bytes=3000, block_bytes=256,
             l0_trigger=3, level_base_bytes=6000, level_ratio=3)

# Keys that stress ordering edge cases next to the ordinary ones.
SPECIAL_KEYS = [b"\x00", b"\x00\x01", b"k", b"k\x00", b"k\xff", b"\xff", b"\xff\xff", b"\xff\xff\xff"]


def contents(db) -> dict:
    """Everything the store shows, as a dict (one full scan)."""
    return dict(db.scan())


def expected_scan(model: dict, start=None, end=None) -> list:
    return sorted((k, v) for k, v in model.items()
                  if (start is None or k >= start) and (end is None or k < end))


def clone(store: ObjectStore) -> MemoryStore:
    """A MemoryStore holding a copy of every object of ``store``."""
    out = MemoryStore()
    for name, _ in store.list(""):
        out.put(name, store.get(name))
    return out


def manifest_files(m: mf.Manifest) -> set:
    """Every object a manifest references (SSTs and WAL segment files; a segment the
    manifest carries inline is no object)."""
    from dkv import _paths
    out = {t.path for t in m.tables()}
    for r in m.wal:
        if not r.inline:
            out.update(_paths.wal_name(r.ns, r.writer, i) for i in range(r.first, r.last + 1))
    return out


def read_manifest(store: ObjectStore, name: str) -> mf.Manifest:
    return mf.decode(store.get(name), name)


def data_files(store: ObjectStore, prefix: str = "") -> set:
    return {n for n, _ in store.list(prefix) if n.endswith((".sst", ".wal"))}


def manifests(store: ObjectStore, prefix: str = "") -> list[str]:
    return [n for n, _ in store.list(prefix) if n.endswith(".manifest")]


class ProcessKilled(RuntimeError):
    """What a Killable store raises once its process is considered dead."""


class Killable(ObjectStore):
    """Forwards to ``inner`` until ``kill()``; afterwards every call raises ProcessKilled.

    Models a process crash: once killed, nothing the abandoned DB object (or its
    background threads) does reaches storage any more. ``kill`` waits for calls already
    in flight, so the storage state is exactly "the process died after those calls".
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.location = inner.location
        self._dead = False
        self._busy = 0
        self._cond = threading.Condition()

    def kill(self) -> None:
        with self._cond:
            self._dead = True
            while self._busy:
                self._cond.wait()

    def _call(self, fn, *args):
        with self._cond:
            if self._dead:
                raise ProcessKilled("this process was killed")
            self._busy += 1
        try:
            return fn(*args)
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def get(self, key, start=None, end=None):
        return self._call(self.inner.get, key, start, end)

    def put(self, key, data):
        return self._call(self.inner.put, key, data)

    def put_if_absent(self, key, data):
        return self._call(self.inner.put_if_absent, key, data)

    def list(self, prefix=""):
        return self._call(self.inner.list, prefix)

    def delete(self, key):
        return self._call(self.inner.delete, key)

    def size(self, key):
        return self._call(self.inner.size, key)


class Journal(ObjectStore):
    """Forwards to a MemoryStore and records every mutation, in the order it became durable.

    ``replay(n)`` rebuilds the storage state after the first ``n`` mutations: the state a
    crash at that point would leave. Calls are serialised so the journal order is a real
    order of completion.
    """

    def __init__(self) -> None:
        self.inner = MemoryStore()
        self.location = "journal://"
        self.log: list[tuple] = []
        self._lock = threading.Lock()

    def get(self, key, start=None, end=None):
        return self.inner.get(key, start, end)

    def put(self, key, data):
        with self._lock:
            self.inner.put(key, data)
            self.log.append(("put", key, bytes(data)))

    def put_if_absent(self, key, data):
        with self._lock:
            ok = self.inner.put_if_absent(key, data)
            if ok:
                self.log.append(("put", key, bytes(data)))
            return ok

    def list(self, prefix=""):
        return self.inner.list(prefix)

    def delete(self, key):
        with self._lock:
            if self.inner.exists(key):
                self.log.append(("delete", key, None))
            self.inner.delete(key)

    def size(self, key):
        return self.inner.size(key)

    def replay(self, n: int) -> MemoryStore:
        out = MemoryStore()
        for kind, key, data in self.log[:n]:
            if kind == "put":
                out.put(key, data)
            else:
                out.delete(key)
        return out


def random_key(rng: random.Random, space: int = 80) -> bytes:
    if rng.random() < 0.05:
        return rng.choice(SPECIAL_KEYS)
    return b"k%03d" % rng.randrange(space)


def random_value(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.1:
        return b""
    n = rng.randrange(1, 24) if r < 0.9 else rng.randrange(200, 400)
    return rng.randbytes(n)


class Harness:
    """A dkv store and its reference model, kept in step by the operations below.

    ``model`` is what the open store must show; ``snaps[e]`` is what checkpoint ``e``
    holds. A crash (``crash``) kills the session's storage access and reopens: the store
    must then equal the newest checkpoint that landed, which is at least the last one
    whose ``wait()`` returned. ``reopen_at(e)`` rewinds the writer to an older checkpoint,
    which abandons every later one (they must vanish from ``checkpoints()``).
    """

    def __init__(self, base: ObjectStore, retain: int = 3, **options) -> None:
        self.base = base
        self.opts = dict(SMALL, retain=retain)
        self.opts.update(options)
        self.retain = self.opts["retain"]
        self.model: dict = {}
        self.snaps: dict = {}
        self.valid: list = []          # epochs of the model's timeline (landed, not abandoned)
        self.kept: list = []           # the newest `retain` of them: what checkpoints() must end with
        self.pending: list = []        # (epoch, Checkpoint) issued but not waited for
        self.next_epoch = 1
        self.db = self._open()

    # -- sessions ---------------------------------------------------------------------------

    def _open(self, checkpoint=None):
        self.session = Killable(self.base)
        return dkv.open(self.session, checkpoint=checkpoint, discard_newer=checkpoint is not None, **self.opts)

    def _after_open(self, landed_floor) -> None:
        cps = [c.epoch for c in self.db.checkpoints()]
        candidates = sorted(set(self.valid) | {e for e, _ in self.pending})
        if not cps:
            assert landed_floor is None, f"checkpoint {landed_floor} completed but the store opened empty"
            self.model, self.valid, self.kept = {}, [], []
        else:
            e = cps[-1]
            assert e in candidates, f"opened at checkpoint {e}, which was never taken ({candidates})"
            assert landed_floor is None or e >= landed_floor, \
                f"opened at checkpoint {e}, older than completed checkpoint {landed_floor}"
            self.model = dict(self.snaps[e])
            landed = [x for x in candidates if x <= e]
            self.kept = sorted(set(self.kept) | (set(landed) - set(self.valid)))[-self.retain:]
            self.valid = landed
            self._check_listing(cps)
        self.pending = []
        for e in [e for e in self.snaps if e not in self.valid]:
            del self.snaps[e]
        self.next_epoch = (self.valid[-1] + 1) if self.valid else 1
        assert contents(self.db) == self.model

    def _check_listing(self, cps: list) -> None:
        assert cps == sorted(cps), cps
        assert set(cps) <= set(self.valid), f"checkpoints() {cps} lists epochs outside the timeline {self.valid}"
        tail = self.kept
        assert not tail or cps[-len(tail):] == tail, f"checkpoints() {cps} does not end with the retained {tail}"

    def _finish_pending(self) -> None:
        for e, cp in self.pending:
            cp.wait()
            self._landed(e)
        self.pending = []

    def _landed(self, e: int) -> None:
        self.valid.append(e)
        self.kept = (self.kept + [e])[-self.retain:]

    def reopen(self) -> None:
        """Clean close (finishes uploads) and reopen at the latest checkpoint."""
        self.db.close()
        self._finish_pending()
        floor = self.valid[-1] if self.valid else None
        self.db = self._open()
        self._after_open(floor)
        if floor is not None:
            assert self.valid[-1] == floor

    def crash(self) -> None:
        """The process dies: nothing more reaches storage; reopen at the newest checkpoint."""
        floor = self.valid[-1] if self.valid else None
        self.session.kill()
        try:
            self.db.close()       # only releases threads: every storage call now fails
        except Exception:
            pass
        self.db = self._open()
        self._after_open(floor)

    def reopen_at(self, choose) -> None:
        """Reopen the writer at an older retained checkpoint: later ones are abandoned.
        ``choose`` picks the epoch from the retained ones (after the close finished uploads)."""
        self.db.close()
        self._finish_pending()
        retained = [c.epoch for c in dkv.list_checkpoints(self.base)]
        if not retained:
            self.db = self._open()
            self._after_open(None)
            return
        epoch = choose(retained)
        self.db = self._open(checkpoint=epoch)
        self.model = dict(self.snaps[epoch])
        self.valid = [x for x in self.valid if x <= epoch]
        # An epoch older than the retained window may still be listed: the garbage collection
        # after a checkpoint runs on the upload thread, and a close or crash can come first.
        self.kept = [x for x in self.kept if x <= epoch] if epoch in self.kept else [epoch]
        for e in [e for e in self.snaps if e > epoch]:
            del self.snaps[e]
        self.next_epoch = epoch + 1
        cps = [c.epoch for c in self.db.checkpoints()]
        assert cps and cps[-1] == epoch
        self._check_listing(cps)
        assert contents(self.db) == self.model

    def retained(self) -> list:
        """Epochs of checkpoints() once queued uploads and their garbage collection are done."""
        self.db.wait_idle()
        return [c.epoch for c in self.db.checkpoints()]

    def inspect(self, epoch: int | None = None) -> None:
        """Open a retained checkpoint read-only (the writer goes on) and compare."""
        with dkv.open(self.base, checkpoint=epoch, read_only=True, **self.opts) as ro:
            e = epoch if epoch is not None else ro.checkpoints()[-1].epoch if ro.checkpoints() else None
            assert contents(ro) == (self.snaps[e] if e is not None else {})

    # -- operations -------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes) -> None:
        self.db.put(key, value)
        self.model[key] = value

    def delete(self, key: bytes) -> None:
        self.db.delete(key)
        self.model.pop(key, None)

    def batch(self, ops: list) -> None:
        with self.db.batch() as b:
            for key, value in ops:
                if value is None:
                    b.delete(key)
                else:
                    b.put(key, value)
        for key, value in ops:
            if value is None:
                self.model.pop(key, None)
            else:
                self.model[key] = value

    def check_get(self, key: bytes) -> None:
        assert self.db.get(key) == self.model.get(key), key

    def check_scan(self, start=None, end=None) -> None:
        assert list(self.db.scan(start, end)) == expected_scan(self.model, start, end), (start, end)

    def check_prefix(self, prefix: bytes) -> None:
        got = list(self.db.scan_prefix(prefix))
        assert got == sorted((k, v) for k, v in self.model.items() if k.startswith(prefix)), prefix

    def checkpoint(self, wait: bool = True, flush: bool | None = None) -> int:
        """Checkpoint the next epoch; ``flush=True`` flushes the memtables first (a checkpoint
        that needs no WAL replay); None lets ``max_replay_bytes`` decide."""
        e = self.next_epoch
        self.next_epoch += 1
        cp = self.db.checkpoint(e) if flush is None else self.db.checkpoint(e, flush=flush)
        self.snaps[e] = dict(self.model)
        if wait:
            self._finish_pending()       # uploads run in order: earlier ones are done too
            cp.wait()
            self._landed(e)
            cps = [c.epoch for c in self.db.checkpoints()]
            assert cps[-len(self.kept):] == self.kept, (cps, self.kept)
        else:
            self.pending.append((e, cp))
        return e

    def check_all(self) -> None:
        assert contents(self.db) == self.model

    def close(self) -> None:
        self.db.close()
        self._finish_pending()


def run_random(h: Harness, rng: random.Random, steps: int, space: int = 80, keys=random_key) -> None:
    """Drive ``h`` with ``steps`` random operations (the seeded twin of the stateful test);
    ``keys(rng, space)`` makes the keys."""
    for step in range(steps):
        r = rng.random()
        key = keys(rng, space)
        if r < 0.40:
            h.put(key, random_value(rng))
        elif r < 0.52:
            h.delete(key)
        elif r < 0.60:
            h.batch([(keys(rng, space), random_value(rng) if rng.random() < 0.7 else None)
                     for _ in range(rng.randrange(1, 8))])
        elif r < 0.72:
            h.check_get(key)
        elif r < 0.76:
            a, b = sorted((keys(rng, space), keys(rng, space)))
            h.check_scan(a if rng.random() < 0.8 else None, b if rng.random() < 0.8 else None)
        elif r < 0.79:
            h.check_prefix(b"k%d" % rng.randrange(10) if rng.random() < 0.8 else rng.choice(SPECIAL_KEYS))
        elif r < 0.87:
            h.checkpoint(wait=rng.random() < 0.7, flush=rng.choice([None, None, False, True]))
        elif r < 0.89:
            h.reopen()
        elif r < 0.915:
            h.crash()
        elif r < 0.93:
            h.reopen_at(rng.choice)
        elif r < 0.95:
            cps = h.retained()
            if cps:
                h.inspect(rng.choice(cps))
        elif r < 0.96:
            h.db.flush()
        elif r < 0.965:
            h.db.compact(full=rng.random() < 0.5)
        else:
            h.check_all()
    h.check_all()


class Hooked(ObjectStore):
    """Forwards to ``inner``, calling ``before(kind, key)`` first (to interleave another
    actor at an exact point of a run, e.g. a second writer just before a manifest create)."""

    def __init__(self, inner: ObjectStore, before=None) -> None:
        self.inner = inner
        self.location = inner.location
        self.before = before or (lambda kind, key: None)

    def get(self, key, start=None, end=None):
        self.before("get", key)
        return self.inner.get(key, start, end)

    def put(self, key, data):
        self.before("put", key)
        return self.inner.put(key, data)

    def put_if_absent(self, key, data):
        self.before("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def list(self, prefix=""):
        self.before("list", prefix)
        return self.inner.list(prefix)

    def delete(self, key):
        self.before("delete", key)
        return self.inner.delete(key)

    def size(self, key):
        self.before("size", key)
        return self.inner.size(key)


class RemoteMemory(MemoryStore):
    """A MemoryStore that, as a remote store does, reads the ranges of ``prefetch`` at once;
    logs (kind, key, range) of every read."""

    concurrent_reads = 8

    def __init__(self) -> None:
        super().__init__()
        self.reads: list = []
        self._log_lock = threading.Lock()

    def get(self, key, start=None, end=None):
        with self._log_lock:
            self.reads.append(("get", key, start, end))
        return super().get(key, start, end)

    def prefetch(self, key, ranges, size=None):
        with self._log_lock:
            self.reads.append(("prefetch", key, tuple(ranges), size))
        return [MemoryStore.get(self, key, lo, hi) for lo, hi in ranges]

    def table_reads(self) -> list:
        return [r for r in self.reads if r[1].endswith(".sst")]
