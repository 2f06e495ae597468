"""The shard host's side (see ``_host``, which starts hosts and sends them requests): the
serving loop, one request at a time, and what a request's reply carries. ``main`` is the
host process's entry point. Heap policy is in ``_host_heap``, the owner's liveness and
the metrics log in ``_host_owner``."""
from __future__ import annotations

import argparse
import gc
import logging
import os
import socket
import struct
import time
import traceback

from . import _frames
from ._host import IDLE_SECONDS
from ._host_heap import _tidy_heap
from ._host_owner import _alive, _metrics_log, _unlink_all

log = logging.getLogger("spark_ops._host")

_PEERCRED = struct.Struct("3i")          # struct ucred: pid, uid, gid (Linux)
_PARTS = None               # during a request: see part_sink
_CONN = None                # during a request: its connection (see ask)


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


def _handle(conn) -> None:
    try:
        fn, args = _frames.loads(_frames.recv(conn))
    except (OSError, EOFError) as e:
        log.warning("dropped a request: %s", e)
        return
    except Exception as e:  # noqa: BLE001 - cannot unpickle: tell the client
        reply = _error_reply(e)
    else:
        global _PARTS, _CONN
        _PARTS, _CONN = _part_sender(conn), conn
        try:
            reply = _frames.dumps(("ok", fn(*args)))
        except Exception as e:  # noqa: BLE001 - the task's error goes back to its worker
            reply = _error_reply(e)
        finally:
            _PARTS = _CONN = None
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


def ask(name: str, *args):
    """In a shard host, while it runs a request: what the waiting worker's TaskRows give for
    ``name(*args)`` (``_host.ASKS``; answered in ``_host._request``), e.g. a chunk of the
    task's rows. The worker answers asks only: it sends nothing the host did not ask for, so
    neither side waits on the other with data in flight both ways."""
    conn = _CONN
    if conn is None:
        from ._host import HostError
        raise HostError(f"spark_ops: {name!r} asked of a worker outside a shard host's request")
    _frames.send(conn, *_frames.dumps(("ask", name, args)))
    kind, value = _frames.loads(_frames.recv(conn))
    if kind == "answer":
        return value
    raise value


def part_sink():
    """In a shard host, while it runs a request: a function that sends an output part to
    the waiting worker at once (``call_parts`` yields it there); None anywhere else. If the
    worker is gone, parts are dropped and the request goes on (its batch still commits)."""
    return _PARTS


if __name__ == "__main__":
    main()
