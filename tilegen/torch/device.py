"""Where a call of :mod:`tilegen.torch` runs, by its tensors' device, and what each place needs.

- ``cuda``: the Triton module tilegen generates for the spec (:func:`tilegen.backends.triton.load`),
  with the schedule of a GPU target (:func:`check_gpu_target`): the caller's, else the one of the
  tensors' device (:func:`gpu_target`).
- ``cpu``: the NumPy interpreter (:mod:`tilegen.api`), through :func:`to_numpy` / :func:`from_numpy`.
- ``npu``: refused (:func:`refuse_npu`) until the Ascend C operator is wired here.
"""

from __future__ import annotations

import functools
import re
import warnings

import numpy as np
import torch

from tilegen.core.errors import SpecError, TargetError


def triton_path(x: torch.Tensor) -> bool:
    """Whether a call on ``x``'s device runs the Triton module (CUDA tensors); the other devices run
    the interpreter (CPU) or are refused (NPU)."""
    return x.device.type == "cuda"


class DeviceTargetWarning(UserWarning):
    """No target file describes the CUDA device a call runs on exactly; tilegen uses the nearest one
    (:func:`target_for_device`). Raised once per device model in a process."""


def gpu_target(target: str | None, x: torch.Tensor) -> str:
    """The GPU target whose schedule a call on ``x`` uses: ``target`` when the caller names one (used
    as is; :func:`check_gpu_target` checks it); else, for a CUDA tensor, the target of its device
    (:func:`device_target`); else the Triton backend's default (``h200``): the CPU and NPU paths only
    check the name.

    Traceable by dynamo (the device's target is a constant of the graph).
    """
    if target is not None:
        return target
    if x.device.type != "cuda":
        from tilegen.backends.triton import DEFAULT_TARGET

        return DEFAULT_TARGET
    return device_target(x.device.index or 0)


@torch.compiler.assume_constant_result
def device_target(index: int) -> str:
    """The name of the target of CUDA device ``index``, from its name, compute capability, SM count
    and memory (``torch.cuda.get_device_name``, ``get_device_capability``, ``get_device_properties``):
    :func:`target_for_device`. Under ``torch.compile`` this runs at compile time."""
    props = torch.cuda.get_device_properties(index)
    return target_for_device(torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index)), props.multi_processor_count,
                             props.total_memory)


def _names(pattern: str, device_name: str) -> bool:
    """``pattern`` (a target's ``devices`` entry) is a word of ``device_name``, case aside: ``H100`` in
    ``NVIDIA H100 80GB HBM3`` but not in ``NVIDIA GH100``."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(pattern)}(?![A-Za-z0-9])", device_name, re.IGNORECASE) is not None


@functools.lru_cache(maxsize=None)
def target_for_device(name: str, capability: tuple[int, int], sms: int, memory: int) -> str:
    """The GPU target (a file of ``targets/`` whose backend ``tilegen.torch`` runs) for a CUDA device
    called ``name`` of compute ``capability`` (major, minor) with ``sms`` SMs and ``memory`` bytes.

    The target whose ``devices`` names the device (a word of ``name``: ``H100`` → ``h100``, ``H200``
    → ``h200``); else the nearest target: among those of the same architecture (``arch`` =
    ``sm_<major><minor>``), else of the newest one, the closest in SM count, then in device memory
    (``bandwidth.hbm_bytes``), then by name. A device matched by name whose SM count differs from
    its target's (an H100 PCIe: 114 SMs) keeps that target. Both warn (:class:`DeviceTargetWarning`),
    once per device model in a process (this function is memoised), naming the device and the target.
    """
    from tilegen.backends import backend_for
    from tilegen.core.targets import load_target, target_names

    gpus = [t for t in (load_target(n) for n in target_names()) if backend_for(t).torch_module]
    facts = f"compute capability {capability[0]}.{capability[1]}, {sms} SMs, {memory / 2**30:.0f} GiB"
    named = [t for t in gpus if any(_names(d, name) for d in t.devices)]
    if named:
        chosen = named[0]
        if chosen.parallel_units != sms:
            warnings.warn(f"tilegen.torch: the CUDA device {name!r} ({facts}) takes the target {chosen.name!r} by its name, which describes "
                          f"{chosen.parallel_units} SMs: its schedules may not be this device's best; pass target= to choose another",
                          DeviceTargetWarning, stacklevel=2)
        return chosen.name

    def arch(t) -> tuple[int, ...]:
        digits = re.fullmatch(r"sm_(\d+)(\d)[a-z]?", t.arch)
        return (int(digits[1]), int(digits[2])) if digits else (0, 0)

    same = [t for t in gpus if arch(t) == tuple(capability)]
    newest = max(arch(t) for t in gpus)
    pool = same or [t for t in gpus if arch(t) == newest]
    hbm = lambda t: t.bandwidth["hbm_bytes"].value if "hbm_bytes" in t.bandwidth else 0  # noqa: E731
    chosen = min(pool, key=lambda t: (abs(t.parallel_units - sms), abs(hbm(t) - memory), t.name))
    why = f"the same architecture {chosen.arch}" if same else f"no target has sm_{capability[0]}{capability[1]}; the newest architecture, {chosen.arch}"
    warnings.warn(f"tilegen.torch: no target file describes the CUDA device {name!r} ({facts}); using the nearest target {chosen.name!r} ({why}, "
                  f"then the closest SM count and memory); pass target= to choose another", DeviceTargetWarning, stacklevel=2)
    return chosen.name


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
