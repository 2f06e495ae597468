"""Where a shard's time goes at big state, counted rather than sampled (RFC 0012).

    # instructions per component (callgrind; the allocator settings of a shard host set outside):
    export MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 ARROW_DEFAULT_MEMORY_POOL=system
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=prof/k100k/callgrind.%p \
        .venv/bin/python benchmarks/state_profile.py --callgrind --out prof/k100k --keys 100000
    valgrind ... --no-marks                        # the same run unmarked: totals, shared objects
    scripts/env.sh python benchmarks/state_profile.py --report-cg prof/k10k,prof/k100k
    # time per component (cProfile, every thread):
    scripts/env.sh python benchmarks/state_profile.py --keys 100000 --out prof/cp-k100k
    scripts/env.sh python benchmarks/state_profile.py --report prof/cp-k10k,prof/cp-k100k

Runs benchmarks/shard_scale.py's workload (one shard of the buffer operator through the
runtime's ``run_shard_batch``, a staggered warm-up, then ``--events-per-key`` events per key
per batch) and measures only its steady batches (``batch >= --warmup``, after the background
work of the warm-up is done), in one of two ways:

* ``--callgrind``, under ``valgrind --tool=callgrind --instr-atstart=no``: instrumentation
  starts at the first steady batch and the counts are dumped once the last one and the
  background work it queued are done (valgrind's client requests, from a helper module the
  script builds with the system's C compiler, ``valgrind/callgrind.h`` and Python's
  headers). Components (``_components()``: the save's collector, the codec, dkv's get and
  scan, the seal, ...) are told apart by *markers*: the helper's ``mark(k, f)`` runs f
  through a C function of its own per (enclosing component, component), so callgrind's
  inclusive count of each is that component's cost inside that parent, and ``--report-cg``
  subtracts what nested components hold. The markers cost ~3% of the instructions;
  ``--no-marks`` runs without them, for the totals and the split by shared object (the
  interpreter, msgpack, zstd, dkv's and objectspace's C, libc). Instruction counts do not
  depend on the machine's load: two runs of the same code differ by < 0.1%. Iterators a
  component returns (``list(q)``'s, a scan's) are made lists inside their marker, so a
  component's lazy work counts as its own.
* cProfile (the default): the main thread and every job of dkv's background lanes (flush,
  compaction, upload) started during a steady batch, one profile per thread kind, written
  as pstats files under ``--out``. Call counts are exact; times are the profiler's (it
  inflates small Python calls, so shares, not microseconds, are what to compare).
  ``--report`` folds them into components, splitting a function's own time over its
  callers in proportion to their edges' time (cProfile keeps edges, not stacks).

A development tool like shard_scale.py: slow under either profiler (callgrind runs ~50x
slower; a run of K = 100,000 with 5 steady batches takes ~15 minutes), so runs are kept to
a few steady batches (``--batches 40`` covers a flush window).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shard_scale  # noqa: E402
from dkv import _lanes  # noqa: E402
from spark_ops import _opened  # noqa: E402

_CG_HELPER = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <valgrind/callgrind.h>

static PyObject *cg_start(PyObject *self, PyObject *unused) {
    CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; Py_RETURN_NONE;
}
static PyObject *cg_stop(PyObject *self, PyObject *unused) {
    CALLGRIND_DUMP_STATS_AT("steady"); CALLGRIND_STOP_INSTRUMENTATION; Py_RETURN_NONE;
}

#define N %(n)d
typedef PyObject *(*mfn)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);
static long hits[N + 1][N + 1];
static mfn table[N + 1][N + 1];
static __thread int current = 0;       /* the component the calling thread is in (0: none) */

/* m_<parent>_<child>(f, args): calls f. One distinct C function per (enclosing component,
   component), so callgrind's inclusive cost of each is that component's cost inside that
   parent. Built with -O0: no tail calls, no folding of identical functions. */
#define M(P, C) static PyObject *m_##P##_##C(PyObject *f, PyObject *const *args, Py_ssize_t nargs, \
        PyObject *kwnames) { hits[P][C]++; return PyObject_Vectorcall(f, args, nargs, kwnames); }
%(defs)s

typedef struct { PyObject_HEAD int k; PyObject *f; vectorcallfunc vc; } Marked;

static PyObject *marked_call(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Marked *m = (Marked *)self;
    int p = current;
    current = m->k;
    PyObject *r = table[p][m->k](m->f, args, PyVectorcall_NARGS(nargsf), kwnames);
    current = p;
    return r;
}
static PyObject *marked_get(PyObject *self, PyObject *obj, PyObject *type) {
    if (obj == NULL || obj == Py_None) { Py_INCREF(self); return self; }
    return PyMethod_New(self, obj);
}
static void marked_dealloc(PyObject *self) { Py_XDECREF(((Marked *)self)->f); PyObject_Free(self); }
static PyTypeObject MarkedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_cgmarks.Marked", .tp_basicsize = sizeof(Marked), .tp_dealloc = marked_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(Marked, vc), .tp_call = PyVectorcall_Call, .tp_descr_get = marked_get,
};
static PyObject *mark(PyObject *self, PyObject *args) {
    int k; PyObject *f;
    if (!PyArg_ParseTuple(args, "iO", &k, &f)) return NULL;
    if (k < 1 || k > N) { PyErr_SetString(PyExc_ValueError, "component out of range"); return NULL; }
    Marked *m = PyObject_New(Marked, &MarkedType);
    if (m == NULL) return NULL;
    m->k = k; Py_INCREF(f); m->f = f; m->vc = marked_call;
    return (PyObject *)m;
}
static PyObject *counts(PyObject *self, PyObject *unused) {
    PyObject *d = PyDict_New();
    for (int p = 0; p <= N; p++) for (int c = 1; c <= N; c++) if (hits[p][c]) {
        PyObject *key = Py_BuildValue("(ii)", p, c), *v = PyLong_FromLong(hits[p][c]);
        PyDict_SetItem(d, key, v); Py_DECREF(key); Py_DECREF(v);
    }
    return d;
}
static PyObject *reset(PyObject *self, PyObject *unused) { memset(hits, 0, sizeof hits); Py_RETURN_NONE; }
static PyMethodDef methods[] = {
    {"cg_start", cg_start, METH_NOARGS, NULL}, {"cg_stop", cg_stop, METH_NOARGS, NULL},
    {"mark", mark, METH_VARARGS, NULL}, {"counts", counts, METH_NOARGS, NULL}, {"reset", reset, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_cgmarks", NULL, -1, methods};
PyMODINIT_FUNC PyInit__cgmarks(void) {
%(fill)s
    if (PyType_Ready(&MarkedType) < 0) return NULL;
    return PyModule_Create(&mod);
}
"""


