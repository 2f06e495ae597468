"""A local folder on a full or failing disk (issue 18 §2): ENOSPC and EIO during a flush, a
compaction and a checkpoint.

The faults are real OS errors raised where the OS raises them: ``DiskFaults`` stands in for
the ``os`` module of dkv/storage/local.py and, for paths under the store's folder, lets
writes through up to a byte budget (a write that crosses it is short, as on a full disk, and
the next one raises), or fails chosen calls (``fsync`` of a file or a folder, ``link``). One
test fills a real tmpfs of 1 MiB (root only; skipped otherwise).

What must hold: the error is a StorageError with the OS error's errno that names dkv's
operation, the path and what happened; every completed checkpoint reads back exactly after
the fault and after a reopen; a half-written SST, WAL segment or manifest never becomes
visible; a background failure surfaces on the next call, and once space is freed the same
DB object (and an ObjectSpace on it) goes on: the failed work is retried and the next
checkpoint commits, without a reopen.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import random
import re
import subprocess
import sys
import tempfile
import threading

import pytest

import dkv
from dkv.errors import StorageError
from dkv.format import manifest as mf
from dkv.storage import LocalDirStore
from .dkv_helpers import SMALL, contents, manifest_files

_os = os


@pytest.fixture(autouse=True)
def _quiet(caplog):
    caplog.set_level(logging.CRITICAL, logger="dkv")


class DiskFaults:
    """Stands in for ``os`` in dkv.storage.local: real calls, except under ``root``.

    ``limit(n, code)``: writes may store ``n`` more bytes; the write that crosses the limit
    stores what fits and returns a short count, every write after it raises
    ``OSError(code)`` (ENOSPC: a full disk; EIO: a failing one). ``fail(kind, code, nth)``:
    the nth ``write``, ``fsync`` (of a file), ``fsync-dir``, ``link``, ``replace`` or
    ``scandir`` (reading a folder) under root raises (``repeat``: and every one after it;
    ``where``: counting only paths that contain it). ``free()`` ends every fault.
    ``written`` counts the bytes written under root."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.written = 0
        self.fired: list = []
        self._left: int | None = None
        self._code = errno.ENOSPC
        self._rules: list = []
        self._fds: dict = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(_os, name)

    # -- control ------------------------------------------------------------------------
    def limit(self, n: int, code: int = errno.ENOSPC) -> "DiskFaults":
        self._left, self._code = n, code
        return self

    def fail(self, kind: str, code: int, nth: int = 1, repeat: bool = False, where: str = "") -> "DiskFaults":
        self._rules.append([kind, code, nth, repeat, 0, where])
        return self

    def free(self) -> None:
        with self._lock:
            self._left = None
            self._rules.clear()

    # -- the calls ----------------------------------------------------------------------
    def _mine(self, path) -> bool:
        return path is not None and os.path.abspath(os.fspath(path)).startswith(self.root)

    def _raise(self, code: int, what: str, path) -> None:
        self.fired.append(f"{errno.errorcode[code]} {what} {path}")
        raise OSError(code, os.strerror(code))

    def _check(self, kind: str, path) -> None:
        if not self._mine(path):
            return
        with self._lock:
            for rule in self._rules:
                if rule[0] != kind or rule[5] not in os.fspath(path):
                    continue
                rule[4] += 1
                if rule[4] == rule[2] or (rule[3] and rule[4] > rule[2]):
                    self._raise(rule[1], kind, path)

    def open(self, path, flags, mode=0o777, *, dir_fd=None):
        fd = _os.open(path, flags, mode, dir_fd=dir_fd)
        self._fds[fd] = os.fspath(path)
        return fd

    def close(self, fd):
        self._fds.pop(fd, None)
        _os.close(fd)

    def write(self, fd, data):
        path = self._fds.get(fd)
        if not self._mine(path):
            return _os.write(fd, data)
        self._check("write", path)
        with self._lock:
            if self._left is not None:
                if self._left <= 0:
                    self._raise(self._code, "write", path)
                data = memoryview(data)[:self._left]
            n = _os.write(fd, data)
            self.written += n
            if self._left is not None:
                self._left -= n
            return n

    def fsync(self, fd):
        path = self._fds.get(fd)
        self._check("fsync-dir" if path is not None and os.path.isdir(path) else "fsync", path)
        _os.fsync(fd)

    def link(self, src, dst, **kw):
        self._check("link", dst)
        _os.link(src, dst, **kw)

    def replace(self, src, dst, **kw):
        self._check("replace", dst)
        _os.replace(src, dst, **kw)

    def scandir(self, path="."):
        self._check("scandir", path)
        return _os.scandir(path)


