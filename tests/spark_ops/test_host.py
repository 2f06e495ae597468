"""Shard hosts (spark_ops/_host.py): a real helper process per owner and shard index that
runs a task's shard so its state stays open whichever Python worker Spark picked."""
from __future__ import annotations

import datetime as dt
import fcntl
import math
import os
import signal
import subprocess
import sys
import time

import pytest

import spark_ops
from spark_ops import _frames, _host, _host_owner, _host_server
from spark_ops._opened import drop_cached
from spark_ops._runtime import ShardSpec, keys_descending
from spark_ops._taskrows import TaskRows
from spark_ops._worker import run_task
from spark_ops.operators import Buffer


@pytest.fixture
def owner(tmp_path, monkeypatch):
    """A stand-in for the Spark worker daemon that owns the hosts: a sleeping process."""
    monkeypatch.setenv("SPARK_OPS_HOST_DIR", str(tmp_path / "hosts"))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield proc
    proc.kill()
    proc.wait()
    _wait_for(lambda: not _host_pids(tmp_path / "hosts"), "hosts to exit after their owner")


def _host_pids(folder) -> list:
    if not folder.exists():
        return []
    out = []
    for sock in folder.glob("*.sock"):
        pid = _pid_of(sock)
        if pid is not None:
            out.append(pid)
    return out


def _pid_of(sock):
    try:
        return _host.call_at(str(sock), os.getpid)
    except _host.HostError:
        return None


def _wait_for(cond, what: str, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_call_runs_in_a_host_process_that_stays(owner):
    first = _host.call(0, os.getpid, (), owner=owner.pid)
    assert first != os.getpid()
    assert _host.call(0, os.getpid, (), owner=owner.pid) == first     # the same host again
    other = _host.call(1, os.getpid, (), owner=owner.pid)
    assert other not in (first, os.getpid())                          # one host per shard index
    assert _host.call(0, math.hypot, (3, 4), owner=owner.pid) == 5.0


def test_a_host_starts_with_its_allocator_settings_unless_the_worker_sets_them(owner, monkeypatch):
    """glibc's arenas and mmap threshold and Arrow's allocator, as RFC 0005 decision 13 set
    them; a variable the worker's environment sets is left as it is."""
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    got = {name: _host.call(0, os.getenv, (name,), owner=owner.pid) for name in _host.HOST_ENV}
    assert got == {**_host.HOST_ENV, "MALLOC_MMAP_THRESHOLD_": "65536"}
    assert _host.HOST_ENV == {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": "131072",
                              "ARROW_DEFAULT_MEMORY_POOL": "system"}


def test_the_task_error_comes_back_with_its_type_and_message(owner):
    with pytest.raises(ValueError, match="math domain error") as info:
        _host.call(0, math.sqrt, (-1,), owner=owner.pid)
    assert "raised in the spark_ops shard host" in "".join(getattr(info.value, "__notes__", []))
    assert _host.call(0, math.sqrt, (4,), owner=owner.pid) == 2.0     # the host survived it


def test_a_busy_slot_sends_the_task_to_the_next_host(owner, tmp_path):
    first = _host.call(0, os.getpid, (), owner=owner.pid)
    _, lock_path = _host._paths(owner.pid, 0, 0)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)      # as a task running in slot 0 would
        second = _host.call(0, os.getpid, (), owner=owner.pid)
    assert second != first
    assert os.path.exists(_host._paths(owner.pid, 0, 1)[0])
    assert _host.call(0, os.getpid, (), owner=owner.pid) == first     # slot 0 is free again


def test_a_killed_host_is_replaced_on_the_next_call(owner):
    first = _host.call(0, os.getpid, (), owner=owner.pid)
    os.kill(first, signal.SIGKILL)
    _wait_for(lambda: not _alive(first), "the killed host to go")
    second = _host.call(0, os.getpid, (), owner=owner.pid)
    assert second not in (first, os.getpid())


def test_hosts_exit_and_clean_up_when_their_owner_dies(owner, tmp_path):
    pids = [_host.call(s, os.getpid, (), owner=owner.pid) for s in range(2)]
    owner.kill()
    owner.wait()
    _wait_for(lambda: not any(_alive(p) for p in pids), "the hosts to exit")
    assert not list((tmp_path / "hosts").glob("*.sock"))
    assert not list((tmp_path / "hosts").glob("*.lock"))