def _build_marks(n: int):
    """The helper module: valgrind's client requests, and ``mark(k, f)``, a callable (a
    method when set on a class) that runs f inside component k, through the marker function
    of (the caller's component, k). Built with the system's C compiler."""
    import importlib.util
    import sysconfig
    pairs = [(p, c) for p in range(n + 1) for c in range(1, n + 1)]
    d = Path(tempfile.mkdtemp(prefix="cg-marks-"))
    (d / "_cgmarks.c").write_text(_CG_HELPER % {
        "n": n, "defs": "\n".join(f"M({p}, {c})" for p, c in pairs),
        "fill": "\n".join(f"    table[{p}][{c}] = m_{p}_{c};" for p, c in pairs)})
    so = d / ("_cgmarks" + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(["cc", "-O0", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", "-o", str(so),
                    str(d / "_cgmarks.c")], check=True)
    spec = importlib.util.spec_from_file_location("_cgmarks", so)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Marks:
    """Routes calls of the components' functions through the marker functions (the
    enclosing component is tracked per thread, in C, so a marked call costs ~100
    instructions). Iterators a component returns are marked per ``next`` ("lazy") or made a
    list inside the component ("eager": for iterators their callers consume whole, such as
    a buffer's list(q) and its scan)."""

    def __init__(self, mod) -> None:
        self.mod = mod
        self._patched: list = []

    def wrap(self, k: int, f, how: str):
        mark = self.mod.mark
        if how == "call":
            return mark(k, f)
        if how == "eager":
            def listed(*a, **kw):
                return list(f(*a, **kw))
            marked = mark(k, listed)

            def eager(*a, **kw):
                return iter(marked(*a, **kw))
            return eager
        marked, step = mark(k, f), mark(k, next)

        def lazy(*a, **kw):
            return _MarkedIter(marked(*a, **kw), step)
        return lazy

    def patch(self, k: int, owner, attr: str, how: str = "call") -> None:
        f = getattr(owner, attr)
        w = self.wrap(k, f, how)
        self._patched.append((owner, attr, owner.__dict__.get(attr, _ABSENT) if isinstance(owner, type) else f))
        setattr(owner, attr, w)
        if not isinstance(owner, type) and hasattr(owner, "__name__"):    # a module's function: its importers too
            for mod in list(sys.modules.values()):
                name = getattr(mod, "__name__", "") or ""
                if mod is not owner and name.split(".")[0] in ("dkv", "objectspace", "spark_ops") \
                        and getattr(mod, attr, None) is f:
                    self._patched.append((mod, attr, f))
                    setattr(mod, attr, w)

    def unpatch(self) -> None:
        for owner, attr, f in reversed(self._patched):
            if f is _ABSENT:
                delattr(owner, attr)
            else:
                setattr(owner, attr, f)
        self._patched = []


_ABSENT = object()


class _MarkedIter:
    __slots__ = ("it", "step")

    def __init__(self, it, step) -> None:
        self.it, self.step = iter(it), step

    def __iter__(self):
        return self

    def __next__(self):
        return self.step(self.it)


# The components of RFC 0012's table, in callgrind mode: (label, [(owner, attribute, how)]),
# resolved after the imports. Component 0 is "outside any": the window's other work.
def _components():
    from dkv import _checkpoint, _db
    from dkv.format import _codec as fcodec
    from objectspace import _base, _codec, _queue, space
    from spark_ops import _host_heap, _output, operator
    from spark_ops.operators import _buffer
    return [
        ("runtime (events loop, keys, commit, metrics)", [(shard_scale, "run_shard_batch", "call")]),
        ("harness: making the events", [(shard_scale.BatchEvents, "__iter__", "lazy")]),
        ("harness: listing the folder", [(shard_scale, "folder_sizes", "call")]),
        ("host: heap tidy between batches (gc.freeze, trim)", [(_host_heap, "_tidy_heap", "call")]),
        ("operator on_event (own code)", [(_buffer.Buffer, "on_event", "call")]),
        ("handle lookup/reload (ctx.queue)", [(operator.Context, "queue", "call"),
                                              (operator.Context, "_get_or_create", "call")]),
        ("queue append", [(_queue.PersistedQueue, "append", "call")]),
        ("emit read: list(q)", [(_queue.PersistedQueue, "__iter__", "eager")]),
        ("msgpack decode", [(_codec.MSGPACK, "decode", "call")]),
        ("emit rows + rows to Arrow", [(operator.Context, "emit", "call"), (_output, "rows_to_arrow", "call")]),
        ("save (ObjectSpace.save)", [(space.ObjectSpace, "save", "call")]),
        # With the C save path (RFC 0012 step 2) its collect() is the collector: marking
        # PersistedObject._collect would change the hook the C code checks and send every
        # object to Python.
        ("save: collector (_collect)", [(_base.PersistedObject, "_collect", "call")] if space._SAVE is None
         else [(space._SAVE, "collect", "call")]),
        ("msgpack encode", [(_codec.MSGPACK, "encode", "call")]),
        ("confirm (on_saved)", [(space.ObjectSpace, "on_saved", "call")]),
        ("dkv write (batch -> memtable)", [(_db.DB, "write", "call")]),
        ("dkv get", [(_db.DB, "get", "call")]),
        ("dkv scan", [(_db.DB, "scan", "eager")]),
        ("dkv checkpoint (start, wait)", [(_db.DB, "checkpoint", "call"), (_checkpoint.Checkpoint, "wait", "call")]),
        ("bg: seal (memtable -> WAL segment + Delta)", [(_db.DB, "_encode", "call")]),
        ("bg: flush (merge sealed segments -> L0)", [(_db.DB, "_flush_sources", "call")]),
        ("bg: compaction", [(_db.DB, "_compact", "call")]),
        ("bg: upload (segment, manifest, gc)", [(_db.DB, "_upload_and_log", "call")]),
        ("zstd compress", [(fcodec, "compress", "call")]),
        ("zstd decompress", [(fcodec, "decompress", "call")]),
    ]


class Profiles:
    """cProfile of the main thread and of each background lane's jobs, gated per batch."""

    def __init__(self) -> None:
        self.on = False
        self.main = cProfile.Profile()
        self.lanes: dict = {}        # lane name -> [Profile per thread]
        self._local = threading.local()
        self._lock = threading.Lock()

    def lane_profile(self) -> cProfile.Profile:
        prof = getattr(self._local, "prof", None)
        if prof is None:
            prof = self._local.prof = cProfile.Profile()
            lane = threading.current_thread().name.split("_")[0]
            with self._lock:
                self.lanes.setdefault(lane, []).append(prof)
        return prof

    def dump(self, out: Path) -> dict:
        out.mkdir(parents=True, exist_ok=True)
        files = {"main": str(out / "main.pstats")}
        self.main.dump_stats(files["main"])
        for lane, profs in self.lanes.items():
            st = pstats.Stats(profs[0])
            for p in profs[1:]:
                st.add(p)
            files[lane] = str(out / f"{lane}.pstats")
            st.dump_stats(files[lane])
        return files


def run(args) -> dict:
    profiles = None if args.callgrind else Profiles()
    n = len(_components())
    marks = Marks(_build_marks(n)) if args.callgrind and not args.no_marks else None
    cg = marks.mod if marks is not None else (_build_marks(1) if args.callgrind else None)
    inner = shard_scale.run_shard_batch
    marked_inner = marks.mod.mark(1, inner) if marks is not None else None
    counted = {"events": 0, "batches": 0}

    def wait_background():
        for st in list(_opened._SHARDS.values()):
            st.db.wait_idle()

    def call_inner(spec, batch, shard, events, **kw):
        if marks is None:
            return inner(spec, batch, shard, events, **kw)
        return marked_inner(spec, batch, shard, events, **kw)

    def run_shard_batch(spec, batch, shard, events, **kw):
        steady = batch >= args.warmup
        if not steady:
            out = call_inner(spec, batch, shard, events, **kw)
            if batch == args.warmup - 1:
                wait_background()       # the warm-up's own background work is not the steady batches'
            return out
        counted["events"] += len(events)
        counted["batches"] += 1
        if cg is not None and batch == args.warmup:
            cg.reset()
            cg.cg_start()
        if profiles is not None:
            profiles.on = True
            profiles.main.enable()
        try:
            return call_inner(spec, batch, shard, events, **kw)
        finally:
            if profiles is not None:
                profiles.main.disable()
                profiles.on = False
            if batch == args.batches - 1:
                wait_background()
                if cg is not None:
                    cg.cg_stop()
                    counted["calls"] = {f"{p}_{c}": v for (p, c), v in cg.counts().items()}

    submit = _lanes.Lane.submit

    def profiled_submit(self, fn, /, *a, **kw):
        if profiles is None or not profiles.on:
            return submit(self, fn, *a, **kw)

        def job():
            prof = profiles.lane_profile()
            prof.enable()
            try:
                return fn(*a, **kw)
            finally:
                prof.disable()
        return submit(self, job)

    if marks is not None:
        for k, (_label, targets) in enumerate(_components(), 1):
            for owner, attr, how in targets:
                if owner is not shard_scale or attr != "run_shard_batch":
                    marks.patch(k, owner, attr, how)
    shard_scale.run_shard_batch = run_shard_batch
    _lanes.Lane.submit = profiled_submit
    try:
        ns = shard_scale.options(quiet=True, keys=args.keys, shards=args.shards, groups=args.groups,
                                 count=args.count, events_per_key=args.events_per_key, batches=args.batches,
                                 warmup=args.warmup, memory=args.memory)
        result = shard_scale.run(ns)
    finally:
        shard_scale.run_shard_batch = inner
        _lanes.Lane.submit = submit
        if marks is not None:
            marks.unpatch()
    summary = {**result["summary"], "steady_events": counted["events"], "steady_batches": counted["batches"],
               "marked_calls": counted.get("calls")}
    if profiles is not None:
        summary["pstats"] = profiles.dump(Path(args.out))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    summary["pid"] = os.getpid()
    (Path(args.out) / ("summary.json" if cg is None else "summary.cg.json" if marks else "summary.cg0.json")).write_text(
        json.dumps(summary, indent=1))
    return summary


# -- the report: pstats folded into components ---------------------------------------------

# Each component is a set of functions (file suffix, function name) whose inclusive time is
# the component's, taken on the main thread's call graph below run_shard_batch; a function
# counted by an earlier component is not counted again inside a later one (see _fold).
COMPONENTS = [
    ("handle lookup/reload", [("spark_ops/operator.py", "method"), ("spark_ops/operator.py", "_get_or_create")]),
    ("emit read (list(q))", [("objectspace/_queue.py", "__iter__"), ("objectspace/_slots.py", "_iter_slots")]),
    ("emit: ctx.emit + output rows to Arrow", [("spark_ops/operator.py", "emit"), ("spark_ops/_runtime.py", "convert_emitted"), ("spark_ops/_output.py", "rows_to_arrow")]),
    ("save: msgpack encode", [("objectspace/_codec.py", "encode")]),
    ("save: collector (dirty slots -> records)", [("objectspace/_base.py", "_collect")]),
    ("save: counts, cache learn, batch.extend, promote", [("objectspace/space.py", "save")]),
    ("confirm (on_saved, cache accounting, evictions)", [("objectspace/space.py", "on_saved")]),
    ("dkv write (WriteBatch -> memtable)", [("dkv/_db.py", "write")]),
    ("dkv checkpoint start + wait", [("dkv/_db.py", "checkpoint"), ("dkv/_checkpoint.py", "wait")]),
    ("operator on_event (own code, append)", [("spark_ops/operators/_buffer.py", "on_event")]),
    ("runtime (events loop, keys, metrics, rest)", [("spark_ops/_runtime.py", "run_shard_batch")]),
]

LANE_COMPONENTS = [
    ("seal: memtable -> WAL segment (encode)", [("dkv/format/wal.py", "encode_segment"), ("dkv/_delta.py", "from_memtable")]),
    ("flush/compaction merge", [("dkv/_merge.py", "merged_ranges")]),
    ("table build (SST blocks, bloom)", [("dkv/format/sst.py", "add"), ("dkv/format/sst.py", "finish")]),
    ("zstd", [("~", "<method 'compress' of 'zstd.ZstdCompressor' objects>")]),
]


def _match(func, specs) -> bool:
    fname, _line, name = func
    return any(fname.endswith(f) and name == n for f, n in specs)


def _fold(stats: pstats.Stats, components) -> dict:
    """Time of each component over the call graph, each call counted once. A function that
    matches a component belongs to it (the first listed that matches: list inner parts
    first); any other function's own time goes to the components of its callers, split in
    proportion to each calling edge's cumulative time (gprof's assumption: cProfile keeps
    caller edges, not whole stacks). Functions reached from no component count as "rest"."""
    raw = stats.stats                      # func -> (cc, nc, tt, ct, callers)
    n = len(components)
    owner: dict = {}
    for func in raw:
        for i, (_name, specs) in enumerate(components):
            if _match(func, specs):
                owner[func] = i
                break
    dist: dict = {}                        # func -> list of n + 1 fractions (the last: rest)

    def fixed(i):
        v = [0.0] * (n + 1)
        v[i] = 1.0
        return v
    for func in raw:
        dist[func] = fixed(owner.get(func, n))
    for _ in range(30):                    # call graphs are shallow; iterate to a fixed point
        changed = 0.0
        for func, (_cc, _nc, _tt, ct, callers) in raw.items():
            if func in owner or not callers or ct <= 0:
                continue
            v = [0.0] * (n + 1)
            got = 0.0
            for caller, edge in callers.items():
                if caller == func or caller not in dist:
                    continue
                w = edge[3] / ct
                got += w
                for i, x in enumerate(dist[caller]):
                    v[i] += w * x
            if got <= 0:
                continue
            v = [x / got for x in v]
            changed += sum(abs(a - b) for a, b in zip(v, dist[func]))
            dist[func] = v
        if changed < 1e-9:
            break
    totals = [0.0] * (n + 1)
    for func, (_cc, _nc, tt, _ct, _callers) in raw.items():
        for i, x in enumerate(dist[func]):
            totals[i] += tt * x
    out = {components[i][0]: totals[i] for i in range(n)}
    out["rest"] = totals[n]
    return out


def report(dirs: list) -> None:
    rows = {}
    for d in dirs:
        s = json.loads((Path(d) / "summary.json").read_text())
        ev = s["steady_events"]
        main = pstats.Stats(s["pstats"]["main"])
        total = main.total_tt
        comp = _fold(main, COMPONENTS)
        lanes = {}
        for lane, f in s["pstats"].items():
            if lane == "main":
                continue
            st = pstats.Stats(f)
            lanes[lane] = (st.total_tt, _fold(st, LANE_COMPONENTS))
        rows[d] = (s, ev, total, comp, lanes)
    names = [c[0] for c in COMPONENTS] + ["rest"]
    head = " | ".join(f"K={rows[d][0]['keys']:,}" for d in dirs)
    print(f"| main thread, cProfile us/event (share) | {head} |")
    print("|---|" + "---|" * len(dirs))
    for n in names:
        cells = []
        for d in dirs:
            s, ev, total, comp, _ = rows[d]
            cells.append(f"{1e6 * comp[n] / ev:.2f} ({100 * comp[n] / total:.0f}%)")
        print(f"| {n} | " + " | ".join(cells) + " |")
    cells = [f"{1e6 * rows[d][2] / rows[d][1]:.2f}" for d in dirs]
    print("| **main thread total** | " + " | ".join(cells) + " |")
    lane_names = sorted({lane for d in dirs for lane in rows[d][4]})
    for lane in lane_names:
        cells = []
        for d in dirs:
            s, ev, total, comp, lanes = rows[d]
            t = lanes.get(lane, (0.0, {}))[0]
            cells.append(f"{1e6 * t / ev:.2f}")
        print(f"| background {lane} | " + " | ".join(cells) + " |")
        for n in [c[0] for c in LANE_COMPONENTS] + ["rest"]:
            cells = []
            for d in dirs:
                s, ev, total, comp, lanes = rows[d]
                v = lanes.get(lane, (0.0, {}))[1].get(n, 0.0)
                cells.append(f"{1e6 * v / ev:.2f}")
            print(f"|   {n} | " + " | ".join(cells) + " |")


_LINE = re.compile(r"^\s*([\d,]+) \([^)]*\)\s+(.*?)(?: \[(.*)\])?$")


def _annotate(path: str, inclusive: bool) -> list:
    """(Ir, function, object) lines of callgrind_annotate's listing of a dump."""
    out = subprocess.run(["callgrind_annotate", f"--inclusive={'yes' if inclusive else 'no'}", "--threshold=100",
                          "--auto=no", path], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2), m.group(3) or ""))
    return rows


