"""A query's code changes and its state follows (RFC 0010), in the harness (no Spark).

Each change of an operator's code is run across restarts (a new harness on the same state):
the state is either carried over exactly (a model checks every output row) or the change is
refused with an error that names the operator or variable and the way out, before any
state is written (the state's checkpoints are what they were).
"""
from __future__ import annotations

import logging

import dkv
import pytest

from spark_ops import EpochGapError, Operator, StateMismatchError, StateVar
from spark_ops.testing import OperatorHarness


def checkpoints(state) -> dict:
    """Instance -> retained checkpoint epochs of every shard under ``state``."""
    store = dkv.open_store(str(state))
    return {i: [c.epoch for c in dkv.list_checkpoints(store, i)] for i in dkv.instances(store)}


def rows(n0: int, n: int, keys="ab") -> list:
    return [{"k": keys[i % len(keys)], "v": i} for i in range(n0, n0 + n)]


class Counter(Operator):
    """Per key: how many rows and their sum, emitted per row."""

    def on_event(self, key, row, ctx):
        c = ctx.value("count", default=0)
        c.value += 1
        s = ctx.value("sum", default=0)
        s.value += row["v"]
        ctx.emit({"k": key, "count": c.value, "sum": s.value})


class Model:
    """What Counter (and its renamed versions) must emit, key by key."""

    def __init__(self) -> None:
        self.count, self.sum = {}, {}

    def feed(self, batch: list) -> list:
        out = []
        for r in sorted(batch, key=lambda r: r["k"]):
            k = r["k"]
            self.count[k] = self.count.get(k, 0) + 1
            self.sum[k] = self.sum.get(k, 0) + r["v"]
            out.append({"k": k, "count": self.count[k], "sum": self.sum[k]})
        return out


def run(h, batch, model=None):
    got = sorted(h.run_batch(batch), key=lambda r: (r["k"], r.get("count", 0)))
    if model is not None:
        assert got == sorted(model.feed(batch), key=lambda r: (r["k"], r["count"]))
    return got


# -- a harness on existing state ------------------------------------------------------------

def test_a_second_harness_on_existing_state_resumes_it(tmp_path):
    """A counter went 1, 2, 3, 1 when a second harness started at batch 0 again (issue 31,
    item 6); it resumes at the batch after the newest checkpoint."""
    state, model = str(tmp_path / "s"), Model()
    h = OperatorHarness(Counter(), key="k", state=state)
    for b in range(3):
        run(h, rows(b, 1, "a"), model)
    h.close()
    h2 = OperatorHarness(Counter(), key="k", state=state)
    assert h2.batch_id == 3
    assert run(h2, rows(3, 1, "a"), model) == [{"k": "a", "count": 4, "sum": 6}]
    h2.close()
    assert all(eps[-1] == 3 for eps in checkpoints(state).values())


def test_a_batch_after_a_gap_is_refused_and_writes_nothing(tmp_path):
    state = str(tmp_path / "s")
    h = OperatorHarness(Counter(), key="k", state=state)
    run(h, rows(0, 2))
    run(h, rows(2, 2))
    before = checkpoints(state)
    h.batch_id = 4                      # batches 2 and 3 never ran with this state
    with pytest.raises(EpochGapError) as e:
        h.run_batch(rows(4, 2))
    msg = str(e.value)
    assert "operator 'counter'" in msg and "last checkpointed in batch 1" in msg and "this is batch 4" in msg
    assert "batches 2 to 3 ran without this state" in msg and "name=" in msg and "retire" in msg
    assert checkpoints(state) == before
    h.rerun_batch(1)                    # a re-run of a batch is no gap
    run(h, rows(2, 2))
    h.close()


# -- renaming the operator's class ----------------------------------------------------------

class SpendAlert(Counter):
    pass


class SpendingAlert(Counter):
    pass


