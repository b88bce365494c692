"""The Ascend C backend: generated kernels compiled with g++ against the CPU twin, run, and compared
with the interpreter and the float64 reference (DESIGN §3's rule)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from helpers import assert_backward_ok, assert_forward_ok, inputs, make_spec, subnormal_p_case
from tilegen.backends import ascendc
from tilegen.backends.ascendc import twin
from tilegen.backends.ascendc.ops import L1Load, walk
from tilegen.backends.output import write
from tilegen.backends.interp import interpret
from tilegen.core.errors import SpecError, TargetError
from tilegen.core.spec import builtin_spec
from tilegen.backends import compile_backward, compile_forward
from tilegen.passes.ascend.one_launch import SyncAll

pytestmark = pytest.mark.skipif(twin.compiler() is None, reason="no C++ compiler for the CPU twin")


def run_on_twin(spec, run_spec=None, dq_strategy="atomic", blocks=3, target="ascend910b2", dkv_strategy=None):
    """Generate for ``spec``, run forward then backward on the twin with ``run_spec``'s sizes (same head
    dims, dtype, mask); return data, twin outputs and interpreter outputs of the same kernels."""
    run_spec = run_spec or spec
    gen = ascendc.generate(spec, target, dq_strategy=dq_strategy, dkv_strategy=dkv_strategy)
    exe = twin.build(gen.files)
    data = inputs(run_spec, seed=7)
    fwd, bwd = twin.run_attention(exe, run_spec, data, blocks=blocks)
    feeds = {"Q": data["Q"], "K": data["K"], "V": data["V"], "O": fwd["O"], "L": fwd["L"], "dO": data["dO"]}
    return data, fwd, bwd, feeds


def test_twin_harness_takes_parameters_named_like_its_locals(tmp_path):
    """twin_main.cpp names a spec's parameter arrays param_<name>: parameters called like the harness's
    locals (dir, blocks, program) or the binding's compile (g++ -fsyntax-only against the twin)."""
    import subprocess

    from helpers import host_code_names_spec

    write(ascendc.generate(host_code_names_spec(), "ascend910b2"), tmp_path)
    r = subprocess.run([twin.compiler(), "-std=c++17", "-fsyntax-only", f"-I{twin.TWIN_INCLUDE}", f"-I{tmp_path}", str(tmp_path / "twin_main.cpp")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]


CASES = {
    "causal-fp16-d64": dict(seq_q=150, seq_k=150, head_dim_qk=64, head_dim_v=64, window=(-1, 0), dtype="fp16"),
    "none-bf16-d80-tails": dict(seq_q=77, seq_k=201, head_dim_qk=80, head_dim_v=80, dtype="bf16"),
    "window-gqa-fp16-d128": dict(heads_q=4, heads_kv=2, seq_q=130, seq_k=190, head_dim_qk=128, head_dim_v=128,
                                 window=(40, 7), dtype="fp16", layout="BSND"),
    "causal-top-left-mqa-bf16": dict(heads_q=3, heads_kv=1, seq_q=96, seq_k=160, head_dim_qk=64, head_dim_v=32,
                                     window=(-1, 0), alignment="top_left", dtype="bf16"),
    "empty-rows-fp16": dict(seq_q=90, seq_k=40, head_dim_qk=64, head_dim_v=64, window=(-1, 0), dtype="fp16"),
    # keys 0-251 are seen by no query (window 8 to the left of the bottom-right diagonal): whole K/V tiles
    # whose main program runs no Q tile, so dK, dV there come from @zero_unless (atomic dK/dV)
    "empty-kv-tiles-fp16": dict(seq_q=40, seq_k=300, head_dim_qk=64, head_dim_v=64, window=(8, 0), dtype="fp16"),
    # D = 160: the backward's rowsum(dO∘O) folds two full 64-column blocks and a 32-column tail (@fold)
    "causal-fp16-d160-fold-tail": dict(seq_q=70, seq_k=90, head_dim_qk=160, head_dim_v=160, window=(-1, 0), dtype="fp16"),
}


def proven_maxima(spec, run_spec, dq_strategy="atomic") -> dict[str, int]:
    """Field -> the largest value the lowering proved for it (its obligations evaluated at run_spec's sizes)."""
    from tilegen.core.build import shape_env
    from tilegen.core.exprs import evaluate

    sizes = {str(k): v for k, v in shape_env(run_spec).items()}
    out: dict[str, int] = {}
    for plan in ascendc.plan_programs(spec, "ascend910b2", dq_strategy)[1]:
        for use in plan.uses:
            out[use.field] = max(out.get(use.field, -(2**63)), int(evaluate(use.value, sizes)))
    return out


def assert_fields_within_proof(log_path, spec, run_spec=None):
    """Every field the runtime narrowed on the twin (TWIN_FIELD_LOG) has an obligation, and the values it
    took lie in the header's range and under the proven maximum: the lowering's closed forms bound what
    the C++ helpers compute."""
    proven = proven_maxima(spec, run_spec or spec)
    seen = [ln.split() for ln in log_path.read_text().splitlines()]
    assert seen, "the twin logged no field"
    for name, lo, hi in seen:
        assert name in proven, f"{name} is narrowed by the runtime but has no proof obligation"
        rng = ascendc.FIELDS[name]
        assert rng.lo <= int(lo) and int(hi) <= rng.hi, (name, lo, hi)
        assert int(hi) <= proven[name], f"{name} reached {hi} on the twin, above the proven {proven[name]}"


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_kernels_match_reference_and_interpreter(case, tmp_path, monkeypatch):
    spec = make_spec(**CASES[case])
    monkeypatch.setenv("TWIN_FIELD_LOG", str(tmp_path / "fields.txt"))
    data, fwd, bwd, feeds = run_on_twin(spec)
    assert_fields_within_proof(tmp_path / "fields.txt", spec)
    assert_forward_ok(spec, fwd["O"], fwd["L"], data)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    # the interpreter runs the same scheduled programs: equal up to the rounding of differently ordered
    # fp32 sums (the cube accumulates k in order, NumPy's BLAS in blocks) and atomic-add order
    program = compile_forward(spec, target="ascend910b2")
    out, _ = interpret(program, {n: data[n] for n in "QKV"})
    grads, _ = interpret(compile_backward(spec, target="ascend910b2"), feeds)
    eps = 2.0**-10 if spec.dtype == "fp16" else 2.0**-7
    for name, ours, ref in [("O", fwd["O"], out["O"])] + [(n, bwd[n], grads[n]) for n in ("dQ", "dK", "dV")]:
        ours = np.asarray(ours, dtype=np.float32)
        ref = np.asarray(ref, dtype=np.float32)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=4 * eps * max(1.0, np.abs(ref).max()), err_msg=name)


