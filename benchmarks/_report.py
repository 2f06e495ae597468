"""Shared output helpers for the benchmarks: aligned tables, ratios, JSON."""
from __future__ import annotations

import json
import os
import sys


def fmt(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        if v >= 100:
            return f"{v:,.0f}"
        if v >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(rows: list[dict], columns: list[str], title: str = "", out=sys.stdout) -> None:
    """Print rows as an aligned text table with the given column order."""
    cells = [[fmt(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    if title:
        print(f"\n{title}", file=out)
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths))), file=out)


def ratio(ours, theirs, higher_is_better: bool = True):
    """ours/theirs for throughputs, theirs/ours for times; None when either is missing."""
    if not ours or not theirs:
        return None
    return ours / theirs if higher_is_better else theirs / ours


def write_json(path: str, data) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=str)


def status_kb(pid, field_name: str) -> int | None:
    """A field of /proc/<pid>/status in KiB (VmRSS, VmHWM, ...; pid "self" for this
    process), or None where there is none (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def folder_sizes(root) -> dict:
    """{path: size} of every file under ``root`` (a file removed while walking is skipped)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            try:
                out[p] = os.path.getsize(p)
            except FileNotFoundError:      # collected while we walked
                pass
    return out


def grown(before: dict, after: dict) -> dict:
    """{path: bytes added} between two ``folder_sizes``: new files and growth of old ones."""
    return {p: size - before.get(p, 0) for p, size in after.items() if size > before.get(p, 0)}
