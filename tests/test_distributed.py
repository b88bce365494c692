"""Ring (context-parallel) attention on 2 and 4 CPU ranks (gloo, the interpreter), and the ring adapters.

Every multi-rank check runs in few process launches (one per world size, plus the failure cases): each
launch starts the ranks on one machine (torch.multiprocessing's fork server, which imported torch and
tilegen once: a spawned rank spends seconds importing them; a free TCP port; bounded timeouts), runs a
list of cases, and sends back every rank's outputs and gradients; the tests reassemble them and compare the whole
sequence with the single-process float64 reference (:mod:`tilegen.core.reference`, not the code under test)
under DESIGN §3's accuracy rule. The problems are tiny: the interpreter runs tile by tile in Python.

ring-flash-attention (the real package, pure Python) is run with tilegen's adapters in place of
FlashAttention's ``flash_attn.flash_attn_interface``; its package ``__init__`` imports a HuggingFace
adapter that does not import under transformers 5, so that one submodule is stubbed (it is not used).
PyTorch's ``_templated_ring_attention`` and its backward run with tilegen's SDPA-convention ops.
"""

from __future__ import annotations

import datetime
import queue as queue_mod
import socket
import sys
import time
import traceback
import types

import numpy as np
import pytest
import torch

from tilegen.core import reference
from tilegen.core.errors import SpecError
from tilegen.harness.check import compare, lse_rel_floor
from tilegen.distributed import ring_plan, shard_sequence, unshard_sequence

TIMEOUT_S = 120  # a whole launch (all ranks, all cases); a rank that hangs past it fails the test
PG_TIMEOUT_S = 20  # the process group's timeout: a rank left waiting on a dead peer raises after it

_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


# --- the launcher --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, job, args, results, pg_timeout_s: float) -> None:
    torch.set_num_threads(1)
    import torch.distributed as dist

    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=pg_timeout_s)
        )
        value = job(rank, world, *args)
        results.put((rank, "ok", value))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the launcher
        results.put((rank, "error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


_PRELOAD = ["torch", "torch._dynamo", "torch.distributed", "tilegen.api", "tilegen.torch", "tilegen.distributed", "tilegen.core.reference", "tilegen.backends.interp"]


def _context():
    """Ranks start from a fork server that imported torch and tilegen once (a fresh single-threaded
    process, not a fork of the test process): each rank then starts in a fraction of a second."""
    ctx = torch.multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def run_ranks(world: int, job, *args, timeout_s: float = TIMEOUT_S, pg_timeout_s: float = PG_TIMEOUT_S, wait_all: bool = False):
    """Run ``job(rank, world, *args)`` on ``world`` spawned gloo ranks; return {rank: value}.

    A rank that raises fails the launch with its error (RuntimeError naming the rank and the error);
    the other ranks are stopped at once unless ``wait_all``, which instead collects every rank's own
    outcome (each bounded by the process group's timeout) and returns {rank: ("error", message)} for
    the failed ones. A launch past ``timeout_s`` stops every rank and raises TimeoutError.
    """
    ctx = _context()
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, job, args, results, pg_timeout_s), daemon=True) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout_s
    outcome: dict = {}
    try:
        while len(outcome) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"ranks {sorted(set(range(world)) - set(outcome))} did not finish in {timeout_s} s")
            try:
                item = results.get(timeout=min(left, 1.0))
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in outcome]
                if dead:
                    raise RuntimeError(f"rank {dead[0]} exited with code {procs[dead[0]].exitcode} without a result")
                continue
            rank, status = item[0], item[1]
            if status == "error":
                if not wait_all:
                    raise RuntimeError(f"rank {rank} failed: {item[2]}\n{item[3]}")
                outcome[rank] = ("error", item[2])
            else:
                outcome[rank] = item[2]
        return outcome
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)


# --- the cases -----------------------------------------------------------------------------------