def test_a_renamed_class_is_refused_unless_name_keeps_its_identity(tmp_path):
    state, model = str(tmp_path / "s"), Model()
    h = OperatorHarness(SpendAlert(), key="k", state=state)
    run(h, rows(0, 4), model)
    run(h, rows(4, 4), model)
    h.close()
    before = checkpoints(state)
    with pytest.raises(StateMismatchError) as e:
        OperatorHarness(SpendingAlert(), key="k", state=state)
    msg = str(e.value)
    assert "'spendalert'" in msg and "SpendAlert" in msg and "'spendingalert'" in msg
    assert "name='spendalert'" in msg and "last checkpoint: batch 1" in msg
    assert checkpoints(state) == before
    h = OperatorHarness(SpendingAlert(), key="k", state=state, name="spendalert")     # the way out
    assert h.batch_id == 2
    run(h, rows(8, 4), model)
    h.close()
    h = OperatorHarness(SpendAlert(), key="k", state=state)                          # and back again
    run(h, rows(12, 4), model)
    h.close()
    assert all(eps == [1, 2, 3] for eps in checkpoints(state).values())           # no batch skipped


def test_a_state_older_than_identities_is_known_by_its_config(tmp_path):
    """A state written before identity.json: its config names the class, whose name is the
    operator's."""
    state = str(tmp_path / "s")
    h = OperatorHarness(SpendAlert(), key="k", state=state)
    run(h, rows(0, 2))
    h.close()
    dkv.open_store(state).delete("identity.json")
    with pytest.raises(StateMismatchError, match="'spendalert'"):
        OperatorHarness(SpendingAlert(), key="k", state=state)
    assert OperatorHarness(SpendAlert(), key="k", state=state).batch_id == 1


# -- state variables ---------------------------------------------------------------------------

class Spends(Operator):
    """Keeps each key's amounts by ts in a sorted dict ``spends``."""

    def on_event(self, key, row, ctx):
        s = ctx.sorted_dict("spends")
        s[row["v"]] = float(row["v"])
        ctx.emit({"k": key, "n": len(s), "total": sum(s.values())})


class Window(Operator):
    """Spends, with the variable renamed ``window`` (declared)."""
    state_vars = {"window": StateVar("sorted_dict", renamed_from="spends")}

    def on_event(self, key, row, ctx):
        s = ctx.state("window")
        s[row["v"]] = float(row["v"])
        ctx.emit({"k": key, "n": len(s), "total": sum(s.values())})


def _totals(batches) -> dict:
    out = {}
    for r in (r for b in batches for r in b):
        n, t = out.get(r["k"], (0, 0.0))
        out[r["k"]] = (n + 1, t + r["v"])
    return out


def test_a_declared_rename_carries_the_variable_and_a_revert_is_refused(tmp_path):
    state = str(tmp_path / "s")
    b0, b1, b2 = rows(0, 5), rows(5, 5), rows(10, 4)
    h = OperatorHarness(Spends(), key="k", state=state, name="op")
    run(h, b0)
    run(h, b1)
    h.close()
    h = OperatorHarness(Window(), key="k", state=state, name="op")
    got = run(h, b2)
    want = _totals([b0, b1, b2])
    last = {r["k"]: (r["n"], r["total"]) for r in got}
    assert last == {k: want[k] for k in last}
    migrated = [m.get("migrated") for m in h.metrics]
    assert sum(m.get("rename spends -> window", 0) for m in migrated if m) == 2       # a and b
    h.close()
    # The old code (undeclared, uses 'spends') meets the renamed state: refused, not empty.
    before = checkpoints(state)
    h = OperatorHarness(Spends(), key="k", state=state, name="op")
    with pytest.raises(StateMismatchError) as e:
        h.run_batch(rows(14, 2))
    msg = str(e.value)
    assert "'spends'" in msg and "renamed 'spends' to 'window' in batch 2" in msg and "older than its state" in msg
    assert checkpoints(state) == before
    h.close()


def test_an_undeclared_rename_starts_empty_and_says_so(tmp_path, caplog):
    """What an operator that declares nothing does (as before): a new name is a new
    variable; the log says what the state holds."""
    state = str(tmp_path / "s")
    h = OperatorHarness(Spends(), key="k", state=state, name="op")
    run(h, rows(0, 4))
    h.close()

    class Renamed(Operator):
        def on_event(self, key, row, ctx):
            s = ctx.sorted_dict("window")
            s[row["v"]] = 1.0
            ctx.emit({"k": key, "n": len(s)})
    h = OperatorHarness(Renamed(), key="k", state=state, name="op")
    with caplog.at_level(logging.INFO, logger="spark_ops._vars"):
        got = run(h, rows(4, 2))
    assert {r["n"] for r in got} == {1}
    assert "new to its state" in caplog.text and "'spends'" in caplog.text and "renamed_from" in caplog.text
    h.close()


