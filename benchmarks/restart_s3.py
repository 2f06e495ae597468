"""What a restart on S3 reads before its first batch is done: lazy tables against whole ones.

    scripts/env.sh python benchmarks/restart_s3.py                       # 20,000 keys, quick
    scripts/env.sh python benchmarks/restart_s3.py --keys 100000 --latency-ms 20 --mbps 50

Writes the state of ``--keys`` keys as a buffer operator keeps it (a queue of ``--items``
rows each, in objectspace on dkv) to a moto S3 server over HTTP, as a long run leaves it
(checkpointed, flushed and compacted into tables), then restarts it as a new machine would:
a fresh process and an empty local cache folder, through a proxy that gives every request
``--latency-ms`` of first-byte latency and each connection ``--mbps`` of bandwidth. The
restarted space reads (and appends one row to) ``--fractions`` of the keys, as a first batch
that touches those keys would, and checkpoints. Each fraction runs with the SSTs fetched whole
at their first read (``range_read_cost=0``, dkv before issue 34's restart item), with
dkv's default (tables read by range while that costs less than fetching them, then fetched
whole in parallel parts), and with the keys named to ``ObjectSpace.prefetch`` first (a
chunk of 16,384 at a time, as a spark_ops task's rows come), in alternating order
(``--modes``), and the table prints the GETs, the bytes they answered, and the seconds
from open to the checkpoint's end, as ratios to the first mode.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BUCKET = "restart-bench"


def _row(rng: random.Random, key: int, i: int) -> dict:
    return {"user": key, "ts": 1_700_000_000_000 + i, "value": rng.random(), "page": f"/p/{rng.randrange(1000)}"}


def build(endpoint: str, url: str, keys: int, items: int) -> dict:
    """The state, checkpointed, flushed and compacted; its tables' count and bytes."""
    from objectspace import ObjectSpace
    rng = random.Random(1)
    t0 = time.perf_counter()
    with ObjectSpace.open(url, endpoint_url=endpoint, max_replay_bytes=1) as space:
        for k in range(keys):
            q = space.get_or_create_queue(("u", k))
            q.extend(_row(rng, k, i) for i in range(items))
            if k % 20_000 == 19_999:
                space.checkpoint()
        space.checkpoint()
        space.db.compact(full=True)
        space.db.wait_idle()
        space.checkpoint()
        levels = space.db.stats()["levels"]
    return {"tables": sum(lv["tables"] for lv in levels), "table_bytes": sum(lv["bytes"] for lv in levels),
            "build_s": round(time.perf_counter() - t0, 1)}


PREFETCH_CHUNK = 16_384
"""Keys named to a prefetch at once: a spark_ops task's chunk of rows."""


def restart(endpoint: str, url: str, keys: int, fraction: float, cost: int | None, cache_dir: str,
            prefetch: bool = False, index: bool = True) -> dict:
    """One restart (run in a fresh process): open, touch the fraction's keys, checkpoint;
    ``prefetch``: the keys are named to ``ObjectSpace.prefetch`` first, a chunk at a time."""
    from objectspace import ObjectSpace
    rng = random.Random(2)
    touched = rng.sample(range(keys), max(1, round(keys * fraction)))
    opts = {} if cost is None else {"range_read_cost": cost}
    t0 = time.perf_counter()
    with ObjectSpace.open(url, endpoint_url=endpoint, cache_dir=cache_dir, **opts) as space:
        n = 0
        t_prefetch = time.perf_counter()
        if prefetch:
            for i in range(0, len(touched), PREFETCH_CHUNK):
                space.prefetch([("u", k) for k in touched[i:i + PREFETCH_CHUNK]], index=index)
        t_prefetch = time.perf_counter() - t_prefetch
        for k in touched:
            q = space.get_or_create_queue(("u", k))
            n += len(list(q))
            q.append(_row(rng, k, 10_000))
        space.checkpoint()
    return {"seconds": time.perf_counter() - t0, "prefetch_seconds": t_prefetch, "items_read": n}


OPERATOR_BATCH_KEYS = 50_000
"""Keys a batch of the operator's build carries (two rows each)."""


OPERATOR_MEMORY = "64m"
"""The shards' budget: at 100,000 keys a state in tables (as 1,000,000 keys leave it at the
default budget), not only in WAL segments, which a restart fetches whole whatever it reads."""


def _harness(endpoint: str, url: str, cache_dir: str, **dkv_options):
    """A shard process's view of the operator's state: a buffer of 20 rows per key, 2 shards."""
    from spark_ops.operators import Buffer
    from spark_ops.testing import OperatorHarness
    return OperatorHarness(Buffer(count=20, key_columns=("user",)), key="user", state=url, partitions=2,
                           memory=OPERATOR_MEMORY,
                           dkv_options={"endpoint_url": endpoint, "cache_dir": cache_dir, **dkv_options})