@pytest.mark.slow
def test_bsnd_row_pitch_past_16_bits_runs_on_the_twin(tmp_path, monkeypatch):
    """BSND with Hq * D = 520 * 128 = 66560 > 65535: the row pitch does not fit Nd2NzParams.srcDValue
    (uint16), so the lowering loads those tiles row by row; O and the gradients pass the accuracy rule
    (a wrapped pitch gave max |O error| ~ 3.7)."""
    spec = make_spec(heads_q=520, heads_kv=520, seq_q=16, seq_k=16, head_dim_qk=128, head_dim_v=128, layout="BSND")
    monkeypatch.setenv("TWIN_FIELD_LOG", str(tmp_path / "fields.txt"))
    data, fwd, bwd, _ = run_on_twin(spec, blocks=4)
    assert_forward_ok(spec, fwd["O"], fwd["L"], data)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    assert_fields_within_proof(tmp_path / "fields.txt", spec)
    plans = ascendc.plan_programs(spec, "ascend910b2")[1]
    loads = [op for p in plans for k in p.kernels for op in walk(k.aic.ops) if isinstance(op, L1Load)]
    strided = {"g_Q", "g_K", "g_V", "g_O", "g_dO"}  # BSND tensors: row pitch 520 * 128
    assert loads and all(op.rowwise == (op.gm in strided) for op in loads), [(op.gm, op.rowwise) for op in loads]


