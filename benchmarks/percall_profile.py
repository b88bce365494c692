"""Where the per-call time of the tiny problem goes on a GPU: host operators of one forward+backward.

    python benchmarks/percall_profile.py [--calls 200] [--out DIR]

Runs gpu_table.py's per-call problem (1×1×128×64 bf16 causal, ``Impl``) through tilegen and through SDPA
flash, and prints for each: µs per forward+backward (CUDA events around ``--calls`` back-to-back calls,
median of 7 loops; gpu_table.py's per-call row interleaves the paths round by round), and the torch.profiler table of the host operators
(self CPU time per call, top 20), so that the share of the autograd engine, of the allocations and of
each launch can be read. Writes ``percall_profile.txt`` under ``--out`` (default benchmarks/results).
Needs a CUDA device.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_table import Impl, loop_us, make_inputs  # noqa: E402


def per_call_us(fn, calls: int) -> float:
    """µs per call: the median of 7 loops of ``calls`` calls (gpu_table.loop_us) after 20 warm-up calls."""
    for _ in range(20):
        fn()
    return statistics.median(loop_us(fn, calls) for _ in range(7))


def main() -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args()
    q, k, v, do = make_inputs(1, 1, 1, 128, 64, "bf16")
    lines = [f"torch {torch.__version__}; {torch.cuda.get_device_name()}; 1x1x128x64 bf16 causal, forward+backward"]
    for impl in ("tilegen", "flash"):
        path = Impl(impl, q, k, v, do, True, False)
        for phase in ("fwd", "bwd", "fwdbwd"):
            lines.append(f"{impl} {phase}: {per_call_us(getattr(path, phase), args.calls):.1f} us per call")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.calls):
                path.fwdbwd()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
        lines += [f"--- {impl}: host operators over {args.calls} forward+backward calls", table]
        print("\n".join(lines[-5:]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "percall_profile.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
