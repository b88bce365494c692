"""The GPU target of a tilegen.torch call when the caller names none: the CUDA device's, by its name
(``torch.cuda.get_device_name``), else the nearest target by compute capability, SM count and memory,
with one warning per device model. The devices are stand-ins: torch.cuda's queries are replaced by the
figures NVIDIA's datasheets give for each device (name, compute capability, SMs, memory), so the
tests run without a GPU; the expected targets follow from those figures and the target files'."""

from __future__ import annotations

import types
import warnings

import pytest

torch = pytest.importorskip("torch")

from tilegen.torch import device  # noqa: E402
from tilegen.torch.call import Call  # noqa: E402

GIB = 2**30
# name, compute capability, SMs, memory: NVIDIA's datasheets (H800: an H100 SXM5 for export, 80 GB; A100 SXM4 80 GB: 108 SMs;
# H100 PCIe: 114 SMs)
H100 = ("NVIDIA H100 80GB HBM3", (9, 0), 132, 80 * GIB)
H200 = ("NVIDIA H200", (9, 0), 132, 141 * GIB)
H800 = ("NVIDIA H800", (9, 0), 132, 80 * GIB)
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0), 108, 80 * GIB)
H100_PCIE = ("NVIDIA H100 PCIe", (9, 0), 114, 80 * GIB)


@pytest.fixture(autouse=True)
def _fresh():
    device.target_for_device.cache_clear()
    yield
    device.target_for_device.cache_clear()


def _as_device(monkeypatch, name, capability, sms, memory):
    """torch.cuda's queries answer as the device ``name`` would, for any index; counts the queries."""
    asked = []

    def query(answer):
        def f(index=None):
            asked.append(index)
            return answer
        return f

    monkeypatch.setattr(torch.cuda, "get_device_name", query(name))
    monkeypatch.setattr(torch.cuda, "get_device_capability", query(capability))
    monkeypatch.setattr(torch.cuda, "get_device_properties", query(types.SimpleNamespace(multi_processor_count=sms, total_memory=memory)))
    return asked


def _no_cuda(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.cuda was asked about a device")

    for fn in ("get_device_name", "get_device_capability", "get_device_properties"):
        monkeypatch.setattr(torch.cuda, fn, refuse)


def _cuda_q(index=0):
    """What Call.of and gpu_target read of q: its dtype and its device (a CUDA one, without a GPU)."""
    return types.SimpleNamespace(dtype=torch.float16, device=torch.device("cuda", index))


def _targets(fn, n=2):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fn() for _ in range(n)]
    return got, [w for w in caught if issubclass(w.category, device.DeviceTargetWarning)]


@pytest.mark.parametrize("dev,expected", [(H100, "h100"), (H200, "h200")])
def test_a_device_named_in_a_target_file_takes_that_target_silently(monkeypatch, dev, expected):
    _as_device(monkeypatch, *dev)
    got, warned = _targets(lambda: device.gpu_target(None, _cuda_q()))
    assert got == [expected, expected] and not warned


def test_an_unknown_device_of_a_known_architecture_takes_the_nearest_and_says_so_once(monkeypatch):
    _as_device(monkeypatch, *H800)
    got, warned = _targets(lambda: device.gpu_target(None, _cuda_q()))
    # sm_90 like h100 and h200, 132 SMs like both; 80 GB: the H100's memory, not the H200's 141 GB
    assert got == ["h100", "h100"]
    assert len(warned) == 1, [str(w.message) for w in warned]
    msg = str(warned[0].message)
    assert "'NVIDIA H800'" in msg and "'h100'" in msg and "target=" in msg, msg


def test_an_unknown_architecture_takes_the_newest_and_says_so_once(monkeypatch):
    _as_device(monkeypatch, *A100)
    got, warned = _targets(lambda: device.gpu_target(None, _cuda_q()))
    assert got[0] == got[1] and got[0] in ("h100", "h200")
    assert load_arch(got[0]) == "sm_90"  # no target file has sm_80: the newest architecture
    assert got[0] == "h100"  # of the sm_90 targets, the one nearest in memory (80 GB)
    assert len(warned) == 1 and "'NVIDIA A100-SXM4-80GB'" in str(warned[0].message) and "sm_80" in str(warned[0].message)


def test_a_device_named_but_unlike_its_target_keeps_it_and_says_so_once(monkeypatch):
    _as_device(monkeypatch, *H100_PCIE)
    got, warned = _targets(lambda: device.gpu_target(None, _cuda_q()))
    assert got == ["h100", "h100"]
    assert len(warned) == 1 and "114 SMs" in str(warned[0].message) and "132 SMs" in str(warned[0].message)


def load_arch(name: str) -> str:
    from tilegen.core.targets import load_target

    return load_target(name).arch


def test_a_named_target_wins_without_asking_the_device(monkeypatch):
    _no_cuda(monkeypatch)
    assert device.gpu_target("h200", _cuda_q()) == "h200"
    assert device.gpu_target("h100", torch.zeros(1)) == "h100"


def test_cpu_tensors_keep_the_h200_target_without_asking_a_device(monkeypatch):
    _no_cuda(monkeypatch)
    q = torch.randn(1, 2, 8, 16)
    assert device.gpu_target(None, q) == "h200"
    assert Call.checked(q, q, q, layout="BNSD").target == "h200"
    import tilegen.torch as tt

    out = tt.scaled_dot_product_attention(q, q, q)  # the interpreter, with no target named
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), q.double(), q.double())
    assert torch.allclose(out.double(), ref, atol=1e-5)


def test_the_call_of_a_cuda_tensor_takes_its_devices_target(monkeypatch):
    """Call.of, which every entry point's call goes through, resolves target=None by q's device and
    keeps a named target (the index asked is q's)."""
    asked = _as_device(monkeypatch, *H100)
    shapes = ((1, 2, 8, 16), (1, 2, 8, 16), (1, 2, 8, 16))
    assert Call.of(_cuda_q(1), shapes, layout="BNSD", target=None).target == "h100"
    assert set(asked) == {1}
    assert Call.of(_cuda_q(), shapes, layout="BNSD").target == "h100"
    assert Call.of(_cuda_q(), shapes, layout="BNSD", target="h200").target == "h200"
