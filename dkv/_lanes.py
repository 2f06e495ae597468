"""The background threads of a writer, and a count of the work queued on them.

A writer runs three single-thread executors (flush, compaction, upload). Work on one often
queues work on another (an encoding queues a flush, a flush a compaction, a compaction a
garbage collection), so "idle" cannot be read off one executor: ``Lanes`` counts every job
from the moment it is submitted until it has returned, under one condition, and
``wait_quiet`` returns when that count is zero. A job that submits another does so before it
returns, so the count never passes through zero while work remains.
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor


class Lanes:
    """One count of queued and running jobs over several single-thread executors."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0

    def lane(self, name: str) -> "Lane":
        return Lane(self, name)

    def _enter(self) -> None:
        with self._cond:
            self._active += 1

    def _leave(self) -> None:
        with self._cond:
            self._active -= 1
            if self._active == 0:
                self._cond.notify_all()

    @property
    def active(self) -> int:
        """Jobs submitted and not yet returned, on all lanes."""
        return self._active

    def wait_quiet(self, deadline: float | None = None) -> bool:
        """Block until no job is queued or running on any lane; False if ``deadline``
        (time.monotonic()) passed first."""
        with self._cond:
            while self._active:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True


class Lane(ThreadPoolExecutor):
    """A single-thread executor whose jobs ``Lanes`` counts. Jobs that a shutdown with
    ``cancel_futures=True`` drops are never counted out: the count means nothing after a
    close, and nothing waits on it then."""

    def __init__(self, lanes: Lanes, name: str) -> None:
        super().__init__(1, thread_name_prefix=name)
        self._lanes = lanes

    def submit(self, fn, /, *args, **kwargs):
        lanes = self._lanes

        def counted():
            try:
                return fn(*args, **kwargs)
            finally:
                lanes._leave()
        lanes._enter()
        try:
            return super().submit(counted)
        except BaseException:       # refused (shut down): it will never run
            lanes._leave()
            raise