def _global_inputs(case: dict):
    """The whole-sequence q, k, v, dO (BSND, the case's dtype) from the case's seed."""
    g = torch.Generator().manual_seed(case["seed"])
    w, b, hq, hkv, d = case["world"], case["b"], case["hq"], case["hkv"], case["d"]
    sq, sk = w * case["nq"], w * case["nk"]
    dt = _DTYPES[case["dtype"]]
    mk = lambda *shape: torch.randn(*shape, generator=g).to(dt)  # noqa: E731
    return mk(b, sq, hq, d), mk(b, sk, hkv, d), mk(b, sk, hkv, d), mk(b, sq, hq, d)


def _to_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x if layout == "BSND" else x.transpose(1, 2).contiguous()


def _from_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    return x if layout == "BSND" else x.transpose(1, 2)


def _ring_case(rank: int, world: int, case: dict) -> dict:
    """One case on this rank: the local out, lse and gradients (float32 numpy, in the case's layout):
    the global tensors are put in the case's layout first and sharded in it."""
    from tilegen.distributed import ring_attention

    layout, balance = case["layout"], case["balance"]
    local = [shard_sequence(_to_layout(x, layout), rank, world, layout=layout, balance=balance) for x in _global_inputs(case)]
    ql, kl, vl = (x.requires_grad_() for x in local[:3])
    out, lse = ring_attention(
        ql, kl, vl, causal=case["causal"], window_size=case["window"], layout=layout, balance=balance, return_lse=True,
    )
    out.backward(local[3])
    as_np = lambda x: x.detach().float().numpy().copy()  # noqa: E731
    return {"out": as_np(out), "lse": as_np(lse), "dq": as_np(ql.grad), "dk": as_np(kl.grad), "dv": as_np(vl.grad)}


def _ring_cases(rank: int, world: int, cases: list) -> dict:
    return {c["name"]: _ring_case(rank, world, c) for c in cases}


def _transfer_order(rank: int, world: int) -> list:
    """The order of transfers and kernels on this rank in one causal zigzag ring, forward and backward:
    ("start", names) when a transfer is posted, ("wait", names) when it is waited for, ("fwd" | "bwd")
    for a kernel call."""
    from tilegen import distributed, torch as tt

    events = []
    real = {n: getattr(tt, n) for n in ("attention_forward", "attention_backward")}
    start, wait = distributed._Ring.start, distributed._Ring.wait

    def logged_start(self, tensors):
        received, pending = start(self, tensors)
        events.append(("start", tuple(tensors)))
        return received, (pending, tuple(tensors))

    def logged_wait(pending):
        events.append(("wait", pending[1]))
        wait(pending[0])

    try:
        tt.attention_forward = lambda *a, **kw: events.append(("fwd",)) or real["attention_forward"](*a, **kw)
        tt.attention_backward = lambda *a, **kw: events.append(("bwd",)) or real["attention_backward"](*a, **kw)
        distributed._Ring.start, distributed._Ring.wait = logged_start, staticmethod(logged_wait)
        q = torch.randn(1, 8, 2, 16, requires_grad=True)
        distributed.ring_attention(q, q, q, causal=True, layout="BSND").sum().backward()
    finally:
        for n, f in real.items():
            setattr(tt, n, f)
        distributed._Ring.start, distributed._Ring.wait = start, staticmethod(wait)
    return events


def _two_rank_job(rank: int, world: int, cases: list) -> dict:
    return dict(_ring_cases(rank, world, cases), order=_transfer_order(rank, world))


def _case(name, world, *, balance="zigzag", causal=False, window=(-1, -1), layout="BSND", dtype="fp32", b=1, hq=2, hkv=2, nq=8, nk=None, d=16, seed=0):
    return dict(name=name, world=world, balance=balance, causal=causal, window=window, layout=layout, dtype=dtype, b=b, hq=hq, hkv=hkv, nq=nq, nk=nk or nq, d=d, seed=seed)