def test_hosts_exit_when_idle(owner, tmp_path, monkeypatch):
    monkeypatch.setenv("SPARK_OPS_HOST_IDLE", "1")
    pid = _host.call(0, os.getpid, (), owner=owner.pid)
    _wait_for(lambda: not _alive(pid), "the idle host to exit")


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)     # reap it if it is our child
    except ChildProcessError:
        pass
    return _host_owner._alive(pid)


def test_a_shard_runs_the_same_in_a_host_as_in_the_worker(owner, tmp_path):
    """run_task through the host and in this process: same emitted rows, same state."""
    import pyarrow as pa
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)

    def batch(b):
        rows = [{"user": f"u{k}", "ts": t0 + dt.timedelta(seconds=b * 10 + j), "__spark_ops_kg": 0,
                 "__spark_ops_token": 0} for k in range(3) for j in range(2)]
        return pa.Table.from_pylist(rows)   # ts: timestamp[us, tz=UTC], as Spark sends it

    out = {}
    asked = []
    for mode in ("host", "streamed", "worker"):
        spec = ShardSpec(state=str(tmp_path / mode), operator=Buffer(count=3, key_columns=("user",)),
                         event_time="ts", key_groups=4, shards=1)
        got = []
        for b in range(4):
            args = (spec, b, 0, batch(b), ["user"], ["user", "ts"], ["ts"], {"ts": "__spark_ops_us0"}, False,
                    None, 1000 * b)
            if mode == "host":          # the rows in the request (run_task orders them in the host)
                got.append(_host.call(0, run_task, args, owner=owner.pid))
            elif mode == "streamed":    # as the worker sends them: asked a chunk at a time
                rows = _Counted(args[3], ["user"], ["user", "ts"], ["ts"], "ts", keys_descending(b), size=4)
                got.append(list(_host.call_parts(0, run_task, (*args[:3], rows.remote(), *args[4:]),
                                                 owner=owner.pid, rows=rows)))
                asked.append(rows.asked)
            else:
                got.append(run_task(*args))
        drop_cached(spec.state)
        out[mode] = got
    assert out["host"] == out["streamed"] == out["worker"]
    assert sum(len(g) for g in out["host"]) == 6      # 3 keys x 8 rows -> two buffers of 3 each
    # 6 rows a batch in chunks of 4: two chunks, each asked once, in order; the key count is
    # asked only of a batch with more rows than the shard's cache could hold handles for (none)
    assert asked == [[("chunk", 0), ("chunk", 1)]] * 4


