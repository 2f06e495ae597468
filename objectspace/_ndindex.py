"""numpy basic indexing for the ndarray kind, on a shape alone: which cells of each axis a
key selects, and how they map to chunks. Pure: no I/O, no state."""
from __future__ import annotations

import operator

from ._ndlayout import _np


def axis_runs(first: int, n: int, step: int, size: int) -> list:
    """The selection ``first, first + step, ... (n of them)`` (step > 0) of one axis cut
    at chunk boundaries: (chunk index, slice within the chunk, slice of the selection).
    O(chunks touched)."""
    runs = []
    k = 0
    while k < n:
        i = first + k * step
        c = i // size
        base = c * size
        k2 = min(n - 1, (base + size - 1 - first) // step)
        runs.append((c, slice(i - base, first + k2 * step - base + 1, step), slice(k, k2 + 1)))
        k = k2 + 1
    return runs


def select(key, shape: tuple, name):
    """numpy basic indexing: per axis (first, count, step > 0) and, to map the
    selection (taken in increasing order) to what numpy returns, an index into it
    (0 for an int, a reversed slice for a negative step, None for a new axis).
    Raises IndexError for an index out of bounds or of an unsupported type."""
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(shape)
    ells = sum(1 for k in key if k is Ellipsis)
    if ells > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if real > ndim:
        raise IndexError(f"too many indices for ndarray {name!r}: it is {ndim}-dimensional, "
                         f"but {real} were indexed")
    if not ells:
        key = key + (Ellipsis,)
    sel, post = [], []
    for k in key:
        if k is Ellipsis:
            for _ in range(ndim - real):
                sel.append((0, shape[len(sel)], 1))
                post.append(slice(None))
            if ells:
                post.append(Ellipsis)   # as numpy: with an ellipsis, the result is an array
        elif k is None:
            post.append(None)
        elif isinstance(k, slice):
            start, stop, step = k.indices(shape[len(sel)])
            n = len(range(start, stop, step))
            if step > 0:
                sel.append((start, n, step))
                post.append(slice(None))
            else:
                sel.append((start + (n - 1) * step if n else 0, n, -step))
                post.append(slice(None, None, -1))
        else:
            sel.append((int_index(k, len(sel), shape, name), 1, 1))
            post.append(0)
    return sel, tuple(post)


def int_index(k, axis: int, shape: tuple, name) -> int:
    """An int index of ``axis``, negative ones counted from the end; IndexError naming the
    array for anything else or out of bounds."""
    if isinstance(k, (bool, _np().bool_)):
        raise IndexError(f"ndarray {name!r} takes basic indices only (ints, slices, ..., None), not bool")
    try:
        i = operator.index(k)
    except TypeError:
        raise IndexError(f"ndarray {name!r} takes basic indices only (ints, slices, ..., None), "
                         f"not {type(k).__name__}") from None
    n = shape[axis]
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n} "
                         f"(ndarray {name!r} of shape {shape})")
    return i + n if i < 0 else i
