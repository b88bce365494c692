"""The separate dQ strategy with per-kernel tiles on the GPU, beside the atomic backward as generated.

A probe of hand-combined modules (not something ``tilegen generate`` emits): the separate strategy's
main kernel (dK, dV; K/V tile grid) from a module rendered at Br×Bc = 64×128 and its dq kernel (Q tile
grid) from one rendered at 128×64, the shapes FlexAttention's backward uses at D 128 on sm_90; also
the dq kernel on a second CUDA stream beside main (they share only pre's D). D 128, non-causal,
B·N = 16k tokens, H·D = 2048. Each variant's dQ, dK, dV against the atomic module's (largest absolute
difference), NaN-poisoned outputs; ``do_bench`` medians, the atomic module timed twice, interleaved.

Usage (GPU machine, repository root): OUT=<folder> PYTHONPATH=. python benchmarks/gpu_sep_probe.py
"""
import json, os, sys, time

import torch
import triton
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tilegen.backends.triton import render  # noqa: E402
from tilegen.core.targets import load_target  # noqa: E402
from tilegen.torch.call import Call  # noqa: E402
from probe_modules import kernel_times, load  # noqa: E402

# the placement check counts staging copies of P and dS the compiler does not keep (the separate main at
# 64x128/3 stages compiles to 161 KiB of shared memory on sm_90); lifted, as benchmarks/gpu_model.py does
LOOSE = load_target("h200").with_capacity("SMEM", 1 << 30)