@pytest.fixture
def disk(tmp_path, monkeypatch):
    faults = DiskFaults(str(tmp_path / "db"))
    monkeypatch.setattr("dkv.storage.local.os", faults)
    return faults


# -- the model -----------------------------------------------------------------------------

class Run:
    """A DB on a local folder, a dict model and the contents of every completed checkpoint."""

    def __init__(self, root: str, opts: dict) -> None:
        self.root, self.opts = root, opts
        self.db = dkv.open(LocalDirStore(root, fsync=opts.get("fsync", True)), **opts)
        self.model: dict = {}
        self.snaps: dict = {}
        self.done: list = []
        self.epoch = 0

    def fill(self, seed: int, n: int, space: int = 60) -> None:
        rng = random.Random(seed)
        for i in range(n):
            key = b"k%03d" % rng.randrange(space)
            if rng.random() < 0.8:
                self.db.put(key, b"v%d-%d-" % (seed, i) + rng.randbytes(rng.randrange(1, 40)))
            else:
                self.db.delete(key)
            self.model[key] = self.db.get(key)

    def checkpoint(self, flush=None) -> None:
        """Raises what the checkpoint raised (its number is used up either way)."""
        self.epoch += 1
        cp = self.db.checkpoint(self.epoch, flush=flush)
        snap = {k: v for k, v in self.model.items() if v is not None}
        cp.wait()
        self.snaps[self.epoch] = snap
        self.done.append(self.epoch)

    def verify(self, reopen: bool = False) -> None:
        """Every retained completed checkpoint reads back exactly (a reader beside the
        writer); ``reopen``: the writer is closed and a new writer continues."""
        self.db.wait_idle()         # the collection after the last checkpoint is over
        with dkv.open(self.root, read_only=True) as r:
            retained = [c.epoch for c in r.checkpoints()]
            assert retained and retained[-1] == self.done[-1], (retained, self.done)
            assert contents(r) == self.snaps[self.done[-1]]
            for m in retained:
                check_manifest_files(r.store, r.store.get(m_name(r, m)), m_name(r, m))
        assert set(retained) <= set(self.done)
        for e in retained:
            with dkv.open(self.root, checkpoint=e, read_only=True) as r:
                assert contents(r) == self.snaps[e], f"checkpoint {e} differs"
        assert not [n for n in _walk(self.root) if ".tmp-" in n], "a temporary file was left"
        if reopen:
            self.db.close()
            self.db = dkv.open(LocalDirStore(self.root, fsync=self.opts.get("fsync", True)), **self.opts)
            assert contents(self.db) == self.snaps[self.done[-1]]
            self.model = dict(self.snaps[self.done[-1]])


def m_name(db, epoch: int) -> str:
    return next(c.name for c in db.checkpoints() if c.epoch == epoch)


def check_manifest_files(store, data: bytes, name: str) -> None:
    """A manifest on disk decodes whole, and every SST it names is there at its full size."""
    m = mf.decode(data, name)
    for t in m.tables():
        assert store.size(t.path) == t.size, f"{name} names {t.path} of {t.size} B, found {store.size(t.path)}"
    for f in manifest_files(m):
        assert store.size(f), f"{name} names {f}, which is missing or empty"


def _walk(root: str) -> list:
    return [os.path.join(d, f) for d, _, files in os.walk(root) for f in files]


