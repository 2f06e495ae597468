"""Both inspection CLIs (``python -m dkv``, ``python -m objectspace``) on the folders a
spark_ops query writes: the state root, an operator's folder and one shard's folder, after
a rescale, so that a shard's manifest names files of the older layout (issue 16, item 1).
The state is made by OperatorHarness (the runtime Spark runs, without Spark)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import dkv
import dkv.cli
import objectspace.cli
from objectspace import ObjectSpace
from dkv.format import manifest as mf
from spark_ops.operators import Buffer
from spark_ops.testing import OperatorHarness

OP = "q1/buffer"                          # <query id>/<operator> under the state root
OLD = "L000000000000-n00002"              # 2 shards from batch 0
NEW = "L000000000004-n00003"              # 3 shards from batch 4
SHARD = f"{NEW}/p00000"                   # a shard that reads the old layout's SSTs and WAL


def _rows(batch: int, n: int, pad: int) -> list:
    return [{"k": f"k{i}", "v": batch, "pad": "x" * pad} for i in range(n)]


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("cli") / "state")
    h = OperatorHarness(Buffer(count=8, key_columns=("k",)), key="k", partitions=2, key_groups=16,
                        state=f"{root}/{OP}", dkv_options=dict(memtable_bytes=8 << 10, flush_segments=2))
    for b in range(3):
        h.run_batch(_rows(b, 30, 200))          # small memtables: SSTs
    h.run_batch(_rows(3, 5, 10))                # left in WAL segments at the rescale
    h.rescale(3)
    h.run_batch(_rows(4, 4, 10))
    h.close()
    # The scenario: the new shard's manifest names the old layout's SSTs and WAL segments.
    (info,) = dkv.list_checkpoints(f"{root}/{OP}", SHARD)[-1:]
    m = mf.decode(open(f"{root}/{OP}/{info.name}", "rb").read(), info.name)
    assert any(t.path.startswith(OLD + "/") for t in m.tables()), m
    assert any(r.ns.startswith(OLD + "/") for r in m.wal), m
    return root


def _where(state: str) -> dict:
    """The same shard, as (location, --instance) from each folder around it."""
    return {"root": (state, f"{OP}/{SHARD}"), "operator": (f"{state}/{OP}", SHARD),
            "shard": (f"{state}/{OP}/{SHARD}", "")}


def dkv_cli(capsys, *argv, ok=True):
    rc = dkv.cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    assert (rc == 0) == ok, out.err
    return json.loads(out.out) if ok and "--json" in argv else (out.out if ok else out.err)


def os_cli(capsys, *argv, ok=True):
    rc = objectspace.cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    assert (rc == 0) == ok, out.err
    return json.loads(out.out) if ok and "--json" in argv else (out.out if ok else out.err)


def _files(tree: str) -> dict:
    return {os.path.join(b, f): os.stat(os.path.join(b, f)).st_mtime_ns for b, _, fs in os.walk(tree) for f in fs}


def test_every_dkv_command_reads_a_shard_from_each_folder_around_it(state, capsys):
    before = _files(state)
    assert dkv_cli(capsys, "instances", state, "--json") == [f"{OP}/{lay}/p{s:05d}" for lay, n in ((OLD, 2), (NEW, 3))
                                                            for s in range(n)]
    seen = {}
    for form, (loc, inst) in _where(state).items():
        args = [loc, "--instance", inst, "--json"]
        info = dkv_cli(capsys, "info", *args)
        cps = dkv_cli(capsys, "checkpoints", *args)
        report = dkv_cli(capsys, "verify", *args)
        rows = dkv_cli(capsys, "scan", *args)
        key = rows[0]["key"]
        got = dkv_cli(capsys, "get", loc, key, "--instance", inst, "--json")
        assert got["found"] and got["value"] == rows[0]["value"]
        assert dkv_cli(capsys, "get", loc, key, "--instance", inst, "--checkpoint", 4).strip() == rows[0]["value"]
        info.pop("manifest")                    # named relative to the folder given
        seen[form] = (info, [c["epoch"] for c in cps], {k: v for k, v in report.items() if k != "manifest"}, rows)
    assert seen["root"] == seen["operator"] == seen["shard"]
    info, epochs, report, rows = seen["shard"]
    assert epochs == [4] and info["wal_segments"] >= 2 and report["sst_files"] >= 1 and len(rows) > 10
    # the old layout's shards too, at every retained checkpoint
    old = f"{state}/{OP}/{OLD}/p00001"
    for e in dkv_cli(capsys, "checkpoints", old, "--json"):
        assert dkv_cli(capsys, "verify", old, "--checkpoint", e["epoch"], "--json")["epoch"] == e["epoch"]
    assert _files(state) == before              # read-only: nothing written


def test_a_folder_of_several_instances_names_them_instead_of_no_checkpoint(state, capsys):
    for loc, named in ((state, f"'{OP}/{NEW}/p00002'"), (f"{state}/{OP}", f"'{NEW}/p00002'")):
        for cmd in (["info"], ["checkpoints"], ["verify"], ["scan"], ["get", "k"]):
            err = dkv_cli(capsys, cmd[0], loc, *cmd[1:], ok=False)
            assert f"{loc} holds 5 dkv instances" in err and f"python -m dkv instances {loc}" in err, err
            assert named in err and "--instance" in err
            assert "no checkpoint" not in err and "does not exist" not in err
    err = dkv_cli(capsys, "scan", f"{state}/{OP}", "--instance", "L9/p1", ok=False)
    assert f"no dkv store at {state}/{OP}/L9/p1: the folder does not exist" in err
    assert f"'{NEW}/p00002'" in err                 # a wrong name lists the right ones


def test_opening_a_state_root_as_a_space_names_its_instances_for_a_writer_as_for_a_reader(state):
    """``ObjectSpace.open(state root)`` (no instance=): a writer is told what a reader is, the
    instances to open, not that the folder holds objects that are no store's."""
    before = _files(state)
    for loc, named in ((state, f"'{OP}/{OLD}/p00000'"), (f"{state}/{OP}", f"'{OLD}/p00000'")):
        errors = {}
        for read_only in (True, False):
            with pytest.raises(dkv.NotAStoreError) as e:
                ObjectSpace.open(loc, read_only=read_only)
            errors[read_only] = str(e.value)
        reader, writer = errors[True], errors[False]
        assert reader.startswith(f"{loc} holds 5 dkv instances, not one store at its root: name one with instance=")
        assert named in reader and reader.endswith(f"`python -m dkv instances {loc}` lists them all")
        assert writer.startswith(reader + ". A writer does not create a new store at its root"), writer
        assert "config" in writer and "create='force'" in writer
    with ObjectSpace.open(state, instance=f"{OP}/{SHARD}", read_only=True) as space:   # as the error says
        assert [c.epoch for c in space.db.checkpoints()] == [4]
    assert _files(state) == before              # nothing written by the refused opens


