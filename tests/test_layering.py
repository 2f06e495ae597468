"""The house's layering, read from the code's own imports (``ast``, function-level imports
included): each package imports only what it may, and no modules import each other in a
circle.

    dkv            imports neither objectspace nor spark_ops
    objectspace    imports dkv through its public modules only (PUBLIC_DKV), never spark_ops;
                   its core (everything but the inspection package, the CLI and the
                   package's face) never imports the inspection package or the CLI
    spark_ops      may import dkv's and objectspace's public names

Within each package the module graph has no cycle (imports under ``if TYPE_CHECKING:``
do not count: they never run). A failure names the module, the line and the import.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("dkv", "objectspace", "spark_ops")

PUBLIC_DKV = {"dkv", "dkv.batch", "dkv.keys", "dkv.errors", "dkv.cli"}   # dkv.cli: run_command, the CLIs' error policy
"""The dkv modules objectspace may import: ``dkv`` (its ``__init__``: open, DB, the
stores, admin functions) and the modules it names as public."""

OBJECTSPACE_OUTER = ("objectspace", "objectspace.__main__", "objectspace.cli", "objectspace._inspect")
"""objectspace's face, CLI and inspection package: they may import the core; the core may
not import them."""


def _pkg(name: str) -> str:
    return name.split(".")[0]


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    """{module name: path} of every module of the three packages."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _modules()

