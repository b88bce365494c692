"""Roofline, emitted-code model and simulated timeline of every built-in spec on an Ascend target.

    PYTHONPATH=. python benchmarks/timeline.py [--target ascend910b2] [--json results/timeline.json] [--mask-every-tile]
        [--wait-at-copy] [--no-pipeline] [--no-vector-stage] [--dkv-strategy on-chip|atomic|auto] [--handoff-per-tile] [--no-l0c-pingpong] [--no-snake-deal] [--no-lookahead] [--no-receive-ahead] [--no-fold] [--no-one-launch] [--no-stream] [--no-free-early] [--no-sink] [--anchor]

Prints one Markdown row per spec and program: time and matmul utilisation (of the target's cube peak)
of the roofline (tilegen.models.cost.predict), the model (tilegen.backends.ascendc.cost.predict_emitted) and the simulated
timeline (tilegen.backends.ascendc.timeline.simulate_program, the hand twin's trace), and the simulated busy fraction
of the cube (AIC.M) and vector (AIV.V) pipes of the longest kernel. Needs g++ (the hand twin).
``--mask-every-tile`` measures the schedule before the mask-cut-tiles-only pass (the pass replaced by
the identity, the compile cache off): MaskTile does its work on every tile. ``--wait-at-copy`` measures
the schedule before the wait-at-first-read pass (likewise): every L1 copy is waited for at once.
``--no-pipeline`` measures the schedule before the pipeline-handoffs pass (likewise): one GM slot per
hand-off, one ready flag per direction, the cube and the vector taking turns. ``--no-vector-stage``
measures it with the pass's vector skew left out (likewise): the cube one tile ahead, the vector's
statements in one stage (the forward's softmax of tile j + 1 waits for the O update of tile j).
``--dkv-strategy on-chip`` builds the backward with dK, dV accumulated in L0C over the Q loop (the
schedule before the atomic strategy; default auto: atomic on the 910B). ``--handoff-per-tile`` measures
the schedule before the unit-phases and one-handoff-per-direction passes (both the identity, the
compile cache off): each tile the cube and vector exchange has its own ready flag, S → P → dV and
dP → dS → dK, dQ in two round trips. The schedule before issue 14's backward item is
``--dkv-strategy on-chip --handoff-per-tile``. ``--no-l0c-pingpong`` measures the schedule before the l0c-pingpong pass (likewise): each product whole
in L0C, the next Mmad after the Fixpipe before it. ``--no-snake-deal`` measures it before the snake-deal
pass (likewise): every kernel's programs dealt cyclically. ``--no-lookahead`` measures it before the
pipeline-lookahead pass (likewise, and so without receive-ahead, which needs it): each unit one tile ahead,
two slots. ``--no-receive-ahead`` measures it before the receive-ahead pass (likewise): the forward's P·V
received after the softmax of the tile two ahead. ``--no-fold`` measures it
before the fold-row-reductions pass (likewise): one ReduceRepeat per 64 columns of a row reduction.
``--no-stream`` measures it before the stream-programs pass (likewise): each program's pipelined loop
runs alone, its pipeline filled and drained per program. ``--no-free-early`` measures it before the
receive-free-early pass (likewise, and so without sink-past-free, which reorders around its knob): the
vector's receive of S waits for all vector work before it. ``--no-sink`` measures it before the
sink-past-free pass alone (likewise). ``--anchor`` adds the one-head, non-causal forward at
S = 32k, D = 128, fp16 (simulated TFLOP/s, beside the 168.5 TFLOP/s the pto-isa hand kernel measured on
a 910B2).
"""

from __future__ import annotations

import argparse
import json

from tilegen import builtin_spec
from tilegen.harness.report import timeline_report
from tilegen.backends import compile_backward, compile_forward

SPECS = ["tiny", "tiny-gqa", "demo", "seed", "llama2-7b", "llama3-8b"]  # tiny-fp32 (fp32) is refused by the Ascend C backend


def _tiles(name: str, args, label: str) -> str:
    """The program's Br x Bc on the target (the compile cache makes this a lookup)."""

    spec = builtin_spec(name)
    if label == "forward":
        program = compile_forward(spec, target=args.target)
    else:
        program = compile_backward(spec, target=args.target, dkv_strategy=args.dkv_strategy)
    env = {str(k): v for k, v in program.env}
    return f"{env['Br']}x{env['Bc']}"


def _same(program, *_):
    return program