def test_kernels_refuse_run_time_sizes_past_their_proof(tmp_path):
    """A kernel set generated for Hq = 4 (BSND, D = 128: one ND->NZ burst per tile, pitch 128 * Hq) is run
    with Hq = 520: the host refuses the sizes (TilegenRefusal in tiling.h) naming the field; without that
    host check the twin stops the wrapped field in the kernel (TILEGEN_NARROW) instead of computing a
    wrong O."""
    spec = make_spec(heads_q=4, heads_kv=4, seq_q=16, seq_k=16, head_dim_qk=128, head_dim_v=128, layout="BSND")
    big = spec.replace(heads_q=520, heads_kv=520)
    gen = ascendc.generate(spec, "ascend910b2")
    assert "Nd2NzParams.srcDValue = 128*Hq" in gen.files["tiling.h"]
    data = inputs(big, seed=1)
    feeds = {n: data[n] for n in "QKV"}
    outs = {"O": (big.logical_shapes["O"], "fp16"), "L": (big.logical_shapes["L"], "fp32")}
    layouts = {n: "BSND" for n in ("Q", "K", "V", "O")}
    exe = twin.build(gen.files, cache_dir=tmp_path / "ok")
    with pytest.raises(twin.TwinError, match=r"refused: Nd2NzParams\.srcDValue = 128\*H(q|kv) .* must be in \[1, 65535\]"):
        twin.run_program(exe, big, "fwd", feeds, outs, layouts, blocks=2, timeout=120)
    unguarded = dict(gen.files)
    unguarded["twin_main.cpp"] = unguarded["twin_main.cpp"].replace("TilegenRefusal(*tiling)", "nullptr")
    assert unguarded["twin_main.cpp"] != gen.files["twin_main.cpp"]
    exe = twin.build(unguarded, cache_dir=tmp_path / "unguarded")
    with pytest.raises(twin.TwinError, match=r"twin: Nd2NzParams\.srcDValue: value 66560 is outside the accepted range \[1, 65535\]"):
        twin.run_program(exe, big, "fwd", feeds, outs, layouts, blocks=2, timeout=120)


def test_a_planted_oversize_makes_generate_refuse(monkeypatch):
    """For every descriptor field the kernels write: shrink its accepted range to one below the largest
    value the lowering proved, and generate must refuse with one line naming the field, the value and
    the range (no field is left unchecked, no silent wrap)."""
    from dataclasses import replace

    spec = make_spec(seq_q=100, seq_k=130, head_dim_qk=64, head_dim_v=64, window=(-1, 0))
    proven = proven_maxima(spec, spec)
    assert set(proven) == set(ascendc.FIELDS), "a field of the table is never proven (or the table lacks one)"
    for name, value in sorted(proven.items()):
        rng = ascendc.FIELDS[name]
        if value - 1 < rng.lo:
            continue
        with monkeypatch.context() as m:
            m.setitem(ascendc.FIELDS, name, replace(rng, hi=value - 1))
            with pytest.raises(SpecError) as err:
                ascendc.generate(spec, "ascend910b2")
        line = str(err.value)
        assert "\n" not in line
        assert line.startswith(f"{name.replace('_', '.', 1)} = {value} is invalid; accepted: [{rng.lo}, {value - 1}]"), line


def test_a_spec_past_a_field_is_refused_in_one_line():
    """20 million BSND heads of 128: the gap between two stored rows of O, (Hq - 1) * 128 * 2 bytes, passes
    the 32-bit DataCopyExtParams.dstStride; generate refuses with one line (field, value, range)."""
    spec = make_spec(heads_q=20_000_000, heads_kv=20_000_000, seq_q=16, seq_k=16, head_dim_qk=128, head_dim_v=128,
                     layout="BSND")
    with pytest.raises(SpecError, match=r"^DataCopyExtParams\.dstStride = 5119999744 is invalid; accepted: \[0, 4294967295\] "
                                        r"\(uint32_t; include/basic_api/kernel_struct_data_copy\.h"):
        ascendc.generate(spec, "ascend910b2")


def test_descriptor_field_types_match_the_real_headers(tmp_path):
    """The C type of every struct field in FIELDS is the one the asc-devkit headers declare for arch 2201,
    and its accepted range fits that type: checked by clang against the real headers with the
    ascend-headercheck tool (ASC_CHECK = its asc_check.sh, ASC_DEVKIT, ASC_GEN; skipped without them)."""
    import os
    import subprocess

    check = os.environ.get("ASC_CHECK") or str(Path(__file__).resolve().parents[1] / "tools" / "ascend-headercheck" / "asc_check.sh")
    if not (os.environ.get("ASC_DEVKIT") and os.environ.get("ASC_GEN")) or shutil.which("clang++-16") is None:
        pytest.skip("set ASC_DEVKIT and ASC_GEN to run the real-header check (clang++-16 needed)")
    lines = ['#include "kernel_operator.h"']
    structs = 0
    for name, rng in sorted(ascendc.FIELDS.items()):
        struct, member = name.split("_", 1)
        if struct in ("VectorOp", "MaskTile", "CrossCoreSetFlag"):
            continue  # API arguments, not struct members
        structs += 1
        args = "<half>" if struct == "InitConstValueParams" else ""  # a class template over the fill type
        t = f"decltype(AscendC::{struct}{args}::{member})"
        lines.append(f'static_assert(__is_same({t}, {rng.ctype}), "{name} is not {rng.ctype}");')
        lines.append(f'static_assert(({t})(~0ULL) >= {rng.hi}ULL && {rng.lo} >= 0, "{name}: range past its type");')
    assert structs >= 19
    src = tmp_path / "fields.asc"
    src.write_text("\n".join(lines) + "\n")
    for mode in ("cube", "vec"):
        r = subprocess.run(["bash", check, mode, str(src)], capture_output=True, text=True)
        errors = [ln for ln in (r.stdout + r.stderr).splitlines() if "error:" in ln]
        assert r.returncode == 0 and not errors, "\n".join(errors)


