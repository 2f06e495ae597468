"""Timer-driven operators: delay, timeout and session windows (event time).

All three keep per-key state in persisted objects and wake up through event-time timers,
which fire when the watermark passes them, also in shards that got no rows.
"""
from __future__ import annotations

from ..operator import Context, Operator


_MAX_SEQ = 1 << 62


def _key_row(columns: tuple, key) -> dict:
    return dict(zip(columns, key if len(columns) > 1 else (key,)))


class _InputRowsFirst:
    """initial_state= for these operators: its rows are input rows that came before the
    stream, handled as if they had arrived first (by their event time)."""

    def on_initial_state(self, key, row, ctx: Context) -> None:
        self.on_event(key, row, ctx)


class Delay(_InputRowsFirst, Operator):
    """Emit every row once the watermark passes its event time + ``delay_ms``.

    State per key: a sorted dict ``(due, seq) -> row`` and one timer per due time."""

    def __init__(self, delay_ms: int) -> None:
        if delay_ms < 0:
            raise ValueError(f"delay must not be negative, got {delay_ms} ms")
        self.delay = delay_ms

    def on_event(self, key, row, ctx: Context) -> None:
        due = ctx.event_time + self.delay
        seq = ctx.value("seq", 0)
        seq.value += 1
        ctx.sorted_dict("pending")[(due, seq.value)] = row
        ctx.register_event_timer(due)       # one timer per (key, due time): registering twice keeps one

    def on_timer(self, key, timer, ctx: Context) -> None:
        pending = ctx.sorted_dict("pending")
        for k in list(pending.irange(maximum=(timer.time, _MAX_SEQ))):
            ctx.emit(pending.pop(k))
        if not pending:
            ctx.delete_state("pending")
            ctx.delete_state("seq")


class Timeout(_InputRowsFirst, Operator):
    """Emit ``(key, last_event, timeout_at)`` when a key has had no row for ``timeout_ms``
    of event time (measured by the watermark), then forget the key."""

    def __init__(self, timeout_ms: int, key_columns: tuple = ("key",)) -> None:
        if timeout_ms < 1:
            raise ValueError(f"timeout must be positive, got {timeout_ms} ms")
        self.timeout = timeout_ms
        self.key_columns = tuple(key_columns)

    def on_event(self, key, row, ctx: Context) -> None:
        last = ctx.value("last")
        ts = ctx.event_time
        if last.value is not None:
            if ts <= last.value:
                return
            ctx.delete_event_timer(last.value + self.timeout)
        last.value = ts
        ctx.register_event_timer(ts + self.timeout)

    def on_timer(self, key, timer, ctx: Context) -> None:
        last = ctx.value("last").value
        out = _key_row(self.key_columns, key)
        out["last_event"] = ctx.to_datetime(last)
        out["timeout_at"] = ctx.to_datetime(timer.time)
        ctx.emit(out)
        ctx.delete_state("last")


class SessionWindow(_InputRowsFirst, Operator):
    """Gap-based sessions per key: a session ends when no row arrives within ``gap_ms`` of
    its last row (event time), or when it reaches ``max_duration_ms``. Emits
    ``(key, session_start, session_end, count, items)`` when the watermark passes the end.

    Rows are taken in processing order (event order within a batch). A row at or after the
    open session's last row + gap, or at or past its maximum duration, closes it and starts
    a new one; a row less than a gap before the session's start extends it backwards.
    """

    def __init__(self, gap_ms: int, max_duration_ms: int | None = None, key_columns: tuple = ("key",),
                 items: bool = True) -> None:
        if gap_ms < 1:
            raise ValueError(f"gap must be positive, got {gap_ms} ms")
        if max_duration_ms is not None and max_duration_ms < gap_ms:
            raise ValueError("max_duration must be at least the gap")
        self.gap, self.max = gap_ms, max_duration_ms
        self.key_columns = tuple(key_columns)
        self.with_items = items

    def _deadline(self, start: int, last: int) -> int:
        end = last + self.gap
        return end if self.max is None else min(end, start + self.max)

    def on_event(self, key, row, ctx: Context) -> None:
        ts = ctx.event_time
        sess = ctx.dict("session")
        if sess:
            start, last = sess["start"], sess["last"]
            # Strict: a row exactly `gap` after the last one starts a new session, as the timer
            # at last + gap would have closed this one (the outcome must not depend on batching).
            fits = start - self.gap < ts < last + self.gap and (self.max is None or ts < start + self.max)
            if fits:
                ctx.delete_event_timer(self._deadline(start, last))
                sess["start"], sess["last"] = min(start, ts), max(last, ts)
                sess["count"] = sess["count"] + 1
                if self.with_items:
                    ctx.list("items").append(row)
                ctx.register_event_timer(self._deadline(sess["start"], sess["last"]))
                return
            ctx.delete_event_timer(self._deadline(start, last))
            self._close(key, ctx)
        sess = ctx.dict("session")
        sess.update({"start": ts, "last": ts, "count": 1})
        if self.with_items:
            ctx.list("items").append(row)
        ctx.register_event_timer(self._deadline(ts, ts))

    def on_timer(self, key, timer, ctx: Context) -> None:
        if ctx.has_state("session"):
            self._close(key, ctx)

    def _close(self, key, ctx: Context) -> None:
        sess = ctx.dict("session")
        out = _key_row(self.key_columns, key)
        out["session_start"] = ctx.to_datetime(sess["start"])
        out["session_end"] = ctx.to_datetime(sess["last"])
        out["count"] = sess["count"]
        if self.with_items:
            out["items"] = list(ctx.list("items"))
            ctx.delete_state("items")
        ctx.emit(out)
        ctx.delete_state("session")
