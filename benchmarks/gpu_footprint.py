"""Shared memory on the GPU, counted and measured: tilegen's SMEM footprint model beside what Triton
really allocates for the generated kernels, and the backward before and after dS read the fp32 P.

For each configuration (dtype × head dim D, causal, B·N = 16384 tokens at N = 4096, H·D ≈ 2048) it

1. schedules the spec for ``h200`` (:func:`tilegen.backends.triton.schedule`) and takes the footprint
   model's SMEM count of every kernel (the bytes the model says the module allocates),
2. loads the generated module, runs forward and backward once on random inputs (outputs NaN-poisoned
   before the run) and checks O, dQ, dK, dV against SDPA's math backend in float32 on the same inputs
   (max-abs error, with SDPA flash/cuDNN's error beside it where that backend takes the dtype),
3. reads the compiled kernels' own metadata: ``shared`` (bytes of shared memory Triton allocated),
   registers and spills, and reports model / measured,
4. ``--force BRxBC`` also compiles the configuration the old model chose (e.g. 64x128 for D = 72 fp32)
   and reports whether Triton can launch it (OutOfResources when it needs more than the 227 KiB),
5. ``--compare-module FILE`` times (``triton.testing.do_bench``, median) the backward of a previously
   generated module beside the current one on the same inputs.

Writes ``gpu_footprint.json`` and ``gpu_footprint.md`` into ``--out``.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/gpu_footprint.py --out /tmp/out
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent


def compiled(jit) -> list:
    """The compiled kernels a Triton JITFunction holds after its launches (Triton 3.x caches)."""
    out = []
    caches = getattr(jit, "device_caches", None)
    if caches:
        for entry in caches.values():
            kc = entry[0] if isinstance(entry, tuple) else entry
            out += list(kc.values())
    for kc in (getattr(jit, "cache", None) or {}).values():
        out += list(kc.values())
    return out


def measured_smem(mod) -> dict[str, dict]:
    res = {}
    for name in ("fwd_kernel", "pre_kernel", "main_kernel", "post_kernel", "main_dq_kernel"):
        jit = getattr(mod, name, None)
        if jit is None:
            continue
        ks = compiled(jit)
        if not ks:
            continue
        k = ks[-1]
        md = getattr(k, "metadata", None)
        res[name.removesuffix("_kernel")] = {
            "shared": int(getattr(md, "shared", -1)),
            "num_warps": int(getattr(md, "num_warps", -1)),
            "num_stages": int(getattr(md, "num_stages", -1)),
            "n_regs": int(getattr(k, "n_regs", -1) or -1),
            "n_spills": int(getattr(k, "n_spills", -1) or -1),
        }
    return res


def model_smem(sched) -> dict[str, int]:
    env = {str(k): v for k, v in sched.program.env}
    out = {}
    for fp in sched.log.schedule.footprints:
        if fp.level.name == "SMEM":
            out[fp.kernel] = int(fp.value(env))
    return out


def run_config(dtype: str, d: int, n: int, causal: bool, force=None, compare_module=None) -> dict:
    import torch
    import torch.nn.functional as F

    from tilegen.backends import triton as tb
    from tilegen.core.spec import AttentionSpec

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    h = max(1, 2048 // d)
    b = max(1, 16384 // n)
    spec = AttentionSpec(name=f"smem-{dtype}-d{d}", batch=b, heads_q=h, heads_kv=h, seq_q=n, seq_k=n, head_dim_qk=d,
                         head_dim_v=d, dtype=dtype, window=(-1, 0) if causal else (-1, -1))
    row = {"dtype": dtype, "D": d, "N": n, "causal": causal, "B": b, "H": h}
    tiles = None
    if force:
        br, bc = force
        tiles = {"bwd": (br, bc)}
        row["forced_bwd"] = f"{br}x{bc}"
    try:
        fwd_s, bwd_s = tb.schedule(spec, "h200", tile_sizes=tiles)
        row["model_smem"] = {**{f"fwd:{k}": v for k, v in model_smem(fwd_s).items()},
                             **{f"bwd:{k}": v for k, v in model_smem(bwd_s).items()}}
        row["tiles"] = {"fwd": {str(k): v for k, v in fwd_s.program.env}, "bwd": {str(k): v for k, v in bwd_s.program.env}}
        row["skipped"] = [str(s.reason) for s in (*fwd_s.skipped, *bwd_s.skipped)]
    except Exception as exc:  # a forced size the model refuses: still try it on the GPU
        row["model_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
        if not force:
            return row
        tiles = {"bwd": force}
    torch.manual_seed(0)
    dev = "cuda"
    q, k, v, do = (torch.randn(b, h, n, d, device=dev, dtype=tdt) for _ in range(4))
    try:
        mod = tb.load(spec, "h200", tile_sizes=tiles) if tiles else tb.load(spec, "h200")
        o, lse = mod.forward(q, k, v, poison=True)
        dq, dk, dv = mod.backward(q, k, v, o, lse, do, poison=True)
        torch.cuda.synchronize()
        row["launched"] = True
    except Exception as exc:
        row["launched"] = False
        row["launch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        return row
    row["measured"] = measured_smem(mod)
    # correctness against SDPA math in fp32 (first 2 heads of batch 0)
    qs, ks, vs, dos = (x[:1, :2].float().detach().requires_grad_(True) for x in (q, k, v, do))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)
    ref.backward(dos.detach())
    errs = {"O": (o[:1, :2].float() - ref).abs().max().item(), "dQ": (dq[:1, :2].float() - qs.grad).abs().max().item(),
            "dK": (dk[:1, :2].float() - ks.grad).abs().max().item(), "dV": (dv[:1, :2].float() - vs.grad).abs().max().item()}
    row["max_abs_err"] = errs
    row["finite"] = all(math.isfinite(e) for e in errs.values())
    if dtype != "fp32":
        try:
            qs2, ks2, vs2 = (x[:1, :2].detach().clone().requires_grad_(True) for x in (q, k, v))
            peer = F.scaled_dot_product_attention(qs2, ks2, vs2, is_causal=causal)
            peer.backward(do[:1, :2])
            row["peer_err"] = {"O": (peer.float() - ref).abs().max().item(), "dQ": (qs2.grad.float() - qs.grad).abs().max().item(),
                               "dK": (ks2.grad.float() - ks.grad).abs().max().item(), "dV": (vs2.grad.float() - vs.grad).abs().max().item()}
        except Exception as exc:
            row["peer_error"] = str(exc).splitlines()[0]
    import triton.testing as tt

    row["bwd_ms"] = tt.do_bench(lambda: mod.backward(q, k, v, o, lse, do), warmup=25, rep=100, return_mode="median")
    if compare_module:
        import importlib.util

        spec_ = importlib.util.spec_from_file_location("old_module", compare_module)
        old = importlib.util.module_from_spec(spec_)
        spec_.loader.exec_module(old)
        odq, odk, odv = old.backward(q, k, v, o, lse, do)
        row["old_max_abs_err"] = {"dQ": (odq[:1, :2].float() - qs.grad).abs().max().item(),
                                  "dK": (odk[:1, :2].float() - ks.grad).abs().max().item(),
                                  "dV": (odv[:1, :2].float() - vs.grad).abs().max().item()}
        t_new, t_old = [], []
        for _ in range(3):  # interleaved, medians of each
            t_old.append(tt.do_bench(lambda: old.backward(q, k, v, o, lse, do), warmup=25, rep=100, return_mode="median"))
            t_new.append(tt.do_bench(lambda: mod.backward(q, k, v, o, lse, do), warmup=25, rep=100, return_mode="median"))
        row["bwd_ms_old"] = sorted(t_old)[1]
        row["bwd_ms_new"] = sorted(t_new)[1]
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(HERE / "results"))
    p.add_argument("--configs", nargs="+", default=["fp32:72", "fp16:72", "bf16:72", "bf16:80", "bf16:96", "fp32:96",
                                                    "bf16:192", "fp16:192", "bf16:128", "fp32:128"])
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--force", nargs="*", default=["fp32:72:64x128"], help="dtype:D:BRxBC backward sizes to try as well")
    p.add_argument("--compare-module", nargs="*", default=[], help="dtype:D:causal:FILE an older generated module")
    args = p.parse_args(argv)
    rows = []
    for c in args.configs:
        dt, d = c.split(":")
        for causal in (False, True):
            try:
                rows.append(run_config(dt, int(d), args.n, causal))
            except Exception:
                rows.append({"config": c, "causal": causal, "error": traceback.format_exc().splitlines()[-1]})
            print(json.dumps(rows[-1]), flush=True)
    for f in args.force:
        dt, d, t = f.split(":")
        br, bc = (int(x) for x in t.split("x"))
        try:
            rows.append(run_config(dt, int(d), args.n, True, force=(br, bc)))
        except Exception:
            rows.append({"force": f, "error": traceback.format_exc().splitlines()[-1]})
        print(json.dumps(rows[-1]), flush=True)
    for f in args.compare_module:
        dt, d, causal, path = f.split(":", 3)
        try:
            rows.append(run_config(dt, int(d), args.n, causal == "yes", compare_module=path))
        except Exception:
            rows.append({"compare": f, "error": traceback.format_exc().splitlines()[-1]})
        print(json.dumps(rows[-1]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_footprint.json").write_text(json.dumps(rows, indent=1))
    lines = ["| dtype | D | causal | bwd tiles | kernel | model SMEM | Triton SMEM | model/measured | err dQ/dK (peer) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "measured" not in r:
            lines.append(f"| {r.get('dtype')} | {r.get('D')} | {r.get('causal')} | {r.get('forced_bwd', '')} | - | - | - | "
                         f"{r.get('launch_error') or r.get('model_error') or r.get('error')} | |")
            continue
        bt = r["tiles"]["bwd"]
        for kname, m in r["measured"].items():
            key = [x for x in r["model_smem"] if x.endswith(":" + kname)]
            model = r["model_smem"][key[0]] if key else None
            ratio = f"{model / m['shared']:.2f}" if model and m["shared"] > 0 else "-"
            e = r["max_abs_err"]
            pe = r.get("peer_err", {})
            lines.append(f"| {r['dtype']} | {r['D']} | {r['causal']} | {bt.get('Br')}x{bt.get('Bc')} | {kname} | {model} | {m['shared']} | {ratio} | "
                         f"{e['dQ']:.2e}/{e['dK']:.2e} ({pe.get('dQ', float('nan')):.2e}/{pe.get('dK', float('nan')):.2e}) |")
    (out / "gpu_footprint.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
