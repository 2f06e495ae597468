"""Spark's own ways of writing our operators: the peers (and floors) of benchmarks/spark_vs_tws.py.

Every builder has the signature `build(inputs, ctx) -> DataFrame` (see _spark_common.Contender):
`inputs` is one streaming DataFrame (buffer) or a dict name -> DataFrame (combine_latest).
The workers cannot import this module, so spark_vs_tws registers it with cloudpickle by value.
"""
from __future__ import annotations

import functools

import pandas as pd

ITEM_DDL = "user string, ts timestamp, seq long"
QUOTE_DDL = "ts timestamp, seq long, price double"


def _struct_ddl(ddl: str) -> str:
    return "struct<" + ", ".join(f"{c.split()[0]}: {c.split()[1]}" for c in ddl.split(", ")) + ">"


BUFFER_OUT_DDL = f"user string, items array<{_struct_ddl(ITEM_DDL)}>"


def _ordered(pdf: pd.DataFrame) -> pd.DataFrame:
    """Event order within a key: event time, ties by sequence number."""
    return pdf.sort_values(["ts", "seq"], kind="stable")


def _buffers_frame(key, buffers: list[list[tuple]]) -> pd.DataFrame:
    return pd.DataFrame({
        "user": [key] * len(buffers),
        "items": [[{"user": u, "ts": t, "seq": s} for (u, t, s) in items] for items in buffers],
    })


# ---------------------------------------------------------------- (ii) transformWithStateInPandas


def tws_buffer(inputs, ctx):
    """buffer(count) with ListState (the items) + ValueState (their number), RocksDB provider."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType, StringType

    item_schema = StructType([StructField("user", StringType()), StructField("ts", TimestampType()),
                              StructField("seq", LongType())])
    size_schema = StructType([StructField("n", LongType())])
    limit = ctx.count

    class BufferProcessor(StatefulProcessor):
        def init(self, handle):
            self.items = handle.getListState("items", item_schema)
            self.size = handle.getValueState("size", size_schema)

        def handleInputRows(self, key, rows, timerValues):
            n = self.size.get()[0] if self.size.exists() else 0
            full = []
            for pdf in rows:
                pending = []
                for row in _ordered(pdf)[["user", "ts", "seq"]].itertuples(index=False, name=None):
                    pending.append(row)
                    n += 1
                    if n == limit:
                        stored = list(self.items.get()) if n > len(pending) else []
                        full.append(stored + pending)
                        self.items.clear()
                        pending, n = [], 0
                if pending:
                    self.items.appendList(pending)
            self.size.update((n,))
            if full:
                yield _buffers_frame(key[0], full)

        def close(self):
            pass

    return inputs.groupBy(ctx.key).transformWithStateInPandas(
        BufferProcessor(), BUFFER_OUT_DDL, outputMode="Update", timeMode="None")


def tws_combine_latest(inputs, ctx):
    """combine_latest over the inputs: one ValueState per input holding its latest row."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType, TimestampType

    names, key_name = sorted(inputs), ctx.key
    row_schema = StructType([StructField("ts", TimestampType()), StructField("seq", LongType()),
                             StructField("price", DoubleType())])
    out_ddl = f"{ctx.key} string, " + ", ".join(f"{n} {_struct_ddl(QUOTE_DDL)}" for n in names)

    class CombineLatestProcessor(StatefulProcessor):
        def init(self, handle):
            self.latest = {n: handle.getValueState(f"latest_{n}", row_schema) for n in names}

        def handleInputRows(self, key, rows, timerValues):
            current = {n: (s.get() if s.exists() else None) for n, s in self.latest.items()}
            changed, out = set(), []
            for pdf in rows:
                for src, ts, seq, price in _ordered(pdf)[["src", "ts", "seq", "price"]].itertuples(
                        index=False, name=None):
                    current[src] = (ts, seq, price)
                    changed.add(src)
                    if all(v is not None for v in current.values()):
                        out.append({n: dict(zip(("ts", "seq", "price"), current[n])) for n in names})
            for n in changed:
                self.latest[n].update(current[n])
            if out:
                frame = pd.DataFrame({n: [o[n] for o in out] for n in names})
                frame.insert(0, key_name, [key[0]] * len(out))
                yield frame

        def close(self):
            pass

    return _tagged_union(inputs).groupBy(ctx.key).transformWithStateInPandas(
        CombineLatestProcessor(), out_ddl, outputMode="Update", timeMode="None")


def _tagged_union(inputs):
    from pyspark.sql import functions as F

    frames = [df.withColumn("src", F.lit(name)) for name, df in sorted(inputs.items())]
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


# ---------------------------------------------------------------- (ii b) transformWithState, Row interface


def _event_order(row):
    return row.ts, row.seq


