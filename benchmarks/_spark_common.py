"""Machinery shared by the Spark benchmarks: session, deterministic sources, a measuring runner.

A *contender* is a function `build(inputs, ctx) -> DataFrame` plus a role (ours, peer,
floor, or runtime: spark_ops' runtime with its state in memory). The runner feeds it a
file stream source that admits exactly one pre-written parquet file per micro-batch, runs
the query with `trigger(availableNow=True)` and measures, per batch:
- time: `triggerExecution` from Spark's query progress, minus the runner's own listing time;
- rows in (progress `numInputRows`) and rows out (counted by the sink); with `digest` (all but
  the floor), in the same pass over the output, an order-independent digest of its rows (the
  bit_xor of an xxhash64 of each row), so that contenders can be checked to emit the same rows
  in the same batches;
- state bytes and objects: the sink lists every file under the contender's state locations
  after the batch has run and attributes what was written since the previous listing (new or
  replaced files whole, grown ones their growth) to this batch, so background uploads (RocksDB
  snapshots) show up as spikes in the batch during which they landed; of those, the metadata
  (metadata_file: our manifests, the RocksDB store's snapshot zips and schema files). Hadoop's
  `.crc` sidecars are left out: an object store has none;
- RSS: after each batch, of the processes holding state (ProcessSampler: PySpark workers, the
  Spark JVM, where Spark's state stores live, and for ours the shard hosts), and their peak
  (VmHWM) over the run; before each run the JVM closes the state stores earlier runs left
  loaded and does a full GC, so that an earlier run's memory does not count as this run's.
Sources are keyed by their parameters (source_name) and written once; a run reads a folder of
links to the first N files (source_view), so a run can stop after N batches.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from _report import status_kb

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
T0_US = 1_704_067_200_000_000  # 2024-01-01T00:00:00Z, the event time of batch 0


# ---------------------------------------------------------------- scenarios and sources


@dataclass(frozen=True)
class Scenario:
    """A workload: its source schema, how batches are generated, how the source is split into inputs."""

    name: str
    key: str
    schema: str                                   # DDL of the source files
    generate: Callable                            # (batch, keys, events per key, seq0, counts) -> rows
    split: Callable                               # streaming DataFrame -> inputs handed to build()
    prefill: bool = False                         # whether a staggered warm-up batch makes sense


def _layout(keys: int, events_per_key: int, counts=None):
    """(key index, j) per row: all keys' event 0, then all keys' event 1, ...; with `counts`
    (events per key, an array) key i has counts[i] events instead of `events_per_key`."""
    import numpy as np

    if counts is None:
        return (np.tile(np.arange(keys, dtype=np.int64), events_per_key),
                np.repeat(np.arange(events_per_key, dtype=np.int64), keys))
    counts = np.asarray(counts)
    idx = [np.nonzero(counts > j)[0] for j in range(int(counts.max(initial=0)))]
    key_idx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
    j = np.concatenate([np.full(len(a), jj) for jj, a in enumerate(idx)]) if idx else np.zeros(0, np.int64)
    return key_idx.astype(np.int64), j.astype(np.int64)


def _keys_array(keys: int, key_idx) -> pa.Array:
    return pa.array([f"u{i:06d}" for i in range(keys)], pa.string()).take(pa.array(key_idx))


def _event_times(batch: int, j):
    """Event time: batch b at T0 + b s, event j of a key 1 ms later (closer when a key has over
    1,000 events in a batch, so a batch stays inside its second)."""
    step = 1_000 if len(j) == 0 or j.max() < 1_000 else 1_000_000 // (int(j.max()) + 1)
    return pa.array(T0_US + batch * 1_000_000 + j * step, pa.int64()).cast(pa.timestamp("us", tz="UTC"))


def buffer_events(batch: int, keys: int, events_per_key: int, seq0: int | None = None, counts=None) -> pa.Table:
    """`events_per_key` events for each of `keys` users (key i: counts[i] with `counts`); seq is
    global and increasing (from `seq0`, default: batch * keys * events_per_key)."""
    import numpy as np

    key_idx, j = _layout(keys, events_per_key, counts)
    seq0 = batch * keys * events_per_key if seq0 is None else seq0
    return pa.table({
        "user": _keys_array(keys, key_idx),
        "ts": _event_times(batch, j),
        "seq": pa.array(seq0 + np.arange(len(key_idx), dtype=np.int64), pa.int64()),
    })


INPUTS = ("a", "b", "c")


def quote_events(batch: int, keys: int, events_per_key: int, seq0: int | None = None, counts=None) -> pa.Table:
    """Events for combine_latest: event j of a batch goes to input INPUTS[(2*batch + j) % 3]."""
    import numpy as np

    if counts is not None:
        raise ValueError("combine_latest has no staggered warm-up: batch 0 already fills every key's state")
    key_idx, j = _layout(keys, events_per_key)
    n = len(key_idx)
    r = np.arange(n, dtype=np.int64)
    seq0 = batch * n if seq0 is None else seq0
    return pa.table({
        "sym": _keys_array(keys, key_idx),
        "src": pa.array(np.array(INPUTS, dtype=object)[(events_per_key * batch + j) % len(INPUTS)], pa.string()),
        "ts": _event_times(batch, j),
        "seq": pa.array(seq0 + r, pa.int64()),
        "price": pa.array((batch * 100 + r % 97).astype(np.float64), pa.float64()),
    })


def split_by_src(df) -> dict:
    """One streaming source, three keyed inputs (same files, filtered), like three topics."""
    from pyspark.sql import functions as F

    return {name: df.filter(F.col("src") == name).drop("src") for name in INPUTS}


SCENARIOS = {
    "buffer": Scenario("buffer", "user", "user string, ts timestamp, seq long", buffer_events, lambda df: df,
                       prefill=True),
    "combine_latest": Scenario("combine_latest", "sym", "sym string, src string, ts timestamp, seq long, price double",
                               quote_events, split_by_src),
}


def prefill_counts(keys: int, count: int):
    """Events per key of the staggered warm-up batch: key i gets i % count, so the keys'
    buffers are out of step and fill at different batches (mean (count - 1) / 2 per key)."""
    import numpy as np

    return np.arange(keys, dtype=np.int64) % count


def source_name(scenario: Scenario, keys: int, events_per_key: int, count: int, prefill: bool) -> str:
    """The folder name of a source: every parameter that changes its files is in it."""
    name = f"src-{scenario.name}-k{keys}-e{events_per_key}"
    if scenario.prefill:
        name += f"-c{count}-" + ("prefill" if prefill else "noprefill")
    return name


def write_source(scenario: Scenario, directory: Path, batches: int, keys: int, events_per_key: int,
                 prefill_count: int = 0) -> list[dict]:
    """Write one parquet file per batch (idempotent: `directory` must be named after all the
    parameters, see source_name); returns per batch {"events": rows, "bytes": file size}.
    With `prefill_count` batch 0 is the staggered warm-up of prefill_counts(keys, prefill_count)."""
    directory.mkdir(parents=True, exist_ok=True)
    counts = prefill_counts(keys, prefill_count) if prefill_count else None
    first = int(counts.sum()) if counts is not None else keys * events_per_key
    files = []
    for b in range(batches):
        path = directory / f"batch-{b:05d}.parquet"
        if not path.exists():
            seq0 = 0 if b == 0 else first + (b - 1) * keys * events_per_key
            table = scenario.generate(b, keys, events_per_key, seq0, counts if b == 0 else None)
            tmp = directory / f".batch-{b:05d}.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, path)
        # the file source admits files in modification-time order: make it the batch order
        os.utime(path, (1_700_000_000 + b, 1_700_000_000 + b))
        files.append({"events": pq.read_metadata(path).num_rows, "bytes": path.stat().st_size})
    return files


def source_view(source: Path, n: int) -> Path:
    """A folder holding (hard links to) the first `n` batch files of `source`: what a run that
    stops after `n` batches reads (a file source takes every file of its folder)."""
    view = source.with_name(f"{source.name}.first{n}")
    files = sorted(source.glob("batch-*.parquet"))[:n]
    if view.exists() and sorted(p.name for p in view.iterdir()) == [f.name for f in files]:
        return view
    shutil.rmtree(view, ignore_errors=True)
    view.mkdir(parents=True)
    for f in files:
        try:
            os.link(f, view / f.name)
        except OSError:       # no hard links here: a copy (its mtime is set below)
            shutil.copyfile(f, view / f.name)
        st = f.stat()
        os.utime(view / f.name, ns=(st.st_atime_ns, st.st_mtime_ns))
    return view


# ---------------------------------------------------------------- contenders


@dataclass
class RunContext:
    """What a contender's build function may use."""

    keys: int
    count: int             # buffer size
    partitions: int        # shards / shuffle partitions
    state_dir: Path        # where a contender with its own store keeps state (ours)
    key: str               # key column name of the scenario
    memory: str | None = None  # ours: the shard's memory budget (spark_ops' memory=; None: its default)
    batches: int = 0           # batches the run has (the runtime floor drops its dict after the last)