def test_a_declaring_operator_refuses_a_stored_variable_it_does_not_declare(tmp_path):
    state = str(tmp_path / "s")
    h = OperatorHarness(Counter(), key="k", state=state, name="op")
    run(h, rows(0, 4))
    h.close()

    class OnlyCount(Operator):
        state_vars = {"count": StateVar("value", default=0)}

        def on_event(self, key, row, ctx):
            c = ctx.state("count")
            c.value += 1
            ctx.emit({"k": key, "count": c.value})
    before = checkpoints(state)
    h = OperatorHarness(OnlyCount(), key="k", state=state, name="op")
    with pytest.raises(StateMismatchError) as e:
        h.run_batch(rows(4, 2))
    msg = str(e.value)
    assert "'sum' (value) is in the state but not in state_vars" in msg
    assert "StateVar.dropped()" in msg and "renamed_from='sum'" in msg
    assert checkpoints(state) == before
    h.close()

    class DropsSum(OnlyCount):
        state_vars = {"count": StateVar("value", default=0), "sum": StateVar.dropped()}
    h = OperatorHarness(DropsSum(), key="k", state=state, name="op")
    got = run(h, rows(4, 2))
    assert sorted((r["k"], r["count"]) for r in got) == [("a", 3), ("b", 3)]
    assert any((m.get("migrated") or {}).get("drop sum") for m in h.metrics)
    sp = h_space(h, "a")
    assert ("a", "sum") not in sp and ("a", "count") in sp
    h.close()


def h_space(h, key):
    """The object space of ``key``'s key group in the harness's open shard state."""
    from spark_ops import _opened
    parts = (key,)
    kg = h.key_group(parts)
    for (state, _, _), st in _opened._SHARDS.items():
        if state == h.spec.state and kg in st.key_group_range:
            return st.space(kg)
    raise AssertionError("no open shard holds the key")


def test_a_changed_kind_needs_migrate_and_is_carried_by_it(tmp_path):
    state = str(tmp_path / "s")

    class Last(Operator):
        def on_event(self, key, row, ctx):
            ctx.value("last").value = row["v"]

    h = OperatorHarness(Last(), key="k", state=state, name="op")
    run(h, rows(0, 4))          # a: 2, b: 3
    h.close()

    class History(Operator):
        state_vars = {"last": StateVar("dict")}

        def on_event(self, key, row, ctx):
            d = ctx.state("last")
            d[row["v"]] = True
            ctx.emit({"k": key, "seen": sorted(d)})
    before = checkpoints(state)
    h = OperatorHarness(History(), key="k", state=state, name="op")
    with pytest.raises(StateMismatchError, match=r"'last' is stored as a value and declared a dict: add migrate="):
        h.run_batch(rows(4, 2))
    assert checkpoints(state) == before
    h.close()
    History.state_vars = {"last": StateVar("dict", migrate=lambda old: {old: True})}
    h = OperatorHarness(History(), key="k", state=state, name="op")
    got = run(h, rows(4, 2))
    assert sorted((r["k"], r["seen"]) for r in got) == [("a", [2, 4]), ("b", [3, 5])]
    h.close()


def _v2(value, version):
    assert version == 1
    return {"amount": value, "merchant": None}


class AmountsV1(Operator):
    def on_event(self, key, row, ctx):
        ctx.dict("spends")[row["v"]] = float(row["v"])


class AmountsV2(Operator):
    state_vars = {"spends": StateVar("dict", version=2, upgrade=_v2)}

    def on_event(self, key, row, ctx):
        d = ctx.state("spends")
        d[row["v"]] = {"amount": float(row["v"]), "merchant": row.get("m")}
        assert all(isinstance(x, dict) for x in d.values()), "an old shape met user code"
        ctx.emit({"k": key, "total": sum(x["amount"] for x in d.values())})


