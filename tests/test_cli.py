"""The CLI: `tilegen run` checks and exits 0/1, bad input is one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

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


def test_inspect_prints_the_loop_nest(capsys):
    assert main(["inspect", "--spec", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "parallel b in [0, B)" in out and "for j in" in out and "load Q[" in out


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "tilegen", "run", "--spec", "tiny-fp32"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "check: passed" in proc.stdout