OUT = os.environ.get("OUT", os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
BUDGET = float(os.environ.get("BUDGET", "470"))
res = {"meta": {"torch": torch.__version__, "triton": triton.__version__, "gpu": torch.cuda.get_device_name(0)}, "rows": []}
T0 = time.time()


def hybrid(main_mod, dq_mod, side=None):
    """main_mod's backward with its dq launch replaced by dq_mod's (other tiles/knobs); on stream
    ``side`` (after pre, joined before return) when given."""
    def launch_dq(t, record=None):
        if side is None:
            return dq_mod._launch_dq(t, None)
        cur = torch.cuda.current_stream()
        side.wait_stream(cur)
        with torch.cuda.stream(side):
            dq_mod._launch_dq(t, None)
        main_mod._join.append(side)

    def launch_main(t, record=None):
        return orig_main(t, None)

    orig_main = main_mod._launch_main
    main_mod._join = []
    # pre, then dq (side stream or not), then main: dq first so that the side stream starts first
    def backward(q, k, v, o, lse, do, poison=False):
        B, Hq, Hkv, Sq, Sk = (main_mod.SHAPES[n] for n in ("B", "Hq", "Hkv", "Sq", "Sk"))
        Dqk, Dv = main_mod.CONSTS["Dqk"], main_mod.CONSTS["Dv"]
        dt, dev, m = q.dtype, q.device, main_mod
        t = {"Q": m._logical(q), "K": m._logical(k), "V": m._logical(v), "O": m._logical(o), "L": lse, "dO": m._logical(do)}
        t["D"] = m._new((B, Hq, Sq), torch.float32, dev, poison)
        t["dQ"] = m._alloc((B, Hq, Sq, Dqk), dt, dev, poison, m.LAYOUT)
        t["dK"] = m._alloc((B, Hkv, Sk, Dqk), dt, dev, poison, m.LAYOUT)
        t["dV"] = m._alloc((B, Hkv, Sk, Dv), dt, dev, poison, m.LAYOUT)
        m._launch_pre(t, None)
        launch_dq(t)
        launch_main(t)
        for s in m._join:
            torch.cuda.current_stream().wait_stream(s)
        m._join.clear()
        return m._logical(t["dQ"]), m._logical(t["dK"]), m._logical(t["dV"])
    return backward


def flex_bwd(q, k, v, do, gqa):
    from gpu_table import Impl
    p = Impl("flex", q, k, v, do, False, gqa)
    return p.bwd


ROUND = int(os.environ.get("ROUND", "1"))
rows = [("bf16", 1024, False), ("fp16", 4096, False), ("bf16", 16384, False), ("fp16", 1024, False),
        ("fp16", 16384, True), ("bf16", 4096, False)] if ROUND == 1 else []
DT = {"bf16": torch.bfloat16, "fp16": torch.float16}
torch.manual_seed(0)
side = torch.cuda.Stream()
for dtn, N, gqa in rows:
    if time.time() - T0 > BUDGET:
        res.setdefault("skipped", []).append([dtn, N, gqa])
        continue
    D, H = 128, 16
    Hkv = H // 8 if gqa else H
    B = 16384 // N
    q, do = (torch.randn(B, H, N, D, device="cuda", dtype=DT[dtn]) for _ in range(2))
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=DT[dtn]) for _ in range(2))
    spec = Call.checked(q, k, v, layout="BNSD", window=(-1, -1), alignment="top_left").spec()
    tag = f"{dtn}_{N}_{'gqa' if gqa else 'mha'}"
    m0 = load(render(spec, "h200", dq_strategy="atomic"), f"atomic_{tag}")
    mA = load(render(spec, LOOSE, dq_strategy="separate", tile_sizes={"bwd": (64, 128)}, knobs={"main": (8, 3), "dq": (8, 3)}), f"sepA_{tag}")
    mB = load(render(spec, LOOSE, dq_strategy="separate", tile_sizes={"bwd": (128, 64)}, knobs={"main": (8, 3), "dq": (8, 3)}), f"sepB_{tag}")
    mB2 = load(render(spec, LOOSE, dq_strategy="separate", tile_sizes={"bwd": (128, 64)}, knobs={"main": (8, 2), "dq": (8, 2)}), f"sepB2_{tag}")
    o, lse = m0.forward(q, k, v, trusted=True)
    variants = {
        "atomic": lambda poison=False: m0.backward(q, k, v, o, lse, do, poison=poison),
        "sep_64x128": lambda poison=False: mA.backward(q, k, v, o, lse, do, poison=poison),
        "sep_main64x128_dq128x64": (lambda h: lambda poison=False: h(q, k, v, o, lse, do, poison=poison))(hybrid(mA, mB)),
        "sep_main64x128_dq128x64_2s": (lambda h: lambda poison=False: h(q, k, v, o, lse, do, poison=poison))(hybrid(mA, mB2)),
        "sep_main64x128_dq128x64_stream": (lambda h: lambda poison=False: h(q, k, v, o, lse, do, poison=poison))(hybrid(mA, mB, side)),
    }
    g0 = variants["atomic"]()
    rec = {"dtype": dtn, "N": N, "B": B, "Hkv": Hkv, "diff": {}, "nan": {}, "bwd_tflops": {}}
    for name, fn in variants.items():
        if name == "atomic":
            continue
        try:
            g = fn(poison=True)
            torch.cuda.synchronize()
            rec["diff"][name] = [float((a.float() - b.float()).abs().max()) for a, b in zip(g0, g)]
            rec["nan"][name] = [bool(torch.isnan(x).any()) for x in g]
        except Exception as e:  # a variant that does not compile or launch: recorded, not fatal
            rec["diff"][name] = repr(e)[:300]
    flops = 2.5 * 4 * B * H * N * N * D
    order = ["atomic"] + [n for n in variants if n != "atomic" and isinstance(rec["diff"].get(n), list)] + ["atomic"]
    for i, name in enumerate(order):
        t = do_bench(lambda: variants[name](), warmup=25, rep=200)
        rec["bwd_tflops"][name if i < len(order) - 1 else "atomic_again"] = flops / t * 1e-9
    rec["kernels_us"] = {n: kernel_times(variants[n]) for n in ("atomic", "sep_main64x128_dq128x64") if n in order}
    if N <= 4096 or gqa:
        try:
            fb = flex_bwd(q, k, v, do, gqa)
            fb()
            rec["bwd_tflops"]["flex"] = flops / do_bench(fb, warmup=25, rep=200) * 1e-9
        except Exception as e:
            rec["flex_error"] = repr(e)[:300]
    rec["elapsed_s"] = time.time() - T0
    print(json.dumps(rec), flush=True)
    res["rows"].append(rec)
    json.dump(res, open(f"{OUT}/gpu_sep_probe.json", "w"), indent=1)


