"""Functions that shard hosts run in tests/spark_ops/test_host.py (a host imports them by
name, so they live in a module of their own)."""
from __future__ import annotations

import time

from spark_ops import _host_server


def send_parts(n: int, marker: str, pause: float = 0.0) -> list:
    """Send ``n`` parts through the request's part sink, then mark the end in a file and
    return the rest of the output."""
    sink = _host_server.part_sink()
    for i in range(n):
        sink(i)
        time.sleep(pause)
    with open(marker, "w") as f:
        f.write("done")
    return ["rest"]


def ask_rows(name: str, args: tuple) -> list:
    """What the worker's rows answer to ``name(*args)`` (``_host_server.ask``)."""
    return [_host_server.ask(name, *args)]


def has_sink() -> bool:
    return _host_server.part_sink() is not None


_SPACES: list = []


def run_buffer_batch(state: str, batch: int) -> int:
    """One batch of a small buffer on ``state`` in this host (its state stays cached here);
    keeps weak references to the shard's object spaces (which sit in reference cycles with
    their objects) and returns how many states the host holds."""
    import weakref

    from spark_ops import _opened
    from spark_ops._runtime import ShardSpec, run_shard_batch
    from spark_ops.operators import Buffer
    spec = ShardSpec(state=state, operator=Buffer(count=5, key_columns=("k",)), key_groups=4, shards=1)
    events = sorted(((i % 4, (f"k{i}",), None, {"k": f"k{i}"}) for i in range(40)), key=lambda e: (e[0], e[1]))
    run_shard_batch(spec, batch, 0, events)
    _SPACES.extend(weakref.ref(sp) for sp in _opened._SHARDS[(state, 0, 1)].spaces.values())
    return len(_opened._SHARDS)


def spaces_alive() -> int:
    """How many of the object spaces run_buffer_batch saw are still in memory."""
    return sum(r() is not None for r in _SPACES)