@pytest.mark.parametrize("dq_strategy", ["atomic", "separate"])
def test_ds_from_unrounded_p_on_the_twin(dq_strategy):
    """The subnormal-P fp16 case (helpers.subnormal_p_case) through the generated Ascend C: dQ, dK, dV
    within the rule (from P rounded to fp16 dQ and dK miss it)."""
    spec, data = subnormal_p_case(1)
    exe = twin.build(ascendc.generate(spec, "ascend910b2", dq_strategy=dq_strategy).files)
    fwd, bwd = twin.run_attention(exe, spec, data, blocks=3)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


@pytest.mark.parametrize("case", ["window-gqa-fp16-d128", "causal-top-left-mqa-bf16", "empty-kv-tiles-fp16"])
@pytest.mark.parametrize("dkv_strategy", ["on-chip", "atomic"])
def test_dkv_strategies_on_the_twin(case, dkv_strategy):
    """Both dK/dV strategies through the generated Ascend C, against the float64 reference and the
    interpreter running the same program: with GQA/MQA the atomics sum a group's query heads into one
    dK_ws/dV_ws tile; the windowed and causal masks skip and cut tile pairs."""
    spec = make_spec(**CASES[case])
    gen = ascendc.generate(spec, "ascend910b2", dkv_strategy=dkv_strategy)
    assert gen.manifest["dkv_strategy"] == dkv_strategy
    assert ("g_dK_ws[" in gen.files["bwd_kernels.asc"]) == (dkv_strategy == "atomic")
    data, fwd, bwd, feeds = run_on_twin(spec, dkv_strategy=dkv_strategy)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    grads, _ = interpret(compile_backward(spec, target="ascend910b2", dkv_strategy=dkv_strategy), feeds)
    eps = 2.0**-10 if spec.dtype == "fp16" else 2.0**-7
    for name in ("dQ", "dK", "dV"):
        ref = np.asarray(grads[name], dtype=np.float32)
        np.testing.assert_allclose(np.asarray(bwd[name], dtype=np.float32), ref, rtol=0, atol=4 * eps * max(1.0, np.abs(ref).max()), err_msg=name)


@pytest.mark.slow
def test_first_plain_store_and_zero_unless_are_needed_on_the_twin():
    """The atomic dK/dV kernels write each program's dK_ws/dV_ws tile with its first store
    (@first_plain) and nothing zeroes it; a K/V tile no query sees is read as zeros
    (@zero_unless). The twin poisons every workspace with NaN: with every store an atomic add, or
    with the zeros' guard taken out, dK and dV come out wrong; with the epilogue's wait for the cube's
    done flag taken out, the flag's sets go unmatched and the twin fails the run."""
    import re

    spec = make_spec(**CASES["empty-kv-tiles-fp16"])
    files = ascendc.generate(spec, "ascend910b2", dkv_strategy="atomic").files
    src = files["bwd_kernels.asc"]
    assert "bwd_pre_kv" not in src and "bwd_post_kv" not in src and src.count("tilegen::AddAfterFirst(") == 2
    assert src.count("(@signal_done)") == 1 and src.count("(@wait_done)") == 1  # post_kv: main's epilogue
    data = inputs(spec, seed=7)
    fwd, bwd = twin.run_attention(twin.build(files), spec, data, blocks=3)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    always_add = re.sub(r"tilegen::AddAfterFirst\(w_d[KV]_ws, pid\)", "true", src)
    no_zeros = re.sub(r"if \((.*)\) <= 0\) \{  // the tile's writer ran no iteration", r"if (false) {  //", src)
    assert always_add != src and no_zeros != src
    for broken in (always_add, no_zeros):  # wrong values, or (no zeros: the AIV then also waits for a done
        exe = twin.build(dict(files, **{"bwd_kernels.asc": broken}))  # flag that an empty program never sets) a deadlock
        with pytest.raises((AssertionError, twin.TwinError)):
            fwd, bwd = twin.run_attention(exe, spec, data, blocks=3)
            assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    no_wait = re.sub(r"\n *CrossCoreWaitFlag\(\d+\);  // the cube's stores of this program's tiles have landed[^\n]*", "", src)
    assert no_wait != src
    with pytest.raises(twin.TwinError, match=r"not waited for"):  # at the SyncAll after main (the hand twin)
        twin.run_attention(twin.build(dict(files, **{"bwd_kernels.asc": no_wait})), spec, data, blocks=3)


