"""The locks of a DB, and a debug mode that checks the order they are taken in.

``DB.__init__`` makes its locks with ``make_locks()``: plain ``threading`` objects, or, when
the environment variable ``DKV_CHECK_LOCKS`` is ``1`` as the DB opens, wrappers that check
every blocking acquire against the lock order written there (``ORDER``, outermost first):

- a thread may take a lock only while it holds locks of the same DB that come *before* it
  in the order; taking one while it holds one that comes after it (an inversion, which
  can deadlock against a thread that takes them the right way round) raises
  ``LockOrderError``, naming both;
- re-entering a reentrant lock it holds is fine (``_cond`` wraps one: ``wait()`` gives it
  up and takes it back, and that is checked as a new acquire); re-acquiring a
  non-reentrant lock it holds (a certain deadlock) is an error;
- a lock marked ``not_on`` is never taken on a thread whose name starts with one of those
  prefixes (``_wlock`` on dkv's background threads: a writer stalled on them holds it);
- a non-blocking acquire (``acquire(False)``) is not checked: it cannot wait.

Every violation is also appended to ``violations`` (and logged) before it is raised: a
background thread may swallow the error (garbage collection logs and goes on), and a test
can still assert that none happened (``taken`` and ``nested`` record which locks, and which
pairs of them, a run took). Locks of different DBs are not ordered against each
other. Checking costs a few microseconds per acquire; off, the DB has the plain locks and
pays nothing.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Any, Protocol

log = logging.getLogger(__name__)

ENV = "DKV_CHECK_LOCKS"

# (name, reentrant): outermost first. DB.__init__ says what each guards.
ORDER = (("_wlock", True), ("_upload_lock", True), ("_gc_lock", False), ("_lock", True),
         ("_claim_lock", False), ("_cond", True))
# Threads that must never take a lock: dkv's background lanes (_lanes.py names them).
BACKGROUND = ("dkv-flush", "dkv-compact", "dkv-upload")
NOT_ON = {"_wlock": BACKGROUND}

violations: list[str] = []
"""Every violation found in this process, oldest first (tests clear and inspect it)."""
taken: set = set()
"""Names of the locks taken while checking (a test shows its workload took every one)."""
nested: set = set()
"""(held, taken) name pairs seen while checking: the lock graph the code really has."""


class Lock(Protocol):
    """A threading Lock or RLock, or a CheckedLock."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool: ...

    def release(self) -> None: ...

    def __enter__(self) -> bool: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any: ...


class LockHolder:
    """The locks as DB's mixins (_checkpoint.py, _gc.py, _flush.py, _refresh.py) see them: made by
    DB.__init__, which says what each one guards."""

    _wlock: Lock
    _upload_lock: Lock
    _gc_lock: Lock
    _lock: Lock
    _claim_lock: Lock
    _cond: threading.Condition


class LockOrderError(AssertionError):
    """A DB lock was taken out of order (DKV_CHECK_LOCKS=1)."""


def checking() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def make_locks(check: bool | None = None) -> dict:
    """The DB's locks by name (``_cond`` a Condition): checked ones when ``check`` (default:
    the environment says so)."""
    if check is None:
        check = checking()
    if not check:
        return {"_wlock": threading.RLock(), "_upload_lock": threading.RLock(), "_gc_lock": threading.Lock(),
                "_lock": threading.RLock(), "_claim_lock": threading.Lock(), "_cond": threading.Condition()}
    group = object()
    out: dict = {}
    for rank, (name, reentrant) in enumerate(ORDER):
        out[name] = CheckedLock(name, rank, reentrant, group, NOT_ON.get(name, ()))
    out["_cond"] = threading.Condition(out["_cond"])
    return out


_tls = threading.local()


def _held() -> list:
    """This thread's held checked locks: [lock, depth] in the order first taken."""
    try:
        return _tls.held
    except AttributeError:
        _tls.held = []
        return _tls.held


def _fail(message: str) -> None:
    violations.append(message)
    log.error("%s", message)
    raise LockOrderError(message)


class CheckedLock:
    """A Lock or RLock that checks the order it is taken in (see the module docstring).
    Has the private methods a Condition uses on its lock, so ``_cond`` can wrap one."""

    __slots__ = ("name", "rank", "reentrant", "group", "not_on", "_inner")

    def __init__(self, name: str, rank: int, reentrant: bool, group: object, not_on: tuple = ()) -> None:
        self.name, self.rank, self.reentrant, self.group, self.not_on = name, rank, reentrant, group, not_on
        self._inner: Any = threading.RLock() if reentrant else threading.Lock()

    def _check(self, held: list) -> None:
        """Before a blocking acquire: raise on a violation."""
        for lock, _ in held:
            if lock is self:
                if self.reentrant:
                    return
                _fail(f"dkv lock order: {self.name} acquired again by the thread that holds it "
                      f"({threading.current_thread().name}): it is not reentrant")
        if self.not_on:
            thread = threading.current_thread().name
            if thread.startswith(self.not_on):
                _fail(f"dkv lock order: {self.name} acquired on background thread {thread}; a writer "
                      f"holding {self.name} may be waiting for that thread")
        for lock, _ in held:
            if lock.group is not self.group:
                continue
            nested.add((lock.name, self.name))
            if lock.rank > self.rank:
                names = " > ".join(n for n, _ in ORDER)
                _fail(f"dkv lock order: {self.name} acquired while holding {lock.name} on thread "
                      f"{threading.current_thread().name} ({lock.name} comes after {self.name} in "
                      f"the order {names}; held: {', '.join(h.name for h, _ in held)})")

    def _push(self, held: list, depth: int = 1) -> None:
        for entry in held:
            if entry[0] is self:
                entry[1] += depth
                return
        held.append([self, depth])

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        held = _held()
        if blocking:
            self._check(held)
        ok = self._inner.acquire(blocking, timeout)
        if ok:
            self._push(held)
            taken.add(self.name)
        return ok

    __enter__ = acquire

    def release(self) -> None:
        self._inner.release()
        held = _held()
        for i, entry in enumerate(held):
            if entry[0] is self:
                entry[1] -= 1
                if not entry[1]:
                    del held[i]
                return

    def __exit__(self, *exc) -> None:
        self.release()

    def locked(self) -> bool:
        if self.reentrant:      # RLock has no locked() before Python 3.14
            if self._inner.acquire(False):
                self._inner.release()
                return False
            return True
        return self._inner.locked()

    # -- what threading.Condition uses (wait() releases every level, then restores them) --

    def _is_owned(self) -> bool:
        if self.reentrant:
            return self._inner._is_owned()
        return any(lock is self for lock, _ in _held())

    def _release_save(self):
        held = _held()
        depth = 0
        for i, entry in enumerate(held):
            if entry[0] is self:
                depth = entry[1]
                del held[i]
                break
        state = self._inner._release_save() if self.reentrant else self._inner.release()
        return state, depth

    def _acquire_restore(self, saved) -> None:
        state, depth = saved
        held = _held()
        self._check(held)
        if self.reentrant:
            self._inner._acquire_restore(state)
        else:
            self._inner.acquire()
        self._push(held, depth or 1)

    def __repr__(self) -> str:
        return f"<CheckedLock {self.name} rank {self.rank}>"
