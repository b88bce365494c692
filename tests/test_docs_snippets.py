"""Every Python and shell block of README.md and docs/ runs as written.

Each page is one test: its blocks run in order in a fresh folder (a ``tests`` link there points at the
repository's, for the pages that read ``tests/data``), so a file one block writes is there for the next.

- ``python`` blocks run as a script (``__name__ == "__main__"``) in a fresh namespace each.
- ``sh`` blocks run line by line (a trailing ``\\`` joins lines, ``&&`` chains commands): ``tilegen ...``
  in this process through :func:`tilegen.cli.main` (the same code as the installed command, without a
  second interpreter's start-up), which must return 0; ``torchrun ...`` as ``python -m
  torch.distributed.run ...``; ``pip install`` of the package or its extras is not run (this suite
  runs in the environment it makes), and the whole suite's command (``python -m pytest`` with no file)
  must be the one ``.ci/run`` runs, verbatim; anything else runs in bash.
- Every other block is data, and must say which language it is (``toml``, ``text``, ...): an untagged
  block is an error. A block written to a file first is marked ``<!-- file: NAME -->`` on the line
  above its fence (then it is not run as it is: a later command runs it).

Marks, on the lines right above a fence: ``<!-- needs: gpu | npu | asc-devkit | network -->`` runs the
block only where that exists (a CUDA GPU; torch_npu; ``ASC_DEVKIT``, ``ASC_GEN`` and clang++-16; never
here), reported by :func:`test_marked_block` as a skip naming the block otherwise; ``<!-- processes: N
-->`` says the block starts N processes (it runs here, on CPU); ``<!-- error-below: X -->`` checks the
last number the block prints (an error against a reference the snippet computes itself) is below X.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = ("python", "sh")
DATA = ("toml", "text", "yaml", "json")
NEEDS = {
    "gpu": ("a CUDA GPU", lambda: _torch_cuda()),
    "npu": ("an NPU with CANN and torch_npu", lambda: importlib.util.find_spec("torch_npu") is not None),
    "asc-devkit": (
        "an asc-devkit snapshot ($ASC_DEVKIT, $ASC_GEN) and clang++-16",
        lambda: bool(os.environ.get("ASC_DEVKIT") and os.environ.get("ASC_GEN") and shutil.which("clang++-16")),
    ),
    "network": ("the network beyond package registries (git clone, apt-get, pip download)", lambda: False),
}
SUBPROCESS_TIMEOUT_S = 300


def _torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marks: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    def missing(self) -> str | None:
        """What this block needs and this machine lacks, in words (None: it can run)."""
        need = self.marks.get("needs")
        if need is None:
            return None
        words, present = NEEDS[need]
        return None if present() else words


_MARK = re.compile(r"^<!--\s*([\w-]+):\s*(.*?)\s*-->\s*$")


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page with the marks on the lines right above each."""
    out: list[Block] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(```+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, lang = fence.groups()
        marks: dict[str, str] = {}
        j = i - 1
        while j >= 0 and _MARK.match(lines[j].strip()):
            key, value = _MARK.match(lines[j].strip()).groups()
            marks[key] = value
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end].strip() != ticks:
            end += 1
        body = "\n".join(line[len(indent):] for line in lines[i + 1:end]) + "\n"
        out.append(Block(page, i + 1, lang, body, marks))
        i = end + 1
    return out


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]


def test_every_block_says_its_language_and_marks_are_known():
    """An untagged block could hold a command no test runs; an unknown mark would be ignored."""
    bad = []
    for b in ALL_BLOCKS:
        if b.lang not in RUN + DATA:
            bad.append(f"{b.where}: language {b.lang!r} (accepted: {', '.join(RUN + DATA)})")
        for key, value in b.marks.items():
            if key == "needs" and value not in NEEDS:
                bad.append(f"{b.where}: needs = {value!r} (accepted: {', '.join(NEEDS)})")
            elif key not in ("needs", "file", "processes", "error-below"):
                bad.append(f"{b.where}: mark {key!r} (accepted: needs, file, processes, error-below)")
    assert not bad, "\n".join(bad)
    assert sum(b.lang in RUN for b in ALL_BLOCKS) >= 20, "the pages' blocks were not found"


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if "needs" in b.marks], ids=lambda b: b.where)
def test_marked_block(block):
    """Each block that needs hardware or a snapshot: skipped, naming it, where that is missing (the
    page's test runs it where it is present)."""
    missing = block.missing()
    if missing:
        pytest.skip(f"{block.where} needs {missing}")


def _commands(text: str) -> list[list[str]]:
    """The commands of a shell block: continuation lines joined, comments dropped, && split."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            out.append(words[:cut])
            words = words[cut + 1:]
    return out


def _ci_runs(command: str) -> bool:
    return any(line.strip() == command for line in (ROOT / ".ci" / "run").read_text().splitlines())


def _run_command(argv: list[str], block: Block, env: dict, line: str) -> str:
    """Run one command of a shell block; return what it printed."""
    argv = [os.path.expandvars(a) for a in argv]
    if argv[0] == "tilegen":
        from tilegen.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(argv[1:])
        assert rc == 0, f"{block.where}: `{shlex.join(argv)}` exited {rc}:\n{err.getvalue()[-3000:]}"
        return out.getvalue()
    if argv[:2] == ["pip", "install"]:
        assert argv[2:] in ([], ["."], [".[test]"], [".[docs]"], ["tilegen[plot]"]) or argv[2] in (".", ".[test]"), argv
        return ""  # installs the package or an extra: this suite runs in the environment it makes
    if argv[:3] == ["python", "-m", "pytest"] and not any(a.startswith("tests/") for a in argv):
        assert _ci_runs(line), f"{block.where}: `{line}` is not the line .ci/run runs"
        return ""  # the whole suite, which is running now
    if argv[0] == "export":
        for assignment in argv[1:]:
            name, _, value = assignment.partition("=")
            env[name] = value
        return ""
    if argv[0] == "torchrun":
        argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    elif argv[0] == "python":
        argv = [sys.executable, *argv[1:]]
    else:
        argv = ["bash", "-c", shlex.join(argv)]
    proc = subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, f"{block.where}: `{shlex.join(argv)}` exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout


def _run_block(block: Block, env: dict) -> str:
    if block.lang == "python":
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(block.text, block.where, "exec"), {"__name__": "__main__"})  # noqa: S102 (the snippet under test)
        finally:
            if "torch._dynamo" in sys.modules:  # a snippet's torch.compile leaves nothing to the next test
                sys.modules["torch._dynamo"].reset()
        return out.getvalue()
    printed = []
    for line in block.text.replace("\\\n", " ").splitlines():
        for argv in _commands(line):
            printed.append(_run_command(argv, block, env, line.split(" #")[0].strip()))
    return "".join(printed)


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory):
    """One compile cache for the pages of this test session, shared by the xdist workers (the pages
    compile the same specs: tiny, llama3-8b), still new in every session."""
    base = tmp_path_factory.getbasetemp()
    folder = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "docs-snippets-cache"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.mark.parametrize("page", [p for p in PAGES if any(b.lang in RUN for b in blocks(p))], ids=lambda p: str(p.relative_to(ROOT)))
def test_page(page, tmp_path, monkeypatch, shared_cache):
    """The page's blocks, in order, as a reader runs them."""
    monkeypatch.setenv("TILEGEN_CACHE_DIR", str(shared_cache))
    page_blocks = [b for b in blocks(page) if b.lang in RUN or "file" in b.marks]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    for block in page_blocks:
        if "file" in block.marks:
            (tmp_path / block.marks["file"]).write_text(block.text)
            continue
        if block.missing():
            continue  # reported by test_marked_block
        printed = _run_block(block, env)
        if "error-below" in block.marks:
            numbers = re.findall(r"[-+]?\d+\.?\d*(?:[eE][-+]?\d+)?", printed)
            assert numbers, f"{block.where} printed no number:\n{printed}"
            assert abs(float(numbers[-1])) < float(block.marks["error-below"]), f"{block.where}: {printed}"


MAX_PROSE_LINES = 60  # between two headings, fenced code not counted: about a screen of text


@pytest.mark.parametrize("page", [*PAGES, ROOT / "DESIGN.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_runs_long_without_a_heading(page):
    run, longest, fence = 0, (0, 0), False
    for n, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            run = 0
        elif not fence:
            run += 1
            longest = max(longest, (run, n))
    assert longest[0] <= MAX_PROSE_LINES, f"{page.relative_to(ROOT)}: {longest[0]} lines without a heading, up to line {longest[1]}"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "tools" / "docs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("docs_hooks", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_spec_reference_page_is_the_field_reference():
    """The generated spec reference (docs/reference/spec.md) is tilegen.core.spec's field reference
    (which tests/test_spec_generators.py checks against the parser and the validator): one row per key."""
    from tilegen.core.spec import field_reference

    text = _hooks().spec_fields_markdown()
    for f in field_reference():
        assert f"| `{f.name}` |" in text, f.name


def test_cli_reference_has_every_command_and_option():
    import argparse

    from tilegen.cli import build_parser

    text = _hooks().cli_markdown()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        assert f"## tilegen {name}\n" in text
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for flag in action.option_strings:
                assert flag in text, f"tilegen {name} {flag}"
