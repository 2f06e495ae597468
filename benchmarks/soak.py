"""A soak run of a stateful stream on a misbehaving S3, with processes killed along the way
(issue 18, section 3).

    scripts/env.sh python benchmarks/soak.py                     # 300 batches at 10,000 keys
    scripts/env.sh python benchmarks/soak.py --batches 30 --keys 1000 --seed 7

What it does:

- starts a moto S3 server (a process, over real HTTP) and the fault-injecting proxy of the
  tests (tests/dkv/s3_fault_proxy.py) in front of it, faulting ``--fault-rate`` of the
  requests (503, 500, 429, resets before and after moto applied the request, bodies cut
  short, answers that never come), seeded;
- writes ``--batches`` source files of ``--rows`` rows over ``--keys`` keys (one file per
  micro-batch) and runs ``spark_ops.buffer(count=--count)`` on them, with its state on S3
  through the proxy, in a driver process of its own (local Spark, ``local[2,4]``: a failed
  task is tried up to 4 times), until the source is drained;
- at random seeded moments (in the batch under way once a chosen batch is done, up to 1 s
  after its tasks started) SIGKILLs the driver (its process
  group: JVM, Python workers), a Python worker, a shard host, and stops the S3 endpoint for
  ``--outage`` seconds; a driver that died is started again on the same checkpoint;
- at the end checks the output (a file per batch id, replaced when a batch runs again)
  against a model: every buffer of ``count`` rows of a key, in row order, exactly once;
- prints: batches run, kills of each kind, faults injected by kind, retries (botocore's and
  dkv's own loop, summed over every process), batches that failed and were run again, the
  slowest batch against the median, RSS of the workers and shard hosts at batch 50 and at
  the end, and the state's files and bytes at the end against a fresh full compaction.

Exit status 0 when the output matches the model, 1 otherwise. ``--json PATH`` also writes the
figures. The work folder (``--work``, default a temporary one) keeps the driver logs.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import pickle
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BUCKET = "soak"
KINDS = ("driver", "worker", "host", "outage")


# -- the driver (a process of its own) -------------------------------------------------------

def driver(work: Path) -> int:
    """Run the query until the source is drained; then wait for ``work/exit`` (so that the
    soak can measure the processes) and exit."""
    cfg = json.loads((work / "config.json").read_text())
    sys.path.insert(0, str(ROOT))
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    import spark_ops

    spark = (SparkSession.builder.master("local[2,4]").appName("soak")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", str(cfg["shards"]))
             .config("spark.default.parallelism", "2")
             .config("spark.driver.memory", "1g")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    progress = open(work / "progress.log", "a")

    class Listener(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            p = event.progress
            progress.write(json.dumps({"batch": p.batchId, "ms": p.durationMs.get("triggerExecution"),
                                       "rows": p.numInputRows, "pid": os.getpid()}) + "\n")
            progress.flush()

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    spark.streams.addListener(Listener())
    df = (spark.readStream.schema("k string, seq long").option("maxFilesPerTrigger", 1)
          .json(str(work / "src")))
    started = work / "started.log"

    def tap(frames):            # which batches started, in which driver and task attempt
        from pyspark import TaskContext
        ctx = TaskContext.get()
        with open(started, "a") as fh:
            fh.write(f"{ctx.getLocalProperty('streaming.sql.batchId')} {ctx.attemptNumber()} {os.getppid()}\n")
        yield from frames

    df = df.mapInPandas(tap, df.schema)
    opts = dict(endpoint_url=cfg["endpoint"], aws_access_key_id="testing", aws_secret_access_key="testing",
                region_name="us-east-1")
    out = spark_ops.buffer(df, "k", count=cfg["count"], order_by="seq", state=cfg["state"], dkv_options=opts,
                           memory=cfg["memory"])
    sink_dir = work / "out"
    sink_dir.mkdir(exist_ok=True)

    def sink(batch_df, bid):
        rows = [(r["k"], [int(i["seq"]) for i in r["items"]]) for r in batch_df.collect()]
        tmp = sink_dir / f".{bid}.{os.getpid()}.tmp"
        tmp.write_bytes(pickle.dumps(rows))
        os.replace(tmp, sink_dir / f"{bid}.pkl")
        with open(sink_dir / "runs.log", "a") as fh:
            fh.write(f"{bid}\n")

    q = (out.writeStream.foreachBatch(sink).option("checkpointLocation", str(work / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    (work / "drained").touch()
    deadline = time.monotonic() + 120
    while not (work / "exit").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    spark.stop()
    return 0


# -- the source and the model ----------------------------------------------------------------

def write_source(src: Path, batches: int, keys: int, rows: int, seed: int) -> dict:
    """One JSON file per batch; returns each key's seqs in order (the model's input)."""
    src.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_key = collections.defaultdict(list)
    seq = 0
    t0 = time.time() - batches - 10
    for b in range(batches):
        lines = []
        for _ in range(rows):
            k = f"k{rng.randrange(keys):06d}"
            lines.append(f'{{"k":"{k}","seq":{seq}}}')
            per_key[k].append(seq)
            seq += 1
        path = src / f"part-{b:06d}.json"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (t0 + b, t0 + b))        # the file source takes them in this order
    return per_key


def expected_buffers(per_key: dict, count: int) -> collections.Counter:
    out = collections.Counter()
    for k, seqs in per_key.items():
        for i in range(0, len(seqs) - count + 1, count):
            out[(k, tuple(seqs[i:i + count]))] += 1
    return out


def output_buffers(out: Path) -> tuple[collections.Counter, list]:
    got = collections.Counter()
    bids = []
    for p in out.glob("*.pkl"):
        bids.append(int(p.stem))
        for k, seqs in pickle.loads(p.read_bytes()):
            got[(k, tuple(seqs))] += 1
    return got, sorted(bids)


# -- processes -------------------------------------------------------------------------------

def _children(pid: int) -> dict:
    """pid -> ppid of every process (from /proc)."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    out[int(name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def processes(driver_pid: int, host_dir: Path) -> dict:
    """{"workers": [pids], "hosts": [pids]} of this soak: the Python processes below the
    driver's JVM (pyspark.daemon and the workers it forked) and the shard hosts whose sockets
    are in ``host_dir``."""
    parents = _children(driver_pid)
    below = set()
    frontier = {driver_pid}
    while frontier:
        nxt = {p for p, pp in parents.items() if pp in frontier and p not in below}
        below |= nxt
        frontier = nxt
    workers, daemons = [], []
    for p in below:
        if "pyspark.daemon" not in _cmdline(p):
            continue
        # the daemon (started by the JVM) forks the workers, which keep its command line
        (workers if "pyspark.daemon" in _cmdline(parents.get(p, 0)) else daemons).append(p)
    hosts = [p for p in parents if "spark_ops._host" in _cmdline(p) and str(host_dir) in _cmdline(p)]
    return {"workers": sorted(workers), "daemons": sorted(daemons), "hosts": sorted(hosts)}


