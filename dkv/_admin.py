"""Operations over a whole location: instances, retirement after a rescale, verification
and garbage collection of retired instances' files."""
from __future__ import annotations

import logging
from typing import Any, Callable

from . import _locate, _paths
from ._timeline import Timeline
from .errors import CheckpointNotFoundError, CorruptionError, DkvError, ObjectMissingError
from .format import manifest as mf
from .format import sst, wal
from .storage import Location, open_store

log = logging.getLogger(__name__)
Progress = Callable[[int, int, str], None]


def instances(location: Location, *, required: bool = False, **store_options: Any) -> list[str]:
    """Names of the instances under ``location`` ("" is the root instance), sorted. Each
    name opens its instance: ``dkv.open(location, instance=name)``. ``required``: raise
    NotAStoreError (saying what is there instead) when there is none."""
    store = open_store(location, create=False, **store_options)
    names = _locate.instances_in(name for name, _ in store.list(""))
    if required and not names:
        raise _locate.not_a_store(store)
    return names


def list_checkpoints(location: Location, instance: str = "", **store_options: Any) -> list:
    """Valid checkpoints of ``instance`` (CheckpointInfo, oldest first) without opening it.
    Costs two listings and, when there are two manifests or more, a read of the newest
    (its retained epochs tell checkpoints from manifests kept only for the inline WAL
    segments they carry, RFC 0011)."""
    return Timeline(open_store(location, create=False, **store_options), instance).checkpoints()


def timeline(store, instance: str = "", checkpoint: int | None = None) -> Timeline:
    """The Timeline of ``instance``; NotAStoreError (naming what is there instead, e.g. the
    instances below a state root) when it has neither a checkpoint nor a writer."""
    tl = Timeline(store, instance)
    if not tl.manifests and not tl.claim_names:
        raise _locate.not_a_store(store, instance, checkpoint=checkpoint)
    return tl


def retire(location: Location, instance: str, **store_options: Any) -> None:
    """Mark ``instance`` retired after a rescale: it can no longer be opened for writing,
    and ``collect_garbage`` may delete its files once no other instance references them.
    Call only after every successor has completed a checkpoint."""
    store = open_store(location, **store_options)
    store.put_if_absent(_paths.retired_name(instance), b"retired\n")


def referenced_files(store, instance: str) -> set:
    """Every object the valid checkpoints of ``instance`` reference, named as in ``store``
    (a manifest names them relative to the folder its writer opened; files outside
    ``store`` are left out)."""
    for attempt in range(MAX_LISTINGS):
        out = set()
        root = None
        try:
            tl = Timeline(store, instance)
            for info in tl.checkpoints():
                m = tl.manifest(info)
                if root is None:
                    root = _locate.root_of(store, instance, m)
                for name in _locate.manifest_names(m):
                    name = root.to_opened(name)
                    if name is not None:
                        out.add(name)
            return out
        except ObjectMissingError:
            # The instance's writer collected a manifest past its retention after we listed
            # them: newer ones came after, and they may name files the listed ones did not.
            # List again.
            if attempt == MAX_LISTINGS - 1:
                raise
    raise AssertionError("unreachable")


MAX_LISTINGS = 8


def collect_garbage(location: Location, dry_run: bool = False, progress: Progress | None = None,
                    **store_options: Any) -> dict:
    """Delete files of retired instances that no live instance's checkpoints reference.

    Live instances collect their own garbage after each checkpoint; files shared after a
    rescale belong to retired instances and are only deleted here, once unreferenced.
    """
    store = open_store(location, **store_options)
    names = instances(store)
    retired = [n for n in names if store.exists(_paths.retired_name(n))]
    live = [n for n in names if n not in retired]
    refs: set = set()
    for i, ns in enumerate(live):
        refs |= referenced_files(store, ns)
        if progress:
            progress(i + 1, len(live), ns)
    deleted, kept, nbytes = [], 0, 0
    for ns in retired:
        prefix = _paths.ns_prefix(ns)
        files = [(n, s) for d in (_paths.SST_DIR, _paths.WAL_DIR) for n, s in store.list(prefix + d)]
        doomed = [(n, s) for n, s in files if n not in refs]
        kept += len(files) - len(doomed)
        if len(doomed) == len(files):   # nothing referenced: the instance can go entirely
            doomed = [(n, s) for n, s in store.list(prefix) if n != _paths.retired_name(ns)] + doomed
            doomed = list(dict(doomed).items())
        for n, s in doomed:
            if not dry_run:
                store.delete(n)
            deleted.append(n)
            nbytes += s
    return {"live_instances": live, "retired_instances": retired, "deleted": deleted,
            "deleted_bytes": nbytes, "kept_shared_files": kept, "dry_run": dry_run}


