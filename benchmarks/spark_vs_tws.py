"""spark_ops against Spark's own stateful operators, same machine, same run (issue 6, "Benchmark").

    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000,10000 --batches 30
    scripts/env.sh python benchmarks/spark_vs_tws.py --keys 1000 --batches 12 --only floor,transformWith --json

Workloads: `buffer` (count=100, 2 events per key per batch) and `combine_latest` over three
inputs. Contenders: (i) spark_ops, (ii) transformWithStateInPandas with RocksDB and changelog
checkpointing, (iii) applyInPandasWithState (buffer only), (iv) a stateless mapInPandas
pass-through behind the same shuffle: the floor. local[2], 2 shuffle partitions, a parquet
file stream source admitting one pre-written file per micro-batch.

Reported per contender: steady events/s and mean ms per batch (batches after --warmup, Spark's
triggerExecution time), and bytes written per batch under its state location (the peers'
checkpointLocation/state, our `state=` folder): steady mean and max (background snapshot
spikes). Ratios: each contender against the floor (time), ours against each peer.
With --rounds N every contender runs N times, the contenders taking turns (floor, peers,
ours, floor, ...), so that the machine's drift hits all of them alike; the table shows each
contender's median run, the spread of its rounds, and time/floor as the median of the
per-round ratios.
Writes bench-output/spark_vs_tws.json and bench-output/spark_vs_tws.png.

To add a contender, append a Contender to CONTENDERS; its build(inputs, ctx) returns the
output DataFrame and may keep state under ctx.state_dir (measured like the peers' state).
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
                            partitions=ctx.partitions)


def ours_combine_latest(inputs, ctx):
    import spark_ops

    return spark_ops.combine_latest(inputs, key=ctx.key, state=str(ctx.state_dir), partitions=ctx.partitions)


CONTENDERS = [
    Contender("spark_ops.buffer", "buffer", "ours", ours_buffer, _spark_ops_missing("buffer")),
    Contender("transformWithStateInPandas", "buffer", "peer", peers.tws_buffer),
    Contender("applyInPandasWithState", "buffer", "peer", peers.aipws_buffer),
    Contender("mapInPandas floor", "buffer", "floor", peers.floor_buffer),
    Contender("spark_ops.combine_latest", "combine_latest", "ours", ours_combine_latest,
              _spark_ops_missing("combine_latest")),
    Contender("transformWithStateInPandas", "combine_latest", "peer", peers.tws_combine_latest),
    Contender("mapInPandas floor", "combine_latest", "floor", peers.floor_combine_latest),
]
RUN_ORDER = {"floor": 0, "peer": 1, "ours": 2}


# ---------------------------------------------------------------- running


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="1000,10000", help="comma-separated key counts (default 1000,10000)")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="first batches left out of the steady figures")
    ap.add_argument("--count", type=int, default=100, help="buffer size")
    ap.add_argument("--events-per-key", type=int, default=2, help="events per key per batch")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1, help="runs per contender, taking turns (median reported)")
    ap.add_argument("--scenarios", default="buffer,combine_latest")
    ap.add_argument("--only", default="", help="comma-separated substrings of contender names to run")
    ap.add_argument("--out", default="bench-output", help="where the JSON and the PNG go")
    ap.add_argument("--work", default=None, help="sources, checkpoints and state (default: a temp dir, removed)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--report", default=None, metavar="JSON",
                    help="do not run: print the table (and plot) of a saved spark_vs_tws.json")
    args = ap.parse_args(argv)
    args.keys = [int(k) for k in args.keys.split(",") if k]
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = set(args.scenarios) - set(common.SCENARIOS)
    if unknown:
        ap.error(f"unknown scenario(s) {sorted(unknown)}; choose from {sorted(common.SCENARIOS)}")
    if args.warmup >= args.batches:
        ap.error("--warmup must be smaller than --batches")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def selected(args) -> list[Contender]:
    wanted = [w for w in args.only.split(",") if w]
    chosen = [c for c in CONTENDERS if c.scenario in args.scenarios
              and (not wanted or any(w.lower() in c.name.lower() or w == c.role for w in wanted))]
    return sorted(chosen, key=lambda c: (args.scenarios.index(c.scenario), RUN_ORDER[c.role]))


def run(args) -> dict:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(peers)  # the Python workers cannot import benchmarks/
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="spark_vs_tws-"))
    spark = common.spark_session(args.partitions, args.batches)
    version = spark.version
    results, sources = [], {}
    try:
        for scenario_name in args.scenarios:
            scenario = common.SCENARIOS[scenario_name]
            for keys in args.keys:
                source = work / f"src-{scenario_name}-{keys}"
                file_bytes = common.write_source(scenario, source, args.batches, keys, args.events_per_key)
                sources[f"{scenario_name}/{keys}"] = {"events_per_batch": keys * args.events_per_key,
                                                      "source_file_bytes": file_bytes}
                contenders = [c for c in selected(args) if c.scenario == scenario_name]
                for rnd in range(args.rounds):
                    for i, contender in enumerate(contenders):
                        run_dir = work / f"run-{scenario_name}-{keys}-{i}-r{rnd}"
                        ctx = RunContext(keys=keys, count=args.count, partitions=args.partitions,
                                         state_dir=run_dir / "state", key=scenario.key)
                        log(f"{scenario_name} K={keys:,}: {contender.name} (round {rnd + 1}/{args.rounds}) ...")
                        result = common.run_contender(spark, contender, scenario, source, run_dir, ctx,
                                                      keys * args.events_per_key)
                        result.round = rnd
                        log(f"    {result.skipped or _short(result.summary(args.warmup))}")
                        results.append(result)
                        if not args.work:
                            shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        spark.stop()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "spark_version": version,
        "config": {k: v for k, v in vars(args).items() if k not in ("json", "no_plot", "out", "work")},
        "sources": sources,
        "results": [{**{k: v for k, v in dataclasses.asdict(r).items() if k != "batches"},
                     "summary": r.summary(args.warmup),
                     "batches": [dataclasses.asdict(b) for b in r.batches]} for r in results],
    }


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _short(s: dict) -> str:
    return (f"{s['events_per_s']:,.0f} events/s, {s['ms_per_batch']:,.0f} ms/batch, "
            f"state {s['state_bytes_mean'] / 1024:,.1f} KB/batch (max {s['state_bytes_max'] / 1024:,.1f})")


# ---------------------------------------------------------------- reporting


def _ratio(a, b) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def _median_run(runs: list) -> dict:
    """The run whose ms per batch is the median of the rounds (its other figures with it)."""
    ok = sorted((r for r in runs if "skipped" not in r["summary"]), key=lambda r: r["summary"]["ms_per_batch"])
    return ok[(len(ok) - 1) // 2] if ok else runs[0]


def _time_vs_floor(runs: list, floor_runs: list):
    """Median over rounds of (ms per batch / the floor's in the same round); None without a floor."""
    floor_ms = {r.get("round", 0): r["summary"]["ms_per_batch"] for r in floor_runs if "skipped" not in r["summary"]}
    ratios = sorted(r["summary"]["ms_per_batch"] / floor_ms[r.get("round", 0)] for r in runs
                    if "skipped" not in r["summary"] and r.get("round", 0) in floor_ms)
    if not ratios:
        return None
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def table(report: dict) -> str:
    rounds = report["config"].get("rounds", 1)
    head = (f"{'contender':<28} {'events/s':>10} {'ms/batch':>9} {'time/floor':>10} "
            f"{'state KB/batch':>14} {'median KB':>9} {'max KB':>9} {'ours ev/s':>10} {'ours bytes':>10}"
            + (f" {'ms/batch of the rounds':>24}" if rounds > 1 else ""))
    lines = [f"Spark {report['spark_version']}, local[2], {report['config']['partitions']} partitions, "
             f"{report['config']['batches']} batches ({report['config']['warmup']} warm-up left out), "
             f"buffer count {report['config']['count']}"
             + (f", {rounds} rounds per contender (median shown)" if rounds > 1 else "")]
    groups: dict[tuple, dict] = {}
    for r in report["results"]:
        groups.setdefault((r["scenario"], r["keys"]), {}).setdefault(r["contender"], []).append(r)
    for (scenario, keys), by_name in groups.items():
        src = report["sources"][f"{scenario}/{keys}"]
        lines += ["", f"{scenario}, K = {keys:,}: {src['events_per_batch']:,} events per batch, "
                      f"source file {src['source_file_bytes'] / 1024:,.1f} KB per batch", head, "-" * len(head)]
        floor_runs = next((runs for runs in by_name.values() if runs[0]["role"] == "floor"), [])
        ours_runs = next((runs for runs in by_name.values() if runs[0]["role"] == "ours"), [])
        ours = _median_run(ours_runs)["summary"] if ours_runs else None
        if ours and "skipped" in ours:
            ours = None
        for name, runs in by_name.items():
            r = _median_run(runs)
            s = r["summary"]
            if "skipped" in s:
                lines.append(f"{name:<28} {s['skipped']}")
                continue
            vs_ours_ev = _ratio(ours["events_per_s"], s["events_per_s"]) if ours and r["role"] == "peer" else ""
            vs_ours_b = _ratio(ours["state_bytes_mean"], s["state_bytes_mean"]) if ours and r["role"] == "peer" else ""
            vs_floor = _time_vs_floor(runs, floor_runs)
            spread = ", ".join(f"{x['summary']['ms_per_batch']:,.0f}" for x in runs if "skipped" not in x["summary"])
            lines.append(
                f"{name:<28} {s['events_per_s']:>10,.0f} {s['ms_per_batch']:>9,.0f} "
                f"{(f'{vs_floor:.2f}x' if vs_floor else '-'):>10} "
                f"{s['state_bytes_mean'] / 1024:>14,.1f} {s['state_bytes_median'] / 1024:>9,.1f} "
                f"{s['state_bytes_max'] / 1024:>9,.1f} "
                f"{vs_ours_ev:>10} {vs_ours_b:>10}" + (f" {spread:>24}" if rounds > 1 else ""))
    lines += ["", "state KB/batch: mean of the steady batches (spikes included); median: a typical batch; "
                  "max: the largest spike.",
              "time/floor: ms per batch over the floor's (with rounds: the median of each round's ratio); "
              "ours ev/s, ours bytes: spark_ops over that peer (events/s: higher is better; bytes: lower is better)."]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple, list] = {}
    for r in report["results"]:
        if r["batches"]:
            groups.setdefault((r["scenario"], r["keys"]), []).append(r)
    if not groups:
        return
    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 3.6 * len(groups)), squeeze=False)
    warmup = report["config"]["warmup"]
    for row, ((scenario, keys), rows) in zip(axes, groups.items()):
        for r in rows:
            ids = [b["batch_id"] for b in r["batches"]]
            label = r["contender"] + (f" (round {r['round'] + 1})" if r.get("round") else "")
            row[0].plot(ids, [b["state_bytes"] / 1024 for b in r["batches"]], marker=".", label=label)
            row[1].plot(ids, [b["ms"] for b in r["batches"]], marker=".", label=label)
        for ax, title in zip(row, ("state KB written per batch", "ms per batch")):
            ax.axvspan(-0.5, warmup - 0.5, color="0.9")
            ax.set_title(f"{scenario}, K = {keys:,}: {title}")
            ax.set_xlabel("batch id")
            ax.grid(alpha=0.3)
        row[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.report:
        report = json.loads(Path(args.report).read_text())
    else:
        report = run(args)
        (out / "spark_vs_tws.json").write_text(json.dumps(report, indent=1, default=str))
    if not args.no_plot:
        plot(report, out / "spark_vs_tws.png")
    print(json.dumps(report, indent=1, default=str) if args.json else table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
