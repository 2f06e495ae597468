"""Expiry times where state is shown (issue 19, item 5, TTL): ``python -m objectspace ls/show``
and the state data source's ``expires_at`` of an operator's TTL'd state, per object and per
entry / element, null without ttl; an ndarray's chunks go with the object. The state is made by
OperatorHarness; the data source's reader runs without a Spark session here (tests/spark_ops/
test_ttl.py reads it through Spark)."""
from __future__ import annotations

import json

import pytest

import objectspace.cli
from spark_ops import Operator
from spark_ops.datasource import READ_SCHEMA, _Reader
from spark_ops.testing import OperatorHarness

TTL = 10_000
P0, P1 = 1_000, 4_000       # processing times of the two batches


class Timed(Operator):
    def on_event(self, key, row, ctx):
        ctx.value("v", ttl=TTL).value = row["x"]
        ctx.queue("q", ttl=TTL).append(row["x"])
        ctx.dict("d", ttl=TTL)[row["x"]] = 1
        ctx.ndarray("nd", (4,), "int64", chunks=(2,), ttl=TTL)[row["x"] % 4] = row["x"]
        ctx.linked_list("ll", ttl=TTL).add_last(row["x"])
        ctx.stream("s", ttl=TTL).add({"x": row["x"]})
        ctx.value("plain").value = row["x"]         # no ttl: null everywhere


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("ttl-inspect") / "state")
    h = OperatorHarness(Timed(), key="k", partitions=1, key_groups=4, state=f"{root}/q1/timed")
    h.run_batch([{"k": "a", "x": 0}, {"k": "a", "x": 1}], processing_time=P0)
    h.run_batch([{"k": "a", "x": 2}], processing_time=P1)
    h.close()
    return root


def cli(capsys, *argv):
    rc = objectspace.cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


E0, E1 = P0 + TTL, P1 + TTL


def test_ls_shows_each_objects_expiry(state, capsys):
    rows = json.loads(cli(capsys, "ls", state, "--json"))
    got = {r["name"][-1]: r["expires_at"] for r in rows}
    assert got == {"v": E1, "q": E1, "d": E1, "nd": E1, "ll": E1, "s": E1, "plain": None}
    text = cli(capsys, "ls", state)
    assert "EXPIRES AT" in text and "1970-01-01T00:00:14.000Z" in text


@pytest.mark.parametrize("name, want", [
    ("q", [E0, E0, E1]),                # per element: the first two were written in the first batch
    ("ll", [E0, E0, E1]),
    ("s", [E0, E0, E1]),
    ("d", [E0, E0, E1]),                # per entry
    ("v", [E1]),
    ("nd", [E1, E1]),                   # chunks go with the object
    ("plain", [None]),
])
def test_show_gives_each_slot_its_expiry(state, capsys, name, want):
    out = json.loads(cli(capsys, "show", state, json.dumps(["a", name]), "--json"))
    assert [i["expires_at"] for i in out["items"]] == want
    assert out["expires_at"] == (None if name == "plain" else E1)
    text = cli(capsys, "show", state, json.dumps(["a", name]))
    assert ("EXPIRES AT" in text) == (name != "plain")
    assert ("expires at 1970-01-01T00:00:14.000Z" in text.splitlines()[0]) == (name != "plain")


def test_the_data_source_has_expires_at(state):
    assert READ_SCHEMA.endswith(", expires_at long")
    reader = _Reader({"path": state})
    rows = [r for p in reader.partitions() for r in reader.read(p)]
    cols = [c.split()[0] for c in READ_SCHEMA.split(", ")]
    got: dict = {}
    for r in rows:
        r = dict(zip(cols, r))
        got.setdefault(r["object"], []).append(r["expires_at"])
    assert got == {"v": [E1], "q": [E0, E0, E1], "d": [E0, E0, E1], "nd": [E1, E1], "ll": [E0, E0, E1],
                   "s": [E0, E0, E1], "plain": [None]}
