"""Attention sinks and packed batches on the compiled Triton path, against torch autograd of the dense
formulation in float64 (gpt-oss's: the sink logit joins each row's softmax as one more column and is
dropped before P·V). Run from the repository root on a CUDA machine:
``PYTHONPATH=. python benchmarks/sinks_cuda_check.py``; prints one line per tensor and exits 1 on a
failure. ``SINKS_CHECK_DEVICE=cpu`` runs the same checks on the interpreter (small)."""

import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from tilegen import torch as tt  # noqa: E402

DEVICE = os.environ.get("SINKS_CHECK_DEVICE", "cuda")
ok = True


def reference(q, k, v, sinks, causal, window):
    """float64 [S, H, D] attention of one sequence with sinks (bottom-right window), by torch."""
    q, k, v = (x.double() for x in (q, k, v))
    sq, sk, hq, hkv = q.shape[0], k.shape[0], q.shape[1], k.shape[1]
    k, v = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))
    s = torch.einsum("qhd,khd->hqk", q, k) * q.shape[-1] ** -0.5
    i = torch.arange(sq, device=q.device).view(-1, 1) + sk - sq
    j = torch.arange(sk, device=q.device).view(1, -1)
    left, right = (window[0], 0) if causal else window
    keep = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    s = s.masked_fill(~keep, float("-inf"))
    s = torch.cat([s, sinks.double().view(-1, 1, 1).expand(hq, sq, 1)], dim=-1)
    p = torch.softmax(s, dim=-1)[..., :-1]
    return torch.einsum("hqk,khd->qhd", p, v)


def check(name, got, want, tol):
    global ok
    err = (got.double() - want).abs().max().item() if got.numel() else 0.0
    good = err <= tol
    ok &= good
    print(f"  {name:<6} max-abs {err:.2e}  (tol {tol:.0e})  {'ok' if good else 'FAIL'}", flush=True)


g = torch.Generator().manual_seed(0)
for dtype, tol in ((torch.bfloat16, 3e-2), (torch.float16, 5e-3)):
    for causal, window in ((True, (-1, -1)), (False, (64, 0)), (False, (-1, -1))):
        hq, hkv, d, s = 8, 2, 64, 300
        q, k, v, do = (torch.randn(2, s, h, d, generator=g).to(dtype) for h in (hq, hkv, hkv, hq))
        sinks = torch.randn(hq, generator=g)
        leaves = [x.detach().to(DEVICE).requires_grad_() for x in (q, k, v, sinks)]
        out = tt.flash_attn_func(*leaves[:3], causal=causal, window_size=window, sinks=leaves[3])
        out.backward(do.to(DEVICE))
        refs = [x.detach().to(DEVICE).double().requires_grad_() for x in (q, k, v, sinks)]
        ref = torch.stack([reference(refs[0][b], refs[1][b], refs[2][b], refs[3], causal, window) for b in range(2)])
        ref.backward(do.to(DEVICE).double())
        print(f"dense {dtype}, causal={causal}, window={window}, Hq {hq} / Hkv {hkv}, S {s}", flush=True)
        for name, a, b in zip(("O", "dQ", "dK", "dV", "dsinks"), (out, *(x.grad for x in leaves)), (ref, *(x.grad for x in refs))):
            check(name, a, b, tol * (8 if name == "dsinks" else 1))
    cu = torch.tensor([0, 0, 37, 200, 201, 480], dtype=torch.int32)
    cuk = torch.tensor([0, 5, 90, 200, 330, 480], dtype=torch.int32)
    tq, tk = 500, 500  # 20 trailing tokens outside every sequence
    q, do = (torch.randn(tq, 8, 64, generator=g).to(dtype) for _ in range(2))
    k, v = (torch.randn(tk, 2, 64, generator=g).to(dtype) for _ in range(2))
    sinks = torch.randn(8, generator=g)
    leaves = [x.detach().to(DEVICE).requires_grad_() for x in (q, k, v, sinks)]
    out = tt.flash_attn_varlen_func(*leaves[:3], cu.to(DEVICE), cuk.to(DEVICE), 281, 150, causal=True, sinks=leaves[3])
    out.backward(do.to(DEVICE))
    refs = [x.detach().to(DEVICE).double().requires_grad_() for x in (q, k, v, sinks)]
    ref = torch.zeros(tq, 8, 64, dtype=torch.float64, device=DEVICE)
    pieces = []
    for a0, a1, b0, b1 in zip(cu[:-1].tolist(), cu[1:].tolist(), cuk[:-1].tolist(), cuk[1:].tolist()):
        if a1 > a0 and b1 > b0:
            pieces.append((a0, a1, reference(refs[0][a0:a1], refs[1][b0:b1], refs[2][b0:b1], refs[3], True, (-1, -1))))
    for a0, a1, o in pieces:
        ref = ref.index_copy(0, torch.arange(a0, a1, device=DEVICE), o)
    ref.backward(do.to(DEVICE).double())
    print(f"varlen {dtype}, causal, sinks, cu_q {cu.tolist()}, cu_k {cuk.tolist()}", flush=True)
    for name, a, b in zip(("O", "dQ", "dK", "dV", "dsinks"), (out, *(x.grad for x in leaves)), (ref, *(x.grad for x in refs))):
        check(name, a, b, tol * (8 if name == "dsinks" else 1))
    check("O out", out[480:].float(), torch.zeros(20, 8, 64, dtype=torch.float64, device=DEVICE), 0.0)
print("all ok" if ok else "FAILED")
sys.exit(0 if ok else 1)
