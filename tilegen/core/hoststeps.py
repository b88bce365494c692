"""The host steps after the kernels, one implementation on NumPy arrays and torch tensors alike.

tilegen runs them on NumPy arrays (the interpreter, the twins, the NumPy API); every generated Triton
module carries a copy of the ones it calls (:func:`carried_source`), run on its torch tensors, so that
the module stands alone. Functions of the carried part use only the array's own library (found from the
array: :func:`_namespace`) and ``math``, and carry no annotations (the module does not import NumPy).

- :func:`dsinks`: the gradient of the sink logits, DESIGN §3.
- :func:`reduce_tile_windows`: a parameter gradient from the backward's partials (DESIGN §2,
  "parameter-gradient partials"): the tiles whose windows share an origin summed first, then
  :func:`reduce_windows`.
"""

from __future__ import annotations

import ast
import inspect
import math  # the carried functions use it (a generated module imports it too)
import sys


def _namespace(x):
    """The array library of ``x``: ``numpy`` for a NumPy array, ``torch`` for a torch tensor."""
    return __import__(type(x).__module__.partition(".")[0])


def dsinks(d, lse, sinks, rows=None):
    """dσ_h = −Σ over the batch and rows of exp(σ_h − L)·D (DESIGN §3), float32 [Hq].

    ``d``: D = rowsum(dO∘O) [..., Hq, S] (fp32, as the backward's pre kernel forms it); ``lse``: L
    [..., Hq, S] from the forward; ``sinks``: σ [Hq]; ``rows``: None or bool [S], the rows that take
    part (a packed batch: the tokens inside a sequence). All NumPy arrays or all torch tensors (on one
    device). Formed in float64 and summed over the batch and row axes in one call of the library's sum
    over a fixed shape: bitwise the same on every run.
    """
    xp = _namespace(d)
    w = xp.exp(xp.asarray(sinks, dtype=xp.float64).reshape(-1, 1) - xp.asarray(lse, dtype=xp.float64)) * xp.asarray(d, dtype=xp.float64)
    if rows is not None:
        w = xp.where(rows, w, 0.0)
    return xp.asarray(-w.sum(tuple(range(w.ndim - 2)) + (w.ndim - 1,)), dtype=xp.float32)


def _arange(xp, like, n):
    """0, 1, ..., n − 1 as int64 on ``like``'s device."""
    return xp.arange(n, device=like.device) if xp.__name__ == "torch" else xp.arange(n)


def _argsort_stable(xp, x):
    """The indices that sort the 1-d ``x``, equal keys in their order."""
    return xp.argsort(x, stable=True) if xp.__name__ == "torch" else xp.argsort(x, kind="stable")


def _zeros(xp, like, shape):
    """Zeros of ``shape`` with ``like``'s dtype, on its device."""
    return like.new_zeros(shape) if xp.__name__ == "torch" else xp.zeros(shape, dtype=like.dtype)


