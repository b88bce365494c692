"""Packed variable-length batches on one GPU (issue 15, deliverable 6): tilegen's
``flash_attn_varlen_func`` beside FlashAttention's varlen, SDPA over the padded batch and compiled
``flex_attention`` with a document mask, in one run.

Usage (on the GPU machine, from the repository root; torch 2.11, triton 3.6; no network needed):
    PYTHONPATH=. python benchmarks/varlen_gpu.py                 # 4, 16 and 64 sequences; results/varlen_gpu.json and .md
    PYTHONPATH=. python benchmarks/varlen_gpu.py --quick         # 16 sequences, fewer repetitions (about 2 min, mostly compilation)
    PYTHONPATH=. python benchmarks/varlen_gpu.py --device cpu    # tiny dry run of the script's logic on a CPU (times mean nothing)
    PYTHONPATH=. python benchmarks/varlen_gpu.py --compile-only  # compile tilegen's varlen kernels for sm_90 (no GPU needed: ptxas)

Rows: one packed batch of ``--tokens`` (16384) tokens made of 4, 16 and 64 sequences of seeded random
lengths (:func:`seq_lengths`: each at least tokens / (4·sequences), the rest cut at uniformly random
token positions, so lengths are not multiples of a tile), bf16, Hq = Hkv = 16, D = 128
(H·D = 2048, the sizing of the other H200 benchmarks), causal (bottom-right per sequence; Sq_s = Sk_s,
so top-left is the same), forward, backward and forward+backward. The same q, k, v, dO (seeded) for
every peer:

==================  =================================================================================
``tilegen``         ``tilegen.torch.flash_attn_varlen_func`` (TND, autograd; every call reads the
                    offsets on the host, builds the per-token arrays and classifies the tiles: timed)
``tilegen-kernels`` the same generated Triton module called directly with the arrays built once
                    (``tilegen.api.varlen_spec``), so the host work of the API is outside the timing
``fa2``             FlashAttention-2's ``flash_attn.flash_attn_varlen_func``, if importable
``fa3``             FlashAttention-3's ``flash_attn_interface.flash_attn_varlen_func``, if importable
``sdpa-flash``      ``scaled_dot_product_attention(is_causal=True)`` over the right-padded batch
                    [num_seqs, H, max_len, D] with the flash backend (exact for the real rows: a real
                    query sees only keys before it); the padding copies are not timed
``sdpa-cudnn``      the same with the cuDNN backend, if it runs
``flex``            ``torch.compile(flex_attention)`` over [1, H, tokens, D] with the document ∧ causal
                    mask; the BlockMask (``create_block_mask``) built once outside the timing; its
                    build time is reported apart, and f+b with the build in the column ``f+b+mask``
==================  =================================================================================

Timing: CUDA events around each call, ``--warmup`` untimed calls, then the median of ``--reps`` calls
(synchronised between calls; min and max in the JSON). FLOPs count the visible pairs the way the
FlashAttention papers do: forward 4·H·D·Σ_s Sq_s·Sk_s / 2 (causal), backward 2.5× that, fwd+bwd 3.5×;
the padded SDPA rows are credited with the same useful FLOPs. ``ps/pair`` = f+b time / (Σ_s Sq_s·Sk_s
/ 2): constant across the rows when the time is proportional to the visible work rather than to the
padded size. Correctness per row: O, dQ, dK, dV of the first ``--check-seqs`` sequences against a
float32 per-sequence SDPA reference (each sequence alone, autograd), max-abs error per tensor; ``ok``
when a peer's error is within twice the best other peer's plus half a bf16 ulp at the tensor's scale.
Peak memory: the rise of ``torch.cuda.max_memory_allocated`` over one fwd+bwd (MiB).

Without CUDA (and without ``--device cpu``) it exits with one line. ``--device cpu`` runs every peer
that exists on a CPU on a tiny batch (tokens 192, H 2, D 16, fp32; tilegen in its interpreter,
tilegen-kernels in Triton's interpreter, SDPA's math backend, flex eager) to check the script's
packing, padding, reference and table logic.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

TOKENS = 16384
HEADS = 16
DIM = 128
DOCS = (4, 16, 64)
PEERS = ("tilegen", "tilegen-kernels", "fa2", "fa3", "sdpa-flash", "sdpa-cudnn", "flex")
CPU_SIZES = dict(tokens=192, heads=2, dim=16, dtype="fp32")
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class Unavailable(Exception):
    """A peer that is not on this machine (not an error of the peer)."""


# --- the packed batch -------------------------------------------------------------------------------


def seq_lengths(tokens: int, docs: int, seed: int = 0):
    """int64 [docs] sequence lengths summing to ``tokens``: each ``tokens // (4·docs)`` plus a share of
    the rest cut at ``docs − 1`` distinct uniformly random positions (NumPy ``default_rng(seed + docs)``)."""
    import numpy as np

    rng = np.random.default_rng(seed + docs)
    floor = tokens // (4 * docs)
    rest = tokens - docs * floor
    cuts = np.sort(rng.choice(np.arange(1, rest), size=docs - 1, replace=False)) if docs > 1 else np.array([], dtype=np.int64)
    return floor + np.diff(np.concatenate([[0], cuts, [rest]])).astype(np.int64)



class Case:
    """One packed batch: lengths, offsets, the packed q, k, v, dO [T, H, D] and the pair counts."""

    def __init__(self, docs: int, tokens: int, heads: int, dim: int, dtype: str, device: str, seed: int = 0):
        import numpy as np
        import torch

        self.docs, self.tokens, self.heads, self.dim, self.dtype, self.device = docs, tokens, heads, dim, dtype, device
        self.lengths = seq_lengths(tokens, docs, seed)
        self.doc = np.repeat(np.arange(docs), self.lengths).astype(np.int32)  # int32 [T], the sequence of each token
        self.cu_np = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int32)
        self.cu = torch.from_numpy(self.cu_np).to(device)
        self.max_len = int(self.lengths.max())
        self.pairs = float((self.lengths.astype(np.float64) ** 2).sum() / 2)  # Σ Sq_s·Sk_s / 2 (causal)
        self.padded_pairs = float(docs * self.max_len**2 / 2)
        self.tokens_pairs = float(tokens**2 / 2)  # one causal sequence of every token
        g = torch.Generator(device=device).manual_seed(seed)
        tdtype = getattr(torch, TORCH_DTYPES[dtype])
        shape = (tokens, heads, dim)
        self.q, self.k, self.v, self.do = (torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(tdtype) for _ in range(4))

    def flops(self, phase: str) -> float:
        fwd = 4.0 * self.heads * self.dim * self.pairs
        return {"fwd": fwd, "bwd": 2.5 * fwd, "fwdbwd": 3.5 * fwd}[phase]

    def pad(self, x):
        """[T, H, D] packed → [num_seqs, H, max_len, D] right-padded with zeros (BNSD)."""
        out = x.new_zeros(self.docs, self.max_len, *x.shape[1:])
        for s in range(self.docs):
            a, b = int(self.cu_np[s]), int(self.cu_np[s + 1])
            out[s, : b - a] = x[a:b]
        return out.transpose(1, 2).contiguous()

    def unpad(self, x):
        """[num_seqs, H, max_len, D] → [T, H, D]: the real rows of each sequence, packed."""
        x = x.transpose(1, 2)
        return __import__("torch").cat([x[s, : int(self.lengths[s])] for s in range(self.docs)])

    def describe(self) -> dict:
        return {
            "docs": self.docs, "tokens": self.tokens, "H": self.heads, "D": self.dim, "dtype": self.dtype,
            "lengths": [int(x) for x in self.lengths], "max_len": self.max_len, "pairs": self.pairs,
            "padded_pairs": self.padded_pairs, "dense_pairs": self.tokens_pairs,
        }  # fmt: skip


# --- peers ------------------------------------------------------------------------------------------


class _Autograd:
    """A peer run through torch autograd: ``_run()`` gives the output from the leaves ``self.leaves``;
    ``_packed(x)`` turns one of its tensors into the packed [T, H, D] layout."""

    name = "?"
    phases = ("fwd", "bwd", "fwdbwd")

    def setup(self, case):
        self.case = case
        self.o = self._run()

    def _leaves(self, *xs):
        return tuple(x.detach().clone().requires_grad_(True) for x in xs)

    def fwd(self):
        return self._run()

    def bwd(self):
        import torch

        return torch.autograd.grad(self.o, self.leaves, self.do, retain_graph=True)

    def fwdbwd(self):
        import torch

        return torch.autograd.grad(self._run(), self.leaves, self.do)

    def outputs(self):
        import torch

        o = self._run()
        if "bwd" not in self.phases:
            return [self._packed(o), None, None, None]
        g = torch.autograd.grad(o, self.leaves, self.do)
        return [self._packed(x) for x in (o, *g)]

    def _packed(self, x):
        return x


class TilegenAPI(_Autograd):
    name = "tilegen"

    def __init__(self, case):
        from tilegen.torch import flash_attn_varlen_func

        self.fn = flash_attn_varlen_func
        self.leaves = self._leaves(case.q, case.k, case.v)
        self.do = case.do
        self.setup(case)

    def _run(self):
        c = self.case
        return self.fn(*self.leaves, c.cu, c.cu, c.max_len, c.max_len, causal=True)


class TilegenKernels:
    """The generated Triton module of the packed batch's spec, called directly (as
    ``tilegen.torch``'s CUDA path calls it), the per-token arrays built once."""

    name = "tilegen-kernels"

    def __init__(self, case):
        import numpy as np
        import torch

        from mods_gpu import Tilegen
        from tilegen import api

        spec, arrays, _, _ = api.varlen_spec(case.q.shape, case.k.shape, case.v.shape, case.dtype, case.cu_np, case.cu_np,
                                             max_seqlen_q=case.max_len, max_seqlen_k=case.max_len, window=(-1, 0))
        params = {n: torch.from_numpy(np.ascontiguousarray(a)).to(case.device) for n, a in arrays.items()}
        row = argparse.Namespace(spec=spec)
        self.spec = spec
        self.impl = Tilegen(row, *(x.unsqueeze(0) for x in (case.q, case.k, case.v, case.do)), params)  # B = 1, BSND

    def fwd(self):
        return self.impl.fwd()

    def bwd(self):
        return self.impl.bwd()

    def fwdbwd(self):
        return self.impl.fwdbwd()

    def outputs(self):
        tensors, _ = self.impl.outputs()
        return [x[0] for x in tensors]

    def describe(self):
        return self.impl.describe()

    def visited(self):
        """Fraction of the (Q tile, K/V tile) pairs the forward visits (its block lists)."""
        from tilegen.core.ir import Bc

        lists = self.impl.mod.block_lists("fwd", self.impl.q, **self.impl.kw)
        nk = math.ceil(self.impl.k.shape[1] / self.impl.fwd_sched.program.env_map[Bc])
        return float(lists["BM_kvn"].sum()) / (lists["BM_kvn"].numel() * nk)


