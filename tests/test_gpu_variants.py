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


def test_the_rows_and_variants_are_the_tables_gqa_rows():
    rows = gv.rows()
    assert len(rows) == 12 and all(r["gqa"] and r["dtype"] == "bf16" for r in rows)
    assert [r["causal"] for r in rows] == [True] * 6 + [False] * 6
    assert {(r["d"], r["n"]) for r in rows} == {(d, n) for d in (64, 128) for n in (1024, 4096, 16384)}
    b, h, hkv = gv.shape(rows[0])
    assert b * rows[0]["n"] == 16384 and h * rows[0]["d"] == 2048 and h // hkv == 8
    assert gv.SPLITS == (1, 2, 4, 8)


def test_a_run_with_fake_gpu_pieces(tmp_path, monkeypatch, capsys):
    import gpu_table

    def make_inputs(b, h, hkv, n, d, dtype, seed=0):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn((1, heads, 32, d), generator=g).to(torch.bfloat16) for heads in (8, 1, 1, 8)]

    def bench(fn, warmup, rep):
        fn()
        path = getattr(fn, "__self__", None)
        split = int(path.target.split("_")[-2]) if isinstance(path, gv.Variant) else 3
        return 1.0 / split  # ms: split 8 is the fastest

    def run_sdpa(self):
        import torch.nn.functional as F

        if self.impl == "flash":
            return F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=self.gqa)
        return orig_run(self)

    orig_run = gpu_table.Impl.run
    monkeypatch.setattr(gv, "make_inputs", make_inputs)
    monkeypatch.setattr(gv, "bench", bench)
    monkeypatch.setattr(gpu_table.Impl, "run", run_sdpa)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
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
