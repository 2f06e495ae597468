"""Declared state variables: ``Operator.state_vars = {name: StateVar(...)}`` (RFC 0010).

    class SpendAlert(Operator):
        state_vars = {
            "window": StateVar("sorted_dict", ttl="1 hour", renamed_from="spends"),
            "profile": StateVar("value", version=2, upgrade=profile_v2),
            "merchants": StateVar("dict", migrate=merchants_from_value),
            "legacy": StateVar.dropped(),
        }

What a declaration says and how it is checked; what a shard does with it is _vars.py's.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._units import Duration

KINDS = ("value", "array", "list", "queue", "stack", "linked_list", "set", "sorted_set", "dict", "sorted_dict",
         "stream", "ndarray")
_NO_UPGRADE = ("stream", "ndarray")      # values that an upgrade function cannot rewrite one by one
_PARAMS = {"array": ("length", "fill"), "ndarray": ("shape", "dtype", "chunks", "fill_value")}


class StateVar:
    """A declared state variable of an operator (``Operator.state_vars = {name: StateVar(...)}``).

    kind: one of KINDS. ttl: as ``ctx.<kind>(name, ttl=...)``, applied when the operator
    does not pass one. default: a value's default (``ctx.value(name)`` then holds it).
    length/fill (array), shape/dtype/chunks/fill_value (ndarray): what ``ctx.state(name)``
    creates. version (an int >= 1, default 1) and upgrade (``upgrade(value, version) ->
    value``, called with each stored value of an older version and that version; for a dict
    or sorted dict its values, a sequence or set its elements): stored values are brought to
    ``version`` in one pass when a shard first opens the state under this code.
    renamed_from: the name (or names) the variable had: its objects are renamed.
    migrate: ``migrate(old) -> contents``, for objects stored as another kind: called with
    the old object's contents (a value's value, a collection's plain twin: list, deque, dict,
    set, numpy array) and returning the new kind's contents (None: the key's object is
    dropped). ``StateVar.dropped()``: a variable the code no longer has; its objects are
    deleted. See docs/spark_ops.md, *Evolving an operator and its state*.
    """

    __slots__ = ("kind", "ttl", "default", "version", "upgrade", "renamed_from", "migrate", "params", "is_dropped")
    upgrade: Any        # upgrade(value, version) -> value, or None
    migrate: Any        # migrate(old contents) -> contents, or None

    def __init__(self, kind: str, *, ttl: Duration | None = None, default: Any = None, version: int = 1,
                 upgrade: Callable[[Any, int], Any] | None = None, renamed_from: str | Iterable[str] = (),
                 migrate: Callable[[Any], Any] | None = None, **params: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"StateVar kind must be one of {', '.join(KINDS)}; got {kind!r}")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"StateVar version must be an int >= 1, got {version!r}")
        if upgrade is not None and not callable(upgrade):
            raise TypeError(f"StateVar upgrade must be a function upgrade(value, version) -> value, got {upgrade!r}")
        if upgrade is not None and kind in _NO_UPGRADE:
            raise ValueError(f"a {kind} cannot be upgraded value by value; declare a new variable and migrate= it")
        if version > 1 and upgrade is None:
            raise ValueError(f"StateVar(version={version}) needs upgrade=, the function that brings stored values "
                             f"of an older version to version {version}: upgrade(value, version) -> value")
        if migrate is not None and not callable(migrate):
            raise TypeError(f"StateVar migrate must be a function migrate(old_contents) -> contents, got {migrate!r}")
        if migrate is not None and kind == "stream":
            raise ValueError("a stream cannot be the target of migrate= (its entries' ids are made by add)")
        names = (renamed_from,) if isinstance(renamed_from, str) else tuple(renamed_from or ())
        if not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"StateVar renamed_from must be a name or a list of names, got {renamed_from!r}")
        allowed = _PARAMS.get(kind, ())
        wrong = sorted(set(params) - set(allowed))
        if wrong:
            raise TypeError(f"StateVar({kind!r}) takes no {', '.join(wrong)}" +
                            (f" (it takes {', '.join(allowed)})" if allowed else ""))
        if kind == "ndarray" and not {"shape", "dtype"} <= set(params):
            raise TypeError("StateVar('ndarray') needs shape= and dtype=")
        if kind == "array" and "length" not in params:
            raise TypeError("StateVar('array') needs length=")
        if ttl is not None:
            from ._ttl import ttl_ms
            ttl_ms(ttl)             # a bad ttl fails here, where it is declared
        self.kind, self.ttl, self.default, self.version = kind, ttl, default, version
        self.upgrade, self.renamed_from, self.migrate, self.params = upgrade, names, migrate, params
        self.is_dropped = False

    @classmethod
    def dropped(cls) -> "StateVar":
        """A variable the code no longer has: its stored objects are deleted (once, in the
        batch that first runs this code), and using it is an error."""
        self = cls.__new__(cls)
        self.kind, self.ttl, self.default, self.version = None, None, None, 0
        self.upgrade, self.renamed_from, self.migrate, self.params = None, (), None, {}
        self.is_dropped = True
        return self

    def describe(self) -> dict:
        if self.is_dropped:
            return {"dropped": True}
        out = {"kind": self.kind, "version": self.version}
        if self.ttl is not None:
            from ._ttl import ttl_ms
            out["ttl_ms"] = ttl_ms(self.ttl)
        if self.renamed_from:
            out["renamed_from"] = list(self.renamed_from)
        if self.migrate is not None:
            out["migrate"] = True
        return out

    def __repr__(self) -> str:
        if self.is_dropped:
            return "StateVar.dropped()"
        extra = "".join(f", {k}={getattr(self, k)!r}" for k in ("ttl", "default") if getattr(self, k) is not None)
        return f"StateVar({self.kind!r}{extra}, version={self.version})"


_CHECKED: dict = {}


def declarations(operator) -> dict | None:
    """``operator.state_vars`` checked (None when it declares nothing). ValueError or
    TypeError naming what is wrong. Memoised per class."""
    decl = getattr(operator, "state_vars", None)
    if decl is None:
        return None
    key = id(decl)
    got = _CHECKED.get(key)
    if got is not None and got[0] is decl:
        return got[1]
    who = type(operator).__name__
    if not isinstance(decl, dict):
        raise TypeError(f"{who}.state_vars must be a dict of name -> StateVar, got {type(decl).__name__}")
    sources: dict = {}
    for name, var in decl.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"{who}.state_vars: names are non-empty str, got {name!r}")
        if not isinstance(var, StateVar):
            raise TypeError(f"{who}.state_vars[{name!r}] must be a StateVar, got {var!r}")
        for old in var.renamed_from:
            if old in decl and not decl[old].is_dropped:
                raise ValueError(f"{who}.state_vars[{name!r}] is renamed_from {old!r}, which is declared too")
            if old in sources:
                raise ValueError(f"{who}.state_vars: {old!r} is the renamed_from of both {sources[old]!r} and {name!r}")
            sources[old] = name
    _CHECKED[key] = (decl, decl)
    return decl


def describe(operator) -> dict | None:
    """The declarations as recorded in an operator's identity (None: it declares nothing)."""
    decl = declarations(operator)
    return None if decl is None else {n: v.describe() for n, v in sorted(decl.items())}
