"""The generated Triton module's launches: the direct path through a compiled kernel, its detection and
fallbacks, the skipped input checks of ``trusted=True`` and the shared workspace allocation; on the CPU.

Triton's interpreter (``TRITON_INTERPRET=1``) has no compiled kernels, so the direct path is checked
with fake kernel objects standing in for a ``JITFunction`` and the ``CompiledKernel`` its launch
returns: the launcher must receive what Triton's own launch passes (Triton 3.9's ``JITFunction.run``:
``run(gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata, enter_hook, exit_hook,
*args)``, every parameter's value in args), and every form it does not recognise must take the ordinary launch, with the
ordinary arguments. The skipped checks are compared bitwise with the checked path in the interpreter.
tests/test_gpu_percall.py checks on a GPU that the direct path is taken and gives the same bits.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import dataclasses
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tilegen.backends import triton as triton_backend  # noqa: E402
from tilegen.core.spec import AttentionSpec  # noqa: E402

STREAM = 77  # the fake current stream
NAMES = ["x_ptr", "y_ptr", "x_s0", "y_s0", "n", "Br", "G"]  # two pointers, three ints, two constexprs
CONSTS = {"G": 2, "Br": 16}  # in another order than the parameters


def _module(dtype="fp16", causal=True, hq=2, hkv=2, layout="BNSD", dq_strategy=None):
    spec = AttentionSpec(batch=1, heads_q=hq, heads_kv=hkv, seq_q=24, seq_k=24, head_dim_qk=16, head_dim_v=16, dtype=dtype,
                         window=(-1, 0) if causal else (-1, -1), layout=layout, name="direct")
    return triton_backend.load(spec, "h200", dq_strategy)


class Launcher:
    """A launcher of Triton 3.9's form; records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, *args):
        self.calls.append((gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, *args))


class Compiled:
    def __init__(self, run, n_signature=len(NAMES)):
        self.run = run
        self.function = "function"
        self.packed_metadata = "metadata"
        self.src = SimpleNamespace(signature=dict.fromkeys(NAMES[:n_signature], "i32"))


class Kernel:
    """A JITFunction's launch interface: ``kernel[grid](*args, **kwargs)`` records and returns `compiled`."""

    arg_names = NAMES

    def __init__(self, compiled):
        self.compiled = compiled
        self.calls = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            return self.compiled

        return launch


@pytest.fixture()
def mod(monkeypatch):
    """A module with the direct path on (as on a GPU), a fake current device and stream, empty tables."""
    m = _module()
    monkeypatch.setattr(m, "_DIRECT_ON", True)
    monkeypatch.setattr(m, "_DIRECT", {})
    monkeypatch.setattr(m, "LAUNCHES", {"direct": 0, "ordinary": 0})
    monkeypatch.setattr(m, "_device_stream", lambda: (0, STREAM))
    return m


def _args():
    x, y = torch.zeros(64), torch.zeros(64)
    return (x, y), (1, 1, 64)


def _launch_twice(m, kernel, tensors, ints):
    for _ in range(2):
        m._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)


ORDINARY = ((3, 2), None, {"Br": 16, "G": 2, "num_warps": 4, "num_stages": 2})


def _check_ordinary(kernel, tensors, ints, n):
    assert len(kernel.calls) == n
    for grid, args, kwargs in kernel.calls:
        assert grid == (3, 2) and kwargs == ORDINARY[2]
        assert args == (*tensors, *ints)


def test_direct_after_first_launch_with_constexprs_in_parameter_order(mod):
    run = Launcher()
    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    _check_ordinary(kernel, tensors, ints, 1)  # the first launch went through Triton
    assert mod.LAUNCHES == {"direct": 1, "ordinary": 1}
    assert run.calls == [(3, 2, 1, STREAM, "function", "metadata", None, None, None, *tensors, *ints, 16, 2)]


def test_launcher_built_without_constexprs_gets_the_runtime_arguments_alone(mod):
    run = Launcher()
    kernel = Kernel(Compiled(run, n_signature=5))
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    assert run.calls == [(3, 2, 1, STREAM, "function", "metadata", None, None, None, *tensors, *ints)]


