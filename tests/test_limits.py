"""Counts without tile-pair enumeration, and the limits of what tilegen accepts.

The static counts (:mod:`tilegen.models.analysis`) sum the innermost tile loop in closed form; they are checked
here against a count over a dense [Sq, Sk] visibility mask built from DESIGN §3's rule
(:func:`tilegen.core.reference.visible`): tile pair (i, j) is visited iff its block of the mask has a True.
Specs past tilegen's limits fail with one line naming the field; a 2^23-token spec compiles in bounded
memory on both backends.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tilegen.models import analysis
from tilegen.core import dtypes, reference
from tilegen.models.analysis import count
from tilegen.core.build import build_backward, build_forward
from tilegen.cli import main
from tilegen.core.errors import SpecError
from tilegen.core.ir import Bc, Br
from tilegen.core.spec import MAX_SEQ, MAX_WINDOW, AttentionSpec, visible_row_range

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@st.composite
def small_cases(draw):
    seq_q = draw(st.integers(1, 90))
    seq_k = draw(st.one_of(st.just(seq_q), st.integers(1, 90)))
    kind = draw(st.sampled_from(["none", "causal", "window"]))
    side = st.one_of(st.just(-1), st.integers(0, 40))
    window = {"none": (-1, -1), "causal": (-1, 0)}.get(kind) or (draw(side), draw(side))
    alignment = draw(st.sampled_from(["bottom_right", "top_left"]))
    br, bc = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    chunk = draw(st.sampled_from([1, 3, 1 << 15]))  # rows of an enumerated outer loop per step
    return seq_q, seq_k, window, alignment, br, bc, chunk


def _brute(spec: AttentionSpec, br: int, bc: int):
    """Visited tile pairs from the dense mask: (count, Σ key rows, Σ query rows, Σ query·key rows)."""
    vis = reference.visible(spec.seq_q, spec.seq_k, spec.window, spec.alignment)
    pairs = nk = nq = nqk = 0
    for i in range(-(-spec.seq_q // br)):
        for j in range(-(-spec.seq_k // bc)):
            block = vis[i * br : (i + 1) * br, j * bc : (j + 1) * bc]
            if block.any():
                rows, cols = block.shape
                pairs += 1
                nk += cols
                nq += rows
                nqk += rows * cols
    return pairs, nk, nq, nqk


@settings(max_examples=60, deadline=None)
@given(small_cases())
def test_counts_match_a_dense_mask(case):
    """Forward and every phase of the unfused backward (both loop orders: K/V tiles outer in dv and
    dqdk, Q tiles outer in ds) visit exactly the tile pairs the dense mask leaves non-empty, with the
    tails of both sides: K/V bytes weigh each pair by its key rows, P and dS bytes by rows × keys;
    the outer loop's rows go in chunks of any size."""
    seq_q, seq_k, window, alignment, br, bc, chunk = case
    try:
        spec = AttentionSpec(
            batch=2, heads_q=3, heads_kv=1, seq_q=seq_q, seq_k=seq_k, head_dim_qk=5, head_dim_v=7,
            window=window, alignment=alignment,
        )
    except SpecError:
        return  # a mask that leaves every row empty
    pairs, nk, nq, nqk = _brute(spec, br, bc)
    heads, item = spec.batch * spec.heads_q, dtypes.itemsize(spec.dtype)
    saved, analysis.CHUNK = analysis.CHUNK, chunk
    try:
        fwd = count(build_forward(spec).bind({Br: br, Bc: bc}))["fwd"]
        bwd = count(build_backward(spec).bind({Br: br, Bc: bc}))
    finally:
        analysis.CHUNK = saved
    assert fwd.flops["matmul"] == heads * pairs * (2 * br * bc * 5 + 2 * br * bc * 7)
    assert fwd.bytes_read["K"] == heads * nk * 5 * item
    assert fwd.bytes_read["V"] == heads * nk * 7 * item
    p_item = 4  # the unfused program keeps P in fp32 in HBM: dS reads the unrounded P (DESIGN §3)
    assert bwd["dv"].bytes_written["P"] == heads * nqk * p_item  # K/V tiles outer
    assert bwd["ds"].bytes_read["P"] == heads * nqk * p_item  # Q tiles outer
    assert bwd["ds"].bytes_written["dS"] == heads * nqk * item
    assert bwd["ds"].bytes_read["V"] == heads * nk * 7 * item
    assert bwd["dqdk"].bytes_read["dS"] == heads * nqk * item
    assert bwd["dqdk"].bytes_written["dQ_ws"] == heads * nq * 5 * 4  # one atomic add per pair


