"""Helpers for the objectspace tests: opening a db (real dkv or the stand-in), a recording
db proxy, and a renderer that turns the records reaching the store into readable lines."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid

import msgpack

import dkv
from objectspace import _layout as L
from objectspace._keycodec import _dec, decode_key

# OBJECTSPACE_TEST_STORE=dir runs every test on a temporary folder instead of memory://;
# =standin on the in-memory stand-in (the default when dkv.open does not exist).
STORE = os.environ.get("OBJECTSPACE_TEST_STORE", "memory" if hasattr(dkv, "open") else "standin")
HAVE_DKV = STORE != "standin"


_tmp_root: list = []


def _tmp() -> str:
    if not _tmp_root:
        _tmp_root.append(tempfile.mkdtemp(prefix="objectspace-tests-"))
        atexit.register(shutil.rmtree, _tmp_root[0], True)
    return _tmp_root[0]


def new_location(kind: str = "memory", tmp_path=None) -> str:
    """A fresh store location: memory:// (the default) or a folder."""
    if STORE == "dir" or (kind == "dir" and HAVE_DKV):
        return os.path.join(str(tmp_path or _tmp()), f"db-{uuid.uuid4().hex[:12]}")
    return f"memory://objectspace-{uuid.uuid4().hex}"


def open_db(location: str, checkpoint: int | None = None):
    """The real dkv when it is importable, else the in-memory stand-in."""
    if HAVE_DKV:
        opts = {} if location.startswith("memory://") else {"fsync": False}
        return dkv.open(location, checkpoint=checkpoint, discard_newer=checkpoint is not None, **opts)
    from ._standin import StandinDB
    return StandinDB.open(location, checkpoint=checkpoint)


def commit(space, full: bool = False) -> None:
    """The three-step protocol: save, write the batch to the space's db, on_saved."""
    batch = space.save(full=full)
    space.db.write(batch)
    space.on_saved()


class RecordingDB:
    """Passes everything to ``db``; records writes in ``log`` and reads in ``reads``."""

    def __init__(self, db) -> None:
        self.db = db
        self.log: list = []
        self.reads: list = []

    def write(self, batch) -> None:
        for k, v in batch:
            self.log.append(("put", k, v) if v is not None else ("delete", k))
        self.db.write(batch)

    def put(self, key, value) -> None:
        self.log.append(("put", key, value))
        self.db.put(key, value)

    def delete(self, key) -> None:
        self.log.append(("delete", key))
        self.db.delete(key)

    def get(self, key):
        self.reads.append(("get", key))
        return self.db.get(key)

    def scan(self, start=None, end=None):
        self.reads.append(("scan", start, end))
        return self.db.scan(start, end)

    def scan_prefix(self, prefix):
        self.reads.append(("scan_prefix", prefix))
        return self.db.scan_prefix(prefix)

    def checkpoint(self, epoch):
        self.log.append(("checkpoint", epoch))
        return self.db.checkpoint(epoch)

    def take(self) -> list:
        out, self.log = self.log, []
        return out

    def __getattr__(self, name):
        return getattr(self.db, name)


class NoIO:
    """A db that fails on any use: proves a constructor does no I/O."""

    def __getattr__(self, name):
        raise AssertionError(f"unexpected db.{name} call")


def _val(raw: bytes) -> str:
    from objectspace._codec import decode
    try:
        return repr(decode(raw))
    except Exception:  # noqa: BLE001
        return repr(raw)


def render_key(key: bytes, prefix: bytes, kinds: dict) -> str:
    """``index foo``, ``foo meta``, ``foo item 3``, ``foo item 'k'``, ``ll link 2``..."""
    rest = key[len(prefix):]
    assert key.startswith(prefix), key
    space_part, rest = rest[:1], rest[1:]
    if space_part == L.COUNTS:
        assert not rest, key
        return "counts"
    name, end = _dec(rest, 0)
    sub = rest[end:]
    if space_part == L.INDEX:
        assert not sub
        return f"index {name}"
    kind = kinds.get(name, "?")
    if sub == L.META:
        return f"{name} meta"
    tag, body = sub[:1], sub[1:]
    if tag == L.ITEMS:
        if kind == "value":
            return f"{name} value"
        if kind in ("array", "list", "queue", "stack", "linked_list", "ndarray") and len(body) == L.SLOT_BYTES:
            return f"{name} item {int.from_bytes(body, 'big')}"
        if kind == "stream" and len(body) == 16:
            return f"{name} entry {int.from_bytes(body[:8], 'big')}-{int.from_bytes(body[8:], 'big')}"
        try:
            return f"{name} item {decode_key(body)!r}"
        except ValueError:
            return f"{name} item {int.from_bytes(body, 'big')}"
    if tag == L.LINKS:
        return f"{name} link {int.from_bytes(body, 'big')}"
    if tag == L.GROUPS:
        return f"{name} group {decode_key(body)!r}"
    if tag == L.PEL:
        g, end = _dec(body, 0)
        i = body[end:]
        return f"{name} pel {g!r} {int.from_bytes(i[:8], 'big')}-{int.from_bytes(i[8:], 'big')}"
    return f"{name} ?{sub!r}"


def _meta(raw: bytes, kind) -> str:
    """A metadata record: its msgpack list, marked when it is not the format-2 record of
    ``kind`` with codec 1 (``(format 1)`` without the head, else the kind and codec named)."""
    if raw[:1] != L.META_HEAD_BYTE:
        return f"{msgpack.unpackb(raw)!r} (format 1)"
    assert raw[1] == L.FORMAT_VERSION, raw
    named = L.KIND_NAMES.get(raw[2])
    tag = "" if named == kind and raw[3] == 1 else f" ({named} codec={raw[3]})"
    return f"{msgpack.unpackb(raw[L.HEAD_BYTES:])!r}{tag}"


def render(log: list, prefix: bytes, kinds: dict) -> list[str]:
    """Readable lines of a write log: ``put foo item 3 = 42``, ``delete foo item 5``."""
    out = []
    # a meta record is checked against its object's kind: from an index entry of the log,
    # else from ``kinds`` (names as render_key shows them)
    named = {(k if isinstance(k, str) else repr(k)): v for k, v in kinds.items()}
    for rec in log:
        if rec[0] == "checkpoint":
            out.append(f"checkpoint {rec[1]}")
            continue
        key = render_key(rec[1], prefix, kinds)
        if rec[0] == "delete":
            out.append(f"delete {key}")
        elif key == "counts":
            objects, scopes = msgpack.unpackb(rec[2])[1:]
            out.append(f"put counts = {objects} objects, {scopes} scopes")
        elif key.startswith("index "):
            kind, codec, version = msgpack.unpackb(rec[2])
            named[key[6:]] = L.KIND_NAMES[kind]
            out.append(f"put {key} = {L.KIND_NAMES[kind]} codec={codec} v{version}")
        elif key.endswith(" meta"):
            out.append(f"put {key} = {_meta(rec[2], named.get(key[:-5]))}")
        elif " group " in key or " pel " in key:
            out.append(f"put {key} = {msgpack.unpackb(rec[2], strict_map_key=False)!r}")
        elif " link " in key:
            out.append(f"put {key} = {int.from_bytes(rec[2], 'big')}")
        elif rec[2] == b"" and kinds.get(key.split()[0]) in ("set", "sorted_set"):
            out.append(f"put {key}")
        else:
            out.append(f"put {key} = {_val(rec[2])}")
    return out
