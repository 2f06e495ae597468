"""LocalDirStore: objects as files in a folder, written crash-safely.

``put`` writes a temporary file, fsyncs it, renames it into place and fsyncs the
directory, so after a crash an object is either complete or absent. ``put_if_absent``
links the finished temporary file to its name (``link`` fails if the name exists), which
is atomic on POSIX file systems: a manifest's commit point. ``put_unreferenced`` (WAL
segments and SSTs, which no manifest names yet) writes the file in place, fsyncs it and
its directory: one journal commit instead of two, and no temporary file (RFC 0006).
``put_if_absent_deferred`` (a writer's claim at open) links a whole file as
``put_if_absent`` does and leaves its fsyncs to ``sync``. A folder this store creates is
made durable in its parent before anything is written in it.
"""
from __future__ import annotations

import builtins
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable

from ..errors import ObjectMissingError, StorageError
from .base import ObjectStore, check_object_key, clip_range

_TMP_PREFIX = ".tmp-"


class _OpenFile:
    """An open file of LocalDirStore's descriptor cache: ``users`` reads are in it now;
    ``dropped`` once the cache let it go (closed by whoever ends its last use)."""

    __slots__ = ("fd", "users", "dropped")

    def __init__(self, fd: int) -> None:
        self.fd, self.users, self.dropped = fd, 0, False