class FlashVarlen(_Autograd):
    """FlashAttention's ``flash_attn_varlen_func`` (FA2: ``flash_attn``; FA3: ``flash_attn_interface``)."""

    def __init__(self, case, module: str):
        import importlib

        try:
            self.fn = importlib.import_module(module).flash_attn_varlen_func
        except Exception as exc:  # ImportError, or a build that fails to load its extension
            raise Unavailable(f"{module} not importable ({type(exc).__name__}: {str(exc)[:120]})") from None
        self.leaves = self._leaves(case.q, case.k, case.v)
        self.do = case.do
        self.setup(case)

    def _run(self):
        c = self.case
        out = self.fn(*self.leaves, c.cu, c.cu, c.max_len, c.max_len, causal=True)
        return out[0] if isinstance(out, tuple) else out


class FA2(FlashVarlen):
    name = "fa2"

    def __init__(self, case):
        super().__init__(case, "flash_attn")


class FA3(FlashVarlen):
    name = "fa3"

    def __init__(self, case):
        super().__init__(case, "flash_attn_interface")


class SDPAPadded(_Autograd):
    """SDPA over the right-padded batch with one backend (``backend`` a name of ``SDPBackend``)."""

    def __init__(self, case, backend: str):
        import torch

        from torch.nn.attention import SDPBackend

        if not hasattr(SDPBackend, backend):
            raise Unavailable(f"SDPBackend.{backend} not in this torch")
        self.backend = getattr(SDPBackend, backend)
        self.leaves = self._leaves(case.pad(case.q), case.pad(case.k), case.pad(case.v))
        self.do = case.pad(case.do)
        self.case = case
        try:
            self.setup(case)
            torch.autograd.grad(self.o, self.leaves, self.do, retain_graph=True)
        except RuntimeError as exc:  # "No available kernel", a backend that refuses these sizes
            raise Unavailable(f"SDPBackend.{backend} does not run here ({str(exc).splitlines()[0][:160]})") from None

    def _run(self):
        import torch.nn.functional as F
        from torch.nn.attention import sdpa_kernel

        with sdpa_kernel([self.backend]):
            return F.scaled_dot_product_attention(*self.leaves, is_causal=True)

    def _packed(self, x):
        return self.case.unpad(x)