CASES_2 = [
    _case("causal-zigzag-gqa", 2, causal=True, hq=4, hkv=2, seed=1),
    _case("causal-zigzag-gqa-bnsd", 2, causal=True, hq=4, hkv=2, layout="BNSD", seed=9),
    _case("causal-plain-bnsd", 2, causal=True, balance="plain", layout="BNSD", seed=2),
    _case("full-zigzag-fp16", 2, dtype="fp16", seed=3),
    _case("causal-plain-sk-gt-sq", 2, causal=True, balance="plain", nq=4, nk=8, seed=4),
    _case("window-zigzag", 2, causal=True, window=(3, 0), seed=5),
]
CASES_4 = [
    _case("causal-zigzag-gqa", 4, causal=True, hq=2, hkv=1, nq=4, seed=6),
    _case("window-plain-both-sides", 4, balance="plain", window=(5, 2), nq=4, seed=8),
    _case("window-zigzag-gqa-bnsd", 4, causal=True, window=(5, 0), hq=2, hkv=1, nq=4, layout="BNSD", seed=10),
]


def _check_case(case: dict, per_rank: dict) -> list[str]:
    """The reassembled outputs and gradients (unsharded in the case's layout) against the float64
    reference (DESIGN §3's rule)."""
    balance, layout = case["balance"], case["layout"]
    whole = {
        n: _from_layout(unshard_sequence([torch.from_numpy(per_rank[r][n]) for r in range(case["world"])], layout=layout, balance=balance), layout).numpy()
        for n in ("out", "dq", "dk", "dv")
    }
    whole["lse"] = unshard_sequence([torch.from_numpy(per_rank[r]["lse"]) for r in range(case["world"])], balance=balance, seq_dim=2).numpy()
    q, k, v, do = (x.float().numpy().transpose(0, 2, 1, 3) for x in _global_inputs(case))
    window = (case["window"][0], 0) if case["causal"] else case["window"]
    kw = dict(scale=1.0 / np.sqrt(case["d"]), window=window, alignment="bottom_right")
    o_ref, l_ref = reference.forward(q, k, v, **kw)
    o_pl, l_pl = reference.plain_forward(q, k, v, dtype=case["dtype"], **kw)
    grads_ref = reference.backward(q, k, v, do, **kw)
    grads_pl = reference.plain_backward(q, k, v, do, dtype=case["dtype"], **kw)
    n = case["world"] * max(case["nq"], case["nk"])
    t = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  BSND -> BNSD
    comps = [
        compare("O", t(whole["out"]), o_ref, o_pl, case["dtype"], terms=n),
        compare("L", whole["lse"], l_ref, l_pl, "fp32", terms=n),
    ]
    rel_floor = lse_rel_floor(l_ref)
    for name, r, p in zip(("dq", "dk", "dv"), grads_ref, grads_pl):
        comps.append(compare(name, t(whole[name]), r, p, case["dtype"], rel_floor=rel_floor, terms=n))
    return [f"{case['name']}: {c.line()}" for c in comps if not c.ok]


@pytest.fixture(scope="module")
def two_ranks():
    start = time.monotonic()
    # Case 0 twice: the second run must match the first bit for bit (determinism).
    again = dict(CASES_2[0], name="again")
    result = run_ranks(2, _two_rank_job, CASES_2 + [again])
    print(f"2-rank launch: {time.monotonic() - start:.1f} s")
    return result


@pytest.fixture(scope="module")
def four_ranks():
    start = time.monotonic()
    result = run_ranks(4, _ring_cases, CASES_4)
    print(f"4-rank launch: {time.monotonic() - start:.1f} s")
    return result


@pytest.mark.parametrize("case", CASES_2, ids=[c["name"] for c in CASES_2])
def test_ring_two_ranks(two_ranks, case):
    failures = _check_case(case, {r: two_ranks[r][case["name"]] for r in two_ranks})
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("case", CASES_4, ids=[c["name"] for c in CASES_4])
def test_ring_four_ranks(four_ranks, case):
    failures = _check_case(case, {r: four_ranks[r][case["name"]] for r in four_ranks})
    assert not failures, "\n".join(failures)


