"""Functions that shard hosts run in tests/spark_ops/test_so_host.py (a host imports them by
name, so they live in a module of their own)."""
from __future__ import annotations

import time

from spark_ops import _host


def send_parts(n: int, marker: str, pause: float = 0.0) -> list:
    """Send ``n`` parts through the request's part sink, then mark the end in a file and
    return the rest of the output."""
    sink = _host.part_sink()
    for i in range(n):
        sink(i)
        time.sleep(pause)
    with open(marker, "w") as f:
        f.write("done")
    return ["rest"]


def has_sink() -> bool:
    return _host.part_sink() is not None