def test_an_upgrade_brings_stored_values_to_the_new_shape_and_a_rollback_is_refused(tmp_path):
    state = str(tmp_path / "s")
    b0, b1 = rows(0, 6), rows(6, 4)
    h = OperatorHarness(AmountsV1(), key="k", state=state, name="op")
    run(h, b0)
    h.close()
    h = OperatorHarness(AmountsV2(), key="k", state=state, name="op")
    got = run(h, b1)
    want = _totals([b0, b1])
    assert {r["k"]: r["total"] for r in got if True} == {k: t for k, (n, t) in want.items()}
    h.close()
    before = checkpoints(state)
    h = OperatorHarness(AmountsV1(), key="k", state=state, name="op")       # roll back the deploy
    with pytest.raises(StateMismatchError) as e:
        h.run_batch(rows(10, 2))
    msg = str(e.value)
    assert "'spends'" in msg and "version 2" in msg and "upgraded in batch 1" in msg
    assert checkpoints(state) == before
    h.close()

    class AmountsOld(AmountsV2):        # code declaring an older version than the state's
        state_vars = {"spends": StateVar("dict")}
    h = OperatorHarness(AmountsOld(), key="k", state=state, name="op")
    with pytest.raises(StateMismatchError, match=r"holds version 2 values .* declares version 1"):
        h.run_batch(rows(10, 2))
    h.close()


def test_a_migration_is_part_of_its_batch_a_rerun_migrates_again(tmp_path):
    state = str(tmp_path / "s")
    h = OperatorHarness(AmountsV1(), key="k", state=state, name="op")
    run(h, rows(0, 6))
    h.close()
    h = OperatorHarness(AmountsV2(), key="k", state=state, name="op")
    first = run(h, rows(6, 4))
    h.rerun_batch(1)
    assert run(h, rows(6, 4)) == first
    h.rescale(3)                        # the records move with their key groups
    run(h, rows(10, 6))
    h.restart()
    run(h, rows(16, 2))
    h.close()


def test_a_declared_ttl_is_the_default_and_a_renamed_object_counts_as_written(tmp_path):
    state = str(tmp_path / "s")

    class Old(Operator):
        def on_event(self, key, row, ctx):
            ctx.dict("seen", ttl=1000)[row["v"]] = 1

    class New(Operator):
        state_vars = {"recent": StateVar("dict", ttl=1000, renamed_from="seen")}

        def on_event(self, key, row, ctx):
            ctx.dict("recent")[row["v"]] = 1           # no ttl= here: the declaration's
            ctx.emit({"k": key, "n": len(ctx.dict("recent"))})

    h = OperatorHarness(Old(), key="k", state=state, name="op")
    h.run_batch(rows(0, 2), processing_time=0)          # a: {0}, b: {1}, expiring at 1000
    h.close()
    h = OperatorHarness(New(), key="k", state=state, name="op")
    got = h.run_batch(rows(2, 2), processing_time=900)  # renamed at 900: expires at 1900 now
    assert sorted((r["k"], r["n"]) for r in got) == [("a", 2), ("b", 2)]
    assert sorted((r["k"], r["n"]) for r in h.run_batch(rows(4, 2), processing_time=1500)) == [("a", 3), ("b", 3)]
    got = h.run_batch(rows(6, 2), processing_time=2500)     # everything written at <= 1500 expired
    assert sorted((r["k"], r["n"]) for r in got) == [("a", 1), ("b", 1)]
    h.close()


def test_a_declaring_operator_must_use_its_variables_as_declared():
    class Typo(Operator):
        state_vars = {"count": StateVar("value")}

        def on_event(self, key, row, ctx):
            ctx.value("cuont").value = 1

    with pytest.raises(StateMismatchError, match=r"'cuont', which its state_vars does not declare .*'count'"):
        OperatorHarness(Typo(), key="k").run_batch(rows(0, 1))

    class WrongKind(Operator):
        state_vars = {"count": StateVar("value")}

        def on_event(self, key, row, ctx):
            ctx.dict("count")

    with pytest.raises(StateMismatchError, match=r"'count' as a dict, but state_vars declares it a value"):
        OperatorHarness(WrongKind(), key="k").run_batch(rows(0, 1))