def _dump_of(d: Path, summary: dict) -> str:
    """The dump of the steady window: the largest callgrind.<pid>* file in ``d``."""
    files = sorted(d.glob(f"callgrind.{summary['pid']}*"), key=lambda f: f.stat().st_size)
    if not files:
        raise SystemExit(f"{d}: no callgrind.{summary['pid']}* (run with --callgrind-out-file={d}/callgrind.%p)")
    return str(files[-1])


_OBJECTS = [("interpreter (libpython)", ("libpython", "Python-3.")), ("msgpack (C)", ("msgpack",)),
            ("zstd", ("zstd",)), ("dkv _native (C)", ("dkv/format/_native",)),
            ("objectspace _native (C, RFC 0012)", ("objectspace/_native",)), ("Cython-compiled modules", ("__pyx",)),
            ("libc (malloc, memcpy, ...)", ("libc.so", "sysdeps", "./string/", "malloc")), ("isal (CRC-32)", ("isal",)),
            ("pyarrow", ("arrow",)), ("markers (state_profile)", ("_cgmarks",))]


def report_cg(dirs: list) -> None:
    """Instructions per steady event by component (the markers' dump) and by shared object
    (each folder's unmarked dump, when there is one: the totals without the markers' cost)."""
    labels = [c[0] for c in _components()]
    n = len(labels)
    cols = []
    for d in map(Path, dirs):
        s = json.loads((d / "summary.cg.json").read_text())
        rows = _annotate(_dump_of(d, s), True)
        total = next(ir for ir, fn, _ in rows if fn == "PROGRAM TOTALS")
        incl: dict = {}
        for ir, fn, _ob in rows:
            m = re.fullmatch(r"\?\?\?:m_(\d+)_(\d+)", fn)
            if m:
                incl[(int(m.group(1)), int(m.group(2)))] = ir
        excl = [0] * (n + 1)
        for k in range(1, n + 1):
            excl[k] = sum(incl.get((p, k), 0) for p in range(n + 1)) - sum(incl.get((k, j), 0) for j in range(1, n + 1))
        excl[0] = total - sum(incl.get((0, k), 0) for k in range(1, n + 1))
        plain = None
        p0 = d / "summary.cg0.json"
        if p0.exists():
            s0 = json.loads(p0.read_text())
            rows0 = _annotate(_dump_of(d, s0), False)
            total0 = next(ir for ir, fn, _ in rows0 if fn == "PROGRAM TOTALS")
            by_ob: dict = {}
            for ir, fn, ob in rows0:
                if fn == "PROGRAM TOTALS" or fn.startswith("events annotated"):
                    continue
                where = f"{fn} {ob}"
                key = next((lab for lab, pats in _OBJECTS if any(p in where for p in pats)), "other")
                by_ob[key] = by_ob.get(key, 0) + ir
            top = sorted(((ir, fn.split(":")[-1]) for ir, fn, ob in rows0
                          if fn != "PROGRAM TOTALS" and not fn.startswith("events annotated")), reverse=True)[:12]
            plain = (total0, s0["steady_events"], by_ob, top)
        cols.append((s, total, excl, plain))
    head = " | ".join(f"K={s['keys']:,}" for s, *_ in cols)
    print(f"| instructions per steady event (share), with markers | {head} |")
    print("|---|" + "---|" * len(cols))
    order = sorted(range(n + 1), key=lambda k: -cols[-1][2][k])
    for k in order:
        label = labels[k - 1] if k else "other (between batches, outside every component)"
        cells = [f"{e[k] / s['steady_events']:,.0f} ({100 * e[k] / t:.1f}%)" for s, t, e, _ in cols]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"{t / s['steady_events']:,.0f}" for s, t, _e, _ in cols) + " |")
    if all(c[3] for c in cols):
        print()
        print(f"| instructions per steady event by shared object (no markers) | {head} |")
        print("|---|" + "---|" * len(cols))
        names = [lab for lab, _ in _OBJECTS] + ["other"]
        for lab in names:
            print(f"| {lab} | " + " | ".join(f"{c[3][2].get(lab, 0) / c[3][1]:,.0f} ({100 * c[3][2].get(lab, 0) / c[3][0]:.1f}%)"
                                              for c in cols) + " |")
        print("| **total** | " + " | ".join(f"{c[3][0] / c[3][1]:,.0f}" for c in cols) + " |")
        for s, _t, _e, plain in cols:
            print(f"\nK={s['keys']:,}: top functions by own instructions per event: "
                  + ", ".join(f"{fn} {ir / plain[1]:,.0f}" for ir, fn in plain[3]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--groups", type=int, default=256)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--events-per-key", type=int, default=2)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--memory", default=None)
    ap.add_argument("--callgrind", action="store_true", help="run under valgrind --tool=callgrind --instr-atstart=no")
    ap.add_argument("--no-marks", action="store_true", help="with --callgrind: no component markers (the total alone)")
    ap.add_argument("--out", default="bench-output/state-profile", help="folder of the pstats files (cProfile)")
    ap.add_argument("--report", default=None, help="comma-separated --out folders: print the component table")
    ap.add_argument("--report-cg", default=None, help="comma-separated --out folders of callgrind runs: their tables")
    args = ap.parse_args(argv)
    if args.report:
        report(args.report.split(","))
        return 0
    if args.report_cg:
        report_cg(args.report_cg.split(","))
        return 0
    if argv is None and any(name not in os.environ for name in shard_scale._host.HOST_ENV):
        for name, value in shard_scale._host.HOST_ENV.items():
            os.environ.setdefault(name, value)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    s = run(args)
    print(json.dumps({k: v for k, v in s.items() if k != "pstats"}, indent=1))
    return 0 if s["output_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
