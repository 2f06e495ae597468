"""spark_ops against Spark's own stateful operators, same machine, same run (issue 6, "Benchmark").

    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000,10000 --batches 30
    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000 --batches 12 --only floor,transformWith --json
    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000 --scenarios buffer --only JVM,Row,floor

Big state (the issue's two runs; transform-with-state takes tens of seconds a batch at
K = 100,000, so the peers run only the first --peer-batches batches; the floor and ours all):

    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 10000,100000 --batches 30 --peer-batches 8 \\
        --out bench-output/k100k
    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000000 --batches 16 --count 20 \\
        --only spark_ops,floor --out bench-output/k1m
    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000000 --batches 8 --count 20 \\
        --scenarios buffer --only spark_ops,JVM,floor --memory 64m    # spark_ops' budget per shard
    scripts/env.sh python benchmarks/spark_vs_tws.py \\
        --report bench-output/k100k/spark_vs_tws.json,bench-output/k1m/spark_vs_tws.json

The last command merges the two saved reports into one table and PNG, with the K comparison
across the three K. (--count-at 1000000=20 would set K = 1,000,000's count in a run of several
K, but --only and --peer-batches apply to every K of a run: hence two runs.)

Workloads: `buffer` (--count 100, 2 events per key per batch, 24-byte events) and
`combine_latest` over three inputs. For `buffer`, batch 0 is a staggered warm-up (--prefill,
the default; --no-prefill for steady batch 0): key i gets i % count events, so the buffers are
out of step and fill at different batches, ~(count-1)/2 events per key (~49 at count 100, ~10 M
events at K = 1,000,000 with count 20); it is always a warm-up batch. combine_latest needs none:
batch 0 already fills every key's state. Contenders: (i) spark_ops, (ii) transformWithStateInPandas
and (ii b) transformWithState, the Row interface (Spark 4.1+, what Spark's guide recommends for
high key cardinality: the anchor to beat), (ii c) transformWithState (JVM): Spark's own
transformWithState with a Java StatefulProcessor (benchmarks/jvm/*.java, the same ListState +
ValueState, resp. ValueState per input, and the same output as (ii b); no Python in its query,
so it can come in under the floor below, which pays a Python pass-through: compare its ms per
batch, a negative state cost only says so), all three with RocksDB and changelog checkpointing
(the session's), (iii) applyInPandasWithState (buffer only), (iv) a stateless mapInPandas
pass-through behind the same shuffle: the floor, and (v) for `buffer`, the runtime floor: the
same buffer through spark_ops' own runtime (apply_operator) with its state in a dict of lists in
the shard hosts (benchmarks/_memory_buffer.py; not durable, not exactly-once, a measuring stick
only; `--only runtime` selects it, `--only spark_ops` does not).
The JVM contender's jar is built before the session starts (benchmarks/_spark_jvm.py): javac
(JAVA_HOME's, else PATH's) compiles benchmarks/jvm/*.java with --release 17 against pyspark's
own jars (pyspark/jars/*) into ~/.cache/spark_ops-bench/jvm-peers-<Spark version>-<hash>.jar
($SPARK_OPS_BENCH_CACHE or $XDG_CACHE_HOME/spark_ops-bench instead when set), the hash over the
sources, the Spark version and the release: reused by later runs, rebuilt when a source or Spark
changes. The jar goes on spark.jars and PySpark calls sparkopsbench.JvmPeers.buffer /
.combineLatest through py4j. Without javac, or when the compile fails, the contender is skipped
with the reason; the others run.
local[2], 2 shuffle partitions, a parquet file stream source admitting one pre-written file
per micro-batch.

Reported per contender (steady batches: those after --warmup; Spark's triggerExecution time):
- events/s, ms per batch and time/floor; state cost per event, (ms per batch - the floor's) /
  events, in µs: a throughput ratio cannot exceed the anchor's time over the floor, the state cost
  ratio can; ours over each peer for both;
- durable state: bytes written per batch under its state location (the peers'
  checkpointLocation/state, our `state=` folder; mean, median, max: background snapshot spikes),
  bytes per event, objects (files created or grown) per batch, manifest bytes (ours: the
  `/manifest/` objects; the peers: the RocksDB store's files other than changelogs and SSTs);
- peak RSS (VmHWM) of the processes that hold state, summed per class: "workers" (the PySpark
  workers under the Spark JVM), "hosts" (spark_ops shard hosts) and "jvm", the Spark JVM itself
  (driver and executor in local mode, where Spark's state stores live, RocksDB's native memory
  included: the JVM contender's state, but also the Python peers'), with its growth over the RSS
  at the run's start (the JVM serves every run of the session: before each run it closes the
  state stores earlier runs left loaded and does a full GC, and the run starts once the RSS has
  settled), beside the RSS of a fresh interpreter importing dkv, objectspace and spark_ops;
- output check (--check, the default): rows out and an order-independent digest of the output
  rows (bit_xor of xxhash64 per row, in the sink's counting pass), per batch, compared between
  the stateful contenders of a scenario and K over the batches they share (the digests only
  between contenders of one output schema: spark_ops.combine_latest's structs hold the key too);
  --no-check leaves the hashing out;
- for the runtime floor, its ms per batch and time/floor, and the state layer's cost per event,
  (ours - the runtime floor) / events, beside ours' state cost (ours - the floor) / events;
- for ours, a K comparison (state cost per event at each K over the smallest K; targets
  K = 100,000 <= 1.25x and K = 1,000,000 <= 2x K = 10,000) and the slowest steady batch over
  the median (target: none above 2x); with 9 or more steady batches, each stateful
  contender's ms per batch by thirds of them (a batch that grows over the run shows there:
  a 10-batch run measures only the start of one that grows with its live WAL segments).
--per-batch adds every batch of every run (time, time/floor, cost, bytes/event, objects,
manifest bytes, RSS per class).
With --rounds N every contender runs N times, the contenders taking turns (floor, peers,
ours, runtime floor, floor, ...), so that the machine's drift hits all of them alike; the
table shows each contender's median run, the spread of its rounds, and time/floor and state
cost as the median of the per-round figures.
Writes bench-output/spark_vs_tws.json (every batch of every run: --report re-renders it) and
bench-output/spark_vs_tws.png (per scenario and K: state bytes, objects and ms per batch).

To add a contender, append a Contender to CONTENDERS; its build(inputs, ctx) returns the
output DataFrame and may keep state under ctx.state_dir (measured like the peers' state); its
optional prepare() runs before the session starts and returns jars for spark.jars (the JVM
contender's: _spark_jvm.prepare).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _spark_common as common  # noqa: E402
import _spark_jvm as jvm  # noqa: E402
import _spark_peers as peers  # noqa: E402
from _spark_common import Contender, RunContext  # noqa: E402

# ---------------------------------------------------------------- ours: the plug-in point


def _spark_ops_missing(name: str):
    """A Contender.unavailable check: the reason to skip while spark_ops lacks `name`."""

    def check():
        try:
            import spark_ops
        except ImportError:
            return "spark_ops: not available yet"
        return None if hasattr(spark_ops, name) else "spark_ops: not available yet"

    return check


def ours_buffer(inputs, ctx):
    import spark_ops

    return spark_ops.buffer(inputs, key=ctx.key, count=ctx.count, state=str(ctx.state_dir),
                            partitions=ctx.partitions, memory=ctx.memory)


def runtime_buffer(inputs, ctx):
    """ours_buffer's runtime with the state in memory: the runtime floor (see _memory_buffer)."""
    import spark_ops
    from pyspark.sql.types import ArrayType, StructField, StructType

    from _memory_buffer import MemoryBuffer

    schema = StructType([inputs.schema[ctx.key], StructField("items", ArrayType(inputs.schema))])
    return spark_ops.apply_operator(inputs, MemoryBuffer(ctx.count, (ctx.key,), ctx.batches), ctx.key,
                                    output_schema=schema,
                                    state=str(ctx.state_dir), name="memory_buffer", partitions=ctx.partitions)


