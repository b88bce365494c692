"""Roofline, emitted-code model and simulated timeline of every built-in spec on an Ascend target.

    PYTHONPATH=. python benchmarks/timeline.py [--target ascend910b2] [--json results/timeline.json] [--mask-every-tile]
        [--wait-at-copy] [--no-pipeline]

Prints one Markdown row per spec and program: time and matmul utilisation (of the target's cube peak)
of the roofline (tilegen.cost.predict), the model (tilegen.cost.predict_emitted) and the simulated
timeline (tilegen.timeline.simulate_program, the hand twin's trace), and the simulated busy fraction
of the cube (AIC.M) and vector (AIV.V) pipes of the longest kernel. Needs g++ (the hand twin).
``--mask-every-tile`` measures the schedule before the mask-cut-tiles-only pass (the pass replaced by
the identity, the compile cache off): MaskTile does its work on every tile. ``--wait-at-copy`` measures
the schedule before the wait-at-first-read pass (likewise): every L1 copy is waited for at once.
``--no-pipeline`` measures the schedule before the pipeline-handoffs pass (likewise): one GM slot per
hand-off, one ready flag per direction, the cube and the vector taking turns.
"""

from __future__ import annotations

import argparse
import json

from tilegen import builtin_spec
from tilegen.report import timeline_report

SPECS = ["tiny", "tiny-gqa", "demo", "seed", "llama2-7b", "llama3-8b"]  # tiny-fp32 (fp32) is refused by the Ascend C backend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="ascend910b2")
    ap.add_argument("--json")
    ap.add_argument("--mask-every-tile", action="store_true", help="without the mask-cut-tiles-only pass")
    ap.add_argument("--wait-at-copy", action="store_true", help="without the wait-at-first-read pass")
    ap.add_argument("--no-pipeline", action="store_true", help="without the pipeline-handoffs pass")
    args = ap.parse_args()
    if args.mask_every_tile or args.wait_at_copy or args.no_pipeline:
        import os

        from tilegen.passes import lower

        os.environ["TILEGEN_CACHE"] = "0"
        if args.mask_every_tile:
            lower.mask_cut_tiles_only = lambda program: program
        if args.wait_at_copy:
            lower.wait_at_first_read = lambda program, levels: program
        if args.no_pipeline:
            lower.pipeline_handoffs = lambda program, target: program
    rows = []
    print("| spec | program | roofline | model | simulated | model / simulated | longest kernel: simulated busy AIC.M, AIC.MTE2, AIV.V, AIV.S |")
    print("|---|---|---|---|---|---|---|")
    for name in SPECS:
        rep = timeline_report(builtin_spec(name), args.target)
        for p in rep["programs"]:
            r, m, s = p["roofline"], p["model"], p["simulated"]
            k = max(s["kernels"], key=lambda k: k["time_s"])
            b = k["busy_fraction"]
            print(
                f"| {name} | {p['label']} | {r['time_s'] * 1e3:.3f} ms ({r['utilization']:.1%}) | {m['time_s'] * 1e3:.3f} ms ({m['utilization']:.1%}) | "
                f"{s['time_s'] * 1e3:.3f} ms ({s['utilization']:.1%}) | {m['time_s'] / s['time_s']:.2f} | "
                f"{b.get('AIC.M', 0):.1%}, {b.get('AIC.MTE2', 0):.1%}, {b.get('AIV.V', 0):.1%}, {b.get('AIV.S', 0):.1%} |",
                flush=True,
            )
            rows.append({"spec": name, **{kk: v for kk, v in p.items() if kk != "_timeline"}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"target": args.target, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
