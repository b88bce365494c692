"""Memos and the compile cache in one long-lived process: an edited target file or template is read
again (never a stale copy), and a cache entry is served only for the very request it was built for."""

from __future__ import annotations

import pickle
import shutil

import pytest

from tilegen.core import cache
from tilegen.cli import main
from tilegen.core.resources import data_dir
from tilegen.core.spec import builtin_spec
from tilegen.core.targets import load_target, target_key

AIC = "aic = { value = 24,"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEGEN_CACHE", "1")
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _generate(target, out, spec="tiny") -> dict[str, str]:
    assert main(["generate", "--spec", spec, "--target", str(target), "-o", str(out)]) == 0
    return {p.name: p.read_text() for p in out.iterdir()}


@pytest.mark.parametrize("use_cache", ["1", "0"])
def test_an_edited_target_file_is_read_again_in_the_same_process(tmp_path, monkeypatch, use_cache):
    monkeypatch.setenv("TILEGEN_CACHE", use_cache)
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(tmp_path / "cache"))
    target = tmp_path / "mine.toml"
    text = (data_dir("targets") / "ascend910b2.toml").read_text()
    assert AIC in text
    target.write_text(text)
    assert load_target(str(target)).parallel_units == 24
    assert "kBlocks = 24;" in _generate(target, tmp_path / "a")["tilegen_ops.asc"]
    target.write_text(text.replace(AIC, "aic = { value = 20,"))
    assert load_target(str(target)).parallel_units == 20
    assert "kBlocks = 20;" in _generate(target, tmp_path / "b")["tilegen_ops.asc"]
    target.write_text(text)  # and back: the first parse is still right
    assert load_target(str(target)).parallel_units == 24
    assert "kBlocks = 24;" in _generate(target, tmp_path / "c")["tilegen_ops.asc"]


def test_target_key_and_backend_sections_come_from_the_same_bytes(tmp_path):
    """The [triton] table the GPU backend reads is parsed with the rest of the target (one read), so the
    cache key (the parsed target) always describes what the backend uses."""
    from tilegen.backends.triton import triton_config

    target = tmp_path / "gpu.toml"
    text = (data_dir("targets") / "h200.toml").read_text()
    target.write_text(text)
    before = load_target(str(target))
    target.write_text(text.replace("[triton.default]\nnum_warps = 4", "[triton.default]\nnum_warps = 8"))
    after = load_target(str(target))
    assert triton_config(before).default.num_warps == 4  # what was parsed, not what the file says now
    assert triton_config(after).default.num_warps == 8
    assert target_key(str(target)) == repr(after) != repr(before)


def test_the_triton_loader_follows_an_edited_target(tmp_path, fresh_cache):
    pytest.importorskip("triton")
    from tilegen.backends import triton as backend

    target = tmp_path / "gpu.toml"
    text = (data_dir("targets") / "h200.toml").read_text()
    target.write_text(text)
    spec = builtin_spec("tiny")
    first = backend.load(spec, str(target))
    assert backend.load(spec, str(target)) is first  # loaded once per target contents
    target.write_text(text.replace("[triton.default]\nnum_warps = 4", "[triton.default]\nnum_warps = 8"))
    second = backend.load(spec, str(target))
    assert second is not first
    assert "num_warps=8" in open(second.__file__).read() and "num_warps=8" not in open(first.__file__).read()


def test_an_edited_template_is_used_in_the_same_process(tmp_path, fresh_cache, monkeypatch):
    """The code stamp re-reads templates and targets on every call (they are read at run time), so a
    cached result rendered from the old template is not served."""
    import tilegen.backends.ascendc as ascendc
    import tilegen.core.targets as targets

    for name in ("templates", "targets"):
        shutil.copytree(data_dir(name), tmp_path / name)
    for module in (cache, ascendc, targets):
        monkeypatch.setattr(module, "data_dir", lambda name: tmp_path / name)
    first = _generate("ascend910b2", tmp_path / "a")["tiling.h"]
    header = tmp_path / "templates" / "ascendc" / "tiling.h.jinja"
    header.write_text("// edited template\n" + header.read_text())
    second = _generate("ascend910b2", tmp_path / "b")["tiling.h"]
    assert second == "// edited template\n" + first


