"""The CLI: `tilegen run` checks and exits 0/1, bad input is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tilegen.cli import main


def test_run_passes_on_a_small_spec(capsys):
    assert main(["run", "--spec", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "check: passed" in out and "O " in out and "HBM traffic" in out


def test_run_with_overrides_and_file(tmp_path, capsys):
    spec = tmp_path / "s.toml"
    spec.write_text('batch = 1\nheads_q = 4\nheads_kv = 2\nseq = 33\nhead_dim = 16\ndtype = "bf16"\nmask = "causal"\n')
    assert main(["run", str(spec), "--seq", "40", "--heads", "2", "--tiles", "16x16"]) == 0
    out = capsys.readouterr().out
    assert "Hq=2, Hkv=1" in out and "Sq=40" in out


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["run", "--spec", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tilegen: error: --spec = 'nope'")
    assert main(["run", "--spec", "llama3-8b", "--heads", "6"]) == 2
    assert "--heads" in capsys.readouterr().err
    bad = tmp_path / "b.toml"
    bad.write_text("batch = 1\nheads = 2\nseq = 8\nhead_dim = 8\ndtype = 'int8'\n")
    assert main(["run", str(bad)]) == 2
    assert "dtype = 'int8'" in capsys.readouterr().err


def test_bad_asc_devkit_is_one_line_naming_the_option(tmp_path, capsys):
    assert main(["run", "--spec", "tiny", "--twin", "--asc-devkit", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--asc-devkit" in err[0] and "nope" in err[0] and "include/kernel_operator.h" in err[0], err


def test_inspect_prints_the_loop_nest(capsys):
    assert main(["inspect", "--spec", "tiny", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "parallel b in [0, B)" in out and "for j in" in out and "load Q[" in out


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "tilegen", "run", "--spec", "tiny-fp32"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "check: passed" in proc.stdout


_PROBE = """
import sys
from tilegen.cli import main
rc = main(sys.argv[1:])
sys.stderr.write("compiled=%s\\n" % ("sympy" in sys.modules))
sys.exit(rc)
"""


def _cli(args, env_extra):
    """Run the CLI in a fresh process; return (stdout, whether it imported the compiler's sympy)."""
    import os

    env = dict(os.environ, **env_extra)
    proc = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, "compiled=True" in proc.stderr


def _main(args, env_extra, monkeypatch, capsys) -> str:
    """Run the CLI in this process with ``env_extra`` set; return its stdout. For the calls whose
    subject is not the process boundary (the cache is on disk, keyed by the request's contents): a
    fresh process would only add Python's start and tilegen's imports."""
    with monkeypatch.context() as m:
        for key, value in env_extra.items():
            m.setenv(key, value)
        capsys.readouterr()
        assert main(args) == 0
        return capsys.readouterr().out


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


@pytest.mark.slow
def test_cached_output_equals_a_fresh_compile(tmp_path, monkeypatch, capsys):
    """inspect and generate served from the compile cache (no compiler import: the passes did not run;
    each such call in a fresh process) print and write exactly what a run with the cache off does;
    corrupt entries are rebuilt."""
    cache = {"TILEGEN_CACHE": "1", "TILEGEN_CACHE_DIR": str(tmp_path / "cache")}
    off = {"TILEGEN_CACHE": "0"}
    args = ["inspect", "--spec", "tiny-gqa", "--target", "ascend910b2"]
    first, compiled = _cli(args, cache)
    assert compiled and any((tmp_path / "cache").iterdir())
    second, compiled = _cli(args, cache)
    assert not compiled, "the second call compiled again instead of reading the cache"
    assert second == first == _main(args, off, monkeypatch, capsys)
    gen = ["generate", "--spec", "tiny", "--target", "ascend910b2", "-o"]
    assert _cli(gen + [str(tmp_path / "a")], cache)[1]
    assert not _cli(gen + [str(tmp_path / "b")], cache)[1]
    _main(gen + [str(tmp_path / "c")], off, monkeypatch, capsys)
    ref = _files(tmp_path / "c")
    assert len(ref) > 5 and _files(tmp_path / "a") == ref and _files(tmp_path / "b") == ref
    for entry in (tmp_path / "cache").iterdir():
        entry.write_bytes(b"\x80\x05garbage" * 7)
    third, compiled = _cli(args, cache)
    assert compiled and third == first


@pytest.mark.slow
def test_cache_follows_an_edited_target_file(tmp_path, monkeypatch, capsys):
    """A target given as a file is keyed by its contents: editing the file between runs changes the
    schedule (or, for a GPU target, the [triton] launch knobs) instead of serving the old output. (The
    runs share one process: the cache on disk decides, and the in-process parse of a target is keyed by
    the file's bytes.)"""
    from tilegen.core.resources import data_dir

    cache = {"TILEGEN_CACHE": "1", "TILEGEN_CACHE_DIR": str(tmp_path / "cache")}
    target = tmp_path / "mine.toml"
    text = (data_dir("targets") / "ascend910b2.toml").read_text()
    target.write_text(text)
    args = ["inspect", "--spec", "llama2-7b", "--target", str(target), "--program", "fwd", "--no-nest"]
    before = _main(args, cache, monkeypatch, capsys)
    assert "value = 196608" in text
    target.write_text(text.replace("capacity = { value = 196608", "capacity = { value = 65536"))
    after = _main(args, cache, monkeypatch, capsys)
    assert after != before
    assert after == _main(args, {"TILEGEN_CACHE": "0"}, monkeypatch, capsys)

    gpu = tmp_path / "gpu.toml"
    text = (data_dir("targets") / "h200.toml").read_text()
    gpu.write_text(text)
    gen = ["generate", "--spec", "tiny", "--target", str(gpu), "-o"]
    _main(gen + [str(tmp_path / "g1")], cache, monkeypatch, capsys)
    old = "[triton.default]\nnum_warps = 4"
    assert old in text
    gpu.write_text(text.replace(old, "[triton.default]\nnum_warps = 8"))
    _main(gen + [str(tmp_path / "g2")], cache, monkeypatch, capsys)
    _main(gen + [str(tmp_path / "g3")], {"TILEGEN_CACHE": "0"}, monkeypatch, capsys)
    assert _files(tmp_path / "g2") != _files(tmp_path / "g1")
    assert _files(tmp_path / "g2") == _files(tmp_path / "g3")
