"""Where an instance's files are named from, and whether a location holds a store at all.

A manifest names its files relative to the folder its writer opened:
``dkv.open(root, instance="a/b")`` writes ``a/b/sst/…`` and ``a/b/wal/…`` into ``root``.
The same instance can be opened from elsewhere: from an enclosing folder (say a state
root that holds many instances, such as spark_ops' ``<query id>/<operator>/L…/p00000``)
or from its own folder (instance ""). ``root_of`` finds the writer's folder from the
names in the manifest, so a reader finds the files wherever it starts, and a writer that
continues names its new files as its predecessors did. The rule is generic: it reads only
the instance names that the manifest's own file names carry, never a user's naming.

``check_new`` decides what an open of an instance that has neither a manifest nor a
writer claim may do: a read-only open never creates anything, a writer creates a store
only in a missing or empty folder (or one that holds only other dkv instances) unless
told ``create="force"``; every refusal is a ``NotAStoreError`` that names the path, what
is there and what to do.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass

from . import _paths
from .errors import NotAStoreError
from .storage import CachedStore, LocalDirStore, ObjectStore, PrefixStore

CREATE_CHOICES = (True, False, "force")
SHOWN = 6                # names shown in an error
_DKV_OBJECT = re.compile(r"^(?:.+/)?(?:(?:manifest|writer|wal|sst)/[^/]+|retired)$")


@dataclass(frozen=True)
class Root:
    """The store a manifest's names are relative to and the instance's name in it, with
    how it sits relative to the store that was opened: ``inner`` is its folder inside the
    opened store, ``outer`` the opened store's folder inside it (at most one is set)."""
    store: ObjectStore
    ns: str
    inner: str = ""
    outer: str = ""

    def to_opened(self, name: str) -> str | None:
        """``name`` (relative to this root) as a name in the opened store; None when it
        lies outside the opened store."""
        if self.outer:
            head = self.outer + "/"
            return name[len(head):] if name.startswith(head) else None
        return f"{self.inner}/{name}" if self.inner else name


def manifest_names(m) -> list[str]:
    """Every object a manifest references (SSTs, then WAL segment files), relative to its
    root. Segments the manifest carries inline are no objects."""
    return [t.path for t in m.tables()] + [_paths.wal_name(r.ns, r.writer, i)
                                           for r in m.wal if not r.inline for i in range(r.first, r.last + 1)]


def _owners(m) -> set:
    return {_paths.owner_ns(t.path) for t in m.tables()} | {r.ns.strip("/") for r in m.wal}


def _nests(longer: str, shorter: str) -> bool:
    """Whether ``longer`` is ``shorter`` with more leading folders ("q/a/b" and "a/b")."""
    return longer != shorter and (not shorter or longer.endswith("/" + shorter))


def root_of(store, ns: str, m) -> Root:
    """The root that the names in manifest ``m`` (found as instance ``ns`` of ``store``)
    are relative to.

    The candidates are the opened store with ``ns`` split at each folder (the root further
    down) and the enclosing folders of the store (``ObjectStore.parent``). The one whose
    instance name is among the instances the manifest names files of, and under which a
    referenced file exists, wins (else any candidate under which it exists). No I/O in the
    usual case (opened as its writer did); one request when opened from another folder."""
    ns = ns.strip("/")
    here = Root(store, ns)
    owners = _owners(m)
    if not owners or (ns in owners and not any(_nests(q, ns) or _nests(ns, q) for q in owners)):
        return here
    depth = max(q.count("/") + 1 for q in owners) + 2
    cands = [here, *_below(store, ns), *_above(store, ns, depth)]
    hits = [c for c in cands if c.ns in owners]
    if hits == [here]:
        return here
    names = manifest_names(m)
    if not names:           # only inline segments: nothing to look for
        return hits[0] if hits else here
    # One root whose instance name matches is not proof: an instance made from the root
    # instance's checkpoint (``sources=[("", n)]``) names the root's files as "sst/…" with
    # the owner "", which the instance's own folder would match too. The file decides.
    for c in hits + [c for c in cands if c not in hits]:
        if c.store.size(names[0]) is not None:
            return c
    return hits[0] if hits else here


def _below(store, ns: str) -> list:
    parts = ns.split("/") if ns else []
    return [Root(PrefixStore(store, "/".join(parts[:j])), "/".join(parts[j:]), inner="/".join(parts[:j]))
            for j in range(1, len(parts) + 1)]


def _above(store, ns: str, depth: int) -> list:
    out, cur, outer = [], store, ""
    for _ in range(depth):
        up = cur.parent()
        if up is None:
            break
        cur, name = up
        outer = f"{name}/{outer}" if outer else name
        out.append(Root(cur, f"{outer}/{ns}" if ns else outer, outer=outer))
    return out


# -- is there a store? ---------------------------------------------------------------------------

def instances_in(names) -> list[str]:
    """The instances that object names (relative to one folder) belong to, sorted ("" is
    the folder's own)."""
    found = set()
    for name in names:
        for d in (_paths.MANIFEST_DIR, _paths.WRITER_DIR):
            i = name.find(d)
            if i == 0 or (i > 0 and name[i - 1] == "/"):
                found.add(name[: max(0, i - 1)])
    return sorted(found)


def where(store, ns: str) -> str:
    loc = store.location
    if not ns:
        return loc
    return f"{loc}{ns}" if loc.endswith("/") else f"{loc}/{ns}"


