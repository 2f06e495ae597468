"""``python -m objectspace``: look inside object spaces. Read-only: nothing is ever written.

Commands: spaces, ls, show, diff, stats; every one takes ``--json``. A LOCATION is a
folder, ``s3://bucket/prefix`` or ``memory://name``: a plain ``ObjectSpace.open`` store
or a spark_ops state root (or one query's, operator's or shard's folder below it; spark_ops'
family rule, found through its entry point, tells which shards hold an epoch). One that
holds no dkv store is an error that says what is there. Which spaces:

    --instance PATH     one dkv instance, or every instance under PATH (for spark_ops:
                        <query id>/<operator>[/L<first batch>-n<shards>/p<shard>])
    --key-group N       only the space of key group N (default: every key group with state)
    --prefix BYTES      the space at this key prefix instead (Python escapes: 'app/', '\\x00\\x00\\x00')
    --epoch E           the checkpoint to read (default: the newest; an operator's newest batch)

Names: a plain string, or a JSON array for tuple names ('["user-42", "total"]').
"""
from __future__ import annotations

import argparse
import codecs
import datetime as _dt
import json
import math
import os
import shlex
import sys
from contextlib import ExitStack

import dkv
from dkv.cli import print_result, run_command

from ._inspect import (diff_pair, expiries_of, family_rules, find_instances, iter_slots, list_objects,
                       name_from_json, object_info, pair_instances, space_stats, spaces_of, to_jsonable)
from ._inspect.changes import ObjectChange, SpaceStats
from ._inspect.records import ndarray_summary
from .errors import ObjectNotFoundError, ObjectSpaceError


# -- helpers -----------------------------------------------------------------------------------

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

def _show_name(name) -> str:
    return name if isinstance(name, str) else _dumps(to_jsonable(name))


def _dumps(v) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str)


def _clip(text: str, width: int) -> str:
    return text if width <= 0 or len(text) <= width else text[:width - 1] + "…"


def _table(rows: list, headers: list) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