def rss_summary(procs: dict) -> dict:
    out = {}
    for cls in ("workers", "hosts"):
        sizes = [_rss(p) for p in procs[cls]]
        sizes = [s for s in sizes if s]
        out[cls] = {"n": len(sizes), "sum_mb": round(sum(sizes) / 2**20, 1),
                    "max_mb": round(max(sizes, default=0) / 2**20, 1)}
    return out


# -- the state's size ------------------------------------------------------------------------

def state_size(client, prefix: str) -> dict:
    files = size = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for o in page.get("Contents", ()):
            files += 1
            size += o["Size"]
    return {"files": files, "bytes": size}


def compacted_size(location: str, store_options: dict, scratch: Path) -> dict:
    """Files and bytes of the state's dkv instances (their latest checkpoints) written
    afresh, each fully compacted, into a local folder; plus the non-dkv objects (config,
    layouts, watermark records, runs) as they are."""
    import dkv
    from dkv.storage import LocalDirStore
    files = size = 0
    for ns in dkv.instances(location, **store_options):
        folder = scratch / ns.replace("/", "_")
        with dkv.open(location, instance=ns, read_only=True, **store_options) as src, \
                dkv.open(LocalDirStore(str(folder), fsync=False), retain=1) as dst:
            for k, v in src.scan():
                dst.put(k, v)
            dst.checkpoint().wait()
            dst.compact(full=True)
            dst.checkpoint().wait()
        dkv.collect_garbage(str(folder))
        for d, _, names in os.walk(folder):
            for n in names:
                files += 1
                size += os.path.getsize(os.path.join(d, n))
    return {"files": files, "bytes": size}


# -- the soak --------------------------------------------------------------------------------

