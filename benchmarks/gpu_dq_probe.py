"""The backward's dQ on the GPU: per-kernel times of the module as generated, beside two hand-made
variants of it (text transforms of the generated source, not something ``tilegen generate`` emits),
and forward variants at fp16. One H200; prints one JSON line per row and writes gpu_dq_probe.json.

Variants (D 128, non-causal MHA, B·N = 16k tokens, H 16, bf16 and fp16, N 1k / 4k / 16k):
- ``fold``: the post kernel folded into main. pre also zeroes one int32 arrival counter per dQ tile;
  after its atomic adds of a dQ tile a main program waits for its warps (``tl.debug_barrier``), adds 1
  to the tile's counter (acq_rel), and the program whose add completes the count (the number of K/V
  tiles) reads the tile back through L2 (``.cg``), scales, casts and stores dQ. No post launch.
- ``tma``: each dQ tile added into dQ_ws by one TMA reduce (a device-side tensor descriptor per query
  head, ``desc.atomic_add``) instead of element atomics; Triton allocates its 128 B descriptor scratch
  per program through ``triton.set_allocator``.
Each is checked against the module's own dQ, dK, dV (largest absolute difference) with NaN-poisoned
outputs; times are ``triton.testing.do_bench`` medians (the module's backward twice, interleaved with
the fold), kernel times torch.profiler averages over 20 calls.

Usage (GPU machine, repository root): OUT=<folder> PYTHONPATH=. python benchmarks/gpu_dq_probe.py
"""
import json, os, re, sys, time

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tilegen.backends.triton import render  # noqa: E402
from tilegen.torch.call import Call  # noqa: E402
from probe_modules import kernel_times, load  # noqa: E402