def test_the_syncall_launch_protocol_is_the_lowerings(monkeypatch):
    """The atomic dK/dV backward runs pre, main and post in one launch (@sync_all on main and
    post): ascendc.launch_protocol says a SyncAll before each of them and batch mode, as the IR's flags
    say; kernels.asc renders exactly that, so a protocol with no SyncAll renders none."""
    spec = make_spec(**CASES["empty-kv-tiles-fp16"])
    bwd = ascendc.plan_programs(spec, dkv_strategy="atomic")[1][1]
    ir_flags = [k.has(SyncAll) for k in bwd.program.kernels]
    steps = [s for launch in bwd.launches for s in launch["steps"]]
    assert [s["sync_all"] for s in steps] == ir_flags and sum(ir_flags) == 2
    assert [(launch["batch_mode"], launch["scoped"]) for launch in bwd.launches] == [(True, True)]
    src = ascendc.generate(spec, "ascend910b2", dkv_strategy="atomic").files["bwd_kernels.asc"]
    assert src.count("SyncAll<false>();") == 2 and src.count("extern \"C\" __schedmode__(1)") == 1
    decided = ascendc.launch_protocol

    def apart(name, kernels, names):  # the same kernels, told to run with no barrier
        launch = decided(name, kernels, names)
        return dict(launch, batch_mode=False, steps=[dict(s, sync_all=False) for s in launch["steps"]])

    monkeypatch.setattr(ascendc, "launch_protocol", apart)
    src = ascendc.generate(spec, "ascend910b2", dkv_strategy="atomic").files["bwd_kernels.asc"]
    assert "SyncAll<false>();" not in src and "__schedmode__" not in src and src.count("    {  // ") == 3


@pytest.mark.parametrize("fields", [dict(sinks=True), dict(), dict(score_mod="score + s[h]", params=None)], ids=["sinks", "plain", "mods"])
def test_the_python_entry_passes_every_input_the_op_schema_declares(tmp_path, monkeypatch, fields):
    """tilegen_op.py's documented entry (its usage lines) calls torch.ops.<lib>.fwd with every tensor
    the schema in tilegen_ops.asc declares (m.def): with sinks and no mod the op takes the sinks, so the
    entry is the raw forward (the autograd wrapper, chosen by the template for any spec without mods,
    called fwd(q, k, v) and lost them)."""
    import importlib.util
    import inspect

    torch = pytest.importorskip("torch")
    if "params" in fields:
        from tilegen.core.mods import parse_param_decls

        fields["params"] = parse_param_decls({"s": {"shape": ["Hq"]}})
    files = ascendc.generate(make_spec(**fields), "ascend910b2").files
    schema = re.search(r'm\.def\("fwd\(([^)]*)\)', files["tilegen_ops.asc"]).group(1)
    declared = len(schema.split(", "))
    (tmp_path / "tilegen_op.py").write_text(files["tilegen_op.py"])
    spec_ = importlib.util.spec_from_file_location("tilegen_op_under_test", tmp_path / "tilegen_op.py")
    mod = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(mod)
    calls = []

    class Ops:
        def fwd(self, *args):
            calls.append(len(args))
            return torch.zeros(1), torch.zeros(1)

    monkeypatch.setattr(mod, "_ops", Ops)
    usage = re.search(r"from tilegen_op import (\w+)", files["tilegen_op.py"]).group(1)
    entry = getattr(mod, usage)
    entry(*[torch.zeros(1) for _ in inspect.signature(entry).parameters])
    assert calls == [declared], f"{usage}() passed {calls} tensors to fwd({schema})"


