"""The operator API: write a stateful operator as a class; the runtime does the rest.

    class CountPerKey(Operator):
        def on_event(self, key, row, ctx):
            n = ctx.value("count", default=0)
            n.value += 1
            ctx.emit({"user": key, "count": n.value})

The runtime calls, for every shard of every batch: ``open(ctx)``, (in a query's first
batch, given ``initial_state=``: ``on_initial_state`` for each initial row), then ``on_event`` for
each input row (grouped by key, in event order) — or, if the operator overrides
``on_rows``, ``on_rows`` once per key with all its rows of the batch as a pandas
DataFrame —, then ``on_timer`` for each timer that is due, then ``close(ctx)``. ``ctx`` gives the current key's persisted objects (created on
first use, scoped to the key), the timer service, the watermark, the batch id and
``emit``. State changes are checkpointed at the end of the batch with epoch = batch id;
only the slots that changed are written.
"""
from __future__ import annotations

import builtins
import datetime as _dt
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, ClassVar

from ._timers import EVENT_TIME, PROCESSING_TIME, Timer

if TYPE_CHECKING:
    import numpy.typing
    import pandas
    from objectspace import (PersistedArray, PersistedDict, PersistedLinkedList, PersistedList, PersistedNDArray,
                             PersistedQueue, PersistedSet, PersistedSortedDict, PersistedSortedSet, PersistedStack,
                             PersistedStream, PersistedValue)

    from ._shardstate import ShardState
    from ._units import Duration

__all__ = ["Operator", "Context", "Timer"]
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


class Operator:
    """Base class of stateful operators. Override the hooks you need.

    Operators must be deterministic in their input rows, state, timers and watermark:
    a batch that Spark runs again (after a failure) must produce the same output and state.
    """

    #: Names of the output columns; set by the operator or by ``output_schema=``.
    output_schema: Any = None

    #: The operator's state variables, declared (as Spark's ``init()`` and Flink's ``open()``
    #: declare them): ``{name: StateVar(kind, ttl=..., version=..., upgrade=...,
    #: renamed_from=..., migrate=...)}``, or None to declare nothing. A declaring operator's
    #: state is checked against them when a shard opens it, and renamed, migrated, upgraded or
    #: dropped as they say, before the batch's first hook; it must declare every variable it
    #: uses. See StateVar and docs/spark_ops.md, *Evolving an operator and its state*.
    state_vars: dict | None = None

    def open(self, ctx: "Context") -> None:
        """Called once per shard per batch before any event."""

    def on_event(self, key: Any, row: dict, ctx: "Context") -> None:
        """Called for each input row; ``key`` is the key column's value (a tuple for
        several key columns), ``row`` the input row as a dict."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_event (or on_rows)")

    def on_rows(self, key: Any, rows: pandas.DataFrame, ctx: "Context") -> pandas.DataFrame | Iterable[Any] | None:
        """Optional, instead of ``on_event``: called once per key and batch with all the
        key's rows of the batch, as one pandas DataFrame in event order (index 0..n-1, a
        column per field, the values on_event would get; late rows left out), as Spark's
        ``handleInputRows``. When a subclass overrides it, the runtime calls it and never
        ``on_event`` (so an operator defining both gets on_rows). ``ctx`` is positioned at
        the key (state, timers, ``emit``) and ``ctx.event_time`` is the largest event time
        of the rows (None without one). Return None (emit with ``ctx.emit``), a DataFrame
        of output rows, or an iterable (``yield``) of DataFrames and rows; anything else
        fails the batch with a TypeError."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_rows")

    def on_initial_state(self, key: Any, row: dict, ctx: "Context") -> None:
        """Needed for ``initial_state=`` (as Spark's ``handleInitialState``): called once per
        row of the initial-state DataFrame (``row`` as a dict of its columns, a key's rows in
        the order of ``order_by`` when the frame has those columns), in a query's first batch
        only — when the operator has no state yet — after ``open`` and before any
        ``on_event``. ``ctx`` is positioned at the key as in ``on_event``: state, timers,
        ``emit``, ``batch_id``, ``processing_time`` (``watermark`` is None in a first batch);
        ``ctx.event_time`` is the row's event time when the frame has the event-time column,
        else None. The load is part of the first batch's checkpoint: a re-run of that batch
        loads it again into the state it starts from (empty), never on top of it. See
        docs/spark_ops.md, *Initial state*."""
        raise NotImplementedError(f"{type(self).__name__} must implement on_initial_state to take initial_state=")

    def on_timer(self, key: Any, timer: Timer, ctx: "Context") -> None:
        """Called when a timer of ``key`` is due (event time: the watermark passed it;
        processing time: the batch's processing time passed it)."""

    def close(self, ctx: "Context") -> None:
        """Called once per shard per batch after events and timers."""


