"""benchmarks/gpu_variants.py's logic on the CPU: arguments, the rounds, the budget, the files it writes.

The GPU pieces are replaced: inputs are tiny CPU tensors, timings a fixed number per variant (larger
group_split: faster, so that the best-variant and suggestion logic has something to pick), SDPA
flash is torch's SDPA on the CPU. tilegen runs through its user path on the CPU (the variant's
target file is passed as on the GPU; the CPU path does not read its schedule rows, and the emitted
schedule is read back from the Triton backend as on the GPU).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import gpu_variants as gv  # noqa: E402


def test_arguments_are_checked(capsys):
    with pytest.raises(SystemExit):
        gv.parse_args(["--budget", "0"])
    assert "--budget 0.0 is invalid" in capsys.readouterr().err
    args = gv.parse_args(["--budget", "420", "--out", "/tmp/x"])
    assert args.budget == 420 and args.out == "/tmp/x" and args.rounds == [1, 2, 3, 4, 5]


def test_without_cuda_it_says_so(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert gv.main(["--budget", "1"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out


def test_the_rows_and_variants_are_the_tables_rows():
    rows = [r for r in gv.rows() if r["gqa"] and r["n"] != 8192]
    assert len(rows) == 12 and all(r["dtype"] == "bf16" for r in rows)
    assert [r["causal"] for r in rows] == [True] * 6 + [False] * 6
    mha = [r for r in gv.rows() if not r["gqa"] and r["n"] != 8192]
    assert {(r["d"], r["n"], r["causal"]) for r in mha} == {(d, n, True) for d in (64, 128) for n in (1024, 4096, 16384)} | {
        (128, n, False) for n in (1024, 4096, 16384)
    }
    eight = {(r["d"], r["causal"], r["gqa"]) for r in gv.rows() if r["n"] == 8192}
    assert eight == {(128, c, g) for c in (False, True) for g in (False, True)}  # round 11's rows
    for rnd in range(6, 12):  # every row a round names exists
        assert set(gv.ROUND_ROWS[rnd]) <= {(r["d"], r["n"], r["causal"], r["gqa"]) for r in gv.rows()}
    assert {(r["d"], r["n"]) for r in rows} == {(d, n) for d in (64, 128) for n in (1024, 4096, 16384)}
    b, h, hkv = gv.shape(rows[0])
    assert b * rows[0]["n"] == 16384 and h * rows[0]["d"] == 2048 and h // hkv == 8
    assert gv.SPLITS == (1, 2, 4, 8)


def _current(program: str, d: int) -> tuple:
    """(Br, Bc, warps, stages) of targets/h200.toml's own row for ``program`` at head dim ``d``."""
    from tilegen.backends import triton as tb
    from tilegen.core.targets import load_target

    cfg = tb.triton_config(load_target("h200"))
    row = cfg.row("fwd" if program == "fwd" else "bwd-atomic", d, True, "bf16")
    k = row.knobs["fwd" if program == "fwd" else "main"]
    return (*row.tiles, k.num_warps, k.num_stages)


def test_the_first_configs_are_the_targets_current_rows():
    for prog in ("bwd", "fwd"):
        for d in (128, 64):
            assert gv.MHA_CONFIGS[prog][d][0] == _current(prog, d)
        assert gv.WIDE[prog][0] == _current(prog, 128)


