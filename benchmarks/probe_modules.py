"""What the hand-made GPU probes share (benchmarks/gpu_dq_probe.py, benchmarks/gpu_sep_probe.py): a
module loaded from generated (or edited) source text, and per-kernel device times."""
import os
import types


def load(src: str, name: str) -> types.ModuleType:
    """A module from ``src``, written to a file first (Triton reads a kernel's source from its file)."""
    m = types.ModuleType(name)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tilegen_probe_{name}.py")
    with open(path, "w") as f:
        f.write(src)
    m.__file__ = path
    exec(compile(src, path, "exec"), m.__dict__)
    return m


def kernel_times(fn, n: int = 20) -> dict:
    """Average device time per call of ``fn`` of each kernel it launches over ``n`` calls
    (torch.profiler), µs, by kernel name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return {e.key: e.device_time_total / n for e in p.key_averages() if e.device_time_total > 0}