class SDPAFlash(SDPAPadded):
    name = "sdpa-flash"

    def __init__(self, case):
        if case.device == "cpu":
            raise Unavailable("the flash backend needs CUDA (the CPU dry run uses sdpa-math)")
        super().__init__(case, "FLASH_ATTENTION")


class SDPACudnn(SDPAPadded):
    name = "sdpa-cudnn"

    def __init__(self, case):
        if case.device == "cpu":
            raise Unavailable("the cuDNN backend needs CUDA")
        super().__init__(case, "CUDNN_ATTENTION")


class SDPAMath(SDPAPadded):
    name = "sdpa-math"  # the CPU dry run's stand-in for the GPU backends

    def __init__(self, case):
        super().__init__(case, "MATH")


class Flex(_Autograd):
    """Compiled flex_attention with the document ∧ causal mask over the whole packed batch (on a CPU,
    for the dry run: eager and forward only, as flex has no CPU backward)."""

    name = "flex"
    _compiled = None
    _doc = None  # one doc-id buffer for every row, so the compiled mask_mod's guards hold

    def __init__(self, case, compiled=True):
        import torch
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if compiled and Flex._compiled is None:
            import torch._dynamo

            torch._dynamo.config.recompile_limit = 64
            torch._dynamo.config.accumulated_recompile_limit = 1024
            Flex._compiled = torch.compile(flex_attention, dynamic=False)
        self.attn = Flex._compiled if compiled else flex_attention
        if Flex._doc is None or Flex._doc.numel() != case.tokens or Flex._doc.device.type != case.device:
            Flex._doc = torch.empty(case.tokens, dtype=torch.int32, device=case.device)
        Flex._doc.copy_(torch.from_numpy(case.doc))
        doc = Flex._doc

        def mask_mod(b, h, q_idx, kv_idx):
            return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

        self.build = lambda: create_block_mask(mask_mod, None, None, case.tokens, case.tokens, device=case.device)
        self.block_mask = self.build()
        bhsd = lambda x: x.transpose(0, 1).unsqueeze(0).contiguous()  # noqa: E731  [1, H, T, D]
        self.leaves = self._leaves(*(bhsd(x) for x in (case.q, case.k, case.v)))
        if case.device == "cpu":
            self.phases = ("fwd",)
            self.leaves = tuple(x.detach() for x in self.leaves)
        self.do = bhsd(case.do)
        self.case = case
        self.o = None if case.device == "cpu" else self._run()

    def _run(self):
        return self.attn(*self.leaves, block_mask=self.block_mask)

    def _packed(self, x):
        return x[0].transpose(0, 1)


