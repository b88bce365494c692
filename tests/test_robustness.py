"""Bad input everywhere a user can give it, safe output, sentinels and integer widths."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import tilegen
import tilegen.harness.report
from helpers import inputs, make_spec
from tilegen.backends import ascendc
from tilegen.backends.output import write
from tilegen.backends.interp import interpret
from tilegen.cli import main
from tilegen.core.errors import SpecError
from tilegen.core.spec import builtin_spec
from tilegen.backends import compile_backward, compile_forward


def one_line_error(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tilegen: error:"), err
    assert needle in err[0], err[0]


@pytest.mark.parametrize(
    "body,needle",
    [
        ("batch = 1\nheads = 2\nseq = 8\nhead_dim = 8\ncolour = 'red'\n", "colour = 'red' is invalid"),
        ("batch = 'one'\nheads = 2\nseq = 8\nhead_dim = 8\n", "batch = 'one' is invalid"),
        ("batch = 0\nheads = 2\nseq = 8\nhead_dim = 8\n", "batch = 0 is invalid"),
        ("batch = 1\nheads = 2\nseq = -8\nhead_dim = 8\n", "seq_q = -8 is invalid"),
        ("batch = 1\nheads_q = 6\nheads_kv = 4\nseq = 8\nhead_dim = 8\n", "heads_kv = 4 is invalid; accepted: a divisor of heads_q = 6"),
        ("batch = 1\nheads = 2\nseq = 8\nhead_dim = 8\nmask = 'window'\nwindow = [3, -5]\n", "window = (3, -5) is invalid"),
        ("batch = 1\nheads = 2\nseq = 8\n", "head_dim_qk is missing; accepted: an integer from 1 to 1024"),
        ("batch = [\n", "valid TOML"),
    ],
)
def test_bad_spec_files(tmp_path, capsys, body, needle):
    f = tmp_path / "bad.toml"
    f.write_text(body)
    one_line_error(capsys, ["run", str(f)], needle)


def test_bad_cli_values(capsys, tmp_path):
    one_line_error(capsys, ["inspect", "--spec", "tiny", "--target", "tpu"], "target = 'tpu' is invalid")
    one_line_error(capsys, ["generate", "--spec", "tiny", "--target", "nope", "-o", str(tmp_path / "o")], "target = 'nope'")
    one_line_error(capsys, ["run", "--spec", "tiny-gqa", "--heads", "3"], "--heads = 3")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    one_line_error(capsys, ["generate", "--spec", "tiny", "-o", str(blocker)], "-o =")
    one_line_error(capsys, ["generate", "--spec", "tiny", "-o", str(blocker / "sub")], "-o =")
    one_line_error(capsys, ["run", "--spec", "llama2-7b"], "shrink it with --seq")


def test_head_dims_over_a_targets_limit(capsys, tmp_path):
    f = tmp_path / "big.toml"
    f.write_text("batch = 1\nheads = 2\nseq = 512\nhead_dim = 1024\ndtype = 'fp16'\n")
    one_line_error(capsys, ["inspect", str(f), "--target", "ascend910b2"], "no tile sizes fit target ascend910b2")
    one_line_error(capsys, ["generate", str(f), "-o", str(tmp_path / "o")], "no tile sizes fit target ascend910b2")
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_debug_shows_the_traceback():
    proc = subprocess.run([sys.executable, "-m", "tilegen", "run", "--spec", "nope", "--debug"], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr and "SpecError" in proc.stderr


def test_api_backward_arguments_are_named():
    spec = make_spec(seq_q=20, seq_k=20)
    d = inputs(spec)
    o, lse = tilegen.attention(d["Q"], d["K"], d["V"])
    with pytest.raises(SpecError) as e:
        tilegen.attention_backward(d["Q"], d["K"], d["V"], o[:, :, :5], lse, d["dO"])
    assert e.value.field == "o.shape"
    with pytest.raises(SpecError) as e:
        tilegen.attention_backward(d["Q"], d["K"], d["V"], o, lse.astype(np.float64), d["dO"])
    assert e.value.field == "lse.dtype"
    with pytest.raises(SpecError) as e:
        tilegen.attention_backward(d["Q"], d["K"], d["V"], o, lse, d["dO"].astype(np.float32))
    assert e.value.field == "do.dtype"
    with pytest.raises(SpecError) as e:
        tilegen.attention_backward(d["Q"], d["K"], d["V"], o, lse, d["dO"], dq_strategy="fast")
    assert e.value.field == "dq_strategy"


def test_failed_generate_leaves_previous_output(tmp_path, monkeypatch):
    out = tmp_path / "out"
    spec = builtin_spec("tiny")
    write(ascendc.generate(spec), out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    gen = ascendc.generate(builtin_spec("tiny-gqa"))
    real = type(out).write_text
    calls = {"n": 0}

    def failing(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(type(out), "write_text", failing)
    with pytest.raises(SpecError, match="No space left"):
        write(gen, out)
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.staging")]


def test_generating_twice_gives_identical_files(tmp_path):
    for d in ("a", "b"):
        assert main(["generate", "--spec", "tiny-gqa", "-o", str(tmp_path / d)]) == 0
    a = {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()}
    b = {p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()}
    assert a == b and "manifest.json" in a


def test_backward_padding_sentinels_never_leak():
    spec = make_spec(heads_q=2, heads_kv=1, seq_q=45, seq_k=70, window=(9, 4), dtype="fp32")
    d = inputs(spec)
    fwd = compile_forward(spec, tile_sizes=(32, 32))
    out, _ = interpret(fwd, {n: d[n] for n in "QKV"})
    feeds = {"Q": d["Q"], "K": d["K"], "V": d["V"], "O": out["O"], "L": out["L"], "dO": d["dO"]}
    for strategy in ("atomic", "separate"):
        bwd = compile_backward(spec, dq_strategy=strategy, tile_sizes=(32, 32))
        a, _ = interpret(bwd, feeds, pad_value=1.0e4)
        b, _ = interpret(bwd, feeds, pad_value=-777.0)
        for name in ("dQ", "dK", "dV"):
            np.testing.assert_array_equal(a[name], b[name])
            assert np.isfinite(a[name]).all()


def test_emitted_offsets_are_64_bit():
    """Shapes whose element offsets pass 2^31 (batch 8300, 16 heads, 128 tokens, head dim 128) compile
    into kernels that keep every index in int64: no 32-bit integer declarations in kernel code."""
    spec = builtin_spec("llama2-7b").replace(batch=8300, heads_q=16, heads_kv=16, seq_q=128, seq_k=128)
    gen = ascendc.generate(spec, "ascend910b2")
    for name in ("fwd_kernels.asc", "bwd_kernels.asc"):
        code = gen.files[name]
        assert not re.search(r"\b(int|int32_t|uint32_t|unsigned)\s+\w+\s*=", code), name
        # the program index is int64 whichever way the cores deal the programs (@deal), streamed or not
        # (@stream: each stream's turn and program index)
        assert (re.search(r"for \(int64_t pid = core;", code) or re.search(r"const int64_t pid = turn \* cores", code)
                or (re.search(r"const int64_t pid = a_turn \* cores", code) and "int64_t a_turn = -1, a_pid = 0" in code))
    report = tilegen.harness.report.inspect_report(spec, "ascend910b2", programs=("bwd",))
    assert {w["tensor"] for w in report["programs"][0]["offsets_past_int32"]} >= {"Q", "dQ_ws"}


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["run", "--spec", "tiny", "--seed", "-1"], "argument --seed: -1"),
        (["run", "--spec", "tiny", "--seq", "0"], "argument --seq: 0 is not a positive integer"),
        (["run", "--spec", "tiny", "--tiles", "0x16"], "argument --tiles: '0x16'"),
        (["run", "--spec", "tiny", "--dq-strategy", "foo"], "argument --dq-strategy: invalid choice: 'foo'"),
        (["generate", "--spec", "tiny"], "-o/--output"),
    ],
)
def test_argument_errors_are_one_line_too(capsys, argv, needle):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and err[0].startswith("tilegen: error:"), err
    assert needle in err[0], err[0]


def test_run_rejects_before_printing_anything(tmp_path, capsys):
    """Every request `tilegen run` cannot serve fails before the header line: stdout stays empty."""
    text = tmp_path / "not.npz"
    text.write_text("plain text\n")
    five = tmp_path / "five.npz"
    np.savez(five, **{n: np.zeros((2, 2, 2, 70, 32), np.float32) for n in ("Q", "K", "V", "dO")})
    cases = [
        (["run", "--spec", "tiny", "--data", str(text)], "--data = "),
        (["run", "--spec", "tiny", "--data", str(tmp_path / "missing.npz")], "--data = "),
        (["run", "--spec", "tiny", "--data", str(five), "--data-index", "5"], "--data-index = 5"),
        (["run", "--spec", "tiny", "--twin", "--twin-target", "h200"], "accepted: ascend910b1, ascend910b2"),
        (["run", "--spec", "tiny", "--seq", "100000"], "shrink it with --seq"),
    ]
    for argv, needle in cases:
        assert main(argv) == 2
        captured = capsys.readouterr()
        err = captured.err.strip().splitlines()
        assert captured.out == "", (argv, captured.out)
        assert len(err) == 1 and needle in err[0], (argv, err)


def test_output_under_a_file_says_so(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_line_error(capsys, ["spec", "--spec", "tiny", "-o", str(afile / "x.toml")], "is not a folder")
    assert afile.read_text() == "x"