def test_a_run_of_empty_programs_on_one_core_keeps_the_done_flag_in_range():
    """Sq 16, Sk 4096, a window of 8 keys: nearly every K/V tile is seen by no query, and on one AI Core
    the main programs run back to back. An empty program neither sets the done flag (on the AIC) nor
    waits for it (on the AIV): unguarded, the AIC ran more than 15 sets ahead (the counter's limit, a
    hang on the NPU; the twin fails the run), as a review found."""
    spec = make_spec(seq_q=16, seq_k=4096, head_dim_qk=64, head_dim_v=64, window=(8, 0), dtype="fp16")
    data, fwd, bwd, _ = run_on_twin(spec, dkv_strategy="atomic", blocks=1)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


def test_separate_dq_strategy_on_the_twin_is_deterministic():
    spec = make_spec(heads_q=2, heads_kv=1, seq_q=160, seq_k=200, head_dim_qk=64, head_dim_v=64, window=(-1, 0), dtype="bf16")
    data, fwd, bwd, _ = run_on_twin(spec, dq_strategy="separate", blocks=4)
    assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
    _, _, again, _ = run_on_twin(spec, dq_strategy="separate", blocks=2)
    for name in ("dQ", "dK", "dV"):
        np.testing.assert_array_equal(bwd[name], again[name])


@pytest.mark.parametrize("name", ["llama2-7b", "llama3-8b"])
def test_builtin_kernel_sets_run_on_the_twin(name):
    """The kernel set generated for the full-size spec (its tiles and head dims) run at a small size."""
    spec = builtin_spec(name)
    small = spec.replace(heads_q=2 * spec.group, heads_kv=2, seq_q=300, seq_k=300)
    data, fwd, bwd, _ = run_on_twin(spec, run_spec=small, blocks=4)
    assert_forward_ok(small, fwd["O"], fwd["L"], data)
    assert_backward_ok(small, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])


def test_generated_code_is_reproducible():
    spec = builtin_spec("tiny-gqa")
    a = ascendc.generate(spec, "ascend910b2")
    b = ascendc.generate(spec, "ascend910b2")
    assert a.files == b.files
    assert set(a.files) >= {"fwd_kernels.asc", "bwd_kernels.asc", "tilegen_runtime.h", "tiling.h", "tilegen_ops.asc",
                            "CMakeLists.txt", "tilegen_op.py", "twin_main.cpp", "manifest.json"}


def test_generate_refuses_what_it_cannot_lower():
    with pytest.raises(SpecError, match="dtype = 'fp32'"):
        ascendc.generate(builtin_spec("tiny-fp32"), "ascend910b2")
    with pytest.raises(TargetError, match="coupled architecture"):
        ascendc.generate(builtin_spec("tiny"), "ascend910")
    with pytest.raises(TargetError, match="h200 is a gpu target.*accepted: ascend910b1, ascend910b2"):
        ascendc.generate(builtin_spec("tiny"), "h200")


def test_twin_catches_a_broken_kernel(tmp_path):
    """Drop the slot-free wait of a hand-off: the twin must fail (unpaired flags or a race it detects)
    instead of passing silently."""
    spec = make_spec(seq_q=130, seq_k=130, head_dim_qk=64, head_dim_v=64, dtype="fp16")
    gen = ascendc.generate(spec, "ascend910b2")
    broken = dict(gen.files)
    # the AIV's slot-free set after it copied S out of the workspace (the flag id the lowering chose)
    broken["fwd_kernels.asc"] = re.sub(r"(tilegen::LoadRows<float>\(S_vector, g_ws_S[^\n]*\n *)CrossCoreSetFlag<2, PIPE_MTE2>\([^)]*\);",
                                       r"\1", broken["fwd_kernels.asc"])
    assert broken["fwd_kernels.asc"] != gen.files["fwd_kernels.asc"]
    exe = twin.build(broken, cache_dir=tmp_path)
    data = inputs(spec)
    with pytest.raises(twin.TwinError, match="twin"):
        twin.run_program(exe, spec, "fwd", {n: data[n] for n in "QKV"},
                         {"O": ((1, 2, 130, 64), "fp16"), "L": ((1, 2, 130), "fp32")}, {}, blocks=2, timeout=120)


