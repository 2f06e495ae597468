"""spark.read.format("objectspace"): rows equal what the object spaces hold, for a plain space
and for the state of a real streaming query; the change feed equals the diff."""
from __future__ import annotations

import json

import pytest

import objectspace
import spark_ops
from objectspace import ObjectSpace, SlotChange
from .spark_helpers import at, read_stream, run_stream, write_batch_files

pytestmark = pytest.mark.spark

COLS = ["operator", "instance", "epoch", "key_group", "key", "object", "kind", "slot", "value"]


def _j(v) -> str:
    return json.dumps(objectspace.to_jsonable(v), ensure_ascii=False, separators=(",", ":"))


def plain_space(loc) -> None:
    with ObjectSpace.open(loc) as sp:
        sp.create_queue("q", [1, 2, 3])
        sp.create_dict(("user", 7), {"a": [1, 2], "b": None})
        sp.create_value("v", "x")
        sp.checkpoint(1)
        sp.get_queue("q").popleft()
        sp.get_dict(("user", 7))["a"] = 3
        sp.create_set("s", {"t"})
        sp.delete("v")
        sp.checkpoint(2)


def rows_of(df, cols=COLS) -> set:
    return {tuple(r[c] for c in cols) for r in df.collect()}


@pytest.fixture
def ds(spark):
    spark_ops.register_datasource(spark)
    spark_ops.register_datasource(spark)        # idempotent
    return spark


def test_rows_equal_a_plain_space(ds, tmp_path):
    loc = str(tmp_path / "plain")
    plain_space(loc)
    for epoch in (1,):
        df = ds.read.format("objectspace").option("epoch", epoch).load(loc)
        assert df.columns == ["operator", "query_id", "instance", "epoch", "key_group", "key", "object", "kind",
                              "slot", "value", "expires_at"]
        assert {r.expires_at for r in df.collect()} == {None}          # no TTL in a plain space
        with ObjectSpace.open(loc, checkpoint=epoch, read_only=True) as sp:
            expect = {(None, "", epoch, 0, None, n if isinstance(n, str) else _j(n), info.kind, _j(s), _j(v))
                      for info, s, v in objectspace.walk_slots(sp) for n in [info.name]}
        assert rows_of(df) == expect and len(expect) > 3
    latest = ds.read.format("objectspace").load(loc)
    assert {r.epoch for r in latest.collect()} == {2}


def test_change_feed_of_a_plain_space(ds, tmp_path):
    loc = str(tmp_path / "plain")
    plain_space(loc)
    df = ds.read.format("objectspace").option("changes_from", 1).option("epoch", 2).load(loc)
    got = {(r.object, r.slot, r.change_type, r.old_value, r.value) for r in df.collect()}
    assert got == {("q", "0", "removed", "1", None), ('["user",7]', '"a"', "changed", "[1,2]", "3"),
                   ("s", '"t"', "added", None, "null"), ("v", "null", "removed", '"x"', None)}
    assert {r.from_epoch for r in df.collect()} == {1} and {r.epoch for r in df.collect()} == {2}


def totals_operator():
    """Per user: a running total, the last two amounts, and the pages as a set. Built in a
    function so cloudpickle ships the class by value (workers cannot import tests)."""

    class Totals(spark_ops.Operator):
        def on_event(self, key, row, ctx):
            total = ctx.value("total", 0)
            total.value += row["v"]
            ctx.queue("amounts").append(row["v"])
            ctx.set("pages").add(row["k"] + "-page")
            if len(ctx.queue("amounts")) > 2:
                ctx.queue("amounts").popleft()
            ctx.emit({"k": key, "total": total.value})
    return Totals()


