"""Drive an operator over batches of rows without Spark, running the same runtime code.

    h = OperatorHarness(MyOperator(), key="user", event_time="ts", watermark="10 seconds")
    out = h.run_batch([{"user": "a", "ts": 1_000, "v": 1}])          # batch 0
    out = h.run_batch([], watermark=60_000)                          # batch 1, manual watermark
    h.restart()                                                      # as if the workers died
    h.rescale(4)                                                     # as if partitions changed

State goes to a fresh ``memory://`` location unless ``state=`` is given, and is
checkpointed after every batch exactly as on Spark (epoch = batch id). Event times are
ints (ms) or datetimes. Key groups use a CRC of the key instead of Spark's hash.

With ``output_schema=`` (what ``apply_operator`` takes: a DDL string or a StructType) the
emitted rows are checked as the Spark path checks them, so a misspelled key fails here::

    h = OperatorHarness(MyOperator(), key="user", output_schema="user string, total double")
    h.run_batch([...])      # an emitted {"user": "a", "totl": 1.0}: UnknownKeyError naming 'totl'
"""
from __future__ import annotations

import datetime as _dt
import uuid
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgpack

from . import _identity, _opened, _statevar
from ._plan import check_name
from ._keys import to_parts
from ._output import rows_to_arrow
from ._runtime import ShardSpec, _store, keys_descending, run_shard_batch
from ._shards import shard_of
from ._units import duration_ms, memory_bytes
from .errors import StateMismatchError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ._units import Duration, Memory
    from .operator import Operator

__all__ = ["OperatorHarness"]


def _check_shards(partitions, key_groups) -> None:
    if not isinstance(partitions, int) or not 1 <= partitions <= key_groups <= 1 << 16:
        raise ValueError(f"need 1 <= partitions <= key_groups <= 65536, got partitions={partitions!r}, "
                         f"key_groups={key_groups!r}")