class _Progress:
    """A tqdm bar on stderr (when asked for, or when stderr is a terminal and not --json)."""

    def __init__(self, args, desc: str, total: int | None = None) -> None:
        on = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.json)
        self.bar = None
        if on:
            try:
                from tqdm import tqdm
            except ImportError:         # progress is a nicety: no bar without tqdm
                return
            self.bar = tqdm(total=total, desc=desc, unit="", file=sys.stderr, leave=False)

    def step(self, what: str = "") -> None:
        if self.bar is not None:
            self.bar.update(1)
            if what:
                self.bar.set_postfix_str(what[-40:], refresh=False)

    def callback(self, done: int, total, what: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{done} {what[-30:]}", refresh=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _opts(args) -> dict:
    return {"endpoint_url": args.endpoint_url} if args.endpoint_url else {}


def _prefix(args) -> bytes | None:
    return codecs.escape_decode(args.prefix.encode("utf-8"))[0] if args.prefix is not None else None


def _where(ref, kg) -> dict:
    return {**ref.as_json(), "key_group": kg}


def _label(where: dict) -> str:
    inst = where["instance"] or "(root)"
    kg = "" if where["key_group"] is None else f", key group {where['key_group']}"
    return f"{inst} @ epoch {where['epoch']}{kg}"


def _spaces(args, stack: ExitStack, bar: _Progress | None = None, expiries: bool = False):
    """(where, space) of every selected space, instances opened read-only in ``stack``
    (``expiries``: (where, space, expiry reader), see FamilyRule.expiries)."""
    refs = find_instances(args.location, epoch=args.epoch, instance=args.instance, **_opts(args))
    for ref in refs:
        try:
            db = stack.enter_context(ref.open(**_opts(args)))
            groups = spaces_of(db, key_group=args.key_group, prefix=_prefix(args))
        except (ObjectSpaceError, dkv.DkvError) as e:
            if len(refs) == 1:
                raise
            _failed(args, _where(ref, None), e)     # one damaged store among several: say which, go on
            continue
        for kg, space in groups:
            if expiries:
                yield _where(ref, kg), space, expiries_of(ref, db, None if args.prefix is not None else kg)
            else:
                yield _where(ref, kg), space
        if bar is not None:
            bar.step(ref.instance)


def _failed(args, where: dict, e: BaseException) -> None:
    """Note that the store (or space) at ``where`` could not be read: main reports it on
    stderr after the rest, and exits 1."""
    failures = getattr(args, "failures", None)
    if failures is None:
        failures = args.failures = []
    failures.append(f"{_label(where)}: {type(e).__name__}: {e}")


def _utc(ms) -> str:
    """An expiry (ms since the Unix epoch) as UTC ISO 8601; "" for None."""
    if ms is None:
        return ""
    try:
        return (_EPOCH + _dt.timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except OverflowError:
        return str(ms)


# -- commands ------------------------------------------------------------------------------------

def cmd_spaces(args):
    rows = []
    with ExitStack() as stack:
        for where, space in _spaces(args, stack):
            rows.append({**where, "prefix": space.prefix.hex()})
    shown = [r.labels[0] for r in family_rules() if r.labels]     # e.g. spark_ops' operator
    text = _table([[r["instance"] or "(root)", r["epoch"], "" if r["key_group"] is None else r["key_group"],
                    *[r.get(k) or "" for k in shown]] for r in rows],
                  ["INSTANCE", "EPOCH", "KEY GROUP", *[k.upper() for k in shown]])
    return rows, text if rows else "(no spaces)"


def cmd_ls(args):
    rows, blocks = [], []
    bar = _Progress(args, "ls")
    scope = name_from_json(args.scope) if args.scope else None
    try:
        with ExitStack() as stack:
            for where, space, exp in _spaces(args, stack, bar, expiries=True):
                # A plain word is a prefix of str names and also the first part of tuple names
                # (a spark_ops key: --scope u4 is --scope '["u4"]').
                scopes = [scope] if not isinstance(scope, str) else [scope, (scope,)]
                try:
                    found = [{**where, **o.as_json(), "expires_at": exp.object(o.name)}
                             for sc in scopes
                             for o in list_objects(space, scope=sc, sizes=not args.no_sizes, progress=bar.callback)]
                except (ObjectSpaceError, dkv.DkvError) as e:
                    _failed(args, where, e)
                    continue
                rows += found
                if found:
                    timed = any(o["expires_at"] is not None for o in found)
                    table = _table([[_clip(_show_name(o["name"]) if isinstance(o["name"], str)
                                           else _dumps(o["name"]), args.width), o["kind"], o["codec"], o["length"],
                                     "" if o["bytes"] is None else o["bytes"],
                                     *([_utc(o["expires_at"])] if timed else [])] for o in found],
                                   ["NAME", "KIND", "CODEC", "LENGTH", "BYTES", *(["EXPIRES AT"] if timed else [])])
                    blocks.append(f"# {_label(where)}: {len(found)} objects\n{table}")
    finally:
        bar.close()
    return rows, "\n\n".join(blocks) or "(no objects)"


def _locate(args, stack: ExitStack, name):
    hits = []
    for where, space, exp in _spaces(args, stack, expiries=True):
        try:
            hits.append((where, space, object_info(space, name), exp))
        except ObjectNotFoundError:
            continue
    if not hits:
        raise ObjectNotFoundError(f"no object named {_show_name(name)!r} in {args.location}"
                                  + (f" (instance {args.instance})" if args.instance else ""))
    if len(hits) > 1:
        places = "; ".join(_label(w) for w, _, _, _ in hits)
        raise ObjectSpaceError(f"{_show_name(name)!r} is in several spaces ({places}); "
                               "pick one with --instance and --key-group")
    return hits[0]


def cmd_show(args):
    name = name_from_json(args.name)
    nd = None
    with ExitStack() as stack:
        where, space, info, exp = _locate(args, stack, name)
        items = [(s, v, exp.item(name, k, info.kind)) for s, v, k in
                 iter_slots(space, name, offset=args.offset, limit=args.limit + 1, keys=True)]
        expires = exp.object(name)
        if info.kind == "ndarray":
            nd = ndarray_summary(space, name, max_cells=args.cells)
    more = len(items) > args.limit
    items = items[:args.limit]
    out = {**where, **info.as_json(), "expires_at": expires, "offset": args.offset, "limit": args.limit,
           "more": more, "items": [{"slot": to_jsonable(s), "value": to_jsonable(v), "expires_at": e}
                                   for s, v, e in items]}
    head = f"{info.kind} {_show_name(name)} ({info.codec}, length {info.length}) in {_label(where)}"
    if nd is not None:
        out["ndarray"] = {k: to_jsonable(v) for k, v in nd.items()}
        head = (f"ndarray {_show_name(name)} (shape {tuple(nd['shape'])}, dtype {nd['dtype']}, chunks "
                f"{tuple(nd['chunks'])}, fill {nd['fill_value']!r}; {nd['stored_chunks']} of "
                f"{math.prod(nd['chunk_grid'])} chunks stored) in {_label(where)}")
    if expires is not None:
        head += f"; expires at {_utc(expires)}"
    timed = any(i["expires_at"] is not None for i in out["items"])
    body = _table([[_dumps(i["slot"]), _clip(_dumps(i["value"]), args.width),
                    *([_utc(i["expires_at"])] if timed else [])] for i in out["items"]],
                  ["SLOT" if nd is None else "CHUNK", "VALUE", *(["EXPIRES AT"] if timed else [])]) \
        if items else "(no slots here)"
    tail = f"\n… more: --offset {args.offset + args.limit}" if more else ""
    if nd is not None and nd["values"] is not None:
        import numpy as np
        tail += "\nvalues:\n" + str(np.array(nd["values"], dtype=nd["dtype"]).reshape(nd["shape"]))
    return out, f"{head}\n{body}{tail}"


def cmd_diff(args):
    pairs = pair_instances(args.location, args.from_epoch, args.to_epoch, instance=args.instance, **_opts(args))
    objects, summary = [], {f"{w}_{c}": 0 for w in ("objects", "slots") for c in ("added", "changed", "removed")}
    bar = _Progress(args, "diff", total=len(pairs))
    try:
        for old, new, groups in pairs:
            ref = new or old
            for kg, ch in diff_pair(old, new, groups, key_group=args.key_group, prefix=_prefix(args), progress=bar.callback,
                                    **_opts(args)):
                if isinstance(ch, ObjectChange):
                    cur = {**_where(ref, kg), "from": args.from_epoch, "to": args.to_epoch, **ch.as_json(),
                           "slots": [], "more_slots": 0}
                    objects.append(cur)
                    summary[f"objects_{ch.change}"] += 1
                    continue
                summary[f"slots_{ch.change}"] += 1
                if args.slots < 0 or len(cur["slots"]) < args.slots:
                    cur["slots"].append(ch.as_json())
                else:
                    cur["more_slots"] += 1
            bar.step(ref.instance)
    finally:
        bar.close()
    out = {"from": args.from_epoch, "to": args.to_epoch, "summary": summary, "objects": objects}
    sign = {"added": "+", "removed": "-", "changed": "~"}
    lines = []
    for o in objects:
        lengths = f"{o['old_length'] if o['old_length'] is not None else '-'} -> " \
                  f"{o['new_length'] if o['new_length'] is not None else '-'}"
        where = "" if o["key_group"] in (None, 0) and not o["instance"] else f"  [{_label(o)}]"
        lines.append(f"{sign[o['change']]} {o['kind']} {_show_name(o['name'])} ({o['change']}, length {lengths}){where}")
        for s in o["slots"]:
            old, new = _dumps(s["old"]), _dumps(s["new"])
            what = {"added": new, "removed": old, "changed": f"{old} -> {new}"}[s["change"]]
            slot = "(value)" if o["kind"] == "value" else _dumps(s["slot"])
            what = "" if o["kind"] in ("set", "sorted_set") else ": " + _clip(what, args.width)
            lines.append(f"    {sign[s['change']]} {slot}{what}")
        if o["more_slots"]:
            lines.append(f"    … {o['more_slots']} more slot changes (--slots N, -1 for all)")
    s = summary
    lines.append(f"epoch {args.from_epoch} -> {args.to_epoch}: objects +{s['objects_added']} ~{s['objects_changed']} "
                 f"-{s['objects_removed']}, slots +{s['slots_added']} ~{s['slots_changed']} -{s['slots_removed']}")
    return out, "\n".join(lines)


def cmd_stats(args):
    total, spaces, instances = SpaceStats(top=args.top), [], {}
    bar = _Progress(args, "stats")
    try:
        with ExitStack() as stack:
            for where, space in _spaces(args, stack, bar):
                try:
                    st = space_stats(space, top=args.top, progress=bar.callback)
                except (ObjectSpaceError, dkv.DkvError) as e:
                    _failed(args, where, e)
                    continue
                st.largest = [(b, info, where) for b, info, _ in st.largest]
                total.merge(st)
                spaces.append({**where, "objects": st.objects, "slots": st.slots, "records": st.records,
                               "bytes": st.bytes})
                if where["instance"] not in instances:
                    s = space.db.stats()
                    instances[where["instance"]] = {
                        "instance": where["instance"], "epoch": where["epoch"],
                        "sst_bytes": sum(lv["bytes"] for lv in s["levels"]),
                        "sst_tables": sum(lv["tables"] for lv in s["levels"]),
                        "memtable_bytes": s["memtable_bytes"], "checkpoints": s["checkpoints"]}
    finally:
        bar.close()
    out = {**total.as_json(), "spaces": spaces, "instances": list(instances.values())}
    lines = [f"{total.objects} objects, {total.slots} slots, {total.records} records, {total.bytes} bytes "
             f"(keys + values, uncompressed) in {len(spaces)} spaces of {len(instances)} instances"]
    lines.append(_table([[k, v["objects"], v["slots"], v["records"], v["bytes"]] for k, v in out["kinds"].items()],
                        ["KIND", "OBJECTS", "SLOTS", "RECORDS", "BYTES"]))
    if out["largest"]:
        lines.append("largest objects:\n" + _table([[_clip(_show_name(o["name"]) if isinstance(o["name"], str) else _dumps(o["name"]),
                                    args.width), o["kind"], o["length"], o["bytes"], _label(o)]
                             for o in out["largest"]], ["NAME", "KIND", "LENGTH", "BYTES", "WHERE"]))
    lines.append(_table([[i["instance"] or "(root)", i["epoch"], i["sst_tables"], i["sst_bytes"],
                          " ".join(map(str, i["checkpoints"]))] for i in instances.values()],
                        ["INSTANCE", "EPOCH", "SSTS", "SST BYTES", "RETAINED CHECKPOINTS"]))
    return out, "\n\n".join(lines)


# -- parser ----------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m objectspace", description=__doc__.split("\n\n")[0],
                                epilog="See docs/inspection.md.")
    sub = p.add_subparsers(dest="command", required=True)

    def add(name, fn, help_, epoch=True):
        sp = sub.add_parser(name, help=help_, description=help_)
        sp.add_argument("location", help="folder, s3://bucket/prefix or memory://name")
        sp.add_argument("--instance", help="a dkv instance, or every instance under this path")
        sp.add_argument("--key-group", type=int, help="only this key group's space")
        sp.add_argument("--prefix", help="the space at this key prefix (Python escapes)")
        if epoch:
            sp.add_argument("--epoch", "--checkpoint", type=int, dest="epoch", help="checkpoint epoch (default newest)")
        sp.add_argument("--json", action="store_true", help="machine-readable output")
        sp.add_argument("--width", type=int, default=100, help="clip long text values (0: never)")
        sp.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")
        sp.add_argument("--endpoint-url", help="S3 endpoint (default: boto3's configuration)")
        sp.set_defaults(fn=fn)
        return sp

    add("spaces", cmd_spaces, "list the object spaces (instances, epochs, key groups)")
    ls = add("ls", cmd_ls, "list objects with kind, codec, length and bytes")
    ls.add_argument("--scope", help="only names in this scope: a JSON array of leading parts, or a plain word (a "
                                    "prefix of string names, and the first part of tuple names: a spark_ops key)")
    ls.add_argument("--no-sizes", action="store_true", help="skip counting bytes (reads no items)")
    show = add("show", cmd_show, "the slots of one object, paged")
    show.add_argument("name", help="object name: a string or a JSON array")
    show.add_argument("--offset", type=int, default=0)
    show.add_argument("--limit", type=int, default=20)
    show.add_argument("--cells", type=int, default=1000, help="ndarray: print every cell up to this many")
    d = add("diff", cmd_diff, "objects and slots added, changed and removed between two checkpoints", epoch=False)
    d.add_argument("--from", dest="from_epoch", type=int, required=True, help="older epoch")
    d.add_argument("--to", dest="to_epoch", type=int, required=True, help="newer epoch")
    d.add_argument("--slots", type=int, default=20, help="slot changes listed per object (-1: all)")
    st = add("stats", cmd_stats, "objects, slots, records and bytes per kind; largest objects; dkv sizes")
    st.add_argument("--top", type=int, default=10, help="how many largest objects")
    return p


def _swapped_hint(args, error) -> str:
    """For ``show NAME LOCATION`` (the name where the location goes): the order to use."""
    name = getattr(args, "name", None)
    if not isinstance(error, dkv.NotAStoreError) or name is None:
        return ""
    if not (os.path.isdir(name) or name.startswith(("s3://", "memory://"))):
        return ""
    return (f"\n(the location comes first, then the name: python -m objectspace show {shlex.quote(name)} "
            f"{shlex.quote(args.location)} ...)")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "offset", 0) < 0 or getattr(args, "limit", 1) < 0:
        print("error: --offset and --limit must be >= 0", file=sys.stderr)
        return 2
    out, rc = run_command(args, (ObjectSpaceError, dkv.DkvError), "python -m objectspace", _swapped_hint)
    if rc:
        return rc
    data, text = out
    rc = print_result(json.dumps(data, indent=2, ensure_ascii=False, default=str) if args.json else text)
    if rc:
        return rc
    failures = getattr(args, "failures", None)
    if failures:
        print(f"error: {len(failures)} of the stores could not be read (the others are listed above):",
              file=sys.stderr)
        for f in failures:
            print(f"  {f}", file=sys.stderr)
        return 1
    return 0


__all__ = ["main", "build_parser"]
