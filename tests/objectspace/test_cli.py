"""``python -m objectspace``: every command on a folder, a spark_ops state root and S3; text
checked, --json parsed; errors; progress; read-only."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from objectspace import ObjectSpace
from objectspace._inspect import family_rules
from objectspace.cli import main
from .test_inspect import EXPECTED_DIFF, build_history, operator_state  # noqa: F401 - fixture

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def history(tmp_path) -> str:
    loc = str(tmp_path / "space")
    build_history(loc)
    return loc


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def run_json(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def listing(tree: str) -> dict:
    out = {}
    for base, _, files in os.walk(tree):
        for f in files:
            p = os.path.join(base, f)
            out[p] = os.stat(p).st_mtime_ns
    return out


def test_ls(history, capsys):
    before = listing(history)
    rc, out, _ = run(capsys, "ls", history)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == "# (root) @ epoch 3, key group 0: 15 objects"
    assert lines[1].split() == ["NAME", "KIND", "CODEC", "LENGTH", "BYTES"]
    assert any(line.split()[:4] == ["q", "queue", "msgpack", "3"] for line in lines)
    assert any(line.startswith('["user",1,{"$bytes":"7a"}]') for line in lines)
    rows = run_json(capsys, "ls", history, "--epoch", "1")
    names = [r["name"] for r in rows]
    assert "gone" in names and "v" in names and "new" not in names
    q = next(r for r in rows if r["name"] == "q")
    assert (q["kind"], q["length"], q["instance"], q["epoch"], q["key_group"]) == ("queue", 3, "", 1, 0)
    assert q["bytes"] > 0 and q["records"] == 5
    assert [r["name"] for r in run_json(capsys, "ls", history, "--scope", '["user"]')] == [["user", 1, {"$bytes": "7a"}]]
    assert all(r["bytes"] is None for r in run_json(capsys, "ls", history, "--no-sizes"))
    assert listing(history) == before          # read-only: nothing written, nothing touched


def test_show(history, capsys):
    rc, out, _ = run(capsys, "show", history, "l", "--limit", "2")
    assert rc == 0
    assert out.splitlines() == ["list l (msgpack, length 4) in (root) @ epoch 3, key group 0",
                                "SLOT  VALUE", "0     9", "1     2", "… more: --offset 2"]
    page = run_json(capsys, "show", history, "l", "--offset", "2", "--limit", "5")
    assert page["items"] == [{"slot": 2, "value": 3, "expires_at": None}, {"slot": 3, "value": 4, "expires_at": None}] and page["more"] is False
    d = run_json(capsys, "show", history, '["user", 1, {"$bytes": "7a"}]')
    assert d["kind"] == "dict" and d["items"] == [{"slot": [1, 2], "value": {"$bytes": "726177"}, "expires_at": None}]
    old = run_json(capsys, "show", history, "gone", "--checkpoint", "1")
    assert old["items"] == [{"slot": None, "value": "bye", "expires_at": None}]
    x = run_json(capsys, "show", history, "x")
    assert [i["slot"] for i in x["items"]] == ["1000-0", "1000-1", "1000-2", ["group", "g"], ["pending", "g", "1000-0"]]


def test_diff(history, capsys):
    rc, out, _ = run(capsys, "diff", history, "--from", "1", "--to", "2")
    assert rc == 0
    lines = out.splitlines()
    assert "~ queue q (changed, length 3 -> 3)" in lines and "    - 0: 1" in lines and "    + 2: 4" in lines
    assert "- value gone (removed, length 1 -> -)" in lines and '    - (value): "bye"' in lines
    assert "+ set k (added, length - -> 1)" in lines and "    + 1" in lines
    assert lines[-1] == "epoch 1 -> 2: objects +2 ~9 -2, slots +9 ~5 -7"
    data = run_json(capsys, "diff", history, "--from", "1", "--to", "2", "--slots", "-1")
    got = {}
    for o in data["objects"]:
        got[(o["name"], o["change"], "OBJECT")] = (o["old_length"], o["new_length"])
        for s in o["slots"]:
            slot = tuple(s["slot"]) if isinstance(s["slot"], list) else s["slot"]
            got[(o["name"], s["change"], slot)] = (s["old"], s["new"])
    assert got == EXPECTED_DIFF
    assert data["summary"] == {"objects_added": 2, "objects_changed": 9, "objects_removed": 2,
                               "slots_added": 9, "slots_changed": 5, "slots_removed": 7}
    few = run_json(capsys, "diff", history, "--from", "1", "--to", "2", "--slots", "1")
    d = next(o for o in few["objects"] if o["name"] == "d")
    assert len(d["slots"]) == 1 and d["more_slots"] == 2
    assert run_json(capsys, "diff", history, "--from", "2", "--to", "3")["objects"] == []


def test_stats(history, capsys):
    rc, out, _ = run(capsys, "stats", history, "--top", "2")
    assert rc == 0
    assert out.splitlines()[0].startswith("15 objects, ")
    assert "largest objects:" in out and "RETAINED CHECKPOINTS" in out
    data = run_json(capsys, "stats", history)
    assert data["objects"] == 15 and data["kinds"]["queue"]["objects"] == 2
    assert data["instances"][0]["checkpoints"] == [1, 2, 3]
    assert len(data["largest"]) == 10 and data["largest"][0]["instance"] == ""


def test_spaces_and_errors(history, capsys):
    # rows carry the labels of every family rule (spark_ops': operator, query_id), null here
    blank = {name: None for rule in family_rules() for name in rule.labels}
    assert run_json(capsys, "spaces", history) == [
        {"instance": "", "epoch": 3, **blank, "key_group": 0, "prefix": "000000"}]
    rc, _, err = run(capsys, "show", history, "nope")
    assert rc == 1 and "no object named 'nope'" in err
    rc, _, err = run(capsys, "ls", history, "--epoch", "9")
    assert rc == 1 and "retained epochs: [1, 2, 3]" in err
    rc, _, err = run(capsys, "show", history, "[oops")
    assert rc == 1 and "not a JSON array" in err
    with pytest.raises(SystemExit):
        main(["diff", history, "--from", "1"])


def test_custom_prefix_and_progress(tmp_path, capsys):
    loc = str(tmp_path / "app")
    with ObjectSpace.open(loc, prefix=b"app/") as sp:
        sp.create_dict("cfg", {"a": 1})
        sp.checkpoint(4)
    assert run_json(capsys, "ls", loc) == []           # not a key-group space: must be named
    rows = run_json(capsys, "ls", loc, "--prefix", "app/")
    assert [(r["name"], r["key_group"]) for r in rows] == [("cfg", None)]
    rc, out, err = run(capsys, "stats", loc, "--prefix", "app/", "--progress")
    assert rc == 0 and "stats" in err                   # tqdm drew on stderr, the report on stdout
    assert "1 objects" in out


def test_spark_ops_state_root(operator_state, capsys):
    spaces = run_json(capsys, "spaces", operator_state)
    assert {s["instance"] for s in spaces} == {f"count/L000000000002-n00003/p0000{i}" for i in range(3)}
    assert {s["operator"] for s in spaces} == {"count"}
    old = run_json(capsys, "spaces", operator_state, "--epoch", "1")
    assert {s["instance"].split("/")[1] for s in old} == {"L000000000000-n00002"}
    rows = run_json(capsys, "ls", operator_state, "--instance", "count")
    assert sorted(tuple(r["name"]) for r in rows) == sorted((k, n) for k in "abcd" for n in ("n", "seen"))
    shown = run_json(capsys, "show", operator_state, '["c", "seen"]')
    assert [i["value"] for i in shown["items"]] == [4, 5] and shown["operator"] == "count"
    one = run_json(capsys, "ls", operator_state, "--key-group", str(shown["key_group"]))
    assert {tuple(r["name"]) for r in one} == {("c", "n"), ("c", "seen")}
    diff = run_json(capsys, "diff", operator_state, "--from", "0", "--to", "2")
    changed = {(tuple(o["name"]), o["change"]) for o in diff["objects"]}
    assert changed == {(("a", "n"), "changed"), (("a", "seen"), "changed"), (("c", "n"), "added"),
                       (("c", "seen"), "added"), (("d", "n"), "added"), (("d", "seen"), "added")}
    rc, out, _ = run(capsys, "ls", operator_state)
    assert "# count/L000000000002-n00003/p00002 @ epoch 2, key group" in out


def test_module_entry_point(history):
    env = {**os.environ, "PYTHONPATH": ROOT}
    p = subprocess.run([sys.executable, "-m", "objectspace", "ls", history, "--json"], capture_output=True,
                       text=True, env=env, cwd=ROOT, timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)) == 15


@pytest.mark.s3
def test_commands_on_s3(s3_server, capsys):
    loc = s3_server.url()
    build_history(loc)
    assert len(run_json(capsys, "ls", loc)) == 15
    assert run_json(capsys, "show", loc, "q")["items"] == [{"slot": i, "value": v, "expires_at": None}
                                                          for i, v in enumerate([2, 3, 4])]
    assert run_json(capsys, "diff", loc, "--from", "1", "--to", "2")["summary"]["objects_added"] == 2
    assert run_json(capsys, "stats", loc, "--endpoint-url", s3_server.endpoint)["objects"] == 15
    rc, out, _ = run(capsys, "ls", loc, "--epoch", "1")
    assert rc == 0 and "gone" in out


def test_what_is_not_a_store_is_an_error_and_stays_untouched(tmp_path, capsys):
    """Issue 16: the CLI never writes, so a missing path is not created and a folder of
    other files is left as it was; each error says what is there."""
    missing = tmp_path / "missing"
    for cmd in (["spaces"], ["ls"], ["show", "q"], ["stats"], ["diff", "--from", "1", "--to", "2"]):
        rc, _, err = run(capsys, cmd[0], missing, *cmd[1:])
        assert rc == 1 and f"no dkv store at {missing}: the folder does not exist" in err, err
    assert not missing.exists()
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("x")
    rc, _, err = run(capsys, "ls", other)
    assert rc == 1 and "todo.txt" in err and "no dkv" in err
    assert sorted(os.listdir(other)) == ["todo.txt"]
    rc, _, err = run(capsys, "ls", f"memory://never-{os.getpid()}")
    assert rc == 1 and "it holds no objects" in err


def test_show_with_the_name_first_says_the_order(history, capsys):
    """``show NAME LOCATION`` (the name where the location goes) is an error that gives the
    order to use; a location that is simply missing gets no such hint."""
    rc, _, err = run(capsys, "show", '["user-1","items"]', history)
    assert rc == 1 and "no dkv store at" in err
    assert f"the location comes first, then the name: python -m objectspace show {history} " in err
    rc, _, err = run(capsys, "show", "/no/such/folder", "q")
    assert rc == 1 and "location comes first" not in err


def test_ls_of_several_stores_names_a_damaged_one_and_lists_the_others(tmp_path, capsys):
    """`ls` of a folder of several stores died on the first damaged one with a bare
    "checksum mismatch" (issue 32): it lists the others, then names the damaged store on
    stderr and exits 1."""
    root = tmp_path / "root"
    for name in ("a", "b", "c"):
        with ObjectSpace.open(str(root / name)) as sp:
            sp.create_dict(f"{name}-d", {i: "x" * 50 for i in range(200)})
            sp.checkpoint()
            sp.db.flush()                   # the dict into a table, which the damage hits
            sp.create_value(f"{name}-v", 1)
            sp.checkpoint()
    ssts = [os.path.join(dp, f) for dp, _, fs in os.walk(root / "b") for f in fs if f.endswith(".sst")]
    assert ssts, "the checkpoint wrote a table"
    for path in ssts:
        data = bytearray(open(path, "rb").read())
        for i in range(64, len(data) - 64, 97):
            data[i] ^= 0xFF
        open(path, "wb").write(bytes(data))
    code, out, err = run(capsys, "ls", str(root))
    assert code == 1
    assert '"a-d"' in out or "a-d" in out and "c-d" in out
    assert "could not be read" in err and "b @ epoch 2" in err and "Corruption" in err
    code, out, err = run(capsys, "stats", str(root))
    assert code == 1 and "b @ epoch 2" in err
