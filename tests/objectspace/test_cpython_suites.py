"""CPython's own collection tests, run against the persisted kinds (issue 17).

CPython ships the tests of its collections as reusable classes that take the type under
test as a factory: ``test.list_tests.CommonTest`` (``type2test``), ``test.mapping_tests``
(``type2test``), ``test.test_deque`` (the module's ``deque``) and ``test.test_set``
(``thetype``, and ``set(...)`` in the ``setUp`` of the operator classes). This module runs
them with that factory making a fresh persisted object in a fresh ObjectSpace:

    suite    classes                                                   kinds
    list     list_tests.CommonTest                                     list
    dict     mapping_tests.TestHashMappingProtocol                     dict, sorted_dict
    deque    test_deque.TestBasic, TestVariousIteratorArgs, TestSequence  queue
    set      test_set.TestSet, TestBasicOps*, TestBinaryOps,            set, sorted_set
             TestUpdateOps, TestMutate

each three ways:

    plain    the object as the space hands it out (one memory:// db per test)
    reopen   after every call that leaves the space dirty: ``checkpoint()``, a new
             ObjectSpace on the committed db (as a restarted process opens it; the db
             stays open), the object taken again by name, so every read after a mutation
             comes from what was stored
    cache2   ``cache_items=2`` and a ``checkpoint()`` after every such call: all but one or
             two items are evicted after each save, so reads go to the store

The factory is a class whose ``__new__`` returns the persisted object (or, for reopen and
cache2, a ``Stored`` handle that forwards every call to it): a test that subclasses the
type under test gets a class that makes the same persisted objects, so the rest of such a
test runs.

``SKIP`` names every test that does not apply, with the reason (``SKIP_KIND`` per kind);
``SKIP_STORED`` adds the ones that cannot run when every mutation is saved: values msgpack
cannot hold (objects defined in the test that compare strangely; test.support's ALWAYS_EQ
and NEVER_EQ are registered as types for these runs, see ``SINGLETONS``) and one test of
16,000 mutations. test_deque's 100,000-step tests run there with ``BIG`` at 1,000
(``STORED_BIG``). ``CPYTHON_SUITES_NO_SKIPS=1`` runs everything, to see what a skip hides.
The reopen and cache2 runs (about 25 s each) are marked ``slow`` (``make test-all``); the
plain run (about 6 s) is part of ``make test``.
"""
from __future__ import annotations

import fnmatch
import importlib.util
import os
import unittest
import uuid

import pytest

import dkv
from dkv.storage.memory import MemoryStore
from objectspace import ObjectSpace, register_type, unregister_type

# CPython's own test package (pyenv and python.org builds ship it; Debian's python3 needs
# libpython3.X-testsuite). The skip list is written against 3.11's suites.
pytest.importorskip("test.list_tests", reason="CPython's test package is not installed "
                    "(Debian: apt-get install libpython3.11-testsuite)")
from test import list_tests, mapping_tests  # noqa: E402
from test.support import ALWAYS_EQ, NEVER_EQ  # noqa: E402
import test.test_set as cp_set  # noqa: E402

VARIANTS = ("plain", "reopen", "cache2")

# -- the environment of one test: a memory db, a space per object ----------------------------

_env = None


SINGLETONS = {120: ALWAYS_EQ, 121: NEVER_EQ}
"""test.support's ALWAYS_EQ and NEVER_EQ (objects equal to everything, to nothing) are
registered as types while a test saves after every mutation, so the tests that put them in
a list or deque run there too: each comes back as the same singleton."""


