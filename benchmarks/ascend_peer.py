"""tilegen's Ascend forward beside Huawei's FlashAttentionScore (the official kernel) on the same simulator.

    OPS_TRANSFORMER=<ops-transformer snapshot> ASC_DEVKIT=<asc-devkit snapshot> [ASC_GEN=...] \\
    PYTHONPATH=. python benchmarks/ascend_peer.py [--target ascend910b2] [--specs llama2-7b,llama3-8b,anchor]
        [--heavy 3] [--json benchmarks/results/ascend_peer.json] [--md benchmarks/results/ascend_peer.md]

Both figures are **simulated**: each kernel runs on the real-API twin (tilegen's CCE intrinsics under
Huawei's headers; tilegen's own kernel on the hand twin, as ``tilegen inspect --simulate`` runs it) and its
instruction trace is scheduled by the same timeline with the target's ``[timeline]`` cost table
(tilegen/backends/ascendc/timeline.py). tilegen's time is :func:`timeline.simulate_program`'s; the official
kernel's is :func:`tilegen.harness.ascend_peer.simulate_forward`'s (chosen blocks of its launch, the
slowest taken). ``ratio`` = official time / tilegen time: above 1, tilegen is faster on this simulator.
Each figure is given at the cost table's central values and, in parentheses, at the fast and the slow end of
its ranges (the same traces scheduled again; the ratio at each end compares the two kernels at that end).
First the official kernel is checked at a small shape against the float64 reference (the table's first
line). ``anchor`` is the one-head, non-causal forward at S = 32k, D = 128, fp16 (benchmarks/timeline.py
``--anchor``); ``anchor-<n>k`` the same at S = n·1024 (the points where pto-isa's README gives the measured
torch_npu FlashAttention, whose operator this is: a calibration of the simulator). TFLOP/s count the visible scores' matmul work, 4·B·Hq·D per visible (query, key) pair.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from tilegen import builtin_spec
from tilegen.backends.ascendc.timeline import simulate_program
from tilegen.core import reference
from tilegen.core.spec import AttentionSpec
from tilegen.harness import ascend_peer


def _spec(name: str) -> AttentionSpec:
    """A built-in spec, or ``anchor`` / ``anchor-<n>k``: the one-head, non-causal forward at S = n·1024
    (32k by default), D = 128, fp16, BSND (llama2-7b's head)."""
    if name == "anchor" or name.startswith("anchor-"):
        n = 32768 if name == "anchor" else int(name.removeprefix("anchor-").removesuffix("k")) * 1024
        return builtin_spec("llama2-7b").replace(heads_q=1, heads_kv=1, seq_q=n, seq_k=n, window=(-1, -1), name=f"anchor-{n // 1024}k")
    return builtin_spec(name)


def _flops(spec: AttentionSpec) -> float:
    """Matmul FLOPs of the visible scores: no mask, or causal with Sq = Sk (the peer's only masked case)."""
    pairs = spec.seq_q * spec.seq_k if spec.window == (-1, -1) else spec.seq_q * (spec.seq_q + 1) // 2
    return 4.0 * spec.batch * spec.heads_q * spec.head_dim_qk * pairs


def _check(target: str) -> dict:
    """The official kernel at a small shape (causal, GQA, fp16, BSND) against the float64 reference."""
    spec = AttentionSpec(batch=1, heads_q=4, heads_kv=2, seq_q=1152, seq_k=1152, head_dim_qk=128, head_dim_v=128, dtype="fp16",
                         window=(-1, 0), layout="BSND", name="peer-check")
    data = ascend_peer.random_inputs(spec, seed=3)
    out = ascend_peer.run_forward(spec, data, target)
    o, lse = reference.forward(data["Q"], data["K"], data["V"], scale=spec.softmax_scale, window=spec.window, alignment=spec.alignment)
    return {"spec": "B 1, Hq 4, Hkv 2, S 1152, D 128, fp16, causal, BSND", "max_abs_err_O": float(np.abs(out["O"].astype(np.float64) - o).max()),
            "max_abs_err_L": float(np.abs(out["L"].astype(np.float64) - lse).max()), "template": out["tiling"]["template"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="ascend910b2")
    ap.add_argument("--specs", default="llama2-7b,llama3-8b,anchor")
    ap.add_argument("--heavy", type=int, default=3, help="heaviest blocks of the official launch scheduled per spec (their median is its time)")
    ap.add_argument("--json", default="benchmarks/results/ascend_peer.json")
    ap.add_argument("--md", default="benchmarks/results/ascend_peer.md")
    args = ap.parse_args()
    check = _check(args.target)
    print(f"official kernel, {check['spec']}: max |O - O64| {check['max_abs_err_O']:.2e}, max |L - L64| {check['max_abs_err_L']:.2e}")
    rows = []
    head = ("| spec | pass | tilegen simulated µs (fast, slow) | official simulated µs (fast, slow) | ratio official / tilegen (fast, slow) | "
            "tilegen TFLOP/s | official TFLOP/s | official blocks (tile spread), order noise | official critical path |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    print(head + "\n" + lines[1], flush=True)
    for name in args.specs.split(","):
        spec = _spec(name)
        t0 = time.time()
        ours = simulate_program(spec, args.target, "fwd")
        ours_at = {end: simulate_program(spec, args.target, "fwd", end=end).time_s for end in ("fast", "slow")}
        t1 = time.time()
        peer = ascend_peer.simulate_forward(spec, args.target, heavy=args.heavy)
        t2 = time.time()
        flops = _flops(spec)
        crit = ", ".join(f"{k} {v:.0%}" for k, v in sorted(peer["critical"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
        row = {"spec": name, "pass": "forward", "tilegen_s": ours.time_s, "official_s": peer["time_s"], "ratio": peer["time_s"] / ours.time_s,
               "tilegen_tflops": flops / ours.time_s / 1e12, "official_tflops": flops / peer["time_s"] / 1e12,
               "official_sampled": {str(b): v for b, v in peer["sampled"].items()}, "official_blocks": peer["blocks"],
               "official_spread": peer["spread"], "official_order_spread": peer["order_spread"], "official_busy_blocks": peer["busy_blocks"], "official_busy": peer["busy"], "official_critical": peer["critical"],
               "official_tiling": {k: v for k, v in peer["tiling"].items() if k in ("template", "key", "block_dim", "s1_base", "s2_base", "n_ratio")},
               "tilegen_form": ours.kernels[0].form, "wall_s": {"tilegen": t1 - t0, "official": t2 - t1},
               "tilegen_range_s": ours_at, "official_range_s": peer["range_s"],
               "ratio_range": {end: peer["range_s"][end] / ours_at[end] for end in ("fast", "slow")}}
        rows.append(row)
        rr, pr = row["ratio_range"], peer["range_s"]
        line = (f"| {name} | forward | {ours.time_s * 1e6:.1f} ({ours_at['fast'] * 1e6:.1f}, {ours_at['slow'] * 1e6:.1f}) | "
                f"{peer['time_s'] * 1e6:.1f} ({pr['fast'] * 1e6:.1f}, {pr['slow'] * 1e6:.1f}) | {row['ratio']:.2f} ({rr['fast']:.2f}, {rr['slow']:.2f}) | {row['tilegen_tflops']:.1f} | "
                f"{row['official_tflops']:.1f} | {len(peer['heavy'])} heaviest of {peer['busy_blocks']} with work ({peer['spread']:.1%}), order noise {peer['order_spread']:.1%} | {crit} |")
        lines.append(line)
        print(line, flush=True)
    for path, text in ((args.json, json.dumps({"target": args.target, "simulated": True, "check": check, "rows": rows}, indent=1)),
                       (args.md, f"Simulated on the {args.target} timeline (`PYTHONPATH=. python benchmarks/ascend_peer.py`).\n\n"
                                 f"Official kernel check: {check['spec']}: max |O - O64| {check['max_abs_err_O']:.2e}, "
                                 f"max |L - L64| {check['max_abs_err_L']:.2e}.\n\n" + "\n".join(lines) + "\n")):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            tmp = f"{path}.tmp{os.getpid()}"
            Path(tmp).write_text(text)
            os.replace(tmp, path)


if __name__ == "__main__":
    main()
