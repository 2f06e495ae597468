"""benchmarks/_spark_jvm.py: the JVM transformWithState peer's jar is built once per source and
Spark version, reused from the cache, and a machine without javac or a failing compile skips the
contender with a reason instead of failing the benchmark; small, spark_vs_tws runs it beside the
Python Row peer and both emit the same rows."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import _spark_common as common  # noqa: E402
import _spark_jvm as jvm  # noqa: E402

needs_javac = pytest.mark.skipif(jvm.javac() is None, reason="no javac (a JDK 17+)")


def _sources(tmp_path: Path) -> Path:
    src = tmp_path / "jvm"
    shutil.copytree(jvm.SOURCES, src)
    return src


@needs_javac
def test_jar_is_cached_and_rebuilt_when_a_source_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "SOURCES", _sources(tmp_path))
    cache, logs = tmp_path / "cache", []
    jar, reason = jvm.build_jar(cache, logs.append)
    assert reason is None and jar.is_file() and jar.parent == cache
    import zipfile

    names = zipfile.ZipFile(jar).namelist()
    assert "sparkopsbench/JvmPeers.class" in names and "sparkopsbench/BufferProcessor.class" in names
    mtime = jar.stat().st_mtime_ns
    again, reason = jvm.build_jar(cache, logs.append)
    assert (again, reason) == (jar, None) and jar.stat().st_mtime_ns == mtime
    assert any("cached" in m for m in logs)
    java = jvm.SOURCES / "JvmPeers.java"
    java.write_text(java.read_text() + "\n// changed\n")
    rebuilt, reason = jvm.build_jar(cache, logs.append)
    assert reason is None and rebuilt != jar and rebuilt.is_file()
    assert not jar.exists()          # the stale jar is gone from the cache


def test_no_javac_is_a_reason_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "javac", lambda: None)
    jar, reason = jvm.build_jar(tmp_path / "cache", lambda m: None)
    assert jar is None and "javac" in reason


@needs_javac
def test_compile_error_is_a_reason_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm, "SOURCES", _sources(tmp_path))
    (jvm.SOURCES / "Broken.java").write_text("package sparkopsbench; class Broken { int x = ; }\n")
    jar, reason = jvm.build_jar(tmp_path / "cache", lambda m: None)
    assert jar is None and reason.startswith("javac failed") and "Broken.java" in reason


def test_skipped_contender_when_the_build_failed(monkeypatch):
    monkeypatch.setitem(jvm._built, "jar", None)
    monkeypatch.setitem(jvm._built, "reason", "no javac (JAVA_HOME/bin or PATH)")
    assert jvm.unavailable() == "no javac (JAVA_HOME/bin or PATH)"


@needs_javac
@pytest.mark.spark
@pytest.mark.slow
def test_small_run_matches_the_row_peer(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "spark_vs_tws.py"), "--keys", "200",
                           "--count", "4", "--scenarios", "buffer,combine_latest", "--only", "JVM,Row",
                           "--batches", "3", "--warmup", "1", "--no-plot", "--out", str(tmp_path / "out")],
                          cwd=str(ROOT), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    checks = [line for line in proc.stdout.splitlines() if line.startswith("  output check over")]
    assert len(checks) == 2, proc.stdout
    assert all("transformWithState (Row), transformWithState (JVM) emit the same rows" in c for c in checks), checks


def _run(role, schema, batches, name_round=0):
    return {"role": role, "round": name_round, "output_schema": schema, "s": {"ms_per_batch": 1.0},
            "batches": [{"batch_id": i, "rows_out": n, "digest": d} for i, (n, d) in enumerate(batches)]}


def test_output_check_compares_digests_within_a_schema_and_rows_across():
    import spark_vs_tws as bench

    same = [(0, "0" * 16), (4, "ab" * 8)]
    by_name = {"floor": [_run("floor", "x", [(9, None), (9, None)])],
               "Row": [_run("peer", "s1", same)], "JVM": [_run("peer", "s1", same)],
               "ours": [_run("ours", "s2", [(0, "1" * 16), (4, "cd" * 8)])]}
    (line,) = bench._output_check(by_name)
    assert "Row, JVM, ours emit the same rows (4" in line and "ours: another output schema" in line
    by_name["JVM"] = [_run("peer", "s1", [(0, "0" * 16), (4, "ef" * 8)])]
    by_name["ours"] = [_run("ours", "s2", [(0, "1" * 16), (2, "cd" * 8)])]
    (line,) = bench._output_check(by_name)
    assert "FAILED" in line and "JVM DIFFERS from Row at batch(es) 1 (batch 1: 4 rows, digest efef" in line
    assert "ours DIFFERS from Row at batch(es) 1 (batch 1: 2 rows vs 4)" in line
    by_name["JVM"].append(_run("peer", "s1", same, 1))
    assert "JVM's rounds differ at batch(es) 1" in bench._output_check(by_name)[0]
    assert bench._output_check({"floor": by_name["floor"]}) == []


def test_steady_peaks_leave_the_warm_up_out():
    sampler = common.ProcessSampler(hosts=True)
    sampler.peaks = {1: {"pid": 1, "class": "hosts", "peak": 500 << 20, "steady": 200 << 20},
                     2: {"pid": 2, "class": "hosts", "peak": 400 << 20, "steady": 250 << 20},
                     3: {"pid": 3, "class": "workers", "peak": 300 << 20}}
    assert sampler.report()["steady_peak"] == {}        # begin_steady() not called: no steady figures
    sampler.steady = True
    report = sampler.report()
    assert report["peak"]["hosts"] == {"n": 2, "sum": 900 << 20, "max": 500 << 20}
    assert report["steady_peak"]["hosts"] == {"n": 2, "sum": 450 << 20, "max": 250 << 20}
    assert report["steady_peak"]["workers"]["n"] == 0    # it took part in the warm-up only
    s = common.summarize([{"batch_id": 0, "events": 1, "ms": 1.0, "state_bytes": 0, "state_files": 0,
                           "rows_out": 0}], 0, report)
    assert s["steady_peak_rss_max"] == {"hosts": 250 << 20}


def test_thirds_show_a_batch_that_grows_over_the_run():
    """summarize() gives the steady batches' means by thirds, in batch order, from 9 steady
    batches on (the warm-up left out): a contender whose batch grows over the run shows it."""
    def batches(ms):
        return [{"batch_id": i, "events": 1, "ms": m, "state_bytes": 0, "state_files": 0, "rows_out": 0}
                for i, m in enumerate(ms)]
    growing = [900.0, 800.0] + [100.0, 110.0, 120.0, 200.0, 210.0, 220.0, 300.0, 310.0, 320.0, 330.0]
    s = common.summarize(list(reversed(batches(growing))), 2)       # in batch order, whatever the list's
    assert s["ms_thirds"] == [110.0, 210.0, 315.0]      # 10 steady batches: 3, 3 and 4
    assert common.summarize(batches([1.0] * 10), 2)["ms_thirds"] is None     # 8 steady batches: too few
