"""tilegen.backends.triton_compile (inspect --compile, benchmarks/gpu_compile.py) against what Triton
allocated on the H200.

The reference is ``benchmarks/results/gpu_footprint.json`` (issue 12): the shared bytes Triton's
metadata reported for the generated kernels after a run on one H200 (bf16, D 128, causal, N 4096:
forward 64x64 / 4 warps / 3 stages 114688 B, backward main 64x128 / 8 warps / 2 stages 164352 B).
The CPU compile for sm_90 must give the same figures. Needs Triton (its ptxas and cuobjdump), no GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
HERE = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(HERE))
import gpu_model  # noqa: E402

from tilegen.backends.triton_compile import compile_resources  # noqa: E402


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "0")


def test_cpu_compile_gives_the_shared_bytes_the_h200_run_reported():
    measured = next(r for r in json.loads((HERE / "results" / "gpu_footprint.json").read_text())
                    if r["dtype"] == "bf16" and r["D"] == 128 and r["causal"] and r.get("launched")
                    and r["tiles"]["bwd"]["Br"] == 64 and r["tiles"]["bwd"]["Bc"] == 128)["measured"]
    facts = compile_resources(gpu_model.sweep_spec(128, 4096, "bf16", True), "h200", None,
                              {"fwd": (64, 64), "bwd": (64, 128)},
                              {ph: (measured[ph]["num_warps"], measured[ph]["num_stages"]) for ph in ("fwd", "main")})["kernels"]
    for ph in ("fwd", "main"):
        assert facts[ph]["shared_bytes"] == measured[ph]["shared"], (ph, facts[ph], measured[ph])
        assert 0 < facts[ph]["registers"] <= 255
        assert facts[ph]["stack_bytes"] >= 0