class _Counted(TaskRows):
    """TaskRows that note what a host asked of them."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list = []

    def chunk(self, i: int):
        self.asked.append(("chunk", i))
        return super().chunk(i)

    def distinct_keys(self, beyond: int) -> int:
        self.asked.append(("distinct_keys", beyond))
        return super().distinct_keys(beyond)


class _FailsAt(TaskRows):
    """TaskRows whose chunk ``at`` cannot be had (the worker failed to take it)."""

    def __init__(self, *args, at: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.at = at

    def chunk(self, i: int):
        if i == self.at:
            raise MemoryError(f"chunk {i}")
        return super().chunk(i)


def test_a_batch_whose_rows_fail_midway_does_not_commit(owner, tmp_path):
    """A chunk the worker cannot give fails the host's request after the batch's first chunk
    ran: the batch does not commit, and its rerun (Spark's next attempt) gives what a batch
    run once gives."""
    import pyarrow as pa
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    table = pa.Table.from_pylist([{"user": f"u{k}", "ts": t0 + dt.timedelta(seconds=j), "__spark_ops_kg": 0,
                                   "__spark_ops_token": 0} for k in range(4) for j in range(3)])
    cols = (["user"], ["user", "ts"], ["ts"])
    out = {}
    for mode in ("failed once", "once"):
        spec = ShardSpec(state=str(tmp_path / mode.replace(" ", "-")), operator=Buffer(count=2, key_columns=("user",)),
                         event_time="ts", key_groups=4, shards=1)
        args = (spec, 0, 0, None, *cols, {"ts": "__spark_ops_us0"}, False, None, 0)
        if mode == "failed once":
            bad = _FailsAt(table, *cols, "ts", size=5, at=1)
            with pytest.raises(MemoryError, match="chunk 1") as failed:
                list(_host.call_parts(0, run_task, (*args[:3], bad.remote(), *args[4:]), owner=owner.pid, rows=bad))
            assert "raised in the Spark worker answering the shard host's ask chunk(1,)" in str(failed.value.__notes__)
            assert spark_ops.read_metrics(spec.state) == []       # nothing of the batch committed
        rows = TaskRows(table, *cols, "ts", size=5)
        out[mode] = list(_host.call_parts(0, run_task, (*args[:3], rows.remote(), *args[4:]), owner=owner.pid,
                                          rows=rows))
        drop_cached(spec.state)
    assert out["failed once"] == out["once"] and len(out["once"]) == 4    # 4 keys x 3 rows: a pair each


def _task(n_keys: int, per_key: int):
    import pyarrow as pa
    t0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    return pa.Table.from_pylist([{"user": f"u{k:05d}", "ts": t0 + dt.timedelta(seconds=j), "__spark_ops_kg": k % 4,
                                  "__spark_ops_token": 0} for k in range(n_keys) for j in range(per_key)])


_COLS = (["user"], ["user", "ts"], ["ts"])


def test_a_stream_closed_early_still_gives_the_host_its_rows(owner, tmp_path):
    """The task stops reading after the first output part, while the host has chunks still
    to ask: the worker's drain answers them, so the batch runs whole and commits."""
    import pyarrow as pa
    out_schema = pa.schema([("user", pa.string()), ("items", pa.list_(pa.struct(
        [("user", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])))])
    spec = ShardSpec(state=str(tmp_path / "s"), operator=Buffer(count=1, key_columns=("user",)),
                     event_time="ts", key_groups=4, shards=1)
    rows = _Counted(_task(1000, 4), *_COLS, "ts", size=500)
    args = (spec, 0, 0, rows.remote(), *_COLS, {"ts": "__spark_ops_us0"}, False, out_schema, 0)
    parts = _host.call_parts(0, run_task, args, owner=owner.pid, rows=rows)
    first = next(parts)
    assert first.num_rows >= 1 and len(rows.asked) < 8      # a part came before the last chunk was asked
    parts.close()
    assert rows.asked == [("chunk", i) for i in range(8)]
    [m] = [m for m in spark_ops.read_metrics(spec.state) if m.get("batch") == 0]
    assert m["rows"] == 4000 and m["emitted"] == 4000


def test_a_big_task_has_its_keys_counted_by_the_worker(owner, tmp_path):
    """A task with more rows than the shard's cache holds handles: the host asks the worker
    how many keys its rows hold (the shares before the first event, ShardState.meet_keys)."""
    spec = ShardSpec(state=str(tmp_path / "s"), operator=Buffer(count=5, key_columns=("user",)),
                     event_time="ts", key_groups=4, shards=1, memory=1 << 20)
    rows = _Counted(_task(3000, 2), *_COLS, "ts")
    args = (spec, 0, 0, rows.remote(), *_COLS, {"ts": "__spark_ops_us0"}, False, None, 0)
    list(_host.call_parts(0, run_task, args, owner=owner.pid, rows=rows))
    [(_, beyond)] = [a for a in rows.asked if a[0] == "distinct_keys"]
    assert 0 < beyond < 6000 and rows.distinct_keys(beyond) == 3000


def test_a_worker_gone_before_its_rows_were_asked_commits_nothing(owner, tmp_path):
    """The worker's connection closes right after its request: the host's ask for the first
    chunk fails, the batch does not commit, and the host serves on."""
    import socket
    pid = _host.call(0, os.getpid, (), owner=owner.pid)
    [sock] = (tmp_path / "hosts").glob("*.sock")
    spec = ShardSpec(state=str(tmp_path / "s"), operator=Buffer(count=5, key_columns=("user",)),
                     event_time="ts", key_groups=4, shards=1)
    rows = TaskRows(_task(10, 2), *_COLS, "ts")
    args = (spec, 0, 0, rows.remote(), *_COLS, {"ts": "__spark_ops_us0"}, False, None, 0)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    _frames.send(s, *_frames.dumps((run_task, args), _host._cloudpickle()))
    s.close()
    assert _host.call(0, os.getpid, (), owner=owner.pid) == pid      # served after that request ended
    assert spark_ops.read_metrics(spec.state) == []
    assert "a request failed" in sock.with_suffix(".log").read_text()


def test_an_answer_that_does_not_pickle_is_still_one_frame():
    """An error while answering that cannot be sent as it is goes back as a RuntimeError
    that names the ask and the error: the host reads one frame either way."""
    import threading

    class Unpicklable(Exception):
        def __init__(self) -> None:
            super().__init__("no")
            self.lock = threading.Lock()

    class Rows:
        def chunk(self, i):
            raise Unpicklable()

    kind, err = _frames.loads(_rebuffered(_host._answer(Rows(), "chunk", (3,))))
    assert kind == "failed" and isinstance(err, RuntimeError)
    assert "failed to answer the shard host's ask chunk(3,)" in str(err) and "Unpicklable('no')" in str(err)
    kind, err = _frames.loads(_rebuffered(_host._answer(Rows(), "table", ())))
    assert kind == "failed" and "asked 'table' of a request that has no such rows" in str(err)


def _rebuffered(frame):
    data, buffers = frame
    return bytearray(data), [bytearray(memoryview(b).cast("B")) for b in buffers]


def test_a_host_asks_only_for_rows_and_a_failed_answer_fails_its_request(owner, tmp_path):
    """What the host asks of the worker's rows is answered from a fixed set (anything else
    is refused, by name); an error while answering is raised in the host's request and
    comes back to the worker as the request's error; a host function that asks outside a
    request is told so."""
    import pyarrow as pa
    from .host_parts import ask_rows

    rows = TaskRows(pa.table({"k": [1, 2, 3]}), ["k"], ["k"], [], None, size=2)
    assert _host.call_parts(0, ask_rows, ("distinct_keys", (0,)), owner=owner.pid, rows=rows).__next__() == 3
    with pytest.raises(RuntimeError, match="asked 'table' of a request that has no such rows"):
        list(_host.call_parts(0, ask_rows, ("table", ()), owner=owner.pid, rows=rows))
    with pytest.raises(RuntimeError, match="asked 'chunk' of a request that has no such rows"):
        list(_host.call_parts(0, ask_rows, ("chunk", (0,)), owner=owner.pid))
    with pytest.raises(IndexError, match="chunk 2 of a task of 3 rows in chunks of 2"):
        list(_host.call_parts(0, ask_rows, ("chunk", (2,)), owner=owner.pid, rows=rows))
    with pytest.raises(_host.HostError, match="outside a shard host's request"):
        _host_server.ask("chunk", 0)
    assert _host.call(0, os.getpid, (), owner=owner.pid) > 0     # the host serves on


def test_a_task_attempt_runs_a_shard_once(owner):
    """What detects a coalesce after the operator: one task attempt running a shard twice."""
    assert _host.first_run_in_task("/s/a", 0, 101, owner=owner.pid)
    assert not _host.first_run_in_task("/s/a", 0, 101, owner=owner.pid)     # merged partitions
    assert _host.first_run_in_task("/s/a", 1, 101, owner=owner.pid)         # another shard
    assert _host.first_run_in_task("/s/b", 0, 101, owner=owner.pid)         # another state
    assert _host.first_run_in_task("/s/a", 0, 102, owner=owner.pid)         # a retry / next batch


def test_a_host_that_cannot_start_is_reported_at_once(owner, tmp_path, monkeypatch):
    """A host that dies at start (here its "interpreter" exits at once) is a HostError
    naming its log, without waiting out the start timeout."""
    monkeypatch.setattr(_host.sys, "executable", "/bin/false")
    t0 = time.monotonic()
    with pytest.raises(_host.HostError, match=r"did not start; see .*\.log"):
        _host.call(3, os.getpid, (), owner=owner.pid)
    assert time.monotonic() - t0 < _host.START_SECONDS / 2


def test_a_host_folder_others_can_reach_is_refused(tmp_path, monkeypatch):
    """Hosts unpickle requests from their sockets: the folder must be closed to others."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("SPARK_OPS_HOST_DIR", str(shared))
    with pytest.raises(_host.HostError, match=r"must belong to this user .* mode 700.* mode 777"):
        _host.call(0, math.sqrt, (4.0,), owner=os.getpid())
    assert list(shared.iterdir()) == []         # no socket, lock or host started
    shared.chmod(0o700)
    assert _host.host_dir() == str(shared)


def test_a_frame_above_the_limit_is_dropped_unread_and_the_host_goes_on(owner, tmp_path):
    """A request whose header announces more than MAX_FRAME bytes (a bogus or hostile
    length: 2**40 here) is dropped before any buffer is made for it, with a line in the
    host's log; the host serves the next request."""
    import socket
    pid = _host.call(0, os.getpid, (), owner=owner.pid)
    [sock] = (tmp_path / "hosts").glob("*.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    s.sendall(_frames.HEADER.pack(1 << 40) + b"x" * 100)
    s.settimeout(10)
    try:
        assert s.recv(1) == b""             # closed without an answer ...
    except ConnectionResetError:            # ... and with our bytes unread: a reset
        pass
    s.close()
    assert _host.call(0, os.getpid, (), owner=owner.pid) == pid
    log = sock.with_suffix(".log").read_text()
    assert "1,099,511,627,776 bytes announced" in log and "SPARK_OPS_HOST_MAX_FRAME" in log


def test_frames_above_the_read_step_arrive_whole(monkeypatch):
    """A frame longer than the buffer step is read in steps, byte for byte; one above the
    limit is a FrameError (an EOFError: the connection is dropped)."""
    import socket
    a, b = socket.socketpair()
    monkeypatch.setattr(_frames, "READ_STEP", 1000)
    data = os.urandom(4321)
    _frames.send(a, data)
    assert _frames.recv(b) == (data, [])
    monkeypatch.setattr(_frames, "MAX_FRAME", 4000)
    _frames.send(a, data)
    with pytest.raises(_frames.FrameError, match="4,321 bytes announced"):
        _frames.recv(b)
    a.close()
    b.close()


def test_arrow_travels_as_out_of_band_buffers_and_is_rebuilt_over_them(monkeypatch):
    """A pickle of Arrow data carries none of its bytes: they follow as buffers of their own
    (read in steps like any frame) and the table is rebuilt over the received bytearrays,
    equal to what was sent. Buffers that claim more bytes than the frame are a FrameError."""
    import socket
    import threading

    import pyarrow as pa
    monkeypatch.setattr(_frames, "READ_STEP", 1 << 12)
    table = pa.table({"k": pa.array([f"key{i}" for i in range(20_000)]), "v": pa.array(range(20_000))})
    a, b = socket.socketpair()
    data, buffers = _frames.dumps(("ok", [table, b"small"]))
    assert len(data) < 2000 and sum(memoryview(x).nbytes for x in buffers) >= table.nbytes
    sender = threading.Thread(target=_frames.send, args=(a, data, buffers))   # frames beyond the socket's buffer
    sender.start()
    got = _frames.recv(b)
    sender.join()
    assert all(type(x) is bytearray for x in got[1])
    status, (back, small) = _frames.loads(got)
    assert status == "ok" and back.equals(table) and small == b"small"
    col = back.column("v").chunk(0).buffers()[1]
    assert any(col.address == pa.py_buffer(x).address for x in got[1])     # in place, not copied
    a.sendall(_frames.HEADER.pack(10) + _frames.COUNT.pack(1) + _frames.HEADER.pack(11))
    with pytest.raises(_frames.FrameError, match="buffers of 11 bytes"):
        _frames.recv(b)
    a.close()
    b.close()


def test_a_peer_of_another_user_is_refused(monkeypatch, caplog):
    """SO_PEERCRED: the process at the other end runs as this user, or the host refuses it
    unread and logs who it was (here the host is made to believe it serves another uid)."""
    import socket
    a, b = socket.socketpair()
    assert _host_server._peer_ok(b)
    me = os.getuid()
    monkeypatch.setattr(_host_server.os, "getuid", lambda: me + 1)
    with caplog.at_level("WARNING", logger="spark_ops._host"):
        assert not _host_server._peer_ok(b)
    assert f"of uid {me} (this host serves uid {me + 1} only)" in caplog.text
    a.close()
    b.close()


def test_a_request_streams_its_parts_then_its_result(owner, tmp_path):
    """call_parts yields each part the host's part_sink sends, as it comes, then the items
    of the result; a plain call refuses parts; outside a request there is no sink."""
    from .host_parts import has_sink, send_parts
    marker = tmp_path / "m"
    assert list(_host.call_parts(0, send_parts, (3, str(marker)), owner=owner.pid)) == [0, 1, 2, "rest"]
    assert marker.read_text() == "done"
    assert _host.call(0, has_sink, (), owner=owner.pid) is True
    assert _host_server.part_sink() is None
    with pytest.raises(_host.HostError, match="parts"):
        _host.call(0, send_parts, (1, str(marker)), owner=owner.pid)


def test_a_stream_closed_early_lets_the_request_finish_before_the_slot_is_free(owner, tmp_path):
    """A consumer that stops after the first part (a Spark task that stops reading): the
    worker reads the rest unused, so the host's request ends (its batch commits) before the
    slot's lock is released; the same host then serves the next call."""
    from .host_parts import send_parts
    pid = _host.call(0, os.getpid, (), owner=owner.pid)
    marker = tmp_path / "m"
    parts = _host.call_parts(0, send_parts, (20, str(marker), 0.02), owner=owner.pid)
    assert next(parts) == 0
    parts.close()
    assert marker.read_text() == "done"
    assert _host.call(0, os.getpid, (), owner=owner.pid) == pid


def test_a_worker_gone_mid_stream_does_not_stop_the_request(owner, tmp_path):
    """The worker's connection closes while the host sends parts: the host drops the rest
    of the output, finishes the request and goes on serving."""
    import socket

    from .host_parts import send_parts
    pid = _host.call(0, os.getpid, (), owner=owner.pid)
    [sock] = (tmp_path / "hosts").glob("*.sock")
    marker = tmp_path / "m"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(sock))
    _frames.send(s, *_frames.dumps((send_parts, (200, str(marker), 0.005)), _host._cloudpickle()))
    s.close()
    _wait_for(marker.exists, "the request to finish")
    assert _host.call(0, os.getpid, (), owner=owner.pid) == pid
    assert "the worker went away during its request" in sock.with_suffix(".log").read_text()


def test_a_state_the_host_closes_leaves_its_memory(owner, tmp_path):
    """A host freezes what survives each request (no GC walks it in a batch), so a state it
    closes — dropped at the end of its input, or by the stale-state rule — would keep the
    objects of its reference cycles until the next full collection, 200 requests later.
    A request after which the host holds fewer states ends with one."""
    from .host_parts import run_buffer_batch, spaces_alive

    from spark_ops import _opened
    assert _host.call(0, run_buffer_batch, (str(tmp_path / "a"), 0), owner=owner.pid) == 1
    assert _host.call(0, run_buffer_batch, (str(tmp_path / "a"), 1), owner=owner.pid) == 1
    assert _host.call(0, spaces_alive, (), owner=owner.pid) > 0
    _host.call(0, _opened.drop_cached, (str(tmp_path / "a"),), owner=owner.pid)
    assert _host.call(0, spaces_alive, (), owner=owner.pid) == 0
    assert _host.call(0, run_buffer_batch, (str(tmp_path / "a"), 2), owner=owner.pid) == 1   # reopens


def test_a_zombie_owner_is_not_alive():
    """A host outlived its worker when the worker's daemon was a zombie (exited, not reaped:
    os.kill(pid, 0) still succeeds); the host now reads the process state (issue 32)."""
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _host_owner._zombie(child.pid):
            time.sleep(0.01)            # exited, and not reaped: we have not waited for it
        assert _host_owner._zombie(child.pid)
        assert not _host_owner._alive(child.pid)
    finally:
        child.wait()
    assert not _host_owner._alive(child.pid)
    assert _host_owner._alive(os.getpid()) and not _host_owner._zombie(os.getpid())


def test_a_host_of_another_protocol_is_never_asked(owner, tmp_path, monkeypatch):
    """A host's files carry the requests' protocol: a worker whose spark_ops speaks another
    one (an upgrade under a running application) starts its own host rather than send a
    request the old host could not read; the old one serves its own callers still."""
    old = _host.call(0, os.getpid, (), owner=owner.pid)
    monkeypatch.setattr(_host, "PROTOCOL", _host.PROTOCOL + 1)
    new = _host.call(0, os.getpid, (), owner=owner.pid)
    assert new != old
    assert {p.name.split("-")[1] for p in (tmp_path / "hosts").glob("*.sock")} == {
        f"p{_host.PROTOCOL - 1}", f"p{_host.PROTOCOL}"}
    monkeypatch.setattr(_host, "PROTOCOL", _host.PROTOCOL - 1)
    assert _host.call(0, os.getpid, (), owner=owner.pid) == old