def check_error(err: BaseException, code: int, op: str, root: str) -> str:
    """The error a user sees: a StorageError with the OS errno that names the operation,
    the path (under the store's folder) and what happened. Returns the path."""
    assert isinstance(err, StorageError), f"{type(err).__name__}: {err}"
    msg = str(err)
    assert err.errno == code, msg
    assert op in msg, msg
    assert os.strerror(code) in msg, msg
    m = re.search(r"cannot \w+ (/\S+?): ", msg)
    assert m and m.group(1).startswith(root), msg
    return m.group(1)


# -- one fault in one operation (background=False: the error comes from the call) ---------

BIG = dict(memtable_bytes=1 << 20, flush_segments=1000, flush_bytes=1 << 30, block_bytes=256, retain=2)


def _setup_flush(run):
    run.fill(1, 40)
    run.checkpoint()
    run.fill(2, 30)


def _setup_compaction(run):
    run.fill(1, 150)
    run.checkpoint()
    run.fill(2, 60)
    run.db.flush()


def _setup_checkpoint(run):
    run.fill(1, 100)
    run.checkpoint()
    run.fill(2, 100)
    run.checkpoint()
    run.fill(3, 100)


SCENARIOS = {
    # op word in the message, options, setup, the operation, the retry once space is back
    "flush": ("flush", BIG, _setup_flush, lambda run: run.db.flush(), lambda run: run.db.flush()),
    "compaction": ("compaction", dict(SMALL, compaction=False, retain=2), _setup_compaction,
                   lambda run: run.db.compact(full=True), lambda run: run.db.compact(full=True)),
    "checkpoint": ("checkpoint", BIG, _setup_checkpoint, lambda run: run.checkpoint(), lambda run: None),
}


@functools.lru_cache(None)
def _bytes_written(name: str) -> int:
    """How many bytes the scenario's operation writes (a dry run)."""
    _, opts, setup, op, _ = SCENARIOS[name]
    with tempfile.TemporaryDirectory() as tmp:
        faults = DiskFaults(tmp)
        import dkv.storage.local as local
        old, local.os = local.os, faults
        try:
            run = Run(os.path.join(tmp, "db"), dict(opts, background=False))
            setup(run)
            before = faults.written
            op(run)
            run.db.close()
        finally:
            local.os = old
        return faults.written - before