@dataclass(frozen=True)
class Contender:
    name: str
    scenario: str
    role: str                                       # "ours" | "peer" | "floor" | "runtime"
    build: Callable                                 # (inputs, RunContext) -> DataFrame
    unavailable: Callable[[], str | None] = lambda: None  # a reason, or None when it can run
    # called before the Spark session starts when the contender is selected: jars it needs on
    # spark.jars (the JVM peers: see _spark_jvm.prepare)
    prepare: Callable[[], list[str]] | None = None


# ---------------------------------------------------------------- measuring


@dataclass
class BatchStat:
    batch_id: int
    events: int = 0            # events in the batch's source file
    rows_in: int = 0           # Spark's numInputRows (counts a source once per scan of it)
    rows_out: int = 0
    digest: str | None = None  # of the output rows (see the module doc); None: not computed
    ms: float = 0.0            # Spark's triggerExecution minus overhead_ms
    overhead_ms: float = 0.0   # the runner's own listing of the state locations and RSS sampling
    state_bytes: int = 0       # bytes written under the state locations (new files, growth)
    state_files: int = 0       # objects written: files created, grown or replaced
    manifest_bytes: int = 0    # of state_bytes, the metadata's (see metadata_file)
    manifest_files: int = 0
    rss: dict = field(default_factory=dict)   # class -> {"n", "sum", "max"} current RSS bytes after the batch
    state_metrics: dict = field(default_factory=dict)


