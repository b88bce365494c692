"""GPU benchmark of ``tilegen.torch.flex_attention`` beside ``torch.compile(flex_attention)`` (issue 37,
part 5): attention-gym's mods, the SAME score_mod and the SAME BlockMask for both, one run on one GPU.

Rows (bf16, B = 1, N = 16384 tokens, H·D = 2048, D = 64 and 128; every mask built by
``create_block_mask`` with torch's default 128 × 128 blocks):

===============  ====================================================================================
``natten``       attention-gym ``generate_natten`` on a 128 × 128 image, a 13 × 13 neighbourhood
``window1024``   ``generate_sliding_window(1024)``: causal, 1024 keys back
``doc16``        ``generate_doc_mask_mod(causal_mask, offsets)``: 16 documents of seeded random
                 lengths packed in the 16k tokens (``mods_gpu.doc_ids``), causal within each
``prefix_lm``    ``generate_prefix_lm_mask(2048)``: the first 2048 keys seen by every query, causal after
``softcap``      ``generate_tanh_softcap(50)`` with a causal BlockMask
``alibi``        ``generate_alibi_bias(H)`` with a causal BlockMask
===============  ====================================================================================

Per row and implementation, ``triton.testing.do_bench`` medians (ms) of the forward, the backward
(``torch.autograd.grad`` of a kept forward) and forward+backward, each with the BlockMask prebuilt
(``out``: built once, outside the timed call) and built inside the timed call (``in``:
``create_block_mask`` + the call, a new BlockMask each time, as a training step that builds its mask
does); ``mask`` is ``create_block_mask`` alone. Before timing, each row is checked on batch 0, head 0
against a dense float32 torch computation of the same mods (``mods_gpu.check``: O, dQ, dK, dV;
tilegen's max-abs error within twice flex's plus half a bf16 ulp at the result's scale). The table
gives the speed-ups (flex ms / tilegen ms, ≥ 1: tilegen faster), the fraction of (Q, K/V) tile
pairs tilegen's forward visits, its tiles and its mask (``mask_mod``: the module's mask is mask_mod
alone and the BlockMask's classes are the tile classes; ``table``: the mask reads the class table).

Writes ``flex_gym.json`` and ``flex_gym.md`` into ``--out`` (default benchmarks/results/), after every
row.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=. python benchmarks/flex_gym.py                       # every row
    PYTHONPATH=. python benchmarks/flex_gym.py --rows natten doc16 --dims 128
    PYTHONPATH=. python benchmarks/flex_gym.py --list                # CPU: the mods, BlockMasks and tilegen's plans
    PYTHONPATH=. python benchmarks/flex_gym.py --list --n 1024 --dims 64   # the same, small
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from mods_gpu import (
    HIDDEN,
    TOKENS,
    bench,
    check,
    compiled_flex,
    doc_ids,
    fmt,
    ms,
)
from mods_gpu import write_results as _write_results

ROWS = ("natten", "window1024", "doc16", "prefix_lm", "softcap", "alibi")
NATTEN_KERNEL = 13
WINDOW = 1024
PREFIX = 2048
SOFTCAP = 50
PHASES = ("fwd", "fwd_in", "bwd", "fwdbwd", "fwdbwd_in")


class Row:
    """One configuration: attention-gym's score_mod and mask_mod, and the BlockMask both implementations
    take (``block_mask()`` builds a new one, as the ``in`` timings do)."""

    def __init__(self, name: str, d: int, n: int, device: str):
        from attn_gym import masks as AM
        from attn_gym import mods as AS

        self.name, self.d, self.n, self.h, self.device = name, d, n, HIDDEN // d, device
        self.score_mod = None
        if name == "natten":
            side = math.isqrt(n)
            if side * side != n:
                raise SystemExit(f"--n {n} is invalid for natten; accepted: a square (the image's pixels)")
            self.mask_mod = AM.generate_natten(side, side, NATTEN_KERNEL, NATTEN_KERNEL)
        elif name == "window1024":
            self.mask_mod = AM.generate_sliding_window(WINDOW)
        elif name == "doc16":
            import numpy as np
            from attn_gym.masks.document_mask import length_to_offsets

            self.lengths = np.bincount(doc_ids(n, 16)).tolist()
            self.mask_mod = AM.generate_doc_mask_mod(AM.causal_mask, length_to_offsets(self.lengths, device))
        elif name == "prefix_lm":
            self.mask_mod = AM.generate_prefix_lm_mask(min(PREFIX, n // 2))
        elif name == "softcap":
            self.mask_mod, self.score_mod = AM.causal_mask, AS.generate_tanh_softcap(SOFTCAP)
        elif name == "alibi":
            self.mask_mod, self.score_mod = AM.causal_mask, AS.generate_alibi_bias(self.h)
        else:
            raise SystemExit(f"--rows {name!r} is invalid; accepted: {', '.join(ROWS)}")
        self.bm = self.block_mask()

    def block_mask(self):
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(self.mask_mod, None, None, self.n, self.n, device=self.device)

    # mods_gpu.dense_reference reads the mods through these (functions of broadcast index tensors)
    def score_fn(self, tensors):
        return self.score_mod

    def mask_fn(self, tensors):
        return self.mask_mod


class Impl:
    """One flex_attention (tilegen's or torch's compiled) on the row's tensors and mods."""

    def __init__(self, name, fn, row, q, k, v, do):
        self.name, self.fn, self.row, self.do = name, fn, row, do
        self.q, self.k, self.v = (x.detach().clone().requires_grad_(True) for x in (q, k, v))
        self.o = self.call(False)

    def call(self, inside):
        bm = self.row.block_mask() if inside else self.row.bm
        return self.fn(self.q, self.k, self.v, score_mod=self.row.score_mod, block_mask=bm)

    def phase(self, name):
        import torch

        leaves = (self.q, self.k, self.v)
        return {
            "fwd": lambda: self.call(False),
            "fwd_in": lambda: self.call(True),
            "bwd": lambda: torch.autograd.grad(self.o, leaves, self.do, retain_graph=True),
            "fwdbwd": lambda: torch.autograd.grad(self.call(False), leaves, self.do),
            "fwdbwd_in": lambda: torch.autograd.grad(self.call(True), leaves, self.do),
        }[name]

    def outputs(self):
        """[O, dQ, dK, dV], {} (mods_gpu.check's form)."""
        import torch

        o = self.call(False)
        return [o, *torch.autograd.grad(o, (self.q, self.k, self.v), self.do)], {}


