"""runtime/triton/launch.py, the host runtime every generated Triton module carries (runtime/README.md):
imported and run here as the Python file it is, and found verbatim in the checked-in modules.

References: a brute-force loop over the class table for the tile lists; the tensors' own strides and
data pointers for views and workspaces. tests/test_direct_launch.py checks the launch path through
generated modules.
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is decorated: CPU tensors, no GPU

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from tilegen.core.resources import data_dir, section  # noqa: E402

LAUNCHER = data_dir("runtime") / "triton" / "launch.py"
MODULES = sorted((Path(__file__).resolve().parent.parent / "generated").glob("*/h200/*.py"))
SECTIONS = ("interpreter", "tanh", "host", "params", "blocks")


@pytest.fixture(scope="module")
def launch():
    spec = importlib.util.spec_from_file_location("tilegen_runtime_launch", LAUNCHER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_launcher_imports_nothing_of_tilegen():
    """A generated module runs without tilegen: what it carries imports the standard library, torch and
    triton alone (the module's own imports)."""
    tree = ast.parse(LAUNCHER.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"math", "os", "inspect", "torch", "triton", "numpy"}, names


def test_every_checked_in_module_carries_its_sections_verbatim():
    text = LAUNCHER.read_text()
    assert MODULES
    for path in MODULES:
        module = path.read_text()
        mods = "\nPARAMS = {" in module
        blocks = "\nBLOCK_SHAPES = " in module
        want = {"interpreter": True, "host": True, "tanh": mods, "params": mods, "blocks": blocks}
        for name in SECTIONS:
            assert (section(text, name) in module) == want[name], f"{path.name}: section {name}"
        assert "stand-ins" not in module and "tilegen:section" not in module


def test_block_lists_against_a_loop(launch):
    g = torch.Generator().manual_seed(3)
    bm = torch.randint(0, 3, (2, 1, 5, 7), generator=g).float()
    lists = launch._block_lists(bm)
    for b in range(2):
        for i in range(5):
            kv = [j for j in range(7) if bm[b, 0, i, j] > 0]
            assert lists["BM_kvn"][b, 0, i].item() == len(kv)
            assert lists["BM_kvi"][b, 0, i].tolist() == kv + [7] * (7 - len(kv))
        for j in range(7):
            qt = [i for i in range(5) if bm[b, 0, i, j] > 0]
            assert lists["BM_qn"][b, 0, j].item() == len(qt)
            assert lists["BM_qi"][b, 0, j].tolist() == qt + [5] * (5 - len(qt))
    assert all(x.dtype == torch.int32 and x.is_contiguous() for x in lists.values())


def test_workspaces_start_on_16_byte_boundaries_and_do_not_overlap(launch):
    views = launch._workspaces([(3,), (2, 5), (7,)], torch.float32, "cpu", True)
    spans = sorted((v.data_ptr(), v.data_ptr() + v.numel() * 4) for v in views)
    assert [tuple(v.shape) for v in views] == [(3,), (2, 5), (7,)]
    assert all(v.data_ptr() % 16 == 0 and torch.isnan(v).all() for v in views)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_alloc_lays_out_bsnd_and_check_names_the_field(launch):
    x = launch._alloc((2, 3, 5, 4), torch.float16, "cpu", False, "BSND", fill=0.5)
    assert tuple(x.shape) == (2, 3, 5, 4) and x.permute(0, 2, 1, 3).is_contiguous() and (x == 0.5).all()
    with pytest.raises(ValueError, match=r"^q.dtype = torch.float32 is invalid; accepted: torch.float16"):
        launch._check("q", torch.zeros(1, 1, 16, 8), (1, 1, 16, 8), torch.float16)
    with pytest.raises(ValueError, match=r"^q.shape = \(1, 1, 16, 8\) is invalid; accepted: \(1, 1, 8, 8\)"):
        launch._check("q", torch.zeros(1, 1, 16, 8, dtype=torch.float16), (1, 1, 8, 8), torch.float16)


def test_an_unrecognised_compiled_kernel_takes_the_ordinary_launch(launch):
    class Kernel:
        arg_names = ["x_ptr", "n", "Br"]

    assert launch._direct_launch(Kernel(), object(), 2, {"Br": 16}) is None
