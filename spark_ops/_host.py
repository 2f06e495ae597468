"""Shard hosts: long-lived helper processes that keep shards' open state hot.

Spark hands a task to whichever of an executor's Python workers is idle, so shard 0 runs
in worker A in one batch and in worker B in the next. Each worker caches the states it
opened, but a shard that moved has to catch up on what the other worker wrote and reload
its objects — on a steady stream that is half of the batches. A shard host is a process
per executor (the workers' parent process, the "owner") and shard index: the worker that
runs a shard's task sends it the request, answers its asks for the task's rows a chunk at a
time, and gets the emitted rows back, so the shard's state stays open in one process
whichever worker Spark picked.

A host serves one request at a time. A client claims a host slot with a file lock held
for the request; when slot 0 of a shard index is busy (two queries running the same shard
index at once) it takes slot 1, and so on. A host exits when its owner is gone or it has
been idle for ``SPARK_OPS_HOST_IDLE`` seconds (default 600). If a host cannot be started
the worker runs the shard itself, as it would without hosts.

Requests and replies travel as frames (``_frames.py``: a pickle, with Arrow's buffers out
of band). Requests are ``(function, args)`` pickled with cloudpickle (the operator may be
defined in a notebook); replies are ``("ok", result)`` or ``("error", exception or None,
traceback text, the user's frames)``, after any number of ``("part", output)`` frames that
the request sent while it ran (part_sink) and of ``("ask", name, args)`` frames (the host's
asks for the task's rows, ``_host_server.ask``), each of which the worker answers at once
with ``("answer", value)`` or ``("failed", exception)`` (``_answer``).

This module is the client's side: finding or starting a shard's host and sending it a
request. The host's side is ``_host_server`` (its loop and replies), ``_host_heap`` (GC and
malloc_trim policy) and ``_host_owner`` (the owner's liveness, the metrics log).
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time

from . import _frames

try:
    import fcntl
except ImportError:     # pragma: no cover - Windows: no shard hosts, workers run shards
    fcntl = None

log = logging.getLogger(__name__)

IDLE_SECONDS = 600.0
START_SECONDS = 60.0
_CHILDREN: list = []        # hosts this process started (reaped when they exit)
ASKS = frozenset({"chunk", "distinct_keys"})
"""What a host may ask of the task's rows (spark_ops._taskrows.TaskRows; ``_answer``)."""


class HostError(RuntimeError):
    """A shard host could not be reached or died while running a request."""


def enabled(flag: bool | None) -> bool:
    """Whether to use shard hosts: ``flag`` if given, else SPARK_OPS_SHARD_HOST (default on)."""
    if fcntl is None or not hasattr(socket, "AF_UNIX"):
        return False
    if flag is not None:
        return bool(flag)
    return os.environ.get("SPARK_OPS_SHARD_HOST", "1").strip().lower() not in ("0", "false", "no", "off")


def host_dir() -> str:
    """The folder of the hosts' sockets, locks and logs. Hosts unpickle what comes in on
    their sockets, so the folder must be this user's and closed to everyone else: one made
    in a shared temp folder by somebody else (or opened up) is refused."""
    d = os.environ.get("SPARK_OPS_HOST_DIR") or os.path.join(tempfile.gettempdir(), f"spark-ops-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    st = os.stat(d)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise HostError(f"the shard host folder {d} must belong to this user (uid {os.getuid()}) with mode 700, "
                        f"not uid {st.st_uid} and mode {st.st_mode & 0o777:o}: hosts take pickled requests "
                        f"there; fix it, or point SPARK_OPS_HOST_DIR at another folder")
    return d


PROTOCOL = 2
"""The requests' protocol (2: a host asks its worker for the task's rows, spark_ops._taskrows).
It names a host's files, so a worker never sends a request to a host started by code
that speaks another one (spark_ops upgraded under a running Spark application); such a
host idles out, or ends with its owner."""


def _paths(owner: int, shard: int, slot: int) -> tuple[str, str]:
    base = os.path.join(host_dir(), f"h{owner}-p{PROTOCOL}-{shard}-{slot}")
    return base + ".sock", base + ".lock"