def test_new_rounds_plan_heavy_first_on_and_off_and_fwd_rows():
    state = {"rows": [{**r, "H": 16, "Hkv": 16, "variants": []} for r in gv.rows()]}
    six = gv.plan(state, 6)
    assert [(r["n"], r["causal"], r["gqa"]) for r, _ in six][:4] == [(4096, True, False)] * 4  # N 4k first
    first = [v for r, v in six if r["n"] == 4096]
    assert [(v["program"], v["heavy_first"]) for v in first] == [("bwd", False), ("bwd", True), ("fwd", False), ("fwd", True)]
    assert all(r["d"] == 128 for r, _ in six) and len(six) == 12
    seven = gv.plan(state, 7)
    assert {(r["d"], r["causal"]) for r, _ in seven} == {(128, False)} and {r["gqa"] for r, _ in seven} == {True, False}
    assert len(seven) == 6 * 2 * gv.WIDE_FIRST
    assert len(gv.plan(state, 8)) == 6 * (len(gv.WIDE["bwd"]) + len(gv.WIDE["fwd"]) - 2 * gv.WIDE_FIRST)
    eleven = gv.plan(state, 11)  # the forward at N 8k: the two configs that trade places between 4k and 16k
    assert len(eleven) == 8 and {r["n"] for r, _ in eleven} == {8192}
    assert {(v["program"], v["Br"], v["Bc"], v["num_warps"], v["num_stages"]) for _, v in eleven} == {("fwd", 64, 64, 4, 3), ("fwd", 128, 64, 8, 3)}
    assert all((r["d"], r["n"]) != (128, 8192) for rnd in (1, 2, 3, 4, 5) for r, _ in gv.plan(state, rnd))
    ten = gv.plan(state, 10)
    assert {r["d"] for r, _ in ten} == {64} and len(ten) == 3 * (4 + 4)
    # a fwd variant's target row: program fwd, no group_split (a forward row refuses it)
    row = dict(dtype="bf16", d=128, n=4096, causal=True, gqa=False)
    text = gv.toml_row(row, first[3], "x")
    assert 'program = "fwd"' in text and "group_split" not in text and "heavy_first = true" in text and "group = 1" in text
    assert "fwd = { num_warps = 4, num_stages = 3 }" in text


@pytest.mark.slow
def test_dry_run_of_the_new_rounds_finds_every_variant_emitted(capsys, monkeypatch):
    monkeypatch.setattr(gv, "MHA_ORDER", (4096,))
    monkeypatch.setattr(gv, "ROUND_ROWS", {**gv.ROUND_ROWS, **{r: [k for k in gv.ROUND_ROWS[r] if k[1] == 4096] for r in (8, 10)}})
    assert gv.main(["--dry-run", "--rounds", "8", "10"]) == 0
    out = capsys.readouterr().out
    assert "0 mismatches" in out and "MISMATCH" not in out


def _fake_gpu(monkeypatch, make_inputs, bench):
    """The GPU pieces of a variants run faked on the CPU: ``make_inputs`` and ``bench`` as given, SDPA
    flash and Flex as SDPA on the CPU (Flex without its compilation), a CUDA device that is "available"."""
    import gpu_table

    orig_run = gpu_table.Impl.run

    def run_sdpa(self):
        import torch.nn.functional as F

        if self.impl in ("flash", "flex"):
            return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa)
        return orig_run(self)

    monkeypatch.setattr(gv, "make_inputs", make_inputs)
    monkeypatch.setattr(gv, "bench", bench)
    monkeypatch.setattr(gpu_table.Impl, "run", run_sdpa)
    monkeypatch.setattr(gpu_table.Impl, "_flex_setup", lambda self: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)


def _small_inputs(heads):
    """A fake of the benchmark's input maker: bf16 q, k, v, do of 32 tokens with ``heads`` heads each,
    whatever sizes the row asks for (seeded)."""
    def make_inputs(b, h, hkv, n, d, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn((1, hd, 32, d), generator=g).to(torch.bfloat16) for hd in heads]

    return make_inputs


def test_a_run_with_fake_gpu_pieces(tmp_path, monkeypatch, capsys):
    make_inputs = _small_inputs((8, 1, 1, 8))  # q, k, v, do heads: GQA 8 / 1

    def bench(fn, warmup, rep):
        fn()
        path = getattr(fn, "__self__", None)
        split = int(path.target.split("_")[-2]) if isinstance(path, gv.Variant) else 3
        return 1.0 / split  # ms: split 8 is the fastest

    _fake_gpu(monkeypatch, make_inputs, bench)
    # one causal and one non-causal row of D 64 only, so that the test stays short
    monkeypatch.setattr(gv, "ROW_ORDER", ((64, 4096),))
    out = tmp_path / "out"
    rc = gv.main(["--budget", "10000", "--out", str(out), "--rounds", "1", "3"])
    text = capsys.readouterr().out
    assert rc == 0, text
    data = json.loads((out / "gpu_variants.json").read_text())
    causal = [r for r in data["rows"] if r["causal"]][0]
    got = [(v["group_split"], v["heavy_first"], v["Br"]) for v in causal["variants"]]
    assert got[:4] == [(1, False, 32), (2, False, 32), (4, False, 32), (8, False, 32)]
    assert all(v["check"] == "ok" for v in causal["variants"]), [v.get("error") or v.get("check") for v in causal["variants"]]
    assert all(v["emitted"]["group_split"] == v["group_split"] for v in causal["variants"])
    # round 3: the other configs at split 1 and at the best split (8, the fake's fastest)
    assert (8, False, 64) in got and (1, False, 64) in got
    assert gv.best_variant(causal)["group_split"] == 8
    assert "best per row" in text and "split 8" in text
    md = (out / "gpu_variants.md").read_text()
    assert "group_split = 8" in md and "[[triton.schedule]]" in md
    # the suggested row parses and applies to its row
    sugg = data["suggested_rows"][0]
    target = gv.target_file(tmp_path, dict(dtype="bf16", d=64, n=4096, causal=True, gqa=True), sugg["variant"])
    assert gv.emitted(dict(dtype="bf16", d=64, n=4096, causal=True, gqa=True), target)["group_split"] == 8


