"""No package reads another package's private attributes (issue 33): what the import
layering (tests/test_layering.py) cannot see.

An attribute is *private* when its name starts with one underscore (``obj._flags``; not
``__dunder__``). A package *owns* a private name when it defines it: assigns it
(``self._x = ...``, a class or module attribute), defines a function or method of that
name, or lists it in ``__slots__``. A read ``something._x`` in package P is a crossing when
another package owns ``_x`` and P does not: then it can only be that package's. (A name
both own, such as ``_lock``, cannot be told apart without types and is not counted: the
check is a lower bound.)

Crossings that must stay for a while are listed in ``KNOWN`` (module -> private names it reads
of another package), a ratchet: a new crossing fails, and so does a listed one that is
gone (remove it from the list, so that it cannot come back unseen).
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("dkv", "objectspace", "spark_ops")

KNOWN: dict[str, set[str]] = {}     # none since TTL reads objectspace.Unsaved (issue 33)
"""Today's crossings (a ratchet; see the module docstring)."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and len(name) > 1


def owned_names(source: str) -> set[str]:
    """The private names ``source`` defines (see the module docstring)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and _private(node.name):
            out.add(node.name)
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and _private(sub.attr):
                    out.add(sub.attr)
                elif isinstance(sub, ast.Name) and _private(sub.id):
                    out.add(sub.id)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                for t in node.targets):
            for elt in ast.walk(node.value):
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str) and _private(elt.value):
                    out.add(elt.value)
    return out


def private_reads(source: str) -> list[tuple[int, str]]:
    """(line, name) of every ``x._name`` in ``source`` whose ``x`` is not ``self`` or
    ``cls`` (a module's own object reads its own state)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            out.append((node.lineno, node.attr))
    return out


def _sources() -> dict[str, dict[pathlib.Path, str]]:
    return {pkg: {p: p.read_text(encoding="utf-8") for p in sorted((ROOT / pkg).rglob("*.py"))}
            for pkg in PACKAGES}


def crossings(sources: dict[str, dict]) -> dict[str, dict[str, list[int]]]:
    """{module path: {private name: lines}} of the reads of another package's private names."""
    owned = {pkg: set().union(*(owned_names(src) for src in files.values())) for pkg, files in sources.items()}
    out: dict = {}
    for pkg, files in sources.items():
        others = set().union(*(owned[o] for o in sources if o != pkg)) - owned[pkg]
        for path, src in files.items():
            for line, name in private_reads(src):
                if name in others:
                    rel = str(path.relative_to(ROOT)) if isinstance(path, pathlib.Path) and path.is_absolute() \
                        else str(path)
                    out.setdefault(rel, {}).setdefault(name, []).append(line)
    return out


def test_no_new_private_access_across_packages():
    found = crossings(_sources())
    new = {m: {n: lines for n, lines in names.items() if n not in KNOWN.get(m, set())}
           for m, names in found.items()}
    new = {m: names for m, names in new.items() if names}
    gone = {m: sorted(names - set(found.get(m, {}))) for m, names in KNOWN.items()}
    gone = {m: names for m, names in gone.items() if names}
    lines = [f"{m}:{min(ls)} reads {n!r} (lines {ls}), a private name of another package"
             for m, names in sorted(new.items()) for n, ls in sorted(names.items())]
    assert not new, ("private attributes read across packages (use or add a public interface):\n"
                     + "\n".join(lines))
    assert not gone, f"listed in KNOWN but no longer read (remove them from KNOWN): {gone}"


def test_the_check_sees_a_planted_crossing():
    """A spark_ops module that reads objectspace's ``_flags`` is caught; its own ``self._x``,
    a name both packages define, and a dunder are not."""
    sources = {
        "objectspace": {pathlib.Path("objectspace/_base.py"):
                        "class PersistedObject:\n    __slots__ = ('_flags', '_lock')\n"
                        "    def _collect(self):\n        self._lock = 1\n"},
        "spark_ops": {pathlib.Path("spark_ops/_ttl.py"):
                      "class T:\n    def f(self, obj):\n        self._lock = None\n"
                      "        a = obj._flags\n        b = obj._lock\n        c = obj.__class__\n"
                      "        return obj._collect()\n"},
        "dkv": {},
    }
    assert crossings(sources) == {"spark_ops/_ttl.py": {"_flags": [4], "_collect": [7]}}
