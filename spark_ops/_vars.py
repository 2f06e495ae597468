"""State variables in a shard: the record of what each key group holds, and the pass that
brings a state to its code's declarations (``StateVar``, _statevar.py; RFC 0010).

Each key group of an operator's state keeps one record (key group | schema byte 3 |
``vars``, msgpack) naming the variables it holds: their kinds and version, and tombstones of
the variables renamed or dropped. It is written in the same write batch as the state, so it
is part of every checkpoint and moves with its key group through rescales.
"""
from __future__ import annotations

import logging

import msgpack

import dkv
from objectspace import ObjectNotFoundError

from ._statevar import StateVar, declarations
from .errors import StateMismatchError

log = logging.getLogger(__name__)

SCHEMA_VARS = 0x03
_RECORD = b"vars"


def _met(entry: list):
    """The batch in which a run first met the variable (None: before records said so)."""
    return entry[3] if len(entry) > 3 else None


def record_key(kg: int) -> bytes:
    return dkv.key_prefix(kg, SCHEMA_VARS) + _RECORD


def decode_record(raw: bytes | None, where: str = "") -> dict | None:
    """A key group's record: ``{"vars": {name: [kinds, version, batch upgraded, batch met]},
    "gone": {name: [new name or None, batch]}, "complete": bool}`` (batch met: the first
    batch of the latest run that used the variable); CorruptionError when it is unreadable."""
    if raw is None:
        return None
    try:
        rec = msgpack.unpackb(raw)
        if not (isinstance(rec, dict) and isinstance(rec.get("vars"), dict) and isinstance(rec.get("gone"), dict)):
            raise ValueError("not a record of state variables")
        return rec
    except Exception as e:  # noqa: BLE001 - any decoding failure is corruption
        raise dkv.CorruptionError(f"the record of state variables {where} is damaged: {e}") from None


