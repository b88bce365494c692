"""Time and peak memory of the interpreter's fused forward + backward against dense NumPy (float32).

For N in 1k..8k (d = 128, one head, no mask, float32) it runs, each in a fresh subprocess:

- ``dense``: NumPy forward and backward that materialise S, P, dP and dS ([N, N] float32);
- ``fused T``: tilegen's forward and fused backward (dQ strategy ``atomic``, Br = Bc = T) in the
  interpreter, for each T of ``--tiles`` (the interpreter's cost is per tile op, so larger tiles run
  faster on a CPU; its memory stays linear in N for any fixed T).

Time: the median of 3 runs (wall clock, perf_counter) after a warm-up; memory: the peak of traced
allocations (tracemalloc, which sees NumPy's buffers) in a separate run. The largest N that stays under
2 GiB is read off the measured peaks; past the last measured N the fused line is extrapolated from its
bytes per token (it is linear) and labelled so.

Usage: python benchmarks/interpreter.py [--sizes 1024 2048 4096 8192] [--tiles 128 512] [--out ...json]
Prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIMIT = 2 << 30

CHILD = r"""
import json, sys, time, tracemalloc
import numpy as np
from tilegen.backends import compile_backward, compile_forward
mode, n, measure, tile = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
d = 128
rng = np.random.default_rng(0)
q, k, v, do = (rng.standard_normal((1, 1, n, d), dtype=np.float32) for _ in range(4))
scale = np.float32(1 / np.sqrt(d))

def dense():
    s = (q[0, 0] @ k[0, 0].T) * scale
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(axis=1, keepdims=True)
    p /= l
    o = p @ v[0, 0]
    dv = p.T @ do[0, 0]
    dp = do[0, 0] @ v[0, 0].T
    dd = (do[0, 0] * o).sum(axis=1, keepdims=True)
    ds = p * (dp - dd)
    dq = (ds @ k[0, 0]) * scale
    dk = (ds.T @ q[0, 0]) * scale
    return o, dq, dk, dv

if mode == "fused":
    from tilegen.core.spec import AttentionSpec
    from tilegen.backends.interp import interpret
    spec = AttentionSpec(1, 1, 1, n, n, d, d, "fp32", name="bench")
    fwd = compile_forward(spec, tile_sizes=(tile, tile))
    bwd = compile_backward(spec, tile_sizes=(tile, tile), dq_strategy="atomic")

    def fused():
        out, _ = interpret(fwd, {"Q": q, "K": k, "V": v})
        g, _ = interpret(bwd, {"Q": q, "K": k, "V": v, "O": out["O"], "L": out["L"], "dO": do})
        return out["O"], g["dQ"], g["dK"], g["dV"]
    run = fused
else:
    run = dense

if measure == "time":
    run()
    times = []
    for _ in range(3):
        t0 = time.perf_counter(); run(); times.append(time.perf_counter() - t0)
    print(json.dumps({"median_s": sorted(times)[1], "times_s": times}))
else:
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    run()
    peak = tracemalloc.get_traced_memory()[1] - base
    print(json.dumps({"peak_bytes": peak}))
"""


def child(mode: str, n: int, measure: str, tile: int = 0) -> dict:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-c", CHILD, mode, str(n), measure, str(tile)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr else f"exit {proc.returncode}"}
    return json.loads(proc.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--tiles", type=int, nargs="+", default=[128, 512], help="Br = Bc values for the fused runs")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "interpreter.json")
    args = parser.parse_args()
    modes = ["dense"] + [f"fused {t}" for t in args.tiles]
    rows = []
    for n in args.sizes:
        row = {"N": n}
        for mode in modes:
            kind, tile = (mode.split() + ["0"])[:2]
            row[mode] = {**child(kind, n, "time", int(tile)), **child(kind, n, "memory", int(tile))}
        rows.append(row)
        print(f"measured N={n}", file=sys.stderr)

    def fmt_t(r):
        return f"{r['median_s']:.3f}" if "median_s" in r else r.get("error", "?")

    def fmt_m(r):
        return f"{r['peak_bytes'] / 2**20:.1f}" if "peak_bytes" in r else "-"

    head = "| N | " + " | ".join(f"{m} time (s)" for m in modes) + " | " + " | ".join(f"{m} / dense" for m in modes[1:])
    head += " | " + " | ".join(f"{m} peak (MiB)" for m in modes) + " |"
    print(head)
    print("|" + "---|" * (1 + len(modes) * 2 + len(modes) - 1))
    for row in rows:
        d = row["dense"]
        cells = [fmt_t(row[m]) for m in modes]
        ratios = [
            f"{row[m]['median_s'] / d['median_s']:.2f}" if "median_s" in row[m] and "median_s" in d else "-" for m in modes[1:]
        ]
        mems = [fmt_m(row[m]) for m in modes]
        print(f"| {row['N']} | " + " | ".join(cells + ratios + mems) + " |")
    summary = {}
    for mode in modes:
        ok = [r["N"] for r in rows if r[mode].get("peak_bytes", LIMIT + 1) <= LIMIT]
        summary[f"{mode}: largest measured N within 2 GiB"] = max(ok) if ok else None
    last = rows[-1]
    for mode in modes[1:]:
        if "peak_bytes" in last[mode]:
            per_token = last[mode]["peak_bytes"] / last["N"]
            summary[f"{mode}: bytes per token"] = round(per_token)
            summary[f"{mode}: N at 2 GiB, extrapolated (linear)"] = int(LIMIT / per_token)
    if "peak_bytes" in last["dense"]:
        per_sq = last["dense"]["peak_bytes"] / last["N"] ** 2
        summary["dense: bytes per N^2"] = round(per_sq, 2)
        summary["dense: N at 2 GiB, extrapolated (quadratic)"] = int((LIMIT / per_sq) ** 0.5)
    for key, value in summary.items():
        print(f"{key}: {value}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(), "cpus": os.cpu_count()}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows, "summary": summary}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
