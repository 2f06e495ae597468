"""``Operator.on_rows``: each key's rows of a batch handed over at once, as one pandas DataFrame.

The runtime (``_process`` in _runtime.py) decides once per batch whether the operator's
class overrides ``on_rows``; if it does, the events go through ``KeyRows`` instead of the
per-row ``on_event`` loop. Events come sorted by key group, key and order (see
``_taskrows._sort_order`` and the harness), so a key's rows are consecutive: they are gathered until
the key changes (across the runtime's chunks and early saves) and the operator is called
once per key with them. pandas is imported only here, when an operator uses on_rows.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._keys import user_key


def rows_handler(op):
    """The operator's bound ``on_rows`` when its class overrides ``Operator.on_rows``, else None."""
    from .operator import Operator
    fn = getattr(type(op), "on_rows", None)
    if fn is None or fn is Operator.on_rows:
        return None
    return op.on_rows


class KeyRows:
    """Gathers consecutive events of one key and calls ``on_rows`` once per key, with the
    context positioned at that key (key, key group, ``event_time`` = the largest event time
    of its rows), as ``on_event`` is for one row."""

    __slots__ = ("op", "on_rows", "ctx", "arity", "pd", "kg", "parts", "rows", "ts")

    def __init__(self, op, on_rows, ctx, arity: int) -> None:
        import pandas
        self.op, self.on_rows, self.ctx, self.arity, self.pd = op, on_rows, ctx, arity, pandas
        self.kg = self.parts = self.ts = None
        self.rows: list = []

    def feed(self, events, drop_below) -> int:
        """Take events (key group, key parts, event ms, row) in order; a key that ends is
        handed to the operator. Rows behind ``drop_below`` (the watermark, when late rows
        are dropped) are left out. Returns how many were."""
        late = 0
        rows, ts_max = self.rows, self.ts
        for kg, parts, ts, row in events:
            if drop_below is not None and ts is not None and ts < drop_below:
                late += 1       # as on_event's loop: rows behind the watermark are dropped
                continue
            if parts != self.parts or kg != self.kg:
                if rows:
                    self.ts = ts_max
                    self.flush()
                    rows = self.rows
                self.kg, self.parts, ts_max = kg, parts, None
            rows.append(row)
            if ts is not None and (ts_max is None or ts > ts_max):
                ts_max = ts
        self.ts = ts_max
        return late

    def flush(self) -> None:
        """Hand the gathered key's rows (if any) to the operator."""
        rows = self.rows
        if not rows:
            return
        self.rows = []
        ctx = self.ctx
        key = user_key(self.parts, self.arity)
        ctx.key_group, ctx._parts, ctx.key, ctx.event_time = self.kg, self.parts, key, self.ts
        out = self.on_rows(key, to_frame(self.pd, rows), ctx)
        if out is not None:
            self._emit(out, key)

    def _emit(self, out, key) -> None:
        """What on_rows returned (or yielded): a DataFrame, or an iterable of DataFrames
        and rows (dicts or tuples in column order), emitted in order."""
        pd, emit = self.pd, self.ctx.emit
        if isinstance(out, pd.DataFrame):
            for r in frame_rows(pd, out):
                emit(r)
            return
        if isinstance(out, (Mapping, str, bytes, pd.Series)) or not isinstance(out, Iterable):
            raise TypeError(self._bad(out, key, "returned"))
        for item in out:
            if isinstance(item, pd.DataFrame):
                for r in frame_rows(pd, item):
                    emit(r)
            elif isinstance(item, (Mapping, tuple)):
                emit(item)
            else:
                raise TypeError(self._bad(item, key, "returned an iterable holding"))

    def _bad(self, value, key, what: str) -> str:
        name = type(self.op).__name__
        hint = ""
        if isinstance(value, Mapping):
            hint = " (to emit one row, return [row] or call ctx.emit(row))"
        return (f"spark_ops: {name}.on_rows {what} {type(value).__name__} {_short(value)} for key {key!r}; "
                f"it returns None (emit with ctx.emit), a pandas DataFrame of output rows, or an iterable "
                f"(e.g. yield) of DataFrames and rows (dicts, or tuples in column order){hint}")


def _short(value) -> str:
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:59] + "…"


def to_frame(pd, rows: list):
    """Row dicts (a key's rows, in order) as a DataFrame: one column per field (in the
    order the fields first appear; a row without a field holds None there), index 0..n-1.
    A column whose values are all ints (within int64), all floats, all bools or all
    timestamps gets that dtype (int64, float64, bool, datetime64[ns, UTC] — naive ones
    datetime64[ns]); any other column, and one with a None, keeps the rows' values as they
    are (object dtype), so that no int turns into a float NaN: every cell equals what
    on_event would see in the row."""
    names = dict.fromkeys(rows[0])
    n = len(names)
    for r in rows:
        if len(r) != n or r.keys() != names.keys():
            for k in r:
                if k not in names:
                    names[k] = None
                    n += 1
    columns = {name: _column(pd, [r.get(name) for r in rows]) for name in names}
    return pd.DataFrame(columns, index=pd.RangeIndex(len(rows)), copy=False)


def _column(pd, values: list):
    """One column: a typed array when every value is of one type that keeps its values
    (int within int64, float, bool, timestamps), else object."""
    import numpy as np
    kinds = set(map(type, values))
    if len(kinds) == 1:
        kind = kinds.pop()
        dtype = _DTYPES.get(kind)
        try:
            if dtype is not None:
                return np.array(values, dtype=dtype)
            if kind.__name__ in ("datetime", "Timestamp"):
                return pd.Series(values, index=pd.RangeIndex(len(values)))
        except (TypeError, ValueError, OverflowError):  # ints past int64, out of datetime64's range, mixed zones
            pass
    # an explicit object Series: pandas 3 would turn an object array of strings into its str
    # dtype, and a None there into NaN
    return pd.Series(np.fromiter(values, dtype=object, count=len(values)), dtype=object,
                     index=pd.RangeIndex(len(values)), copy=False)


_DTYPES = {int: "int64", float: "float64", bool: "bool"}


def frame_rows(pd, frame) -> list:
    """A DataFrame's rows as dicts (column -> value), NaN / NaT / NA as None (as Spark's
    pandas to Arrow conversion takes them) and numpy scalars as Python values."""
    if not frame.columns.is_unique:
        raise ValueError(f"spark_ops: on_rows returned a DataFrame with duplicate columns {list(frame.columns)}")
    if frame.isna().to_numpy().any():
        frame = frame.astype(object).where(frame.notna(), None)
    return frame.to_dict("records")