FAULTS = {
    # ENOSPC after a budget of bytes: the first byte, half-way, the last byte of the operation
    # (for a checkpoint: its manifest, written last)
    "enospc-first": lambda d, total: d.limit(0),
    "enospc-half": lambda d, total: d.limit(total // 2),
    "enospc-last": lambda d, total: d.limit(total - 1),
    "eio-write": lambda d, total: d.limit(total // 3, errno.EIO),
    "eio-fsync": lambda d, total: d.fail("fsync", errno.EIO),              # a file's
    "eio-fsync-dir": lambda d, total: d.fail("fsync-dir", errno.EIO),      # its folder's, after it
    "enospc-link": lambda d, total: d.fail("link", errno.ENOSPC),          # the manifest's commit
}


def _cases():
    for name in SCENARIOS:
        for fault in FAULTS:
            if fault == "enospc-link" and name != "checkpoint":
                continue
            slow = fault in ("eio-fsync-dir", "enospc-last") and name == "compaction"
            yield pytest.param(name, fault, id=f"{name}-{fault}", marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("name,fault", list(_cases()))
def test_disk_fault_in_operation(disk, name, fault):
    word, opts, setup, op, retry = SCENARIOS[name]
    code = errno.EIO if fault.startswith("eio") else errno.ENOSPC
    run = Run(disk.root, dict(opts, background=False))
    setup(run)
    FAULTS[fault](disk, _bytes_written(name))
    with pytest.raises(StorageError) as info:
        op(run)
    assert disk.fired, "the fault did not fire"
    path = check_error(info.value, code, word, disk.root)
    if not fault.endswith("-dir"):
        # A file whose write failed is removed (the folder's fsync comes after the file is whole).
        assert not os.path.exists(path), f"{path} was left after its write failed"
    run.verify()                            # still full: the checkpoints read back exactly

    # Space is back: the same DB object goes on.
    disk.free()
    retry(run)
    run.fill(4, 50)
    run.checkpoint()
    run.verify()
    run.fill(5, 50)
    run.checkpoint(flush=True)
    run.verify(reopen=True)
    run.fill(6, 20)
    run.checkpoint()
    run.verify()
    run.db.close()


def test_failed_checkpoint_keeps_the_failed_wal_segment_for_the_next(disk):
    """ENOSPC on checkpoint 2's WAL segment; checkpoint 3 uploads it again (same name, in
    place) with its own, and holds every record of both intervals."""
    run = Run(disk.root, dict(BIG, background=False))
    run.fill(1, 50)
    run.checkpoint()
    run.fill(2, 50)
    disk.limit(10)
    with pytest.raises(StorageError) as info:
        run.checkpoint()
    check_error(info.value, errno.ENOSPC, "checkpoint 2: uploading WAL segment", disk.root)
    assert "the next checkpoint uploads it again" in str(info.value)
    run.fill(3, 50)
    with pytest.raises(StorageError):       # still full
        run.checkpoint()
    disk.free()
    run.checkpoint()
    assert run.done == [1, 4]
    run.verify(reopen=True)


# -- background flushes and compactions ----------------------------------------------------

def _take(fn):
    """Run fn; the StorageError it raised, or None."""
    try:
        fn()
    except StorageError as e:
        return e
    return None


def _background_run(root: str, disk: DiskFaults, seed: int, rounds: int = 14) -> dict:
    """Writes and checkpoints with flushes and compactions on their threads; a full (or
    failing) disk from some round on, freed some rounds later. Errors must come from calls
    (never vanish in a thread), be StorageErrors naming the operation and path, and the same
    DB must take the next checkpoint once space is back."""
    rng = random.Random(seed)
    code = rng.choice([errno.ENOSPC, errno.ENOSPC, errno.EIO])
    run = Run(root, dict(SMALL, retain=rng.randrange(1, 4), background=True,
                         max_sealed_memtables=rng.choice([0, 1, 4])))
    fault_at = rng.randrange(1, rounds // 2)
    free_at = fault_at + rng.randrange(1, 4)
    errors = []
    for r in range(rounds):
        if r == fault_at:
            if rng.random() < 0.7:
                disk.limit(rng.randrange(0, 20000), code)
            else:
                disk.fail(rng.choice(["fsync", "fsync-dir", "link", "write"]), code,
                          nth=rng.randrange(1, 6), repeat=rng.random() < 0.5)
        if r == free_at:
            disk.free()
        for i in range(rng.randrange(20, 120)):
            key = b"k%03d" % rng.randrange(80)
            value = rng.randbytes(rng.randrange(1, 60)) if rng.random() < 0.85 else None
            e = _take(lambda: run.db.put(key, value) if value is not None else run.db.delete(key))
            run.model[key] = run.db.get(key)        # applied or not, as the store says
            if e is not None:
                errors.append(e)
        e = _take(lambda: run.checkpoint(flush=rng.random() < 0.2))
        if e is not None:
            errors.append(e)
        if r < free_at and rng.random() < 0.3:
            if (e := _take(run.db.wait_idle)) is not None:
                errors.append(e)
    # Space is back: at most the last failure is still to be reported, then all works.
    e = _take(run.db.wait_idle)
    if e is not None:
        errors.append(e)
    run.db.wait_idle()
    run.checkpoint()
    run.db.compact(full=True)
    run.checkpoint()
    assert contents(run.db) == run.snaps[run.done[-1]]
    for e in errors:
        path = check_error(e, code, "", root)
        assert re.search(r"flush|compaction|checkpoint \d+", str(e)), str(e)
        assert path
    run.verify(reopen=True)
    run.db.close()
    return {"errors": len(errors), "fired": len(disk.fired)}


def test_background_failures_surface_and_the_store_resumes(disk):
    got = _background_run(disk.root, disk, seed=3)
    assert got["fired"] and got["errors"]


def test_background_flush_fails_while_full_and_succeeds_after(disk):
    """A background flush (not a checkpoint) meets the full disk: the next call reports it,
    once, naming the flush; the flush is retried once space is back."""
    run = Run(disk.root, dict(SMALL, compaction=False, flush_segments=3, memtable_bytes=2000, background=True))
    run.fill(1, 40)
    run.checkpoint()
    disk.fail("write", errno.ENOSPC, repeat=True)
    with pytest.raises(StorageError) as info:
        for i in range(200):
            run.fill(100 + i, 20)
            run.db.wait_idle()
    check_error(info.value, errno.ENOSPC, "background work failed", disk.root)
    assert "flush of" in str(info.value) and "/sst/" in str(info.value)
    run.verify()
    disk.free()
    run.fill(2, 40)
    run.db.flush()
    assert run.db.stats()["sealed_memtables"] == 0
    run.checkpoint()
    run.verify(reopen=True)
    run.db.close()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(200))
def test_background_disk_faults_long(tmp_path, monkeypatch, seed):
    disk = DiskFaults(str(tmp_path / "db"))
    monkeypatch.setattr("dkv.storage.local.os", disk)
    _background_run(disk.root, disk, seed=100 + seed, rounds=24)


# -- an ObjectSpace on a full disk ---------------------------------------------------------

def test_object_space_resumes_once_space_is_freed(disk):
    from objectspace import ObjectSpace
    space = ObjectSpace.open(LocalDirStore(disk.root))
    d = space.get_or_create_dict("d")
    d.update({f"k{i}": i for i in range(100)})
    assert space.checkpoint()
    first = space.last_checkpoint
    disk.limit(100)
    for i in range(100, 200):
        d[f"k{i}"] = i
    with pytest.raises(StorageError) as info:
        space.checkpoint()
    check_error(info.value, errno.ENOSPC, "checkpoint", disk.root)
    assert any("nothing was checkpointed" in n for n in getattr(info.value, "__notes__", []))
    with pytest.raises(StorageError):
        space.checkpoint()                  # still full
    disk.free()
    space.checkpoint()                      # the same space and db: no reopen
    space.close()
    with ObjectSpace.open(disk.root, read_only=True) as s:
        assert dict(s.get_dict("d")) == {f"k{i}": i for i in range(200)}
    with ObjectSpace.open(disk.root, read_only=True, checkpoint=first) as s:
        assert dict(s.get_dict("d")) == {f"k{i}": i for i in range(100)}


# -- a real full file system ---------------------------------------------------------------

@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs (needs root: ``mount -t tmpfs``); skipped where it cannot be mounted."""
    if not sys.platform.startswith("linux"):
        pytest.skip("tmpfs is Linux only")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (id -u is not 0)")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip() or r.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_real_full_tmpfs(tiny_fs):
    root = str(tiny_fs / "db")
    ballast = tiny_fs / "ballast"
    st = os.statvfs(tiny_fs)
    ballast.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - 192 * 1024))   # ~192 KiB left
    run = Run(root, dict(memtable_bytes=256 * 1024, retain=3))
    rng = random.Random(7)
    failed = None
    for r in range(20):
        for i in range(40):
            key = b"k%04d" % rng.randrange(400)
            run.db.put(key, rng.randbytes(1000))      # incompressible: zstd keeps ~1 KB
            run.model[key] = run.db.get(key)
        try:
            run.checkpoint(flush=r % 3 == 2)
        except StorageError as e:
            failed = e
            break
    assert failed is not None, "the tmpfs never filled up"
    path = check_error(failed, errno.ENOSPC, "checkpoint", root)
    assert not os.path.exists(path), f"{path} was left after its write failed"
    assert run.done, "no checkpoint completed before the disk filled up"
    run.verify()
    ballast.unlink()                                   # space is freed
    run.fill(9, 50)
    run.checkpoint()
    run.db.compact(full=True)
    run.checkpoint(flush=True)
    run.verify(reopen=True)
    run.db.close()


# -- listing a folder that cannot be read ---------------------------------------------------

def test_list_of_an_unreadable_folder_is_a_storage_error(disk, tmp_path):
    store = LocalDirStore(str(tmp_path / "db"), fsync=False)
    keys = ["a/1", "a/b/2", "a/b/c/3", "a/d/4", "e/5"]
    for k in keys:
        store.put(k, b"x")
    assert [k for k, _ in store.list()] == keys
    assert store.list("missing/") == [] and store.list("a/b/c/3/") == []
    db = str(tmp_path / "db")
    for folder, prefix in [("/a/b", "a/"), ("/a/b", ""), ("/a/b/c", "a/b/c/"), ("", ""), ("/e", "e/")]:
        folder = db + folder
        disk.fail("scandir", errno.EIO, where=folder)
        with pytest.raises(StorageError) as info:
            store.list(prefix)
        disk.free()
        assert info.value.errno == errno.EIO
        assert f"cannot list {prefix!r} in {store.root}: reading the folder {folder} failed" in str(info.value)
        assert "Input/output error" in str(info.value)
    disk.fail("scandir", errno.EACCES, where="/db/a/d")
    with pytest.raises(StorageError, match=r"reading the folder .*/db/a/d failed: \[Errno 13\]"):
        store.list("a/")
    disk.free()
    assert [k for k, _ in store.list("a/")] == keys[:4]


def test_open_with_an_unreadable_manifest_folder_fails_instead_of_starting_empty(disk, tmp_path):
    """A listing cut short would show no checkpoint: a writer would start a new, empty
    store over the old one. It must fail, and open fine once the folder reads again."""
    root = str(tmp_path / "db")
    with dkv.open(LocalDirStore(root, fsync=False)) as db:
        db.put(b"k", b"v")
        db.checkpoint(1).wait()
    manifest_folders = sorted({os.path.dirname(n) for n in _walk(root) if n.endswith(".manifest")})
    assert manifest_folders
    disk.fail("scandir", errno.EIO, repeat=True, where=manifest_folders[0])
    with pytest.raises(StorageError, match=r"\[Errno 5\] Input/output error"):
        dkv.open(LocalDirStore(root, fsync=False))
    disk.free()
    with dkv.open(LocalDirStore(root, fsync=False)) as db:
        assert db.get(b"k") == b"v" and db.last_checkpoint == 1


def test_two_background_failures_before_the_next_call_are_both_reported(disk, tmp_path):
    """A background flush and a compaction that both fail before the next call: that call
    raises one StorageError naming both (the later one's errno); the next call goes on."""
    store = LocalDirStore(str(tmp_path / "db"), fsync=False)
    db = dkv.open(store, background=True, **SMALL)
    db.put(b"k", b"v")
    db.checkpoint(1).wait()
    disk.limit(0, errno.ENOSPC)
    disk.fail("scandir", errno.EIO, where=str(tmp_path / "db"))
    # the two background tasks' own failures, through the store as dkv's tasks meet them
    db._run_bg(lambda: store.put("sst/x.sst", b"table bytes"))
    db._run_bg(lambda: store.list("sst/"))
    disk.free()
    with pytest.raises(StorageError) as info:
        db.put(b"k2", b"v2")
    msg = str(info.value)
    assert info.value.errno == errno.EIO
    assert msg.startswith("background work failed (this call did nothing); completed checkpoints are intact "
                          "and it is tried again: two background tasks failed: cannot list 'sst/'"), msg
    assert "[Errno 5] Input/output error; and before it: cannot write" in msg and "[Errno 28]" in msg, msg
    db.put(b"k2", b"v2")            # reported once
    db.checkpoint(2).wait()
    db.close()
    with dkv.open(str(tmp_path / "db"), read_only=True) as r:
        assert contents(r) == {b"k": b"v", b"k2": b"v2"}
