"""Bytes each checkpoint writes to storage: objectspace's differential saves against
whole-state checkpoints through the same dkv store, and objectspace's speed against the
builtin collections, in one run.

    python benchmarks/checkpoint_bytes.py                   # defaults: about a minute
    python benchmarks/checkpoint_bytes.py --keys 200 --ops 50000 --json
    python benchmarks/checkpoint_bytes.py --only a --hours 3 --plot bench-output/a.png

(a) The reference document's buffer: one ~200-byte event every 29.9 s into a buffer of 100
    (emitted and cleared when full), a checkpoint every 60 s, one simulated hour. Every byte
    each checkpoint adds to the store folder (WAL segment, manifest, anything else) for:
    differential (a queue), whole-object (one value holding the buffer: what a
    whole-object checkpoint writes) and a full objectspace save. The ideal — each event
    written once — is about 21x fewer bytes than whole-object.
(b) 1,000 keys x 2 events per key per checkpoint into buffers of 100: bytes per checkpoint
    against the raw changed payload (the encoded events added).
(c) Operations per second of queue append/popleft, list set/get, dict set/get, sorted dict
    set/irange against the builtin twin, and the hot path (append + save + on_saved).

The stores of (a) and (b) use the dkv options an operator's state is kept with
(``spark_ops`` ``DKV_OPTIONS``); ``--store notebook`` uses ``ObjectSpace.open``'s defaults
instead, which put small checkpoints inside their manifests (one file per commit, more bytes).

Bytes are measured by listing the store folder before and after each checkpoint (new
files and growth of existing ones), so everything dkv writes is counted.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dkv  # noqa: E402
from _report import folder_sizes, grown, table, write_json  # noqa: E402
from objectspace import ObjectSpace  # noqa: E402
from objectspace._codec import encode  # noqa: E402
from sortedcontainers import SortedDict  # noqa: E402

HAVE_DKV = hasattr(dkv, "open")


# -- measuring what a checkpoint writes ------------------------------------------------------

class Store:
    """A fresh dkv folder store with a space on it; ``checkpoint`` returns bytes written."""

    def __init__(self, root: str, name: str, dkv_options: dict, kind: str = "operator") -> None:
        self.path = os.path.join(root, name)
        self.db = None
        if kind == "notebook":          # ObjectSpace.open's defaults (RFC 0006, 0007)
            self.space = ObjectSpace.open(self.path, fsync=False, **dkv_options)
        else:                           # the options a spark_ops operator's state uses
            from spark_ops._budget import DKV_OPTIONS
            self.db = dkv.open(self.path, fsync=False, **{**DKV_OPTIONS, **dkv_options})
            self.space = ObjectSpace(self.db)
        self.epoch = 0
        self.before = folder_sizes(self.path)

    def checkpoint(self, full: bool = False) -> int:
        self.epoch += 1
        self.space.checkpoint(self.epoch, full=full)
        if hasattr(self.space.db, "wait_idle"):     # flushes and compactions count too
            self.space.db.wait_idle()
        after = folder_sizes(self.path)
        written = sum(grown(self.before, after).values())
        self.before = after
        return written

    def close(self) -> None:
        self.space.close()
        if self.db is not None:
            self.db.close()


WORDS = ("the quick brown fox jumps over lazy dog click view cart order paid shipped user item "
         "price page home search result error retry ok true false null session device mobile web").split()


def make_event(rng: random.Random, i: int, size: int, payload: str) -> dict:
    """An event of about ``size`` encoded bytes: a few typed fields and a payload that is
    ``random`` bytes (incompressible: bytes written ~ bytes stored), ``hex`` digits or
    ``text`` words (compressible, like most JSON events); ``realistic``: an order event of
    ids, a price, a quantity, a random token and a short text instead of one payload."""
    n = max(1, size - 62)
    if payload == "realistic":      # ids, a price, a random token and a short text (issue 15)
        words = []
        while sum(map(len, words)) + len(words) < max(8, size - 110):
            words.append(rng.choice(WORDS))
        return {"id": i, "ts": 1_700_000_000_000 + i * 29_900, "user": f"user-{rng.randrange(10_000)}",
                "order": f"ord-{rng.randrange(10**9):09d}", "price": round(rng.uniform(1, 500), 2),
                "qty": rng.randrange(1, 20), "token": rng.randbytes(8).hex(), "text": " ".join(words)}
    if payload == "random":
        body = rng.randbytes(n)
    elif payload == "hex":
        body = rng.randbytes(n // 2).hex()
    else:
        words: list = []
        while sum(map(len, words)) + len(words) < n:
            words.append(rng.choice(WORDS))
        body = " ".join(words)[:n]
    return {"id": i, "ts": 1_700_000_000_000 + i * 29_900, "user": f"user-{i % 97}", "kind": "click",
            "payload": body}


# -- (a) the buffer scenario ------------------------------------------------------------------

def scenario_a(args, root: str, payload_kind: str) -> dict:
    rng = random.Random(1)
    strategies = ("differential", "whole_object", "full_save")
    stores = {s: Store(root, f"a-{payload_kind}-{s}", args.dkv_options, args.store) for s in strategies}
    queue = stores["differential"].space.create_queue("buffer")
    fq = stores["full_save"].space.create_queue("buffer")
    value = stores["whole_object"].space.create_value("buffer", [])
    buffer: list = []
    per_cp: dict = {s: [] for s in strategies}
    events = payload = 0
    for j in range(1, int(args.hours * 3600 // args.checkpoint_every) + 1):
        while events * args.interval <= j * args.checkpoint_every:   # events up to this checkpoint
            ev = make_event(rng, events, args.event_bytes, payload_kind)
            events += 1
            payload += len(encode(ev))
            queue.append(ev)
            fq.append(ev)
            buffer.append(ev)
            value.value = list(buffer)
            if len(buffer) == args.buffer:          # the buffer is emitted and cleared
                queue.clear()
                fq.clear()
                buffer = []
                value.value = []
        for s, store in stores.items():
            per_cp[s].append(store.checkpoint(full=(s == "full_save")))
    for store in stores.values():
        store.close()
    total = {s: sum(v) for s, v in per_cp.items()}
    n = len(per_cp["differential"])
    return {
        "events": events, "event_payload_bytes": payload, "checkpoints": n,
        "bytes": total, "per_checkpoint": per_cp,
        "ratio_whole_over_differential": total["whole_object"] / total["differential"],
        "ratio_full_over_differential": total["full_save"] / total["differential"],
        "ideal_ratio": total["whole_object"] / payload if payload else None,
        "fixed_bytes_per_checkpoint": (total["differential"] - payload) / max(1, n),
    }


# -- (b) many keys ----------------------------------------------------------------------------

def scenario_b(args, root: str, payload_kind: str) -> dict:
    rng = random.Random(2)
    diff = Store(root, f"b-{payload_kind}-differential", args.dkv_options, args.store)
    whole = Store(root, f"b-{payload_kind}-whole", args.dkv_options, args.store) if args.whole_b else None
    queues = [diff.space.create_queue((f"key-{k}", "buffer")) for k in range(args.keys)]
    values = [whole.space.create_value((f"key-{k}", "buffer"), []) for k in range(args.keys)] if whole else []
    buffers = [[] for _ in range(args.keys)]
    rows, i = [], 0
    diff.checkpoint()                               # the empty queues: not part of the steady state
    if whole:
        whole.checkpoint()
    for _ in range(args.b_checkpoints):
        changed = 0
        for k in range(args.keys):
            for _ in range(args.events_per_key):
                ev = make_event(rng, i, args.event_bytes, payload_kind)
                i += 1
                changed += len(encode(ev))
                queues[k].append(ev)
                buffers[k].append(ev)
                if len(buffers[k]) == args.buffer:
                    queues[k].clear()
                    buffers[k] = []
            if whole:
                values[k].value = list(buffers[k])
        row = {"changed_payload": changed, "differential": diff.checkpoint()}
        if whole:
            row["whole_object"] = whole.checkpoint()
        rows.append(row)
    diff.close()
    if whole:
        whole.close()
    ratios = [r["differential"] / r["changed_payload"] for r in rows]
    out = {"keys": args.keys, "events_per_key": args.events_per_key, "checkpoints": len(rows), "rows": rows,
           "mean_ratio_to_payload": sum(ratios) / len(ratios), "max_ratio_to_payload": max(ratios)}
    if whole:
        out["mean_whole_over_differential"] = (sum(r["whole_object"] for r in rows)
                                               / sum(r["differential"] for r in rows))
    return out


# -- (c) speed against the builtin twins ------------------------------------------------------

def _rate(fn, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        fn(n)
        best = min(best, time.perf_counter() - t)
    return n / best


def scenario_c(args) -> list[dict]:
    db = dkv.open(f"memory://checkpoint-bytes-{os.getpid()}") if HAVE_DKV else None
    rows = []

    # the hot path of an operator: one small append, then save, write and confirm, in a space
    # of 10,000 small queues with one of them dirty
    space = ObjectSpace(db, prefix=b"\x00\x00\x00hot")
    queues = [space.create_queue((f"user-{k}", "items")) for k in range(10_000)]
    space.save()
    space.on_saved()
    hot = queues[4242]

    def hot_path(n):
        for i in range(n):
            hot.append(i)
            db.write(space.save())
            space.on_saved()

    def hot_path_pop(n):          # a buffer in steady state: one in, one out
        for i in range(n):
            hot.append(i)
            hot.popleft()
            db.write(space.save())
            space.on_saved()
    for name, fn in (("append + save + db.write + on_saved", hot_path),
                     ("append + popleft + save + db.write + on_saved", hot_path_pop)):
        rate = _rate(fn, min(args.ops, 20_000))
        rows.append({"operation": name, "objectspace ops/s": rate, "builtin ops/s": None,
                     "builtin/ours": None, "us/op": 1e6 / rate})

    # many small objects: one queue per key, as an operator keeps per-key state (best of 3)
    nkeys = args.keys * 10
    labels = [f"get_or_create_queue x {nkeys:,} (new keys)", f"save + write + on_saved of {nkeys:,} new queues",
              f"get_queue + 2 appends x {nkeys:,} keys", f"save + write + on_saved of {nkeys:,} dirty queues"]
    best = [float("inf")] * 4
    for rep in range(3):
        keyed = ObjectSpace(db, prefix=b"\x00\x00\x00keys%d" % rep)
        names = [(f"key-{k}", "buffer") for k in range(nkeys)]

        def two_appends():
            for k, name in enumerate(names):
                q = keyed.get_queue(name)
                q.append({"e": k})
                q.append({"e": -k})
        steps = [lambda: [keyed.get_or_create_queue(n) for n in names],
                 lambda: (db.write(keyed.save()), keyed.on_saved()),
                 two_appends,
                 lambda: (db.write(keyed.save()), keyed.on_saved())]
        for i, step in enumerate(steps):
            t = time.perf_counter()
            step()
            best[i] = min(best[i], time.perf_counter() - t)
    for label, dt in zip(labels, best):
        rows.append({"operation": label, "objectspace ops/s": nkeys / dt, "builtin ops/s": None,
                     "builtin/ours": None, "us/op": 1e6 * dt / nkeys})

    space = ObjectSpace(db, prefix=b"\x00\x00\x00bench", cache_items=max(4096, args.ops))
    n = args.ops
    keys = list(range(n))
    random.Random(3).shuffle(keys)

    def pair(name, ours, twin, calls=n):
        a, b = _rate(ours, calls), _rate(twin, calls)
        rows.append({"operation": name, "objectspace ops/s": a, "builtin ops/s": b, "builtin/ours": b / a,
                     "us/op": 1e6 / a})

    q, dq = space.create_queue("q"), collections.deque()
    pair("queue append", lambda n: [q.append(i) for i in range(n)], lambda n: [dq.append(i) for i in range(n)])
    pair("queue popleft", lambda n: [q.popleft() for _ in range(n)], lambda n: [dq.popleft() for _ in range(n)])
    lst, pl = space.create_list("l", range(n)), list(range(n))
    pair("list set", lambda n: [lst.__setitem__(k, k) for k in keys[:n]], lambda n: [pl.__setitem__(k, k) for k in keys[:n]])
    pair("list get", lambda n: [lst[k] for k in keys[:n]], lambda n: [pl[k] for k in keys[:n]])
    d, pd = space.create_dict("d"), {}
    pair("dict set", lambda n: [d.__setitem__(k, k) for k in keys[:n]], lambda n: [pd.__setitem__(k, k) for k in keys[:n]])
    pair("dict get", lambda n: [d[k] for k in keys[:n]], lambda n: [pd[k] for k in keys[:n]])
    sd, psd = space.create_sorted_dict("sd"), SortedDict()
    pair("sorted dict set", lambda n: [sd.__setitem__(k, k) for k in keys[:n]],
         lambda n: [psd.__setitem__(k, k) for k in keys[:n]])
    pair("sorted dict irange (10 keys)", lambda n: [list(sd.irange(k, k + 9)) for k in keys[:n]],
         lambda n: [list(psd.irange(k, k + 9)) for k in keys[:n]], calls=n // 10)
    if db is not None:
        db.close()
    return rows


# -- output -----------------------------------------------------------------------------------

def plot(results: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = [k for k in ("a", "b", "c") if isinstance(results.get(k), (dict, list))]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.8), squeeze=False)
    styles = ["-", "--", ":"]
    for ax, key in zip(axes[0], panels):
        r = results[key]
        if key == "a":
            for style, (kind, ra) in zip(styles, r.items()):
                for color, (s, vals) in zip("C0 C1 C2".split(), ra["per_checkpoint"].items()):
                    cum, acc = [], 0
                    for v in vals:
                        acc += v
                        cum.append(acc / 1024)
                    ax.plot(range(1, len(cum) + 1), cum, style, color=color, label=f"{s.replace('_', ' ')} ({kind})")
            ax.set(title="(a) buffer of 100, one event / 29.9 s, checkpoint / 60 s", xlabel="checkpoint",
                   ylabel="KiB written (cumulative)")
            ax.legend(fontsize=8)
        elif key == "b":
            for style, (kind, rb) in zip(styles, r.items()):
                xs = range(1, len(rb["rows"]) + 1)
                ax.plot(xs, [row["differential"] / 1024 for row in rb["rows"]], style, color="C0",
                        label=f"differential ({kind})")
                ax.plot(xs, [row["changed_payload"] / 1024 for row in rb["rows"]], style, color="C3",
                        label=f"raw changed payload ({kind})")
                if "whole_object" in rb["rows"][0]:
                    ax.plot(xs, [max(1, row["whole_object"]) / 1024 for row in rb["rows"]], style, color="C1",
                            label=f"whole object ({kind})")
            first = next(iter(r.values()))
            ax.set(title=f"(b) {first['keys']} keys x {first['events_per_key']} events / checkpoint",
                   xlabel="checkpoint", ylabel="KiB written per checkpoint", yscale="log")
            ax.legend(fontsize=8)
        else:
            rows = [row for row in r if row.get("builtin/ours")]
            ax.barh([row["operation"] for row in rows], [row["builtin/ours"] for row in rows])
            ax.set(title="(c) builtin ops/s / objectspace ops/s", xlabel="times slower than the builtin twin")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


def report(results: dict) -> None:
    a = results.get("a")
    if isinstance(a, dict):
        rows = []
        for kind, ra in a.items():
            for s, b in ra["bytes"].items():
                rows.append({"payload": kind, "strategy": s, "bytes": b, "per checkpoint": b / ra["checkpoints"],
                             "vs differential": b / ra["bytes"]["differential"]})
            rows.append({"payload": kind, "strategy": "each event once (raw)", "bytes": ra["event_payload_bytes"],
                         "per checkpoint": ra["event_payload_bytes"] / ra["checkpoints"],
                         "vs differential": ra["event_payload_bytes"] / ra["bytes"]["differential"]})
        first = next(iter(a.values()))
        table(rows, ["payload", "strategy", "bytes", "per checkpoint", "vs differential"],
              f"(a) buffer scenario: {first['events']} events, {first['checkpoints']} checkpoints "
              "(target: whole object >= 12x differential)")
        for kind, ra in a.items():
            print(f"    {kind}: whole object / differential = {ra['ratio_whole_over_differential']:.1f}x, "
                  f"whole object / raw events = {ra['ideal_ratio']:.1f}x, differential fixed cost = "
                  f"{ra['fixed_bytes_per_checkpoint']:.0f} B per checkpoint")
    elif a:
        print(f"\n(a) {a}")
    b = results.get("b")
    if isinstance(b, dict):
        for kind, rb in b.items():
            rows = [{"checkpoint": i + 1, **row, "ratio": row["differential"] / row["changed_payload"]}
                    for i, row in enumerate(rb["rows"]) if i < 2 or i == len(rb["rows"]) - 1 or i % 10 == 9]
            cols = ["checkpoint", "changed_payload", "differential", "ratio"]
            cols += ["whole_object"] if "whole_object" in rb["rows"][0] else []
            table(rows, cols, f"(b) payload {kind}: {rb['keys']} keys x {rb['events_per_key']} events per checkpoint; "
                              f"bytes written / raw changed payload = {rb['mean_ratio_to_payload']:.2f} mean, "
                              f"{rb['max_ratio_to_payload']:.2f} max (target <= 1.0)")
    elif b:
        print(f"\n(b) {b}")
    c = results.get("c")
    if c:
        table(c, ["operation", "objectspace ops/s", "builtin ops/s", "builtin/ours", "us/op"],
              "(c) speed against the builtin twin, same run (memory; only the hot path saves)")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="abc", help="which scenarios to run (subset of 'abc')")
    p.add_argument("--hours", type=float, default=1.0, help="(a) simulated hours")
    p.add_argument("--interval", type=float, default=29.9, help="(a) seconds between events")
    p.add_argument("--checkpoint-every", type=float, default=60.0, help="(a) seconds between checkpoints")
    p.add_argument("--buffer", type=int, default=100, help="(a, b) buffer size")
    p.add_argument("--event-bytes", type=int, default=200, help="(a, b) approximate encoded event size")
    p.add_argument("--payloads", default="random,text",
                   help="(a, b) event payload kinds, comma-separated: random (incompressible), hex, text")
    p.add_argument("--keys", type=int, default=1000, help="(b) keys")
    p.add_argument("--events-per-key", type=int, default=2, help="(b) events per key per checkpoint")
    p.add_argument("--b-checkpoints", type=int, default=60, help="(b) checkpoints")
    p.add_argument("--no-whole-b", dest="whole_b", action="store_false", help="(b) skip the whole-object store")
    p.add_argument("--ops", type=int, default=100_000, help="(c) operations per measurement")
    p.add_argument("--dkv-option", action="append", default=[], metavar="NAME=VALUE",
                   help="dkv option for the stores of (a) and (b), e.g. max_replay_bytes=1048576")
    p.add_argument("--store", choices=("operator", "notebook"), default="operator",
                   help="(a, b) the stores' options: an operator's (spark_ops' dkv options, as its state "
                        "is kept) or a notebook's (ObjectSpace.open's defaults: small checkpoints inside "
                        "their manifests)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write the results as JSON to PATH (stdout when no PATH)")
    p.add_argument("--plot", default="bench-output/checkpoint_bytes.png", help="PNG path ('' to skip)")
    args = p.parse_args(argv)
    args.dkv_options = {k: json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
                        for k, v in (o.split("=", 1) for o in args.dkv_option)}
    results: dict = {"args": {k: v for k, v in vars(args).items() if k != "dkv_options"}}
    root = tempfile.mkdtemp(prefix="checkpoint-bytes-")
    try:
        for key, fn in (("a", scenario_a), ("b", scenario_b)):
            if key in args.only:
                results[key] = ({kind: fn(args, root, kind) for kind in args.payloads.split(",")}
                                if HAVE_DKV else "dkv not available")
        if "c" in args.only:
            results["c"] = scenario_c(args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json == "-":
        json.dump(results, sys.stdout, indent=2, default=str)
        print()
    else:
        report(results)
        if args.json:
            write_json(args.json, results)
    if args.plot:
        plot(results, args.plot)
        if args.json != "-":
            print(f"\nplot: {args.plot}")
    return results


if __name__ == "__main__":
    main()