def test_ring_deterministic(two_ranks):
    for r in two_ranks:
        first, second = two_ranks[r][CASES_2[0]["name"]], two_ranks[r]["again"]
        for name in first:
            assert np.array_equal(first[name], second[name]), f"rank {r}: {name} differs between two runs"


def test_next_block_is_posted_before_the_kernel(two_ranks):
    """Forward: each step posts the next K/V transfer, runs its kernel, then waits. Backward: the same
    for K/V, with the block's dK/dV accumulators waited for after its kernel and posted on."""
    kv, dkv = ("k", "v"), ("dk", "dv")
    forward = [("start", kv), ("fwd",), ("wait", kv), ("fwd",)]
    # step 0: post K/V, kernel, post the block's dK/dV, wait for K/V; step 1 (the last): kernel, wait
    # for this block's dK/dV from the previous rank, add, post them on; then wait for our own block's.
    backward = [("start", kv), ("bwd",), ("start", dkv), ("wait", kv), ("bwd",), ("wait", dkv), ("start", dkv), ("wait", dkv)]
    for r in two_ranks:
        assert two_ranks[r]["order"] == forward + backward, (r, two_ranks[r]["order"])


# --- failures: every rank fails with the error, none hangs ------------------------------------------


def _bad_shape_on_rank_1(rank: int, world: int) -> None:
    from tilegen.distributed import ring_attention

    n = 6 if rank == 1 else 8
    q = torch.randn(1, n, 2, 16)
    ring_attention(q, q, q, causal=True, layout="BSND")


def _raise_inside_ring_on_rank_1(rank: int, world: int) -> None:
    """Rank 1's kernel raises at its second ring step; rank 0 is left waiting for its block."""
    from tilegen import distributed, torch as tt

    real = tt.attention_forward
    calls = []

    def failing(*args, **kw):
        calls.append(1)
        if rank == 1 and len(calls) == 2:
            raise RuntimeError("kernel failure on rank 1")
        return real(*args, **kw)

    tt.attention_forward = failing
    q = torch.randn(1, 8, 2, 16, requires_grad=True)
    out = distributed.ring_attention(q, q, q, causal=True, layout="BSND", balance="plain")
    out.sum().backward()  # rank 0 waits here for rank 1's dK/dV accumulators


def test_argument_error_reaches_every_rank():
    start = time.monotonic()
    outcome = run_ranks(2, _bad_shape_on_rank_1, wait_all=True)
    assert time.monotonic() - start < TIMEOUT_S
    for r in (0, 1):
        status, message = outcome[r]
        assert status == "error"
        assert "SpecError: ring_attention on rank 1:" in message or "SpecError: ring_attention: arguments on rank 1" in message, message
        assert "\n" not in message


def test_failure_inside_the_ring_fails_every_rank_within_the_timeout():
    start = time.monotonic()
    outcome = run_ranks(2, _raise_inside_ring_on_rank_1, wait_all=True, pg_timeout_s=5)
    elapsed = time.monotonic() - start
    assert outcome[1] == ("error", "RuntimeError: kernel failure on rank 1")
    assert outcome[0][0] == "error" and "gloo" in outcome[0][1].lower(), outcome[0]  # the transport's error, not a hang
    assert elapsed < 60, elapsed


def test_launcher_reports_the_failing_rank():
    with pytest.raises(RuntimeError, match="rank 1 failed: RuntimeError: kernel failure on rank 1"):
        run_ranks(2, _raise_inside_ring_on_rank_1, pg_timeout_s=5)


# --- the plan (no processes) ----------------------------------------------------------------------


