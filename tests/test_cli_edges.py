"""Rough edges of the CLI (issue 16): each test here failed before its fix."""

from __future__ import annotations

import subprocess
import sys

import pytest

import tilegen
from tilegen.cli import main
from tilegen.passes.ascend.one_launch import SyncAll
from helpers import unwrapped


def _tilegen(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tilegen", *argv], capture_output=True, text=True, **kw)


def test_a_closed_pipe_ends_quietly():
    """`tilegen run --spec tiny | head -1`: the reader leaves after the first line; no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tilegen", "run", "--spec", "tiny-fp32"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    rc = proc.wait()
    assert first.startswith(b"tilegen run"), first
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert err == "" and rc == 141, (rc, err)


def test_version():
    proc = _tilegen("--version")
    assert proc.returncode == 0 and proc.stdout.strip() == f"tilegen {tilegen.__version__}", proc


def test_lse_of_the_right_shape_but_wrong_dtype_names_both_dtypes():
    import numpy as np

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 64, 16)).astype(np.float32) for _ in range(3))
    o, lse = tilegen.attention(q, k, v)
    with pytest.raises(tilegen.SpecError) as info:
        tilegen.attention_backward(q, k, v, o, lse.astype(np.float64), o)
    msg = str(info.value)
    assert "lse.dtype = 'float64'" in msg and "float32" in msg and "(1, 4, 64)" in msg, msg
    with pytest.raises(tilegen.SpecError) as info:
        tilegen.attention_backward(q, k, v, o, lse[:, :, :32], o)
    assert "lse.shape = (1, 4, 32)" in str(info.value), info.value


def test_a_missing_field_says_missing_and_what_is_accepted():
    from tilegen.core.spec import spec_from_dict

    with pytest.raises(tilegen.SpecError) as info:
        spec_from_dict({"heads": 2, "seq": 8, "head_dim": 16}, where="x.toml")
    msg = str(info.value)
    assert msg == "x.toml: batch is missing; accepted: an integer from 1 to 1073741824 (the field is required)", msg
    assert "None" not in msg


def test_every_error_of_a_spec_file_at_once_with_did_you_mean(tmp_path, capsys):
    bad = tmp_path / "b.toml"
    bad.write_text("bacth = 1\nheads = 2\nseq_q = 0\nhead_dim = 16\ndtype = 'int8'\n")
    assert main(["run", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith(f"tilegen: error: {bad}: ") for line in err), err
    text = "\n".join(err)
    assert len(err) == 5, err  # bacth unknown, batch missing, seq_k missing, seq_q out of range, dtype
    assert "bacth = 1 is invalid; accepted: did you mean 'batch'?" in text
    assert "batch is missing" in text and "seq_k is missing" in text
    assert "seq_q = 0 is invalid" in text and "dtype = 'int8' is invalid" in text


def test_twin_target_without_twin_is_an_error(capsys):
    assert main(["run", "--spec", "tiny", "--twin-target", "ascend910b3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--twin-target = 'ascend910b3'" in err[0] and "--twin" in err[0], err


def test_torch_on_cpu_refuses_an_unknown_target():
    torch = pytest.importorskip("torch")
    import tilegen.torch as tt

    q = torch.randn(1, 8, 2, 16)
    for bad in ("nosuchgpu", "ascend910b2"):
        with pytest.raises(tilegen.SpecError) as info:
            tt.flash_attn_func(q, q, q, target=bad)
        msg = str(info.value)
        assert f"target = {bad!r}" in msg and "h200" in msg and "\n" not in msg, msg
    assert tt.flash_attn_func(q, q, q, target="h200").shape == q.shape


def test_torch_sinks_and_packed_calls_on_cpu_refuse_an_unknown_target():
    """The sinks and packed-batch path checks the target on the CPU as the custom ops do (it ran the
    interpreter with any target before)."""
    torch = pytest.importorskip("torch")
    import tilegen.torch as tt

    q = torch.randn(1, 8, 2, 16)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    calls = [lambda bad: tt.flash_attn_func(q, q, q, sinks=torch.zeros(2), target=bad),
             lambda bad: tt.flash_attn_func(q, q, q, softcap=3.0, sinks=torch.zeros(2), target=bad),
             lambda bad: tt.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, None, None, target=bad)]
    for call in calls:
        for bad in ("nosuchgpu", "ascend910b2"):
            with pytest.raises(tilegen.SpecError) as info:
                call(bad)
            msg = str(info.value)
            assert info.value.field == "target" and "h200" in msg and "\n" not in msg, msg
    assert tt.flash_attn_func(q, q, q, sinks=torch.zeros(2), target="h200").shape == q.shape


def test_run_data_says_which_entry_it_used(tmp_path, capsys):
    import numpy as np

    from tilegen.harness.runner import random_inputs
    from tilegen.core.spec import builtin_spec

    spec = builtin_spec("tiny-fp32")
    a, b = random_inputs(spec, 1), random_inputs(spec, 2)
    path = tmp_path / "d.npz"
    np.savez(path, **{n: np.stack([a[n], b[n]]) for n in ("Q", "K", "V")}, dO=b["dO"])
    assert main(["run", "--spec", "tiny-fp32", "--data", str(path), "--data-index", "1"]) == 0
    out = capsys.readouterr().out
    assert f"inputs from {path}: Q[1] of 2, K[1] of 2, V[1] of 2, dO" in out, out


def test_run_twin_shows_the_twin_tile_sizes(capsys):
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    assert main(["run", "--spec", "tiny", "--seq", "40", "--twin"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if "ascend910b2 twin" in l]
    assert len(lines) == 2 and all("Br=" in l and "Bc=" in l for l in lines), out


def test_run_twin_takes_the_forced_tile_sizes(capsys):
    """--tiles forces the twin's kernels too (they once kept the target's own choice); tiles that do not
    fit the twin's target are refused in one line before any work."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    assert main(["run", "--spec", "tiny", "--seq", "40", "--tiles", "64x128", "--twin"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if "ascend910b2 twin" in l]
    assert len(lines) == 2 and all("Br=64, Bc=128" in l for l in lines), out
    assert main(["run", "--spec", "tiny", "--tiles", "256x512", "--twin"]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1 and "Br=256, Bc=512 do not fit target ascend910b2" in err[0], err


def test_gpu_tiles_must_be_powers_of_two(tmp_path, capsys):
    """A Triton module takes power-of-two tiles from 16 (tl.arange, tl.dot): --tiles 100x64 on h200 is
    refused in one line and writes nothing (it once wrote a module that could not run); a forced size the
    module takes is labelled as the caller's, not the target table's."""
    out = tmp_path / "bad"
    assert main(["generate", "--spec", "tiny", "--target", "h200", "--tiles", "100x64", "-o", str(out)]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert len(err) == 1 and "'100x64'" in err[0] and "powers of two from 16" in err[0], err
    assert not out.exists()
    good = tmp_path / "good"
    assert main(["generate", "--spec", "tiny", "--target", "h200", "--tiles", "64x64", "-o", str(good)]) == 0
    module = next(good.glob("*.py")).read_text()
    assert "Br = 64, Bc = 64 (given by the caller)" in module and "from the target's [triton] table" not in module


def test_kernel_names_do_not_repeat_a_suffix(tmp_path):
    import json
    import re

    assert main(["generate", "--spec", "tiny", "--target", "ascend910b2", "-o", str(tmp_path)]) == 0
    sched = json.loads((tmp_path / "manifest.json").read_text())["schedule"]
    names = [n for label in ("forward", "backward") for n in sched[label]["kernels"]]
    assert names == ["tilegen_tiny_fwd", "tilegen_tiny_bwd_pre", "tilegen_tiny_bwd_main", "tilegen_tiny_bwd_post"], names
    for n in names:
        assert not re.search(r"_([a-z]+)_\1$", n), n
    assert "tilegen_tiny_fwd(" in (tmp_path / "fwd_kernels.asc").read_text()


def test_launch_labels_name_every_kernel_of_a_mask_mod_launch(tmp_path, capsys):
    """With a mask mod each program's launch runs its classify kernel first; the forward's own kernel is
    called like the launch (tilegen_<spec>_fwd). The label of each launch, in the kernel file and in
    generate's output, lists the program's kernels by the names the pass pipeline gave them, none empty."""
    import re

    from tilegen.backends import compile_backward, compile_forward
    from tilegen.core.spec import builtin_spec
    from tilegen.core.targets import load_target

    spec, target = builtin_spec("alibi-ascend"), load_target("ascend910b2")
    assert main(["generate", "--spec", "alibi-ascend", "--target", "ascend910b2", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    programs = {"fwd": compile_forward(spec, target=target), "bwd": compile_backward(spec, dq_strategy="atomic", target=target)}
    for label, program in programs.items():
        names = [k.name for k in program.kernels]
        assert names[0] == "classify" and all(k.has(SyncAll) for k in program.kernels[1:]), names  # one launch of them all
        header = next(ln for ln in (tmp_path / f"{label}_kernels.asc").read_text().splitlines() if ln.startswith("// Launches: "))
        shown = re.fullmatch(r"// Launches: (\w+) \(kernels (.*), SyncAll between\)\.", header)
        assert shown and shown.group(2).split(", ") == names, header
        assert f"1 launch: {shown.group(1)} (kernels {', '.join(names)}, SyncAll between)" in out, out


def test_the_ascend910_refusal_cites_documents_that_exist():
    import os
    import re
    from pathlib import Path

    from tilegen.core.targets import load_target

    msg = load_target("ascend910").generate_refusal
    assert "ascend-910b.md" not in msg  # not in the repository
    cited = re.findall(r"asc-devkit (docs/[^;]+?\.md)", msg)
    assert len(cited) == 2, msg
    devkit = Path(os.environ.get("ASC_DEVKIT", "/work/asc/devkit"))
    if not (devkit / "docs").is_dir():
        pytest.skip("needs an asc-devkit snapshot to check the cited paths")
    for path in cited:
        assert (devkit / path).is_file(), path


def test_a_second_derivative_is_refused_in_one_line():
    torch = pytest.importorskip("torch")
    import tilegen.torch as tt

    q, k, v = (torch.randn(1, 16, 2, 8, dtype=torch.float32, requires_grad=True) for _ in range(3))
    out = tt.flash_attn_func(q, k, v, causal=True)
    with pytest.raises(NotImplementedError) as info:
        (gq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
        gq.sum().backward()
    msg = str(info.value)
    assert "double backward" in msg and "\n" not in msg, msg
    # a first derivative still works
    out = tt.flash_attn_func(q, k, v, causal=True)
    (gq,) = torch.autograd.grad(out.sum(), q)
    assert gq.shape == q.shape and torch.isfinite(gq).all()


def test_inspect_reports_the_forward_when_no_backward_tile_fits(tmp_path, capsys):
    """Gemma-2's head dim 256 on 910B2 with the on-chip dK/dV strategy: the backward's smallest tile
    overflows L0C (the fp32 dK and dV accumulators [Bc, 256] alone are 2 x 64 KiB at Bc = 64, plus the
    score tile). The default (auto) takes the atomic strategy, whose L0C holds one cube step: it fits."""
    spec = tmp_path / "g.toml"
    spec.write_text('batch = 1\nheads_q = 8\nheads_kv = 4\nseq = 1024\nhead_dim = 256\ndtype = "bf16"\nmask = "causal"\n')
    assert main(["inspect", str(spec), "--target", "ascend910b2", "--no-nest", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "== backward (fused, dq strategy atomic, dK/dV strategy atomic): kernels" in out and "no schedule" not in out
    assert main(["inspect", str(spec), "--target", "ascend910b2", "--no-nest", "--dkv-strategy", "on-chip", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "== forward: kernels fwd" in out and "tile sizes: Br=" in out
    assert "== backward (fused, dq strategy atomic, dK/dV strategy on-chip): no schedule" in out
    assert "overflows level L0C" in unwrapped(out)
    assert "backward (fused, dq strategy atomic, dK/dV strategy on-chip): no schedule: " in unwrapped(out)  # in the summary
    table = out.split("rejected candidates")[1].splitlines()[2:]
    assert len(table) >= 6 and all("+" in row for row in table), table  # each rejected row marks an overflow
    import json

    assert main(["inspect", str(spec), "--target", "ascend910b2", "--json", "--dkv-strategy", "on-chip"]) == 0
    progs = json.loads(capsys.readouterr().out)["programs"]
    assert "prediction" in progs[0] and progs[1]["rejected"] and all(r["overflow_bytes"] for r in progs[1]["rejected"])


def test_overrides_on_run_inspect_generate(tmp_path, capsys):
    import json

    assert main(["run", "--spec", "tiny", "--seq-q", "20", "--seq-k", "50", "--window", "8,0", "--dtype", "bf16", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ok"] and res["spec"]["seq_q"] == 20 and res["spec"]["seq_k"] == 50
    assert res["spec"]["window"] == [8, 0] and res["spec"]["dtype"] == "bf16"
    assert {c["name"] for c in res["comparisons"]} >= {"O", "L", "dQ", "dK", "dV"} and all(c["ok"] for c in res["comparisons"])
    assert main(["inspect", "--spec", "tiny", "--no-mask", "--dtype", "fp32", "--program", "fwd", "--no-nest"]) == 0
    assert "fp32, none" in capsys.readouterr().out
    assert main(["run", "--spec", "tiny", "--seq", "8", "--seq-q", "9"]) == 2
    assert "--seq-q = 9" in capsys.readouterr().err
    assert main(["generate", "--spec", "tiny", "--causal", "--seq-k", "300", "--tiles", "64x128", "--json", "-o", str(tmp_path)]) == 0
    gen = json.loads(capsys.readouterr().out)
    assert gen["spec"]["seq_k"] == 300 and gen["spec"]["mask"] == "causal"
    for label in ("forward", "backward"):
        assert (gen["schedule"][label]["Br"], gen["schedule"][label]["Bc"]) == (64, 128), gen["schedule"]
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["schedule"] == gen["schedule"] and sorted(gen["files"]) == sorted(p.name for p in tmp_path.iterdir())


def test_a_warning_when_the_tensors_exceed_device_memory(capsys):
    # llama3-8b at batch 512: Q alone is 512 x 32 x 8192 x 128 x 2 B = 32 GiB; with K, V, O the forward
    # needs about 80 GiB, past the 64 GiB of a 910B2
    assert main(["inspect", "--spec", "llama3-8b", "--batch", "512", "--target", "ascend910b2", "--program", "fwd", "--no-nest"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "warning" in err[0] and "64.00 GiB" in err[0] and "memory_size" in err[0], err
    assert main(["inspect", "--spec", "llama3-8b", "--target", "ascend910b2", "--program", "fwd", "--no-nest"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_bar_on_a_terminal_only():
    import io

    from tilegen.cli import progress_bar
    from tilegen.harness.runner import check_spec
    from tilegen.core.spec import builtin_spec

    class Tty(io.StringIO):
        def isatty(self):
            return True

    with progress_bar(io.StringIO()) as p:
        assert p is None  # not a terminal: no bar
    calls = []
    stream = Tty()
    with progress_bar(stream, delay=0) as p:
        assert p is not None

        def spy(label, kernel, done, total):
            calls.append((label, kernel, done, total))
            p(label, kernel, done, total)

        check_spec(builtin_spec("tiny-fp32"), backward="fused", progress=spy)
    text = stream.getvalue()
    assert "forward: fwd" in text and "backward fused (atomic): main" in text, text
    last = {}
    for label, kernel, done, total in calls:
        last[(label, kernel)] = (done, total)
    assert ("forward", "fwd") in last and all(d == t and t >= 1 for d, t in last.values()), last


def test_python_api_generate_and_inspect(tmp_path):
    import json

    res = tilegen.generate("tiny", "ascend910b2", tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert res.schedule == manifest["schedule"] and res.target == "ascend910b2"
    assert sorted(res.files) == sorted(p.name for p in (tmp_path / "out").iterdir())
    assert json.loads(res.to_json())["schedule"] == manifest["schedule"]
    rep = tilegen.inspect(tilegen.builtin_spec("tiny"), "ascend910b2")
    assert rep.tiles("forward") == {"Br": res.schedule["forward"]["Br"], "Bc": res.schedule["forward"]["Bc"]}
    assert rep.predicted_s("backward") > 0
    data = json.loads(rep.to_json())
    assert data["target"]["name"] == "ascend910b2" and len(data["programs"]) == 2
    assert "tile sizes: Br=" in str(rep)
    with pytest.raises(tilegen.SpecError, match="spec = 'nope'"):
        tilegen.inspect("nope", "ascend910b2")


_BF16_PROBE = """
import importlib.util, os, sys
os.environ["TRITON_INTERPRET"] = "1"
import torch
spec = importlib.util.spec_from_file_location("m", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 2, 32, 16, generator=g).to(torch.bfloat16) for _ in range(3))
o = m.attention(q, k, v)
o = o[0] if isinstance(o, tuple) else o
ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
print(float((o.float() - ref).abs().max()))
"""


def test_a_generated_bf16_module_is_right_under_the_triton_interpreter(tmp_path):
    """Without the tests' interpreter patch (a fresh process): the module widens bf16 tl.dot itself."""
    pytest.importorskip("triton")
    from tilegen.core.spec import AttentionSpec

    spec = AttentionSpec(batch=1, heads_q=2, heads_kv=2, seq_q=32, seq_k=32, head_dim_qk=16, head_dim_v=16, dtype="bf16", name="bf")
    res = tilegen.generate(spec, "h200", tmp_path)
    (module,) = [f for f in res.files if f.endswith(".py")]
    proc = subprocess.run([sys.executable, "-c", _BF16_PROBE, str(tmp_path / module)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    err = float(proc.stdout.strip().splitlines()[-1])
    assert err < 3e-2, err  # bf16 rounding of O (|O| < 2: 2**-8 relative); garbage is ~1e8


def test_progress_bar_delay_counts_from_the_start_of_the_run():
    """Many short kernels, the run longer than the delay: the bar shows (tqdm's own delay would restart
    at each kernel and never show)."""
    import io
    import time

    from tilegen.cli import progress_bar

    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    with progress_bar(stream, delay=0.2) as p:
        for n in range(6):
            p("forward", f"k{n}", 1, 2)
            time.sleep(0.05)
            p("forward", f"k{n}", 2, 2)
    text = stream.getvalue()
    assert "forward: k5" in text and "forward: k0" not in text, text


def _json_run(capsys, *argv: str) -> dict:
    import json

    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _inspect_tiles(capsys, target: str) -> dict[str, tuple[int, int]]:
    import json

    assert main(["inspect", "--spec", "tiny", "--target", target, "--json"]) == 0
    progs = json.loads(capsys.readouterr().out)["programs"]
    return {p["label"].split(" ")[0]: (p["tiles"]["Br"], p["tiles"]["Bc"]) for p in progs}


@pytest.mark.parametrize("target", ["h200", "ascend910b2"])
def test_run_target_runs_the_tiles_inspect_shows(capsys, target):
    """`run --target T` interprets the schedule T gets: the tile sizes `inspect --target T --json` shows
    (which differ from the interpreter's defaults for this spec), and it says so."""
    shown = _inspect_tiles(capsys, target)
    default = _json_run(capsys, "--spec", "tiny")["programs"]["forward"]
    assert (default["Br"], default["Bc"]) not in shown.values(), (default, shown)  # the test can tell them apart
    data = _json_run(capsys, "--spec", "tiny", "--target", target)
    assert data["ok"] and data["target"] == target
    progs = data["programs"]
    assert (progs["forward"]["Br"], progs["forward"]["Bc"]) == shown["forward"], (progs["forward"], shown)
    fused = progs["backward fused (atomic)"]
    assert (fused["Br"], fused["Bc"]) == shown["backward"], (fused, shown)
    assert all(p["tiles_source"].startswith(f"{target}: ") for p in progs.values()), progs
    assert main(["run", "--spec", "tiny", "--target", target]) == 0
    lines = capsys.readouterr().out.splitlines()
    br, bc = shown["forward"]
    assert lines[0].startswith("tilegen run  tiny: ") and lines[0].endswith(f"  target {target}"), lines[0]
    assert lines[1].startswith(f"forward: kernels fwd; Br={br}, Bc={bc} ({target}: the cost model"), lines[1]


def test_run_unknown_target_is_one_line(capsys):
    assert main(["run", "--spec", "tiny", "--target", "nosuchgpu"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "--target = 'nosuchgpu' is invalid" in err[0] and "h200" in err[0] and "ascend910b2" in err[0], err
    assert captured.out == ""


def test_run_target_with_tiles_forces_them_checked_against_the_target(capsys):
    data = _json_run(capsys, "--spec", "tiny", "--target", "ascend910b2", "--tiles", "16x32")
    progs = data["programs"]
    assert all((p["Br"], p["Bc"]) == (16, 32) for p in progs.values()), progs
    assert "given by the caller, checked against ascend910b2" in progs["forward"]["tiles_source"], progs
    assert main(["run", "--spec", "tiny", "--target", "h200", "--tiles", "4096x4096"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Br=4096, Bc=4096 do not fit target h200" in err[0], err


def test_run_target_is_the_default_twin_target(capsys):
    # ascend910 has no Ascend C backend: --twin refuses it, which it would not do with its own default
    assert main(["run", "--spec", "tiny", "--target", "ascend910", "--twin"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target = 'ascend910' is invalid for the Ascend C backend" in err[0], err
    # --twin-target still wins
    assert main(["run", "--spec", "tiny", "--target", "ascend910b2", "--twin", "--twin-target", "h200"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "target = 'h200' is invalid for the Ascend C backend" in err[0], err


def test_run_target_runs_the_twin_on_that_target(capsys):
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    assert main(["run", "--spec", "tiny", "--seq", "40", "--target", "ascend910b3", "--twin"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if " twin (Ascend C)" in l]
    assert len(lines) == 2 and all("on the ascend910b3 twin" in l for l in lines), out


def test_a_misspelled_builtin_spec_suggests_the_close_name(capsys):
    """``--spec tinny``: one line naming the flag and the value, suggesting ``tiny`` before the list."""
    from tilegen.cli import main

    assert main(["run", "--spec", "tinny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--spec = 'tinny'" in err[0] and "did you mean 'tiny'?" in err[0]