def tws_row_buffer(inputs, ctx):
    """buffer(count) with transformWithState (Spark 4.1+), whose handleInputRows gets an iterator
    of Rows and yields Rows: ListState (the items) + ValueState (their number), as tws_buffer."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType, StringType

    item_schema = StructType([StructField("user", StringType()), StructField("ts", TimestampType()),
                              StructField("seq", LongType())])
    size_schema = StructType([StructField("n", LongType())])
    limit = ctx.count

    class RowBufferProcessor(StatefulProcessor):
        def init(self, handle):
            self.items = handle.getListState("items", item_schema)
            self.size = handle.getValueState("size", size_schema)

        def handleInputRows(self, key, rows, timerValues):
            n = self.size.get()[0] if self.size.exists() else 0
            pending, full = [], []
            for row in sorted(rows, key=_event_order):
                pending.append((row.user, row.ts, row.seq))
                n += 1
                if n == limit:
                    stored = list(self.items.get()) if n > len(pending) else []
                    full.append(stored + pending)
                    self.items.clear()
                    pending, n = [], 0
            if pending:
                self.items.appendList(pending)
            self.size.update((n,))
            for items in full:
                yield Row(user=key[0], items=[{"user": u, "ts": t, "seq": s} for (u, t, s) in items])

        def close(self):
            pass

    return inputs.groupBy(ctx.key).transformWithState(
        RowBufferProcessor(), BUFFER_OUT_DDL, outputMode="Update", timeMode="None")


def tws_row_combine_latest(inputs, ctx):
    """combine_latest with transformWithState (Row interface): one ValueState per input, as
    tws_combine_latest."""
    from pyspark.sql import Row
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import DoubleType, LongType, StructField, StructType, TimestampType

    names, key_name = sorted(inputs), ctx.key
    row_schema = StructType([StructField("ts", TimestampType()), StructField("seq", LongType()),
                             StructField("price", DoubleType())])
    out_ddl = f"{ctx.key} string, " + ", ".join(f"{n} {_struct_ddl(QUOTE_DDL)}" for n in names)

    class RowCombineLatestProcessor(StatefulProcessor):
        def init(self, handle):
            self.latest = {n: handle.getValueState(f"latest_{n}", row_schema) for n in names}

        def handleInputRows(self, key, rows, timerValues):
            current = {n: (s.get() if s.exists() else None) for n, s in self.latest.items()}
            changed, out = set(), []
            for row in sorted(rows, key=_event_order):
                current[row.src] = (row.ts, row.seq, row.price)
                changed.add(row.src)
                if all(v is not None for v in current.values()):
                    out.append({key_name: key[0],
                                **{n: dict(zip(("ts", "seq", "price"), current[n])) for n in names}})
            for n in changed:
                self.latest[n].update(current[n])
            for o in out:
                yield Row(**o)

        def close(self):
            pass

    return _tagged_union(inputs).groupBy(ctx.key).transformWithState(
        RowCombineLatestProcessor(), out_ddl, outputMode="Update", timeMode="None")


# ---------------------------------------------------------------- (iii) applyInPandasWithState


def aipws_buffer(inputs, ctx):
    """buffer(count) with applyInPandasWithState; the buffer is one binary state field.

    pyspark 4.3.0 fails with KeyError 'elementType' on an array field in the state schema,
    so the items are packed as (ts µs, seq) int64 pairs; the key is the group key.
    """
    import numpy as np

    limit = ctx.count
    item = np.dtype([("ts", "<i8"), ("seq", "<i8")])

    def buffer_fn(key, pdfs, state):
        n, blob = state.get if state.exists else (0, b"")
        parts, full = [np.frombuffer(blob, dtype=item)], []
        for pdf in pdfs:
            pdf = _ordered(pdf)
            new = np.empty(len(pdf), dtype=item)
            new["ts"] = pdf["ts"].to_numpy(dtype="datetime64[us]").astype("<i8")
            new["seq"] = pdf["seq"].to_numpy(dtype="<i8")
            parts.append(new)
            n += len(pdf)
            while n >= limit:
                items = np.concatenate(parts)
                full.append(items[:limit])
                parts, n = [items[limit:]], n - limit
        state.update((n, np.concatenate(parts).tobytes()))
        buffers = [[(key[0], pd.Timestamp(int(t), unit="us", tz="UTC"), int(s)) for t, s in b] for b in full]
        yield _buffers_frame(key[0], buffers) if buffers else pd.DataFrame({"user": [], "items": []})

    return inputs.groupBy(ctx.key).applyInPandasWithState(
        buffer_fn, BUFFER_OUT_DDL, "n long, buf binary", outputMode="Update", timeoutConf="NoTimeout")


# ---------------------------------------------------------------- (iv) the stateless floor


def _identity(batches):
    yield from batches


def floor_buffer(inputs, ctx):
    """The same shuffle by key and a Python pass-through, no state: what any operator pays."""
    return inputs.repartition(ctx.partitions, ctx.key).mapInPandas(_identity, inputs.schema)


def floor_combine_latest(inputs, ctx):
    union = _tagged_union(inputs)
    return union.repartition(ctx.partitions, ctx.key).mapInPandas(_identity, union.schema)