def test_causal_zigzag_plan_is_one_call_per_step():
    """Zigzag causal over 4 ranks: one call a step, the shapes ring-flash-attention uses (whole chunk
    causal at step 0; all queries against the first half of an earlier rank's keys; the second half of
    the queries against all of a later rank's keys)."""
    n = 8
    for rank in range(4):
        for step in range(4):
            source = (rank - step) % 4
            calls = ring_plan(rank, source, 4, n, n, balance="zigzag", window=(-1, 0))
            assert len(calls) == 1
            c = calls[0]
            if source == rank:
                assert (c.q0, c.q1, c.k0, c.k1, c.window) == (0, n, 0, n, (-1, 0))
            elif source < rank:
                assert (c.q0, c.q1, c.k0, c.k1, c.window) == (0, n, 0, n // 2, (-1, -1))
            else:
                assert (c.q0, c.q1, c.k0, c.k1, c.window) == (n // 2, n, 0, n, (-1, -1))


def test_plain_causal_plan_skips_later_blocks():
    assert ring_plan(0, 1, 2, 8, 8, balance="plain", window=(-1, 0)) == ()
    assert ring_plan(1, 0, 2, 8, 8, balance="plain", window=(-1, 0))[0].window == (-1, -1)


def test_plan_masks_equal_the_global_mask():
    """Every plan, cell by cell, against the global mask of reference.visible (windows, zigzag and
    plain, Sk > Sq)."""
    for world in (2, 3, 4):
        for balance in ("plain", "zigzag"):
            for nq, nk in ((4, 4), (4, 8), (6, 2)):
                for window in ((-1, 0), (3, 0), (2, 5), (-1, -1), (0, 0), (5, -1)):
                    ok = reference.visible(world * nq, world * nk, window, "bottom_right")
                    qpos = torch.arange(world * nq).reshape(1, -1)
                    kpos = torch.arange(world * nk).reshape(1, -1)
                    for rank in range(world):
                        rows = shard_sequence(qpos, rank, world, balance=balance, seq_dim=1).flatten().numpy()
                        for source in range(world):
                            cols = shard_sequence(kpos, source, world, balance=balance, seq_dim=1).flatten().numpy()
                            want = ok[np.ix_(rows, cols)]
                            got = np.zeros_like(want)
                            for c in ring_plan(rank, source, world, nq, nk, balance=balance, window=window):
                                block = reference.visible(c.q1 - c.q0, c.k1 - c.k0, c.window, "top_left")
                                assert block.any(axis=1)[0], (rank, source, c)  # the kernel's spec needs a non-empty row
                                assert not (got[c.q0:c.q1, c.k0:c.k1] & block).any(), "two calls cover one cell"
                                got[c.q0:c.q1, c.k0:c.k1] |= block
                            assert np.array_equal(got, want), (world, balance, nq, nk, window, rank, source)


# --- the adapters ---------------------------------------------------------------------------------


def _install_flash_attn_stub() -> None:
    """tilegen's adapters as ``flash_attn.flash_attn_interface`` (ring-flash-attention's import)."""
    from tilegen import torch as tt

    def varlen(*args, **kwargs):
        raise NotImplementedError("the varlen entry points are not adapted")

    interface = types.ModuleType("flash_attn.flash_attn_interface")
    interface._flash_attn_forward = tt.flash_attn_forward
    interface._flash_attn_backward = tt.flash_attn_backward
    interface._flash_attn_varlen_forward = interface._flash_attn_varlen_backward = varlen
    package = types.ModuleType("flash_attn")
    package.flash_attn_interface = interface
    adapters = types.ModuleType("ring_flash_attn.adapters")  # imports transformers-4 names; unused here
    adapters.substitute_hf_flash_attn = adapters.update_ring_flash_attn_params = varlen
    sys.modules.update({"flash_attn": package, "flash_attn.flash_attn_interface": interface, "ring_flash_attn.adapters": adapters})


def _adapter_cases(rank: int, world: int) -> dict:
    """ring-flash-attention's zigzag and plain rings and PyTorch's templated ring, on tilegen kernels."""
    _install_flash_attn_stub()
    import ring_flash_attn
    from torch.distributed.tensor.experimental import _attention as cp
    from torch.distributed.tensor.experimental._context_parallel._attention import _templated_ring_attention_backward
    import torch.distributed as dist
    from tilegen import torch as tt

    results = {}
    as_np = lambda x: x.detach().float().numpy().copy()  # noqa: E731
    for name, fn, balance in (("rfa-zigzag", ring_flash_attn.zigzag_ring_flash_attn_func, "zigzag"), ("rfa-plain", ring_flash_attn.ring_flash_attn_func, "plain")):
        # fp16, as FlashAttention takes: with fp32 inputs ring-flash-attention's dq = dq_buffer.to(float32)
        # is the buffer itself, which its next block's backward overwrites.
        case = _case(name, world, causal=True, balance=balance, hq=4, hkv=2, dtype="fp16", seed=11)
        q, k, v, do = _global_inputs(case)
        ql, kl, vl = (shard_sequence(x, rank, world, layout="BSND", balance=balance).requires_grad_() for x in (q, k, v))
        out = fn(ql, kl, vl, causal=True)
        out.backward(shard_sequence(do, rank, world, layout="BSND", balance=balance))
        results[name] = {"out": as_np(out), "lse": None, "dq": as_np(ql.grad), "dk": as_np(kl.grad), "dv": as_np(vl.grad)}
    # PyTorch's templated ring (BNSD; seq_dim 2); its load balancer is the zigzag (head-tail) order.
    case = _case("torch-templated", world, causal=True, balance="zigzag", seed=12)
    q, k, v, do = _global_inputs(case)
    ql, kl, vl, dol = (shard_sequence(x.transpose(1, 2), rank, world, layout="BNSD", balance="zigzag") for x in (q, k, v, do))
    group = dist.group.WORLD
    out, lse = cp._templated_ring_attention(group, 2, tt.sdpa_ring_forward_op, ql, kl, vl, is_causal=True)
    dq, dk, dv = _templated_ring_attention_backward(group, 2, tt.sdpa_ring_backward_op, dol, "grad_out", ql, kl, vl, out, lse, True)
    t = lambda x: as_np(x.transpose(1, 2))  # noqa: E731
    results["torch-templated"] = {"out": t(out), "lse": as_np(lse), "dq": t(dq), "dk": t(dk), "dv": t(dv)}
    return results


@pytest.fixture(scope="module")
def adapter_ranks():
    import importlib.util

    if importlib.util.find_spec("ring_flash_attn") is None:  # it imports flash_attn at import: find, not import
        pytest.skip("ring-flash-attn is not installed (pip install ring-flash-attn==0.1.8)")
    start = time.monotonic()
    result = run_ranks(2, _adapter_cases)
    print(f"adapter launch: {time.monotonic() - start:.1f} s")
    return result


@pytest.mark.parametrize("name,balance", [("rfa-zigzag", "zigzag"), ("rfa-plain", "plain"), ("torch-templated", "zigzag")])
def test_ring_adapters(adapter_ranks, name, balance):
    rfa = name.startswith("rfa")
    case = _case(name, 2, causal=True, balance=balance, hq=4 if rfa else 2, hkv=2, dtype="fp16" if rfa else "fp32", seed=11 if rfa else 12)
    per_rank = {r: dict(adapter_ranks[r][name]) for r in adapter_ranks}
    if per_rank[0]["lse"] is None:  # ring-flash-attention returns no lse: check out and gradients
        for r in per_rank:
            per_rank[r]["lse"] = np.zeros((case["b"], case["hq"], case["nq"]), dtype=np.float32)
        failures = [f for f in _check_case(case, per_rank) if not f.startswith(f"{name}: L ")]
    else:
        failures = _check_case(case, per_rank)
    assert not failures, "\n".join(failures)


# --- one rank in this process: the refusals, and W = 1 against the reference -------------------------


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=PG_TIMEOUT_S))
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_ring_refusals_are_one_line(one_rank_group):
    from tilegen.distributed import ring_attention

    q = torch.randn(1, 6, 2, 16)
    cases = [
        (dict(layout=None), "layout is missing; accepted: 'BSND' ([B, S, H, D]) or 'BNSD' ([B, H, S, D])"),
        (dict(balance="spiral"), "balance = 'spiral' is invalid; accepted: 'zigzag' or 'plain'"),
        (dict(layout="SBND"), "layout = 'SBND' is invalid; accepted: 'BSND' or 'BNSD'"),
        (dict(causal=True, window_size=(4, 2)), "window_size = (4, 2) is invalid; accepted: right = -1 or 0 when causal=True"),
        (dict(deterministic="yes"), "deterministic = 'yes' is invalid; accepted: True or False"),
        (dict(target="ascend910b2"), "target = 'ascend910b2' is invalid; accepted: a GPU target"),
    ]
    for kw, message in cases:
        with pytest.raises(SpecError) as exc:
            ring_attention(q, q, q, **{"layout": "BSND", **kw})
        text = str(exc.value)
        assert text.startswith("ring_attention on rank 0: " + message) and "\n" not in text, text
    with pytest.raises(SpecError, match=r"^ring_attention on rank 0: q.shape = .* even local lengths of q and k for balance='zigzag'"):
        ring_attention(q[:, :5], q[:, :5], q[:, :5], layout="BSND")
    with pytest.raises(SpecError, match=r"^ring_attention on rank 0: layout is missing"):
        ring_attention(q, q, q)  # no layout: refused, not taken as BSND