# --- every hit is checked against the full request ----------------------------------------------------


def _entry(folder, request):
    return folder / f"{__import__('hashlib').sha256(cache.request_text(request).encode()).hexdigest()}.pkl"


def _planted(kind: str, right: bytes, request) -> bytes:
    if kind == "colliding":  # another request's entry under this key
        return pickle.dumps((cache.request_text(("another request",)), "wrong"))
    if kind == "bare value":  # an entry without its request (a foreign writer, or an older format)
        return pickle.dumps("wrong")
    if kind == "stale code":  # the same request under another code hash
        return pickle.dumps((repr(request) + "\0old versions\0old code", "wrong"))
    if kind == "truncated":
        return right[: len(right) // 2]
    if kind == "garbage":
        return b"\x80\x05garbage" * 9
    if kind == "three fields":
        return pickle.dumps((cache.request_text(request), "wrong", "extra"))
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["colliding", "bare value", "stale code", "truncated", "garbage", "three fields"])
def test_a_planted_entry_is_a_miss_and_is_replaced(fresh_cache, kind):
    request = ("test", 1, {"option": True})
    calls = []

    def build():
        calls.append(1)
        return "right"

    assert cache.cached(request, build) == "right" and len(calls) == 1
    path = _entry(fresh_cache, request)
    right = path.read_bytes()
    assert cache.cached(request, build) == "right" and len(calls) == 1  # a genuine hit
    path.write_bytes(_planted(kind, right, request))
    assert cache.cached(request, build) == "right" and len(calls) == 2  # a miss: rebuilt
    assert pickle.loads(path.read_bytes()) == (cache.request_text(request), "right")  # and replaced
    assert cache.cached(request, build) == "right" and len(calls) == 2


def test_generate_never_serves_another_specs_entry(tmp_path, fresh_cache):
    """Swap the entries of two generate requests (as a hash collision would): each still gets its own
    kernels, and the entry is rebuilt for the right request."""
    tiny = _generate("ascend910b2", tmp_path / "a", "tiny")
    other = _generate("ascend910b2", tmp_path / "b", "tiny-gqa")
    assert tiny != other
    requests = {
        # no --dq-strategy: the request carries None (the target's choice; atomic on Ascend)
        name: ("generate", builtin_spec(name), target_key("ascend910b2"), None, None, "auto") for name in ("tiny", "tiny-gqa")
    }
    paths = {name: _entry(fresh_cache, r) for name, r in requests.items()}
    assert all(p.is_file() for p in paths.values())  # the CLI's own request, as the test spells it
    data = {name: p.read_bytes() for name, p in paths.items()}
    paths["tiny"].write_bytes(data["tiny-gqa"])
    paths["tiny-gqa"].write_bytes(data["tiny"])
    assert _generate("ascend910b2", tmp_path / "c", "tiny") == tiny
    assert _generate("ascend910b2", tmp_path / "d", "tiny-gqa") == other


def test_a_twin_build_is_reused_only_for_its_own_sources(tmp_path):
    """The CPU twin's build cache: a folder whose executable was replaced, or that holds another
    request's build (a key collision), is built again, not run."""
    import subprocess

    from tilegen.backends.ascendc import twin

    if twin.compiler() is None:
        pytest.skip("no C++ compiler")
    files = {"twin_main.cpp": "int main() { return 7; }\n"}
    exe = twin.build(files, cache_dir=tmp_path)
    assert subprocess.run([str(exe)]).returncode == 7
    assert twin.build(files, cache_dir=tmp_path) == exe  # reused
    wrong = twin.build({"twin_main.cpp": "int main() { return 3; }\n"}, cache_dir=tmp_path / "other")
    shutil.copy(wrong, exe)  # a corrupted entry: another executable
    assert subprocess.run([str(twin.build(files, cache_dir=tmp_path))]).returncode == 7
    for name in ("twin_main", "twin_main.cpp", "request.txt"):  # a colliding entry: another build
        shutil.copy(wrong.parent / name, exe.parent / name)
    assert subprocess.run([str(twin.build(files, cache_dir=tmp_path))]).returncode == 7