class VarRegistry:
    """The state variables of one open shard state (``ShardState.vars``)."""

    def __init__(self, st, operator, name: str | None) -> None:
        self.st = st
        self.operator = operator
        self.name = name or type(operator).__name__.lower()
        self.declared = declarations(operator)
        self.prepared = self.declared is None
        self._records: dict = {}        # kg -> record
        self._dirty: set = set()
        self._known: set = set()        # (kg, name) met by this run since the records were read
        self._hinted: set = set()
        self._run = None
        self._run_start = -1        # the batch the current run began with here
        self.batch = -1

    def forget(self) -> None:
        """The store changed underneath (another process wrote it): read the records again."""
        self._records.clear()
        self._dirty.clear()
        self._known.clear()
        self.prepared = self.declared is None

    def begin(self, batch: int, run: str | None, operator) -> bool:
        """A batch starts; ``run`` names the run of the code that runs it (a Spark run id, a
        harness's; None: the same as before) and ``operator`` is that code's. True when it is
        a new run: a state kept open across runs takes the new code's declarations (checked
        again, ``prepare``) and meets its variables anew, so the record says which the
        latest code used (the batch it first met each in)."""
        self.batch = batch
        if run is None or run == self._run:
            return False
        self._run = run
        self._run_start = batch
        self.operator = operator
        self.declared = declarations(operator)
        self.prepared = self.declared is None
        self._known.clear()
        return True

    def _who(self) -> str:
        return f"operator {self.name!r} ({type(self.operator).__name__})"

    def record(self, kg: int) -> dict:
        rec = self._records.get(kg)
        if rec is None:
            rec = decode_record(self.st.db.get(record_key(kg)), f"of key group {kg}")
            if rec is None:
                # Complete only once a scan listed the key group's objects (prepare does, for a
                # declaring operator): a state older than records holds objects of its own.
                rec = {"vars": {}, "gone": {}, "complete": False}
            self._records[kg] = rec
        return rec

    def save(self, batch) -> None:
        """Put the records that changed into ``batch`` (the batch's write batch)."""
        for kg in sorted(self._dirty):
            batch.put(record_key(kg), msgpack.packb(self._records[kg]))
        self._dirty.clear()

    # -- the hot path: an object looked up for the first time ------------------------------

    def on_use(self, kg: int, name: str, kind: str) -> None:
        """``ctx.<kind>(name)`` met (kg, name) for the first time in this process: check it
        against the declarations and the record, and record it. O(1)."""
        d = None
        if self.declared is not None:
            d = self.declared.get(name)
            if d is None or d.is_dropped:
                raise StateMismatchError(self._undeclared(name, kind, d is not None))
            if d.kind != kind:
                raise StateMismatchError(f"{self._who()} uses state variable {name!r} as a {kind}, but "
                                         f"state_vars declares it a {d.kind}: use ctx.{d.kind}({name!r}) or "
                                         f"ctx.state({name!r}), or declare the new kind with migrate=")
        if (kg, name) in self._known:
            return
        rec = self.record(kg)
        entry = rec["vars"].get(name)
        if entry is None:
            gone = rec["gone"].get(name)
            if gone is not None and d is None:
                raise StateMismatchError(self._gone(name, gone))
            rec["gone"].pop(name, None)
            rec["vars"][name] = [[kind], d.version if d is not None else 1, None, self.batch]
            self._dirty.add(kg)
            if d is None and rec["vars"].keys() - {name} and name not in self._hinted:
                self._hinted.add(name)
                log.info("spark_ops: %s creates state variable %r, new to its state (which holds %s); if it is one "
                         "of those renamed, declare it: state_vars = {%r: StateVar(%r, renamed_from=...)}",
                         self._who(), name, sorted(rec["vars"].keys() - {name}), name, kind)
        else:
            if d is None and entry[1] > 1:
                raise StateMismatchError(self._newer(name, entry))
            if kind not in entry[0]:
                entry[0].append(kind)
                self._dirty.add(kg)
            met = _met(entry)
            if met is None or met < self._run_start:       # the first use in this run (see begin)
                entry[3:] = [self.batch]
                self._dirty.add(kg)
        self._known.add((kg, name))

    def _undeclared(self, name: str, kind: str, dropped: bool) -> str:
        if dropped:
            return (f"{self._who()} uses state variable {name!r}, which its state_vars declares dropped "
                    f"(StateVar.dropped()): declare it again to use it")
        return (f"{self._who()} uses state variable {name!r}, which its state_vars does not declare (it declares "
                f"{sorted(self.declared)}): an operator that declares its state declares every variable it uses; "
                f"add {name!r}: StateVar({kind!r})")

    def _gone(self, name: str, gone: list) -> str:
        to, at = gone
        what = f"renamed {name!r} to {to!r}" if to else f"dropped {name!r}"
        return (f"{self._who()} uses state variable {name!r}, but its state {what} in batch {at}, under code "
                f"that declared it: this code is older than its state (a rolled-back deploy?). Deploy the code "
                f"that declares it{f' (and uses {to!r})' if to else ''}, or restore the state from before batch "
                f"{at}; to start {name!r} anew on purpose, declare it: state_vars = {{{name!r}: StateVar(...)}}")

    def _newer(self, name: str, entry: list) -> str:
        return (f"{self._who()} reads state variable {name!r}, whose stored values are version {entry[1]} "
                f"(upgraded in batch {entry[2]} by code declaring StateVar(version={entry[1]}, upgrade=...)); "
                f"this code declares no version (version 1) and would meet values of a shape it does not know. "
                f"Deploy code that declares version {entry[1]} or later, or restore the state from before batch "
                f"{entry[2]}")

    # -- the migration pass ----------------------------------------------------------------------

    def head_ranges(self) -> list:
        """The key ranges ``prepare`` reads (each key group's record), none once prepared."""
        if self.prepared:
            return []
        return [(k, k + b"\x00") for k in map(record_key, self.st.key_group_range)]

    def prepare(self, batch: int) -> dict:
        """Bring every key group of the shard to the declarations, before the batch's first
        hook: renames, kind migrations, upgrades and drops, in one pass, or raise
        StateMismatchError naming every variable the code and the state disagree on, before
        anything changed. Returns counts of what it did (objects per action)."""
        if self.prepared:
            return {}
        plans, problems = {}, {}
        for kg in self.st.key_group_range:
            rec = self.record(kg)
            if not rec["complete"]:
                self._rebuild(kg, rec)
            acts = self._plan(rec, problems)
            if acts:
                plans[kg] = acts
        if problems:
            raise StateMismatchError(
                f"spark_ops: {self._who()}: its state_vars and its state disagree; the batch stops before any "
                f"state is changed.\n" + "\n".join(f"  - {m}" for m in problems.values()))
        done: dict = {}
        for kg, acts in plans.items():
            self._apply(kg, acts, batch, done)
        self.prepared = True
        if done:
            log.info("spark_ops: %s migrated its state in batch %d: %s", self._who(), batch, done)
        return done

    def _rebuild(self, kg: int, rec: dict) -> None:
        """A key group whose record does not list everything (a state older than records):
        list its variables from one scan of its objects' index."""
        found: dict = {}
        for name, kind in self.st.space(kg).catalog():
            if isinstance(name, tuple) and name and isinstance(name[-1], str):
                kinds = found.setdefault(name[-1], [])
                if kind not in kinds:
                    kinds.append(kind)
        for var, kinds in found.items():
            entry = rec["vars"].setdefault(var, [[], 1, None, None])
            entry[0] = sorted(set(entry[0]) | set(kinds))
        rec["complete"] = True
        self._dirty.add(kg)

    def _plan(self, rec: dict, problems: dict) -> list:
        stored, acts, sources = rec["vars"], [], set()
        for name, d in self.declared.items():
            if d.is_dropped:
                if name in stored:
                    acts.append(("drop", name, d))
                continue
            src = name if name in stored else None
            olds = [o for o in d.renamed_from if o in stored]
            sources.update(olds)
            if olds:
                if src is not None or len(olds) > 1:
                    both = sorted({name, *olds} & stored.keys())
                    problems[("both", name)] = (
                        f"{both} are all in the state, and {name!r} is declared renamed_from {olds}: the rename "
                        f"cannot merge them. Drop the ones to lose (StateVar.dropped()), or merge them offline "
                        f"(docs/spark_ops.md, *Offline*)")
                    continue
                src = olds[0]
                acts.append(("rename", src, name))
            if src is None:
                continue
            kinds, version = stored[src][0], stored[src][1]
            if any(k != d.kind for k in kinds):
                if d.migrate is None:
                    problems[("kind", name)] = (
                        f"{name!r} is stored as a {' and a '.join(k for k in kinds if k != d.kind)} and declared a "
                        f"{d.kind}: add migrate=, a function of an old object's contents that returns the new "
                        f"{d.kind}'s (StateVar({d.kind!r}, migrate=...)), or drop the variable")
                    continue
                acts.append(("migrate", name, d))
            if version > d.version:
                problems[("newer", name)] = (
                    f"{name!r} holds version {version} values (upgraded in batch {stored[src][2]}) and the code "
                    f"declares version {d.version}: the code is older than its state (a rolled-back deploy?). "
                    f"Deploy code that declares version {version} or later, or restore the state from before "
                    f"batch {stored[src][2]}")
            elif version < d.version and not any(k != d.kind for k in kinds):
                acts.append(("upgrade", name, version, d))
        for name in stored:
            if name not in self.declared and name not in sources:
                kinds = "/".join(stored[name][0]) or "?"
                problems[("undeclared", name)] = (
                    f"{name!r} ({kinds}) is in the state but not in state_vars: declare it ({name!r}: "
                    f"StateVar({stored[name][0][0] if stored[name][0] else 'value'!r})), declare its new name "
                    f"(StateVar(..., renamed_from={name!r})), or drop it ({name!r}: StateVar.dropped())")
        return acts

    def _apply(self, kg: int, acts: list, batch: int, done: dict) -> None:
        sp, ttl, rec = self.st.space(kg), self.st.ttl, self._records[kg]
        affected = {a[1] for a in acts}
        objects = [(n, k) for n, k in sp.catalog() if isinstance(n, tuple) and n and n[-1] in affected]
        order = {"drop": 0, "rename": 1, "migrate": 2, "upgrade": 3}
        for act in sorted(acts, key=lambda a: order[a[0]]):
            verb, var = act[0], act[1]
            count = 0
            if verb == "drop":
                for n, _ in objects:
                    if n[-1] == var:
                        sp.delete(n)
                        ttl.forget_object(kg, n)
                        count += 1
                del rec["vars"][var]
                rec["gone"][var] = [None, batch]
            elif verb == "rename":
                new = act[2]
                d = self.declared[new]
                for i, (n, k) in enumerate(objects):
                    if n[-1] == var:
                        target = n[:-1] + (new,)
                        sp.rename(n, target)
                        ttl.forget_object(kg, n)
                        if d.ttl is not None:
                            ttl.stamp_all(kg, sp.get(target), d.ttl)
                        objects[i] = (target, k)
                        count += 1
                rec["vars"][new] = rec["vars"].pop(var)
                rec["gone"][var] = [new, batch]
                affected.add(new)
            elif verb == "migrate":
                count = self._migrate(sp, kg, objects, var, act[2])
                rec["vars"][var][0] = [act[2].kind]
            else:
                count = self._upgrade(sp, objects, var, act[2], act[3])
                rec["vars"][var][1], rec["vars"][var][2] = act[3].version, batch
            self._dirty.add(kg)
            key = f"{verb} {var}" if verb != "rename" else f"rename {var} -> {act[2]}"
            done[key] = done.get(key, 0) + count

    def _migrate(self, sp, kg: int, objects: list, var: str, d: StateVar) -> int:
        count = 0
        for n, k in objects:
            if n[-1] != var or k == d.kind:
                continue
            old = sp.get(n)
            contents = old.value if k == "value" else old.copy()
            sp.delete(n)
            self.st.ttl.forget_object(kg, n)
            try:
                new = d.migrate(contents)
            except Exception as e:
                e.add_note(f"spark_ops: in {type(self.operator).__name__}.state_vars[{var!r}].migrate, migrating "
                           f"the {k} of key {n[:-1]!r} to a {d.kind}")
                raise
            count += 1
            if new is None:
                continue
            obj = _create(sp, n, d, new)
            if d.ttl is not None:
                self.st.ttl.register(kg, obj, d.ttl)
        return count

    def _upgrade(self, sp, objects: list, var: str, version: int, d: StateVar) -> int:
        count = 0
        for n, _ in objects:
            if n[-1] != var:
                continue
            try:
                _rewrite(sp.get(n), lambda v: d.upgrade(v, version))
            except ObjectNotFoundError:
                continue
            except Exception as e:
                e.add_note(f"spark_ops: in {type(self.operator).__name__}.state_vars[{var!r}].upgrade, upgrading "
                           f"key {n[:-1]!r} from version {version} to {d.version}")
                raise
            count += 1
        return count