def test_launcher_with_a_shorter_named_prefix_is_accepted(mod):
    calls = []

    def run(gridX, gridY, gridZ, stream, function, *args):  # fewer named parameters, the rest in *args
        calls.append((gridX, gridY, gridZ, stream, function, *args))

    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    assert calls == [(3, 2, 1, STREAM, "function", "metadata", None, None, None, *tensors, *ints, 16, 2)]


def test_launcher_taking_everything_as_args_is_accepted(mod):
    calls = []

    def run(*args, **kwargs):  # everything in *args
        calls.append(args)

    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    assert calls == [(3, 2, 1, STREAM, "function", "metadata", None, None, None, *tensors, *ints, 16, 2)]


def _other_forms():
    def named_otherwise(grid, stream, *args):
        raise AssertionError("called")

    def fixed(gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata, launch_enter_hook, launch_exit_hook, a, b):
        raise AssertionError("called")

    future = Compiled(Launcher())
    future.result = lambda: None  # an asynchronous compile's future
    no_function = Compiled(Launcher())
    del no_function.function
    return {
        "run named otherwise": Compiled(named_otherwise),
        "run without *args": Compiled(fixed),
        "signature of neither length": Compiled(Launcher(), n_signature=6),
        "interpreter (None)": None,
        "future": future,
        "no function": no_function,
    }


@pytest.mark.parametrize("form", list(_other_forms()))
def test_unrecognised_forms_take_the_ordinary_launch_every_time(mod, form):
    compiled = _other_forms()[form]
    kernel = Kernel(compiled)
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    _check_ordinary(kernel, tensors, ints, 2)
    assert mod.LAUNCHES == {"direct": 0, "ordinary": 2}
    if compiled is not None and isinstance(compiled.run, Launcher):
        assert compiled.run.calls == []


def test_constexprs_not_last_take_the_ordinary_launch(mod, monkeypatch):
    run = Launcher()
    kernel = Kernel(Compiled(run))
    kernel.arg_names = ["x_ptr", "Br", "y_ptr", "x_s0", "y_s0", "n", "G"]
    tensors, ints = _args()
    _launch_twice(mod, kernel, tensors, ints)
    _check_ordinary(kernel, tensors, ints, 2)
    assert run.calls == []


def test_a_launch_hook_takes_the_ordinary_launch(mod, monkeypatch):
    run = Launcher()
    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    monkeypatch.setattr(mod, "_hooks_idle", lambda: False)
    mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    _check_ordinary(kernel, tensors, ints, 2)
    assert run.calls == []


def test_hooks_idle_reads_triton_knobs(mod, monkeypatch):
    from triton import knobs

    assert mod._hooks_idle()  # no profiler in the test process
    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):  # Triton 3.9: a hook chain
        hook = lambda metadata: None  # noqa: E731
        chain.add(hook)
        try:
            assert not mod._hooks_idle()
        finally:
            chain.remove(hook)
    else:
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", lambda metadata: None)
        assert not mod._hooks_idle()
    assert mod._hooks_idle()


@pytest.mark.parametrize("change", ["alignment", "dtype", "stride", "device"])
def test_a_change_of_the_specialisation_launches_ordinarily_again(mod, monkeypatch, change):
    run = Launcher()
    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    if change == "alignment":
        tensors = (tensors[0][1:], tensors[1])  # 4 bytes off a 16-byte boundary
    elif change == "dtype":
        tensors = (tensors[0].half(), tensors[1])
    elif change == "stride":
        ints = (2, 1, 64)
    else:
        monkeypatch.setattr(mod, "_device_stream", lambda: (1, STREAM))
    mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    assert len(kernel.calls) == 2 and run.calls == []
    mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    assert len(run.calls) == 1  # the new specialisation is direct from its second launch


def test_interpreter_never_takes_the_direct_path():
    m = _module()
    assert not m._DIRECT_ON


def test_workspaces_start_on_16_byte_boundaries_and_do_not_overlap():
    m = _module()
    shapes = ((1, 1, 3), (1, 1, 3, 5), (7,))
    xs = m._workspaces(shapes, torch.float32, "cpu", poison=True)
    assert [tuple(x.shape) for x in xs] == list(shapes)
    assert all(x.is_contiguous() and x.data_ptr() % 16 == 0 and x.isnan().all() for x in xs)
    for i, x in enumerate(xs):
        x.fill_(i)
    assert [x.unique().tolist() for x in xs] == [[0.0], [1.0], [2.0]]
    assert len({x.untyped_storage().data_ptr() for x in xs}) == 1  # one allocation


