"""Sizes in bytes for users: units, the HBM bytes of a spec's tensors, and the device-memory warning.

Light on purpose (no compiler import), so that the CLI's cached paths can use it.
"""

from __future__ import annotations

import math

from tilegen.core import dtypes
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import Target, load_target


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units: "512 B", "1.50 KiB", ... "2.00 TiB"."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError


def format_seconds(s: float) -> str:
    """``s`` seconds as "12.34 us", "1.234 ms" or "1.234 s"."""
    if s < 1e-3:
        return f"{s * 1e6:.2f} us"
    if s < 1:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.3f} s"


def tensor_bytes(spec: AttentionSpec, names) -> int:
    """Bytes of the named tensors of ``spec`` in HBM (L in fp32, the others in the spec's dtype)."""
    item = dtypes.itemsize(spec.dtype)
    shapes = spec.logical_shapes
    return sum(math.prod(shapes[n]) * (4 if n == "L" else item) for n in names)


FORWARD_TENSORS = ("Q", "K", "V", "O", "L")
BACKWARD_TENSORS = ("Q", "K", "V", "O", "L", "dO", "dQ", "dK", "dV")


def device_memory_warning(spec: AttentionSpec, target: Target | str) -> str | None:
    """A one-line warning when the tensors of the forward (Q, K, V, O, L) or of the backward (those and
    dO, dQ, dK, dV; workspaces not counted) exceed the target's device memory (``bandwidth.hbm_bytes``
    of the target file, with its source); None when they fit or the target gives no size."""
    tgt = load_target(target)
    size = tgt.bandwidth.get("hbm_bytes")
    if size is None:
        return None
    for what, names in (("forward", FORWARD_TENSORS), ("forward and backward", BACKWARD_TENSORS)):
        need = tensor_bytes(spec, names)
        if need > size.value:
            return (
                f"warning: the {what} tensors ({', '.join(names)}) take {format_bytes(need)}, more than the "
                f"{format_bytes(size.value)} of device memory of {tgt.name} ({size.source}); the predicted times assume they fit"
            )
    return None
