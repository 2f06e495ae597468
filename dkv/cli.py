"""``python -m dkv``: look inside a dkv location. Read-only except ``gc``.

Commands: instances, info, checkpoints, get, scan, verify, gc. Every command takes
``--json``. Keys are given and shown with Python byte escapes (``\\x00\\x01user``) or as
hex with ``--hex``.

A LOCATION is a store's folder or any folder above it; ``--instance`` names an instance
under it as ``instances`` prints it. Any folder a spark_ops query writes works: the state
root or an operator's folder (with ``--instance``), or one shard's folder. A location
that holds no store is an error that says what is there (nothing, other files, or the
instances to pick from); nothing is created.
"""
from __future__ import annotations

import argparse
import codecs
import json
import os
import sys
import traceback

from . import _admin, _paths
from ._db import DB
from ._reads import prefix_end
from ._options import Options
from .errors import DkvError
from .format import manifest as mf
from .storage import open_store


def _parse_key(text: str, hex_: bool) -> bytes:
    return bytes.fromhex(text) if hex_ else codecs.escape_decode(text.encode("utf-8"))[0]


def _show(b: bytes | None, hex_: bool) -> str | None:
    if b is None:
        return None
    return b.hex() if hex_ else repr(b)[2:-1]


def _progress(enabled: bool):
    """A progress callback that redraws one line of stderr, or None. Only on a terminal:
    redirected to a file or a pipe (a CI log), carriage-return redraws would pile up as
    one long line, so there is no progress there."""
    if not enabled or not sys.stderr.isatty():
        return None

    def report(done: int, total: int, what: str) -> None:
        sys.stderr.write(f"\r{done}/{total} {what[-60:]:<60}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()
    return report


def _store(args):
    return open_store(args.location, create=False)


def _open(args) -> DB:
    return DB(_store(args), ns=args.instance, checkpoint=args.checkpoint, read_only=True,
              options=Options(background=False))


def cmd_instances(args):
    names = _admin.instances(args.location, required=True)
    return names, "\n".join(n or "(root)" for n in names)


def cmd_checkpoints(args):
    tl = _admin.timeline(_store(args), args.instance)
    rows = [{"epoch": c.epoch, "writer": c.writer, "manifest": c.name} for c in tl.checkpoints()]
    text = "\n".join(f"{r['epoch']:>12}  writer {r['writer']:<6} {r['manifest']}" for r in rows)
    carriers = tl.carriers()
    if carriers:        # RFC 0011: past retention, kept for the inline segments they carry
        text += (f"\n({len(carriers)} older manifest{'s' if len(carriers) > 1 else ''} kept only for the WAL "
                 "segments they carry: no checkpoints)")
    return rows, text or "(no checkpoints)"


def cmd_info(args):
    store = _store(args)
    tl = _admin.timeline(store, args.instance, args.checkpoint)
    info = tl.find(args.checkpoint)
    if info is None:
        if args.checkpoint is not None:
            raise tl.not_found(args.checkpoint)
        raise DkvError(f"no checkpoint yet (a writer has opened it but not checkpointed) in {args.location}"
                       + (f" instance {args.instance!r}" if args.instance else ""))
    m = tl.manifest(info)
    levels = [{"level": i, "tables": len(lv), "bytes": sum(t.size for t in lv), "records": sum(t.count for t in lv)}
              for i, lv in enumerate(m.levels)]
    segs = sum(r.last - r.first + 1 for r in m.wal)
    inline = sum(1 for r in m.wal if r.data is not None)
    carried = sum(r.last - r.first + 1 for r in m.wal if r.carried is not None)
    out = {"epoch": m.epoch, "writer": m.writer, "last_seq": m.last_seq, "manifest": info.name,
           "levels": levels, "wal_segments": segs, "inline_segments": inline,
           "inline_bytes": mf.inline_bytes(m), "carried_segments": carried, "carriers": len(mf.carriers(m)),
           "retained": m.retained, "key_groups": list(m.groups), "created_ms": m.created_ms}
    parts = [f"{inline} inline in the manifest"] if inline else []
    if carried:
        parts.append(f"{carried} inline in {out['carriers']} earlier manifests")
    shown = f"{segs} ({', '.join(parts)})" if parts else f"{segs}"
    lines = [f"checkpoint {m.epoch} (writer {m.writer}, last seq {m.last_seq}) {info.name}",
             f"key groups [{m.groups[0]}, {m.groups[1]})  live WAL segments (read at open): {shown}  "
             f"retained: {m.retained}"]
    lines += [f"  L{lv['level']}: {lv['tables']} tables, {lv['bytes']} bytes, {lv['records']} records" for lv in levels]
    return out, "\n".join(lines)


def cmd_get(args):
    with _open(args) as db:
        value = db.get(_parse_key(args.key, args.hex))
    shown = _show(value, args.hex)
    return {"key": args.key, "value": shown, "found": value is not None}, ("(not found)" if value is None else shown)


def cmd_scan(args):
    start = _parse_key(args.start, args.hex) if args.start else None
    end = _parse_key(args.end, args.hex) if args.end else None
    if args.prefix:
        start = _parse_key(args.prefix, args.hex)
        end = prefix_end(start)
    rows = []
    with _open(args) as db:
        for key, value in db.scan(start, end):
            if args.limit and len(rows) >= args.limit:
                break
            rows.append({"key": _show(key, args.hex), "value": _show(value, args.hex)})
    return rows, "\n".join(f"{r['key']}\t{r['value']}" for r in rows) or "(no keys)"


def cmd_verify(args):
    report = _admin.verify(args.location, args.instance, args.checkpoint, progress=_progress(not args.json))
    text = (f"checkpoint {report['epoch']}: OK — {report['sst_files']} SSTs ({report['blocks']} blocks), "
            f"{report['wal_segments']} WAL segments, {report['records']} records, {report['bytes']} bytes checked")
    return report, text


def cmd_gc(args):
    _admin.instances(args.location, required=True)
    report = _admin.collect_garbage(args.location, dry_run=args.dry_run, progress=_progress(not args.json))
    verb = "would delete" if args.dry_run else "deleted"
    return report, (f"{verb} {len(report['deleted'])} objects ({report['deleted_bytes']} bytes) of retired "
                    f"instances {report['retired_instances']}; {report['kept_shared_files']} shared files still in use")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dkv", description="Inspect a dkv store (read-only except gc).")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, fn, help_, checkpoint=True):
        sp = sub.add_parser(name, help=help_)
        sp.add_argument("location", help="folder, file://, s3://bucket/prefix or memory://name")
        sp.add_argument("--instance", default="", help="instance name within the location")
        if checkpoint:
            sp.add_argument("--checkpoint", type=int, default=None, help="epoch (default: latest)")
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.add_argument("--hex", action="store_true", help="keys and values as hex")
        sp.set_defaults(fn=fn)
        return sp

    add("instances", cmd_instances, "list instances", checkpoint=False)
    add("checkpoints", cmd_checkpoints, "list retained checkpoints", checkpoint=False)
    add("info", cmd_info, "summary of a checkpoint's manifest")
    add("get", cmd_get, "read one key").add_argument("key")
    sc = add("scan", cmd_scan, "list keys in order")
    sc.add_argument("--prefix")
    sc.add_argument("--start")
    sc.add_argument("--end")
    sc.add_argument("--limit", type=int, default=0)
    add("verify", cmd_verify, "check the checksums of every file a checkpoint references")
    add("gc", cmd_gc, "delete unreferenced files of retired instances", checkpoint=False).add_argument(
        "--dry-run", action="store_true")
    return p


def _short_path(filename: str) -> str:
    """``filename`` from its package folder on (dkv/..., objectspace/...), else as it is."""
    parts = filename.replace(os.sep, "/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in ("dkv", "objectspace", "spark_ops", "tests"):
            return "/".join(parts[i:])
    return filename


def run_command(args, errors: tuple, prog: str, hint=None):
    """Run ``args.fn(args)`` for a CLI (dkv's, objectspace's, spark_ops'): the package's own
    errors (``errors``: what it raises for stores, states and names it cannot read) are one
    line on stderr; so are the ValueError and TypeError that its functions raise for bad
    input (a location, a name, an option), with where they were raised, so that a bug is not
    taken for a user's mistake; ``TRACEBACK=1`` in the environment shows the traceback of
    either. Anything else is a bug and propagates. Returns ``(result, 0)`` or ``(None, 1)``;
    ``hint(args, e)`` adds text to the line."""
    try:
        return args.fn(args), 0
    except (*errors, ValueError, TypeError) as e:
        if os.environ.get("TRACEBACK") == "1":
            raise
        where = ""
        if not isinstance(e, errors):
            tb = traceback.extract_tb(e.__traceback__)[-1]
            where = f" [{type(e).__name__} at {_short_path(tb.filename)}:{tb.lineno}; TRACEBACK=1 {prog} ... " \
                    f"shows the traceback]"
        print(f"error: {e}{hint(args, e) if hint else ''}{where}", file=sys.stderr)
        return None, 1


def print_result(text: str) -> int:
    """Print a CLI's result and return its exit status: 0, or 141 (a shell's status for
    SIGPIPE) when the reader closed the pipe (``... | head``), without a traceback."""
    if sys.stdout is None:          # started with stdout closed (>&-): nowhere to print
        return 0
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The interpreter flushes stdout again at exit: that must not fail too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 141
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    out, rc = run_command(args, (DkvError,), "python -m dkv")
    if rc:
        return rc
    data, text = out
    return print_result(json.dumps(data, indent=2, default=str) if args.json else text)


__all__ = ["main", "build_parser", "run_command", "print_result", "_paths"]
