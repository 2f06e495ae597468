"""Buffer: collect a key's rows and emit them in groups (by count, by event time, or both).

* ``count=N`` — every N rows (a tumbling buffer).
* ``count=N, skip=S`` — a buffer starts every S rows and holds N (overlapping when
  S < N, with gaps when S > N), as Rx's ``Buffer(count, skip)``.
* ``duration=D`` — event-time windows ``[k*D, (k+1)*D)``, emitted when the watermark
  passes their end.
* ``duration=D, count=N`` — the same windows, but a window's buffer is also emitted
  whenever it reaches N rows.

State per key: one queue per open buffer (only appended and popped slots are written at
a checkpoint), a value with the rows still to skip, and the set of open windows.
"""
from __future__ import annotations

from ..operator import Context, Operator


class Buffer(Operator):
    def __init__(self, count: int | None = None, skip: int | None = None, duration_ms: int | None = None,
                 key_columns: tuple = ("key",)) -> None:
        if count is None and duration_ms is None:
            raise ValueError("buffer needs count= or duration= (or both)")
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"count must be a positive int, got {count!r}")
        if skip is not None and (count is None or not isinstance(skip, int) or skip < 1):
            raise ValueError(f"skip must be a positive int and needs count=, got {skip!r}")
        if skip is not None and duration_ms is not None:
            raise ValueError("skip= works with count-based buffers only")
        if duration_ms is not None and duration_ms < 1:
            raise ValueError(f"duration must be positive, got {duration_ms!r} ms")
        self.count, self.skip, self.duration = count, skip, duration_ms
        self.key_columns = tuple(key_columns)

    def _out(self, key, items, ctx: Context, start=None) -> None:
        row = dict(zip(self.key_columns, key if len(self.key_columns) > 1 else (key,)))
        row["items"] = items
        if self.duration is not None:
            row["window_start"] = ctx.to_datetime(start)
            row["window_end"] = ctx.to_datetime(start + self.duration)
        ctx.emit(row)

    def on_event(self, key, row, ctx: Context) -> None:
        if self.duration is not None:
            return self._on_windowed(key, row, ctx)
        skip = self.skip or self.count
        if skip > self.count:
            gap = ctx.value("gap", 0)
            if gap.value:
                gap.value -= 1
                return
        q = ctx.queue("items")
        q.append(row)
        if len(q) >= self.count:
            self._out(key, list(q), ctx)
            if skip >= self.count:
                q.clear()
                if skip > self.count:
                    ctx.value("gap", 0).value = skip - self.count
            else:
                for _ in range(skip):
                    q.popleft()

    def on_initial_state(self, key, row, ctx: Context) -> None:
        """An initial row is an input row that came before the stream: it joins the key's
        buffer (or its window, by its event time) as if it had arrived first."""
        self.on_event(key, row, ctx)

    def _on_windowed(self, key, row, ctx: Context) -> None:
        ts = ctx.event_time
        start = ts - ts % self.duration
        name = f"w{start}"
        if not ctx.has_state(name):
            ctx.register_event_timer(start + self.duration, name=str(start))
        q = ctx.queue(name)
        q.append(row)
        if self.count is not None and len(q) >= self.count:
            self._out(key, list(q), ctx, start)
            q.clear()

    def on_timer(self, key, timer, ctx: Context) -> None:
        start = int(timer.name)
        name = f"w{start}"
        if ctx.has_state(name):
            items = list(ctx.queue(name))
            if items:
                self._out(key, items, ctx, start)
            ctx.delete_state(name)
