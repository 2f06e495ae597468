"""State TTL (``ctx.<kind>(name, ttl=...)``, RFC 0009) through OperatorHarness: a reference model
of every kind over random batches with restarts, rescales and re-runs; refresh on write; expired
state invisible at once; durable cleanup; cost proportional to what expired; bad ttl values."""
from __future__ import annotations

import datetime as dt
import json
import random

import pytest

from spark_ops import Operator
from spark_ops import _runtime
from spark_ops._expiries import SCHEMA_TTL, scan_expiries
from spark_ops._ttl import TtlService
from spark_ops.testing import OperatorHarness

T = 10      # the ttl of the model tests, ms of processing time

# kind -> (get the object, write x, read it, the model's read of the values written since it was created)
KINDS = {
    "value": (lambda ctx, n, ttl: ctx.value(n, ttl=ttl), lambda o, x: setattr(o, "value", x),
              lambda o: o.value, lambda xs: xs[-1]),
    "queue": (lambda ctx, n, ttl: ctx.queue(n, ttl=ttl), lambda o, x: o.append(x), list, list),
    "list": (lambda ctx, n, ttl: ctx.list(n, ttl=ttl), lambda o, x: o.append(x), list, list),
    "stack": (lambda ctx, n, ttl: ctx.stack(n, ttl=ttl), lambda o, x: o.push(x),
              lambda o: list(o)[::-1], list),
    "linked_list": (lambda ctx, n, ttl: ctx.linked_list(n, ttl=ttl), lambda o, x: o.add_last(x),
                    lambda o: [node.value for node in o.nodes()], list),
    "stream": (lambda ctx, n, ttl: ctx.stream(n, ttl=ttl), lambda o, x: o.add({"x": x}), len, len),
    "array": (lambda ctx, n, ttl: ctx.array(n, 1, ttl=ttl), lambda o, x: o.__setitem__(0, x),
              lambda o: o[0], lambda xs: xs[-1]),
    "ndarray": (lambda ctx, n, ttl: ctx.ndarray(n, (1,), "int64", ttl=ttl), lambda o, x: o.__setitem__(0, x),
                lambda o: int(o[0]), lambda xs: xs[-1]),
    "dict": (lambda ctx, n, ttl: ctx.dict(n, ttl=ttl), lambda o, x: o.__setitem__(x, -x), sorted, sorted),
    "sorted_dict": (lambda ctx, n, ttl: ctx.sorted_dict(n, ttl=ttl), lambda o, x: o.__setitem__(x, -x),
                    list, sorted),
    "set": (lambda ctx, n, ttl: ctx.set(n, ttl=ttl), lambda o, x: o.add(x), sorted, sorted),
    "sorted_set": (lambda ctx, n, ttl: ctx.sorted_set(n, ttl=ttl), lambda o, x: o.add(x), list, sorted),
}
PER_ENTRY = {"dict", "sorted_dict", "set", "sorted_set"}


SEQUENCES = {"queue", "list", "stack", "linked_list", "stream"}


def _pop(kind, o):
    """Remove one element: the front of a queue, linked list or stream, the end of a list or stack."""
    if kind == "queue":
        o.popleft()
    elif kind in ("list", "stack"):
        o.pop()
    elif kind == "linked_list":
        o.remove_first()
    else:
        o.delete(o.first_id)


def _set_first(kind, o, x):
    if kind == "linked_list":
        o.first.value = x
    else:
        o[0] = x


def _insert_first(kind, o, x):
    if kind == "list":
        o.insert(0, x)          # moves every element: each counts as written
    else:
        o.add_first(x)          # a new node: the others keep their expiry


# the sequence ops beyond "w" (append) each kind gets in the model test: "p" remove one, "s" assign
# the first, "i" insert at the front
SEQ_OPS = {"queue": "ps", "list": "psi", "stack": "p", "linked_list": "psi", "stream": "p"}


