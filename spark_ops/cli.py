"""``python -m spark_ops``: what spark_ops keeps beside the objects of a state folder.

    python -m spark_ops timers LOCATION [--operator NAME] [--kind event|processing] [--key KEY]
                                        [--instance PATH] [--key-group N] [--epoch E] [--json]
    python -m spark_ops operators ROOT [--query ID] [--json]
    python -m spark_ops vars ROOT [--query ID] [--operator NAME] [--json]
    python -m spark_ops retire ROOT NAME... [--query ID]
    python -m spark_ops purge ROOT NAME... [--query ID]

``timers`` lists the registered timers (kind, due time, key, name) of every operator
under LOCATION (a state root, a query's, operator's or shard's folder, or s3://...), at
checkpoint E (default: each operator's newest), in time order. ``operators`` lists the
operators each query's state holds (active or retired, class, last batch, declared state
variables) and ``vars`` their state variables: kinds, version, objects and bytes (what
dropping one would free), and whether the latest code uses it. These read only. ``retire``
says that a query's code no longer has an operator (its state is kept, not resumed), and
``purge`` deletes a retired operator's state (docs/spark_ops.md, *Evolving an operator and
its state*). The objects of the same state are ``python -m objectspace``'s (ls, show, diff,
stats). See docs/inspection.md.
"""
from __future__ import annotations

import argparse
import json

import dkv
import objectspace
from dkv.cli import print_result, run_command

from ._inspect import read_timers
from .errors import SparkOpsError


def _dumps(v) -> str:
    return json.dumps(objectspace.to_jsonable(v), ensure_ascii=False, separators=(",", ":"))


def _table(rows: list, headers: list) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def cmd_timers(args):
    opts = {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}
    extra = {} if args.key is None else {"key": _parse_key(args.key)}
    rows = read_timers(args.location, epoch=args.epoch, instance=args.instance, operator=args.operator,
                       key_group=args.key_group, kind=args.kind, **extra, **opts)
    data = [{**r, "key": objectspace.to_jsonable(r["key"])} for r in rows]
    if not rows:
        return data, "(no timers)"
    text = _table([[r["operator"] or "", r["kind"], r["time"], r["time_utc"], r["key_group"], _dumps(r["key"]),
                    r["name"], r["epoch"]] for r in rows],
                  ["OPERATOR", "KIND", "TIME", "TIME (UTC)", "KEY GROUP", "KEY", "NAME", "EPOCH"])
    return data, f"{text}\n{len(rows)} timers"


def _opts(args) -> dict:
    return {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}


def cmd_operators(args):
    from ._inspect import read_operators
    rows = read_operators(args.location, query=args.query, **_opts(args))
    if not rows:
        return rows, "(no operators)"
    text = _table([[r["query_id"], r["operator"], r["status"], r["class"] or "", r["name_from"] or "",
                    "" if r["last_batch"] is None else r["last_batch"],
                    "-" if r["state_vars"] is None else ", ".join(sorted(r["state_vars"]))] for r in rows],
                  ["QUERY", "OPERATOR", "STATUS", "CLASS", "NAME FROM", "LAST BATCH", "DECLARED VARIABLES"])
    return rows, text


def cmd_vars(args):
    from ._inspect import read_vars
    rows = read_vars(args.location, query=args.query, operator=args.operator, **_opts(args))
    if not rows:
        return rows, "(no state variables)"
    text = _table([[r["query_id"], r["operator"], r["variable"], "/".join(r["kinds"]),
                    "" if r["version"] is None else r["version"], r["objects"], r["bytes"], r["status"]]
                   for r in rows],
                  ["QUERY", "OPERATOR", "VARIABLE", "KIND", "VERSION", "OBJECTS", "BYTES", "STATUS"])
    return rows, text


def _query_dir(args):
    from ._identity import QueryDir, queries
    from ._inspect import _root_store
    query = args.query
    if query is None:
        found = queries(_root_store(args.location, _opts(args)))
        if len(found) != 1:
            raise ValueError(f"{args.location} holds {'no query' if not found else f'queries {found}'}: "
                             f"pass --query ID")
        query = found[0]
    return QueryDir(args.location, query, _opts(args))


def cmd_retire(args):
    from ._identity import retire
    qd = _query_dir(args)
    done = retire(qd, args.names)
    return {"query_id": qd.query, "retired": done}, (
        f"retired in query {qd.query}: {', '.join(done) or '(all were already retired)'}; their state stays "
        f"until python -m spark_ops purge {args.location} {' '.join(args.names)} --query {qd.query}")


def cmd_purge(args):
    from ._identity import purge
    qd = _query_dir(args)
    done = purge(qd, args.names)
    return {"query_id": qd.query, "purged": done}, "\n".join(
        f"purged {n} of query {qd.query}: {k} files deleted" for n, k in done.items())


def _parse_key(text: str):
    """A key on the command line: JSON ("u4", 42, ["a", 1] for several key columns), or a
    plain word as a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


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
    t.add_argument("--key", help="only this key's timers: a plain word, or JSON (42, [\"a\", 1] for several key "
                                 "columns)")
    t.add_argument("--kind", choices=("event", "processing"), help="only event-time or processing-time timers")
    t.add_argument("--epoch", "--checkpoint", type=int, dest="epoch", help="checkpoint epoch (default newest)")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    t.add_argument("--endpoint-url", help="S3 endpoint (default: boto3's configuration)")
    t.set_defaults(fn=cmd_timers)
    for name, fn, helptext in (("operators", cmd_operators, "the operators of each query's state"),
                               ("vars", cmd_vars, "the state variables of each operator, what they cost, and "
                                                  "whether the latest code uses them"),
                               ("retire", cmd_retire, "say that a query's code no longer has these operators "
                                                      "(their state is kept, not resumed)"),
                               ("purge", cmd_purge, "delete the state of retired operators")):
        c = sub.add_parser(name, help=helptext, description=helptext)
        c.add_argument("location", help="the state root (state= of the query), s3://bucket/prefix included")
        if name in ("retire", "purge"):
            c.add_argument("names", nargs="+", metavar="NAME", help="operator name(s)")
        c.add_argument("--query", help="the query id (default: the only query under the root)")
        if name == "vars":
            c.add_argument("--operator", help="only this operator's variables")
        c.add_argument("--json", action="store_true", help="machine-readable output")
        c.add_argument("--endpoint-url", help="S3 endpoint (default: boto3's configuration)")
        c.set_defaults(fn=fn)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out, rc = run_command(args, (SparkOpsError, objectspace.ObjectSpaceError, dkv.DkvError), "python -m spark_ops")
    if rc:
        return rc
    data, text = out
    return print_result(json.dumps(data, indent=2, ensure_ascii=False, default=str) if args.json else text)


__all__ = ["main", "build_parser"]
