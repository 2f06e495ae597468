"""A small reference model of Redis Streams semantics (entries, ids, trim, groups, PEL).

Written from the Redis documentation in the plainest form (dicts and sorted lists), to
drive PersistedStream against in the reference-model tests.
"""
from __future__ import annotations

import copy

from sortedcontainers import SortedDict

MAX = (1 << 64) - 1


def pid(s: str, default_seq: int = 0) -> tuple:
    ms, _, seq = s.partition("-")
    return int(ms), int(seq) if seq else default_seq


def fid(t: tuple) -> str:
    return f"{t[0]}-{t[1]}"


class StreamModel:
    def __init__(self) -> None:
        self.entries = SortedDict()      # (ms, seq) -> fields
        self.last = (0, 0)
        self.groups: dict = {}           # name -> {"last", "pel": SortedDict(id -> [c, t, n]), "consumers"}

    def copy(self) -> "StreamModel":
        return copy.deepcopy(self)

    def add(self, fields: dict, id: str, now: int) -> str:
        """Returns the id, or raises ValueError like XADD."""
        if id == "*":
            new = (now, 0) if now > self.last[0] else (self.last[0], self.last[1] + 1)
        elif id.endswith("-*"):
            ms = int(id[:-2])
            new = (ms, self.last[1] + 1) if ms == self.last[0] else (ms, 0)
        else:
            new = pid(id)
        if new <= self.last or new == (0, 0):
            raise ValueError("id too small")
        self.entries[new] = dict(fields)
        self.last = new
        return fid(new)

    def delete(self, ids) -> int:
        n = 0
        for i in ids:
            if self.entries.pop(pid(i), None) is not None:
                n += 1
        return n

    def trim_maxlen(self, maxlen: int) -> int:
        n = max(0, len(self.entries) - maxlen)
        for k in list(self.entries.keys())[:n]:
            del self.entries[k]
        return n

    def trim_minid(self, minid: str) -> int:
        doomed = [k for k in self.entries if k < pid(minid)]
        for k in doomed:
            del self.entries[k]
        return len(doomed)

    def range(self, start: str, end: str, count, reverse=False) -> list:
        lo = (0, 0) if start == "-" else pid(start)
        hi = (MAX, MAX) if end == "+" else pid(end, MAX)
        out = [(fid(k), v) for k, v in self.entries.items() if lo <= k <= hi]
        if reverse:
            out.reverse()
        return out if count is None else out[:count]

    def first_id(self):
        return fid(self.entries.keys()[0]) if self.entries else None

    def last_id(self):
        return fid(self.entries.keys()[-1]) if self.entries else None

    # groups
    def create_group(self, name: str, start: str) -> None:
        if name in self.groups:
            raise KeyError(name)
        last = self.last if start == "$" else pid(start)
        self.groups[name] = {"last": last, "pel": SortedDict(), "consumers": {}}

    def read_group(self, group: str, consumer: str, count, now: int) -> list:
        g = self.groups[group]
        g["consumers"][consumer] = now
        out = [(k, v) for k, v in self.entries.items() if k > g["last"]]
        if count is not None:
            out = out[:count]
        for k, _ in out:
            g["pel"][k] = [consumer, now, 1]
        if out:
            g["last"] = out[-1][0]
        return [(fid(k), v) for k, v in out]

    def read_pending(self, group: str, consumer: str, after: str, count, now: int) -> list:
        g = self.groups[group]
        g["consumers"][consumer] = now
        keys = [k for k, e in g["pel"].items() if e[0] == consumer and k > pid(after)]
        if count is not None:
            keys = keys[:count]
        for k in keys:      # delivered once more (as Redis), unless deleted from the stream
            if k in self.entries:
                g["pel"][k] = [consumer, now, g["pel"][k][2] + 1]
        return [(fid(k), self.entries.get(k)) for k in keys]

    def ack(self, group: str, ids) -> int:
        pel = self.groups[group]["pel"]
        return sum(1 for i in ids if pel.pop(pid(i), None) is not None)

    def pending(self, group: str) -> dict:
        pel = self.groups[group]["pel"]
        consumers: dict = {}
        for e in pel.values():
            consumers[e[0]] = consumers.get(e[0], 0) + 1
        keys = list(pel.keys())
        return {"pending": len(pel), "min": fid(keys[0]) if keys else None,
                "max": fid(keys[-1]) if keys else None, "consumers": consumers}

    def claim(self, group: str, consumer: str, min_idle: int, now: int) -> list:
        g = self.groups[group]
        g["consumers"].setdefault(consumer, now)
        out = []
        for k in list(g["pel"].keys()):
            e = g["pel"][k]
            if k not in self.entries:     # deleted from the stream: leaves the PEL, however idle
                del g["pel"][k]
                continue
            if now - e[1] < min_idle:
                continue
            g["pel"][k] = [consumer, now, e[2] + 1]
            out.append((fid(k), self.entries[k]))
        return out

    def destroy_group(self, name: str) -> bool:
        return self.groups.pop(name, None) is not None