@pytest.mark.slow
def test_forward_vector_stage_needs_its_alpha_copies():
    """The forward's AIV runs stage 1 of pair n + 2 (the softmax, alpha of n + 2) before stage 2 of pair
    n (acc·alpha of n, then acc += P·V of n; the @pipelined lookahead), so alpha has three copies and stage 2 reads
    pair n's through the ring alpha_r[n % 3] (the pairs of the core's stream: @stream). Against
    the float64 reference: the emitted kernel passes; with the copies' rotation taken out (every stage on
    one alpha) the O update scales by a later tile's factor and the run is wrong, a wrong answer and not
    a faster timeline."""
    from helpers import assert_forward_ok

    spec = make_spec(seq_q=130, seq_k=700, head_dim_qk=64, head_dim_v=64, dtype="fp16")
    gen = ascendc.generate(spec, "ascend910b2")
    src = gen.files["fwd_kernels.asc"]
    assert re.search(r"Stream a issues each pair's stage 1\n.*2 pairs ahead of stream z's stage 2", src)
    rotation = r"\n *alpha = \(ld_alpha % 3 == 0\) \? alpha_s0 : \(ld_alpha % 3 == 1\) \? alpha_s1 : alpha_s2;\n *\+\+ld_alpha;"
    assert len(re.findall(rotation, src)) == 2  # the AIV's prologue and its steady loop
    assert "LocalTensor<float> alpha_p = alpha_r[z_n % 3];" in src and "RowsMulScalar(acc, acc, alpha_p" in src
    data = inputs(spec)
    outs = {"O": ((1, 2, 130, 64), "fp16"), "L": ((1, 2, 130), "fp32")}
    runs = {}
    for name, files in (("emitted", gen.files), ("one alpha", dict(gen.files, **{"fwd_kernels.asc": re.sub(rotation, "", src)}))):
        exe = twin.build(files)  # the emitted set's build is shared with the @stream test's (by content hash)
        runs[name] = twin.run_program(exe, spec, "fwd", {n: data[n] for n in "QKV"}, outs, {}, blocks=2, timeout=120)
    assert_forward_ok(spec, runs["emitted"]["O"], runs["emitted"]["L"], data)
    with pytest.raises(AssertionError):
        assert_forward_ok(spec, runs["one alpha"]["O"], runs["one alpha"]["L"], data)


@pytest.mark.parametrize("blocks", [1, 2])
def test_streamed_forward_needs_a_copy_of_m_and_l_per_program(blocks):
    """@stream: a core's programs are one stream of tile pairs, so the softmax of the next
    programs' first pairs (stream a) runs before this program's closing (stream z: O = acc / l, L = m +
    log l). m and l get a copy per program in flight, chosen by the program's ordinal. Against the
    float64 reference (130 x 700, 32 x 256 tiles: 5 programs of 3 pairs a head, 10 on 1 or 2 cores): the
    emitted kernel passes; with every program on the first copy of m and l the next program's opening
    overwrites them before this one's closing reads them, and the run is wrong."""
    from helpers import assert_forward_ok

    spec = make_spec(seq_q=130, seq_k=700, head_dim_qk=64, head_dim_v=64, dtype="fp16")
    gen = ascendc.generate(spec, "ascend910b2")
    src = gen.files["fwd_kernels.asc"]
    assert "@stream" in src
    copies = [r"(m|l) = \((a|z)_prog % 3 == 0\) \? \1_s0 : \((a|z)_prog % 3 == 1\) \? \1_s1 : \1_s2;"]
    assert len(re.findall(copies[0], src)) >= 4  # stream a's opening, stream z's opening, stages and closing
    broken = re.sub(copies[0], lambda m: f"{m.group(1)} = {m.group(1)}_s0;", src)
    data = inputs(spec)
    outs = {"O": ((1, 2, 130, 64), "fp16"), "L": ((1, 2, 130), "fp32")}
    runs = {}
    for name, text in (("emitted", src), ("one copy", broken)):
        exe = twin.build(dict(gen.files, **{"fwd_kernels.asc": text}))  # one build of each for both core counts
        runs[name] = twin.run_program(exe, spec, "fwd", {n: data[n] for n in "QKV"}, outs, {}, blocks=blocks, timeout=120)
    assert_forward_ok(spec, runs["emitted"]["O"], runs["emitted"]["L"], data)
    with pytest.raises(AssertionError):
        assert_forward_ok(spec, runs["one copy"]["O"], runs["one copy"]["L"], data)


