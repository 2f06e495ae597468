"""The runtime floor's operator: spark_ops' count buffer with its state in a plain dict.

MemoryBuffer runs through the very same spark_ops runtime as spark_ops.buffer (Spark task,
Arrow rows to events, shard routing, callbacks, ctx.emit, output to Arrow, the commit of an
empty store) but keeps each key's rows in a Python list in the process, not in ctx.queue:
what the runtime costs without the state layer. A measuring stick only: not exactly-once,
not durable (a shard that moves to another process starts empty; its number is then still
a floor). Shard hosts unpickle the operator, so they must import this module
(spark_vs_tws.py ships it with SparkContext.addPyFile).
"""
from __future__ import annotations

import uuid

from spark_ops.operator import Operator

# run token -> key -> rows: in a shard host, across the batches it serves. One run at a time:
# a new token drops the others (a host outlives a run; the benchmark runs one at a time).
_STATES: dict[str, dict] = {}


class MemoryBuffer(Operator):
    """buffer(count) (a tumbling count buffer, as spark_ops.operators.Buffer) over a dict of lists."""

    def __init__(self, count: int, key_columns: tuple = ("user",), batches: int = 0) -> None:
        self.count = count
        self.key_columns = tuple(key_columns)
        self.batches = batches      # > 0: the dict goes after batch batches - 1 (the hosts serve later runs)
        self.token = uuid.uuid4().hex       # set on the driver: every unpickled copy of one run shares it
        self._state: dict = {}

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_state"}

    def open(self, ctx) -> None:
        state = _STATES.get(self.token)
        if state is None:
            _STATES.clear()
            state = _STATES[self.token] = {}
        self._state = state

    def on_event(self, key, row, ctx) -> None:
        items = self._state.setdefault(key, [])
        items.append(row)
        if len(items) >= self.count:
            out = dict(zip(self.key_columns, key if len(self.key_columns) > 1 else (key,)))
            out["items"] = items
            ctx.emit(out)
            self._state[key] = []

    def close(self, ctx) -> None:
        if self.batches and ctx.batch_id >= self.batches - 1:
            _STATES.pop(self.token, None)
            self._state = {}