# each flag: what it measures without, the replacement, and the (module, function) pairs it replaces
WITHOUT = {
    "--mask-every-tile": ("the mask-cut-tiles-only pass", _same, [("mask_cut_tiles_only", "mask_cut_tiles_only")]),
    "--wait-at-copy": ("the wait-at-first-read pass", _same, [("wait_at_first_read", "wait_at_first_read")]),
    "--no-pipeline": ("the pipeline-handoffs pass", _same, [("pipeline_handoffs", "pipeline_handoffs")]),
    "--no-vector-stage": ("the pipeline-handoffs pass's vector skew", lambda *a: None, [("pipeline_handoffs", "_vector_stages")]),
    "--handoff-per-tile": ("the unit-phases and one-handoff-per-direction passes", _same,
                           [("unit_phases", "unit_phases"), ("one_handoff_per_direction", "one_handoff_per_direction")]),
    "--no-l0c-pingpong": ("the l0c-pingpong pass", _same, [("l0c_pingpong", "l0c_pingpong")]),
    "--no-snake-deal": ("the snake-deal pass", _same, [("snake_deal", "snake_deal")]),
    "--no-lookahead": ("the pipeline-lookahead pass", _same, [("pipeline_lookahead", "pipeline_lookahead")]),
    "--no-receive-ahead": ("the receive-ahead pass", _same, [("receive_ahead", "receive_ahead")]),
    "--no-fold": ("the fold-row-reductions pass", _same, [("fold_row_reductions", "fold_row_reductions")]),
    "--no-one-launch": ("the one-launch pass (a launch per kernel)", _same, [("one_launch", "one_launch")]),
    "--no-stream": ("the stream-programs pass (each program's pipelined loop alone)", _same, [("stream_programs", "stream_programs")]),
    "--no-free-early": ("the receive-free-early pass (S received after all vector work before it)", _same,
                        [("receive_free_early", "receive_free_early")]),
    "--no-sink": ("the sink-past-free pass", _same, [("receive_free_early", "sink_past_free")]),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="ascend910b2")
    ap.add_argument("--json")
    for flag, (what, _, _) in WITHOUT.items():
        ap.add_argument(flag, action="store_true", help=f"without {what}")
    ap.add_argument("--dkv-strategy", choices=["auto", "on-chip", "atomic"], default="auto", help="the backward's dK/dV strategy")
    ap.add_argument("--anchor", action="store_true", help="also the one-head non-causal forward at S = 32k, D = 128, fp16 (TFLOP/s)")
    args = ap.parse_args()
    chosen = [flag for flag in WITHOUT if getattr(args, flag[2:].replace("-", "_"))]
    if chosen:
        import os

        import importlib

        os.environ["TILEGEN_CACHE"] = "0"  # the compile cache would hand back the programs with the pass
        for flag in chosen:  # each pass list entry calls its module's function by name: a stub there replaces it
            _, stub, passes = WITHOUT[flag]
            for module, name in passes:
                setattr(importlib.import_module(f"tilegen.passes.ascend.{module}"), name, stub)
    rows = []
    print("| spec | program | tiles | roofline | model | simulated | model / simulated | longest kernel: simulated busy AIC.M, AIC.FIX, AIC.MTE2, AIV.V, AIV.S |")
    print("|---|---|---|---|---|---|---|---|")
    for name in SPECS:
        rep = timeline_report(builtin_spec(name), args.target, dkv_strategy=args.dkv_strategy)
        for p in rep["programs"]:
            r, m, s = p["roofline"], p["model"], p["simulated"]
            k = max(s["kernels"], key=lambda k: k["time_s"])
            p = {**p, "tiles": _tiles(name, args, p["label"])}
            b = k["busy_fraction"]
            print(
                f"| {name} | {p['label']} | {p['tiles']} | {r['time_s'] * 1e3:.3f} ms ({r['utilization']:.1%}) | {m['time_s'] * 1e3:.3f} ms ({m['utilization']:.1%}) | "
                f"{s['time_s'] * 1e3:.3f} ms ({s['utilization']:.1%}) | {m['time_s'] / s['time_s']:.2f} | "
                f"{b.get('AIC.M', 0):.1%}, {b.get('AIC.FIX', 0):.1%}, {b.get('AIC.MTE2', 0):.1%}, {b.get('AIV.V', 0):.1%}, {b.get('AIV.S', 0):.1%} |",
                flush=True,
            )
            rows.append({"spec": name, **{kk: v for kk, v in p.items() if kk != "_timeline"}})
    anchor = None
    if args.anchor:
        # the pto-isa hand kernel's published row (910B2, one (b, h), S0 = S1 = 32k, HEAD 128): 168.5 TFLOP/s
        from tilegen.backends.ascendc.cost import predict_emitted
        from tilegen.backends.ascendc.timeline import simulate_program

        n = 32768
        spec = builtin_spec("llama2-7b").replace(heads_q=1, heads_kv=1, seq_q=n, seq_k=n, window=(-1, -1))
        sim = simulate_program(spec, args.target, "fwd", dkv_strategy=args.dkv_strategy)
        model = predict_emitted(spec, args.target, "fwd", dkv_strategy=args.dkv_strategy)
        flops = 4 * n * n * 128
        anchor = {"spec": "llama2-7b, B 1, H 1, S 32768, non-causal", "simulated_s": sim.time_s, "simulated_tflops": flops / sim.time_s / 1e12,
                  "utilization": sim.utilization, "model_s": model.time_s, "critical_path_share": sim.kernels[0].critical}
        print(f"\none head, non-causal forward, S = 32k, D = 128: simulated {sim.time_s * 1e3:.3f} ms = {anchor['simulated_tflops']:.1f} TFLOP/s "
              f"({sim.utilization:.1%} of the cube peak); model / simulated {model.time_s / sim.time_s:.2f}; "
              f"critical path {', '.join(f'{k} {v:.0%}' for k, v in sorted(anchor['critical_path_share'].items(), key=lambda kv: -kv[1]) if v >= 0.01)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "dkv_strategy": args.dkv_strategy, "handoff_per_tile": args.handoff_per_tile, "no_pipeline": args.no_pipeline,
                       "no_vector_stage": args.no_vector_stage, "no_l0c_pingpong": args.no_l0c_pingpong, "no_snake_deal": args.no_snake_deal, "rows": rows, "anchor": anchor}, f, indent=1)


if __name__ == "__main__":
    main()
