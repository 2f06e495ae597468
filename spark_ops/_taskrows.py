"""A task's rows in processing order, handed over a chunk at a time.

A Spark task's rows arrive in the PySpark worker (``_worker.task_table``). ``TaskRows``
orders them there (by key group, key and the order columns: ``_sort_order``) and gives
them a chunk at a time. When a shard host runs the batch, it gets a ``RemoteRows`` in the
request instead of the rows: each chunk it reaches is asked of the worker over the
request's connection (``_host_server.ask``, answered in ``_host._request``), so the host
holds one chunk of its task, not the task (RFC 0012, *Step 9*). A batch of millions of
rows then costs the host's memory what a chunk costs, and the worker, which holds the
rows anyway, holds no second copy in a frame.
"""
from __future__ import annotations

from typing import Any

CHUNK_ROWS = 1 << 14
CHUNK_BYTES = 64 << 20
"""A chunk's rows are fewer than CHUNK_ROWS where that many would take more bytes than this
(wide rows): a host holds about a chunk of its task at a time."""


class TaskRows:
    """The rows of a task (an Arrow table, or None without rows) in processing order:
    ``chunk(i)`` is the i-th slice of ``size`` rows, taken when asked (no sorted copy of the
    whole table is made). ``descending``: key groups and keys in descending order (the odd
    batches: _runtime.keys_descending)."""

    def __init__(self, table, keys, columns, order, event_time, descending: bool = False,
                 size: int = CHUNK_ROWS) -> None:
        self.table, self.keys, self.event_time = table, list(keys), event_time
        self.columns, self.order, self.descending = columns, order, descending
        self.num_rows = 0 if table is None else table.num_rows
        if self.num_rows:
            size = max(1, min(size, CHUNK_BYTES * self.num_rows // max(1, table.nbytes)))
        self.size = size
        self.indices: Any = None     # the processing order (sort): Arrow indices
        self.sort_ms = 0.0

    def sort(self) -> None:
        """Find the processing order (once; ``sort_ms`` is what it took). A key Arrow cannot
        order is a TypeError that names it."""
        if self.indices is None and self.num_rows:
            import time
            t0 = time.perf_counter()
            self.indices = _sort_order(self.table, self.keys, self.columns, self.order, self.descending)
            self.sort_ms = (time.perf_counter() - t0) * 1000

    def chunk(self, i: int):
        """Rows ``i * size`` to ``(i + 1) * size`` in processing order (an Arrow table)."""
        start = i * self.size
        if not 0 <= start < self.num_rows:
            raise IndexError(f"chunk {i} of a task of {self.num_rows} rows in chunks of {self.size}")
        self.sort()
        return self.table.take(self.indices.slice(start, self.size))

    def distinct_keys(self, beyond: int) -> int:
        """How many keys the rows hold, counted only if there are more than ``beyond`` rows
        (else the row count, an upper bound): the distinct values of the key column, the
        most of any key column's where there are several (a lower bound then; a column
        Arrow cannot count, a struct, list or dictionary, counts 0); ~100 ms for 5,000,000
        rows of 500,000 keys. Not a group_by over all key columns: Arrow's
        query engine, which that starts, stays in the process (~11 MB of RSS)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        table = self.table
        if table is None or table.num_rows <= beyond:
            return self.num_rows
        counts = [0]
        for k in self.keys:
            try:
                counts.append(pc.count_distinct(table.column(k)).as_py())
            except pa.ArrowNotImplementedError:     # a struct, list or dictionary key: not counted
                pass
        return max(counts)

    def heartbeat(self):
        """The largest event time (ms) of rows with a null key (they are dropped, but
        advance the watermark), or None."""
        table, et = self.table, self.event_time
        if table is None or not table.num_rows or et is None:
            return None
        import pyarrow.compute as pc
        nulls = None
        for k in self.keys:
            m = pc.is_null(table.column(k))
            nulls = m if nulls is None else pc.or_(nulls, m)
        if not pc.any(nulls).as_py():
            return None
        import pyarrow as pa
        col = table.filter(nulls).column(et)
        if pa.types.is_timestamp(col.type):          # its exact instants, in µs
            col = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
            top = pc.max(col).as_py()
            return None if top is None else top // 1000
        top = pc.max(col).as_py()
        return None if top is None else int(top)

    def remote(self) -> RemoteRows:
        """What a shard host's request carries in place of these rows: their count, chunk
        size, the time their sort took (made here, before the request) and the heartbeat."""
        self.sort()
        return RemoteRows(self.num_rows, self.size, self.sort_ms, self.heartbeat())


class RemoteRows:
    """TaskRows as a shard host sees them: the count, and each chunk asked of the worker
    that holds the rows when reached (``_host_server.ask``). Usable only while the host
    runs the request that carried it."""

    def __init__(self, num_rows: int, size: int, sort_ms: float = 0.0, heartbeat_ms: int | None = None) -> None:
        self.num_rows, self.size, self.sort_ms, self.heartbeat_ms = num_rows, size, sort_ms, heartbeat_ms

    def sort(self) -> None:
        """Sorted by the worker already (TaskRows.remote)."""

    def chunk(self, i: int):
        from ._host_server import ask
        return ask("chunk", i)

    def distinct_keys(self, beyond: int) -> int:
        if self.num_rows <= beyond:
            return self.num_rows
        from ._host_server import ask
        return ask("distinct_keys", beyond)

    def heartbeat(self):
        return self.heartbeat_ms


def _sort_order(table, keys, columns, order, descending: bool = False):
    """The processing order of a task's rows (Arrow; indices, None without rows): by key
    group, key, the ``order`` columns, then every other column of a plain type, so that
    ties break the same way on every run (the shuffle delivers rows in no fixed order);
    nulls first (then NaNs). ``descending``: key groups and keys in descending order (the
    odd batches: _runtime.keys_descending), the rest ascending still."""
    if table is None or not table.num_rows:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    from ._shards import KG
    ties = [c for c in columns if c not in keys and c not in order and not pa.types.is_nested(table.schema.field(c).type)]
    by = [KG] + list(keys) + list(order) + ties
    try:
        return pc.sort_indices(table, options=_sort_options(by, 1 + len(keys) if descending else 0))
    except (pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:     # apply_operator checks the types
        raise TypeError(f"spark_ops: cannot order the rows by {by[1:len(keys) + len(order) + 1]}: {e}") from e


def _sort_options(by: list, down: int = 0):
    """Descending on the first ``down`` columns, ascending on the others, nulls first
    (pyarrow >= 25 takes the null placement per column; older versions once for all)."""
    import pyarrow.compute as pc
    way = ["descending" if i < down else "ascending" for i in range(len(by))]
    try:
        return pc.SortOptions(sort_keys=[(c, w, "at_start") for c, w in zip(by, way)])
    except (TypeError, ValueError):
        return pc.SortOptions(sort_keys=list(zip(by, way)), null_placement="at_start")