def schedule(rng: random.Random, batches: int) -> list:
    """(after batch, kind) events: each kind about every 60 batches (driver), 40 (worker,
    host) and 75 (outage), at least once each, at random batches."""
    lo, hi = 2, max(3, batches - 3)
    every = {"driver": 60, "worker": 40, "host": 40, "outage": 75}
    events = []
    for kind in KINDS:
        n = max(1, batches // every[kind])
        events += [(rng.randrange(lo, hi), kind) for _ in range(n)]
    return sorted(events)


def soak(args) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests import s3_support

    work = Path(args.work or tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    print(f"soak: {args.batches} batches, {args.keys} keys, {args.rows} rows a batch, count {args.count}, "
          f"fault rate {args.fault_rate}, seed {args.seed}; work folder {work}", flush=True)
    per_key = write_source(work / "src", args.batches, args.keys, args.rows, args.seed)
    moto, endpoint = s3_support.start_moto(str(work / "moto.log"))
    os.environ.update(s3_support.AWS_ENV)
    proxy = s3_support.fault_proxy_class()(endpoint, seed=args.seed, delay_seconds=2.0)
    threads = []
    try:
        import boto3
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        state = f"s3://{BUCKET}/state"
        (work / "config.json").write_text(json.dumps({
            "endpoint": proxy.endpoint, "state": state, "count": args.count, "shards": args.shards,
            "memory": args.memory}))
        (work / "retries").mkdir(exist_ok=True)
        host_dir = work / "hosts"
        host_dir.mkdir(mode=0o700, exist_ok=True)
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                   DKV_S3_RETRY_DIR=str(work / "retries"), SPARK_OPS_HOST_DIR=str(host_dir),
                   PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
        proxy.uniform(args.fault_rate)
        events = schedule(rng, args.batches)
        kills = collections.Counter()
        driver_failures = 0
        starts = 0
        rss_mid = rss_end = None
        mid = min(50, args.batches // 2)
        runs_log = work / "out" / "runs.log"
        t_start = time.monotonic()
        with open(work / "driver.log", "ab") as log:
            while True:
                starts += 1
                if starts > args.max_starts:
                    raise RuntimeError(f"the driver was started {starts - 1} times; see {work / 'driver.log'}")
                proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--driver", str(work)],
                                        cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
                due = None
                killed = False
                while proc.poll() is None:
                    done = [int(x) for x in runs_log.read_text().split()] if runs_log.exists() else []
                    last = max(done, default=-1)
                    if rss_mid is None and last >= mid:
                        rss_mid = rss_summary(processes(proc.pid, host_dir))
                    if (work / "drained").exists():
                        rss_end = rss_summary(processes(proc.pid, host_dir))
                        (work / "exit").touch()
                        proc.wait(180)
                        break
                    if events and events[0][0] <= last and due is None and _running(work) > last:
                        due = time.monotonic() + rng.uniform(0.0, 1.0)      # in the batch under way
                    if due is not None and time.monotonic() >= due:
                        _, kind = events.pop(0)
                        due = None
                        if _act(kind, proc, host_dir, proxy, args.outage, threads):
                            kills[kind] += 1
                            print(f"  after batch {last}: {kind} {'stopped' if kind == 'outage' else 'killed'}",
                                  flush=True)
                            if kind == "driver":
                                killed = True
                                proc.wait()
                                break
                        else:
                            events.insert(0, (last + 1, kind))      # nothing to kill yet: later
                    time.sleep(0.05)
                if (work / "drained").exists():
                    break
                if not killed:
                    driver_failures += 1
                    print(f"  the driver ended with {proc.returncode} (not killed); starting it again", flush=True)
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        elapsed = time.monotonic() - t_start
        for t in threads:
            t.join()
        proxy.up()
        counts = proxy.counts()
        proxy.clear()

        # -- figures
        expected = expected_buffers(per_key, args.count)
        got, bids = output_buffers(work / "out")
        missing = expected - got
        twice = got - expected
        # Every buffer exactly once, and one output per batch id with no gap. Not one batch per
        # source file: a driver restarted by a kill may plan two files into one batch (Spark's
        # file source with maxFilesPerTrigger under availableNow), so there may be fewer.
        ok = not missing and not twice and bool(bids) and bids == list(range(len(bids)))
        retries = {"botocore": 0, "ours": 0}
        for p in (work / "retries").glob("retries-*.json"):
            try:
                r = json.loads(p.read_text())
            except ValueError:
                continue
            retries["botocore"] += r.get("botocore", 0)
            retries["ours"] += r.get("ours", 0)
        started = collections.defaultdict(set)
        retried_tasks = set()
        for line in (work / "started.log").read_text().split("\n") if (work / "started.log").exists() else []:
            parts = line.split()
            if len(parts) == 3 and parts[0] != "None":
                started[int(parts[0])].add(parts[2])
                if parts[1] != "0":
                    retried_tasks.add(int(parts[0]))
        rerun = sorted({b for b, drivers in started.items() if len(drivers) > 1} | retried_tasks)
        durations = {}
        for line in (work / "progress.log").read_text().splitlines() if (work / "progress.log").exists() else []:
            p = json.loads(line)
            if p["rows"]:
                durations[p["batch"]] = p["ms"]     # the run that completed it
        ms = sorted(durations.values())
        slow_batch = max(durations, key=durations.get) if durations else None
        store_options = dict(endpoint_url=endpoint, aws_access_key_id="testing", aws_secret_access_key="testing",
                             region_name="us-east-1")
        size = state_size(client, "state/")
        scratch = work / "compacted"
        shutil.rmtree(scratch, ignore_errors=True)
        query_root = next(iter(sorted({o.split("/")[1] for o in _keys(client, "state/")})), None)
        fresh = compacted_size(f"{state}/{query_root}/buffer", store_options, scratch) if query_root else {}
        figures = {
            "ok": ok, "batches": args.batches, "batches_output": len(bids), "keys": args.keys,
            "rows_per_batch": args.rows, "seconds": round(elapsed, 1), "driver_starts": starts,
            "kills": {k: kills[k] for k in KINDS}, "driver_failures": driver_failures,
            "requests": counts["requests"], "faults": counts["faults"], "retries": retries,
            "batches_rerun": len(rerun), "rerun_batch_ids": rerun[:50],
            "slowest_batch": {"batch": slow_batch, "ms": durations.get(slow_batch)},
            "median_batch_ms": statistics.median(ms) if ms else None,
            "rss_at_batch": mid, "rss_mid": rss_mid, "rss_end": rss_end,
            "state_end": size, "state_compacted": fresh,
            "buffers_expected": sum(expected.values()), "buffers_missing": sum(missing.values()),
            "buffers_twice": sum(twice.values()),
        }
        return figures
    finally:
        proxy.close()
        s3_support.stop(moto)


def _running(work: Path) -> int:
    """The newest batch whose tasks started (-1: none)."""
    try:
        text = (work / "started.log").read_text()
    except OSError:
        return -1
    return max((int(line.split()[0]) for line in text.splitlines() if line[:1].isdigit()), default=-1)


def _keys(client, prefix: str) -> list:
    out = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", ())]
    return out


def _act(kind: str, proc, host_dir: Path, proxy, outage: float, threads: list) -> bool:
    """Do one event; False if there was nothing to kill."""
    if kind == "driver":
        os.killpg(proc.pid, signal.SIGKILL)
        return True
    if kind == "outage":
        proxy.down()
        t = threading.Timer(outage, proxy.up)
        t.start()
        threads.append(t)
        return True
    procs = processes(proc.pid, host_dir)
    pids = procs["workers"] if kind == "worker" else procs["hosts"]
    if not pids:
        return False
    pid = random.Random(len(pids)).choice(pids)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def report(f: dict) -> str:
    mb = lambda b: f"{b / 2**20:.1f} MiB"       # noqa: E731
    lines = [
        f"result: {'OK: every buffer exactly once' if f['ok'] else 'FAILED'} "
        f"({f['buffers_expected']} buffers expected, {f['buffers_missing']} missing, {f['buffers_twice']} extra; "
        f"{f['batches_output']} batch outputs for {f['batches']} source files)",
        f"batches run: {f['batches']} in {f['seconds']} s; driver started {f['driver_starts']} times",
        "kills: " + ", ".join(f"{k} {v}" for k, v in f["kills"].items()),
        f"driver runs that failed on their own: {f['driver_failures']}",
        f"S3 requests through the proxy: {f['requests']}; faults injected: "
        + (", ".join(f"{k} {v}" for k, v in f["faults"].items()) or "none"),
        f"retries: botocore {f['retries']['botocore']}, dkv's own loop {f['retries']['ours']}",
        f"batches that failed and ran again: {f['batches_rerun']} {f['rerun_batch_ids'][:20]}",
        f"slowest batch: {f['slowest_batch']['batch']} at {f['slowest_batch']['ms']} ms; "
        f"median {f['median_batch_ms']} ms",
        f"RSS at batch {f['rss_at_batch']}: {_rss_text(f['rss_mid'])}",
        f"RSS at the end: {_rss_text(f['rss_end'])}",
        f"state at the end: {f['state_end'].get('files')} files, {mb(f['state_end'].get('bytes', 0))}; "
        f"freshly compacted: {f['state_compacted'].get('files')} files, {mb(f['state_compacted'].get('bytes', 0))}",
    ]
    return "\n".join(lines)


def _rss_text(r) -> str:
    if not r:
        return "not measured"
    return "; ".join(f"{cls} {v['n']} processes, {v['sum_mb']} MiB (largest {v['max_mb']} MiB)" for cls, v in r.items())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--driver", metavar="WORK", help=argparse.SUPPRESS)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--rows", type=int, default=None, help="rows a batch (default: --keys)")
    ap.add_argument("--count", type=int, default=5, help="rows a buffer")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--memory", default="256m", help="each shard's memory budget")
    ap.add_argument("--fault-rate", type=float, default=0.03, help="faults per S3 request")
    ap.add_argument("--outage", type=float, default=5.0, help="seconds the S3 endpoint is down each time")
    ap.add_argument("--seed", type=int, default=18)
    ap.add_argument("--max-starts", type=int, default=100, help="give up after this many driver starts")
    ap.add_argument("--work", help="work folder (default: a new temporary folder)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    if args.driver:
        return driver(Path(args.driver))
    if args.rows is None:
        args.rows = args.keys
    figures = soak(args)
    print(report(figures), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