def _arrow_output_schema(schema):
    """``output_schema=`` as ``apply_operator`` takes it (a StructType or a DDL string, read
    without Spark by _ddl) as the Arrow schema the Spark path converts emitted rows to."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType
    if isinstance(schema, str):
        from ._ddl import parse_schema
        schema = parse_schema(schema)
    elif not isinstance(schema, StructType):
        raise TypeError(f"output_schema must be a StructType or a DDL string, got {type(schema).__name__}")
    return to_arrow_schema(schema, timezone="UTC")


def _ms(v) -> int | None:
    if v is None:
        return None
    if isinstance(v, _dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=_dt.timezone.utc)
        return int(v.timestamp() * 1000)
    return int(v)


class OperatorHarness:
    def __init__(self, operator: Operator, key: str | Sequence[str] = "key", *, event_time: str | None = None,
                 watermark: Duration | None = None, order_by: str | Sequence[str] | None = None,
                 state: str | None = None, partitions: int = 2, key_groups: int = 256,
                 dkv_options: dict | None = None, inputs: list | None = None,
                 input_column: str | None = None, memory: Memory | None = None, initial_state: list | None = None,
                 output_schema: str | StructType | None = None, name: str | None = None) -> None:
        """initial_state: rows (dicts with the key columns) loaded by ``on_initial_state``
        in the first batch that finds no state (batch 0, or a re-run of it), as
        ``apply_operator(initial_state=...)`` does; a harness started on existing state
        (``state=`` of an earlier one) ignores them. A row's event time is its ``event_time``
        column when it has one.

        output_schema: as ``apply_operator``'s (a DDL string such as "user string, total
        double", or a StructType; default: the operator's ``output_schema`` attribute). Every emitted row is then converted to it as on Spark
        (and the conversion dropped: ``run_batch`` still returns the rows as emitted), so
        what fails there fails here, in the batch that emits it: a key that names no column
        or struct field is an UnknownKeyError (a TypeError) naming it, a value that does not
        fit its column or a null in a NOT NULL one a TypeError naming the column. Without
        it rows are not checked. Costs the conversion, O(rows emitted), in every batch.
        Needs pyspark's types, not a session; a DDL string is read by spark_ops._ddl (the
        usual types; anything else is a ValueError that says to pass a StructType).

        state / name: a harness on the ``state=`` of an earlier one resumes it, at the batch
        after its newest checkpoint (``batch_id``), when it runs the same operator: the one
        whose name is ``name`` (as apply_operator's: the class name, lowercased, unless
        given). Another operator's state is a StateMismatchError that names both and the
        way out (``name=`` to keep it under a renamed class). See docs/spark_ops.md,
        *Evolving an operator and its state*."""
        self.keys = [key] if isinstance(key, str) else list(key)
        _check_shards(partitions, key_groups)
        if output_schema is None:               # as on Spark: the operator's own, when it sets one
            output_schema = getattr(operator, "output_schema", None)
        self._output_arrow = None if output_schema is None else _arrow_output_schema(output_schema)
        self.event_time = event_time
        self.order_by = [order_by] if isinstance(order_by, str) else list(order_by or [])
        self.spec = ShardSpec(state=state or f"memory://harness-{uuid.uuid4().hex}", operator=operator,
                              key_arity=len(self.keys), event_time=event_time,
                              delay_ms=duration_ms(watermark, "watermark") if watermark is not None else 0,
                              drop_late=watermark is not None,
                              key_groups=key_groups, shards=partitions, dkv_options=dict(dkv_options or {}),
                              inputs=list(inputs) if inputs else None, input_column=input_column,
                              memory=None if memory is None else memory_bytes(memory), inplace="raise")
        self.name = check_name(name or type(operator).__name__.lower())
        self.spec.name = name
        _statevar.declarations(operator)
        self.batch_id = self._resume()
        self._run = uuid.uuid4().hex        # this harness is a run of the operator's code
        self.metrics: list[dict] = []
        if initial_state is not None:
            from ._initial import HarnessRows
            from .operator import has_initial_state_handler
            if not has_initial_state_handler(operator):
                raise TypeError(f"initial_state= needs {type(operator).__name__}.on_initial_state(key, row, ctx), "
                                f"which loads an initial row into the state; {type(operator).__name__} does "
                                f"not define it")
            events = []
            for i, row in enumerate(initial_state):
                kv = self._key_values(i, row, "initial_state row")
                if any(v is None for v in kv):
                    continue            # as on Spark: a row with a null key is left out
                sort_key, event = self._event(i, kv, row)
                events.append((sort_key, event))
            self.spec.initial = HarnessRows([ev for _, ev in sorted(events, key=lambda x: x[0])])

    def _resume(self) -> int:
        """The batch to run next: 0 on new state, else the one after the newest checkpoint,
        once the state is known to be this operator's (its recorded identity)."""
        store = _store(self.spec.state, self.spec.dkv_options)
        ident = _identity.identity(self.spec.operator, self.name, self.spec.name is not None)
        last = _identity.last_batch(store)
        if last is not None:
            held = _identity.recorded_identity(store)
            if held is not None and held.get("name") != self.name:
                cls = type(self.spec.operator).__name__
                old_cls = (held.get("class") or "?").rsplit(".", 1)[-1]
                raise StateMismatchError(
                    f"spark_ops: the state at {self.spec.state} belongs to operator {held['name']!r} (class "
                    f"{held.get('class')}, last checkpoint: batch {last}); this harness runs {self.name!r} (class "
                    f"{ident['class']}). If {cls} is {old_cls} renamed, pass name={held['name']!r} to keep its "
                    f"state (an operator's state follows its name, which is its class name, lowercased, unless "
                    f"name= fixes it); to start over, pass another state=.")
        _identity.record_identity(store, ident)
        return 0 if last is None else last + 1

    def _key_values(self, i: int, row: dict, what: str) -> tuple:
        """The key columns' values of row ``i``; KeyError naming the missing ones."""
        missing = [k for k in self.keys if k not in row]
        if missing:
            raise KeyError(f"{what} {i} has no key column(s) {missing}: {row!r}")
        return tuple(row[k] for k in self.keys)

    def _event(self, i: int, kv: tuple, row: dict) -> tuple:
        """(sort key, runtime event) of row ``i`` with key values ``kv``: the order a shard
        processes rows in (key group, key, order_by or the event time, input order)."""
        parts = to_parts(kv)
        kg = self.key_group(parts)
        ts = _ms(row.get(self.event_time)) if self.event_time else None
        order = tuple((row.get(c) is not None, row.get(c)) for c in (self.order_by or [])) or ((ts is not None, ts),)
        return (kg, repr(parts), order, i), (kg, parts, ts, row)

    def key_group(self, parts: tuple) -> int:
        return zlib.crc32(msgpack.packb(list(parts))) % self.spec.key_groups

    def run_batch(self, rows: list[dict], *, watermark: int | _dt.datetime | None = None,
                  processing_time: int | _dt.datetime | None = None,
                  batch_time: int | _dt.datetime | None = None) -> list[dict]:
        """Run one batch over ``rows`` on every shard; return the emitted rows (shard order).

        batch_time (ms or datetime): this batch's clock, which the runtime records as the
        next batch's processing time, as a shard's clock is on Spark (processing time lags
        one batch); the first batch's processing time is its own batch_time, kept so that
        a re-run of it gets the same. The harness has no clock of its own: without
        batch_time it reads 0. watermark / processing_time (ms or datetime) override the
        values the runtime derives from the previous batch."""
        per_shard: dict[int, list] = {s: [] for s in range(self.spec.shards)}
        heartbeat = None
        for i, row in enumerate(rows):
            kv = self._key_values(i, row, "row")
            if any(v is None for v in kv):
                # a heartbeat row: dropped, but its event time advances the watermark
                ts = _ms(row.get(self.event_time)) if self.event_time else None
                if ts is not None:
                    heartbeat = ts if heartbeat is None else max(heartbeat, ts)
                continue
            sort_key, event = self._event(i, kv, row)
            per_shard[shard_of(event[0], self.spec.shards, self.spec.key_groups)].append((sort_key, event))
        out = []
        convert = None if self._output_arrow is None else self._check_rows
        for s in range(self.spec.shards):
            # A shard's order on Spark: key group and key (descending in odd batches, see
            # _runtime.keys_descending), then each key's rows in their order (a stable sort).
            mine = sorted(per_shard[s], key=lambda x: x[0][2:])
            mine.sort(key=lambda x: x[0][:2], reverse=keys_descending(self.batch_id))
            events = [ev for _, ev in mine]
            emitted, metrics = run_shard_batch(self.spec, self.batch_id, s, events, batch_time=_ms(batch_time),
                                               watermark=_ms(watermark), processing_time=_ms(processing_time),
                                               heartbeat_time=heartbeat, convert=convert, run=self._run)
            if convert is None:
                out.extend(emitted)
            else:               # the rows in the chunks the runtime converted
                for rows in emitted:
                    out.extend(rows)
            self.metrics.append(metrics)
        self.batch_id += 1
        return out

    def _check_rows(self, rows: list) -> list:
        """``rows`` after converting them to the output schema as the Spark path does (its
        errors raised), for ``run_shard_batch(convert=...)``."""
        rows_to_arrow(rows, self._output_arrow)
        return rows

    def restart(self) -> None:
        """Forget every open shard state, as if the Python workers were replaced."""
        _opened.drop_cached(self.spec.state)

    def rescale(self, partitions: int) -> None:
        """Continue with another shard count (state is redistributed by key group)."""
        _check_shards(partitions, self.spec.key_groups)
        self.restart()
        self.spec = ShardSpec(**{**self.spec.__dict__, "shards": partitions})

    def rerun_batch(self, batch_id: int) -> None:
        """Make the next ``run_batch`` run ``batch_id`` again (as Spark does after a crash)."""
        self.restart()
        self.batch_id = batch_id

    def close(self) -> None:
        self.restart()