EXTENSIONS = {_module_name(p) for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.c"))}
"""C extension modules (built from ``<module>.c``, RFC 0012): importable, with no Python
imports of their own."""


def _is_type_checking(test) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    if not level:
        return target or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _project_module(name: str) -> str | None:
    """The longest prefix of ``name`` that is a module of the project (None: not ours)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in MODULES or cand in EXTENSIONS:
            return cand
        parts.pop()
    return None


def imports_in(source: str, module: str, is_package: bool = False) -> list:
    """(line, imported module, what the source says, under TYPE_CHECKING) for every import
    in ``source`` (the text of ``module``) into the project's packages, at any depth.
    ``from pkg import name`` counts as an import of ``pkg.name`` when that is a module,
    else of ``pkg``."""
    out = []

    def visit(node, typing_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_one(stmt, True)
                for stmt in child.orelse:
                    visit_one(stmt, typing_only)
            else:
                visit_one(child, typing_only)

    def visit_one(node, typing_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((node.lineno, alias.name, f"import {alias.name}", typing_only))
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                full = f"{base}.{alias.name}" if base else alias.name
                target = full if _project_module(full) == full else base
                text = f"from {'.' * node.level}{node.module or ''} import {alias.name}"
                out.append((node.lineno, target, text, typing_only))
        else:
            visit(node, typing_only)

    visit(ast.parse(source), False)
    return [row for row in out if _pkg(row[1]) in PACKAGES]


def imports_of(module: str) -> list:
    """``imports_in`` of one module of the project."""
    path = MODULES[module]
    return imports_in(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")


def _where(module: str, line: int, text: str) -> str:
    return f"{MODULES[module].relative_to(ROOT)}:{line} ({module}): {text}"


def _violations(check) -> list:
    bad = []
    for module in MODULES:
        for line, name, text, _ in imports_of(module):
            why = check(module, name)
            if why:
                bad.append(f"{_where(module, line, text)} — {why}")
    return bad


def _is_outer(module: str) -> bool:
    return any(module == o or (o != "objectspace" and module.startswith(o + ".")) for o in OBJECTSPACE_OUTER)


def test_dkv_imports_neither_objectspace_nor_spark_ops():
    bad = _violations(lambda m, n: _pkg(m) == "dkv" and _pkg(n) != "dkv" and f"dkv may not import {_pkg(n)}")
    assert not bad, "dkv reaches up:\n" + "\n".join(bad)


def test_objectspace_imports_no_spark_ops_and_only_public_dkv():
    def check(m, n):
        if _pkg(m) != "objectspace":
            return None
        if _pkg(n) == "spark_ops":
            return "objectspace may not import spark_ops"
        if _pkg(n) == "dkv" and n not in PUBLIC_DKV:
            return f"{n} is not public dkv (objectspace may import {sorted(PUBLIC_DKV)})"
        return None
    bad = _violations(check)
    assert not bad, "objectspace imports what it may not:\n" + "\n".join(bad)


def test_objectspace_core_knows_nothing_of_inspection_or_the_cli():
    def check(m, n):
        if _pkg(m) != "objectspace" or _is_outer(m) or _pkg(n) != "objectspace":
            return None
        if _is_outer(n) and n != "objectspace":
            return f"objectspace's core may not import {n}"
        if n == "objectspace":
            return "objectspace's core may not import the package's face (it imports everything)"
        return None
    bad = _violations(check)
    assert not bad, "objectspace's core imports its outer layer:\n" + "\n".join(bad)


def test_spark_ops_uses_public_dkv_and_objectspace():
    def check(m, n):
        if _pkg(m) != "spark_ops" or _pkg(n) == "spark_ops":
            return None
        if _pkg(n) == "dkv" and n not in PUBLIC_DKV:
            return f"{n} is not public dkv"
        if _pkg(n) == "objectspace" and n != "objectspace":
            return f"{n} is not objectspace's public face (import from objectspace)"
        return None
    bad = _violations(check)
    assert not bad, "spark_ops reaches inside:\n" + "\n".join(bad)


def strongly_connected(graph: dict) -> list:
    """The strongly connected components of ``graph`` ({node: {node}}) with more than one
    node or a self-loop (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        comp.append(top)
                        if top == node:
                            break
                    if len(comp) > 1 or node in graph[node]:
                        out.append(sorted(comp))
    return out


def module_graph(package: str) -> tuple:
    """({module: {imported module}}, {(module, imported): (line, text)}) within ``package``,
    imports under TYPE_CHECKING left out. A package's ``__init__`` that a submodule reaches
    only because Python runs it first is not an edge: only written imports are."""
    graph, why = {}, {}
    for module in MODULES:
        if _pkg(module) != package:
            continue
        graph.setdefault(module, set())
        for line, name, text, typing_only in imports_of(module):
            target = _project_module(name)
            if typing_only or target is None or _pkg(target) != package or target == module or target in EXTENSIONS:
                continue        # (an extension module imports nothing: it closes no circle)
            graph[module].add(target)
            why.setdefault((module, target), (line, text))
    return graph, why


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package):
    graph, why = module_graph(package)
    cycles = strongly_connected(graph)
    lines = []
    for comp in cycles:
        members = set(comp)
        lines.append(f"circle of {len(comp)} modules: {', '.join(comp)}")
        for m in comp:
            for t in sorted(graph[m] & members):
                line, text = why[(m, t)]
                lines.append(f"  {_where(m, line, text)} -> {t}")
    assert not cycles, f"{package} has import circles:\n" + "\n".join(lines)


def test_the_checker_sees_what_it_must():
    """The parser finds function-level imports, resolves relative ones and skips
    TYPE_CHECKING blocks; the cycle finder finds a circle and nothing else."""
    assert strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert strongly_connected({"a": {"b"}, "b": set()}) == []
    assert _resolve("objectspace._inspect.records", False, 2, "_codec") == "objectspace._codec"
    assert _resolve("objectspace._inspect", True, 1, "records") == "objectspace._inspect.records"
    source = ("import dkv\nif TYPE_CHECKING:\n    from .space import ObjectSpace\nelse:\n    import json\n"
              "def f():\n    from ._base import MISSING\n    from .. import _codec\n")
    assert imports_in(source, "objectspace._inspect.x") == [
        (1, "dkv", "import dkv", False), (3, "objectspace._inspect.space", "from .space import ObjectSpace", True),
        (7, "objectspace._inspect._base", "from ._base import MISSING", False),
        (8, "objectspace._codec", "from .. import _codec", False)]
