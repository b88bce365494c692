"""Progress bars of long commands: on stderr only when it is a terminal or when forced (--progress,
$TILEGEN_PROGRESS=1); captured output is unchanged, and stdout is the same with or without bars."""

from __future__ import annotations

import io
import shutil

import pytest

from tilegen.cli import main
from tilegen.core import progress


class Tty(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def no_delay(monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.delenv(progress.ENV, raising=False)
    monkeypatch.setenv("TILEGEN_CACHE", "0")  # the passes run: a step long enough to show


def _cli(capsys, *argv):
    rc = main(list(argv))
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return cap.out, cap.err


def test_bars_only_on_a_terminal_or_when_forced(monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    assert not progress.wanted(io.StringIO()) and progress.wanted(Tty())
    assert progress.wanted(io.StringIO(), force=True) and not progress.wanted(Tty(), force=False)
    monkeypatch.setenv(progress.ENV, "1")
    assert progress.wanted(io.StringIO())
    monkeypatch.setenv(progress.ENV, "0")
    assert not progress.wanted(Tty())


def test_steps_and_step_draw_on_a_terminal_and_nothing_elsewhere(no_delay):
    for stream, shows in ((Tty(), True), (io.StringIO(), False)):
        with progress.shown(stream) as on:
            assert on == shows == progress.active()
            items = list(progress.steps(range(3), "simulate on t", unit="program"))
            with progress.step("build the CPU twin (g++)"):
                import time

                time.sleep(0.05)
        assert items == [0, 1, 2] and not progress.active()
        text = stream.getvalue()
        if shows:
            assert "simulate on t" in text and "/3 [" in text and "build the CPU twin (g++)" in text
        else:
            assert text == ""
    # without a display (the Python API), the helpers are transparent
    assert list(progress.steps("ab", "x")) == ["a", "b"]
    with progress.step("y"):
        pass


def test_generate_shows_progress_only_when_forced(no_delay, tmp_path, capsys):
    argv = ["generate", "--spec", "tiny", "--target", "ascend910b2", "-o"]
    plain_out, plain_err = _cli(capsys, *argv, str(tmp_path / "a"))
    assert plain_err == ""  # captured stderr is no terminal: no bar
    forced_out, forced_err = _cli(capsys, *argv, str(tmp_path / "b"), "--progress")
    assert "generate for ascend910b2" in forced_err and "\r" in forced_err
    assert forced_out.replace("/b:", "/a:") == plain_out
    assert _cli(capsys, *argv, str(tmp_path / "c"), "--no-progress")[1] == ""


def test_environment_forces_and_flag_overrides(no_delay, monkeypatch, capsys):
    monkeypatch.setenv(progress.ENV, "1")
    out, err = _cli(capsys, "inspect", "--spec", "tiny", "--target", "ascend910b2")
    assert "inspect: the passes and the tile search" in err
    assert _cli(capsys, "inspect", "--spec", "tiny", "--target", "ascend910b2", "--no-progress") == (out, "")


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for the CPU twin")
def test_simulate_shows_each_program_and_instance(no_delay, capsys):
    argv = ["inspect", "--spec", "tiny", "--target", "ascend910b2", "--simulate"]
    plain_out, plain_err = _cli(capsys, *argv)
    assert plain_err == ""
    out, err = _cli(capsys, *argv, "--progress")
    assert out == plain_out
    assert "simulate on ascend910b2" in err and "/2 [" in err  # per program
    assert "forward fwd: schedule the instances" in err and "instance" in err  # per traced instance
    assert "backward: generate the Ascend C" in err
