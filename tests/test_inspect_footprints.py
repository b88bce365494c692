"""What ``inspect`` reports of an Ascend program's on-chip bytes is what the emitted kernels allocate.

The reference is the emitted code itself: each kernel of ``tilegen generate``'s ``fwd_kernels.asc`` /
``bwd_kernels.asc`` reserves its L1, L0C and UB with ``pipe.InitBuffer(pool_<level>, bytes)``. The
chosen candidate's peak per level (the candidates table, ``inspect --json``'s ``peak_bytes``) and the
largest "footprint vs usable capacity" line per level must equal the largest such pool of the
program's kernels: the figures of the program ``generate`` emits, after the Ascend lowering passes
(lookahead copies, buffers live over the loop, streamed programs), not of the placed program before
them.
"""

from __future__ import annotations

import re

import pytest
from helpers import make_spec

from tilegen.backends import ascendc
from tilegen.harness.report import inspect_report

LEVELS = ("L1", "L0A", "L0B", "L0C", "UB")
FILES = {"fwd": "fwd_kernels.asc", "bwd": "bwd_kernels.asc"}

CASES = [
    # head dim 72 forward at 32 x 64: the pools grow by the lookahead's third copies
    ("d72-causal-fwd", dict(head_dim_qk=72, head_dim_v=72, seq_q=256, seq_k=256, window=(-1, 0)), "fwd", (32, 64)),
    ("d72-causal-bwd", dict(head_dim_qk=72, head_dim_v=72, seq_q=256, seq_k=256, window=(-1, 0)), "bwd", (32, 64)),
    ("d256-bwd", dict(head_dim_qk=256, head_dim_v=256, seq_q=256, seq_k=256), "bwd", None),
    ("d128-fwd-search", dict(head_dim_qk=128, head_dim_v=128, seq_q=1024, seq_k=1024, window=(-1, 0)), "fwd", None),
]


def emitted_pools(files: dict, program: str) -> dict[str, int]:
    """The largest ``InitBuffer(pool_<level>, bytes)`` per level over the program's kernel file."""
    out: dict[str, int] = {}
    for level, nbytes in re.findall(r"InitBuffer\(pool_(\w+), (\d+)\)", files[FILES[program]]):
        out[level.upper()] = max(out.get(level.upper(), 0), int(nbytes))
    return out


@pytest.mark.parametrize("name, shape, program, tiles", CASES, ids=[c[0] for c in CASES])
def test_reported_peaks_are_the_emitted_pools(name, shape, program, tiles):
    spec = make_spec(name=name, batch=1, heads_q=2, heads_kv=2, **shape)
    pools = emitted_pools(ascendc.generate(spec, "ascend910b2", tile_sizes=tiles).files, program)
    report = inspect_report(spec, "ascend910b2", tile_sizes=tiles, programs=(program,))
    (entry,) = report["programs"]
    sched = entry["schedule"]
    chosen = next(c for c in sched["candidates"] if (c["Br"], c["Bc"]) == (sched["chosen"]["Br"], sched["chosen"]["Bc"]))
    lines: dict[str, int] = {}
    for fp in entry["footprints"]:
        lines[fp["level"]] = max(lines.get(fp["level"], 0), fp["bytes"])
    for level in LEVELS:
        assert chosen["peak_bytes"].get(level, 0) == pools.get(level, 0), (level, chosen["peak_bytes"], pools)
        assert lines.get(level, 0) == pools.get(level, 0), (level, lines, pools)