def test_ring_refuses_shapes_of_the_other_layout(one_rank_group):
    """BNSD tensors stated as BSND (and the reverse) whose shapes cannot be the stated layout: one line
    naming the layout they fit. Before the layout was required, ring_attention(q, k, v) took them as
    BSND and attended over the heads."""
    from tilegen.distributed import ring_attention

    g = torch.Generator().manual_seed(3)
    # GQA in BNSD: q [1, 4, 6, 16] (4 heads, Sq 6), k/v [1, 1, 8, 16] (1 head, Sk 8); as BSND k would have
    # 8 heads, which do not divide q's 6.
    q = torch.randn(1, 4, 6, 16, generator=g)
    k = torch.randn(1, 1, 8, 16, generator=g)
    with pytest.raises(SpecError) as exc:
        ring_attention(q, k, k, causal=True, layout="BSND")
    text = str(exc.value)
    assert "\n" not in text and text.startswith("ring_attention on rank 0: k.shape = (1, 1, 8, 16) is invalid") and "fit layout='BNSD'" in text, text
    # The same tensors as BSND given as BNSD: refused naming BSND.
    qs, ks = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()
    with pytest.raises(SpecError, match=r"fit layout='BSND': are q, k, v BSND\?$"):
        ring_attention(qs, ks, ks, causal=True, layout="BNSD")
    # Zigzag: an odd length in the stated sequence dim (BNSD's 5), even in the other's (BSND's 2).
    q = torch.randn(1, 2, 5, 16, generator=g)
    with pytest.raises(SpecError, match=r"even local lengths .* fit layout='BSND'"):
        ring_attention(q, q, q, layout="BNSD")