# round 2 (ROUND=2): the modules `tilegen generate` emits with the separate strategy and dq_tiles =
# "transposed" (the pass transpose-dq-tiles), beside the atomic module as generated, on the rows round 1
# did not cover: causal MHA at D 128, GQA at D 128, MHA at D 64. (d, N, causal, gqa) and per row the
# variants: (Br, Bc, (main warps, stages), (dq warps, stages), dq_tiles).
ROWS2 = [
    (128, 1024, True, False), (128, 4096, True, False), (128, 16384, True, False),
    (128, 4096, False, True), (128, 4096, True, True),
    (64, 4096, False, False), (64, 4096, True, False), (128, 1024, False, False),
]
VARS2 = {
    128: [(64, 128, (8, 3), (8, 3), "transposed")],
    64: [(64, 128, (8, 3), (8, 3), "transposed"), (64, 128, (4, 3), (4, 3), "transposed"), (32, 128, (4, 3), (4, 3), "transposed"), (64, 64, (4, 3), (4, 3), "same")],
}
if ROUND == 2:
    res["round"] = 2
    for d, N, causal, gqa in ROWS2:
        if time.time() - T0 > BUDGET:
            res.setdefault("skipped", []).append([d, N, causal, gqa])
            continue
        H = 2048 // d
        Hkv = H // 8 if gqa else H
        B = 16384 // N
        q, do = (torch.randn(B, H, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k, v = (torch.randn(B, Hkv, N, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        spec = Call.checked(q, k, v, layout="BNSD", window=(-1, 0) if causal else (-1, -1), alignment="bottom_right").spec()
        tag = f"d{d}_{N}_{'c' if causal else 'nc'}_{'gqa' if gqa else 'mha'}"
        m0 = load(render(spec, "h200", dq_strategy="atomic"), f"atomic_{tag}")
        o, lse = m0.forward(q, k, v, trusted=True)
        g0 = m0.backward(q, k, v, o, lse, do)
        rec = {"d": d, "N": N, "causal": causal, "gqa": gqa, "B": B, "H": H, "Hkv": Hkv, "diff": {}, "nan": {}, "bwd_tflops": {}}
        mods = {}
        for br, bc, wm, wq, tiles in VARS2[d]:
            name = f"sep_{br}x{bc}_{wm[0]}w{wm[1]}s_dq{wq[0]}w{wq[1]}s_{tiles}"
            try:
                m = load(render(spec, "h200", dq_strategy="separate", tile_sizes={"bwd": (br, bc)}, knobs={"main": wm, "dq": wq}, dq_tiles=tiles), f"{name}_{tag}")
                g = m.backward(q, k, v, o, lse, do, poison=True)
                torch.cuda.synchronize()
                rec["diff"][name] = [float((a.float() - b.float()).abs().max()) for a, b in zip(g0, g)]
                rec["nan"][name] = [bool(torch.isnan(x).any()) for x in g]
                mods[name] = m
            except Exception as e:  # recorded, not fatal
                rec["diff"][name] = repr(e)[:300]
        flops = 2.5 * 4 * B * H * N * N * d / (2 if causal else 1)
        fns = {"atomic": lambda: m0.backward(q, k, v, o, lse, do, trusted=True)}
        fns.update({n: (lambda m: lambda: m.backward(q, k, v, o, lse, do, trusted=True))(m) for n, m in mods.items()})
        for i, name in enumerate(list(fns) + ["atomic"]):
            t = do_bench(fns[name], warmup=25, rep=200)
            rec["bwd_tflops"][name if i < len(fns) else "atomic_again"] = flops / t * 1e-9
        rec["elapsed_s"] = time.time() - T0
        print(json.dumps(rec), flush=True)
        res["rows"].append(rec)
        json.dump(res, open(f"{OUT}/gpu_sep_probe2.json", "w"), indent=1)

# round 3 (ROUND=3): the launch order. The separate backward's main and dq kernels both read only
# what pre wrote; round 1's hand-combined module launched dq before main, the generated one launches
# main first. Each row: the atomic module, the separate one as generated, and the same module with its
# dq launch before main (direct launches off, as for the hand-combined one).
ROWS3 = [(128, 1024, False, False, "bf16"), (128, 16384, False, False, "bf16"), (128, 16384, False, True, "fp16"), (128, 16384, True, True, "bf16")]
if os.environ.get("ROWS3"):  # e.g. ROWS3="128,4096,1,1,bf16;128,1024,1,1,bf16" (d, N, causal, gqa, dtype)
    ROWS3 = [(int(a), int(b), bool(int(c)), bool(int(g)), t) for a, b, c, g, t in (r.split(",") for r in os.environ["ROWS3"].split(";"))]
if ROUND == 3:
    res["round"] = 3
    for d, N, causal, gqa, dtn in ROWS3:
        if time.time() - T0 > BUDGET:
            res.setdefault("skipped", []).append([d, N, causal, gqa, dtn])
            continue
        H = 2048 // d
        Hkv = H // 8 if gqa else H
        B = 16384 // N
        q, do = (torch.randn(B, H, N, d, device="cuda", dtype=DT[dtn]) for _ in range(2))
        k, v = (torch.randn(B, Hkv, N, d, device="cuda", dtype=DT[dtn]) for _ in range(2))
        spec = Call.checked(q, k, v, layout="BNSD", window=(-1, 0) if causal else (-1, -1), alignment="bottom_right").spec()
        tag = f"d{d}_{N}_{'c' if causal else 'nc'}_{'gqa' if gqa else 'mha'}_{dtn}"
        m0 = load(render(spec, "h200", dq_strategy="atomic"), f"atomic3_{tag}")
        sep_src = render(spec, "h200", dq_strategy="separate", tile_sizes={"bwd": (64, 128)}, knobs={"main": (8, 3), "dq": (8, 3)}, dq_tiles="transposed")
        m1 = load(sep_src, f"sep3_{tag}")
        m2 = load(sep_src, f"sep3_dqfirst_{tag}")
        m2._DIRECT_ON = False
        m2._launch_main, m2._launch_dq = m2._launch_dq, m2._launch_main
        o, lse = m0.forward(q, k, v, trusted=True)
        g0 = m0.backward(q, k, v, o, lse, do)
        rec = {"d": d, "N": N, "causal": causal, "gqa": gqa, "dtype": dtn, "B": B, "H": H, "Hkv": Hkv, "diff": {}, "bwd_tflops": {}}
        for name, m in (("sep", m1), ("sep_dq_first", m2)):
            g = m.backward(q, k, v, o, lse, do, poison=True)
            torch.cuda.synchronize()
            rec["diff"][name] = [float((a.float() - b.float()).abs().max()) for a, b in zip(g0, g)] + [any(bool(torch.isnan(x).any()) for x in g)]
        flops = 2.5 * 4 * B * H * N * N * d / (2 if causal else 1)
        fns = {"atomic": lambda: m0.backward(q, k, v, o, lse, do, trusted=True),
               "sep": lambda: m1.backward(q, k, v, o, lse, do, trusted=True),
               "sep_dq_first": lambda: m2.backward(q, k, v, o, lse, do, trusted=True)}
        for i, name in enumerate(["atomic", "sep", "sep_dq_first", "sep", "sep_dq_first", "atomic"]):
            t = do_bench(fns[name], warmup=25, rep=200)
            rec["bwd_tflops"].setdefault(name, []).append(flops / t * 1e-9)
        rec["kernels_us"] = {n: kernel_times(fns[n]) for n in ("sep", "sep_dq_first")}
        rec["elapsed_s"] = time.time() - T0
        print(json.dumps(rec), flush=True)
        res["rows"].append(rec)
        json.dump(res, open(f"{OUT}/{os.environ.get('STEM', 'gpu_sep_probe3')}.json", "w"), indent=1)
