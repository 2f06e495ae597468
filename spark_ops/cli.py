"""``python -m spark_ops``: what spark_ops keeps beside the objects of a state folder.
Read-only: nothing is ever written.

    python -m spark_ops timers LOCATION [--operator NAME] [--kind event|processing]
                                        [--instance PATH] [--key-group N] [--epoch E] [--json]

``timers`` lists the registered timers (kind, due time, key, name) of every operator
under LOCATION (a state root, a query's, operator's or shard's folder, or s3://...), at
checkpoint E (default: each operator's newest), in time order. The objects of the same
state are ``python -m objectspace``'s (ls, show, diff, stats). See docs/inspection.md.
"""
from __future__ import annotations

import argparse
import json
import sys

import dkv
import objectspace

from ._inspect import read_timers


def _dumps(v) -> str:
    return json.dumps(objectspace.to_jsonable(v), ensure_ascii=False, separators=(",", ":"))


def _table(rows: list, headers: list) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def cmd_timers(args):
    opts = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    rows = read_timers(args.location, epoch=args.epoch, instance=args.instance, operator=args.operator,
                       key_group=args.key_group, kind=args.kind, **opts)
    data = [{**r, "key": objectspace.to_jsonable(r["key"])} for r in rows]
    if not rows:
        return data, "(no timers)"
    text = _table([[r["operator"] or "", r["kind"], r["time"], r["time_utc"], r["key_group"], _dumps(r["key"]),
                    r["name"], r["epoch"]] for r in rows],
                  ["OPERATOR", "KIND", "TIME", "TIME (UTC)", "KEY GROUP", "KEY", "NAME", "EPOCH"])
    return data, f"{text}\n{len(rows)} timers"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m spark_ops", description=__doc__.split("\n\n")[0],
                                epilog="See docs/inspection.md.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("timers", help="registered timers (kind, time, key, name), in time order",
                       description="registered timers (kind, time, key, name), in time order")
    t.add_argument("location", help="state folder, s3://bucket/prefix or memory://name")
    t.add_argument("--instance", help="a shard, or every shard under this path (<query id>/<operator>)")
    t.add_argument("--operator", help="only this operator's timers")
    t.add_argument("--key-group", type=int, help="only this key group's timers")
    t.add_argument("--kind", choices=("event", "processing"), help="only event-time or processing-time timers")
    t.add_argument("--epoch", "--checkpoint", type=int, dest="epoch", help="checkpoint epoch (default newest)")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.add_argument("--endpoint-url", help="S3 endpoint (default: boto3's configuration)")
    t.set_defaults(fn=cmd_timers)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        data, text = args.fn(args)
    except (objectspace.ObjectSpaceError, dkv.DkvError, ValueError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str) if args.json else text)
    return 0


__all__ = ["main", "build_parser"]
