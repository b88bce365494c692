"""Where a call of :mod:`tilegen.torch` runs, by its tensors' device, and what each place needs.

- ``cuda``: the Triton module tilegen generates for the spec (:func:`tilegen.backends.triton.load`),
  with the schedule of a GPU target (:func:`check_gpu_target`).
- ``cpu``: the NumPy interpreter (:mod:`tilegen.api`), through :func:`to_numpy` / :func:`from_numpy`.
- ``npu``: refused (:func:`refuse_npu`) until the Ascend C operator is wired here.
"""

from __future__ import annotations

import numpy as np
import torch

from tilegen.core.errors import SpecError, TargetError


def triton_path(x: torch.Tensor) -> bool:
    """Whether a call on ``x``'s device runs the Triton module (CUDA tensors); the other devices run
    the interpreter (CPU) or are refused (NPU)."""
    return x.device.type == "cuda"


def check_gpu_target(target: str) -> None:
    """``target`` names a target whose backend generates the module ``tilegen.torch`` runs
    (:attr:`~tilegen.backends.compiler.Backend.torch_module`: a GPU target, a file of ``targets/`` or a
    path to a target ``.toml`` file of ``kind = "gpu"``; checked on every device, so a typo never passes
    on the CPU).

    Raises:
        SpecError (ValueError): another kind of target, an unknown name or a bad file, naming the GPU
            targets.
    """
    from tilegen.backends import backend_for
    from tilegen.core.targets import load_target, target_names

    def accepted() -> str:  # built only for the error: it reads every target file
        gpus = [n for n in target_names() if backend_for(n).torch_module]
        return f"a GPU target: one of {', '.join(gpus)} or a path to a GPU target .toml file"

    if not isinstance(target, str):
        raise SpecError("target", target, accepted())
    try:
        tgt = load_target(target)
    except TargetError:
        raise SpecError("target", target, accepted()) from None
    if not backend_for(tgt).torch_module:
        raise SpecError("target", target, accepted() + f" ({target!r} is a {tgt.kind} target)")


def refuse_npu():
    """NPU tensors: NotImplementedError naming what is missing (torch_npu, or the built operator)."""
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        raise NotImplementedError("tilegen.torch on an NPU needs torch_npu, which is not installed") from None
    raise NotImplementedError(
        "tilegen.torch on an NPU needs a built tilegen Ascend C operator; generate and build it for this spec "
        "(tilegen generate --target ascend910b2), this entry point does not load it yet"
    )


def to_numpy(x: torch.Tensor) -> np.ndarray:
    """``x`` on the host as NumPy (bfloat16 as ``ml_dtypes.bfloat16``, bit for bit)."""
    x = x.detach().cpu()
    if x.dtype == torch.bfloat16:
        import ml_dtypes

        return x.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return x.numpy()


def from_numpy(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    """``a`` as a contiguous tensor on ``like``'s device (bfloat16 bit for bit when ``like`` is)."""
    a = np.ascontiguousarray(a)
    if like.dtype == torch.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(like.device)
    return torch.from_numpy(a.copy()).to(like.device)


def float32_or_none(x: torch.Tensor | None) -> np.ndarray | None:
    """A learnt parameter tensor (sinks, ALiBi slopes) on the host as float32 NumPy, or None."""
    return None if x is None else to_numpy(x).astype(np.float32)