def test_gc_on_the_state_root_keeps_files_a_new_layout_references(state, tmp_path, capsys):
    copy = str(tmp_path / "state")
    shutil.copytree(state, copy)
    for s in range(2):
        dkv.retire(f"{copy}/{OP}", f"{OLD}/p{s:05d}")
    report = dkv_cli(capsys, "gc", copy, "--json")
    assert report["kept_shared_files"] >= 2 and report["retired_instances"] == [f"{OP}/{OLD}/p00000",
                                                                             f"{OP}/{OLD}/p00001"]
    for form, (loc, inst) in _where(copy).items():
        assert dkv_cli(capsys, "verify", loc, "--instance", inst, "--json")["sst_files"] >= 1, form


def test_objectspace_commands_on_each_folder(state, capsys):
    before = _files(state)
    everything = os_cli(capsys, "ls", state, "--json")
    assert len(everything) == 30 and {r["instance"].split("/")[2] for r in everything} == {NEW}
    seen = {}
    for form, (loc, inst) in _where(state).items():
        sel = ["--instance", inst] if inst else []
        rows = os_cli(capsys, "ls", loc, *sel, "--json")
        names = [json.dumps(r["name"]) for r in rows]
        assert names and set(names) <= {json.dumps(r["name"]) for r in everything}
        seen[form] = (names, [(r["kind"], r["length"], r["bytes"]) for r in rows],
                      os_cli(capsys, "stats", loc, *sel, "--json")["objects"],
                      [s["key_group"] for s in os_cli(capsys, "spaces", loc, *sel, "--json")],
                      os_cli(capsys, "show", loc, *sel, names[0], "--json")["items"])
    assert seen["root"] == seen["operator"] == seen["shard"]
    # across the rescale, from the operator's folder and from the state root
    for loc in (state, f"{state}/{OP}"):
        diff = os_cli(capsys, "diff", loc, "--from", 3, "--to", 4, "--json")
        assert diff["summary"]["objects_changed"] == 4 and diff["summary"]["slots_added"] == 4
    # an old shard's own folder, at an older epoch
    old = os_cli(capsys, "ls", f"{state}/{OP}/{OLD}/p00000", "--epoch", 2, "--json")
    assert old and all(r["epoch"] == 2 for r in old)
    assert _files(state) == before


def test_the_cli_processes_end_to_end(state):
    """One real ``python -m`` run of each CLI on a shard's own folder."""
    loc = f"{state}/{OP}/{SHARD}"
    for mod, argv in (("dkv", ["verify", loc]), ("objectspace", ["stats", loc])):
        proc = subprocess.run([sys.executable, "-m", mod, *argv], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dkv", "info", state], capture_output=True, text=True)
    assert proc.returncode == 1 and "python -m dkv instances" in proc.stderr


@pytest.mark.parametrize("argv", [["dkv", "scan", "{shard}"], ["objectspace", "ls", "{shard}"],
                                  ["spark_ops", "operators", "{state}"]], ids=["dkv", "objectspace", "spark_ops"])
def test_a_reader_that_closed_the_pipe_ends_the_command_quietly(state, argv):
    """``python -m dkv scan ... | head -1``: the reader is gone before the output is written.
    The command stops with a shell's status for SIGPIPE, without a traceback."""
    argv = [a.format(shard=f"{state}/{OP}/{SHARD}", state=state) for a in argv]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([sys.executable, "-m", *argv], stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141, proc.stderr


def test_a_fresh_objectspace_process_knows_the_operators_layouts(state):
    """``python -m objectspace`` imports nothing of spark_ops: it finds spark_ops' family rule
    through the entry point that installing the project declares (pyproject.toml), so on
    the state root it reads the newest layout's shards, labelled with their operator."""
    from importlib import metadata
    if not any(ep.name == "spark_ops" for ep in metadata.entry_points(group="objectspace.family_rules")):
        pytest.skip("the objectspace.family_rules entry point is not installed: run scripts/setup_env.sh")
    proc = subprocess.run([sys.executable, "-m", "objectspace", "spaces", state, "--json"], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows and {r["instance"].rsplit("/", 2)[-2] for r in rows} == {NEW}
    assert {(r["operator"], r["query_id"]) for r in rows} == {("buffer", "q1")} and {r["epoch"] for r in rows} == {4}