def tilegen_flex():
    import tilegen.torch as tt

    return tt.flex_attention


def describe(row, q, k, v):
    """tilegen's plan for the row on a CUDA tensor's path (on any device: the Triton module is generated
    and imported, nothing launched): tiles, the module's mask, the fraction of tile pairs the forward
    visits (from the BlockMask's classes)."""
    from tilegen.torch.flex import flex_plan

    plan, table = flex_plan(q, k, v, row.score_mod, row.bm, triton=True)
    tiles = {kind: list(t) for kind, t in getattr(plan.module, "TILE_SIZES", {}).items()}
    visited = None
    if table is not None and tiles:
        lists = table.tile_lists(plan.module, "fwd", plan.structure, (1, row.h, row.n, row.n))
        visited = float(lists["BM_kvn"].sum()) / (lists["BM_kvn"].numel() * -(-row.n // tiles["fwd"][1]))
    return {
        "tiles": tiles,
        "mask": "table" if plan.table_slot >= 0 else "mask_mod",
        "mask_text": plan.call.mask_mod,
        "score_text": plan.call.score_mod,
        "visited": visited,
    }


def inputs(row, seed=0):
    import torch

    g = torch.Generator(device=row.device).manual_seed(seed)
    shape = (1, row.h, row.n, row.d)
    return [torch.randn(shape, generator=g, device=row.device, dtype=torch.float32).to(torch.bfloat16) for _ in range(4)]


def run_row(row, args, log):
    import torch

    q, k, v, do = inputs(row)
    rec = {"row": row.name, "D": row.d, "N": row.n, "H": row.h, "results": {}}
    rec["mask_ms"] = bench(row.block_mask, args.warmup, args.rep)
    impls = {}
    for name, fn in (("tilegen", tilegen_flex()), ("flex", compiled_flex())):
        t0 = time.time()
        try:
            impl = impls[name] = Impl(name, fn, row, q, k, v, do)
            res = {p: bench(impl.phase(p), args.warmup, args.rep) for p in PHASES}
            res["setup_s"] = time.time() - t0
            rec["results"][name] = res
        except Exception as exc:  # noqa: BLE001  (a row records its failure and the run goes on)
            rec["results"][name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            log(f"  {name}: {type(exc).__name__}: {str(exc)[:300]}")
            if args.debug:
                traceback.print_exc()
        torch.cuda.empty_cache()
    try:
        rec["tilegen"] = describe(row, q, k, v)
    except Exception as exc:  # noqa: BLE001  (recorded in the row)
        rec["tilegen"] = {"error": f"{type(exc).__name__}: {exc}"}
    if len(impls) == 2 and not args.no_check:
        try:
            rec["check"] = check(row, q, k, v, do, {}, impls["tilegen"], impls["flex"])
        except Exception as exc:  # noqa: BLE001  (a row records its failure and the run goes on)
            rec["check"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            if args.debug:
                traceback.print_exc()
    del impls
    torch.cuda.empty_cache()
    return rec


def markdown(rows, meta):
    lines = [
        f"# tilegen.torch.flex_attention vs compiled flex_attention on {meta['device']}",
        "",
        (
            f"torch {meta['torch']}, triton {meta['triton']}; bf16, B = 1, N = {rows[0]['N'] if rows else TOKENS}, H·D = {HIDDEN}; the same "
            "attention-gym score_mod and BlockMask for both; `triton.testing.do_bench` medians in ms (warm-up "
            f"{meta['warmup']} ms, {meta['rep']} ms of repetitions). out: BlockMask prebuilt; in: `create_block_mask` inside the timed "
            "call (mask: its time alone). speed-up = flex ms / tilegen ms (≥ 1: tilegen faster). visited: fraction of tile pairs "
            "tilegen's forward visits; mask: the module's mask (mask_mod alone, or reading the class table). check: tilegen's "
            "errors within twice flex's (vs dense fp32 torch, batch 0, head 0)."
        ),
        f"Command: `{meta['command']}`",
        "",
        (
            "| row | D | tilegen fwd | bwd | f+b | flex fwd | bwd | f+b | speed-up fwd | bwd | f+b | mask ms | tilegen fwd in | f+b in | "
            "flex fwd in | f+b in | speed-up fwd in | f+b in | tiles fwd/bwd | mask | visited | check |"
        ),
        "|" + "---|" * 22,
    ]
    for r in rows:
        t = [ms(r, "tilegen", p) for p in PHASES]
        f = [ms(r, "flex", p) for p in PHASES]
        up = [b / a if a and b else None for a, b in zip(t, f)]
        chk = r.get("check", {})
        ok = "–" if not chk or "error" in chk else ("ok" if all(v["ok"] for v in chk.values()) else "FAIL " + ",".join(k for k, v in chk.items() if not v["ok"]))
        desc = r.get("tilegen", {})
        tiles = desc.get("tiles", {})
        tiles_txt = "/".join("×".join(map(str, tiles[k])) for k in ("fwd", "bwd") if k in tiles) or "–"
        lines.append(
            f"| {r['row']} | {r['D']} | {fmt(t[0], 3)} | {fmt(t[2], 3)} | {fmt(t[3], 3)} | {fmt(f[0], 3)} | {fmt(f[2], 3)} | {fmt(f[3], 3)} | "
            f"{fmt(up[0])} | {fmt(up[2])} | {fmt(up[3])} | {fmt(r.get('mask_ms'), 3)} | {fmt(t[1], 3)} | {fmt(t[4], 3)} | {fmt(f[1], 3)} | "
            f"{fmt(f[4], 3)} | {fmt(up[1])} | {fmt(up[4])} | {tiles_txt} | {desc.get('mask', '–')} | {fmt(desc.get('visited'), 3)} | {ok} |"
        )
    return "\n".join(lines) + "\n"


def write_results(args, rows):
    """flex_gym.json and flex_gym.md into ``args.out`` (mods_gpu's writer with this script's table)."""
    return _write_results(args, rows, "flex_gym", markdown)


def list_rows(rows, log):
    """The rows on the CPU: each BlockMask built by torch, tilegen's plan for a CUDA call (the module
    generated and imported, nothing launched)."""
    import torch

    for row in rows:
        t0 = time.time()
        q, k, v = (torch.zeros(1, row.h, row.n, row.d, dtype=torch.bfloat16) for _ in range(3))
        desc = describe(row, q, k, v)
        log(
            f"{row.name} D={row.d} N={row.n} H={row.h}: BlockMask {tuple(row.bm.shape)} blocks {row.bm.BLOCK_SIZE} sparsity "
            f"{row.bm.sparsity():.1f}%; tilegen tiles {desc['tiles']}, mask {desc['mask']}, visited {fmt(desc['visited'], 3)}; "
            f"score_mod {desc['score_text'][:60] or '-'!r}; {time.time() - t0:.1f} s"
        )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(HERE / "results"), help="folder for flex_gym.json/.md")
    parser.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    parser.add_argument("--dims", nargs="+", type=int, default=[64, 128], choices=[64, 128])
    parser.add_argument("--n", type=int, default=TOKENS, help="sequence length (B = 1; natten: a square)")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--rep", type=int, default=100)
    parser.add_argument("--no-check", action="store_true", help="skip the dense fp32 check")
    parser.add_argument("--list", action="store_true", help="on the CPU: build the mods, BlockMasks and tilegen's plans, time nothing")
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    device = "cpu" if args.list else "cuda"
    rows = [Row(name, d, args.n, device) for d in args.dims for name in args.rows]
    if args.list:
        list_rows(rows, log)
        return 0
    out = []
    for row in rows:
        t0 = time.time()
        rec = run_row(row, args, log)
        out.append(rec)
        write_results(args, out)  # after every row: a run cut short keeps what it measured
        t, f = ms(rec, "tilegen", "fwdbwd"), ms(rec, "flex", "fwdbwd")
        log(f"{row.name} D={row.d}: tilegen f+b {fmt(t, 3)} ms, flex {fmt(f, 3)} ms; {time.time() - t0:.0f} s")
    print(write_results(args, out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
