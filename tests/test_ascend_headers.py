"""The emitted Ascend C type-checks against the real, public Ascend C headers (asc-devkit).

Every kernel file that ``tilegen generate`` emits for a grid of specs (fp16/bf16; no mask, causal with
both alignments, a sliding window; MHA, GQA, MQA; head dims 64, 80, 128, 192, with Dv != Dqk; sequence
tails; both dQ strategies; BNSD and BSND) and for every folder under generated/ is parsed by clang in
NPU device mode for dav-c220 (Ascend 910B), once per pass of a MIX_AIC_1_2 kernel (cube: __DAV_CUBE__,
vector: __DAV_VEC__), against asc-devkit's ``include/`` and ``impl/``, and must give 0 errors. The checker
is ``tools/ascend-headercheck/asc_check.sh`` (its README says what it checks and what it cannot).

Needs ``ASC_DEVKIT`` (an unpacked asc-devkit snapshot), ``ASC_GEN`` (the folder holding the generated
``kernel_tiling/kernel_tiling.h``) and clang++-16 (or ``$ASC_CXX``); skips with one line naming what is
missing otherwise (CI has no snapshot). Identical kernel files (same text and headers) are checked once;
the asc-devkit headers are parsed once per pass into a precompiled header.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from helpers import make_spec
from tilegen.backends import ascendc
from tilegen.core.errors import SpecError, TargetError
from tilegen.core.mods import parse_param_decls
from tilegen.core.resources import runtime_text
from tilegen.core.spec import builtin_spec, builtin_specs

ROOT = Path(__file__).resolve().parent.parent
CHECKER = ROOT / "tools" / "ascend-headercheck" / "asc_check.sh"
KERNEL_FILES = ("fwd_kernels.asc", "bwd_kernels.asc")
HEADERS = ("tilegen_runtime.h", "tiling.h")
MODES = ("cube", "vec")


def clang() -> str | None:
    """The clang used for the check: ``$ASC_CXX`` or clang++-16 on PATH (None when neither exists)."""
    return shutil.which(os.environ.get("ASC_CXX", "clang++-16"))


def missing() -> list[str]:
    """What the real-header check lacks here, as short phrases (empty when it can run)."""
    out = []
    devkit, gen = os.environ.get("ASC_DEVKIT"), os.environ.get("ASC_GEN")
    if not devkit or not (Path(devkit) / "include" / "kernel_operator.h").is_file():
        out.append("ASC_DEVKIT (an asc-devkit snapshot with include/kernel_operator.h)")
    if not gen or not (Path(gen) / "kernel_tiling" / "kernel_tiling.h").is_file():
        out.append("ASC_GEN (a folder with kernel_tiling/kernel_tiling.h)")
    if clang() is None:
        out.append("clang++-16")
    if not CHECKER.is_file() or shutil.which("bash") is None:
        out.append(f"bash and {CHECKER.relative_to(ROOT)}")
    return out


_MISSING = missing()
pytestmark = pytest.mark.skipif(
    bool(_MISSING), reason="real Ascend C header check needs " + ", ".join(_MISSING) + " (see tools/ascend-headercheck/README.md)"
)

def _varlen_fields() -> dict:
    from tilegen.api import varlen_spec

    cu_q, cu_k = np.array([0, 70, 70, 101, 150], np.int32), np.array([0, 90, 99, 140, 200], np.int32)
    spec = varlen_spec((160, 6, 80), (210, 2, 80), (210, 2, 64), "fp16", cu_q, cu_k, window=(30, 0), sinks=np.zeros(6, np.float32))[0]
    names = ("batch", "heads_q", "heads_kv", "seq_q", "seq_k", "head_dim_qk", "head_dim_v", "layout", "mask_mod", "params", "sinks",
             "packed_ids")
    return {n: getattr(spec, n) for n in names}


# (id, spec fields, dQ strategies): every value of every axis appears; tails everywhere the sequence
# lengths are not multiples of the tiles
GRID = [
    ("fp16-none-mha-d64", dict(seq_q=128, seq_k=256, head_dim_qk=64, head_dim_v=64), ("atomic", "separate")),
    ("bf16-none-mha-d64-tails", dict(seq_q=77, seq_k=201, head_dim_qk=64, head_dim_v=64, dtype="bf16"), ("atomic", "separate")),
    ("fp16-causal-br-gqa-d80", dict(heads_q=4, heads_kv=2, seq_q=150, seq_k=150, head_dim_qk=80, head_dim_v=80, window=(-1, 0)),
     ("atomic", "separate")),
    ("bf16-causal-tl-mqa-d128-bsnd", dict(heads_q=3, heads_kv=1, seq_q=96, seq_k=160, head_dim_qk=128, head_dim_v=128, window=(-1, 0),
                                          alignment="top_left", dtype="bf16", layout="BSND"), ("atomic", "separate")),
    ("fp16-window-gqa-d128-bsnd", dict(heads_q=4, heads_kv=2, seq_q=130, seq_k=190, head_dim_qk=128, head_dim_v=128, window=(40, 7),
                                       layout="BSND"), ("atomic", "separate")),
    ("bf16-window-mha-d192-dv128", dict(seq_q=77, seq_k=201, head_dim_qk=192, head_dim_v=128, window=(64, 0), dtype="bf16"),
     ("atomic", "separate")),
    ("fp16-causal-br-mqa-d192-dv128-tails", dict(heads_q=4, heads_kv=1, seq_q=90, seq_k=333, head_dim_qk=192, head_dim_v=128,
                                                 window=(-1, 0)), ("atomic", "separate")),
    ("fp16-causal-tl-mha-d64-dv32", dict(seq_q=90, seq_k=40, head_dim_qk=64, head_dim_v=32, window=(-1, 0), alignment="top_left"),
     ("atomic", "separate")),
    ("bf16-none-gqa-d80-dv64-bsnd", dict(heads_q=6, heads_kv=2, seq_q=100, seq_k=100, head_dim_qk=80, head_dim_v=64, dtype="bf16",
                                         layout="BSND"), ("atomic", "separate")),
    ("bf16-window-mqa-d128-dv64", dict(heads_q=2, heads_kv=1, seq_q=300, seq_k=257, head_dim_qk=128, head_dim_v=64, window=(100, 20),
                                       alignment="top_left", dtype="bf16"), ("atomic", "separate")),
    # score and mask mods (tilegen/backends/ascendc/mods.py): softcap, a distance and a table bias with their
    # gradients, a per-batch document mask and a per-batch prefix, GQA, BSND
    ("bf16-mods-gqa-d64-bsnd", dict(batch=2, heads_q=4, heads_kv=2, seq_q=96, seq_k=160, head_dim_qk=64, head_dim_v=64, dtype="bf16",
                                    layout="BSND", window=(-1, 0),
                                    score_mod="30*tanh(score/30) - s[h]*abs(q_idx + Sk - Sq - kv_idx) + t[h, q_idx - kv_idx + Sk - 1]",
                                    mask_mod="(doc[b, q_idx] == doc_kv[b, kv_idx]) | (kv_idx < p[b])",
                                    params=parse_param_decls({"s": {"shape": ["Hq"]}, "t": {"shape": ["Hq", "Sq + Sk - 1"]},
                                                              "doc": {"shape": ["B", "Sq"], "dtype": "int32"},
                                                              "doc_kv": {"shape": ["B", "Sk"], "dtype": "int32"},
                                                              "p": {"shape": ["B"], "dtype": "int32"}})),
     ("atomic",)),
    # a packed batch (row guards on every load and store of a sequence's rows) with sinks, fp16, Dv != Dqk,
    # a window per sequence, lengths below and above the tiles, tokens outside every sequence
    ("fp16-varlen-sinks-gqa-d80-dv64", _varlen_fields(), ("atomic", "separate")),
]


def _unit(files: dict[str, str], kernel: str) -> tuple[str, dict[str, str]]:
    """The text a check of ``kernel`` reads (the kernel and the headers it includes) and its hash."""
    unit = {name: files[name] for name in (kernel, *HEADERS)}
    h = hashlib.sha256()
    for name in sorted(unit):
        h.update(name.encode() + b"\0" + unit[name].encode() + b"\0")
    return h.hexdigest()[:16], unit


def _env(pch: Path | None = None) -> dict[str, str]:
    env = dict(os.environ, CXX=clang())
    env.pop("ASC_CMATH", None)  # bisheng's implicit device prelude is unknown: no <cmath>
    env.pop("ASC_AS", None)
    if pch is not None:
        env["ASC_PCH"] = str(pch)
    return env


@pytest.fixture(scope="module")
def pch(tmp_path_factory) -> dict[str, Path]:
    """The shim + kernel_operator.h precompiled once per pass (asc_check.sh --emit-pch)."""
    out = tmp_path_factory.mktemp("asc-pch")

    def build(mode):
        path = out / f"{mode}.pch"
        r = subprocess.run(["bash", str(CHECKER), mode, "--emit-pch", str(path)], capture_output=True, text=True, env=_env())
        return mode, path, r

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build, MODES))
    for mode, _, r in results:
        if r.returncode != 0:
            pytest.fail(f"precompiling kernel_operator.h for the {mode} pass failed:\n{r.stdout}{r.stderr}")
    return {mode: path for mode, path, _ in results}


def check(unit_dir: Path, kernel: str, mode: str, pch: Path | None) -> list[str]:
    """Error lines of one pass over ``unit_dir/kernel`` (a non-zero exit without one counts as one)."""
    r = subprocess.run(["bash", str(CHECKER), mode, str(unit_dir / kernel), f"-I{unit_dir}"], capture_output=True, text=True,
                       env=_env(pch))
    text = r.stdout + r.stderr
    errors = [ln for ln in text.splitlines() if "error:" in ln]
    if r.returncode != 0 and not errors:
        errors = [f"exit status {r.returncode}: {text.strip()[-500:]}"]
    return errors


def check_all(units: dict[str, tuple[str, dict[str, str]]], tmp: Path, pch: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """Check every unit (hash -> (kernel file, files)) on both passes, two at a time; errors by (hash, mode)."""
    jobs = []
    for key, (kernel, files) in units.items():
        d = tmp / key
        d.mkdir()
        for name, text in files.items():
            (d / name).write_text(text)
        jobs += [(key, kernel, mode, d) for mode in MODES]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda j: ((j[0], j[2]), check(j[3], j[1], j[2], pch[j[2]])), jobs)
        return {k: v for k, v in results}


def _report(errors, users) -> str:
    lines = []
    for (key, mode), errs in sorted(errors.items()):
        if errs:
            lines.append(f"{', '.join(users[key])} [{mode} pass]: {len(errs)} error(s)")
            lines += ["    " + e for e in errs[:6]]
    return "\n".join(lines)


def test_grid_kernels_type_check_on_both_passes(tmp_path, pch):
    units: dict[str, tuple[str, dict[str, str]]] = {}
    users: dict[str, list[str]] = {}
    emitted = 0
    for name, fields, strategies in GRID:
        spec = make_spec(**fields)
        for strategy in strategies:
            files = ascendc.generate(spec, "ascend910b2", dq_strategy=strategy).files
            for kernel in KERNEL_FILES:
                key, unit = _unit(files, kernel)
                units.setdefault(key, (kernel, unit))
                users.setdefault(key, []).append(f"{name}/{strategy}/{kernel}")
                emitted += 1
    errors = check_all(units, tmp_path, pch)
    assert len(units) <= emitted
    assert not any(errors.values()), f"{emitted} kernel files ({len(units)} distinct) checked:\n" + _report(errors, users)


def test_generated_folders_and_builtin_specs_type_check_on_both_passes(tmp_path, pch):
    """The checked-in output (generated/*/ascend910b*, dQ strategy "atomic"), what users read and build,
    and every built-in spec the backend accepts with the "separate" strategy."""
    units, users = {}, {}
    sources = []
    for folder in sorted((ROOT / "generated").glob("*/ascend910b*")):
        sources.append((str(folder.relative_to(ROOT)), {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}))
    for name in sorted(builtin_specs()):
        try:
            sources.append((f"{name}/separate", ascendc.generate(builtin_spec(name), "ascend910b2", dq_strategy="separate").files))
        except (SpecError, TargetError):  # fp32, or a spec for the coupled 2019 chip
            continue
        except Exception:  # a spec with mods the backend does not emit yet
            if builtin_spec(name).has_mods:
                continue
            raise
    for label, files in sources:
        for kernel in KERNEL_FILES:
            key, unit = _unit(files, kernel)
            units.setdefault(key, (kernel, unit))
            users.setdefault(key, []).append(f"{label}/{kernel}")
    assert units, "no generated Ascend C folders"
    errors = check_all(units, tmp_path, pch)
    assert not any(errors.values()), _report(errors, users)


def test_shipped_runtime_header_type_checks_as_it_is(tmp_path, pch):
    """runtime/ascendc/tilegen_runtime.h as tilegen ships it, every section in (packed batches, sinks,
    mods) and its section markers, included by a kernel file of one line: 0 errors on both passes. (The
    kernels above check it as their specs cut it, with its templates instantiated.)"""
    shipped = runtime_text("ascendc", "tilegen_runtime.h")
    assert "tilegen:section mods" in shipped and "tilegen:section packed" in shipped and "tilegen:section sinks" in shipped
    unit = {"runtime.asc": '#include "tilegen_runtime.h"\n', "tilegen_runtime.h": shipped}
    errors = check_all({"shipped": ("runtime.asc", unit)}, tmp_path, pch)
    assert not any(errors.values()), _report(errors, {"shipped": ["runtime/ascendc/tilegen_runtime.h"]})


# Controls: one planted API misuse each; the check must report it on the given pass. (file, text in it,
# replacement, pass, fragment of the error)
PLANTED = {
    "field-name": ("tilegen_runtime.h", "p.ifTranspose = true;", "p.ifTransposed = true;", "cube", "ifTransposed"),
    "constructor-arity": ("tilegen_runtime.h", "DataCopyPadExtParams<T> pp(false, 0, 0, padValue);",
                          "DataCopyPadExtParams<T> pp(false, 0, padValue);", "vec", "DataCopyPadExtParams"),
    "enum-member": ("tilegen_runtime.h", "CMPMODE::GE", "CMPMODE::GTE", "vec", "GTE"),
    "hard-event": ("tilegen_runtime.h", "SetWait<HardEvent::MTE2_MTE1>();", "SetWait<HardEvent::MTE2_MTE0>();", "cube", "MTE2_MTE0"),
    "ascend-is-aic-ternary": ("bwd_kernels.asc", "const int64_t core = static_cast<int64_t>(GetBlockIdx()) / GetTaskRatio();",
                              "const int64_t core = ASCEND_IS_AIC ? static_cast<int64_t>(GetBlockIdx()) : 0;", "vec", "expected expression"),
    "infinity-macro": ("tilegen_runtime.h", "Compares(bits, row, NEG_INF, CMPMODE::NE, m);",
                       "Compares(bits, row, -INFINITY, CMPMODE::NE, m);", "vec", "INFINITY"),
}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_check_reports_a_planted_misuse(tmp_path, pch, name):
    target, old, new, mode, fragment = PLANTED[name]
    files = dict(ascendc.generate(builtin_spec("tiny"), "ascend910b2").files)
    assert old in files[target], f"{name}: the construct to break is gone from {target}"
    files[target] = files[target].replace(old, new)
    key, unit = _unit(files, "bwd_kernels.asc")
    errors = check_all({key: ("bwd_kernels.asc", unit)}, tmp_path, pch)
    assert any(fragment in e for e in errors[(key, mode)]), f"{name}: not reported on the {mode} pass: {errors}"


def test_attention_gym_mod_kernels_type_check_on_both_passes(tmp_path, pch):
    """Every kernel file of tests/test_mods_ascend_gym.py's groups (attention-gym's mask and score
    generators through the general mod lowering: every vector instruction it emits) on both passes."""
    pytest.importorskip("attn_gym")
    import test_mods_ascend_gym as gym

    units: dict[str, tuple[str, dict[str, str]]] = {}
    users: dict[str, list[str]] = {}
    for name in gym.GROUPS:
        spec = gym._group(name)[0]
        files = ascendc.generate(spec, "ascend910b2").files
        for kernel in KERNEL_FILES:
            key, unit = _unit(files, kernel)
            units.setdefault(key, (kernel, unit))
            users.setdefault(key, []).append(f"{name}/{kernel}")
    errors = check_all(units, tmp_path, pch)
    assert not any(errors.values()), f"{len(units)} distinct kernel files checked:\n" + _report(errors, users)
