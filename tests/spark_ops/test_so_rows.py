"""A task's Arrow rows into the runtime's events (spark_ops/_spark.py), without Spark: the
processing order is the same whichever order the shuffle delivered the rows in."""
from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from spark_ops._keys import to_parts
from spark_ops._spark import KG, TOKEN, _arrow_to_pandas, _events, _sort_rows

UTC = dt.timezone.utc
INSTANTS = {"ts": "__spark_ops_us0"}


def _table(rows: list, key_type=pa.string()) -> pa.Table:
    return pa.table({
        "k": pa.array([r["k"] for r in rows], key_type),
        "ts": pa.array([r["ts"] for r in rows], pa.timestamp("us", tz="UTC")),
        "v": pa.array([r["v"] for r in rows], pa.float64()),
        "s": pa.array([r["s"] for r in rows], pa.string()),
        "nested": pa.array([{"a": r["v"]} for r in rows], pa.struct([("a", pa.float64())])),
        KG: pa.array([r["kg"] for r in rows], pa.int32()),
        TOKEN: pa.array([0] * len(rows), pa.int64()),
    })


def _rows(seed: int, n: int = 300, nan: bool = True) -> list:
    rng = random.Random(seed)
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for _ in range(n):
        k = rng.choice("abcdefg")
        out.append({"k": k, "kg": ord(k) % 3, "ts": None if rng.random() < 0.1 else t0 + dt.timedelta(milliseconds=rng.randrange(5)),
                    "v": rng.choice([None, float("nan") if nan else 3.0, 1.0, 2.0, 0.5]), "s": rng.choice([None, "x", "y", "é"])})
    return out


def _events_of(table, keys=("k",)):
    cols = ["k", "ts", "v", "s", "nested"]
    pdf = _arrow_to_pandas(_sort_rows(table, list(keys), cols, ["ts"]), INSTANTS)
    return _events(pdf, list(keys), cols, "ts", to_parts, INSTANTS)[0]


def test_events_come_in_key_and_event_time_order_whatever_the_delivery_order():
    rows = _rows(1)
    first = _events_of(_table(rows))
    for seed in range(2, 6):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        again = _events_of(_table(shuffled))
        # one order: rows that tie on every sortable column are identical but for `nested`,
        # which follows `v`; compare everything but that object
        assert [(e[0], e[1], e[2], e[3]["v"] if e[3]["v"] == e[3]["v"] else "nan", e[3]["s"]) for e in again] == \
               [(e[0], e[1], e[2], e[3]["v"] if e[3]["v"] == e[3]["v"] else "nan", e[3]["s"]) for e in first]
    order = [(kg, parts, -1 if ts is None else ts) for kg, parts, ts, _ in first]
    assert order == sorted(order)       # key group, key, then event time (nulls first)
    assert len(first) == len(rows)


def test_a_key_that_has_no_order_is_a_clear_error():
    """A list-typed key (apply_operator refuses it up front; the shard names it too)."""
    rows = [{"k": [i % 3], "kg": 0, "ts": dt.datetime(2024, 1, 1, tzinfo=UTC), "v": float(i), "s": "x"}
            for i in range(5)]
    with pytest.raises(TypeError, match=r"cannot order the rows by \['k', 'ts'\]"):
        _sort_rows(_table(rows, key_type=pa.list_(pa.int64())), ["k"], ["k", "ts", "v", "s", "nested"], ["ts"])