def ours_combine_latest(inputs, ctx):
    import spark_ops

    return spark_ops.combine_latest(inputs, key=ctx.key, state=str(ctx.state_dir), partitions=ctx.partitions)


# Named without "spark_ops" or "floor": `--only spark_ops,floor` (the K = 1,000,000 run) must
# not select it, its dict would hold every buffered row in the hosts. `--only runtime` does.
RUNTIME_NAME = "runtime, state in a dict"
CONTENDERS = [
    Contender("spark_ops.buffer", "buffer", "ours", ours_buffer, _spark_ops_missing("buffer")),
    Contender("transformWithStateInPandas", "buffer", "peer", peers.tws_buffer),
    Contender("transformWithState (Row)", "buffer", "peer", peers.tws_row_buffer),
    Contender("transformWithState (JVM)", "buffer", "peer", jvm.jvm_buffer, jvm.unavailable, jvm.prepare),
    Contender("applyInPandasWithState", "buffer", "peer", peers.aipws_buffer),
    Contender("mapInPandas floor", "buffer", "floor", peers.floor_buffer),
    Contender(RUNTIME_NAME, "buffer", "runtime", runtime_buffer, _spark_ops_missing("apply_operator")),
    Contender("spark_ops.combine_latest", "combine_latest", "ours", ours_combine_latest,
              _spark_ops_missing("combine_latest")),
    Contender("transformWithStateInPandas", "combine_latest", "peer", peers.tws_combine_latest),
    Contender("transformWithState (Row)", "combine_latest", "peer", peers.tws_row_combine_latest),
    Contender("transformWithState (JVM)", "combine_latest", "peer", jvm.jvm_combine_latest, jvm.unavailable,
              jvm.prepare),
    Contender("mapInPandas floor", "combine_latest", "floor", peers.floor_combine_latest),
]
# The runtime floor runs last: its dict lives in the shard hosts, which serve every run of
# the session (it drops it after its last batch, but the hosts' allocators keep what it grew).
RUN_ORDER = {"floor": 0, "peer": 1, "ours": 2, "runtime": 3}
# the issue's targets for ours' state cost per event, relative to K = 10,000
K_BASE, K_TARGETS = 10_000, {100_000: 1.25, 1_000_000: 2.0}
SPIKE_TARGET = 2.0  # no steady batch of ours above this times the median


