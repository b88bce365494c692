"""`tilegen inspect` shows the schedule `tilegen generate` emits: for every built-in spec and every target
that generates code, the tile sizes (and, on a GPU, the launch knobs and the sources of both) in
`inspect --json` equal those in the manifest `generate` writes. Both outputs are read as a user reads
them: the CLI's stdout and the manifest.json file."""

from __future__ import annotations

import json

import pytest

from tilegen import cli
from tilegen.core.spec import builtin_spec, builtin_specs
from tilegen.core.targets import load_target, target_names
from helpers import unwrapped

TARGETS = [t for t in target_names() if t != "ascend910"]  # ascend910 generates nothing (refused in one line)
# every built-in spec on one target of each kind (the Ascend 910B2, the H200); the other 910B targets
# differ only in their numbers (cores, clock): two specs each, one plain and one with mods and a packed batch
FULL = ("ascend910b2", "h200")
CASES = [(s, t) for s in sorted(builtin_specs()) for t in TARGETS if t in FULL]
CASES += [(s, t) for t in TARGETS if t not in FULL for s in ("llama2-7b", "varlen-sinks")]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")


def _cli(argv, capsys) -> str:
    capsys.readouterr()
    assert cli.main(argv) == 0
    return capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("spec,target", CASES, ids=[f"{s}-{t}" for s, t in CASES])
def test_inspect_shows_what_generate_emits(spec, target, tmp_path, capsys):
    report = json.loads(_cli(["inspect", "--spec", spec, "--target", target, "--json", "--no-nest"], capsys))
    gpu = load_target(target).kind == "gpu"
    if not gpu and builtin_spec(spec).dtype == "fp32":  # the Ascend C backend refuses fp32 (16-bit cube operands)
        assert cli.main(["generate", "--spec", spec, "--target", target, "-o", str(tmp_path)]) == 2
        assert "dtype = 'fp32' is invalid" in capsys.readouterr().err
        return
    if builtin_spec(spec).has_mods:  # a backend may refuse a construct of the mods it does not emit yet: one line
        capsys.readouterr()
        if cli.main(["generate", "--spec", spec, "--target", target, "-o", str(tmp_path)]) == 2:
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("tilegen: error: "), err
            return
    else:
        _cli(["generate", "--spec", spec, "--target", target, "-o", str(tmp_path)], capsys)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    shown = {p["label"].split(" ")[0]: p for p in report["programs"]}
    assert sorted(shown) == ["backward", "forward"]
    for label in ("forward", "backward"):
        emitted, prog = manifest["schedule"][label], shown[label]
        assert (prog["tiles"]["Br"], prog["tiles"]["Bc"]) == (emitted["Br"], emitted["Bc"]), label
        # kernel names: the manifest's are the generated symbols, which end in the program's kernel names
        assert len(prog["kernels"]) == len(emitted["kernels"])
        assert all(e.endswith(k) for k, e in zip(prog["kernels"], emitted["kernels"])), (prog["kernels"], emitted["kernels"])
        if gpu:
            assert prog["emitted"] == emitted  # tiles, their source, warps and stages per kernel with sources
            assert set(emitted["launch"]) == set(emitted["kernels"])
        else:
            assert prog["schedule"]["chosen"] == {"Br": emitted["Br"], "Bc": emitted["Bc"]}


def test_inspect_text_names_the_row_warps_and_stages(capsys):
    """The text report of llama3-8b on h200: the row the tiles come from, and each kernel's knobs."""
    text = unwrapped(_cli(["inspect", "--spec", "llama3-8b", "--target", "h200", "--no-nest", "--verbose"], capsys))
    fwd = text.split("== backward")[0]
    # [0]: Sk >= 8192, which llama3-8b's 8192 keys reach
    assert "tile sizes: Br=128, Bc=64: from the target's triton.schedule[0] (fwd, head_dim 128, Sk >= 8192, Br 128 x Bc 64)" in fwd
    assert "launch fwd: num_warps=8, num_stages=3 (the target's triton.schedule[0]" in fwd
    assert "fastest predicted" not in fwd
    assert "launch main: num_warps=8, num_stages=3" in text
