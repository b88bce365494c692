"""Huawei's FlashAttentionScore forward (hicann/ops-transformer) as the peer of tilegen's Ascend kernels, run
on the real-API twin and scheduled by the same timeline.

The kernel is built from a public snapshot of ops-transformer read in place (``$OPS_TRANSFORMER``: its
``attention/flash_attention_score/op_kernel`` and ``common/include/kernel``; never copied into this
repository) against the asc-devkit headers (``$ASC_DEVKIT``), with tilegen's CCE intrinsic layer
(``tilegen/twin/cce``) under them, exactly as the real-API twin builds tilegen's own kernels
(:func:`tilegen.backends.ascendc.twin.real_flags`), in the MIX passes bisheng would run (``__DAV_C220_CUBE__``
/ ``__DAV_C220_VEC__``, asc-devkit tools/build/asc_op_compile_base/asc_op_compiler/config/ascend910b.py).

- :func:`forward_tiling`: the template the official tiling picks and its tiling data for a spec, from
  ``tilegen/harness/peer/fa_tiling.cpp`` (the rules of op_host/flash_attention_score_tiling_general.cpp,
  cited rule by rule there; the matmul and softmax tiling from asc-devkit's own tiling library, compiled
  from the snapshot with the host stand-ins of ``tilegen/harness/peer/host_shim``). One template is built:
  FlashAttentionScoreS1s2Bn2gs1 (S2 > 1024; fp16/bf16; BSND/BNSD; no mask or causal with Sq = Sk; D = Dv
  not taking the SameAB template). Any other spec is refused in one line naming the rule.
- :func:`run_forward`: builds the kernel for that template (:func:`build_forward`: a launch stub that does
  what CANN's generated one does, asc-devkit cmake/asc/legacy_modules/util/extract_host_stub.py
  ``_generate_sub_source``), runs it with ``tilegen/harness/peer/peer_main.cpp`` and returns O and the
  softmax max and sum (L = max + log(sum)).
- :func:`simulate_forward`: the timeline of the kernel at a spec's full size: chosen blocks of the launch
  run alone on the twin (``TWIN_TRACE_BLOCKS``), each is scheduled by
  :func:`tilegen.backends.ascendc.timeline.simulate_block` with the target's ``[timeline]`` table; the
  launch's time is the median of its heaviest blocks (by their 128 x 128 score tiles, from the tiling's
  split: :func:`block_pairs`), plus the launch overhead, floored at the HBM time.

The CCE layer's trace names intrinsics; :func:`cost_kinds` maps them to the timeline's cost kinds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tilegen.backends.ascendc import timeline, twin
from tilegen.core import dtypes
from tilegen.core.errors import SpecError, TilegenError
from tilegen.core.resources import package_dir
from tilegen.core.spec import AttentionSpec
from tilegen.core.targets import load_target

OPS_ENV = "OPS_TRANSFORMER"
PEER_DIR = package_dir() / "harness" / "peer"
FA_KERNEL = Path("attention") / "flash_attention_score" / "op_kernel"
RESERVED_WORKSPACE = 16 * 1024 * 1024  # the system workspace of 2201 (impl/basic_api/utils/kernel_utils_constants.h)
MASK_SIDE = 2048  # the compressed causal mask is [2048, 2048] (op_host AnalyzeOptionalInput, ATTEN_MASK_COMPRESS_LIMIT)
S2_TILE = 128  # the template's S2 base (S1s2::CalcS1S2BasicBlock): the unit of a block's work
TILING_SOURCES = (
    "impl/adv_api/tiling/matmul/matmul_tiling.cpp",
    "impl/adv_api/tiling/matmul/matmul_tiling_base.cpp",
    "impl/adv_api/tiling/matmul/matmul_tiling_algorithm.cpp",
    "impl/adv_api/tiling/matmul/math_util.cpp",
    "impl/adv_api/tiling/activation/softmax_tiling.cpp",
)


class PeerError(TilegenError):
    """The peer kernel could not be tiled, built or run (one line naming what)."""


# ---------------------------------------------------------------------------------------------------
# inputs


def ops_snapshot(path: str | os.PathLike | None = None) -> Path:
    """The ops-transformer snapshot folder: ``path`` or ``$OPS_TRANSFORMER``.

    Raises:
        SpecError: no path given and no ``$OPS_TRANSFORMER``, or the folder lacks
            attention/flash_attention_score/op_kernel/flash_attention_score.cpp.
    """
    raw = path if path is not None else os.environ.get(OPS_ENV)
    if not raw:
        raise SpecError(OPS_ENV, None, "the folder of a hicann/ops-transformer snapshot (attention/, common/)")
    p = Path(raw).expanduser()
    if not (p / FA_KERNEL / "flash_attention_score.cpp").is_file():
        raise SpecError(OPS_ENV, str(raw), f"a hicann/ops-transformer snapshot holding {FA_KERNEL}/flash_attention_score.cpp")
    return p.resolve()


def check_spec(spec: AttentionSpec) -> None:
    """Refuse a spec the peer does not build, in one line.

    Raises:
        SpecError: mods, sinks or a packed batch; fp32; Dqk != Dv; a window other than none or causal with
            Sq = Sk (sparse modes 0 and 2 of FlashAttentionScore).
    """
    if spec.score_mod or spec.mask_mod or spec.sinks or spec.packed_ids:
        raise SpecError("spec", spec.name, "a plain spec (no score_mod, mask_mod, sinks or packed ids) for FlashAttentionScore")
    if spec.dtype not in ("fp16", "bf16"):
        raise SpecError("dtype", spec.dtype, "fp16 or bf16 (the S1s2 template's fp32 path is not built)")
    if spec.head_dim_qk != spec.head_dim_v:
        raise SpecError("head_dim_v", spec.head_dim_v, f"equal to head_dim_qk ({spec.head_dim_qk})")
    if spec.window not in ((-1, -1), (-1, 0)) or (spec.window == (-1, 0) and spec.seq_q != spec.seq_k):
        raise SpecError("window", spec.window, "(-1, -1), or (-1, 0) with seq_q == seq_k (sparse_mode 0 or 2)")


def _platform(target) -> dict[str, str]:
    """The platform figures of ``target`` as the tiling tool's PEER_* variables (host_shim/platform_shim.cpp):
    the 910B2's platform config (Ascend910B2.ini, the sources of targets/ascend910b2.toml)."""
    lv = {lvl.name: lvl for lvl in target.levels}
    return {
        "PEER_AIC": str(int(target.cores["aic"].value)),
        "PEER_AIV": str(int(target.cores["aiv"].value)),
        "PEER_UB": str(int(lv["UB"].capacity.value)),
        # the target's L1 capacity excludes the top 128 B the matmul server reserves; the platform's l1_size
        # (what GetCoreMemSize(L1) returns to the official tiling) is the whole 512 KiB
        "PEER_L1": str(int(lv["L1"].capacity.value) + 128),
        "PEER_L0A": str(int(lv["L0A"].capacity.value)),
        "PEER_L0B": str(int(lv["L0B"].capacity.value)),
        "PEER_L0C": str(int(lv["L0C"].capacity.value)),
        "PEER_L2": str(int(target.bandwidth["l2_bytes"].value)),
    }