def make_peer(name, case):
    if name == "tilegen":
        return TilegenAPI(case)
    if name == "tilegen-kernels":
        return TilegenKernels(case)
    if name == "fa2":
        if case.device == "cpu":
            raise Unavailable("FlashAttention needs CUDA")
        return FA2(case)
    if name == "fa3":
        if case.device == "cpu":
            raise Unavailable("FlashAttention needs CUDA")
        return FA3(case)
    if name == "sdpa-flash":
        return SDPAFlash(case)
    if name == "sdpa-cudnn":
        return SDPACudnn(case)
    if name == "sdpa-math":
        return SDPAMath(case)
    if name == "flex":
        return Flex(case, compiled=case.device != "cpu")
    raise SystemExit(f"--peers {name!r} is invalid; accepted: {', '.join(PEERS + ('sdpa-math',))}")


# --- reference, timing, check -----------------------------------------------------------------------


def reference(case, seqs: int):
    """O, dQ, dK, dV (packed rows of the first ``seqs`` sequences, float32) of each sequence alone:
    SDPA in float32 (is_causal, Sq = Sk), torch autograd; and the row range they cover."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    outs = [[], [], [], []]
    for s in range(min(seqs, case.docs)):
        a, b = int(case.cu_np[s]), int(case.cu_np[s + 1])
        q, k, v = (x[a:b].float().transpose(0, 1).detach().clone().requires_grad_(True) for x in (case.q, case.k, case.v))
        backends = [SDPBackend.MATH] if case.device == "cpu" else [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        with sdpa_kernel(backends):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.autograd.grad(o, (q, k, v), case.do[a:b].float().transpose(0, 1))
        for lst, x in zip(outs, (o, *g)):
            lst.append(x.detach().transpose(0, 1))
    rows = int(case.cu_np[min(seqs, case.docs)])
    return [torch.cat(x) for x in outs], rows


def check(case, peers: dict, seqs: int) -> dict:
    """Per peer and tensor: max-abs error against :func:`reference` on the first ``seqs`` sequences, and
    ``ok`` (within twice the best other peer's error plus half a bf16 ulp at the tensor's scale)."""
    from tilegen.core import dtypes

    ref, rows = reference(case, seqs)
    errs = {}
    for name, peer in peers.items():
        try:
            got = peer.outputs()
            errs[name] = {}
            for t, g, r in zip(("O", "dQ", "dK", "dV"), got, ref):
                if g is None:
                    continue
                g = g[:rows].detach().float()
                errs[name][t] = float((g - r).abs().max()) if bool(g.isfinite().all()) else float("inf")
        except Exception as exc:
            errs[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    eps = dtypes.eps("bf16")
    out = {"rows": rows, "seqs": min(seqs, case.docs), "peers": {}}
    for name, e in errs.items():
        if "error" in e:
            out["peers"][name] = e
            continue
        rec = {}
        for t, r in zip(("O", "dQ", "dK", "dV"), ref):
            if t not in e:
                continue
            others = [errs[o][t] for o in errs if o != name and t in errs[o]]
            floor = 0.5 * eps * float(r.abs().max())
            bound = 2 * min(others) + floor if others else 4 * floor
            rec[t] = {"max_abs": e[t], "bound": bound, "ok": e[t] <= bound}
        out["peers"][name] = rec
    return out


def time_ms(fn, warmup: int, reps: int, device: str) -> dict:
    """Median (and min, max) milliseconds of ``fn()``: CUDA events around each call, synchronised
    between calls; on a CPU wall time."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    if device == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return {"median": statistics.median(times), "min": min(times), "max": max(times), "n": reps}