def verify(location: Location, instance: str = "", checkpoint: int | None = None, progress: Progress | None = None,
           **store_options: Any) -> dict:
    """Read every file a checkpoint references and check every checksum (manifest, WAL
    segments, SST footers, metadata and each data block). Raises CorruptionError on the
    first damaged file, naming it; returns counts when all is well."""
    store = open_store(location, create=False, **store_options)
    tl = timeline(store, instance, checkpoint)
    info = tl.find(checkpoint)
    if info is None:
        if checkpoint is not None:
            raise tl.not_found(checkpoint, f"{store.location!r} instance {instance!r}")
        raise CheckpointNotFoundError(f"no checkpoint at all in {store.location!r} instance {instance!r}")
    m = tl.manifest(info)
    root = _locate.root_of(store, instance, m)
    store = root.store    # where the manifest's names are relative to
    files: list[tuple[str, str, int | None, tuple[str, bytes] | None]] = [
        ("sst", t.path, t.size, None) for t in m.tables()]
    carriers: dict = {}
    for r in m.wal:
        if r.data is not None:
            files.append(("wal", _paths.wal_name(r.ns, r.writer, r.first), None, (info.name, r.data)))
        elif r.carried is not None:     # carried by earlier manifests (RFC 0011): read each once
            for i, ew in zip(range(r.first, r.last + 1), r.carried):
                name = _paths.manifest_name(root.ns, *ew)
                if name not in carriers:
                    carriers[name] = mf.decode(store.get(name), name)
                entry = mf.carried_segment(carriers[name], r.ns, r.writer, i)
                if entry is None:
                    raise CorruptionError(f"manifest {info.name}: WAL segment {_paths.wal_name(r.ns, r.writer, i)} "
                                          f"is carried by manifest {name}, which does not hold it")
                files.append(("wal", _paths.wal_name(r.ns, r.writer, i), None, (name, entry.data)))
        else:
            files += [("wal", _paths.wal_name(r.ns, r.writer, i), None, None) for i in range(r.first, r.last + 1)]
    report: dict[str, Any] = {"epoch": m.epoch, "manifest": info.name, "sst_files": 0, "wal_segments": 0,
                              "inline_segments": 0, "carriers": len(carriers), "blocks": 0, "records": 0, "bytes": 0}
    for n, (kind, path, size, inline) in enumerate(files):
        if inline is not None:      # carried by a manifest (RFC 0007, 0011): no file to read
            carrier, data = inline
            what = f"manifest {carrier}: its inline WAL segment {path}"
            report["inline_segments"] += 1
        else:
            data = store.get(path)
            what = f"WAL segment {path}"
        report["bytes"] += len(data)
        if kind == "wal":
            report["records"] += len(wal.decode(data, what).keys)
            report["wal_segments"] += 1
        else:
            if len(data) != size:
                raise CorruptionError(f"SST {path}: {len(data)} bytes, the manifest says {size}")
            off, length, crc = sst.parse_footer(data, f"SST {path}")
            meta = sst.parse_meta(data[off:off + length], crc, f"SST {path}", sst.footer_version(data))
            for i, (o, ln, c) in enumerate(zip(meta.offsets, meta.lengths, meta.crcs)):
                keys = sst.decode_block(data[o:o + ln], c, f"SST {path} block {i}", meta.version)[0]
                report["records"] += len(keys)
                report["blocks"] += 1
            report["sst_files"] += 1
        if progress:
            progress(n + 1, len(files), path)
    return report


__all__ = ["list_checkpoints", "instances", "retire", "collect_garbage", "verify", "referenced_files", "timeline",
           "DkvError"]