# --- shard_sequence / unshard_sequence in both layouts (no processes) ---------------------------------


def _positions(b: int, h: int, s: int, layout: str) -> torch.Tensor:
    """A global tensor whose entry at (batch i, head j, position p, feature f) is 1000 i + 100 j + p
    (f: 2 features), in ``layout``."""
    x = torch.arange(s).view(1, 1, s, 1) + 100 * torch.arange(h).view(1, h, 1, 1) + 1000 * torch.arange(b).view(b, 1, 1, 1)
    x = x.expand(b, h, s, 2).contiguous()
    return x if layout == "BNSD" else x.transpose(1, 2).contiguous()


@pytest.mark.parametrize("layout", ["BSND", "BNSD"])
@pytest.mark.parametrize("balance", ["zigzag", "plain"])
def test_shard_sequence_cuts_the_sequence_of_the_stated_layout(layout, balance):
    """Each rank's chunk holds the positions the balance rule gives it (chunks r and 2W-1-r of 2W, or
    chunk r of W), every head and batch untouched; unshard_sequence puts them back."""
    b, h, s, world = 2, 3, 24, 3
    x = _positions(b, h, s, layout)
    n = s // world
    chunks = []
    for rank in range(world):
        got = shard_sequence(x, rank, world, layout=layout, balance=balance)
        if balance == "plain":
            want_pos = list(range(rank * n, (rank + 1) * n))
        else:
            half = n // 2
            want_pos = list(range(rank * half, (rank + 1) * half)) + list(range((2 * world - 1 - rank) * half, (2 * world - rank) * half))
        want = _positions(b, h, s, "BNSD")[:, :, want_pos]
        assert torch.equal(got.transpose(1, 2) if layout == "BSND" else got, want), (layout, balance, rank)
        chunks.append(got)
    assert torch.equal(unshard_sequence(chunks, layout=layout, balance=balance), x)