def peak_mib(fn, device: str):
    import torch

    if device != "cuda":
        return None
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def run_row(case, args, log) -> dict:
    import torch

    rec = {**case.describe(), "results": {}}
    peers = {}
    for name in args.peers:
        t0 = time.time()
        try:
            peer = make_peer(name, case)
            phases = getattr(peer, "phases", ("fwd", "bwd", "fwdbwd"))
            res = {phase: time_ms(getattr(peer, phase), args.warmup, args.reps, case.device) for phase in phases}
            for phase in phases:
                res[phase]["tflops"] = case.flops(phase) / (res[phase]["median"] * 1e-3) / 1e12
            if "fwdbwd" in res:
                res["ps_per_pair"] = res["fwdbwd"]["median"] * 1e9 / case.pairs
                res["peak_mib"] = peak_mib(peer.fwdbwd, case.device)
            if isinstance(peer, Flex):
                res["mask_build"] = time_ms(peer.build, 1, max(3, args.reps // 5), case.device)
            if isinstance(peer, TilegenKernels):
                res["schedule"] = peer.describe()
                try:
                    res["visited"] = peer.visited()
                    res["ideal_visited"] = case.pairs / case.tokens**2  # the visible (q, kv) pairs among all tokens²
                except Exception as exc:
                    res["visited_error"] = f"{type(exc).__name__}: {exc}"
            res["setup_s"] = time.time() - t0
            rec["results"][name] = res
            peers[name] = peer
            times = ", ".join(f"{p} {res[p]['median']:.3f} ms" for p in phases)
            rate = f" ({res['fwdbwd']['tflops']:.1f} TFLOP/s f+b, {res['ps_per_pair']:.2f} ps/pair)" if "fwdbwd" in res else ""
            log(f"  {name}: {times}{rate}; {res['setup_s']:.0f} s")
        except Unavailable as exc:
            rec["results"][name] = {"unavailable": str(exc)}
            log(f"  {name}: unavailable: {exc}")
        except Exception as exc:
            rec["results"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  {name}: {type(exc).__name__}: {str(exc)[:300]}")
            if args.debug:
                traceback.print_exc()
        if case.device == "cuda":
            torch.cuda.empty_cache()
    if not args.no_check and peers:
        try:
            rec["check"] = check(case, peers, args.check_seqs)
            for name, c in rec["check"]["peers"].items():
                line = c.get("error") or ", ".join(f"{t} {v['max_abs']:.2e}{'' if v['ok'] else ' (FAIL)'}" for t, v in c.items())
                log(f"  check {name}: {line}")
        except Exception as exc:
            rec["check"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            if args.debug:
                traceback.print_exc()
    del peers
    if case.device == "cuda":
        torch.cuda.empty_cache()
    return rec


# --- output -----------------------------------------------------------------------------------------


def fmt(x, nd=3):
    return "–" if x is None else f"{x:.{nd}f}"


def markdown(rows, meta) -> str:
    lines = [
        f"# Packed variable-length batches on {meta['device']}",
        "",
        f"torch {meta['torch']}, triton {meta['triton']}; {meta['dtype']}, {meta['tokens']} tokens packed, Hq = Hkv = {meta['H']}, "
        f"D = {meta['D']}, causal; medians in ms of {meta['reps']} calls (CUDA events; wall time on a CPU) after {meta['warmup']} warm-up calls. "
        "TFLOP/s of fwd+bwd = 3.5·4·H·D·Σ Sq_s·Sk_s/2 / time (useful FLOPs, the padded rows credited the same); "
        "ps/pair = f+b time / (Σ Sq_s·Sk_s/2), constant when the time is proportional to the visible work. "
        "check: max-abs error of O, dQ, dK, dV on the first sequences against a float32 per-sequence SDPA reference "
        "(ok = within twice the best other peer's plus half a bf16 ulp). flex's f+b+mask adds its BlockMask build.",
        "",
    ]
    for r in rows:
        lengths = r["lengths"]
        lines += [
            f"## {r['docs']} sequences (lengths {min(lengths)}–{max(lengths)}; Σ Sq·Sk/2 = {r['pairs'] / 1e6:.1f} M pairs, "
            f"padded {r['padded_pairs'] / 1e6:.1f} M, one {r['tokens']}-token sequence {r['dense_pairs'] / 1e6:.1f} M)",
            "",
            "| peer | fwd ms | bwd ms | f+b ms | f+b TFLOP/s | ps/pair | f+b+mask ms | peak MiB | O err | dQ err | dK err | dV err | check |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        chk = r.get("check", {}).get("peers", {})
        for name, res in r["results"].items():
            if "unavailable" in res or "error" in res:
                why = res.get("unavailable") or res.get("error")
                lines.append(f"| {name} | {'unavailable' if 'unavailable' in res else 'error'}: {why[:120]} |" + " |" * 12)
                continue
            c = chk.get(name, {})
            errs = ["–"] * 4 if not c or "error" in c else [f"{c[t]['max_abs']:.2e}" if t in c else "–" for t in ("O", "dQ", "dK", "dV")]
            ok = "–" if not c or "error" in c else ("ok" if all(v["ok"] for v in c.values()) else "FAIL " + ",".join(t for t, v in c.items() if not v["ok"]))
            ms = {p: res[p]["median"] if p in res else None for p in ("fwd", "bwd", "fwdbwd")}
            build = res.get("mask_build")
            with_build = ms["fwdbwd"] + build["median"] if build and ms["fwdbwd"] is not None else None
            tflops = res["fwdbwd"]["tflops"] if "fwdbwd" in res else None
            lines.append(
                f"| {name} | {fmt(ms['fwd'])} | {fmt(ms['bwd'])} | {fmt(ms['fwdbwd'])} | {fmt(tflops, 1)} | {fmt(res.get('ps_per_pair'), 2)} | "
                f"{fmt(with_build)} | {fmt(res.get('peak_mib'), 0)} | {' | '.join(errs)} | {ok} |"
            )
        tk = r["results"].get("tilegen-kernels", {})
        if "visited" in tk:
            lines += ["", f"tilegen's forward visits {tk['visited']:.3f} of the tile pairs (visible pairs: {tk['ideal_visited']:.3f} of all)."]
        lines.append("")
    return "\n".join(lines)


def meta_info(args) -> dict:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:  # pragma: no cover
        triton_version = None
    return {
        "device": torch.cuda.get_device_name() if args.device == "cuda" else f"CPU ({platform.processor() or platform.machine()}), dry run",
        "torch": torch.__version__, "triton": triton_version, "python": platform.python_version(),
        "tokens": args.tokens, "H": args.heads, "D": args.dim, "dtype": args.dtype, "warmup": args.warmup, "reps": args.reps,
        "check_seqs": args.check_seqs, "date": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv),
    }  # fmt: skip


def write_results(args, rows) -> str:
    meta = meta_info(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "varlen_gpu.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    md = markdown(rows, meta)
    (out / "varlen_gpu.md").write_text(md)
    return md


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=None, help="folder for varlen_gpu.json/.md (default benchmarks/results/; the CPU dry run: a temporary folder)")
    parser.add_argument("--docs", nargs="+", type=int, default=None, help=f"sequences per packed batch (default {' '.join(map(str, DOCS))})")
    parser.add_argument("--peers", nargs="+", default=None, help=f"which peers (default: {' '.join(PEERS)}; on a CPU sdpa-math stands in for the SDPA backends)")
    parser.add_argument("--tokens", type=int, default=None, help=f"tokens per packed batch (default {TOKENS})")
    parser.add_argument("--heads", type=int, default=None, help=f"Hq = Hkv (default {HEADS})")
    parser.add_argument("--dim", type=int, default=None, help=f"head dim (default {DIM})")
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default=None, help="default bf16 (fp32 on the CPU dry run)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed calls before timing (default 10; --quick 3)")
    parser.add_argument("--reps", type=int, default=None, help="timed calls, the median reported (default 30; --quick 10)")
    parser.add_argument("--check-seqs", type=int, default=None, help="sequences checked against the fp32 reference (default 2; --quick 1)")
    parser.add_argument("--quick", action="store_true", help="16 sequences, fewer calls: about 2 min on the GPU, mostly compilation")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a tiny dry run of the script's logic")
    parser.add_argument("--no-check", action="store_true", help="skip the fp32 reference check")
    parser.add_argument("--compile-only", action="store_true", help="compile tilegen's varlen kernels of the GPU sizes for sm_90, run nothing (no GPU needed)")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    cpu = args.device == "cpu"
    defaults = dict(
        docs=[16] if args.quick else ([4, 16] if cpu else list(DOCS)),
        peers=[p for p in PEERS if not p.startswith("sdpa-")] + ["sdpa-math"] if cpu else list(PEERS),
        tokens=CPU_SIZES["tokens"] if cpu else TOKENS, heads=CPU_SIZES["heads"] if cpu else HEADS, dim=CPU_SIZES["dim"] if cpu else DIM,
        dtype=CPU_SIZES["dtype"] if cpu else "bf16", warmup=1 if cpu else (3 if args.quick else 10),
        reps=2 if cpu else (10 if args.quick else 30), check_seqs=1 if args.quick else 2,
    )  # fmt: skip
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("tokens", "heads", "dim", "reps", "check_seqs"):
        if getattr(args, key) < 1:
            parser.error(f"--{key.replace('_', '-')} = {getattr(args, key)} is invalid; accepted: an integer >= 1")
    if args.warmup < 0:
        parser.error(f"--warmup = {args.warmup} is invalid; accepted: an integer >= 0")
    for d in args.docs:
        if not 1 <= d <= args.tokens // 4:
            parser.error(f"--docs {d} is invalid; accepted: 1 to tokens/4 = {args.tokens // 4}")
    if args.out is None:
        if cpu:
            import tempfile

            args.out = tempfile.mkdtemp(prefix="varlen-gpu-dry-")
        else:
            args.out = str(HERE / "results")
    return args


def compile_only(args, log) -> int:
    """Compile every kernel of tilegen's varlen module at the GPU sizes for sm_90 with the installed
    Triton (``mods_gpu.compile_only``): a construct the compiler rejects shows before the GPU run."""
    import numpy as np

    from mods_gpu import compile_only as compile_row
    from tilegen import api

    shape = (args.tokens, args.heads, args.dim)
    lengths = seq_lengths(args.tokens, args.docs[0])
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    spec, _, _, _ = api.varlen_spec(shape, shape, shape, args.dtype, cu, cu, window=(-1, 0))  # the spec of every row
    compile_row(argparse.Namespace(spec=spec), log)
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.compile_only:
        return compile_only(args, lambda m: print(m, flush=True))
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # tilegen-kernels in Triton's interpreter (before triton loads)
    try:
        import torch
    except ImportError:
        print("varlen_gpu: needs torch (pip install torch)", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("varlen_gpu: no CUDA device (torch.cuda.is_available() is False); run on the GPU machine, or --device cpu for a dry run", file=sys.stderr)
        return 2

    def log(msg):
        print(msg, flush=True)

    rows = []
    for docs in args.docs:
        t0 = time.time()
        case = Case(docs, args.tokens, args.heads, args.dim, args.dtype, args.device)
        log(f"{docs} sequences (lengths {int(case.lengths.min())}–{case.max_len}, {case.pairs / 1e6:.2f} M visible pairs):")
        rows.append(run_row(case, args, log))
        write_results(args, rows)  # after every row: a run cut short keeps what it measured
        log(f"  row done in {time.time() - t0:.0f} s")
    print(write_results(args, rows))
    print(f"wrote {Path(args.out) / 'varlen_gpu.json'} and varlen_gpu.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
