"""Shard hosts: long-lived helper processes that keep shards' open state hot.

Spark hands a task to whichever of an executor's Python workers is idle, so shard 0 runs
in worker A in one batch and in worker B in the next. Each worker caches the states it
opened, but a shard that moved has to catch up on what the other worker wrote and reload
its objects — on a steady stream that is half of the batches. A shard host is a process
per executor (the workers' parent process, the "owner") and shard index: the worker that
runs a shard's task sends it the task's rows and gets the emitted rows back, so the shard's
state stays open in one process whichever worker Spark picked.

A host serves one request at a time. A client claims a host slot with a file lock held
for the request; when slot 0 of a shard index is busy (two queries running the same shard
index at once) it takes slot 1, and so on. A host exits when its owner is gone or it has
been idle for ``SPARK_OPS_HOST_IDLE`` seconds (default 600). If a host cannot be started
the worker runs the shard itself, as it would without hosts.

Requests and replies travel as frames (``_frames.py``: a pickle, with Arrow's buffers out
of band). Requests are ``(function, args)`` pickled with cloudpickle (the operator may be
defined in a notebook); replies are ``("ok", result)`` or ``("error", exception or None,
traceback text)``, after any number of ``("part", output)`` frames that the request sent
while it ran (part_sink).
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import logging
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

from . import _frames

try:
    import fcntl
except ImportError:     # pragma: no cover - Windows: no shard hosts, workers run shards
    fcntl = None

log = logging.getLogger(__name__)

IDLE_SECONDS = 600.0
FULL_GC_EVERY = 200
START_SECONDS = 60.0
_PEERCRED = struct.Struct("3i")          # struct ucred: pid, uid, gid (Linux)
_CHILDREN: list = []        # hosts this process started (reaped when they exit)
_PARTS = None               # in a host, during a request: see part_sink


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


def _paths(owner: int, shard: int, slot: int) -> tuple[str, str]:
    base = os.path.join(host_dir(), f"h{owner}-{shard}-{slot}")
    return base + ".sock", base + ".lock"


def call(shard: int, fn, args: tuple, *, owner: int | None = None, max_slots: int = 64):
    """Run ``fn(*args)`` in the host of ``shard`` (started if needed) and return its result.
    ``fn`` must be importable by the host (a module-level function). Raises what ``fn``
    raised, or HostError when no host could run it."""
    return _result(_call(shard, fn, args, owner, max_slots))


def call_parts(shard: int, fn, args: tuple, *, owner: int | None = None, max_slots: int = 64):
    """``call`` for a function that sends output while it runs (``part_sink``): yields each
    part as it arrives, then the items of the function's result. Closed early, it reads
    the rest unused, so that the host finishes its request (its batch commits) before this
    worker lets another request take the host's slot."""
    stream = _call(shard, fn, args, owner, max_slots)
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


def _call(shard: int, fn, args: tuple, owner: int | None, max_slots: int):
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
            yield from _request(sock_path, owner, payload)
            return
        finally:
            lock.close()            # closing releases the lock
    raise HostError(f"all {max_slots} host slots of shard {shard} are busy")


def _result(stream):
    for kind, value in stream:
        if kind == "ok":
            return value
        raise HostError("the shard host sent output parts to a call that takes none")


def part_sink():
    """In a shard host, while it runs a request: a function that sends an output part to
    the waiting worker at once (``call_parts`` yields it there); None anywhere else. If the
    worker is gone, parts are dropped and the request goes on (its batch still commits)."""
    return _PARTS


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


def _request(sock_path: str, owner: int | None, payload: tuple[bytes, list]):
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
            [sys.executable, "-c", "import sys; from spark_ops._host import main; main(sys.argv[1:])",
             "--socket", sock_path, "--owner", str(owner), "--idle", idle],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env, close_fds=True,
            start_new_session=True)
    _CHILDREN.append(proc)
    log.info("started shard host %s for owner %d", sock_path, owner)
    return proc