def test_shard_sequence_refusals_are_one_line():
    bnsd = torch.zeros(1, 3, 8, 16)  # 3 heads, 8 positions: BSND would be 3 positions of 8 heads
    cases = [
        # 4 heads split over 2 zigzag ranks without a word before the layout was required:
        (lambda: shard_sequence(torch.zeros(1, 4, 8, 16), 0, 2), r"^shard_sequence: layout is missing; accepted: 'BSND' \(\[B, S, H, D\]\) or 'BNSD' \(\[B, H, S, D\]\), or seq_dim=N"),
        (lambda: shard_sequence(bnsd, 0, 2, layout="BSND", balance="plain"),
         r"^shard_sequence: x.shape = \(1, 3, 8, 16\) is invalid; accepted: a length along BSND's sequence dim 1 that is a positive multiple of 2 .* is the tensor BNSD\?$"),
        (lambda: shard_sequence(torch.zeros(1, 2, 3, 16), 0, 4, layout="BSND", balance="plain"), r"^shard_sequence: x.shape = \(1, 2, 3, 16\) is invalid; accepted: .*positive multiple of 4"),
        (lambda: shard_sequence(torch.zeros(1, 0, 3, 16), 0, 1, layout="BSND", balance="plain"), r"^shard_sequence: x.shape = \(1, 0, 3, 16\) is invalid"),
        (lambda: shard_sequence(bnsd, 0, 2, layout="SBND"), r"^shard_sequence: layout = 'SBND' is invalid; accepted: 'BSND' or 'BNSD'$"),
        (lambda: shard_sequence(bnsd, 0, 2, layout="BNSD", seq_dim=2), r"^shard_sequence: seq_dim = 2 is invalid; accepted: None when layout is given"),
        (lambda: shard_sequence(torch.zeros(2, 8), 0, 2, layout="BNSD"), r"^shard_sequence: layout = 'BNSD' is invalid; accepted: a layout of 4 dimensions .*seq_dim=N"),
        (lambda: shard_sequence(torch.zeros(2, 8), 0, 2, seq_dim=2), r"^shard_sequence: seq_dim = 2 is invalid; accepted: an int in \[-2, 2\)"),
        (lambda: unshard_sequence([bnsd, bnsd]), r"^unshard_sequence: layout is missing"),
        (lambda: unshard_sequence([bnsd, bnsd[:, :2]], layout="BNSD"), r"^unshard_sequence: chunks = .* chunks of one shape"),
        (lambda: unshard_sequence([bnsd[:, :, :3]] * 2, layout="BNSD"), r"^unshard_sequence: chunks = .* positive even local length along dim 2 \(zigzag\)"),
    ]
    for call, pattern in cases:
        with pytest.raises(SpecError, match=pattern) as exc:
            call()
        assert "\n" not in str(exc.value)


def test_one_rank_ring_is_the_whole_attention(one_rank_group):
    from tilegen.distributed import ring_attention

    case = _case("one", 1, causal=True, hq=2, hkv=1, nq=8, seed=21)
    result = {0: _ring_case(0, 1, case)}
    failures = _check_case(case, result)
    assert not failures, "\n".join(failures)
