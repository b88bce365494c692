"""Context-parallel attention on one GPU: the single-device baselines that a multi-GPU ring is measured
against (issue 19), beside the ``tilegen inspect --cp`` prediction.

For a global sequence of T tokens (B = 1, Hq = Hkv = 16, D = 128, bf16; the H·D = 2048 sizing of
benchmarks/NOTES.md) and ring sizes W:

- ``full``: one device runs the whole sequence through ``tilegen.torch.flash_attn_func``
  (forward, and forward+backward through autograd);
- ``ring-emulated``: the work of every rank of :func:`tilegen.distributed.ring_attention`, one rank at a
  time on the same device, with no transfer: rank r's chunk (:func:`~tilegen.distributed.shard_sequence`,
  zigzag when causal, plain otherwise), and for each ring step s the kernel calls
  :func:`~tilegen.distributed.ring_plan` gives on the K/V chunk of rank (r − s) mod W, through the same
  block interface (``attention_forward`` / ``attention_backward`` with accumulators) the ring uses.
  Each (rank, step) is timed on its own; the ring's compute time is Σ_s max_r t(r, s) (the steps of a
  ring wait on each other; no transfer is counted). Strong-scaling efficiency of the compute alone:
  t_full / (W · t_ring). The ranks' merged outputs are compared with ``full`` on the first heads
  (the ring's arithmetic at full size, against the single-device kernel).
- ``predicted``: :func:`tilegen.harness.scaling.cp_report` for the same spec on ``--target`` (the cost model's
  kernel times and the target's link figures; a prediction, not a measurement).

Times: CUDA events around each call, median of ``--reps`` after one warm-up (ms). Writes
``cp_baseline.json`` and ``cp_baseline.md`` into ``--out`` (default benchmarks/results/).

Usage (one GPU, repository root): ``PYTHONPATH=. python benchmarks/cp_baseline.py`` (T = 32k, 64k, 128k;
W = 2, 4; causal and full; about 2 min on an H200). ``--tokens 4096 --reps 2`` for a quick run;
``--device cpu --tokens 128 --heads 2 --dim 16 --reps 1 --out /tmp/cp`` checks the arithmetic on the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEVICE = "cuda"
sys.path.insert(0, str(HERE.parent))


def timed(fn, reps: int) -> tuple[float, object]:
    """(median ms over ``reps`` after one warm-up, the last result) of ``fn()`` with CUDA events."""
    import time

    import torch

    out = fn()
    times = []
    if DEVICE == "cpu":  # the --device cpu check of the script's arithmetic: wall time
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times), out
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), out


def run_row(T: int, causal: bool, worlds: list[int], heads: int, dim: int, reps: int, target: str) -> dict:
    import torch

    from tilegen import torch as tt
    from tilegen.distributed import ring_plan, shard_sequence, unshard_sequence

    g = torch.Generator(device=DEVICE).manual_seed(T + causal)
    q, k, v, do = (torch.randn(1, T, heads, dim, device=DEVICE, dtype=torch.bfloat16, generator=g) for _ in range(4))
    window = (-1, 0) if causal else (-1, -1)
    flops_fwd = 4 * heads * T * T * dim / (2 if causal else 1)

    def full_fwd():
        with torch.no_grad():
            return tt.flash_attn_func(q, k, v, causal=causal)

    def full_fb():
        qq, kk, vv = (x.detach().requires_grad_() for x in (q, k, v))
        o = tt.flash_attn_func(qq, kk, vv, causal=causal)
        o.backward(do)
        return o.detach()

    t_fwd, o_full = timed(full_fwd, reps)
    t_fb, _ = timed(full_fb, reps)
    row = {"tokens": T, "causal": causal, "heads": heads, "dim": dim, "full_fwd_ms": t_fwd, "full_fb_ms": t_fb,
           "full_fwd_tflops": flops_fwd / t_fwd / 1e9, "full_fb_tflops": 3.5 * flops_fwd / t_fb / 1e9, "rings": []}
    torch.cuda.empty_cache()
    for W in worlds:
        balance = "zigzag" if causal else "plain"
        n = T // W
        qs, ks, vs, dos = ([shard_sequence(x, r, W, layout="BSND", balance=balance) for r in range(W)] for x in (q, k, v, do))
        fwd = [[0.0] * W for _ in range(W)]  # [step][rank]
        bwd = [[0.0] * W for _ in range(W)]
        outs, lses = [], []
        for r in range(W):
            out = torch.zeros(1, n, heads, dim, device=DEVICE)
            lse = torch.full((1, heads, n), float("-inf"), device=DEVICE)
            for s in range(W):
                calls = ring_plan(r, (r - s) % W, W, n, n, balance=balance, window=window)

                def step_fwd(out=out, lse=lse, calls=calls, src=(r - s) % W):
                    for c in calls:
                        tt.attention_forward(qs[r][:, c.q0:c.q1], ks[src][:, c.k0:c.k1], vs[src][:, c.k0:c.k1], window_size=c.window,
                                             alignment="top_left", out=out[:, c.q0:c.q1], lse=lse[:, :, c.q0:c.q1], target=target)

                # time on scratch accumulators, then run once into the real ones
                scratch_o, scratch_l = out.clone(), lse.clone()
                fwd[s][r] = timed(lambda: step_fwd(scratch_o, scratch_l), reps)[0] if calls else 0.0
                step_fwd()
            outs.append(out.to(torch.bfloat16))
            lses.append(lse)
        for r in range(W):
            for s in range(W):
                src = (r - s) % W
                calls = ring_plan(r, src, W, n, n, balance=balance, window=window)
                if not calls:
                    continue
                dq, dk, dv = (torch.zeros(1, n, heads, dim, device=DEVICE) for _ in range(3))

                def step_bwd(calls=calls, src=src, dq=dq, dk=dk, dv=dv):
                    for c in calls:
                        tt.attention_backward(qs[r][:, c.q0:c.q1], ks[src][:, c.k0:c.k1], vs[src][:, c.k0:c.k1], outs[r][:, c.q0:c.q1],
                                              lses[r][:, :, c.q0:c.q1], dos[r][:, c.q0:c.q1], window_size=c.window, alignment="top_left",
                                              dq=dq[:, c.q0:c.q1], dk=dk[:, c.k0:c.k1], dv=dv[:, c.k0:c.k1], target=target)

                bwd[s][r] = timed(step_bwd, reps)[0]
        merged = unshard_sequence(outs, layout="BSND", balance=balance)
        err = (merged[:, :, :2].float() - o_full[:, :, :2].float()).abs().max().item()
        ring_f = sum(max(fwd[s]) for s in range(W))
        ring_b = sum(max(bwd[s]) for s in range(W))
        row["rings"].append({
            "world": W, "local_tokens": n, "balance": balance, "ring_fwd_ms": ring_f, "ring_bwd_ms": ring_b,
            "ring_fb_ms": ring_f + ring_b, "full_fb_over_w_ms": t_fb / W, "strong_eff_compute": t_fb / (W * (ring_f + ring_b)),
            "step_fwd_ms": fwd, "step_bwd_ms": bwd, "max_abs_err_vs_full_heads01": err,
        })
        del qs, ks, vs, dos, outs, lses
        torch.cuda.empty_cache()
    return row


def predicted(T: int, causal: bool, worlds: list[int], heads: int, dim: int, target: str) -> dict:
    from tilegen.harness.scaling import cp_report
    from tilegen.core.spec import AttentionSpec

    spec = AttentionSpec(batch=1, heads_q=heads, heads_kv=heads, seq_q=T, seq_k=T, head_dim_qk=dim, head_dim_v=dim, dtype="bf16",
                         window=(-1, 0) if causal else (-1, -1), name=f"cp{T}")
    rep = cp_report(spec, target, max(worlds))
    return {row["devices"]: row for row in rep["rows"]} | {"one_device_s": rep["one_device_s"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="32768,65536,131072")
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--target", default="h200")
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--device", default="cuda", help="cpu: check the arithmetic on the interpreter, tiny sizes (times are not meaningful)")
    a = ap.parse_args()
    import torch

    global DEVICE
    DEVICE = a.device
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("cp_baseline: needs a CUDA device (torch.cuda.is_available() is False)")
        return 2
    worlds = [int(w) for w in a.worlds.split(",")]
    rows = []
    md = ["| T | mask | full fwd ms (TFLOP/s) | full f+b ms (TFLOP/s) | W | local | ring-emulated fwd / bwd ms | full f+b / W | strong eff. (compute) | "
          "predicted ring f+b | predicted full f+b / W | max err vs full |", "|" + "---|" * 12]
    for T in (int(t) for t in a.tokens.split(",")):
        for causal in (True, False):
            row = run_row(T, causal, worlds, a.heads, a.dim, a.reps, a.target)
            pred = predicted(T, causal, worlds, a.heads, a.dim, a.target)
            for ring in row["rings"]:
                p = pred[ring["world"]]
                ring["predicted_ring_fb_ms"] = (p["ring_fwd_s"] + p["ring_bwd_s"]) * 1e3
                ring["predicted_full_over_w_ms"] = p["one_device_over_w_s"] * 1e3
                ring["predicted_transfer_hidden"] = {"fwd": p["fwd_hidden"], "bwd": p["bwd_hidden"]}
                md.append(f"| {T // 1024}k | {'causal' if causal else 'full'} | {row['full_fwd_ms']:.2f} ({row['full_fwd_tflops']:.0f}) | "
                          f"{row['full_fb_ms']:.2f} ({row['full_fb_tflops']:.0f}) | {ring['world']} | {ring['local_tokens']} | "
                          f"{ring['ring_fwd_ms']:.2f} / {ring['ring_bwd_ms']:.2f} | {ring['full_fb_over_w_ms']:.2f} | {ring['strong_eff_compute']:.2f} | "
                          f"{ring['predicted_ring_fb_ms']:.2f} | {ring['predicted_full_over_w_ms']:.2f} | {ring['max_abs_err_vs_full_heads01']:.2e} |")
                print(md[-1], flush=True)
            rows.append(row)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "torch": torch.__version__, "reps": a.reps, "target": a.target}
    (out / "cp_baseline.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "cp_baseline.md").write_text(f"{meta}\n\n" + "\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
