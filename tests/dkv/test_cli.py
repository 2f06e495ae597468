"""`python -m dkv`: every command, human and --json output, on a real store folder."""
import json
import subprocess
import sys

import pytest

import dkv


def run(*args, ok=True):
    proc = subprocess.run([sys.executable, "-m", "dkv", *args], capture_output=True, text=True)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture
def store(tmp_path):
    loc = str(tmp_path / "db")
    with dkv.open(loc, background=False, memtable_bytes=4000, flush_segments=2) as db:
        for i in range(300):
            db.put(b"\x00\x01user%04d" % i, b"v%d" % i)
        db.checkpoint(3).wait()
        db.delete(b"\x00\x01user0005")
        db.put(b"zz", b"last")
        db.checkpoint(4).wait()
    return loc


def test_checkpoints_lists_epochs(store):
    assert run("checkpoints", store).stdout.split()[0::4] == ["3", "4"]
    data = json.loads(run("checkpoints", store, "--json").stdout)
    assert [c["epoch"] for c in data] == [3, 4]
    assert all(c["manifest"].startswith("manifest/") for c in data)


def test_info_describes_the_manifest(store):
    data = json.loads(run("info", store, "--json").stdout)
    assert data["epoch"] == 4 and data["last_seq"] == 302
    assert sum(lv["records"] for lv in data["levels"]) > 0      # the small memtable flushed
    assert data["retained"] == [3, 4]
    old = json.loads(run("info", store, "--checkpoint", "3", "--json").stdout)
    assert old["epoch"] == 3
    assert "checkpoint 4" in run("info", store).stdout


def test_get_reads_latest_and_older_checkpoints(store):
    assert run("get", store, r"\x00\x01user0042").stdout.strip() == "v42"
    assert json.loads(run("get", store, r"\x00\x01user0005", "--json").stdout)["found"] is False
    assert run("get", store, r"\x00\x01user0005", "--checkpoint", "3").stdout.strip() == "v5"
    assert run("get", store, (b"\x00\x01user0042").hex(), "--hex").stdout.strip() == b"v42".hex()


def test_scan_prefix_limit_and_json(store):
    rows = json.loads(run("scan", store, "--prefix", r"\x00\x01user000", "--json").stdout)
    assert [r["key"] for r in rows] == [r"\x00\x01user%04d" % i for i in range(10) if i != 5]
    assert len(run("scan", store, "--limit", "3").stdout.splitlines()) == 3
    assert run("scan", store, "--prefix", "nothing").stdout.strip() == "(no keys)"


def test_verify_checks_every_file_and_reports_damage(store, tmp_path):
    report = json.loads(run("verify", store, "--json").stdout)
    assert report["records"] >= 300 and report["sst_files"] >= 1
    sst = next((tmp_path / "db" / "sst").iterdir())
    data = bytearray(sst.read_bytes())
    data[10] ^= 0xFF
    sst.write_bytes(bytes(data))
    proc = run("verify", store, ok=False)
    assert proc.returncode == 1
    assert "checksum" in proc.stderr or "damaged" in proc.stderr
    assert sst.name in proc.stderr


def test_instances_and_gc_of_a_retired_instance(tmp_path):
    root = str(tmp_path / "root")
    with dkv.open(root, instance="a", background=False) as a:
        a.put(b"\x00\x01k", b"1")
        a.flush()
        a.checkpoint(1).wait()
    with dkv.open(root, instance="b", sources=[("a", 1)], background=False) as b:
        b.checkpoint(2).wait()
    assert json.loads(run("instances", root, "--json").stdout) == ["a", "b"]
    dkv.retire(root, "a")
    report = json.loads(run("gc", root, "--json").stdout)
    assert report["retired_instances"] == ["a"] and report["kept_shared_files"] >= 1   # b still uses a's SST
    with dkv.open(root, instance="b", read_only=True) as b:
        assert b.get(b"\x00\x01k") == b"1"


def test_errors_are_one_line_and_exit_1(tmp_path):
    proc = run("info", str(tmp_path / "empty"), ok=False)
    assert proc.returncode == 1 and proc.stderr.startswith("error:")
    proc = run("get", str(tmp_path / "empty"), "k", "--checkpoint", "9", ok=False)
    assert proc.returncode == 1 and "9" in proc.stderr


def test_no_store_is_an_error_that_says_what_is_there_and_creates_nothing(tmp_path, capsys):
    from dkv.cli import main
    missing = tmp_path / "missing"
    for cmd in ("instances", "checkpoints", "info", "scan", "verify", "gc"):
        assert main([cmd, str(missing)]) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: no dkv store at {missing}: the folder does not exist"), err
    assert not missing.exists()
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("x")
    assert main(["info", str(tmp_path / "notes")]) == 1
    assert "holds 1 other object (todo.txt) but no dkv manifest/ or writer/ folder" in capsys.readouterr().err


def test_verify_and_gc_draw_no_progress_when_stderr_is_not_a_terminal(store, tmp_path):
    """Redirected (a CI log, a pipe), carriage-return redraws would pile up in one line."""
    proc = run("verify", store)
    assert proc.stdout.startswith("checkpoint 4: OK") and "\r" not in proc.stderr and proc.stderr == ""
    root = str(tmp_path / "root")
    with dkv.open(root, instance="a", background=False) as a:
        a.put(b"k", b"1")
        a.checkpoint(1).wait()
    dkv.retire(root, "a")
    proc = run("gc", root)
    assert proc.stdout.startswith("deleted ") and "\r" not in proc.stderr and proc.stderr == ""


def test_verify_draws_progress_on_a_terminal(store):
    pty = pytest.importorskip("pty")
    import os
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "dkv", "verify", store], stdout=subprocess.PIPE,
                              stderr=secondary, text=True, timeout=60)
        os.close(secondary)
        secondary = None
        err = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:             # Linux: EIO once the terminal's other end is closed
                break
            if not chunk:
                break
            err += chunk
    finally:
        if secondary is not None:
            os.close(secondary)
        os.close(primary)
    assert proc.returncode == 0 and proc.stdout.startswith("checkpoint 4: OK")
    assert err.startswith(b"\r1/") and err.count(b"\r") >= 2, err


def test_bad_input_is_one_line_a_bug_is_not_hidden(tmp_path, capsys, monkeypatch):
    """The CLIs' error policy (dkv.cli.run_command, shared by objectspace's and spark_ops'):
    the package's own errors are one line; a ValueError or TypeError also says where it was
    raised, so that a bug is not read as a user's mistake; TRACEBACK=1 shows the traceback;
    any other exception propagates."""
    from dkv import cli

    assert cli.main(["info", "bad://x"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unsupported location scheme 'bad'") and err.count("\n") == 1
    assert "TRACEBACK" not in err            # a dkv error (LocationError): nothing to add

    def broken(args):
        raise TypeError("unsupported operand")
    args = cli.build_parser().parse_args(["info", str(tmp_path)])
    args.fn = broken
    assert cli.run_command(args, (dkv.DkvError,), "python -m dkv") == (None, 1)
    err = capsys.readouterr().err
    assert "error: unsupported operand [TypeError at " in err and "test_cli.py:" in err and "TRACEBACK=1" in err
    monkeypatch.setenv("TRACEBACK", "1")
    with pytest.raises(TypeError, match="unsupported operand"):
        cli.run_command(args, (dkv.DkvError,), "python -m dkv")
    monkeypatch.delenv("TRACEBACK")

    def crashing(args):
        raise KeyError("boom")
    args.fn = crashing
    with pytest.raises(KeyError):
        cli.run_command(args, (dkv.DkvError,), "python -m dkv")