def test_the_budget_skips_variants(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake")
    clock = iter(range(0, 10**6, 1000))
    monkeypatch.setattr(gv.time, "time", lambda: float(next(clock)))
    rc = gv.main(["--budget", "1", "--out", str(tmp_path)])
    assert rc == 0
    data = json.loads((tmp_path / "gpu_variants.json").read_text())
    assert data["rows"] == [] and len(data["meta"]["skipped"]) >= 48


def test_a_run_of_the_new_rounds_with_fake_gpu_pieces(tmp_path, monkeypatch, capsys):
    """Rounds 6 and 9 on one causal MHA row: heavy_first on and off for both programs, then the other
    configs at the better heavy_first; Flex measured on the row (its fake is SDPA on the CPU)."""
    make_inputs = _small_inputs((2, 2, 2, 2))

    def bench(fn, warmup, rep):
        fn()
        path = getattr(fn, "__self__", None)
        if isinstance(path, gv.Variant):
            return 0.5 if "_1.toml" in path.target else 1.0  # heavy_first on: twice as fast
        return 1.0 if path.impl == "flash" else 0.8  # Flex faster than flash

    _fake_gpu(monkeypatch, make_inputs, bench)
    monkeypatch.setattr(gv, "ROUND_ROWS", {**gv.ROUND_ROWS, 6: [(128, 4096, True, False)], 9: [(128, 4096, True, False)]})
    out = tmp_path / "out"
    rc = gv.main(["--budget", "10000", "--out", str(out), "--rounds", "6", "9", "--stem", "mha"])
    text = capsys.readouterr().out
    assert rc == 0, text
    data = json.loads((out / "mha.json").read_text())
    (rec,) = data["rows"]
    assert rec["flex"]["source"] == "this run" and "bwd" in rec["flex"]
    got = [(v["program"], v["heavy_first"], v["Br"]) for v in rec["variants"]]
    assert got[:4] == [("bwd", False, 64), ("bwd", True, 64), ("fwd", False, 64), ("fwd", True, 64)]
    assert all(v["check"] == "ok" for v in rec["variants"]), [v.get("error") or v.get("check") for v in rec["variants"]]
    assert all(v["emitted"]["heavy_first"] == v["heavy_first"] and v["emitted"]["program"] == v["program"] for v in rec["variants"])
    # round 9: the other configs at heavy_first on (the fake's faster)
    assert ("bwd", True, 32) in got and ("fwd", True, 128) in got and ("fwd", False, 128) not in got
    fwd = [v for v in rec["variants"] if v["program"] == "fwd"]
    assert all("fwd" in v and "bwd" not in v for v in fwd)
    assert "x Flex" in text and "best bf16 D128 N4k causal MHA" in text
    md = (out / "mha.md").read_text()
    assert 'program = "fwd"' in md and "heavy_first = true" in md and "| Flex |" in md
    sugg = {s["program"]: s for s in data["suggested_rows"]}
    assert sugg["fwd"]["variant"]["heavy_first"] is True and sugg["bwd"]["variant"]["heavy_first"] is True
    row = dict(dtype="bf16", d=128, n=4096, causal=True, gqa=False)
    target = gv.target_file(tmp_path, row, sugg["fwd"]["variant"])
    assert gv.emitted(row, target, "fwd")["heavy_first"] is True  # the suggested row parses and applies


def test_flex_from_the_table_when_not_run():
    rec = dict(dtype="bf16", d=128, n=4096, causal=False, gqa=False)
    fx = gv.table_flex(rec)
    assert fx is not None and fx["source"] == "table" and fx["bwd"]["tflops"] > 0
    assert gv.flex_of({**rec, "flex_table": fx})["source"] == "table"