def _create(sp, name, d: StateVar, contents):
    """A new object of ``d``'s kind named ``name`` holding ``contents`` (what migrate returned)."""
    kind = d.kind
    if kind == "value":
        return sp.create_value(name, contents)
    if kind == "array":
        items = list(contents)
        obj = sp.create_array(name, len(items))
        for i, v in enumerate(items):
            obj[i] = v
        return obj
    if kind == "ndarray":
        import numpy as np
        arr = np.asarray(contents)
        obj = sp.create_ndarray(name, arr.shape, arr.dtype, chunks=d.params.get("chunks"),
                                fill_value=d.params.get("fill_value", 0))
        obj[...] = arr
        return obj
    return getattr(sp, f"create_{kind}")(name, contents)


def _rewrite(obj, f) -> None:
    """Replace each value of ``obj`` by ``f(value)``: a value's value, a dict's values, a
    sequence's or set's elements."""
    kind = obj.kind
    if kind == "value":
        obj.value = f(obj.value)
    elif kind in ("dict", "sorted_dict"):
        for k in list(obj.keys()):
            obj[k] = f(obj[k])
    elif kind in ("list", "array", "queue"):
        for i in range(len(obj)):
            obj[i] = f(obj[i])
    elif kind == "linked_list":
        for node in list(obj.nodes()):
            node.value = f(node.value)
    elif kind in ("set", "sorted_set", "stack"):
        items = [f(v) for v in (obj.copy() if kind == "stack" else list(obj))]
        obj.clear()
        (obj.extend if kind == "stack" else obj.update)(items)
    else:
        raise TypeError(f"a {kind} cannot be upgraded value by value")