def call(shard: int, fn, args: tuple, *, owner: int | None = None, max_slots: int = 64):
    """Run ``fn(*args)`` in the host of ``shard`` (started if needed) and return its result.
    ``fn`` must be importable by the host (a module-level function). Raises what ``fn``
    raised, or HostError when no host could run it."""
    return _result(_call(shard, fn, args, owner, max_slots))


def call_parts(shard: int, fn, args: tuple, *, owner: int | None = None, max_slots: int = 64, rows=None):
    """``call`` for a function that sends output while it runs (``part_sink``): yields each
    part as it arrives, then the items of the function's result. Closed early, it reads
    the rest unused, so that the host finishes its request (its batch commits) before this
    worker lets another request take the host's slot. ``rows``: the task's TaskRows, which
    the host asks a chunk at a time (``_host_server.ask``) while the request runs."""
    stream = _call(shard, fn, args, owner, max_slots, rows)
    done = False
    try:
        for kind, value in stream:
            if kind == "ok":
                done = True
                yield from value
                return
            yield value
    finally:
        if not done:
            try:
                for _ in stream:
                    pass
            except Exception as e:  # noqa: BLE001 - the caller is gone; the host logged it
                log.warning("a shard host request closed early ended with %r", e)


def _call(shard: int, fn, args: tuple, owner: int | None, max_slots: int, rows=None):
    """The frames of ``fn(*args)`` run in the host of ``shard``: ("part", x) for each part
    it sends, then ("ok", result)."""
    owner = os.getppid() if owner is None else owner
    payload = _frames.dumps((fn, args), _cloudpickle())
    for slot in range(max_slots):
        sock_path, lock_path = _paths(owner, shard, slot)
        lock = open(lock_path, "a+b")
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue            # another task uses this host: try the next slot
            yield from _request(sock_path, owner, payload, rows)
            return
        finally:
            lock.close()            # closing releases the lock
    raise HostError(f"all {max_slots} host slots of shard {shard} are busy")


def _result(stream):
    for kind, value in stream:
        if kind == "ok":
            return value
        raise HostError("the shard host sent output parts to a call that takes none")


def first_run_in_task(state: str, shard: int, attempt: int, *, owner: int | None = None) -> bool:
    """False when this Spark task attempt already ran ``shard`` of ``state``: the stage that
    runs the operator was merged with another (a coalesce runs several partitions, one
    after the other, in one task, all under the task's partition number). A small file per
    owner, state and shard holds the last task attempt that ran it."""
    owner = os.getppid() if owner is None else owner
    digest = hashlib.sha1(state.encode()).hexdigest()[:16]
    path = os.path.join(host_dir(), f"t{owner}-{digest}-{shard}")
    try:
        with open(path) as f:
            if f.read() == str(attempt):
                return False
    except FileNotFoundError:
        pass
    with open(path, "w") as f:
        f.write(str(attempt))
    return True


def _cloudpickle():
    """cloudpickle (pyspark ships a copy): plain pickle cannot carry classes defined in a
    notebook or a driver script, which operators often are."""
    try:
        from pyspark import cloudpickle
    except ImportError:
        import cloudpickle
    return cloudpickle


def call_at(sock_path: str, fn, args: tuple = ()):
    """Run ``fn(*args)`` in the host listening at ``sock_path``, without starting one."""
    return _result(_request(sock_path, None, _frames.dumps((fn, args), _cloudpickle())))


def _request(sock_path: str, owner: int | None, payload: tuple[bytes, list], rows=None):
    conn = _connect(sock_path)
    if conn is None:
        if owner is None:
            raise HostError(f"no shard host listens at {sock_path}")
        proc = _start(sock_path, owner)
        conn = _connect(sock_path, wait=START_SECONDS, proc=proc)
        if conn is None:
            raise HostError(f"the shard host at {sock_path} did not start; see {sock_path[:-5]}.log")
    with conn:
        try:
            _frames.send(conn, *payload)
            while True:
                reply = _frames.loads(_frames.recv(conn))
                if reply[0] == "ask":
                    _frames.send(conn, *_answer(rows, reply[1], reply[2]))
                    continue
                if reply[0] != "part":
                    break
                yield reply
        except (OSError, EOFError) as e:
            raise HostError(f"the shard host at {sock_path} failed while running the request ({e}); "
                            f"see {sock_path[:-5]}.log") from e
    if reply[0] == "ok":
        yield reply
        return
    _, exc, text, where = reply
    if exc is None:
        raise HostError(f"the shard host raised an exception that cannot be sent back:\n{text}")
    # The user reads their exception and their own frames first; the host's whole traceback
    # is in its log. _spark_ops_remote marks it for the caller, which raises it with a short
    # trace (see _worker.partition_function).
    if hasattr(exc, "add_note"):
        exc.add_note(f"raised in the spark_ops shard host at:\n{where.rstrip()}\n"
                     f"(the whole traceback is in {sock_path[:-5]}.log)")
    try:
        exc._spark_ops_remote = True
    except AttributeError:      # an exception type without attributes: raised as it is
        pass
    raise exc


