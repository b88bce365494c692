"""Score and mask mods, from the entry points' arguments to the custom ops' text and tensors and on to
the kernels (DESIGN §3).

``score_mod=`` and ``mask_mod=`` take a :mod:`tilegen.mods` built-in or a Python function written with
its helpers or in plain torch (FlexAttention's mods: :func:`tilegen.core.mods.torch_dispatch`; the tensors it
captures are its parameters, found from its latest trace). They reach the ops as text (the mod language), a JSON of the parameter declarations and a
``Tensor[]`` of the parameter arrays (``tilegen.mods.param(name, tensor)`` or a built-in's array;
NumPy arrays are moved to q's device). A function is traced once per function object (its Python
closure is read then, its parameter tensors at every call); under ``torch.compile`` the tracing runs at
compile time (``torch.compiler.assume_constant_result``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

MOD_TEXTS: dict[tuple[int, int], tuple] = {}  # (id(score_mod), id(mask_mod)) -> (score_mod, mask_mod, texts)
FLASH_MODS: dict[tuple[float, int], Any] = {}  # (softcap, alibi dimensions) -> its Mod


@torch.compiler.assume_constant_result
def mod_texts(score_mod, mask_mod) -> tuple:
    """(score text, mask text, declarations JSON, parameter names, window left, window right) of the
    mods, cached per (score_mod, mask_mod) object pair (a function is traced once). Under
    ``torch.compile`` this runs at compile time and its result is a constant of the graph.

    Raises:
        ModError (a SpecError): an invalid mod, naming the construct (:func:`tilegen.mods.trace`).
    """
    key = (id(score_mod), id(mask_mod))
    hit = MOD_TEXTS.get(key)
    if hit is not None and hit[0] is score_mod and hit[1] is mask_mod:
        return hit[2]
    from tilegen.core.mods import mods_from_api

    score_text, mask_text, decls, window, _ = mods_from_api(score_mod, mask_mod)
    out = (score_text, mask_text, decls_json(decls), tuple(p.name for p in decls), window[0], window[1])
    if len(MOD_TEXTS) >= 256:
        MOD_TEXTS.clear()
    MOD_TEXTS[key] = (score_mod, mask_mod, out)
    return out


def decls_json(decls) -> str:
    """The custom ops' ``param_decls``: JSON ``{name: ParamDecl.to_dict()}`` in the tensors' order."""
    return json.dumps({p.name: p.to_dict() for p in decls}) if decls else ""


@torch.compiler.assume_constant_result
def flash_mod(softcap: float, alibi_ndim: int):
    """The score mod of FlashAttention's ``softcap`` (> 0; 0: none) and ``alibi_slopes`` (of
    ``alibi_ndim`` dimensions, 0 for none): :func:`tilegen.api.flash_score_mod` over placeholder slopes
    of that rank (the caller's tensor is bound at run time, as ``alibi_slopes``). One Mod per value:
    :func:`mod_texts` caches by object."""
    hit = FLASH_MODS.get((softcap, alibi_ndim))
    if hit is not None:
        return hit
    from tilegen import api

    out = api.flash_score_mod(None, softcap or None, np.zeros((1,) * alibi_ndim, dtype=np.float32) if alibi_ndim else None)
    FLASH_MODS[(softcap, alibi_ndim)] = out
    return out


def _mod_params(fn) -> list:
    """The :class:`tilegen.mods.Param` objects a mod can read (as :func:`tilegen.mods.trace` finds
    them): a Mod's own, or a function's closure, globals and defaults. Traceable by dynamo."""
    from tilegen.core.mods import Mod, closure_params

    return list(fn.params) if isinstance(fn, Mod) else closure_params(fn)


def _mod_tensors(score_mod, mask_mod, names: tuple, device, bound: dict) -> list:
    """The parameter arrays named ``names``, as tensors (NumPy arrays are moved to ``device``); ``bound``
    names tensors that replace the mods' own arrays."""
    found = {}
    for fn in (score_mod, mask_mod):
        if fn is not None:
            for p in _mod_params(fn):
                found[p.name] = p
    out = []
    for n in names:
        if n not in bound and n not in found:  # a tensor the function captured (read while it was traced)
            from tilegen.core.mods import traced_params

            for fn, kind in ((score_mod, "score"), (mask_mod, "mask")):
                found.update({p.name: p for p in traced_params(fn, kind)} if fn is not None else {})
        a = bound[n] if n in bound else found[n].array
        out.append(a if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a), device=device))
    return out


def of_call(score_mod, mask_mod, q: torch.Tensor, bound: dict) -> tuple:
    """(score text, mask text, declarations JSON, parameter tensors, window of the mask mod) of an
    entry point's mods; ``bound`` gives parameter tensors by name in place of the mods' own arrays."""
    if score_mod is None and mask_mod is None:
        return "", "", "", [], (-1, -1)
    score_text, mask_text, decls, names, left, right = mod_texts(score_mod, mask_mod)
    return score_text, mask_text, decls, _mod_tensors(score_mod, mask_mod, names, q.device, bound), (left, right)


def op_params(call, q: torch.Tensor, params) -> tuple[tuple, list]:
    """The declarations of an op call (in the tensors' order) and its parameter tensors, checked
    against them: one per declaration, the declared shape for this problem, a float tensor for an
    ``fp32`` parameter and an integer (or bool) one for ``int32``, on q's device.

    Raises:
        ModError (a SpecError): a parameter of the wrong shape, dtype or device, named.
    """
    params = list(params)
    if not (call.has_mods or params):
        return (), []
    from tilegen.core.mods import ModError

    decls = call.decls()
    if len(params) != len(decls):
        raise ModError("params", f"{len(params)} tensors", f"one tensor per declared parameter ({', '.join(d.name for d in decls) or 'none'})")
    for d, t in zip(decls, params):
        want = d.concrete_shape(call.sizes)
        if tuple(t.shape) != want:
            raise ModError(d.name, list(t.shape), f"shape {list(want)} (declared {[str(x) for x in d.shape]})")
        if d.differentiable != t.is_floating_point():
            raise ModError(d.name, str(t.dtype), "a floating-point tensor" if d.differentiable else "an integer tensor")
        if t.device != q.device:
            raise ModError(d.name, str(t.device), f"a tensor on q's device {q.device}")
    return decls, params


def kernel_params(decls, params) -> dict:
    """Parameter tensors for the generated module, by name: float32 or int32, contiguous."""
    return {d.name: t.detach().to(torch.float32 if d.differentiable else torch.int32).contiguous() for d, t in zip(decls, params)}


def interp_mods(call, decls, params) -> dict:
    """``score_mod=``/``mask_mod=`` for :mod:`tilegen.api`: the call's texts as :class:`tilegen.mods.Mod`
    objects over the parameter arrays (NumPy)."""
    if not (call.score_mod or call.mask_mod):
        return {}
    from tilegen.core.mods import Mod, Param, parse

    by_name = {d.name: d for d in decls}
    wrapped = tuple(Param(d.name, (t.detach().float() if d.differentiable else t.detach()).cpu().numpy()) for d, t in zip(decls, params))
    out = {}
    if call.score_mod:
        out["score_mod"] = Mod("score", parse(call.score_mod, "score", by_name), wrapped)
    if call.mask_mod:
        out["mask_mod"] = Mod("mask", parse(call.mask_mod, "mask", by_name), wrapped)
    return out