def _peer_ok(conn) -> bool:
    """Whether the process at the other end of ``conn`` runs as this user (SO_PEERCRED,
    Linux). Elsewhere the folder's mode 700 is the only check (see host_dir)."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return True
    pid, uid, _ = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, opt, _PEERCRED.size))
    if uid == os.getuid():
        return True
    log.warning("refused a connection from pid %d of uid %d (this host serves uid %d only)", pid, uid, os.getuid())
    return False


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs. A zombie (exited, not yet reaped: under an init that does
    not reap, the executor's daemon can stay one) answers os.kill, so on Linux its state in
    /proc decides."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:             # no /proc (not Linux), or gone meanwhile: os.kill said enough
        return False
    # "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"Z"


def serve(sock_path: str, owner: int, idle: float) -> None:
    """The host's loop: one request at a time until the owner is gone or idle expires."""
    from ._opened import closed_count, drop_cached, evict_idle
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    tmp = f"{sock_path}.{os.getpid()}"
    server.bind(tmp)
    server.listen(16)
    os.replace(tmp, sock_path)      # visible only once it accepts connections
    inode = os.stat(sock_path).st_ino
    server.settimeout(1.0)
    last = time.monotonic()
    served = 0
    closed = closed_count()
    gc.disable()                    # see _tidy_heap
    log.info("shard host %s serving owner %d", sock_path, owner)
    try:
        while _alive(owner) and time.monotonic() - last < idle:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                conn = None
            if conn is not None:
                with conn:
                    conn.settimeout(None)
                    if _peer_ok(conn):
                        _handle(conn)
                last = time.monotonic()
                served += 1
            evict_idle(idle)        # also between requests: a stopped query's state goes
            now_closed = closed_count()
            if conn is not None or now_closed != closed:
                _tidy_heap(served, closed=now_closed != closed)    # the request or evict_idle closed a state
                closed = now_closed
    finally:
        server.close()
        drop_cached()
        _remove_files(sock_path, inode)
        if not _alive(owner):
            folder = os.path.dirname(sock_path)
            _unlink_all(folder, [n for n in os.listdir(folder) if n.startswith(f"t{owner}-")])


def _remove_files(sock_path: str, inode: int) -> None:
    """Remove the host's socket (unless a newer host replaced it), its lock and an empty log."""
    base = sock_path[:-5]
    try:
        if os.stat(sock_path).st_ino != inode:
            return
        os.unlink(sock_path)
        os.unlink(base + ".lock")
        if os.path.getsize(base + ".log") == 0:
            os.unlink(base + ".log")
    except OSError:
        pass


def _tidy_heap(served: int, closed: bool = False) -> None:
    """Keep Python's cyclic GC off the requests: a host holds millions of long-lived
    objects (every key's buffered rows), a full collection walks them all (~0.3 s at 10k
    keys) in whichever batch it happens to hit, and a request allocates ~100k containers,
    enough for several collections of its own. The automatic GC is off (``serve``); after
    each request the survivors are frozen, and every FULL_GC_EVERY requests, between
    batches, one full collection reclaims the cycles that died since (a request makes
    none on the normal path; an error's traceback does), and so does one after a cached
    state was closed (``closed``: its objects were frozen with the rest, and the cycles
    among them would keep its memory until the next one)."""
    if closed or served % FULL_GC_EVERY == 0:
        gc.unfreeze()
        gc.collect()
    gc.freeze()
    _trim()


def _load_trim():
    try:
        import ctypes
        import ctypes.util
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):      # not glibc
        return None


_MALLOC_TRIM = _load_trim() if sys.platform.startswith("linux") else None