def _answer(rows, name: str, args: tuple) -> tuple[bytes, list]:
    """The frame answering a host's ask (``_host_server.ask``): what the task's rows give
    (a chunk of them as an Arrow table, sent from its own buffers), or the error, noted as
    the worker's and logged here with its traceback (the host raises it in the request)."""
    try:
        if rows is None or name not in ASKS:
            raise RuntimeError(f"spark_ops: the shard host asked {name!r} of a request that has no such rows")
        return _frames.dumps(("answer", getattr(rows, name)(*args)))
    except Exception as e:  # noqa: BLE001 - the host raises it in the request
        log.warning("answering the shard host's ask %s%r failed", name, args, exc_info=True)
        if hasattr(e, "add_note"):
            e.add_note(f"raised in the Spark worker answering the shard host's ask {name}{args!r} "
                       f"(its traceback is in the worker's log)")
        try:
            return _frames.dumps(("failed", e))
        except Exception:  # noqa: BLE001 - it does not pickle
            return _frames.dumps(("failed", RuntimeError(f"spark_ops: the Spark worker failed to answer the "
                                                         f"shard host's ask {name}{args!r}: {e!r}")))


def _connect(path: str, wait: float = 0.0, proc=None):
    """A connection to the host at ``path``; None if none answers within ``wait`` seconds
    (or as soon as ``proc``, the host being started, has exited)."""
    deadline = time.monotonic() + wait
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            return s
        except (FileNotFoundError, ConnectionRefusedError):
            s.close()
            if time.monotonic() >= deadline or (proc is not None and proc.poll() is not None):
                return None
            time.sleep(0.02)


# How a host's memory allocators are set (a variable already set is left as it is). Measured
# at 1,000,000 keys with memory="64m" (benchmarks/shard_scale.py; RFC 0005, decision 13):
# - glibc gives every thread that allocates its own heap arena (the store's flush, compaction
#   and upload threads), and arenas keep what they freed: two keep a host near its budget;
# - glibc's threshold for giving a large block its own mapping grows, by default, to the size
#   of the largest block freed (up to 32 MiB), after which a flush's segments, a compaction's
#   reads and blocks all come from the heap and leave it fragmented: a fixed 128 KiB gives them
#   back when freed (free heap after malloc_trim 65 -> 10 MB, RSS after a batch 445 -> 405 MB);
# - Arrow's own allocator (jemalloc) keeps pages it freed for later: the system allocator gives
#   a batch's input and output buffers back (RSS after a batch 405 -> 352 MB, peak 441 -> 408).
HOST_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072", "ARROW_DEFAULT_MEMORY_POOL": "system"}


def _start(sock_path: str, owner: int) -> subprocess.Popen:
    for p in list(_CHILDREN):       # reap hosts that exited (idle or orphaned)
        if p.poll() is not None:
            _CHILDREN.remove(p)
    if os.path.lexists(sock_path):
        os.unlink(sock_path)        # a host that died; we hold its slot lock
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)   # what this worker can import
    for name, value in HOST_ENV.items():
        env.setdefault(name, value)
    idle = os.environ.get("SPARK_OPS_HOST_IDLE", str(IDLE_SECONDS))
    with open(sock_path[:-5] + ".log", "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from spark_ops._host_server import main; main(sys.argv[1:])",
             "--socket", sock_path, "--owner", str(owner), "--idle", idle],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env, close_fds=True,
            start_new_session=True)
    _CHILDREN.append(proc)
    log.info("started shard host %s for owner %d", sock_path, owner)
    return proc
