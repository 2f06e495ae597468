"""Every object name dkv uses, built and parsed in one place.

Names are relative to the store root. An instance ``ns`` (empty for a store with one
instance) keeps its objects under ``<ns>/``::

    <ns>/manifest/<epoch:020>-<writer:010>.manifest   one per checkpoint (conditional create)
    <ns>/writer/<writer:010>                          writer-epoch claim (conditional create)
    <ns>/wal/<writer:010>-<segment:012>.wal           WAL segments
    <ns>/sst/<writer:010>-<table:012>.sst             SSTs
    <ns>/retired                                      marker: the instance was rescaled away

Zero-padded numbers make listing order equal numeric order.
"""
from __future__ import annotations

MANIFEST_DIR = "manifest/"
WRITER_DIR = "writer/"
WAL_DIR = "wal/"
SST_DIR = "sst/"
RETIRED = "retired"


def ns_prefix(ns: str) -> str:
    ns = ns.strip("/")
    if ns and any(p in ("", ".", "..") for p in ns.split("/")):
        raise ValueError(f"bad instance name {ns!r}")
    return ns + "/" if ns else ""


def manifest_name(ns: str, epoch: int, writer: int) -> str:
    return f"{ns_prefix(ns)}{MANIFEST_DIR}{epoch:020d}-{writer:010d}.manifest"


def parse_manifest_name(name: str) -> tuple[int, int] | None:
    """(epoch, writer) from a manifest key (with or without the ns prefix), else None."""
    base = name.rsplit("/", 1)[-1]
    if not base.endswith(".manifest"):
        return None
    try:
        epoch, writer = base[: -len(".manifest")].split("-")
        return int(epoch), int(writer)
    except ValueError:
        return None


def claim_name(ns: str, writer: int) -> str:
    return f"{ns_prefix(ns)}{WRITER_DIR}{writer:010d}"


def parse_claim_name(name: str) -> int | None:
    try:
        return int(name.rsplit("/", 1)[-1])
    except ValueError:
        return None


def wal_name(ns: str, writer: int, segment: int) -> str:
    return f"{ns_prefix(ns)}{WAL_DIR}{writer:010d}-{segment:012d}.wal"


def sst_name(ns: str, writer: int, table: int) -> str:
    return f"{ns_prefix(ns)}{SST_DIR}{writer:010d}-{table:012d}.sst"


def parse_file_name(name: str) -> tuple[str, int, int] | None:
    """("wal" | "sst", writer, number) for WAL segment and SST keys, else None."""
    base = name.rsplit("/", 1)[-1]
    for kind in ("wal", "sst"):
        if base.endswith("." + kind):
            try:
                writer, num = base[: -len(kind) - 1].split("-")
                return kind, int(writer), int(num)
            except ValueError:
                return None
    return None


def owner_ns(path: str) -> str:
    """The instance a file belongs to: everything before ``wal/`` or ``sst/``."""
    for d in ("/" + WAL_DIR, "/" + SST_DIR):
        i = path.rfind(d)
        if i >= 0:
            return path[:i]
    return ""


def retired_name(ns: str) -> str:
    return f"{ns_prefix(ns)}{RETIRED}"
