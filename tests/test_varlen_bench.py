"""The CPU-side logic of benchmarks/varlen_gpu.py (its GPU timings are run on the H200 only).

- The packed batch: seeded lengths that sum to the tokens, offsets, padding and unpadding round trip,
  the FLOP and pair counts of its docstring.
- The correctness check against the float32 per-sequence SDPA reference accepts tilegen and SDPA over
  the padded batch, and flags a peer that drops the causal mask (so the check can fail).
- Without CUDA the script exits with one line and status 2; the dry run's table names every peer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import varlen_gpu as vb  # noqa: E402


def _case(docs=4):
    return vb.Case(docs, 64, 2, 8, "fp32", "cpu")


def test_packed_batch_lengths_padding_and_counts():
    case = _case(4)
    assert case.lengths.sum() == 64 and len(case.lengths) == 4 and case.lengths.min() >= 64 // 16
    assert list(case.cu_np) == [0, *list(case.lengths.cumsum())]
    assert case.pairs == sum(int(n) ** 2 for n in case.lengths) / 2
    assert case.flops("fwdbwd") == 3.5 * 4 * 2 * 8 * case.pairs
    padded = case.pad(case.q)
    assert padded.shape == (4, 2, case.max_len, 8)
    assert torch.equal(case.unpad(padded), case.q)
    assert _case(4).lengths.tolist() == case.lengths.tolist()  # seeded
    for docs in vb.DOCS:  # the GPU rows: lengths >= tokens / (4·docs), not all multiples of a 64-row tile
        lengths = vb.seq_lengths(vb.TOKENS, docs)
        assert lengths.sum() == vb.TOKENS and len(lengths) == docs and lengths.min() >= vb.TOKENS // (4 * docs)
        assert any(n % 64 for n in lengths)


class _NotCausal(vb.SDPAMath):
    name = "wrong"

    def _run(self):
        import torch.nn.functional as F

        return F.scaled_dot_product_attention(*self.leaves)  # the causal mask dropped


def test_check_accepts_tilegen_and_sdpa_and_flags_a_wrong_peer():
    case = _case(4)
    peers = {"tilegen": vb.TilegenAPI(case), "sdpa-math": vb.SDPAMath(case), "wrong": _NotCausal(case)}
    out = vb.check(case, peers, seqs=2)
    assert out["rows"] == int(case.cu_np[2])
    for name in ("tilegen", "sdpa-math"):
        assert all(v["ok"] for v in out["peers"][name].values()), out["peers"][name]
    assert not any(v["ok"] for v in out["peers"]["wrong"].values())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the exit without CUDA")
def test_without_cuda_one_line_and_status_2(capsys):
    assert vb.main(["--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "CUDA" in err


def test_dry_run_table(tmp_path, capsys):
    assert vb.main(["--device", "cpu", "--docs", "4", "--tokens", "64", "--peers", "tilegen", "sdpa-math", "flex", "fa2", "--out", str(tmp_path)]) == 0
    md = (tmp_path / "varlen_gpu.md").read_text()
    for name in ("| tilegen |", "| sdpa-math |", "| flex |", "| fa2 | unavailable"):
        assert name in md
    assert "FAIL" not in md and (tmp_path / "varlen_gpu.json").exists()
