"""Whole-process wall time of tilegen commands (median of N runs, each a fresh process).

Default commands: ``tilegen inspect --spec llama2-7b --target ascend910b2`` (goal: under 1 s median)
and ``tilegen generate --spec llama2-7b --target ascend910b2 -o <tmp>`` when the generate verb exists
(goal: under 1 s median). Also times ``python -c "import tilegen.cli"`` to show the import floor.
Each command runs twice over: "cold" with the compile cache off (TILEGEN_CACHE=0: every run lowers,
schedules and verifies from the spec) and "warm" with a fresh cache folder that one untimed run filled
first (the schedule comes from disk; see tilegen/cache.py).

Usage: python benchmarks/cli_time.py [--runs 7] [--out benchmarks/results/cli_time.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def timed(cmd: list[str], runs: int, extra_env: dict[str, str], warm_up: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra_env)
    if warm_up:
        subprocess.run(cmd, capture_output=True, text=True, env=env)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - t0)
        if proc.returncode != 0:
            return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "cli_time.json")
    args = parser.parse_args()
    py = sys.executable
    out = tempfile.mkdtemp(prefix="tilegen-bench-")
    cases = {
        "import tilegen.cli": [py, "-c", "import tilegen.cli"],
        "inspect llama2-7b ascend910b2": [py, "-m", "tilegen", "inspect", "--spec", "llama2-7b", "--target", "ascend910b2"],
        "generate llama2-7b ascend910b2": [py, "-m", "tilegen", "generate", "--spec", "llama2-7b", "--target", "ascend910b2", "-o", out],
    }
    results = {}
    for name, cmd in cases.items():
        results[f"{name} (cold)"] = timed(cmd, args.runs, {"TILEGEN_CACHE": "0"}, warm_up=False)
        cache = tempfile.mkdtemp(prefix="tilegen-bench-cache-")
        results[f"{name} (warm)"] = timed(cmd, args.runs, {"TILEGEN_CACHE_DIR": cache}, warm_up=True)
    print("| command | median (s) | min (s) | max (s) |")
    print("|---|---|---|---|")
    for name, r in results.items():
        if "median_s" in r:
            print(f"| {name} | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} |")
        else:
            print(f"| {name} | failed: {r['error']} | | |")
    results["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