def test_twin_catches_an_accumulator_zeroed_with_blocknum_0(tmp_path):
    """ZeroAcc zeroes its L0A/L0B tiles with Fill(..., InitConstValueParams(1, blocks, 0, 0)). The former
    two-argument InitConstValueParams(repeatTimes, 0) leaves blockNum = 0, which fills nothing on A2
    (asc-devkit@0da921b9 Fill.md; include/basic_api/kernel_struct_mm.h:452): the dK/dV accumulators then
    start from poisoned or stale L0A x L0B, and the run must fail."""
    spec = make_spec(seq_q=70, seq_k=70, head_dim_qk=64, head_dim_v=64, dtype="fp16")
    gen = ascendc.generate(spec, "ascend910b2", dkv_strategy="on-chip")  # the atomic strategy zeroes no accumulator
    broken = dict(gen.files)
    rt = broken["tilegen_runtime.h"]
    for operand, size in (("l0a", "m"), ("l0b", "n")):
        good = f"Fill(cube.{operand}, InitConstValueParams<T>(1, TILEGEN_NARROW(InitConstValueParams_blockNum, CeilDiv({size}, 16)), 0, T(0)));"
        assert good in rt
        rt = rt.replace(good, f"InitConstValue(cube.{operand}, InitConstValueParams<T>(static_cast<uint16_t>(CeilDiv({size}, 16)), T(0)));")
    broken["tilegen_runtime.h"] = rt
    exe = twin.build(broken, cache_dir=tmp_path)
    data = inputs(spec, seed=5)
    try:
        _, bwd = twin.run_attention(exe, spec, data, blocks=2)
    except twin.TwinError:
        return
    with pytest.raises(AssertionError):
        assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data)


@pytest.mark.npu
def test_npu_build_and_run(tmp_path):
    """On a machine with CANN, torch_npu and an Ascend NPU: build the generated "tiny" kernels with
    their CMakeLists.txt, run forward and backward through the torch binding, and compare with the
    float64 reference. Skips (with the reason) anywhere else, which includes CI."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_npu", reason="torch_npu and CANN are needed to build and run the real kernels")
    if shutil.which("bisheng") is None or shutil.which("cmake") is None:
        pytest.skip("CANN's bisheng compiler or cmake is not on PATH (source set_env.sh)")
    if not torch.npu.is_available():
        pytest.skip("no Ascend NPU visible to torch_npu")
    import importlib.util
    import subprocess

    spec = builtin_spec("tiny")
    write(ascendc.generate(spec, "ascend910b2"), tmp_path)
    for cmd in (["cmake", "-S", ".", "-B", "build"], ["cmake", "--build", "build", "-j"]):
        subprocess.run(cmd, cwd=tmp_path, check=True)
    mod_spec = importlib.util.spec_from_file_location("tilegen_op", tmp_path / "tilegen_op.py")
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    data = inputs(spec, seed=3)
    dt = {"fp16": torch.float16, "bf16": torch.bfloat16}[spec.dtype]
    q, k, v = (torch.from_numpy(np.asarray(data[n], np.float32)).to(dt).npu().requires_grad_() for n in "QKV")
    o = mod.attention(q, k, v)
    o.backward(torch.from_numpy(np.asarray(data["dO"], np.float32)).to(dt).npu())
    f32 = [t.detach().float().cpu().numpy() for t in (o, q.grad, k.grad, v.grad)]
    lse = mod._ops().fwd(q.detach(), k.detach(), v.detach())[1].float().cpu().numpy()
    assert_forward_ok(spec, f32[0], lse, data)
    assert_backward_ok(spec, f32[1:], data, lse=lse)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_real_minilm_activations_on_the_twin(dtype):
    """Q, K, V and dO captured from all-MiniLM-L6-v2 on real text (tests/data/minilm_attention.npz):
    the kernels generated for the model's attention spec run on the twin and pass the accuracy rule."""
    from pathlib import Path

    from tilegen.hf import spec_from_hf_config

    root = Path(__file__).parent / "data"
    fx = np.load(root / "minilm_attention.npz")
    b, h, s, d = fx["Q"].shape[1:]
    spec = spec_from_hf_config(root / "hf" / "all-MiniLM-L6-v2" / "config.json", seq=s, batch=b, dtype=dtype)
    assert spec.softmax_scale == pytest.approx(float(fx["scale"]))
    from tilegen.core import dtypes

    nd = dtypes.numpy_dtype(dtype)
    exe = twin.build(ascendc.generate(spec, "ascend910b2").files)
    for layer in range(fx["Q"].shape[0]):
        data = {n: fx[n][layer].astype(nd) for n in ("Q", "K", "V")}
        data["dO"] = (fx["dO"][layer] * (2.0**10 if dtype == "fp16" else 1.0)).astype(nd)  # loss scaling, as in test_hf
        fwd, bwd = twin.run_attention(exe, spec, data)
        assert_forward_ok(spec, fwd["O"], fwd["L"], data)
        assert_backward_ok(spec, (bwd["dQ"], bwd["dK"], bwd["dV"]), data, lse=fwd["L"])
