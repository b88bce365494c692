"""tilegen.backends.triton.compile (inspect --compile, benchmarks/gpu_compile.py) against what Triton
allocated on the H200.

The reference is ``benchmarks/results/gpu_footprint.json`` (issue 12): the shared bytes Triton's
metadata reported for the generated kernels after runs on one H200 (fp32, fp16 and bf16; D 64 to
192; causal or not; each row's tiles, warps and stages). The CPU compile for sm_90 must give the same
figures for the forward and the backward main kernel, the two the GPU model reads (the pre kernel at
the padded D 72 differs: 128/256 B here against 512/1024 B there; benchmarks/NOTES.md). Needs Triton
(its ptxas and cuobjdump), no GPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("triton")

from tilegen.backends.triton.compile import compile_resources_many  # noqa: E402
from tilegen.core.spec import AttentionSpec  # noqa: E402

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "gpu_footprint.json"


def _rows():
    """One launched row per (dtype, head dim) of the H200 run."""
    seen, out = set(), []
    for r in json.loads(RESULTS.read_text()):
        if r.get("launched") and (r["dtype"], r["D"]) not in seen:
            seen.add((r["dtype"], r["D"]))
            out.append(r)
    return out


def _request(row) -> dict:
    """compile_resources's arguments for a row: its spec, tiles, warps and stages; the run measured the
    atomic backward (pre, main, post), the strategy of every row then."""
    spec = AttentionSpec(batch=row["B"], heads_q=row["H"], heads_kv=row["H"], seq_q=row["N"], seq_k=row["N"], head_dim_qk=row["D"],
                         head_dim_v=row["D"], dtype=row["dtype"], window=(-1, 0) if row["causal"] else (-1, -1), name="footprint")
    tiles = {p: (row["tiles"][p]["Br"], row["tiles"][p]["Bc"]) for p in ("fwd", "bwd")}
    knobs = {ph: (m["num_warps"], m["num_stages"]) for ph, m in row["measured"].items()}
    return {"spec": spec, "target": "h200", "dq_strategy": "atomic", "tile_sizes": tiles, "knobs": knobs}


@pytest.fixture(scope="module")
def compiled() -> list[dict]:
    """Every row's compile, in one child process (Triton and torch imported once, not once a row);
    with the compile cache off, as each row compiled before."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TILEGEN_CACHE", "0")
        return compile_resources_many([_request(row) for row in _rows()])


@pytest.mark.parametrize("n", range(len(_rows())), ids=[f"{r['dtype']}-D{r['D']}-{'causal' if r['causal'] else 'full'}" for r in _rows()])
def test_cpu_compile_gives_the_shared_bytes_the_h200_run_reported(n, compiled):
    measured = _rows()[n]["measured"]
    facts = compiled[n]["kernels"]
    for ph in ("fwd", "main"):
        assert facts[ph]["shared_bytes"] == measured[ph]["shared"], (ph, facts[ph], measured[ph])
        assert (facts[ph]["num_warps"], facts[ph]["num_stages"]) == (measured[ph]["num_warps"], measured[ph]["num_stages"])
        assert 0 < facts[ph]["registers"] <= 255 and facts[ph]["stack_bytes"] >= 0
