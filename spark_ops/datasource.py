"""Operator state as a Spark DataFrame: the ``objectspace`` Python data source.

    spark_ops.register_datasource(spark)           # once per session (idempotent)
    df = spark.read.format("objectspace").option("epoch", 7).load("./state")
    changes = (spark.read.format("objectspace").option("changes_from", 5).option("epoch", 7)
               .load("./state"))

One row per object slot: ``operator, query_id, instance, epoch, key_group, key, object,
kind, slot, value, expires_at`` (key, slot and value as JSON; ``expires_at`` the ms since the
Unix epoch at which state TTL removes the slot — its entry's or element's expiry, else its
object's — or null without ttl, see docs/spark_ops.md, *State TTL*). For a spark_ops state root (or one
query's or operator's folder) ``key`` is the operator key and ``object`` the state name
(``ctx.value("total")`` → ``"total"``); for a plain ``ObjectSpace.open`` folder ``key`` is
null and ``object`` the object name (tuple names as JSON arrays). With ``changes_from`` the
rows are the slots added, changed and removed from that epoch to ``epoch`` (default the
newest), with ``change_type`` and ``old_value``, like Spark's state change feed. With
``option("timers", True)`` the rows are the registered timers instead (as Spark's
``readRegisteredTimers``): ``operator, query_id, instance, epoch, key_group, key, kind,
time, name``, kind ``"event"`` or ``"processing"``, time in ms since the Unix epoch. With
``option("variables", True)`` (on a state root) the rows are the operators' state variables
(``python -m spark_ops vars``): ``query_id, operator, variable, kinds, version, objects,
bytes, met, status, declared``, so what the code no longer uses and what dropping it would
free can be queried (RFC 0010).

Options: ``epoch``, ``changes_from``, ``timers``, ``instance`` (an instance or a path of instances,
e.g. ``<query id>/<operator>``), ``operator`` (keep this operator only), ``key_group``,
and dkv's store options (``dkv.STORE_OPTIONS``: for S3 ``endpoint_url``, ``region_name``,
credentials, ``cache_dir``, ``range_read_cost``, ...). The read
is split into one partition per shard (per pair of shards for a change feed), so it runs
in parallel; each task opens its shard read-only. With the session's Python filter pushdown
on (``spark.sql.python.filterPushdown.enabled``), ``operator`` and ``key_group`` filters
(``=``, ``IN``) prune the shards and key groups read. See docs/inspection.md.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

try:
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
except ImportError:         # spark_ops without pyspark (the test harness): nothing to register
    DataSource = DataSourceReader = InputPartition = object

import objectspace

from ._expiries import Expiries
from ._inspect import instance_timers
from ._keys import from_parts

NAME = "objectspace"
_ALL = (0, 1 << 16)
_FIELDS = ("operator string, query_id string, instance string, epoch long, key_group int, key string, "
           "object string, kind string, slot string, value string")
READ_SCHEMA = _FIELDS + ", expires_at long"
CHANGES_SCHEMA = _FIELDS + ", change_type string, old_value string, from_epoch long"
TIMERS_SCHEMA = ("operator string, query_id string, instance string, epoch long, key_group int, key string, "
                 "kind string, time long, name string")
VARIABLES_SCHEMA = ("query_id string, operator string, variable string, kinds array<string>, version int, "
                    "objects long, bytes long, met long, status string, declared string")


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register_datasource(spark: SparkSession) -> None:
    """Make ``spark.read.format("objectspace")`` available in ``spark``. Explicit, and safe
    to call again. When the session has Python data source filter pushdown on
    (``spark.sql.python.filterPushdown.enabled``, off by Spark's default) a filter on
    ``operator`` or ``key_group`` (``=``, ``IN``) is pushed down: only those operators'
    shards and those key groups are read."""
    try:
        pushdown = str(spark.conf.get(PUSHDOWN_CONF, "false")).lower() == "true"
    except Exception:  # noqa: BLE001 - a session that cannot say: no pushdown
        pushdown = False
    spark.dataSource.register(ObjectSpacePushdownSource if pushdown else ObjectSpaceDataSource)


def _json(v) -> str:
    return json.dumps(objectspace.to_jsonable(v), ensure_ascii=False, separators=(",", ":"))


def _int(options, name):
    v = options.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"option {name} must be an int, got {v!r}") from None


def _flag(options, name) -> bool:
    v = str(options.get(name) or "").strip().lower()
    if v in ("", "false", "0", "no"):
        return False
    if v in ("true", "1", "yes"):
        return True
    raise ValueError(f"option {name} must be true or false, got {options.get(name)!r}")


def _store_options(options) -> dict:
    """The options that make the store (``dkv.STORE_OPTIONS``), of the types ``dkv.Options``
    declares them: Spark hands the reader every option as a string."""
    import dataclasses

    import dkv
    kinds = {f.name: str(f.type).split(" ")[0] for f in dataclasses.fields(dkv.Options)}
    out: dict = {}
    for name in dkv.STORE_OPTIONS:
        v = options.get(name)
        if v is None or v == "":
            continue
        if kinds[name] == "bool":
            out[name] = _flag(options, name)
        elif kinds[name] == "int":
            out[name] = _int(options, name)
        elif kinds[name] == "float":
            try:
                out[name] = float(v)
            except ValueError:
                raise ValueError(f"option {name} must be a number of seconds, got {v!r}") from None
        else:
            out[name] = v
    return out


def _operator(ref) -> tuple:
    """(operator, query id) of a shard's InstanceRef; (None, None) for a plain store."""
    return ref.labels.get("operator"), ref.labels.get("query_id")


def _key_and_object(ref, name) -> tuple:
    """(key JSON or None, object) of an object name: operator state is named (*key parts, name)."""
    if ref.member is not None and type(name) is tuple and len(name) >= 2 and type(name[-1]) is str:
        key = from_parts(name[:-1])
        return _json(key[0] if len(key) == 1 else key), name[-1]
    return None, name if type(name) is str else _json(name)


class _Partition(InputPartition):
    def __init__(self, old, new, groups: tuple) -> None:
        self.value = None
        self.old, self.new, self.groups = old, new, groups


class ObjectSpaceDataSource(DataSource):
    """``spark.read.format("objectspace")``: one row per slot of every object space."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self):
        if _flag(self.options, "variables"):
            return VARIABLES_SCHEMA
        if _flag(self.options, "timers"):
            return TIMERS_SCHEMA
        return CHANGES_SCHEMA if self.options.get("changes_from") not in (None, "") else READ_SCHEMA

    def reader(self, schema):
        return _Reader(dict(self.options))


class ObjectSpacePushdownSource(ObjectSpaceDataSource):
    """The same source with filter pushdown, registered when the session allows it (Spark
    refuses a reader that implements pushFilters while the conf is off)."""

    def reader(self, schema):
        return _PushdownReader(dict(self.options))


class _Reader(DataSourceReader):
    def __init__(self, options: dict) -> None:
        self.location = options.get("path")
        if not self.location:
            raise ValueError("objectspace data source: give the state location to load(...)")
        self.epoch = _int(options, "epoch")
        self.changes_from = _int(options, "changes_from")
        self.key_group = _int(options, "key_group")
        self.instance = options.get("instance") or None
        self.operator = options.get("operator") or None
        self.timers = _flag(options, "timers")
        self.variables = _flag(options, "variables")
        if self.variables and (self.timers or self.changes_from is not None or self.epoch is not None):
            raise ValueError("objectspace data source: option variables reads each operator's state variables at "
                             "its newest checkpoint; it takes no timers, changes_from or epoch")
        if self.timers and self.changes_from is not None:
            raise ValueError("objectspace data source: option timers reads the timers registered at an epoch; "
                             "it has no change feed (drop changes_from)")
        self.dkv_options = _store_options(options)
        self.operators = self.key_groups = None     # narrowed by pushed filters (_PushdownReader)

    def partitions(self):
        if self.variables:
            return [_Partition(None, "variables", _ALL)]
        kw = dict(instance=self.instance, **self.dkv_options)
        if self.changes_from is None:
            parts = [_Partition(None, ref, _ALL)
                     for ref in objectspace.find_instances(self.location, epoch=self.epoch, **kw)]
        else:
            parts = [_Partition(o, n, g)
                     for o, n, g in objectspace.pair_instances(self.location, self.changes_from, self.epoch, **kw)]
        if self.operator is not None:
            parts = [p for p in parts if _operator(p.new or p.old)[0] == self.operator]
        if self.operators is not None:
            parts = [p for p in parts if _operator(p.new or p.old)[0] in self.operators]
        return parts or [_Partition(None, None, _ALL)]

    def _key_groups(self) -> list:
        """The key groups to read: the option's, narrowed by pushed filters (None: all)."""
        if self.key_groups is None:
            return [self.key_group]
        wanted = self.key_groups if self.key_group is None else self.key_groups & {self.key_group}
        return sorted(wanted)

    def read(self, partition):
        if partition.new is None and partition.old is None:
            return iter(())
        if self.variables:
            return self._variables()
        if self.timers:
            return self._timers(partition.new, partition.groups)
        if self.changes_from is None:
            return self._slots(partition.new, partition.groups)
        return self._changes(partition)

    def _variables(self):
        from ._inspect import read_vars
        for r in read_vars(self.location, operator=self.operator, **self.dkv_options):
            yield (r["query_id"], r["operator"], r["variable"], r["kinds"], r["version"], r["objects"], r["bytes"],
                   r["met"], r["status"], None if r["declared"] is None else _json(r["declared"]))

    def _timers(self, ref, groups):
        if ref.member is None:          # a plain object space has no timers
            return
        for want in self._key_groups():
            for kg, kind, time, key, name in instance_timers(ref, key_group=want, groups=groups, **self.dkv_options):
                yield (*_operator(ref), ref.instance, ref.epoch, kg, _json(key), kind, time, name)

    def _slots(self, ref, groups):
        with ref.open(**self.dkv_options) as db:
            for want in self._key_groups():
                for kg, space in objectspace.spaces_of(db, key_group=want, key_group_range=groups):
                    # a shard's key group may hold TTL records; a plain space has none
                    exp = Expiries(db, kg) if ref.member is not None and kg is not None else None
                    for info, slot, value, ik in objectspace.walk_slots(space, keys=True):
                        key, obj = _key_and_object(ref, info.name)
                        yield (*_operator(ref), ref.instance, ref.epoch, kg, key, obj, info.kind,
                               _json(slot), _json(value), exp.item(info.name, ik, info.kind) if exp is not None and exp.any else None)

    def _changes(self, p):
        ref = p.new or p.old
        to_epoch = p.new.epoch if p.new is not None else self.epoch
        for want in self._key_groups():
            for kg, ch in objectspace.diff_pair(p.old, p.new, p.groups, key_group=want, **self.dkv_options):
                if isinstance(ch, objectspace.ObjectChange):
                    continue
                key, obj = _key_and_object(ref, ch.name)
                yield (*_operator(ref), ref.instance, to_epoch, kg, key, obj, ch.kind, _json(ch.slot),
                       None if ch.change == "removed" else _json(ch.new), ch.change,
                       None if ch.change == "added" else _json(ch.old), self.changes_from)


def _values(f) -> set | None:
    """The values an ``=`` or ``IN`` filter allows (None: another kind of filter)."""
    from pyspark.sql.datasource import EqualTo, In
    if isinstance(f, EqualTo):
        return {f.value}
    if isinstance(f, In):
        return set(f.value)
    return None


class _PushdownReader(_Reader):
    def pushFilters(self, filters):
        """Prune by ``operator`` and ``key_group`` filters (``=``, ``IN``): only those
        operators' shards and those key groups are read. Every filter is still returned for
        Spark to apply: what is read is a superset of what they keep, never less."""
        for f in filters:
            values = _values(f) if len(f.attribute) == 1 else None
            if values is None:
                continue
            column = f.attribute[0]
            if column == "operator":
                self.operators = values if self.operators is None else self.operators & values
            elif column == "key_group" and all(type(v) is int for v in values):
                self.key_groups = values if self.key_groups is None else self.key_groups & values
        return filters


__all__ = ["ObjectSpaceDataSource", "ObjectSpacePushdownSource", "register_datasource", "READ_SCHEMA", "CHANGES_SCHEMA",
           "TIMERS_SCHEMA", "VARIABLES_SCHEMA"]