class Commands(Operator):
    """Rows {k, op: "w" | "r" | "del" | "p" | "s" | "i", kind, x}: write x into the key's object
    of that kind (with ttl), read it (emits {k, kind, seen}; None when the object does not
    exist, which a read checks with has_state so that it creates nothing), delete it; for the
    sequences also remove one element ("p"), assign the first ("s") or insert at the front ("i"),
    each a no-op on an empty sequence (but the object is created if absent)."""

    def __init__(self, ttl=T) -> None:
        self.ttl = ttl

    def on_event(self, key, row, ctx):
        kind, op = row["kind"], row["op"]
        get, write, read, _ = KINDS[kind]
        if op == "w":
            write(get(ctx, kind, self.ttl), row["x"])
        elif op == "del":
            ctx.delete_state(kind)
        elif op == "r":
            seen = read(get(ctx, kind, self.ttl)) if ctx.has_state(kind) else None
            ctx.emit({"k": key, "kind": kind, "seen": seen})
        else:
            o = get(ctx, kind, self.ttl)
            if op == "i":
                _insert_first(kind, o, row["x"])
            elif len(o):
                (_pop(kind, o) if op == "p" else _set_first(kind, o, row["x"]))


class Model:
    """The semantics in plain Python: an object expires ``ttl`` after its last write; an entry
    of a dict or set kind and an element of a sequence expire ``ttl`` after their own last
    write, the object with its last write. Expired means expiry <= the batch's processing time.
    Writes of elements: appended, assigned, inserted; a list's insert(0, x) moves (rewrites)
    every element after x, which counts as a write of each."""

    def __init__(self, ttl=T) -> None:
        self.ttl = ttl
        self.objs: dict = {}        # (k, kind) -> [elements [[x, expiry]], object expiry, {entry: expiry}]

    def _live(self, key, p):
        o = self.objs.get(key)
        if o is not None and o[1] <= p:
            del self.objs[key]
            return None
        if o is not None:
            o[2] = {x: e for x, e in o[2].items() if e > p}
            o[0] = [xe for xe in o[0] if xe[1] > p]
        return o

    def row(self, r, p):
        key, kind, op = (r["k"], r["kind"]), r["kind"], r["op"]
        o = self._live(key, p)
        e = p + self.ttl
        if op == "del":
            self.objs.pop(key, None)
            return None
        if op == "r":
            if o is None:
                return {"k": r["k"], "kind": kind, "seen": None}
            model_read = KINDS[kind][3]
            seen = model_read(sorted(o[2]) if kind in PER_ENTRY else [x for x, _ in o[0]])
            return {"k": r["k"], "kind": kind, "seen": seen}
        if o is None:
            o = self.objs[key] = [[], e, {}]          # created: a write
        els = o[0]
        if op == "w":
            els.append([r["x"], e])
            o[2][r["x"]] = e
        elif op == "i":
            if kind == "list":
                for xe in els:
                    xe[1] = e
            els.insert(0, [r["x"], e])
        elif not els:
            return None                                 # nothing to pop or assign: no write
        elif op == "p":
            els.pop(0 if kind in ("queue", "linked_list", "stream") else -1)
        else:
            els[0] = [r["x"], e]
        o[1] = e
        return None


def _key(r):
    return (r["k"], r["kind"], repr(r["seen"]))


def _shards(h):
    return [st for (state, _, _), st in _runtime._SHARDS.items() if state == h.spec.state]


def _records(h) -> list:
    """Every TTL index record of the harness' open shards: (expiry, name, entry or None)."""
    return sorted((rec for st in _shards(h) for kg in st.key_group_range for rec in scan_expiries(st.db, kg)), key=repr)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_kind_matches_the_model_over_random_batches_restarts_and_rescales(seed):
    rng = random.Random(seed)
    h = OperatorHarness(Commands(), key="k", partitions=2, key_groups=8)
    model = Model()
    p = 0
    expired = 0
    for b in range(40):
        p += rng.choice([0, 1, 2, 3, 5])
        rows = []
        for _ in range(rng.randint(0, 14)):
            kind = rng.choice(sorted(KINDS))
            op = rng.choices(["w", "r", "del", "seq"], [6, 5, 1, 3 if kind in SEQUENCES else 0])[0]
            if op == "seq":
                op = rng.choice(SEQ_OPS[kind])
            rows.append({"k": rng.choice("abc"), "op": op, "kind": kind, "x": rng.randrange(4)})
        want = [w for w in (model.row(r, p) for r in sorted(rows, key=lambda r: r["k"])) if w is not None]
        got = h.run_batch(rows, processing_time=p)
        assert sorted(got, key=_key) == sorted(want, key=_key), f"batch {b}"
        expired += sum(m.get("ttl_expired", 0) for m in h.metrics[-2:])
        what = rng.random()
        if what < 0.1:
            h.restart()
        elif what < 0.15:
            h.rescale(rng.choice([1, 2, 3]))
        elif what < 0.2 and b > 0:      # Spark runs the last batch again: same output, same state
            h.rerun_batch(h.batch_id - 1)
            again = h.run_batch(rows, processing_time=p)
            assert sorted(again, key=_key) == sorted(want, key=_key), f"re-run of batch {b}"
    assert expired > 20
    # after the last expiry everything is gone: objects, entries and their TTL records
    h.run_batch([], processing_time=p + T)
    h.run_batch([{"k": k, "op": "r", "kind": kind, "x": 0} for k in "abc" for kind in KINDS], processing_time=p + T)
    assert _records(h) == []
    assert all(not list(st.space(kg)) for st in _shards(h) for kg in st.key_group_range)