@pytest.mark.parametrize("dtype,causal,hkv", [("fp16", True, 2), ("bf16", False, 1)])
def test_trusted_calls_give_bitwise_the_checked_results(dtype, causal, hkv):
    m = _module(dtype, causal, hkv=hkv)
    gen = torch.Generator().manual_seed(3)
    td = m.DTYPE
    q, do = (torch.randn(1, 2, 24, 16, generator=gen).to(td) for _ in range(2))
    k, v = (torch.randn(1, hkv, 24, 16, generator=gen).to(td) for _ in range(2))
    checked = m.forward(q, k, v, poison=True)
    trusted = m.forward(q, k, v, poison=True, trusted=True)
    grads_checked = m.backward(q, k, v, *checked, do, poison=True)
    grads_trusted = m.backward(q, k, v, *trusted, do.transpose(2, 3).contiguous().transpose(2, 3), poison=True, trusted=True)
    for a, b in zip((*checked, *grads_checked), (*trusted, *grads_trusted)):
        assert torch.equal(a, b) and not a.isnan().any()
    with pytest.raises(ValueError, match="q.dtype"):
        m.forward(q.float(), k, v)


def test_the_installed_nvidia_launcher_has_a_recognised_form():
    import functools

    driver = pytest.importorskip("triton.backends.nvidia.driver")
    launcher = getattr(driver, "CudaLauncher", None)
    if launcher is None:
        pytest.skip("no CudaLauncher in this Triton")
    assert _module()._launcher_form(functools.partial(launcher.__call__, None))


def test_a_launcher_refusing_the_arguments_falls_back_for_good(mod):
    class Refusing(Launcher):
        def __call__(self, *args):
            super().__call__(*args)
            raise TypeError("function takes exactly 12 arguments")

    run = Refusing()
    kernel = Kernel(Compiled(run))
    tensors, ints = _args()
    for _ in range(3):
        mod._launch(kernel, (3, 2), tensors, ints, dict(CONSTS), 4, 2)
    assert len(run.calls) == 1  # tried once
    _check_ordinary(kernel, tensors, ints, 3)
    assert mod.LAUNCHES == {"direct": 0, "ordinary": 3}


def test_the_table_is_emptied_when_full(mod, monkeypatch):
    monkeypatch.setattr(mod, "_DIRECT_LIMIT", 2)
    run = Launcher()
    kernel = Kernel(Compiled(run))
    tensors, _ = _args()
    for n in range(3):
        mod._launch(kernel, (3, 2), tensors, (1, 1, n), dict(CONSTS), 4, 2)
    assert len(mod._DIRECT) == 1


# --- bound launch records (a trusted call's second run: one key, the recorded launchers) -------------


@pytest.fixture(params=[("BNSD", None), ("BSND", "separate")], ids=["BNSD-atomic", "BSND-separate"])
def bound(monkeypatch, request):
    """A real module (fp16, causal; BNSD with the atomic dQ, BSND with the separate one) whose kernels are fake kernels with the real parameter lists
    (each with its own recording launcher), the direct path on, empty tables and counters."""
    m = _module(layout=request.param[0], dq_strategy=request.param[1])
    monkeypatch.setattr(m, "_DIRECT_ON", True)
    monkeypatch.setattr(m, "_DIRECT", {})
    monkeypatch.setattr(m, "_BOUND", {})
    monkeypatch.setattr(m, "LAUNCHES", {"direct": 0, "ordinary": 0})
    monkeypatch.setattr(m, "BOUND_CALLS", {"forward": 0, "backward": 0})
    monkeypatch.setattr(m, "_device_stream", lambda: (0, STREAM))
    for name in KERNELS(m):
        jit = getattr(m, f"{name}_kernel")
        kernel = Kernel(Compiled(Launcher(), n_signature=len(jit.arg_names)))
        kernel.arg_names = list(jit.arg_names)
        kernel.compiled.src.signature = dict.fromkeys(jit.arg_names, "i32")
        monkeypatch.setattr(m, f"{name}_kernel", kernel)
    return m


