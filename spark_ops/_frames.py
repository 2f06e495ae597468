"""Frames between a Spark worker and a shard host (spark_ops/_host.py) on a Unix socket.

A frame: its length (8 bytes, big-endian), the number of out-of-band buffers (4 bytes) and
each one's length (8 bytes), then a pickle (protocol 5) and the buffers. Arrow tables and
batches travel as their own buffers, sent from and rebuilt over the bytes they occupy, not
copied into the pickle and out again (a copy of a task's rows or output was a host's and a
worker's largest transient).

Pickle carries only the requests and replies between a worker and the host it started,
two processes of one user (the trust boundary is in docs/spark_ops.md, *Shard hosts*): a
request is a function and its arguments, cloudpickled because an operator may be defined
in a notebook. Nothing here is stored: the state is msgpack in dkv, never pickle.
"""
from __future__ import annotations

import os
import pickle
import struct

from .errors import SparkOpsError

HEADER = struct.Struct(">Q")
COUNT = struct.Struct(">I")
MAX_FRAME = int(os.environ.get("SPARK_OPS_HOST_MAX_FRAME", 4 << 30))   # bytes of one request or reply
READ_STEP = 64 << 20                     # a frame's buffer grows by this as its bytes arrive


class FrameError(SparkOpsError, EOFError):
    """A frame announced a length above MAX_FRAME: the connection is dropped unread."""


def dumps(obj, pickler=pickle) -> tuple[bytes, list]:
    """(pickle, out-of-band buffers) of ``obj``, as ``send`` takes them."""
    buffers: list = []
    return pickler.dumps(obj, protocol=5, buffer_callback=buffers.append), buffers


def loads(frame: tuple[bytearray, list]):
    """The object of a frame ``recv`` returned, its buffers used in place."""
    data, buffers = frame
    return pickle.loads(data, buffers=buffers)


def send(conn, data: bytes, buffers: list = ()) -> None:
    """One frame: ``data`` (a pickle) and its out-of-band ``buffers`` (PickleBuffers or
    anything with a contiguous buffer), each sent from where it lies."""
    views = [memoryview(b).cast("B") for b in buffers]
    head = [HEADER.pack(len(data) + sum(v.nbytes for v in views)), COUNT.pack(len(views))]
    head += [HEADER.pack(v.nbytes) for v in views]
    conn.sendall(b"".join(head))
    conn.sendall(data)
    for v in views:
        conn.sendall(v)


def recv(conn) -> tuple[bytearray, list]:
    """One frame as (pickle, buffers): its 8-byte length, the buffers' count and lengths,
    then the bytes. A length above MAX_FRAME is an error before anything is read, and each
    buffer grows as its bytes arrive (by READ_STEP), so a bogus length allocates nothing it
    has not received. Each out-of-band buffer arrives in a bytearray of its own, which the
    unpickled object then uses in place."""
    (n,) = HEADER.unpack(read(conn, HEADER.size))
    if n > MAX_FRAME:
        raise FrameError(f"a frame of {n:,} bytes announced, above the limit of {MAX_FRAME:,} "
                         f"(SPARK_OPS_HOST_MAX_FRAME)")
    (count,) = COUNT.unpack(read(conn, COUNT.size))
    lengths = [ln for (ln,) in HEADER.iter_unpack(read(conn, count * HEADER.size))]
    if sum(lengths) > n:
        raise FrameError(f"a frame of {n:,} bytes announced buffers of {sum(lengths):,} bytes")
    data = read(conn, n - sum(lengths))
    return data, [read(conn, ln) for ln in lengths]


def read(conn, n: int) -> bytearray:
    """``n`` bytes from ``conn`` in a bytearray that grows by READ_STEP as they arrive."""
    buf = bytearray(min(n, READ_STEP))
    got = 0
    while True:
        with memoryview(buf) as view:
            while got < len(buf):
                k = conn.recv_into(view[got:], len(buf) - got)
                if k == 0:
                    raise EOFError(f"connection closed after {got} of {n} bytes")
                got += k
        if got == n:
            return buf
        buf += bytes(min(READ_STEP, n - got))
