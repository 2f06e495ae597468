"""Run every benchmark in turn, each side by side with its peers (what `make bench` runs).

    python benchmarks/run_all.py            # full sizes (about an hour on 2 cores, mostly Spark)
    python benchmarks/run_all.py --quick    # small sizes, a few minutes: a smoke run of every table
    python benchmarks/run_all.py --skip spark_vs_tws

Each benchmark prints its own table with ratios against the peers; this runner only chooses the
sizes, runs them one after another in fresh processes and reports which ones failed.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (full-size arguments, quick arguments)
BENCHMARKS = {
    "kv_bench": (["-n", "1000000", "--reopen-sizes", "100000,1000000"],
                 ["-n", "50000", "--reads", "20000", "--scans", "200", "--reopen-sizes", "20000",
                  "--churn-queues", "500", "--churn-checkpoints", "60", "--churn-warmup", "10",
                  "--long-checkpoints", "300", "--long-every", "100"]),
    "checkpoint_bytes": ([],
                         ["--hours", "0.2", "--b-checkpoints", "10", "--ops", "10000"]),
    "collections_bench": ([],
                          ["-n", "20000", "--commits", "60", "--commit-seconds", "2", "--reopens", "3"]),
    "spark_vs_tws": (["--keys", "1000,10000", "--batches", "30"],
                     ["--keys", "1000", "--batches", "8", "--warmup", "3"]),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: check that every benchmark runs")
    p.add_argument("--skip", default="", help=f"comma-separated names to leave out ({', '.join(BENCHMARKS)})")
    args = p.parse_args(argv)
    skip = {s for s in args.skip.split(",") if s}
    unknown = skip - set(BENCHMARKS)
    if unknown:
        p.error(f"unknown benchmark(s) in --skip: {', '.join(sorted(unknown))}; known: {', '.join(BENCHMARKS)}")
    failed = []
    for name, (full, quick) in BENCHMARKS.items():
        if name in skip:
            continue
        cmd = [sys.executable, str(HERE / f"{name}.py"), *(quick if args.quick else full)]
        print(f"\n=== {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        print(f"=== {name}: exit {rc} after {time.perf_counter() - t0:,.0f} s", flush=True)
        if rc:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