def _cache_root(cache_dir) -> Path:
    return Path(cache_dir or os.environ.get("TILEGEN_TWIN_CACHE", Path(tempfile.gettempdir()) / "tilegen-twin"))


def _compile(jobs: list[tuple[Path, list[str]]]) -> None:
    """Run compiler commands two at a time; each writes ``<target>.tmp<pid>`` (``-o`` appended here), renamed
    onto ``target`` on success, so that processes building the same cache entry at once (pytest-xdist
    workers) never write or move one another's file."""
    tmp = {target: f"{target}.tmp{os.getpid()}" for target, _ in jobs}
    for start in range(0, len(jobs), 2):
        batch = jobs[start : start + 2]
        procs = [subprocess.Popen([*cmd, "-o", tmp[target]], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for target, cmd in batch]
        for (target, _), proc in zip(batch, procs):
            _, err = proc.communicate()
            if proc.returncode != 0:
                lines = [ln for ln in err.splitlines() if "error" in ln][:6] or err.splitlines()[:6]
                raise PeerError(f"peer build of {target.name} failed:\n" + "\n".join(lines))
    for target, _ in jobs:
        os.replace(tmp[target], target)


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------
# tiling


def build_tiling_tool(devkit, ops, cache_dir=None) -> Path:
    """Compile ``tilegen/harness/peer/fa_tiling.cpp`` with asc-devkit's matmul and softmax tiling sources
    (``TILING_SOURCES``, read in place) and the host stand-ins; returns the executable (cached by the sources).

    Raises:
        PeerError: no clang, or the build failed.
    """
    devkit, ops = twin.check_devkit(devkit), ops_snapshot(ops)
    cxx = twin.real_compiler()
    if cxx is None:
        raise PeerError("no clang++-16 for the peer (apt-get install clang-16)")
    gen = twin.tiling_header_dir(devkit, cache_dir)
    srcs = [PEER_DIR / "fa_tiling.cpp", PEER_DIR / "host_shim" / "platform_shim.cpp", *(devkit / s for s in TILING_SOURCES)]
    shims = sorted((PEER_DIR / "host_shim").rglob("*.h"))
    header = ops / FA_KERNEL / "flash_attention_score_tiling.h"
    key = _digest(*(p.read_bytes() for p in [*srcs, *shims, header]), devkit, ops)
    out = _cache_root(cache_dir) / f"peer-tiling-{key}"
    exe = out / "fa_tiling"
    if exe.is_file():
        return exe
    out.mkdir(parents=True, exist_ok=True)
    inc = [f"-I{PEER_DIR / 'host_shim'}", f"-I{gen}", f"-I{devkit / 'include'}", f"-I{devkit / 'include' / 'utils'}",
           f"-I{devkit / 'include' / 'adv_api'}", f"-I{devkit / 'impl' / 'adv_api' / 'tiling' / 'matmul'}",
           f"-I{devkit / 'impl' / 'adv_api'}", f"-I{ops / FA_KERNEL}"]
    objs = [out / f"{i}_{p.stem}.o" for i, p in enumerate(srcs)]
    _compile([(o, [cxx, "-std=c++17", "-O1", "-w", "-c", *inc, str(s)]) for s, o in zip(srcs, objs)])
    _compile([(exe, [cxx, *map(str, objs)])])
    return exe


def forward_tiling(spec: AttentionSpec, target="ascend910b2", devkit=None, ops=None, cache_dir=None) -> dict:
    """The official tiling of ``spec``'s forward: the fields fa_tiling prints (``template``; ``key``: the 20
    kernel template arguments; ``block_dim``; ``workspace_bytes``: the user workspace; ``core_num``,
    ``total_size``, ``split_factor``, ``sparse_start``: the split over the AIVs; ``s1_base``, ``s2_base``,
    ``n_ratio``; the two TCubeTilings) and ``tiling``: the FlashAttentionScoreGeneralTilingData bytes.

    Raises:
        SpecError: the spec is refused (:func:`check_spec`, or the tiling's template rules).
        PeerError: the tool failed.
    """
    check_spec(spec)
    tgt = load_target(target)
    exe = build_tiling_tool(devkit or os.environ.get("ASC_DEVKIT", ""), ops, cache_dir)
    with tempfile.TemporaryDirectory(prefix="tilegen-peer-tiling-") as tmp:
        out = Path(tmp) / "tiling.bin"
        args = [str(exe), str(spec.batch), str(spec.heads_q), str(spec.heads_kv), str(spec.seq_q), str(spec.seq_k),
                str(spec.head_dim_qk), spec.dtype, spec.layout, "causal" if spec.window == (-1, 0) else "none",
                repr(float(spec.softmax_scale)), str(out)]
        proc = subprocess.run(args, capture_output=True, text=True, env={**os.environ, **_platform(tgt)})
        if proc.returncode == 2:
            line = (proc.stderr.strip().splitlines() or ["?"])[-1].removeprefix("peer tiling: ")
            raise SpecError("spec", spec.name, f"a shape FlashAttentionScore's S1s2 template takes: {line}")
        if proc.returncode != 0:
            raise PeerError(f"fa_tiling failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
        info = json.loads(proc.stdout)
        info["tiling"] = out.read_bytes()
    return info


# ---------------------------------------------------------------------------------------------------
# the kernel


def _shim_headers(devkit: Path) -> dict[str, str]:
    """The include paths ops-transformer's kernels use that CANN's install creates as links into asc-devkit
    (impl/adv_api/cmake/kernel_headers.cmake: lib -> include/adv_api, lib/matrix/matmul -> matmul; and
    impl/basic_api/CMakeLists.txt: ascendc/host_api/tiling/template_argument.h), as forwarding headers."""
    adv = devkit / "include" / "adv_api"
    return {
        "lib/matmul_intf.h": f'#include "{adv / "matmul" / "matmul_intf.h"}"\n',
        "lib/matrix/matmul/tiling.h": f'#include "{adv / "matmul" / "tiling.h"}"\n',
        "ascendc/host_api/tiling/template_argument.h": f'#include "{devkit / "include" / "utils" / "tiling" / "template_argument.h"}"\n',
    }


def wrapper_source(key) -> str:
    """The kernel translation unit: the prelude, ops-transformer's flash_attention_score.cpp, and one
    ``extern "C"`` kernel ``peer_fa(q, k, v, mask, softmaxMax, softmaxSum, attentionOut, workspace, tiling)``
    that does what CANN's generated launch stub does (extract_host_stub.py ``_generate_sub_source``:
    SetSysWorkspaceForce, GetUserWorkspace, matmul::clearWorkspace on the AIC) and calls the template
    instance of ``key``, the other inputs absent."""
    if len(key) != 20:
        raise PeerError(f"a tiling key of 20 fields, got {len(key)}")
    args = [str(int(v)) if i < 11 or i > 15 else ("true" if v else "false") for i, v in enumerate(key)]
    return (
        "// generated by tilegen/harness/ascend_peer.py: Huawei's FlashAttentionScore on the real-API twin\n"
        '#include "kernel_prelude.h"\n'
        '#include "flash_attention_score.cpp"\n'
        'extern "C" __global__ __aicore__ void peer_fa(GM_ADDR q, GM_ADDR k, GM_ADDR v, GM_ADDR mask, GM_ADDR smax,\n'
        "                                              GM_ADDR ssum, GM_ADDR out, GM_ADDR ws, GM_ADDR tiling)\n"
        "{\n"
        "    AscendC::SetSysWorkspaceForce(ws);\n"
        "    cce_rt::SetKfcMessageArea(sizeof(((AscendC::SysWorkspaceDesc*)nullptr)->kfcMsg));  // the trace's message area (cce/kfc.h)\n"
        "    GM_ADDR user = AscendC::GetUserWorkspace(ws);\n"
        "    if ASCEND_IS_AIC {\n"
        "        matmul::clearWorkspace(ws);\n"
        "    }\n"
        f"    flash_attention_score<{', '.join(args)}>(\n"
        "        q, k, v, nullptr, nullptr, nullptr, mask, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,\n"
        "        nullptr, nullptr, smax, ssum, nullptr, out, user, tiling);\n"
        "}\n"
    )


def build_forward(key, devkit=None, ops=None, cache_dir=None) -> Path:
    """Build the kernel of tiling key ``key`` (:func:`wrapper_source`) for the real-API twin; returns the
    harness executable (``peer_main``, with ``fa_cube.so`` / ``fa_vec.so`` beside it). Cached by the
    sources, the CCE layer and both snapshots.

    Raises:
        PeerError: no clang, or a build failed (the compiler's first error lines).
    """
    devkit = twin.check_devkit(devkit or os.environ.get("ASC_DEVKIT", ""))
    ops = ops_snapshot(ops)
    cxx = twin.real_compiler()
    if cxx is None:
        raise PeerError("no clang++-16 for the peer (apt-get install clang-16)")
    gen = twin.tiling_header_dir(devkit, cache_dir)
    src = wrapper_source(key)
    fa_files = sorted((ops / FA_KERNEL).glob("*")) + sorted((ops / "common" / "include" / "kernel").glob("*.h"))
    local = sorted(twin.CCE_DIR.glob("*")) + [PEER_DIR / "kernel_prelude.h", PEER_DIR / "peer_main.cpp"]
    key_hash = _digest(src, twin.devkit_fingerprint(devkit), *(p.name.encode() + p.read_bytes() for p in fa_files + local if p.is_file()))
    out = _cache_root(cache_dir) / f"peer-fa-{key_hash}"
    exe = out / "peer_main"
    if exe.is_file():
        return exe
    shim = out / "shim"
    for rel, text in _shim_headers(devkit).items():
        (shim / rel).parent.mkdir(parents=True, exist_ok=True)
        (shim / rel).write_text(text)
    (out / "fa_kernels.asc").write_text(src)
    inc = [f"-I{shim}", f"-I{PEER_DIR}", f"-I{ops / FA_KERNEL}", f"-I{ops / 'common' / 'include' / 'kernel'}",
           f"-I{ops / 'attention' / 'common' / 'op_kernel'}"]
    jobs = []
    for core, tag in (("CUBE", "cube"), ("VEC", "vec")):
        so = out / f"fa_{tag}.so"
        jobs.append((so, [cxx, *twin.real_flags(devkit, gen, core), f"-D__DAV_C220_{core}__", *inc, str(out / "fa_kernels.asc")]))
    jobs.append((exe, [cxx, "-std=c++17", "-O1", "-pthread", "-rdynamic", f"-I{twin.CCE_DIR}", str(PEER_DIR / "peer_main.cpp"),
                       str(twin.CCE_DIR / "runtime.cpp"), "-ldl"]))
    # the executable last: its presence marks a finished build
    _compile(jobs[:2])
    _compile(jobs[2:])
    return exe


def _physical(x: np.ndarray, layout: str) -> np.ndarray:
    """Logical BNSD -> the layout's memory order."""
    return np.ascontiguousarray(x if layout == "BNSD" else x.transpose(0, 2, 1, 3))


def run_forward(spec: AttentionSpec, data: dict, target="ascend910b2", devkit=None, ops=None, cache_dir=None,
                trace: str | os.PathLike | None = None, blocks: list[int] | None = None, timeout: float = 3600.0) -> dict:
    """Run the official forward on the real-API twin.

    Args:
        data: logical BNSD ``Q`` [B, Hq, Sq, D], ``K``, ``V`` [B, Hkv, Sk, D] in the spec's dtype.
        trace: a file for the instruction trace (``TWIN_TRACE``; tilegen/twin/cce/trace.h).
        blocks: run only these blocks of the launch (``TWIN_TRACE_BLOCKS``); the outputs are then partial.

    Returns:
        ``O`` [B, Hq, Sq, D] (spec dtype), ``max`` and ``sum`` [B, Hq, Sq] float32 (the kernel's
        softmax_max / softmax_sum, [B, N1, S1, 8] with the value repeated), ``L`` = max + log(sum) float32,
        and ``tiling`` (:func:`forward_tiling`).

    Raises:
        SpecError: a spec the peer refuses. PeerError: a build or run failed (the twin's failure line).
    """
    info = forward_tiling(spec, target, devkit, ops, cache_dir)
    exe = build_forward(info["key"], devkit, ops, cache_dir)
    npdt = dtypes.numpy_dtype(spec.dtype)
    b, hq, sq, d = spec.batch, spec.heads_q, spec.seq_q, spec.head_dim_qk
    causal = spec.window == (-1, 0)
    with tempfile.TemporaryDirectory(prefix="tilegen-peer-run-") as tmp:
        t = Path(tmp)
        arrays = {n: _physical(np.asarray(data[n], dtype=npdt), spec.layout) for n in ("Q", "K", "V")}
        for n, a in arrays.items():
            a.tofile(t / f"{n}.bin")
        if causal:  # sparse_mode 2 takes the [2048, 2048] mask, 1 above the diagonal (aclnnFlashAttentionScore.md)
            np.triu(np.ones((MASK_SIDE, MASK_SIDE), np.uint8), 1).tofile(t / "mask.bin")
        ws = RESERVED_WORKSPACE + int(info["workspace_bytes"])
        # the workspace starts as poison (0xFF), as GM allocations do: the kernel must write before it reads
        with open(t / "ws.bin", "wb") as f:
            f.truncate(0)
            chunk = b"\xff" * (1 << 20)
            for _ in range(ws >> 20):
                f.write(chunk)
            f.write(b"\xff" * (ws & ((1 << 20) - 1)))
        (t / "tiling.bin").write_bytes(info["tiling"])
        stats = b * hq * sq * 8 * 4
        args = [("Q", arrays["Q"].nbytes, "in"), ("K", arrays["K"].nbytes, "in"), ("V", arrays["V"].nbytes, "in"),
                ("mask", MASK_SIDE * MASK_SIDE if causal else 0, "in"), ("max", stats, "out"), ("sum", stats, "out"),
                ("O", arrays["Q"].nbytes, "out"), ("ws", ws, "ws"), ("tiling", len(info["tiling"]), "tiling")]
        (t / "args.txt").write_text("".join(f"{n} {nb} {role}\n" for n, nb, role in args))
        env = dict(os.environ)
        env.pop("TWIN_TRACE", None)
        env.pop("TWIN_TRACE_BLOCKS", None)
        if trace is not None:
            env["TWIN_TRACE"] = str(Path(trace).resolve())
        if blocks is not None:
            env["TWIN_TRACE_BLOCKS"] = ",".join(map(str, blocks))
        proc = subprocess.run([str(exe), "peer_fa", "fa", str(t), str(info["block_dim"])], capture_output=True, text=True,
                              timeout=timeout, env=env)
        if proc.returncode != 0:
            msg = [ln for ln in proc.stderr.splitlines() if ln.strip()][-3:]
            raise PeerError(f"peer run failed (exit {proc.returncode}): " + " | ".join(msg))
        o = np.fromfile(t / "O.out", dtype=npdt).reshape(arrays["Q"].shape)
        mx = np.fromfile(t / "max.out", dtype=np.float32).reshape(b, hq, sq, 8)[..., 0]
        sm = np.fromfile(t / "sum.out", dtype=np.float32).reshape(b, hq, sq, 8)[..., 0]
    o = o if spec.layout == "BNSD" else o.transpose(0, 2, 1, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = (mx.astype(np.float64) + np.log(sm.astype(np.float64))).astype(np.float32)
    return {"O": o, "max": mx, "sum": sm, "L": lse, "tiling": info}


# ---------------------------------------------------------------------------------------------------
# the timeline


# intrinsic -> the timeline's cost kind (tilegen/backends/ascendc/timeline.py Costs.duration); vector
# instructions not named here take the plain per-repeat cost under their own name
_KINDS = {
    "copy_gm_to_ubuf_align_b8": "DataCopyPad", "copy_gm_to_ubuf_align_b16": "DataCopyPad", "copy_gm_to_ubuf_align_b32": "DataCopyPad",
    "copy_ubuf_to_gm_align_b8": "DataCopyPad", "copy_ubuf_to_gm_align_b16": "DataCopyPad", "copy_ubuf_to_gm_align_b32": "DataCopyPad",
    "copy_gm_to_ubuf": "DataCopy", "copy_ubuf_to_gm": "DataCopy", "copy_gm_to_cbuf": "DataCopy", "copy_cbuf_to_gm": "DataCopy",
    "copy_gm_to_cbuf_multi_nd2nz_b8": "DataCopyNd2Nz", "copy_gm_to_cbuf_multi_nd2nz_b16": "DataCopyNd2Nz",
    "copy_gm_to_cbuf_multi_nd2nz_b32s": "DataCopyNd2Nz",
    "copy_matrix_cc_to_gm": "Fixpipe",
    "load_cbuf_to_ca": "LoadData", "load_cbuf_to_cb": "LoadData", "img2colv2_cbuf_to_ca": "LoadData", "img2colv2_cbuf_to_cb": "LoadData",
    "create_ca_matrix": "Fill", "create_cb_matrix": "Fill", "create_cbuf_matrix": "Fill",
    "create_ca_matrix_bf16": "Fill", "create_cb_matrix_bf16": "Fill", "create_cbuf_matrix_bf16": "Fill",
    "mad": "Mmad2",
    "vexp": "Exp", "vln": "Ln", "vcadd": "ReduceRepeatSum", "vcmax": "ReduceRepeatMax", "vcmin": "ReduceRepeatMax", "vbrcb": "Brcb",
}


def cost_kinds(cores: dict) -> dict:
    """A block's traces (``{"AIC" | "AIV0" | "AIV1": [Instr]}``) with the CCE intrinsics' names mapped to the
    timeline's kinds: a LoadData's size becomes its 512-byte fractals (the twin records bytes)."""
    out = {}
    for name, instrs in cores.items():
        mapped = []
        for ins in instrs:
            kind = _KINDS.get(ins.kind, ins.kind)
            if kind == "LoadData":
                mapped.append(dataclasses.replace(ins, kind=kind, a=max(1, ins.a // 512)))
            elif kind != ins.kind:
                mapped.append(dataclasses.replace(ins, kind=kind))
            elif ins.pipe != "V" and kind == "unknown":
                continue  # an instruction that touched nothing (a documented NOP): no work
            else:
                mapped.append(ins)
        out[name] = mapped
    return out


def block_pairs(spec: AttentionSpec, info: dict) -> np.ndarray:
    """float [block_dim]: each block's 128 x 128 score tiles (S2 base x S2 base) as the official kernel deals
    them: its AIVs 2b and 2b + 1 take the tasks (b, n2, g, s1-block) [lo, hi) of
    FlashAttentionScoreS1s2Bn2gs1::Process / GetS1LoopRange (op_kernel/flash_attention_score_s1s2_bn2gs1.h):
    the tiling's sparseStartIdx under a mask, else splitFactorSize per AIV (per block with L1 reuse, where
    the two AIVs alternate over one range); a causal task visits min((s1o + 1) * s1Base, S2) keys."""
    total, cores, split = int(info["total_size"]), int(info["core_num"]), int(info["split_factor"])
    s1o, s1base = math.ceil(spec.seq_q / info["s1_base"]), int(info["s1_base"])
    causal, reuse = spec.window == (-1, 0), bool(info["key"][14])
    tasks = np.arange(total)
    rows = np.minimum(s1base, spec.seq_q - (tasks % s1o) * s1base)  # the task's query rows (the tail block is short)
    if causal:
        keys = np.minimum((tasks % s1o + 1) * s1base, spec.seq_k)
    else:
        keys = np.full(total, spec.seq_k)
    pairs = np.ceil(keys / S2_TILE) * rows / S2_TILE
    cum = np.concatenate([[0.0], np.cumsum(pairs)])
    start = list(info["sparse_start"]) + [total]
    out = []
    for blk in range(int(info["block_dim"])):
        a0, a1 = 2 * blk, 2 * blk + 1
        if causal:
            lo = start[a0] if a0 < cores else total
            hi = start[a1 + 1] if a1 + 1 < cores else total
        elif reuse:
            lo, hi = min(blk * split, total), min((blk + 1) * split, total)
        else:
            lo, hi = min(a0 * split, total), min((a1 + 1) * split, total)
        out.append(float(cum[max(hi, lo)] - cum[lo]))
    return np.array(out)


def random_inputs(spec: AttentionSpec, seed: int = 0) -> dict:
    """Logical BNSD Q, K, V of ``spec``: 0.5 x standard normal in its dtype (seeded)."""
    rng = np.random.default_rng(seed)
    npdt = dtypes.numpy_dtype(spec.dtype)
    return {n: (0.5 * rng.standard_normal(s)).astype(npdt) for n, s in spec.logical_shapes.items() if n in ("Q", "K", "V")}


def simulate_forward(spec: AttentionSpec, target="ascend910b2", devkit=None, ops=None, cache_dir=None, heavy: int = 3,
                     timeout: float = 7200.0) -> dict:
    """The simulated time of the official forward at ``spec``'s full size on ``target``'s timeline.

    The ``heavy`` blocks with the most work (by :func:`block_pairs`) and the one with the least run alone
    in one launch on the twin with the trace on; each is scheduled (:func:`cost_kinds`,
    :func:`timeline.l2_levels` within the block, :func:`timeline.simulate_block`). The launch's time is the
    median of the heavy blocks' times (the official split balances the blocks' tiles: ``spread``, their
    relative difference in tiles among the blocks with work, bounds what the blocks not run add), plus the
    target's launch overhead, and at least the HBM floor (Q, K, V read, O and the softmax max/sum written
    once at ``bandwidth.hbm``) and the L2 floor (the median heavy block's GM bytes times the blocks with
    work, at the cost table's ``chip_l2_bytes_per_cycle``). The same trace is scheduled again at the fast
    and slow ends of the cost table's ranges (``range_s``), as tilegen's own programs are.

    Why a median of several: the matmul server serves its two AIVs' requests in the order they reached it
    on the host's threads, and the trace keeps that order (the timeline cannot reorder the server's work);
    blocks of equal work then differ by ``order_spread`` (max - min over the median of the heavy blocks),
    the noise of this figure. The lightest block shows the range of the blocks' times.

    Returns:
        ``time_s``, ``blocks`` (block_dim), ``busy_blocks`` (those with work), ``sampled`` ({block: (pairs,
        cycles)}), ``heavy`` (the heavy blocks), ``spread``, ``order_spread``, ``busy`` (the median heavy
        block's busy fraction per core and pipe), ``critical`` (its critical-path shares), ``hbm_floor_s``,
        ``tiling`` (without the bytes), ``range_s`` ({"fast": s, "slow": s}).

    Raises:
        SpecError, PeerError: as :func:`run_forward`; TimelineError: the trace cannot be scheduled.
    """
    tgt = load_target(target)
    info = forward_tiling(spec, target, devkit, ops, cache_dir)
    pairs = block_pairs(spec, info)
    busy_blocks = np.flatnonzero(pairs > 0)  # a block the split leaves without work runs nothing
    order = busy_blocks[np.argsort(-pairs[busy_blocks], kind="stable")]  # heaviest first
    top = [int(b) for b in order[: max(1, heavy)]]
    picks = sorted(set(top) | {int(order[-1])})
    live = pairs[busy_blocks]
    data = random_inputs(spec)
    with tempfile.TemporaryDirectory(prefix="tilegen-peer-trace-") as tmp:
        path = Path(tmp) / "trace.txt"
        run_forward(spec, data, target, devkit, ops, cache_dir, trace=path, blocks=picks, timeout=timeout)
        launches = timeline.parse_trace(path.read_text())
    blocks = launches.get(0, {})
    blocks = timeline.l2_levels({b: cost_kinds(c) for b, c in blocks.items()})
    clock = tgt.cores["clock_ghz"].value * 1e9
    launch_s = tgt.overhead["launch_us"].value * 1e-6 if "launch_us" in tgt.overhead else 0.0
    itemsize = dtypes.itemsize(spec.dtype)
    hbm_bytes = itemsize * (2 * spec.batch * spec.heads_q * spec.seq_q * spec.head_dim_qk
                            + 2 * spec.batch * spec.heads_kv * spec.seq_k * spec.head_dim_qk) + 2 * 32 * spec.batch * spec.heads_q * spec.seq_q
    floor_s = hbm_bytes / tgt.bytes_per_s("hbm")

    def priced(end: str):
        costs = timeline.Costs(tgt.timeline, end)
        scheds = {b: timeline.simulate_block(blocks[b], costs) for b in picks}
        ends = np.array([scheds[b].end for b in top])
        mid = float(np.median(ends))
        rep = min(top, key=lambda b: abs(scheds[b].end - mid))
        l2_floor = scheds[rep].gm_bytes * len(busy_blocks) / costs["chip_l2_bytes_per_cycle"]
        return max(mid, l2_floor) / clock, scheds, ends, mid, rep

    time_s, scheds, ends, mid, rep = priced("central")
    time_s = max(time_s, floor_s) + launch_s
    range_s = {end: max(priced(end)[0], floor_s) + launch_s for end in ("fast", "slow")}
    busy = {f"{c}.{p}": v / scheds[rep].end for (c, p), v in sorted(scheds[rep].busy.items())}
    return {
        "time_s": time_s, "blocks": int(info["block_dim"]), "busy_blocks": int(len(busy_blocks)),
        "sampled": {b: (float(pairs[b]), float(scheds[b].end)) for b in picks}, "heavy": top,
        "spread": float((live.max() - live.min()) / max(live.max(), 1.0)),
        "order_spread": float((ends.max() - ends.min()) / max(mid, 1.0)), "busy": busy, "critical": scheds[rep].critical_share(),
        "hbm_floor_s": floor_s, "tiling": {k: v for k, v in info.items() if k != "tiling"}, "range_s": range_s,
    }