def test_rows_equal_a_streaming_operators_state(ds, utc_spark, tmp_path):
    batches = [[{"k": "a", "ts": at(0), "v": 1}, {"k": "b", "ts": at(1), "v": 2}],
               [{"k": "a", "ts": at(2), "v": 3}, {"k": "c", "ts": at(3), "v": 4}],
               [{"k": "a", "ts": at(4), "v": 5}, {"k": "b", "ts": at(5), "v": 6}]]
    write_batch_files(tmp_path / "src", batches)
    state = str(tmp_path / "state")
    out = spark_ops.apply_operator(read_stream(utc_spark, tmp_path / "src"), totals_operator(), key="k", event_time="ts",
                                   output_schema="k string, total long", state=state, partitions=2, key_groups=16)
    q = run_stream(out, tmp_path / "out", tmp_path / "cp")
    df = ds.read.format("objectspace").load(state)
    assert df.rdd.getNumPartitions() == 2                       # one partition per shard
    rows = df.collect()
    assert {(r.operator, r.query_id, r.epoch) for r in rows} == {("totals", str(q.id), 2)}
    # rows equal the object spaces read directly
    expect = set()
    for ref in objectspace.find_instances(state):
        with ref.open() as db:
            for kg, sp in objectspace.spaces_of(db):
                for info, slot, v in objectspace.walk_slots(sp):
                    expect.add((ref.instance, kg, _j(info.name[0]), info.name[-1], info.kind, _j(slot), _j(v)))
    assert {(r.instance, r.key_group, r.key, r.object, r.kind, r.slot, r.value) for r in rows} == expect
    # and the operator's model
    got = {(json.loads(r.key), r.object, json.loads(r.slot), json.loads(r.value)) for r in rows}
    assert got == {("a", "total", None, 9), ("a", "amounts", 0, 3), ("a", "amounts", 1, 5), ("a", "pages", "a-page", None),
                   ("b", "total", None, 8), ("b", "amounts", 0, 2), ("b", "amounts", 1, 6), ("b", "pages", "b-page", None),
                   ("c", "total", None, 4), ("c", "amounts", 0, 4), ("c", "pages", "c-page", None)}
    # filtering and SQL work as on any DataFrame
    assert ds.read.format("objectspace").option("operator", "totals").option("epoch", 0).load(state) \
        .filter("object = 'total'").selectExpr("sum(cast(value as long))").first()[0] == 3
    changes = ds.read.format("objectspace").option("changes_from", 0).load(state)
    ch = {(json.loads(r.key), r.object, json.loads(r.slot), r.change_type) for r in changes.collect()}
    expect_ch = set()
    for old, new, groups in objectspace.pair_instances(state, 0, 2):
        for kg, c in objectspace.diff_pair(old, new, groups):
            if isinstance(c, SlotChange):
                expect_ch.add((c.name[0], c.name[-1], c.slot, c.change))
    assert ch == expect_ch
    # queue positions: the old head removed, the new items added at their new positions
    assert {("a", "amounts", 0, "removed"), ("a", "amounts", 0, "added"), ("c", "total", None, "added")} <= ch
    assert ("b", "total", None, "changed") in ch
    # With the session's Python filter pushdown on, filters on operator and key_group prune
    # what is read (fewer partitions for another operator); the rows are those Spark's own
    # filtering keeps.
    from spark_ops.datasource import PUSHDOWN_CONF
    utc_spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        spark_ops.register_datasource(utc_spark)
        kgs = sorted({r.key_group for r in rows})[:2]
        cols = ["instance", "key_group", "key", "object", "slot", "value"]
        pushed = utc_spark.read.format("objectspace").load(state).filter(
            f"key_group in ({', '.join(map(str, kgs))}) and operator = 'totals'")
        assert rows_of(pushed, cols) == {tuple(r[c] for c in cols) for r in rows if r.key_group in kgs}
        assert len(rows_of(pushed, cols)) < len(rows)
        other = utc_spark.read.format("objectspace").load(state).filter("operator = 'other'")
        assert other.rdd.getNumPartitions() == 1 and other.count() == 0      # no shard of it read
        timers = utc_spark.read.format("objectspace").option("timers", True).load(state).filter(f"key_group = {kgs[0]}")
        assert all(r.key_group == kgs[0] for r in timers.collect())
    finally:
        utc_spark.conf.unset(PUSHDOWN_CONF)
        spark_ops.register_datasource(utc_spark)


