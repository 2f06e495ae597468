"""CombineLatest: for each key, the latest row of every input, emitted on each new row once
every input has produced one (Rx's ``CombineLatest`` per key).

State per key: one dict slot per input. A new row rewrites only its input's slot, so a
checkpoint writes one slot, not the whole combination (the reference design's example
of state that a whole-operator snapshot rewrites needlessly).
"""
from __future__ import annotations

from ..operator import Context, Operator

SOURCE = "__spark_ops_source"


class CombineLatest(Operator):
    """Rows come as ``{key..., SOURCE: input name, <input name>: that input's row}`` (one
    column per input holding its rows as structs), or, with ``columns`` (inputs that share
    one schema, unioned as they are), as ``{column: value..., SOURCE: input name}``: the
    input's row is then those ``columns`` of it."""

    def __init__(self, inputs: list[str], key_columns: tuple = ("key",), columns: list | None = None) -> None:
        if len(inputs) < 2:
            raise ValueError(f"combine_latest needs two or more inputs, got {inputs!r}")
        self.inputs = list(inputs)
        self.key_columns = tuple(key_columns)
        self.columns = tuple(columns) if columns is not None else None
        self._colset = None if columns is None else frozenset(columns)

    def on_event(self, key, row, ctx: Context) -> None:
        source = row[SOURCE]
        latest = ctx.dict("latest")
        if self.columns is None:
            value = row[source]
        else:
            value = dict(row)           # a copy without SOURCE: faster than picking the columns
            del value[SOURCE]
            if value.keys() != self._colset:
                value = {c: row[c] for c in self.columns}
        latest[source] = value
        inputs = self.inputs
        if len(latest) == len(inputs):
            kc = self.key_columns
            out = {kc[0]: key} if len(kc) == 1 else dict(zip(kc, key))
            for name in inputs:
                out[name] = value if name == source else latest[name]
            ctx.emit(out)

    def on_initial_state(self, key, row, ctx: Context) -> None:
        """An initial row is shaped as the output (key columns, one struct column per input):
        each input's struct that is not null becomes that input's latest row. Nothing is
        emitted; the next row of any input emits once every input has a latest row."""
        latest = None
        for name in self.inputs:
            value = row.get(name)
            if value is not None:
                if latest is None:
                    latest = ctx.dict("latest")
                latest[name] = value