# ---------------------------------------------------------------- running


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="1000,10000", help="comma-separated key counts (default 1000,10000)")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="first batches left out of the steady figures")
    ap.add_argument("--count", type=int, default=100, help="buffer size")
    ap.add_argument("--count-at", default="", metavar="K=COUNT,...",
                    help="buffer size at particular key counts, e.g. 1000000=20 (else --count)")
    ap.add_argument("--prefill", action=argparse.BooleanOptionalAction, default=True,
                    help="buffer: batch 0 is a staggered warm-up, key i gets i %% count events (default on)")
    ap.add_argument("--events-per-key", type=int, default=2, help="events per key per steady batch")
    ap.add_argument("--peer-batches", type=int, default=None, metavar="N",
                    help="the peers run only the first N batches (default: all); the floor and ours run all")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--memory", default=None, metavar="SIZE",
                    help="spark_ops' memory budget per shard (e.g. 64m; default: spark_ops' default)")
    ap.add_argument("--rounds", type=int, default=1, help="runs per contender, taking turns (median reported)")
    ap.add_argument("--scenarios", default="buffer,combine_latest")
    ap.add_argument("--only", default="", help="comma-separated substrings of contender names (or roles) to run")
    ap.add_argument("--out", default="bench-output", help="where the JSON and the PNG go")
    ap.add_argument("--work", default=None, help="sources, checkpoints and state (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    ap.add_argument("--per-batch", action="store_true", help="also print every batch of every run")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="output check: a digest of every output row, per batch, compared between the "
                         "contenders (default on; --no-check leaves the hashing out of the sink's pass)")
    ap.add_argument("--report", default=None, metavar="JSON[,JSON...]",
                    help="do not run: print the table (and plot) of saved spark_vs_tws.json files "
                         "(several: merged, a later file's scenario and K replacing an earlier one's)")
    args = ap.parse_args(argv)
    args.keys = [int(k) for k in args.keys.split(",") if k]
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    try:
        args.count_at = {int(k): int(v) for k, v in (kv.split("=") for kv in args.count_at.split(",") if kv)}
    except ValueError:
        ap.error("--count-at takes K=COUNT pairs, e.g. 1000000=20")
    unknown = set(args.scenarios) - set(common.SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {sorted(unknown)}; choose from {sorted(common.SCENARIOS)}")
    if args.warmup >= args.batches:
        ap.error("--warmup must be smaller than --batches")
    if args.prefill and args.warmup < 1 and any(common.SCENARIOS[s].prefill for s in args.scenarios):
        ap.error("with --prefill batch 0 is a warm-up: --warmup must be at least 1")
    if args.peer_batches is not None and args.peer_batches <= args.warmup:
        ap.error("--peer-batches must be larger than --warmup (the peers need steady batches)")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if min([args.count, *args.count_at.values()]) < 1:
        ap.error("buffer sizes must be at least 1")
    return args


def count_at(args, keys: int) -> int:
    return args.count_at.get(keys, args.count)


def selected(args) -> list[Contender]:
    wanted = [w for w in args.only.split(",") if w]
    chosen = [c for c in CONTENDERS if c.scenario in args.scenarios
              and (not wanted or any(w.lower() in c.name.lower() or w == c.role for w in wanted))]
    return sorted(chosen, key=lambda c: (args.scenarios.index(c.scenario), RUN_ORDER[c.role]))


def run(args) -> dict:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(peers)  # the Python workers cannot import benchmarks/
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="spark_vs_tws-"))
    baseline = common.interpreter_baseline()
    jars = []   # before the session starts: the JVM peers' jar (built or cached) goes on spark.jars
    for prepare in dict.fromkeys(c.prepare for c in selected(args) if c.prepare):
        jars += prepare()
    spark = common.spark_session(args.partitions, args.batches, jars=jars)
    version = spark.version
    # The runtime floor's operator keeps its state in a module of the shard hosts: by value,
    # each batch's copy would start empty. Shipped, it is imported by workers and hosts alike.
    spark.sparkContext.addPyFile(str(Path(__file__).resolve().with_name("_memory_buffer.py")))
    results, sources = [], {}
    try:
        for scenario_name in args.scenarios:
            scenario = common.SCENARIOS[scenario_name]
            for keys in args.keys:
                count = count_at(args, keys)
                prefill = args.prefill and scenario.prefill
                source = work / common.source_name(scenario, keys, args.events_per_key, count, prefill)
                log(f"{scenario_name} K={keys:,}: writing the source ({args.batches} batches) ...")
                files = common.write_source(scenario, source, args.batches, keys, args.events_per_key,
                                            count if prefill else 0)
                events = [f["events"] for f in files]
                peer_batches = min(args.peer_batches or args.batches, args.batches)
                sources[f"{scenario_name}/{keys}"] = {
                    "events_per_batch": events[-1], "source_file_bytes": files[-1]["bytes"],
                    "events_by_batch": events, "file_bytes_by_batch": [f["bytes"] for f in files],
                    "count": count, "prefill": prefill, "batches": args.batches, "warmup": args.warmup,
                    "peer_batches": peer_batches}
                contenders = [c for c in selected(args) if c.scenario == scenario_name]
                for rnd in range(args.rounds):
                    for i, contender in enumerate(contenders):
                        run_dir = work / f"run-{scenario_name}-{keys}-{i}-r{rnd}"
                        n = peer_batches if contender.role == "peer" else args.batches
                        ctx = RunContext(keys=keys, count=count, partitions=args.partitions,
                                         state_dir=run_dir / "state", key=scenario.key, memory=args.memory,
                                         batches=n)
                        log(f"{scenario_name} K={keys:,}: {contender.name}, {n} batches "
                            f"(round {rnd + 1}/{args.rounds}) ...")
                        result = common.run_contender(spark, contender, scenario, common.source_view(source, n),
                                                      run_dir, ctx, events, digest=args.check,
                                                      warmup=args.warmup)
                        result.round, result.warmup = rnd, args.warmup
                        log(f"    {result.skipped or _short(result.summary())}")
                        results.append(result)
                        if not args.work:
                            shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        spark.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    config = {k: v for k, v in vars(args).items() if k not in ("json", "no_plot", "out", "work", "per_batch")}
    config["count_at"] = {str(k): v for k, v in args.count_at.items()}
    return {
        "spark_version": version,
        "config": config,
        "interpreter_rss": baseline,
        "sources": sources,
        "results": [{**{k: v for k, v in dataclasses.asdict(r).items() if k != "batches"},
                     "summary": r.summary(),
                     "batches": [dataclasses.asdict(b) for b in r.batches]} for r in results],
    }


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _short(s: dict) -> str:
    if "skipped" in s:
        return s["skipped"]
    rss = ", ".join(f"{cls} {v / 2**20:,.0f} MB" for cls, v in s["peak_rss"].items())
    return (f"{s['events_per_s']:,.0f} events/s, {s['ms_per_batch']:,.0f} ms/batch, "
            f"state {s['state_bytes_mean'] / 1024:,.1f} KB/batch (max {s['state_bytes_max'] / 1024:,.1f}), "
            f"{s['objects_mean']:,.1f} objects/batch" + (f", peak RSS {rss}" if rss else "")
            + "".join(f", steady peak (largest) {cls} {v / 2**20:,.0f} MB"
                      for cls, v in (s.get("steady_peak_rss_max") or {}).items() if cls == "hosts"))


