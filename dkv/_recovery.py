"""Opening a store: choose the manifest, build the Version lazily, load the WAL segments.

Opening costs O(manifest + WAL segment bytes): SSTs are referenced, not read, until a
read needs them, and WAL segments become immutable memtables (Deltas) over their bytes
without being decoded; a segment the manifest carries inline (RFC 0007) costs no read,
one that an earlier manifest carries (RFC 0011) a read of that manifest (one per carrier,
all fetched with one ``get_many``). With ``sources`` an instance starts from other
instances' checkpoints restricted to its key-group range (a rescale), sharing their files
without copying (their inline segments are carried again by its first manifest).
"""
from __future__ import annotations

from . import _delta, _paths
from ._checkpoint import Segment
from ._table import Table, group_bounds
from ._timeline import Timeline
from ._version import Version
from .errors import CheckpointNotFoundError, CorruptionError, ObjectMissingError, with_context
from .format import manifest as mf


class Restored:
    """The state a DB starts from."""

    def __init__(self) -> None:
        self.manifest: mf.Manifest | None = None
        self.info = None
        self.version = Version()
        self.sources: tuple = ()           # immutable memtables (Deltas), newest first
        self.segments: list[Segment] = []
        self.last_seq = 0
        self.flushed_seq = 0


def intersect(a: tuple, b: tuple) -> tuple | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None


def load_checkpoint(store, ns: str, epoch: int | None, cache, tables: dict, timeline: Timeline,
                    manifest: mf.Manifest | None = None, strip: tuple | None = None) -> Restored:
    """State of instance ``ns`` at checkpoint ``epoch`` (latest when None). ``manifest``:
    that checkpoint's manifest when the caller has read it already; ``strip``: the bloom
    strip rule of the segments' in-memory filters (the store's ``bloom_strip``)."""
    r = Restored()
    info = timeline.find(epoch)
    if info is None:
        if epoch is None:
            return r
        raise timeline.not_found(epoch, f"{store.location!r} instance {ns!r}")
    if manifest is not None and (manifest.epoch, manifest.writer) == (info.epoch, info.writer):
        m = manifest
    else:
        m = timeline.manifest(info)
    r.manifest, r.info = m, info
    _apply(r, m, m.groups, store, cache, tables, info.name, strip, ns)
    # Segments of other instances (after a rescale) count sequence numbers of their own.
    r.flushed_seq = max((s.skip for s in r.segments if s.ns == ns.strip("/")), default=0)
    return r


def load_sources(store, sources: list, groups: tuple, cache, tables: dict, strip: tuple | None = None) -> Restored:
    """State merged from ``[(ns, epoch), ...]`` restricted to key groups ``groups``. A
    source may be ``(ns, epoch, (first, end))`` to take only those key groups from it;
    sources must not overlap in the key groups they contribute."""
    r = Restored()
    taken: list[tuple] = []
    for src in sources:
        src_ns, epoch = src[0], src[1]
        want = intersect(groups, tuple(src[2])) if len(src) > 2 else groups
        if want is None:
            continue
        tl = Timeline(store, src_ns)
        info = tl.find(epoch)
        if info is None:
            if epoch is None:
                raise CheckpointNotFoundError(f"source instance {src_ns!r} has no checkpoint at all")
            raise tl.not_found(epoch, f"source instance {src_ns!r}")
        m = tl.manifest(info)
        part = intersect(m.groups, want)
        if part is None:
            continue
        if any(intersect(part, t) for t in taken):
            raise ValueError(f"sources overlap in key groups {part}: {sources!r}")
        taken.append(part)
        _apply(r, m, part, store, cache, tables, info.name, strip, src_ns)
    # Their carriers are manifests of the source instances: this instance's first manifest
    # carries those segments itself (RFC 0007 point 4, RFC 0011).
    for seg in r.segments:
        seg.carrier = None
    return r


def _apply(r: Restored, m: mf.Manifest, groups: tuple, store, cache, tables: dict, where: str,
           strip: tuple | None, ns: str = "") -> None:
    l0 = list(r.version.l0)
    levels = [list(lv) for lv in r.version.levels]
    for i, level in enumerate(m.levels):
        for ref in level:
            part = intersect(ref.groups, groups)
            if part is None or not _range_overlaps(ref, part):
                continue
            if part != ref.groups:
                ref = mf.TableRef(ref.path, ref.size, ref.min_key, ref.max_key, ref.min_seq,
                                  ref.max_seq, ref.count, part)
            t = tables.get((ref.path, ref.groups))
            if t is None or t.ref != ref:
                t = tables[(ref.path, ref.groups)] = Table(ref, store, cache)
            if i == 0:
                l0.append(t)
            else:
                while len(levels) < i:
                    levels.append([])
                levels[i - 1].append(t)
    r.version = Version(l0, levels)
    r.last_seq = max(r.last_seq, m.last_seq)
    _replay(r, m, groups, store, cache, where, strip, ns)