class Counter(Operator):
    """{k, w}: when w, add it to the key's value "n" and to its dict "seen" (w -> batch id);
    always emit what it reads. ttl 1 s."""

    def on_event(self, key, row, ctx):
        n = ctx.value("n", default=0, ttl="1 second")
        seen = ctx.dict("seen", ttl=dt.timedelta(seconds=1))
        if row.get("w"):
            n.value += row["w"]
            seen[row["w"]] = ctx.batch_id
        ctx.emit({"k": key, "n": n.value, "seen": dict(seen)})


def test_expiry_refresh_on_write_and_invisible_at_once():
    h = OperatorHarness(Counter(), key="k", partitions=1, key_groups=4)
    assert h.run_batch([{"k": "a", "w": 1}], processing_time=0) == [{"k": "a", "n": 1, "seen": {1: 0}}]
    # a read does not refresh: still there at 999 ...
    assert h.run_batch([{"k": "a"}], processing_time=999) == [{"k": "a", "n": 1, "seen": {1: 0}}]
    # ... a write does (value and the entry written; entry 1 keeps its expiry, 1000)
    assert h.run_batch([{"k": "a", "w": 2}], processing_time=999) == [{"k": "a", "n": 3, "seen": {1: 0, 2: 2}}]
    # at 1000 entry 1 expired; the value, written at 999, lives on
    assert h.run_batch([{"k": "a"}], processing_time=1000) == [{"k": "a", "n": 3, "seen": {2: 2}}]
    assert h.metrics[-1]["ttl_expired"] == 1
    # at 1999 both expired: the read sees the default and an empty dict, at once
    assert h.run_batch([{"k": "a"}], processing_time=1999) == [{"k": "a", "n": 0, "seen": {}}]
    assert h.metrics[-1]["ttl_expired"] == 2


def test_cleanup_is_durable_and_the_index_survives_a_restart():
    h = OperatorHarness(Counter(), key="k", partitions=2, key_groups=8)
    h.run_batch([{"k": k, "w": 5} for k in "abcdef"], processing_time=0)
    h.restart()                                     # the index is in the state: read back from storage
    h.run_batch([{"k": "a", "w": 1}], processing_time=500)
    assert {(name, entry) for _, name, entry in _records(h)} == \
        {((k, "n"), None) for k in "abcdef"} | {((k, "seen"), None) for k in "abcdef"} | \
        {((k, "seen"), 5) for k in "abcdef"} | {(("a", "seen"), 1)}
    h.restart()
    out = h.run_batch([{"k": k} for k in "abcdef"], processing_time=1200)
    assert sorted((r["k"], r["n"], r["seen"]) for r in out) == \
        [("a", 6, {1: 1}), *((k, 0, {}) for k in "bcdef")]
    assert sum(m.get("ttl_expired", 0) for m in h.metrics[-2:]) == 10 + 1     # b..f: 2 objects; a: entry 5
    # durable: after a restart, a batch whose processing time is before those expiries sees them gone
    h.restart()
    out = h.run_batch([{"k": "b"}], processing_time=0)
    assert out == [{"k": "b", "n": 0, "seen": {}}]


