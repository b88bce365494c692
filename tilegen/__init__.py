"""tilegen: a tiling code generator for FlashAttention-2 forward and recompute-backward kernels.

Python API (NumPy in, NumPy out, interpreter-backed):

- :func:`attention` (q, k, v, ...) -> (o, lse)
- :func:`attention_backward` (q, k, v, o, lse, do, ...) -> (dq, dk, dv)
- :func:`attention_varlen` (q, k, v, cu_seqlens_q, cu_seqlens_k, ...) -> (o, lse): packed TND batches
- :func:`attention_varlen_backward` (q, k, v, o, lse, do, cu_seqlens_q, cu_seqlens_k, ...) -> (dq, dk, dv[, dsinks])
- :func:`generate` (spec, target, out_dir) -> GenerateResult (files, schedule; ``.to_json()``)
- :func:`inspect` (spec, target) -> InspectResult (tiles, candidates, footprints, prediction; ``.to_json()``)
- :class:`AttentionSpec`, :func:`load_spec`, :func:`builtin_spec`

See docs/ for the user guide and the CLI, spec and API references, and DESIGN.md for the conventions.
"""

from tilegen.core.errors import ScheduleError, SpecError, TargetError, TilegenError, VerifyError

__all__ = [
    "AttentionSpec",
    "ScheduleError",
    "SpecError",
    "TargetError",
    "TilegenError",
    "VerifyError",
    "attention",
    "attention_backward",
    "attention_varlen",
    "attention_varlen_backward",
    "builtin_spec",
    "builtin_specs",
    "generate",
    "inspect",
    "load_spec",
    "make_spec",
]
__version__ = "0.1.0"

_API = ("attention", "attention_backward", "attention_varlen", "attention_varlen_backward", "generate", "inspect", "make_spec")
_SPEC = ("AttentionSpec", "builtin_spec", "builtin_specs", "load_spec")


def __getattr__(name: str):
    # The API pulls in the passes (sympy, networkx) and the spec numpy and ml_dtypes; import them on
    # first use so that `import tilegen` stays light: the `tilegen` command imports this package before
    # its main() runs, and only inside main() is a Ctrl-C during those imports one line.
    if name in _SPEC:
        from tilegen.core import spec

        return getattr(spec, name)
    if name in _API:
        from tilegen import api

        return getattr(api, name)
    raise AttributeError(f"module 'tilegen' has no attribute {name!r}")
