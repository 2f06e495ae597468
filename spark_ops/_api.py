"""The DataFrame functions users call: each builds an operator and applies it.

Besides their own arguments they take apply_operator's state=, name=, partitions=,
key_groups=, dkv_options=, memory= (each shard's memory budget, e.g. "512m"), isolate=
(pass isolate=True to union or coalesce the output in the same stage), metrics= (where
the per-batch figures go: a stream's progress by default, see apply_operator) and
initial_state= (rows loaded in the query's first batch: input rows that came before the
stream, except for combine_latest, whose initial rows are shaped as its output) and retire=
(operators the query's state holds and its code no longer has, to drop; RFC 0010)."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ._initial import check_keys, input_rows
from ._plan import apply_operator, check_columns, spark_watermark
from ._units import duration_ms
from .operators import Buffer, CombineLatest, Delay, SessionWindow, Timeout
from .operators._combine import SOURCE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation

    from ._units import Duration, Memory


def _key_fields(df, keys):
    return [df.schema[k] for k in keys]


def buffer(df: DataFrame, key: str | Sequence[str], count: int | None = None, skip: int | None = None,
           duration: Duration | None = None, *, event_time: str | None = None, watermark: Duration | None = None,
           order_by: str | Sequence[str] | None = None, state: str = "./state", name: str | None = None,
           partitions: int | None = None, key_groups: int = 256, dkv_options: dict | None = None,
           isolate: bool | None = None, memory: Memory | None = None,
           metrics: str | bool | Observation | None = None, initial_state: DataFrame | None = None,
           retire: str | Iterable[str] | None = None) -> DataFrame:
    """Group each key's rows into buffers: by ``count`` (with ``skip`` for overlapping or
    gapped buffers), by event-time ``duration`` windows, or both (a window's buffer is
    also emitted when it reaches ``count``). Output: the key column(s) and ``items``
    (array of the input rows, in event order); with ``duration`` also ``window_start``
    and ``window_end``. initial_state: input rows that came before the stream (a batch
    DataFrame with the input's columns): in the query's first batch they fill the keys'
    buffers (or windows, by event time) as if they had arrived first."""
    from pyspark.sql.types import ArrayType, StructField, StructType, TimestampType
    keys = check_columns(df, key, event_time)
    initial = None if initial_state is None else input_rows(initial_state, df, keys)
    dur = duration_ms(duration, "duration") if duration is not None else None
    if dur is not None and event_time is None:
        raise ValueError("buffer(duration=...) needs event_time= (the event-time column)")
    fields = _key_fields(df, keys) + [StructField("items", ArrayType(df.schema))]
    if dur is not None:
        fields += [StructField("window_start", TimestampType()), StructField("window_end", TimestampType())]
    op = Buffer(count=count, skip=skip, duration_ms=dur, key_columns=tuple(keys))
    return apply_operator(df, op, keys, output_schema=StructType(fields), event_time=event_time,
                          watermark=watermark, order_by=order_by, state=state, name=name or "buffer",
                          partitions=partitions, key_groups=key_groups, dkv_options=dkv_options, isolate=isolate,
                          memory=memory, metrics=metrics, initial_state=initial, retire=retire)


def combine_latest(inputs: dict, key: str | Sequence[str], *, event_time: str | None = None,
                   watermark: Duration | None = None, state: str = "./state",
                   name: str | None = None, partitions: int | None = None, key_groups: int = 256,
                   dkv_options: dict | None = None,
           isolate: bool | None = None, memory: Memory | None = None,
           metrics: str | bool | Observation | None = None, initial_state: DataFrame | None = None,
           retire: str | Iterable[str] | None = None) -> DataFrame:
    """For each key, every time any input has a new row (once all inputs have one), emit
    the key and one struct column per input holding that input's latest row. Within a
    batch the rows go in ``event_time`` order when it is given, else input by input in the
    order of the input names (docs/spark_ops.md, *Order within a batch*).

    inputs: ``{"name": DataFrame, ...}`` (two or more), each with the key column(s).
    initial_state: a batch DataFrame shaped as the output — the key column(s) and a struct
    column per input (all or some inputs; a null struct: none yet) — whose structs become
    the keys' latest rows in the query's first batch (e.g. the last output row per key of
    an earlier query). It emits nothing by itself."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType
    if not isinstance(inputs, dict) or len(inputs) < 2:
        raise ValueError("combine_latest takes a dict of two or more named DataFrames")
    names = list(inputs)
    for n, df in inputs.items():
        try:
            keys = check_columns(df, key, event_time)
        except ValueError as e:
            raise ValueError(f"combine_latest input {n!r}: {e}") from None
    first = inputs[names[0]]
    initial = None if initial_state is None else _latest_rows(initial_state, first, keys, inputs)
    # Inputs of one schema are unioned as they are, with a column naming the input: flat
    # rows are cheaper to shuffle and to turn into Python than a struct column per input
    # (all but one of them null in every row). Other inputs go one struct column each,
    # with the event time in a column of its own.
    flat = all([(f.name, f.dataType) for f in df.schema] == [(f.name, f.dataType) for f in first.schema]
               for df in inputs.values())
    et = (event_time if flat else "__spark_ops_event_time") if event_time else None
    # Spark's watermark on each input, so that its eventTime block follows the slowest input
    # as the operator's watermark does (Spark's default policy: the minimum; see _plan).
    delay = duration_ms(watermark, "watermark") if watermark is not None else 0
    inputs = {n: spark_watermark(df, event_time, delay) for n, df in inputs.items()}
    parts = []
    for n, df in inputs.items():
        if flat:
            cols = [F.col(c) for c in first.columns] + [F.lit(n).alias(SOURCE)]
        else:
            cols = [F.col(k) for k in keys] + [F.lit(n).alias(SOURCE)]
            for m, other in inputs.items():
                cols.append(F.struct(*[F.col(c) for c in df.columns]).alias(m) if m == n
                            else F.lit(None).cast(other.schema).alias(m))
        if et and not flat:
            cols.append(F.col(event_time).alias(et))
        parts.append(df.select(*cols))
    union = parts[0]
    for p in parts[1:]:
        union = union.unionByName(p)
    schema = StructType(_key_fields(first, keys) + [StructField(n, inputs[n].schema) for n in names])
    operator = CombineLatest(names, tuple(keys), columns=first.columns if flat else None)
    return apply_operator(union, operator, keys, output_schema=schema, event_time=et,
                          watermark=watermark, order_by=[et, SOURCE] if et else [SOURCE], state=state,
                          name=name or "combine_latest", partitions=partitions, key_groups=key_groups,
                          dkv_options=dkv_options, inputs=names, input_column=SOURCE,
                          isolate=isolate, memory=memory, metrics=metrics, initial_state=initial, retire=retire)


def _latest_rows(initial, first, keys, inputs):
    """combine_latest's initial_state checked: the keys as ``first``'s, every other column an
    input's name holding a struct of that input's columns and types."""
    check_keys(initial, first, keys)
    others = [c for c in initial.columns if c not in keys]
    for c in others:
        if c not in inputs:
            raise ValueError(f"combine_latest initial_state column {c!r} names no input: besides the key column(s) "
                             f"{keys} it may have a struct column per input, {list(inputs)}")
        got, want = initial.schema[c].dataType.simpleString(), inputs[c].schema.simpleString()
        if got != want:
            raise TypeError(f"combine_latest initial_state column {c!r} is {got} but input {c!r}'s rows are {want}")
    if not others:
        raise ValueError(f"combine_latest initial_state needs a struct column for one input or more, of "
                         f"{list(inputs)}; it has the key column(s) only")
    return initial.select(*keys, *others)


def delay(df: DataFrame, key: str | Sequence[str], duration: Duration, *, event_time: str,
          watermark: Duration | None = None, state: str = "./state", name: str | None = None,
          partitions: int | None = None, key_groups: int = 256, dkv_options: dict | None = None,
           isolate: bool | None = None, memory: Memory | None = None,
           metrics: str | bool | Observation | None = None, initial_state: DataFrame | None = None,
           retire: str | Iterable[str] | None = None) -> DataFrame:
    """Emit each row once the watermark passes its event time + ``duration``. Output: the input rows.
    initial_state: input rows that came before the stream (the input's columns), delayed
    as if they had arrived in the first batch."""
    keys = check_columns(df, key, event_time)
    initial = None if initial_state is None else input_rows(initial_state, df, keys)
    return apply_operator(df, Delay(duration_ms(duration)), keys, output_schema=df.schema,
                          event_time=event_time, watermark=watermark, state=state, name=name or "delay",
                          partitions=partitions, key_groups=key_groups, dkv_options=dkv_options, isolate=isolate,
                          memory=memory, metrics=metrics, initial_state=initial, retire=retire)


def timeout(df: DataFrame, key: str | Sequence[str], duration: Duration, *, event_time: str,
            watermark: Duration | None = None, state: str = "./state", name: str | None = None,
            partitions: int | None = None, key_groups: int = 256, dkv_options: dict | None = None,
           isolate: bool | None = None, memory: Memory | None = None,
           metrics: str | bool | Observation | None = None, initial_state: DataFrame | None = None,
           retire: str | Iterable[str] | None = None) -> DataFrame:
    """Emit ``key, last_event, timeout_at`` when a key has no row for ``duration`` of event time.
    initial_state: input rows that came before the stream (the input's columns)."""
    from pyspark.sql.types import StructField, StructType, TimestampType
    keys = check_columns(df, key, event_time)
    initial = None if initial_state is None else input_rows(initial_state, df, keys)
    schema = StructType(_key_fields(df, keys) + [StructField("last_event", TimestampType()),
                                                 StructField("timeout_at", TimestampType())])
    return apply_operator(df, Timeout(duration_ms(duration), tuple(keys)), keys, output_schema=schema,
                          event_time=event_time, watermark=watermark, state=state, name=name or "timeout",
                          partitions=partitions, key_groups=key_groups, dkv_options=dkv_options, isolate=isolate,
                          memory=memory, metrics=metrics, initial_state=initial, retire=retire)


def session_window(df: DataFrame, key: str | Sequence[str], gap: Duration, *, event_time: str,
                   max_duration: Duration | None = None, items: bool = True, watermark: Duration | None = None,
                   state: str = "./state", name: str | None = None, partitions: int | None = None,
                   key_groups: int = 256, dkv_options: dict | None = None,
           isolate: bool | None = None, memory: Memory | None = None,
           metrics: str | bool | Observation | None = None, initial_state: DataFrame | None = None,
           retire: str | Iterable[str] | None = None) -> DataFrame:
    """Gap-based sessions per key (closed after ``gap`` without rows, or at ``max_duration``).
    Output: key, session_start, session_end, count and (with ``items=True``) the rows.
    initial_state: input rows that came before the stream (the input's columns)."""
    from pyspark.sql.types import ArrayType, LongType, StructField, StructType, TimestampType
    keys = check_columns(df, key, event_time)
    initial = None if initial_state is None else input_rows(initial_state, df, keys)
    fields = _key_fields(df, keys) + [StructField("session_start", TimestampType()),
                                      StructField("session_end", TimestampType()), StructField("count", LongType())]
    if items:
        fields.append(StructField("items", ArrayType(df.schema)))
    op = SessionWindow(duration_ms(gap, "gap"), duration_ms(max_duration, "max_duration") if max_duration else None,
                       tuple(keys), items)
    return apply_operator(df, op, keys, output_schema=StructType(fields), event_time=event_time,
                          watermark=watermark, state=state, name=name or "session_window", partitions=partitions,
                          key_groups=key_groups, dkv_options=dkv_options, isolate=isolate,
                          memory=memory, metrics=metrics, initial_state=initial, retire=retire)
