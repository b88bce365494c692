"""tilegen: a tiling code generator for FlashAttention-2 forward and recompute-backward kernels.

Python API (NumPy in, NumPy out, interpreter-backed):

- :func:`attention` (q, k, v, ...) -> (o, lse)
- :func:`attention_backward` (q, k, v, o, lse, do, ...) -> (dq, dk, dv)
- :class:`AttentionSpec`, :func:`load_spec`, :func:`builtin_spec`

See README.md for the CLI and DESIGN.md for the conventions.
"""

from .api import attention, attention_backward, make_spec
from .errors import ScheduleError, SpecError, TargetError, TilegenError, VerifyError
from .spec import AttentionSpec, builtin_spec, builtin_specs, load_spec

__all__ = [
    "AttentionSpec",
    "ScheduleError",
    "SpecError",
    "TargetError",
    "TilegenError",
    "VerifyError",
    "attention",
    "attention_backward",
    "builtin_spec",
    "builtin_specs",
    "load_spec",
    "make_spec",
]
__version__ = "0.1.0"
