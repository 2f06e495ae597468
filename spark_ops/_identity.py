"""Which operators a query has: their identities, the query's ledger, and a run's verdict.

An operator's identity is its name (its folder, ``<state>/<query id>/<name>/``), derived
from its class unless ``name=`` fixes it. Beside the operators' folders a query keeps

    _query/operators/<name>.json   one per operator the query ever ran: its identity, when
                                   it joined, and ``retired`` once its state was dropped
    _query/runs/<run id>.json      the verdict on a run: which operators it has, and the
                                   error that stops it if its code and the state disagree

and each operator ``<name>/identity.json`` (its identity as of its latest run). The driver
decides a run's verdict when the run starts (_listener.py) and the tasks enforce it
(``check_run``); without a driver verdict (Spark Connect) the tasks check what they can.
See RFC 0010.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

import dkv

from . import _layout
from .errors import StateMismatchError

log = logging.getLogger(__name__)

LEDGER = "_query/operators/"
VERDICTS = "_query/runs/"
IDENTITY = "identity.json"


def identity(operator, name: str, named: bool) -> dict:
    """The identity of ``operator`` run under ``name`` (``named``: given by ``name=``)."""
    from ._statevar import describe
    cls = type(operator)
    return {"name": name, "class": f"{cls.__module__}.{cls.__qualname__}", "from": "name=" if named else "class",
            "state_vars": describe(operator)}


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S %z")


def _json(store, key: str):
    try:
        return json.loads(store.get(key))
    except dkv.ObjectMissingError:
        return None
    except ValueError as e:
        raise dkv.CorruptionError(f"{store.location}/{key} is damaged: {e}") from None


def _put(store, key: str, body: dict) -> None:
    store.put(key, json.dumps(body, sort_keys=True).encode())


class QueryDir:
    """A query's folder (``<state>/<query id>``) and its operators' folders, opened as the
    runtime opens them (a ``memory://`` name is a store of its own, not a prefix)."""

    def __init__(self, root: str, query: str, dkv_options: dict | None = None) -> None:
        self.root, self.query = root.rstrip("/"), query
        self.location = f"{self.root}/{query}"
        self.options = dict(dkv_options or {})

    @property
    def store(self):
        from ._runtime import _store
        return _store(self.location, self.options)

    def operator(self, name: str):
        from ._runtime import _store
        return _store(f"{self.location}/{name}", self.options)


def read_ledger(qd: QueryDir, write: bool = True) -> dict:
    """``{name: record}`` of the query. A state made before the ledger existed has none: its
    operators are found by their ``config`` (one listing of the query's folder) and written
    into a new ledger (unless ``write`` is False)."""
    store = qd.store
    out = {}
    for key, _ in store.list(LEDGER):
        if key.endswith(".json"):
            rec = _json(store, key)
            if rec is not None:
                out[key[len(LEDGER):-5]] = rec
    if out:
        return out
    for key, _ in store.list(""):
        parts = key.split("/")
        if len(parts) == 2 and parts[1] == "config" and not parts[0].startswith("_"):
            cfg = _json(store, key) or {}
            rec = {"name": parts[0], "class": cfg.get("operator"), "from": "class", "joined": {"found": _now()}}
            if write:
                store.put_if_absent(f"{LEDGER}{parts[0]}.json", json.dumps(rec, sort_keys=True).encode())
            out[parts[0]] = rec
    return out


def last_batch(store) -> int | None:
    """The newest checkpoint epoch of the operator whose folder is ``store`` (None: none)."""
    best = None
    for lay in _layout.layouts(store):
        for s in range(lay.shards):
            for c in dkv.list_checkpoints(store, lay.instance(s)):
                best = c.epoch if best is None else max(best, c.epoch)
    return best


def _label(rec: dict) -> str:
    cls = rec.get("class")
    return f"'{rec['name']}'" + (f" (class {cls})" if cls else "")


@dataclass
class Verdict:
    """What a run's start decided: ``error`` None when the run may go on."""
    run: str
    operators: list                   # the run's operator names
    new: list = field(default_factory=list)
    retired: list = field(default_factory=list)
    error: str | None = None

    def to_json(self) -> dict:
        return {"run": self.run, "operators": self.operators, "new": self.new, "retired": self.retired,
                "error": self.error, "decided": _now()}


def _retire(qd: QueryDir, ledger: dict, name: str, run: str) -> None:
    rec = dict(ledger[name], retired={"run": run, "time": _now(), "after_batch": last_batch(qd.operator(name))})
    _put(qd.store, f"{LEDGER}{name}.json", rec)
    log.warning("spark_ops: operator %r of query %s retired: its state stays in %s/%s until purged "
                "(python -m spark_ops purge)", name, qd.query, qd.location, name)


def _join(qd: QueryDir, ledger: dict, name: str, ident: dict, run: str) -> None:
    qd.store.put_if_absent(f"{LEDGER}{name}.json",
                           json.dumps({**ident, "joined": {"run": run, "time": _now()}}, sort_keys=True).encode())
    if ledger:
        log.warning("spark_ops: operator %r is new to query %s (state %s; its other operators: %s): it starts "
                    "with empty state", name, qd.query, qd.root, sorted(ledger))


def stop_message(qd: QueryDir, problems: list) -> str:
    return (f"spark_ops: the code of this run of query {qd.query} and its state in {qd.root} disagree; the query "
            f"stops before any state is read or written.\n" + "\n".join(problems))


def decide(qd: QueryDir, run: str, planned: dict, retire: set) -> Verdict:
    """The verdict on run ``run`` of the query, whose operators are ``planned`` (``{name:
    identity}``), asked to retire ``retire``. Writes what it decides to the ledger (new
    operators, retirements) and the operators' identities; ``write_verdict`` writes the
    verdict itself."""
    ledger = read_ledger(qd)
    v = Verdict(run, sorted(planned))
    back = [n for n in sorted(planned) if (ledger.get(n) or {}).get("retired")]
    unknown = sorted(n for n in retire if n not in ledger or n in planned)
    orphans = [n for n, rec in sorted(ledger.items()) if n not in planned and not rec.get("retired")
               and n not in retire]
    new = [n for n in sorted(planned) if n not in ledger]
    problems = []
    if orphans:
        problems.append(_orphans_message(qd, orphans, ledger, [planned[n] for n in new]))
    for n in back:
        problems.append(_retired_message(qd, n, ledger[n]))
    if unknown:
        held = sorted(n for n, r in ledger.items() if not r.get("retired") and n not in planned)
        problems.append(f"retire={unknown} names no operator that the state holds and this run leaves out "
                        f"(such operators: {held or 'none'}; an operator this run has cannot be retired).")
    if problems:
        v.error = stop_message(qd, problems)
        return v
    for n in sorted(retire):
        if not ledger[n].get("retired"):
            _retire(qd, ledger, n, run)
            v.retired.append(n)
    for n in new:
        _join(qd, ledger, n, planned[n], run)
        v.new.append(n)
    for n, ident in planned.items():
        record_identity(qd.operator(n), ident)
    return v


def _orphans_message(qd: QueryDir, orphans: list, ledger: dict, new: list, instead: str | None = None) -> str:
    held = []
    for n in orphans:
        last = last_batch(qd.operator(n))
        held.append(f"  {_label(ledger[n])}, last checkpoint: batch {last}" if last is not None
                    else f"  {_label(ledger[n])}, no checkpoint yet")
    if instead is None:
        instead = ("This run has instead: " + ", ".join(f"{_label(i)} (no state yet)" for i in new) + "."
                   if new else "This run has no operator without state in their place.")
    first = orphans[0]
    return ("Its state holds operator(s) that this run does not have:\n" + "\n".join(held) + "\n" + instead + "\n"
            f"Either keep the state under the new code: pass name={first!r} to the apply_operator (or built-in) "
            f"call of the operator that replaces it (an operator's state follows its name, which is its class "
            f"name, lowercased, unless name= fixes it);\n"
            f"or drop it on purpose: pass retire={orphans!r} to any operator of this query, or run\n"
            f"  python -m spark_ops retire {qd.root} {' '.join(orphans)} --query {qd.query}\n"
            f"(the state stays in {qd.location}/{first} until python -m spark_ops purge removes it).")


def _retired_message(qd: QueryDir, name: str, rec: dict) -> str:
    r = rec.get("retired") or {}
    after = r.get("after_batch")
    return (f"Operator {name!r} was retired ({r.get('time', '?')}{f', after batch {after}' if after is not None else ''})"
            f": its old state in {qd.location}/{name} is not resumed. To start it empty again, remove that state "
            f"first: python -m spark_ops purge {qd.root} {name} --query {qd.query}; or give the operator another "
            f"name=.")


def recorded_identity(ostore) -> dict | None:
    """An operator's recorded identity; for a state older than identities, what its
    ``config`` says (the class name then, lowercased, was its name)."""
    held = _json(ostore, IDENTITY)
    if held is None:
        cfg = _json(ostore, "config")
        if cfg and cfg.get("operator"):
            held = {"name": str(cfg["operator"]).lower(), "class": cfg["operator"], "from": "class"}
    return held


def record_identity(ostore, ident: dict) -> None:
    """Write an operator's identity (``identity.json``) when it changed; a new class under
    the same name is logged."""
    old = _json(ostore, IDENTITY)
    if old is not None and old.get("class") != ident.get("class"):
        log.info("spark_ops: operator %r now runs class %s (was %s)", ident["name"], ident.get("class"),
                 old.get("class"))
    if old is None or {k: old.get(k) for k in ident} != ident:
        _put(ostore, IDENTITY, ident)


def queries(store) -> list:
    """The query ids under a state root (folders with a ledger or an operator's ``config``).
    One listing of the root."""
    found = set()
    for key, _ in store.list(""):
        parts = key.split("/")
        if len(parts) >= 3 and (parts[1] == "_query" or (len(parts) == 3 and parts[2] == "config")) \
                and not parts[0].startswith("_"):
            found.add(parts[0])
    return sorted(found)


def retire(qd: QueryDir, names: list) -> list:
    """Retire operators of the query offline (``python -m spark_ops retire``): their state is
    no longer expected by the query's code, and kept until ``purge``. Returns the names
    retired now; ValueError for a name the query does not have."""
    ledger = read_ledger(qd)
    unknown = [n for n in names if n not in ledger]
    if unknown:
        raise ValueError(f"query {qd.query} in {qd.root} has no operator {unknown}; its operators: {sorted(ledger)}")
    done = []
    for n in names:
        if not ledger[n].get("retired"):
            _retire(qd, ledger, n, "offline")
            done.append(n)
    return done


def purge(qd: QueryDir, names: list) -> dict:
    """Delete the state of retired operators (``python -m spark_ops purge``), then their
    ledger records: the names are free again (an operator of that name starts empty).
    Returns ``{name: files deleted}``; ValueError for a name not retired."""
    ledger = read_ledger(qd)
    bad = [n for n in names if not (ledger.get(n) or {}).get("retired")]
    if bad:
        raise ValueError(f"only retired operators can be purged; {bad} of query {qd.query} in {qd.root} "
                         f"{'are' if len(bad) > 1 else 'is'} not retired (python -m spark_ops retire first)")
    out = {}
    for n in names:
        store = qd.operator(n)
        keys = [k for k, _ in store.list("")]
        store.delete_many(keys)
        qd.store.delete(f"{LEDGER}{n}.json")
        out[n] = len(keys)
        log.info("spark_ops: purged operator %r of query %s: %d files deleted", n, qd.query, len(keys))
    return out


def write_verdict(qd: QueryDir, v: Verdict) -> None:
    _put(qd.store, f"{VERDICTS}{v.run}.json", v.to_json())


# -- in the tasks ---------------------------------------------------------------------------

_SEEN: dict = {}            # (query folder, run) -> verdict (dict, or False: none)
_CHECKED: dict = {}         # (query folder, run, name) -> the last batch the fallback checked (-1: none)
_LOCK = threading.Lock()


def check_verdict(qd: QueryDir, run: str) -> bool:
    """In a task of run ``run``, before anything else: raise StateMismatchError if the
    run's verdict refused it. True when the driver decided one (one GET per process and
    run); False without (no driver listener: Spark Connect), when ``check_run`` checks what
    a task can."""
    key = (qd.location, run)
    with _LOCK:
        verdict = _SEEN.get(key)
    if verdict is None:
        verdict = _json(qd.store, f"{VERDICTS}{run}.json") or False
        with _LOCK:
            _SEEN[key] = verdict
    if verdict and verdict.get("error"):
        raise StateMismatchError(verdict["error"])
    return bool(verdict)


def check_run(qd: QueryDir, run: str, name: str, ident: dict, batch: int, first_batch: int,
              retire: tuple = ()) -> None:
    """Without a driver's verdict, in a task after its run registered (``first_batch``: the
    batch it registered at): the operator's own ledger record (retired: refused; absent:
    joined) and, once from the run's second batch on, that every operator of the ledger took
    part in the run (registered it in its ``runs/``); a missing one is refused unless
    ``retire`` names it."""
    _fallback(qd, run, name, ident, batch, first_batch, set(retire))


def _fallback(qd: QueryDir, run, name, ident, batch, first_batch, retire) -> None:
    fkey = (qd.location, run, name)
    with _LOCK:
        checked = _CHECKED.get(fkey)
    if checked is None:
        ledger = read_ledger(qd)
        rec = ledger.get(name)
        if rec and rec.get("retired"):
            raise StateMismatchError(stop_message(qd, [_retired_message(qd, name, rec)]))
        if rec is None:
            _join(qd, ledger, name, ident, run)
        record_identity(qd.operator(name), ident)
        checked = -1
    if checked < 0 < batch - first_batch:
        ledger = read_ledger(qd)
        absent = [n for n, rec in sorted(ledger.items()) if n != name and not rec.get("retired")
                  and not any(k.endswith(f"-{run}") for k, _ in qd.operator(n).list("runs/"))]
        for n in absent:
            if n in retire:
                _retire(qd, ledger, n, run)
        absent = [n for n in absent if n not in retire]
        if absent:
            ran = sorted(n for n, r in ledger.items() if n not in absent and not r.get("retired"))
            raise StateMismatchError(stop_message(qd, [_orphans_message(
                qd, absent, ledger, [],
                f"This run (since batch {first_batch}) has not run them; its operators: {ran}. Its first batch "
                f"ran without them: no driver-side check ran (Spark Connect), so give every operator a name= "
                f"that stays when its class is renamed.")]).replace("stops before any state is read or written",
                                                                     "stops"))
        checked = batch
    with _LOCK:
        _CHECKED[fkey] = checked


def forget() -> None:
    """Forget the verdicts read (tests)."""
    with _LOCK:
        _SEEN.clear()
        _CHECKED.clear()
