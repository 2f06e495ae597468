"""Stream entry ids: ``"<ms>-<seq>"`` strings <-> (ms, seq) <-> 16-byte big-endian keys."""
from __future__ import annotations

from .errors import StreamIdError

MAX_SEQ = (1 << 64) - 1


def parse_id(s, *, default_seq: int = 0) -> tuple[int, int]:
    """(ms, seq) of an id string "ms-seq" (or "ms", taking default_seq)."""
    if isinstance(s, tuple) and len(s) == 2:
        ms, seq = s
    else:
        if not isinstance(s, str):
            raise StreamIdError(f"stream ids are strings like '1700000000000-0', got {s!r}")
        ms, sep, seq = s.partition("-")
        try:
            ms = int(ms)
            seq = int(seq) if sep else default_seq
        except ValueError:
            raise StreamIdError(f"invalid stream id {s!r}") from None
    if not (0 <= ms <= MAX_SEQ and 0 <= seq <= MAX_SEQ):
        raise StreamIdError(f"invalid stream id {s!r}")
    return ms, seq


def format_id(ms: int, seq: int) -> str:
    return f"{ms}-{seq}"


def id_key(ms: int, seq: int) -> bytes:
    return ms.to_bytes(8, "big") + seq.to_bytes(8, "big")


def key_id(ek: bytes) -> str:
    return f"{int.from_bytes(ek[:8], 'big')}-{int.from_bytes(ek[8:16], 'big')}"


def range_bound(s, *, end: bool) -> bytes | None:
    """ek bound for range(): "-"/"+" open, "(" exclusive, "ms" covers every seq of ms.
    Returned as [lo, hi) bytes: lo inclusive, hi exclusive; None = unbounded."""
    if s == ("+" if end else "-"):
        return None
    exclusive = isinstance(s, str) and s.startswith("(")
    if exclusive:
        s = s[1:]
    ms, seq = parse_id(s, default_seq=MAX_SEQ if end else 0)
    k = id_key(ms, seq)
    return k if end == exclusive else k + b"\x00"