def reduce_windows(partials, origins, widths, shape):
    """Σ over the tiles t of window t placed at ``origins[t]`` in an array of ``shape``, in float64.

    ``partials``: [T, W] float, window t row-major over ``widths`` (W = prod(widths)), tiles in index
    order; ``origins``: [T, len(shape)] int, where each window's first entry lands (an entry may land
    outside the array: it must then be 0); ``widths``, ``shape``: tuples of ints. NumPy arrays or torch
    tensors (one device).

    Returns:
        (gradient float32 of ``shape``, outside: the float64 sum of |entries| that land outside the
        array, 0 when the partials are right).

    Deterministic: the entries that land on one element are gathered in tile order (a stable sort by
    element; a tile puts at most one entry on an element) into one row of a zero-padded table, and each
    row is summed by one call of the library's sum over the table's fixed shape; no atomics, bitwise the
    same on every run. The table is T wide when that is small (2^22 cells at most: no wait for the
    device), else as wide as the most entries one element takes.
    """
    xp = _namespace(partials)
    w = math.prod(widths)
    part = xp.asarray(partials, dtype=xp.float64).reshape(-1, w)
    origin = xp.asarray(origins, dtype=xp.int64).reshape(part.shape[0], len(shape))
    entry = _arange(xp, part, w)
    flat, inside = 0, True
    for d, (width, size) in enumerate(zip(widths, shape)):
        coord = origin[:, d : d + 1] + (entry // math.prod(widths[d + 1 :])) % width  # [T, W]
        inside = inside & (coord >= 0) & (coord < size)
        flat = flat * size + coord
    n = math.prod(shape)
    outside = xp.abs(xp.where(inside, 0.0, part)).sum()
    key = xp.where(inside, flat, n).reshape(-1)  # an entry outside goes to row n, as 0
    value = xp.where(inside, part, 0.0).reshape(-1)
    order = _argsort_stable(xp, key)  # row-major over (tile, entry) before: tile order within a key
    key, value = key[order], value[order]
    rank = xp.where(key < n, _arange(xp, key, key.shape[0]) - xp.searchsorted(key, key), 0)
    m = part.shape[0] if n * part.shape[0] <= 1 << 22 else int(rank.max()) + 1
    table = _zeros(xp, part, (n + 1, m))
    table[key, rank] = value  # row n takes only zeros
    return xp.asarray(table[:n].sum(1).reshape(tuple(shape)), dtype=xp.float32), outside


def reduce_tile_windows(partials, reads, origin_of, widths, shape):
    """A parameter's gradient from per-tile partials, in float64, deterministic.

    ``partials``: [*A, W], one window of W entries (row-major over ``widths``) per tile, the tile axes
    A in index order (the backward's B, Hq, nQ, nK; on Ascend then the two AIV halves); ``reads``: one
    bool per tile axis, whether the window's origin depends on that axis' index; ``origin_of(*grids)``:
    the origin's coordinates (one array or int per dimension of ``shape``) from the tile axes' index
    grids (int64, each shaped to broadcast, of length 1 on an axis not read); ``widths``, ``shape``:
    as :func:`reduce_windows`. NumPy arrays or torch tensors.

    The tiles that differ only on axes not read share their window's origin: their windows are summed
    first (float64, one call of the library's sum), then :func:`reduce_windows` places the rest.

    Returns:
        (gradient float32 of ``shape``, outside), as :func:`reduce_windows`.
    """
    xp = _namespace(partials)
    part = xp.asarray(partials, dtype=xp.float64)
    tiles = part.shape[:-1]
    summed = tuple(a for a, read in enumerate(reads) if not read)
    if summed:
        tiles = tuple(1 if a in summed else n for a, n in enumerate(tiles))
        part = part.sum(summed).reshape(tiles + (part.shape[-1],))
    grids = [_arange(xp, part, n).reshape(tuple(-1 if b == a else 1 for b in range(len(tiles)))) for a, n in enumerate(tiles)]
    zero = sum(g * 0 for g in grids)  # int64 zeros of the tiles' shape, on the partials' device
    origins = xp.stack([(o + zero).reshape(-1) for o in origin_of(*grids)], 1)
    return reduce_windows(part.reshape(-1, part.shape[-1]), origins, widths, shape)


def carried_source(*names: str) -> str:
    """The source text of the functions ``names`` of this module and of the ones they call, in file
    order, each as written here, two blank lines apart: what a generated module carries.

    Raises:
        ValueError: a name that is not a function of this module.
    """
    text = inspect.getsource(sys.modules[__name__])
    tree = ast.parse(text)
    funcs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    unknown = [n for n in names if n not in funcs or n == "carried_source"]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a carried function of {__name__}; accepted: "
                         f"{', '.join(n for n in funcs if n != 'carried_source')}")
    todo, need = list(names), set()
    while todo:
        name = todo.pop()
        if name in need:
            continue
        need.add(name)
        todo += [n.id for n in ast.walk(funcs[name]) if isinstance(n, ast.Name) and n.id in funcs]
    return "\n\n\n".join(ast.get_source_segment(text, funcs[n]) for n in funcs if n in need)