def test_cleanup_cost_is_what_expired(monkeypatch):
    calls = []
    orig = TtlService._expire_one
    monkeypatch.setattr(TtlService, "_expire_one", lambda self, raw, *a: calls.append(raw) or orig(self, raw, *a))
    scans = []
    h = OperatorHarness(Counter(), key="k", partitions=1, key_groups=16)
    h.run_batch([{"k": f"u{i}", "w": 1} for i in range(300)], processing_time=0)
    h.run_batch([{"k": f"u{i}", "w": 1} for i in range(20)], processing_time=500)     # refreshes 20 keys
    (st,) = _shards(h)
    orig_scan = st.db.scan
    monkeypatch.setattr(st.db, "scan", lambda *a, **k: scans.append(a) or orig_scan(*a, **k))
    h.run_batch([], processing_time=999)            # nothing due: no scan at all (a lower bound says so)
    assert calls == [] and scans == []
    h.run_batch([], processing_time=1000)           # 280 keys: value and dict (its entry goes with it)
    assert h.metrics[-1]["ttl_expired"] == 2 * 280
    assert len(calls) == 3 * 280                    # due index records only: the 20 others are not read
    assert len(_records(h)) == 3 * 20
    calls.clear()
    h.run_batch([], processing_time=1499)
    assert calls == []
    h.run_batch([], processing_time=1500)
    assert h.metrics[-1]["ttl_expired"] == 2 * 20 and len(calls) == 3 * 20 and _records(h) == []


def test_delete_state_drops_the_ttl_records_and_a_new_object_without_ttl_stays():
    class Op(Operator):
        def on_event(self, key, row, ctx):
            if row["op"] == "ttl":
                ctx.dict("d", ttl=100)["x"] = 1
            elif row["op"] == "del":
                ctx.delete_state("d")
            elif row["op"] == "plain":
                ctx.dict("d")["y"] = 2
            else:
                ctx.emit({"k": key, "d": dict(ctx.dict("d")) if ctx.has_state("d") else None})

    h = OperatorHarness(Op(), key="k", partitions=1, key_groups=4)
    h.run_batch([{"k": "a", "op": "ttl"}], processing_time=0)
    assert len(_records(h)) == 2
    h.run_batch([{"k": "a", "op": "del"}, {"k": "a", "op": "plain"}], processing_time=10)
    assert _records(h) == []
    assert h.run_batch([{"k": "a", "op": "r"}], processing_time=1000) == [{"k": "a", "d": {"y": 2}}]


def test_an_operator_without_ttl_scans_once_then_nothing(monkeypatch):
    class Plain(Operator):
        def on_event(self, key, row, ctx):
            ctx.value("n", default=0).value += 1
            ctx.delete_state("gone")

    h = OperatorHarness(Plain(), key="k", partitions=1, key_groups=8)
    h.run_batch([{"k": "a"}], processing_time=0)
    (st,) = _shards(h)
    assert not st.ttl.active
    scans = []
    orig_scan = st.db.scan
    monkeypatch.setattr(st.db, "scan", lambda *a, **k: scans.append(a) or orig_scan(*a, **k))
    for p in (10, 10_000, 10 ** 9):
        h.run_batch([{"k": "a"}, {"k": "b"}], processing_time=p)
    # no expiry scan, and delete_state looks for no TTL record (the object spaces' own
    # scans, such as the counts' look at a new key's scope, are not TTL's)
    assert [a for a in scans if len(a[0]) >= 3 and a[0][2] == SCHEMA_TTL] == []
    assert len(scans) <= 2


@pytest.mark.parametrize("bad, error", [(-1, ValueError), ("-5 seconds", ValueError), ("soon", ValueError),
                                        (0, ValueError), ("0 ms", ValueError), (True, TypeError),
                                        (1.5, TypeError), (object(), TypeError), ([1], TypeError)])
def test_a_bad_ttl_is_a_clear_error(bad, error):
    class Op(Operator):
        def on_event(self, key, row, ctx):
            ctx.queue("q", ttl=bad).append(1)

    h = OperatorHarness(Op(), key="k", partitions=1)
    with pytest.raises(error, match="ttl"):
        h.run_batch([{"k": "a"}], processing_time=0)