class LocalDirStore(ObjectStore):
    """A folder on a local (or mounted) file system. ``fsync=False`` trades durability for speed."""

    FD_CACHE = 256       # open files kept for ranged reads (SST blocks)
    local_reads = True

    def __init__(self, root: str, *, fsync: bool = True) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.location = self.root
        self.fsync = fsync
        self._fds: OrderedDict[str, _OpenFile] = OrderedDict()
        self._fd_lock = threading.Lock()
        self._dirs: set[str] = set()     # folders known to exist, durably
        # The folder is made by the first write (see _write_temp), not here: opening a
        # store to read, or to find out that there is none, creates nothing.

    def parent(self) -> tuple[ObjectStore, str] | None:
        up, name = os.path.split(self.root)
        if not name or up == self.root:
            return None
        return LocalDirStore(up, fsync=self.fsync), name

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_object_key(key).split("/"))

    def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        if start is not None or end is not None:
            return self._get_range(key, start, end)
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                if start is None and end is None:
                    return f.read()
                size = os.fstat(f.fileno()).st_size
                lo, hi = clip_range(size, start, end)
                return os.pread(f.fileno(), hi - lo, lo)
        except FileNotFoundError:
            raise ObjectMissingError(f"{path} does not exist") from None
        except OSError as e:
            raise _failed(f"cannot read {path}", e) from e

    def _get_range(self, key: str, start: int | None, end: int | None) -> bytes:
        """Ranged reads come from an open file kept in a small cache: objects are immutable,
        and an SST read is a few KB, so open/close would cost more than the read. A read
        holds its file open (``_OpenFile.users``) until its pread returns: an eviction, a
        delete or a ``close`` meanwhile leaves the closing to the last reader, so no read
        meets a closed descriptor, nor one that the number's next ``open`` gave another file."""
        lock = self._fd_lock
        with lock:
            f = self._fds.get(key)
            if f is not None:
                self._fds.move_to_end(key)
                f.users += 1
        if f is None:
            path = self._path(key)
            try:
                mine = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                raise ObjectMissingError(f"{path} does not exist") from None
            except OSError as e:
                raise _failed(f"cannot read {path}", e) from e
            drop = []
            with lock:
                f = self._fds.get(key)
                if f is None:
                    f = self._fds[key] = _OpenFile(mine)
                    mine = -1
                    while len(self._fds) > self.FD_CACHE:
                        drop.append(self._fds.popitem(last=False)[1])
                f.users += 1
        else:
            mine, drop = -1, []
        try:
            if mine >= 0:         # another reader cached the file first
                os.close(mine)
            self._drop(drop)
            lo = 0 if start is None else max(0, start)
            fd = f.fd
            if end is None:
                end = os.fstat(fd).st_size
            return os.pread(fd, max(0, end - lo), lo)
        except OSError as e:
            raise _failed(f"cannot read {key} in {self.root}", e) from e
        finally:
            with lock:
                f.users -= 1
                last = not f.users and f.dropped
            if last:
                os.close(f.fd)

    def _drop(self, files: list[_OpenFile]) -> None:
        """Close files the cache let go of, each now or (while a read uses it) by its last reader."""
        if not files:
            return
        with self._fd_lock:
            idle = []
            for f in files:
                f.dropped = True
                if not f.users:
                    idle.append(f.fd)
        for fd in idle:
            os.close(fd)

    def _forget_fd(self, key: str) -> None:
        with self._fd_lock:
            f = self._fds.pop(key, None)
        if f is not None:
            self._drop([f])

    def close(self) -> None:
        with self._fd_lock:
            files, self._fds = list(self._fds.values()), OrderedDict()
        self._drop(files)

    def _ensure_dir(self, folder: str) -> None:
        """Make ``folder`` if it is missing, and fsync the parent of each folder made: a
        file fsynced in a new folder is lost with it on a power loss if the folder's own
        name is not durable."""
        if folder in self._dirs:
            return
        made = []
        f = folder
        while not os.path.isdir(f):
            made.append(f)
            f = os.path.dirname(f)
        os.makedirs(folder, exist_ok=True)
        for d in reversed(made):
            self._sync_dir(os.path.dirname(d))
        self._dirs.add(folder)

    def _create(self, path: str, flags: int) -> int:
        folder = os.path.dirname(path)
        self._ensure_dir(folder)
        try:
            return os.open(path, flags, 0o644)
        except FileNotFoundError:       # the folder was removed under us: make it again
            self._dirs.discard(folder)
            self._ensure_dir(folder)
            return os.open(path, flags, 0o644)

    def _write_file(self, path: str, flags: int, data: bytes, sync: bool = True) -> None:
        """Write ``data`` to a new file at ``path`` and fsync it; on failure remove it."""
        fd = self._create(path, flags)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if self.fsync and sync:
                os.fsync(fd)
        except BaseException:
            # A partial file must not stay under its name; if even that fails (a failing
            # disk), the write's own error is the one to report.
            undo: Callable[[], None]
            for undo in (lambda: os.close(fd), lambda: _unlink(path)):
                try:
                    undo()
                except OSError:
                    pass
            raise
        os.close(fd)

    def _write_temp(self, path: str, data: bytes, sync: bool = True) -> str:
        tmp = os.path.join(os.path.dirname(path), f"{_TMP_PREFIX}{os.urandom(16).hex()}")
        self._write_file(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, data, sync)
        return tmp

    def _sync_dir(self, folder: str) -> None:
        if not self.fsync:
            return
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        self._forget_fd(key)
        try:
            tmp = self._write_temp(path, data)
            os.replace(tmp, path)
            self._sync_dir(os.path.dirname(path))
        except OSError as e:
            raise _failed(f"cannot write {path}", e) from e

    def put_unreferenced(self, key: str, data: bytes) -> None:
        # In place: the fsync of a new file makes its data, its inode and (ext4, xfs,
        # btrfs) its name durable in one journal commit; the directory fsync after it is
        # what POSIX asks for and writes nothing more there. A torn file left by a crash
        # has no manifest naming it: the writer's retry truncates it, GC deletes it.
        path = self._path(key)
        self._forget_fd(key)
        try:
            self._write_file(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, data)
            self._sync_dir(os.path.dirname(path))
        except OSError as e:
            raise _failed(f"cannot write {path}", e) from e

    def put_if_absent(self, key: str, data: bytes) -> bool:
        return self._put_if_absent(key, data, sync=True)

    def put_if_absent_deferred(self, key: str, data: bytes) -> bool:
        # Whole before it is linked, as put_if_absent, so a reader never sees it partial;
        # only the fsyncs wait for sync().
        return self._put_if_absent(key, data, sync=False)

    def _put_if_absent(self, key: str, data: bytes, sync: bool) -> bool:
        path = self._path(key)
        try:
            if os.path.exists(path):
                return False
            tmp = self._write_temp(path, data, sync)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                _unlink(tmp)
            if sync:
                self._sync_dir(os.path.dirname(path))
            return True
        except OSError as e:
            raise _failed(f"cannot create {path}", e) from e

    def sync(self, key: str) -> None:
        if not self.fsync:
            return
        path = self._path(key)
        try:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._sync_dir(os.path.dirname(path))
        except FileNotFoundError:
            raise ObjectMissingError(f"{path} does not exist") from None
        except OSError as e:
            raise _failed(f"cannot sync {path}", e) from e

    def list(self, prefix: str = "") -> builtins.list[tuple[str, int]]:
        """Every ``(key, size)`` under ``prefix``. Walks only the deepest folder that the
        prefix names completely. A folder that does not exist (or went away while listed)
        holds nothing; a folder that cannot be read (EIO, EACCES, ...) is a StorageError
        naming it, never a shorter listing: a caller would take the missing files for
        deleted ones."""
        head = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = os.path.join(self.root, *head.split("/")) if head else self.root
        out = []
        stack = [(base, head + "/" if head else "")]
        while stack:
            folder, rel = stack.pop()
            try:
                with os.scandir(folder) as it:
                    entries = [(e.name, e.is_dir() and not e.is_symlink()) for e in it]
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise _failed(f"cannot list {prefix!r} in {self.root}: reading the folder {folder} failed", e) from e
            for name, is_dir in entries:
                key = rel + name
                if is_dir:
                    if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                        stack.append((os.path.join(folder, name), key + "/"))
                    continue
                if name.startswith(_TMP_PREFIX) or not key.startswith(prefix):
                    continue
                try:
                    out.append((key, os.stat(os.path.join(folder, name)).st_size))
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise _failed(f"cannot list {prefix!r} in {self.root}: reading the size of {key} failed", e) from e
        out.sort()
        return out

    def delete(self, key: str) -> None:
        self._forget_fd(key)
        try:
            _unlink(self._path(key))
        except OSError as e:
            raise _failed(f"cannot delete {key} in {self.root}", e) from e

    def size(self, key: str) -> int | None:
        try:
            return os.stat(self._path(key)).st_size
        except (FileNotFoundError, NotADirectoryError):     # nothing under a file either
            return None


def _failed(what: str, e: OSError) -> StorageError:
    """``what`` failed: the StorageError says which path and why, and keeps the OS error's
    ``errno`` (``errno.ENOSPC`` on a full disk, ``errno.EIO`` on a failing one)."""
    err = StorageError(f"{what}: {e}")
    err.errno = e.errno
    return err


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError as e:
        if e.errno != errno.ENOENT:
            raise