def build_operator(endpoint: str, url: str, keys: int, items: int, cache_dir: str) -> dict:
    """The state a spark_ops buffer leaves after ``items`` rows per key (two a key a batch),
    as a run leaves it: its checkpoints, tables and WAL segments as they come."""
    rng = random.Random(1)
    t0 = time.perf_counter()
    h = _harness(endpoint, url, cache_dir, flush_segments=2)     # tables, as a long run leaves them
    for i in range(0, items, 2):
        for lo in range(0, keys, OPERATOR_BATCH_KEYS):
            h.run_batch([_row(rng, k, i + j) for k in range(lo, min(keys, lo + OPERATOR_BATCH_KEYS)) for j in (0, 1)])
    batches = h.batch_id
    h.close()
    import dkv
    tables = table_bytes = 0
    for name in dkv.instances(url, endpoint_url=endpoint):      # the shards' newest layout
        with dkv.open(url, instance=name, read_only=True, endpoint_url=endpoint, cache_dir=cache_dir) as db:
            levels = db.stats()["levels"]
        tables += sum(lv["tables"] for lv in levels)
        table_bytes += sum(lv["bytes"] for lv in levels)
    return {"tables": tables, "table_bytes": table_bytes, "batches": batches,
            "build_s": round(time.perf_counter() - t0, 1)}


def restart_operator(endpoint: str, url: str, keys: int, fraction: float, cost: int | None, cache_dir: str,
                     prefetch: bool = False, index: bool = True, batches: int = 0) -> dict:
    """One restart of the operator (a fresh process): its first batch, one row for each of
    the fraction's keys; without ``prefetch`` the shards do not prefetch (as before)."""
    if not prefetch:
        from spark_ops._shardstate import ShardState
        ShardState.prefetch_heads = lambda self: None      # type: ignore[method-assign]
        ShardState.prefetch = lambda self, events: None     # type: ignore[method-assign]
    rng = random.Random(2)
    touched = sorted(rng.sample(range(keys), max(1, round(keys * fraction))))
    h = _harness(endpoint, url, cache_dir, **({} if cost is None else {"range_read_cost": cost}))
    h.batch_id = batches
    t0 = time.perf_counter()
    out = h.run_batch([_row(rng, k, 10_000) for k in touched])
    seconds = time.perf_counter() - t0
    h.close()
    got = [m for m in h.metrics if m["batch"] == batches]
    return {"seconds": seconds, "prefetch_seconds": sum(m.get("prefetch", {}).get("ms", 0) for m in got) / 1000,
            "items_read": len(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--fractions", default="0.0005,0.005,0.05,1")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--mbps", type=float, default=50.0, help="one connection's bandwidth, MB/s")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--modes", default="whole,lazy,prefetch",
                    help="comma-separated: whole (range_read_cost=0), lazy (dkv's default), 'lazy N' (N MiB), "
                         "prefetch (lazy, the keys named to ObjectSpace.prefetch first), whole+prefetch, "
                         "prefetch-objects (without the index ranges); the first is the ratios' basis")
    ap.add_argument("--operator", action="store_true",
                    help="the state of a spark_ops buffer (2 shards, OperatorHarness), restarted by its first batch; "
                         "modes without 'prefetch' turn the shards' prefetch off (as before)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--_restart", help=argparse.SUPPRESS)      # a child: JSON of restart()'s arguments
    args = ap.parse_args()
    if args._restart:
        child = json.loads(args._restart)
        fn = restart_operator if child.pop("operator", False) else restart
        print(json.dumps(fn(**child)))
        return

    from tests import s3_support
    os.environ.update(s3_support.AWS_ENV)
    work = tempfile.mkdtemp(prefix="restart-s3-")
    moto, endpoint = s3_support.start_moto(os.path.join(work, "moto.log"))
    proxy = s3_support.fault_proxy_class()(endpoint)
    try:
        import boto3
        boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=BUCKET)
        url = f"s3://{BUCKET}/state-{uuid.uuid4().hex[:8]}"
        if args.operator:
            state = build_operator(endpoint, url, args.keys, args.items, os.path.join(work, "writer-cache"))
        else:
            state = build(endpoint, url, args.keys, args.items)
        print(f"state: {args.keys:,} keys x {args.items} rows, {state['tables']} tables, "
              f"{state['table_bytes'] / 1e6:.1f} MB (built in {state['build_s']} s)", flush=True)
        proxy.latency_seconds = args.latency_ms / 1000
        proxy.bytes_per_second = args.mbps * 1e6
        results = []
        modes = args.modes.split(",")
        for fraction in [float(f) for f in args.fractions.split(",")]:
            for r in range(args.rounds):
                for mode in (modes if r % 2 == 0 else modes[::-1]):
                    cache = os.path.join(work, f"cache-{uuid.uuid4().hex[:8]}")     # a new machine's
                    proxy.log.clear()
                    proxy.sent.clear()
                    where = url
                    if args.operator:       # its first batch changes the state: each restart gets a copy
                        where = f"{url}-{uuid.uuid4().hex[:8]}"
                        _copy_prefix(endpoint, url, where)
                    child = json.dumps({"endpoint": proxy.endpoint, "url": where, "keys": args.keys,
                                        "fraction": fraction, "cache_dir": cache, **_mode(mode),
                                        **({"operator": True, "batches": state["batches"]} if args.operator else {})})
                    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--_restart", child],
                                         check=True, capture_output=True, text=True, cwd=ROOT)
                    res = json.loads(out.stdout.strip().splitlines()[-1])
                    gets = sum(1 for kind, *_ in proxy.log if kind == "GET")
                    results.append({"fraction": fraction, "round": r, "mode": mode,
                                    "gets": gets, "get_bytes": proxy.sent["GET"], **res})
                    shutil.rmtree(cache, ignore_errors=True)
                    print(f"  {fraction:g} {results[-1]['mode']}: {gets} GETs, {proxy.sent['GET'] / 1e6:.2f} MB, "
                          f"{res['seconds']:.2f} s (prefetch {res['prefetch_seconds']:.2f})", flush=True)
        _table(args, state, results)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "state": state, "results": results}, f, indent=1)
    finally:
        proxy.close()
        s3_support.stop(moto)
        shutil.rmtree(work, ignore_errors=True)