def test_ttl_forms_agree():
    from spark_ops._ttl import ttl_ms
    assert ttl_ms("1 hour") == ttl_ms(dt.timedelta(hours=1)) == ttl_ms(3_600_000) == 3_600_000
    assert ttl_ms("250 ms") == 250


def test_expiry_keeps_working_after_a_rescale():
    h = OperatorHarness(Counter(), key="k", partitions=3, key_groups=12)
    keys = [f"u{i}" for i in range(40)]
    h.run_batch([{"k": k, "w": 1} for k in keys], processing_time=0)
    h.rescale(2)
    h.run_batch([{"k": k, "w": 1} for k in keys[:10]], processing_time=600)
    h.rescale(1)
    out = h.run_batch([{"k": k} for k in keys], processing_time=1000)
    assert h.metrics[-1]["ttl_expired"] == 2 * 30      # the 10 written at 600 live on
    assert sorted((r["k"], r["n"]) for r in out) == sorted([(k, 2) for k in keys[:10]] + [(k, 0) for k in keys[10:]])
    h.rescale(4)
    out = h.run_batch([{"k": k} for k in keys[:10]], processing_time=1600)
    assert all(r["n"] == 0 and r["seen"] == {} for r in out)


# -- a real local Spark session -------------------------------------------------------------------

SPARK_TTL = 700         # ms of processing time; the sink sleeps between batches so that it passes


def make_spark_operator():
    """Built in a function so cloudpickle ships the class by value (workers cannot import tests)."""

    class Latest(Operator):
        """{k, w}: w > 0 -> write it into the value "v" and the dict "d" (entry w), both with ttl;
        w = 0 -> read. Emits what the row sees after it, and the batch's processing time."""

        def on_event(self, key, row, ctx):
            if row["w"] > 0:
                ctx.value("v", ttl=SPARK_TTL).value = row["w"]
                ctx.dict("d", ttl=f"{SPARK_TTL} ms")[row["w"]] = ctx.batch_id
            v = ctx.value("v", ttl=SPARK_TTL).value if ctx.has_state("v") else None
            d = sorted(ctx.dict("d", ttl=SPARK_TTL)) if ctx.has_state("d") else []
            ctx.emit({"k": key, "batch": ctx.batch_id, "pt": ctx.processing_time, "v": v, "d": d})

    return Latest()


def _spark_batches():
    keys = "abcd"
    batches = [[{"k": k, "w": 1} for k in keys], [{"k": "a", "w": 2}, {"k": "b", "w": 2}]]
    batches[1] += [{"k": k, "w": 0} for k in "cd"]
    for b in range(2, 9):
        batches.append([{"k": k, "w": (10 + b if (k == "a" and b % 3 == 0) else 0)} for k in keys])
    return batches


def _spark_model(batches, pts):
    """Expected rows per batch from each batch's processing time (read from the output)."""
    state: dict = {}
    out = []
    for b, rows in enumerate(batches):
        p, want = pts[b], []
        for r in rows:
            s = state.setdefault(r["k"], {"v": None, "v_exp": None, "d": {}})
            if s["v_exp"] is not None and s["v_exp"] <= p:
                s["v"], s["v_exp"] = None, None
            s["d"] = {w: e for w, e in s["d"].items() if e > p}
            if r["w"] > 0:
                s["v"], s["v_exp"] = r["w"], p + SPARK_TTL
                s["d"][r["w"]] = p + SPARK_TTL
            want.append({"k": r["k"], "batch": b, "pt": p, "v": s["v"], "d": sorted(s["d"])})
        out.append(want)
    return out


def make_spark_queue_operator():
    """Per element: {k, w}: w > 0 -> append w to the queue "q" (ttl); emit the queue after the row."""

    class Recent(Operator):
        def on_event(self, key, row, ctx):
            if row["w"] > 0:
                ctx.queue("q", ttl=SPARK_TTL).append(row["w"])
            q = list(ctx.queue("q", ttl=SPARK_TTL)) if ctx.has_state("q") else None
            ctx.emit({"k": key, "batch": ctx.batch_id, "pt": ctx.processing_time, "q": q})

    return Recent()


