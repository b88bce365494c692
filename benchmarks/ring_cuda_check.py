"""Ring attention's CUDA path on one GPU: the block interface on the Triton kernels, and a one-rank
NCCL ring, against the float64 reference under DESIGN §3's rule. Run from the repository root on a
CUDA machine: ``python benchmarks/ring_cuda_check.py``. (Several ranks need several GPUs.)
``RING_CHECK_DEVICE=cpu RING_CHECK_SEQ=32`` runs the same checks on the interpreter with gloo, small.
Not yet run on a GPU."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.getcwd())
from tilegen.core import reference
from tilegen import torch as tt  # noqa: E402
from tilegen.harness.check import compare, lse_rel_floor  # noqa: E402
from tilegen.distributed import ring_attention  # noqa: E402

ok = True
DEVICE = os.environ.get("RING_CHECK_DEVICE", "cuda")
SEQ = int(os.environ.get("RING_CHECK_SEQ", "256"))


def check(name, ours, ref, plain, dtype, rel_floor=0.0, n=256):
    global ok
    c = compare(name, ours, ref, plain, dtype, rel_floor=rel_floor, terms=n)
    ok &= c.ok
    print(" ", c.line(), flush=True)


def bnsd(x):
    return x.detach().float().cpu().numpy().transpose(0, 2, 1, 3)


def references(q, k, v, do, dtype, window):
    args = [bnsd(x) for x in (q, k, v)]
    kw = dict(scale=q.shape[-1] ** -0.5, window=window, alignment="bottom_right")
    o, l = reference.forward(*args, **kw)
    op, lp = reference.plain_forward(*args, dtype=dtype, **kw)
    g = reference.backward(*args, bnsd(do), **kw)
    gp = reference.plain_backward(*args, bnsd(do), dtype=dtype, **kw)
    return (o, l, op, lp), g, gp


g = torch.Generator().manual_seed(0)
for dtype, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
    s = SEQ
    q, do = (torch.randn(2, s, 8, 64, generator=g).to(tdt).to(DEVICE) for _ in range(2))
    k, v = (torch.randn(2, s, 2, 64, generator=g).to(tdt).to(DEVICE) for _ in range(2))
    print(f"block interface, {dtype}, causal, keys in two blocks", flush=True)
    out = torch.zeros(2, s, 8, 64, device=DEVICE)
    lse = torch.full((2, 8, s), float("-inf"), device=DEVICE)
    h = s // 2
    tt.attention_forward(q, k[:, :h], v[:, :h], causal=True, alignment="top_left", out=out, lse=lse)
    tt.attention_forward(q[:, h:], k[:, h:], v[:, h:], causal=True, out=out[:, h:], lse=lse[:, :, h:])
    (o, l, op, lp), gr, gp = references(q, k, v, do, dtype, (-1, 0))
    check("O", bnsd(out), o, op, dtype)
    check("L", lse.cpu().numpy(), l, lp, "fp32")
    dq, dk, dv = (torch.zeros(x.shape, device=DEVICE) for x in (q, k, v))
    tt.attention_backward(q, k[:, :h], v[:, :h], out, lse, do, causal=True, alignment="top_left", dq=dq, dk=dk[:, :h], dv=dv[:, :h])
    tt.attention_backward(q[:, h:], k[:, h:], v[:, h:], out[:, h:], lse[:, :, h:], do[:, h:], causal=True, dq=dq[:, h:], dk=dk[:, h:], dv=dv[:, h:])
    for name, x, r, p in zip(("dq", "dk", "dv"), (dq, dk, dv), gr, gp):
        check(name, bnsd(x), r, p, dtype, rel_floor=lse_rel_floor(l))

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
if DEVICE == "cuda":
    torch.cuda.set_device(0)
dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
for balance, window in (("zigzag", (-1, 0)), ("plain", (SEQ // 8, 0))):
    print(f"one-rank ring, bf16, {balance}, window {window}", flush=True)
    q, do = (torch.randn(1, SEQ, 4, 64, generator=g).to(torch.bfloat16).to(DEVICE) for _ in range(2))
    k, v = (torch.randn(1, SEQ, 2, 64, generator=g).to(torch.bfloat16).to(DEVICE) for _ in range(2))
    qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))
    out = ring_attention(qs, ks, vs, causal=True, window_size=(window[0], -1), layout="BSND", balance=balance)
    out.backward(do)
    (o, l, op, lp), gr, gp = references(q, k, v, do, "bf16", window)
    check("O", bnsd(out), o, op, "bf16")
    for name, x, r, p in zip(("dq", "dk", "dv"), (qs.grad, ks.grad, vs.grad), gr, gp):
        check(name, bnsd(x), r, p, "bf16", rel_floor=lse_rel_floor(l))
dist.destroy_process_group()
print("ALL OK" if ok else "SOME FAILED")
sys.exit(0 if ok else 1)
