"""Pure-Python reference models of the spark_ops operators and of the runtime's batch rules.

Written from the specification (issue 6, DESIGN.md §3, the operator docstrings), not from the
implementation, so a test that compares the two finds a disagreement in either.

The runtime rules modelled by ``run_model`` (what every operator sees):

* Batches run in order. The event-time watermark of batch ``b`` is ``max(event time of every
  row of batches < b) - delay`` (None in batch 0 and while no row had an event time). Without an
  ``event_time`` column there is no watermark.
* Rows with an event time below the batch's watermark are dropped (late), as in Spark, when the
  operator was given ``watermark=`` (without it nothing is dropped; ``run_model(drop_late=False)``). Rows whose
  key has a null part are dropped.
* Within a batch, each key's rows are handled in ``order_by`` order (default: event time), ties
  in input order; keys are independent of each other.
* After the rows, the watermark fires what is due (``due <= watermark``), in due order per key.

Outputs are compared per batch and per key, in order: ``by_key(rows, keys)``.

* With several inputs (``inputs`` and the ``input_column`` naming a row's input) there is one
  basis per input and the watermark is ``min over inputs - delay``, None until every input has had
  an event time (Spark's ``multipleWatermarkPolicy=min``).

Event times are ints (ms since the Unix epoch) or datetimes (naive = UTC). Output timestamps are
timezone-aware UTC datetimes, as ``Context.to_datetime`` makes them; comparisons go through
``canon``, so Spark's naive values (in a UTC session) compare equal to them.
"""
from __future__ import annotations

import datetime as dt
from collections import defaultdict

EPOCH = dt.datetime(1970, 1, 1)
EPOCH_UTC = EPOCH.replace(tzinfo=dt.timezone.utc)


def to_dt(ms: int) -> dt.datetime:
    """The instant ``ms`` as a timezone-aware UTC datetime."""
    return EPOCH_UTC + dt.timedelta(milliseconds=ms)


def to_ms(v) -> int | None:
    """Event time as int ms: ints pass, naive datetimes are UTC."""
    if v is None:
        return None
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return (v - EPOCH) // dt.timedelta(milliseconds=1)
    return int(v)


def key_of(row: dict, keys) -> tuple:
    return tuple(row[k] for k in keys)


def key_row(keys, key: tuple) -> dict:
    return dict(zip(keys, key))


# ------------------------------------------------------------------------- the driver


def run_model(model, batches, *, keys, event_time=None, delay_ms: int = 0, order_by=None, inputs=None,
              input_column=None, drop_late: bool = True):
    """Run ``model`` over ``batches`` (lists of row dicts); one list of output rows per batch.
    ``drop_late=False`` models an operator without ``watermark=``: the watermark (delay 0)
    fires timers, but no row is dropped as late.

    model: has ``on_row(key, ts, row) -> [out]`` and ``on_watermark(wm) -> [out]``.
    """
    keys = [keys] if isinstance(keys, str) else list(keys)
    order = [order_by] if isinstance(order_by, str) else list(order_by or ([event_time] if event_time else []))
    bases: dict = {}        # input (None: the only one) -> max event time of earlier batches
    outputs = []
    for rows in batches:
        needed = list(inputs) if inputs else [None]
        wm = min(bases[i] for i in needed) - delay_ms if all(i in bases for i in needed) else None
        per_key: dict[tuple, list] = defaultdict(list)
        times = []
        for i, row in enumerate(rows):
            key = key_of(row, keys)
            if any(v is None for v in key):
                continue
            ts = to_ms(row.get(event_time)) if event_time else None
            if ts is not None:
                times.append((row[input_column] if inputs else None, ts))
            if drop_late and wm is not None and ts is not None and ts < wm:
                continue
            sort_key = tuple((row.get(c) is not None, to_ms(row.get(c)) if c == event_time else row.get(c))
                             for c in order)
            per_key[key].append((sort_key, i, ts, row))
        out = []
        for key, items in per_key.items():
            for _, _, ts, row in sorted(items, key=lambda x: (x[0], x[1])):
                out.extend(model.on_row(key, ts, row))
        if wm is not None:
            out.extend(model.on_watermark(wm))
        for source, ts in times:
            bases[source] = max(bases.get(source, ts), ts)
        outputs.append(out)
    return outputs


