"""The query ledger, the driver's verdict on a run and the tasks' fallback (RFC 0010), without
Spark: the driver's decision (``_listener.decide_run``) on the operators a plan names, and what
a task checks when no driver decided (Spark Connect)."""
from __future__ import annotations

import uuid

import pytest

from spark_ops import Operator, StateMismatchError, _identity, _listener, _runs
from spark_ops._runtime import _store


class A(Operator):
    def on_event(self, key, row, ctx):
        pass


class B(A):
    pass


def _root() -> str:
    return f"memory://ledger-{uuid.uuid4().hex}"


def _applied(root, name, cls=A, retire=()):
    return _listener.Applied(root, name, _identity.identity(cls(), name, False), tuple(retire), {})


def _decide(root, query, run, ops):
    return _listener.decide_run(ops, query, run)[root]


def test_a_new_query_starts_and_a_later_run_is_checked_against_its_ledger():
    root, q = _root(), "q1"
    v = _decide(root, q, "r1", [_applied(root, "a"), _applied(root, "b", B)])
    assert v.error is None and v.new == ["a", "b"]
    qd = _identity.QueryDir(root, q)
    assert sorted(_identity.read_ledger(qd)) == ["a", "b"]
    assert _identity.check_verdict(qd, "r1") is True
    # the next run without 'b': refused, naming it and the ways out
    v = _decide(root, q, "r2", [_applied(root, "a")])
    assert "'b' (class" in v.error and "retire=['b']" in v.error and "no operator without state" in v.error
    with pytest.raises(StateMismatchError, match="'b'"):
        _identity.check_verdict(qd, "r2")
    # with 'b' retired: the run goes on; 'b' is retired in the ledger
    v = _decide(root, q, "r3", [_applied(root, "a", retire=["b"])])
    assert v.error is None and v.retired == ["b"]
    assert _identity.read_ledger(qd)["b"]["retired"]["run"] == "r3"
    # a retired name that comes back: refused, naming purge
    v = _decide(root, q, "r4", [_applied(root, "a"), _applied(root, "b", B)])
    assert "Operator 'b' was retired" in v.error and "python -m spark_ops purge" in v.error
    # purged: the name is free again and starts empty
    assert _identity.purge(qd, ["b"]) == {"b": 1}            # its identity.json
    v = _decide(root, q, "r5", [_applied(root, "a"), _applied(root, "b", B)])
    assert v.error is None and v.new == ["b"]


def test_two_operators_of_one_name_and_bad_retire_lists_are_refused():
    root = _root()
    _decide(root, "q", "r1", [_applied(root, "a")])
    v = _decide(root, "q", "r2", [_applied(root, "a"), _applied(root, "a", B)])
    assert "both named 'a'" in v.error and "name=" in v.error
    v = _decide(root, "q", "r3", [_applied(root, "a", retire=["zzz"])])
    assert "retire=['zzz'] names no operator" in v.error


def test_a_state_older_than_the_ledger_is_read_from_its_operators_configs(tmp_path):
    root = str(tmp_path / "state")          # a folder: the query's folder lists its operators' files
    for name in ("old1", "old2"):
        _store(f"{root}/q/{name}", {}).put("config", b'{"key_groups": 8, "operator": "Old", "format": 1}')
    qd = _identity.QueryDir(root, "q")
    assert sorted(_identity.read_ledger(qd, write=False)) == ["old1", "old2"]
    assert qd.store.list(_identity.LEDGER) == []                # write=False wrote nothing
    v = _decide(root, "q", "r1", [_applied(root, "old1")])
    assert "'old2' (class Old)" in v.error


def test_without_a_driver_verdict_the_tasks_check_from_the_second_batch_of_a_run():
    """Spark Connect: no listener. The run's first batch goes (a task cannot know whether an
    operator that has not run yet is still in the query); from the second on, an operator of
    the ledger that did not take part in the run stops it, unless retired."""
    root = _root()
    qd = _identity.QueryDir(root, "q")
    ident = {n: _identity.identity(A(), n, False) for n in ("a", "b", "x")}
    for n in ("a", "b"):            # run r1 had a and b, from batch 0
        first = _runs.check(qd.operator(n), f"{root}/q/{n}", "00000000-0000-0000-0000-000000000001", 0, 0)
        _identity.check_run(qd, "00000000-0000-0000-0000-000000000001", n, ident[n], 0, first)
    assert sorted(_identity.read_ledger(qd)) == ["a", "b"]
    run2 = "00000000-0000-0000-0000-000000000002"       # run r2 has a and x (b renamed to x?)
    assert _identity.check_verdict(qd, run2) is False
    for batch in (5,):
        for n in ("a", "x"):
            first = _runs.check(qd.operator(n), f"{root}/q/{n}", run2, batch, 0)
            _identity.check_run(qd, run2, n, ident[n], batch, first)
    with pytest.raises(StateMismatchError) as e:
        _identity.check_run(qd, run2, "x", ident["x"], 6, 5)
    assert "'b' (class" in str(e.value) and "since batch 5" in str(e.value) and "name=" in str(e.value)
    _identity.forget()
    _identity.check_run(qd, run2, "x", ident["x"], 6, 5, retire=("b",))
    assert _identity.read_ledger(qd)["b"]["retired"]