def _trim() -> None:
    """Give the C heap's free pages back to the system after a request (glibc keeps them):
    a batch's transient buffers (Arrow input, output rows, a flush's merge) would otherwise
    stay counted against the host for good."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _handle(conn) -> None:
    try:
        fn, args = _frames.loads(_frames.recv(conn))
    except (OSError, EOFError) as e:
        log.warning("dropped a request: %s", e)
        return
    except Exception as e:  # noqa: BLE001 - cannot unpickle: tell the client
        reply = _error_reply(e)
    else:
        global _PARTS
        _PARTS = _part_sender(conn)
        try:
            reply = _frames.dumps(("ok", fn(*args)))
        except Exception as e:  # noqa: BLE001 - the task's error goes back to its worker
            reply = _error_reply(e)
        finally:
            _PARTS = None
    try:
        _frames.send(conn, *reply)
    except OSError as e:
        log.warning("the worker went away before the reply: %s", e)


def _part_sender(conn):
    """The part_sink of a request on ``conn``."""
    gone = []

    def send(part) -> None:
        if gone:
            return
        try:
            _frames.send(conn, *_frames.dumps(("part", part)))
        except OSError as e:
            gone.append(e)
            log.warning("the worker went away during its request (%s): the rest of its output is dropped, "
                        "the request goes on", e)
    return send


_OURS = tuple(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + name + os.sep
              for name in ("spark_ops", "dkv", "objectspace"))


def _where(tb) -> str:
    """The frames of a traceback that are the user's (not spark_ops', dkv's or objectspace's),
    the last three: what a user needs first, their own line."""
    frames = traceback.extract_tb(tb)
    theirs = [f for f in frames if not os.path.abspath(f.filename).startswith(_OURS)]
    return "".join(traceback.format_list(theirs[-3:] or frames[-1:]))


def _error_reply(e: BaseException) -> tuple[bytes, list]:
    text = traceback.format_exc()
    log.warning("a request failed:\n%s", text)       # the whole story stays in the host's log
    where = _where(e.__traceback__)
    try:
        return _frames.dumps(("error", e, text, where))
    except Exception:  # noqa: BLE001 - the exception itself does not pickle
        return _frames.dumps(("error", None, text, where))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="spark_ops shard host (started by spark_ops itself)")
    ap.add_argument("--socket", required=True)
    ap.add_argument("--owner", type=int, required=True)
    ap.add_argument("--idle", type=float, default=IDLE_SECONDS)
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    _metrics_log(a.socket)
    serve(a.socket, a.owner, a.idle)


METRICS_LOG_BYTES = 1 << 20     # a host's metrics log rotates at this size (one older file kept)


def _metrics_log(sock_path: str) -> None:
    """The one-line INFO summary per shard and batch (logger ``spark_ops.metrics``, see
    _progress.py) goes to ``<host>.metrics.log`` next to the host's log, rotated at 1 MiB
    with one older file kept. It stays after the host exits, until a host started later
    finds its owner (the executor's Python daemon) gone and removes it. The host's own
    ``.log`` keeps warnings and errors only (and is removed when empty, as before).
    SPARK_OPS_HOST_METRICS_LOG=0 turns it off."""
    if os.environ.get("SPARK_OPS_HOST_METRICS_LOG", "1").strip().lower() in ("0", "false", "no", "off"):
        return
    from logging.handlers import RotatingFileHandler
    folder = os.path.dirname(sock_path)
    _remove_stale_metrics_logs(folder)
    try:
        handler = RotatingFileHandler(sock_path[:-5] + ".metrics.log", maxBytes=METRICS_LOG_BYTES, backupCount=1)
    except OSError as e:
        log.warning("no metrics log: %s", e)
        return
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(message)s"))
    metrics = logging.getLogger("spark_ops.metrics")
    metrics.setLevel(logging.INFO)
    metrics.addHandler(handler)
    metrics.propagate = False       # the host's .log stays for warnings and errors


def _remove_stale_metrics_logs(folder: str) -> None:
    """Remove the metrics logs of hosts whose owner process is gone."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    stale = []
    for name in names:
        if not name.startswith("h") or ".metrics.log" not in name:
            continue
        try:
            owner = int(name[1:].split("-", 1)[0])
        except ValueError:
            continue
        if not _alive(owner):
            stale.append(name)
    _unlink_all(folder, stale)


def _unlink_all(folder: str, names: list) -> None:
    """Remove these files of ``folder``, each as far as it goes (another host may race us)."""
    for name in names:
        try:
            os.unlink(os.path.join(folder, name))
        except OSError:
            pass


if __name__ == "__main__":
    main()