def _copy_prefix(endpoint: str, src: str, dst: str) -> None:
    """Copy every object under the s3:// URL ``src`` to ``dst`` (same bucket), server-side."""
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    a, b = src.split("/", 3)[3], dst.split("/", 3)[3]
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=a + "/"):
        for obj in page.get("Contents", []):
            client.copy_object(Bucket=BUCKET, Key=b + obj["Key"][len(a):],
                               CopySource={"Bucket": BUCKET, "Key": obj["Key"]})


def _mode(mode: str) -> dict:
    """restart()'s arguments for a mode of --modes."""
    if mode.startswith("lazy "):
        return {"cost": int(float(mode.split()[1]) * (1 << 20))}
    known = {"whole": {"cost": 0}, "lazy": {"cost": None}, "prefetch": {"cost": None, "prefetch": True},
             "whole+prefetch": {"cost": 0, "prefetch": True},
             "prefetch-objects": {"cost": None, "prefetch": True, "index": False}}
    if mode not in known:
        raise SystemExit(f"unknown mode {mode!r} in --modes; known: {', '.join(known)}, 'lazy N'")
    return known[mode]


def _table(args, state: dict, results: list) -> None:
    base, *modes = dict.fromkeys(r["mode"] for r in results)
    print(f"\n| keys touched | {base}: GETs, MB, s | " + " | ".join(f"{m}: GETs, MB, s (ratios to {base})" for m in modes)
          + " |")
    print("|---|---|" + "---|" * len(modes))
    for fraction in dict.fromkeys(r["fraction"] for r in results):
        def med(mode: str, field: str) -> float:
            return statistics.median(r[field] for r in results if r["fraction"] == fraction and r["mode"] == mode)
        w = [med(base, f) for f in ("gets", "get_bytes", "seconds")]
        cells = []
        for m in modes:
            z = [med(m, f) for f in ("gets", "get_bytes", "seconds")]
            cells.append(f"{z[0]:.0f}, {z[1] / 1e6:.2f}, {z[2]:.2f} ({z[0] / max(w[0], 1):.2f}, "
                         f"{z[1] / max(w[1], 1):.3f}, {z[2] / w[2]:.2f})")
        print(f"| {fraction:g} ({max(1, round(args.keys * fraction)):,}) | {w[0]:.0f}, {w[1] / 1e6:.2f}, {w[2]:.2f} | "
              + " | ".join(cells) + " |")
    print(f"\n{state['tables']} tables, {state['table_bytes'] / 1e6:.1f} MB; {args.latency_ms:g} ms a request, "
          f"{args.mbps:g} MB/s a connection")


if __name__ == "__main__":
    main()