@settings(max_examples=200, deadline=None)
@given(small_cases())
def test_visible_row_range_matches_a_dense_mask(case):
    seq_q, seq_k, window, alignment = case[:4]
    off = seq_k - seq_q if alignment == "bottom_right" else 0
    rows = np.flatnonzero(reference.visible(seq_q, seq_k, window, alignment).any(axis=1))
    first, stop = visible_row_range(seq_q, seq_k, window, off)
    assert (first, stop) == ((int(rows[0]), int(rows[-1]) + 1) if rows.size else (first, first))
    assert rows.size == 0 or rows.size == stop - first  # the visible rows are one interval


BASE = dict(batch=1, heads_q=1, heads_kv=1, seq_q=64, seq_k=64, head_dim_qk=64, head_dim_v=64)


@pytest.mark.parametrize(
    "change, field, accepted",
    [
        ({"seq_q": MAX_SEQ + 1}, "seq_q", f"from 1 to {MAX_SEQ}"),
        ({"seq_k": 2**40}, "seq_k", f"from 1 to {MAX_SEQ}"),
        ({"window": (MAX_WINDOW + 1, 0)}, "window", f"from 0 to {MAX_WINDOW}"),
        ({"window": (0, 2**70)}, "window", f"from 0 to {MAX_WINDOW}"),
        # 2^30 · 2^24 · 1024 · 4 B of fp32 dQ accumulator per batch: past 2^63 bytes
        ({"batch": 2**20, "heads_q": 2**20, "heads_kv": 1, "seq_q": MAX_SEQ, "head_dim_qk": 1024}, "batch", "from 1 to "),
        ({"heads_q": 2**30, "heads_kv": 1, "seq_q": MAX_SEQ, "head_dim_qk": 1024}, "heads_q", "from 1 to 134217727"),
        # NumPy integers must not wrap in the size check
        ({"batch": np.int64(2**20), "heads_q": np.int64(2**20), "seq_q": np.int64(MAX_SEQ), "head_dim_qk": np.int64(1024)}, "batch", "from 1 to 127 "),
    ],
)
def test_specs_past_the_limits_are_refused_naming_the_field(change, field, accepted):
    with pytest.raises(SpecError) as exc:
        AttentionSpec(**{**BASE, **change})
    assert exc.value.field == field
    assert accepted in exc.value.accepted
    assert "\n" not in str(exc.value)


def test_limits_are_one_line_errors_on_the_command_line(capsys, tmp_path):
    assert main(["generate", "--spec", "tiny", "--seq", str(MAX_SEQ + 1), "-o", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "seq_q = 16777217" in err and f"from 1 to {MAX_SEQ}" in err
    spec = tmp_path / "wide.toml"
    spec.write_text('batch = 1048576\nheads_q = 1048576\nheads_kv = 1\nseq = 16777216\nhead_dim = 1024\ndtype = "fp32"\n')
    assert main(["inspect", str(spec), "--target", "h200"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "batch = 1048576" in err and "2**63 bytes" in err


PROBE = r"""
import json, resource, sys, time
from tilegen.cli import main
out = {}
for target in ("ascend910b2", "h200"):
    for verb in (["generate", "-o", sys.argv[1] + "/" + target], ["inspect", "--no-nest"]):
        t = time.perf_counter()
        rc = main([verb[0], "--spec", "llama3-8b", "--seq", str(2**23), "--target", target] + verb[1:])
        out[target + " " + verb[0]] = (rc, round(time.perf_counter() - t, 2))
try:  # this process's own peak (ru_maxrss would also count the forking parent's pages)
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    out["maxrss_kib"] = int(hwm[0].split()[1])
except (OSError, IndexError):
    out["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps(out))
"""


def test_a_2_23_token_spec_compiles_in_bounded_memory(tmp_path):
    """generate and inspect on both backends at Sq = Sk = 2^23 (at 32×64 tiles, 1.7·10^10 causal tile
    pairs, which an enumeration could not hold) in a fresh process, uncached."""
    env = {**os.environ, "TILEGEN_CACHE": "0", "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for key, value in result.items():
        if key != "maxrss_kib":
            assert value[0] == 0, (key, value)
    assert result["maxrss_kib"] < 400 * 1024, result  # about 100 MiB, as for a 1k-token spec