@dataclass
class RunResult:
    contender: str
    role: str
    scenario: str
    keys: int
    batches: list[BatchStat] = field(default_factory=list)
    skipped: str | None = None
    round: int = 0
    count: int = 0             # buffer size of the run
    warmup: int = 0            # batches left out of the steady figures
    memory: dict = field(default_factory=dict)   # see ProcessSampler.report
    output_schema: str = ""    # the output DataFrame's (simpleString): digests compare within one schema

    def summary(self, warmup: int | None = None) -> dict:
        """Steady-state figures over the batches after `warmup` (default: the run's)."""
        return summarize([dataclasses.asdict(b) for b in self.batches], self.warmup if warmup is None else warmup,
                         self.memory, self.skipped)


def summarize(batches: list[dict], warmup: int, memory: dict | None = None, skipped: str | None = None) -> dict:
    """summary() of a run from its batches as saved in the JSON (so --report can recompute it)."""
    steady = [b for b in batches if b["batch_id"] >= warmup]
    if skipped or not steady:
        return {"skipped": skipped or "no steady batches"}
    secs = sum(b["ms"] for b in steady) / 1000
    sizes = sorted(b["state_bytes"] for b in steady)
    times = sorted(b["ms"] for b in steady)
    events = sum(b["events"] for b in steady)
    objects = [b["state_files"] for b in steady]
    manifest = [b["manifest_bytes"] for b in steady if "manifest_bytes" in b] or [None]  # None: older JSON
    peak = (memory or {}).get("peak", {})
    return {
        "batches": len(steady),
        "events_per_s": events / secs if secs else float("nan"),
        "ms_per_batch": 1000 * secs / len(steady),
        "ms_median": times[(len(times) - 1) // 2],
        "ms_max": times[-1],
        "events_per_batch": events / len(steady),
        "state_bytes_mean": sum(sizes) / len(sizes),
        "state_bytes_max": sizes[-1],
        "state_bytes_median": sizes[len(sizes) // 2],
        "state_bytes_per_event": sum(sizes) / events if events else float("nan"),
        "objects_mean": sum(objects) / len(objects),
        "objects_max": max(objects),
        "manifest_bytes_mean": None if manifest[0] is None else sum(manifest) / len(manifest),
        "manifest_bytes_max": None if manifest[0] is None else max(manifest),
        "peak_rss": {cls: v["sum"] for cls, v in peak.items() if v.get("n")},
        "peak_rss_max": {cls: v["max"] for cls, v in peak.items() if v.get("n")},
        "steady_peak_rss_max": {cls: v["max"] for cls, v in (memory or {}).get("steady_peak", {}).items()
                                if v.get("n")},
        "rss_at_start": {cls: v["sum"] for cls, v in (memory or {}).get("at_start", {}).items() if v.get("n")},
        "rows_out": sum(b["rows_out"] for b in steady),
        # the steady batches' means by thirds, in batch order (9 or more batches): whether a
        # contender's batch holds over the run or grows with it
        "ms_thirds": _thirds([b["ms"] for b in sorted(steady, key=lambda b: b["batch_id"])]),
    }


def _thirds(ms: list) -> list | None:
    if len(ms) < 9:
        return None
    n = len(ms)
    cuts = [0, n // 3, 2 * n // 3, n]
    return [sum(ms[a:b]) / (b - a) for a, b in zip(cuts, cuts[1:])]


def metadata_file(path: str, role: str) -> bool:
    """Whether a state file is metadata rather than data. Ours: the checkpoint manifests
    (`/manifest/`). Spark's RocksDB store: everything but the changelogs and SST files (the
    snapshot zips holding RocksDB's MANIFEST/OPTIONS/metadata, the operator and schema files)."""
    if role in SPARK_OPS_ROLES:
        return "/manifest/" in path
    return not path.endswith((".changelog", ".sst"))


def _listing(roots: list[Path]) -> dict[str, tuple[int, int, int]]:
    """path -> (size, inode, mtime ns) of every file under `roots`, but Hadoop's `.<name>.crc`
    checksum sidecars: the local file system writes one per file, an object store none."""
    files = {}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for name in names:
                if name.startswith(".") and name.endswith(".crc"):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:  # deleted by a background cleanup while listing
                    continue
                files[path] = (st.st_size, st.st_ino, st.st_mtime_ns)
    return files


def _written(now: dict, before: dict) -> dict[str, int]:
    """Files written between two listings -> bytes written: a new or replaced file counts
    whole, a grown one its growth, one rewritten in place (same inode, newer mtime) whole."""
    out = {}
    for path, (size, ino, mtime) in now.items():
        old = before.get(path)
        if old is None or old[1] != ino:
            out[path] = size
        elif size > old[0]:
            out[path] = size - old[0]
        elif mtime != old[2]:
            out[path] = size
    return out


# ---------------------------------------------------------------- memory


SPARK_OPS_ROLES = ("ours", "runtime")   # roles that run in spark_ops (its state folder, its shard hosts)
HOST_MARK = "spark_ops._host"   # in the command line of a shard host (spark_ops/_host.py _start)
CLASSES = ("workers", "hosts", "jvm")


class ProcessSampler:
    """RSS of the processes that hold state: the PySpark workers (Python processes under the
    Spark JVM: pyspark.daemon and the workers it forks), the Spark JVM itself ("jvm": driver and
    executor in local mode; Spark's state stores, RocksDB's native memory included, live there,
    for the Python peers as for the JVM one) and, with `hosts`, the spark_ops shard hosts whose
    owner (a worker's parent) is one of them; of those, the ones that take part in the run
    (started during it, or using CPU in it). Peaks are Linux's
    VmHWM, reset at the start of a run (/proc/<pid>/clear_refs) where the kernel allows, so
    a process reused from an earlier run starts at its current RSS (`at_start` in the report)."""

    def __init__(self, hosts: bool):
        import psutil

        self._psutil = psutil
        self.hosts = hosts
        self.peaks: dict[int, dict] = {}
        self.reset_ok = True
        self.at_start: dict = {}
        self._cpu0: dict[int, float] = {}    # CPU seconds of the processes there at the start
        self.steady = False                 # begin_steady() was called: peaks also kept as "steady"

    def processes(self) -> dict[int, tuple[str, object]]:
        psutil = self._psutil
        try:
            below = psutil.Process().children(recursive=True)
        except psutil.Error:
            return {}
        under_jvm: dict[int, object] = {}
        found = {}
        for p in below:
            try:
                if p.name().startswith("java"):
                    found[p.pid] = ("jvm", p)
                    under_jvm.update((c.pid, c) for c in p.children(recursive=True))
            except psutil.Error:
                continue
        for pid, p in under_jvm.items():
            try:
                cmd = p.cmdline()
                if HOST_MARK in " ".join(cmd):
                    if self.hosts:
                        found[pid] = ("hosts", p)
                elif "python" in p.name().lower() or "python" in os.path.basename(cmd[0] if cmd else ""):
                    found[pid] = ("workers", p)
            except psutil.Error:
                continue
        if self.hosts:      # hosts outlive their starting worker (re-parented): find them by owner
            for p in psutil.process_iter(["cmdline"]):
                cmd = p.info.get("cmdline") or []
                if p.pid in found or HOST_MARK not in " ".join(cmd):
                    continue
                try:
                    owner = int(cmd[cmd.index("--owner") + 1])
                except (ValueError, IndexError):
                    continue
                if owner in under_jvm:
                    found[p.pid] = ("hosts", p)
        return found

    def drop_host_states(self) -> None:
        """Close the states that shard hosts keep from earlier runs (a new query in a new
        application would find none), so that a run's peak is its own state's. The hosts
        would close them after a minute idle (spark_ops/_opened.py evict_idle); runs
        follow each other sooner."""
        from spark_ops import _host, _opened

        for _, p in (v for v in self.processes().values() if v[0] == "hosts"):
            try:
                cmd = p.cmdline()
                _host.call_at(cmd[cmd.index("--socket") + 1], _opened.drop_cached)
            except (self._psutil.Error, ValueError, IndexError, _host.HostError) as e:
                print(f"note: could not clear a shard host's states ({e})", file=sys.stderr)

    def settle_jvm(self, timeout: float = 5.0, step: float = 0.25) -> None:
        """Wait (at most `timeout` s) until the JVM's RSS stops falling: G1 gives the heap that a
        full GC freed back in the background (JDK 16+), so right after _clean_jvm the RSS would
        still be the earlier run's and the peak reset below would start from it."""
        jvms = [p for cls, p in self.processes().values() if cls == "jvm"]
        if not jvms:
            return
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                now = sum(p.memory_info().rss for p in jvms)
            except self._psutil.Error:
                return
            if last is not None and now > last - 2**20:      # fell less than 1 MB in a step: settled
                return
            last = now
            time.sleep(step)

    def start(self) -> None:
        """At the start of a run: reset the peaks of the processes already there and note
        their CPU time (a process counts for the run once it has used CPU in it: an idle
        worker left over from another contender does not)."""
        self.peaks.clear()
        self._cpu0.clear()
        at_start = {cls: {"n": 0, "sum": 0, "max": 0} for cls in CLASSES}
        for pid, (cls, p) in self.processes().items():
            try:
                self._cpu0[pid] = sum(p.cpu_times()[:2])
                rss = p.memory_info().rss
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except self._psutil.Error:
                continue
            except OSError:
                self.reset_ok = False
            c = at_start[cls]
            c["n"], c["sum"], c["max"] = c["n"] + 1, c["sum"] + rss, max(c["max"], rss)
        self.at_start = at_start

    def begin_steady(self) -> None:
        """After the warm-up batches: reset the peaks (VmHWM) of the processes taking part, so
        that from here on each also has a steady peak (the warm-up's input left out)."""
        for pid in self.peaks:
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                self.reset_ok = False
                return
        self.steady = True

    def sample(self) -> dict:
        """Current RSS per class ({"n", "sum", "max"} bytes) of the processes taking part in
        the run; updates their peaks."""
        out = {cls: {"n": 0, "sum": 0, "max": 0} for cls in CLASSES}
        for pid, (cls, p) in self.processes().items():
            try:
                if pid not in self.peaks and pid in self._cpu0 and sum(p.cpu_times()[:2]) <= self._cpu0[pid]:
                    continue        # there before the run and idle since
                rss = p.memory_info().rss
                cmd = " ".join(p.cmdline())
            except self._psutil.Error:
                continue
            hwm = status_kb(pid, "VmHWM")
            hwm = max(rss, hwm * 1024) if hwm is not None else rss
            entry = self.peaks.setdefault(pid, {"pid": pid, "class": cls, "peak": 0, "cmd": cmd[-120:]})
            entry["peak"] = max(entry["peak"], hwm)
            if self.steady:
                entry["steady"] = max(entry.get("steady", 0), hwm)
            c = out[cls]
            c["n"] += 1
            c["sum"] += rss
            c["max"] = max(c["max"], rss)
        return out

    def report(self) -> dict:
        peak = {cls: {"n": 0, "sum": 0, "max": 0} for cls in CLASSES}
        steady = {cls: {"n": 0, "sum": 0, "max": 0} for cls in CLASSES}
        for e in self.peaks.values():
            for into, v in ((peak, e["peak"]), (steady, e.get("steady"))):
                if v is not None:
                    c = into[e["class"]]
                    c["n"] += 1
                    c["sum"] += v
                    c["max"] = max(c["max"], v)
        return {"peak": peak, "steady_peak": steady if self.steady else {}, "processes": sorted(self.peaks.values(), key=lambda e: (e["class"], e["pid"])),
                "at_start": self.at_start, "peak_reset": self.reset_ok}


def interpreter_baseline() -> dict:
    """RSS (bytes) of a fresh interpreter that imports dkv, objectspace and spark_ops."""
    import subprocess
    import sys

    code = ("import dkv, objectspace, spark_ops\n"
            "print(open('/proc/self/status').read())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=120, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return {k.lower(): int(fields[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM") if k in fields}


# ---------------------------------------------------------------- running


def _clean_jvm(spark) -> None:
    """Before a run: close the state stores that earlier queries left loaded in the JVM (Spark's
    maintenance would unload them a while later; a new application would start without them), then
    a full GC (G1 gives the freed heap back), so that the JVM's RSS at the run's start is not an
    earlier run's."""
    jvm = spark.sparkContext._jvm
    for what, call in (("close the loaded state stores",
                        lambda: jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()),
                       ("run a full GC", lambda: jvm.java.lang.System.gc())):
        try:
            call()
        except Exception as e:  # noqa: BLE001 - a measuring nicety, never a reason to fail the run
            print(f"note: could not {what} in the Spark JVM before the run ({e})", file=sys.stderr)


def run_contender(spark, contender: Contender, scenario: Scenario, source: Path, work: Path,
                  ctx: RunContext, events_by_batch: list[int], digest: bool = True, warmup: int = 0) -> RunResult:
    """Run one contender over the prepared source (every file of the folder, one per batch);
    one RunResult with a BatchStat per batch. `events_by_batch`: the rows of each batch file.
    `digest`: also a digest of each batch's output rows (not for the floor: a pass-through).
    `warmup`: the processes' peaks are also taken over the batches after the first `warmup`
    (the steady peaks: a warm-up batch's input can be many times a steady one's)."""
    from pyspark.sql import functions as F

    result = RunResult(contender.name, contender.role, scenario.name, ctx.keys, count=ctx.count)
    reason = contender.unavailable()
    if reason:
        result.skipped = reason
        return result
    if work.exists():
        shutil.rmtree(work)
    cp = work / "checkpoint"
    roots = [cp / "state", ctx.state_dir]
    stats: dict[int, BatchStat] = {}
    seen: dict[str, tuple] = {}
    sampler = ProcessSampler(hosts=contender.role in SPARK_OPS_ROLES)
    if sampler.hosts:
        sampler.drop_host_states()
    _clean_jvm(spark)
    sampler.settle_jvm()
    sampler.start()
    digest = digest and contender.role != "floor"

    def sink(batch_df, batch_id):
        aggs = [F.count(F.lit(1)).alias("n")]
        if digest:
            aggs.append(F.bit_xor(F.xxhash64(*batch_df.columns)).alias("h"))
        row = batch_df.select(*aggs).collect()[0]         # runs the plan once
        rows_out = row["n"]
        t0 = time.perf_counter()
        now = _listing(roots)
        written = _written(now, seen)
        seen.clear()
        seen.update(now)
        meta = [s for p, s in written.items() if metadata_file(p, contender.role)]
        rss = sampler.sample()
        if warmup and batch_id == warmup - 1:
            sampler.begin_steady()
        stats[batch_id] = BatchStat(batch_id, rows_out=rows_out,
                                    digest=f"{(row['h'] or 0) & (2**64 - 1):016x}" if digest else None,
                                    state_bytes=sum(written.values()),
                                    state_files=len(written), manifest_bytes=sum(meta), manifest_files=len(meta),
                                    rss=rss, overhead_ms=1000 * (time.perf_counter() - t0))

    df = (spark.readStream.schema(scenario.schema).option("maxFilesPerTrigger", 1)
          .parquet(str(source)))
    out = contender.build(scenario.split(df), ctx)
    result.output_schema = out.schema.simpleString()
    query = (out.writeStream.foreachBatch(sink).outputMode("update").option("checkpointLocation", str(cp))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    sampler.sample()          # processes that grew after the last batch's sample (background uploads)
    result.memory = sampler.report()
    for progress in query.recentProgress:
        stat = stats.get(progress["batchId"])
        if stat is None:
            continue
        stat.rows_in = progress["numInputRows"]
        stat.events = events_by_batch[stat.batch_id] if stat.rows_in else 0
        stat.ms = progress["durationMs"].get("triggerExecution", 0) - stat.overhead_ms
        ops = progress.get("stateOperators") or []
        if ops:
            stat.state_metrics = {"numRowsTotal": ops[0].get("numRowsTotal"),
                                  "memoryUsedBytes": ops[0].get("memoryUsedBytes"),
                                  **{k: v for k, v in (ops[0].get("customMetrics") or {}).items()
                                     if k in ("rocksdbBytesCopied", "rocksdbFilesCopied", "rocksdbSstFileSize")}}
    result.batches = [stats[b] for b in sorted(stats)]
    return result


# ---------------------------------------------------------------- session


def spark_session(partitions: int, batches: int, log_level: str = "ERROR", jars: list[str] = ()):
    """local[2] with `partitions` shuffle partitions and RocksDB (changelog checkpointing) for Spark's state;
    `jars` go on spark.jars (the driver's and executors' classpath)."""
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    spark = (
        builder.master("local[2]").appName("spark_vs_tws")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.default.parallelism", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.streaming.numRecentProgressUpdates", str(max(100, batches + 10)))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel(log_level)
    return spark