def _range_overlaps(ref: mf.TableRef, groups: tuple) -> bool:
    lo, hi = group_bounds(groups)
    return (hi is None or ref.min_key < hi) and (lo is None or ref.max_key >= lo)


def segments_of(ranges: list, groups: tuple = mf.ALL_KEY_GROUPS, home: tuple | None = None) -> list:
    """The Segments that manifest WAL ranges name, restricted to key groups ``groups``
    (max_seq 0 until loaded). An inline one holds its bytes (state "inline", its carrier
    ``home``: the ``(epoch, writer)`` of the manifest the ranges are from); one of a
    carried run has its carrier and no bytes until ``fetch``."""
    todo = []
    for rng in ranges:
        part = intersect(rng.groups, groups)
        if part is None:
            continue
        if rng.data is not None:
            seg = Segment(rng.ns, rng.writer, rng.first, 0, rng.skip_through, part, state="inline")
            seg.data, seg.carrier = rng.data, home
            todo.append(seg)
            continue
        for k, i in enumerate(range(rng.first, rng.last + 1)):
            seg = Segment(rng.ns, rng.writer, i, 0, rng.skip_through, part)
            if rng.carried is not None:
                seg.state, seg.carrier = "inline", tuple(rng.carried[k])
            todo.append(seg)
    return todo


def _replay(r: Restored, m: mf.Manifest, groups: tuple, store, cache, where: str, strip: tuple | None,
            ns: str) -> None:
    todo = segments_of(m.wal, groups, (m.epoch, m.writer))
    if not todo:
        return
    for seg, blob in zip(todo, fetch(store, todo, ns, where)):
        seg.source = load_segment(seg, blob, cache, carrier_name(ns, seg, where), strip)
        seg.read_from_file(store)
        r.segments.append(seg)
        if seg.source is not None:
            r.sources = (seg.source,) + r.sources


def carrier_name(ns: str, seg: Segment, where: str = "") -> str:
    """The manifest that carries inline segment ``seg`` (``where`` when unknown)."""
    return _paths.manifest_name(ns, *seg.carrier) if seg.carrier is not None else where


def fetch(store, segments: list, ns: str = "", where: str = "") -> list:
    """The bytes of WAL segments: those a manifest carries inline from memory, those that
    earlier manifests of instance ``ns`` carry (RFC 0011) from those manifests, the others
    from their files, all with one ``get_many`` (concurrent on S3; in turn on a local
    folder, where a thread pool would cost more than the reads). ``where``: the manifest
    that names them, for errors. A carried segment's bytes are kept on it (``data``)."""
    files = [s for s in segments if s.state != "inline"]
    wanted = [s for s in segments if s.state == "inline" and s.data is None]
    carriers = sorted({carrier_name(ns, s) for s in wanted})
    names = [s.name for s in files] + carriers
    try:
        blobs = store.get_many(names) if names else []
    except ObjectMissingError as e:
        missing = [c for c in carriers if not store.exists(c)]
        if missing:
            raise with_context(f"manifest {where or '?'}: the manifest {missing[0]} that carries some of its "
                               "WAL segments is gone (was the checkpoint collected while it was read?)", e) from e
        raise
    got = iter(blobs[:len(files)])
    decoded = {}
    for name, blob in zip(carriers, blobs[len(files):]):
        try:
            decoded[name] = mf.decode_inline(blob, name)
        except CorruptionError as e:
            raise CorruptionError(f"manifest {where or '?'}: {e} (it carries WAL segments this one names)") from None
    for s in wanted:
        name = carrier_name(ns, s)
        data = decoded[name].get((s.ns, s.writer, s.id))
        if data is None:
            raise CorruptionError(f"manifest {where or '?'}: WAL segment {s.name} is carried by manifest {name}, "
                                  "which does not hold it")
        s.data = data
    return [s.data if s.state == "inline" else next(got) for s in segments]


def load_segment(seg: Segment, blob: bytes, cache, where: str = "", strip: tuple | None = None):
    """A read source over a segment's bytes (sets ``seg.max_seq`` from its header), or None
    when a flush already covers it (max_seq <= skip) or it holds no records. ``where``:
    the manifest that carries an inline segment, named when its bytes are damaged;
    ``strip``: its bloom filter's strip rule."""
    try:
        seg.max_seq, delta = _delta.load(seg.name, blob, cache, seg.groups, seg.skip, strip)
    except CorruptionError as e:
        if seg.state != "inline":
            raise
        raise CorruptionError(f"manifest {where or '?'}: its inline {e}") from None
    return delta