# ---------------------------------------------------------------- reporting


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b and a > 0 and b > 0 else "-"


def _summary(r: dict, config: dict) -> dict:
    """A run's steady figures, recomputed from its batches (older JSONs: the saved summary)."""
    if r.get("skipped") or not r.get("batches") or "ms" not in r["batches"][0]:
        return r["summary"]
    return common.summarize(r["batches"], r.get("warmup", config["warmup"]), r.get("memory"), r.get("skipped"))


def _median(xs: list):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def _median_run(runs: list) -> dict:
    """The run whose ms per batch is the median of the rounds (its other figures with it)."""
    ok = sorted((r for r in runs if "skipped" not in r["s"]), key=lambda r: r["s"]["ms_per_batch"])
    return ok[(len(ok) - 1) // 2] if ok else runs[0]


def _floor_ms(floor_runs: list) -> dict:
    return {r.get("round", 0): r["s"]["ms_per_batch"] for r in floor_runs if "skipped" not in r["s"]}


def _time_vs_floor(runs: list, floor_runs: list):
    """Median over rounds of (ms per batch / the floor's in the same round); None without a floor."""
    floor = _floor_ms(floor_runs)
    return _median([r["s"]["ms_per_batch"] / floor[r.get("round", 0)] for r in runs
                    if "skipped" not in r["s"] and r.get("round", 0) in floor])


def _cost(runs: list, floor_runs: list):
    """State cost per event in µs: median over rounds of (ms per batch - the floor's in the same
    round) / events per batch; None without a floor."""
    floor = _floor_ms(floor_runs)
    return _median([(r["s"]["ms_per_batch"] - floor[r.get("round", 0)]) * 1000 / r["s"]["events_per_batch"]
                    for r in runs if "skipped" not in r["s"] and r.get("round", 0) in floor
                    and r["s"]["events_per_batch"]])


def _groups(report: dict) -> dict[tuple, dict]:
    """(scenario, K) -> contender -> its runs, each with its summary under "s"."""
    groups: dict[tuple, dict] = {}
    for r in report["results"]:
        r = {**r, "s": _summary(r, report["config"])}
        groups.setdefault((r["scenario"], r["keys"]), {}).setdefault(r["contender"], []).append(r)
    order = list(dict.fromkeys(scenario for scenario, _ in groups))
    return dict(sorted(groups.items(), key=lambda g: (order.index(g[0][0]), g[0][1])))


def _role_runs(by_name: dict, role: str) -> list:
    return next((runs for runs in by_name.values() if runs[0]["role"] == role), [])


def _mb(v) -> str:
    return f"{v / 2**20:,.0f}" if v else "-"


def _num(v, fmt: str = ",.1f") -> str:
    return "-" if v is None or v != v else format(v, fmt)


def table(report: dict, per_batch: bool = False) -> str:
    cfg = report["config"]
    rounds = max([r.get("round", 0) + 1 for r in report["results"]] or [1])
    base = report.get("interpreter_rss") or {}
    lines = [f"Spark {report['spark_version']}, local[2], {cfg['partitions']} partitions"
             + (f", {rounds} rounds per contender (median shown)" if rounds > 1 else "")
             + (f"; merged from {len(report['merged_from'])} reports" if report.get("merged_from") else "")
             + (f"; a fresh interpreter importing dkv, objectspace, spark_ops: {_mb(base['vmrss'])} MB RSS"
                if base.get("vmrss") else "")]
    head_a = (f"{'contender':<28} {'steady':>6} {'events/s':>10} {'ms/batch':>9} {'time/floor':>10} "
              f"{'state us/ev':>11} {'ours ev/s':>10} {'ours cost':>10}"
              + (f" {'ms/batch of the rounds':>24}" if rounds > 1 else ""))
    head_b = (f"{'contender':<28} {'bytes/ev':>8} {'KB/batch':>10} {'median KB':>9} {'max KB':>9} "
              f"{'objects':>8} {'manif. KB':>9} {'workers MB':>11} {'hosts MB':>11} {'JVM MB':>13} {'ours bytes':>10}")
    groups = _groups(report)
    costs: dict[str, dict[int, tuple]] = {}   # scenario -> K -> (ours' name, state cost)
    spikes, checks = [], []
    for (scenario, keys), by_name in groups.items():
        src = report["sources"].get(f"{scenario}/{keys}", {})
        floor_runs, ours_runs = _role_runs(by_name, "floor"), _role_runs(by_name, "ours")
        ours = _median_run(ours_runs) if ours_runs else None
        if ours and "skipped" in ours["s"]:
            ours = None
        ours_cost = _cost(ours_runs, floor_runs) if ours else None
        if ours:
            costs.setdefault(scenario, {})[keys] = (ours["contender"], ours_cost)
            spikes.append((scenario, keys, ours["contender"], ours["s"]))
        events0 = (src.get("events_by_batch") or [None])[0]
        warm = (f"batch 0: {events0:,} events, a staggered warm-up (key i gets i % {src['count']}); "
                if src.get("prefill") else "")
        peer_b = src.get("peer_batches")
        lines += ["", f"{scenario}, K = {keys:,}"
                      + (f", buffer count {src.get('count', cfg['count'])}" if scenario == "buffer" else "")
                      + f": {src.get('events_per_batch', 0):,} events per steady batch (source file "
                        f"{src.get('source_file_bytes', 0) / 1024:,.1f} KB)",
                  f"  {warm}{src.get('batches', cfg['batches'])} batches, the first "
                  f"{src.get('warmup', cfg['warmup'])} left out as warm-up"
                  + (f"; the peers run the first {peer_b}" if peer_b and peer_b < src.get("batches", 0) else ""),
                  head_a, "-" * len(head_a)]
        rows_b = []
        for name, runs in by_name.items():
            r = _median_run(runs)
            s = r["s"]
            if "skipped" in s:
                lines.append(f"{name:<28} {s['skipped']}")
                continue
            peer = ours and r["role"] == "peer"
            cost = _cost(runs, floor_runs) if r["role"] != "floor" else None
            vs_floor = _time_vs_floor(runs, floor_runs)
            spread = ", ".join(f"{x['s']['ms_per_batch']:,.0f}" for x in runs if "skipped" not in x["s"])
            lines.append(
                f"{name:<28} {s['batches']:>6} {s['events_per_s']:>10,.0f} {s['ms_per_batch']:>9,.0f} "
                f"{(f'{vs_floor:.2f}x' if vs_floor else '-'):>10} "
                f"{(f'{cost:,.1f}' if cost is not None else '-'):>11} "
                f"{(_ratio(ours['s']['events_per_s'], s['events_per_s']) if peer else ''):>10} "
                f"{(_ratio(ours_cost, cost) if peer else ''):>10}"
                + (f" {spread:>24}" if rounds > 1 else ""))
            stateful = r["role"] != "floor"
            rss = {cls: _mb(v) + (f" ({_mb(s['peak_rss_max'][cls])})" if s.get("peak_rss_max", {}).get(cls, v) < v
                                  else "") for cls, v in s.get("peak_rss", {}).items()}
            per_event = _num(s.get("state_bytes_per_event") if stateful else None)
            objects = _num(s.get("objects_mean") if stateful else None)
            manifest = _num(s["manifest_bytes_max"] / 1024 if stateful and s.get("manifest_bytes_max") is not None
                            else None)
            rows_b.append(
                f"{name:<28} {per_event:>8} {s['state_bytes_mean'] / 1024:>10,.1f} "
                f"{s['state_bytes_median'] / 1024:>9,.1f} {s['state_bytes_max'] / 1024:>9,.1f} "
                f"{objects:>8} {manifest:>9} {rss.get('workers', '-'):>11} {rss.get('hosts', '-'):>11} "
                f"{_jvm_mb(s):>13} "
                f"{(_ratio(ours['s']['state_bytes_mean'], s['state_bytes_mean']) if peer else ''):>10}")
        lines += _runtime_lines(_role_runs(by_name, "runtime"), floor_runs, ours_runs if ours else [])
        if rows_b:
            lines += ["", head_b, "-" * len(head_b), *rows_b]
        lines += _output_check(by_name)
        if per_batch:
            lines += _batch_lines(by_name, floor_runs)
    for scenario, by_k in costs.items():
        ks = sorted(k for k, (_, c) in by_k.items() if c is not None)
        if len(ks) < 2:
            continue
        name, c0 = by_k[ks[0]]
        parts = []
        for k in ks:
            c = by_k[k][1]
            rel = c / c0 if c0 and c0 > 0 else None
            target = K_TARGETS.get(k) if ks[0] == K_BASE else None
            verdict = "" if target is None else "n/a" if rel is None else "met" if rel <= target else "MISSED"
            parts.append(f"K = {k:,}: {c:,.2f} us (" + (f"{rel:.2f}x" if rel is not None else "-")
                         + (f", target <= {target:g}x: {verdict}" if target else "") + ")")
        checks += [f"K comparison, {name}: state cost per event, over K = {ks[0]:,}'s",
                   *(f"  {p}" for p in parts)]
    for scenario, keys, name, s in spikes:
        over = s["ms_max"] / s["ms_median"] if s.get("ms_median") else None
        if over is not None:
            checks.append(f"{name}, K = {keys:,}: slowest steady batch {s['ms_max']:,.0f} ms, {over:.2f}x the median "
                         f"{s['ms_median']:,.0f} ms (target: none above {SPIKE_TARGET:g}x: "
                         f"{'met' if over <= SPIKE_TARGET else 'MISSED'})")
    for (scenario, keys), by_name in groups.items():
        for name, runs in by_name.items():
            r = _median_run(runs)
            thirds = r["s"].get("ms_thirds") if r["role"] != "floor" else None
            if thirds:
                checks.append(f"{name}, K = {keys:,}: ms per batch by thirds of the steady batches "
                              + " / ".join(f"{t:,.0f}" for t in thirds)
                              + f" (the last third {thirds[2] / thirds[0]:.2f}x the first)")
    for scenario, keys, name, s in spikes:
        steady = s.get("steady_peak_rss_max") or {}
        if steady:
            checks.append(f"{name}, K = {keys:,}: peak RSS of the largest process over the steady batches: "
                          + ", ".join(f"{cls} {_mb(v)} MB" for cls, v in steady.items())
                          + " (the table's peaks include the warm-up batches)")
    if checks:
        lines += ["", *checks]
    lines += ["", "steady: batches after the warm-up. time/floor: ms per batch over the floor's (with rounds: the "
                  "median of each round's ratio).",
              "state us/ev: state cost per event, (ms per batch - the floor's) / events, in microseconds (the JVM "
              "peer has no Python stage, the floor has one: its figure can be negative); ours ev/s, "
              "ours cost, ours bytes: spark_ops over that peer (events/s: higher is better; cost, bytes: lower).",
              "runtime floor: the buffer through spark_ops' runtime with its state in a dict (a measuring stick, not "
              "durable); its state us/ev is the runtime's cost over the floor, ours - it the state layer's.",
              "bytes/ev: state bytes written per event; KB/batch: mean of the steady batches (spikes included); "
              "median: a typical batch; max: the largest spike; objects: files written per batch (mean);",
              "manif. KB: the largest batch's metadata bytes (ours: /manifest/ objects; Spark's RocksDB store: all "
              "but changelogs and SSTs); workers MB, hosts MB: peak RSS (VmHWM) of the PySpark workers and of "
              "spark_ops' shard hosts that took part in the run, summed over the processes (shared pages counted in "
              "each; in brackets: the largest process);",
              "JVM MB: peak RSS of the Spark JVM (driver and executor in local mode: Spark's state stores, RocksDB "
              "included, live there, for the Python peers as for the JVM one), in brackets its growth over the RSS "
              "at the run's start (after a full GC); the JVM serves every run of the session, Spark itself included: "
              "read the growth.",
              "output check: rows out and an order-independent digest of the output rows, per batch, compared "
              "between the stateful contenders (all rounds) over the batches they share (the digests only "
              "between contenders of one output schema)."]
    return "\n".join(lines)


def _jvm_mb(s: dict) -> str:
    """The JVM's peak RSS in MB, with its growth over the run's start in brackets."""
    peak = s.get("peak_rss", {}).get("jvm")
    if not peak:
        return "-"
    start = s.get("rss_at_start", {}).get("jvm")
    return _mb(peak) + (f" (+{max(peak - start, 0) / 2**20:,.0f})" if start else "")


def _output_check(by_name: dict) -> list[str]:
    """Whether the stateful contenders of a (scenario, K) emitted the same rows in the same batches:
    rows out and the output digest per batch (see _spark_common.run_contender), every round, over
    the batches all of them ran; the digests only between contenders of one output schema (else
    the rows out)."""
    outputs, schemas = {}, {}    # contender -> batch id -> {(rows out, digest), ...} over its rounds; its schema
    for name, runs in by_name.items():
        for r in runs:
            if r["role"] == "floor" or "skipped" in r["s"] or not r.get("batches"):
                continue
            if any(b.get("digest") is None for b in r["batches"]):
                continue    # --no-check, or a report from before the check
            schemas[name] = r.get("output_schema", "")
            per = outputs.setdefault(name, {})
            for b in r["batches"]:
                per.setdefault(b["batch_id"], set()).add((b["rows_out"], b["digest"]))
    if not outputs:
        return []
    common_ids = sorted(set.intersection(*(set(per) for per in outputs.values())))
    if not common_ids:
        return [f"  output check: no batch shared by {', '.join(outputs)}"]
    problems, rows_only = [], []
    for name, per in outputs.items():
        unstable = [b for b in common_ids if len(per[b]) > 1]
        if unstable:
            problems.append(f"{name}'s rounds differ at batch(es) {_ids(unstable)}")
    ref_name, ref = next(iter(outputs.items()))
    for name, per in list(outputs.items())[1:]:
        same_schema = schemas[name] == schemas[ref_name]
        if not same_schema:
            rows_only.append(name)

        def seen(p, b, same_schema=same_schema):
            return p[b] if same_schema else {rows for rows, _ in p[b]}

        differ = [b for b in common_ids if seen(per, b) != seen(ref, b)]
        if differ:
            b = differ[0]
            (rows, dig), (ref_rows, ref_dig) = min(per[b]), min(ref[b])
            what = (f"{rows:,} rows, digest {dig} vs {ref_rows:,} rows, digest {ref_dig}" if same_schema
                    else f"{rows:,} rows vs {ref_rows:,}")
            problems.append(f"{name} DIFFERS from {ref_name} at batch(es) {_ids(differ)} (batch {b}: {what})")
    rows = sum(min(ref[b])[0] for b in common_ids)
    span = f"batches {common_ids[0]}-{common_ids[-1]}" if len(common_ids) > 1 else f"batch {common_ids[0]}"
    note = (f" ({', '.join(rows_only)}: another output schema, rows out compared, not the digests)"
            if rows_only else "")
    if problems:
        return [f"  output check over {span}: FAILED: " + "; ".join(problems) + note]
    names = ", ".join(outputs)
    return [f"  output check over {span}: " + (f"{names} emit the same rows ({rows:,}, same digest per batch)"
                                               if len(outputs) > 1 else f"only {names} checked ({rows:,} rows)")
            + note]


def _ids(ids: list[int]) -> str:
    return ", ".join(map(str, ids[:8])) + (f" (+{len(ids) - 8} more)" if len(ids) > 8 else "")


def _runtime_lines(runtime_runs: list, floor_runs: list, ours_runs: list) -> list[str]:
    """The runtime floor against the floor, and what that leaves of ours' cost to the state layer."""
    rt = _median_run(runtime_runs) if runtime_runs else None
    if rt is None or "skipped" in rt["s"]:
        return []
    vs_floor, over_floor = _time_vs_floor(runtime_runs, floor_runs), _cost(runtime_runs, floor_runs)
    line = (f"  runtime floor = the buffer through spark_ops' runtime, its state in a dict (not durable, "
            "not exactly-once): "
            f"{rt['s']['ms_per_batch']:,.0f} ms/batch, " + (f"{vs_floor:.2f}x the floor" if vs_floor else "no floor")
            + (f" ({over_floor:,.1f} us/event over it)" if over_floor is not None else ""))
    ours = _median_run(ours_runs) if ours_runs else None
    if ours is None:
        return [line]
    same = rt["s"]["rows_out"] == ours["s"]["rows_out"]
    line += (f"; rows out {rt['s']['rows_out']:,} ({ours['contender']}: {ours['s']['rows_out']:,}"
             + (")" if same else ", DIFFERENT)"))
    layer, ours_cost = _cost(ours_runs, runtime_runs), _cost(ours_runs, floor_runs)
    share = (f": the state layer {layer / ours_cost:.0%} of it" if layer is not None and ours_cost and ours_cost > 0
             else "")
    return [line, f"  state layer cost per event, (ours - runtime floor) / events: {_num(layer, ',.2f')} us, beside "
                  f"ours' state cost, (ours - floor) / events: {_num(ours_cost, ',.2f')} us{share}"]


def _batch_lines(by_name: dict, floor_runs: list) -> list[str]:
    floor = _floor_ms(floor_runs)
    head = (f"  {'batch':>5} {'events':>10} {'ms':>9} {'time/floor':>10} {'us/ev':>8} {'bytes/ev':>8} "
            f"{'objects':>7} {'manif. B':>8} {'workers MB':>10} {'hosts MB':>8} {'JVM MB':>7}")
    out = []
    for name, runs in by_name.items():
        for r in runs:
            if "skipped" in r["s"]:
                continue
            f = floor.get(r.get("round", 0))
            out += ["", f"  {name}" + (f" (round {r.get('round', 0) + 1})" if len(runs) > 1 else "")
                    + ", per batch (w: warm-up)", head]
            warmup = r.get("warmup", 0)
            for b in r["batches"]:
                ev, ms = b["events"], b["ms"]
                rss = b.get("rss") or {}
                vs_floor = f"{ms / f:.2f}x" if f else "-"
                cost = _num((ms - f) * 1000 / ev if f and ev and r["role"] != "floor" else None)
                per_event = _num(b["state_bytes"] / ev if ev else None)
                warm = "w" if b["batch_id"] < warmup else " "
                out.append(
                    f"  {b['batch_id']:>5}{warm}{ev:>10,} {ms:>9,.0f} {vs_floor:>10} {cost:>8} {per_event:>8} "
                    f"{b['state_files']:>7,} {_num(b.get('manifest_bytes'), ','):>8} "
                    f"{_mb(rss.get('workers', {}).get('sum')):>10} {_mb(rss.get('hosts', {}).get('sum')):>8} "
                    f"{_mb(rss.get('jvm', {}).get('sum')):>7}")
    return out


def plot(report: dict, path: Path) -> None:
    """Per (scenario, K) a row: state bytes, objects and ms per batch of every run (the warm-up shaded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    groups: dict[tuple, list] = {}
    for r in report["results"]:
        if r["batches"]:
            groups.setdefault((r["scenario"], r["keys"]), []).append(r)
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 3, figsize=(18, 3.8 * len(groups)), squeeze=False)
    panels = (("state KB written per batch", lambda b: b["state_bytes"] / 1024, True),
              ("objects written per batch", lambda b: b["state_files"], True),
              ("ms per batch", lambda b: b["ms"], False))
    for row, ((scenario, keys), rows) in zip(axes, groups.items()):
        warmup = max(r.get("warmup", report["config"]["warmup"]) for r in rows)
        names = list(dict.fromkeys(r["contender"] for r in rows))
        for r in rows:
            ids = [b["batch_id"] for b in r["batches"]]
            label = r["contender"] + (f" (round {r['round'] + 1})" if r.get("round") else "")
            i = names.index(r["contender"])
            style = dict(color=f"C{i}", marker=MARKERS[i % len(MARKERS)], markersize=4, label=label,
                         linestyle="-" if not r.get("round") else ":")
            for ax, (_, value, stateful) in zip(row, panels):
                if stateful and r["role"] == "floor":
                    continue                  # no state: zeros
                ax.plot(ids, [value(b) for b in r["batches"]], **style)
        for ax, (title, _, _) in zip(row, panels):
            _scale(ax)
            ax.axvspan(-0.5, warmup - 0.5, color="0.9")
            ax.set_title(f"{scenario}, K = {keys:,}: {title}" + (" (log)" if ax.get_yscale() == "log" else ""),
                         fontsize=10)
            ax.set_xlabel("batch id (shaded: warm-up)")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(alpha=0.3)
        row[2].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


MARKERS = ("o", "s", "^", "v", "D", "x")


def _scale(ax) -> None:
    """Log y where the lines span over two decades (a warm-up batch or a snapshot spike beside
    small steady batches) and every value is positive; else linear from 0."""
    ys = [y for line in ax.get_lines() for y in line.get_ydata()]
    if ys and min(ys) > 0 and max(ys) / min(ys) > 100:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)


def load_reports(paths: list[str]) -> dict:
    """One saved report, or several merged: a later file's (scenario, K) groups replace an earlier one's."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    if len(reports) == 1:
        return reports[0]
    merged = {**reports[0], "results": [], "sources": {}, "merged_from": paths}
    for rep in reports:
        groups = {(r["scenario"], r["keys"]) for r in rep["results"]}
        merged["results"] = [r for r in merged["results"] if (r["scenario"], r["keys"]) not in groups]
        for r in rep["results"]:
            r.setdefault("warmup", rep["config"]["warmup"])
            r.setdefault("count", rep["config"]["count"])
        merged["results"] += rep["results"]
        for name, src in rep["sources"].items():
            merged["sources"][name] = {"count": rep["config"]["count"], "batches": rep["config"]["batches"],
                                       "warmup": rep["config"]["warmup"], **src}
    return merged


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        report = load_reports([p for p in args.report.split(",") if p])
    else:
        report = run(args)
        (out / "spark_vs_tws.json").write_text(json.dumps(report, indent=1, default=str))
    if not args.no_plot:
        plot(report, out / "spark_vs_tws.png")
    print(json.dumps(report, indent=1, default=str) if args.json else table(report, args.per_batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