def canon(v):
    """A value with every datetime as a timezone-aware UTC one (naive ones are UTC: the harness's
    inputs and Spark's values in a UTC session), so instants compare as instants."""
    if isinstance(v, dt.datetime):
        return v.replace(tzinfo=dt.timezone.utc) if v.tzinfo is None else v.astimezone(dt.timezone.utc)
    if isinstance(v, dict):
        return {k: canon(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(canon(x) for x in v)
    return v


def by_key(rows, keys) -> dict:
    """Output rows grouped by key, each group in output order (the order that is specified);
    timestamps canonical (see ``canon``)."""
    keys = [keys] if isinstance(keys, str) else list(keys)
    out: dict[tuple, list] = defaultdict(list)
    for r in rows:
        r = canon(r)
        out[key_of(r, keys)].append(r)
    return dict(out)


def bag_by_key(rows, keys) -> dict:
    """Output rows grouped by key, each group as a multiset (sorted canonical reprs): for Spark,
    whose output has no order once it crosses an exchange."""
    return {k: sorted(map(repr, v)) for k, v in by_key(rows, keys).items()}


# ------------------------------------------------------------------------- buffer


class BufferModel:
    """``buffer``: by count (Rx ``Buffer(count, skip)``), by event-time windows, or both.

    Count buffers, defined by row index within the key (0, 1, 2, … of the rows it kept):
    a buffer starts at every index that is a multiple of ``skip`` (default ``count``) and holds
    the rows with indices ``[start, start + count)``; it is emitted when its last row arrives.

    Windows: ``[k*D, (k+1)*D)`` in event time, emitted when the watermark reaches the window's
    end (rows not yet emitted, if any); with ``count`` also every time ``count`` rows collect.
    """

    def __init__(self, keys, count=None, skip=None, duration_ms=None):
        self.keys = list(keys)
        self.count, self.skip, self.duration = count, skip or count, duration_ms
        self.rows: dict[tuple, list] = defaultdict(list)          # count mode: every kept row
        self.windows: dict[tuple, dict[int, list]] = defaultdict(dict)   # window mode

    def _out(self, key, items, start=None):
        row = key_row(self.keys, key)
        row["items"] = list(items)
        if self.duration is not None:
            row["window_start"] = to_dt(start)
            row["window_end"] = to_dt(start + self.duration)
        return row

    def on_row(self, key, ts, row):
        if self.duration is None:
            rows = self.rows[key]
            rows.append(row)
            first = len(rows) - self.count
            if first >= 0 and first % self.skip == 0:
                return [self._out(key, rows[first:])]
            return []
        start = ts // self.duration * self.duration
        pending = self.windows[key].setdefault(start, [])
        pending.append(row)
        if self.count is not None and len(pending) == self.count:
            out = [self._out(key, pending, start)]
            pending.clear()
            return out
        return []

    def on_watermark(self, wm):
        out = []
        for key, windows in self.windows.items():
            for start in sorted(windows):
                if start + self.duration <= wm:
                    items = windows.pop(start)
                    if items:
                        out.append(self._out(key, items, start))
        return out


# ------------------------------------------------------------------------- combine_latest


class CombineLatestModel:
    """``combine_latest``: per key the latest row of every input, emitted on each new row once
    every input has had one. Rows are ``{key..., "__spark_ops_source": name, name: row}``."""

    SOURCE = "__spark_ops_source"

    def __init__(self, keys, inputs):
        self.keys, self.inputs = list(keys), list(inputs)
        self.latest: dict[tuple, dict] = defaultdict(dict)

    def on_row(self, key, ts, row):
        latest = self.latest[key]
        latest[row[self.SOURCE]] = row[row[self.SOURCE]]
        if all(n in latest for n in self.inputs):
            out = key_row(self.keys, key)
            out.update({n: latest[n] for n in self.inputs})
            return [out]
        return []

    def on_watermark(self, wm):
        return []


def union_row(keys, source, inputs, row) -> dict:
    """The row ``combine_latest`` builds from ``row`` of input ``source`` (for the harness)."""
    out = {k: row[k] for k in keys}
    out[CombineLatestModel.SOURCE] = source
    for n in inputs:
        out[n] = dict(row) if n == source else None
    return out


# ------------------------------------------------------------------------- delay


class DelayModel:
    """``delay``: every row, once the watermark reaches its event time + delay; a key's rows in
    (due time, arrival) order."""

    def __init__(self, delay_ms):
        self.delay = delay_ms
        self.pending: dict[tuple, list] = defaultdict(list)
        self.seq = 0

    def on_row(self, key, ts, row):
        self.seq += 1
        self.pending[key].append((ts + self.delay, self.seq, row))
        return []

    def on_watermark(self, wm):
        out = []
        for key, items in self.pending.items():
            due = sorted(x for x in items if x[0] <= wm)
            items[:] = [x for x in items if x[0] > wm]
            out.extend(r for _, _, r in due)
        return out


# ------------------------------------------------------------------------- timeout


class TimeoutModel:
    """``timeout``: ``key, last_event, timeout_at`` once the watermark reaches a key's latest
    event time + timeout; the key is then forgotten."""

    def __init__(self, keys, timeout_ms):
        self.keys, self.timeout = list(keys), timeout_ms
        self.last: dict[tuple, int] = {}

    def on_row(self, key, ts, row):
        if key not in self.last or ts > self.last[key]:
            self.last[key] = ts
        return []

    def on_watermark(self, wm):
        out = []
        for key in [k for k, last in self.last.items() if last + self.timeout <= wm]:
            last = self.last.pop(key)
            row = key_row(self.keys, key)
            row["last_event"], row["timeout_at"] = to_dt(last), to_dt(last + self.timeout)
            out.append(row)
        return out


# ------------------------------------------------------------------------- session_window


class SessionModel:
    """``session_window``: Spark's session semantics plus a maximum duration.

    A row at ``ts`` belongs to the open session ``[start, last]`` when its own window
    ``[ts, ts + gap)`` overlaps the session's ``[start, last + gap)`` — i.e.
    ``start - gap < ts < last + gap`` — and ``ts < start + max_duration``; otherwise the open
    session is emitted and a new one starts at ``ts``. A session is emitted once the watermark
    reaches ``min(last + gap, start + max_duration)``. Output: key, session_start (first row's
    time), session_end (latest row's time), count, items (rows in the order handled).
    """

    def __init__(self, keys, gap_ms, max_ms=None, items=True):
        self.keys, self.gap, self.max, self.items = list(keys), gap_ms, max_ms, items
        self.open: dict[tuple, dict] = {}

    def _deadline(self, s):
        end = s["last"] + self.gap
        return end if self.max is None else min(end, s["start"] + self.max)

    def _out(self, key, s):
        row = key_row(self.keys, key)
        row.update(session_start=to_dt(s["start"]), session_end=to_dt(s["last"]), count=len(s["rows"]))
        if self.items:
            row["items"] = list(s["rows"])
        return row

    def on_row(self, key, ts, row):
        s = self.open.get(key)
        out = []
        if s is not None:
            if s["start"] - self.gap < ts < s["last"] + self.gap and (self.max is None or ts < s["start"] + self.max):
                s["start"], s["last"] = min(s["start"], ts), max(s["last"], ts)
                s["rows"].append(row)
                return []
            out.append(self._out(key, self.open.pop(key)))
        self.open[key] = {"start": ts, "last": ts, "rows": [row]}
        return out

    def on_watermark(self, wm):
        out = []
        for key in [k for k, s in self.open.items() if self._deadline(s) <= wm]:
            out.append(self._out(key, self.open.pop(key)))
        return out