def _kind_method(kind: str, like: str = "") -> Callable[..., Any]:
    """``Context.<kind>(name, *, ttl=None)``: the key's persisted ``kind``, created empty on
    first use (``ttl``: see ``Context.value``; a declared variable's when not given)."""
    attr = f"get_or_create_{kind}"
    def method(self: Context, name: str, *, ttl: Duration | None = None) -> Any:
        # The memo's hit inline (an operator asks for the same object on every event of a
        # key): one Python frame a call instead of two; see Context._get_or_create.
        memo = (self.key_group, self._parts, name)
        obj = self._objects.get(memo)
        if obj is None or obj.kind != kind or not obj.valid:
            obj = self._look_up(kind, name, memo, attr, (), {})
        if ttl is None and self._declared is not None:
            ttl = self._declared_ttl(name)
        return obj if ttl is None else self._ttl(obj, ttl)
    method.__name__, method.__qualname__ = kind, f"Context.{kind}"
    method.__doc__ = f"The key's persisted {kind}{f' ({like})' if like else ''}, created empty on first use."
    return method


class Context:
    """What an operator sees: the current key's state, timers, time and output."""

    def __init__(self, shard: ShardState) -> None:
        self._shard = shard
        self.key = None
        self.key_group = -1
        self._parts: tuple = ()
        self.batch_id = -1
        self.watermark: int | None = None
        self.processing_time: int | None = None
        self.shard = -1
        # Objects met earlier (this batch or, while the shard stays open, earlier ones), and
        # what empties them once the object cache dropped some (see _look_up).
        self._objects: dict = getattr(shard, "objects", None)
        if self._objects is None:
            self._objects = {}
        self._forget = getattr(shard, "forget_dropped", None)
        # The shard's state variables: checked and recorded when an object is first met (RFC 0010).
        self._vars = getattr(shard, "vars", None)
        self._declared = None if self._vars is None else self._vars.declared
        #: Event time (ms) of the row being processed (in on_rows: the largest of the key's
        #: rows); None in on_timer or without event_time.
        self.event_time: int | None = None

    @staticmethod
    def to_datetime(ms: int) -> _dt.datetime:
        """The UTC datetime (timezone-aware) of ``ms`` since the Unix epoch."""
        return _EPOCH + _dt.timedelta(milliseconds=ms)

    # -- state of the current key -------------------------------------------------------

    def _space(self):
        return self._shard.space(self.key_group)

    def _name(self, name: str) -> tuple:
        if not isinstance(name, str) or not name:
            raise ValueError(f"state object names are non-empty str, got {name!r}")
        return self._parts + (name,)

    def value(self, name: str, default: Any = None, *, ttl: Duration | None = None) -> PersistedValue:
        """The key's persisted value ``name`` (``.value`` reads and writes it).

        ``ttl`` (every kind takes it: "1 hour", a timedelta or ms > 0): the object expires
        when not written for ``ttl`` of processing time (dict, sorted_dict, set and
        sorted_set: also each entry / element on its own; queue, list, stack, linked_list
        and stream: each element on its own), as Spark's ``TTLConfig``; pass the same ttl
        on every call. See docs/spark_ops.md, *State TTL*."""
        if self._declared is not None:
            d = self._declared.get(name)
            if d is not None:
                default = d.default if default is None else default
                ttl = d.ttl if ttl is None else ttl
        obj = self._get_or_create("value", name, default)
        return obj if ttl is None else self._ttl(obj, ttl)

    def state(self, name: str) -> Any:
        """The key's declared state variable ``name`` (``Operator.state_vars``), of its
        declared kind, created on first use with what the declaration gives (a value's
        default, an array's length, an ndarray's shape and dtype) and its ttl. An operator
        that declares nothing, or a name it does not declare: StateMismatchError."""
        d = None if self._declared is None else self._declared.get(name)
        if d is None or d.is_dropped:
            from .errors import StateMismatchError
            raise StateMismatchError(f"ctx.state({name!r}): {type(self._shard_operator()).__name__} declares no "
                                     f"state variable {name!r} in state_vars" + ("" if self._declared is None else
                                     f" (it declares {sorted(n for n, v in self._declared.items() if not v.is_dropped)})"))
        if d.kind == "value":
            return self.value(name)
        p = d.params
        if d.kind == "array":
            obj = self._get_or_create("array", name, p["length"], fill=p.get("fill"))
        elif d.kind == "ndarray":
            obj = self._get_or_create("ndarray", name, p["shape"], p["dtype"], chunks=p.get("chunks"),
                                      fill_value=p.get("fill_value", 0))
        else:
            obj = self._get_or_create(d.kind, name)
        return obj if d.ttl is None else self._ttl(obj, d.ttl)

    def _declared_ttl(self, name: str):
        d = self._declared.get(name)
        return None if d is None else d.ttl

    def _shard_operator(self):
        return getattr(self._vars, "operator", None)

    def _ttl(self, obj, ttl):
        """Register ``obj`` (just looked up) as timed by ``ttl``: its writes refresh it."""
        self._shard.ttl.register(self.key_group, obj, ttl)
        return obj

    def _get_or_create(self, kind: str, name: str, *args, **kwargs):
        # Objects met earlier come from a dict: an operator typically asks for the same
        # object on every event of a key, and a space lookup encodes the name. A handle
        # that stopped working (deleted, or the space refreshed) is looked up again.
        memo = (self.key_group, self._parts, name)
        obj = self._objects.get(memo)
        if obj is None or obj.kind != kind or not obj.valid:
            obj = self._look_up(kind, name, memo, f"get_or_create_{kind}", args, kwargs)
        return obj

    def _look_up(self, kind: str, name: str, memo: tuple, attr: str, args: tuple, kwargs: dict):
        """The memo's miss: the object from the key group's space (``attr``, its
        ``get_or_create_<kind>``), checked against the declared state variables first."""
        # At big state every key's first event misses the memo (its handle was evicted):
        # the common steps inline, each a Python frame less (the name checked by _name only
        # when it is not a non-empty str; on_use only for a name new to the key group, or with
        # declarations to check; the key group's space from the shard's dict).
        kg = self.key_group
        full = self._parts + (name,) if type(name) is str and name else self._name(name)
        vars_ = self._vars
        if vars_ is not None and (self._declared is not None or (kg, name) not in vars_._known):
            vars_.on_use(kg, name, kind)
        space = self._shard.spaces.get(kg)
        if space is None:
            space = self._space()
        obj = getattr(space, attr)(full, *args, **kwargs)
        if self._forget is not None and self._shard.cache.evictions != self._shard._evictions_seen:
            # The memo must not keep objects the cache dropped alive past its budget: once it
            # dropped some, the memo starts again at the next miss, not only at the next save
            # (clean objects, of an operator that reads them: up to spill_events dropped
            # handles, ~25,000 at the default budget).
            self._forget()
        self._objects[memo] = obj
        return obj

    # ctx.<kind>(name, *, ttl=None): Callable[..., T] for the type checker, which binds it as a method
    queue: ClassVar[Callable[..., PersistedQueue]] = _kind_method("queue", "deque-like")
    list: ClassVar[Callable[..., PersistedList]] = _kind_method("list")
    dict: ClassVar[Callable[..., PersistedDict]] = _kind_method("dict")
    sorted_dict: ClassVar[Callable[..., PersistedSortedDict]] = _kind_method("sorted_dict")
    set: ClassVar[Callable[..., PersistedSet]] = _kind_method("set")
    sorted_set: ClassVar[Callable[..., PersistedSortedSet]] = _kind_method("sorted_set")
    stack: ClassVar[Callable[..., PersistedStack]] = _kind_method("stack")
    linked_list: ClassVar[Callable[..., PersistedLinkedList]] = _kind_method("linked_list")
    stream: ClassVar[Callable[..., PersistedStream]] = _kind_method("stream")

    def array(self, name: str, length: int, fill: Any = None, *, ttl: Duration | None = None) -> PersistedArray:
        obj = self._get_or_create("array", name, length, fill=fill)
        if ttl is None and self._declared is not None:
            ttl = self._declared_ttl(name)
        return obj if ttl is None else self._ttl(obj, ttl)

    def ndarray(self, name: str, shape: int | Iterable[int], dtype: numpy.typing.DTypeLike,
                chunks: int | Iterable[int] | None = None, fill_value: Any = 0, *,
                ttl: Duration | None = None) -> PersistedNDArray:
        """The key's persisted chunked n-dimensional array (objectspace's ``create_ndarray``),
        created on first use; one that exists keeps its own shape, dtype and chunks."""
        obj = self._get_or_create("ndarray", name, shape, dtype, chunks=chunks, fill_value=fill_value)
        if ttl is None and self._declared is not None:
            ttl = self._declared_ttl(name)
        return obj if ttl is None else self._ttl(obj, ttl)

    def has_state(self, name: str) -> bool:
        return self._name(name) in self._space()

    def delete_state(self, name: str) -> None:
        """Delete the key's object ``name`` (no error if it does not exist)."""
        space = self._space()
        full = self._name(name)
        self._objects.pop((self.key_group, self._parts, name), None)
        if full in space:
            space.delete(full)
        ttl = getattr(self._shard, "ttl", None)
        if ttl is not None and ttl.active:      # its TTL records go with it (none known: no cost)
            ttl.forget_object(self.key_group, full)

    # -- timers ---------------------------------------------------------------------------

    def register_event_timer(self, time: int, name: str = "") -> None:
        """Fire ``on_timer`` once the watermark passes ``time`` (ms since the Unix epoch)."""
        self._shard.timers.register(self.key_group, EVENT_TIME, time, self._parts, name)

    def register_processing_timer(self, time: int, name: str = "") -> None:
        """Fire ``on_timer`` once a batch's processing time passes ``time`` (ms)."""
        self._shard.timers.register(self.key_group, PROCESSING_TIME, time, self._parts, name)

    def delete_event_timer(self, time: int, name: str = "") -> None:
        self._shard.timers.delete(self.key_group, EVENT_TIME, time, self._parts, name)

    def delete_processing_timer(self, time: int, name: str = "") -> None:
        self._shard.timers.delete(self.key_group, PROCESSING_TIME, time, self._parts, name)

    def list_timers(self) -> builtins.list[Timer]:
        """The current key's registered timers, event and processing time, as ``Timer``s in
        time order (ties: by name, then kind), like Spark's ``listTimers``. Includes what
        this batch registered and leaves out what it deleted or fired (in ``on_timer``, the
        timer being handled is already gone). Costs a scan of the timers of the key's key
        group (not of its objects). Outside on_event / on_rows / on_timer (no current key):
        RuntimeError."""
        if self.key_group < 0:
            raise RuntimeError("ctx.list_timers() lists the current key's timers: call it in on_event, on_rows "
                               "or on_timer")
        return self._shard.timers.of_key(self.key_group, self._parts)

    # -- output ---------------------------------------------------------------------------

    def emit(self, row: builtins.dict[str, Any]) -> None:
        """Add one output row (a dict of output columns)."""
        self._shard.emitted.append(row)


def has_initial_state_handler(operator) -> bool:
    """True when ``operator``'s class overrides ``Operator.on_initial_state``."""
    return getattr(type(operator), "on_initial_state", None) not in (None, Operator.on_initial_state)
