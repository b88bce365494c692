"""Roofline, emitted-code model and simulated timeline of every built-in spec on an Ascend target.

    PYTHONPATH=. python benchmarks/timeline.py [--target ascend910b2] [--json results/timeline.json] [--mask-every-tile]
        [--wait-at-copy] [--no-pipeline] [--no-vector-stage] [--dkv-strategy on-chip|atomic|auto] [--handoff-per-tile] [--no-l0c-pingpong] [--no-snake-deal] [--no-lookahead] [--no-receive-ahead] [--no-fold] [--no-one-launch] [--no-stream] [--no-free-early] [--no-sink] [--anchor]

Prints one Markdown row per spec and program: time and matmul utilisation (of the target's cube peak)
of the roofline (tilegen.cost.predict), the model (tilegen.cost.predict_emitted) and the simulated
timeline (tilegen.timeline.simulate_program, the hand twin's trace), and the simulated busy fraction
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
from tilegen.report import timeline_report

SPECS = ["tiny", "tiny-gqa", "demo", "seed", "llama2-7b", "llama3-8b"]  # tiny-fp32 (fp32) is refused by the Ascend C backend


def _tiles(name: str, args, label: str) -> str:
    """The program's Br x Bc on the target (the compile cache makes this a lookup)."""
    from tilegen.passes import pipeline

    spec = builtin_spec(name)
    if label == "forward":
        program = pipeline.compile_forward(spec, target=args.target)
    else:
        program = pipeline.compile_backward(spec, target=args.target, dkv_strategy=args.dkv_strategy)
    env = {str(k): v for k, v in program.env}
    return f"{env['Br']}x{env['Bc']}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="ascend910b2")
    ap.add_argument("--json")
    ap.add_argument("--mask-every-tile", action="store_true", help="without the mask-cut-tiles-only pass")
    ap.add_argument("--wait-at-copy", action="store_true", help="without the wait-at-first-read pass")
    ap.add_argument("--no-pipeline", action="store_true", help="without the pipeline-handoffs pass")
    ap.add_argument("--no-vector-stage", action="store_true", help="the pipeline-handoffs pass without its vector skew")
    ap.add_argument("--dkv-strategy", choices=["auto", "on-chip", "atomic"], default="auto", help="the backward's dK/dV strategy")
    ap.add_argument("--handoff-per-tile", action="store_true", help="without the unit-phases and one-handoff-per-direction passes")
    ap.add_argument("--no-l0c-pingpong", action="store_true", help="without the l0c-pingpong pass")
    ap.add_argument("--no-snake-deal", action="store_true", help="without the snake-deal pass")
    ap.add_argument("--no-lookahead", action="store_true", help="without the pipeline-lookahead pass")
    ap.add_argument("--no-receive-ahead", action="store_true", help="without the receive-ahead pass")
    ap.add_argument("--no-fold", action="store_true", help="without the fold-row-reductions pass")
    ap.add_argument("--no-one-launch", action="store_true", help="without the one-launch pass (a launch per kernel)")
    ap.add_argument("--no-stream", action="store_true", help="without the stream-programs pass (each program's pipelined loop alone)")
    ap.add_argument("--no-free-early", action="store_true", help="without the receive-free-early pass (S received after all vector work before it)")
    ap.add_argument("--no-sink", action="store_true", help="without the sink-past-free pass")
    ap.add_argument("--anchor", action="store_true", help="also the one-head non-causal forward at S = 32k, D = 128, fp16 (TFLOP/s)")
    args = ap.parse_args()
    if args.mask_every_tile or args.wait_at_copy or args.no_pipeline or args.no_vector_stage or args.handoff_per_tile or args.no_l0c_pingpong or args.no_snake_deal or args.no_lookahead or args.no_receive_ahead or args.no_fold or args.no_one_launch or args.no_stream or args.no_free_early or args.no_sink:
        import os

        from tilegen.passes import handoff, lower

        os.environ["TILEGEN_CACHE"] = "0"
        if args.mask_every_tile:
            lower.mask_cut_tiles_only = lambda program: program
        if args.wait_at_copy:
            lower.wait_at_first_read = lambda program, levels: program
        if args.no_pipeline:
            lower.pipeline_handoffs = lambda program, target: program
        if args.no_vector_stage:
            lower._vector_stages = lambda *a: None
        if args.no_l0c_pingpong:
            lower.l0c_pingpong = lambda program, target: program
        if args.no_snake_deal:
            lower.snake_deal = lambda program: program
        if args.no_lookahead:
            lower.pipeline_lookahead = lambda program, target: program
        if args.no_receive_ahead:
            lower.receive_ahead = lambda program, target: program
        if args.no_fold:
            lower.fold_row_reductions = lambda program, target: program
        if args.no_one_launch:
            lower.one_launch = lambda program, target: program
        if args.no_stream:
            lower.stream_programs = lambda program, target: program
        if args.no_free_early:
            lower.receive_free_early = lambda program, target: program
        if args.no_sink:
            lower.sink_past_free = lambda program, target: program
        if args.handoff_per_tile:
            handoff.unit_phases = lambda program: program
            handoff.one_handoff_per_direction = lambda program: program
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
        from tilegen.cost import predict_emitted
        from tilegen.timeline import simulate_program

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
