"""Output and data paths of the CLI that cannot be used, and Ctrl-C (issue 36, item 6): one line naming
the path and what is wrong, exit 2 (130 for Ctrl-C, the shell's convention for SIGINT), no traceback,
nothing partial left. Each test here failed before its fix.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tilegen.cli import main


def _writable(folder: Path) -> bool:
    probe = folder / ".probe"
    try:
        probe.write_bytes(b"")
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture
def unwritable(tmp_path):
    """A folder no file can be created in: chmod 0o555, and where that does not stop the user (root),
    the immutable attribute (``chattr +i``: root with CAP_LINUX_IMMUTABLE on ext4, xfs, btrfs...)."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    os.chmod(folder, 0o555)
    immutable = False
    if _writable(folder) and shutil.which("chattr"):
        immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
    try:
        if _writable(folder):
            pytest.skip("no way to make a folder unwritable here (root, and chattr +i refused)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        os.chmod(folder, 0o755)


def _one_line(err: str, flag: str, path, reason: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"tilegen: error: {flag} = {str(path)!r} is invalid; accepted: "), lines[0]
    assert reason in lines[0], lines[0]
    assert "Traceback" not in err


# --- inspect --plot / --tiles-map / --timeline ----------------------------------------------------------


PLOT_FLAGS = [("--plot", ()), ("--tiles-map", ()), ("--timeline", ("--target", "ascend910b2"))]


@pytest.mark.parametrize("flag,extra", PLOT_FLAGS, ids=[f[0] for f in PLOT_FLAGS])
def test_a_picture_into_an_unwritable_folder_is_one_line_before_the_report(unwritable, capsys, flag, extra):
    pytest.importorskip("matplotlib")
    target = unwritable / "schedule.png"
    assert main(["inspect", "--spec", "tiny", *extra, flag, str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # refused before the report, not after it
    _one_line(err, flag, target, f"a file in a writable folder ({unwritable}: ")
    assert os.listdir(unwritable) == []


@pytest.mark.parametrize("flag,extra", PLOT_FLAGS, ids=[f[0] for f in PLOT_FLAGS])
@pytest.mark.parametrize("case", ["under a regular file", "below a regular file", "a folder"])
def test_a_picture_path_that_cannot_be_a_file_is_one_line(tmp_path, capsys, flag, extra, case):
    """Ways to make a path unwritable that hold for root too (missing folders are made, as before, but
    not below a file)."""
    pytest.importorskip("matplotlib")
    regular = tmp_path / "notes.txt"
    regular.write_text("x")
    target, reason = {
        "under a regular file": (regular / "schedule.png", f"a path in an existing folder ({regular} is not a folder)"),
        "below a regular file": (regular / "sub" / "schedule.png", f"a path in an existing folder ({regular} is not a folder)"),
        "a folder": (tmp_path / "pictures.png", "a file name (it is a folder)"),
    }[case]
    if case == "a folder":
        target.mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["inspect", "--spec", "tiny", *extra, flag, str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, flag, target, reason)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_picture_in_missing_folders_of_an_unwritable_folder_is_one_line(unwritable, capsys):
    pytest.importorskip("matplotlib")
    target = unwritable / "a" / "b" / "schedule.png"
    assert main(["inspect", "--spec", "tiny", "--plot", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, "--plot", target, f"a file in a writable folder ({unwritable}: ")
    assert os.listdir(unwritable) == []


def test_a_picture_that_fails_to_write_leaves_no_folder(tmp_path, capsys, monkeypatch):
    """A write that fails after its folders were made (a full disk at fsync; the early check passed):
    one line, and neither the picture, its temporary nor the folders made for it are left."""
    pytest.importorskip("matplotlib")
    import tilegen.core.fileio

    def full_disk(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tilegen.core.fileio.os, "fsync", full_disk)
    target = tmp_path / "new" / "deeper" / "schedule.png"
    assert main(["inspect", "--spec", "tiny", "--plot", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("tilegen inspect")
    _one_line(err, "--plot", target, "No space left on device")
    assert os.listdir(tmp_path) == []


def test_a_picture_whose_folder_fails_after_the_report_is_one_line(unwritable, capsys, monkeypatch):
    """The folder passes the early check and then cannot be written (it changed meanwhile): the picture
    is written atomically, so the failure is one line and nothing is left in the folder."""
    pytest.importorskip("matplotlib")
    import tilegen.harness.plot

    monkeypatch.setattr(tilegen.harness.plot, "check_output_file", lambda path, flag="--plot", **kw: Path(path), raising=False)
    target = unwritable / "schedule.svg"
    assert main(["inspect", "--spec", "tiny", "--plot", str(target)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith("tilegen inspect")  # the report came first
    _one_line(err, "--plot", target, "a file in a writable folder")
    assert os.listdir(unwritable) == []


def test_spec_output_into_an_unwritable_folder_names_the_flag(unwritable, capsys):
    target = unwritable / "tiny.toml"
    assert main(["spec", "--spec", "tiny", "-o", str(target)]) == 2
    _one_line(capsys.readouterr().err, "-o", target, f"a file in a writable folder ({unwritable}: ")
    assert os.listdir(unwritable) == []


# --- generate -o ------------------------------------------------------------------------------------------


def _manifest_ok(out: Path) -> None:
    import hashlib

    manifest = json.loads((out / "manifest.json").read_text())
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest, name
    assert sorted(os.listdir(out)) == sorted([*manifest["files"], "manifest.json"])  # no staging folder left


def test_generate_onto_a_mount_point_simulated(tmp_path, capsys, monkeypatch):
    """``-o`` a mount point: a rename between the folder and anything outside it fails with EXDEV, as
    across file systems (simulated here: os.replace and os.rename refuse to cross ``out``'s boundary)."""
    out = tmp_path / "mnt"
    out.mkdir()
    real_replace, real_rename = os.replace, os.rename

    def inside(p) -> bool:
        return Path(os.path.abspath(p)).is_relative_to(out)

    def guard(real):
        def move(src, dst, *a, **kw):
            if inside(src) != inside(dst):
                raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src), None, str(dst))
            return real(src, dst, *a, **kw)

        return move

    monkeypatch.setattr(os, "replace", guard(real_replace))
    monkeypatch.setattr(os, "rename", guard(real_rename))
    assert main(["generate", "--spec", "tiny", "-o", str(out)]) == 0, capsys.readouterr().err
    _manifest_ok(out)
    assert sorted(os.listdir(tmp_path)) == ["mnt"]


def test_generate_onto_a_real_mount_point(tmp_path, capsys):
    """The same on a tmpfs mounted at ``-o`` where this user may mount (root with CAP_SYS_ADMIN)."""
    out = tmp_path / "mnt"
    out.mkdir()
    if not shutil.which("mount") or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(out)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root with CAP_SYS_ADMIN); the simulated test covers it")
    try:
        assert os.stat(out).st_dev != os.stat(tmp_path).st_dev
        assert main(["generate", "--spec", "tiny", "-o", str(out)]) == 0, capsys.readouterr().err
        _manifest_ok(out)
    finally:
        subprocess.run(["umount", str(out)], check=True)
    assert sorted(os.listdir(tmp_path)) == ["mnt"]


def test_generate_that_fails_midway_leaves_nothing(tmp_path, capsys, monkeypatch):
    """A write error while staging (a full disk): the folders made for the output are removed, an
    existing output keeps its files, and no staging folder is left anywhere."""
    real = Path.write_text
    calls = []

    def full_disk(self, *a, **kw):
        calls.append(self)
        if len(calls) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *a, **kw)

    monkeypatch.setattr(Path, "write_text", full_disk)
    fresh = tmp_path / "new" / "deeper"
    assert main(["generate", "--spec", "tiny", "-o", str(fresh)]) == 2
    _one_line(capsys.readouterr().err, "-o", fresh, "No space left on device")
    assert os.listdir(tmp_path) == []

    old = tmp_path / "old"
    old.mkdir()
    (old / "manifest.json").write_bytes(b"previous")
    calls.clear()
    assert main(["generate", "--spec", "tiny", "-o", str(old)]) == 2
    _one_line(capsys.readouterr().err, "-o", old, "No space left on device")
    assert os.listdir(old) == ["manifest.json"] and (old / "manifest.json").read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == ["old"]


def test_generate_over_another_output_leaves_only_the_new_one(tmp_path, capsys):
    """A second spec generated into the folder of a first: the first's files (its manifest lists them)
    go, the user's own files stay, and the folder matches the new manifest exactly."""
    out = tmp_path / "out"
    assert main(["generate", "--spec", "tiny", "--target", "h200", "-o", str(out)]) == 0
    first = set(os.listdir(out))
    (out / "notes.txt").write_text("mine")
    assert main(["generate", "--spec", "demo", "--target", "h200", "-o", str(out)]) == 0
    capsys.readouterr()
    listed = set(json.loads((out / "manifest.json").read_text())["files"])
    assert first - listed - {"manifest.json"}, "the two specs should write different module names"
    assert set(os.listdir(out)) == listed | {"manifest.json", "notes.txt"}


# --- run --data -----------------------------------------------------------------------------------------


def _bad_data(folder: Path, case: str) -> tuple[Path, str]:
    path = folder / "inputs.npz"
    if case == "0 bytes":
        path.write_bytes(b"")
        return path, "this file is empty (0 bytes)"
    if case == "a .npy array":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
        return path, "this file is a single .npy array"
    if case == "truncated":
        np.savez(path, Q=np.zeros((1, 2, 8, 16), np.float32))
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return path, "this file is not one"
    np.savez(path, Q=np.array([{}], dtype=object))  # an object array: needs pickle
    return path, "each readable (ValueError: Object arrays cannot be loaded when allow_pickle=False)"


@pytest.mark.parametrize("case", ["0 bytes", "a .npy array", "truncated", "an object array"])
def test_run_data_that_is_no_npz_is_one_line(tmp_path, capsys, case):
    path, reason = _bad_data(tmp_path, case)
    assert main(["run", "--spec", "tiny", "--data", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, "--data", path, "an .npz archive (numpy.savez) with arrays Q, K, V, dO")
    assert reason in err, err


# --- Ctrl-C -----------------------------------------------------------------------------------------------


def test_ctrl_c_while_the_parser_is_built(capsys, monkeypatch):
    """Ctrl-C before the verb runs (building the parser imports the specs and targets)."""
    import tilegen.cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(tilegen.cli, "build_parser", interrupted)
    assert main(["run", "--spec", "tiny"]) == 130
    assert capsys.readouterr().err == "tilegen: interrupted\n"


def test_ctrl_c_while_tilegen_imports():
    """Ctrl-C while numpy and the spec module load, as the ``tilegen`` entry point runs
    (``from tilegen.cli import main; sys.exit(main())``): importing tilegen.core.spec raises
    KeyboardInterrupt here, as SIGINT would during that import."""
    script = textwrap.dedent(
        """
        import sys

        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == "tilegen.core.spec":
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, CtrlC())
        from tilegen.cli import main
        sys.exit(main(["run", "--spec", "tiny"]))
        """
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "tilegen: interrupted\n"), proc.stderr