OUT = os.environ.get("OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
res = {"meta": {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(0)}, "rows": [], "fwd": []}
T0 = time.time()

def tma(src):
    def sub(m):
        ind = m.group(1)
        return f"{ind}dq_desc.atomic_add([i*Br, 0], dQp)"
    s = re.sub(r"^( +)tl\.atomic_add\(dQ_ws_ptr.*$", sub, src, flags=re.M)
    # the descriptor at the top of each query-head iteration
    s = re.sub(r"^(    for hq in range\(hkv\*G, hkv\*G \+ G\):[^\n]*\n)",
               r"\1        dq_desc = tl.make_tensor_descriptor(dQ_ws_ptr + b * dQ_ws_s0 + hq * dQ_ws_s1, shape=[Sq, Dqk_p], strides=[dQ_ws_s2, 1], block_shape=[Br, Dqk_p])\n", s, flags=re.M)
    return s


def fold(src):
    # post's scale and dtype
    post = src[src.index("def post_kernel("):]
    scale = re.search(r"dQi = dQi \* ([0-9.e-]+)", post).group(1)
    dt = re.search(r"dQc = \(dQi\)\.to\((tl\.\w+)\)", post).group(1)
    s = src
    # main: extra params
    s = s.replace("    dK_ptr,\n    dV_ptr,\nQ_s0", "    dK_ptr,\n    dV_ptr,\n    dQ_ptr,\n    cnt_ptr,\nQ_s0", 1)
    s = re.sub(r"(dV_s0, dV_s1, dV_s2, dV_s3,\n)(    B, Hq, Hkv, Sq, Sk,\n    Br: tl.constexpr, Bc: tl.constexpr, G: tl.constexpr,\n    Dqk: tl.constexpr, Dv: tl.constexpr, Dqk_p: tl.constexpr, Dv_p: tl.constexpr,\n\):\n    # [^\n]*kernel main)",
               r"\1dQ_s0, dQ_s1, dQ_s2, dQ_s3,\n\2", s, count=1)
    def epi(m):
        ind, line = m.group(1), m.group(0)
        ptr = re.search(r"tl\.atomic_add\((dQ_ws_ptr .*?), dQp, sem", line).group(1)
        return (line + f"\n{ind}tl.debug_barrier()\n"
                f"{ind}_c = tl.atomic_add(cnt_ptr + (b * Hq + hq) * ((Sq + Br - 1) // Br) + i, 1, sem=\"acq_rel\")\n"
                f"{ind}if _c == ((Sk + Bc - 1) // Bc) - 1:\n"
                f"{ind}    dQl = tl.load({ptr}, cache_modifier=\".cg\") * {scale}\n"
                f"{ind}    tl.store(dQ_ptr + b * dQ_s0 + hq * dQ_s1 + (i*Br + tl.arange(0, Br))[:, None] * dQ_s2 + tl.arange(0, Dqk_p)[None, :] * dQ_s3, dQl.to({dt}))")
    s = re.sub(r"^( +)tl\.atomic_add\(dQ_ws_ptr.*$", epi, s, flags=re.M)
    # pre: zero the counter
    s = s.replace("    dQ_ws_ptr,\nO_s0", "    dQ_ws_ptr,\n    cnt_ptr,\nO_s0", 1)
    s = re.sub(r"(    tl\.store\(dQ_ws_ptr [^\n]*zeros\)\n)", r"\1    tl.store(cnt_ptr + (b * Hq + hq) * ((Sq + Br - 1) // Br) + i, 0)\n", s, count=1)
    return s

def folded_backward(m, q, k, v, o, lse, do, poison=False):
    S, C = m.SHAPES, m.CONSTS
    B, Hq, Hkv, Sq, Sk = S["B"], S["Hq"], S["Hkv"], S["Sq"], S["Sk"]
    Br, Bc = m._CONSTEXPRS_main["Br"], m._CONSTEXPRS_main["Bc"]
    Dqk, Dv = C["Dqk"], C["Dv"]
    dev = q.device
    D, dQ_ws = m._workspaces(((B, Hq, Sq), (B, Hq, Sq, Dqk)), torch.float32, dev, False)
    cnt = torch.empty((B * Hq * (-(-Sq // Br)),), dtype=torch.int32, device=dev)
    t = {"Q": m._logical(q), "K": m._logical(k), "V": m._logical(v), "O": m._logical(o), "L": lse, "dO": m._logical(do), "D": D, "dQ_ws": dQ_ws}
    dQ = m._alloc((B, Hq, Sq, Dqk), q.dtype, dev, poison, m.LAYOUT)
    dK = m._alloc((B, Hkv, Sk, Dqk), q.dtype, dev, False, m.LAYOUT)
    dV = m._alloc((B, Hkv, Sk, Dv), q.dtype, dev, False, m.LAYOUT)
    t.update(dQ=dQ, dK=dK, dV=dV)
    kp = m._knobs_probe
    m.pre_kernel[(-(-Sq // Br), Hq, B)](t["O"], t["dO"], t["D"], t["dQ_ws"], cnt, *t["O"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dQ_ws"].stride(), B, Hq, Hkv, Sq, Sk, **m._CONSTEXPRS_pre, num_warps=kp["pre"][0], num_stages=kp["pre"][1])
    m.main_kernel[(-(-Sk // Bc), Hkv, B)](t["Q"], t["K"], t["V"], t["L"], t["dO"], t["D"], t["dQ_ws"], t["dK"], t["dV"], t["dQ"], cnt,
        *t["Q"].stride(), *t["K"].stride(), *t["V"].stride(), *t["L"].stride(), *t["dO"].stride(), *t["D"].stride(), *t["dQ_ws"].stride(), *t["dK"].stride(), *t["dV"].stride(), *t["dQ"].stride(),
        B, Hq, Hkv, Sq, Sk, **m._CONSTEXPRS_main, num_warps=kp["main"][0], num_stages=kp["main"][1])
    return m._logical(dQ), m._logical(dK), m._logical(dV)

def knobs_of(src):
    out = {}
    for ph in ("fwd", "pre", "main", "post"):
        mm = re.search(rf"def _launch_{ph}\(.*?num_warps=(\d+), num_stages=(\d+)", src, re.S)
        if mm: out[ph] = (int(mm.group(1)), int(mm.group(2)))
    return out

triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
rows = [("bf16", 1024), ("fp16", 1024), ("bf16", 4096), ("fp16", 16384), ("bf16", 16384)]
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
torch.manual_seed(0)
for dtn, N in rows:
    D, H = 128, 16
    B = 16384 // N
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=DT[dtn]) for _ in range(4))
    spec = Call.checked(q, k, v, layout="BNSD", window=(-1, -1), alignment="top_left").spec()
    src = render(spec, "h200", dq_strategy="atomic")
    m0 = load(src, f"orig_{dtn}_{N}")
    src1 = fold(src)
    m1 = load(src1, f"fold_{dtn}_{N}")
    m1._knobs_probe = knobs_of(src)
    m2 = load(tma(src), f"tma_{dtn}_{N}")
    o, lse = m0.forward(q, k, v, trusted=True)
    g0 = m0.backward(q, k, v, o, lse, do, trusted=True)
    g1 = folded_backward(m1, q, k, v, o, lse, do, poison=True)
    g2 = m2.backward(q, k, v, o, lse, do, poison=True)
    torch.cuda.synchronize()
    diff = [float((a.float() - b.float()).abs().max()) for a, b in zip(g0, g1)]
    diff2 = [float((a.float() - b.float()).abs().max()) for a, b in zip(g0, g2)]
    nan = [bool(torch.isnan(x).any()) for x in g1 + g2]
    flops = 4 * B * H * N * N * D
    t0 = do_bench(lambda: m0.backward(q, k, v, o, lse, do, trusted=True), warmup=25, rep=200)
    t1 = do_bench(lambda: folded_backward(m1, q, k, v, o, lse, do), warmup=25, rep=200)
    t0b = do_bench(lambda: m0.backward(q, k, v, o, lse, do, trusted=True), warmup=25, rep=200)
    t1b = do_bench(lambda: folded_backward(m1, q, k, v, o, lse, do), warmup=25, rep=200)
    t2 = do_bench(lambda: m2.backward(q, k, v, o, lse, do, trusted=True), warmup=25, rep=200)
    tf = do_bench(lambda: m0.forward(q, k, v, trusted=True), warmup=25, rep=200)
    kt0 = kernel_times(lambda: m0.backward(q, k, v, o, lse, do, trusted=True))
    kt1 = kernel_times(lambda: folded_backward(m1, q, k, v, o, lse, do))
    kt2 = kernel_times(lambda: m2.backward(q, k, v, o, lse, do, trusted=True))
    r = dict(dtype=dtn, N=N, B=B, knobs=m1._knobs_probe, diff=diff, diff_tma=diff2, nan=nan,
             bwd_ms=[t0, t1, t0b, t1b, t2], bwd_tflops_orig_fold_orig_fold_tma=[2.5 * flops / t * 1e-9 for t in (t0, t1, t0b, t1b, t2)], kernels_tma=kt2,
             fwd_tflops=flops / tf * 1e-9, kernels_orig=kt0, kernels_fold=kt1)
    print(json.dumps(r), flush=True)
    res["rows"].append(r)
    json.dump(res, open(f"{OUT}/gpu_dq_probe.json", "w"), indent=1)

# fp16 forward variants, D128 non-causal
for N in (1024, 4096, 16384):
    D, H = 128, 16
    B = 16384 // N
    for dtn in ("fp16",):
        q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=DT[dtn]) for _ in range(3))
        spec = Call.checked(q, k, v, layout="BNSD", window=(-1, -1), alignment="top_left").spec()
        flops = 4 * B * H * N * N * D
        for (br, bc, w, st) in ((64, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 4)):
            if time.time() - T0 > 520: break
            try:
                src = render(spec, "h200", tile_sizes={"fwd": (br, bc)}, knobs={"fwd": (w, st)})
                m = load(src, f"fwd_{dtn}_{N}_{br}_{bc}_{w}_{st}")
                tf = do_bench(lambda: m.forward(q, k, v, trusted=True), warmup=25, rep=100)
                r = dict(dtype=dtn, N=N, cfg=[br, bc, w, st], tflops=flops / tf * 1e-9)
            except Exception as e:
                r = dict(dtype=dtn, N=N, cfg=[br, bc, w, st], error=repr(e)[:200])
            print(json.dumps(r), flush=True)
            res["fwd"].append(r)
            json.dump(res, open(f"{OUT}/gpu_dq_probe.json", "w"), indent=1)