def KERNELS(m):  # noqa: N802 - the module's kernels, forward first
    return [k for k in ("fwd", "pre", "main", "post", "main_dq") if hasattr(m, f"{k}_kernel")] + sorted(
        n[: -len("_kernel")] for n in vars(m) if n.endswith("_kernel") and n[: -len("_kernel")] not in ("fwd", "pre", "main", "post", "main_dq"))


def _qkv(m, seed=2):
    gen = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(m._physical_shape((1, 2, 24, 16)), generator=gen).to(m.DTYPE) for _ in range(4))
    lse = torch.zeros(1, 2, 24)
    return q, k, v, q.clone(), lse, do  # o: any tensor of o's shape (the kernels are fakes)


def _launched(m):
    """Every launcher call so far, per kernel, in kernel order: (grid, stream, pointer arguments as
    (data_ptr, dtype): all a launcher reads of a tensor (the strides are integer arguments; the record
    passes an input as given, not its BNSD view), the integer and constexpr arguments)."""
    out = []
    for name in KERNELS(m):
        kernel = getattr(m, f"{name}_kernel")
        n_ptr = sum(1 for a in kernel.arg_names if a.endswith("_ptr"))
        for call in kernel.compiled.run.calls:
            args = call[9:]
            out.append((name, call[:4], call[4:9], [(x.data_ptr(), x.dtype) for x in args[:n_ptr]], args[n_ptr:]))
    return out


def _kinds(entries):
    """`entries` with the new tensors' data pointers dropped (each call allocates its own)."""
    return [(name, grid, rest, [p[1:] for p in ptrs], ints) for name, grid, rest, ptrs, ints in entries]


def test_bound_record_gives_the_launches_and_arguments_of_the_direct_path(bound):
    m = bound
    q, k, v, o, lse, do = _qkv(m)
    m.forward(q, k, v, trusted=True)  # ordinary launches; the record is kept
    m.backward(q, k, v, o, lse, do, trusted=True)
    assert m.BOUND_CALLS == {"forward": 0, "backward": 0} and len(m._BOUND) == 2
    m._BOUND.clear()  # the per-launch direct path (the record is made again)
    out_direct = m.forward(q, k, v, trusted=True)
    grads_direct = m.backward(q, k, v, o, lse, do, trusted=True)
    direct = _launched(m)
    n = len(KERNELS(m))  # launches per forward + backward
    assert m.LAUNCHES == {"direct": n, "ordinary": n} and m.BOUND_CALLS == {"forward": 0, "backward": 0}
    out_bound = m.forward(q, k, v, trusted=True)
    grads_bound = m.backward(q, k, v, o, lse, do, trusted=True)
    assert m.BOUND_CALLS == {"forward": 1, "backward": 1} and m.LAUNCHES == {"direct": 2 * n, "ordinary": n}
    assert sum(len(getattr(m, f"{name}_kernel").calls) for name in KERNELS(m)) == n  # Triton's path: the first call only
    launched = _launched(m)
    assert [e[0] for e in direct] == KERNELS(m) and len(launched) == 2 * n
    by_kernel = {}
    for e in launched:
        by_kernel.setdefault(e[0], []).append(e)
    inputs = {t.data_ptr() for t in (q, k, v, o, lse, do)}
    for name, (d, b) in by_kernel.items():  # the direct path's call, the record's call
        assert _kinds([d]) == _kinds([b]), name  # grid, stream, launcher arguments, tensor kinds, ints, constexprs
        for x, ((pd, *_), (pb, *_)) in enumerate(zip(d[3], b[3])):
            assert (pd == pb) if pd in inputs else (pb not in inputs and pb % 16 == 0), (name, x)
    # the shared workspace: one buffer, D and dQ_ws at the same offsets as the direct path's
    if m._BOUND[next(iter(k for k in m._BOUND if k[0] == "backward"))][0] is not None:  # a shared workspace buffer
        (_, _, _, pre_d, _), (_, _, _, pre_b, _) = by_kernel["pre"]
        assert pre_d[3][0] - pre_d[2][0] == pre_b[3][0] - pre_b[2][0] > 0
    for a, b in zip((*out_direct, *grads_direct), (*out_bound, *grads_bound)):
        assert _same(a, b) and a.data_ptr() != b.data_ptr()


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride() and a.device == b.device