def _shown(names: list, quote: bool = True) -> str:
    shown = [repr(n) if quote else n for n in names[:SHOWN]]
    more = len(names) - SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _is_file(store, ns: str) -> bool:
    if not isinstance(store, LocalDirStore):
        return False
    path = os.path.join(store.root, *ns.split("/")) if ns else store.root
    return os.path.exists(path) and not os.path.isdir(path)


def _nothing_there(store, ns: str) -> str:
    inner = getattr(store, "inner", None)
    if isinstance(store, LocalDirStore):
        path = os.path.join(store.root, *ns.split("/")) if ns else store.root
        if not os.path.exists(path):
            return "the folder does not exist"
        if not os.path.isdir(path):
            return "it is a file, not a folder"
        return "the folder is empty"
    s3 = sys.modules.get("dkv.storage.s3")       # not imported: no S3 store exists
    if s3 is not None and (isinstance(store, s3.S3Store)
                           or (isinstance(store, CachedStore) and isinstance(inner, s3.S3Store))):
        return "no objects under this prefix"
    return "it holds no objects"


def check_create(create) -> None:
    """Raise ValueError unless ``create`` is one of CREATE_CHOICES, whether or not a store
    is there. By identity, as 1 == True and 0 == False: a writer would read 1 as False."""
    if not (create is True or create is False or (isinstance(create, str) and create == "force")):
        raise ValueError(f"create must be True, False or 'force', got {create!r}")


def check_new(store, ns: str, *, read_only: bool, create=True, checkpoint: int | None = None) -> None:
    """Instance ``ns`` of ``store`` has no manifest and no writer claim: return if a writer
    may create it here, else raise NotAStoreError saying why and what to do."""
    check_create(create)
    if _is_file(store, ns):
        raise NotAStoreError(f"no dkv store at {where(store, ns)}: it is a file, not a folder (a store is a "
                             f"folder: check the location{'' if read_only else '; nothing was written'})")
    if not read_only and create == "force":
        return
    prefix = _paths.ns_prefix(ns)
    rel = [n[len(prefix):] for n, _ in store.list(prefix)]
    if not read_only and create is True and all(_DKV_OBJECT.match(n) for n in rel):
        return          # missing or empty (or only other dkv instances below): make a store here
    mode = "read" if read_only else ("create" if create is True else "existing")
    raise not_a_store(store, ns, rel=rel, mode=mode, checkpoint=checkpoint)


def not_a_store(store, ns: str = "", *, rel: list | None = None, mode: str = "read",
                checkpoint: int | None = None) -> NotAStoreError:
    """The error for opening instance ``ns`` of ``store`` where there is no dkv store.
    ``mode``: "read" (a read-only open), "create" (a writer refused: other files are
    there) or "existing" (a writer told create=False)."""
    ns = ns.strip("/")
    prefix = _paths.ns_prefix(ns)
    if rel is None:
        rel = [n[len(prefix):] for n, _ in store.list(prefix)]
    foreign = [n for n in rel if not _DKV_OBJECT.match(n)]
    at = where(store, ns)
    lead = f"cannot open checkpoint {checkpoint}: " if checkpoint is not None else ""
    below = [f"{ns}/{n}" if ns else n for n in instances_in(rel) if n]
    n = len(foreign)
    if below:
        # A writer refused here (a spark_ops state root: instances beside the query's own
        # files) most likely meant one of the instances too, as a reader does.
        why = ""
        if mode == "create":
            why = (f". A writer does not create a new store at its root, which also holds {n} object"
                   f"{'s' if n > 1 else ''} that {'are' if n > 1 else 'is'} not a dkv store's "
                   f"({_shown(foreign, quote=False)}), unless told create='force'")
        return NotAStoreError(
            f"{lead}{at} holds {len(below)} dkv instance{'s' if len(below) > 1 else ''}, not one store at its "
            f"root: name one with instance= (--instance on the command line), e.g. {_shown(below)}; "
            f"`python -m dkv instances {store.location}` lists them all{why}")
    if mode == "create":
        return NotAStoreError(
            f"not creating a dkv store at {at}: it holds {n} object{'s' if n > 1 else ''} that "
            f"{'are' if n > 1 else 'is'} not a dkv store's ({_shown(foreign, quote=False)}). A writer creates a "
            "store only in a missing or empty folder: pick another location, or pass create='force' to add a "
            "store among these files")
    if foreign:
        what = (f"it holds {n} other object{'s' if n > 1 else ''} ({_shown(foreign, quote=False)}) but no dkv "
                "manifest/ or writer/ folder")
    elif rel:
        what = f"it holds dkv files ({_shown(rel, quote=False)}) but no manifest or writer claim"
    else:
        what = _nothing_there(store, ns)
    if mode == "existing":
        return NotAStoreError(f"{lead}no dkv store at {at}: {what}. create=False opens only an existing store: "
                              "check the location, or leave create=True to make a new store")
    others = ""
    if ns:
        names = instances_in(name for name, _ in store.list(""))
        if names:
            others = f"; the instances in {store.location} are {_shown(names)}"
    hint = "check the location" + (" and the instance name" if ns else "")
    return NotAStoreError(f"{lead}no dkv store at {at}: {what} ({hint}; a read-only open creates nothing){others}")
