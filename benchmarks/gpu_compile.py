"""What the compiler allocates for the generated Triton kernels of every variant of the committed H200
sweep, read on the CPU (:func:`tilegen.backends.triton.compile.compile_resources`: an sm_90 compile with
the ptxas Triton ships; no GPU): registers per thread, spilled bytes per thread, shared bytes per program.

    PYTHONPATH=. python benchmarks/gpu_compile.py            # writes results/gpu_compile.json

Per sweep variant (its label, as benchmarks/gpu_model.py prints it) and kernel phase: ``registers``,
``stack_bytes``, ``shared_bytes``; benchmarks/gpu_model.py --compiled passes them to
:func:`tilegen.models.cost.predict_gpu`. The kernels compiled are today's rendering of each variant's tiles,
warps and stages, not the module the sweep timed (an earlier commit); the output says so. One spec's
kernels: ``tilegen inspect --spec NAME --target h200 --compile``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tilegen.backends.triton.compile import compile_resources  # noqa: E402
from tilegen.core.targets import load_target  # noqa: E402


def sweep(path: Path) -> dict:
    """Compile figures of every variant of the sweep at ``path``, keyed by gpu_model.label."""
    from gpu_model import label, load_sweep, sweep_spec

    n, variants = load_sweep(path)
    loose = load_target("h200").with_capacity("SMEM", 1 << 30)  # as gpu_model.variant_program: every variant ran
    rows, version = {}, None
    for var in variants:
        spec = sweep_spec(var["D"], n, var.get("dtype", "bf16"), var.get("causal", False))
        kind = "fwd" if var["program"] == "fwd" else "bwd"
        knobs = {ph: tuple(k) for ph, k in var["knobs"].items()}
        res = compile_resources(spec, loose, var.get("strategy"), {kind: tuple(var["tiles"])}, knobs)
        version = res["triton"]
        facts = {ph: {k: f[k] for k in ("registers", "stack_bytes", "shared_bytes")} for ph, f in res["kernels"].items() if ph in var["knobs"]}
        rows[label(var)] = facts
        print(f"{label(var):<40} " + "  ".join(f"{ph}: {f['registers']} reg, {f['stack_bytes']} B stack, {f['shared_bytes']} B shared"
                                            for ph, f in facts.items()), flush=True)
    return {"meta": {"triton": version, "arch": "sm_90", "note": "today's rendering of each sweep variant's tiles, warps and stages (not the commit the sweep timed)"},
            "variants": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "gpu_compile.json"))
    args = ap.parse_args(argv)
    res = sweep(HERE / "results" / "gpu_sweep.json")
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