def _spark_queue_model(batches, pts):
    state: dict = {}        # k -> [elements [w, expiry], object expiry]
    out = []
    for b, rows in enumerate(batches):
        p, want = pts[b], []
        for r in rows:
            s = state.get(r["k"])
            if s is not None and s[1] <= p:
                s = state[r["k"]] = None
            if s is not None:
                s[0] = [we for we in s[0] if we[1] > p]
            if r["w"] > 0:
                if s is None:
                    s = state[r["k"]] = [[], 0]
                s[0].append([r["w"], p + SPARK_TTL])
                s[1] = p + SPARK_TTL
            want.append({"k": r["k"], "batch": b, "pt": p, "q": None if s is None else [w for w, _ in s[0]]})
        out.append(want)
    return out


def _run_spark_ttl(spark, tmp_path, runs, make=None, schema="k string, batch long, pt long, v long, d array<long>",
                   model=None):
    import time

    from .spark_helpers import file_sink, read_sink, write_batch_files
    from spark_ops import apply_operator

    batches = _spark_batches()
    sink = file_sink(tmp_path / "out")

    def slow_sink(df, batch_id):
        sink(df, batch_id)
        time.sleep(0.3)             # processing time follows the clock: let it move

    for partitions, bids in runs:
        write_batch_files(tmp_path / "src", [batches[b] for b in bids], start=bids[0])
        src = spark.readStream.schema("k string, w long").option("maxFilesPerTrigger", 1).json(str(tmp_path / "src"))
        out = apply_operator(src, (make or make_spark_operator)(), "k", output_schema=schema,
                             state=str(tmp_path / "state"), partitions=partitions, key_groups=16)
        (out.writeStream.foreachBatch(slow_sink).option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True).start().awaitTermination())
    got = read_sink(tmp_path / "out")
    assert sorted(got) == list(range(len(batches)))
    pts = {}
    for b, rows in got.items():
        assert len({r["pt"] for r in rows}) == 1, rows          # one processing time per batch
        pts[b] = rows[0]["pt"]
    expected = (model or _spark_model)(batches, pts)
    for b in range(len(batches)):
        key = lambda r: r["k"]      # noqa: E731
        assert sorted(got[b], key=key) == sorted(expected[b], key=key), f"batch {b}"
    if model is not None:
        return got, pts, expected
    # the data made something live across a batch and something expire (else the test says little)
    c = [r["v"] for rows in expected for r in rows if r["k"] == "c"]
    assert c[:2] == [1, 1] and c[-1] is None, c
    assert any(len(r["d"]) == 2 for rows in expected for r in rows)
    return got


@pytest.mark.spark
def test_ttl_in_a_streaming_query_matches_the_model(utc_spark, tmp_path):
    _run_spark_ttl(utc_spark, tmp_path, [(2, range(0, 9))])


@pytest.mark.spark
def test_ttl_in_a_streaming_query_across_rescales(utc_spark, tmp_path):
    _run_spark_ttl(utc_spark, tmp_path, [(2, range(0, 3)), (3, range(3, 6)), (1, range(6, 9))])


# -- per-element expiry of the sequences --------------------------------------------------------

class SeqOps(Operator):
    """Rows {k, kind, do}: ``do`` is a Python statement run with ``o`` (the key's object of that
    kind, ttl 100 ms) and ``x``; then emits what the object holds (None when it does not exist)."""

    def on_event(self, key, row, ctx):
        kind = row["kind"]
        if row.get("do"):
            o = getattr(ctx, kind)("s", ttl=100)
            exec(row["do"], {"o": o, "x": row.get("x")})
        if not ctx.has_state("s"):
            seen = None
        else:
            o = getattr(ctx, kind)("s", ttl=100)
            seen = ([n.value for n in o.nodes()] if kind == "linked_list" else
                    [f["x"] for _, f in o] if kind == "stream" else list(o))
        ctx.emit({"k": key, "seen": seen})


def _seq(h, kind, p, do="", x=None):
    (row,) = h.run_batch([{"k": "a", "kind": kind, "do": do, "x": x}], processing_time=p)
    return row["seen"]


@pytest.mark.parametrize("kind, append", [("queue", "o.append(x)"), ("list", "o.append(x)"),
                                          ("stack", "o.push(x)"), ("linked_list", "o.add_last(x)"),
                                          ("stream", "o.add({'x': x})")])
