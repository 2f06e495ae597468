"""Pacing of background writes, so flushes and compactions do not land as one spike.

Without pacing, a flush or a compaction runs flat out: on a host that checkpoints once per
micro-batch, the batches during which it runs compete with it for the CPU (and the GIL) and
one batch writes many times what a typical batch writes. With the option ``pace`` > 0,
every block a flush or compaction builds spends *tokens* (its tables are still cut at
``table_bytes``, so objects stay few and large):

- every completed WAL upload of a checkpoint grants ``pace`` × its bytes (at least
  ``pace`` × 16 KiB), plus half of that for each sealed memtable beyond the first and each
  L0 run past the compaction trigger, so work that falls behind catches up instead of
  piling up (without one interval doubling its bytes);
- a block may be built while the balance is positive; it may overdraw it once;
- nothing is banked: a grant replaces what is left of the previous one, and goes only to
  work in progress, so one interval spends at most one grant plus one block.

So the background writes of one checkpoint interval stay near ``pace`` times its WAL
bytes. Whenever a caller waits for background work (a write stalled on sealed
memtables, ``flush()``, ``compact()``, ``wait_idle()``, a flushing checkpoint, close),
the pacer is *hurried*: tokens are not needed until the wait is over.
"""
from __future__ import annotations

import atexit
import threading
import weakref
from contextlib import contextmanager

MIN_GRANT = 16 << 10

_live: "weakref.WeakSet[Pacer]" = weakref.WeakSet()


def _stop_all() -> None:
    """Interpreter exit with a store left open: paced work must not keep the exit waiting
    (concurrent.futures joins its worker threads at exit)."""
    for pacer in list(_live):
        pacer.stop()


# threading's exit hooks run before concurrent.futures joins its threads (newest first).
getattr(threading, "_register_atexit", atexit.register)(_stop_all)


class Pacer:
    def __init__(self, pace: float) -> None:
        self.pace = pace
        self._tokens = 0.0
        self._last_grant = 0.0
        self._hurry = 0
        self._working = 0           # flushes and compactions in progress
        self._stopped = False
        self._cond = threading.Condition()
        self.waits = 0              # tables that had to wait for a grant (for stats)
        _live.add(self)

    @property
    def enabled(self) -> bool:
        return self.pace > 0

    def grant(self, wal_bytes: int, backlog: float = 1.0) -> None:
        if not self.enabled:
            return
        with self._cond:
            amount = self.pace * max(wal_bytes, MIN_GRANT) * max(1, backlog)
            self._last_grant = amount
            # No banking: an allowance is for the work in progress now. Saved up by an idle
            # interval, it would let the next flush write two intervals' worth in one.
            self._tokens = min(self._tokens, 0.0) + (amount if self._working else 0.0)
            self._cond.notify_all()

    def take(self, nbytes: int) -> None:
        """Wait until a block of ``nbytes`` may be built, then spend the tokens."""
        if not self.enabled:
            return
        with self._cond:
            if self._tokens <= 0 and not self._hurry and not self._stopped:
                self.waits += 1
                while self._tokens <= 0 and not self._hurry and not self._stopped:
                    self._cond.wait()
            # Hurried work spends what there is but leaves no debt behind it.
            self._tokens = self._tokens - nbytes if self._tokens > 0 or not self._hurry else 0.0

    @contextmanager
    def working(self):
        """Around a flush or compaction: grants go to work in progress only."""
        with self._cond:
            self._working += 1
        try:
            yield
        finally:
            with self._cond:
                self._working -= 1

    def pause_until(self, ready) -> None:
        """Wait until ``ready()`` (checked on every wake and twice a second), unless hurried
        or stopped."""
        with self._cond:
            while not ready() and not self._hurry and not self._stopped:
                self._cond.wait(0.5)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def hurry(self, delta: int) -> None:
        """``+1`` when a caller starts waiting for background work, ``-1`` when it is done."""
        with self._cond:
            self._hurry += delta
            self._cond.notify_all()

    @contextmanager
    def hurried(self):
        self.hurry(1)
        try:
            yield
        finally:
            self.hurry(-1)

    def stop(self) -> None:
        """Closing: never wait again."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    @property
    def tokens(self) -> float:
        return self._tokens
