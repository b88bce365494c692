"""The host steps after the kernels, one implementation on NumPy arrays and torch tensors alike.

tilegen runs them on NumPy arrays (the interpreter, the twins, the NumPy API); every generated Triton
module carries a copy of the ones it calls (:func:`carried_source`), run on its torch tensors, so that
the module stands alone. Functions of the carried part use only the array's own library (found from the
array: :func:`_namespace`) and ``math``, and carry no annotations (the module does not import NumPy).

- :func:`dsinks`: the gradient of the sink logits, DESIGN §3.
"""

from __future__ import annotations

import ast
import inspect
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