def test_each_element_of_a_sequence_expires_on_its_own(kind, append):
    h = OperatorHarness(SeqOps(), key="k", partitions=1, key_groups=4)
    for p, x in ((0, 1), (0, 2), (30, 3), (60, 4)):
        _seq(h, kind, p, append, x)
    top = (lambda xs: xs[::-1]) if kind == "stack" else (lambda xs: xs)
    assert _seq(h, kind, 99) == top([1, 2, 3, 4])
    assert _seq(h, kind, 100) == top([3, 4])                 # invisible at once: written at 0
    assert h.metrics[-1]["ttl_expired"] == 2
    assert _seq(h, kind, 130) == top([4])
    h.restart()                                             # the spans are state
    assert _seq(h, kind, 159) == top([4])
    assert _seq(h, kind, 160) is None                       # the last element went with the object (its last write)
    assert _records(h) == []


def test_appends_of_a_batch_make_one_span_and_a_queue_expires_from_the_head_in_o_expired(monkeypatch):
    h = OperatorHarness(SeqOps(), key="k", partitions=1, key_groups=4)
    _seq(h, "queue", 0, "o.extend(range(300))")
    _seq(h, "queue", 10, "o.extend(range(300, 310))")
    spans = [e for _, _, e in _records(h) if e is not None]
    assert sorted(spans) == [("span", 0, 299), ("span", 300, 309)]     # one record per batch, not per element
    popped = []
    from objectspace._queue import PersistedQueue
    orig = PersistedQueue.popleft
    monkeypatch.setattr(PersistedQueue, "popleft", lambda self: popped.append(1) or orig(self))
    monkeypatch.setattr(PersistedQueue, "pop", lambda self: pytest.fail("nothing but the head goes"))
    assert _seq(h, "queue", 100) == list(range(300, 310))
    assert len(popped) == 300 and h.metrics[-1]["ttl_expired"] == 300


def test_a_middle_element_that_expires_leaves_the_others_their_expiry():
    """Assigned elements live on; the older ones around them expire; the survivors move to other
    slots (the general path), keeping their own expiry."""
    for kind in ("queue", "list"):
        h = OperatorHarness(SeqOps(), key="k", partitions=1, key_groups=4)
        _seq(h, kind, 0, "o.extend([0, 1, 2, 3, 4, 5])")
        _seq(h, kind, 20, "o[1] = 'b'; o[3] = 'd'")
        _seq(h, kind, 40, "o[4] = 'e'")
        assert _seq(h, kind, 100) == ["b", "d", "e"], kind
        assert h.metrics[-1]["ttl_expired"] == 3
        assert _seq(h, kind, 119) == ["b", "d", "e"], kind
        assert _seq(h, kind, 120) == ["e"], kind
        h.restart()
        assert _seq(h, kind, 139) == ["e"], kind
        assert _seq(h, kind, 140) is None and _records(h) == [], kind


@pytest.mark.parametrize("kind, do, refreshed", [
    # a list moves the elements after the position it inserts at or deletes: those count as written
    ("list", "o.insert(2, 'n')", ["n", 2, 3]),
    ("list", "del o[1]", [2, 3]),
    ("list", "o.pop(0)", [1, 2, 3]),
    ("list", "o.sort(reverse=True)", [3, 2, 1, 0]),
    ("list", "o.reverse()", [3, 2, 1, 0]),
    ("list", "o[1:3] = ['p', 'q']", ["p", "q"]),
    ("list", "o.pop()", []),
    # a queue moves the shorter side of the position (here the one after it) ...
    ("queue", "o.insert(3, 'n')", ["n", 3]),
    ("queue", "del o[1]", [0]),
    ("queue", "o.popleft(); o.pop()", []),
    ("queue", "o.rotate(-1)", [0]),                     # popleft + append: the item moved
    ("queue", "o.reverse()", [3, 2, 1, 0]),
    # ... and an appendleft into a queue that starts at its first slot moves every item up once
    ("queue", "o.appendleft('n')", ["n", 0, 1, 2, 3]),
    ("queue", "o.rotate(1)", [3, 0, 1, 2]),             # pop + appendleft, which moves them up
    ("queue", "o.appendleft('n'); o.popleft(); o.appendleft('m')", ["m", 0, 1, 2, 3]),
    ("linked_list", "o.add_after(o.first, 'n'); o.first.value = 'f'", ["f", "n"]),
    ("linked_list", "o.remove(o.first.next)", []),
    ("stack", "o.pop(); o.push('t')", ["t"]),
])
def test_what_counts_as_a_write_of_an_element(kind, do, refreshed):
    """docs/spark_ops.md, *State TTL*: an element is written when the kind writes its position."""
    h = OperatorHarness(SeqOps(), key="k", partitions=1, key_groups=4)
    add = "o.push(i)" if kind == "stack" else "o.add_last(i)" if kind == "linked_list" else "o.append(i)"
    _seq(h, kind, 0, f"for i in range(4): {add}")
    after = _seq(h, kind, 50, do)
    left = _seq(h, kind, 100)               # what was written at 0 and not since is gone
    if kind == "stack":
        after, left = after[::-1], left[::-1]
    assert left == [v for v in after if v in refreshed]
    assert sorted(map(str, refreshed)) == sorted(map(str, left))