@pytest.mark.parametrize("change", ["alignment", "stride"])
def test_bound_record_falls_back_on_an_alignment_or_stride_change(bound, change):
    m = bound
    q, k, v, o, lse, do = _qkv(m)
    for _ in range(2):
        m.forward(q, k, v, trusted=True)
    assert m.BOUND_CALLS["forward"] == 1
    if change == "alignment":
        q2 = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape).copy_(q)  # 2 bytes off a 16-byte boundary
        assert q2.data_ptr() % 16
    else:
        q2 = q.transpose(2, 3).contiguous().transpose(2, 3)  # another stride
    ordinary = len(m.fwd_kernel.calls)
    m.forward(q2, k, v, trusted=True)
    assert m.BOUND_CALLS["forward"] == 1  # not the first key's record
    assert len(m.fwd_kernel.calls) == ordinary + 1  # a new specialisation: Triton's path
    grid, args, _ = m.fwd_kernel.calls[-1]
    assert args[0].data_ptr() == q2.data_ptr() and args[5:9] == m._logical(q2).stride()
    m.forward(q2, k, v, trusted=True)  # the new key's record
    assert m.BOUND_CALLS["forward"] == 2
    last = _launched(m)[-1]
    assert last[3][0][0] == q2.data_ptr() and last[4][:4] == m._logical(q2).stride()
    m.forward(q, k, v, trusted=True)  # the first key's record is still there
    assert m.BOUND_CALLS["forward"] == 3 and _launched(m)[-1][3][0][0] == q.data_ptr()


def test_bound_record_is_not_taken_with_a_hook_poison_or_untrusted(bound, monkeypatch):
    m = bound
    q, k, v, o, lse, do = _qkv(m)
    for _ in range(2):
        m.backward(q, k, v, o, lse, do, trusted=True)
    assert m.BOUND_CALLS["backward"] == 1
    m.backward(q, k, v, o, lse, do, trusted=True, poison=True)
    m.backward(q, k, v, o, lse, do)
    monkeypatch.setattr(m, "_hooks_idle", lambda: False)
    bwd = KERNELS(m)[1:]
    n = sum(len(getattr(m, f"{name}_kernel").calls) for name in bwd)
    m.backward(q, k, v, o, lse, do, trusted=True)
    assert m.BOUND_CALLS["backward"] == 1
    assert sum(len(getattr(m, f"{name}_kernel").calls) for name in bwd) == n + len(bwd)  # the hook sees Triton's launches


def test_bound_record_refused_by_the_launcher_is_dropped_for_good(bound):
    m = bound

    class Refusing(Launcher):
        def __call__(self, *args):
            super().__call__(*args)
            raise TypeError("function takes exactly 12 arguments")

    m.fwd_kernel.compiled.run = Refusing()
    q, k, v, _, _, _ = _qkv(m)
    m._DIRECT.clear()
    m.forward(q, k, v, trusted=True)  # ordinary; the record kept
    m.forward(q, k, v, trusted=True)  # the record's launch refused: redone on the ordinary path
    assert m.BOUND_CALLS["forward"] == 0 and list(m._BOUND.values()) == [None]
    assert len(m.fwd_kernel.calls) == 2 and len(m.fwd_kernel.compiled.run.calls) == 2  # the record's try, the direct path's try
    m.forward(q, k, v, trusted=True)
    assert m.BOUND_CALLS["forward"] == 0 and len(m.fwd_kernel.calls) == 3 and len(m.fwd_kernel.compiled.run.calls) == 2


def test_programs_with_host_work_beyond_launches_keep_no_record():
    spec = AttentionSpec(batch=1, heads_q=2, heads_kv=2, seq_q=24, seq_k=24, head_dim_qk=16, head_dim_v=16, dtype="fp16",
                         window=(-1, 0), layout="BNSD", name="direct", sinks=True)
    src = triton_backend.render(spec, "h200")
    assert "_bound_call(" not in src.split("\ndef forward(")[1]
    plain = triton_backend.render(dataclasses.replace(spec, sinks=False), "h200").split("\ndef forward(")[1]
    assert plain.count("_bound_call(") == 2  # forward and backward