def test_bad_options(ds, tmp_path):
    loc = str(tmp_path / "plain")
    plain_space(loc)
    with pytest.raises(Exception, match="epoch must be an int"):
        ds.read.format("objectspace").option("epoch", "x").load(loc).collect()
    with pytest.raises(Exception, match="retained epochs"):
        ds.read.format("objectspace").option("epoch", 9).load(loc).collect()


@pytest.mark.s3
def test_rows_from_s3_with_store_options(ds, s3_server):
    loc = s3_server.url()
    plain_space(loc)
    opts = dict(endpoint_url=s3_server.endpoint, region_name="us-east-1", aws_access_key_id="testing",
                aws_secret_access_key="testing")
    df = ds.read.format("objectspace").options(**opts).option("changes_from", 1).load(loc)
    assert {(r.object, r.change_type) for r in df.collect()} == {
        ("q", "removed"), ('["user",7]', "changed"), ("s", "added"), ("v", "removed")}


def grid_operator():
    """Per key: a 4x4 float grid in 2x2 chunks; each row sets cell (v % 4, v // 4 % 4) to v.
    Built in a function so cloudpickle ships the class by value."""

    class Grid(spark_ops.Operator):
        def on_event(self, key, row, ctx):
            g = ctx.ndarray("grid", (4, 4), "float64", chunks=(2, 2))
            v = row["v"]
            g[v % 4, v // 4 % 4] = float(v)
            ctx.emit({"k": key, "total": int(g[:, :].sum())})
    return Grid()


def test_ndarray_state_of_a_streaming_operator(ds, utc_spark, tmp_path):
    """An operator's ndarray read through the state data source on real Spark: one row per
    stored chunk (slot: the chunk's coordinates; value: its cells), equal to the object
    spaces read directly; chunks never written have no row."""
    batches = [[{"k": "a", "ts": at(0), "v": 1}, {"k": "b", "ts": at(1), "v": 6}],
               [{"k": "a", "ts": at(2), "v": 11}, {"k": "a", "ts": at(3), "v": 5}]]
    write_batch_files(tmp_path / "src", batches)
    state = str(tmp_path / "state")
    out = spark_ops.apply_operator(read_stream(utc_spark, tmp_path / "src"), grid_operator(), key="k", event_time="ts",
                                   output_schema="k string, total long", state=state, partitions=2, key_groups=16)
    run_stream(out, tmp_path / "out", tmp_path / "cp")
    rows = ds.read.format("objectspace").load(state).collect()
    assert {r.kind for r in rows} == {"ndarray"}
    expect = set()
    for ref in objectspace.find_instances(state):
        with ref.open() as db:
            for kg, sp in objectspace.spaces_of(db):
                for info, slot, v in objectspace.walk_slots(sp):
                    expect.add((ref.instance, kg, _j(info.name[0]), info.name[-1], _j(slot), _j(v)))
    assert {(r.instance, r.key_group, r.key, r.object, r.slot, r.value) for r in rows} == expect
    # the model: cell (v % 4, v // 4 % 4) = v; a 2x2 chunk (i // 2, j // 2) holds it
    cells: dict = {}
    for r in rows:
        ci, cj = json.loads(r.slot)
        for di, line in enumerate(json.loads(r.value)):
            for dj, x in enumerate(line):
                if x:
                    cells[(json.loads(r.key), 2 * ci + di, 2 * cj + dj)] = x
    assert cells == {("a", 1, 0): 1.0, ("a", 3, 2): 11.0, ("a", 1, 1): 5.0, ("b", 2, 1): 6.0}
    assert len(rows) == 3       # a: chunks (0, 0) and (1, 1); b: chunk (1, 0)
