"""Every public signature is annotated (issue 33: the packages ship ``py.typed``).

The public surface: what the public modules export in ``__all__`` (the three packages,
and the public modules that docs name for users: ``dkv.storage``, ``spark_ops.testing``);
of each exported function, its parameters and return; of each exported class defined in
the packages, every public method (no leading underscore; and the constructor,
``__init__``/``__new__``, and ``__call__``), static and class method, and property (the
getter's return), inherited ones included when a package class defines them (a
Persisted* kind's ``name`` comes from objectspace's base class). A parameter needs an
annotation unless it is the ``self``/``cls`` of a method; ``*args`` and ``**kwargs`` too.
Protocol methods (``__getitem__``, ``__iter__``...) are not covered; methods inherited from
outside the packages (``collections.abc`` mixins) are typeshed's.

The test reads the annotations as written (strings, ``from __future__ import annotations``)
and checks that they are there; whether they are right is mypy's job
(``scripts/typecheck.py``).
"""
from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Iterator

import pytest

PACKAGES = ("dkv", "objectspace", "spark_ops")
PUBLIC_MODULES = ("dkv", "dkv.storage", "objectspace", "spark_ops", "spark_ops.testing")
NEEDS_SPARK = ("spark_ops", "spark_ops.testing")    # spark_ops imports pyspark
PUBLIC_DUNDERS = ("__init__", "__new__", "__call__")


def _ours(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] in PACKAGES


def _public(name: str) -> bool:
    return not name.startswith("_") or name in PUBLIC_DUNDERS


def _gaps(fn: Callable[..., object], bound: bool) -> list[str]:
    """The unannotated parameters of ``fn`` (``return`` for a missing return annotation);
    ``bound``: its first parameter is self or cls."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None or code.co_filename.startswith("<"):
        return []       # a builtin, or code generated for a NamedTuple or a dataclass
    annotations = getattr(fn, "__annotations__", {})
    params = list(inspect.signature(fn, follow_wrapped=False).parameters)
    if bound and params:
        params = params[1:]
    out = [p for p in params if p not in annotations]
    if "return" not in annotations:
        out.append("return")
    return out


def _members(cls: type) -> Iterator[tuple[str, Callable[..., object], bool, type]]:
    """(name, function, bound, defining class) of each public callable of ``cls`` that a
    package class defines, as attribute lookup on ``cls`` finds it (the first in the MRO)."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        for name, attr in vars(klass).items():
            if name in seen:
                continue
            seen.add(name)
            if not _public(name) or not _ours(klass):
                continue
            if isinstance(attr, property):
                if attr.fget is not None:
                    yield name, attr.fget, True, klass
            elif isinstance(attr, functools.cached_property):
                yield name, attr.func, True, klass
            elif isinstance(attr, staticmethod):       # __new__ is one, taking cls
                yield name, attr.__func__, name == "__new__", klass
            elif isinstance(attr, classmethod):
                yield name, attr.__func__, True, klass
            elif inspect.isfunction(attr):
                yield name, attr, True, klass


def surface(module_name: str) -> Iterator[tuple[str, Callable[..., object], bool]]:
    """(qualified name, function, bound) of every public callable of ``module_name``."""
    module = importlib.import_module(module_name)
    for export in module.__all__:
        obj = getattr(module, export)
        where = f"{module_name}.{export}"
        if inspect.isclass(obj):
            if not _ours(obj):
                continue
            for name, fn, bound, klass in _members(obj):
                origin = "" if klass is obj else f" (from {klass.__module__}.{klass.__qualname__})"
                yield f"{where}.{name}{origin}", fn, bound
        elif inspect.isfunction(obj) and _ours(obj):
            yield where, obj, False


def untyped(module_name: str) -> list[str]:
    """``qualified name: gaps`` of each public callable of ``module_name`` with a gap."""
    out = []
    for where, fn, bound in surface(module_name):
        gaps = _gaps(fn, bound)
        if gaps:
            out.append(f"{where}: {', '.join(gaps)}")
    return sorted(set(out))


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_signatures_are_annotated(module_name: str) -> None:
    if module_name in NEEDS_SPARK:
        pytest.importorskip("pyspark")
    gaps = untyped(module_name)
    assert not gaps, (f"{len(gaps)} public callables of {module_name} lack annotations "
                      "(parameter names; `return`: the return annotation):\n  " + "\n  ".join(gaps))


def test_the_walk_sees_the_surface() -> None:
    """The walk finds what it must: functions, constructors, inherited methods, static and
    class methods, properties; and it flags a gap (a planted unannotated function)."""
    names = {where for where, _, _ in surface("objectspace")}
    for expected in ("objectspace.ObjectSpace.open", "objectspace.ObjectSpace.__init__",
                     "objectspace.encode_key", "objectspace.PersistedQueue.maxlen",
                     "objectspace.LinkedListNode.value"):
        assert expected in names
    assert any(n.startswith("objectspace.PersistedDict.name (from ") for n in names)
    assert any(n.startswith("dkv.DB.") for n, _, _ in surface("dkv"))

    def planted(a, b: int, *args, **kwargs):       # the gaps this test plants
        return a

    assert _gaps(planted, False) == ["a", "args", "kwargs", "return"]
    assert _gaps(planted, True) == ["args", "kwargs", "return"]      # a as self

    class Planted:
        def __init__(self, x) -> None:
            self.x = x

        def m(self, y: int):
            return y

        def _private(self, z):
            return z

        @property
        def p(self):
            return 1

        @staticmethod
        def s(x: int):
            return x

        @classmethod
        def c(cls, x: int) -> int:
            return x

    def gaps_of(cls: type) -> dict[str, list[str]]:
        return {name: _gaps(fn, bound) for name, fn, bound, _ in _members(cls)}

    assert gaps_of(Planted) == {}       # not a package class: skipped
    Planted.__module__ = "objectspace._planted"
    assert gaps_of(Planted) == {"__init__": ["x"], "m": ["return"], "p": ["return"], "s": ["return"], "c": []}