def test_a_sequence_written_without_ttl_keeps_unstamped_elements():
    """Elements written through a handle got without ttl have no expiry of their own: they go
    with the object (whose ttl handle's last write set it)."""
    class Op(Operator):
        def on_event(self, key, row, ctx):
            if row["ttl"]:
                ctx.list("l", ttl=100).append(row["x"])
            else:
                ctx.list("l").append(row["x"])
            ctx.emit({"k": key, "l": list(ctx.list("l"))})

    h = OperatorHarness(Op(), key="k", partitions=1, key_groups=4)
    h.run_batch([{"k": "a", "ttl": True, "x": 1}], processing_time=0)
    h.run_batch([{"k": "a", "ttl": False, "x": 2}], processing_time=10)
    h.run_batch([{"k": "a", "ttl": True, "x": 3}], processing_time=50)
    assert h.run_batch([{"k": "a", "ttl": False, "x": 4}], processing_time=100) == [{"k": "a", "l": [2, 3, 4]}]
    assert h.run_batch([{"k": "a", "ttl": False, "x": 5}], processing_time=150) == [{"k": "a", "l": [5]}]


@pytest.mark.spark
def test_per_element_ttl_of_a_queue_in_a_streaming_query_and_its_expiry_in_the_data_source(utc_spark, tmp_path):
    import spark_ops

    _, pts, expected = _run_spark_ttl(utc_spark, tmp_path, [(2, range(0, 5)), (3, range(5, 9))],
                                      make=make_spark_queue_operator, model=_spark_queue_model,
                                      schema="k string, batch long, pt long, q array<long>")
    # per element: a queue held elements of two batches, then lost the older ones only
    a = [r["q"] for rows in expected for r in rows if r["k"] == "a"]
    assert any(q and len(q) >= 2 for q in a) and any(q and len(q) == 1 for q in a[2:]), a
    # the state data source shows when each element left in the state goes: its batch's time + ttl
    # (at epoch 6, the last batch that appends: its checkpoint holds what did not expire by its time)
    b6 = 6
    written = {(r["k"], r["w"]): pts[b] for b, rows in enumerate(_spark_batches()[:b6 + 1]) for r in rows
               if r["w"] > 0}
    spark_ops.register_datasource(utc_spark)
    rows = utc_spark.read.format("objectspace").option("epoch", b6).load(str(tmp_path / "state")).collect()
    qrows = [r for r in rows if r.object == "q"]
    assert {(json.loads(r.key), json.loads(r.value)) for r in qrows} == \
        {kw for kw, p in written.items() if p + SPARK_TTL > pts[b6]}
    assert qrows, rows
    for r in qrows:
        k, w = json.loads(r.key), json.loads(r.value)
        assert r.expires_at == written[(k, w)] + SPARK_TTL, r


def test_the_ttl_example_runs_and_expires_what_it_says():
    """examples/ttl_example.py (docs/spark_ops.md, *State TTL*) as a user runs it."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, os.path.join(root, "examples", "ttl_example.py")], capture_output=True,
                         text=True, timeout=120, check=True).stdout.splitlines()
    assert out[-2] == "minute  45: pages={'home': 1, 'docs': 2, 'blog': 1} recent=['docs', 'blog']"
    assert out[-1] == "minute  90: pages={'blog': 1, 'home': 1} recent=['home']"