def test_ctx_state_creates_each_kind_as_declared():
    import numpy as np

    class All(Operator):
        state_vars = {"v": StateVar("value", default=7), "a": StateVar("array", length=3, fill=0),
                      "nd": StateVar("ndarray", shape=(2, 2), dtype="int64"), "q": StateVar("queue"),
                      "s": StateVar("sorted_set")}

        def on_event(self, key, row, ctx):
            ctx.emit({"v": ctx.state("v").value, "a": list(ctx.state("a")), "nd": ctx.state("nd")[...].tolist(),
                      "q": ctx.state("q").kind, "s": ctx.state("s").kind})
            with pytest.raises(StateMismatchError, match="declares no state variable 'x'"):
                ctx.state("x")

    (out,) = OperatorHarness(All(), key="k").run_batch(rows(0, 1))
    assert out == {"v": 7, "a": [0, 0, 0], "nd": np.zeros((2, 2), "int64").tolist(), "q": "queue", "s": "sorted_set"}


@pytest.mark.parametrize("decl, error, match", [
    ({"x": StateVar.dropped(), "y": "value"}, TypeError, r"state_vars\['y'\] must be a StateVar"),
    ({"y": StateVar("value", renamed_from="x"), "x": StateVar("value")}, ValueError, "is declared too"),
    ({"y": StateVar("value", renamed_from="x"), "z": StateVar("dict", renamed_from="x")}, ValueError,
     "renamed_from of both"),
])
def test_bad_declarations_fail_where_the_operator_is_set_up(decl, error, match):
    class Op(Operator):
        state_vars = decl

        def on_event(self, key, row, ctx):
            pass

    with pytest.raises(error, match=match):
        OperatorHarness(Op(), key="k")


@pytest.mark.parametrize("args, kwargs, error, match", [
    (("vaule",), {}, ValueError, "kind must be one of"),
    (("value",), {"version": 2}, ValueError, "needs upgrade="),
    (("value",), {"version": 0}, ValueError, "version must be an int >= 1"),
    (("stream",), {"version": 2, "upgrade": _v2}, ValueError, "cannot be upgraded"),
    (("stream",), {"migrate": list}, ValueError, "cannot be the target of migrate"),
    (("array",), {}, TypeError, "needs length="),
    (("dict",), {"length": 3}, TypeError, "takes no length"),
    (("value",), {"ttl": "soon"}, ValueError, "ttl"),
])
def test_a_bad_state_var_says_what_is_wrong(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        StateVar(*args, **kwargs)


def test_the_harness_catches_a_change_made_inside_a_stored_value():
    """On Spark such a change is lost (the shards do not look); the harness fails the batch,
    naming the object and slot and the way out, so a test catches it."""
    from objectspace import InPlaceChangeError

    class Appends(Operator):
        def on_event(self, key, row, ctx):
            d = ctx.dict("seen")
            if "vs" not in d:
                d["vs"] = []
            d["vs"].append(row["v"])            # in place: no slot is marked written
            ctx.emit({"k": key, "n": len(d["vs"])})

    h = OperatorHarness(Appends(), key="k", partitions=1)
    h.run_batch([{"k": "a", "v": 1}])           # created in this batch: saved whole
    with pytest.raises(InPlaceChangeError) as e:
        h.run_batch([{"k": "a", "v": 2}])
    msg = str(e.value) + "".join(getattr(e.value, "__notes__", []))
    assert "the dict 'seen' of key ('a',), key 'vs'" in msg and "Assign the value back" in msg and "On Spark" in msg

    class AssignsBack(Appends):
        def on_event(self, key, row, ctx):
            d = ctx.dict("seen")
            d["vs"] = d.get("vs", []) + [row["v"]]
            ctx.emit({"k": key, "n": len(d["vs"])})

    h = OperatorHarness(AssignsBack(), key="k", partitions=1)
    assert [h.run_batch([{"k": "a", "v": v}]) for v in (1, 2, 3)] == [[{"k": "a", "n": n}] for n in (1, 2, 3)]