class Env:
    """One memory:// db per test; each object lives in its own space (its own prefix)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        self.name = f"cpython-suites-{uuid.uuid4().hex}"
        self.db = dkv.open(f"memory://{self.name}")
        self.n = 0
        if variant != "plain":
            for code, obj in SINGLETONS.items():
                register_type(type(obj), code, lambda o: 0, lambda v, obj=obj: obj)

    def space(self, prefix: bytes) -> ObjectSpace:
        return ObjectSpace(self.db, prefix=prefix, cache_items=2 if self.variant == "cache2" else 4096)

    def make(self, kind: str, fill, **options):
        """A fresh object of ``kind`` (made with ``options``) in a fresh space, filled by
        ``fill(obj)``."""
        self.n += 1
        space = self.space(b"o" + self.n.to_bytes(8, "big"))
        obj = getattr(space, f"create_{kind}")("x", **options)
        if self.variant == "plain":
            fill(obj)
            return obj
        space.checkpoint()
        h = Stored._of(self, space, kind, obj)
        h._call(fill)
        return h

    def close(self) -> None:
        self.db.close()
        MemoryStore.forget(self.name)
        if self.variant != "plain":
            for obj in SINGLETONS.values():
                unregister_type(type(obj))


def _current() -> Env:
    if _env is None:
        raise RuntimeError("a factory was called outside a test")
    return _env


# -- Stored: a handle that saves (and reopens) after every mutation ---------------------------

def _unwrap(x):
    return x._obj if type(x) is Stored else x


class Stored:
    """Forwards to a persisted object; after every call that leaves its space dirty, the
    space is checkpointed and (variant reopen) reopened, and the object taken again."""

    __slots__ = ("_env", "_space", "_kind", "_obj", "__weakref__")

    @classmethod
    def _of(cls, env, space, kind, obj) -> "Stored":
        h = object.__new__(cls)
        h._env, h._space, h._kind, h._obj = env, space, kind, obj
        return h

    def _after(self) -> None:
        space = self._space
        if not space.dirty:
            return
        space.checkpoint()
        if self._env.variant == "reopen":
            self._space = space = self._env.space(space.prefix)
            self._obj = getattr(space, f"get_{self._kind}")("x")

    def _call(self, f, *args, **kwargs):
        obj = self._obj
        try:
            r = f(obj, *args, **kwargs)
        finally:
            self._after()
        return self if r is obj else r

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        if not callable(attr):
            return attr

        def method(*args, **kwargs):
            return self._call(lambda o, *a, **k: getattr(o, name)(*a, **k),
                              *map(_unwrap, args), **kwargs)
        method.__name__ = name
        return method

    def __init__(self, *args, **kwargs) -> None:
        self._call(lambda o: o.__init__(*map(_unwrap, args), **kwargs))

    def __hash__(self):
        if type(self._obj).__hash__ is None:
            raise TypeError(f"unhashable type: '{type(self._obj).__name__}'")
        return hash(self._obj)

    def __iter__(self):
        return iter(self._obj)

    def __reversed__(self):
        return reversed(self._obj)

    def __len__(self) -> int:
        return len(self._obj)

    def __repr__(self) -> str:
        return repr(self._obj)

    def __str__(self) -> str:
        return str(self._obj)

    def __reduce_ex__(self, proto):
        return self._obj.__reduce_ex__(proto)


def _forward(name):
    def method(self, *args):
        f = getattr(type(self._obj), name, None)
        if f is None:
            return NotImplemented
        return self._call(f, *map(_unwrap, args))
    method.__name__ = name
    return method


for _name in ("__contains__", "__getitem__", "__setitem__", "__delitem__",
              "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__",
              "__add__", "__radd__", "__iadd__", "__mul__", "__rmul__", "__imul__",
              "__or__", "__ror__", "__ior__", "__and__", "__rand__", "__iand__",
              "__xor__", "__rxor__", "__ixor__", "__sub__", "__rsub__", "__isub__",
              "__copy__", "__deepcopy__"):
    setattr(Stored, _name, _forward(_name))


# -- the factories: stand-ins for list, dict, deque and set ------------------------------------

def _filler(items):
    items = list(items)
    return lambda obj: obj.extend(items) if items else None


class _Factory:
    kind = ""

    @classmethod
    def _make(cls, fill, **options):
        return _current().make(cls.kind, fill, **options)


class ListFactory(_Factory):
    kind = "list"

    def __new__(cls, iterable=(), /):
        return cls._make(_filler(iterable))


class QueueFactory(_Factory):
    kind = "queue"

    def __new__(cls, iterable=(), maxlen=None):
        return cls._make(_filler(iterable), maxlen=maxlen)     # maxlen: a creation option


class SetFactory(_Factory):
    kind = "set"

    def __new__(cls, iterable=(), /):
        items = list(iterable)
        return cls._make(lambda obj: obj.update(items) if items else None)


class DictFactory(_Factory):
    kind = "dict"

    def __new__(cls, *args, **kwargs):
        if len(args) > 1:
            raise TypeError(f"dict expected at most 1 argument, got {len(args)}")
        if args and not hasattr(args[0], "keys"):
            args = (list(args[0]),)
        return cls._make(lambda obj: obj.update(*args, **kwargs) if args or kwargs else None)

    @classmethod
    def fromkeys(cls, iterable, value=None):
        from objectspace import PersistedDict
        return PersistedDict.fromkeys(iterable, value)


def _factory(base, kind):
    return type(f"{kind.title().replace('_', '')}Factory", (base,), {"kind": kind})


# -- the skip list -------------------------------------------------------------------------------
# Keys are "Class.test" patterns (fnmatch) per suite, the first match wins; pytest -rs shows
# the reasons, docs/objectspace.md sums them up.
PICKLE = "pickles a handle: refused by design (copy() gives the builtin twin)"
REPR = "repr is <PersistedX 'name' kind=... len=...>, not the twin's literal"
SUBCLASS = "subclass behaviour: the kinds are made by a space, not by a class"
INTERNALS = "CPython internals (getsizeof, gc, free-after-iterating, iterator types)"
KEYS = "keys the key codec cannot hold (None/bool/int/float/str/bytes/tuples only)"
PLAIN_COPY = "copy() is a plain copy sharing nothing (nested lists too), not shallow"
ITER_HINT = "iterators are generators: no __length_hint__ (an optional hint)"
BUILTIN = "exercises only the builtin set, not the type under test"
COPY_TYPE = "copy() is the builtin twin (a persisted copy needs a name), not the same type"

SKIP = {
    "list": {
        "*.test_pickle": PICKLE,
        "*.test_free_after_iterating": INTERNALS,
        "*.test_repr": REPR,
        "*.test_repr_deep": REPR,
        "*.test_getitemoverwriteiter": SUBCLASS,
    },
    "dict": {
        "*.test_repr": REPR,
        "*.test_repr_deep": REPR,
        "*.test_fromkeys": SUBCLASS,                 # and fromkeys gives a plain dict
        "*.test_copy": COPY_TYPE,
        "*.test_getitem": KEYS,
        "*.test_pop": KEYS,
        "*.test_setdefault": KEYS,
        "*.test_eq": KEYS,
    },
    "deque": {
        "*.test_pickle": PICKLE,
        "*.test_pickle_recursive": PICKLE,
        "*.test_iterator_pickle": PICKLE,
        "*.test_deepcopy": PICKLE,
        "*.test_copy": PICKLE,
        "*.test_repr": REPR,
        "*.test_maxlen": REPR,
        "*.test_copy_method": PLAIN_COPY,
        "*.test_sizeof": INTERNALS,
        "*.test_gc_doesnt_blowup": INTERNALS,        # and 100 gc.collect(): about 10 s here
        "*.test_reversed_new": INTERNALS,
        "TestSequence.test_getitemoverwriteiter": SUBCLASS,
    },
    "set": {
        "TestBasicOpsTriple.*": KEYS,                # its set holds operator.add
        "*.test_pickling": PICKLE,
        "*.test_iterator_pickling": PICKLE,
        "*.test_deepcopy": PICKLE,
        "*.test_repr": REPR,
        "*.test_cyclical_repr": REPR,
        "*.test_free_after_iterating": INTERNALS,
        "*.test_iteration": ITER_HINT,
        "*.test_subclass_with_custom_hash": SUBCLASS,
        "*.test_badcmp": KEYS,
        "*.test_do_not_rehash_dict_keys": KEYS,
        "*.test_contains": KEYS,   # a frozenset element
        "*.test_remove": KEYS,   # a frozenset element
        "*.test_discard": KEYS,   # a frozenset element
        "*.test_setOfFrozensets": KEYS,   # frozenset elements
        "*.test_remove_keyerror_set": KEYS,   # a set as a key
        "*.test_set_literal*": BUILTIN,
        "*.test_rich_compare": BUILTIN,
        "*.test_issue_37219": BUILTIN,
        "*.test_gc": BUILTIN,
        "*.test_container_iterator": BUILTIN,
    },
}

SKIP_KIND = {
    "sorted_dict": {
        "*.test_popitem": "SortedDict.popitem(index=-1) takes a position: popitem(42) is valid",
    },
}

STORED_BIG = 1000
"""test_deque's BIG (100,000 appends, pops or rotations) for the runs that save after every
mutation: the same tests, a hundredth of the length."""

MANY = "over 10,000 mutations, each checkpointed: too long here (the plain run has it)"
MSGPACK = "stores objects msgpack cannot hold (test classes), and this run saves each change"

SKIP_STORED = {
    "list": {
        "*.test_contains_order": MSGPACK, "*.test_index": MSGPACK, "*.test_remove": MSGPACK,
    },
    "dict": {
        "*.test_popitem": MANY,                      # 16,000 popitems, each reloading the dict
    },
    "deque": {
        "TestBasic.test_contains": MSGPACK, "TestBasic.test_contains_count_stop_crashes": MSGPACK,
        "TestBasic.test_container_iterator": MSGPACK, "TestBasic.test_count": MSGPACK,
        "TestBasic.test_index": MSGPACK, "TestBasic.test_remove": MSGPACK,
        "TestSequence.test_contains_order": MSGPACK,
    },
    "set": {},
}


def _skips(suite: str, kind: str, variant: str) -> dict:
    if os.environ.get("CPYTHON_SUITES_NO_SKIPS"):       # to see what a skip hides
        return {}
    out = dict(SKIP[suite])
    out.update(SKIP_KIND.get(kind, {}))
    if variant != "plain":
        out.update(SKIP_STORED[suite])
    return out


# -- building the test classes -------------------------------------------------------------------

def _load_deque_module():
    """A private copy of test.test_deque whose global ``deque`` the factory replaces."""
    spec = importlib.util.find_spec("test.test_deque")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _set_object_under_test(test) -> None:
    """The operator classes of test_set build ``self.set`` with the builtin: rebuild it."""
    values = getattr(test, "values", None)
    test.set = test.thetype(values if values is not None else test.set)


SUITES = {
    "list": [(list_tests.CommonTest, "type2test")],
    "dict": [(mapping_tests.TestHashMappingProtocol, "type2test")],
    "deque": [("TestBasic", "deque"), ("TestVariousIteratorArgs", "deque"), ("TestSequence", "type2test")],
    "set": [(cp_set.TestSet, "thetype")] + [
        (getattr(cp_set, n), "set") for n in sorted(dir(cp_set))
        if n.startswith("TestBasicOps") and n != "TestBasicOps"
    ] + [(cp_set.TestBinaryOps, "set"), (cp_set.TestUpdateOps, "set"), (cp_set.TestMutate, "set")],
}
KINDS = {"list": ["list"], "dict": ["dict", "sorted_dict"], "deque": ["queue"], "set": ["set", "sorted_set"]}
FACTORIES = {"list": ListFactory, "dict": DictFactory, "deque": QueueFactory, "set": SetFactory}


def _build(suite: str, kind: str, variant: str) -> dict:
    factory = _factory(FACTORIES[suite], kind)
    skips = _skips(suite, kind, variant)
    classes = {}
    mod = _load_deque_module() if suite == "deque" else None
    if mod is not None:
        mod.deque = factory
        if variant != "plain":
            mod.BIG = STORED_BIG
    for base, how in SUITES[suite]:
        if isinstance(base, str):
            base = getattr(mod, base)
        ns = {"__module__": __name__, "__qualname__": None}

        def setUp(self, _base=base, _how=how):
            global _env
            _env = Env(variant)
            _base.setUp(self)
            if _how == "set":
                _set_object_under_test(self)

        def tearDown(self, _base=base):
            global _env
            try:
                _base.tearDown(self)
            finally:
                if _env is not None:
                    _env.close()
                    _env = None

        ns["setUp"], ns["tearDown"] = setUp, tearDown
        if how in ("type2test", "set"):
            ns["type2test"] = factory
        ns["thetype"] = factory
        ns["basetype"] = set
        for name in unittest.TestLoader().getTestCaseNames(base):
            for pattern, reason in skips.items():
                if fnmatch.fnmatchcase(f"{base.__name__}.{name}", pattern):
                    ns[name] = unittest.skip(reason)(getattr(base, name))
                    break
        if variant != "plain":
            ns["pytestmark"] = [pytest.mark.slow]
        cname = f"Test_{suite}_{kind}_{variant}_{base.__name__}"
        ns["__qualname__"] = cname
        classes[cname] = type(cname, (base,), ns)
    return classes


for _suite, _kinds in KINDS.items():
    for _kind in _kinds:
        for _variant in VARIANTS:
            globals().update(_build(_suite, _kind, _variant))

del _suite, _kinds, _kind, _variant


# -- the harness itself -----------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
def test_the_variants_do_what_they_say(variant):
    """reopen: a mutation gives the handle a new object from a new space; cache2: the
    object keeps at most two items in memory once saved; plain: the object itself."""
    global _env
    _env = Env(variant)
    try:
        q = QueueFactory(range(10))
        if variant == "plain":
            assert type(q).__name__ == "PersistedQueue"
            return
        obj, space = q._obj, q._space
        assert not space.dirty
        q.append(10)
        assert not q._space.dirty
        if variant == "reopen":
            assert q._obj is not obj and q._space is not space and not q._obj._vals
            assert list(q) == list(range(11))
        else:
            assert list(q) == list(range(11))
            assert q._obj is obj and len(obj._vals) <= 2
    finally:
        _env.close()
        _env = None


SKIP_ENTRIES = (46, 1, 11)     # lower these when a skip goes; a new skip must not raise them


def test_the_skip_lists_only_shrink():
    """The count of skipped CPython tests only goes down (issue 17): the skip lists hold no
    more entries than when they were written, each with its reason."""
    counts = tuple(sum(map(len, d.values())) for d in (SKIP, SKIP_KIND, SKIP_STORED))
    assert all(c <= most for c, most in zip(counts, SKIP_ENTRIES)), (counts, SKIP_ENTRIES)
    assert all(isinstance(r, str) and r for d in (SKIP, SKIP_KIND, SKIP_STORED)
               for per in d.values() for r in per.values())
